"""The sliced select's stage functions alone, compiled for sm_90 on a CPU (no GPU), with and without
`Tiles.index_packed_counts`: sel1 (digit 1 under digit 0, its histogram in 16 copies, counted a key at a time), sel2
(digit 2, digit 1's 16 copies), sel3 (the last digit) and emit (`stages_select.select_digit`, `stages_emit.emit`), at the TP8
shard's 1-row build (NSL 128, 256-key steps) and 8-row build (NSL 16, 512-key steps, sel1's lists: index_compact 4),
256-key blocks, 132 programs, 8 warps. Prints each one's block barriers (PTX bar.sync, SASS BAR), layout conversions
(TTGIR), instructions (SASS), registers and spills. A task's chain of block-wide steps is what a select stage waits
on at small widths (results/indexer24_h100_trace_8k.log: each stage's own time 2.3-2.8 us over 256 keys a task).
--whole W ...: then the whole indexer kernel (survey.compile_one: TP8, bf16 KV, 132 programs, the default tiles but
the flag) at each width W: its registers, spill bytes and bar.sync; --gfx950: also for gfx950 (256 programs, its
tiles): VGPRs, SGPRs, their spills and LDS. --flag NAME=V,V...: the whole kernel at each of those values of that
Tiles field instead (default index_packed_counts=0,1); --whole-only: the stage functions not compiled.

python test/kernels/glm53/sass_select.py [--whole 1 8] [--gfx950] [--flag index_packed_counts=0,1] [--whole-only]
"""

from __future__ import annotations

import argparse
import os
import re
import sys

import triton
import triton.language as tl

from sgl_amd_mono.backends.triton import stages_emit
from sgl_amd_mono.backends.triton import stages_select as select
from sgl_amd_mono.backends.triton.survey import _ptxas_usage

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sass_mix  # noqa: E402

STAGES = {"sel1": 0, "sel2": 1, "sel3": 2, "emit": 3}
BUILDS = {"1 row": dict(R=1, NSL=128, ISCAN=256, LIST=0), "8 rows": dict(R=8, NSL=16, ISCAN=512, LIST=4)}


@triton.jit
def _select_probe(scores_ptr, lengths_ptr, page_table_ptr, hist_ptr, kept_ptr, cnt_ptr, topk_ptr, err_ptr,
                  task_count_ptr, cand_pos_ptr, cand_key_ptr, ncand_ptr, epoch, ok, R: tl.constexpr,
                  KTOP: tl.constexpr, PMAX: tl.constexpr, NSL: tl.constexpr, IBLK: tl.constexpr, ISCAN: tl.constexpr,
                  NPROG: tl.constexpr, LIST: tl.constexpr, STAGE: tl.constexpr, PACKED: tl.constexpr):
    """grid = (NPROG,): one select stage's tasks as the launch calls them (ok: the launch's flag, a runtime value);
    LIST > 0: sel1 lists each slice's keys in [256, LIST] chunks and the later stages scan the lists."""
    pid = tl.program_id(0)
    rows = tl.arange(0, 16)
    lens = tl.load(lengths_ptr + rows, mask=rows < R, other=0)
    if STAGE == 0:
        select.select_digit(scores_ptr, lens, hist_ptr, hist_ptr, kept_ptr, kept_ptr, cnt_ptr, topk_ptr, epoch, pid,
                            ok, task_count_ptr, 6, 8, 8, 8, R, KTOP, PMAX, NSL, IBLK, ISCAN, KTOP, NPROG, 0, False, 16,
                            16, True, cand_pos_ptr, cand_key_ptr, ncand_ptr, 1 if LIST > 0 else 0, LIST,
                            PACKED=PACKED)
    elif STAGE == 1:
        select.select_digit(scores_ptr, lens, hist_ptr, hist_ptr, kept_ptr, kept_ptr, cnt_ptr, topk_ptr, epoch, pid,
                            ok, task_count_ptr, 7, 16, 8, 8, R, KTOP, PMAX, NSL, IBLK, ISCAN, KTOP, NPROG, 0, False, 16,
                            1, True, cand_pos_ptr, cand_key_ptr, ncand_ptr, 2 if LIST > 0 else 0, PACKED=PACKED)
    elif STAGE == 2:
        select.select_digit(scores_ptr, lens, hist_ptr, hist_ptr, kept_ptr, kept_ptr, cnt_ptr, topk_ptr, epoch, pid,
                            ok, task_count_ptr, 8, 24, 8, 8, R, KTOP, PMAX, NSL, IBLK, ISCAN, KTOP, NPROG, 0, False, 1,
                            1, False, cand_pos_ptr, cand_key_ptr, ncand_ptr, 2 if LIST > 0 else 0, PACKED=PACKED)
    else:
        stages_emit.emit(scores_ptr, lens, page_table_ptr, hist_ptr, kept_ptr, cnt_ptr, topk_ptr, err_ptr, 0, epoch, pid,
                    ok, task_count_ptr, 9, R, KTOP, PMAX, NSL, IBLK, ISCAN, KTOP, NPROG, 0, False, cand_pos_ptr,
                    cand_key_ptr, ncand_ptr, LIST > 0, 0, PACKED)


