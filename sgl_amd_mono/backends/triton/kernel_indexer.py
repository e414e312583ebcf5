"""The "indexer" kind in Triton: one persistent launch for one MoE layer that runs its own DSA indexer and selects its
own exact top-k (`glm53/kinds/indexer.py` is the table; its docstring states the exactness rule).

The kernel is the table as stage calls: the attention half's front stages with the index work as task groups
(`stages_attention.py`, `stages_index.py`), the indexer's own stages (score, the radix digits, emit:
`stages_select.py`), then the sparse MLA over the selected slots and the MoE (`kernel_halves.py`). Arguments come by
name from the table (`launch.py`), as the shared kind's.
"""

import triton
import triton.language as tl

from sgl_amd_mono.backends.triton.kernel_halves import index_attention, moe
from sgl_amd_mono.backends.triton.kernel_shared import constexprs as shared_constexprs
from sgl_amd_mono.backends.triton.kernel_shared import scalars as shared_scalars
from sgl_amd_mono.backends.triton.launch import TritonKind
from sgl_amd_mono.backends.triton.sync import launch_end, launch_start
from sgl_amd_mono.glm53.kinds import indexer as indexer_kind
from sgl_amd_mono.glm53.kinds.dims import LayerDims, layer_dims


def constexprs(d: LayerDims) -> dict:
    """The shared kind's constexprs and the indexer's sizes (IH index heads, ID their dim, PMAX pages a
    row's page table holds, NSL slices a row's key scan splits into, IBLK keys a scoring step covers, ISCAN
    keys a selection step covers, ISHORT the longest row one task selects (0: none), LS the longest row whose
    list one task writes, max(KTOP, ISHORT), ISWAP / IPIPE / IATOM the score loop's swapped dots, pipeline depth
    and digit-0 atomics (IATOM: the histogram's copies a row, 0: counted in registers; IHC: those copies, 1
    when counted in registers: the table's hist0_copies), IAHEAD the pipelined score loop's page ids a step ahead
    (tiles.index_ahead), ISATOM sel1 / sel2 counting a key at a time (tiles.index_sel_atomics) into IHC1 copies of
    digit 1's histogram (the table's hist1_copies), IW0 / IW1 the radix digits 0 and 1's bits (the table's
    radix_digits: 8 / 8 of four digits, 12 / 12 of three), ICOMPACT sel1 listing the keys at or above its prefix for
    sel2, sel3 and emit, in [256, ICOMPACT] chunks (tiles.index_compact, 0: none), IEK emit's keys a tile row
    (tiles.index_emit_k, 0: index_scan-key steps), IPACK the select's digits and emit's counts from fewer
    block-wide reductions (tiles.index_packed_counts), IPCH the score loop's page ids a chunk of that many steps at
    once (tiles.index_page_chunk, 0: none), IRELIST sel2 keeping sel1's lists of at least that many keys at or above
    its 16-bit prefix for sel3 and emit (tiles.index_relist, 0: none), IFLOOR sel1 listing and counting only the keys
    at or above each decode row's floor from its score tasks (tiles.index_floor, with sel1's lists), IPAIR sel1
    counting digits 1 and 2 as a pair and sel3 finding both, sel2 passed (tiles.index_pair), IKEEP the scores
    stored to leave L2 last (tiles.index_keep_scores), IROWS the select's row-scoped hand-offs
    (tiles.index_row_waits: 0 none, 1 from sel1, 2 from score), IQG heads an
    index-query task covers) and tiles (KS_I: wk's parts, KS_W: weights_proj's; BN_IQ / KS_IQ: wq_b's)."""
    t = d.tiles
    return {**shared_constexprs(d), "IH": d.IH, "ID": d.ID, "PMAX": d.PMAX, "NSL": d.NSL, "IBLK": d.IBLK,
            "ISCAN": t.index_scan, "ISHORT": t.index_short, "LS": max(d.KTOP, t.index_short),
            "ISWAP": t.index_swap, "IPIPE": t.index_pipe, "IATOM": t.index_atomics,
            "IHC": indexer_kind.hist0_copies(d),
            "IAHEAD": int(t.index_ahead), "ISATOM": int(t.index_sel_atomics), "IHC1": indexer_kind.hist1_copies(d),
            "IW0": indexer_kind.radix_digits(d)[0], "IW1": indexer_kind.radix_digits(d)[1], "ICOMPACT":
            int(t.index_compact), "IEK": t.index_emit_k, "IPACK": int(t.index_packed_counts),
            "IQG": indexer_kind.index_query_heads(d), "KS_I": t.ks_i, "KS_W": t.ks_w, "BN_IQ": t.bn_iq,
            "KS_IQ": t.ks_iq, "IPCH": t.index_page_chunk, "IRELIST": t.index_relist,
            "IFLOOR": t.index_floor > 0 and t.index_compact > 0, "IPAIR": t.index_pair > 0,
            "IKEEP": t.index_keep_scores > 0, "IROWS": max(t.index_row_waits, 0)}


