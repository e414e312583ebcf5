"""A whole GLM-5.3 step at TP R through the launches directly (no SGLang model), one process a rank (torchrun):
every layer's launch of a truncated model (default one layer of each kind: tokens, dense, indexer, shared) and the
tail, each rank on its shard of one full draw (`registry.KINDS[kind].weights(geo, tp=R, seed, rank=r)`) with its
own copy of the caches (replicated, as SGLang's MLA caches are), the partials exchanged inside the launches through
peer buffers (`peer.allocate`), a gloo group for the setup and for gathering the results to rank 0.

torchrun --nproc-per-node R test/kernels/glm53/tp_step.py --device cuda [--peers cuda_ipc|symmetric] [--width 1]
         [--context 8192] [--layers tokens dense indexer shared] [--deadline 10] [--replays 20] [--out FILE]
torchrun --nproc-per-node R test/kernels/glm53/tp_step.py ... --hold-rank H      (a held-rank run, see below)
(PYTHONPATH=$PWD:$PWD/test/kernels/glm53; each process takes cuda:LOCAL_RANK % device_count, so R processes on one
GPU share it: a smoke test of the processes' path, kernels time-sliced, not a speed.)

--device cuda: GLM-5.3's shapes (`li.glm53_geometry()`), the kinds' GPU bounds, peers by `--peers` (cuda_ipc: CUDA
  IPC handles gathered over gloo; symmetric: torch's symmetric memory over an NCCL group, several GPUs only).
--device cpu: the interpreter's tiny geometry at moe_inter 256 (`test/unit/_tp_main.geometry()`), its tiles,
  one program a launch in stage order, the kinds' interpreter bounds (`interp_bounds["w2"]`), peers through files
  (`peer.allocate(backend="file")`): the script's logic in CI (test/unit/test_tp_step.py).

Checks (rank 0; a failure is listed in the result's "failures"):
- every launch of every rank ends healthy (no error word);
- every rank's outputs of every layer and its caches after the step bitwise equal to rank 0's (digests);
- each layer against the oracle at TP R (`registry.KindCheck.oracle_ranks` on the launch's own inputs to that layer:
  the previous launch's outputs, the caches before the step, the previous top-k), within the kind's bounds;
- GPU: `--replays` CUDA-graph replays of the whole step (every rank) bitwise equal to the eager step (outputs, caches).
With --hold-rank H (a run of its own): rank H's step starts late (GPU: after sleeping deadline + 1 s; CPU, where the
interpreter's deadline is a poll count: once every other rank's step ended); every rank must end with an error word
naming a stage and a missing peer, and every rank's step must end (none hangs).

Prints one JSON line (rank 0), also written to --out: {"ok", "failures", "layers", "ranks_equal", "values", "errors",
"replays_equal", "held", "seconds", ...}.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
UNIT = os.path.join(HERE, "..", "..", "unit")
KINDS_DEFAULT = ("tokens", "dense", "indexer", "shared")


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", choices=("cuda", "cpu"), required=True)
    p.add_argument("--peers", choices=("cuda_ipc", "symmetric"), default="cuda_ipc", help="the GPU peer backend")
    p.add_argument("--width", type=int, default=None, help="step rows (default: 1 on cuda, 2 on cpu)")
    p.add_argument("--context", type=int, default=None, help="keys a request reads (default: 8192 cuda, 300 cpu)")
    p.add_argument("--kv", choices=("bf16", "fp8"), default="bf16")
    p.add_argument("--layers", nargs="+", default=list(KINDS_DEFAULT), help="the layers' kinds, in order (the tail "
                   "follows); the first must be tokens, a shared layer must follow a layer that selects a top-k")
    p.add_argument("--deadline", type=float, default=None, help="each wait's deadline, s (default: 10 cuda; 0.02 cpu, "
                   "where it is a poll count: 2M polls a second)")
    p.add_argument("--replays", type=int, default=20, help="CUDA-graph replays (GPU)")
    p.add_argument("--hold-rank", type=int, default=-1, help="this rank's step starts late: the held-rank run")
    p.add_argument("--plant-layer", type=int, default=-1, help="the last rank's weights of this layer carry every "
                   "planted control of its kind: the checks' negative control (the oracle's and the ranks' checks "
                   "must fail)")
    p.add_argument("--seed", type=int, default=10)
    p.add_argument("--out", default=None, help="also write the JSON result here (rank 0)")
    a = p.parse_args(argv)
    a.width = a.width or (1 if a.device == "cuda" else 2)
    a.context = a.context or (8192 if a.device == "cuda" else 300)
    a.deadline = a.deadline if a.deadline is not None else (10.0 if a.device == "cuda" else 0.02)
    bad = []
    if a.layers[0] != "tokens":
        bad.append(f"--layers starts with {a.layers[0]!r}: layer 0 is the tokens kind (it reads the token ids)")
    for i, k in enumerate(a.layers):
        if k not in KINDS_DEFAULT:
            bad.append(f"--layers {k!r} is not one of {list(KINDS_DEFAULT)}")
        if k == "shared" and (i == 0 or a.layers[i - 1] not in ("tokens", "dense", "indexer")):
            bad.append(f"layer {i} is shared: it reuses the previous layer's top-k, and layer {i - 1} selects none")
    if len(set(a.layers)) != len(a.layers):
        bad.append(f"--layers {a.layers} repeats a kind: a kind's plan is shared by its layers, and the oracle checks "
                   "read a plan's scratch after the step (one layer a kind)")
    if bad:
        p.error("; ".join(bad))
    return a


@dataclasses.dataclass
class Layer:
    index: int
    kind: str
    kc: object  # registry.KindCheck
    weights: dict  # rank -> that rank's weights (every rank's on rank 0, for the oracle; this rank's elsewhere)


def setup(a):
    """(rank, R, device, gloo group, device group or None)."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")  # torchrun's env: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    rank, size = dist.get_rank(), dist.get_world_size()
    if a.device == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    device_group = dist.new_group(backend="nccl") if a.device == "cuda" and a.peers == "symmetric" else None
    return rank, size, device, dist.group.WORLD, device_group


