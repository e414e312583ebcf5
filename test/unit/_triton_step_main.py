"""Whole GLM-5.3 steps on the Triton backend through SGLang's real binding, launches under Triton's interpreter
(run as a subprocess by test_triton_step.py, so TRITON_INTERPRET=1 is set before triton is imported). Prints one
JSON line: for a decode step with a pad row and an MTP verify step capturing hidden states (bf16 KV, SGLang's
--kv-cache-dtype auto; argv "fp8": fp8_e4m3, published before the build), the
launches' logits, hidden states and every layer's written MLA and index-K cache rows against the reference
backend's on an identical pool, and the planted errors' values.

The tiny model covers every kind: layer 0 tokens, layer 1 dense, layer 2 indexer, layer 3 shared, then the tail.
"""
import contextlib
import functools
import json
import os
import sys

import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "kernels", "glm53"))
from dsa_fixture import DsaCaches, make_step  # noqa: E402
from tiny_glm53 import build_tiny_model  # noqa: E402

from sgl_amd_mono.common import numerics as nm  # noqa: E402
from sgl_amd_mono.glm53.config import Glm53Geometry  # noqa: E402

# dims the launches tile (index_topk a multiple of 32, v_head a multiple of 128, 16 routed experts), 4 layers
LAUNCH_TINY = dict(num_attention_heads=2, num_key_value_heads=2, v_head_dim=128, index_topk=64, n_routed_experts=16,
                   intermediate_size=256, first_k_dense_replace=2, indexer_types=["full", "full", "full", "shared"])
STEPS = {"decode": dict(kv=torch.bfloat16, seq_lens=[9, 150], tokens=1, ids=[5, 200, 0], pad_rows=1,
                        capture=False),
         "verify": dict(kv=torch.bfloat16, seq_lens=[40, 100], tokens=2, ids=[1, 2, 3, 4], pad_rows=0, capture=True)}


