"""The torch reference's stages against SGLang's own modules on CPU, in bf16 and block-FP8.

Each comparison has a bound in `reference_bounds.BOUNDS` and a planted error that must fail it.
What cannot run on CPU: SGLang's FP8 MoE (`sglang::inplace_fused_experts` is registered for CUDA
only), so the FP8 reference MoE is compared with SGLang's unquantized MoE module (bf16 model)
holding the dequantized FP8 experts. SGLang's FP8 linears (Triton) are pinned in
test_reference_triton.py under Triton's interpreter.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

from sgl_amd_mono.backends import reference as ref
from sgl_amd_mono.glm53.config import Glm53Geometry
from sgl_amd_mono.glm53.layer import _absorb, route
from sgl_amd_mono.glm53.reference_bounds import BOUNDS, within
from sgl_amd_mono.glm53.weights import bind_model

ROWS = 5


def _x(seed: int, d: int = 256, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(ROWS, d, generator=torch.Generator().manual_seed(seed)) * scale).to(torch.bfloat16)


def _check(name: str, ours: torch.Tensor, sglang: torch.Tensor, planted: torch.Tensor) -> None:
    ok, value = within(name, ours, sglang)
    assert ok, f"{name} = {value:.3g} > bound {BOUNDS[name]}"
    bad_ok, bad_value = within(name, planted, sglang)
    assert not bad_ok, f"{name}: the planted error ({bad_value:.3g}) passes the bound {BOUNDS[name]}"
    print(f"{name}: {value:.3g} (bound {BOUNDS[name]}, control {bad_value:.3g})")


@pytest.fixture(scope="module", params=["fp8", "bf16"])
def bound(request, tiny_fp8, tiny_bf16):
    model, cfg = tiny_fp8 if request.param == "fp8" else tiny_bf16
    geo = Glm53Geometry.from_hf(cfg)
    return request.param, model, geo, bind_model(model, geo)


def _batch(mode: str, ids: torch.Tensor):
    """A real ForwardBatch as the step hands `model.logits_processor` (runner.py's tail): DECODE, one row
    per request; TARGET_VERIFY, ROWS draft rows of one request with the hidden states captured."""
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch, ForwardMode

    is_verify = mode == "target_verify"
    bs = 1 if is_verify else ROWS
    lens = torch.full((bs,), 40, dtype=torch.int64)
    return ForwardBatch(
        forward_mode=ForwardMode.TARGET_VERIFY if is_verify else ForwardMode.DECODE, batch_size=bs,
        input_ids=ids, req_pool_indices=torch.arange(bs), seq_lens=lens, out_cache_loc=torch.arange(ROWS) + 1,
        seq_lens_sum=int(lens.sum()), positions=torch.arange(ROWS) + 40,
        capture_hidden_mode=CaptureHiddenMode.FULL if is_verify else CaptureHiddenMode.NULL,
    )


@torch.no_grad()
def test_embedding(bound):
    _, model, geo, w = bound
    ids = torch.tensor([0, 3, 77, 255, 9])
    _check("reference.embed.max_abs", torch.nn.functional.embedding(ids, w.embed),
           model.model.embed_tokens(ids), torch.nn.functional.embedding((ids + 1) % geo.vocab, w.embed))


@pytest.mark.parametrize("mode", ["decode", "target_verify"])
@torch.no_grad()
def test_lm_head_logits(bound, mode):
    """The step's logits (runner.py: `model.logits_processor(ids, normed, lm_head, forward_batch)`, SGLang's
    LogitsProcessor) are the bf16 lm_head GEMM rounded to bf16, then fp32: no scale, softcap or fp32 head."""
    _, model, geo, _ = bound
    ids = torch.tensor([0, 3, 77, 255, 9])
    h = _x(1, geo.hidden)
    weight = model.lm_head.weight
    out = model.logits_processor(ids, h, model.lm_head, _batch(mode, ids))
    theirs = out.next_token_logits
    assert theirs.dtype == torch.float32 and theirs.shape == (ROWS, geo.vocab)
    if mode == "target_verify":  # the verify step hands the post-norm hidden rows back as they came in
        assert torch.equal(out.hidden_states, h)
    else:
        assert out.hidden_states is None
    ours = torch.nn.functional.linear(h, weight).float()
    row0 = weight.clone()
    row0[0] *= 1.5
    _check("reference.lm_head.max_abs", ours, theirs, torch.nn.functional.linear(h, row0).float())
    # The fp32 lm_head (no bf16 rounding of the logits) is another head: it must fail the bitwise bound too.
    fp32_ok, fp32_value = within("reference.lm_head.max_abs", h.float() @ weight.float().t(), theirs)
    assert not fp32_ok, f"the fp32 lm_head ({fp32_value:.3g}) passes the bound {BOUNDS['reference.lm_head.max_abs']}"
    print(f"reference.lm_head.max_abs {mode}: fp32-head control {fp32_value:.3g}")


@torch.no_grad()
def test_rms_norms(bound):
    _, model, geo, w = bound
    layer = model.model.layers[1]
    x, res = _x(2), _x(3)
    ours, _ = ref.rms_norm(x, w.layers[1].attn.input_norm, geo.rms_eps)
    swapped, _ = ref.rms_norm(x, w.layers[1].attn.post_norm, geo.rms_eps)
    _check("reference.rms_norm.max_abs", ours, layer.input_layernorm(x), swapped)
    ours, ours_res = ref.rms_norm(x, w.layers[1].attn.input_norm, geo.rms_eps, res)
    theirs, theirs_res = layer.input_layernorm(x.clone(), res.clone())
    assert torch.equal(ours_res, theirs_res)
    swapped, _ = ref.rms_norm(x, w.layers[1].attn.post_norm, geo.rms_eps, res)
    _check("reference.rms_norm_residual.max_abs", ours, theirs, swapped)


@torch.no_grad()
def test_linears_and_rope(bound):
    kind, model, geo, w = bound
    a = model.model.layers[1].self_attn
    aw = w.layers[1].attn
    x = _x(4)
    # fp8: SGLang's block-FP8 Triton GEMM is pinned in test_reference_triton.py (interpreter subprocess).
    if kind == "bf16":
        ours = ref.linear(x, aw.qkv_a, aw.qkv_a_s)
        theirs, _ = a.fused_qkv_a_proj_with_mqa(x)
        _check("reference.linear_bf16.max_abs", ours, theirs, ref.linear(x, aw.qkv_a * 1.01, None))
    pos = torch.tensor([0, 1, 17, 300, 4000])
    q = _x(5, 4 * 64).view(ROWS, 4, 64)
    k = _x(6, 64).view(ROWS, 1, 64)
    tq, tk = a.rotary_emb(pos, q.clone(), k.clone())
    cs = w.layers[1].cos_sin_cache[pos]
    ours = torch.cat((ref.rope_interleaved(q, cs), ref.rope_interleaved(k, cs)), dim=1)
    shifted = torch.cat((ref.rope_interleaved(q, w.layers[1].cos_sin_cache[pos + 1]), ref.rope_interleaved(k, cs)), dim=1)
    _check("reference.rope.max_rel", ours, torch.cat((tq, tk), dim=1), shifted)


@contextlib.contextmanager
def _swapped_in(targets, values):
    """SGLang's parameters `targets` hold `values` inside the block, their own values again after it."""
    saved = [t.clone() for t in targets]
    for t, v in zip(targets, values):
        t.copy_(v)
    try:
        yield
    finally:
        for t, v in zip(targets, saved):
            t.copy_(v)


