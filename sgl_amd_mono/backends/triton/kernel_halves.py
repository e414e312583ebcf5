"""The halves every GLM-5.3 layer kind's kernel runs after its own front stages: the sparse MLA and o_proj
(`mla_attention`: attn, w_uv, o_proj) and the MoE (`moe`: norm2 ... down), each a sequence of stage calls
(`stages_attention.py`, `stages_moe.py`) with the generic hand-off after every stage but the launch's last.
The stage ids and task counts come from the calling kind's table (its S_* / T_* constexprs)."""

import triton
import triton.language as tl

from sgl_amd_mono.backends.triton import stages_attention as attn_half
from sgl_amd_mono.backends.triton import stages_moe as moe_half
from sgl_amd_mono.backends.triton.sync import hand_off


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
                  T_W_UV: tl.constexpr, T_O_PROJ: tl.constexpr):
    """attn (over each row's top-k slots at topk_ptr), w_uv, o_proj, each followed by its hand-off. Returns ok."""
    HV: tl.constexpr = H * VH
    attn_half.attn(qcat_ptr, kv_cache_ptr, stride_kv_cache, topk_ptr, pm_ptr, pl_ptr, pacc_ptr, softmax_scale,
                   pid, ok, task_count_ptr, S_ATTN, T_ATTN, H, KVL, ROPE, KTOP, NSPLIT, ATT_BLK, NPROG, SKIP_MASK,
                   COUNT_TASKS)
    ok = hand_off(sync_ptr, err_ptr, trace_ptr, S_ATTN, epoch, ok, pid, launch_id, bound, NPROG, N_STAGES, TIMER,
                  SKIP_ARRIVE, TRACE)

    attn_half.w_uv(pm_ptr, pl_ptr, pacc_ptr, w_vc_ptr, stride_w_vc_0, stride_w_vc_1, stride_w_vc_2, vpart_ptr, vq_ptr,
                   vs_ptr, wuv_cnt_ptr, epoch, pid, ok, task_count_ptr, S_W_UV, T_W_UV, R, H, KVL, VH, NSPLIT, WUV_SH,
                   NPROG, SKIP_MASK, COUNT_TASKS)
    ok = hand_off(sync_ptr, err_ptr, trace_ptr, S_W_UV, epoch, ok, pid, launch_id, bound, NPROG, N_STAGES, TIMER,
                  SKIP_ARRIVE, TRACE)

    attn_half.o_proj(vq_ptr, vs_ptr, o_proj_ptr, o_proj_s_ptr, res1_ptr, o_part_ptr, o_ptr, residual_out_ptr,
                     oproj_cnt_ptr, epoch, pid, ok, task_count_ptr, S_O_PROJ, T_O_PROJ, R, D, HV, BN_O, KS_O, STAGES,
                     SWAP_AB, NPROG, SKIP_MASK, COUNT_TASKS)
    ok = hand_off(sync_ptr, err_ptr, trace_ptr, S_O_PROJ, epoch, ok, pid, launch_id, bound, NPROG, N_STAGES, TIMER,
                  SKIP_ARRIVE, TRACE)

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
        T_ROUTE: tl.constexpr, T_DOWN: tl.constexpr):
    """norm2, gate, route, up, act, down, each but down followed by its hand-off (down is the launch's last
    stage: `sync.launch_end` follows it). Returns ok."""
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
                  SKIP_MASK, COUNT_TASKS)
    return ok
