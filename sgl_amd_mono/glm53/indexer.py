"""The DSA indexer of a GLM-5.3 full layer on the torch oracle, over SGLang's paged index-K cache.

`../shared/reference/sglang-glm53.md` §5: index q and k from the layer's normed x and q_lora,
LayerNorm + interleaved rope on the first `rope` dims, optional Hadamard, ue8m0 FP8 quant, the
k row written into SGLang's page layout (per 64-token page: 64 × 128 fp8 bytes, then 64 fp32
scales), head-gated ReLU scores over each row's cached keys, an exact top-`index_topk`, and the
chosen positions emitted as physical slots through the page table. Pinned to SGLang's torch
references (`fp8_paged_mqa_logits_torch`, `act_quant`, `_topk_unfused`) in
`test/unit/test_indexer_pinned.py`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

import torch

from sgl_amd_mono.backends import reference as ref
from sgl_amd_mono.glm53.config import INDEX_PAGE

FP32_BYTES = 4


@dataclasses.dataclass
class IndexerWeights:
    """One full layer's indexer weights (SGLang `self_attn.indexer.*`), replicated on every rank."""

    wq_b: torch.Tensor  # wq_b.weight [index_heads * index_dim, q_lora] fp8 or bf16
    wq_b_s: Optional[torch.Tensor]  # its weight_scale_inv f32, None for bf16
    wk: torch.Tensor  # wk.weight [index_dim, D] fp8 or bf16
    wk_s: Optional[torch.Tensor]  # its weight_scale_inv f32, None for bf16
    weights_proj: torch.Tensor  # weights_proj.weight [index_heads, D] bf16
    k_norm_w: torch.Tensor  # k_norm.weight [index_dim] (LayerNorm)
    k_norm_b: torch.Tensor  # k_norm.bias [index_dim]
    k_norm_eps: float  # k_norm.variance_epsilon
    norm_dtype: torch.dtype  # k_norm.dtype: the LayerNorm computes in it
    cos_sin_cache: torch.Tensor  # rotary_emb.cos_sin_cache [max_pos, rope] = [cos | sin]
    is_rotate: bool  # Hadamard on q and k (SGLang Indexer._maybe_rotate)


@dataclasses.dataclass
class IndexQK:
    """This step's index query and key, quantized as SGLang stores and scores them."""

    q_fp8: torch.Tensor  # [R, H, index_dim] fp8
    head_w: torch.Tensor  # [R, H] f32: weights_proj · H^-0.5 · q_scale · index_dim^-0.5
    k_fp8: torch.Tensor  # [R, index_dim] fp8
    k_scale: torch.Tensor  # [R] f32, a power of two


def hadamard(x: torch.Tensor) -> torch.Tensor:
    """x @ H_n / sqrt(n) over the last dim (Sylvester order, as fast_hadamard_transform), f32 math."""
    n = x.shape[-1]
    if n & (n - 1):
        raise ValueError(f"Hadamard size {n} is not a power of two")
    h = torch.ones(1, 1, dtype=torch.float32, device=x.device)  # built where x is: no host copy (a CUDA graph can capture it)
    while h.shape[0] < n:
        h = torch.cat((torch.cat((h, h), 1), torch.cat((h, -h), 1)), 0)
    return (x.float() @ h * n**-0.5).to(x.dtype)


