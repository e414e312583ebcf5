"""The torch oracle: each stage a launch runs, in SGLang's numerics, on plain tensors (CPU or GPU).

Model-independent: it imports nothing from SGLang. Each op names the SGLang computation it
reproduces; `test/unit/test_reference_pinned.py` pins them to SGLang's own modules and torch
references. Shapes: R rows, H heads, D dims; `bf16` is torch.bfloat16, `fp8` e4m3fn.
"""

from __future__ import annotations

import torch

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0
GROUP = 128  # block-FP8 activation group and weight block edge


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """SGLang RMSNorm.forward_native: f32 math, residual sum rounded to bf16.

    x: [R, D] bf16; weight: [D] bf16; residual: [R, D] bf16 or None.
    Returns (normed [R, D] bf16, new residual [R, D] bf16: x + residual, or x when None).
    """
    dtype = x.dtype
    xf = x.float()
    if residual is not None:
        xf = xf + residual.float()
        new_residual = xf.to(dtype)
    else:
        new_residual = x
    var = xf.pow(2).mean(dim=-1, keepdim=True)
    xf = xf * torch.rsqrt(var + eps)
    return (xf * weight.float()).to(dtype), new_residual


def group_quant_fp8(x: torch.Tensor, group: int = GROUP, eps: float = 1e-10) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic per-row, per-`group` FP8 quant of activations (SGLang per_token_group_quant_fp8).

    x: [R, K] bf16/f32 (K % group == 0). Returns (q [R, K] fp8, scale [R, K/group] f32), x ≈ q * scale.
    """
    r, k = x.shape
    xg = x.float().view(r, k // group, group)
    amax = xg.abs().amax(dim=-1).clamp(min=eps)
    scale = amax / FP8_MAX
    q = (xg / scale[..., None]).clamp(-FP8_MAX, FP8_MAX).to(FP8)
    return q.view(r, k), scale


def act_quant_ue8m0(x: torch.Tensor, group: int = GROUP) -> tuple[torch.Tensor, torch.Tensor]:
    """SGLang act_quant(scale_fmt="ue8m0"): power-of-two scales, amax floor 1e-4 (indexer q and k).

    x: [R, K] (K % group == 0). Returns (q [R, K] fp8, scale [R, K/group] f32).
    """
    r, k = x.shape
    xg = x.float().view(r, k // group, group)
    amax = xg.abs().amax(dim=-1).clamp(min=1e-4)
    scale = torch.exp2(torch.ceil(torch.log2(amax * (1.0 / FP8_MAX))))
    q = (xg / scale[..., None]).clamp(-FP8_MAX, FP8_MAX).to(FP8)
    return q.view(r, k), scale


def block_fp8_matmul(
    xq: torch.Tensor, xs: torch.Tensor, w: torch.Tensor, ws: torch.Tensor, out_dtype=torch.bfloat16
) -> torch.Tensor:
    """W8A8 block-FP8 GEMM as SGLang's w8a8_block_fp8_matmul: per 128-wide k block, an f32 dot
    scaled by the row's activation scale and the weight block's scale, summed over blocks.

    xq: [R, K] fp8; xs: [R, K/128] f32; w: [N, K] fp8; ws: [ceil(N/128), K/128] f32 (scale_inv).
    Returns [R, N] out_dtype.
    """
    r, k = xq.shape
    n = w.shape[0]
    kb = k // GROUP
    xb = xq.float().view(r, kb, GROUP)  # (R, KB, 128)
    wb = w.float().view(n, kb, GROUP)  # (N, KB, 128)
    partial = torch.einsum("rkg,nkg->rnk", xb, wb)  # (R, N, KB) f32 block dots
    w_scale = ws.repeat_interleave(GROUP, dim=0)[:n]  # (N, KB)
    acc = (partial * xs[:, None, :] * w_scale[None, :, :]).sum(dim=-1)
    return acc.to(out_dtype)


def block_fp8_linear(x: torch.Tensor, w: torch.Tensor, ws: torch.Tensor, out_dtype=torch.bfloat16) -> torch.Tensor:
    """A block-FP8 linear on bf16 input: group quant, then block_fp8_matmul. x: [R, K] -> [R, N]."""
    xq, xs = group_quant_fp8(x)
    return block_fp8_matmul(xq, xs, w, ws, out_dtype)


def linear(x: torch.Tensor, w: torch.Tensor, ws: torch.Tensor | None, out_dtype=torch.bfloat16) -> torch.Tensor:
    """A linear as SGLang runs it for its weight dtype: block-FP8 W8A8 when `ws` is given, else
    the unquantized bf16 `F.linear` (SGLang's UnquantizedLinearMethod).

    x: [R, K] bf16; w: [N, K] fp8 (with ws [ceil(N/128), K/128] f32) or bf16 (ws None). -> [R, N].
    """
    if ws is None:
        return torch.nn.functional.linear(x.to(w.dtype), w).to(out_dtype)
    return block_fp8_linear(x, w, ws, out_dtype)


def last_writers(loc: torch.Tensor) -> torch.Tensor:
    """[R] bool: row r is the last row writing slot loc[r]. Pad rows all write slot 0, and an index_put with
    repeated indices keeps an unspecified one (on a GPU, any): the oracles and the launches keep the last row's.
    loc: [R] int."""
    rows = torch.arange(loc.shape[0], device=loc.device)
    _, slot_of_row = torch.unique(loc, return_inverse=True)  # O(R log R): a step's cache fill has 300K rows
    last_row = torch.full((int(slot_of_row.max()) + 1 if len(rows) else 0,), -1, dtype=rows.dtype, device=loc.device)
    last_row.scatter_reduce_(0, slot_of_row, rows, reduce="amax")
    return last_row[slot_of_row] == rows


def rope_cos_sin(positions: torch.Tensor, *, rotary_dim: int, theta: float) -> torch.Tensor:
    """SGLang's cos_sin_cache rows for `positions`: [R, rotary_dim] f32 = [cos | sin] (default rope)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float) / rotary_dim))
    freqs = positions.detach().to("cpu", torch.float)[:, None] * inv_freq[None, :]
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1).to(positions.device)


