"""Triton tile helpers the launches share: block-FP8 W8A8 GEMV tiles, RMSNorm rows, interleaved rope.

Rows are padded to 16 for `tl.dot` (R <= 16 live rows, masked). Activations are quantized once per
128-wide group by their producer (SGLang's per_token_group_quant_fp8 numerics: scale = max(amax,
1e-10) / 448) into fp8 + f32 scale scratch; GEMV tiles are split-K parts with a pipelined k loop. Scratch written inside a launch is read with
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
def fp8_gemv_part(xq_ptr, xs_ptr, stride_x, stride_xs, w_ptr, stride_wn, ws_ptr, stride_wsn, n0, N, kb0,
                  R: tl.constexpr, NKB: tl.constexpr, BN: tl.constexpr, STAGES: tl.constexpr, SWAP: tl.constexpr):
    """acc [16, BN] f32 = sum over k blocks kb0..kb0+NKB-1 (in order) of dot(xq, w^T) * xs * ws, for
    columns n0..n0+BN of a block-FP8 weight (one split-K part; the caller sums parts in a fixed order).

    xq: [R, K] fp8 at stride_x, xs: [R, K/128] f32 at stride_xs (quantized once by the producer);
    w: [N, K] fp8 at stride_wn ; ws: [ceil(N/128), K/128] f32 at stride_wsn. The k loop is software
    pipelined (STAGES buffers in flight). SWAP: each block's product is taken as w tile @ xq^T
    (`_block_dot`).
    """
    return fp8_gemv_part_from(tl.zeros((16, BN), dtype=tl.float32), xq_ptr, xs_ptr, stride_x, stride_xs, w_ptr,
                              stride_wn, ws_ptr, stride_wsn, n0, N, kb0, R, NKB, BN, STAGES, SWAP)


@triton.jit
def _x_tile(xq_ptr, stride_x, offs_k, R: tl.constexpr, SWAP: tl.constexpr):
    """One k block of the quantized rows for `_block_dot`: xq [16, 128], or xq^T [128, 16] with SWAP."""
    rows = tl.arange(0, 16)
    if SWAP:
        return tl.load(xq_ptr + rows[None, :] * stride_x + offs_k[:, None], mask=(rows < R)[None, :], other=0.0,
                       cache_modifier=".cg")
    else:
        return tl.load(xq_ptr + rows[:, None] * stride_x + offs_k[None, :], mask=(rows < R)[:, None], other=0.0,
                       cache_modifier=".cg")


@triton.jit
def _block_dot(acc, x, xs, w_ptr, ws, offs_n, nmask, offs_k, SWAP: tl.constexpr):
    """acc + one k block's scaled product, x from `_x_tile`. Rows-first (acc [16, BN]): dot(xq [16, 128],
    w^T [128, BN]). SWAP (acc [BN, 16], the caller transposes): dot(w [BN, 128], xq^T [128, 16]), the
    weight tile as the first operand. On sm_90 that is a wgmma reading the fp8 tile from SMEM;
    rows-first is an mma.sync that converts every weight tile to f16 in registers and repeats the
    [16, 128] activation tile's conversion in every warp. Swapped is faster (H200, 8 rows,
    results/probe_tiles_h200.log: MoE down 30.8 vs 37.5 us at 8 warps, 24.9 vs 33.4 at 4; up 42.2 vs 47.0)
    but the fp8 wgmma sums each 32-long k slice at reduced precision: the GEMVs land within ~1.5e-4
    relative of exact against ~1e-7 rows first, which the requantizations after them turn into
    check_layer failures (`Tiles.swap_ab`, off by default). For the MoE GEMVs alone, whose outputs reach
    only act's and the layer output's roundings, it is the NVIDIA default (`Tiles.swap_moe`). Storing the
    quantized activations as f16 holding their fp8 values, so that rows first converts only the weight
    tile, was slower in the launch (up 54.8 vs 46.6 us, down 40.2 vs 34.8 at 8 rows;
    results/final_h200_act_f16.log)."""
    if SWAP:
        w = tl.load(w_ptr + offs_n[:, None] + offs_k[None, :], mask=nmask[:, None], other=0.0)
        return acc + tl.dot(w, x) * ws[:, None] * xs[None, :]
    else:
        w = tl.load(w_ptr + offs_n[None, :] + offs_k[:, None], mask=nmask[None, :], other=0.0)
        return acc + tl.dot(x, w) * xs[:, None] * ws[None, :]


@triton.jit
def fp8_gemv_part_from(acc, xq_ptr, xs_ptr, stride_x, stride_xs, w_ptr, stride_wn, ws_ptr, stride_wsn, n0, N, kb0,
                       R: tl.constexpr, NKB: tl.constexpr, BN: tl.constexpr, STAGES: tl.constexpr,
                       SWAP: tl.constexpr):
    """fp8_gemv_part's k loop added onto acc [16, BN] (a first block the caller multiplied itself)."""
    rows = tl.arange(0, 16)
    rmask = rows < R
    offs_n = n0 + tl.arange(0, BN)
    nmask = offs_n < N
    if SWAP:
        acc = tl.trans(acc)
    for kb in tl.range(kb0, kb0 + NKB, num_stages=STAGES):
        ws = tl.load(ws_ptr + (offs_n // 128) * stride_wsn + kb, mask=nmask, other=0.0)
        xs = tl.load(xs_ptr + rows * stride_xs + kb, mask=rmask, other=0.0, cache_modifier=".cg")
        offs_k = kb * 128 + tl.arange(0, 128)
        acc = _block_dot(acc, _x_tile(xq_ptr, stride_x, offs_k, R, SWAP), xs, w_ptr, ws, offs_n * stride_wn, nmask,
                         offs_k, SWAP)
    if SWAP:
        acc = tl.trans(acc)
    return acc


@triton.jit
def fp8_gemv_experts(xq_ptr, xs_ptr, w_ptr, ws_ptr, experts_ptr, n_exp, n0, R: tl.constexpr, N: tl.constexpr,
                     K: tl.constexpr, E: tl.constexpr, BN: tl.constexpr, BP: tl.constexpr, STAGES: tl.constexpr,
                     SWAP: tl.constexpr):
    """acc [16, BP] f32 = sum over u < n_exp (in order) and k blocks (in order) of dot(xq[u], w[e_u]^T)
    * xs[u] * ws[e_u], for the BN (<= BP, a power of two) columns n0.. of every expert e_u = experts[u]
    (clamped to [0, E]). One pipelined loop over (expert, pair of k blocks), the pair unrolled inside (one
    iteration an expert when K is 256, as at the TP8 shard), so the next experts' weights stream while
    this one's multiply. Columns past BN or N are 0. SWAP: `_block_dot`.
    (H200, 48 experts of the TP8 down, `probe_moe_down.py`: 34.7 us; one loop over (expert, k block)
    47.7 us, or 40.7 us without the expert-id load; one task per (expert, column tile) 34.9 us plus a
    combine of the partials. Unrolling all of an expert's k blocks does not fit SMEM at TP1.)

    (H200, TP8 8K: loading the ids once before the loop and picking each iteration's from registers, as
    the up stage does, made this stage slower: 50.9 vs 34.8 us at 8 rows; results/trace_h200_moe_flat.log.
    So did 2 or 4 experts an iteration, each id masked past n_exp: 41.0 / 46.8 us at 8 rows, and the masks
    alone 36.1; results/trace_h200_down_experts_per_iter.log.)

    xq: [n_exp, R, K] fp8, xs: [n_exp, R, K/128] f32; w: [E + 1, N, K] fp8, ws: [E + 1, N/128, K/128] f32.
    """
    NKB: tl.constexpr = K // 128
    KU: tl.constexpr = 2 if NKB % 2 == 0 else 1  # k blocks an iteration
    NKC: tl.constexpr = NKB // KU
    rows = tl.arange(0, 16)
    rmask = rows < R
    offs_n = n0 + tl.arange(0, BP)
    nmask = (tl.arange(0, BP) < BN) & (offs_n < N)
    if SWAP:
        acc = tl.zeros((BP, 16), dtype=tl.float32)
    else:
        acc = tl.zeros((16, BP), dtype=tl.float32)
    for i in tl.range(0, n_exp * NKC, num_stages=STAGES):
        u = i // NKC
        e = tl.minimum(tl.maximum(tl.load(experts_ptr + u), 0), E).to(tl.int64)
        for j in tl.static_range(KU):
            kb = (i % NKC) * KU + j
            ws = tl.load(ws_ptr + e * ((N // 128) * NKB) + (offs_n // 128) * NKB + kb, mask=nmask, other=0.0)
            xs = tl.load(xs_ptr + (u * R + rows) * NKB + kb, mask=rmask, other=0.0, cache_modifier=".cg")
            offs_k = kb * 128 + tl.arange(0, 128)
            acc = _block_dot(acc, _x_tile(xq_ptr + u * R * K, K, offs_k, R, SWAP), xs, w_ptr + e * (N * K), ws,
                             offs_n * K, nmask, offs_k, SWAP)
    if SWAP:
        acc = tl.trans(acc)
    return acc


@triton.jit
def norm_quant_row(s, w, out_ptr, xq_ptr, xs_ptr, eps, D: tl.constexpr, GP: tl.constexpr, STORE_OUT: tl.constexpr):
    """RMSNorm of one row held as s [GP, 128] f32 (row-major 128-groups, groups >= D/128 zero) with the
    norm weight w [GP, 128] f32 (loaded by the caller before its stores, so no load waits behind them),
    in one round: out = bf16(s * rstd * w) [D] bf16 (stored only with STORE_OUT; out_ptr unused
    otherwise), and out quantized per 128-group (xq [D] fp8, xs [D/128] f32, per_token_group_quant_fp8
    numerics)."""
    g = tl.arange(0, GP)
    offs = g[:, None] * 128 + tl.arange(0, 128)[None, :]
    m = g[:, None] < D // 128
    rstd = tl.math.rsqrt(tl.sum(tl.sum(s * s, axis=1), axis=0) / D + eps)
    y = to_bf16((s * rstd) * w)
    if STORE_OUT:
        tl.store(out_ptr + offs, y, mask=m)
    yq, ys = quant_group(y.to(tl.float32))
    tl.store(xq_ptr + offs, yq, mask=m)
    tl.store(xs_ptr + g, ys, mask=g < D // 128)


@triton.jit
def fp8_gemv2_expert_tasks(xq_ptr, xs_ptr, w_ptr, ws_ptr, experts_ptr, part_ptr, pid, n_tasks, R: tl.constexpr,
                           I: tl.constexpr, K: tl.constexpr, E: tl.constexpr, BU: tl.constexpr, KS: tl.constexpr,
                           NPROG: tl.constexpr, MT: tl.constexpr, STAGES: tl.constexpr, SWAP: tl.constexpr):
    """This program's tasks t = pid, pid + NPROG, ... < n_tasks of the experts' gate | up GEMV in one
    pipelined loop over (task, k block), so the next task's weights stream while this one ends. Task t:
    used expert u = t // (I/BU * KS) (id experts[u], clamped to [0, E]), column tile nt = t // KS % (I/BU),
    k part ks = t % KS; part[u * KS + ks, r, nt tile] = the gate part, [.., I + nt tile] the up part (f32),
    each the sum over its k blocks in order. The ids of this program's tasks are loaded once (MT: a power
    of two >= its task count), so no weight address waits on a load made in the loop. SWAP: `_block_dot`.
    (H200, TP8 8K, results/trace_h200_moe_flat.log: up at 4 / 8 rows 34.0 / 47.9 us against 36.1 / 50.4
    for one pipelined loop a task, whose pipeline drained between tasks; 5 or 6 stages instead of 4 were
    no faster.)

    xq: [R, K] fp8, xs: [R, K/128] f32; w: [E + 1, 2I, K] fp8, ws: [E + 1, 2I/128, K/128] f32;
    part: [n_used * KS, R, 2I] f32."""
    NT: tl.constexpr = I // BU
    NKB: tl.constexpr = (K // 128) // KS
    rows = tl.arange(0, 16)
    rmask = rows < R
    n_my = tl.cdiv(tl.maximum(n_tasks - pid, 0), NPROG)
    jj = tl.arange(0, MT)
    tj = pid + jj * NPROG
    ids = tl.load(experts_ptr + tj // (NT * KS), mask=tj < n_tasks, other=0)
    if SWAP:
        acc_a = tl.zeros((BU, 16), dtype=tl.float32)
        acc_b = tl.zeros((BU, 16), dtype=tl.float32)
    else:
        acc_a = tl.zeros((16, BU), dtype=tl.float32)
        acc_b = tl.zeros((16, BU), dtype=tl.float32)
    for i in tl.range(0, n_my * NKB, num_stages=STAGES):
        j = i // NKB
        kk = i % NKB
        t = pid + j * NPROG
        nt = (t // KS) % NT
        ks = t % KS
        e = tl.minimum(tl.maximum(tl.sum(tl.where(jj == j, ids, 0), axis=0), 0), E).to(tl.int64)  # exact
        kb = ks * NKB + kk
        offs_k = kb * 128 + tl.arange(0, 128)
        offs_a = nt * BU + tl.arange(0, BU)
        we = w_ptr + e * (2 * I * K)
        sa = tl.load(ws_ptr + e * ((2 * I // 128) * (K // 128)) + (offs_a // 128) * (K // 128) + kb)
        sb = tl.load(ws_ptr + e * ((2 * I // 128) * (K // 128)) + ((I + offs_a) // 128) * (K // 128) + kb)
        xs = tl.load(xs_ptr + rows * (K // 128) + kb, mask=rmask, other=0.0, cache_modifier=".cg")
        x = _x_tile(xq_ptr, K, offs_k, R, SWAP)
        acc_a = _block_dot(tl.where(kk == 0, 0.0, acc_a), x, xs, we, sa, offs_a * K, offs_a < I, offs_k, SWAP)
        acc_b = _block_dot(tl.where(kk == 0, 0.0, acc_b), x, xs, we, sb, (I + offs_a) * K, offs_a < I, offs_k, SWAP)
        if kk == NKB - 1:
            pb = part_ptr + (((t // (NT * KS)) * KS + ks) * R + rows[:, None]) * (2 * I)
            if SWAP:
                tl.store(pb + offs_a[None, :], tl.trans(acc_a), mask=rmask[:, None])
                tl.store(pb + I + offs_a[None, :], tl.trans(acc_b), mask=rmask[:, None])
            else:
                tl.store(pb + offs_a[None, :], acc_a, mask=rmask[:, None])
                tl.store(pb + I + offs_a[None, :], acc_b, mask=rmask[:, None])


@triton.jit
def store_kept(ptrs, value, mask, KEEP: tl.constexpr):
    """tl.store; KEEP: marked to leave L2 last (sm_90: an evict_last cache policy), for a buffer an indexer kind
    writes before its score stage streams every request's cached keys through L2 and reads after it
    (tiles.index_keep_scores: the scores)."""
    if KEEP:
        tl.store(ptrs, value, mask=mask, eviction_policy="evict_last")
    else:
        tl.store(ptrs, value, mask=mask)


@triton.jit
def sum_parts(ptr, stride_part, offs, mask, KS: tl.constexpr):
    """f32 sum of KS split-K parts at ptr + k * stride_part + offs, in part order 0, 1, ... (fixed)."""
    acc = tl.load(ptr + offs, mask=mask, other=0.0, cache_modifier=".cg")
    for k in tl.static_range(1, KS):
        acc += tl.load(ptr + k * stride_part + offs, mask=mask, other=0.0, cache_modifier=".cg")
    return acc


@triton.jit
def quant_row(x_ptr, xq_ptr, xs_ptr, K: tl.constexpr):
    """One bf16 row of K (a multiple of 128) -> fp8 xq [K] and per-128-group scales xs [K/128], with
    per_token_group_quant_fp8 numerics (the same bits as quantizing it inside a GEMV tile)."""
    G: tl.constexpr = 8 if (K // 128) % 8 == 0 else (4 if (K // 128) % 4 == 0 else (2 if (K // 128) % 2 == 0 else 1))
    g = tl.arange(0, G)
    c = tl.arange(0, 128)
    for b in range(K // (128 * G)):
        offs = (b * G + g)[:, None] * 128 + c[None, :]
        x = tl.load(x_ptr + offs, cache_modifier=".cg").to(tl.float32)
        amax = tl.maximum(tl.max(tl.abs(x), axis=1), 1e-10)
        xs = amax / FP8_MAX
        tl.store(xq_ptr + offs, to_fp8(tl.clamp(x / xs[:, None], -FP8_MAX, FP8_MAX)))
        tl.store(xs_ptr + b * G + g, xs)
