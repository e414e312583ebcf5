"""`test/kernels/glm53/check_topk.py` under Triton's interpreter (tiny geometry, 300-key contexts): the indexer
launch's scores within TOPK_BOUNDS_INTERP of the f64 reference, its list the radix select of its own scores and
the oracle's set, with this step's own keys poisoned in the cache; every planted control caught. Each shape of
step with two of the four key caches (the four: random, repeated, zero, recent)."""

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(__file__)
SCRIPT = os.path.join(HERE, "..", "kernels", "glm53", "check_topk.py")
CONTROLS_A_CASE = 6  # swapped, best unselected, a score's bit flipped, half replaced, stale keys, moved score


@pytest.mark.parametrize("shape,keys", [("chain", ["random", "zero"]), ("requests", ["repeated", "recent"])])
def test_check_topk_interpreter(shape, keys):
    env = dict(os.environ, TRITON_INTERPRET="1")
    r = subprocess.run([sys.executable, SCRIPT, "--device", "cpu", "--contexts", "300", "--shapes", shape,
                        "--keys", *keys], env=env, capture_output=True, text=True, timeout=900,
                       cwd=os.path.dirname(SCRIPT))
    out = r.stdout
    assert r.returncode == 0, out[-3000:] + r.stderr[-3000:]
    assert "check_topk: 0 failures" in out
    cases = [ln for ln in out.splitlines() if "rows past top-k" in ln]
    assert len(cases) == len(keys), out[-2000:]
    assert all("topk.max_abs=0 " in ln for ln in cases), cases
    assert out.count("FAILS (good)") == CONTROLS_A_CASE * len(keys), out[-3000:]
    assert "PASSES (bad)" not in out


def test_check_topk_refuses_cpu_without_interpreter():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, SCRIPT, "--device", "cpu"], env=env, capture_output=True, text=True,
                       timeout=300, cwd=os.path.dirname(SCRIPT))
    assert r.returncode != 0 and "set TRITON_INTERPRET=1" in r.stderr