def geometry_and_tiles(a):
    if a.device == "cpu":
        sys.path.insert(0, UNIT)
        from _interp_main import tiles_of
        from _tp_main import geometry

        return geometry(), tiles_of("")
    from sgl_amd_mono.backends.triton.tiles import Tiles
    from sgl_amd_mono.glm53 import launch_inputs as li

    return li.glm53_geometry(), Tiles()


def build(a, geo, tiles, rank, R, device):
    """(layers, plans by kind, bound layers, the base step): every layer's weights, one plan a kind, its layers
    bound (each width's first bind compiles on a GPU)."""
    import torch

    import registry
    from sgl_amd_mono.backends.triton import kinds

    kv_dtype = torch.bfloat16 if a.kv == "bf16" else torch.float8_e4m3fn
    draw_ranks = range(R) if rank == 0 else [rank]
    layers = []
    for i, kind in enumerate(a.layers + ["tail"]):
        kc = registry.get(kind)
        seed = a.seed + 10 * i
        layers.append(Layer(i, kind, kc, {r: kc.weights(geo, tp=R, seed=seed, device=device, rank=r)
                                          for r in draw_ranks}))
    if a.plant_layer >= 0 and rank == R - 1:
        layer = layers[a.plant_layer]
        w = layer.weights[rank]
        for i in range(len(layer.kc.controls(geo, w))):  # every control at once, each perturbing its own tensor
            w = layer.kc.controls(geo, w)[i][2]
        layer.weights[rank] = w
    plans, bound = {}, []
    for layer in layers:
        kc = layer.kc
        if layer.kind not in plans:
            opts = dataclasses.replace(kc.options(a.context), deadline_s=a.deadline)
            if a.device == "cpu":
                opts = dataclasses.replace(opts, placement="sequential")
            plans[layer.kind] = kinds.plan(layer.kind, geo, tp=R, width=a.width, kv_dtype=kv_dtype, device=device,
                                           options=opts, tiles=tiles, rank=rank)
        bound.append(plans[layer.kind].bind(kc.tensors(layer.weights[rank]), launch_id=layer.index))
    base = registry.get("tokens").step(geo, width=a.width, context=a.context, kv_dtype=kv_dtype, seed=a.seed + 1,
                                       device=device)
    return layers, plans, bound, base


