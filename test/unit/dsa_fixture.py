"""The per-step fields SGLang's DSA backend hands a GLM-5.3 forward, built on CPU for tests.

SGLang's DSA attention backend needs CUDA/HIP (`dsa_backend.py` reads the device capability), so
`FixtureDSABackend` stands in for it with the fields the reference reads: `forward_metadata` (a
real `DSAMetadata`), `token_to_kv_pool` (a real `DSATokenToKVPool`, which constructs on CPU),
`req_to_token_pool` and `decode_attention_backend_str`. Batches are real `ForwardBatch`es.
The caches' history (positions before the step) is random: bf16/fp8 latents and ue8m0 FP8 index
keys, written in SGLang's page layout.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import torch

from sgl_amd_mono.backends import reference as ref
from sgl_amd_mono.glm53.config import INDEX_PAGE, Glm53Geometry
from sgl_amd_mono.glm53.indexer import write_index_k


@dataclasses.dataclass
class FixtureDSABackend:
    """What forward_context's get_attn_backend() returns, for the fields the plugin reads."""

    forward_metadata: Any
    token_to_kv_pool: Any
    req_to_token_pool: Any
    decode_attention_backend_str: str = "dsa"


@dataclasses.dataclass
class ReqToToken:
    req_to_token: torch.Tensor  # [max_reqs, max_ctx] int32 slots


