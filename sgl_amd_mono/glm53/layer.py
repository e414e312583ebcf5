"""GLM-5.3 layer stages on the torch oracle, over one TP rank's weights in SGLang's layouts.

The attention half (input norm through o_proj, writing this step's MLA cache rows) and the FFN
halves (MoE with the fused expert, dense MLP) of `DeepseekV2DecoderLayer`, in the order
SGLang computes them (`../shared/reference/sglang-glm53.md` §2). The launches are checked
against these functions; the reference forward chains them.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch

from sgl_amd_mono.backends import reference as ref
from sgl_amd_mono.glm53.config import Glm53Geometry


@dataclasses.dataclass
class AttentionWeights:
    """One layer's MLA weights on one rank (SGLang names in comments); H_loc local heads."""

    input_norm: torch.Tensor  # input_layernorm.weight [D] bf16
    qkv_a: torch.Tensor  # fused_qkv_a_proj_with_mqa.weight [q_lora + kv_lora + rope, D] fp8
    qkv_a_s: Optional[torch.Tensor]  # its weight_scale_inv [ceil(/128), D/128] f32; None for bf16 weights
    q_a_norm: torch.Tensor  # q_a_layernorm.weight [q_lora] bf16
    kv_a_norm: torch.Tensor  # kv_a_layernorm.weight [kv_lora] bf16
    q_b: torch.Tensor  # q_b_proj.weight [H_loc * (nope + rope), q_lora] fp8
    q_b_s: Optional[torch.Tensor]  # its weight_scale_inv f32 (None: bf16)
    w_kc: torch.Tensor  # [H_loc, nope, kv_lora] bf16 (CUDA) or fp8 with w_scale (ROCm/CPU)
    w_vc: torch.Tensor  # [H_loc, kv_lora, v_head] same dtype as w_kc
    o_proj: torch.Tensor  # o_proj.weight [D, H_loc * v_head] fp8
    o_proj_s: Optional[torch.Tensor]  # its weight_scale_inv f32 (None: bf16)
    post_norm: torch.Tensor  # post_attention_layernorm.weight [D] bf16
    w_scale: Optional[float] = None  # per-tensor scale of an fp8 w_kc / w_vc, else None


@dataclasses.dataclass
class MoeWeights:
    """One MoE layer's FFN on one rank; expert n_routed is the fused expert."""

    gate: torch.Tensor  # mlp.gate.weight [E, D] bf16
    bias: torch.Tensor  # mlp.gate.e_score_correction_bias [E] f32
    w13: torch.Tensor  # mlp.experts.w13_weight [E + 1, 2 * I_loc, D] fp8 (gate rows, then up)
    w13_s: torch.Tensor  # w13_weight_scale_inv [E + 1, 2 * I_loc / 128, D / 128] f32
    w2: torch.Tensor  # mlp.experts.w2_weight [E + 1, D, I_loc] fp8
    w2_s: torch.Tensor  # w2_weight_scale_inv [E + 1, D / 128, I_loc / 128] f32


@dataclasses.dataclass
class DenseWeights:
    """A dense layer's MLP on one rank (block-FP8)."""

    gate_up: torch.Tensor  # mlp.gate_up_proj.weight [2 * I_loc, D] fp8
    gate_up_s: torch.Tensor
    down: torch.Tensor  # mlp.down_proj.weight [D, I_loc] fp8
    down_s: torch.Tensor


@dataclasses.dataclass
class AttentionOut:
    """What the attention half hands on: the partial o_proj sum and the tensors later stages read."""

    o: torch.Tensor  # [R, D] bf16: this rank's o_proj partial sum (all-reduced across ranks)
    residual: torch.Tensor  # [R, D] bf16: the residual after the input norm's add
    x_normed: torch.Tensor  # [R, D] bf16: input_layernorm output (the indexer's x)
    q_lora: torch.Tensor  # [R, q_lora] bf16: q after q_a_layernorm (the indexer's q input)
    kv_rows: torch.Tensor  # [R, kv_lora + rope] in the cache dtype: the rows written this step


def layer_tensors(*parts) -> dict:
    """The tensors of weight dataclasses (AttentionWeights, MoeWeights, ...) by field name: the names a
    launch kind's table gives its weights. No copy is made."""
    out = {}
    for p in parts:
        out.update({f.name: getattr(p, f.name) for f in dataclasses.fields(p)})
    return out


