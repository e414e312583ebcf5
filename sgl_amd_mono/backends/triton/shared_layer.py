"""The "shared" launch in Triton: one persistent launch for one MoE layer that reuses the previous top-k.

Stages (each spread over the programs, consecutive stages joined by epoch-tagged barriers):
  0 norm1   [R]      res1 = hidden + residual; xn1 = RMSNorm(res1) in one round over the row, kept only
                     quantized (fp8 + group scales: xq1, xs1)
  1 qkv_a   [N/BN*KS] split-K parts of block-FP8 fused_qkv_a(xn1), f32
  2 latent  [2R]     qkv = bf16(sum of parts); ql = q_a_norm(q) (+ quantized); this step's cache row =
                     [kv_a_norm(c_kv) | rope(k_pe)] at out_loc
  3 q_b     [N/BN*KS] split-K parts of block-FP8 q_b(ql)
  4 absorb  [H*KVL/128]  qfull = bf16(sum of parts); qcat[:, h, :KVL] = q_nope @ w_kc[h]; rope(q_pe)
  5 attn    [R*HG*NSPLIT] split-K sparse MLA partials (m, l, acc) over each row's top-k slots
  6 w_uv    [H*VH/128*KVL/128]  the partials combined for one latent chunk, @ that chunk of w_vc[h]:
                     f32 parts of v; the last part of a v group to land sums the parts in chunk order
                     and quantizes the group (an epoch-tagged arrival count, no extra barrier)
  7 o_proj  [D/BN*KS] split-K parts of block-FP8 o_proj(v); the last part of a column tile to land (an
                     epoch-tagged arrival count) sums the tile's parts: o = bf16(sum), res2 = bf16(o + res1)
  8 norm2   [R]      xn2 = RMSNorm(o + res1), stored bf16 and quantized once
  9 gate    [E/BE*KS] split-K parts of logits = xn2 @ gate^T (f32)
 10 route   [R*E/RC] row r, experts c*RC..: sigmoid + bias rank among the row's scores; rw[e, r] = the
                     picked experts' scores (renormalised by their readers), ids in rank order
 11 up      [U*I/BU*KS] every program first lists the used experts itself (from rw, with each row's
                     renormalisation), then split-K parts of gate | up (block-FP8 W8A8) per used expert:
                     a program's tasks in one pipelined loop over (task, k block)
 12 act     [U*I/128] act = SiLU(bf16(gate)) * bf16(up), quantized (fp8 + group scales x the routing
                     weight w[u, r]); then row r's routing weights (output) on program NPROG-1-r
 13 down    [D/DCW*P] out[:, cols] = sum over used experts u (in order) of block-FP8 down(act_u): one
                     pipelined loop over every expert's k blocks (no float atomics: bitwise reproducible);
                     with P = DN_PARTS > 1 parts of the experts, the last part of a column tile to land
                     sums the parts in order
Every split-K sum is taken in part order 0, 1, ... by its consumer: the same bits on every run.
Tensor shapes are documented at `glm53/launch_shared.py`, which binds SGLang's tensors to this kernel.
"""

import triton
import triton.language as tl

from sgl_amd_mono.backends.triton.sync import arrive, read_epoch, wait_counter
from sgl_amd_mono.backends.triton.tiles import (dot_bf16, fp8_gemv2_expert_tasks, fp8_gemv_experts, fp8_gemv_part,
                                                 fp8_gemv_part_from, norm_quant_row, quant_group, quant_row, sum_parts,
                                                 to_bf16, to_fp8)

STAGES = ("norm1", "qkv_a", "latent", "q_b", "absorb", "attn", "w_uv", "o_proj",
          "norm2", "gate", "route", "up", "act", "down")
N_COUNTERS = tl.constexpr(len(STAGES))  # one arrival counter a stage; the last one ends the step


@triton.jit
def _to_cache(x_bf16, kv_ptr):
    """A bf16 value in the cache's dtype (bf16, or fp8 e4m3fn as SGLang's cast)."""
    if kv_ptr.dtype.element_ty == tl.bfloat16:
        return x_bf16
    else:
        return to_fp8(x_bf16.to(tl.float32))