SIG = {"scores_ptr": "*fp32", "lengths_ptr": "*i32", "page_table_ptr": "*i32", "hist_ptr": "*i32", "kept_ptr": "*i64",
       "cnt_ptr": "*i32", "topk_ptr": "*i32", "err_ptr": "*i64", "task_count_ptr": "*i32", "cand_pos_ptr": "*i32",
       "cand_key_ptr": "*i32", "ncand_ptr": "*i32", "epoch": "i32", "ok": "i32"}


def whole_kernel(widths: list[int], gfx950: bool, flag: str = "index_packed_counts=0,1"):
    """The whole indexer kernel's registers, spills and barriers at each width and each value of the flag (NAME=V,V)
    (and its gfx950 build's registers, spills and LDS)."""
    import torch

    from sgl_amd_mono.backends.triton import survey
    from sgl_amd_mono.backends.triton.tiles import Tiles
    from sgl_amd_mono.glm53 import launch_inputs as li

    name, values = flag.split("=")
    for width in widths:
        for value in values.split(","):
            spec = f"{name}={value}"
            tiles = Tiles().for_target("sm_90").with_spec(spec)
            out = survey.compile_one("sm_90", geo=li.glm53_geometry(), tp=8, width=width, kv_dtype=torch.bfloat16,
                                     n_programs=132, kind="indexer", tiles=tiles)
            bars = len(re.findall("bar.sync", out["kernel"].asm["ptx"]))
            print(f"whole indexer kernel, TP8, {width} rows, {spec}: registers {out['regs']}, "
                  f"spill bytes {out['spill_bytes']}, bar.sync {bars}, shared memory {out['smem']}", flush=True)
            if gfx950:
                tiles = Tiles().for_target("gfx950").with_spec(spec)
                out = survey.compile_one("gfx950", geo=li.glm53_geometry(), tp=8, width=width,
                                         kv_dtype=torch.bfloat16, n_programs=256 * tiles.progs_per_sm, kind="indexer",
                                         tiles=tiles)
                print(f"  gfx950: VGPRs {out['vgprs']}, SGPRs {out['sgprs']}, VGPR spills {out['vgpr_spill']}, SGPR "
                      f"spills {out['sgpr_spill']}, scratch {out['scratch']}, LDS {out['smem']}, resident "
                      f"{out['resident']} of {out['grid']}", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--whole", type=int, nargs="*", default=[], help="widths to compile the whole kernel at")
    p.add_argument("--gfx950", action="store_true", help="the whole kernel for gfx950 too")
    p.add_argument("--flag", default="index_packed_counts=0,1", help="NAME=V,V...: the Tiles field the whole kernel "
                   "is compiled at each value of")
    p.add_argument("--whole-only", action="store_true", help="only the whole kernel")
    a = p.parse_args()
    if a.whole_only:
        print(f"# sm_90 AOT on a CPU (compile only), Triton {triton.__version__}", flush=True)
        return whole_kernel(a.whole, a.gfx950, a.flag)
    print(f"# sm_90 AOT on a CPU (compile only), Triton {triton.__version__}; each stage's function alone, "
          "index_packed_counts off / on", flush=True)
    for build, shape in BUILDS.items():
        for name, stage in STAGES.items():
            line = []
            for packed in (False, True):
                consts = {"KTOP": 2048, "PMAX": 2048, "IBLK": 256, "NPROG": 132, **shape, "STAGE": stage,
                          "PACKED": packed}
                k = sass_mix.compile_sm90(_select_probe, SIG, consts, 8)
                text = sass_mix.disassemble(k)
                use = _ptxas_usage(k.asm["ptx"])
                line.append(f"bar.sync {len(re.findall(r'bar.sync', k.asm['ptx']))} (BAR "
                            f"{len(re.findall(r'[ ]BAR[.]', text))}), layout conversions "
                            f"{k.asm['ttgir'].count('convert_layout')}, instructions "
                            f"{len(re.findall(r'/[*][0-9a-f]{4,}[*]/', text))}, registers {use['regs']}, spill bytes "
                            f"{use['spill_bytes']}")
            print(f"{build} {name}: off: {line[0]}; on: {line[1]}", flush=True)
    whole_kernel(a.whole, a.gfx950, a.flag)


if __name__ == "__main__":
    main()
