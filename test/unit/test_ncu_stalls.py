"""`test/kernels/glm53/ncu_stalls.py` on a CPU: ncu's source page read back (offsets from the kernel's first
instruction, each stall reason), and a kernel's code split at the hand-offs' wait exits, each piece named by the
stage functions holding most of its instructions (a stage, then its hand-off)."""

import os
import sys

HERE = os.path.dirname(__file__)
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "test", "kernels", "glm53"))
import ncu_stalls as N  # noqa: E402

from sgl_amd_mono.backends.triton import stages_emit, stages_select  # noqa: E402

CSV = '''"Kernel Name","k",
"Address","Source","Warp Stall Sampling (All Samples)","stall_barrier","stall_no_inst","stall_no_inst (Not Issued)"
"0x7f0000000100","  LDC R1, c[0x0][0x28]","5","1","4","4"
"0x7f0000000110","  S2R R0, SR_TID.X","0","0","0","0"
"0x7f0000000120","  BAR.SYNC 0x0","7","7","0","0"
'''


def line_of(fn, text):
    """The source line of `fn` holding text."""
    import inspect

    src, first = inspect.getsourcelines(fn.fn)
    return first + next(i for i, s in enumerate(src) if text in s)


def test_samples_read_back(tmp_path):
    p = tmp_path / "src.csv"
    p.write_text(CSV)
    rows, reasons = N.samples(str(p))
    assert reasons == ["barrier", "no_inst"]  # the not-issued columns left out
    assert [r["at"] for r in rows] == [0, 16, 32]
    assert [r["all"] for r in rows] == [5, 0, 7]
    assert rows[0]["no_inst"] == 4 and rows[2]["barrier"] == 7


def test_stages_split_at_wait_exits():
    exit_line = N.wait_exit_line()
    sel = ("stages_select.py", line_of(stages_select.select_digit, "zero_other_parity("))
    emit = ("stages_emit.py", line_of(stages_emit.emit, "count_task("))
    code = ([sel] * 4 + [("sync.py", 50)] * 2 + [("sync.py", exit_line)] * 2 + [emit] * 3 + [("sync.py", 50),
            ("sync.py", exit_line)] + [sel])
    lines = {16 * i: w for i, w in enumerate(code)}
    got = N.stages(lines, N.functions(ROOT), exit_line)
    # each stage, then its hand-off through the wait's exit (a run of two), then the next stage
    assert [label for _, _, label in got] == ["select_digit", "hand-off", "emit", "hand-off", "select_digit"]
    assert [(lo, hi) for lo, hi, _ in got] == [(0, 64), (64, 128), (128, 176), (176, 208), (208, 224)]
