"""How many keys each sliced row's select lists, on the inputs time_layers.py times (CPU, the torch oracle's scores).

python test/kernels/glm53/probe_lists.py --width 8 --context 131072

For each row of the indexer step (a decode row a request, seed 77; the last of time_layers' 4 layers, weights seed
13): its length, the radix threshold's top 8 / 16 / 24 bits (the index_topk-th largest order key), and the keys at or
above each prefix and at it: sel1's lists (index_compact) hold the keys at or above the 8-bit prefix, sel2's with
index_relist those at or above the 16-bit one; then the keys at or above the row's floor (index_floor,
`lane_floor_counts`). The weights are drawn here on the CPU, whose generator streams differ from CUDA's, so these
are the same kind of inputs as a GPU run's, not its values. A benchmark aid, not a test.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import registry  # noqa: E402

from sgl_amd_mono.glm53 import indexer  # noqa: E402
from sgl_amd_mono.glm53 import launch_inputs as li  # noqa: E402


def lane_floor_counts(keys, thr, width, ktop, slices=128, block=256):
    """Keys at or above the row's floor L (<= the threshold), the smallest of its score tasks' floors as
    `stages_index.lane_floor` gives them: a task's lanes (the keys at one place of its block steps) keep their largest
    order key, a lane past the slice's end +0.0's; of 16 order keys evenly spaced from the lanes' smallest toward their
    largest, the largest that c = ceil(ktop / tasks) lanes reach, 0 if at or below +0.0's or for a slice under 16
    blocks. 'exact': each task's c-th largest lane maximum instead (the same lanes, no levels)."""
    nsl = max(1, slices // width)
    n = keys.numel()
    width_k = ((n + nsl - 1) // nsl + block - 1) // block * block
    c = -(-ktop // nsl)
    zero = 0x80000000  # +0.0's order key
    lo_q, lo_x = [], []
    for s in range(nsl):
        seg = keys[s * width_k:min(n, (s + 1) * width_k)].to(torch.int64)
        if seg.numel() < 16 * block:
            lo_q.append(0)
            lo_x.append(0)
            continue
        m = torch.cat([seg, seg.new_full(((-seg.numel()) % block,), zero)]).view(-1, block).amax(0)
        lo, hi = int(m.min()), int(m.max())
        levels = [lo + (hi - lo) * i // 16 for i in range(16)]
        best = max(v for v in levels if int((m >= v).sum()) >= c)
        lo_q.append(best if best > zero else 0)
        lo_x.append(int(torch.topk(m, c).values[-1]))
    cells = []
    for name, lo in (("levels", min(lo_q)), ("exact", min(lo_x))):
        assert int((keys.to(torch.int64) >= lo).sum()) >= ktop and lo <= int(thr)
        pre8 = (int(thr) >> 24) << 24
        cells.append(f"{name}: at or above L {int((keys.to(torch.int64) >= lo).sum())}, "
                     f"at or above max(L, 8-bit prefix) {int((keys.to(torch.int64) >= max(lo, pre8)).sum())}")
    return "; ".join(cells)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--width", type=int, default=8)
    p.add_argument("--context", type=int, default=131072)
    a = p.parse_args()
    geo = li.glm53_geometry()
    kc = registry.get("indexer")
    weights = kc.weights(geo, tp=8, seed=13, device="cpu")
    step = kc.step(geo, width=a.width, context=a.context, kv_dtype=torch.bfloat16, seed=77, device="cpu",
                   shape="decode")
    seen = {}
    select = indexer.select_topk

    def keep_scores(scores, *, lengths, topk):  # the oracle's scores on their way to its select
        seen["scores"], seen["lengths"] = scores.clone(), lengths.clone()
        return select(scores, lengths=lengths, topk=topk)

    indexer.select_topk = keep_scores
    kc.oracle(geo, weights, step)
    indexer.select_topk = select
    print(f"width {a.width} context {a.context}: a decode row a request, top-{geo.index_topk}")
    for r, n in enumerate(seen["lengths"].tolist()):
        keys = indexer.order_keys(seen["scores"][r, :n])
        thr = torch.topk(keys, geo.index_topk).values[-1]
        cells = []
        for bits in (8, 16, 24):
            pre, k = int(thr >> (32 - bits)), keys >> (32 - bits)
            cells.append(f"{bits}-bit prefix: at or above {int((k >= pre).sum())}, at {int((k == pre).sum())}")
        print(f"row {r}: {n} keys; " + "; ".join(cells), flush=True)
        print(f"  floor from lane maxima: {lane_floor_counts(keys, thr, a.width, geo.index_topk)}", flush=True)


if __name__ == "__main__":
    main()
