"""The "shared" launch in Triton: one persistent launch for one MoE layer that reuses the previous top-k.

Stages (each spread over the programs, consecutive stages joined by epoch-tagged barriers):
  0 norm1   [R]      res1, xn1 = RMSNorm(hidden + residual)
  1 qkv_a   [N/BN]   qkv = block-FP8 fused_qkv_a(xn1)
  2 latent  [R]      ql = q_a_norm(q); this step's cache row = [kv_a_norm(c_kv) | rope(k_pe)] at out_loc
  3 q_b     [N/BN]   qfull = block-FP8 q_b(ql)
  4 absorb  [H*KVL/128]  qcat[:, h, :KVL] = q_nope @ w_kc[h]; qcat[:, h, KVL:] = rope(q_pe)
  5 attn    [R*HG*NSPLIT] split-K sparse MLA partials (m, l, acc) over each row's top-k slots
  6 w_uv    [H*VH/128]   combine partials in split order, @ w_vc[h]
  7 o_proj  [D/BN]   o = block-FP8 o_proj(v)
  8 norm2   [R]      res2, xn2 = RMSNorm(o + res1)
  9 gate    [E/16]   logits = xn2 @ gate^T (f32)
 10 route   [1]      sigmoid + bias top-k, renormalise, x scale; the used experts, ascending, + shared
 11 up      [U*I/BU] act = SiLU(gate) * up (block-FP8 W8A8), per used expert
 12 down    [U*D/BD] partial[u, r] = w[u, r] * block-FP8 down(act)
 13 combine [D/BC]   out = sum_u partial[u] in expert order (no float atomics: bitwise reproducible)
Tensor shapes are documented at `glm53/launch_shared.py`, which binds SGLang's tensors to this kernel.
"""

import triton
import triton.language as tl

from sgl_amd_mono.backends.triton.sync import arrive, read_epoch, wait_counter
from sgl_amd_mono.backends.triton.tiles import fp8_gemv_tile, rms_row, rope_pairs, to_bf16, to_fp8, dot_bf16

STAGES = ("norm1", "qkv_a", "latent", "q_b", "absorb", "attn", "w_uv", "o_proj",
          "norm2", "gate", "route", "up", "down", "combine")
N_COUNTERS = len(STAGES)  # one arrival counter a stage; the last one ends the step


@triton.jit
def _to_cache(x_bf16, kv_ptr):
    """A bf16 value in the cache's dtype (bf16, or fp8 e4m3fn as SGLang's cast)."""
    if kv_ptr.dtype.element_ty == tl.bfloat16:
        return x_bf16
    else:
        return to_fp8(x_bf16.to(tl.float32))


