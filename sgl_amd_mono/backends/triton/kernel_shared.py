"""The "shared" kind in Triton: one persistent launch for one MoE layer that reuses the previous top-k.

The kernel is the kind's table (`glm53/kinds/shared.py`) as stage calls: the attention half's stages
(`stages_attention.py`), then the MoE half's (`stages_moe.py`), each followed by the generic hand-off
(`sync.hand_off`). Its arguments come by name from the table (`launch.py`): a buffer `x` is `x_ptr`, a
strided weight's strides `stride_x_<dim>`, a last-arrival count's first word in sync `C_<COUNT>`, a stage's id `S_<STAGE>`
and its task count `T_<STAGE>` (data-dependent stages compute theirs); `constexprs` below maps the
resolved dims and tiles to the rest.
"""

import triton
import triton.language as tl

from sgl_amd_mono.backends.triton import stages_attention as attn_half
from sgl_amd_mono.backends.triton.kernel_halves import mla_attention, moe
from sgl_amd_mono.backends.triton.launch import TritonKind
from sgl_amd_mono.backends.triton.sync import hand_off, launch_end, launch_start, live_tasks
from sgl_amd_mono.glm53.kinds import shared as shared_kind
from sgl_amd_mono.glm53.kinds.dims import LayerDims, cdiv, layer_dims, pow2


