"""The "indexer" kind in Triton: one persistent launch for one MoE layer that runs its own DSA indexer and
selects its own exact top-k (`glm53/kinds/indexer.py` is the table; its docstring states the exactness rule).

The kernel is the table as stage calls: the attention half's front stages with the index work as task groups
(`stages_attention.py`, `stages_index.py`), the indexer's own stages (score, the radix digits, emit),
then the sparse MLA over the selected slots and the MoE (`kernel_halves.py`). Arguments come by name from the
table (`launch.py`), as the shared kind's.
"""

import triton
import triton.language as tl

from sgl_amd_mono.backends.triton import stages_attention as attn_half
from sgl_amd_mono.backends.triton import stages_index as index
from sgl_amd_mono.backends.triton.kernel_halves import mla_attention, moe
from sgl_amd_mono.backends.triton.kernel_shared import constexprs as shared_constexprs
from sgl_amd_mono.backends.triton.kernel_shared import scalars as shared_scalars
from sgl_amd_mono.backends.triton.launch import TritonKind
from sgl_amd_mono.backends.triton.sync import count_task, hand_off, launch_end, launch_start, live_tasks, pass_stages
from sgl_amd_mono.glm53.kinds import indexer as indexer_kind
from sgl_amd_mono.glm53.kinds.dims import LayerDims, layer_dims


def constexprs(d: LayerDims) -> dict:
    """The shared kind's constexprs and the indexer's sizes (IH index heads, ID their dim, PMAX pages a
    row's page table holds, NSL slices a row's key scan splits into, IBLK keys a scoring step covers, ISCAN
    keys a selection step covers, ISHORT the longest row one task selects (0: none), LS the longest row whose
    list one task writes, max(KTOP, ISHORT), ISWAP / IPIPE the score loop's swapped dots and pipeline depth, IQG
    heads an index-query task covers) and tiles (KS_I: wk's and weights_proj's parts; BN_IQ / KS_IQ: wq_b's)."""
    t = d.tiles
    return {**shared_constexprs(d), "IH": d.IH, "ID": d.ID, "PMAX": d.PMAX, "NSL": d.NSL, "IBLK": d.IBLK,
            "ISCAN": t.index_scan, "ISHORT": t.index_short, "LS": max(d.KTOP, t.index_short),
            "ISWAP": t.index_swap, "IPIPE": t.index_pipe,
            "IQG": indexer_kind.index_query_heads(d), "KS_I": t.ks_i, "BN_IQ": t.bn_iq, "KS_IQ": t.ks_iq}


def scalars(d: LayerDims) -> dict:
    return {**shared_scalars(d), "k_norm_eps": d.k_norm_eps}


