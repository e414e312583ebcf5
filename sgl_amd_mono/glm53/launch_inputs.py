"""Random layer weights in SGLang's layouts and random decode / MTP-verify steps, for launch checks.

Used by the CPU tests (tiny geometries under Triton's interpreter) and `test/kernels/glm53/*`
(GLM-5.3's real TP-shard shapes on a GPU). Nothing here is a model's real weights.
"""

from __future__ import annotations

import dataclasses
import functools

import torch

from sgl_amd_mono.backends import reference as ref
from sgl_amd_mono.glm53.config import GLM53_PRESET, INDEX_PAGE as PAGE, Glm53Geometry, load_hf_config
from sgl_amd_mono.glm53.layer import AttentionWeights, MoeWeights

FP8 = torch.float8_e4m3fn


def glm53_geometry() -> Glm53Geometry:
    return Glm53Geometry.from_hf(load_hf_config("glm-5.3"))


def tiny_geometry() -> Glm53Geometry:
    """A GLM-5.3-shaped geometry small enough for Triton's interpreter (every dim a tile multiple)."""
    geo = glm53_geometry()
    return dataclasses.replace(
        geo, hidden=256, heads=2, q_lora=128, kv_lora=128, qk_nope=64, qk_rope=64, v_head=128,
        n_routed=16, top_k=2, moe_inter=128, index_topk=64, dense_inter=256, vocab=256,
    )