@triton.jit
def _gemv_first_block(w_ptr, ws_ptr, pid, N, K: tl.constexpr, KS: tl.constexpr, BN: tl.constexpr,
                      PRELOAD: tl.constexpr):
    """PRELOAD builds: the first weight block of this program's first task (task pid) of a split-K GEMV
    stage, and its block scales, loaded before the wait for the stage's inputs (weights never depend on
    the stage before); columns past N (or a program with no task) read nothing. Other builds: (0, 0),
    unused."""
    if PRELOAD:
        NKB: tl.constexpr = (K // 128) // KS
        offs_n = (pid // KS) * BN + tl.arange(0, BN)
        nmask = offs_n < N
        offs_k = (pid % KS) * NKB * 128 + tl.arange(0, 128)
        w0 = tl.load(w_ptr + offs_n[None, :] * K + offs_k[:, None], mask=nmask[None, :], other=0.0)
        ws0 = tl.load(ws_ptr + (offs_n // 128) * (K // 128) + (pid % KS) * NKB, mask=nmask, other=0.0)
        return w0, ws0
    else:
        return 0.0, 0.0


@triton.jit
def _gemv_stage(xq_ptr, xs_ptr, w_ptr, ws_ptr, part_ptr, n_tasks, pid, N, w0, ws0, R: tl.constexpr,
                K: tl.constexpr, KS: tl.constexpr, BN: tl.constexpr, STAGES: tl.constexpr, NPROG: tl.constexpr,
                PRELOAD: tl.constexpr, SWAP: tl.constexpr):
    """This program's tasks of a split-K block-FP8 GEMV stage: task t is column tile t // KS, k part
    t % KS; part[ks, r, n] (f32) = the k part's sum. xq/xs: [R, K] fp8 / [R, K/128] f32 quantized rows;
    w: [N, K] fp8, ws its block scales; part: [KS, R, N] f32. n_tasks is 0 for a skipped stage.
    PRELOAD: the first task starts from w0 / ws0 (`_gemv_first_block`, loaded before the wait); the
    sum is the same: its first block's product, then the rest in order.
    (A flat pipelined loop over (task, k block) was timed on the H200 too: no faster here, and slower
    for the MoE stages, whose expert id feeds the weight address.)"""
    rows = tl.arange(0, 16)
    rmask = rows < R
    NKB: tl.constexpr = (K // 128) // KS
    start = pid
    if PRELOAD:
        if pid < n_tasks:
            nt = pid // KS
            kb0 = (pid % KS) * NKB
            offs_k = kb0 * 128 + tl.arange(0, 128)
            xq0 = tl.load(xq_ptr + rows[:, None] * K + offs_k[None, :], mask=rmask[:, None], other=0.0,
                          cache_modifier=".cg")
            xs0 = tl.load(xs_ptr + rows * (K // 128) + kb0, mask=rmask, other=0.0, cache_modifier=".cg")
            acc = fp8_gemv_part_from(tl.dot(xq0, w0) * xs0[:, None] * ws0[None, :], xq_ptr, xs_ptr, K, K // 128,
                                     w_ptr, K, ws_ptr, K // 128, nt * BN, N, kb0 + 1, R, NKB - 1, BN, STAGES, SWAP)
            offs_n = nt * BN + tl.arange(0, BN)
            tl.store(part_ptr + ((pid % KS) * R + rows[:, None]) * N + offs_n[None, :], acc,
                     mask=rmask[:, None] & (offs_n[None, :] < N))
        start = pid + NPROG
    for t in tl.range(start, n_tasks, NPROG, num_stages=1):  # tasks: never pipelined
        nt = t // KS
        ks = t % KS
        acc = fp8_gemv_part(xq_ptr, xs_ptr, K, K // 128, w_ptr, K, ws_ptr, K // 128, nt * BN, N,
                            ks * NKB, R, NKB, BN, STAGES, SWAP)
        offs_n = nt * BN + tl.arange(0, BN)
        tl.store(part_ptr + (ks * R + rows[:, None]) * N + offs_n[None, :], acc,
                 mask=rmask[:, None] & (offs_n[None, :] < N))


@triton.jit
def _route_chunk(lg_part_ptr, bias_ptr, ids_ptr, rw_ptr, r, c, R: tl.constexpr, E: tl.constexpr,
                 E_PAD: tl.constexpr, TOPK: tl.constexpr, KS_G: tl.constexpr, RC: tl.constexpr):
    """The router for experts c*RC .. c*RC+RC-1 of row r: each one's rank among all biased scores
    (higher first, lower id first on ties: the order of an arg-max loop) says whether it is in the
    top-k. Writes ids[r, rank] = e for the picked ones, and rw[e, r] = its sigmoid score (0 if not
    picked). Chunk 0 also writes the fused shared expert E at ids[r, TOPK] and rw[E, r] = 1.
    The renormalisation (x routed_scaling / the row's sum of picked scores) is applied by the readers
    (`_used_experts` gives every program each row's factor). The chunk's own scores are taken out of
    the [E_PAD / RC, RC] view of the row's by an exact masked sum (one term a column), so both sides of
    every comparison are the same bits; the comparisons are an [E_PAD, RC] tile summed over experts."""
    NC: tl.constexpr = E_PAD // RC
    ex = tl.arange(0, E_PAD)
    em = ex < E
    score = tl.sigmoid(sum_parts(lg_part_ptr + r * E, R * E, ex, em, KS_G))
    choice = tl.where(em, score + tl.load(bias_ptr + ex, mask=em, other=0.0), float("-inf"))
    ei = c * RC + tl.arange(0, RC)
    pick = tl.arange(0, NC)[:, None] == c
    ci = tl.sum(tl.where(pick, tl.reshape(choice, (NC, RC)), 0.0), axis=0)  # exact: x + 0.0
    si = tl.sum(tl.where(pick, tl.reshape(score, (NC, RC)), 0.0), axis=0)
    beats = (choice[:, None] > ci[None, :]) | ((choice[:, None] == ci[None, :]) & (ex[:, None] < ei[None, :]))
    rank = tl.sum(beats.to(tl.int32), axis=0)
    sel = (rank < TOPK) & (ei < E)
    tl.store(ids_ptr + r * (TOPK + 1) + rank, ei, mask=sel)
    tl.store(rw_ptr + ei * 16 + r, tl.where(sel, si, 0.0), mask=ei < E)
    if c == 0:
        tl.store(ids_ptr + r * (TOPK + 1) + TOPK, E)
        tl.store(rw_ptr + E * 16 + r, 1.0)


@triton.jit
def _used_experts(rw_ptr, uniq_ptr, routed_scaling, R: tl.constexpr, E: tl.constexpr, E_PAD: tl.constexpr):
    """This program's own list of the experts any row uses (rw != 0), ascending, the shared expert E
    last, at uniq_ptr. Returns (its length, scale [16]): scale[r] = routed_scaling / (row r's sum of
    picked scores), the router's renormalisation."""
    rows = tl.arange(0, 16)
    ex = tl.arange(0, E_PAD)
    rw = tl.load(rw_ptr + ex[:, None] * 16 + rows[None, :], mask=(ex[:, None] < E) & (rows[None, :] < R),
                 other=0.0, cache_modifier=".cg")
    used = tl.max((rw != 0.0).to(tl.int32), axis=1)
    n_used = tl.sum(used, axis=0)
    tl.store(uniq_ptr + tl.cumsum(used, axis=0) - 1, ex, mask=used != 0)
    tl.store(uniq_ptr + n_used, E)
    scale = routed_scaling / (tl.sum(rw, axis=0) + 1e-20)
    tl.debug_barrier()  # this program's list is stored before its threads read it back
    return n_used + 1, scale


@triton.jit
def _stamp(trace_ptr, pid, slot, TRACE: tl.constexpr):
    """TRACE builds only: this program's global timer (ns) at trace[pid, slot]."""
    if TRACE:
        tl.debug_barrier()
        tl.store(trace_ptr + pid * (2 * N_COUNTERS) + slot, tl.extra.cuda.globaltimer())


@triton.jit
def _barrier(sync_ptr, err_ptr, stage, epoch, ok, pid, launch_id, bound, NPROG: tl.constexpr,
             TIMER: tl.constexpr, SKIP_ARRIVE: tl.constexpr, trace_ptr, TRACE: tl.constexpr):
    """End `stage` on this program and wait for every program to end it. Returns the new ok.
    TRACE: stamps trace[pid, 2 * stage] at the arrival and trace[pid, 2 * stage + 1] at the wait's exit."""
    _stamp(trace_ptr, pid, 2 * stage, TRACE)
    if stage != SKIP_ARRIVE:  # SKIP_ARRIVE: a planted missing arrival (deadline tests); -1 = none
        arrive(sync_ptr, stage)
    if ok != 0:
        ok = wait_counter(sync_ptr, stage, epoch * NPROG, err_ptr, launch_id, stage, pid, epoch, bound, TIMER)
    _stamp(trace_ptr, pid, 2 * stage + 1, TRACE)
    return ok


@triton.jit
def _last_to_land(count_ptr, epoch, n_parts):
    """Count this task's part (its stores first) at an epoch-tagged arrival count that takes n_parts a
    step; true for the step's last part to land, which may then read all of them."""
    tl.debug_barrier()  # every thread's part stored before the arrival
    return tl.atomic_add(count_ptr, 1, sem="acq_rel") == epoch * n_parts - 1


@triton.jit
def _rope_vals(x1, x2, cs_ptr, ROPE: tl.constexpr):
    """Interleaved rope of (even, odd) f32 halves: returns the rotated (even, odd)."""
    i = tl.arange(0, ROPE // 2)
    cos = tl.load(cs_ptr + i)
    sin = tl.load(cs_ptr + ROPE // 2 + i)
    return x1 * cos - x2 * sin, x2 * cos + x1 * sin


@triton.jit
def shared_layer_kernel(
    # inputs
    hidden_ptr, residual_ptr, cos_sin_ptr, out_loc_ptr, topk_ptr, kv_ptr, stride_kv,
    # attention weights
    in_norm_ptr, qkv_a_ptr, qkv_a_s_ptr, q_a_norm_ptr, kv_a_norm_ptr, q_b_ptr, q_b_s_ptr,
    w_kc_ptr, s_kc0, s_kc1, s_kc2, w_vc_ptr, s_vc0, s_vc1, s_vc2, o_proj_ptr, o_proj_s_ptr, post_norm_ptr,
    # moe weights
    gate_ptr, bias_ptr, w13_ptr, w13_s_ptr, w2_ptr, w2_s_ptr,
    # outputs
    out_ptr, res_out_ptr, o_ptr, ids_ptr, wts_ptr,
    # scratch
    res1_ptr, xq1_ptr, xs1_ptr, qkv_part_ptr, ql_ptr, qlq_ptr, qls_ptr, qb_part_ptr, qcat_ptr,
    pm_ptr, pl_ptr, pacc_ptr, vpart_ptr, vq_ptr, vs_ptr, o_part_ptr, xn2_ptr, xq2_ptr, xs2_ptr, lg_part_ptr,
    rw_ptr, uniq_ptr, up_part_ptr, aq_ptr, as_ptr, dn_part_ptr,
    # sync
    sync_ptr, err_ptr, trace_ptr, launch_id, bound, eps, softmax_scale, routed_scaling,
    # geometry
    R: tl.constexpr, D: tl.constexpr, QL: tl.constexpr, KVL: tl.constexpr, ROPE: tl.constexpr,
    NOPE: tl.constexpr, VH: tl.constexpr, H: tl.constexpr, E: tl.constexpr, E_PAD: tl.constexpr,
    TOPK: tl.constexpr, KP: tl.constexpr, I: tl.constexpr, KTOP: tl.constexpr, NSPLIT: tl.constexpr, MAXU: tl.constexpr,
    # tiles (BN_*: GEMV columns a task; KS_*: split-K parts; BE: gate experts a task; DCW: down's output
    # columns a task, DCW_P its power-of-two tile; STAGES_DN / STAGES_UP: MoE down's / up's pipeline depth)
    BN_A: tl.constexpr, KS_A: tl.constexpr, BN_B: tl.constexpr, KS_B: tl.constexpr, BN_O: tl.constexpr,
    KS_O: tl.constexpr, BE: tl.constexpr, KS_G: tl.constexpr, BU: tl.constexpr, KS_U: tl.constexpr,
    DCW: tl.constexpr, DCW_P: tl.constexpr, STAGES_DN: tl.constexpr, DN_PARTS: tl.constexpr, STAGES_UP: tl.constexpr, ATT_BLK: tl.constexpr, UP_MT: tl.constexpr, NORM_GP: tl.constexpr, WUV_SH: tl.constexpr,
    ROUTE_RC: tl.constexpr, STAGES: tl.constexpr, SWAP_AB: tl.constexpr, SWAP_MOE: tl.constexpr,
    PRELOAD: tl.constexpr, NPROG: tl.constexpr, TIMER: tl.constexpr, SKIP_ARRIVE: tl.constexpr, SKIP_MASK: tl.constexpr,
    TRACE: tl.constexpr,
):
    """grid = (NPROG,), every program resident; task t of a stage runs on program t % NPROG.

    SKIP_MASK (timing variants only, 0 in every real build): stages whose bit is set run no tasks.
    TRACE (timing builds only): every program stamps the global timer at each stage (`common/trace.py`).
    Split-K part buffers are [KS, R, N] f32; quantized activations [R, K] fp8 + [R, K/128] f32.
    """
    pid = tl.program_id(0)
    epoch = read_epoch(sync_ptr)
    # the last-arrival counts after the stage counters (sized by `SharedLaunch`): w_uv's a v group,
    # o_proj's a column tile, down's a column tile
    wuv_cnt = sync_ptr + 1 + N_COUNTERS
    oproj_cnt = wuv_cnt + H * (VH // 128)
    dn_cnt = oproj_cnt + tl.cdiv(D, BN_O)
    _stamp(trace_ptr, pid, 2 * N_COUNTERS - 1, TRACE)  # the start (slot of the last stage's unused wait)
    ok = pid * 0 + 1
    rows = tl.arange(0, 16)
    rmask = rows < R
    QKV_N: tl.constexpr = QL + KVL + ROPE
    QK: tl.constexpr = NOPE + ROPE
    KVD: tl.constexpr = KVL + ROPE
    HG: tl.constexpr = (H + 15) // 16
    SPLIT: tl.constexpr = KTOP // NSPLIT
    HV: tl.constexpr = H * VH

    # ---- 0 norm1: res1 = hidden + residual; xn1 = RMSNorm(res1), stored only quantized (xq1, xs1) ----
    GP: tl.constexpr = NORM_GP  # 128-groups of a hidden row, padded to a power of two
    offs_g = tl.arange(0, GP)[:, None] * 128 + tl.arange(0, 128)[None, :]
    m_g = offs_g < D
    for r in tl.range(pid, R * ok * (1 - ((SKIP_MASK >> 0) & 1)), NPROG, num_stages=1):  # tasks: never pipelined
        h_in = tl.load(hidden_ptr + r * D + offs_g, mask=m_g, other=0.0, cache_modifier=".cg")
        r_in = tl.load(residual_ptr + r * D + offs_g, mask=m_g, other=0.0, cache_modifier=".cg")
        wn = tl.load(in_norm_ptr + offs_g, mask=m_g, other=0.0).to(tl.float32)
        x = h_in.to(tl.float32) + r_in.to(tl.float32)
        tl.store(res1_ptr + r * D + offs_g, to_bf16(x), mask=m_g)
        norm_quant_row(x, wn, xq1_ptr, xq1_ptr + r * D, xs1_ptr + r * (D // 128), eps, D, GP, False)
    w0, ws0 = _gemv_first_block(qkv_a_ptr, qkv_a_s_ptr, pid, QKV_N, D, KS_A, BN_A, PRELOAD)  # before this wait
    ok = _barrier(sync_ptr, err_ptr, 0, epoch, ok, pid, launch_id, bound, NPROG, TIMER, SKIP_ARRIVE, trace_ptr, TRACE)

    # ---- 1 qkv_a: split-K parts ----
    _gemv_stage(xq1_ptr, xs1_ptr, qkv_a_ptr, qkv_a_s_ptr, qkv_part_ptr,
                tl.cdiv(QKV_N, BN_A) * KS_A * ok * (1 - ((SKIP_MASK >> 1) & 1)), pid, QKV_N, w0, ws0,
                R, D, KS_A, BN_A, STAGES, NPROG, PRELOAD, SWAP_AB)
    ok = _barrier(sync_ptr, err_ptr, 1, epoch, ok, pid, launch_id, bound, NPROG, TIMER, SKIP_ARRIVE, trace_ptr, TRACE)

    # ---- 2 latent: tasks [0, R) q_a norm (+ quantized ql); [R, 2R) this row's cache row ----
    for t in tl.range(pid, 2 * R * ok * (1 - ((SKIP_MASK >> 2) & 1)), NPROG, num_stages=1):  # tasks: never pipelined
        if t < R:
            r = t
            offs = tl.arange(0, QL)
            q = to_bf16(sum_parts(qkv_part_ptr + r * QKV_N, R * QKV_N, offs, offs < QL, KS_A)).to(tl.float32)
            rstd = tl.math.rsqrt(tl.sum(q * q, axis=0) / QL + eps)
            wn = tl.load(q_a_norm_ptr + offs).to(tl.float32)
            tl.store(ql_ptr + r * QL + offs, to_bf16((q * rstd) * wn))
            tl.debug_barrier()
            quant_row(ql_ptr + r * QL, qlq_ptr + r * QL, qls_ptr + r * (QL // 128), QL)
        else:
            r = t - R
            slot = tl.load(out_loc_ptr + r).to(tl.int64)
            row_ptr = kv_ptr + slot * stride_kv
            # kv_a norm of c_kv straight into the cache row (cast to the cache dtype)
            offs_c = tl.arange(0, KVL)
            c = to_bf16(sum_parts(qkv_part_ptr + r * QKV_N + QL, R * QKV_N, offs_c, offs_c < KVL, KS_A)).to(tl.float32)
            rstd_c = tl.math.rsqrt(tl.sum(c * c, axis=0) / KVL + eps)
            wn_c = tl.load(kv_a_norm_ptr + offs_c).to(tl.float32)
            tl.store(row_ptr + offs_c, _to_cache(to_bf16((c * rstd_c) * wn_c), kv_ptr))
            i = tl.arange(0, ROPE // 2)
            pe = qkv_part_ptr + r * QKV_N + QL + KVL
            x1 = to_bf16(sum_parts(pe, R * QKV_N, 2 * i, i < ROPE, KS_A)).to(tl.float32)
            x2 = to_bf16(sum_parts(pe, R * QKV_N, 2 * i + 1, i < ROPE, KS_A)).to(tl.float32)
            e, o = _rope_vals(x1, x2, cos_sin_ptr + r * ROPE, ROPE)
            tl.store(row_ptr + KVL + 2 * i, _to_cache(to_bf16(e), kv_ptr))
            tl.store(row_ptr + KVL + 2 * i + 1, _to_cache(to_bf16(o), kv_ptr))
    w0, ws0 = _gemv_first_block(q_b_ptr, q_b_s_ptr, pid, H * QK, QL, KS_B, BN_B, PRELOAD)  # before this wait
    ok = _barrier(sync_ptr, err_ptr, 2, epoch, ok, pid, launch_id, bound, NPROG, TIMER, SKIP_ARRIVE, trace_ptr, TRACE)

    # ---- 3 q_b: split-K parts ----
    _gemv_stage(qlq_ptr, qls_ptr, q_b_ptr, q_b_s_ptr, qb_part_ptr,
                tl.cdiv(H * QK, BN_B) * KS_B * ok * (1 - ((SKIP_MASK >> 3) & 1)), pid, H * QK, w0, ws0,
                R, QL, KS_B, BN_B, STAGES, NPROG, PRELOAD, SWAP_AB)
    ok = _barrier(sync_ptr, err_ptr, 3, epoch, ok, pid, launch_id, bound, NPROG, TIMER, SKIP_ARRIVE, trace_ptr, TRACE)

    # ---- 4 absorb: qfull = bf16(sum of q_b parts); q_nope @ w_kc[h] (bf16 in, f32 acc) and rope(q_pe) ----
    NCH: tl.constexpr = KVL // 128
    for t in tl.range(pid, H * NCH * ok * (1 - ((SKIP_MASK >> 4) & 1)), NPROG, num_stages=1):  # tasks: never pipelined
        h = t // NCH
        ch = t % NCH
        cols = ch * 128 + tl.arange(0, 128)
        acc = tl.zeros((16, 128), dtype=tl.float32)
        for kc in tl.static_range(NOPE // 64):
            ks = kc * 64 + tl.arange(0, 64)
            w = tl.load(w_kc_ptr + h * s_kc0 + ks[:, None] * s_kc1 + cols[None, :] * s_kc2)
            x = to_bf16(sum_parts(qb_part_ptr, R * H * QK, rows[:, None] * (H * QK) + h * QK + ks[None, :],
                                  rmask[:, None] & (ks[None, :] < NOPE), KS_B))
            acc += dot_bf16(x, w)
        tl.store(qcat_ptr + rows[:, None] * (H * KVD) + h * KVD + cols[None, :], to_bf16(acc),
                 mask=rmask[:, None])
        if ch == 0:  # rope(q_pe) of every row at once: [16 rows, ROPE/2 pairs]
            i = tl.arange(0, ROPE // 2)[None, :]
            pe = qb_part_ptr + rows[:, None] * (H * QK) + h * QK + NOPE
            x1 = to_bf16(sum_parts(pe, R * H * QK, 2 * i, rmask[:, None], KS_B)).to(tl.float32)
            x2 = to_bf16(sum_parts(pe, R * H * QK, 2 * i + 1, rmask[:, None], KS_B)).to(tl.float32)
            cos = tl.load(cos_sin_ptr + rows[:, None] * ROPE + i, mask=rmask[:, None], other=0.0)
            sin = tl.load(cos_sin_ptr + rows[:, None] * ROPE + ROPE // 2 + i, mask=rmask[:, None], other=0.0)
            base = qcat_ptr + rows[:, None] * (H * KVD) + h * KVD + KVL
            tl.store(base + 2 * i, to_bf16(x1 * cos - x2 * sin), mask=rmask[:, None])
            tl.store(base + 2 * i + 1, to_bf16(x2 * cos + x1 * sin), mask=rmask[:, None])
    ok = _barrier(sync_ptr, err_ptr, 4, epoch, ok, pid, launch_id, bound, NPROG, TIMER, SKIP_ARRIVE, trace_ptr, TRACE)

    # ---- 5 attn: split-K sparse MLA partials; 16 heads of one row share each KV tile ----
    NEG: tl.constexpr = -1.0e30
    for t in tl.range(pid, R * HG * NSPLIT * ok * (1 - ((SKIP_MASK >> 5) & 1)), NPROG, num_stages=1):  # tasks: never pipelined
        r = t // (HG * NSPLIT)
        hg = (t // NSPLIT) % HG
        sp = t % NSPLIT
        heads = hg * 16 + tl.arange(0, 16)
        hmask = heads < H
        dl = tl.arange(0, KVL)
        dr = tl.arange(0, ROPE)
        qb = qcat_ptr + r * (H * KVD) + heads[:, None] * KVD
        q_n = tl.load(qb + dl[None, :], mask=hmask[:, None], other=0.0, cache_modifier=".cg")
        q_r = tl.load(qb + KVL + dr[None, :], mask=hmask[:, None], other=0.0, cache_modifier=".cg")
        m = tl.full((16,), NEG, tl.float32)
        l = tl.zeros((16,), dtype=tl.float32)
        acc = tl.zeros((16, KVL), dtype=tl.float32)
        for b in range(SPLIT // ATT_BLK):
            j = sp * SPLIT + b * ATT_BLK + tl.arange(0, ATT_BLK)
            slot = tl.load(topk_ptr + r * KTOP + j)
            valid = slot >= 0
            kb = kv_ptr + tl.maximum(slot, 0).to(tl.int64)[:, None] * stride_kv
            k_n = tl.load(kb + dl[None, :], mask=valid[:, None], other=0.0, cache_modifier=".cg").to(tl.bfloat16)
            k_r = tl.load(kb + KVL + dr[None, :], mask=valid[:, None], other=0.0, cache_modifier=".cg").to(tl.bfloat16)
            s = (dot_bf16(q_n, tl.trans(k_n)) + dot_bf16(q_r, tl.trans(k_r))) * softmax_scale
            s = tl.where(valid[None, :], s, NEG)
            m_new = tl.maximum(m, tl.max(s, axis=1))
            p = tl.where(valid[None, :], tl.exp(s - m_new[:, None]), 0.0)
            alpha = tl.exp(m - m_new)
            l = l * alpha + tl.sum(p, axis=1)
            # p @ V with p split into two bf16 terms (~16 mantissa bits): the oracle's probs are f32
            p_hi = to_bf16(p)
            p_lo = to_bf16(p - p_hi.to(tl.float32))
            acc = acc * alpha[:, None] + dot_bf16(p_hi, k_n) + dot_bf16(p_lo, k_n)
            m = m_new
        pbase = (r * NSPLIT + sp) * H + heads
        tl.store(pm_ptr + pbase, m, mask=hmask)
        tl.store(pl_ptr + pbase, l, mask=hmask)
        tl.store(pacc_ptr + pbase[:, None] * KVL + dl[None, :], acc, mask=hmask[:, None])
    ok = _barrier(sync_ptr, err_ptr, 5, epoch, ok, pid, launch_id, bound, NPROG, TIMER, SKIP_ARRIVE, trace_ptr, TRACE)

    # ---- 6 w_uv: task (h, ch, kc): the attention splits combined for latent chunk kc, rounded to bf16,
    # @ w_vc[h, kc chunk, ch cols] -> vpart[kc] (f32). The last of the KVL/128 tasks of (h, ch) to
    # finish (an epoch-tagged arrival count) sums the parts in chunk order and quantizes that v group.
    NVC: tl.constexpr = VH // 128
    NKC: tl.constexpr = KVL // 128
    SH: tl.constexpr = WUV_SH if NSPLIT >= WUV_SH else NSPLIT  # splits loaded at once, [16, SH, 128]
    spl = tl.arange(0, NSPLIT)
    for t in tl.range(pid, H * NVC * NKC * ok * (1 - ((SKIP_MASK >> 6) & 1)), NPROG, num_stages=1):  # tasks: never pipelined
        h = t // (NVC * NKC)
        ch = (t // NKC) % NVC
        kc = t % NKC
        cols = ch * 128 + tl.arange(0, 128)
        ks = kc * 128 + tl.arange(0, 128)
        w = tl.load(w_vc_ptr + h * s_vc0 + ks[:, None] * s_vc1 + cols[None, :] * s_vc2)
        ms = tl.load(pm_ptr + (rows[:, None] * NSPLIT + spl[None, :]) * H + h, mask=rmask[:, None], other=NEG,
                     cache_modifier=".cg")
        lsum = tl.load(pl_ptr + (rows[:, None] * NSPLIT + spl[None, :]) * H + h, mask=rmask[:, None], other=0.0,
                       cache_modifier=".cg")
        mx = tl.max(ms, axis=1)
        den = tl.sum(tl.exp(ms - mx[:, None]) * lsum, axis=1)
        a = tl.zeros((16, 128), dtype=tl.float32)
        for g in tl.static_range(NSPLIT // SH):
            sp = g * SH + tl.arange(0, SH)
            pa = tl.load(pacc_ptr + ((rows[:, None, None] * NSPLIT + sp[None, :, None]) * H + h) * KVL + ks[None, None, :],
                         mask=rmask[:, None, None], other=0.0, cache_modifier=".cg")
            mg = tl.load(pm_ptr + (rows[:, None] * NSPLIT + sp[None, :]) * H + h, mask=rmask[:, None], other=NEG,
                         cache_modifier=".cg")
            a += tl.sum(tl.exp(mg - mx[:, None])[:, :, None] * pa, axis=1)
        inv = tl.where(den > 0, 1.0 / den, 0.0)
        vp = dot_bf16(to_bf16(a * inv[:, None]), w)
        tl.store(vpart_ptr + (kc * R + rows[:, None]) * HV + h * VH + cols[None, :], vp, mask=rmask[:, None])
        if _last_to_land(wuv_cnt + h * NVC + ch, epoch, NKC):  # v = bf16(sum of parts), quantized
            offs = (rows[:, None] * HV + h * VH + cols[None, :])
            v = to_bf16(sum_parts(vpart_ptr, R * HV, offs, rmask[:, None], NKC)).to(tl.float32)
            vq, vs = quant_group(v)
            tl.store(vq_ptr + offs, vq, mask=rmask[:, None])
            tl.store(vs_ptr + rows * (HV // 128) + h * NVC + ch, vs, mask=rmask)
    ok = _barrier(sync_ptr, err_ptr, 6, epoch, ok, pid, launch_id, bound, NPROG, TIMER, SKIP_ARRIVE, trace_ptr, TRACE)

    # ---- 7 o_proj: split-K parts; the last part of a column tile to land (an epoch-tagged arrival count)
    # sums the tile's parts in part order: o = bf16(sum) and res_out = bf16(o + res1) for those columns ----
    NKB_O: tl.constexpr = (HV // 128) // KS_O
    for t in tl.range(pid, tl.cdiv(D, BN_O) * KS_O * ok * (1 - ((SKIP_MASK >> 7) & 1)), NPROG, num_stages=1):  # tasks: never pipelined
        nt = t // KS_O
        acc = fp8_gemv_part(vq_ptr, vs_ptr, HV, HV // 128, o_proj_ptr, HV, o_proj_s_ptr, HV // 128, nt * BN_O, D,
                            (t % KS_O) * NKB_O, R, NKB_O, BN_O, STAGES, SWAP_AB)
        offs_n = nt * BN_O + tl.arange(0, BN_O)
        m_o = rmask[:, None] & (offs_n[None, :] < D)
        tl.store(o_part_ptr + ((t % KS_O) * R + rows[:, None]) * D + offs_n[None, :], acc, mask=m_o)
        if _last_to_land(oproj_cnt + nt, epoch, KS_O):
            offs = rows[:, None] * D + offs_n[None, :]
            o = to_bf16(sum_parts(o_part_ptr, R * D, offs, m_o, KS_O))
            r1 = tl.load(res1_ptr + offs, mask=m_o, other=0.0, cache_modifier=".cg")
            tl.store(o_ptr + offs, o, mask=m_o)
            tl.store(res_out_ptr + offs, to_bf16(o.to(tl.float32) + r1.to(tl.float32)), mask=m_o)
    ok = _barrier(sync_ptr, err_ptr, 7, epoch, ok, pid, launch_id, bound, NPROG, TIMER, SKIP_ARRIVE, trace_ptr, TRACE)

    # ---- 8 norm2: xn2 = RMSNorm(o + res1) (o from o_proj's last arrivers), stored bf16 and quantized once ----
    for r in tl.range(pid, R * ok * (1 - ((SKIP_MASK >> 8) & 1)), NPROG, num_stages=1):  # tasks: never pipelined
        o = tl.load(o_ptr + r * D + offs_g, mask=m_g, other=0.0, cache_modifier=".cg")  # o_proj's
        r1 = tl.load(res1_ptr + r * D + offs_g, mask=m_g, other=0.0, cache_modifier=".cg")
        wn = tl.load(post_norm_ptr + offs_g, mask=m_g, other=0.0).to(tl.float32)
        x = o.to(tl.float32) + r1.to(tl.float32)
        norm_quant_row(x, wn, xn2_ptr + r * D, xq2_ptr + r * D, xs2_ptr + r * (D // 128), eps, D, GP, True)
    ok = _barrier(sync_ptr, err_ptr, 8, epoch, ok, pid, launch_id, bound, NPROG, TIMER, SKIP_ARRIVE, trace_ptr, TRACE)

    # ---- 9 gate: split-K parts of the f32 logits of the bf16 gate (bf16 products are exact in f32) ----
    NKB_G: tl.constexpr = (D // 128) // KS_G
    for t in tl.range(pid, tl.cdiv(E, BE) * KS_G * ok * (1 - ((SKIP_MASK >> 9) & 1)), NPROG, num_stages=1):  # tasks: never pipelined
        et = t // KS_G
        kg = t % KS_G
        ex = et * BE + tl.arange(0, BE)
        emask = ex < E
        acc = tl.zeros((16, BE), dtype=tl.float32)
        for kb in tl.range(kg * NKB_G, kg * NKB_G + NKB_G, num_stages=STAGES):
            ks = kb * 128 + tl.arange(0, 128)
            g = tl.load(gate_ptr + ex[None, :] * D + ks[:, None], mask=emask[None, :], other=0.0)
            x = tl.load(xn2_ptr + rows[:, None] * D + ks[None, :], mask=rmask[:, None], other=0.0,
                        cache_modifier=".cg")
            acc += dot_bf16(x, g)
        tl.store(lg_part_ptr + (kg * R + rows[:, None]) * E + ex[None, :], acc, mask=rmask[:, None] & emask[None, :])
    ok = _barrier(sync_ptr, err_ptr, 9, epoch, ok, pid, launch_id, bound, NPROG, TIMER, SKIP_ARRIVE, trace_ptr, TRACE)

    # ---- 10 route: task (r, c) = row r's router for experts c*RC.. (`_route_chunk`) ----
    RC: tl.constexpr = ROUTE_RC if E_PAD >= ROUTE_RC else E_PAD
    for t in tl.range(pid, R * (E_PAD // RC) * ok * (1 - ((SKIP_MASK >> 10) & 1)), NPROG, num_stages=1):  # tasks: never pipelined
        _route_chunk(lg_part_ptr, bias_ptr, ids_ptr, rw_ptr, t // (E_PAD // RC), t % (E_PAD // RC), R, E, E_PAD,
                     TOPK, KS_G, RC)
    ok = _barrier(sync_ptr, err_ptr, 10, epoch, ok, pid, launch_id, bound, NPROG, TIMER, SKIP_ARRIVE, trace_ptr, TRACE)

    # ---- 11 up: every program lists the used experts itself, then split-K parts of x @ gate^T | x @ up^T
    # per used expert, its tasks in one pipelined loop (`fp8_gemv2_expert_tasks`) ----
    my_uniq = uniq_ptr + pid * (MAXU + 1)
    n_u, rscale = _used_experts(rw_ptr, my_uniq, routed_scaling, R, E, E_PAD)
    n_u = tl.minimum(n_u, MAXU)
    NT_UP: tl.constexpr = I // BU
    fp8_gemv2_expert_tasks(xq2_ptr, xs2_ptr, w13_ptr, w13_s_ptr, my_uniq, up_part_ptr, pid,
                           n_u * NT_UP * KS_U * ok * (1 - ((SKIP_MASK >> 11) & 1)), R, I, D, E, BU, KS_U, NPROG, UP_MT,
                           STAGES_UP, SWAP_MOE)
    ok = _barrier(sync_ptr, err_ptr, 11, epoch, ok, pid, launch_id, bound, NPROG, TIMER, SKIP_ARRIVE, trace_ptr, TRACE)

    # ---- 12 act: act[u] = SiLU(bf16(gate)) * bf16(up), rounded to bf16, quantized per 128-group; the group
    # scales are stored times row r's routing weight of expert u (so down's sum over experts is weighted).
    # Then programs NPROG-1-r write row r's routing weights (ids order) ----
    NG_I: tl.constexpr = I // 128
    for t in tl.range(pid, n_u * NG_I * ok * (1 - ((SKIP_MASK >> 12) & 1)), NPROG, num_stages=1):  # tasks: never pipelined
        u = t // NG_I
        gi = t % NG_I
        cols = gi * 128 + tl.arange(0, 128)
        offs = rows[:, None] * (2 * I) + cols[None, :]
        pb = up_part_ptr + u * KS_U * R * (2 * I)
        g = to_bf16(sum_parts(pb, R * 2 * I, offs, rmask[:, None], KS_U)).to(tl.float32)
        up = to_bf16(sum_parts(pb + I, R * 2 * I, offs, rmask[:, None], KS_U)).to(tl.float32)
        a = to_bf16(g * tl.sigmoid(g) * up).to(tl.float32)
        aq, as_ = quant_group(a)
        e = tl.minimum(tl.maximum(tl.load(my_uniq + u), 0), E)
        wr = tl.load(rw_ptr + e * 16 + rows, mask=rmask, other=0.0, cache_modifier=".cg")
        wr = tl.where(e < E, wr * rscale, wr)
        tl.store(aq_ptr + (u * R + rows[:, None]) * I + cols[None, :], aq, mask=rmask[:, None])
        tl.store(as_ptr + (u * R + rows) * NG_I + gi, as_ * wr, mask=rmask)
    kk = tl.arange(0, KP)
    for r in tl.range(NPROG - 1 - pid, R * ok * (1 - ((SKIP_MASK >> 12) & 1)), NPROG, num_stages=1):  # tasks: never pipelined
        ek = tl.load(ids_ptr + r * (TOPK + 1) + kk, mask=kk < TOPK, other=0, cache_modifier=".cg")
        wk = tl.load(rw_ptr + ek * 16 + r, mask=kk < TOPK, other=0.0, cache_modifier=".cg")
        sr = tl.sum(tl.where(rows == r, rscale, 0.0), axis=0)
        tl.store(wts_ptr + r * (TOPK + 1) + kk, tl.where(kk < TOPK, wk * sr, 1.0), mask=kk <= TOPK)
    ok = _barrier(sync_ptr, err_ptr, 12, epoch, ok, pid, launch_id, bound, NPROG, TIMER, SKIP_ARRIVE, trace_ptr, TRACE)

    # ---- 13 down: task (c, p) = output columns c*DCW.., part p of the used experts (the p-th of DN_PARTS
    # equal runs, in order): the sum over its experts u and their k blocks of q(act_u) @ w2[e_u]^T, one
    # pipelined loop streaming every expert's slice. One part: out = bf16(sum). More: each part stores its
    # f32 sum, and the last part of a column tile to land (an epoch-tagged arrival count) sums the parts in
    # part order: out = bf16(sum) ----
    n_dn = tl.cdiv(n_u, DN_PARTS)
    for t in tl.range(pid, tl.cdiv(D, DCW) * DN_PARTS * ok * (1 - ((SKIP_MASK >> 13) & 1)), NPROG, num_stages=1):  # tasks: never pipelined
        c = t // DN_PARTS
        p = t % DN_PARTS
        u0 = p * n_dn
        acc = fp8_gemv_experts(aq_ptr + u0 * R * I, as_ptr + u0 * R * (I // 128), w2_ptr, w2_s_ptr, my_uniq + u0,
                               tl.maximum(tl.minimum(n_u - u0, n_dn), 0), c * DCW, R, D, I, E, DCW, DCW_P, STAGES_DN,
                               SWAP_MOE)
        cols = c * DCW + tl.arange(0, DCW_P)
        m_dn = rmask[:, None] & (tl.arange(0, DCW_P) < DCW)[None, :] & (cols < D)[None, :]
        if DN_PARTS == 1:
            tl.store(out_ptr + rows[:, None] * D + cols[None, :], to_bf16(acc), mask=m_dn)
        else:
            offs = rows[:, None] * D + cols[None, :]
            tl.store(dn_part_ptr + p * (R * D) + offs, acc, mask=m_dn)
            if _last_to_land(dn_cnt + c, epoch, DN_PARTS):
                tl.store(out_ptr + offs, to_bf16(sum_parts(dn_part_ptr, R * D, offs, m_dn, DN_PARTS)), mask=m_dn)

    # ---- end of step: the last program to arrive advances the epoch (unless its own waits failed); none waits.
    # After a missed deadline the host reads the error word and resets the sync words (`reset_sync`) ----
    _stamp(trace_ptr, pid, 2 * (N_COUNTERS - 1), TRACE)
    if _last_to_land(sync_ptr + N_COUNTERS, epoch, NPROG) & (ok != 0):  # the last counter, sync[1 + N_COUNTERS - 1]
        tl.atomic_xchg(sync_ptr, epoch, sem="release")