@triton.jit(do_not_specialize=["launch_id"])  # one compiled kernel for every layer's launch_id
def indexer_layer_kernel(
    # step inputs
    hidden_ptr, residual_ptr, cos_sin_ptr, out_loc_ptr, kv_cache_ptr, stride_kv_cache, index_k_cache_ptr,
    stride_index_k_cache, page_table_ptr, lengths_ptr, rows_per_req_ptr,
    # attention weights
    input_norm_ptr, qkv_a_ptr, qkv_a_s_ptr, q_a_norm_ptr, kv_a_norm_ptr, q_b_ptr, q_b_s_ptr,
    w_kc_ptr, stride_w_kc_0, stride_w_kc_1, stride_w_kc_2, w_vc_ptr, stride_w_vc_0, stride_w_vc_1, stride_w_vc_2,
    o_proj_ptr, o_proj_s_ptr, post_norm_ptr,
    # indexer weights
    wq_b_ptr, wq_b_s_ptr, wk_ptr, wk_s_ptr, weights_proj_ptr, k_norm_w_ptr, k_norm_b_ptr,
    # MoE weights
    gate_ptr, bias_ptr, w13_ptr, w13_s_ptr, w2_ptr, w2_s_ptr,
    # outputs
    o_ptr, residual_out_ptr, topk_ptr, out_ptr, expert_ids_ptr, expert_weights_ptr,
    # scratch
    res1_ptr, xq1_ptr, xs1_ptr, qkv_part_ptr, ql_ptr, qlq_ptr, qls_ptr, qb_part_ptr, qcat_ptr, pm_ptr, pl_ptr,
    pacc_ptr, vpart_ptr, vq_ptr, vs_ptr, o_part_ptr,
    xn1_ptr, ik_part_ptr, iw_part_ptr, iq_part_ptr, iq_ptr, head_w_ptr, scores_ptr, hist0_ptr, hist1_ptr, hist2_ptr,
    hist3_ptr, cnt_ptr,
    xn2_ptr, xq2_ptr, xs2_ptr, lg_part_ptr, rw_ptr, uniq_ptr, up_part_ptr, aq_ptr, as_ptr, dn_part_ptr,
    # sync: [epoch | arrivals | the last-arrival counts], the error word, trace stamps, task counts
    sync_ptr, err_ptr, trace_ptr, task_count_ptr,
    # scalars
    launch_id, bound, eps, softmax_scale, routed_scaling, k_norm_eps,
    # geometry
    R: tl.constexpr, D: tl.constexpr, QL: tl.constexpr, KVL: tl.constexpr, ROPE: tl.constexpr, NOPE: tl.constexpr,
    VH: tl.constexpr, H: tl.constexpr, E: tl.constexpr, E_PAD: tl.constexpr, TOPK: tl.constexpr, KP: tl.constexpr,
    I: tl.constexpr, KTOP: tl.constexpr, NSPLIT: tl.constexpr, MAXU: tl.constexpr,
    IH: tl.constexpr, ID: tl.constexpr, PMAX: tl.constexpr, NSL: tl.constexpr, IBLK: tl.constexpr,
    ISCAN: tl.constexpr, ISHORT: tl.constexpr, LS: tl.constexpr, ISWAP: tl.constexpr, IPIPE: tl.constexpr,
    IQG: tl.constexpr, KS_I: tl.constexpr, BN_IQ: tl.constexpr, KS_IQ: tl.constexpr,
    # tiles
    BN_A: tl.constexpr, KS_A: tl.constexpr, BN_B: tl.constexpr, KS_B: tl.constexpr, BN_O: tl.constexpr,
    KS_O: tl.constexpr, BE: tl.constexpr, KS_G: tl.constexpr, BU: tl.constexpr, KS_U: tl.constexpr,
    DCW: tl.constexpr, DCW_P: tl.constexpr, STAGES_DN: tl.constexpr, DN_PARTS: tl.constexpr,
    STAGES_UP: tl.constexpr, ATT_BLK: tl.constexpr, UP_MT: tl.constexpr, NORM_GP: tl.constexpr,
    WUV_SH: tl.constexpr, ROUTE_RC: tl.constexpr, STAGES: tl.constexpr, SWAP_AB: tl.constexpr,
    SWAP_MOE: tl.constexpr, PRELOAD: tl.constexpr,
    # build options
    NPROG: tl.constexpr, TIMER: tl.constexpr, SKIP_ARRIVE: tl.constexpr, SKIP_MASK: tl.constexpr,
    TRACE: tl.constexpr, COUNT_TASKS: tl.constexpr,
    # the table: the last-arrival counts' first words in sync, stage ids and fixed task counts
    C_WUV_CNT: tl.constexpr, C_OPROJ_CNT: tl.constexpr, C_DN_CNT: tl.constexpr, N_STAGES: tl.constexpr,
    S_NORM1: tl.constexpr, S_QKV_A: tl.constexpr, S_LATENT: tl.constexpr, S_Q_B: tl.constexpr,
    S_ABSORB: tl.constexpr, S_SCORE: tl.constexpr, S_SEL1: tl.constexpr, S_SEL2: tl.constexpr, S_SEL3: tl.constexpr,
    S_EMIT: tl.constexpr, S_ATTN: tl.constexpr, S_W_UV: tl.constexpr, S_O_PROJ: tl.constexpr,
    S_NORM2: tl.constexpr, S_GATE: tl.constexpr, S_ROUTE: tl.constexpr, S_UP: tl.constexpr, S_ACT: tl.constexpr,
    S_DOWN: tl.constexpr,
    T_NORM1: tl.constexpr, T_QKV_A: tl.constexpr, T_LATENT: tl.constexpr, T_Q_B: tl.constexpr,
    T_ABSORB: tl.constexpr, T_ATTN: tl.constexpr, T_W_UV: tl.constexpr, T_O_PROJ: tl.constexpr,
    T_NORM2: tl.constexpr, T_GATE: tl.constexpr, T_ROUTE: tl.constexpr, T_DOWN: tl.constexpr,
):
    """grid = (NPROG,), every program resident; task t of a stage runs on program t % NPROG (a stage's task
    groups number their tasks on from the groups before them). Options as the shared kernel's."""
    pid, epoch, ok = launch_start(sync_ptr, trace_ptr, N_STAGES, TRACE)
    QKV_N: tl.constexpr = QL + KVL + ROPE
    QK: tl.constexpr = NOPE + ROPE
    T_A: tl.constexpr = (QKV_N + BN_A - 1) // BN_A * KS_A  # qkv_a's tasks, before wk's and weights_proj's
    T_B: tl.constexpr = (H * QK + BN_B - 1) // BN_B * KS_B  # q_b's tasks, before wq_b's
    T_AB: tl.constexpr = H * (KVL // 128)  # absorb's tasks, before the index queries

    attn_half.norm1(hidden_ptr, residual_ptr, input_norm_ptr, res1_ptr, xq1_ptr, xs1_ptr, eps, pid, ok, task_count_ptr,
                    S_NORM1, T_NORM1, D, NORM_GP, NPROG, SKIP_MASK, COUNT_TASKS, xn1_ptr, True)
    ok = hand_off(sync_ptr, err_ptr, trace_ptr, S_NORM1, epoch, ok, pid, launch_id, bound,
                  NPROG, N_STAGES, TIMER, SKIP_ARRIVE, TRACE)

    attn_half.gemv_stage(xq1_ptr, xs1_ptr, qkv_a_ptr, qkv_a_s_ptr, qkv_part_ptr, live_tasks(T_A, ok, S_QKV_A, SKIP_MASK),
                         pid, QKV_N, 0.0, 0.0, task_count_ptr, R, D, KS_A, BN_A, STAGES, NPROG, False, SWAP_AB, S_QKV_A,
                         COUNT_TASKS)
    attn_half.gemv_stage(xq1_ptr, xs1_ptr, wk_ptr, wk_s_ptr, ik_part_ptr, live_tasks(KS_I, ok, S_QKV_A, SKIP_MASK),
                         pid, ID, 0.0, 0.0, task_count_ptr, R, D, KS_I, ID, STAGES, NPROG, False, SWAP_AB, S_QKV_A,
                         COUNT_TASKS, T_A)
    index.bf16_gemv_stage(xn1_ptr, weights_proj_ptr, iw_part_ptr, live_tasks(KS_I, ok, S_QKV_A, SKIP_MASK), pid,
                          task_count_ptr, R, IH, D, KS_I, NPROG, S_QKV_A, COUNT_TASKS, T_A + KS_I)
    ok = hand_off(sync_ptr, err_ptr, trace_ptr, S_QKV_A, epoch, ok, pid, launch_id, bound,
                  NPROG, N_STAGES, TIMER, SKIP_ARRIVE, TRACE)

    attn_half.latent(qkv_part_ptr, cos_sin_ptr, out_loc_ptr, q_a_norm_ptr, kv_a_norm_ptr, ql_ptr, qlq_ptr, qls_ptr,
                     kv_cache_ptr, stride_kv_cache, eps, pid, ok, task_count_ptr, S_LATENT, 2 * R, R, QL, KVL, ROPE,
                     KS_A, NPROG, SKIP_MASK, COUNT_TASKS)
    for r in tl.range((pid - (2 * R) % NPROG + NPROG) % NPROG, live_tasks(R, ok, S_LATENT, SKIP_MASK), NPROG,
                      num_stages=1):  # the index keys, a task a row: the stage's tasks after the latents'
        count_task(task_count_ptr, S_LATENT, COUNT_TASKS)
        index.index_keys(ik_part_ptr, cos_sin_ptr, out_loc_ptr, k_norm_w_ptr, k_norm_b_ptr, index_k_cache_ptr,
                         stride_index_k_cache, k_norm_eps, r, R, ID, ROPE, KS_I)
    ok = hand_off(sync_ptr, err_ptr, trace_ptr, S_LATENT, epoch, ok, pid, launch_id, bound,
                  NPROG, N_STAGES, TIMER, SKIP_ARRIVE, TRACE)

    attn_half.gemv_stage(qlq_ptr, qls_ptr, q_b_ptr, q_b_s_ptr, qb_part_ptr, live_tasks(T_B, ok, S_Q_B, SKIP_MASK),
                         pid, H * QK, 0.0, 0.0, task_count_ptr, R, QL, KS_B, BN_B, STAGES, NPROG, False, SWAP_AB, S_Q_B,
                         COUNT_TASKS)
    attn_half.gemv_stage(qlq_ptr, qls_ptr, wq_b_ptr, wq_b_s_ptr, iq_part_ptr,
                         live_tasks(T_Q_B - T_B, ok, S_Q_B, SKIP_MASK), pid, IH * ID, 0.0, 0.0, task_count_ptr, R, QL,
                         KS_IQ, BN_IQ, STAGES, NPROG, False, SWAP_AB, S_Q_B, COUNT_TASKS, T_B)
    ok = hand_off(sync_ptr, err_ptr, trace_ptr, S_Q_B, epoch, ok, pid, launch_id, bound,
                  NPROG, N_STAGES, TIMER, SKIP_ARRIVE, TRACE)

    attn_half.absorb(qb_part_ptr, cos_sin_ptr, w_kc_ptr, stride_w_kc_0, stride_w_kc_1, stride_w_kc_2, qcat_ptr, pid, ok,
                     task_count_ptr, S_ABSORB, T_AB, R, H, KVL, NOPE, ROPE, KS_B, NPROG, SKIP_MASK, COUNT_TASKS)
    for u in tl.range((pid - T_AB % NPROG + NPROG) % NPROG, live_tasks(R * (IH // IQG), ok, S_ABSORB, SKIP_MASK),
                      NPROG, num_stages=1):  # the index queries (row, head group): the stage's tasks after absorb's
        count_task(task_count_ptr, S_ABSORB, COUNT_TASKS)
        index.index_query(iq_part_ptr, iw_part_ptr, cos_sin_ptr, iq_ptr, head_w_ptr, u // (IH // IQG),
                          u % (IH // IQG), R, IH, ID, ROPE, IQG, KS_I, KS_IQ)
    # every row's length (clamped to the page table; a longer one reported) and the rows a request, read once for
    # the indexer's stages: loaded here, their round trip inside absorb's hand-off
    lens = index.row_lengths(lengths_ptr, err_ptr, launch_id, pid, pid == 0, R, PMAX * 64, S_SCORE)
    rpr = tl.maximum(tl.load(rows_per_req_ptr), 1)
    ok = hand_off(sync_ptr, err_ptr, trace_ptr, S_ABSORB, epoch, ok, pid, launch_id, bound,
                  NPROG, N_STAGES, TIMER, SKIP_ARRIVE, TRACE)

    index.score(iq_ptr, head_w_ptr, index_k_cache_ptr, stride_index_k_cache, page_table_ptr, lens, rpr, scores_ptr,
                hist0_ptr, epoch, pid, ok, task_count_ptr, S_SCORE, R, IH, ID, KTOP, PMAX, NSL, IBLK, LS, ISWAP, IPIPE,
                NPROG, SKIP_MASK, COUNT_TASKS)
    ok = hand_off(sync_ptr, err_ptr, trace_ptr, S_SCORE, epoch, ok, pid, launch_id, bound,
                  NPROG, N_STAGES, TIMER, SKIP_ARRIVE, TRACE)
    index.select_digit(scores_ptr, lens, hist0_ptr, hist1_ptr, hist2_ptr, hist3_ptr, hist1_ptr, cnt_ptr, topk_ptr, epoch,
                       pid, ok, task_count_ptr, S_SEL1, 1, R, KTOP, PMAX, NSL, IBLK, ISCAN, LS, NPROG, SKIP_MASK,
                       COUNT_TASKS)
    index.listed_rows(scores_ptr, lens, page_table_ptr, topk_ptr, pid, ok, task_count_ptr, S_SEL1, R, KTOP, PMAX, ISHORT,
                      LS, NPROG, SKIP_MASK, COUNT_TASKS)
    ok = hand_off(sync_ptr, err_ptr, trace_ptr, S_SEL1, epoch, ok, pid, launch_id, bound,
                  NPROG, N_STAGES, TIMER, SKIP_ARRIVE, TRACE)
    # the sliced select's last three stages, only when a row takes it: every program holds the same lengths, so
    # all take the same branch; otherwise each arrives at them without waiting (its counters stay in step)
    if index.any_sliced_row(lens, LS):
        index.select_digit(scores_ptr, lens, hist0_ptr, hist1_ptr, hist2_ptr, hist3_ptr, hist2_ptr, cnt_ptr, topk_ptr,
                           epoch, pid, ok, task_count_ptr, S_SEL2, 2, R, KTOP, PMAX, NSL, IBLK, ISCAN, LS, NPROG,
                           SKIP_MASK, COUNT_TASKS)
        ok = hand_off(sync_ptr, err_ptr, trace_ptr, S_SEL2, epoch, ok, pid, launch_id, bound,
                      NPROG, N_STAGES, TIMER, SKIP_ARRIVE, TRACE)
        index.select_digit(scores_ptr, lens, hist0_ptr, hist1_ptr, hist2_ptr, hist3_ptr, hist3_ptr, cnt_ptr, topk_ptr,
                           epoch, pid, ok, task_count_ptr, S_SEL3, 3, R, KTOP, PMAX, NSL, IBLK, ISCAN, LS, NPROG,
                           SKIP_MASK, COUNT_TASKS)
        ok = hand_off(sync_ptr, err_ptr, trace_ptr, S_SEL3, epoch, ok, pid, launch_id, bound,
                      NPROG, N_STAGES, TIMER, SKIP_ARRIVE, TRACE)
        index.emit(scores_ptr, lens, page_table_ptr, hist0_ptr, hist1_ptr, hist2_ptr, hist3_ptr, cnt_ptr, topk_ptr,
                   err_ptr, launch_id, epoch, pid, ok, task_count_ptr, S_EMIT, R, KTOP, PMAX, NSL, IBLK, ISCAN, LS,
                   NPROG, SKIP_MASK, COUNT_TASKS)
        ok = hand_off(sync_ptr, err_ptr, trace_ptr, S_EMIT, epoch, ok, pid, launch_id, bound,
                      NPROG, N_STAGES, TIMER, SKIP_ARRIVE, TRACE)
    else:
        index.zero_other_parity(hist2_ptr, epoch & 1, pid, R, NPROG)  # for the next launch, as the stages would
        index.zero_other_parity(hist3_ptr, epoch & 1, pid, R, NPROG)
        pass_stages(sync_ptr, trace_ptr, S_SEL2, S_EMIT, pid, N_STAGES, SKIP_ARRIVE, TRACE)

    ok = mla_attention(qcat_ptr, kv_cache_ptr, stride_kv_cache, topk_ptr, pm_ptr, pl_ptr, pacc_ptr, w_vc_ptr,
                       stride_w_vc_0, stride_w_vc_1, stride_w_vc_2, vpart_ptr, vq_ptr, vs_ptr, o_proj_ptr, o_proj_s_ptr,
                       res1_ptr, o_part_ptr, o_ptr, residual_out_ptr, sync_ptr + C_WUV_CNT, sync_ptr + C_OPROJ_CNT,
                       softmax_scale, sync_ptr, err_ptr, trace_ptr, task_count_ptr, epoch, ok, pid, launch_id, bound,
                       R, D, KVL, ROPE, VH, H, KTOP, NSPLIT, ATT_BLK, WUV_SH, BN_O, KS_O, STAGES, SWAP_AB, NPROG,
                       N_STAGES, TIMER, SKIP_ARRIVE, SKIP_MASK, TRACE, COUNT_TASKS, S_ATTN, S_W_UV, S_O_PROJ, T_ATTN,
                       T_W_UV, T_O_PROJ)
    ok = moe(o_ptr, res1_ptr, post_norm_ptr, xn2_ptr, xq2_ptr, xs2_ptr, gate_ptr, lg_part_ptr, bias_ptr, expert_ids_ptr,
             rw_ptr, w13_ptr, w13_s_ptr, uniq_ptr, up_part_ptr, aq_ptr, as_ptr, expert_weights_ptr, w2_ptr, w2_s_ptr,
             dn_part_ptr, out_ptr, sync_ptr + C_DN_CNT, eps, routed_scaling,
             sync_ptr, err_ptr, trace_ptr, task_count_ptr, epoch, ok, pid, launch_id, bound,
             R, D, E, E_PAD, TOPK, KP, I, MAXU, BE, KS_G, BU, KS_U, DCW, DCW_P, STAGES_DN, DN_PARTS, STAGES_UP, UP_MT,
             NORM_GP, ROUTE_RC, STAGES, SWAP_MOE, NPROG, N_STAGES, TIMER, SKIP_ARRIVE, SKIP_MASK, TRACE, COUNT_TASKS,
             S_NORM2, S_GATE, S_ROUTE, S_UP, S_ACT, S_DOWN, T_NORM2, T_GATE, T_ROUTE, T_DOWN)
    launch_end(sync_ptr, trace_ptr, pid, epoch, ok, NPROG, N_STAGES, TRACE)


KIND = TritonKind(table=indexer_kind.TABLE, kernel=indexer_layer_kernel, dims=layer_dims, constexprs=constexprs,
                  scalars=scalars, refusals=indexer_kind.refusals)