def index_qk(
    w: IndexerWeights, *, x: torch.Tensor, q_lora: torch.Tensor, positions: torch.Tensor, rope: int,
    cos_sin: Optional[torch.Tensor] = None,
) -> IndexQK:
    """x: [R, D] bf16 (input-normed hidden); q_lora: [R, q_lora] bf16; positions: [R] int64. cos_sin: [R, rope]
    f32 rows at the positions, if given instead of reading w.cos_sin_cache (the launch checks take the
    MLA's rows, which are the same cache)."""
    r = x.shape[0]
    dim = w.wk.shape[0]
    heads = w.weights_proj.shape[0]
    q = ref.linear(q_lora, w.wq_b, w.wq_b_s).view(r, heads, dim)  # (R, H, dim) bf16
    k = ref.linear(x, w.wk, w.wk_s)  # (R, dim) bf16
    k = torch.nn.functional.layer_norm(
        k.to(w.norm_dtype), (dim,), w.k_norm_w, w.k_norm_b, w.k_norm_eps
    ).to(k.dtype)
    if cos_sin is None:
        cos_sin = w.cos_sin_cache[positions.long()]  # (R, rope)
    q = torch.cat((ref.rope_interleaved(q[..., :rope], cos_sin), q[..., rope:]), dim=-1)
    k_rot = ref.rope_interleaved(k[:, None, :rope], cos_sin)[:, 0]
    k = torch.cat((k_rot, k[:, rope:]), dim=-1)
    if w.is_rotate:
        q, k = hadamard(q), hadamard(k)
    q_fp8, q_scale = ref.act_quant_ue8m0(q.reshape(r * heads, dim))  # one group per head
    k_fp8, k_scale = ref.act_quant_ue8m0(k)
    w_raw = ref.linear(x, w.weights_proj, None).float()  # (R, H)
    head_w = w_raw * heads**-0.5 * q_scale.view(r, heads) * dim**-0.5
    return IndexQK(q_fp8=q_fp8.view(r, heads, dim), head_w=head_w, k_fp8=k_fp8, k_scale=k_scale[:, 0])


