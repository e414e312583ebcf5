"""`check_layer.py --tp-emulate R`: a launch kind at TP R as R emulated ranks on one GPU (`tp_emulate.Group`), each on
its shard of one full draw, against the oracle at TP R (`registry.KindCheck.oracle_ranks`: every rank's partials
summed in rank order).

For each (width, context, kv dtype): every rank's outputs and caches bitwise equal across the ranks; each rank within
the kind's bounds (`<kind>.BOUNDS_GPU`) against the oracle; the kind's planted controls (each of its weights
controls on every rank's shard) failing their bounds on some rank; a bitwise rerun; 20 CUDA-graph replays of
the R concurrent launches bitwise equal to the eager run; exactly the step's cache rows written on every rank; no
step compiled. Then one rank held back past the deadline (its stream sleeps first): every rank ends with an error
word naming a stage and a missing peer, each within the deadline + 1 s of its own launch.
"""

from __future__ import annotations

import dataclasses
import time

import torch

import registry
from check_layer import fail, fresh_caches, report_control, step_dict
from sgl_amd_mono.common import numerics as nm
from tp_emulate import Group, clock_hz

GROUPS = {}  # (kind, tp, width, kv, options) -> Group: one a width, every layer bound to it


def group_for(kc, geo, tp, width, kv_dtype, options, tiles) -> Group:
    key = (kc.name, tp, width, kv_dtype, options)
    if key not in GROUPS:
        GROUPS[key] = Group(kc.name, geo, tp=tp, width=width, kv_dtype=kv_dtype, options=options, tiles=tiles)
    return GROUPS[key]


def own_weights(kc, weights, rank):
    """What a rank's comparison reads of the weights: its own, with every rank's beside them (tuples)."""
    return registry.RankWeights(weights[rank], weights) if isinstance(weights[rank], tuple) else weights[rank]


def run_group(kc, g: Group, layers, step, **kw):
    caches = [fresh_caches(kc, step) for _ in range(g.tp)]
    outs = g.run(layers, [step_dict(step, c) for c in caches], **kw)
    torch.cuda.synchronize()
    return [{k: v.clone() for k, v in o.items()} for o in outs], caches


def ranks_equal(outs, caches) -> bool:
    return all(torch.equal(outs[0][k], o[k]) for o in outs[1:] for k in outs[0]) and \
        all(torch.equal(caches[0][n], c[n]) for c in caches[1:] for n in caches[0])


def check_config(kc, geo, tp, width, context, kv_dtype, seed, args, tiles):
    tag = f"{kc.name} tp{tp}-emulated w{width} ctx{context} kv={'fp8' if kv_dtype != torch.bfloat16 else 'bf16'}"
    weights = [kc.weights(geo, tp=tp, seed=seed, device="cuda", rank=r) for r in range(tp)]
    step = kc.step(geo, width=width, context=context, kv_dtype=kv_dtype, seed=seed + 1, device="cuda")
    ref, caches_ref = kc.oracle_ranks(geo, weights, step)
    g = group_for(kc, geo, tp, width, kv_dtype, kc.options(context), tiles)
    layers = g.bind(weights, launch_id=seed, tensors=kc.tensors)
    compiled = g.compiled_variants()
    outs, caches = run_group(kc, g, layers, step)
    errs = g.errors()
    if any(errs):
        fail(f"[{tag}] errors: {errs}")
        g.reset()
        return
    same = ranks_equal(outs, caches)
    print(f"[{tag}] ranks bitwise equal: {same} (grid {g.plans[0].n_programs} a rank, "
          f"{g.plans[0].peer_nbytes / 2**20:.2f} MiB of peer buffer a rank, {g.plans[0].resources})", flush=True)
    if not same:
        fail(f"[{tag}] the ranks' outputs differ")
    for r in range(tp):
        vals = kc.compare(geo, outs[r], caches[r], ref, caches_ref, step, g.plans[r], own_weights(kc, weights, r))
        print(f"[{tag}] rank {r}: " + " ".join(f"{k.split('.', 1)[1]}={v:.3g}" for k, v in vals.items()), flush=True)
        for k, v in vals.items():
            if not nm.passes(k, v, kc.bounds[k]):
                fail(f"[{tag}] rank {r}: {k} = {v:.4g} outside bound {kc.bounds[k]}")
    outs2, caches2 = run_group(kc, g, layers, step)
    rerun = all(torch.equal(a[k], b[k]) for a, b in zip(outs, outs2) for k in a) and \
        all(torch.equal(a[n], b[n]) for a, b in zip(caches, caches2) for n in a)
    print(f"[{tag}] bitwise rerun equal: {rerun}")
    if not rerun:
        fail(f"[{tag}] two runs differ")
    allowed = set(step.out_loc.tolist()) if hasattr(step, "out_loc") else set()
    for r in range(tp):
        for name, before in kc.caches(step).items():
            changed = registry.changed_slots(name, before, caches[r][name])
            extra = sorted(changed - allowed)
            unwritten = [s for s in step.out_loc[: step.live].tolist() if s not in changed]
            if extra or unwritten:
                fail(f"[{tag}] rank {r} {name} write set wrong: outside {extra[:5]} unwritten {unwritten}")
    print(f"[{tag}] write sets checked on every rank ({sorted(kc.caches(step))})")
    check_replays(kc, g, layers, step, outs, caches, tag)
    if args.controls == "all":
        per_rank = [kc.controls(geo, w) for w in weights]  # each control on every rank's shard (at TP 8 one rank's
        for i, (name, must_fail, _) in enumerate(per_rank[0]):  # block of o_proj scales x1.2 moves o by 1/8 of it)
            bad = g.bind([c[i][2] for c in per_rank], launch_id=seed, tensors=kc.tensors)
            o2, k2 = run_group(kc, g, bad, step)
            if any(g.errors()):
                fail(f"[{tag}] control '{name}': errors {g.errors()}")
                g.reset()
                continue
            worst = {b: max((kc.compare(geo, o2[r], k2[r], ref, caches_ref, step, g.plans[r],
                                        own_weights(kc, weights, r))[b] for r in range(tp)),
                            key=lambda v, b=b: 0 if nm.passes(b, v, kc.bounds[b]) else 1) for b in must_fail}
            report_control(tag, f"{name} (every rank)", must_fail, worst, kc.bounds)
    if g.compiled_variants() != compiled:
        fail(f"[{tag}] a step compiled: {compiled} compiled variants after bind, {g.compiled_variants()} now")


