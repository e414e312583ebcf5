"""Triton tile helpers the launches share: block-FP8 W8A8 GEMV tiles, RMSNorm rows, interleaved rope.

Rows are padded to 16 for `tl.dot` (R <= 16 live rows, masked). Activations are quantized on the
fly per 128-wide group with SGLang's per_token_group_quant_fp8 numerics (scale = max(amax,
1e-10) / 448), so no stage writes a quantized copy. Scratch written inside a launch is read with
`.cg` loads (L2, never a stale L1 line).
"""

import os

import triton
import triton.language as tl

FP8_MAX: tl.constexpr = tl.constexpr(448.0)
# Triton's interpreter truncates f32 -> bf16 and rounds f32 -> fp8 differently from the GPUs' RNE
# conversions; under it the helpers below round to nearest-even by hand (same bits as the GPU).
_SOFT_CVT: tl.constexpr = tl.constexpr(os.environ.get("TRITON_INTERPRET", "0") == "1")


@triton.jit
def to_bf16(x):
    """f32 -> bf16, round to nearest even (finite inputs)."""
    if _SOFT_CVT:
        b = x.to(tl.uint32, bitcast=True)
        b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
        return b.to(tl.float32, bitcast=True).to(tl.bfloat16)
    else:
        return x.to(tl.bfloat16)


@triton.jit
def dot_bf16(a, b):
    """tl.dot of bf16 operands with f32 accumulation (the interpreter mis-reads bf16 dot operands,
    so under it the exact f32 product of the same values is used)."""
    if _SOFT_CVT:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    else:
        return tl.dot(a, b)


@triton.jit
def to_fp8(x):
    """f32 in [-448, 448] -> fp8 e4m3fn, round to nearest even."""
    if _SOFT_CVT:
        b = x.to(tl.uint32, bitcast=True)
        normal = ((b + 0x7FFFF + ((b >> 20) & 1)) & 0xFFF00000).to(tl.float32, bitcast=True)
        y = tl.abs(x) * 512.0
        sub = ((y + 12582912.0) - 12582912.0) / 512.0
        sub = tl.where(x < 0, -sub, sub)
        return tl.where(tl.abs(x) >= 0.015625, normal, sub).to(tl.float8e4nv)
    else:
        return x.to(tl.float8e4nv)


@triton.jit
def quant_group(x):
    """x: [16, 128] f32 -> (xq [16, 128] fp8e4nv, xs [16] f32), per_token_group_quant_fp8 numerics."""
    amax = tl.maximum(tl.max(tl.abs(x), axis=1), 1e-10)
    xs = amax / FP8_MAX
    xq = to_fp8(tl.clamp(x / xs[:, None], -FP8_MAX, FP8_MAX))
    return xq, xs


@triton.jit
def fp8_gemv_tile(x_ptr, stride_x, w_ptr, stride_wn, ws_ptr, stride_wsn, n0, N,
                  R: tl.constexpr, K: tl.constexpr, BN: tl.constexpr):
    """acc [16, BN] f32 = sum_kb dot(q(x), w^T) * xs * ws for columns n0..n0+BN of a block-FP8 weight.

    x: [R, K] bf16 rows at stride_x (quantized here) ; w: [N, K] fp8 at stride_wn ;
    ws: [ceil(N/128), K/128] f32 at stride_wsn.
    """
    rows = tl.arange(0, 16)
    rmask = rows < R
    offs_n = n0 + tl.arange(0, BN)
    nmask = offs_n < N
    acc = tl.zeros((16, BN), dtype=tl.float32)
    for kb in range(K // 128):
        offs_k = kb * 128 + tl.arange(0, 128)
        w = tl.load(w_ptr + offs_n[None, :] * stride_wn + offs_k[:, None], mask=nmask[None, :], other=0.0)
        ws = tl.load(ws_ptr + (offs_n // 128) * stride_wsn + kb, mask=nmask, other=0.0)
        x = tl.load(x_ptr + rows[:, None] * stride_x + offs_k[None, :], mask=rmask[:, None], other=0.0,
                    cache_modifier=".cg").to(tl.float32)
        xq, xs = quant_group(x)
        acc += tl.dot(xq, w) * xs[:, None] * ws[None, :]
    return acc


@triton.jit
def rms_row(x_ptr, res_ptr, w_ptr, out_ptr, res_out_ptr, eps, D: tl.constexpr, BLK: tl.constexpr,
            HAS_RES: tl.constexpr):
    """One row of SGLang RMSNorm (f32 math): s = x (+ res); res_out = bf16(s); out = bf16(s * rstd * w)."""
    ss = tl.zeros((BLK,), dtype=tl.float32)
    for c in range(D // BLK):
        offs = c * BLK + tl.arange(0, BLK)
        s = tl.load(x_ptr + offs, cache_modifier=".cg").to(tl.float32)
        if HAS_RES:
            s += tl.load(res_ptr + offs, cache_modifier=".cg").to(tl.float32)
            tl.store(res_out_ptr + offs, to_bf16(s))
        ss += s * s
    rstd = tl.math.rsqrt(tl.sum(ss, axis=0) / D + eps)
    for c in range(D // BLK):
        offs = c * BLK + tl.arange(0, BLK)
        s = tl.load(x_ptr + offs, cache_modifier=".cg").to(tl.float32)
        if HAS_RES:
            s += tl.load(res_ptr + offs, cache_modifier=".cg").to(tl.float32)
        w = tl.load(w_ptr + offs).to(tl.float32)
        tl.store(out_ptr + offs, to_bf16((s * rstd) * w))


@triton.jit
def rope_pairs(x_ptr, cs_ptr, ROPE: tl.constexpr):
    """Interleaved rope of one [ROPE] bf16 vector: returns (even, odd) [ROPE/2] f32 rotated pairs."""
    i = tl.arange(0, ROPE // 2)
    x1 = tl.load(x_ptr + 2 * i, cache_modifier=".cg").to(tl.float32)
    x2 = tl.load(x_ptr + 2 * i + 1, cache_modifier=".cg").to(tl.float32)
    cos = tl.load(cs_ptr + i)
    sin = tl.load(cs_ptr + ROPE // 2 + i)
    return x1 * cos - x2 * sin, x2 * cos + x1 * sin
