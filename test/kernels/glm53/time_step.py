"""ms per whole GLM-5.3 step on launches: every layer's launch and the tail in one CUDA graph, against the sum of the
same launches timed alone, the step's byte floor, and SGLang's per-op path for the same step, all in one run.

python test/kernels/glm53/time_step.py [--tp 8] [--widths 1 2 4 8] [--context 8192] [--distinct 4]
- the layers: `runner_triton.layer_kinds` of GLM-5.3 (78 layers: the IndexShare mix of indexer and shared MoE
  layers) and the tail, 79 launches, one rank's launches alone at the TP shard (`registry.rank_alone`: each keeps
  its partials; the cross-rank pushes' cost is `time_layers.py --tp-emulate`'s). At TP > 1 layer 0 runs as the
  dense kind here (a rank alone has no peer to hand it the rows outside its vocab shard, and the per-op path has no
  tokens kind; the tokens kind reads ~12 KB a row more);
- weights: `--distinct` random draws per kind at the TP shard, cycled over the kind's layers (each MoE draw is
  ~1.3 GB at the TP8 shard, far beyond L2, so a cycled draw is read from HBM as a distinct layer's would be);
  each layer its own caches (decode rows of one request each, about `--context` keys);
- step: the 79 launches in layer order in one graph (each on its own step inputs: timing, not a forward);
- alone: each kind's launches in a graph of their own, per launch; the step's sum of them; the gap is
  (step - sum) / launches, the target <= 1 us;
- floor: the layers' `time_layers.floor_bytes` at the streaming read bandwidth measured in this run;
- per-op: the same 79 layers from SGLang's own kernels (`per_op.py`), one graph, in this run.
A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import time

import torch

import registry
from time_layers import floor_bytes, step_caches
from timing import graph_time_us, read_bandwidth
from sgl_amd_mono.backends.triton import kinds
from sgl_amd_mono.backends.triton.tiles import Tiles
from sgl_amd_mono.glm53 import launch_inputs as li
from sgl_amd_mono.glm53.runner_triton import layer_kinds


def step_kinds(geo, tp: int) -> list[str]:
    ks = layer_kinds(geo)
    return (["dense"] + ks[1:] if tp > 1 and ks[0] == "tokens" else ks) + ["tail"]


def build(geo, tp, width, context, order, weights, shape, device="cuda", options=None):
    """Per kind: its plan at `width`, its layers bound (a draw each, cycled), a step, and each layer its caches.
    options: LaunchOptions fields over each kind's (a CPU smoke test's sequential placement)."""

    plans, layers, steps, caches = {}, [], {}, []
    seen = collections.Counter()
    for i, kind in enumerate(order):
        kc = registry.get(kind)
        if kind not in plans:
            plans[kind] = kinds.plan(kind, geo, tp=tp, width=width, kv_dtype=torch.bfloat16, device=device,
                                     options=registry.rank_alone(dataclasses.replace(kc.options(context),
                                                                                     **(options or {})), tp),
                                     tiles=Tiles())
            kw = shape if kind in ("indexer", "dense", "tokens") else {}
            steps[kind] = kc.step(geo, width=width, context=context, kv_dtype=torch.bfloat16, seed=50, device=device,
                                  **kw)
        w = weights[kind][seen[kind] % len(weights[kind])]
        seen[kind] += 1
        layers.append(plans[kind].bind(kc.tensors(w), launch_id=i))
        caches.append(step_caches(kc, [steps[kind]])[0])
    return plans, layers, steps, caches


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tp", type=int, default=8)
    p.add_argument("--widths", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--context", type=int, default=8192)
    p.add_argument("--distinct", type=int, default=4)
    p.add_argument("--no-perop", action="store_true")
    a = p.parse_args()
    geo = li.glm53_geometry()
    order = step_kinds(geo, a.tp)
    count = collections.Counter(order)
    print(f"step: {len(order)} launches {dict(count)} at TP{a.tp}, context {a.context}, {a.distinct} draws a kind",
          flush=True)
    bw = read_bandwidth()
    print(f"read-only streaming bandwidth: {bw / 1e12:.2f} TB/s (4 GiB, same run)", flush=True)
    t0 = time.time()
    weights = {k: [registry.get(k).weights(geo, tp=a.tp, seed=10 + j, device="cuda")
                   for j in range(1 if k == "tail" else a.distinct)] for k in count}
    print(f"weights drawn in {time.time() - t0:.0f} s; {torch.cuda.memory_allocated() / 2**30:.1f} GiB", flush=True)
    shape = {"shape": "decode"}
    table = []
    for w in a.widths:
        plans, layers, steps, caches = build(geo, a.tp, w, a.context, order, weights, shape)

        def step():
            for kind, layer, c in zip(order, layers, caches):
                plans[kind].run(layer, {**vars(steps[kind]), **c})

        step_us = graph_time_us(step, reps=10, inner=2)
        alone = {}
        for kind in count:
            idx = [i for i, k in enumerate(order) if k == kind]

            def only(idx=idx, kind=kind):
                for i in idx:
                    plans[kind].run(layers[i], {**vars(steps[kind]), **caches[i]})

            alone[kind] = graph_time_us(only, reps=10, inner=2) / len(idx)
        for pl in plans.values():
            pl.check_error()
        experts = {}
        for kind, pl in plans.items():  # the distinct experts a kind's first layer routes to (the floor's experts)
            out = pl.run(layers[order.index(kind)], {**vars(steps[kind]), **caches[order.index(kind)]})
            experts[kind] = len(set(out["expert_ids"].flatten().tolist())) if "expert_ids" in out else 0
        floor_b = sum(floor_bytes(registry.get(k), geo, a.tp, w, a.context, experts[k], **shape) for k in order)
        floor_us = floor_b / bw * 1e6
        sum_alone = sum(alone[k] for k in order)
        gap = (step_us - sum_alone) / len(order)
        perop_us = float("nan")
        if not a.no_perop:
            pops = []
            seen = collections.Counter()
            for kind in order:
                ws = weights[kind][seen[kind] % len(weights[kind])]
                seen[kind] += 1
                if registry.get(kind).per_op is None:
                    raise SystemExit(f"no per-op path for kind {kind} (at TP > 1 layer 0 runs as the dense kind)")
                pops.append(registry.get(kind).per_op(geo, a.tp, ws, w))

            def perop():
                for P, kind, c in zip(pops, order, caches):
                    P.step(steps[kind], c)

            perop_us = graph_time_us(perop, reps=5, inner=1)
        print(f"rows {w}: step {step_us / 1e3:.3f} ms; launches alone {sum_alone / 1e3:.3f} ms "
              f"({', '.join(f'{k} {v:.1f} us' for k, v in alone.items())}); gap {gap:+.2f} us a launch; "
              f"floor {floor_us / 1e3:.3f} ms ({floor_b / 1e9:.2f} GB), step/floor {step_us / floor_us:.2f}x; "
              f"per-op {perop_us / 1e3:.3f} ms, per-op/step {perop_us / step_us:.2f}x", flush=True)
        table.append((w, step_us, sum_alone, gap, floor_us, perop_us))
        del plans, layers, caches, steps
        torch.cuda.empty_cache()
    print("\n| rows | step ms | launches alone ms | gap us/launch | floor ms | step/floor | per-op ms | per-op/step |")
    print("|---|---|---|---|---|---|---|---|")
    for w, s, al, gp, fl, po in table:
        print(f"| {w} | {s / 1e3:.3f} | {al / 1e3:.3f} | {gp:+.2f} | {fl / 1e3:.3f} | {s / fl:.2f} | {po / 1e3:.3f} | "
              f"{po / s:.2f} |")


if __name__ == "__main__":
    main()