@torch.no_grad()
def test_dense_mlp(bound, tiny_bf16):
    kind, model, geo, w = bound
    d = w.layers[0].ffn
    x = _x(7)
    ours = ref.dense_mlp_block_fp8(x, d.gate_up, d.gate_up_s, d.down, d.down_s)
    if kind == "bf16":
        planted = ref.dense_mlp_block_fp8(x, d.gate_up, None, d.down * 1.2, None)
        _check("reference.dense_mlp.max_rel", ours, model.model.layers[0].mlp(x), planted)
        return
    # SGLang's FP8 dense MLP quantizes activations with the interpreter's mis-rounding (above), so
    # its unquantized DeepseekV2MLP (bf16 model) holding the dequantized FP8 weights is the oracle.
    planted = ref.dense_mlp_block_fp8(x, d.gate_up, d.gate_up_s, d.down, d.down_s * 1.2)
    mlp = tiny_bf16[0].model.layers[0].mlp
    targets = (mlp.gate_up_proj.weight, mlp.down_proj.weight)
    values = [ref.dequant_block_fp8(d.gate_up, d.gate_up_s).bfloat16(), ref.dequant_block_fp8(d.down, d.down_s).bfloat16()]
    with _swapped_in(targets, values):
        theirs = mlp(x)
    _check("reference.dense_mlp_fp8.max_rel", ours, theirs, planted)


