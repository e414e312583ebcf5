"""Random indexer weights and random indexer steps in SGLang's layouts, for the indexer kind's checks.

A step holds requests of `rows_per_req` consecutive rows (1: decode; N: an MTP verify's draft chain): a
request owns random 64-token pages of the pools (page 0, slot 0, is the dummy every pad row writes); row j of
request b reads lengths[r] = L_b + j keys (its own key last, at out_loc), through its request's page table.
Pad rows come as SGLang makes them: length 1, out_loc 0, page table 0. Nothing here is a model's weights.
"""

from __future__ import annotations

import dataclasses

import torch

from sgl_amd_mono.backends import reference as ref
from sgl_amd_mono.glm53.config import INDEX_K_BYTES, INDEX_PAGE, Glm53Geometry
from sgl_amd_mono.glm53.indexer import IndexerWeights, write_index_k
from sgl_amd_mono.glm53.launch_inputs import FP8, _fp8_linear

K_NORM_EPS = 1e-6


def random_indexer_weights(geo: Glm53Geometry, *, seed: int = 0, device="cpu") -> IndexerWeights:
    """One layer's indexer (replicated on every rank), scaled so scores are O(1)."""
    g = torch.Generator(device=device).manual_seed(seed)
    wq_b, wq_b_s = _fp8_linear(geo.index_heads * geo.index_dim, geo.q_lora, g, device)
    wk, wk_s = _fp8_linear(geo.index_dim, geo.hidden, g, device)
    wp = (torch.randn(geo.index_heads, geo.hidden, generator=g, device=device) / geo.hidden**0.5).to(torch.bfloat16)
    return IndexerWeights(
        wq_b=wq_b, wq_b_s=wq_b_s, wk=wk, wk_s=wk_s, weights_proj=wp,
        k_norm_w=1.0 + 0.1 * torch.randn(geo.index_dim, generator=g, device=device),
        k_norm_b=0.1 * torch.randn(geo.index_dim, generator=g, device=device), k_norm_eps=K_NORM_EPS,
        norm_dtype=torch.float32, cos_sin_cache=torch.empty(0, geo.qk_rope, device=device), is_rotate=True)


@dataclasses.dataclass
class IndexStep:
    """One indexer step, named as the indexer kind's table names its inputs (`glm53/kinds/indexer.py`)."""

    hidden: torch.Tensor  # [R, D] bf16
    residual: torch.Tensor  # [R, D] bf16
    cos_sin: torch.Tensor  # [R, rope] f32, at positions
    positions: torch.Tensor  # [R] int64 (lengths - 1)
    kv_cache: torch.Tensor  # [S, kv_lora + rope] bf16, or uint8 holding fp8
    out_loc: torch.Tensor  # [R] int64
    index_k_cache: torch.Tensor  # [pages, 64 * 132] uint8
    page_table: torch.Tensor  # [R, PMAX] int32
    lengths: torch.Tensor  # [R] int32
    rows_per_req: torch.Tensor  # [1] int32
    live: int  # rows 0..live-1 are live; the rest are pad rows