def _absorb(x: torch.Tensor, w: torch.Tensor, w_scale: Optional[float]) -> torch.Tensor:
    """Per-head x @ w as SGLang's forward_mla: x [R, H, a] bf16, w [H, a, b] -> [R, H, b] bf16.

    A bf16 bmm (f32 accumulate). An fp8 w is first dequantized to bf16 as `w.to(bf16) * w_scale`
    (SGLang's CPU branch, forward_mla.py:562-568); ROCm instead runs an FP8 bmm with the
    activation quantized, which this oracle does not reproduce.
    """
    if w.dtype != torch.bfloat16:
        w = w.to(torch.bfloat16) * (1.0 if w_scale is None else float(w_scale))
    return torch.bmm(x.transpose(0, 1).to(torch.bfloat16), w).transpose(0, 1)


def attention_half(
    geo: Glm53Geometry,
    w: AttentionWeights,
    *,
    hidden: torch.Tensor,
    residual: Optional[torch.Tensor],
    cos_sin: torch.Tensor,
    kv_cache: torch.Tensor,
    out_loc: torch.Tensor,
    topk_slots: Optional[torch.Tensor],
    select=None,
) -> AttentionOut:
    """Input norm → fused qkv_a → q/kv norms → q_b → W_UK absorb + rope → cache write →
    sparse MLA over `topk_slots` → W_UV → o_proj (partial).

    hidden: [R, D] bf16 (the previous layer's FFN output, all-reduced) ; residual: [R, D] bf16 or
    None (layer 0) ; cos_sin: [R, rope] f32 rows of SGLang's cos_sin_cache at the rows' positions ;
    kv_cache: [S, kv_lora + rope] bf16 or fp8, written in place at out_loc: [R] int64 (pad rows
    point at slot 0) ; topk_slots: [R, K] int32 physical slots, -1 none. `select`, if given, is
    called as select(x_normed, q_lora) after the cache write and returns the slots (an indexer
    layer's own top-k).
    """
    r = hidden.shape[0]
    h_loc = w.q_b.shape[0] // geo.qk_head
    x, residual = ref.rms_norm(hidden, w.input_norm, geo.rms_eps, residual)
    qkv = ref.linear(x, w.qkv_a, w.qkv_a_s)  # (R, q_lora + kv_lora + rope)
    q, k_nope, k_pe = qkv.split([geo.q_lora, geo.kv_lora, geo.qk_rope], dim=-1)
    q_lora, _ = ref.rms_norm(q.contiguous(), w.q_a_norm, geo.rms_eps)
    k_nope, _ = ref.rms_norm(k_nope.contiguous(), w.kv_a_norm, geo.rms_eps)
    q_full = ref.linear(q_lora, w.q_b, w.q_b_s).view(r, h_loc, geo.qk_head)
    q_nope, q_pe = q_full.split([geo.qk_nope, geo.qk_rope], dim=-1)  # (R, H, nope), (R, H, rope)
    q_nope_out = _absorb(q_nope, w.w_kc, w.w_scale)  # (R, H, kv_lora)
    q_pe = ref.rope_interleaved(q_pe, cos_sin)
    k_pe = ref.rope_interleaved(k_pe.reshape(r, 1, geo.qk_rope), cos_sin).view(r, geo.qk_rope)
    kv_rows = torch.cat((k_nope, k_pe), dim=-1).to(kv_cache.dtype)  # (R, kv_lora + rope)
    last = ref.last_writers(out_loc)  # pad rows all land in slot 0: the last one's row is kept
    kv_cache[out_loc.long()[last]] = kv_rows[last]
    if select is not None:
        topk_slots = select(x, q_lora)
    q_cat = torch.cat((q_nope_out, q_pe), dim=-1)  # (R, H, kv_lora + rope)
    attn = ref.sparse_mla_decode(q_cat, kv_cache, topk_slots, scale=geo.softmax_scale, v_dim=geo.kv_lora)
    v = _absorb(attn, w.w_vc, w.w_scale).reshape(r, h_loc * geo.v_head)  # (R, H * v_head)
    o = ref.linear(v, w.o_proj, w.o_proj_s)
    return AttentionOut(o=o, residual=residual, x_normed=x, q_lora=q_lora, kv_rows=kv_rows)


