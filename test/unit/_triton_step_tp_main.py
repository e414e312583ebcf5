"""Whole GLM-5.3 steps at TP 2 on the Triton backend through SGLang's real binding (run by test_triton_step_tp.py):
two processes, one a rank of SGLang's TP group (gloo on CPU), each loading its own shards of the tiny model through
SGLang's loader and building the launches over them (`build_triton` at TP 2: the rank and group read from SGLang,
the peer buffers through `peer.allocate`'s file backend), every launch under Triton's interpreter. Then, in this
process, the reference backend at TP 1 on the same checkpoint and identical pools. Prints one JSON line: per step
(a decode step with a pad row, an MTP verify step capturing hidden states; bf16 KV), whether the ranks' logits,
hidden states and written cache rows are bitwise equal, the launches' values against the reference and planted
errors' values, layer 0's rows, the cache rows written outside out_cache_loc, and what each rank's build reported.

python test/unit/_triton_step_tp_main.py FOLDER   (TRITON_INTERPRET=1 in the environment)
"""
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "kernels", "glm53"))

from _triton_step_main import LAUNCH_TINY, STEPS, index_rows, reference_step, routed, step_key, written_outside  # noqa: E402,E501

# TP 2 shards of whole 128-blocks: 4 heads (2 a rank: q_b 256 rows, kv_b 384, o_proj 256 columns), MoE intermediate
# 256 and dense intermediate 512 (128 and 256 a rank)
LAUNCH_TINY_TP2 = dict(LAUNCH_TINY, num_attention_heads=4, num_key_value_heads=4, moe_intermediate_size=256,
                       intermediate_size=512)
TP = 2
# a healthy rank's waits under the interpreter: the ranks start each step together (a barrier), so a hand-off waits
# for its peer's same stage; 0.05 s is 100k polls (~1-2 min of the interpreter's)
DEADLINE_S = 0.05
SEED = 4


def _pool(geo, s, device="cpu"):
    from dsa_fixture import DsaCaches

    max_ctx = max(256, max(s["seq_lens"]) + s["tokens"] + 1)
    return DsaCaches(geo, kv_dtype=s["kv"], bs=len(s["seq_lens"]) + s["pad_rows"], max_ctx=max_ctx, seed=SEED,
                     device=device)


def _batch(caches, s):
    from dsa_fixture import make_step

    return make_step(caches, seq_lens=s["seq_lens"], tokens=s["tokens"], input_ids=torch.tensor(s["ids"]),
                     pad_rows=s["pad_rows"], capture_hidden=s["capture"])


def _rows(geo, pool, loc) -> dict:
    """Every layer's MLA cache rows and dequantized index keys at loc."""
    kv = [pool.get_key_buffer(i).view(-1, geo.kv_cache_dim)[loc].float() for i in range(geo.n_layers)]
    ik = {i: index_rows(pool, i, loc) for i in range(geo.n_layers) if geo.runs_indexer[i]}
    return {"kv": kv, "index_k": ik}