def index_rows(pool, layer, loc):
    """The index keys at the slots in loc, dequantized (fp8 x its scale)."""
    from sgl_amd_mono.glm53.indexer import _page_views

    keys, scales = _page_views(pool.get_index_k_with_scale_buffer(layer), 128)
    k = keys[loc // 64, loc % 64].view(torch.float8_e4m3fn).float()
    return k * scales[loc // 64, loc % 64][:, None]


def step_key(s: dict):
    from sglang.kernels.plugin_kernels.amd.spec import ShapeKey

    return ShapeKey(forward_mode="decode" if s["tokens"] == 1 else "target_verify",
                    batch_size=len(s["ids"]) // s["tokens"], tokens_per_request=s["tokens"])


def build_both(model, cfg, *, isa, widths, on_error="drain", deadline_s=10.0):
    """(reference backend, launches, their spec) built through the spec as SGLang's binding builds them."""
    from sglang.kernels.plugin_kernels.amd.spec import BuildContext

    from sgl_amd_mono.glm53.spec import make_spec

    ctx = BuildContext(isa=isa, widths=tuple(widths), deadline_s=deadline_s, copies={})
    ref = make_spec(backend="reference", is_expert_fusion_required=False).build(model, cfg, ctx)
    spec = make_spec(backend="triton", is_expert_fusion_required=False, on_error=on_error)
    return ref, spec.build(model, cfg, ctx), spec


@contextlib.contextmanager
def routed(model, built, spec, keys):
    """SGLang's binding installed on `model` for `keys` (its own `_install_forward`); SGLang's forward replaced by a
    sentinel that fails if a served key reaches it; both restored after."""
    from sglang.srt.kernel_plugins.amd.binding import _install_forward

    original = model.forward

    @functools.wraps(original)
    def sentinel(*args, **kwargs):
        raise AssertionError("a served key ran SGLang's forward")

    model.forward = sentinel
    _install_forward(model=model, built=built, served=frozenset(keys), spec=spec)
    try:
        yield
    finally:
        model.forward = original


def reference_step(ref, s, batch, pos):
    from sglang.kernels.plugin_kernels.amd.spec import Plan, ShapeKey

    key = ShapeKey(forward_mode=batch.forward_mode.name.lower(), batch_size=batch.batch_size,
                   tokens_per_request=s["tokens"])
    return ref.step(plan=Plan(key=key), input_ids=batch.input_ids, positions=pos, forward_batch=batch)[0]


def written_outside(geo, before: dict, pool, loc) -> int:
    """Cache rows (MLA rows; index keys or scales) that differ from `before` (DsaCaches.snapshot) at slots outside
    `loc`, over every layer."""
    from registry import changed_slots

    allowed, n = set(loc.tolist()), 0
    for i in range(geo.n_layers):
        kv = pool.get_key_buffer(i).view(-1, geo.kv_cache_dim)
        n += len(changed_slots("kv_cache", before["kv"][i].view(-1, geo.kv_cache_dim), kv) - allowed)
    for b0, b1 in zip(before["index"], pool.index_key_cache.buffer):
        n += len(changed_slots("index_k_cache", b0, b1) - allowed)
    return n


def run(model, cfg, *, device="cpu", isa="cpu", steps=STEPS, replays=0, on_error="drain", seed=4) -> dict:
    """Every step of `steps` through the binding on the launches and on the reference backend; with replays,
    the routed step captured in a CUDA graph and replayed that many times (logits bitwise the eager step's)."""
    from sgl_amd_mono.glm53.runner_triton import layer_kinds

    geo = Glm53Geometry.from_hf(cfg)
    ref, built, spec = build_both(model, cfg, isa=isa, widths=sorted({len(s["ids"]) for s in steps.values()}),
                                  on_error=on_error)
    with routed(model, built, spec, [step_key(s) for s in steps.values()]):
        res = _run_steps(model, geo, ref, built, device, steps, replays, seed, layer_kinds(geo))
    # a width the launches did not build, and a step with input embeddings: SGLang's own forward (a recorder here)
    seen, keep = [], built._sglang_forward
    built._sglang_forward = lambda ids, pos, batch, *a, **k: seen.append((int(ids.shape[0]), "input_embeds" in k))
    unbuilt = max(built.widths) + 1
    built.forward(None, torch.zeros(unbuilt, dtype=torch.int64), torch.zeros(unbuilt, dtype=torch.int64), None)
    w = min(built.widths)
    built.forward(None, torch.zeros(w, dtype=torch.int64), torch.zeros(w, dtype=torch.int64), None,
                  input_embeds=torch.zeros(w, geo.hidden))
    built._sglang_forward = keep
    res["sglang_forward_ran_for"] = seen
    return res


def _run_steps(model, geo, ref, built, device, steps, replays, seed, kinds_of) -> dict:
    from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

    res = {"kinds": kinds_of, "steps": {}}
    for name, s in steps.items():
        max_ctx = max(256, max(s["seq_lens"]) + s["tokens"] + 1)  # 256: the CPU cases' pool (their draws pinned)
        got_c, want_c = (DsaCaches(geo, kv_dtype=s["kv"], bs=len(s["seq_lens"]) + s["pad_rows"], max_ctx=max_ctx,
                                   seed=seed, device=device) for _ in range(2))
        before = got_c.snapshot()
        outs = []
        for caches, run in ((got_c, "launch"), (want_c, "reference")):
            batch, backend, pos = make_step(caches, seq_lens=s["seq_lens"], tokens=s["tokens"],
                                            input_ids=torch.tensor(s["ids"]), pad_rows=s["pad_rows"],
                                            capture_hidden=s["capture"])
            with forward_context(ForwardContext(attn_backend=backend)):
                if run == "launch":
                    outs.append(model.forward(batch.input_ids, pos, batch))
                else:
                    outs.append(reference_step(ref, s, batch, pos))
        built.check_error()
        got, want = outs
        outside = written_outside(geo, before, got_c.pool, batch.out_cache_loc)
        # its planted error: one byte of the last slot's MLA row in layer 0 changed (a write outside out_loc)
        kv0 = got_c.pool.get_key_buffer(0).view(-1, geo.kv_cache_dim)
        kv0_last = kv0[-1].clone()
        kv0.view(torch.uint8)[-1, 0] ^= 1
        outside_planted = written_outside(geo, before, got_c.pool, batch.out_cache_loc)
        kv0[-1] = kv0_last
        del before
        if replays:  # the routed step (launches and step-table copies) captured, replayed on the same pool
            batch, backend, pos = make_step(got_c, seq_lens=s["seq_lens"], tokens=s["tokens"],
                                            input_ids=torch.tensor(s["ids"]), pad_rows=s["pad_rows"],
                                            capture_hidden=s["capture"])
            with forward_context(ForwardContext(attn_backend=backend)):
                g = torch.cuda.CUDAGraph()
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    model.forward(batch.input_ids, pos, batch)
                torch.cuda.current_stream().wait_stream(side)
                with torch.cuda.graph(g):
                    gout = model.forward(batch.input_ids, pos, batch)
                same = True
                for _ in range(replays):
                    g.replay()
                    torch.cuda.synchronize()
                    same &= bool(torch.equal(gout.next_token_logits, got.next_token_logits))
            built.check_error()
            res.setdefault("replays_equal", {})[name] = same
        live = sum(1 for _ in s["seq_lens"]) * s["tokens"]
        loc = batch.out_cache_loc[:live]
        v = {"step.logits.rel": nm.rel(got.next_token_logits[:live], want.next_token_logits[:live]),
             "step.logits.top1": float((got.next_token_logits[:live].argmax(-1)
                                        == want.next_token_logits[:live].argmax(-1)).float().mean())}
        if s["capture"]:
            v["step.hidden.rel"] = nm.rel(got.hidden_states[:live], want.hidden_states[:live])
        kv, ik = [], []
        for i in range(geo.n_layers):
            g = got_c.pool.get_key_buffer(i).view(-1, geo.kv_cache_dim)[loc].float()
            w = want_c.pool.get_key_buffer(i).view(-1, geo.kv_cache_dim)[loc].float()
            kv.append(nm.max_abs(g, w))
            if geo.runs_indexer[i]:
                ik.append(nm.max_abs(index_rows(got_c.pool, i, loc), index_rows(want_c.pool, i, loc)))
        v["step.kv.max_abs"], v["step.index_k.max_abs"] = max(kv), max(ik)
        res.setdefault("per_layer", {})[name] = {"kv": kv, "index_k": ik}
        # planted errors, one a bound: one row's logits x1.02, one row's hidden state x1.02, one written MLA cache
        # value +0.1 (+1 in an fp8 cache) and one index-key value +1 (the last layer's)
        bad = got.next_token_logits[:live].clone()
        bad[0] *= 1.02
        ctrl = {"step.logits.rel": nm.rel(bad, want.next_token_logits[:live])}
        if s["capture"]:
            h = got.hidden_states[:live].clone()
            h[0] *= 1.02
            ctrl["step.hidden.rel"] = nm.rel(h, want.hidden_states[:live])
        bump = 1.0 if s["kv"] == torch.float8_e4m3fn else 0.1  # a few of the cache dtype's steps at ~1-4
        g[0, 0] += bump
        ctrl["step.kv.max_abs"] = nm.max_abs(g, w)
        last = max(geo.indexer_layers)
        k = index_rows(got_c.pool, last, loc)
        k[0, 0] += 1.0
        ctrl["step.index_k.max_abs"] = nm.max_abs(k, index_rows(want_c.pool, last, loc))
        # layer 0's rows (nothing upstream of them differs: its embedding rows, norm, qkv_a and index key) and their
        # planted errors (a cache value + bump, an index-key value +1)
        g0 = got_c.pool.get_key_buffer(0).view(-1, geo.kv_cache_dim)[loc].float()
        g0[0, 0] += bump
        k0 = index_rows(got_c.pool, 0, loc)
        k0[0, 0] += 1.0
        layer0 = {"kv": kv[0], "index_k": ik[0],
                  "kv_planted": nm.max_abs(g0, want_c.pool.get_key_buffer(0).view(-1, geo.kv_cache_dim)[loc].float()),
                  "index_k_planted": nm.max_abs(k0, index_rows(want_c.pool, 0, loc))}
        res["steps"][name] = {"values": v, "controls": ctrl, "layer0": layer0,
                              "logits_shape": list(got.next_token_logits.shape),
                              "hidden_is_none": got.hidden_states is None, "written_outside_out_loc": outside,
                              "written_outside_planted": outside_planted}
        del got_c, want_c
    return res


if __name__ == "__main__":
    # argv[1] "fp8": SGLang's --kv-cache-dtype fp8_e4m3 (a 576-value-row decode backend) published before the build,
    # and every step's pool fp8
    assert os.environ.get("TRITON_INTERPRET") == "1"
    kv = sys.argv[1] if len(sys.argv) > 1 else "bf16"
    if kv == "fp8":
        from tiny_glm53 import init_single_process_dist

        init_single_process_dist(kv_cache_dtype="fp8_e4m3", dsa_decode_backend="triton")
    model, cfg = build_tiny_model(is_fp8=True, seed=0, **LAUNCH_TINY)
    steps = STEPS if kv == "bf16" else {k: dict(s, kv=torch.float8_e4m3fn) for k, s in STEPS.items()}
    print(json.dumps(run(model, cfg, steps=steps)))