def constexprs(d: LayerDims) -> dict:
    """The kernel's geometry and tile constexprs for resolved dims (BN_*: GEMV columns a task; KS_*:
    split-K parts; BE: gate experts a task; DCW: down's output columns a task, DCW_P its power-of-two tile;
    STAGES*: pipeline depths; UP_MT: a power of two >= MoE up's tasks a program; NORM_GP: a hidden row's
    128-groups padded to a power of two; BX: a cross-rank sum task's words)."""
    t = d.tiles
    return dict(
        d.geometry(),
        BN_A=t.bn_a, KS_A=t.ks_a, BN_B=t.bn_b, KS_B=t.ks_b, BN_O=t.bn_o, KS_O=t.ks_o, BE=t.be, KS_G=t.ks_g,
        BU=t.bu, KS_U=t.ks_u, DCW=t.dcw, DCW_P=pow2(t.dcw), STAGES_DN=t.stages_dn, DN_PARTS=t.dn_parts,
        STAGES_UP=t.stages_up, ATT_BLK=t.att_blk,
        UP_MT=pow2(cdiv(d.MAXU * (d.I // t.bu) * t.ks_u, d.n_programs)), NORM_GP=pow2(d.D // 128),
        WUV_SH=t.wuv_sh, ROUTE_RC=t.route_rc, STAGES=t.stages, SWAP_AB=t.swap_ab, SWAP_MOE=t.swap_ab or t.swap_moe,
        PRELOAD=t.preload, BX=t.bx,
    )


def scalars(d: LayerDims) -> dict:
    """The kernel's float arguments."""
    return {"eps": d.eps, "softmax_scale": d.softmax_scale, "routed_scaling": d.routed_scaling}


@triton.jit(do_not_specialize=["launch_id", "rank"])  # one compiled kernel for every layer's launch_id and rank
def shared_layer_kernel(
    # step inputs
    hidden_ptr, residual_ptr, cos_sin_ptr, out_loc_ptr, kv_cache_ptr, stride_kv_cache, topk_slots_ptr,
    # attention weights
    input_norm_ptr, qkv_a_ptr, qkv_a_s_ptr, q_a_norm_ptr, kv_a_norm_ptr, q_b_ptr, q_b_s_ptr,
    w_kc_ptr, stride_w_kc_0, stride_w_kc_1, stride_w_kc_2, w_vc_ptr, stride_w_vc_0, stride_w_vc_1, stride_w_vc_2,
    o_proj_ptr, o_proj_s_ptr, post_norm_ptr,
    # MoE weights
    gate_ptr, bias_ptr, w13_ptr, w13_s_ptr, w2_ptr, w2_s_ptr,
    # outputs
    o_ptr, residual_out_ptr, out_ptr, expert_ids_ptr, expert_weights_ptr,
    # scratch
    res1_ptr, xq1_ptr, xs1_ptr, qkv_part_ptr, ql_ptr, qlq_ptr, qls_ptr, qb_part_ptr, qcat_ptr, pm_ptr, pl_ptr,
    pacc_ptr, vpart_ptr, vq_ptr, vs_ptr, o_part_ptr, xn2_ptr, xq2_ptr, xs2_ptr, lg_part_ptr, rw_ptr, uniq_ptr,
    up_part_ptr, aq_ptr, as_ptr, dn_part_ptr,
    # sync: [epoch | arrivals | the last-arrival counts], the error word, trace stamps, task counts; the TP group's
    # peer buffers (TP > 1)
    sync_ptr, err_ptr, trace_ptr, task_count_ptr, peers_ptr,
    # scalars
    launch_id, bound, eps, softmax_scale, routed_scaling, rank,
    # geometry
    R: tl.constexpr, D: tl.constexpr, QL: tl.constexpr, KVL: tl.constexpr, ROPE: tl.constexpr, NOPE: tl.constexpr,
    VH: tl.constexpr, H: tl.constexpr, E: tl.constexpr, E_PAD: tl.constexpr, TOPK: tl.constexpr, KP: tl.constexpr,
    I: tl.constexpr, KTOP: tl.constexpr, NSPLIT: tl.constexpr, MAXU: tl.constexpr,
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
    C_WUV_CNT: tl.constexpr, C_OPROJ_CNT: tl.constexpr, C_DN_CNT: tl.constexpr, N_STAGES: tl.constexpr,
    S_NORM1: tl.constexpr, S_QKV_A: tl.constexpr, S_LATENT: tl.constexpr, S_Q_B: tl.constexpr,
    S_ABSORB: tl.constexpr, S_ATTN: tl.constexpr, S_W_UV: tl.constexpr, S_O_PROJ: tl.constexpr,
    S_NORM2: tl.constexpr, S_GATE: tl.constexpr, S_ROUTE: tl.constexpr, S_UP: tl.constexpr, S_ACT: tl.constexpr,
    S_DOWN: tl.constexpr,
    T_NORM1: tl.constexpr, T_QKV_A: tl.constexpr, T_LATENT: tl.constexpr, T_Q_B: tl.constexpr,
    T_ABSORB: tl.constexpr, T_ATTN: tl.constexpr, T_W_UV: tl.constexpr, T_O_PROJ: tl.constexpr,
    T_NORM2: tl.constexpr, T_GATE: tl.constexpr, T_ROUTE: tl.constexpr, T_DOWN: tl.constexpr,
    S_O_SUM: tl.constexpr, S_DOWN_SUM: tl.constexpr, T_O_SUM: tl.constexpr, T_DOWN_SUM: tl.constexpr,
    # TP and the exchange regions' first words and slot words in the peer buffer (0 at TP 1)
    TP: tl.constexpr, X_O_X: tl.constexpr, XW_O_X: tl.constexpr, X_OUT_X: tl.constexpr, XW_OUT_X: tl.constexpr,
):
    """grid = (NPROG,), every program resident; task t of a stage runs on program t % NPROG.

    SKIP_MASK (timing variants only, 0 in every real build): stages whose bit is set run no tasks.
    TRACE (timing builds only): every program stamps the global timer at each stage (`common/trace.py`).
    COUNT_TASKS (interpreter checks only): task_count[S] counts the tasks stage S ran.
    """
    pid, epoch, ok = launch_start(sync_ptr, trace_ptr, N_STAGES, TRACE)
    wuv_cnt_ptr = sync_ptr + C_WUV_CNT
    oproj_cnt_ptr = sync_ptr + C_OPROJ_CNT
    dn_cnt_ptr = sync_ptr + C_DN_CNT
    QKV_N: tl.constexpr = QL + KVL + ROPE
    QK: tl.constexpr = NOPE + ROPE

    attn_half.norm1(hidden_ptr, residual_ptr, input_norm_ptr, res1_ptr, xq1_ptr, xs1_ptr, eps, pid, ok, task_count_ptr,
                    S_NORM1, T_NORM1, D, NORM_GP, NPROG, SKIP_MASK, COUNT_TASKS)
    w0, ws0 = attn_half.gemv_first_block(qkv_a_ptr, qkv_a_s_ptr, pid, QKV_N, D, KS_A, BN_A, PRELOAD)  # before the wait
    ok = hand_off(sync_ptr, err_ptr, trace_ptr, S_NORM1, epoch, ok, pid, launch_id, bound, NPROG, N_STAGES, TIMER,
                  SKIP_ARRIVE, TRACE)

    attn_half.gemv_stage(xq1_ptr, xs1_ptr, qkv_a_ptr, qkv_a_s_ptr, qkv_part_ptr, live_tasks(T_QKV_A, ok, S_QKV_A, SKIP_MASK),
                         pid, QKV_N, w0, ws0, task_count_ptr, R, D, KS_A, BN_A, STAGES, NPROG, PRELOAD, SWAP_AB,
                         S_QKV_A, COUNT_TASKS)
    ok = hand_off(sync_ptr, err_ptr, trace_ptr, S_QKV_A, epoch, ok, pid, launch_id, bound, NPROG, N_STAGES, TIMER,
                  SKIP_ARRIVE, TRACE)

    attn_half.latent(qkv_part_ptr, cos_sin_ptr, out_loc_ptr, q_a_norm_ptr, kv_a_norm_ptr, ql_ptr, qlq_ptr, qls_ptr,
                     kv_cache_ptr, stride_kv_cache, eps, pid, ok, task_count_ptr, S_LATENT, T_LATENT, R, QL, KVL, ROPE,
                     KS_A, NPROG, SKIP_MASK, COUNT_TASKS)
    w0, ws0 = attn_half.gemv_first_block(q_b_ptr, q_b_s_ptr, pid, H * QK, QL, KS_B, BN_B, PRELOAD)  # before the wait
    ok = hand_off(sync_ptr, err_ptr, trace_ptr, S_LATENT, epoch, ok, pid, launch_id, bound, NPROG, N_STAGES, TIMER,
                  SKIP_ARRIVE, TRACE)

    attn_half.gemv_stage(qlq_ptr, qls_ptr, q_b_ptr, q_b_s_ptr, qb_part_ptr, live_tasks(T_Q_B, ok, S_Q_B, SKIP_MASK),
                         pid, H * QK, w0, ws0, task_count_ptr, R, QL, KS_B, BN_B, STAGES, NPROG, PRELOAD, SWAP_AB,
                         S_Q_B, COUNT_TASKS)
    ok = hand_off(sync_ptr, err_ptr, trace_ptr, S_Q_B, epoch, ok, pid, launch_id, bound, NPROG, N_STAGES, TIMER,
                  SKIP_ARRIVE, TRACE)

    attn_half.absorb(qb_part_ptr, cos_sin_ptr, w_kc_ptr, stride_w_kc_0, stride_w_kc_1, stride_w_kc_2, qcat_ptr, pid, ok,
                     task_count_ptr, S_ABSORB, T_ABSORB, R, H, KVL, NOPE, ROPE, KS_B, NPROG, SKIP_MASK, COUNT_TASKS)
    ok = hand_off(sync_ptr, err_ptr, trace_ptr, S_ABSORB, epoch, ok, pid, launch_id, bound, NPROG, N_STAGES, TIMER,
                  SKIP_ARRIVE, TRACE)

    ok = mla_attention(qcat_ptr, kv_cache_ptr, stride_kv_cache, topk_slots_ptr, pm_ptr, pl_ptr, pacc_ptr, w_vc_ptr,
                       stride_w_vc_0, stride_w_vc_1, stride_w_vc_2, vpart_ptr, vq_ptr, vs_ptr, o_proj_ptr, o_proj_s_ptr,
                       res1_ptr, o_part_ptr, o_ptr, residual_out_ptr, wuv_cnt_ptr, oproj_cnt_ptr, softmax_scale,
                       sync_ptr, err_ptr, trace_ptr, task_count_ptr, epoch, ok, pid, launch_id, bound,
                       R, D, KVL, ROPE, VH, H, KTOP, NSPLIT, ATT_BLK, WUV_SH, BN_O, KS_O, STAGES, SWAP_AB, NPROG,
                       N_STAGES, TIMER, SKIP_ARRIVE, SKIP_MASK, TRACE, COUNT_TASKS, S_ATTN, S_W_UV, S_O_PROJ, T_ATTN,
                       T_W_UV, T_O_PROJ, TP, peers_ptr, rank, S_O_SUM, T_O_SUM, X_O_X, XW_O_X, BX)
    ok = moe(o_ptr, res1_ptr, post_norm_ptr, xn2_ptr, xq2_ptr, xs2_ptr, gate_ptr, lg_part_ptr, bias_ptr, expert_ids_ptr,
             rw_ptr, w13_ptr, w13_s_ptr, uniq_ptr, up_part_ptr, aq_ptr, as_ptr, expert_weights_ptr, w2_ptr, w2_s_ptr,
             dn_part_ptr, out_ptr, dn_cnt_ptr, eps, routed_scaling,
             sync_ptr, err_ptr, trace_ptr, task_count_ptr, epoch, ok, pid, launch_id, bound,
             R, D, E, E_PAD, TOPK, KP, I, MAXU, BE, KS_G, BU, KS_U, DCW, DCW_P, STAGES_DN, DN_PARTS, STAGES_UP, UP_MT,
             NORM_GP, ROUTE_RC, STAGES, SWAP_MOE, NPROG, N_STAGES, TIMER, SKIP_ARRIVE, SKIP_MASK, TRACE, COUNT_TASKS,
             S_NORM2, S_GATE, S_ROUTE, S_UP, S_ACT, S_DOWN, T_NORM2, T_GATE, T_ROUTE, T_DOWN, TP, peers_ptr, rank,
             S_DOWN_SUM, T_DOWN_SUM, X_OUT_X, XW_OUT_X, BX)
    launch_end(sync_ptr, trace_ptr, pid, epoch, ok, NPROG, N_STAGES, TRACE)


KIND = TritonKind(table=shared_kind.TABLE, kernel=shared_layer_kernel, dims=layer_dims, constexprs=constexprs,
                  scalars=scalars, refusals=shared_kind.refusals)
