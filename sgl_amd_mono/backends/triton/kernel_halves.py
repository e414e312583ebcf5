"""The halves GLM-5.3's layer kernels are made of: the sparse MLA and o_proj (`mla_attention`: attn, w_uv, o_proj), the
attention half with the layer's own indexer in front of it (`index_attention`: norm1 ... emit, then mla_attention),
the MoE (`moe`: norm2 ... down) and the dense MLP (`dense_mlp`: norm2, mlp_up, mlp_act, mlp_down), each a sequence
of stage calls (`stages_attention.py`, `stages_index.py`, `stages_select.py`, `stages_moe.py`, `stages_dense.py`)
with the generic hand-off after every stage but the launch's last. The stage ids and task counts come from the
calling kind's table (its S_* / T_* constexprs). TP > 1: o_proj and the MoE / MLP down push their partials and a
cross-rank sum stage follows each (`exchange.sum_stage`: o_sum, down_sum, mlp_down_sum), with no hand-off between
the push and the sum (the pushed words carry their epoch) and the push stage's hand-off moved after the sum; the
regions' words (X_* / XW_*) come from the table too."""

import triton
import triton.language as tl

from sgl_amd_mono.backends.triton import stages_attention as attn_half
from sgl_amd_mono.backends.triton import stages_emit
from sgl_amd_mono.backends.triton import stages_dense as dense_half
from sgl_amd_mono.backends.triton import stages_index as index
from sgl_amd_mono.backends.triton import stages_moe as moe_half
from sgl_amd_mono.backends.triton import stages_select as select
from sgl_amd_mono.backends.triton import stages_select_row as select_row
from sgl_amd_mono.backends.triton.exchange import peer_bound, sum_stage
from sgl_amd_mono.backends.triton.sync import count_task, hand_off, live_tasks, pass_rows, pass_stages


@triton.jit
def mla_attention(qcat_ptr, kv_cache_ptr, stride_kv_cache, topk_ptr, pm_ptr, pl_ptr, pacc_ptr, w_vc_ptr, stride_w_vc_0,
                  stride_w_vc_1, stride_w_vc_2, vpart_ptr, vq_ptr, vs_ptr, o_proj_ptr, o_proj_s_ptr, res1_ptr,
                  o_part_ptr, o_ptr, residual_out_ptr, wuv_cnt_ptr, oproj_cnt_ptr, softmax_scale,
                  sync_ptr, err_ptr, trace_ptr, task_count_ptr, epoch, ok, pid, launch_id, bound,
                  R: tl.constexpr, D: tl.constexpr, KVL: tl.constexpr, ROPE: tl.constexpr, VH: tl.constexpr,
                  H: tl.constexpr, KTOP: tl.constexpr, NSPLIT: tl.constexpr, ATT_BLK: tl.constexpr,
                  WUV_SH: tl.constexpr, BN_O: tl.constexpr, KS_O: tl.constexpr, STAGES: tl.constexpr,
                  SWAP_AB: tl.constexpr, NPROG: tl.constexpr, N_STAGES: tl.constexpr, TIMER: tl.constexpr,
                  SKIP_ARRIVE: tl.constexpr, SKIP_MASK: tl.constexpr, TRACE: tl.constexpr, COUNT_TASKS: tl.constexpr,
                  S_ATTN: tl.constexpr, S_W_UV: tl.constexpr, S_O_PROJ: tl.constexpr, T_ATTN: tl.constexpr,
                  T_W_UV: tl.constexpr, T_O_PROJ: tl.constexpr, TP: tl.constexpr = 1, peers_ptr=None, rank=0,
                  S_O_SUM: tl.constexpr = 0, T_O_SUM: tl.constexpr = 0, X_O_X: tl.constexpr = 0,
                  XW_O_X: tl.constexpr = 0, BX: tl.constexpr = 0, ROWS: tl.constexpr = False, rowwise=0,
                  emit_rows_ptr=None, EMIT_PARTS: tl.constexpr = 0, S_EMIT: tl.constexpr = 0):
    """attn (over each row's top-k slots at topk_ptr), w_uv, o_proj (TP > 1: then o_sum), each followed by its
    hand-off. ROWS with rowwise: attn's tasks wait for their row's emit tasks (EMIT_PARTS arrivals at the row's word
    at emit_rows_ptr, `stages_attention.attn`): the indexer kinds' row-scoped hand-offs. Returns ok."""
    HV: tl.constexpr = H * VH
    ok = attn_half.attn(qcat_ptr, kv_cache_ptr, stride_kv_cache, topk_ptr, pm_ptr, pl_ptr, pacc_ptr, softmax_scale,
                        pid, ok, task_count_ptr, S_ATTN, T_ATTN, H, KVL, ROPE, KTOP, NSPLIT, ATT_BLK, NPROG, SKIP_MASK,
                        COUNT_TASKS, ROWS, rowwise, emit_rows_ptr, EMIT_PARTS, S_EMIT, epoch, err_ptr, launch_id,
                        bound, TIMER)
    ok = hand_off(sync_ptr, err_ptr, trace_ptr, S_ATTN, epoch, ok, pid, launch_id, bound, NPROG, N_STAGES, TIMER,
                  SKIP_ARRIVE, TRACE)

    attn_half.w_uv(pm_ptr, pl_ptr, pacc_ptr, w_vc_ptr, stride_w_vc_0, stride_w_vc_1, stride_w_vc_2, vpart_ptr, vq_ptr,
                   vs_ptr, wuv_cnt_ptr, epoch, pid, ok, task_count_ptr, S_W_UV, T_W_UV, R, H, KVL, VH, NSPLIT, WUV_SH,
                   NPROG, SKIP_MASK, COUNT_TASKS)
    ok = hand_off(sync_ptr, err_ptr, trace_ptr, S_W_UV, epoch, ok, pid, launch_id, bound, NPROG, N_STAGES, TIMER,
                  SKIP_ARRIVE, TRACE)

    attn_half.o_proj(vq_ptr, vs_ptr, o_proj_ptr, o_proj_s_ptr, res1_ptr, o_part_ptr, o_ptr, residual_out_ptr,
                     oproj_cnt_ptr, epoch, pid, ok, task_count_ptr, S_O_PROJ, T_O_PROJ, R, D, HV, BN_O, KS_O, STAGES,
                     SWAP_AB, NPROG, SKIP_MASK, COUNT_TASKS, TP, peers_ptr, rank, X_O_X, XW_O_X)
    if TP == 1:
        ok = hand_off(sync_ptr, err_ptr, trace_ptr, S_O_PROJ, epoch, ok, pid, launch_id, bound, NPROG, N_STAGES,
                      TIMER, SKIP_ARRIVE, TRACE)
    else:
        ok = sum_stage(peers_ptr, rank, o_ptr, res1_ptr, residual_out_ptr, err_ptr, launch_id, epoch, pid, ok, bound,
                       task_count_ptr, X_O_X, XW_O_X, S_O_SUM, T_O_SUM, BX, TP, NPROG, TIMER, SKIP_MASK, COUNT_TASKS,
                       True)
        ok = hand_off(sync_ptr, err_ptr, trace_ptr, S_O_SUM, epoch, ok, pid, launch_id, peer_bound(bound), NPROG,
                      N_STAGES, TIMER, SKIP_ARRIVE, TRACE)
    return ok


