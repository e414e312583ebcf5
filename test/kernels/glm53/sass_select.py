"""The sliced select's stage functions alone, compiled for sm_90 on a CPU (no GPU): sel1's digit (counted a key
at a time), the last digit's stage and emit (`stages_select.select_digit`, `emit`) at the TP8 shard's 8-row build
(8 rows, NSL 16, 256-key blocks, 512-key scan steps, 132 programs, 8 warps), with and without `Tiles.index_unvec`
(`stages_select.scan_lanes`). Prints each one's layout conversions (TTGIR), block barriers (PTX bar.sync),
registers and spills, and the barriers and shared-memory stores of its scan step loop (SASS: the innermost loop that
loads from global memory).

python test/kernels/glm53/sass_select.py
"""

from __future__ import annotations

import os
import re
import sys

import triton
import triton.language as tl

from sgl_amd_mono.backends.triton import stages_select as select
from sgl_amd_mono.backends.triton.survey import _ptxas_usage

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sass_mix  # noqa: E402

STAGES = {"sel1 (digit 1, atomics)": 0, "sel3 (the last digit)": 1, "emit": 2}


@triton.jit
def _select_probe(scores_ptr, lengths_ptr, page_table_ptr, hist_ptr, kept_ptr, cnt_ptr, topk_ptr, err_ptr,
                  task_count_ptr, epoch, ok, R: tl.constexpr, KTOP: tl.constexpr, PMAX: tl.constexpr, NSL: tl.constexpr,
                  IBLK: tl.constexpr, ISCAN: tl.constexpr, NPROG: tl.constexpr, STAGE: tl.constexpr,
                  UNVEC: tl.constexpr):
    """grid = (NPROG,): one select stage's tasks (ok: the launch's flag, a runtime value as in the launch)."""
    pid = tl.program_id(0)
    rows = tl.arange(0, 16)
    lens = tl.load(lengths_ptr + rows, mask=rows < R, other=0)
    if STAGE == 0:
        select.select_digit(scores_ptr, lens, hist_ptr, hist_ptr, kept_ptr, kept_ptr, cnt_ptr, topk_ptr, epoch, pid,
                            ok, task_count_ptr, 6, 8, 8, 8, R, KTOP, PMAX, NSL, IBLK, ISCAN, KTOP, NPROG, 0, False, 16,
                            16, True, UNVEC=UNVEC)
    elif STAGE == 1:
        select.select_digit(scores_ptr, lens, hist_ptr, hist_ptr, kept_ptr, kept_ptr, cnt_ptr, topk_ptr, epoch, pid,
                            ok, task_count_ptr, 8, 24, 8, 8, R, KTOP, PMAX, NSL, IBLK, ISCAN, KTOP, NPROG, 0, False, 1,
                            1, False, UNVEC=UNVEC)
    else:
        select.emit(scores_ptr, lens, page_table_ptr, hist_ptr, kept_ptr, cnt_ptr, topk_ptr, err_ptr, 0, epoch, pid,
                    ok, task_count_ptr, 9, R, KTOP, PMAX, NSL, IBLK, ISCAN, KTOP, NPROG, 0, False, UNVEC=UNVEC)


SIG = {"scores_ptr": "*fp32", "lengths_ptr": "*i32", "page_table_ptr": "*i32", "hist_ptr": "*i32", "kept_ptr": "*i64",
       "cnt_ptr": "*i32", "topk_ptr": "*i32", "err_ptr": "*i64", "task_count_ptr": "*i32", "epoch": "i32", "ok": "i32"}


def _step_loop(text: str) -> tuple[int, int]:
    """(barriers, shared-memory stores) of the innermost loop of the disassembly that loads from global memory."""
    ops = next((ops for ops in sass_mix.loop_bodies(text) if "LDG" in ops), [])
    return ops.count("BAR"), ops.count("STS")


def main():
    for name, stage in STAGES.items():
        for unvec in (False, True):
            consts = {"R": 8, "KTOP": 2048, "PMAX": 2048, "NSL": 16, "IBLK": 256, "ISCAN": 512, "NPROG": 132,
                      "STAGE": stage, "UNVEC": unvec}
            k = sass_mix.compile_sm90(_select_probe, SIG, consts, 8)
            text = sass_mix.disassemble(k)
            use = _ptxas_usage(k.asm["ptx"])
            bars, sts = _step_loop(text)
            print(f"{name}, index_unvec={int(unvec)}: layout conversions {k.asm['ttgir'].count('convert_layout')}, "
                  f"bar.sync {len(re.findall(r'bar.sync', k.asm['ptx']))} (PTX), registers {use['regs']}, spill bytes "
                  f"{use['spill_bytes']}; its scan step loop: {bars} BAR, {sts} STS (SASS; Triton "
                  f"{triton.__version__})", flush=True)


if __name__ == "__main__":
    main()