@torch.no_grad()
def test_router(bound):
    _, model, geo, w = bound
    from sglang.srt.layers.moe.topk import biased_grouped_topk_impl

    mw = w.layers[2].ffn
    x = _x(8)
    logits = x.float() @ mw.gate.float().t()
    theirs_logits = model.model.layers[2].mlp.gate(x)  # CPU: a bf16 GEMM with bf16 output
    _check("reference.router_logits.max_rel", logits, theirs_logits.float(), logits * 1.2)
    tw, tid = biased_grouped_topk_impl(
        x, logits, mw.bias, topk=geo.top_k, renormalize=True, num_expert_group=1, topk_group=1,
        routed_scaling_factor=geo.routed_scaling, apply_routed_scaling_factor_on_output=True,
    )
    weights, ids = route(geo, mw, x)
    order = torch.argsort(tid.long(), dim=1)
    ours_order = torch.argsort(ids[:, : geo.top_k].long(), dim=1)
    ours_ids, theirs_ids = ids[:, : geo.top_k].gather(1, ours_order), tid.gather(1, order)
    _check("reference.route_ids.max_abs", ours_ids, theirs_ids, ours_ids.roll(1, dims=0))
    ours_w, theirs_w = weights[:, : geo.top_k].gather(1, ours_order), tw.gather(1, order)
    _check("reference.route_weights.max_abs", ours_w, theirs_w, ours_w * 1.2)
    assert torch.all(ids[:, geo.top_k] == geo.n_routed) and torch.all(weights[:, geo.top_k] == 1.0)


@torch.no_grad()
def test_moe(bound, tiny_bf16):
    kind, model, geo, w = bound
    mw = w.layers[1].ffn
    x = _x(9, scale=2.0)
    weights, ids = route(geo, mw, x)
    ours = ref.moe_block_fp8(x, mw.w13, mw.w13_s, mw.w2, mw.w2_s, weights, ids)
    planted = ref.moe_block_fp8(x, mw.w13, mw.w13_s, mw.w2, mw.w2_s, weights * 1.2, ids)
    bf16_mlp = tiny_bf16[0].model.layers[1].mlp
    if kind == "bf16":
        _check("reference.moe_bf16.max_rel", ours, bf16_mlp(x), planted)
        return
    # SGLang's FP8 MoE is CUDA-only: its unquantized MoE on the dequantized FP8 experts instead.
    e = geo.n_routed
    deq13 = torch.stack([ref.dequant_block_fp8(mw.w13[i], mw.w13_s[i]) for i in range(e + 1)]).to(torch.bfloat16)
    deq2 = torch.stack([ref.dequant_block_fp8(mw.w2[i], mw.w2_s[i]) for i in range(e + 1)]).to(torch.bfloat16)
    targets = (bf16_mlp.experts.w13_weight, bf16_mlp.experts.w2_weight,
               bf16_mlp.shared_experts.gate_up_proj.weight, bf16_mlp.shared_experts.down_proj.weight)
    with _swapped_in(targets, (deq13[:e], deq2[:e], deq13[e], deq2[e])):
        theirs = bf16_mlp(x)
    _check("reference.moe_fp8.max_rel", ours, theirs, planted)


@torch.no_grad()
def test_absorb_is_sglang_cpu_formula(bound):
    """W_UK absorb: forward_mla's CPU branch, bmm(q_nope^T, w_kc.to(bf16) * w_scale) (or the bf16 bmm)."""
    _, model, geo, w = bound
    a = model.model.layers[1].self_attn
    q = _x(10, 4 * geo.qk_nope).view(ROWS, 4, geo.qk_nope)
    wk = a.w_kc.to(torch.bfloat16) * a.w_scale if a.w_kc.dtype == torch.float8_e4m3fn else a.w_kc
    theirs = torch.bmm(q.transpose(0, 1), wk).transpose(0, 1)
    assert torch.equal(_absorb(q, w.layers[1].attn.w_kc, w.layers[1].attn.w_scale), theirs)
    assert not torch.equal(_absorb(q, w.layers[2].attn.w_kc, w.layers[2].attn.w_scale), theirs)
