"""GLM-5.3 refusals after load: the weights SGLang built must be what the launches read.

Shapes come from `Glm53Geometry.from_hf(hf_config)` and the model's own TP size, so the same checks run
on the real model and on the tiny CPU model of the tests. Each reason names the tensor, what it is and
what is accepted. Nothing here touches a weight's values.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from sgl_amd_mono.glm53.config import FP8_BLOCK, Glm53Geometry

FP8 = (torch.float8_e4m3fn, torch.float8_e4m3fnuz)  # gfx942 renormalizes to fnuz at load
BF16 = (torch.bfloat16,)
NORM_DTYPES = (torch.float32, torch.bfloat16)  # indexer k_norm: fp32, or bf16 on some aiter paths


def _names(dtypes: tuple) -> str:
    return "/".join(str(d).replace("torch.", "") for d in dtypes)


class _Checker:
    """Collects one reason a defect, for one model."""

    def __init__(self) -> None:
        self.reasons: list[str] = []

    def tensor(self, name: str, t: Optional[torch.Tensor], *, dtypes: tuple, shape: tuple) -> None:
        if t is None:
            self.reasons.append(f"{name} is missing; expected {_names(dtypes)} {list(shape)}")
            return
        if t.dtype not in dtypes:
            self.reasons.append(f"{name} dtype {str(t.dtype).replace('torch.', '')} is not {_names(dtypes)}")
        if tuple(t.shape) != tuple(shape):
            self.reasons.append(f"{name} shape {list(t.shape)} is not {list(shape)}")
        if getattr(t, "is_shuffled", False):
            self.reasons.append(f"{name} is shuffled (is_shuffled); the launches read the row-major layout")

    def block_fp8(self, name: str, module: Any, *, n: int, k: int) -> None:
        """A block-FP8 linear: weight e4m3 [n, k] row-major, weight_scale_inv fp32 [ceil(n/128), ceil(k/128)]."""
        if module is None:
            self.reasons.append(f"{name} is missing")
            return
        if getattr(module, "aiter_bpreshuffled", False):
            self.reasons.append(f"{name} is preshuffled (aiter_bpreshuffled); the launches read the row-major layout")
        self.tensor(f"{name}.weight", getattr(module, "weight", None), dtypes=FP8, shape=(n, k))
        blocks = (-(-n // FP8_BLOCK), -(-k // FP8_BLOCK))
        self.tensor(f"{name}.weight_scale_inv", getattr(module, "weight_scale_inv", None), dtypes=(torch.float32,), shape=blocks)


def model_reasons(*, model: Any, hf_config: Any, is_expert_fusion_required: bool) -> list[str]:
    """Every defect of a loaded GlmMoeDsaForCausalLM that the launches cannot read, as plain facts."""
    c = _Checker()
    try:
        geo = Glm53Geometry.from_hf(hf_config)
        embed = model.model.embed_tokens
        tp = int(embed.tp_size)
        shard = geo.shard(tp)
    except (AttributeError, TypeError, ValueError) as e:
        return [f"the model is not a GLM-5.3 model the launches can read: {type(e).__name__}: {e}"]
    for name, module in (("model.embed_tokens", embed), ("lm_head", getattr(model, "lm_head", None))):
        method = type(getattr(module, "quant_method", None)).__name__
        if method != "UnquantizedEmbeddingMethod":
            c.reasons.append(f"{name} quant_method {method} is not UnquantizedEmbeddingMethod (bf16 rows)")
        c.tensor(f"{name}.weight", getattr(module, "weight", None), dtypes=BF16, shape=(shard.vocab, geo.hidden))
    c.tensor("model.norm.weight", getattr(model.model.norm, "weight", None), dtypes=BF16, shape=(geo.hidden,))
    layers = model.model.layers
    if len(layers) != geo.n_layers:
        c.reasons.append(f"model.model.layers has {len(layers)} layers, not num_hidden_layers {geo.n_layers}")
    for i, layer in enumerate(layers[: geo.n_layers]):
        _attention(c, f"model.layers.{i}.self_attn", layer.self_attn, geo=geo, heads=shard.heads, runs_indexer=geo.runs_indexer[i])
        p = f"model.layers.{i}.mlp"
        if geo.is_moe_layer(i):
            _moe(c, p, layer.mlp, geo=geo, inter=shard.moe_inter, is_expert_fusion_required=is_expert_fusion_required)
        else:
            c.block_fp8(f"{p}.gate_up_proj", getattr(layer.mlp, "gate_up_proj", None), n=2 * shard.dense_inter, k=geo.hidden)
            c.block_fp8(f"{p}.down_proj", getattr(layer.mlp, "down_proj", None), n=geo.hidden, k=shard.dense_inter)
    return c.reasons


def _attention(c: _Checker, p: str, attn: Any, *, geo: Glm53Geometry, heads: int, runs_indexer: bool) -> None:
    c.block_fp8(f"{p}.fused_qkv_a_proj_with_mqa", getattr(attn, "fused_qkv_a_proj_with_mqa", None), n=geo.qkv_a_out, k=geo.hidden)
    c.block_fp8(f"{p}.q_b_proj", getattr(attn, "q_b_proj", None), n=heads * geo.qk_head, k=geo.q_lora)
    c.block_fp8(f"{p}.o_proj", getattr(attn, "o_proj", None), n=geo.hidden, k=heads * geo.v_head)
    # W_UK / W_UV after SGLang's post_load_weights: bf16 (CUDA), or per-tensor fp8 with a scalar w_scale (ROCm, CPU)
    for name, shape in (("w_kc", (heads, geo.qk_nope, geo.kv_lora)), ("w_vc", (heads, geo.kv_lora, geo.v_head))):
        c.tensor(f"{p}.{name}", getattr(attn, name, None), dtypes=BF16 + FP8, shape=shape)
    if getattr(attn, "w_kc", None) is not None and attn.w_kc.dtype in FP8:
        scale = getattr(attn, "w_scale", None)
        if not isinstance(scale, torch.Tensor) or scale.numel() != 1:
            c.reasons.append(f"{p}.w_scale {scale!r} is not one fp32 scale for the fp8 w_kc / w_vc")
    indexer = getattr(attn, "indexer", None)
    if runs_indexer and indexer is None:
        c.reasons.append(f"{p}.indexer is missing on a layer that runs its indexer (config.indexer_types 'full')")
    elif runs_indexer:
        q = f"{p}.indexer"
        c.block_fp8(f"{q}.wq_b", getattr(indexer, "wq_b", None), n=geo.index_heads * geo.index_dim, k=geo.q_lora)
        c.block_fp8(f"{q}.wk", getattr(indexer, "wk", None), n=geo.index_dim, k=geo.hidden)
        proj = getattr(indexer, "weights_proj", None)
        c.tensor(f"{q}.weights_proj.weight", getattr(proj, "weight", None), dtypes=BF16, shape=(geo.index_heads, geo.hidden))
        norm = getattr(indexer, "k_norm", None)
        if type(norm).__name__ != "LayerNorm":  # SGLang's LayerNorm (weight and bias), not RMSNorm
            c.reasons.append(f"{q}.k_norm {type(norm).__name__} is not LayerNorm")
        for part in ("weight", "bias"):
            c.tensor(f"{q}.k_norm.{part}", getattr(norm, part, None), dtypes=NORM_DTYPES, shape=(geo.index_dim,))


def _moe(c: _Checker, p: str, mlp: Any, *, geo: Glm53Geometry, inter: int, is_expert_fusion_required: bool) -> None:
    gate = getattr(mlp, "gate", None)
    c.tensor(f"{p}.gate.weight", getattr(gate, "weight", None), dtypes=BF16, shape=(geo.n_routed, geo.hidden))
    c.tensor(f"{p}.gate.e_score_correction_bias", getattr(gate, "e_score_correction_bias", None),
             dtypes=(torch.float32,), shape=(geo.n_routed,))
    experts = getattr(mlp, "experts", None)
    fused = int(getattr(experts, "num_fused_shared_experts", 0) or 0)
    if is_expert_fusion_required and fused != geo.n_fused:
        c.reasons.append(
            f"{p}.experts num_fused_shared_experts {fused} is not n_shared_experts {geo.n_fused} "
            f"(shared_experts as expert {geo.n_routed}, as SGLang fuses it on gfx942+ and sm_80+)"
        )
    if getattr(experts, "moe_ep_size", 1) != 1:
        c.reasons.append(f"{p}.experts moe_ep_size {experts.moe_ep_size} is not 1")
    n = geo.n_routed + fused
    blocks_i, blocks_h = -(-inter // FP8_BLOCK), -(-geo.hidden // FP8_BLOCK)
    for name, shape, dtypes in (
        ("w13_weight", (n, 2 * inter, geo.hidden), FP8),
        ("w2_weight", (n, geo.hidden, inter), FP8),
        ("w13_weight_scale_inv", (n, 2 * blocks_i, blocks_h), (torch.float32,)),
        ("w2_weight_scale_inv", (n, blocks_h, blocks_i), (torch.float32,)),
    ):
        c.tensor(f"{p}.experts.{name}", getattr(experts, name, None), dtypes=dtypes, shape=shape)
    if not fused:  # the unfused expert, a TP MLP of its own (CPU; TBO/SBO)
        shared = getattr(mlp, "shared_experts", None)
        if shared is None:
            c.reasons.append(f"{p}.shared_experts is missing and no expert is fused in its place")
        else:
            c.block_fp8(f"{p}.shared_experts.gate_up_proj", getattr(shared, "gate_up_proj", None), n=2 * inter * geo.n_fused, k=geo.hidden)
            c.block_fp8(f"{p}.shared_experts.down_proj", getattr(shared, "down_proj", None), n=geo.hidden, k=inter * geo.n_fused)