def route(geo: Glm53Geometry, w: MoeWeights, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Router: f32 logits of the bf16 gate, then biased top-k with the fused expert.
    x: [R, D] bf16. Returns (weights [R, top_k + 1] f32, ids [R, top_k + 1] int32)."""
    logits = x.float() @ w.gate.float().t()  # (R, E) f32
    return ref.biased_topk(
        logits, w.bias, top_k=geo.top_k, routed_scaling=geo.routed_scaling, n_fused=geo.n_fused
    )


def moe_half(
    geo: Glm53Geometry, w: MoeWeights, post_norm: torch.Tensor, *, attn_o: torch.Tensor, residual: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """Residual add + post-attention norm → router → routed + fused experts (this rank's partial).

    attn_o: [R, D] bf16 (all-reduced o_proj) ; residual: [R, D] bf16.
    Returns (ffn out [R, D] bf16 partial, residual [R, D] bf16, {"weights", "ids", "x"}).
    """
    x, residual = ref.rms_norm(attn_o, post_norm, geo.rms_eps, residual)
    weights, ids = route(geo, w, x)
    out = ref.moe_block_fp8(x, w.w13, w.w13_s, w.w2, w.w2_s, weights, ids)
    return out, residual, {"weights": weights, "ids": ids, "x": x}


def dense_half(
    geo: Glm53Geometry, w: DenseWeights, post_norm: torch.Tensor, *, attn_o: torch.Tensor, residual: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Residual add + post-attention norm → dense block-FP8 MLP (this rank's partial)."""
    x, residual = ref.rms_norm(attn_o, post_norm, geo.rms_eps, residual)
    return ref.dense_mlp_block_fp8(x, w.gate_up, w.gate_up_s, w.down, w.down_s), residual


def ffn_half(geo: Glm53Geometry, w, post_norm: torch.Tensor, *, attn_o: torch.Tensor,
             residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """`moe_half` for MoeWeights, `dense_half` for DenseWeights (aux {}): (out, residual, aux)."""
    if isinstance(w, DenseWeights):
        return (*dense_half(geo, w, post_norm, attn_o=attn_o, residual=residual), {})
    return moe_half(geo, w, post_norm, attn_o=attn_o, residual=residual)


def _outputs(a: "AttentionOut", out, res, aux) -> dict:
    """A layer kind's outputs by table name (the MoE's routing where the FFN is the MoE)."""
    d = {"out": out, "residual_out": res, "o": a.o, "kv_rows": a.kv_rows}
    if aux:
        d.update(expert_ids=aux["ids"], expert_weights=aux["weights"])
    return d


def shared_layer(
    geo: Glm53Geometry,
    attn_w: AttentionWeights,
    moe_w,
    *,
    hidden: torch.Tensor,
    residual: torch.Tensor,
    cos_sin: torch.Tensor,
    kv_cache: torch.Tensor,
    out_loc: torch.Tensor,
    topk_slots: torch.Tensor,
) -> dict[str, torch.Tensor]:
    """One MoE layer that reuses the previous top-k, on one rank with TP 1 semantics (the o_proj
    partial is the full sum). The "shared" launch computes exactly this.

    Returns the shared kind's outputs by their table names (`kinds/halves.py`): {"out": [R, D] bf16 FFN
    output, "residual_out": [R, D] bf16, "o": [R, D] bf16 o_proj, "expert_ids": [R, k+1] int32,
    "expert_weights": [R, k+1] f32}, and "kv_rows": [R, kv_lora + rope] (the cache rows written).
    """
    a = attention_half(
        geo, attn_w, hidden=hidden, residual=residual, cos_sin=cos_sin,
        kv_cache=kv_cache, out_loc=out_loc, topk_slots=topk_slots,
    )
    return _outputs(a, *ffn_half(geo, moe_w, attn_w.post_norm, attn_o=a.o, residual=a.residual))


def sum_in_rank_order(parts: list) -> torch.Tensor:
    """Rank partials [R, D] bf16 summed in f32 in rank order 0, 1, ..., rounded to bf16 once: what every
    rank holds after the launches' cross-rank reduction (the same bits on every rank)."""
    acc = parts[0].float()
    for p in parts[1:]:
        acc = acc + p.float()
    return acc.to(torch.bfloat16)


def layer_ranks(geo: Glm53Geometry, shards: list, *, select=None, **attn_inputs) -> dict[str, torch.Tensor]:
    """A layer at TP = len(shards) from every rank's weights, shards [(attention weights, FFN weights)] in rank
    order (cut from one full draw: `launch_inputs.shard_weights`, the check registry's rank draws): each rank's
    attention half gives its o_proj partial, summed in rank order; each rank's FFN half (MoE or dense) on that sum
    gives its partial, summed in rank order. `select(x, q_lora)`: an indexer layer's own top-k, replicated on every
    rank (run once: every rank's inputs to it are the same bits). attn_inputs: attention_half's (hidden, residual,
    cos_sin, kv_cache, out_loc, topk_slots). Outputs as shared_layer's, "topk" where selected, and "o_parts" /
    "out_parts" (the rank partials)."""
    chosen: dict = {}

    def once(x, q_lora):
        if "topk" not in chosen:
            chosen["topk"] = select(x, q_lora)
        return chosen["topk"]

    halves = [attention_half(geo, aw, select=once if select is not None else None, **attn_inputs) for aw, _ in shards]
    o = sum_in_rank_order([a.o for a in halves])
    ffn = [ffn_half(geo, fw, aw.post_norm, attn_o=o, residual=halves[0].residual) for aw, fw in shards]
    out = sum_in_rank_order([f[0] for f in ffn])
    d = {"out": out, "residual_out": ffn[0][1], "o": o, "kv_rows": halves[0].kv_rows,
         "o_parts": [a.o for a in halves], "out_parts": [f[0] for f in ffn], **chosen}
    if ffn[0][2]:
        d.update(expert_ids=ffn[0][2]["ids"], expert_weights=ffn[0][2]["weights"])
    return d


def shared_layer_ranks(geo: Glm53Geometry, shards: list, *, hidden: torch.Tensor, residual: torch.Tensor,
                       cos_sin: torch.Tensor, kv_cache: torch.Tensor, out_loc: torch.Tensor,
                       topk_slots: torch.Tensor) -> dict[str, torch.Tensor]:
    """`shared_layer` at TP = len(shards) (`layer_ranks` over the step's top-k)."""
    return layer_ranks(geo, shards, hidden=hidden, residual=residual, cos_sin=cos_sin, kv_cache=kv_cache,
                       out_loc=out_loc, topk_slots=topk_slots)


def indexer_select(geo: Glm53Geometry, idx_w, *, positions: torch.Tensor, cos_sin: torch.Tensor,
                   index_k_cache: torch.Tensor, out_loc: torch.Tensor, page_table: torch.Tensor,
                   lengths: torch.Tensor):
    """select(x, q_lora) -> [R, index_topk] int32 slots: the layer's own DSA indexer (`indexer.run_indexer`: this
    step's index keys written into index_k_cache, then scores and the exact top-k), for attention_half."""
    from sgl_amd_mono.glm53.indexer import run_indexer

    def select(x, q_lora):
        return run_indexer(idx_w, x=x, q_lora=q_lora, positions=positions, rope=geo.qk_rope, buf=index_k_cache,
                           out_loc=out_loc, page_table=page_table, lengths=lengths, topk=geo.index_topk,
                           cos_sin=cos_sin)

    return select


def indexer_layer(
    geo: Glm53Geometry,
    attn_w: AttentionWeights,
    idx_w,
    moe_w: MoeWeights,
    *,
    hidden: torch.Tensor,
    residual: torch.Tensor,
    cos_sin: torch.Tensor,
    positions: torch.Tensor,
    kv_cache: torch.Tensor,
    out_loc: torch.Tensor,
    index_k_cache: torch.Tensor,
    page_table: torch.Tensor,
    lengths: torch.Tensor,
) -> dict[str, torch.Tensor]:
    """One MoE layer that runs its own DSA indexer (`indexer.run_indexer`: this step's index keys written into
    index_k_cache [pages, 64 * 132] uint8, then scores and the exact top-k), with TP 1 semantics. The "indexer"
    launch computes exactly this; with DenseWeights as moe_w the "dense" launch (residual None: layer 0, the
    "tokens" launch, hidden its embedding rows). Outputs as shared_layer's, and "topk": [R, index_topk] int32
    slots."""
    chosen = {}
    pick = indexer_select(geo, idx_w, positions=positions, cos_sin=cos_sin, index_k_cache=index_k_cache,
                          out_loc=out_loc, page_table=page_table, lengths=lengths)

    def select(x, q_lora):
        chosen["topk"] = pick(x, q_lora)
        return chosen["topk"]

    a = attention_half(geo, attn_w, hidden=hidden, residual=residual, cos_sin=cos_sin, kv_cache=kv_cache,
                       out_loc=out_loc, topk_slots=None, select=select)
    return {**_outputs(a, *ffn_half(geo, moe_w, attn_w.post_norm, attn_o=a.o, residual=a.residual)),
            "topk": chosen["topk"]}