def attach_peers(a, plans, rank, R, group, device_group, device) -> float:
    """One peer buffer a plan over the group, every rank or none, attached in the plans' order (the same on every
    rank), as the server's build does (`tp_group.attach_peer_buffers`); MiB a rank."""
    from sgl_amd_mono.glm53 import tp_group

    g = tp_group.TpGroup(rank=rank, size=R, device_group=device_group, cpu_group=group)
    backend = "file" if a.device == "cpu" else a.peers
    return tp_group.attach_peer_buffers([plans[k] for k in sorted(plans)], g, device=device, backend=backend) / 2**20


def fresh_caches(layers, base) -> list:
    """Each layer its own copy of the base step's caches (the tail none)."""
    out = []
    for layer in layers:
        out.append({} if layer.kind == "tail" else {n: c.clone() for n, c in layer.kc.caches(base).items()
                                                    if layer.kind != "shared" or n == "kv_cache"})
    return out


def run_step(layers, plans, bound, base, caches, record=None) -> dict:
    """Every layer's launch in order, each on the previous one's outputs (capturable: no host sync). record: a list
    that gets each layer's (inputs it read, outputs, scratch) as clones (eager only). Returns the tail's outputs."""
    tables = {k: v for k, v in vars(base).items() if k not in ("hidden", "residual", "kv_cache", "index_k_cache")}
    hidden = residual = topk = None
    out = None
    for layer, bl, c in zip(layers, bound, caches):
        plan = plans[layer.kind]
        step = {**tables, **c, "hidden": hidden, "residual": residual, "topk_slots": topk}
        if record is not None:
            record.append({"inputs": {k: None if t is None else t.clone() for k, t in
                                      (("hidden", hidden), ("residual", residual), ("topk_slots", topk))}})
        out = plan.run(bl, step)
        if record is not None:
            record[-1]["outputs"] = {k: v.clone() for k, v in out.items()}
            record[-1]["scratch"] = {k: v.clone() for k, v in plan.scratch.items()}
        if layer.kind != "tail":
            hidden, residual, topk = out["out"], out["residual_out"], out.get("topk", topk)
    return out


def errors_of(plans) -> dict:
    """{kind: its plan's error word described} for every plan that has one (synchronises)."""
    from sgl_amd_mono.common import guard

    out = {}
    for kind, p in plans.items():
        e = guard.read_error(p.sync.err)
        if e is not None:
            out[kind] = p.describe_error(e)
    return out


def digests(record, caches) -> dict:
    from sgl_amd_mono.common import numerics as nm

    d = {}
    for i, rec in enumerate(record):
        d.update({f"layer {i} {k}": nm.digest(v) for k, v in rec["outputs"].items()})
    for i, c in enumerate(caches):
        d.update({f"layer {i} {n} after": nm.digest(t) for n, t in c.items()})
    return d


