"""`sync.hand_off`'s needs under Triton's interpreter, which runs a grid's programs one after another: a program that
arrives without waiting (needs false) never blocks on a later program, and its arrival still counts, so the later
program's waits pass and the epoch advances; the same program made to wait (needs true: the planted control) spins
on a program that has not run, and its wait ends at the deadline with the error word naming it and the stage.

Two programs, two stages. Stage 0: program p writes v[p]. Stage 1 (the last: its arrival is the launch's end):
program 1 reads v[0] (program 0's, complete once stage 0's wait passed) and program 0 reads only its own v[0], so it
needs no wait (as the indexer's key programs read nothing latent writes: `kernel_halves.index_attention`)."""

import json
import os
import subprocess
import sys

CODE = """
import json, sys, torch, triton, triton.language as tl
from sgl_amd_mono.backends.triton.sync import hand_off, launch_end, launch_start
from sgl_amd_mono.common import guard

@triton.jit
def needs_kernel(v_ptr, out_ptr, sync_ptr, err_ptr, trace_ptr, bound, SKIP0: tl.constexpr, NPROG: tl.constexpr,
                 N_STAGES: tl.constexpr):
    pid, epoch, ok = launch_start(sync_ptr, trace_ptr, N_STAGES, False)
    needs = (pid != 0) | (not SKIP0)  # program 0 reads nothing another program writes
    tl.store(v_ptr + pid, pid + 10)
    ok = hand_off(sync_ptr, err_ptr, trace_ptr, 0, epoch, ok, pid, 7, bound, NPROG, N_STAGES, False, -1, False,
                  needs=needs)
    tl.store(out_ptr + pid, tl.load(v_ptr, cache_modifier=".cg") + 100 * pid)  # v[0]: program 0's
    launch_end(sync_ptr, trace_ptr, pid, epoch, ok, NPROG, N_STAGES, False)  # the last stage's arrival

skip0 = sys.argv[1] == "1"
v, out = torch.zeros(2, dtype=torch.int32), torch.zeros(2, dtype=torch.int32)
sync = torch.zeros(1 + 2, dtype=torch.int32)  # the epoch, a counter a stage
err, trace = guard.new_error_word("cpu"), torch.zeros(1, dtype=torch.int64)
needs_kernel[(2,)](v, out, sync, err, trace, 200, SKIP0=skip0, NPROG=2, N_STAGES=2)
w = dict(zip(guard.ERR_FIELDS, err.tolist()))
print(json.dumps({"out": out.tolist(), "sync": sync.tolist(), "flag": w["flag"], "stage": w["stage"],
                  "program": w["program"], "launch": w["launch"]}))
"""


def _run(skip0: bool) -> dict:
    env = dict(os.environ, TRITON_INTERPRET="1")
    r = subprocess.run([sys.executable, "-c", CODE, "1" if skip0 else "0"], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_a_program_that_needs_nothing_arrives_and_goes_on():
    from sgl_amd_mono.common import guard

    res = _run(True)
    assert res["flag"] == 0, res
    assert res["out"] == [10, 110], res  # program 1 read program 0's v[0] after stage 0's wait
    assert res["sync"] == [1, 2, 2], res  # both arrivals at both stages counted; the epoch advanced
    planted = _run(False)  # program 0 waits on program 1, which the interpreter has not run: the deadline
    assert planted["flag"] == guard.ERR_FLAG and planted["stage"] == 0 and planted["program"] == 0, planted
    assert planted["launch"] == 7, planted
