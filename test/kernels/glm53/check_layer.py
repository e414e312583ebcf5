"""GPU check of a launch kind against its oracle at GLM-5.3's TP-shard shapes (kinds: `registry.py`): one rank's launch
alone, keeping its partials (`registry.rank_alone`), against the oracle on that rank's shard.

torchrun --nproc-per-node 1 test/kernels/glm53/check_layer.py [--kind shared] [--tp 8 1] [--widths 1 2 4 8]
  [--contexts 8192 131072] [--kv bf16 fp8] [--stop-after STAGE|all] [--controls all|none] [--dump DIR]
For each (tp, kv dtype, context, width), on one plan a width (its buffers shared by every layer bound to it):
the launch vs the oracle within the kind's bounds (`<kind>.BOUNDS_GPU`); every planted control, bound to the
same plan, must fail its bounds; two runs bitwise equal; 20 CUDA-graph replays bitwise equal to the eager
step; exactly the step's cache rows written (pad row -> slot 0); no step compiled anything (every compile
happened at bind). --stop-after STAGE also checks every stage up to STAGE alone: the oracle of that stage
(`glm53/kinds/oracle.py`) run on the launch's own buffers, within `STAGE_BOUNDS_GPU`, each stage's control
failing them. Then a planted missing arrival must end the step with the error word, not a hang.
--tp-emulate R: the kind at TP R as R emulated ranks on this GPU instead (`check_tp.py`: ranks bitwise equal, the
oracle at TP R, replays, write sets, a rank held back past the deadline).
Exit status 1 on any failure.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

import torch

import registry
from sgl_amd_mono.backends.triton import kinds
from sgl_amd_mono.backends.triton.tiles import Tiles
from sgl_amd_mono.common import numerics as nm
from sgl_amd_mono.glm53 import launch_inputs as li

FAILS = []
TILES = Tiles()
PLANS = {}  # (kind, tp, width, kv) -> plan: one a width, shared by every layer (and control) bound to it


def fail(msg):
    FAILS.append(msg)
    print("FAIL", msg, flush=True)


def plan_for(kind, geo, tp, width, kv_dtype, options):
    key = (kind, tp, width, kv_dtype, options)
    if key not in PLANS:
        PLANS[key] = kinds.plan(kind, geo, tp=tp, width=width, kv_dtype=kv_dtype, device="cuda", tiles=TILES,
                                options=registry.rank_alone(options, tp))
    return PLANS[key]


def step_dict(step, caches):
    return {**vars(step), **caches}


def fresh_caches(kc, step):
    return {n: c.clone() for n, c in kc.caches(step).items()}


def run_step(kc, plan, layer, step):
    caches = fresh_caches(kc, step)
    out = plan.run(layer, step_dict(step, caches))
    torch.cuda.synchronize()
    plan.check_error()
    return {k: v.clone() for k, v in out.items()}, caches


def check_stages(kc, plan, layer_w, step, caches, stop_after, tag):
    """Every stage up to stop_after alone: its oracle on the launch's own buffers (the launch left them all:
    every buffer is written by one stage), within the GPU stage bounds; its control must fail them."""
    so = kc.stage_oracle()
    if so is None:
        print(f"[{tag}] stage by stage: no oracle per stage for kind {kc.name} yet", flush=True)
        return
    bounds = getattr(so, "STAGE_BOUNDS_GPU", None)
    bufs = {**kc.tensors(layer_w), **step_dict(step, caches), **plan.scratch, **plan.out}
    names = plan.table.stage_names()
    for name in names[: names.index(stop_after) + 1] if stop_after != "all" else names:
        got = {w: bufs[w] for w in plan.table.stages[plan.table.stage_id(name)].writes}
        vals = so.compare(plan.table, plan.dims, name, got, so.run_isolated(plan.table, plan.dims, name, bufs), bufs)
        ctrl = so.compare(plan.table, plan.dims, name, got,
                          so.run_isolated(plan.table, plan.dims, name, so.perturbed(name, bufs)), bufs)
        line = " ".join(f"{k.split('.', 1)[1]}={v:.3g}/{ctrl[k]:.3g}" for k, v in vals.items())
        print(f"[{tag}] stage {name} (value/control): {line}", flush=True)
        if bounds is None:
            continue
        for k, v in vals.items():
            if k not in bounds:  # reported only (max_rel: see STAGE_BOUNDS_GPU)
                continue
            if not nm.passes(k, v, bounds[k]):
                fail(f"[{tag}] stage {name}: {k} = {v:.4g} outside bound {bounds[k]}")
            if nm.passes(k, ctrl[k], bounds[k]):
                fail(f"[{tag}] stage {name}: the control ({ctrl[k]:.4g}) passes {k}'s bound {bounds[k]}")


def check_config(kc, geo, tp, width, context, kv_dtype, seed, args):
    tag = f"{kc.name} tp{tp} w{width} ctx{context} kv={'fp8' if kv_dtype != torch.bfloat16 else 'bf16'}"
    weights, step = kc.inputs(geo, tp=tp, width=width, context=context, kv_dtype=kv_dtype, seed=seed, device="cuda",
                              **registry.step_shape(kc.name, args.shape))
    ref, caches_ref = kc.oracle(geo, weights, step)
    plan = plan_for(kc.name, geo, tp, width, kv_dtype, kc.options(context))
    layer = plan.bind(kc.tensors(weights), launch_id=seed)
    compiled = plan.compiled_variants()  # every compile happens at bind: no step may add one
    out1, caches1 = run_step(kc, plan, layer, step)
    vals = kc.compare(geo, out1, caches1, ref, caches_ref, step, plan, weights)
    print(f"[{tag}] " + " ".join(f"{k.split('.', 1)[1]}={v:.3g}" for k, v in vals.items())
          + f" compiled in {plan.compile_s:.1f} s {plan.resources}", flush=True)
    for k, v in vals.items():
        if not nm.passes(k, v, kc.bounds[k]):
            fail(f"[{tag}] {k} = {v:.4g} outside bound {kc.bounds[k]}")
    out2, caches2 = run_step(kc, plan, layer, step)
    same = all(torch.equal(out1[k], out2[k]) for k in out1) and all(torch.equal(caches1[n], caches2[n]) for n in caches1)
    print(f"[{tag}] bitwise rerun equal: {same}")
    if not same:
        fail(f"[{tag}] two runs differ")
    allowed = set(step.out_loc.tolist()) if hasattr(step, "out_loc") else set()  # kinds with no cache: no slots
    for name, before in kc.caches(step).items():  # exactly the step's slots written (pad rows: slot 0)
        changed = registry.changed_slots(name, before, caches1[name])
        extra = sorted(changed - allowed)
        unwritten = [s for s in step.out_loc[: step.live].tolist() if s not in changed]
        print(f"[{tag}] {name}: rows changed {len(changed)}, outside out_loc: {extra[:5]}, live rows unwritten: "
              f"{unwritten}")
        if extra or unwritten:
            fail(f"[{tag}] {name} write set wrong: outside {extra[:5]} unwritten {unwritten}")
    caches_g = fresh_caches(kc, step)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        plan.run(layer, step_dict(step, caches_g))
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        gout = plan.run(layer, step_dict(step, caches_g))
    ok = True
    for _ in range(20):
        g.replay()
        torch.cuda.synchronize()
        ok &= all(torch.equal(gout[k], out1[k]) for k in out1) and all(torch.equal(caches_g[n], caches1[n]) for n in caches1)
    plan.check_error()
    print(f"[{tag}] 20 graph replays bitwise equal to eager: {ok} (epoch of the width's sync words: {plan.sync.epoch})")
    if not ok:
        fail(f"[{tag}] graph replays differ")
    if args.dump:
        os.makedirs(args.dump, exist_ok=True)
        with open(os.path.join(args.dump, "digests.txt"), "a") as f:
            for k, v in out1.items():
                f.write(f"{tag} {k} {nm.digest(v)}\n")
            if "kv_cache" in caches1:
                f.write(f"{tag} kv_rows {nm.digest(caches1['kv_cache'][step.out_loc[: step.live]])}\n")
    if args.stop_after:
        check_stages(kc, plan, weights, step, caches1, args.stop_after, tag)
    if args.controls == "all":
        for name, must_fail, bad_w in kc.controls(geo, weights):
            o2, k2 = run_step(kc, plan, plan.bind(kc.tensors(bad_w), launch_id=seed), step)
            v2 = kc.compare(geo, o2, k2, ref, caches_ref, step, plan, weights)
            report_control(tag, name, must_fail, v2, kc.bounds)
        if kc.output_controls is not None:  # planted errors in the launch's own outputs (its buffers back first)
            run_step(kc, plan, layer, step)
            for name, must_fail, outs_c, scores in kc.output_controls(geo, plan.out, plan, step):
                outs_c = dict(outs_c, **({"scores": scores} if scores is not None else {}))
                report_control(tag, name, must_fail, kc.compare(geo, outs_c, caches1, ref, caches_ref, step, plan,
                                                                weights), kc.bounds)
    if plan.compiled_variants() != compiled:
        fail(f"[{tag}] a step compiled: {compiled} compiled variants after bind, {plan.compiled_variants()} now")
    print(f"[{tag}] compiled variants after bind {compiled}, after every step and control {plan.compiled_variants()}")


def report_control(tag, name, must_fail, vals, bounds):
    for b in must_fail:
        failed = not nm.passes(b, vals[b], bounds[b])
        print(f"[{tag}] control '{name}': {b} = {vals[b]:.4g} vs bound {bounds[b]} -> "
              f"{'FAILS (good)' if failed else 'PASSES (bad)'}")
        if not failed:
            fail(f"[{tag}] control '{name}' did not fail {b}")


def check_deadline(kc, geo, tp):
    weights, step = kc.inputs(geo, tp=tp, width=1, context=8192, kv_dtype=torch.bfloat16, seed=5, device="cuda")
    table = kinds.get(kc.name).table  # a missed arrival at attn (the layer kinds), else at the first stage
    stage = table.stage_id("attn") if "attn" in table.stage_names() else 0
    plan = kinds.plan(kc.name, geo, tp=tp, width=1, kv_dtype=torch.bfloat16, device="cuda", tiles=TILES,
                      options=registry.rank_alone(dataclasses.replace(kc.options(8192), deadline_s=0.05,
                                                                      skip_arrive=stage), tp))
    layer = plan.bind(kc.tensors(weights), launch_id=3)  # compiles
    t = time.time()
    plan.run(layer, step_dict(step, fresh_caches(kc, step)))
    torch.cuda.synchronize()
    dt = time.time() - t
    try:
        plan.check_error()
        fail("planted missing arrival: no error word")
    except RuntimeError as e:
        print(f"deadline check: step ended after {dt:.3f} s with: {e}")
    if dt > 1.0:
        fail(f"deadline check took {dt:.1f} s for a 0.05 s deadline")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kind", default="shared")
    p.add_argument("--tp", type=int, nargs="+", default=[8])
    p.add_argument("--widths", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--contexts", type=int, nargs="+", default=[8192, 131072])
    p.add_argument("--kv", nargs="+", default=["bf16", "fp8"])
    p.add_argument("--dump", default=None)
    p.add_argument("--controls", default="all", choices=["all", "none"])
    p.add_argument("--stop-after", default=None, help="also check every stage alone up to this one ('all': every stage)")
    p.add_argument("--no-deadline", action="store_true")
    p.add_argument("--only-deadline", action="store_true", help="only the planted missing arrival (compute-sanitizer runs)")
    p.add_argument("--tiles", default="", help="tile overrides, e.g. 'bn_a=32,ks_a=8' (default: Tiles())")
    p.add_argument("--tp-emulate", type=int, default=0, help="TP R as R emulated ranks on this GPU (check_tp.py)")
    p.add_argument("--shape", default="mixed", choices=registry.STEP_SHAPES,
                   help="the steps' requests (decode: a row a request, as time_layers --shape decode)")
    args = p.parse_args()
    global TILES
    TILES = Tiles().with_spec(args.tiles)
    kc = registry.get(args.kind)
    if args.stop_after not in (None, "all"):
        kinds.get(args.kind).table.stage_id(args.stop_after)  # ValueError naming the stages
    print("tiles:", TILES, flush=True)
    geo = li.glm53_geometry()
    if args.tp_emulate:
        sys.modules.setdefault("check_layer", sys.modules[__name__])  # check_tp's fail() is this module's
        import check_tp

        for kv in [] if args.only_deadline else args.kv:
            kvd = torch.bfloat16 if kv == "bf16" else torch.float8_e4m3fn
            for ctx in args.contexts:
                for w in args.widths:
                    check_tp.check_config(kc, geo, args.tp_emulate, w, ctx, kvd, 100 + w, args, TILES)
                    torch.cuda.empty_cache()
        if not args.no_deadline:
            check_tp.check_held(kc, geo, args.tp_emulate, TILES)
        print(f"check_layer: {len(FAILS)} failures")
        sys.exit(1 if FAILS else 0)
    for tp in [] if args.only_deadline else args.tp:
        for kv in args.kv:
            kvd = torch.bfloat16 if kv == "bf16" else torch.float8_e4m3fn
            for ctx in args.contexts:
                for w in args.widths:
                    check_config(kc, geo, tp, w, ctx, kvd, seed=100 + w, args=args)
                    torch.cuda.empty_cache()
    try:  # bad input is refused at build, every reason named
        kinds.plan(args.kind, geo, tp=3, width=17, kv_dtype=torch.float16, device="cuda", tiles=TILES)
        fail("bad build was not refused")
    except ValueError as e:
        print("refused:", e)
    if not args.no_deadline:
        check_deadline(kc, geo, args.tp[0])  # at the first TP size checked
    print(f"check_layer: {len(FAILS)} failures")
    sys.exit(1 if FAILS else 0)


if __name__ == "__main__":
    main()
