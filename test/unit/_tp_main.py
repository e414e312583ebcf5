"""One launch kind at TP R under Triton's interpreter: R processes, one a rank, each running its own rank's launch on
its shard of one full draw of the layer, their peer buffers shared through one file (`peer.file_backed`). Run by
test_tp_launch.py; prints one JSON line.

python test/unit/_tp_main.py KIND R WIDTH DIR [HOLD_RANK]
  HOLD_RANK: that rank launches only once every other rank's launch has ended (the others must stop at their
             deadline naming it; it then stops at a later wait, naming a peer that drained)

Each rank: its outputs' and caches' digests; the bounds' values of its outputs against the oracle at TP R
(`registry.KindCheck.oracle_ranks`: every rank's partials summed in rank order); the tasks each stage ran against
the table; the cache rows written outside out_loc; then a second launch (epoch 2) where the last rank's weights
carry the kind's planted controls, against the same oracle (its values must fail every bound on some rank).
"""
import dataclasses
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "kernels", "glm53"))
os.environ["TRITON_INTERPRET"] = "1"

# a healthy exchange waits a few seconds at most here (the ranks start together, 2 CPU cores); a held rank's peers
# give up after this many polls (each ~1-2 ms under the interpreter)
HEALTHY_POLLS, HELD_POLLS = 40_000, 4_000


def geometry():
    """The interpreter's tiny geometry with a MoE intermediate that splits into whole 128-blocks at TP 2."""
    from sgl_amd_mono.glm53 import launch_inputs as li

    return dataclasses.replace(li.tiny_geometry(), moe_inter=256)


def rank_main(kind: str, R: int, rank: int, width: int, folder: str, hold: int) -> None:
    import torch

    import registry
    from _interp_main import combined_control, tiles_of
    from sgl_amd_mono.backends.triton import kinds
    from sgl_amd_mono.common import guard, peer
    from sgl_amd_mono.common import numerics as nm
    from sgl_amd_mono.common.kind import check_task_counts

    geo, kc = geometry(), registry.get(kind)
    polls = HELD_POLLS if hold >= 0 else HEALTHY_POLLS
    weights = [kc.weights(geo, tp=R, seed=3, device="cpu", rank=r) for r in range(R)]
    step = kc.step(geo, width=width, context=300, kv_dtype=torch.bfloat16, seed=4, device="cpu")
    opts = dataclasses.replace(kc.options(300), placement="sequential", count_tasks=True,
                               deadline_s=polls / guard.POLLS_PER_S)
    plan = kinds.plan(kind, geo, tp=R, width=width, kv_dtype=torch.bfloat16, device="cpu", options=opts,
                      tiles=tiles_of(""), rank=rank)
    own = plan.bind(kc.tensors(weights[rank]), launch_id=3)
    control = weights[rank] if rank != R - 1 else combined_control(kc, geo, weights[rank])
    bad = plan.bind(kc.tensors(control), launch_id=4)
    plan.attach_peers(peer.file_backed(R, rank, plan.peer_nbytes, os.path.join(folder, "peers")))
    open(os.path.join(folder, f"ready{rank}"), "w").close()  # every rank attached before any launch
    while sum(os.path.exists(os.path.join(folder, f"ready{r}")) for r in range(R)) < R:
        time.sleep(0.01)
    res = {"rank": rank, "held": rank == hold}
    while rank == hold and sum(os.path.exists(os.path.join(folder, f"rank{r}.json")) for r in range(R)) < R - 1:
        time.sleep(0.05)
    caches = {n: c.clone() for n, c in kc.caches(step).items()}
    t0 = time.time()
    out = {k: v.clone() for k, v in plan.run(own, {**vars(step), **caches}).items()}
    res["seconds"] = round(time.time() - t0, 2)
    e = guard.read_error(plan.sync.err)
    res["error"] = plan.describe_error(e) if e is not None else None
    res["digests"] = {k: nm.digest(v) for k, v in {**out, **caches}.items()}
    if e is None and hold < 0:
        ref, caches_ref = kc.oracle_ranks(geo, weights, step)
        mine = registry.RankWeights(weights[rank], weights) if isinstance(weights[rank], tuple) else weights[rank]
        res["values"] = kc.compare(geo, out, caches, ref, caches_ref, step, plan, mine)
        counted = plan.sync.task_count.tolist()
        try:
            check_task_counts(plan.table, plan.dims, counted)
            res["task_counts_ok"] = True
        except ValueError as err:
            res["task_counts_ok"] = str(err)
        allowed = set(step.out_loc.tolist()) if hasattr(step, "out_loc") else set()
        res["cache_rows_outside_out_loc"] = sum(len(registry.changed_slots(n, c0, caches[n]) - allowed)
                                                for n, c0 in kc.caches(step).items())
        caches2 = {n: c.clone() for n, c in kc.caches(step).items()}
        out2 = plan.run(bad, {**vars(step), **caches2})
        e2 = guard.read_error(plan.sync.err)
        res["control_error"] = plan.describe_error(e2) if e2 is not None else None
        res["control_values"] = kc.compare(geo, out2, caches2, ref, caches_ref, step, plan, mine)
        res["epoch"] = plan.sync.epoch
    _save(folder, rank, res)


def _save(folder, rank, res) -> None:
    with open(os.path.join(folder, f"rank{rank}.json"), "w") as f:
        json.dump(res, f)


def main(kind: str, R: int, width: int, folder: str, hold: int) -> None:
    import multiprocessing as mp

    with open(os.path.join(folder, "peers"), "wb") as f:  # the shared mapping, zeroed (file_backed maps it)
        f.write(bytes(1 << 22))
    procs = [mp.get_context("spawn").Process(target=rank_main, args=(kind, R, r, width, folder, hold))
             for r in range(R)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(900)
    res = []
    for r in range(R):
        path = os.path.join(folder, f"rank{r}.json")
        res.append(json.load(open(path)) if os.path.exists(path) else None)
    print(json.dumps({"exitcodes": [p.exitcode for p in procs], "ranks": res}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5]) if len(sys.argv) > 5 else -1)
