"""µs per launch of a kind at 1/2/4/8 rows and ~8K / ~128K context, against its byte floor and SGLang's per-op path.

torchrun --nproc-per-node 1 test/kernels/glm53/time_layers.py [--kind shared] [--tp 8] [--widths 1 2 4 8]
  [--contexts 8192 131072]    (--kind full, last: the whole step, `time_step.py`)
- bandwidth: a read-only streaming Triton kernel over 4 GiB (no writes), measured in this run;
- floor: geo.layer_bytes(tp, rows, context, experts = the distinct experts actually routed)['total'] / bandwidth;
- launch: CUDA graph of N_LAYERS independent layers bound to one plan a width (its buffers shared by every
  layer, as a server's), so L2 holds none of their weights;
- per-op: the same layers from SGLang's own Triton kernels (`per_op.py`), CUDA-graphed, in the same run;
- the kind's torch oracle once, eager.
--tp-emulate R: instead, the cross-rank pushes' cost with R emulated ranks and an NVLink projection (`time_tp.py`).
Prints a table; a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import traceback

import torch

import registry
from timing import graph_time_us, read_bandwidth
from sgl_amd_mono.backends.triton import kinds
from sgl_amd_mono.backends.triton.tiles import Tiles
from sgl_amd_mono.glm53.config import INDEX_K_BYTES
from sgl_amd_mono.glm53 import launch_inputs as li

N_LAYERS = 4


class Layers:
    """N_LAYERS layers of one kind bound to one plan of one width; `run()` launches each on its step (with its
    own copies of the step's caches, `caches`)."""

    def __init__(self, kc, geo, tp, width, weights, *, tiles, options=None, context=8192):
        options = registry.rank_alone(dataclasses.replace(kc.options(context), **(options or {})), tp)
        self.plan = kinds.plan(kc.name, geo, tp=tp, width=width, kv_dtype=torch.bfloat16, device="cuda",
                               options=options, tiles=tiles)
        self.layers = [self.plan.bind(kc.tensors(w), launch_id=i) for i, w in enumerate(weights)]

    def run(self, steps, caches):
        for layer, st, c in zip(self.layers, steps, caches):
            self.plan.run(layer, {**vars(st), **c})

    def experts(self, steps, caches) -> float:
        """Distinct experts a layer routes to on its step, averaged over the layers (eager; 0 for a kind with no
        MoE)."""
        n = 0
        for layer, st, c in zip(self.layers, steps, caches):
            out = self.plan.run(layer, {**vars(st), **c})
            n += len(set(out["expert_ids"].flatten().tolist())) if "expert_ids" in out else 0
        self.plan.check_error()
        return n / len(self.layers)


def step_caches(kc, steps) -> list:
    """A copy of each step's caches (the launches write them in place)."""
    return [{n: c.clone() for n, c in kc.caches(st).items()} for st in steps]


def time_layers_us(L: Layers, steps, caches) -> float:
    us = graph_time_us(lambda: L.run(steps, caches)) / N_LAYERS
    L.plan.check_error()
    return us


INDEX_KINDS = ("indexer", "dense", "tokens")  # the kinds that run their own indexer: indexer steps


def floor_bytes(kc, geo, tp, width, context, experts, shape="mixed") -> float:
    """The bytes a launch must read: its weights once, the KV rows its rows select, and for an indexer kind its
    index weights and every request's index keys once (`registry.indexer_requests`); for the tail, its LM-head
    rows and norm weight, the rows in, and the normed rows and logits out."""
    if kc.name == "tail":
        v, d = geo.shard(tp).vocab, geo.hidden
        return v * d * 2 + d * 2 + 3 * width * d * 2 + width * v * 4
    if kc.name not in INDEX_KINDS:
        return geo.layer_bytes(tp=tp, rows=width, context=context, experts=experts)["total"]
    rpr, ctx, _ = registry.indexer_requests(geo, width=width, context=context, shape=shape)
    keys = sum(c + rpr - 1 for c in ctx)  # a request's last row reads every key of the request
    b = geo.layer_bytes(tp=tp, rows=width, context=context, experts=experts, is_indexer=True)
    total = b["total"] + (keys - context) * INDEX_K_BYTES  # layer_bytes counts one request of `context` keys
    if kc.name != "indexer":  # the dense MLP in place of the router and experts; the tokens kind's embedding rows
        i, d = geo.shard(tp).dense_inter, geo.hidden
        total += -b["gate"] - b["experts"] + 3 * i * d + 4 * (3 * i * d // 128**2)
        total += width * d * 2 if kc.name == "tokens" else 0
    return total


def trace_tables(kc, geo, weights, tiles, tp, widths, replays=15, skip_mask=0, context=8192, shape=None, own=()):
    """Per-stage start/work/sync/span (median over replays of the last layer's stamps), and the launch's
    µs with and without the stamps (the trace's own cost). skip_mask: stages emptied (timing only: the
    stages after read stale inputs), to see what a stage's time depends on. own: stages whose every program's
    own µs (median over the replays) is printed too, by program id."""
    from sgl_amd_mono.common import trace

    for w in widths:
        st = kc.step(geo, width=w, context=context, kv_dtype=torch.bfloat16, seed=77, device="cuda", **(shape or {}))
        steps = [st] * N_LAYERS
        caches = step_caches(kc, [st]) * N_LAYERS
        us = {}
        for on in (False, True):
            L = Layers(kc, geo, tp, w, weights, tiles=tiles, options=dict(trace=on, skip_mask=skip_mask),
                       context=context)
            us[on] = time_layers_us(L, steps, caches)
        tabs, owns = [], {name: [] for name in own}
        for _ in range(replays):
            L.run(steps, caches)
            torch.cuda.synchronize()
            tabs.append(L.plan.trace_table())
            for name in own:
                owns[name].append(L.plan.trace_own(name))
        def median(vals):  # None: a stage the build never stamps (trace.stage_table)
            return None if None in vals else sorted(vals)[len(vals) // 2]

        med = [{k: (median([t[i][k] for t in tabs]) if k != "stage" else tabs[0][i][k]) for k in tabs[0][i]}
               for i in range(len(tabs[0]))]
        skipped = f", stages {skip_mask:#x} emptied" if skip_mask else ""
        print(f"\ntrace rows {w} ctx {context}{skipped}: launch {us[False]:.1f} us (trace build {us[True]:.1f} us); "
              f"median of {replays} eager steps of the last of {N_LAYERS} layers", flush=True)
        print(trace.format_table(med), flush=True)
        for name, per in owns.items():
            if per[0] is None:
                print(f"{name}: not stamped", flush=True)
                continue
            o = torch.stack(per).median(dim=0).values
            by_program = " ".join(f"{i}:{v:.1f}" for i, v in enumerate(o.tolist()))
            print(f"{name} own us by program (median of {replays}): {by_program}", flush=True)


def main():
    if sys.argv[-2:] == ["--kind", "full"] or "--kind=full" in sys.argv:  # the whole step: 79 launches, one graph
        import time_step

        sys.argv = [a for a in sys.argv if a not in ("--kind", "full", "--kind=full")]
        return time_step.main()
    p = argparse.ArgumentParser()
    p.add_argument("--kind", default="shared", help="a launch kind, or 'full': the whole step (time_step.py)")
    p.add_argument("--tp", type=int, default=8)
    p.add_argument("--widths", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--contexts", type=int, nargs="+", default=[8192, 131072])
    p.add_argument("--no-perop", action="store_true")
    p.add_argument("--shape", default="mixed", choices=registry.STEP_SHAPES,
                   help="the timed steps' requests (decode: a row a request, the targets' shape; mixed: as the checks)")
    p.add_argument("--stages-only", action="store_true",
                   help="only time the launch with each single stage emptied (rows 1, ctx 8K): per-stage cost")
    p.add_argument("--trace", type=int, nargs="*", default=None,
                   help="only the per-stage table of a trace build (global-timer stamps) at these rows (default 1 8), at the first of --contexts")
    p.add_argument("--trace-own", nargs="*", default=[],
                   help="with --trace: stages (names) whose every program's own µs is printed, by program id")
    p.add_argument("--skip", nargs="*", default=[],
                   help="with --trace: stages (names) to empty in the traced build (timing only, results invalid)")
    p.add_argument("--tiles", default="", help="tile overrides, e.g. 'bn_a=32,ks_a=8' (default: Tiles())")
    p.add_argument("--sweep", nargs="*", default=None,
                   help="only time these tile overrides (one spec each; '' = the defaults) at rows 1 and 8, ctx 8K")
    p.add_argument("--no-variants", action="store_true", help="skip the stage-group variants")
    p.add_argument("--specs", nargs="+", default=[],
                   help="tile overrides timed as variants beside --tiles in the same run (an A/B), e.g. 'index_block=256'")
    p.add_argument("--variants", nargs="+", default=None,
                   help="build variants (backends.triton.tiles.VARIANTS names) timed in the same run, one table each")
    p.add_argument("--tp-emulate", type=int, default=0,
                   help="only the cross-rank pushes' cost: TP R as R emulated ranks, with and without the pushes, and "
                        "the NVLink projection (time_tp.py), at the first of --contexts")
    p.add_argument("--nvlink-latency-us", type=float, default=2.0, help="with --tp-emulate: an exchange's P2P latency")
    args = p.parse_args()
    if args.tp_emulate:
        import time_tp

        return time_tp.main(args.kind, args.tp_emulate, args.widths, args.contexts[0], Tiles().with_spec(args.tiles),
                            args.nvlink_latency_us)
    kc = registry.get(args.kind)
    shape = registry.step_shape(args.kind, args.shape)
    table = kinds.get(args.kind).table
    stages = table.stage_names()
    for opt, names in (("--skip", args.skip), ("--trace-own", args.trace_own)):
        bad = [n for n in names if n not in stages]
        if bad:
            raise SystemExit(f"{opt} {bad}: not stages of the launch ({', '.join(stages)})")
    tiles = Tiles().with_spec(args.tiles)
    print("tiles:", tiles, flush=True)
    variants = [(v, tiles.variant(v)) for v in args.variants] if args.variants else [("tiles", tiles)]
    variants += [(spec, tiles.with_spec(spec)) for spec in args.specs]
    geo = li.glm53_geometry()
    bw = read_bandwidth()
    print(f"read-only streaming bandwidth: {bw / 1e12:.2f} TB/s (4 GiB, same run)", flush=True)
    weights = [kc.weights(geo, tp=args.tp, seed=10 + i, device="cuda") for i in range(N_LAYERS)]
    if args.sweep is not None:
        for w in (1, 8):
            st = kc.step(geo, width=w, context=8192, kv_dtype=torch.bfloat16, seed=77, device="cuda")
            for spec in args.sweep:
                L = Layers(kc, geo, args.tp, w, weights, tiles=tiles.with_spec(spec))
                us = time_layers_us(L, [st] * N_LAYERS, step_caches(kc, [st]) * N_LAYERS)
                print(f"sweep rows {w} ctx 8192 tiles '{spec}': {us:.1f} us  regs={L.plan.resources}", flush=True)
        return
    if args.trace is not None:
        trace_tables(kc, geo, weights, tiles, args.tp, args.trace or [1, 8],
                     skip_mask=sum(1 << stages.index(n) for n in args.skip), context=args.contexts[0], shape=shape,
                     own=args.trace_own)
        return
    if args.stages_only:
        st = kc.step(geo, width=1, context=8192, kv_dtype=torch.bfloat16, seed=77, device="cuda")
        base = None
        for i, name in [(-1, "full")] + list(enumerate(stages)):
            L = Layers(kc, geo, args.tp, 1, weights, tiles=tiles, options=dict(skip_mask=0 if i < 0 else 1 << i))
            us = time_layers_us(L, [st] * N_LAYERS, step_caches(kc, [st]) * N_LAYERS)
            base = us if base is None else base
            print(f"rows 1 ctx 8192 without stage {name}: {us:.1f} us (stage costs ~{base - us:.1f} us)", flush=True)
        return
    rows = []
    oracle_done = False
    for ctx in args.contexts:
        for w in args.widths:
            # steps of a request a row are big (every request's whole cache): one step, a copy of its caches a layer
            n_steps = 1 if kc.name in INDEX_KINDS or args.shape == "decode" else N_LAYERS
            steps = [kc.step(geo, width=w, context=ctx, kv_dtype=torch.bfloat16, seed=50 + i, device="cuda", **shape)
                     for i in range(n_steps)] * (N_LAYERS // n_steps)
            caches = step_caches(kc, steps)
            var_us, L = {}, None
            for vname, vt in variants:
                try:
                    L = Layers(kc, geo, args.tp, w, weights, tiles=vt, context=ctx)
                    var_us[vname] = time_layers_us(L, steps, caches)
                    print(f"ctx {ctx} rows {w} variant {vname}: launch {var_us[vname]:.1f} us "
                          f"compiled in {L.plan.compile_s:.1f} s {L.plan.resources}", flush=True)
                except Exception:
                    traceback.print_exc()
                    var_us[vname] = float("nan")
                    print(f"ctx {ctx} rows {w} variant {vname}: FAILED (see traceback)", flush=True)
            experts = L.experts(steps, caches)
            floor_b = floor_bytes(kc, geo, args.tp, w, ctx, experts, **shape)
            floor_us = floor_b / bw * 1e6
            perop_us = float("nan")
            if not args.no_perop and kc.per_op is None:
                print(f"per-op path: none for kind {args.kind} yet", flush=True)
            elif not args.no_perop:
                try:
                    pops = [kc.per_op(geo, args.tp, wt, w) for wt in weights]

                    def run_perop():
                        for P, st, c in zip(pops, steps, caches):
                            P.step(st, c)

                    perop_us = graph_time_us(run_perop) / N_LAYERS
                    if not oracle_done:  # the per-op path agrees with the launch (sanity of the baseline)
                        st = steps[0]
                        po = pops[0].step(st, step_caches(kc, [st])[0])
                        print(f"per-op path: {getattr(pops[0], 'which', 'SGLang Triton kernels')}", flush=True)
                        lo = L.plan.run(L.layers[0], {**vars(st), **step_caches(kc, [st])[0]})
                        key = "out" if "out" in lo else "logits"  # the kind's main output
                        rel = ((po[0].float() - lo[key].float()).norm() / lo[key].float().norm()).item()
                        print(f"per-op path vs launch: {key} rel {rel:.3g}", flush=True)
                except Exception:
                    traceback.print_exc()
                    print("per-op path unavailable (see traceback); reporting the launch alone", flush=True)
            if not oracle_done:
                st = steps[0]
                kc.oracle(geo, weights[0], st)
                torch.cuda.synchronize()
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                kc.oracle(geo, weights[0], st)
                b.record()
                torch.cuda.synchronize()
                print(f"torch oracle ({args.kind}, tp{args.tp}, {w} rows, ctx {ctx}, eager): "
                      f"{a.elapsed_time(b) * 1e3:.0f} us", flush=True)
                oracle_done = True
            for vname, us in var_us.items():
                rows.append((vname, ctx, w, us, floor_us, floor_b / 1e6, experts, perop_us))
                print(f"ctx {ctx} rows {w} [{vname}]: launch {us:.1f} us, floor {floor_us:.1f} us "
                      f"({floor_b / 1e6:.1f} MB, {experts:.1f} experts), {floor_us / us:.0%} of floor; "
                      f"per-op {perop_us:.1f} us, ratio {perop_us / us:.2f}x", flush=True)
            del L, caches, steps
            torch.cuda.empty_cache()
    # where the time goes: the same launch with stage groups running no tasks (hand-offs kept)
    n = len(stages)
    first_moe = stages.index("norm2") if "norm2" in stages else n
    groups = {f"no attention stages (1-{first_moe - 1})": sum(1 << i for i in range(1, first_moe)),
              f"no MoE stages ({first_moe + 1}-{n - 1})": sum(1 << i for i in range(first_moe + 1, n)),
              "hand-offs only (all stages empty)": (1 << n) - 1}
    for w in () if args.no_variants else (1, 8):
        st = kc.step(geo, width=w, context=8192, kv_dtype=torch.bfloat16, seed=77, device="cuda")
        for name, mask in [("full", 0)] + list(groups.items()):
            L = Layers(kc, geo, args.tp, w, weights, tiles=tiles, options=dict(skip_mask=mask))
            us = time_layers_us(L, [st] * N_LAYERS, step_caches(kc, [st]) * N_LAYERS)
            print(f"variant rows {w} ctx 8192 {name}: {us:.1f} us", flush=True)
    for vname, vt in variants:
        print(f"\nvariant {vname}: progs_per_sm={vt.progs_per_sm} num_warps={vt.num_warps}")
        print("| context | rows | launch us | floor us | MB | experts | fraction | per-op us | per-op/launch |")
        print("|---|---|---|---|---|---|---|---|---|")
        for vn, ctx, w, us, fl, mb, ex, po in rows:
            if vn == vname:
                print(f"| {ctx} | {w} | {us:.1f} | {fl:.1f} | {mb:.1f} | {ex:.1f} | {fl / us:.0%} | {po:.1f} | "
                      f"{po / us:.2f} |")


if __name__ == "__main__":
    main()
