"""The attention half's stages in Triton (norm1 ... o_proj and the residual): one @triton.jit function a
stage's task loop, called by every kind's kernel that runs the half (`glm53/kinds/halves.py` is the table).

Each stage runs this program's tasks t = pid, pid + NPROG, ... < live_tasks(T, ok, S, SKIP_MASK): T is the
table's task count (a constexpr), S the stage id. Tasks are never software-pipelined (num_stages=1). Every
split-K sum is taken in part order 0, 1, ... by its consumer: the same bits on every run. Scratch written
inside the launch is read with `.cg` loads (L2, never a stale L1 line). Rows pad to 16 (R live, masked).
"""

import triton
import triton.language as tl

from sgl_amd_mono.backends.triton.exchange import push_slot
from sgl_amd_mono.backends.triton.sync import (INPUT_TOKEN, count_task, last_to_land, live_tasks, report_input,
                                              wait_row)
from sgl_amd_mono.backends.triton.tile_ops import (dot_bf16, fp8_gemv_part, fp8_gemv_part_from, norm_quant_row,
                                                   quant_group, quant_row, sum_parts, to_bf16, to_fp8)

NEG: tl.constexpr = tl.constexpr(-1.0e30)  # an attention score below every real one


@triton.jit
def to_cache(x_bf16, kv_ptr):
    """A bf16 value in the cache's dtype (bf16, or fp8 e4m3fn as SGLang's cast)."""
    if kv_ptr.dtype.element_ty == tl.bfloat16:
        return x_bf16
    else:
        return to_fp8(x_bf16.to(tl.float32))


