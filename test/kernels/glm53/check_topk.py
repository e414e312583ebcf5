"""Check of the indexer launch's scores and its top-k over long contexts and hard caches (kind: `indexer`).

torchrun --nproc-per-node 1 test/kernels/glm53/check_topk.py [--tp 8] [--contexts 8192 131072 300000]
  [--keys random repeated zero recent] [--shapes chain requests decode]
TRITON_INTERPRET=1 python test/kernels/glm53/check_topk.py --device cpu   (the tiny geometry, 300-key contexts)

For each (context, key cache, step shape), one indexer launch, with this step's own index-K slots poisoned in
the cache before it (fp8 448 and a 2**20 scale: a launch that scored them from the cache before writing them
would see them):
  * its scores, on every row past the top-k, against an f64 reference over its own index queries and head
    weights and the index keys it wrote (`indexer.index_scores(dtype=f64)`), within `TOPK_BOUNDS_*`;
  * its list, entry by entry, against the radix select of its own scores (the exactness rule of
    `glm53/kinds/indexer.py`), and as a set against the oracle's (`layer.indexer_layer`; this step's index
    keys against the oracle's are check_layer.py's);
and the planted errors that must fail: two entries swapped; an entry replaced by the best unselected key; one
score's bit flipped, a bit that moves a key into or out of the rule's list (the list's rule); half a row's entries
replaced by keys the oracle did not select (the oracle's set); one score moved by twice its size, and the scores
a launch reading this step's keys from the poisoned cache would compute (the scores' bound).
Key caches (`index_inputs.random_index_step`): random; a few keys repeated everywhere (ties at the threshold);
all-zero keys; each request's last 256 keys x8. Step shapes: 'chain' is one request of 4 rows (an MTP
verify's draft chain); 'requests' is 3 requests of 2 rows (the last one short: every position in order) and a
pad request; 'decode' is 6 requests of a decode row each (the last short) and 2 pad rows: the pipelined score loop
(and with tiles.index_floor, sel1's lists at or above each row's floor). Exit status 1 on any failure.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

import registry
from sgl_amd_mono.backends.triton import kinds
from sgl_amd_mono.backends.triton.tiles import Tiles
from sgl_amd_mono.common import numerics as nm
from sgl_amd_mono.common.launch import LaunchOptions
from sgl_amd_mono.glm53 import index_inputs as ii
from sgl_amd_mono.glm53 import launch_inputs as li
from sgl_amd_mono.glm53.indexer import INDEX_PAGE, IndexQK, _page_views, index_scores
from sgl_amd_mono.glm53.kinds import indexer as indexer_kind

FAILS = []
POISON_KEY = 0x7E  # fp8 e4m3 448
POISON_SCALE = 2.0**20


def fail(msg):
    FAILS.append(msg)
    print("FAIL", msg, flush=True)


def shape_of(name: str, geo, context: int) -> dict:
    """The step shape's width, rows a request, requests' contexts and pad rows."""
    if name == "chain":
        return dict(width=4, rows_per_req=4, contexts=[context], pad_rows=0)
    if name == "requests":
        return dict(width=8, rows_per_req=2, contexts=[context, max(geo.index_topk + 1, 2 * context // 3),
                                                       geo.index_topk // 2], pad_rows=2)
    if name == "decode":  # a decode row a request, of six lengths (the last short), and two pad rows
        return dict(width=8, rows_per_req=1, contexts=[context, 2 * context // 3, context // 2, context // 3 + 1,
                                                       context // 4 + 7, geo.index_topk // 2], pad_rows=2)
    raise SystemExit(f"--shapes {name!r} is not chain, requests or decode")


def poison(index_k_cache: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """A copy of the cache with the keys at slots set to fp8 448 with scale 2**20."""
    buf = index_k_cache.clone()
    keys, scales = _page_views(buf, 128)
    s = slots.long()
    keys[s // INDEX_PAGE, s % INDEX_PAGE] = POISON_KEY
    scales[s // INDEX_PAGE, s % INDEX_PAGE] = POISON_SCALE
    return buf


def scores_max_rel(scores: torch.Tensor, ref: torch.Tensor, lengths: torch.Tensor, topk: int) -> float:
    """The worst row's max_rel over its keys, among the rows the launch scores (lengths > topk)."""
    worst = 0.0
    for r, n in enumerate(lengths.tolist()):
        if n > topk:
            worst = max(worst, nm.max_rel(scores[r, :n], ref[r, :n]))
    return worst