def oracle_checks(a, geo, layers, plans, record, caches_before, caches_after, base, R) -> tuple[dict, list]:
    """Each layer's oracle at TP R on the launch's own inputs to it (rank 0: every rank's weights); ({layer: values},
    failures)."""
    import types

    import registry
    from sgl_amd_mono.common import numerics as nm
    from sgl_amd_mono.glm53 import dense_inputs as di
    from sgl_amd_mono.glm53 import launch_inputs as li
    from sgl_amd_mono.glm53.index_inputs import IndexStep

    values, fails = {}, []
    index_fields = [f.name for f in dataclasses.fields(IndexStep)]
    for layer, rec, before, after in zip(layers, record, caches_before, caches_after):
        kc, ins = layer.kc, rec["inputs"]
        if layer.kind == "tail":
            step = registry.TailStep(hidden=ins["hidden"], residual=ins["residual"])
        elif layer.kind == "shared":
            step = li.Step(hidden=ins["hidden"], residual=ins["residual"], cos_sin=base.cos_sin,
                           kv_cache=before["kv_cache"], out_loc=base.out_loc, topk_slots=ins["topk_slots"],
                           live=base.live)
        else:
            fields = {f: getattr(base, f) for f in index_fields}
            fields.update(hidden=ins["hidden"], residual=ins["residual"], **before)
            step = IndexStep(**fields)
            if layer.kind == "tokens":  # the oracle reads the token ids' embedding rows itself
                step = di.TokensStep(**fields, input_ids=base.input_ids)
        ws = [layer.weights[r] for r in range(R)]
        ref, caches_ref = kc.oracle_ranks(geo, ws, step)
        mine = registry.RankWeights(ws[0], ws) if isinstance(ws[0], tuple) else ws[0]
        view = types.SimpleNamespace(scratch=rec["scratch"], dims=plans[layer.kind].dims)  # the plan at this layer
        vals = kc.compare(geo, rec["outputs"], after, ref, caches_ref, step, view, mine)
        bounds = kc.bounds if a.device == "cuda" else kc.interp_bounds["w2"]
        values[f"{layer.index} {layer.kind}"] = vals
        for k, v in vals.items():
            if not nm.passes(k, v, bounds[k]):
                fails.append(f"layer {layer.index} ({layer.kind}): {k} = {v:.4g} outside its bound {bounds[k]}")
    return values, fails


def replays(a, layers, plans, bound, base, eager_out, eager_caches, group) -> tuple[bool, list]:
    """The whole step captured in a CUDA graph on fresh caches, replayed `a.replays` times (every rank together):
    the tail's outputs and every layer's cache bitwise the eager step's after each replay."""
    import torch
    import torch.distributed as dist

    caches = fresh_caches(layers, base)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    dist.barrier(group=group)
    with torch.cuda.stream(side):  # the warm-up run executes: a cross-rank step like any other
        run_step(layers, plans, bound, base, caches)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        gout = run_step(layers, plans, bound, base, caches)
    dist.barrier(group=group)
    same, fails = True, []
    for n in range(a.replays):
        graph.replay()
        torch.cuda.synchronize()
        ok = all(torch.equal(gout[k], eager_out[k]) for k in eager_out) and \
            all(torch.equal(c[m], e[m]) for c, e in zip(caches, eager_caches) for m in e)
        if not ok and same:
            fails.append(f"graph replay {n} differs from the eager step")
        same &= ok
    return same, fails


def held_run(a, rank, layers, plans, bound, base, group) -> dict:
    """Rank a.hold_rank starts late; every rank's step must end, each with an error word naming a missing peer."""
    import torch
    import torch.distributed as dist

    caches = fresh_caches(layers, base)
    dist.barrier(group=group)
    t0 = time.time()
    if rank == a.hold_rank:
        if a.device == "cuda":
            time.sleep(a.deadline + 1.0)
        else:  # the interpreter's deadline is a poll count: start once every other rank's step ended
            dist.barrier(group=group)
    run_step(layers, plans, bound, base, caches)
    if a.device == "cuda":
        torch.cuda.synchronize()
    ended = time.time() - t0
    if rank != a.hold_rank and a.device == "cpu":
        dist.barrier(group=group)
    return {"rank": rank, "held": rank == a.hold_rank, "seconds": round(ended, 2), "errors": errors_of(plans)}


def judge_held(a, reports) -> list:
    """Every rank's step ended with an error word naming a stage and a missing peer; every other rank's first one
    (layer 0's: it waits on every rank's pushed embedding rows) names the held rank."""
    fails = []
    for r in reports:
        named = [e for e in r["errors"].values() if " in stage " in e and "missed its deadline waiting on rank" in e]
        if not named:
            fails.append(f"rank {r['rank']} ended with no error word naming a stage and a missing peer: {r['errors']}")
        first = r["errors"].get(a.layers[0], "")
        if not r["held"] and f"waiting on rank {a.hold_rank}'s push" not in first:
            fails.append(f"rank {r['rank']}'s layer 0 does not name the held rank {a.hold_rank}: {first!r}")
    return fails