@triton.jit
def moe(o_ptr, res1_ptr, post_norm_ptr, xn2_ptr, xq2_ptr, xs2_ptr, gate_ptr, lg_part_ptr, bias_ptr, expert_ids_ptr,
        rw_ptr, w13_ptr, w13_s_ptr, uniq_ptr, up_part_ptr, aq_ptr, as_ptr, expert_weights_ptr, w2_ptr, w2_s_ptr,
        dn_part_ptr, out_ptr, dn_cnt_ptr, eps, routed_scaling,
        sync_ptr, err_ptr, trace_ptr, task_count_ptr, epoch, ok, pid, launch_id, bound,
        R: tl.constexpr, D: tl.constexpr, E: tl.constexpr, E_PAD: tl.constexpr, TOPK: tl.constexpr, KP: tl.constexpr,
        I: tl.constexpr, MAXU: tl.constexpr, BE: tl.constexpr, KS_G: tl.constexpr, BU: tl.constexpr,
        KS_U: tl.constexpr, DCW: tl.constexpr, DCW_P: tl.constexpr, STAGES_DN: tl.constexpr, DN_PARTS: tl.constexpr,
        STAGES_UP: tl.constexpr, UP_MT: tl.constexpr, NORM_GP: tl.constexpr, ROUTE_RC: tl.constexpr,
        STAGES: tl.constexpr, SWAP_MOE: tl.constexpr, NPROG: tl.constexpr, N_STAGES: tl.constexpr,
        TIMER: tl.constexpr, SKIP_ARRIVE: tl.constexpr, SKIP_MASK: tl.constexpr, TRACE: tl.constexpr,
        COUNT_TASKS: tl.constexpr, S_NORM2: tl.constexpr, S_GATE: tl.constexpr, S_ROUTE: tl.constexpr,
        S_UP: tl.constexpr, S_ACT: tl.constexpr, S_DOWN: tl.constexpr, T_NORM2: tl.constexpr, T_GATE: tl.constexpr,
        T_ROUTE: tl.constexpr, T_DOWN: tl.constexpr, TP: tl.constexpr = 1, peers_ptr=None, rank=0,
        S_DOWN_SUM: tl.constexpr = 0, T_DOWN_SUM: tl.constexpr = 0, X_OUT_X: tl.constexpr = 0,
        XW_OUT_X: tl.constexpr = 0, BX: tl.constexpr = 0):
    """norm2, gate, route, up, act, down (TP > 1: then down_sum), each but the last followed by its hand-off (the
    last is the launch's last stage: `sync.launch_end` follows it). Returns ok."""
    moe_half.norm2(o_ptr, res1_ptr, post_norm_ptr, xn2_ptr, xq2_ptr, xs2_ptr, eps, pid, ok, task_count_ptr, S_NORM2,
                   T_NORM2, D, NORM_GP, NPROG, SKIP_MASK, COUNT_TASKS)
    ok = hand_off(sync_ptr, err_ptr, trace_ptr, S_NORM2, epoch, ok, pid, launch_id, bound, NPROG, N_STAGES, TIMER,
                  SKIP_ARRIVE, TRACE)

    moe_half.gate(xn2_ptr, gate_ptr, lg_part_ptr, pid, ok, task_count_ptr, S_GATE, T_GATE, R, D, E, BE, KS_G, STAGES,
                  NPROG, SKIP_MASK, COUNT_TASKS)
    ok = hand_off(sync_ptr, err_ptr, trace_ptr, S_GATE, epoch, ok, pid, launch_id, bound, NPROG, N_STAGES, TIMER,
                  SKIP_ARRIVE, TRACE)

    moe_half.route(lg_part_ptr, bias_ptr, expert_ids_ptr, rw_ptr, pid, ok, task_count_ptr, S_ROUTE, T_ROUTE, R, E, E_PAD,
                   TOPK, KS_G, ROUTE_RC, NPROG, SKIP_MASK, COUNT_TASKS)
    ok = hand_off(sync_ptr, err_ptr, trace_ptr, S_ROUTE, epoch, ok, pid, launch_id, bound, NPROG, N_STAGES, TIMER,
                  SKIP_ARRIVE, TRACE)

    my_uniq, n_u, rscale = moe_half.up(rw_ptr, xq2_ptr, xs2_ptr, w13_ptr, w13_s_ptr, uniq_ptr, up_part_ptr,
                                       routed_scaling, pid, ok, task_count_ptr, S_UP, R, D, E, E_PAD, I, MAXU, BU,
                                       KS_U, UP_MT, STAGES_UP, SWAP_MOE, NPROG, SKIP_MASK, COUNT_TASKS)
    ok = hand_off(sync_ptr, err_ptr, trace_ptr, S_UP, epoch, ok, pid, launch_id, bound, NPROG, N_STAGES, TIMER,
                  SKIP_ARRIVE, TRACE)

    moe_half.act(up_part_ptr, rw_ptr, expert_ids_ptr, aq_ptr, as_ptr, expert_weights_ptr, my_uniq, n_u, rscale, pid,
                 ok, task_count_ptr, S_ACT, R, E, TOPK, KP, I, KS_U, NPROG, SKIP_MASK, COUNT_TASKS)
    ok = hand_off(sync_ptr, err_ptr, trace_ptr, S_ACT, epoch, ok, pid, launch_id, bound, NPROG, N_STAGES, TIMER,
                  SKIP_ARRIVE, TRACE)

    moe_half.down(aq_ptr, as_ptr, w2_ptr, w2_s_ptr, dn_part_ptr, out_ptr, dn_cnt_ptr, my_uniq, n_u, epoch, pid, ok,
                  task_count_ptr, S_DOWN, T_DOWN, R, D, E, I, DCW, DCW_P, DN_PARTS, STAGES_DN, SWAP_MOE, NPROG,
                  SKIP_MASK, COUNT_TASKS, TP, peers_ptr, rank, X_OUT_X, XW_OUT_X)
    if TP > 1:
        ok = sum_stage(peers_ptr, rank, out_ptr, out_ptr, out_ptr, err_ptr, launch_id, epoch, pid, ok, bound,
                       task_count_ptr, X_OUT_X, XW_OUT_X, S_DOWN_SUM, T_DOWN_SUM, BX, TP, NPROG, TIMER, SKIP_MASK,
                       COUNT_TASKS, False)
    return ok