def random_index_step(geo: Glm53Geometry, *, width: int, contexts: list[int], rows_per_req: int, max_context: int,
                      kv_dtype: torch.dtype, seed: int = 0, device="cpu", pad_rows: int = 0,
                      keys: str = "random") -> IndexStep:
    """A step of width rows: len(contexts) requests of rows_per_req rows (request b's first row reads
    contexts[b] keys), then pad_rows pad rows (width = requests x rows_per_req + pad_rows, whole requests).
    keys: "random"; "repeated" (a few keys everywhere: ties at the threshold); "zero" (all-zero keys); "recent"
    (the last 256 positions of each request scaled x8)."""
    n_req = len(contexts)
    if n_req * rows_per_req + pad_rows != width or pad_rows % rows_per_req:
        raise ValueError(f"{n_req} requests x {rows_per_req} rows + {pad_rows} pad rows is not width {width} in whole requests")
    g = torch.Generator().manual_seed(seed)
    pmax = -(-max_context // INDEX_PAGE)
    lens_req = [c + rows_per_req - 1 for c in contexts]  # the request's last row reads them all
    if max(lens_req) > pmax * INDEX_PAGE:
        raise ValueError(f"a context of {max(lens_req)} keys exceeds max_context {max_context}")
    pages_req = [-(-n // INDEX_PAGE) for n in lens_req]
    n_pages = 1 + sum(pages_req)  # page 0: the dummy
    perm = torch.randperm(n_pages - 1, generator=g) + 1
    page_table = torch.zeros(width, pmax, dtype=torch.int32)
    lengths = torch.ones(width, dtype=torch.int32)
    at = 0
    for b, (ctx, npg) in enumerate(zip(contexts, pages_req)):
        pages = perm[at: at + npg]
        at += npg
        for j in range(rows_per_req):
            r = b * rows_per_req + j
            page_table[r, :npg] = pages.int()
            lengths[r] = ctx + j
    live = n_req * rows_per_req
    positions = (lengths - 1).long()
    positions[live:] = 0
    out_loc = (page_table.long().gather(1, (positions // INDEX_PAGE)[:, None])[:, 0] * INDEX_PAGE
               + positions % INDEX_PAGE)
    out_loc[live:] = 0
    d = geo.hidden
    hidden = torch.randn(width, d, generator=g).to(torch.bfloat16)
    residual = (2.0 * torch.randn(width, d, generator=g)).to(torch.bfloat16)
    cos_sin = ref.rope_cos_sin(positions, rotary_dim=geo.qk_rope, theta=geo.rope_theta)
    slots = n_pages * INDEX_PAGE
    cache = torch.randn(slots, geo.kv_cache_dim, generator=g)
    cache = cache.to(torch.bfloat16) if kv_dtype == torch.bfloat16 else cache.to(FP8).view(torch.uint8)
    k = torch.randn(slots, geo.index_dim, generator=g) * (torch.rand(slots, 1, generator=g) + 0.5)
    if keys == "repeated":  # 4 distinct keys everywhere: most scores tie
        k = k[torch.randint(0, 4, (slots,), generator=g)] if slots > 4 else k
    elif keys == "zero":
        k = torch.zeros_like(k)
    elif keys == "recent":  # each request's last 256 positions x8
        pos = torch.arange(slots)
        for b, npg in enumerate(pages_req):
            rows = page_table[b * rows_per_req, :npg].long()
            slot_of = (rows[:, None] * INDEX_PAGE + torch.arange(INDEX_PAGE)).flatten()
            recent = slot_of[max(0, lens_req[b] - 256): lens_req[b]]
            k[recent] *= 8.0
        del pos
    elif keys != "random":
        raise ValueError(f"keys {keys!r} is not random, repeated, zero or recent")
    kq, ks = ref.act_quant_ue8m0(k)
    ibuf = torch.zeros(n_pages, INDEX_PAGE * INDEX_K_BYTES, dtype=torch.uint8)
    write_index_k(ibuf, loc=torch.arange(slots), k_fp8=kq, k_scale=ks[:, 0])
    to = lambda t: t.to(device)  # noqa: E731
    return IndexStep(hidden=to(hidden), residual=to(residual), cos_sin=to(cos_sin), positions=to(positions),
                     kv_cache=to(cache), out_loc=to(out_loc), index_k_cache=to(ibuf), page_table=to(page_table),
                     lengths=to(lengths), rows_per_req=to(torch.tensor([rows_per_req], dtype=torch.int32)),
                     live=live)


def oracle(geo: Glm53Geometry, attn_w, idx_w, moe_w, step: IndexStep) -> tuple[dict, torch.Tensor, torch.Tensor]:
    """The indexer layer on the torch oracle (`layer.indexer_layer`) over copies of the step's caches:
    (outputs by the table's names, the MLA cache after, the index-K cache after)."""
    from sgl_amd_mono.glm53 import layer

    kv = step.kv_cache.clone()
    ibuf = step.index_k_cache.clone()
    outs = layer.indexer_layer(
        geo, attn_w, idx_w, moe_w, hidden=step.hidden, residual=step.residual, cos_sin=step.cos_sin,
        positions=step.positions, kv_cache=kv.view(FP8) if kv.dtype == torch.uint8 else kv, out_loc=step.out_loc,
        index_k_cache=ibuf, page_table=step.page_table, lengths=step.lengths)
    return outs, kv, ibuf