def reference_scores(plan, cache, step, dtype=torch.float64) -> torch.Tensor:
    """Scores over `cache` from the launch's own index queries and head weights, in dtype."""
    qk = IndexQK(q_fp8=plan.scratch["iq"], head_w=plan.scratch["head_w"], k_fp8=None, k_scale=None)
    return index_scores(qk, cache, page_table=step.page_table, lengths=step.lengths, dtype=dtype)


def check_case(kc, geo, plan, layer, weights, step, bounds, tag) -> None:
    ref, caches_ref = kc.oracle(geo, weights, step)
    if step.out_loc.is_cuda:  # a fault of the oracle's kernels surfaces here, not after the launch
        torch.cuda.synchronize()
    slots = step.out_loc[: step.live]
    caches = {"kv_cache": step.kv_cache.clone(), "index_k_cache": poison(step.index_k_cache, step.out_loc)}
    poisoned = caches["index_k_cache"].clone()
    out = {k: v.clone() for k, v in plan.run(layer, {**vars(step), **caches}).items()}
    if plan.scratch["scores"].is_cuda:
        torch.cuda.synchronize()
    plan.check_error()
    topk = geo.index_topk
    vals = kc.compare(geo, out, caches, ref, caches_ref, step, plan, weights)
    vals = {k: vals[k] for k in ("indexer.topk.max_abs", "indexer.topk.missed")}
    s64 = reference_scores(plan, caches["index_k_cache"], step)
    vals["indexer.scores.max_rel"] = scores_max_rel(plan.scratch["scores"], s64, step.lengths, topk)
    long_rows = int((step.lengths > topk).sum())
    print(f"[{tag}] rows past top-k {long_rows}/{step.live}, own slots {sorted(set(slots.tolist()))[:4]}...: "
          + " ".join(f"{k.split('.', 1)[1]}={v:.3g}" for k, v in vals.items()), flush=True)
    for k, v in vals.items():
        if not nm.passes(k, v, bounds[k]):
            fail(f"[{tag}] {k} = {v:.4g} outside bound {bounds[k]}")
    # planted errors: the list's (the registry's output controls), and scores read from the poisoned cache
    controls = [(name, must, kc.compare(geo, dict(o, **({"scores": s} if s is not None else {})), caches, ref,
                                        caches_ref, step, plan, weights))
                for name, must, o, s in kc.output_controls(geo, out, plan, step)]
    stale = scores_max_rel(reference_scores(plan, poisoned, step), s64, step.lengths, topk)
    controls.append(("this step's keys read from the cache before the write", ["indexer.scores.max_rel"],
                     {"indexer.scores.max_rel": stale}))
    bumped = plan.scratch["scores"].clone()
    r0 = int(torch.argmax(step.lengths[: step.live]))
    t0 = int(torch.argmax(s64[r0].nan_to_num(neginf=0.0).abs()))
    bumped[r0, t0] += 2.0 * max(abs(float(s64[r0, t0])), 1.0)
    controls.append(("the longest row's largest score + 2 max(|score|, 1)", ["indexer.scores.max_rel"],
                     {"indexer.scores.max_rel": scores_max_rel(bumped, s64, step.lengths, topk)}))
    worse = out["topk"].clone()  # half the longest row's entries replaced by slots the oracle did not select
    n0 = int(step.lengths[r0])
    t_all = torch.arange(n0, device=step.page_table.device)
    row_slots = step.page_table[r0].long()[t_all // INDEX_PAGE] * INDEX_PAGE + t_all % INDEX_PAGE
    chosen = set(ref["topk"][r0].tolist())
    others = [x for x in row_slots.tolist() if x not in chosen][: topk // 2]
    worse[r0, : len(others)] = torch.tensor(others, dtype=worse.dtype, device=worse.device)
    controls.append(("half the longest row's entries replaced by keys the oracle did not select",
                     ["indexer.topk.missed"], {"indexer.topk.missed": nm.missed(worse, ref["topk"])}))
    for name, must, v in controls:
        for b in must:
            caught = not nm.passes(b, v[b], bounds[b])
            print(f"[{tag}] control '{name}': {b} = {v[b]:.4g} vs {bounds[b]} -> "
                  f"{'FAILS (good)' if caught else 'PASSES (bad)'}", flush=True)
            if not caught:
                fail(f"[{tag}] control '{name}' did not fail {b}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--tp", type=int, default=8)
    p.add_argument("--contexts", type=int, nargs="+", default=None)
    p.add_argument("--keys", nargs="+", default=["random", "repeated", "zero", "recent"])
    p.add_argument("--shapes", nargs="+", default=["chain", "requests", "decode"])
    p.add_argument("--tiles", default=None, help="tile overrides, e.g. 'index_slices=16' (default: the device's)")
    p.add_argument("--skip", nargs="*", default=[],
                   help="stages (names) emptied in the launch: bisecting a fault only (the checks then fail)")
    args = p.parse_args()
    cpu = args.device == "cpu"
    if cpu and os.environ.get("TRITON_INTERPRET") != "1":
        raise SystemExit("--device cpu runs the launch under Triton's interpreter: set TRITON_INTERPRET=1")
    geo = li.tiny_geometry() if cpu else li.glm53_geometry()
    tp = 1 if cpu else args.tp
    contexts = args.contexts or ([300] if cpu else [8192, 131072, 300000])
    default = Tiles(index_slices=4, index_block=64, index_scan=128) if cpu else Tiles()
    tiles = default if args.tiles is None else Tiles().with_spec(args.tiles)
    bounds = indexer_kind.TOPK_BOUNDS_INTERP if cpu else indexer_kind.TOPK_BOUNDS_GPU
    kc = registry.get("indexer")
    stages = kinds.get("indexer").table.stage_names()
    if [n for n in args.skip if n not in stages]:
        raise SystemExit(f"--skip {args.skip}: not all stages of the launch ({', '.join(stages)})")
    skip_mask = sum(1 << stages.index(n) for n in args.skip)
    weights = kc.weights(geo, tp=tp, seed=7, device=args.device)
    for ctx in contexts:
        for shape in args.shapes:
            sh = shape_of(shape, geo, ctx)
            opts = registry.rank_alone(LaunchOptions(max_context=registry.max_context(ctx), skip_mask=skip_mask,
                                                     placement="sequential" if cpu else "persistent"), tp)
            plan = kinds.plan("indexer", geo, tp=tp, width=sh["width"], kv_dtype=torch.bfloat16, device=args.device,
                              tiles=tiles, options=opts)
            layer = plan.bind(kc.tensors(weights), launch_id=1)
            for seed, keys in enumerate(args.keys):
                step = ii.random_index_step(geo, width=sh["width"], contexts=sh["contexts"],
                                            rows_per_req=sh["rows_per_req"], pad_rows=sh["pad_rows"],
                                            max_context=registry.max_context(ctx), kv_dtype=torch.bfloat16,
                                            seed=100 + seed, device=args.device, keys=keys)
                check_case(kc, geo, plan, layer, weights, step, bounds, f"tp{tp} ctx{ctx} {shape} keys={keys}")
            del plan, layer
            if not cpu:
                torch.cuda.empty_cache()
    print(f"check_topk: {len(FAILS)} failures")
    sys.exit(1 if FAILS else 0)


if __name__ == "__main__":
    main()
