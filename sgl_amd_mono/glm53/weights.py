"""Bind a loaded SGLang GlmMoeDsaForCausalLM's weights, in place, into the oracle's dataclasses.

Every tensor is SGLang's own parameter (no copy) except the few named in `COPIES`, each logged
with its size. Shapes and dtypes are checked against the geometry at the model's TP size (SGLang's shards as they
are: the embedding's and LM head's vocab rows, q_b's and W_UK / W_UV's heads, o_proj's input columns, every
expert's and the dense MLP's intermediate columns; the rest replicated); anything unexpected raises a ValueError
naming the tensor. Refused: aiter-shuffled weights (`is_shuffled` / `aiter_bpreshuffled`), which the oracle does
not read.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Optional, Union

import torch

from sgl_amd_mono.glm53.config import Glm53Geometry
from sgl_amd_mono.glm53.indexer import IndexerWeights
from sgl_amd_mono.glm53.layer import AttentionWeights, DenseWeights, MoeWeights

logger = logging.getLogger(__name__)

FP8 = torch.float8_e4m3fn
BF16 = torch.bfloat16

# The copies binding makes, and why. Everything else is SGLang's tensor itself.
COPIES = (
    "mlp.experts.w13/w2 (+scales) with mlp.shared_experts stacked as expert n_routed: "
    "SGLang leaves its shared_experts unfused where its fusion is off (CPU, TBO/SBO)",
)


@dataclasses.dataclass
class LayerWeights:
    attn: AttentionWeights
    ffn: Union[MoeWeights, DenseWeights]
    indexer: Optional[IndexerWeights]  # None on layers that reuse the previous top-k
    cos_sin_cache: torch.Tensor  # self_attn.rotary_emb.cos_sin_cache [max_pos, rope] = [cos | sin]


@dataclasses.dataclass
class ModelWeights:
    embed: torch.Tensor  # model.embed_tokens.weight [V / tp, D] bf16: this rank's vocab rows
    layers: list
    final_norm: torch.Tensor  # model.norm.weight [D] bf16
    copies_bytes: int  # bytes of the COPIES made
    tp: int = 1  # the TP size SGLang sharded the model for (model.embed_tokens.tp_size)


def _check(name: str, t: Optional[torch.Tensor], shape: tuple, dtypes: tuple) -> torch.Tensor:
    if t is None:
        raise ValueError(f"{name} is missing")
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name} has shape {tuple(t.shape)}, expected {tuple(shape)}")
    if t.dtype not in dtypes:
        raise ValueError(f"{name} has dtype {t.dtype}, expected one of {[str(d) for d in dtypes]}")
    return t


def _linear(name: str, mod: Any, n: int, k: int) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """(weight, weight_scale_inv or None) of an SGLang linear, checked: fp8 + block scales, or bf16."""
    if getattr(mod, "aiter_bpreshuffled", False) or getattr(mod.weight, "is_shuffled", False):
        raise ValueError(f"{name}.weight is aiter-preshuffled; the reference reads the [N, K] layout")
    w = _check(f"{name}.weight", mod.weight, (n, k), (FP8, BF16))
    if w.dtype == BF16:
        return w, None
    s = getattr(mod, "weight_scale_inv", None)
    return w, _check(f"{name}.weight_scale_inv", s, (-(-n // 128), -(-k // 128)), (torch.float32,))


def _norm(name: str, t: torch.Tensor, n: int) -> torch.Tensor:
    return _check(name, t, (n,), (BF16, torch.float32))


def bind_attention(geo: Glm53Geometry, layer: Any, i: int, *, tp: int = 1) -> AttentionWeights:
    p, a = f"model.layers.{i}", layer.self_attn
    heads = a.num_local_heads
    if heads != geo.shard(tp).heads:
        raise ValueError(f"{p}.self_attn.num_local_heads {heads} is not num_attention_heads {geo.heads} / tp {tp}")
    qkv_a, qkv_a_s = _linear(f"{p}.self_attn.fused_qkv_a_proj_with_mqa", a.fused_qkv_a_proj_with_mqa, geo.qkv_a_out, geo.hidden)
    q_b, q_b_s = _linear(f"{p}.self_attn.q_b_proj", a.q_b_proj, heads * geo.qk_head, geo.q_lora)
    o, o_s = _linear(f"{p}.self_attn.o_proj", a.o_proj, geo.hidden, heads * geo.v_head)
    w_kc = _check(f"{p}.self_attn.w_kc", a.w_kc, (heads, geo.qk_nope, geo.kv_lora), (FP8, BF16))
    w_vc = _check(f"{p}.self_attn.w_vc", a.w_vc, (heads, geo.kv_lora, geo.v_head), (w_kc.dtype,))
    w_scale = None
    if w_kc.dtype == FP8:
        s = getattr(a, "w_scale", None)
        if s is None or torch.as_tensor(s).numel() != 1:
            raise ValueError(f"{p}.self_attn.w_scale must be one per-tensor scale for an fp8 w_kc, got {s!r}")
        w_scale = float(s)
    return AttentionWeights(
        input_norm=_norm(f"{p}.input_layernorm.weight", layer.input_layernorm.weight, geo.hidden),
        qkv_a=qkv_a, qkv_a_s=qkv_a_s,
        q_a_norm=_norm(f"{p}.self_attn.q_a_layernorm.weight", a.q_a_layernorm.weight, geo.q_lora),
        kv_a_norm=_norm(f"{p}.self_attn.kv_a_layernorm.weight", a.kv_a_layernorm.weight, geo.kv_lora),
        q_b=q_b, q_b_s=q_b_s, w_kc=w_kc, w_vc=w_vc, o_proj=o, o_proj_s=o_s,
        post_norm=_norm(f"{p}.post_attention_layernorm.weight", layer.post_attention_layernorm.weight, geo.hidden),
        w_scale=w_scale,
    )


def bind_indexer(geo: Glm53Geometry, layer: Any, i: int) -> IndexerWeights:
    p, ix = f"model.layers.{i}.self_attn.indexer", layer.self_attn.indexer
    if getattr(ix, "is_neox_style", False) or getattr(ix.rotary_emb, "is_neox_style", False):
        raise ValueError(f"{p}.rotary_emb is neox-style; the reference implements GLM's interleaved indexer rope")
    if getattr(ix, "wk_weights_proj", None) is not None:
        raise ValueError(f"{p} holds SGLang's fused bf16 wk_weights_proj (its CUDA DSA indexer fusion); the "
                         "reference and the launches read the block-FP8 wk and weights_proj: set "
                         "SGLANG_DISABLE_DSA_INDEXER_FUSION=1")
    wq_b, wq_b_s = _linear(f"{p}.wq_b", ix.wq_b, geo.index_heads * geo.index_dim, geo.q_lora)
    wk, wk_s = _linear(f"{p}.wk", ix.wk, geo.index_dim, geo.hidden)
    wp, wp_s = _linear(f"{p}.weights_proj", ix.weights_proj, geo.index_heads, geo.hidden)
    if wp_s is not None:
        raise ValueError(f"{p}.weights_proj.weight is {wp.dtype}; SGLang keeps it bf16")
    kn = ix.k_norm
    return IndexerWeights(
        wq_b=wq_b, wq_b_s=wq_b_s, wk=wk, wk_s=wk_s, weights_proj=wp,
        k_norm_w=_norm(f"{p}.k_norm.weight", kn.weight, geo.index_dim),
        k_norm_b=_norm(f"{p}.k_norm.bias", kn.bias, geo.index_dim),
        k_norm_eps=float(kn.variance_epsilon), norm_dtype=kn.dtype,
        cos_sin_cache=ix.rotary_emb.cos_sin_cache,
        is_rotate=not (ix.use_dsa_indexer_fusion or ix.use_aiter_fused_fp8_writer),
    )


def bind_moe(geo: Glm53Geometry, layer: Any, i: int, *, tp: int = 1) -> tuple[MoeWeights, int]:
    """The routed experts, with SGLang's shared_experts stacked in as expert n_routed when SGLang left it
    unfused (the one copy: its TP shard, the same intermediate columns as every expert's). Returns (weights, bytes
    copied)."""
    p, mlp = f"model.layers.{i}.mlp", layer.mlp
    e, inter = geo.n_routed, geo.shard(tp).moe_inter
    ex = mlp.experts
    n_fused = int(getattr(mlp, "num_fused_shared_experts", 0) or 0)
    w13 = _check(f"{p}.experts.w13_weight", ex.w13_weight, (e + n_fused, 2 * inter, geo.hidden), (FP8, BF16))
    w2 = _check(f"{p}.experts.w2_weight", ex.w2_weight, (e + n_fused, geo.hidden, inter), (w13.dtype,))
    is_fp8 = w13.dtype == FP8
    w13_s = w2_s = None
    if is_fp8:
        w13_s = _check(f"{p}.experts.w13_weight_scale_inv", getattr(ex, "w13_weight_scale_inv", None),
                       (e + n_fused, -(-2 * inter // 128), -(-geo.hidden // 128)), (torch.float32,))
        w2_s = _check(f"{p}.experts.w2_weight_scale_inv", getattr(ex, "w2_weight_scale_inv", None),
                      (e + n_fused, -(-geo.hidden // 128), -(-inter // 128)), (torch.float32,))
    copied = 0
    if n_fused == 0 and geo.n_fused:
        sh = mlp.shared_experts
        if sh is None:
            raise ValueError(f"{p}.shared_experts is missing and no expert is fused in its place")
        gu, gu_s = _linear(f"{p}.shared_experts.gate_up_proj", sh.gate_up_proj, 2 * inter * geo.n_fused, geo.hidden)
        dn, dn_s = _linear(f"{p}.shared_experts.down_proj", sh.down_proj, geo.hidden, inter * geo.n_fused)
        if geo.n_fused != 1 or gu.dtype != w13.dtype:
            raise ValueError(f"{p}.shared_experts: {geo.n_fused} experts of {gu.dtype}, expected 1 of {w13.dtype}")
        w13, w2 = torch.cat((w13, gu[None])), torch.cat((w2, dn[None]))
        if is_fp8:
            w13_s, w2_s = torch.cat((w13_s, gu_s[None])), torch.cat((w2_s, dn_s[None]))
        copied = sum(t.numel() * t.element_size() for t in (w13, w2, w13_s, w2_s) if t is not None)
    gate = _check(f"{p}.gate.weight", mlp.gate.weight, (e, geo.hidden), (BF16,))
    bias = _check(f"{p}.gate.e_score_correction_bias", mlp.gate.e_score_correction_bias, (e,), (torch.float32, BF16))
    return MoeWeights(gate=gate, bias=bias, w13=w13, w13_s=w13_s, w2=w2, w2_s=w2_s), copied


def bind_dense(geo: Glm53Geometry, layer: Any, i: int, *, tp: int = 1) -> DenseWeights:
    """The dense MLP's TP shard (a replicated one, SGLang's fully data-parallel dense FFN, fails its shape check)."""
    p, mlp = f"model.layers.{i}.mlp", layer.mlp
    inter = geo.shard(tp).dense_inter
    gu, gu_s = _linear(f"{p}.gate_up_proj", mlp.gate_up_proj, 2 * inter, geo.hidden)
    dn, dn_s = _linear(f"{p}.down_proj", mlp.down_proj, geo.hidden, inter)
    return DenseWeights(gate_up=gu, gate_up_s=gu_s, down=dn, down_s=dn_s)


def bind_model(model: Any, geo: Glm53Geometry) -> ModelWeights:
    """All layers' weights of `model` (an SGLang GlmMoeDsaForCausalLM), checked against `geo` at the model's TP
    size (its embedding's `tp_size`)."""
    m = model.model
    tp = int(getattr(m.embed_tokens, "tp_size", 1))
    if len(m.layers) != geo.n_layers:
        raise ValueError(f"model.layers has {len(m.layers)} layers, hf_config says {geo.n_layers}")
    layers, copied = [], 0
    for i, layer in enumerate(m.layers):
        if geo.is_moe_layer(i):
            ffn, nbytes = bind_moe(geo, layer, i, tp=tp)
            copied += nbytes
        else:
            ffn = bind_dense(geo, layer, i, tp=tp)
        has_indexer = getattr(layer.self_attn, "indexer", None) is not None
        if has_indexer != geo.runs_indexer[i]:
            raise ValueError(f"model.layers.{i}.self_attn.indexer is {'present' if has_indexer else 'absent'}, "
                             f"the IndexShare schedule says runs_indexer={geo.runs_indexer[i]}")
        if i == 0 and not geo.runs_indexer[0]:
            raise ValueError("layer 0 reuses a top-k, but no earlier layer computes one")
        layers.append(LayerWeights(
            attn=bind_attention(geo, layer, i, tp=tp), ffn=ffn,
            indexer=bind_indexer(geo, layer, i) if has_indexer else None,
            cos_sin_cache=layer.self_attn.rotary_emb.cos_sin_cache,
        ))
    if copied:
        logger.info("sgl-amd-mono reference: weight copies %.2f MiB: %s", copied / 2**20, "; ".join(COPIES))
    embed = _check("model.embed_tokens.weight", m.embed_tokens.weight, (geo.shard(tp).vocab, geo.hidden), (BF16,))
    return ModelWeights(embed=embed, layers=layers, final_norm=_norm("model.norm.weight", m.norm.weight, geo.hidden),
                        copies_bytes=copied, tp=tp)
