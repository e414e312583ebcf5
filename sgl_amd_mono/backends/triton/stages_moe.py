"""The MoE half's stages in Triton (norm2 ... down): one @triton.jit function a stage's task loop, called by
every kind's kernel that runs the half (`glm53/kinds/halves.py` is the table). Conventions as
`stages_attention.py`. The fused expert is expert E; no float atomics anywhere: bitwise
reproducible.
"""

import triton
import triton.language as tl

from sgl_amd_mono.backends.triton.exchange import push_slot
from sgl_amd_mono.backends.triton.sync import count_task, last_to_land, live_tasks
from sgl_amd_mono.backends.triton.tile_ops import (dot_bf16, fp8_gemv2_expert_tasks, fp8_gemv_experts,
                                                   norm_quant_row, quant_group, sum_parts, to_bf16)


@triton.jit
def norm2(o_ptr, res1_ptr, post_norm_ptr, xn2_ptr, xq2_ptr, xs2_ptr, eps, pid, ok, task_count_ptr, S: tl.constexpr,
          T: tl.constexpr, D: tl.constexpr, NORM_GP: tl.constexpr, NPROG: tl.constexpr, SKIP_MASK: tl.constexpr,
          COUNT_TASKS: tl.constexpr, STORE_XN: tl.constexpr = True):
    """Task r: xn2 = RMSNorm(o + res1) (o from o_proj's last arrivers), quantized once, and stored bf16 where
    STORE_XN (the router's input; the dense MLP reads only the quantized rows)."""
    GP: tl.constexpr = NORM_GP  # 128-groups of a hidden row, padded to a power of two
    offs_g = tl.arange(0, GP)[:, None] * 128 + tl.arange(0, 128)[None, :]
    m_g = offs_g < D
    for r in tl.range(pid, live_tasks(T, ok, S, SKIP_MASK), NPROG, num_stages=1):  # tasks: never pipelined
        count_task(task_count_ptr, S, COUNT_TASKS)
        o = tl.load(o_ptr + r * D + offs_g, mask=m_g, other=0.0, cache_modifier=".cg")  # o_proj's
        r1 = tl.load(res1_ptr + r * D + offs_g, mask=m_g, other=0.0, cache_modifier=".cg")
        wn = tl.load(post_norm_ptr + offs_g, mask=m_g, other=0.0).to(tl.float32)
        x = o.to(tl.float32) + r1.to(tl.float32)
        norm_quant_row(x, wn, xn2_ptr + r * D, xq2_ptr + r * D, xs2_ptr + r * (D // 128), eps, D, GP, STORE_XN)


@triton.jit
def gate(xn2_ptr, gate_ptr, lg_part_ptr, pid, ok, task_count_ptr, S: tl.constexpr, T: tl.constexpr, R: tl.constexpr,
         D: tl.constexpr, E: tl.constexpr, BE: tl.constexpr, KS_G: tl.constexpr, STAGES: tl.constexpr,
         NPROG: tl.constexpr, SKIP_MASK: tl.constexpr, COUNT_TASKS: tl.constexpr):
    """Task (expert tile, k part): split-K parts of the f32 logits of the bf16 gate (bf16 products are exact
    in f32)."""
    NKB_G: tl.constexpr = (D // 128) // KS_G
    rows = tl.arange(0, 16)
    rmask = rows < R
    for t in tl.range(pid, live_tasks(T, ok, S, SKIP_MASK), NPROG, num_stages=1):  # tasks: never pipelined
        count_task(task_count_ptr, S, COUNT_TASKS)
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


@triton.jit
def route_chunk(lg_part_ptr, bias_ptr, expert_ids_ptr, rw_ptr, r, c, R: tl.constexpr, E: tl.constexpr,
                E_PAD: tl.constexpr, TOPK: tl.constexpr, KS_G: tl.constexpr, RC: tl.constexpr):
    """The router for experts c*RC .. c*RC+RC-1 of row r: each one's rank among all biased scores
    (higher first, lower id first on ties: the order of an arg-max loop) says whether it is in the
    top-k. Writes expert_ids[r, rank] = e for the picked ones, and rw[e, r] = its sigmoid score (0 if not
    picked). Chunk 0 also writes the fused expert E at expert_ids[r, TOPK] and rw[E, r] = 1.
    The renormalisation (x routed_scaling / the row's sum of picked scores) is applied by the readers
    (`used_experts` gives every program each row's factor). The chunk's own scores are taken out of
    the [E_PAD / RC, RC] view of the row's by an exact masked sum (one term a column), so both sides of
    every comparison are the same bits; the comparisons are an [E_PAD, RC] tile summed over experts."""
    NC: tl.constexpr = E_PAD // RC
    ex = tl.arange(0, E_PAD)
    em = ex < E
    score = tl.sigmoid(sum_parts(lg_part_ptr + r * E, R * E, ex, em, KS_G))
    # a NaN score (a NaN input row) ranks as -inf: still exactly TOPK picks a row, never more used experts
    # than the buffers hold (the same bits for every finite score)
    choice = tl.where(em & (score == score), score + tl.load(bias_ptr + ex, mask=em, other=0.0), float("-inf"))
    ei = c * RC + tl.arange(0, RC)
    pick = tl.arange(0, NC)[:, None] == c
    ci = tl.sum(tl.where(pick, tl.reshape(choice, (NC, RC)), 0.0), axis=0)  # exact: x + 0.0
    si = tl.sum(tl.where(pick, tl.reshape(score, (NC, RC)), 0.0), axis=0)
    beats = (choice[:, None] > ci[None, :]) | ((choice[:, None] == ci[None, :]) & (ex[:, None] < ei[None, :]))
    rank = tl.sum(beats.to(tl.int32), axis=0)
    sel = (rank < TOPK) & (ei < E)
    tl.store(expert_ids_ptr + r * (TOPK + 1) + rank, ei, mask=sel)
    tl.store(rw_ptr + ei * 16 + r, tl.where(sel, si, 0.0), mask=ei < E)
    if c == 0:
        tl.store(expert_ids_ptr + r * (TOPK + 1) + TOPK, E)
        tl.store(rw_ptr + E * 16 + r, 1.0)


@triton.jit
def route(lg_part_ptr, bias_ptr, expert_ids_ptr, rw_ptr, pid, ok, task_count_ptr, S: tl.constexpr, T: tl.constexpr,
          R: tl.constexpr, E: tl.constexpr, E_PAD: tl.constexpr, TOPK: tl.constexpr, KS_G: tl.constexpr,
          ROUTE_RC: tl.constexpr, NPROG: tl.constexpr, SKIP_MASK: tl.constexpr, COUNT_TASKS: tl.constexpr):
    """Task (r, c) = row r's router for experts c*RC.. (`route_chunk`)."""
    RC: tl.constexpr = ROUTE_RC if E_PAD >= ROUTE_RC else E_PAD
    for t in tl.range(pid, live_tasks(T, ok, S, SKIP_MASK), NPROG, num_stages=1):  # tasks: never pipelined
        count_task(task_count_ptr, S, COUNT_TASKS)
        route_chunk(lg_part_ptr, bias_ptr, expert_ids_ptr, rw_ptr, t // (E_PAD // RC), t % (E_PAD // RC), R, E, E_PAD,
                    TOPK, KS_G, RC)


@triton.jit
def used_experts(rw_ptr, uniq_ptr, routed_scaling, R: tl.constexpr, E: tl.constexpr, E_PAD: tl.constexpr):
    """This program's own list of the experts any row uses (rw != 0), ascending, the fused expert E
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
def up(rw_ptr, xq2_ptr, xs2_ptr, w13_ptr, w13_s_ptr, uniq_ptr, up_part_ptr, routed_scaling, pid, ok, task_count_ptr,
       S: tl.constexpr, R: tl.constexpr, D: tl.constexpr, E: tl.constexpr, E_PAD: tl.constexpr, I: tl.constexpr,
       MAXU: tl.constexpr, BU: tl.constexpr, KS_U: tl.constexpr, UP_MT: tl.constexpr, STAGES_UP: tl.constexpr,
       SWAP_MOE: tl.constexpr, NPROG: tl.constexpr, SKIP_MASK: tl.constexpr, COUNT_TASKS: tl.constexpr):
    """Every program lists the used experts itself (`used_experts`, at uniq[pid]), then runs its tasks of
    split-K parts of x @ gate^T | x @ up^T a used expert, in one pipelined loop (`fp8_gemv2_expert_tasks`).
    Returns (this program's list, its length n_u, each row's renormalisation) for act and down. The task
    count (n_u column tiles x parts) depends on the routing: at most the table's MAXU x I/BU x KS_U."""
    my_uniq = uniq_ptr + pid * (MAXU + 1)
    n_u, rscale = used_experts(rw_ptr, my_uniq, routed_scaling, R, E, E_PAD)
    n_u = tl.minimum(n_u, MAXU)
    NT_UP: tl.constexpr = I // BU
    n_tasks = live_tasks(n_u * NT_UP * KS_U, ok, S, SKIP_MASK)
    if COUNT_TASKS:
        for t in tl.range(pid, n_tasks, NPROG):  # the tasks fp8_gemv2_expert_tasks runs on this program
            count_task(task_count_ptr, S, COUNT_TASKS)
    fp8_gemv2_expert_tasks(xq2_ptr, xs2_ptr, w13_ptr, w13_s_ptr, my_uniq, up_part_ptr, pid, n_tasks, R, I, D, E, BU,
                           KS_U, NPROG, UP_MT, STAGES_UP, SWAP_MOE)
    return my_uniq, n_u, rscale


@triton.jit
def act(up_part_ptr, rw_ptr, expert_ids_ptr, aq_ptr, as_ptr, expert_weights_ptr, my_uniq, n_u, rscale, pid, ok,
        task_count_ptr, S: tl.constexpr, R: tl.constexpr, E: tl.constexpr, TOPK: tl.constexpr, KP: tl.constexpr,
        I: tl.constexpr, KS_U: tl.constexpr, NPROG: tl.constexpr, SKIP_MASK: tl.constexpr,
        COUNT_TASKS: tl.constexpr):
    """Task (u, g): act[u] = SiLU(bf16(gate)) * bf16(up), rounded to bf16, quantized per 128-group; the group
    scales are stored times row r's routing weight of expert u (so down's sum over experts is weighted).
    Then tasks on programs NPROG-1-r write row r's routing weights (expert_ids order)."""
    NG_I: tl.constexpr = I // 128
    rows = tl.arange(0, 16)
    rmask = rows < R
    for t in tl.range(pid, live_tasks(n_u * NG_I, ok, S, SKIP_MASK), NPROG, num_stages=1):  # tasks: never pipelined
        count_task(task_count_ptr, S, COUNT_TASKS)
        u = t // NG_I
        gi = t % NG_I
        cols = gi * 128 + tl.arange(0, 128)
        offs = rows[:, None] * (2 * I) + cols[None, :]
        pb = up_part_ptr + u * KS_U * R * (2 * I)
        g = to_bf16(sum_parts(pb, R * 2 * I, offs, rmask[:, None], KS_U)).to(tl.float32)
        upv = to_bf16(sum_parts(pb + I, R * 2 * I, offs, rmask[:, None], KS_U)).to(tl.float32)
        a = to_bf16(g * tl.sigmoid(g) * upv).to(tl.float32)
        aq, as_ = quant_group(a)
        e = tl.minimum(tl.maximum(tl.load(my_uniq + u), 0), E)
        wr = tl.load(rw_ptr + e * 16 + rows, mask=rmask, other=0.0, cache_modifier=".cg")
        wr = tl.where(e < E, wr * rscale, wr)
        tl.store(aq_ptr + (u * R + rows[:, None]) * I + cols[None, :], aq, mask=rmask[:, None])
        tl.store(as_ptr + (u * R + rows) * NG_I + gi, as_ * wr, mask=rmask)
    kk = tl.arange(0, KP)
    for r in tl.range(NPROG - 1 - pid, live_tasks(R, ok, S, SKIP_MASK), NPROG, num_stages=1):  # tasks: never pipelined
        count_task(task_count_ptr, S, COUNT_TASKS)
        ek = tl.load(expert_ids_ptr + r * (TOPK + 1) + kk, mask=kk < TOPK, other=0, cache_modifier=".cg")
        wk = tl.load(rw_ptr + ek * 16 + r, mask=kk < TOPK, other=0.0, cache_modifier=".cg")
        sr = tl.sum(tl.where(rows == r, rscale, 0.0), axis=0)
        tl.store(expert_weights_ptr + r * (TOPK + 1) + kk, tl.where(kk < TOPK, wk * sr, 1.0), mask=kk <= TOPK)


@triton.jit
def down(aq_ptr, as_ptr, w2_ptr, w2_s_ptr, dn_part_ptr, out_ptr, dn_cnt_ptr, my_uniq, n_u, epoch, pid, ok,
         task_count_ptr, S: tl.constexpr, T: tl.constexpr, R: tl.constexpr, D: tl.constexpr, E: tl.constexpr,
         I: tl.constexpr, DCW: tl.constexpr, DCW_P: tl.constexpr, DN_PARTS: tl.constexpr, STAGES_DN: tl.constexpr,
         SWAP_MOE: tl.constexpr, NPROG: tl.constexpr, SKIP_MASK: tl.constexpr, COUNT_TASKS: tl.constexpr,
         TP: tl.constexpr = 1, peers_ptr=None, rank=0, X: tl.constexpr = 0, XW: tl.constexpr = 0):
    """Task (c, p) = output columns c*DCW.., part p of the used experts (the p-th of DN_PARTS equal runs, in
    order): the sum over its experts u and their k blocks of q(act_u) @ w2[e_u]^T, one pipelined loop
    streaming every expert's slice. One part: out = bf16(sum). More: each part stores its f32 sum, and the
    last part of a column tile to land (dn_cnt, an epoch-tagged arrival count) sums the parts in part
    order: out = bf16(sum). TP > 1: that bf16(sum) (this rank's partial) is pushed into this rank's slot of region
    X (XW words: [R, D]) of every rank instead (down_sum sums the ranks')."""
    rows = tl.arange(0, 16)
    rmask = rows < R
    n_dn = tl.cdiv(n_u, DN_PARTS)
    for t in tl.range(pid, live_tasks(T, ok, S, SKIP_MASK), NPROG, num_stages=1):  # tasks: never pipelined
        count_task(task_count_ptr, S, COUNT_TASKS)
        c = t // DN_PARTS
        p = t % DN_PARTS
        u0 = p * n_dn
        acc = fp8_gemv_experts(aq_ptr + u0 * R * I, as_ptr + u0 * R * (I // 128), w2_ptr, w2_s_ptr, my_uniq + u0,
                               tl.maximum(tl.minimum(n_u - u0, n_dn), 0), c * DCW, R, D, I, E, DCW, DCW_P, STAGES_DN,
                               SWAP_MOE)
        cols = c * DCW + tl.arange(0, DCW_P)
        m_dn = rmask[:, None] & (tl.arange(0, DCW_P) < DCW)[None, :] & (cols < D)[None, :]
        offs = rows[:, None] * D + cols[None, :]
        if DN_PARTS == 1:
            if TP == 1:
                tl.store(out_ptr + offs, to_bf16(acc), mask=m_dn)
            else:
                push_slot(peers_ptr, rank, X, XW, to_bf16(acc).to(tl.float32), offs, m_dn, epoch, TP)
        else:
            tl.store(dn_part_ptr + p * (R * D) + offs, acc, mask=m_dn)
            if last_to_land(dn_cnt_ptr + c, epoch, DN_PARTS):
                v = to_bf16(sum_parts(dn_part_ptr, R * D, offs, m_dn, DN_PARTS))
                if TP == 1:
                    tl.store(out_ptr + offs, v, mask=m_dn)
                else:
                    push_slot(peers_ptr, rank, X, XW, v.to(tl.float32), offs, m_dn, epoch, TP)