def check_replays(kc, g, layers, step, outs, caches, tag, n=20):
    caches_g = [fresh_caches(kc, step) for _ in range(g.tp)]
    steps = [step_dict(step, c) for c in caches_g]
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        g.run(layers, steps)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        gouts = g.run(layers, steps)
    ok = True
    for _ in range(n):
        graph.replay()
        torch.cuda.synchronize()
        ok &= all(torch.equal(go[k], o[k]) for go, o in zip(gouts, outs) for k in o) and \
            all(torch.equal(cg[m], c[m]) for cg, c in zip(caches_g, caches) for m in c)
    errs = g.errors()
    print(f"[{tag}] {n} graph replays of the {g.tp} concurrent launches bitwise equal to eager: {ok}; errors {errs}")
    if not ok or any(errs):
        fail(f"[{tag}] graph replays differ or failed: {errs}")
        g.reset()


def check_held(kc, geo, tp, tiles, deadline_s=0.2):
    """Rank tp - 1 held back deadline_s + 0.5 s: every other rank stops at its first exchange, naming it; the held
    rank then stops at a later one, naming a peer that drained (or, in a kind of one exchange, the tail, finds every
    peer's words there and ends healthy). All within the hold + the deadline + 1 s."""
    weights = [kc.weights(geo, tp=tp, seed=5, device="cuda", rank=r) for r in range(tp)]
    step = kc.step(geo, width=1, context=8192, kv_dtype=torch.bfloat16, seed=6, device="cuda")
    opts = dataclasses.replace(kc.options(8192), deadline_s=deadline_s)
    g = Group(kc.name, geo, tp=tp, width=1, kv_dtype=torch.bfloat16, options=opts, tiles=tiles)
    layers = g.bind(weights, launch_id=3, tensors=kc.tensors)
    clock_hz()
    t = time.time()
    run_group(kc, g, layers, step, hold=tp - 1, hold_s=deadline_s + 0.5)
    dt = time.time() - t
    errs = g.errors()
    for r, e in enumerate(errs):
        print(f"held-rank check ({kc.name} tp{tp}-emulated, rank {tp - 1} held {deadline_s + 0.5:.1f} s): rank {r}: {e}")
        if r == tp - 1 and (e is None or "push" in e):
            continue
        if e is None or "push" not in e:
            fail(f"held-rank check: rank {r} did not stop with a missing peer named: {e}")
        elif f"rank {tp - 1}'s push" not in e:
            fail(f"held-rank check: rank {r} names another peer than the held rank {tp - 1}: {e}")
    print(f"held-rank check: every rank ended in {dt:.2f} s (hold {deadline_s + 0.5:.1f} s + deadline {deadline_s} s)")
    if dt > 2 * deadline_s + 0.5 + 1.0:
        fail(f"held-rank check took {dt:.2f} s")
    g.reset()