@triton.jit
def rope_vals(x1, x2, cs_ptr, ROPE: tl.constexpr):
    """Interleaved rope of (even, odd) f32 halves: returns the rotated (even, odd)."""
    i = tl.arange(0, ROPE // 2)
    cos = tl.load(cs_ptr + i)
    sin = tl.load(cs_ptr + ROPE // 2 + i)
    return x1 * cos - x2 * sin, x2 * cos + x1 * sin


@triton.jit
def gemv_first_block(w_ptr, ws_ptr, pid, N, K: tl.constexpr, KS: tl.constexpr, BN: tl.constexpr,
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
def gemv_stage(xq_ptr, xs_ptr, w_ptr, ws_ptr, part_ptr, n_tasks, pid, N, w0, ws0, task_count_ptr, R: tl.constexpr,
               K: tl.constexpr, KS: tl.constexpr, BN: tl.constexpr, STAGES: tl.constexpr, NPROG: tl.constexpr,
               PRELOAD: tl.constexpr, SWAP: tl.constexpr, S: tl.constexpr, COUNT_TASKS: tl.constexpr,
               T0: tl.constexpr = 0):
    """This program's tasks of a split-K block-FP8 GEMV stage: task t is column tile t // KS, k part
    t % KS; part[ks, r, n] (f32) = the k part's sum. xq/xs: [R, K] fp8 / [R, K/128] f32 quantized rows;
    w: [N, K] fp8, ws its block scales; part: [KS, R, N] f32. n_tasks is 0 for a skipped stage.
    PRELOAD: the first task starts from w0 / ws0 (`gemv_first_block`, loaded before the wait); the
    sum is the same: its first block's product, then the rest in order.
    T0: the stage's tasks before this GEMV's (another task group of the same stage): task t is the
    stage's task T0 + t, run by program (T0 + t) % NPROG.
    (A flat pipelined loop over (task, k block) was timed on the H200 too: no faster here, and slower
    for the MoE stages, whose expert id feeds the weight address.)"""
    rows = tl.arange(0, 16)
    rmask = rows < R
    NKB: tl.constexpr = (K // 128) // KS
    tl.static_assert(T0 == 0 or not PRELOAD, "a preloaded first block is the stage's first task group's")
    start = pid
    if T0 != 0:
        start = (pid - T0 % NPROG + NPROG) % NPROG  # the first local task t with (T0 + t) % NPROG == pid
    if PRELOAD:
        if pid < n_tasks:
            count_task(task_count_ptr, S, COUNT_TASKS)
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
        count_task(task_count_ptr, S, COUNT_TASKS)
        nt = t // KS
        ks = t % KS
        acc = fp8_gemv_part(xq_ptr, xs_ptr, K, K // 128, w_ptr, K, ws_ptr, K // 128, nt * BN, N,
                            ks * NKB, R, NKB, BN, STAGES, SWAP)
        offs_n = nt * BN + tl.arange(0, BN)
        tl.store(part_ptr + (ks * R + rows[:, None]) * N + offs_n[None, :], acc,
                 mask=rmask[:, None] & (offs_n[None, :] < N))


@triton.jit
def norm1(hidden_ptr, residual_ptr, input_norm_ptr, res1_ptr, xq1_ptr, xs1_ptr, eps, pid, ok, task_count_ptr,
          S: tl.constexpr, T: tl.constexpr, D: tl.constexpr, NORM_GP: tl.constexpr, NPROG: tl.constexpr,
          SKIP_MASK: tl.constexpr, COUNT_TASKS: tl.constexpr, xn1_ptr=None, STORE_XN: tl.constexpr = False,
          TOKENS: tl.constexpr = False, input_ids_ptr=None, err_ptr=None, launch_id=0, V: tl.constexpr = 0,
          TP: tl.constexpr = 1, emb_ptr=None):
    """Task r: res1 = hidden + residual; RMSNorm(res1) in one round over the row, kept quantized (xq1 fp8, xs1
    group scales), and with STORE_XN in bf16 too (xn1: an indexer's x). TOKENS (layer 0): res1 = row
    input_ids[r] of the embedding at hidden_ptr ([V, D]); an id outside [0, V) is clamped for the read and
    written to the error word (the stage, the row, the id, V). TOKENS at TP > 1: res1 = row r of emb (the rows
    summed over the ranks by embed_sum)."""
    GP: tl.constexpr = NORM_GP  # 128-groups of a hidden row, padded to a power of two
    offs_g = tl.arange(0, GP)[:, None] * 128 + tl.arange(0, 128)[None, :]
    m_g = offs_g < D
    for r in tl.range(pid, live_tasks(T, ok, S, SKIP_MASK), NPROG, num_stages=1):  # tasks: never pipelined
        count_task(task_count_ptr, S, COUNT_TASKS)
        wn = tl.load(input_norm_ptr + offs_g, mask=m_g, other=0.0).to(tl.float32)
        if TOKENS and TP > 1:
            x = tl.load(emb_ptr + r * D + offs_g, mask=m_g, other=0.0, cache_modifier=".cg").to(tl.float32)
        elif TOKENS:
            tok = tl.load(input_ids_ptr + r)
            if (tok < 0) | (tok >= V):
                report_input(err_ptr, launch_id, S, pid, r, tok, V, INPUT_TOKEN)
            tok = tl.minimum(tl.maximum(tok, 0), V - 1)
            x = tl.load(hidden_ptr + tok * D + offs_g, mask=m_g, other=0.0).to(tl.float32)
        else:
            h_in = tl.load(hidden_ptr + r * D + offs_g, mask=m_g, other=0.0, cache_modifier=".cg")
            r_in = tl.load(residual_ptr + r * D + offs_g, mask=m_g, other=0.0, cache_modifier=".cg")
            x = h_in.to(tl.float32) + r_in.to(tl.float32)
        tl.store(res1_ptr + r * D + offs_g, to_bf16(x), mask=m_g)
        if STORE_XN:
            norm_quant_row(x, wn, xn1_ptr + r * D, xq1_ptr + r * D, xs1_ptr + r * (D // 128), eps, D, GP, True)
        else:
            norm_quant_row(x, wn, xq1_ptr, xq1_ptr + r * D, xs1_ptr + r * (D // 128), eps, D, GP, False)


@triton.jit
def embed(input_ids_ptr, embed_ptr, peers_ptr, rank, err_ptr, launch_id, epoch, pid, ok, task_count_ptr,
          S: tl.constexpr, T: tl.constexpr, D: tl.constexpr, V: tl.constexpr, BX: tl.constexpr, TP: tl.constexpr,
          X: tl.constexpr, XW: tl.constexpr, NPROG: tl.constexpr, SKIP_MASK: tl.constexpr, COUNT_TASKS: tl.constexpr):
    """TP > 1, layer 0 (SGLang's VocabParallelEmbedding): task (row r, block b) pushes columns [b BX, (b + 1) BX) of
    token input_ids[r]'s embedding row into this rank's slot of region X (XW words: [R, D]) of every rank: the row
    from this rank's vocab rows [rank V, (rank + 1) V) (embed_ptr: [V, D] bf16) when the token is one of them, zeros
    otherwise, so the rank-ordered sum is the row. An id outside [0, TP V) is clamped for the read and written to the
    error word (the stage, the row, the id, TP V)."""
    NB: tl.constexpr = (D + BX - 1) // BX
    for t in tl.range(pid, live_tasks(T, ok, S, SKIP_MASK), NPROG, num_stages=1):  # tasks: never pipelined
        count_task(task_count_ptr, S, COUNT_TASKS)
        r = t // NB
        cols = (t % NB) * BX + tl.arange(0, BX)
        m = cols < D
        tok = tl.load(input_ids_ptr + r)
        if (tok < 0) | (tok >= TP * V):
            report_input(err_ptr, launch_id, S, pid, r, tok, TP * V, INPUT_TOKEN)
        local = tl.minimum(tl.maximum(tok, 0), TP * V - 1) - rank * V
        mine = (local >= 0) & (local < V)
        x = tl.load(embed_ptr + tl.minimum(tl.maximum(local, 0), V - 1) * D + cols, mask=m & mine, other=0.0)
        push_slot(peers_ptr, rank, X, XW, x.to(tl.float32), r * D + cols, m, epoch, TP)


@triton.jit
def latent(qkv_part_ptr, cos_sin_ptr, out_loc_ptr, q_a_norm_ptr, kv_a_norm_ptr, ql_ptr, qlq_ptr, qls_ptr,
           kv_cache_ptr, stride_kv_cache, eps, pid, ok, task_count_ptr, S: tl.constexpr, T: tl.constexpr,
           R: tl.constexpr, QL: tl.constexpr, KVL: tl.constexpr, ROPE: tl.constexpr, KS_A: tl.constexpr,
           NPROG: tl.constexpr, SKIP_MASK: tl.constexpr, COUNT_TASKS: tl.constexpr):
    """Tasks [0, R): q = bf16(sum of qkv_a's q parts), ql = q_a_norm(q), stored and quantized; tasks
    [R, 2R): row t - R's cache row at out_loc = [kv_a_norm(c_kv) | rope(k_pe)] in the cache's dtype."""
    QKV_N: tl.constexpr = QL + KVL + ROPE
    for t in tl.range(pid, live_tasks(T, ok, S, SKIP_MASK), NPROG, num_stages=1):  # tasks: never pipelined
        count_task(task_count_ptr, S, COUNT_TASKS)
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
            # pad rows all write slot 0: only the last row writing a slot writes it (the same bits every run)
            later = tl.arange(0, 16)
            locs = tl.load(out_loc_ptr + later, mask=(later > r) & (later < R), other=-1).to(tl.int64)
            if tl.sum((locs == slot).to(tl.int32), axis=0) == 0:
                row_ptr = kv_cache_ptr + slot * stride_kv_cache
                # kv_a norm of c_kv straight into the cache row (cast to the cache dtype)
                offs_c = tl.arange(0, KVL)
                c = to_bf16(sum_parts(qkv_part_ptr + r * QKV_N + QL, R * QKV_N, offs_c, offs_c < KVL, KS_A)).to(tl.float32)
                rstd_c = tl.math.rsqrt(tl.sum(c * c, axis=0) / KVL + eps)
                wn_c = tl.load(kv_a_norm_ptr + offs_c).to(tl.float32)
                tl.store(row_ptr + offs_c, to_cache(to_bf16((c * rstd_c) * wn_c), kv_cache_ptr))
                i = tl.arange(0, ROPE // 2)
                pe = qkv_part_ptr + r * QKV_N + QL + KVL
                x1 = to_bf16(sum_parts(pe, R * QKV_N, 2 * i, i < ROPE, KS_A)).to(tl.float32)
                x2 = to_bf16(sum_parts(pe, R * QKV_N, 2 * i + 1, i < ROPE, KS_A)).to(tl.float32)
                e, o = rope_vals(x1, x2, cos_sin_ptr + r * ROPE, ROPE)
                tl.store(row_ptr + KVL + 2 * i, to_cache(to_bf16(e), kv_cache_ptr))
                tl.store(row_ptr + KVL + 2 * i + 1, to_cache(to_bf16(o), kv_cache_ptr))


@triton.jit
def absorb(qb_part_ptr, cos_sin_ptr, w_kc_ptr, stride_w_kc_0, stride_w_kc_1, stride_w_kc_2, qcat_ptr, pid, ok,
           task_count_ptr, S: tl.constexpr, T: tl.constexpr, R: tl.constexpr, H: tl.constexpr, KVL: tl.constexpr,
           NOPE: tl.constexpr, ROPE: tl.constexpr, KS_B: tl.constexpr, NPROG: tl.constexpr,
           SKIP_MASK: tl.constexpr, COUNT_TASKS: tl.constexpr):
    """Task (h, ch): qfull = bf16(sum of q_b parts); qcat[:, h, ch chunk] = q_nope @ w_kc[h] (bf16 in, f32
    acc), and for ch 0 rope(q_pe) of every row into qcat[:, h, KVL:]."""
    QK: tl.constexpr = NOPE + ROPE
    KVD: tl.constexpr = KVL + ROPE
    NCH: tl.constexpr = KVL // 128
    rows = tl.arange(0, 16)
    rmask = rows < R
    for t in tl.range(pid, live_tasks(T, ok, S, SKIP_MASK), NPROG, num_stages=1):  # tasks: never pipelined
        count_task(task_count_ptr, S, COUNT_TASKS)
        h = t // NCH
        ch = t % NCH
        cols = ch * 128 + tl.arange(0, 128)
        acc = tl.zeros((16, 128), dtype=tl.float32)
        for kc in tl.static_range(NOPE // 64):
            ks = kc * 64 + tl.arange(0, 64)
            w = tl.load(w_kc_ptr + h * stride_w_kc_0 + ks[:, None] * stride_w_kc_1 + cols[None, :] * stride_w_kc_2)
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


@triton.jit
def attn(qcat_ptr, kv_cache_ptr, stride_kv_cache, topk_slots_ptr, pm_ptr, pl_ptr, pacc_ptr, softmax_scale, pid, ok,
         task_count_ptr, S: tl.constexpr, T: tl.constexpr, H: tl.constexpr, KVL: tl.constexpr, ROPE: tl.constexpr,
         KTOP: tl.constexpr, NSPLIT: tl.constexpr, ATT_BLK: tl.constexpr, NPROG: tl.constexpr,
         SKIP_MASK: tl.constexpr, COUNT_TASKS: tl.constexpr, ROWS: tl.constexpr = False, rowwise=0, rows_ptr=None,
         WAIT_PARTS: tl.constexpr = 0, S_WAIT: tl.constexpr = 0, epoch=0, err_ptr=None, launch_id=0, bound=0,
         TIMER: tl.constexpr = False):
    """Task (r, head group, split): sparse-MLA partials (m, l, acc) of 16 heads of row r over the split's
    share of the row's top-k slots; the heads share each gathered KV block. ROWS with rowwise (the indexer kinds'
    row-scoped hand-offs, tiles.index_row_waits, in a launch whose select ran): a task first waits until its row's
    word at rows_ptr holds WAIT_PARTS arrivals of stage S_WAIT (`sync.wait_row`: emit's tasks of the row, which put
    its list); after a failed wait it reads no slot. Returns ok."""
    KVD: tl.constexpr = KVL + ROPE
    HG: tl.constexpr = (H + 15) // 16
    SPLIT: tl.constexpr = KTOP // NSPLIT
    for t in tl.range(pid, live_tasks(T, ok, S, SKIP_MASK), NPROG, num_stages=1):  # tasks: never pipelined
        count_task(task_count_ptr, S, COUNT_TASKS)
        r = t // (HG * NSPLIT)
        hg = (t // NSPLIT) % HG
        sp = t % NSPLIT
        if ROWS:
            if rowwise != 0:
                ok = wait_row(rows_ptr, r, WAIT_PARTS, S_WAIT, epoch, ok, err_ptr, launch_id, S, pid, bound, TIMER)
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
            slot = tl.load(topk_slots_ptr + r * KTOP + j)
            if ROWS:  # after a failed wait the row's list may be unwritten: no slot read
                valid = (slot >= 0) & (ok != 0)
            else:
                valid = slot >= 0
            kb = kv_cache_ptr + tl.maximum(slot, 0).to(tl.int64)[:, None] * stride_kv_cache
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
    return ok


@triton.jit
def w_uv(pm_ptr, pl_ptr, pacc_ptr, w_vc_ptr, stride_w_vc_0, stride_w_vc_1, stride_w_vc_2, vpart_ptr, vq_ptr, vs_ptr,
         wuv_cnt_ptr, epoch, pid, ok, task_count_ptr, S: tl.constexpr, T: tl.constexpr, R: tl.constexpr,
         H: tl.constexpr, KVL: tl.constexpr, VH: tl.constexpr, NSPLIT: tl.constexpr, WUV_SH: tl.constexpr,
         NPROG: tl.constexpr, SKIP_MASK: tl.constexpr, COUNT_TASKS: tl.constexpr):
    """Task (h, ch, kc): the attention splits combined for latent chunk kc, rounded to bf16, @ w_vc[h, kc
    chunk, ch cols] -> vpart[kc] (f32). The last of the KVL/128 tasks of (h, ch) to land (wuv_cnt, an
    epoch-tagged arrival count a v group) sums the parts in chunk order and quantizes that v group."""
    NVC: tl.constexpr = VH // 128
    NKC: tl.constexpr = KVL // 128
    HV: tl.constexpr = H * VH
    SH: tl.constexpr = WUV_SH if NSPLIT >= WUV_SH else NSPLIT  # splits loaded at once, [16, SH, 128]
    rows = tl.arange(0, 16)
    rmask = rows < R
    spl = tl.arange(0, NSPLIT)
    for t in tl.range(pid, live_tasks(T, ok, S, SKIP_MASK), NPROG, num_stages=1):  # tasks: never pipelined
        count_task(task_count_ptr, S, COUNT_TASKS)
        h = t // (NVC * NKC)
        ch = (t // NKC) % NVC
        kc = t % NKC
        cols = ch * 128 + tl.arange(0, 128)
        ks = kc * 128 + tl.arange(0, 128)
        w = tl.load(w_vc_ptr + h * stride_w_vc_0 + ks[:, None] * stride_w_vc_1 + cols[None, :] * stride_w_vc_2)
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
        if last_to_land(wuv_cnt_ptr + h * NVC + ch, epoch, NKC):  # v = bf16(sum of parts), quantized
            offs = (rows[:, None] * HV + h * VH + cols[None, :])
            v = to_bf16(sum_parts(vpart_ptr, R * HV, offs, rmask[:, None], NKC)).to(tl.float32)
            vq, vs = quant_group(v)
            tl.store(vq_ptr + offs, vq, mask=rmask[:, None])
            tl.store(vs_ptr + rows * (HV // 128) + h * NVC + ch, vs, mask=rmask)


@triton.jit
def o_proj(vq_ptr, vs_ptr, o_proj_ptr, o_proj_s_ptr, res1_ptr, o_part_ptr, o_ptr, residual_out_ptr, oproj_cnt_ptr,
           epoch, pid, ok, task_count_ptr, S: tl.constexpr, T: tl.constexpr, R: tl.constexpr, D: tl.constexpr,
           HV: tl.constexpr, BN_O: tl.constexpr, KS_O: tl.constexpr, STAGES: tl.constexpr, SWAP_AB: tl.constexpr,
           NPROG: tl.constexpr, SKIP_MASK: tl.constexpr, COUNT_TASKS: tl.constexpr, TP: tl.constexpr = 1,
           peers_ptr=None, rank=0, X: tl.constexpr = 0, XW: tl.constexpr = 0):
    """Split-K parts of block-FP8 o_proj(v); the last part of a column tile to land (oproj_cnt, an
    epoch-tagged arrival count a column tile) sums the tile's parts in part order: o = bf16(sum) and
    residual_out = bf16(o + res1) for those columns. TP > 1: that o (this rank's partial) is pushed into this
    rank's slot of region X (XW words: [R, D]) of every rank instead (o_sum sums the ranks' and writes o and
    residual_out)."""
    NKB_O: tl.constexpr = (HV // 128) // KS_O
    rows = tl.arange(0, 16)
    rmask = rows < R
    for t in tl.range(pid, live_tasks(T, ok, S, SKIP_MASK), NPROG, num_stages=1):  # tasks: never pipelined
        count_task(task_count_ptr, S, COUNT_TASKS)
        nt = t // KS_O
        acc = fp8_gemv_part(vq_ptr, vs_ptr, HV, HV // 128, o_proj_ptr, HV, o_proj_s_ptr, HV // 128, nt * BN_O, D,
                            (t % KS_O) * NKB_O, R, NKB_O, BN_O, STAGES, SWAP_AB)
        offs_n = nt * BN_O + tl.arange(0, BN_O)
        m_o = rmask[:, None] & (offs_n[None, :] < D)
        tl.store(o_part_ptr + ((t % KS_O) * R + rows[:, None]) * D + offs_n[None, :], acc, mask=m_o)
        if last_to_land(oproj_cnt_ptr + nt, epoch, KS_O):
            offs = rows[:, None] * D + offs_n[None, :]
            o = to_bf16(sum_parts(o_part_ptr, R * D, offs, m_o, KS_O))
            if TP == 1:
                r1 = tl.load(res1_ptr + offs, mask=m_o, other=0.0, cache_modifier=".cg")
                tl.store(o_ptr + offs, o, mask=m_o)
                tl.store(residual_out_ptr + offs, to_bf16(o.to(tl.float32) + r1.to(tl.float32)), mask=m_o)
            else:
                push_slot(peers_ptr, rank, X, XW, o.to(tl.float32), offs, m_o, epoch, TP)