@triton.jit
def _barrier(sync_ptr, err_ptr, stage, epoch, ok, pid, launch_id, bound, NPROG: tl.constexpr,
             TIMER: tl.constexpr, SKIP_ARRIVE: tl.constexpr):
    """End `stage` on this program and wait for every program to end it. Returns the new ok."""
    if stage != SKIP_ARRIVE:  # SKIP_ARRIVE: a planted missing arrival (deadline tests); -1 = none
        arrive(sync_ptr, stage)
    if ok != 0:
        ok = wait_counter(sync_ptr, stage, epoch * NPROG, err_ptr, launch_id, stage, pid, epoch, bound, TIMER)
    return ok


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
    res1_ptr, xn1_ptr, qkv_ptr, ql_ptr, qfull_ptr, qcat_ptr, pm_ptr, pl_ptr, pacc_ptr, v_ptr, xn2_ptr,
    logits_ptr, nu_ptr, uniq_ptr, wmat_ptr, act_ptr, part_ptr,
    # sync
    sync_ptr, err_ptr, launch_id, bound, eps, softmax_scale, routed_scaling,
    # geometry
    R: tl.constexpr, D: tl.constexpr, QL: tl.constexpr, KVL: tl.constexpr, ROPE: tl.constexpr,
    NOPE: tl.constexpr, VH: tl.constexpr, H: tl.constexpr, E: tl.constexpr, E_PAD: tl.constexpr,
    TOPK: tl.constexpr, KP: tl.constexpr, I: tl.constexpr, KTOP: tl.constexpr, NSPLIT: tl.constexpr, MAXU: tl.constexpr,
    # tiles
    BN_A: tl.constexpr, BN_B: tl.constexpr, BN_O: tl.constexpr, BU: tl.constexpr, BD: tl.constexpr,
    BC: tl.constexpr, ATT_BLK: tl.constexpr, NORM_BLK: tl.constexpr,
    NPROG: tl.constexpr, TIMER: tl.constexpr, SKIP_ARRIVE: tl.constexpr, SKIP_MASK: tl.constexpr,
):
    """grid = (NPROG,), every program resident; task t of a stage runs on program t % NPROG.

    SKIP_MASK (timing variants only, 0 in every real build): stages whose bit is set run no tasks.
    """
    pid = tl.program_id(0)
    epoch = read_epoch(sync_ptr)
    ok = pid * 0 + 1
    rows = tl.arange(0, 16)
    rmask = rows < R
    QKV_N: tl.constexpr = QL + KVL + ROPE
    QK: tl.constexpr = NOPE + ROPE
    KVD: tl.constexpr = KVL + ROPE
    HG: tl.constexpr = (H + 15) // 16
    SPLIT: tl.constexpr = KTOP // NSPLIT

    # ---- 0 norm1: res1, xn1 = RMSNorm(hidden + residual) ----
    for r in range(pid, R * ok * (1 - ((SKIP_MASK >> 0) & 1)), NPROG):
        rms_row(hidden_ptr + r * D, residual_ptr + r * D, in_norm_ptr, xn1_ptr + r * D, res1_ptr + r * D,
                eps, D, NORM_BLK, True)
    ok = _barrier(sync_ptr, err_ptr, 0, epoch, ok, pid, launch_id, bound, NPROG, TIMER, SKIP_ARRIVE)

    # ---- 1 qkv_a ----
    for t in range(pid, tl.cdiv(QKV_N, BN_A) * ok * (1 - ((SKIP_MASK >> 1) & 1)), NPROG):
        acc = fp8_gemv_tile(xn1_ptr, D, qkv_a_ptr, D, qkv_a_s_ptr, D // 128, t * BN_A, QKV_N, R, D, BN_A)
        offs_n = t * BN_A + tl.arange(0, BN_A)
        tl.store(qkv_ptr + rows[:, None] * QKV_N + offs_n[None, :], to_bf16(acc),
                 mask=rmask[:, None] & (offs_n[None, :] < QKV_N))
    ok = _barrier(sync_ptr, err_ptr, 1, epoch, ok, pid, launch_id, bound, NPROG, TIMER, SKIP_ARRIVE)

    # ---- 2 latent: q_a norm; this row's cache row ----
    for r in range(pid, R * ok * (1 - ((SKIP_MASK >> 2) & 1)), NPROG):
        rms_row(qkv_ptr + r * QKV_N, qkv_ptr, q_a_norm_ptr, ql_ptr + r * QL, ql_ptr, eps, QL, QL, False)
        slot = tl.load(out_loc_ptr + r).to(tl.int64)
        row_ptr = kv_ptr + slot * stride_kv
        # kv_a norm of c_kv straight into the cache row (cast to the cache dtype)
        offs = tl.arange(0, KVL)
        c = tl.load(qkv_ptr + r * QKV_N + QL + offs, cache_modifier=".cg").to(tl.float32)
        rstd = tl.math.rsqrt(tl.sum(c * c, axis=0) / KVL + eps)
        wn = tl.load(kv_a_norm_ptr + offs).to(tl.float32)
        tl.store(row_ptr + offs, _to_cache(to_bf16((c * rstd) * wn), kv_ptr))
        e, o = rope_pairs(qkv_ptr + r * QKV_N + QL + KVL, cos_sin_ptr + r * ROPE, ROPE)
        i = tl.arange(0, ROPE // 2)
        tl.store(row_ptr + KVL + 2 * i, _to_cache(to_bf16(e), kv_ptr))
        tl.store(row_ptr + KVL + 2 * i + 1, _to_cache(to_bf16(o), kv_ptr))
    ok = _barrier(sync_ptr, err_ptr, 2, epoch, ok, pid, launch_id, bound, NPROG, TIMER, SKIP_ARRIVE)

    # ---- 3 q_b ----
    for t in range(pid, tl.cdiv(H * QK, BN_B) * ok * (1 - ((SKIP_MASK >> 3) & 1)), NPROG):
        acc = fp8_gemv_tile(ql_ptr, QL, q_b_ptr, QL, q_b_s_ptr, QL // 128, t * BN_B, H * QK, R, QL, BN_B)
        offs_n = t * BN_B + tl.arange(0, BN_B)
        tl.store(qfull_ptr + rows[:, None] * (H * QK) + offs_n[None, :], to_bf16(acc),
                 mask=rmask[:, None] & (offs_n[None, :] < H * QK))
    ok = _barrier(sync_ptr, err_ptr, 3, epoch, ok, pid, launch_id, bound, NPROG, TIMER, SKIP_ARRIVE)

    # ---- 4 absorb: q_nope @ w_kc[h] (bf16 in, f32 accumulate) and rope(q_pe) ----
    NCH: tl.constexpr = KVL // 128
    for t in range(pid, H * NCH * ok * (1 - ((SKIP_MASK >> 4) & 1)), NPROG):
        h = t // NCH
        ch = t % NCH
        cols = ch * 128 + tl.arange(0, 128)
        acc = tl.zeros((16, 128), dtype=tl.float32)
        for kc in range(NOPE // 64):
            ks = kc * 64 + tl.arange(0, 64)
            x = tl.load(qfull_ptr + rows[:, None] * (H * QK) + h * QK + ks[None, :], mask=rmask[:, None],
                        other=0.0, cache_modifier=".cg")
            w = tl.load(w_kc_ptr + h * s_kc0 + ks[:, None] * s_kc1 + cols[None, :] * s_kc2)
            acc += dot_bf16(x, w)
        tl.store(qcat_ptr + rows[:, None] * (H * KVD) + h * KVD + cols[None, :], to_bf16(acc),
                 mask=rmask[:, None])
        if ch == 0:
            i = tl.arange(0, ROPE // 2)
            for r in range(R):
                e, o = rope_pairs(qfull_ptr + r * (H * QK) + h * QK + NOPE, cos_sin_ptr + r * ROPE, ROPE)
                base = qcat_ptr + r * (H * KVD) + h * KVD + KVL
                tl.store(base + 2 * i, to_bf16(e))
                tl.store(base + 2 * i + 1, to_bf16(o))
    ok = _barrier(sync_ptr, err_ptr, 4, epoch, ok, pid, launch_id, bound, NPROG, TIMER, SKIP_ARRIVE)

    # ---- 5 attn: split-K sparse MLA partials; 16 heads of one row share each KV tile ----
    NEG: tl.constexpr = -1.0e30
    for t in range(pid, R * HG * NSPLIT * ok * (1 - ((SKIP_MASK >> 5) & 1)), NPROG):
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
    ok = _barrier(sync_ptr, err_ptr, 5, epoch, ok, pid, launch_id, bound, NPROG, TIMER, SKIP_ARRIVE)

    # ---- 6 w_uv: combine the splits in order, round to bf16, @ w_vc[h] ----
    NVC: tl.constexpr = VH // 128
    for t in range(pid, H * NVC * ok * (1 - ((SKIP_MASK >> 6) & 1)), NPROG):
        h = t // NVC
        ch = t % NVC
        mx = tl.full((16,), NEG, tl.float32)
        for sp in range(NSPLIT):
            mx = tl.maximum(mx, tl.load(pm_ptr + (rows * NSPLIT + sp) * H + h, mask=rmask, other=NEG,
                                        cache_modifier=".cg"))
        den = tl.zeros((16,), dtype=tl.float32)
        for sp in range(NSPLIT):
            ms = tl.load(pm_ptr + (rows * NSPLIT + sp) * H + h, mask=rmask, other=NEG, cache_modifier=".cg")
            ls = tl.load(pl_ptr + (rows * NSPLIT + sp) * H + h, mask=rmask, other=0.0, cache_modifier=".cg")
            den += tl.exp(ms - mx) * ls
        inv = tl.where(den > 0, 1.0 / den, 0.0)
        cols = ch * 128 + tl.arange(0, 128)
        vacc = tl.zeros((16, 128), dtype=tl.float32)
        for kc in range(KVL // 128):
            ks = kc * 128 + tl.arange(0, 128)
            a = tl.zeros((16, 128), dtype=tl.float32)
            for sp in range(NSPLIT):
                ms = tl.load(pm_ptr + (rows * NSPLIT + sp) * H + h, mask=rmask, other=NEG, cache_modifier=".cg")
                pa = tl.load(pacc_ptr + ((rows[:, None] * NSPLIT + sp) * H + h) * KVL + ks[None, :],
                             mask=rmask[:, None], other=0.0, cache_modifier=".cg")
                a += tl.exp(ms - mx)[:, None] * pa
            a = to_bf16(a * inv[:, None])
            w = tl.load(w_vc_ptr + h * s_vc0 + ks[:, None] * s_vc1 + cols[None, :] * s_vc2)
            vacc += dot_bf16(a, w)
        tl.store(v_ptr + rows[:, None] * (H * VH) + h * VH + cols[None, :], to_bf16(vacc),
                 mask=rmask[:, None])
    ok = _barrier(sync_ptr, err_ptr, 6, epoch, ok, pid, launch_id, bound, NPROG, TIMER, SKIP_ARRIVE)

    # ---- 7 o_proj ----
    for t in range(pid, tl.cdiv(D, BN_O) * ok * (1 - ((SKIP_MASK >> 7) & 1)), NPROG):
        acc = fp8_gemv_tile(v_ptr, H * VH, o_proj_ptr, H * VH, o_proj_s_ptr, (H * VH) // 128, t * BN_O, D,
                            R, H * VH, BN_O)
        offs_n = t * BN_O + tl.arange(0, BN_O)
        tl.store(o_ptr + rows[:, None] * D + offs_n[None, :], to_bf16(acc),
                 mask=rmask[:, None] & (offs_n[None, :] < D))
    ok = _barrier(sync_ptr, err_ptr, 7, epoch, ok, pid, launch_id, bound, NPROG, TIMER, SKIP_ARRIVE)

    # ---- 8 norm2: res2, xn2 = RMSNorm(o + res1) ----
    for r in range(pid, R * ok * (1 - ((SKIP_MASK >> 8) & 1)), NPROG):
        rms_row(o_ptr + r * D, res1_ptr + r * D, post_norm_ptr, xn2_ptr + r * D, res_out_ptr + r * D,
                eps, D, NORM_BLK, True)
    ok = _barrier(sync_ptr, err_ptr, 8, epoch, ok, pid, launch_id, bound, NPROG, TIMER, SKIP_ARRIVE)

    # ---- 9 gate: f32 logits of the bf16 gate (bf16 products are exact in f32) ----
    for t in range(pid, tl.cdiv(E, 16) * ok * (1 - ((SKIP_MASK >> 9) & 1)), NPROG):
        ex = t * 16 + tl.arange(0, 16)
        emask = ex < E
        acc = tl.zeros((16, 16), dtype=tl.float32)
        for kb in range(D // 128):
            ks = kb * 128 + tl.arange(0, 128)
            x = tl.load(xn2_ptr + rows[:, None] * D + ks[None, :], mask=rmask[:, None], other=0.0,
                        cache_modifier=".cg")
            g = tl.load(gate_ptr + ex[None, :] * D + ks[:, None], mask=emask[None, :], other=0.0)
            acc += dot_bf16(x, g)
        tl.store(logits_ptr + rows[:, None] * E + ex[None, :], acc, mask=rmask[:, None] & emask[None, :])
    ok = _barrier(sync_ptr, err_ptr, 9, epoch, ok, pid, launch_id, bound, NPROG, TIMER, SKIP_ARRIVE)

    # ---- 10 route: biased top-k (lowest id on ties), renormalise, scale; used experts ascending ----
    if (pid == 0) & (ok != 0) & ((SKIP_MASK >> 10) & 1 == 0):
        ex = tl.arange(0, E_PAD)
        emask = ex < E
        lg = tl.load(logits_ptr + rows[:, None] * E + ex[None, :], mask=rmask[:, None] & emask[None, :],
                     other=0.0, cache_modifier=".cg")
        score = tl.sigmoid(lg)
        choice = tl.where(emask[None, :], score + tl.load(bias_ptr + ex, mask=emask, other=0.0)[None, :],
                          float("-inf"))
        wsel = tl.zeros((16, E_PAD), dtype=tl.float32)
        wsum = tl.zeros((16,), dtype=tl.float32)
        kc = tl.arange(0, KP)
        idm = tl.zeros((16, KP), dtype=tl.int32) + E  # the shared expert in column TOPK
        wm = tl.zeros((16, KP), dtype=tl.float32)
        for k in range(TOPK):
            best = tl.max(choice, axis=1)
            idx = tl.min(tl.where(choice == best[:, None], ex[None, :], E_PAD), axis=1)
            hit = ex[None, :] == idx[:, None]
            wk = tl.sum(tl.where(hit, score, 0.0), axis=1)
            wsel = tl.where(hit, wk[:, None], wsel)
            wsum += wk
            choice = tl.where(hit, float("-inf"), choice)
            idm = tl.where(kc[None, :] == k, idx[:, None], idm)
            wm = tl.where(kc[None, :] == k, wk[:, None], wm)
        scale = routed_scaling / (wsum + 1e-20)
        wm = tl.where(kc[None, :] < TOPK, wm * scale[:, None], 1.0)
        kmask = rmask[:, None] & (kc[None, :] < TOPK + 1)
        tl.store(ids_ptr + rows[:, None] * (TOPK + 1) + kc[None, :], idm, mask=kmask)
        tl.store(wts_ptr + rows[:, None] * (TOPK + 1) + kc[None, :], wm, mask=kmask)
        wsel = tl.where(rmask[:, None], wsel * scale[:, None], 0.0)
        used = tl.max(tl.where(rmask[:, None] & (wsel != 0.0), 1, 0), axis=0)  # [E_PAD]
        pos = tl.cumsum(used, axis=0) - 1
        n_used = tl.sum(used, axis=0)
        tl.store(uniq_ptr + pos, ex, mask=used != 0)
        tl.store(wmat_ptr + pos[None, :] * 16 + rows[:, None], wsel, mask=(used != 0)[None, :])
        tl.store(uniq_ptr + n_used, E)
        tl.store(wmat_ptr + n_used * 16 + rows, tl.where(rmask, 1.0, 0.0))
        tl.store(nu_ptr, n_used + 1)
    ok = _barrier(sync_ptr, err_ptr, 10, epoch, ok, pid, launch_id, bound, NPROG, TIMER, SKIP_ARRIVE)

    # ---- 11 up: act[u] = SiLU(x @ gate^T) * (x @ up^T), gate|up rounded to bf16 first ----
    n_u = tl.minimum(tl.load(nu_ptr, cache_modifier=".cg"), MAXU)
    NT_UP: tl.constexpr = I // BU
    for t in range(pid, n_u * NT_UP * ok * (1 - ((SKIP_MASK >> 11) & 1)), NPROG):
        u = t // NT_UP
        nt = t % NT_UP
        e = tl.minimum(tl.maximum(tl.load(uniq_ptr + u, cache_modifier=".cg"), 0), E).to(tl.int64)
        wb = w13_ptr + e * (2 * I * D)
        sb = w13_s_ptr + e * ((2 * I // 128) * (D // 128))
        g = fp8_gemv_tile(xn2_ptr, D, wb, D, sb, D // 128, nt * BU, 2 * I, R, D, BU)
        up = fp8_gemv_tile(xn2_ptr, D, wb, D, sb, D // 128, I + nt * BU, 2 * I, R, D, BU)
        g = to_bf16(g).to(tl.float32)
        up = to_bf16(up).to(tl.float32)
        a = to_bf16(g * tl.sigmoid(g) * up)
        cols = nt * BU + tl.arange(0, BU)
        tl.store(act_ptr + (u * 16 + rows[:, None]) * I + cols[None, :], a, mask=rmask[:, None])
    ok = _barrier(sync_ptr, err_ptr, 11, epoch, ok, pid, launch_id, bound, NPROG, TIMER, SKIP_ARRIVE)

    # ---- 12 down: partial[u, r] = w[u, r] * (q(act) @ w2^T) in f32 ----
    NT_DN: tl.constexpr = D // BD
    for t in range(pid, n_u * NT_DN * ok * (1 - ((SKIP_MASK >> 12) & 1)), NPROG):
        u = t // NT_DN
        nt = t % NT_DN
        e = tl.minimum(tl.maximum(tl.load(uniq_ptr + u, cache_modifier=".cg"), 0), E).to(tl.int64)
        y = fp8_gemv_tile(act_ptr + u * 16 * I, I, w2_ptr + e * (D * I), I,
                          w2_s_ptr + e * ((D // 128) * (I // 128)), I // 128, nt * BD, D, R, I, BD)
        wr = tl.load(wmat_ptr + u * 16 + rows, cache_modifier=".cg")
        cols = nt * BD + tl.arange(0, BD)
        tl.store(part_ptr + (u * 16 + rows[:, None]) * D + cols[None, :], wr[:, None] * y,
                 mask=(rmask & (wr != 0.0))[:, None])
    ok = _barrier(sync_ptr, err_ptr, 12, epoch, ok, pid, launch_id, bound, NPROG, TIMER, SKIP_ARRIVE)

    # ---- 13 combine: fixed expert order, f32, then bf16 ----
    for t in range(pid, tl.cdiv(D, BC) * ok * (1 - ((SKIP_MASK >> 13) & 1)), NPROG):
        cols = t * BC + tl.arange(0, BC)
        acc = tl.zeros((16, BC), dtype=tl.float32)
        for u in range(n_u):
            wr = tl.load(wmat_ptr + u * 16 + rows, cache_modifier=".cg")
            acc += tl.load(part_ptr + (u * 16 + rows[:, None]) * D + cols[None, :],
                           mask=(rmask & (wr != 0.0))[:, None], other=0.0, cache_modifier=".cg")
        tl.store(out_ptr + rows[:, None] * D + cols[None, :], to_bf16(acc), mask=rmask[:, None])

    # ---- end of step: program 0 advances the epoch once every program has arrived ----
    arrive(sync_ptr, 13)
    if pid == 0:
        done = wait_counter(sync_ptr, 13, epoch * NPROG, err_ptr, launch_id, 13, pid, epoch, bound, TIMER)
        if done != 0:
            tl.atomic_xchg(sync_ptr, epoch, sem="release")