def rope_interleaved(x: torch.Tensor, cos_sin: torch.Tensor) -> torch.Tensor:
    """Interleaved (GPT-J) rope on pairs (2i, 2i+1), in f32, rounded to x.dtype.

    x: [R, H, rot] ; cos_sin: [R, rot] f32 rows of SGLang's cos_sin_cache at the rows' positions.
    """
    cos, sin = cos_sin.float().chunk(2, dim=-1)
    cos, sin = cos[:, None, :], sin[:, None, :]
    x1, x2 = x.float()[..., ::2], x.float()[..., 1::2]
    out = torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)
    return out.to(x.dtype)


def sparse_mla_decode(
    q: torch.Tensor, kv: torch.Tensor, slots: torch.Tensor, *, scale: float, v_dim: int
) -> torch.Tensor:
    """Sparse MLA over selected cache slots (SGLang's DSA decode): f32 scores and softmax.

    q: [R, H, Dk] (Dk = kv_lora + rope) ; kv: [S, Dk] cache latents (bf16 or fp8, k_scale 1);
    slots: [R, K] int physical slots, -1 = none. Returns [R, H, v_dim] bf16 (V = kv[:, :v_dim]).
    A row with no valid slot returns zeros.
    """
    valid = slots >= 0  # (R, K)
    rows = kv[slots.clamp(min=0).long()].float()  # (R, K, Dk)
    scores = torch.einsum("rhd,rkd->rhk", q.float(), rows) * scale
    scores = scores.masked_fill(~valid[:, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return torch.einsum("rhk,rkd->rhd", probs, rows[..., :v_dim]).to(torch.bfloat16)


def biased_topk(
    logits: torch.Tensor,
    bias: torch.Tensor,
    *,
    top_k: int,
    routed_scaling: float,
    n_fused: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sigmoid routing with a correction bias (SGLang biased_grouped_topk_impl, n_group 1).

    logits: [R, E] f32; bias: [E] f32. Chooses top_k by sigmoid + bias, weights are the chosen
    sigmoids renormalised (sum + 1e-20) and scaled by routed_scaling; the fused experts
    are appended as ids E.. with weight 1.0 (the routed scale is applied to the routed weights).
    Returns (weights [R, top_k + n_fused] f32, ids [R, top_k + n_fused] int32).
    """
    scores = logits.float().sigmoid()
    choice = scores + bias.float()[None, :]
    ids = torch.topk(choice, k=top_k, dim=-1, sorted=True)[1]
    w = scores.gather(1, ids)
    w = w / (w.sum(dim=-1, keepdim=True) + 1e-20) * routed_scaling
    if n_fused:
        e = logits.shape[1]
        fused_ids = torch.arange(e, e + n_fused, device=ids.device).expand(ids.shape[0], n_fused)
        ids = torch.cat((ids, fused_ids), dim=1)
        w = torch.cat((w, torch.ones(w.shape[0], n_fused, device=w.device)), dim=1)
    return w.float(), ids.to(torch.int32)


def silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """SiLU(gate) * up in f32, rounded to bf16. gate_up: [R, 2I] (gate first) -> [R, I]."""
    g, u = gate_up.float().chunk(2, dim=-1)
    return (torch.nn.functional.silu(g) * u).to(torch.bfloat16)


def moe_block_fp8(
    x: torch.Tensor,
    w13: torch.Tensor,
    w13_s: torch.Tensor,
    w2: torch.Tensor,
    w2_s: torch.Tensor,
    weights: torch.Tensor,
    ids: torch.Tensor,
) -> torch.Tensor:
    """Block-FP8 W8A8 MoE (SGLang fused_experts): per chosen expert gate|up, SiLU·up, requant,
    down; the routing weight applied to each expert's f32 output, summed in f32, rounded to bf16.

    x: [R, D] bf16; w13: [E, 2I, D] fp8, w13_s: [E, 2I/128, D/128] f32; w2: [E, D, I] fp8,
    w2_s: [E, D/128, I/128] f32; weights/ids: [R, k] f32/int. Returns [R, D] bf16.
    With w13_s / w2_s None the experts are bf16 (SGLang's unquantized MoE): F.linear in bf16.
    """
    is_fp8 = w13_s is not None
    if is_fp8:
        xq, xs = group_quant_fp8(x)
    out = torch.zeros(x.shape[0], w2.shape[1], dtype=torch.float32, device=x.device)
    for r in range(x.shape[0]):
        for j in range(ids.shape[1]):
            e = int(ids[r, j])
            if is_fp8:
                mid = silu_and_mul(block_fp8_matmul(xq[r : r + 1], xs[r : r + 1], w13[e], w13_s[e]))
                y = block_fp8_linear(mid, w2[e], w2_s[e], out_dtype=torch.float32)
            else:
                mid = silu_and_mul(torch.nn.functional.linear(x[r : r + 1], w13[e]))
                y = torch.nn.functional.linear(mid, w2[e]).float()
            out[r] += weights[r, j] * y[0]
    return out.to(torch.bfloat16)


def dense_mlp_block_fp8(
    x: torch.Tensor, gate_up: torch.Tensor, gate_up_s: torch.Tensor, down: torch.Tensor, down_s: torch.Tensor
) -> torch.Tensor:
    """SGLang DeepseekV2MLP: gate_up, SiluAndMul, down (block-FP8, or bf16 when the scales are None).
    x: [R, D] -> [R, D] bf16."""
    return linear(silu_and_mul(linear(x, gate_up, gate_up_s)), down, down_s)


def dequant_block_fp8(w: torch.Tensor, ws: torch.Tensor) -> torch.Tensor:
    """A block-FP8 weight as f32: w [N, K] fp8, ws [ceil(N/128), ceil(K/128)] -> [N, K] f32."""
    n, k = w.shape
    s = ws.repeat_interleave(GROUP, 0)[:n].repeat_interleave(GROUP, 1)[:, :k]
    return w.float() * s