def main(argv=None) -> int:
    a = parse(argv)
    if a.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    import torch
    import torch.distributed as dist

    rank, R, device, group, device_group = setup(a)
    if not 0 <= a.hold_rank < R and a.hold_rank != -1:
        raise SystemExit(f"--hold-rank {a.hold_rank} is not a rank of {R}")
    if not 0 <= a.plant_layer <= len(a.layers) and a.plant_layer != -1:
        raise SystemExit(f"--plant-layer {a.plant_layer} is not a layer of {a.layers + ['tail']}")
    t0 = time.time()
    geo, tiles = geometry_and_tiles(a)
    layers, plans, bound, base = build(a, geo, tiles, rank, R, device)
    t_build = time.time() - t0
    try:
        mib, peer_error = attach_peers(a, plans, rank, R, group, device_group, device), None
    except RuntimeError as e:  # raised on every rank alike (peer.allocate, tp_group.agree): the platform's refusal
        mib, peer_error = 0.0, str(e)
    res = {"ranks": R, "device": str(device), "device_name": torch.cuda.get_device_name(device)
           if device.type == "cuda" else "cpu", "peers": "file" if a.device == "cpu" else a.peers,
           "layers": a.layers + ["tail"], "width": a.width, "context": a.context, "deadline_s": a.deadline,
           "peer_mib_a_rank": round(mib, 3), "seconds": {"build": round(t_build, 1)}}
    fails: list = []
    if peer_error is not None:
        res["peer_setup_error"] = peer_error
        fails += [f"peer buffers: {peer_error}"] if rank == 0 else []
    elif a.hold_rank >= 0:
        reports: list = [None] * R
        dist.all_gather_object(reports, held_run(a, rank, layers, plans, bound, base, group), group=group)
        res["held"] = reports
        fails += judge_held(a, reports) if rank == 0 else []
    else:
        caches = fresh_caches(layers, base)
        before = [{n: t.clone() for n, t in c.items()} for c in caches]
        record: list = []
        dist.barrier(group=group)  # the ranks start the step together (every wait on a peer is bounded)
        t1 = time.time()
        out = run_step(layers, plans, bound, base, caches, record=record)
        if device.type == "cuda":
            torch.cuda.synchronize()
        res["seconds"]["step"] = round(time.time() - t1, 2)
        errs: list = [None] * R
        dist.all_gather_object(errs, errors_of(plans), group=group)
        res["errors"] = errs
        ds: list = [None] * R
        dist.all_gather_object(ds, digests(record, caches), group=group)
        differ = sorted({k for d in ds[1:] for k in d if d[k] != ds[0].get(k)})
        res["ranks_equal"] = not differ
        if rank == 0:  # every rank holds the gathered errors and digests: rank 0 reports them
            fails += [f"rank {r}: {k}: {e}" for r, es in enumerate(errs) for k, e in es.items()]
            fails += [f"the ranks differ in {differ[:6]}"] if differ else []
        if rank == 0 and not any(errs):
            res["values"], f = oracle_checks(a, geo, layers, plans, record, before, caches, base, R)
            fails += f
        if device.type == "cuda" and a.replays and not any(errs):
            eager = {k: v.clone() for k, v in out.items()}
            same, f = replays(a, layers, plans, bound, base, eager, caches, group)
            res["replays_equal"], res["replays"] = same, a.replays
            fails += [f"rank {rank}: {x}" for x in f]
            fails += [f"rank {rank} after the replays: {k}: {e}" for k, e in errors_of(plans).items()]
    every: list = [None] * R
    dist.all_gather_object(every, fails, group=group)  # rank 0 reports every rank's
    res["failures"] = [f for fs in every for f in fs]
    res["ok"] = not res["failures"]
    res["seconds"]["all"] = round(time.time() - t0, 1)
    if rank == 0:
        line = json.dumps(res)
        print(line, flush=True)
        if a.out:
            with open(a.out, "w") as f:
                f.write(line + "\n")
    dist.barrier(group=group)
    dist.destroy_process_group()
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    sys.exit(main())
