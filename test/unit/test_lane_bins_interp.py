"""A decode row's digit 0 counted with index_lane_bins (`stages_index.count_digit0_lanes`, `flush_digit0_lanes`)
alone under Triton's interpreter (`_lane_bins_main.py`, a subprocess): 1 / 2 / 4 bins a sign, 8- and 12-bit digits,
the histogram equal to torch's count over the same scores, with lanes on both of the flush's paths (summed over the
program's span, and by their own atomics), so that a path that dropped or misplaced counts fails the equality."""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def test_lane_counts_equal_torch():
    env = dict(os.environ, TRITON_INTERPRET="1")
    r = subprocess.run([sys.executable, os.path.join(HERE, "_lane_bins_main.py")], capture_output=True, text=True,
                       env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads([ln for ln in r.stdout.splitlines() if ln.startswith("{")][-1])
    assert len(res) == 6, res
    for case, v in res.items():
        assert v["equal"] is True, (case, v)
        assert v["lanes_far"] > 0 and v["lanes_in_span"] > 0, (case, v)