def scalars(d: LayerDims) -> dict:
    return {**shared_scalars(d), "k_norm_eps": d.k_norm_eps}


@triton.jit(do_not_specialize=["launch_id", "rank"])  # one compiled kernel for every layer's launch_id and rank
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
    res1_ptr, xq1_ptr, xs1_ptr, qkv_part_ptr, ql_ptr, qlq_ptr, qls_ptr, qb_part_ptr, qcat_ptr, pm_ptr, pl_ptr, pacc_ptr,
    vpart_ptr, vq_ptr, vs_ptr, o_part_ptr, xn1_ptr, ik_part_ptr, iw_part_ptr, iq_part_ptr, iq_ptr, head_w_ptr,
    scores_ptr, hist0_ptr, hist1_ptr, hist2_ptr, hist3_ptr, kept1_ptr, kept2_ptr, kept3_ptr, cnt_ptr, cand_pos_ptr,
    cand_key_ptr, ncand_ptr, floor_ptr, hist_pair_ptr,
    xn2_ptr, xq2_ptr, xs2_ptr, lg_part_ptr, rw_ptr, uniq_ptr, up_part_ptr, aq_ptr, as_ptr, dn_part_ptr,
    # sync: [epoch | arrivals | the last-arrival counts], the error word, trace stamps, task counts; the TP group's
    # peer buffers (TP > 1)
    sync_ptr, err_ptr, trace_ptr, task_count_ptr, peers_ptr,
    # scalars
    launch_id, bound, eps, softmax_scale, routed_scaling, k_norm_eps, rank,
    # geometry
    R: tl.constexpr, D: tl.constexpr, QL: tl.constexpr, KVL: tl.constexpr, ROPE: tl.constexpr, NOPE: tl.constexpr,
    VH: tl.constexpr, H: tl.constexpr, E: tl.constexpr, E_PAD: tl.constexpr, TOPK: tl.constexpr, KP: tl.constexpr,
    I: tl.constexpr, KTOP: tl.constexpr, NSPLIT: tl.constexpr, MAXU: tl.constexpr, IH: tl.constexpr, ID: tl.constexpr,
    PMAX: tl.constexpr, NSL: tl.constexpr, IBLK: tl.constexpr, ISCAN: tl.constexpr, ISHORT: tl.constexpr,
    LS: tl.constexpr, ISWAP: tl.constexpr, IPIPE: tl.constexpr, IATOM: tl.constexpr, IHC: tl.constexpr,
    IAHEAD: tl.constexpr, ISATOM: tl.constexpr, IHC1: tl.constexpr, IW0: tl.constexpr, IW1: tl.constexpr,
    ICOMPACT: tl.constexpr, IPCH: tl.constexpr, IEK: tl.constexpr, IPACK: tl.constexpr, IRELIST: tl.constexpr,
    IFLOOR: tl.constexpr, IPAIR: tl.constexpr, IKEEP: tl.constexpr, IROWS: tl.constexpr,
    IQG: tl.constexpr, KS_I: tl.constexpr,
    KS_W: tl.constexpr,
    BN_IQ: tl.constexpr, KS_IQ: tl.constexpr,
    # tiles
    BN_A: tl.constexpr, KS_A: tl.constexpr, BN_B: tl.constexpr, KS_B: tl.constexpr, BN_O: tl.constexpr,
    KS_O: tl.constexpr, BE: tl.constexpr, KS_G: tl.constexpr, BU: tl.constexpr, KS_U: tl.constexpr,
    DCW: tl.constexpr, DCW_P: tl.constexpr, STAGES_DN: tl.constexpr, DN_PARTS: tl.constexpr,
    STAGES_UP: tl.constexpr, ATT_BLK: tl.constexpr, UP_MT: tl.constexpr, NORM_GP: tl.constexpr,
    WUV_SH: tl.constexpr, ROUTE_RC: tl.constexpr, STAGES: tl.constexpr, SWAP_AB: tl.constexpr,
    SWAP_MOE: tl.constexpr, PRELOAD: tl.constexpr, BX: tl.constexpr,
    # build options
    NPROG: tl.constexpr, TIMER: tl.constexpr, SKIP_ARRIVE: tl.constexpr, SKIP_MASK: tl.constexpr,
    TRACE: tl.constexpr, COUNT_TASKS: tl.constexpr,
    # the table: the last-arrival counts' first words in sync, stage ids and fixed task counts
    C_SCORE_ROWS: tl.constexpr, C_SEL1_ROWS: tl.constexpr, C_SEL2_ROWS: tl.constexpr, C_SEL3_ROWS: tl.constexpr,
        C_EMIT_ROWS: tl.constexpr, C_WUV_CNT: tl.constexpr, C_OPROJ_CNT: tl.constexpr, C_DN_CNT: tl.constexpr,
        N_STAGES: tl.constexpr,
    S_NORM1: tl.constexpr, S_QKV_A: tl.constexpr, S_LATENT: tl.constexpr, S_Q_B: tl.constexpr,
    S_ABSORB: tl.constexpr, S_SCORE: tl.constexpr, S_SEL1: tl.constexpr, S_SEL2: tl.constexpr, S_SEL3: tl.constexpr,
    S_EMIT: tl.constexpr, S_ATTN: tl.constexpr, S_W_UV: tl.constexpr, S_O_PROJ: tl.constexpr,
    S_NORM2: tl.constexpr, S_GATE: tl.constexpr, S_ROUTE: tl.constexpr, S_UP: tl.constexpr, S_ACT: tl.constexpr,
    S_DOWN: tl.constexpr,
    T_NORM1: tl.constexpr, T_QKV_A: tl.constexpr, T_LATENT: tl.constexpr, T_Q_B: tl.constexpr,
    T_ABSORB: tl.constexpr, T_ATTN: tl.constexpr, T_W_UV: tl.constexpr, T_O_PROJ: tl.constexpr,
    T_NORM2: tl.constexpr, T_GATE: tl.constexpr, T_ROUTE: tl.constexpr, T_DOWN: tl.constexpr,
    S_O_SUM: tl.constexpr, S_DOWN_SUM: tl.constexpr, T_O_SUM: tl.constexpr, T_DOWN_SUM: tl.constexpr,
    # TP and the exchange regions' first words and slot words in the peer buffer (0 at TP 1)
    TP: tl.constexpr, X_O_X: tl.constexpr, XW_O_X: tl.constexpr, X_OUT_X: tl.constexpr, XW_OUT_X: tl.constexpr,
):
    """grid = (NPROG,), every program resident; task t of a stage runs on program t % NPROG (a stage's task
    groups number their tasks on from the groups before them). Options as the shared kernel's."""
    pid, epoch, ok = launch_start(sync_ptr, trace_ptr, N_STAGES, TRACE)
    ok = index_attention(
        hidden_ptr, residual_ptr, cos_sin_ptr, out_loc_ptr, kv_cache_ptr, stride_kv_cache, index_k_cache_ptr,
        stride_index_k_cache, page_table_ptr, lengths_ptr, rows_per_req_ptr, input_norm_ptr, qkv_a_ptr, qkv_a_s_ptr,
        q_a_norm_ptr, kv_a_norm_ptr, q_b_ptr, q_b_s_ptr, w_kc_ptr, stride_w_kc_0, stride_w_kc_1, stride_w_kc_2,
        w_vc_ptr, stride_w_vc_0, stride_w_vc_1, stride_w_vc_2, o_proj_ptr, o_proj_s_ptr, wq_b_ptr, wq_b_s_ptr, wk_ptr,
        wk_s_ptr, weights_proj_ptr, k_norm_w_ptr, k_norm_b_ptr, o_ptr, residual_out_ptr, topk_ptr, res1_ptr, xq1_ptr,
        xs1_ptr, qkv_part_ptr, ql_ptr, qlq_ptr, qls_ptr, qb_part_ptr, qcat_ptr, pm_ptr, pl_ptr, pacc_ptr, vpart_ptr,
        vq_ptr, vs_ptr, o_part_ptr, xn1_ptr, ik_part_ptr, iw_part_ptr, iq_part_ptr, iq_ptr, head_w_ptr, scores_ptr,
        hist0_ptr, hist1_ptr, hist2_ptr, hist3_ptr, kept1_ptr, kept2_ptr, kept3_ptr, cnt_ptr, cand_pos_ptr,
        cand_key_ptr, ncand_ptr, floor_ptr,
        sync_ptr + C_WUV_CNT, sync_ptr + C_OPROJ_CNT, sync_ptr, err_ptr, trace_ptr, task_count_ptr, epoch, ok, pid,
        launch_id, bound, eps, softmax_scale, k_norm_eps, R, D, QL, KVL, ROPE, NOPE, VH, H, KTOP, NSPLIT, IH, ID, PMAX,
        NSL, IBLK, ISCAN, ISHORT, LS, ISWAP, IPIPE, IATOM, IHC, IAHEAD, ISATOM, IHC1, IW0, IW1, ICOMPACT, IQG, KS_I,
        KS_W, BN_IQ,
        KS_IQ, BN_A, KS_A, BN_B, KS_B, BN_O, KS_O, ATT_BLK, NORM_GP, WUV_SH, STAGES, SWAP_AB, NPROG, TIMER, SKIP_ARRIVE,
        SKIP_MASK, TRACE,
        COUNT_TASKS, N_STAGES, S_NORM1, S_QKV_A, S_LATENT, S_Q_B, S_ABSORB, S_SCORE, S_SEL1, S_SEL2, S_SEL3, S_EMIT,
        S_ATTN, S_W_UV, S_O_PROJ, T_NORM1, T_QKV_A, T_LATENT, T_Q_B, T_ABSORB, T_ATTN, T_W_UV, T_O_PROJ, False, None, 0,
        TP, peers_ptr, rank,
        S_O_SUM, T_O_SUM, X_O_X, XW_O_X, BX, IPCH=IPCH, IEK=IEK, IPACK=IPACK, IRELIST=IRELIST, IFLOOR=IFLOOR,
        hist_pair_ptr=hist_pair_ptr, IPAIR=IPAIR, IKEEP=IKEEP,
        IROWS=IROWS, score_rows_ptr=sync_ptr + C_SCORE_ROWS, sel1_rows_ptr=sync_ptr + C_SEL1_ROWS,
        sel2_rows_ptr=sync_ptr + C_SEL2_ROWS, sel3_rows_ptr=sync_ptr + C_SEL3_ROWS, emit_rows_ptr=sync_ptr + C_EMIT_ROWS)
    ok = moe(o_ptr, res1_ptr, post_norm_ptr, xn2_ptr, xq2_ptr, xs2_ptr, gate_ptr, lg_part_ptr, bias_ptr, expert_ids_ptr,
             rw_ptr, w13_ptr, w13_s_ptr, uniq_ptr, up_part_ptr, aq_ptr, as_ptr, expert_weights_ptr, w2_ptr, w2_s_ptr,
             dn_part_ptr, out_ptr, sync_ptr + C_DN_CNT, eps, routed_scaling,
             sync_ptr, err_ptr, trace_ptr, task_count_ptr, epoch, ok, pid, launch_id, bound,
             R, D, E, E_PAD, TOPK, KP, I, MAXU, BE, KS_G, BU, KS_U, DCW, DCW_P, STAGES_DN, DN_PARTS, STAGES_UP, UP_MT,
             NORM_GP, ROUTE_RC, STAGES, SWAP_MOE, NPROG, N_STAGES, TIMER, SKIP_ARRIVE, SKIP_MASK, TRACE, COUNT_TASKS,
             S_NORM2, S_GATE, S_ROUTE, S_UP, S_ACT, S_DOWN, T_NORM2, T_GATE, T_ROUTE, T_DOWN, TP, peers_ptr, rank,
             S_DOWN_SUM, T_DOWN_SUM, X_OUT_X, XW_OUT_X, BX)
    launch_end(sync_ptr, trace_ptr, pid, epoch, ok, NPROG, N_STAGES, TRACE)


KIND = TritonKind(table=indexer_kind.TABLE, kernel=indexer_layer_kernel, dims=layer_dims, constexprs=constexprs,
                  scalars=scalars, refusals=indexer_kind.refusals)