def rank_main(rank: int, port: str, folder: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    import torch.distributed as dist
    from sglang.kernels.plugin_kernels.amd.spec import BuildContext
    from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

    from sgl_amd_mono.glm53.config import Glm53Geometry
    from sgl_amd_mono.glm53.spec import make_spec
    from tiny_glm53 import build_tiny_model, init_tp_dist

    res = {"rank": rank}
    try:
        init_tp_dist(rank=rank, world=TP)
        model, cfg = build_tiny_model(is_fp8=True, seed=0, **LAUNCH_TINY_TP2)
        geo = Glm53Geometry.from_hf(cfg)
        spec = make_spec(backend="triton", is_expert_fusion_required=False, on_error="drain")
        ctx = BuildContext(isa="cpu", widths=tuple(sorted({len(s["ids"]) for s in STEPS.values()})),
                           deadline_s=DEADLINE_S, copies={})
        built = spec.build(model, cfg, ctx)
        res.update(tp=built.tp, built_rank=built.rank, lm_head_rows=int(model.lm_head.weight.shape[0]),
                   peer_backends=sorted({p.peers.backend for ps in built.plans.values() for p in ps.values()}))
        out = {}
        with routed(model, built, spec, [step_key(s) for s in STEPS.values()]):
            for name, s in STEPS.items():
                caches = _pool(geo, s)
                before = caches.snapshot()
                batch, backend, pos = _batch(caches, s)
                dist.barrier()  # the ranks start each step together (every wait on a peer is bounded by the deadline)
                with forward_context(ForwardContext(attn_backend=backend)):
                    got = model.forward(batch.input_ids, pos, batch)
                built.check_error()
                live = len(s["seq_lens"]) * s["tokens"]
                out[name] = {"logits": got.next_token_logits.clone(),
                             "hidden": None if got.hidden_states is None else got.hidden_states.clone(),
                             "rows": _rows(geo, caches.pool, batch.out_cache_loc[:live]),
                             "written_outside_out_loc": written_outside(geo, before, caches.pool, batch.out_cache_loc)}
        torch.save(out, os.path.join(folder, f"rank{rank}.pt"))
    except Exception as e:  # noqa: BLE001 (reported in the JSON)
        res["error"] = f"{type(e).__name__}: {e}"
        raise
    finally:
        with open(os.path.join(folder, f"rank{rank}.json"), "w") as f:
            json.dump(res, f)


def _equal(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return bool(torch.equal(a, b))
    return a == b


def compare(geo, name, s, got, ref, want_rows) -> dict:
    """The launches' step (rank 0's) against the reference's: values, and each bound's planted error's."""
    from sgl_amd_mono.common import numerics as nm

    live = len(s["seq_lens"]) * s["tokens"]
    logits, want = got["logits"][:live], ref.next_token_logits[:live]
    v = {"step.logits.rel": nm.rel(logits, want),
         "step.logits.top1": float((logits.argmax(-1) == want.argmax(-1)).float().mean())}
    kv = [nm.max_abs(g, w) for g, w in zip(got["rows"]["kv"], want_rows["kv"])]
    ik = {i: nm.max_abs(g, want_rows["index_k"][i]) for i, g in got["rows"]["index_k"].items()}
    v["step.kv.max_abs"], v["step.index_k.max_abs"] = max(kv), max(ik.values())
    bad = logits.clone()
    bad[0] *= 1.1
    ctrl = {"step.logits.rel": nm.rel(bad, want)}
    if s["capture"]:
        v["step.hidden.rel"] = nm.rel(got["hidden"][:live], ref.hidden_states[:live])
        h = got["hidden"][:live].clone()
        h[0] *= 1.1
        ctrl["step.hidden.rel"] = nm.rel(h, ref.hidden_states[:live])
    last = max(ik)
    g = got["rows"]["kv"][last].clone()
    g[0, 0] += 0.5
    ctrl["step.kv.max_abs"] = nm.max_abs(g, want_rows["kv"][last])
    k = got["rows"]["index_k"][last].clone()
    k[0, 0] += 1.0
    ctrl["step.index_k.max_abs"] = nm.max_abs(k, want_rows["index_k"][last])
    return {"values": v, "controls": ctrl, "per_layer": {"kv": kv, "index_k": list(ik.values())},
            "layer0": {"kv": kv[0], "index_k": ik[0]}, "logits_shape": list(got["logits"].shape),
            "hidden_is_none": got["hidden"] is None, "written_outside_out_loc": got["written_outside_out_loc"]}


def main(folder: str) -> None:
    import socket

    import torch.multiprocessing as mp
    from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

    from sgl_amd_mono.glm53.config import Glm53Geometry
    from sgl_amd_mono.glm53.spec import make_spec
    from tiny_glm53 import build_tiny_model, init_single_process_dist

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=rank_main, args=(r, port, folder)) for r in range(TP)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(900)
    ranks = [json.load(open(os.path.join(folder, f"rank{r}.json"))) for r in range(TP)
             if os.path.exists(os.path.join(folder, f"rank{r}.json"))]
    res = {"exitcodes": [p.exitcode for p in procs], "ranks": ranks, "steps": {}}
    if any(p.exitcode != 0 for p in procs):
        print(json.dumps(res))
        return
    outs = [torch.load(os.path.join(folder, f"rank{r}.pt")) for r in range(TP)]
    res["ranks_equal"] = {name: _equal(outs[0][name], outs[1][name]) for name in STEPS}
    # the reference at TP 1 on the same checkpoint (the TP 2 shards are cut from it) and identical pools, on a gloo
    # port of its own (the environment's may be held by the process that started this one)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        os.environ["MASTER_PORT"] = str(sock.getsockname()[1])
    init_single_process_dist()
    model, cfg = build_tiny_model(is_fp8=True, seed=0, **LAUNCH_TINY_TP2)
    geo = Glm53Geometry.from_hf(cfg)
    from sglang.kernels.plugin_kernels.amd.spec import BuildContext

    ref = make_spec(backend="reference", is_expert_fusion_required=False).build(
        model, cfg, BuildContext(isa="cpu", widths=(3, 4), deadline_s=1.0, copies={}))
    for name, s in STEPS.items():
        caches = _pool(geo, s)
        batch, backend, pos = _batch(caches, s)
        with forward_context(ForwardContext(attn_backend=backend)):
            want = reference_step(ref, s, batch, pos)
        live = len(s["seq_lens"]) * s["tokens"]
        res["steps"][name] = compare(geo, name, s, outs[0][name], want, _rows(geo, caches.pool,
                                                                              batch.out_cache_loc[:live]))
    print(json.dumps(res))


if __name__ == "__main__":
    assert os.environ.get("TRITON_INTERPRET") == "1"
    main(sys.argv[1])
