"""Read one routed step's fields from what SGLang hands a forward: the ForwardBatch, and the DSA
attention backend and pools published through `forward_context` (every name is in
`sglang_reads.py`).

Rows: R = bs · N (N = 1 for DECODE, the draft tokens for TARGET_VERIFY). Row j of request b
attends the positions < seq_lens[b] + j + 1 in verify (SGLang's `dsa_seqlens_expanded`), and
< seq_lens[b] in decode (`cache_seqlens_int32`; seq_lens includes the current token).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from sgl_amd_mono.glm53.config import INDEX_PAGE


@dataclasses.dataclass
class StepFields:
    """One step, as the reference reads it."""

    mode: str  # "decode" or "target_verify"
    bs: int  # requests
    tokens: int  # rows a request (N)
    out_loc: torch.Tensor  # [R] int64: the slot each row's KV and index-K row is written to
    positions: torch.Tensor  # [R] int64
    lengths: torch.Tensor  # [R] int32: keys row r attends (its own included)
    page_table: torch.Tensor  # [R, P] int32: 64-token page ids, one row per step row
    pool: Any  # DSATokenToKVPool: get_key_buffer / get_index_k_with_scale_buffer


def read_step(forward_batch: Any, positions: torch.Tensor, *, tokens: int) -> StepFields:
    """Step fields of a DECODE or TARGET_VERIFY batch; ValueError naming what is off."""
    from sglang.srt.model_executor.forward_context import get_attn_backend

    mode = forward_batch.forward_mode
    if mode.is_decode():
        name = "decode"
    elif mode.is_target_verify():
        name = "target_verify"
    else:
        raise ValueError(f"forward_mode {mode!r} is neither DECODE nor TARGET_VERIFY")
    bs = int(forward_batch.batch_size)
    rows = int(forward_batch.input_ids.shape[0])
    if rows != bs * tokens:
        raise ValueError(f"input_ids has {rows} rows, expected batch_size {bs} × {tokens} tokens")
    out_loc = forward_batch.out_cache_loc
    if out_loc is None or tuple(out_loc.shape) != (rows,):
        raise ValueError(f"out_cache_loc {None if out_loc is None else tuple(out_loc.shape)} is not [{rows}]")
    if tuple(positions.shape) != (rows,):
        raise ValueError(f"positions {tuple(positions.shape)} is not [{rows}]")
    backend = get_attn_backend()
    meta = backend.forward_metadata
    pool = backend.token_to_kv_pool
    if int(meta.page_size) != INDEX_PAGE or int(pool.index_page_size) != INDEX_PAGE:
        raise ValueError(
            f"DSA page size {meta.page_size} / index page size {pool.index_page_size}: the reference reads {INDEX_PAGE}-token pages"
        )
    from sglang.srt.mem_cache import index_key_cache

    if getattr(index_key_cache, "_use_aiter_preshuffle", False):
        raise ValueError("the index-K cache is aiter-preshuffled (16×16 tiles); the reference reads the plain page layout")
    if name == "decode":
        lengths = meta.cache_seqlens_int32
    else:
        lengths = meta.dsa_seqlens_expanded
    if tuple(lengths.shape) != (rows,):
        raise ValueError(f"{name} sequence lengths {tuple(lengths.shape)} are not one per row [{rows}]")
    table = meta.real_page_table
    if table.shape[0] == bs and rows != bs:
        table = table.repeat_interleave(tokens, dim=0)
    if table.shape[0] != rows:
        raise ValueError(f"real_page_table has {table.shape[0]} rows, expected {bs} or {rows}")
    return StepFields(
        mode=name, bs=bs, tokens=tokens, out_loc=out_loc.long(), positions=positions.long(),
        lengths=lengths.int(), page_table=table.int(), pool=pool,
    )


def kv_view(pool: Any, layer_id: int, kv_dim: int) -> torch.Tensor:
    """pool.get_key_buffer(layer_id) as [slots, kv_dim] in the logical dtype (a view: writes land in the pool)."""
    buf = pool.get_key_buffer(layer_id)
    if buf.shape[-1] != kv_dim:
        raise ValueError(
            f"KV buffer of layer {layer_id} is {tuple(buf.shape)} {buf.dtype}; the reference reads "
            f"{kv_dim} values a token (bf16 or fp8 without scales), not a packed row"
        )
    if buf.dtype not in (torch.bfloat16, torch.float8_e4m3fn):
        raise ValueError(f"KV buffer of layer {layer_id} has dtype {buf.dtype}, expected bfloat16 or float8_e4m3fn")
    return buf.view(-1, kv_dim)