class DsaCaches:
    """A DSATokenToKVPool with random history for `bs` requests, each on its own shuffled pages."""

    def __init__(self, geo: Glm53Geometry, *, kv_dtype: torch.dtype, bs: int, max_ctx: int, seed: int = 0,
                 device="cpu"):
        from sglang.srt.mem_cache.memory_pool import DSATokenToKVPool

        self.geo, self.bs, self.max_ctx, self.device = geo, bs, max_ctx, torch.device(device)
        pages_per_req = -(-max_ctx // INDEX_PAGE)
        size = (bs * pages_per_req + 1) * INDEX_PAGE  # page 0 holds the dummy slot 0
        self.pool = DSATokenToKVPool(
            size=size, page_size=INDEX_PAGE, kv_lora_rank=geo.kv_lora, dtype=kv_dtype,
            qk_rope_head_dim=geo.qk_rope, layer_num=geo.n_layers, device=device,
            index_head_dim=geo.index_dim, enable_memory_saver=False, kv_cache_dim=geo.kv_cache_dim,
            skip_topk_layers=[not full for full in geo.runs_indexer],
        )
        gen = torch.Generator().manual_seed(seed)
        pages = (torch.randperm(bs * pages_per_req, generator=gen) + 1).view(bs, pages_per_req)
        self.page_table = pages.int()  # [bs, pages_per_req]
        pos = torch.arange(pages_per_req * INDEX_PAGE)
        slots = pages[:, pos // INDEX_PAGE] * INDEX_PAGE + pos % INDEX_PAGE
        self.req_to_token = ReqToToken(req_to_token=slots[:, :max_ctx].int())
        # the history: drawn on the pool's device (a GPU pool of real GLM-5.3 contexts; the CPU's draw unchanged)
        dev = self.device
        gen = gen if dev.type == "cpu" else torch.Generator(device=dev).manual_seed(seed)
        for layer in range(geo.n_layers):
            kv = self.pool.get_key_buffer(layer).view(-1, geo.kv_cache_dim)
            kv.copy_(torch.randn(kv.shape, generator=gen, device=dev).to(kv.dtype))
            if geo.runs_indexer[layer]:
                n = kv.shape[0]
                k = (torch.randn(n, geo.index_dim, generator=gen, device=dev)
                     * torch.rand(n, 1, generator=gen, device=dev) * 4)
                k_fp8, k_scale = ref.act_quant_ue8m0(k)
                write_index_k(self.pool.get_index_k_with_scale_buffer(layer), loc=torch.arange(n, device=device),
                              k_fp8=k_fp8.to(device), k_scale=k_scale[:, 0].to(device))

    def snapshot(self) -> dict:
        """Copies of every layer's KV and index-K buffers (raw bytes)."""
        return {
            "kv": [b.clone() for b in self.pool.kv_buffer],
            "index": [b.clone() for b in self.pool.index_key_cache.buffer],
        }


def make_step(
    caches: DsaCaches,
    *,
    seq_lens: list[int],
    tokens: int,
    input_ids: torch.Tensor,
    pad_rows: int = 0,
    capture_hidden: bool = False,
) -> tuple[Any, FixtureDSABackend, torch.Tensor]:
    """A DECODE (tokens 1) or TARGET_VERIFY (tokens N) ForwardBatch, its backend, and positions.

    seq_lens: per real request — decode: including the current token; verify: the prefix without
    the N draft tokens. The last `pad_rows` requests are graph padding: seq_lens 1, slot 0,
    position 0, req_pool_index 0 (SGLang's capture fill).
    """
    from sglang.srt.layers.attention.dsa_backend import DSAMetadata
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch, ForwardMode

    bs = len(seq_lens) + pad_rows
    rows = bs * tokens
    if input_ids.shape != (rows,):
        raise ValueError(f"input_ids {tuple(input_ids.shape)} is not [{rows}]")
    is_verify = tokens > 1
    lens = torch.tensor(list(seq_lens) + [1] * pad_rows, dtype=torch.int64)
    req_idx = torch.tensor(list(range(len(seq_lens))) + [0] * pad_rows, dtype=torch.int64)
    r2t = caches.req_to_token.req_to_token
    positions, out_loc, expanded = [], [], []
    for b in range(bs):
        is_pad = b >= len(seq_lens)
        for j in range(tokens):
            p = int(lens[b]) + j if is_verify else int(lens[b]) - 1
            positions.append(0 if is_pad else p)
            out_loc.append(0 if is_pad else int(r2t[req_idx[b], p]))
            expanded.append(int(lens[b]) + j + 1 if is_verify else int(lens[b]))
    page_rows = caches.page_table[req_idx]
    if is_verify:
        page_rows = page_rows.repeat_interleave(tokens, dim=0)  # one page-table row per draft row
    cache_lens = (lens + tokens if is_verify else lens).int()
    expanded_t = torch.tensor(expanded, dtype=torch.int32)
    row_lens = expanded_t if is_verify else cache_lens
    meta = DSAMetadata(
        page_size=INDEX_PAGE,
        cache_seqlens_int32=cache_lens,
        max_seq_len_q=tokens,
        max_seq_len_k=int(cache_lens.max()),
        cu_seqlens_q=torch.arange(0, rows + 1, tokens, dtype=torch.int32),
        cu_seqlens_k=torch.nn.functional.pad(cache_lens.cumsum(0), (1, 0)).int(),
        page_table_1=None,
        real_page_table=page_rows,
        dsa_cache_seqlens_int32=row_lens.clamp(max=caches.geo.index_topk),
        dsa_cu_seqlens_q=torch.arange(rows + 1, dtype=torch.int32),
        dsa_cu_seqlens_k=torch.nn.functional.pad(row_lens.clamp(max=caches.geo.index_topk).cumsum(0), (1, 0)).int(),
        dsa_extend_seq_lens_list=[tokens] * bs,
        dsa_seqlens_expanded=expanded_t,
    )
    spec_info: Optional[Any] = None
    if caches.device.type != "cpu":  # every table on the pool's device (a GPU run)
        meta = dataclasses.replace(meta, **{f.name: getattr(meta, f.name).to(caches.device)
                                            for f in dataclasses.fields(meta)
                                            if isinstance(getattr(meta, f.name), torch.Tensor)})
        req_idx, lens, input_ids = req_idx.to(caches.device), lens.to(caches.device), input_ids.to(caches.device)
        out_loc, positions = torch.tensor(out_loc, device=caches.device), torch.tensor(positions, device=caches.device)
    batch = ForwardBatch(
        forward_mode=ForwardMode.TARGET_VERIFY if is_verify else ForwardMode.DECODE,
        batch_size=bs,
        input_ids=input_ids,
        req_pool_indices=req_idx,
        seq_lens=lens,
        out_cache_loc=torch.as_tensor(out_loc, dtype=torch.int64),
        seq_lens_sum=int(lens.sum()),
        positions=torch.as_tensor(positions, dtype=torch.int64),
        spec_info=spec_info,
        capture_hidden_mode=CaptureHiddenMode.FULL if capture_hidden else CaptureHiddenMode.NULL,
    )
    backend = FixtureDSABackend(forward_metadata=meta, token_to_kv_pool=caches.pool, req_to_token_pool=caches.req_to_token)
    return batch, backend, batch.positions