def _page_views(buf: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """buf: [pages, 64 * (dim + 4)] uint8 -> (keys [pages, 64, dim] uint8, scales [pages, 64] f32 views)."""
    if buf.dtype != torch.uint8 or buf.dim() != 2 or buf.shape[1] != INDEX_PAGE * (dim + FP32_BYTES):
        raise ValueError(
            f"index-K buffer {tuple(buf.shape)} {buf.dtype} is not [pages, {INDEX_PAGE * (dim + FP32_BYTES)}] uint8"
        )
    keys = buf[:, : INDEX_PAGE * dim].view(-1, INDEX_PAGE, dim)
    scales = buf[:, INDEX_PAGE * dim :].view(torch.float32)  # (pages, 64)
    return keys, scales


def write_index_k(buf: torch.Tensor, *, loc: torch.Tensor, k_fp8: torch.Tensor, k_scale: torch.Tensor) -> None:
    """Store each row's key at slot loc[r] in SGLang's page layout, in place.

    buf: [pages, 64 * (dim + 4)] uint8 (pool.get_index_k_with_scale_buffer); loc: [R] int64 slots;
    k_fp8: [R, dim] fp8; k_scale: [R] f32.
    """
    keys, scales = _page_views(buf, k_fp8.shape[1])
    last = ref.last_writers(loc)  # pad rows all write slot 0: the last one's key is kept
    loc = loc.long()[last]
    page, off = loc // INDEX_PAGE, loc % INDEX_PAGE
    keys[page, off] = k_fp8.view(torch.uint8)[last]
    scales[page, off] = k_scale.float()[last]


def read_index_k(buf: torch.Tensor, *, page_table: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Gather each row's cached keys in position order through its page table.

    page_table: [R, P] int32 page ids. Returns (k [R, P*64, dim] fp8, scale [R, P*64] f32).
    """
    keys, scales = _page_views(buf, dim)
    pages = page_table.long().clamp(min=0)
    r, p = pages.shape
    k = keys[pages].reshape(r, p * INDEX_PAGE, dim).view(torch.float8_e4m3fn)
    return k, scales[pages].reshape(r, p * INDEX_PAGE)


def index_scores(
    qk: IndexQK, buf: torch.Tensor, *, page_table: torch.Tensor, lengths: torch.Tensor,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """logit[r, t] = k_scale[t] · Σ_h head_w[r, h] · relu(q_fp8[r, h] · k_fp8[t]), dots and sums in dtype
    (f32 as SGLang; f64 for the check scripts' reference). Only q_fp8 and head_w of qk are read.

    Returns [R, P*64] in dtype; positions t >= lengths[r] are -inf.
    """
    dim = qk.q_fp8.shape[-1]
    k, ks = read_index_k(buf, page_table=page_table, dim=dim)
    dots = torch.einsum("rhd,rtd->rht", qk.q_fp8.to(dtype), k.to(dtype))  # (R, H, T)
    scores = (dots.relu() * qk.head_w.to(dtype)[:, :, None]).sum(dim=1) * ks.to(dtype)  # (R, T)
    t = torch.arange(scores.shape[1], device=scores.device)
    return scores.masked_fill(t[None, :] >= lengths.long()[:, None], float("-inf"))


def select_topk(scores: torch.Tensor, *, lengths: torch.Tensor, topk: int) -> torch.Tensor:
    """Exact top-`topk` positions of each row's first lengths[r] scores, −1 padded.

    A row with lengths[r] <= topk takes every position in order (SGLang's trivial path). A longer
    row takes the highest scores, ties at the threshold broken toward the lower position, listed
    in position order (SGLang leaves the order unspecified). scores: [R, T] f32 -> [R, topk] int32.
    """
    r, t = scores.shape
    out = torch.full((r, topk), -1, dtype=torch.int32, device=scores.device)
    pos = torch.arange(t, device=scores.device)
    for i in range(r):
        n = int(lengths[i])
        if n > t:
            raise ValueError(f"row {i} has length {n}, its page table covers {t} positions")
        if n <= topk:
            out[i, :n] = pos[:n].int()
            continue
        # Stable descending sort: equal scores keep position order, so ties go to lower positions.
        order = torch.sort(scores[i, :n], descending=True, stable=True).indices[:topk]
        out[i] = torch.sort(order).values.int()
    return out


def to_slots(positions: torch.Tensor, *, page_table: torch.Tensor) -> torch.Tensor:
    """Physical slots real_page_table[r, p // 64] * 64 + p % 64 of positions [R, K] (−1 stays −1)."""
    p = positions.long().clamp(min=0)
    slots = page_table.long().gather(1, p // INDEX_PAGE) * INDEX_PAGE + p % INDEX_PAGE
    return torch.where(positions >= 0, slots, -1).to(torch.int32)


def run_indexer(
    w: IndexerWeights,
    *,
    x: torch.Tensor,
    q_lora: torch.Tensor,
    positions: torch.Tensor,
    rope: int,
    buf: torch.Tensor,
    out_loc: torch.Tensor,
    page_table: torch.Tensor,
    lengths: torch.Tensor,
    topk: int,
    cos_sin: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Write this step's keys, then score and select: [R, topk] int32 physical slots (−1 none).

    page_table: [R, P] int32 (one row per step row); lengths: [R] keys each row reads.
    """
    qk = index_qk(w, x=x, q_lora=q_lora, positions=positions, rope=rope, cos_sin=cos_sin)
    write_index_k(buf, loc=out_loc, k_fp8=qk.k_fp8, k_scale=qk.k_scale)  # before the reads, as SGLang
    scores = index_scores(qk, buf, page_table=page_table, lengths=lengths)
    return to_slots(select_topk(scores, lengths=lengths, topk=topk), page_table=page_table)


def pages_for(length: int) -> int:
    return math.ceil(length / INDEX_PAGE)


def order_keys(scores: torch.Tensor) -> torch.Tensor:
    """f32 scores -> int64 keys whose order is the floats' (the launches' radix keys: -0.0 below +0.0)."""
    b = scores.float().contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    return torch.where(b >> 31 != 0, b ^ 0xFFFFFFFF, b | 0x80000000)


def radix_select(scores: torch.Tensor, *, lengths: torch.Tensor, topk: int) -> torch.Tensor:
    """The launches' exactness rule over their own scores, [R, topk] int32 positions (−1 padded): a row of
    L <= topk keys lists 0..L-1; a longer row lists the keys above its topk-th largest key in position order,
    then that key's ties in position order, as many as make topk. scores: [R, >= max L] f32."""
    r = scores.shape[0]
    out = torch.full((r, topk), -1, dtype=torch.int32, device=scores.device)
    for i in range(r):
        n = int(lengths[i])
        if n <= topk:
            out[i, :n] = torch.arange(n, device=scores.device, dtype=torch.int32)
            continue
        u = order_keys(scores[i, :n])
        thr = torch.sort(u, descending=True).values[topk - 1]
        above = torch.nonzero(u > thr).flatten()
        ties = torch.nonzero(u == thr).flatten()[: topk - above.numel()]
        out[i] = torch.cat((above, ties)).to(torch.int32)
    return out
