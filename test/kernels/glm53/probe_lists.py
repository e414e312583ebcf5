"""How many keys each sliced row's select lists, on the inputs time_layers.py times (CPU, the torch oracle's scores).

python test/kernels/glm53/probe_lists.py --width 8 --context 131072

For each row of the indexer step (a decode row a request, seed 77; the last of time_layers' 4 layers, weights seed
13): its length, the radix threshold's top 8 / 16 / 24 bits (the index_topk-th largest order key), and the keys at or
above each prefix and at it: sel1's lists (index_compact) hold the keys at or above the 8-bit prefix, sel2's with
index_relist those at or above the 16-bit one. The weights are drawn here on the CPU, whose generator streams differ
from CUDA's, so these are the same kind of inputs as a GPU run's, not its values. A benchmark aid, not a test.
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


if __name__ == "__main__":
    main()
