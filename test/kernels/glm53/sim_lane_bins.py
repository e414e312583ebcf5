"""Digit-0 atomics a key of the score loop, with and without `Tiles.index_lane_bins`, over time_layers' own inputs
(the indexer kind at the TP8 shard, weights seed 10, step seed 50, bf16 KV), on a CPU: the oracle's scores
(`glm53/indexer.index_scores`), each decode row's keys in time_layers' slices (the tiles' index_slices / rows, whole
256-key blocks), 256 lanes a step as the launch (lane i: keys at i mod 256 of its slice). For each LB it counts the
keys outside each lane's window (one atomic each), then the flush: an atomic a lane's non-zero bin, or the program's
sum over LANE_SPAN magnitude digits (2 LANE_SPAN atomics a task, plus the lanes outside the span: their own), as
`stages_index.flush_digit0_lanes`. The default counts one atomic a key. A model of the counts, not a timing.

python test/kernels/glm53/sim_lane_bins.py
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import registry  # noqa: E402

from sgl_amd_mono.backends.triton.stages_index import LANE_SPAN  # noqa: E402
from sgl_amd_mono.backends.triton.tiles import Tiles  # noqa: E402
from sgl_amd_mono.glm53 import index_inputs as ii  # noqa: E402
from sgl_amd_mono.glm53 import indexer as ix  # noqa: E402
from sgl_amd_mono.glm53 import launch_inputs as li  # noqa: E402

BLK = 256


def atomics(digits: torch.Tensor, n_slices: int, lb: int) -> tuple[float, float, float]:
    """(outside, with each lane's flush, with the program's) atomics a key over one row's digit-0 digits."""
    n = digits.numel()
    width = ((n + n_slices - 1) // n_slices + BLK - 1) // BLK * BLK
    outside = lane_flush = program_flush = 0
    for a in range(0, n, width):
        blk = digits[a:a + width]
        blk = torch.cat([blk, torch.full(((-blk.numel()) % BLK,), -1, dtype=blk.dtype)]).view(-1, BLK)
        valid = blk >= 0
        neg = valid & (blk < 128)
        mag = torch.where(neg, 255 - blk, blk)
        lo = mag[0] - (lb - 1) // 2  # every lane's first key is in the slice's first step (full but the last slice)
        off = mag - lo
        near = valid & (off >= 0) & (off < lb)
        outside += int((valid & ~near).sum())
        far = (lo - lo.min()) > int(LANE_SPAN) - lb
        for j in range(lb):
            for sign in (False, True):
                used = (near & (off == j) & (neg == sign)).any(0)
                lane_flush += int(used.sum())
                program_flush += int((used & far).sum())
        program_flush += 2 * int(LANE_SPAN)
    return outside / n, (outside + lane_flush) / n, (outside + program_flush) / n


def main():
    geo = li.glm53_geometry()
    kc = registry.get("indexer")
    captured = {}
    scores_of = ix.index_scores

    def keep(*a, **k):
        captured["scores"] = scores_of(*a, **k)
        return captured["scores"]

    ix.index_scores = keep
    weights = kc.weights(geo, tp=8, seed=10, device="cpu")
    print("# digit-0 atomics a key of the score loop (default 1.0), time_layers' inputs, CPU model", flush=True)
    for width, ctx in ((1, 8192), (8, 131072)):
        step = kc.step(geo, width=width, context=ctx, kv_dtype=torch.bfloat16, seed=50, device="cpu")
        ii.oracle(geo, *weights, step)
        n_slices = Tiles().index_slices // width
        for r in range(min(width, 2)):
            n = int(step.lengths[r])
            digits = ix.order_keys(captured["scores"][r, :n].float()) >> 24
            top = torch.bincount(digits, minlength=256).topk(4)
            print(f"rows {width} ctx {ctx} row {r}: {n} keys in {n_slices} slices, top digit-0 bins "
                  f"{top.indices.tolist()} with {[round(v / n, 3) for v in top.values.tolist()]} of the keys", flush=True)
            for lb in (1, 2, 4):
                o, lane, prog = atomics(digits, n_slices, lb)
                print(f"  {lb} bins a sign: outside the lanes' windows {o:.3f}, with each lane's flush {lane:.3f}, "
                      f"with the program's {prog:.3f}", flush=True)


if __name__ == "__main__":
    main()
