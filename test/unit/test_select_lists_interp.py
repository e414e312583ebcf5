"""The sliced select's stages alone under Triton's interpreter (`test/kernels/glm53/probe_select_steps.py --device
cpu`, a subprocess): the chain sel1 -> sel2 -> sel3 -> emit, emit in [256, k] tiles (`stages_emit.emit_chunks`),
and the chain over the lists sel1 leaves in [256, k] chunks (`stages_select.list_chunks`, tiles.index_compact), each
list against the exactness rule and each slice's list against the keys at or above its prefix (slices of 1280 and
1160 keys: at k 2, whole 512-key chunks then 256-key ones; at k 8, 256-key ones only); then the planted
run (digit 0's histogram corrupted, a listed position moved), which every check must report."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PROBE = os.path.join(HERE, "..", "kernels", "glm53", "probe_select_steps.py")


def _run(*extra: str) -> str:
    env = dict(os.environ, TRITON_INTERPRET="1")
    r = subprocess.run([sys.executable, PROBE, "--device", "cpu", "--shapes", "2x5000", "--scans", "256",
                        "--rows-k", "2", "8", "--lists", "1", *extra], capture_output=True, text=True, env=env,
                       timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def test_chains_and_lists_equal_the_rule():
    out = _run()
    lines = [ln for ln in out.splitlines() if "the rule" in ln]
    assert len(lines) == 5, out  # emit in [256, 2] / [256, 8], the chain, the lists' chain at k 2 / 8
    assert all("EQUALS" in ln for ln in lines), out
    lists = [ln for ln in lines if "lists at sel1" in ln]
    assert len(lists) == 2 and all("as the prefix gives" in ln for ln in lists), out


def test_planted_errors_are_reported():
    out = _run("--plant")
    lines = [ln for ln in out.splitlines() if "the rule" in ln]
    assert len(lines) == 5 and all("DIFFERS FROM" in ln for ln in lines), out
    lists = [ln for ln in lines if "lists at sel1" in ln]
    assert len(lists) == 2 and all("WRONG in" in ln for ln in lists), out