def _fp8_linear(n: int, k: int, g: torch.Generator, device) -> tuple[torch.Tensor, torch.Tensor]:
    """w: [n, k] fp8, ws: [ceil(n/128), k/128] f32, scaled so a unit-RMS input gives O(1) outputs."""
    w = (torch.randn(n, k, generator=g, device=device) * 0.5).to(FP8)
    ws = (torch.rand(-(-n // 128), k // 128, generator=g, device=device) + 0.5) / (0.5 * k**0.5)
    return w, ws


def random_weights(geo: Glm53Geometry, *, tp: int, seed: int = 0, device="cpu",
                   rank: int = 0) -> tuple[AttentionWeights, MoeWeights]:
    """Rank `rank`'s shard at TP `tp` of one full (TP1) draw of random layer weights in SGLang's layouts:
    every rank of a TP group is cut from the same draw (`shard_weights`), so rank partials summed in rank
    order are the full layer's (`layer.shared_layer_ranks`). At TP > 1 the full draw is kept for the next rank's
    call (drawing it again a rank took most of an emulated TP8 check): the ranks' replicated tensors are then the
    same tensors, not to be changed in place."""
    if tp == 1:
        return _random_full_weights(geo, seed=seed, device=device)
    return shard_weights(geo, *_kept_full_weights(geo, seed, str(device)), tp=tp, rank=rank)


@functools.lru_cache(maxsize=1)
def _kept_full_weights(geo: Glm53Geometry, seed: int, device: str) -> tuple[AttentionWeights, MoeWeights]:
    return _random_full_weights(geo, seed=seed, device=device)


def _random_full_weights(geo: Glm53Geometry, *, seed: int, device) -> tuple[AttentionWeights, MoeWeights]:
    g = torch.Generator(device=device).manual_seed(seed)
    h, d = geo.heads, geo.hidden
    norm = lambda n: (1.0 + 0.1 * torch.randn(n, generator=g, device=device)).to(torch.bfloat16)  # noqa: E731
    qkv_a, qkv_a_s = _fp8_linear(geo.qkv_a_out, d, g, device)
    q_b, q_b_s = _fp8_linear(h * geo.qk_head, geo.q_lora, g, device)
    o_proj, o_proj_s = _fp8_linear(d, h * geo.v_head, g, device)
    # w_kc [H, nope, kvl] strides (nope*kvl, 1, nope); w_vc [H, kvl, vh] strides (vh*kvl, 1, kvl): SGLang's
    w_kc = (torch.randn(h, geo.kv_lora, geo.qk_nope, generator=g, device=device) / geo.qk_nope**0.5).to(torch.bfloat16)
    w_vc = (torch.randn(h, geo.v_head, geo.kv_lora, generator=g, device=device) / geo.kv_lora**0.5).to(torch.bfloat16)
    attn = AttentionWeights(
        input_norm=norm(d), qkv_a=qkv_a, qkv_a_s=qkv_a_s, q_a_norm=norm(geo.q_lora), kv_a_norm=norm(geo.kv_lora),
        q_b=q_b, q_b_s=q_b_s, w_kc=w_kc.transpose(1, 2), w_vc=w_vc.transpose(1, 2),
        o_proj=o_proj, o_proj_s=o_proj_s, post_norm=norm(d),
    )
    e, i = geo.n_routed + 1, geo.moe_inter
    kw = dict(generator=g, device=device)
    w13 = torch.cat([(torch.randn(1, 2 * i, d, **kw) * 0.5).to(FP8) for _ in range(e)])
    w13_s = (torch.rand(e, 2 * i // 128, d // 128, **kw) + 0.5) / (0.5 * d**0.5)
    w2 = torch.cat([(torch.randn(1, d, i, **kw) * 0.5).to(FP8) for _ in range(e)])
    w2_s = (torch.rand(e, d // 128, i // 128, **kw) + 0.5) / (0.5 * i**0.5)
    moe = MoeWeights(
        gate=(torch.randn(geo.n_routed, d, **kw) / d**0.5).to(torch.bfloat16),
        bias=0.1 * torch.randn(geo.n_routed, **kw),
        w13=w13, w13_s=w13_s, w2=w2, w2_s=w2_s,
    )
    return attn, moe


def shard_weights(geo: Glm53Geometry, attn: AttentionWeights, moe: MoeWeights, *, tp: int,
                  rank: int) -> tuple[AttentionWeights, MoeWeights]:
    """Rank `rank`'s TP shard of full layer weights, as SGLang shards them: q_b rows, w_kc / w_vc and
    o_proj's input columns by head; every expert's gate and up rows and down columns by intermediate
    column (the fused expert too); the rest replicated. Copies (each shard its own tensors, strides
    kept); ValueError if a shard would split a 128-block of scales."""
    s = geo.shard(tp)
    hq, hv, i = s.heads * geo.qk_head, s.heads * geo.v_head, s.moe_inter
    if not 0 <= rank < tp:
        raise ValueError(f"rank {rank} is not in [0, {tp})")
    bad = [f"{name} {n} a rank is not a multiple of 128" for name, n in (("q_b rows", hq), ("o_proj columns", hv),
                                                                         ("moe_inter", i)) if n % 128]
    if bad:
        raise ValueError("; ".join(bad))
    rows = lambda t, n: t[rank * n: (rank + 1) * n].clone()  # noqa: E731
    cols = lambda t, n: t[..., rank * n: (rank + 1) * n].clone()  # noqa: E731
    half = lambda t, n, whole: torch.cat((t[:, rank * n: (rank + 1) * n], t[:, whole + rank * n: whole + (rank + 1) * n]), 1)  # noqa: E731
    a = dataclasses.replace(
        attn, q_b=rows(attn.q_b, hq), q_b_s=rows(attn.q_b_s, hq // 128), w_kc=rows(attn.w_kc, s.heads),
        w_vc=rows(attn.w_vc, s.heads), o_proj=cols(attn.o_proj, hv), o_proj_s=cols(attn.o_proj_s, hv // 128))
    m = dataclasses.replace(
        moe, w13=half(moe.w13, i, geo.moe_inter), w13_s=half(moe.w13_s, i // 128, geo.moe_inter // 128),
        w2=cols(moe.w2, i), w2_s=cols(moe.w2_s, i // 128))
    return a, m


@dataclasses.dataclass
class Step:
    """One step's inputs, named as the shared kind's table names them (`glm53/kinds/halves.py`: shapes)."""

    hidden: torch.Tensor
    residual: torch.Tensor
    cos_sin: torch.Tensor
    kv_cache: torch.Tensor  # [S, kv_cache_dim] bf16, or uint8 holding fp8 (SGLang's store dtype)
    out_loc: torch.Tensor
    topk_slots: torch.Tensor
    live: int  # rows 0..live-1 are live; the rest are pad rows (out_loc 0)


def random_step(geo: Glm53Geometry, *, width: int, context: int, kv_dtype: torch.dtype, seed: int = 0,
                device="cpu", mtp: bool = False, pad_rows: int = 0, invalid_frac: float = 0.05) -> Step:
    """A step over a cache of `context` rows (+1 dummy slot 0). Top-k: distinct slots in [1, context),
    some -1. mtp: row j also attends the new rows of rows 0..j (its causal prefix, written this step)."""
    g = torch.Generator().manual_seed(seed)
    r, k, d = width, geo.index_topk, geo.hidden
    if context < k + r + 1:
        raise ValueError(f"context {context} is too small for index_topk {k} and width {r}")
    hidden = torch.randn(r, d, generator=g).to(torch.bfloat16)
    residual = (2.0 * torch.randn(r, d, generator=g)).to(torch.bfloat16)
    positions = torch.randint(0, 1 << 20, (r,), generator=g)
    cos_sin = ref.rope_cos_sin(positions, rotary_dim=geo.qk_rope, theta=geo.rope_theta)
    cache = torch.randn(context + 1, geo.kv_cache_dim, generator=g)
    cache = cache.to(torch.bfloat16) if kv_dtype == torch.bfloat16 else cache.to(FP8).view(torch.uint8)
    live = r - pad_rows
    out_loc = torch.zeros(r, dtype=torch.int64)
    out_loc[:live] = torch.randperm(context - 1, generator=g)[:live] + 1
    topk = torch.empty(r, k, dtype=torch.int32)
    for j in range(r):
        cand = torch.randperm(context - 1, generator=g)[:k] + 1
        cand = cand[~torch.isin(cand, out_loc[:live])][: k]
        row = torch.full((k,), -1, dtype=torch.int64)
        row[: cand.numel()] = cand
        if mtp and j < live:
            row[: j + 1] = out_loc[: j + 1]
        drop = torch.rand(k, generator=g) < invalid_frac
        if mtp and j < live:
            drop[: j + 1] = False
        row[drop] = -1
        topk[j] = row.to(torch.int32)[torch.randperm(k, generator=g)]
    to = lambda t: t.to(device)  # noqa: E731
    return Step(to(hidden), to(residual), to(cos_sin), to(cache), to(out_loc), to(topk), live)


def decode_step(geo: Glm53Geometry, *, contexts: list[int], kv_dtype: torch.dtype, seed: int = 0,
                device="cpu") -> Step:
    """A decode step: a row a request, row b reading contexts[b] keys of its own request (its new one, written this
    step, last), each request in its own 64-slot pages spread at random over one cache (page 0: the dummy), as
    SGLang's pool holds them. Each row's top-k: index_topk distinct positions of its request at random (every entry
    valid, as a row past index_topk keys gets from its indexer), as physical slots in position order."""
    g = torch.Generator().manual_seed(seed)
    r, k, d = len(contexts), geo.index_topk, geo.hidden
    if min(contexts) <= k:
        raise ValueError(f"contexts {contexts}: a decode row here reads more than index_topk {k} keys")
    pages = [-(-c // PAGE) for c in contexts]
    perm = torch.randperm(sum(pages), generator=g) + 1
    hidden = torch.randn(r, d, generator=g).to(torch.bfloat16)
    residual = (2.0 * torch.randn(r, d, generator=g)).to(torch.bfloat16)
    positions = torch.tensor(contexts, dtype=torch.int64) - 1
    cos_sin = ref.rope_cos_sin(positions, rotary_dim=geo.qk_rope, theta=geo.rope_theta)
    cache = torch.randn((1 + sum(pages)) * PAGE, geo.kv_cache_dim, generator=g)
    cache = cache.to(torch.bfloat16) if kv_dtype == torch.bfloat16 else cache.to(FP8).view(torch.uint8)
    out_loc = torch.empty(r, dtype=torch.int64)
    topk = torch.empty(r, k, dtype=torch.int32)
    at = 0
    for b, (n, npg) in enumerate(zip(contexts, pages)):
        table = perm[at: at + npg]
        at += npg
        slot = lambda pos: table[pos // PAGE] * PAGE + pos % PAGE  # noqa: E731
        out_loc[b] = slot(torch.tensor(n - 1))
        topk[b] = slot(torch.randperm(n, generator=g)[:k].sort().values).to(torch.int32)
    to = lambda t: t.to(device)  # noqa: E731
    return Step(to(hidden), to(residual), to(cos_sin), to(cache), to(out_loc), to(topk), r)


def oracle(geo, attn_w, moe_w, step: Step) -> tuple[dict, torch.Tensor]:
    """layer.shared_layer on a copy of the step's cache: (outputs by the table's names, the cache after)."""
    from sgl_amd_mono.glm53 import layer

    kv = step.kv_cache.clone()
    kv_logical = kv.view(FP8) if kv.dtype == torch.uint8 else kv
    outs = layer.shared_layer(
        geo, attn_w, moe_w, hidden=step.hidden, residual=step.residual, cos_sin=step.cos_sin,
        kv_cache=kv_logical, out_loc=step.out_loc, topk_slots=step.topk_slots,
    )
    return outs, kv


def meta_weights(geo: Glm53Geometry, *, tp: int) -> tuple[AttentionWeights, MoeWeights]:
    """Weights on the meta device (shapes, dtypes and SGLang's strides only), for AOT compiles."""
    s = geo.shard(tp)
    h, d, e, i = s.heads, geo.hidden, geo.n_routed + 1, s.moe_inter
    m = lambda *shape, dt=torch.float32: torch.empty(*shape, dtype=dt, device="meta")  # noqa: E731
    cd = lambda a: -(-a // 128)  # noqa: E731
    attn = AttentionWeights(
        input_norm=m(d, dt=torch.bfloat16), qkv_a=m(geo.qkv_a_out, d, dt=FP8), qkv_a_s=m(cd(geo.qkv_a_out), d // 128),
        q_a_norm=m(geo.q_lora, dt=torch.bfloat16), kv_a_norm=m(geo.kv_lora, dt=torch.bfloat16),
        q_b=m(h * geo.qk_head, geo.q_lora, dt=FP8), q_b_s=m(cd(h * geo.qk_head), geo.q_lora // 128),
        w_kc=m(h, geo.kv_lora, geo.qk_nope, dt=torch.bfloat16).transpose(1, 2),
        w_vc=m(h, geo.v_head, geo.kv_lora, dt=torch.bfloat16).transpose(1, 2),
        o_proj=m(d, h * geo.v_head, dt=FP8), o_proj_s=m(d // 128, cd(h * geo.v_head)), post_norm=m(d, dt=torch.bfloat16),
    )
    moe = MoeWeights(
        gate=m(geo.n_routed, d, dt=torch.bfloat16), bias=m(geo.n_routed), w13=m(e, 2 * i, d, dt=FP8),
        w13_s=m(e, 2 * i // 128, d // 128), w2=m(e, d, i, dt=FP8), w2_s=m(e, d // 128, i // 128),
    )
    return attn, moe


def meta_step(geo: Glm53Geometry, *, width: int, context: int, kv_dtype: torch.dtype) -> Step:
    m = lambda *shape, dt: torch.empty(*shape, dtype=dt, device="meta")  # noqa: E731
    kv_dt = torch.bfloat16 if kv_dtype == torch.bfloat16 else torch.uint8
    return Step(m(width, geo.hidden, dt=torch.bfloat16), m(width, geo.hidden, dt=torch.bfloat16),
                m(width, geo.qk_rope, dt=torch.float32), m(context + 1, geo.kv_cache_dim, dt=kv_dt),
                m(width, dt=torch.int64), m(width, geo.index_topk, dt=torch.int32), width)