@triton.jit
def index_attention(
        hidden_ptr, residual_ptr, cos_sin_ptr, out_loc_ptr, kv_cache_ptr, stride_kv_cache, index_k_cache_ptr,
        stride_index_k_cache, page_table_ptr, lengths_ptr, rows_per_req_ptr, input_norm_ptr, qkv_a_ptr, qkv_a_s_ptr,
        q_a_norm_ptr, kv_a_norm_ptr, q_b_ptr, q_b_s_ptr, w_kc_ptr, stride_w_kc_0, stride_w_kc_1, stride_w_kc_2,
        w_vc_ptr, stride_w_vc_0, stride_w_vc_1, stride_w_vc_2, o_proj_ptr, o_proj_s_ptr, wq_b_ptr, wq_b_s_ptr, wk_ptr,
        wk_s_ptr, weights_proj_ptr, k_norm_w_ptr, k_norm_b_ptr, o_ptr, residual_out_ptr, topk_ptr, res1_ptr, xq1_ptr,
        xs1_ptr, qkv_part_ptr, ql_ptr, qlq_ptr, qls_ptr, qb_part_ptr, qcat_ptr, pm_ptr, pl_ptr, pacc_ptr, vpart_ptr,
        vq_ptr, vs_ptr, o_part_ptr, xn1_ptr, ik_part_ptr, iw_part_ptr, iq_part_ptr, iq_ptr, head_w_ptr, scores_ptr,
        hist0_ptr, hist1_ptr, hist2_ptr, hist3_ptr, kept1_ptr, kept2_ptr, kept3_ptr, cnt_ptr, cand_pos_ptr,
        cand_key_ptr, ncand_ptr, floor_ptr, wuv_cnt_ptr,
        oproj_cnt_ptr, sync_ptr, err_ptr, trace_ptr, task_count_ptr, epoch, ok, pid, launch_id, bound, eps,
        softmax_scale, k_norm_eps, R: tl.constexpr, D: tl.constexpr, QL: tl.constexpr, KVL: tl.constexpr,
        ROPE: tl.constexpr, NOPE: tl.constexpr, VH: tl.constexpr, H: tl.constexpr, KTOP: tl.constexpr,
        NSPLIT: tl.constexpr, IH: tl.constexpr, ID: tl.constexpr, PMAX: tl.constexpr, NSL: tl.constexpr,
        IBLK: tl.constexpr, ISCAN: tl.constexpr, ISHORT: tl.constexpr, LS: tl.constexpr, ISWAP: tl.constexpr,
        IPIPE: tl.constexpr, IATOM: tl.constexpr, IHC: tl.constexpr, IAHEAD: tl.constexpr, ISATOM: tl.constexpr,
        IHC1: tl.constexpr, IW0: tl.constexpr, IW1: tl.constexpr, ICOMPACT: tl.constexpr,
        IQG: tl.constexpr, KS_I: tl.constexpr, KS_W: tl.constexpr, BN_IQ: tl.constexpr, KS_IQ: tl.constexpr,
        BN_A: tl.constexpr,
        KS_A: tl.constexpr, BN_B: tl.constexpr, KS_B: tl.constexpr, BN_O: tl.constexpr, KS_O: tl.constexpr,
        ATT_BLK: tl.constexpr, NORM_GP: tl.constexpr, WUV_SH: tl.constexpr, STAGES: tl.constexpr, SWAP_AB: tl.constexpr,
        NPROG: tl.constexpr, TIMER: tl.constexpr, SKIP_ARRIVE: tl.constexpr, SKIP_MASK: tl.constexpr,
        TRACE: tl.constexpr, COUNT_TASKS: tl.constexpr, N_STAGES: tl.constexpr, S_NORM1: tl.constexpr,
        S_QKV_A: tl.constexpr, S_LATENT: tl.constexpr, S_Q_B: tl.constexpr, S_ABSORB: tl.constexpr,
        S_SCORE: tl.constexpr, S_SEL1: tl.constexpr, S_SEL2: tl.constexpr, S_SEL3: tl.constexpr, S_EMIT: tl.constexpr,
        S_ATTN: tl.constexpr, S_W_UV: tl.constexpr, S_O_PROJ: tl.constexpr, T_NORM1: tl.constexpr,
        T_QKV_A: tl.constexpr, T_LATENT: tl.constexpr, T_Q_B: tl.constexpr, T_ABSORB: tl.constexpr,
        T_ATTN: tl.constexpr, T_W_UV: tl.constexpr, T_O_PROJ: tl.constexpr, TOKENS: tl.constexpr = False,
        input_ids_ptr=None, V: tl.constexpr = 0, TP: tl.constexpr = 1, peers_ptr=None, rank=0,
        S_O_SUM: tl.constexpr = 0, T_O_SUM: tl.constexpr = 0, X_O_X: tl.constexpr = 0, XW_O_X: tl.constexpr = 0,
        BX: tl.constexpr = 0, emb_ptr=None, S_EMBED: tl.constexpr = 0, T_EMBED: tl.constexpr = 0,
        S_EMBED_SUM: tl.constexpr = 0, T_EMBED_SUM: tl.constexpr = 0,
        X_EMB_X: tl.constexpr = 0, XW_EMB_X: tl.constexpr = 0, IPCH: tl.constexpr = 0, IEK: tl.constexpr = 0,
        IPACK: tl.constexpr = False, IRELIST: tl.constexpr = 0, IFLOOR: tl.constexpr = False, hist_pair_ptr=None,
        IPAIR: tl.constexpr = False, IKEEP: tl.constexpr = False, IROWS: tl.constexpr = 0, score_rows_ptr=None,
        sel1_rows_ptr=None, sel2_rows_ptr=None, sel3_rows_ptr=None, emit_rows_ptr=None):
    """The attention half with the layer's own DSA indexer (`glm53/kinds/indexer.py` INDEX_ATTN_STAGES: norm1 ...
    emit, then attn, w_uv, o_proj over the launch's own top-k at topk_ptr), each stage followed by its hand-off:
    the indexer, dense and tokens kernels' front. TOKENS: norm1 reads the embedding rows (hidden_ptr: the
    embedding [V, D]) of input_ids (the tokens kind); at TP > 1 embed pushes each row from the rank whose vocab
    shard holds it (hidden_ptr: this rank's [V, D] rows), and embed_sum sums the ranks' into emb, which norm1 reads.
    IPCH: the score loop's page-id chunk (tiles.index_page_chunk); IEK: emit's keys a tile row (tiles.index_emit_k);
    IPACK: the select's digits and emit's counts from fewer block-wide reductions (tiles.index_packed_counts);
    IRELIST: sel2 keeps sel1's lists of at least IRELIST keys only at or above its 16-bit prefix (tiles.index_relist,
    0: none); IFLOOR: sel1 lists and counts only the keys at or above each decode row's floor from its score tasks
    (tiles.index_floor, with sel1's lists); IPAIR: sel1 also counts digits 1 and 2 as a pair into hist_pair, and
    sel3 finds both (stage sel2 passed: tiles.index_pair); IKEEP: the score stage's stores of the scores marked to
    leave L2 last (tiles.index_keep_scores); IROWS: the select's row-scoped hand-offs (tiles.index_row_waits, with four
    digits and no pairs; 2: from the score stage on) at the row words score_rows_ptr .. emit_rows_ptr
    (`glm53/kinds/indexer.row_words`). Returns ok."""
    QKV_N: tl.constexpr = QL + KVL + ROPE
    QK: tl.constexpr = NOPE + ROPE
    T_A: tl.constexpr = (QKV_N + BN_A - 1) // BN_A * KS_A  # qkv_a's tasks, before wk's and weights_proj's
    T_B: tl.constexpr = (H * QK + BN_B - 1) // BN_B * KS_B  # q_b's tasks, before wq_b's
    T_IQ: tl.constexpr = (IH * ID + BN_IQ - 1) // BN_IQ * KS_IQ  # wq_b's tasks, before the index keys'
    T_AB: tl.constexpr = H * (KVL // 128)  # absorb's tasks, before the index queries

    if TOKENS and TP > 1:
        attn_half.embed(input_ids_ptr, hidden_ptr, peers_ptr, rank, err_ptr, launch_id, epoch, pid, ok, task_count_ptr,
                        S_EMBED, T_EMBED, D, V, BX, TP, X_EMB_X, XW_EMB_X, NPROG, SKIP_MASK, COUNT_TASKS)
        ok = sum_stage(peers_ptr, rank, emb_ptr, emb_ptr, emb_ptr, err_ptr, launch_id, epoch, pid, ok, bound,
                       task_count_ptr, X_EMB_X, XW_EMB_X, S_EMBED_SUM, T_EMBED_SUM, BX, TP, NPROG, TIMER, SKIP_MASK,
                       COUNT_TASKS, False)
        ok = hand_off(sync_ptr, err_ptr, trace_ptr, S_EMBED_SUM, epoch, ok, pid, launch_id, peer_bound(bound),
                      NPROG, N_STAGES, TIMER, SKIP_ARRIVE, TRACE)
    attn_half.norm1(hidden_ptr, residual_ptr, input_norm_ptr, res1_ptr, xq1_ptr, xs1_ptr, eps, pid, ok, task_count_ptr,
                    S_NORM1, T_NORM1, D, NORM_GP, NPROG, SKIP_MASK, COUNT_TASKS, xn1_ptr, True, TOKENS, input_ids_ptr,
                    err_ptr, launch_id, V, TP, emb_ptr)
    ok = hand_off(sync_ptr, err_ptr, trace_ptr, S_NORM1, epoch, ok, pid, launch_id, bound,
                  NPROG, N_STAGES, TIMER, SKIP_ARRIVE, TRACE)

    attn_half.gemv_stage(xq1_ptr, xs1_ptr, qkv_a_ptr, qkv_a_s_ptr, qkv_part_ptr, live_tasks(T_A, ok, S_QKV_A, SKIP_MASK),
                         pid, QKV_N, 0.0, 0.0, task_count_ptr, R, D, KS_A, BN_A, STAGES, NPROG, False, SWAP_AB, S_QKV_A,
                         COUNT_TASKS)
    attn_half.gemv_stage(xq1_ptr, xs1_ptr, wk_ptr, wk_s_ptr, ik_part_ptr, live_tasks(KS_I, ok, S_QKV_A, SKIP_MASK),
                         pid, ID, 0.0, 0.0, task_count_ptr, R, D, KS_I, ID, STAGES, NPROG, False, SWAP_AB, S_QKV_A,
                         COUNT_TASKS, T_A)
    ok = hand_off(sync_ptr, err_ptr, trace_ptr, S_QKV_A, epoch, ok, pid, launch_id, bound,
                  NPROG, N_STAGES, TIMER, SKIP_ARRIVE, TRACE)

    attn_half.latent(qkv_part_ptr, cos_sin_ptr, out_loc_ptr, q_a_norm_ptr, kv_a_norm_ptr, ql_ptr, qlq_ptr, qls_ptr,
                     kv_cache_ptr, stride_kv_cache, eps, pid, ok, task_count_ptr, S_LATENT, 2 * R, R, QL, KVL, ROPE,
                     KS_A, NPROG, SKIP_MASK, COUNT_TASKS)
    # weights_proj (on xn1, needed first by the index queries) beside the latents' per-row tasks
    index.bf16_gemv_stage(xn1_ptr, weights_proj_ptr, iw_part_ptr, live_tasks(KS_W, ok, S_LATENT, SKIP_MASK), pid,
                          task_count_ptr, R, IH, D, KS_W, NPROG, S_LATENT, COUNT_TASKS, 2 * R)
    # a program whose only work in q_b's stage is index keys (the grid holds q_b's GEMV tasks and the keys apart) reads
    # nothing latent writes (the keys read wk's parts, from qkv_a): it arrives at latent and goes on, so its keys
    # overlap latent's stage too (`sync.hand_off`'s needs; q_b's hand-off covers latent for it)
    keys_apart: tl.constexpr = T_B + T_IQ + R <= NPROG
    ok = hand_off(sync_ptr, err_ptr, trace_ptr, S_LATENT, epoch, ok, pid, launch_id, bound,
                  NPROG, N_STAGES, TIMER, SKIP_ARRIVE, TRACE,
                  needs=(not keys_apart) | (pid < T_B + T_IQ) | (pid >= T_B + T_IQ + R))

    # the index keys, a task a row (numbered after wq_b's tasks): they need only wk's parts, so they run beside the
    # GEMVs, their programs past latent's wait (above), their loop first in the stage's code, so that a key's program
    # starts it at once instead of after passing the GEMV groups' code. H200: with the loop after the GEMVs the key's
    # program arrived last at q_b, 12.5 us after latent's start against the GEMVs' 9.0 (p90;
    # results/indexer14_h200_trace_8192.log), while the key itself, stamped, takes about 5 us once started
    # (results/indexer14_h200_key_stamps.log); with the loop first a GEMV program arrives last
    # (results/indexer14_h200_key_first.log, a trace build of each order).
    # Before: in latent's stage the key lengthened it; in absorb's (commit 62100a8) it took as long
    # (results/indexer12_h200_ab_keys_absorb.log); its code run dry on its program a stage ahead (commit 342fd56,
    # results/indexer12_h200_ab_warm_rows.log) and its inputs loaded a hand-off early (commit a835538,
    # results/indexer14_h200_time_specs_preload.log) gained nothing. Alone it takes 3.7 us, 4.5 with L2 flushed
    # (results/indexer12_h200_probe_index_rows.log), 6.2 / 6.5 with 96 / 128 other programs streaming
    # (results/indexer13_h200_probe_index_rows_busy.log).
    for r in tl.range((pid - (T_B + T_IQ) % NPROG + NPROG) % NPROG, live_tasks(R, ok, S_Q_B, SKIP_MASK), NPROG,
                      num_stages=1):
        count_task(task_count_ptr, S_Q_B, COUNT_TASKS)
        index.index_keys(ik_part_ptr, cos_sin_ptr, out_loc_ptr, k_norm_w_ptr, k_norm_b_ptr, index_k_cache_ptr,
                         stride_index_k_cache, k_norm_eps, r, R, ID, ROPE, KS_I)
    attn_half.gemv_stage(qlq_ptr, qls_ptr, q_b_ptr, q_b_s_ptr, qb_part_ptr, live_tasks(T_B, ok, S_Q_B, SKIP_MASK),
                         pid, H * QK, 0.0, 0.0, task_count_ptr, R, QL, KS_B, BN_B, STAGES, NPROG, False, SWAP_AB, S_Q_B,
                         COUNT_TASKS)
    attn_half.gemv_stage(qlq_ptr, qls_ptr, wq_b_ptr, wq_b_s_ptr, iq_part_ptr, live_tasks(T_IQ, ok, S_Q_B, SKIP_MASK),
                         pid, IH * ID, 0.0, 0.0, task_count_ptr, R, QL, KS_IQ, BN_IQ, STAGES, NPROG, False, SWAP_AB,
                         S_Q_B, COUNT_TASKS, T_B)
    ok = hand_off(sync_ptr, err_ptr, trace_ptr, S_Q_B, epoch, ok, pid, launch_id, bound,
                  NPROG, N_STAGES, TIMER, SKIP_ARRIVE, TRACE)

    for u in tl.range((pid - T_AB % NPROG + NPROG) % NPROG, live_tasks(R * (IH // IQG), ok, S_ABSORB, SKIP_MASK),
                      NPROG, num_stages=1):  # the index queries (row, head group): numbered after absorb's tasks,
        # run before them (as the keys in q_b's stage)
        count_task(task_count_ptr, S_ABSORB, COUNT_TASKS)
        index.index_query(iq_part_ptr, iw_part_ptr, cos_sin_ptr, iq_ptr, head_w_ptr, u // (IH // IQG),
                          u % (IH // IQG), R, IH, ID, ROPE, IQG, KS_W, KS_IQ)
    attn_half.absorb(qb_part_ptr, cos_sin_ptr, w_kc_ptr, stride_w_kc_0, stride_w_kc_1, stride_w_kc_2, qcat_ptr, pid, ok,
                     task_count_ptr, S_ABSORB, T_AB, R, H, KVL, NOPE, ROPE, KS_B, NPROG, SKIP_MASK, COUNT_TASKS)
    # every row's length (clamped to the page table; a longer one reported) and the rows a request, read once for
    # the indexer's stages: loaded here, their round trip inside absorb's hand-off
    lens = index.row_lengths(lengths_ptr, err_ptr, launch_id, pid, pid == 0, R, PMAX * 64, S_SCORE)
    rpr = tl.maximum(tl.load(rows_per_req_ptr), 1)
    ok = hand_off(sync_ptr, err_ptr, trace_ptr, S_ABSORB, epoch, ok, pid, launch_id, bound,
                  NPROG, N_STAGES, TIMER, SKIP_ARRIVE, TRACE)

    # the select's row-scoped hand-offs (IROWS): in a launch whose sliced select runs, each task of sel2, sel3, emit
    # and attn waits for its own row's tasks of the stage before at that row's word (`sync.wait_row`; a word takes the
    # row's NSL (row, slice) tasks of its stage and, sel1's and sel3's, the row task: `row_words`), and the stages'
    # global hand-offs from sel1 to emit are passed (`sync.hand_off`'s needs: attn's covers them). Every row word takes
    # its arrivals every launch, the select run or passed.
    ROWS: tl.constexpr = IROWS > 0 and IW0 + IW1 == 16 and not IPAIR
    # IROWS 2: also each sel1 task waits for its request's score tasks (a word a unit row, `stages_index.score`), the
    # score stage's global hand-off passed (absorb's still covers attn's queries); only with no row of one task's
    # select over its scores (ISHORT <= KTOP: sel1's row tasks read no score)
    ROWS2: tl.constexpr = ROWS and IROWS >= 2 and ISHORT <= KTOP
    SCORE_PARTS: tl.constexpr = NSL if ROWS2 else 0
    ROWS_ON: tl.constexpr = 1 if ROWS else 0
    SEL1_PARTS: tl.constexpr = NSL + 1 if ROWS else 0  # sel1's (row, slice) tasks and its row task (`listed_rows`)
    SEL2_PARTS: tl.constexpr = NSL if ROWS else 0
    SEL3_PARTS: tl.constexpr = NSL + 1 if ROWS else 0  # and the -1 fill
    index.score(iq_ptr, head_w_ptr, index_k_cache_ptr, stride_index_k_cache, page_table_ptr, lens, rpr, scores_ptr,
                hist0_ptr, floor_ptr, epoch, pid, ok, task_count_ptr, S_SCORE, R, IH, ID, KTOP, PMAX, NSL, IBLK, LS,
                ISWAP, IPIPE, IATOM, NPROG, SKIP_MASK, COUNT_TASKS, IHC, IAHEAD, IW0, IPCH, IFLOOR, IKEEP, ROWS2,
                score_rows_ptr, SKIP_ARRIVE)
    ok = hand_off(sync_ptr, err_ptr, trace_ptr, S_SCORE, epoch, ok, pid, launch_id, bound,
                  NPROG, N_STAGES, TIMER, SKIP_ARRIVE, TRACE, needs=not ROWS2)
    rowwise = select.any_sliced_row(lens, LS).to(tl.int32) * ROWS_ON
    # the radix digits (`glm53/kinds/indexer.radix_digits`): IW0 and IW1 bits, then 8 and 8 (IW0 + IW1 == 16) or 8
    # index_compact (ICOMPACT: the listing's keys a tile row): sel1 lists each slice's keys at or above digit 0,
    # and the later stages scan the lists
    if IPAIR:  # the pairs' other parity, for the next launch
        select.zero_pairs(hist_pair_ptr, epoch & 1, pid, R, NPROG)
    ok = select.select_digit(scores_ptr, lens, hist0_ptr, hist1_ptr, kept1_ptr, kept1_ptr, cnt_ptr, topk_ptr, epoch,
                             pid, ok, task_count_ptr, S_SEL1, IW0, IW1, IW0, R, KTOP, PMAX, NSL, IBLK, ISCAN, LS, NPROG,
                             SKIP_MASK, COUNT_TASKS, IHC, IHC1, ISATOM, cand_pos_ptr, cand_key_ptr, ncand_ptr,
                             1 if ICOMPACT > 0 else 0, ICOMPACT, IPACK, floor_ptr=floor_ptr, FLOOR=IFLOOR,
                             pair_ptr=hist_pair_ptr, PAIR=1 if IPAIR else 0, ROWS=ROWS, rows_ptr=sel1_rows_ptr,
                             wait_rows_ptr=score_rows_ptr, WAIT_PARTS=SCORE_PARTS, S_WAIT=S_SCORE, err_ptr=err_ptr,
                             launch_id=launch_id, bound=bound, TIMER=TIMER, SKIP_ARRIVE=SKIP_ARRIVE, WAIT_REQ=True,
                             rpr=rpr)
    select_row.listed_rows(scores_ptr, lens, page_table_ptr, topk_ptr, pid, ok, task_count_ptr, S_SEL1, R, KTOP, PMAX,
                           ISHORT, LS, NPROG, SKIP_MASK, COUNT_TASKS, ROWS, sel1_rows_ptr, SKIP_ARRIVE)
    ok = hand_off(sync_ptr, err_ptr, trace_ptr, S_SEL1, epoch, ok, pid, launch_id, bound,
                  NPROG, N_STAGES, TIMER, SKIP_ARRIVE, TRACE, needs=rowwise == 0)
    # the sliced select's last three stages, only when a row takes it: every program holds the same lengths, so
    # all take the same branch; otherwise each arrives at them without waiting (its counters stay in step)
    if select.any_sliced_row(lens, LS):
        if IPAIR:  # four digits, the second and third both found in sel3 (sel2 passed), then the last
            pass_stages(sync_ptr, trace_ptr, S_SEL2, S_SEL2, pid, N_STAGES, SKIP_ARRIVE, TRACE)
            select.select_digit(scores_ptr, lens, hist1_ptr, hist3_ptr, kept1_ptr, kept3_ptr, cnt_ptr, topk_ptr, epoch,
                                pid, ok, task_count_ptr, S_SEL3, 24, 8, 8, R, KTOP, PMAX, NSL, IBLK, ISCAN, LS, NPROG,
                                SKIP_MASK, COUNT_TASKS, IHC1, 1, False, cand_pos_ptr, cand_key_ptr, ncand_ptr,
                                2 if ICOMPACT > 0 else 0, PACKED=IPACK, pair_ptr=hist_pair_ptr, PAIR=2)
        elif IW0 + IW1 == 16:  # four digits: the third in sel2, then the last
            ok = select.select_digit(scores_ptr, lens, hist1_ptr, hist2_ptr, kept1_ptr, kept2_ptr, cnt_ptr, topk_ptr,
                                     epoch, pid, ok, task_count_ptr, S_SEL2, 16, 8, IW1, R, KTOP, PMAX, NSL, IBLK, ISCAN,
                                     LS, NPROG, SKIP_MASK, COUNT_TASKS, IHC1, 1, ISATOM, cand_pos_ptr, cand_key_ptr,
                                     ncand_ptr, (3 if IRELIST else 2) if ICOMPACT > 0 else 0, ICOMPACT, PACKED=IPACK,
                                     RL=max(IRELIST, 1), ROWS=ROWS, rows_ptr=sel2_rows_ptr, wait_rows_ptr=sel1_rows_ptr,
                                     WAIT_PARTS=SEL1_PARTS, S_WAIT=S_SEL1, err_ptr=err_ptr, launch_id=launch_id,
                                     bound=bound, TIMER=TIMER, SKIP_ARRIVE=SKIP_ARRIVE)
            ok = hand_off(sync_ptr, err_ptr, trace_ptr, S_SEL2, epoch, ok, pid, launch_id, bound,
                          NPROG, N_STAGES, TIMER, SKIP_ARRIVE, TRACE, needs=rowwise == 0)
            ok = select.select_digit(scores_ptr, lens, hist2_ptr, hist3_ptr, kept2_ptr, kept3_ptr, cnt_ptr, topk_ptr,
                                     epoch, pid, ok, task_count_ptr, S_SEL3, 24, 8, 8, R, KTOP, PMAX, NSL, IBLK, ISCAN,
                                     LS, NPROG, SKIP_MASK, COUNT_TASKS, 1, 1, False, cand_pos_ptr, cand_key_ptr,
                                     ncand_ptr, 2 if ICOMPACT > 0 else 0, PACKED=IPACK, ROWS=ROWS,
                                     rows_ptr=sel3_rows_ptr, wait_rows_ptr=sel2_rows_ptr, WAIT_PARTS=SEL2_PARTS,
                                     S_WAIT=S_SEL2, err_ptr=err_ptr, launch_id=launch_id, bound=bound, TIMER=TIMER,
                                     SKIP_ARRIVE=SKIP_ARRIVE)
        else:  # three: sel2 passed (no scan, no wait), the last digit under digit 1's 24-bit prefix
            pass_stages(sync_ptr, trace_ptr, S_SEL2, S_SEL2, pid, N_STAGES, SKIP_ARRIVE, TRACE)
            select.select_digit(scores_ptr, lens, hist1_ptr, hist3_ptr, kept1_ptr, kept3_ptr, cnt_ptr, topk_ptr, epoch,
                                pid, ok, task_count_ptr, S_SEL3, IW0 + IW1, 8, IW1, R, KTOP, PMAX, NSL, IBLK, ISCAN, LS,
                                NPROG, SKIP_MASK, COUNT_TASKS, IHC1, PACKED=IPACK)
        ok = hand_off(sync_ptr, err_ptr, trace_ptr, S_SEL3, epoch, ok, pid, launch_id, bound,
                      NPROG, N_STAGES, TIMER, SKIP_ARRIVE, TRACE, needs=rowwise == 0)
        ok = stages_emit.emit(scores_ptr, lens, page_table_ptr, hist3_ptr, kept3_ptr, cnt_ptr, topk_ptr, err_ptr,
                              launch_id, epoch, pid, ok, task_count_ptr, S_EMIT, R, KTOP, PMAX, NSL, IBLK, ISCAN, LS,
                              NPROG, SKIP_MASK, COUNT_TASKS, cand_pos_ptr, cand_key_ptr, ncand_ptr, ICOMPACT > 0, IEK,
                              IPACK, ROWS, emit_rows_ptr, sel3_rows_ptr, SEL3_PARTS, S_SEL3, bound, TIMER,
                              SKIP_ARRIVE)
        ok = hand_off(sync_ptr, err_ptr, trace_ptr, S_EMIT, epoch, ok, pid, launch_id, bound,
                      NPROG, N_STAGES, TIMER, SKIP_ARRIVE, TRACE, needs=rowwise == 0)
    else:
        index.zero_other_parity(hist2_ptr, epoch & 1, pid, R, NPROG)  # for the next launch, as the stages would
        index.zero_other_parity(hist3_ptr, epoch & 1, pid, R, NPROG)
        pass_stages(sync_ptr, trace_ptr, S_SEL2, S_EMIT, pid, N_STAGES, SKIP_ARRIVE, TRACE)
        if ROWS:  # the passed stages' row words take their arrivals too
            pass_rows(sel2_rows_ptr, pid, R, SEL2_PARTS, S_SEL2, NPROG, SKIP_ARRIVE)
            pass_rows(sel3_rows_ptr, pid, R, SEL3_PARTS, S_SEL3, NPROG, SKIP_ARRIVE)
            pass_rows(emit_rows_ptr, pid, R, NSL, S_EMIT, NPROG, SKIP_ARRIVE)

    ok = mla_attention(qcat_ptr, kv_cache_ptr, stride_kv_cache, topk_ptr, pm_ptr, pl_ptr, pacc_ptr, w_vc_ptr,
                       stride_w_vc_0, stride_w_vc_1, stride_w_vc_2, vpart_ptr, vq_ptr, vs_ptr, o_proj_ptr, o_proj_s_ptr,
                       res1_ptr, o_part_ptr, o_ptr, residual_out_ptr, wuv_cnt_ptr, oproj_cnt_ptr,
                       softmax_scale, sync_ptr, err_ptr, trace_ptr, task_count_ptr, epoch, ok, pid, launch_id, bound,
                       R, D, KVL, ROPE, VH, H, KTOP, NSPLIT, ATT_BLK, WUV_SH, BN_O, KS_O, STAGES, SWAP_AB, NPROG,
                       N_STAGES, TIMER, SKIP_ARRIVE, SKIP_MASK, TRACE, COUNT_TASKS, S_ATTN, S_W_UV, S_O_PROJ, T_ATTN,
                       T_W_UV, T_O_PROJ, TP, peers_ptr, rank, S_O_SUM, T_O_SUM, X_O_X, XW_O_X, BX, ROWS, rowwise,
                       emit_rows_ptr, NSL, S_EMIT)
    return ok


@triton.jit
def dense_mlp(o_ptr, res1_ptr, post_norm_ptr, xq2_ptr, xs2_ptr, gate_up_ptr, gate_up_s_ptr, mu_part_ptr, mq_ptr,
              ms_ptr, down_ptr, down_s_ptr, md_part_ptr, out_ptr, md_cnt_ptr, eps,
              sync_ptr, err_ptr, trace_ptr, task_count_ptr, epoch, ok, pid, launch_id, bound,
              R: tl.constexpr, D: tl.constexpr, DI: tl.constexpr, BN_MU: tl.constexpr, KS_MU: tl.constexpr,
              BN_MD: tl.constexpr, KS_MD: tl.constexpr, NORM_GP: tl.constexpr, STAGES: tl.constexpr,
              SWAP: tl.constexpr, NPROG: tl.constexpr, N_STAGES: tl.constexpr, TIMER: tl.constexpr,
              SKIP_ARRIVE: tl.constexpr, SKIP_MASK: tl.constexpr, TRACE: tl.constexpr, COUNT_TASKS: tl.constexpr,
              S_NORM2: tl.constexpr, S_MLP_UP: tl.constexpr, S_MLP_ACT: tl.constexpr, S_MLP_DOWN: tl.constexpr,
              T_NORM2: tl.constexpr, T_MLP_UP: tl.constexpr, T_MLP_ACT: tl.constexpr, T_MLP_DOWN: tl.constexpr,
              TP: tl.constexpr = 1, peers_ptr=None, rank=0, S_MLP_DOWN_SUM: tl.constexpr = 0,
              T_MLP_DOWN_SUM: tl.constexpr = 0, X_OUT_X: tl.constexpr = 0, XW_OUT_X: tl.constexpr = 0,
              BX: tl.constexpr = 0):
    """norm2, mlp_up, mlp_act, mlp_down (TP > 1: then mlp_down_sum), each but the last followed by its hand-off
    (the last is the launch's last stage). SWAP: the GEMVs' products as weight tile @ activations^T (the MoE's
    swap_moe). Returns ok."""
    moe_half.norm2(o_ptr, res1_ptr, post_norm_ptr, xq2_ptr, xq2_ptr, xs2_ptr, eps, pid, ok, task_count_ptr, S_NORM2,
                   T_NORM2, D, NORM_GP, NPROG, SKIP_MASK, COUNT_TASKS, False)
    ok = hand_off(sync_ptr, err_ptr, trace_ptr, S_NORM2, epoch, ok, pid, launch_id, bound, NPROG, N_STAGES, TIMER,
                  SKIP_ARRIVE, TRACE)
    dense_half.mlp_up(xq2_ptr, xs2_ptr, gate_up_ptr, gate_up_s_ptr, mu_part_ptr, pid, ok, task_count_ptr, S_MLP_UP,
                      T_MLP_UP, R, D, DI, BN_MU, KS_MU, STAGES, SWAP, NPROG, SKIP_MASK, COUNT_TASKS)
    ok = hand_off(sync_ptr, err_ptr, trace_ptr, S_MLP_UP, epoch, ok, pid, launch_id, bound, NPROG, N_STAGES, TIMER,
                  SKIP_ARRIVE, TRACE)
    dense_half.mlp_act(mu_part_ptr, mq_ptr, ms_ptr, pid, ok, task_count_ptr, S_MLP_ACT, T_MLP_ACT, R, DI, KS_MU,
                       NPROG, SKIP_MASK, COUNT_TASKS)
    ok = hand_off(sync_ptr, err_ptr, trace_ptr, S_MLP_ACT, epoch, ok, pid, launch_id, bound, NPROG, N_STAGES, TIMER,
                  SKIP_ARRIVE, TRACE)
    dense_half.mlp_down(mq_ptr, ms_ptr, down_ptr, down_s_ptr, md_part_ptr, out_ptr, md_cnt_ptr, epoch, pid, ok,
                        task_count_ptr, S_MLP_DOWN, T_MLP_DOWN, R, D, DI, BN_MD, KS_MD, STAGES, SWAP, NPROG, SKIP_MASK,
                        COUNT_TASKS, TP, peers_ptr, rank, X_OUT_X, XW_OUT_X)
    if TP > 1:
        ok = sum_stage(peers_ptr, rank, out_ptr, out_ptr, out_ptr, err_ptr, launch_id, epoch, pid, ok, bound,
                       task_count_ptr, X_OUT_X, XW_OUT_X, S_MLP_DOWN_SUM, T_MLP_DOWN_SUM, BX, TP, NPROG, TIMER,
                       SKIP_MASK, COUNT_TASKS, False)
    return ok
