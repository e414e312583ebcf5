"""The "dense" and "tokens" kinds in Triton (`glm53/kinds/dense.py` is the table): GLM-5.3's dense layers as one
persistent launch each, the indexer kind's attention half with its own index work (`kernel_halves.index_attention`),
then the dense MLP (`kernel_halves.dense_mlp`). The tokens kernel is the dense one whose norm1 reads the step's token
ids' embedding rows. Arguments come by name from the table (`launch.py`), as every kind's."""

import triton
import triton.language as tl

from sgl_amd_mono.backends.triton.kernel_halves import dense_mlp, index_attention
from sgl_amd_mono.backends.triton.kernel_indexer import constexprs as indexer_constexprs
from sgl_amd_mono.backends.triton.launch import TritonKind
from sgl_amd_mono.backends.triton.sync import launch_end, launch_start
from sgl_amd_mono.glm53.kinds import dense as dense_kind
from sgl_amd_mono.glm53.kinds.dims import LayerDims, layer_dims

_FRONT = ("R", "D", "QL", "KVL", "ROPE", "NOPE", "VH", "H", "KTOP", "NSPLIT", "IH", "ID", "PMAX", "NSL", "IBLK",
          "ISCAN", "ISHORT", "LS", "ISWAP", "IPIPE", "IATOM", "IHC", "IAHEAD", "ISATOM", "IHC1", "IW0", "IW1",
          "ICOMPACT", "IPCH", "IEK", "IPACK", "IRELIST", "IFLOOR", "IPAIR", "IKEEP", "IROWS", "IQG",
          "KS_I", "KS_W", "BN_IQ", "KS_IQ", "BN_A", "KS_A", "BN_B", "KS_B", "BN_O", "KS_O", "ATT_BLK", "NORM_GP", "WUV_SH",
          "STAGES", "SWAP_AB")


def constexprs(d: LayerDims, tokens: bool = False) -> dict:
    """The indexer kernel's constexprs its attention half reads (`_FRONT`), and the MLP's: DI its intermediate on
    this rank, BN_MU / KS_MU gate_up's column tile and k parts, BN_MD / KS_MD down's, SWAP_MLP the GEMVs' products
    swapped as the MoE's (swap_moe); TOKENS: norm1 reads token ids' embedding rows (V of them on this rank); BX a
    cross-rank sum task's words."""
    t, idx = d.tiles, indexer_constexprs(d)
    return {**{k: idx[k] for k in _FRONT}, "DI": d.DI, "BN_MU": t.bn_mu, "KS_MU": t.ks_mu, "BN_MD": t.bn_md,
            "KS_MD": t.ks_md, "SWAP_MLP": t.swap_ab or t.swap_moe, "TOKENS": tokens, "V": d.V, "BX": t.bx}


def scalars(d: LayerDims) -> dict:
    return {"eps": d.eps, "softmax_scale": d.softmax_scale, "k_norm_eps": d.k_norm_eps}


@triton.jit(do_not_specialize=["launch_id", "rank"])  # one compiled kernel for every layer's launch_id and rank
def dense_layer_kernel(
        hidden_ptr, residual_ptr, input_ids_ptr, cos_sin_ptr, out_loc_ptr, kv_cache_ptr, stride_kv_cache,
        index_k_cache_ptr, stride_index_k_cache, page_table_ptr, lengths_ptr, rows_per_req_ptr, input_norm_ptr,
        qkv_a_ptr, qkv_a_s_ptr, q_a_norm_ptr, kv_a_norm_ptr, q_b_ptr, q_b_s_ptr, w_kc_ptr, stride_w_kc_0, stride_w_kc_1,
        stride_w_kc_2, w_vc_ptr, stride_w_vc_0, stride_w_vc_1, stride_w_vc_2, o_proj_ptr, o_proj_s_ptr, post_norm_ptr,
        wq_b_ptr, wq_b_s_ptr, wk_ptr, wk_s_ptr, weights_proj_ptr, k_norm_w_ptr, k_norm_b_ptr, gate_up_ptr,
        gate_up_s_ptr, down_ptr, down_s_ptr, o_ptr, residual_out_ptr, topk_ptr, out_ptr, res1_ptr, xq1_ptr, xs1_ptr,
        qkv_part_ptr, ql_ptr, qlq_ptr, qls_ptr, qb_part_ptr, qcat_ptr, pm_ptr, pl_ptr, pacc_ptr, vpart_ptr, vq_ptr,
        vs_ptr, o_part_ptr, xn1_ptr, ik_part_ptr, iw_part_ptr, iq_part_ptr, iq_ptr, head_w_ptr, scores_ptr, hist0_ptr,
        hist1_ptr, hist2_ptr, hist3_ptr, kept1_ptr, kept2_ptr, kept3_ptr, cnt_ptr, cand_pos_ptr, cand_key_ptr,
        ncand_ptr, floor_ptr, hist_pair_ptr, xq2_ptr, xs2_ptr,
        mu_part_ptr, mq_ptr, ms_ptr, md_part_ptr, emb_ptr, sync_ptr, err_ptr, trace_ptr, task_count_ptr, peers_ptr,
        launch_id, bound, eps, softmax_scale, k_norm_eps, rank, R: tl.constexpr, D: tl.constexpr, QL: tl.constexpr,
        KVL: tl.constexpr, ROPE: tl.constexpr, NOPE: tl.constexpr, VH: tl.constexpr, H: tl.constexpr,
        KTOP: tl.constexpr, NSPLIT: tl.constexpr, IH: tl.constexpr, ID: tl.constexpr, PMAX: tl.constexpr,
        NSL: tl.constexpr, IBLK: tl.constexpr, ISCAN: tl.constexpr, ISHORT: tl.constexpr, LS: tl.constexpr,
        ISWAP: tl.constexpr, IPIPE: tl.constexpr, IATOM: tl.constexpr, IHC: tl.constexpr,
        IAHEAD: tl.constexpr, ISATOM: tl.constexpr, IHC1: tl.constexpr, IW0: tl.constexpr, IW1: tl.constexpr,
        ICOMPACT: tl.constexpr, IPCH: tl.constexpr, IEK: tl.constexpr, IPACK: tl.constexpr, IRELIST: tl.constexpr,
        IFLOOR: tl.constexpr, IPAIR: tl.constexpr, IKEEP: tl.constexpr, IROWS: tl.constexpr,
        IQG: tl.constexpr, KS_I: tl.constexpr,
        KS_W: tl.constexpr, BN_IQ: tl.constexpr,
        KS_IQ: tl.constexpr,
        BN_A: tl.constexpr, KS_A: tl.constexpr, BN_B: tl.constexpr, KS_B: tl.constexpr, BN_O: tl.constexpr,
        KS_O: tl.constexpr, ATT_BLK: tl.constexpr, NORM_GP: tl.constexpr, WUV_SH: tl.constexpr, STAGES: tl.constexpr,
        SWAP_AB: tl.constexpr, DI: tl.constexpr, BN_MU: tl.constexpr, KS_MU: tl.constexpr, BN_MD: tl.constexpr,
        KS_MD: tl.constexpr, SWAP_MLP: tl.constexpr, TOKENS: tl.constexpr, V: tl.constexpr, BX: tl.constexpr,
        NPROG: tl.constexpr, TIMER: tl.constexpr, SKIP_ARRIVE: tl.constexpr, SKIP_MASK: tl.constexpr,
        TRACE: tl.constexpr, COUNT_TASKS: tl.constexpr, C_SCORE_ROWS: tl.constexpr, C_SEL1_ROWS: tl.constexpr,
        C_SEL2_ROWS: tl.constexpr, C_SEL3_ROWS: tl.constexpr, C_EMIT_ROWS: tl.constexpr, C_WUV_CNT: tl.constexpr, C_OPROJ_CNT: tl.constexpr,
        C_MD_CNT: tl.constexpr, N_STAGES: tl.constexpr, S_NORM1: tl.constexpr, S_QKV_A: tl.constexpr,
        S_LATENT: tl.constexpr, S_Q_B: tl.constexpr, S_ABSORB: tl.constexpr, S_SCORE: tl.constexpr,
        S_SEL1: tl.constexpr, S_SEL2: tl.constexpr, S_SEL3: tl.constexpr, S_EMIT: tl.constexpr, S_ATTN: tl.constexpr,
        S_W_UV: tl.constexpr, S_O_PROJ: tl.constexpr, S_NORM2: tl.constexpr, S_MLP_UP: tl.constexpr,
        S_MLP_ACT: tl.constexpr, S_MLP_DOWN: tl.constexpr, T_NORM1: tl.constexpr, T_QKV_A: tl.constexpr,
        T_LATENT: tl.constexpr, T_Q_B: tl.constexpr, T_ABSORB: tl.constexpr, T_ATTN: tl.constexpr, T_W_UV: tl.constexpr,
        T_O_PROJ: tl.constexpr, T_NORM2: tl.constexpr, T_MLP_UP: tl.constexpr, T_MLP_ACT: tl.constexpr,
        T_MLP_DOWN: tl.constexpr, S_O_SUM: tl.constexpr, S_MLP_DOWN_SUM: tl.constexpr, T_O_SUM: tl.constexpr,
        T_MLP_DOWN_SUM: tl.constexpr, TP: tl.constexpr, X_O_X: tl.constexpr, XW_O_X: tl.constexpr,
        X_OUT_X: tl.constexpr, XW_OUT_X: tl.constexpr,
        # the tokens kind's table only (its embed rows' exchange at TP > 1)
        S_EMBED: tl.constexpr = 0, S_EMBED_SUM: tl.constexpr = 0, T_EMBED: tl.constexpr = 0,
        T_EMBED_SUM: tl.constexpr = 0, X_EMB_X: tl.constexpr = 0, XW_EMB_X: tl.constexpr = 0):
    """grid = (NPROG,), every program resident; task t of a stage runs on program t % NPROG. Both kinds' kernel:
    TOKENS (the tokens kind) reads the embedding rows of input_ids, its table's "embed" passed as hidden_ptr
    (`KIND_TOKENS.aliases`), and no residual (None; the dense kind's input_ids and emb None)."""
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
        S_ATTN, S_W_UV, S_O_PROJ, T_NORM1, T_QKV_A, T_LATENT, T_Q_B, T_ABSORB, T_ATTN, T_W_UV, T_O_PROJ, TOKENS,
        input_ids_ptr, V, TP, peers_ptr, rank, S_O_SUM, T_O_SUM, X_O_X, XW_O_X, BX, emb_ptr, S_EMBED, T_EMBED,
        S_EMBED_SUM, T_EMBED_SUM, X_EMB_X,
        XW_EMB_X, IPCH=IPCH, IEK=IEK, IPACK=IPACK, IRELIST=IRELIST, IFLOOR=IFLOOR,
        hist_pair_ptr=hist_pair_ptr, IPAIR=IPAIR, IKEEP=IKEEP,
        IROWS=IROWS, score_rows_ptr=sync_ptr + C_SCORE_ROWS, sel1_rows_ptr=sync_ptr + C_SEL1_ROWS,
        sel2_rows_ptr=sync_ptr + C_SEL2_ROWS, sel3_rows_ptr=sync_ptr + C_SEL3_ROWS, emit_rows_ptr=sync_ptr + C_EMIT_ROWS)
    ok = dense_mlp(o_ptr, res1_ptr, post_norm_ptr, xq2_ptr, xs2_ptr, gate_up_ptr, gate_up_s_ptr, mu_part_ptr,
                   mq_ptr, ms_ptr, down_ptr, down_s_ptr, md_part_ptr, out_ptr, sync_ptr + C_MD_CNT, eps,
                   sync_ptr, err_ptr, trace_ptr, task_count_ptr, epoch, ok, pid, launch_id, bound,
                   R, D, DI, BN_MU, KS_MU, BN_MD, KS_MD, NORM_GP, STAGES, SWAP_MLP, NPROG, N_STAGES, TIMER, SKIP_ARRIVE,
                   SKIP_MASK, TRACE, COUNT_TASKS, S_NORM2, S_MLP_UP, S_MLP_ACT, S_MLP_DOWN, T_NORM2, T_MLP_UP,
                   T_MLP_ACT, T_MLP_DOWN, TP, peers_ptr, rank, S_MLP_DOWN_SUM, T_MLP_DOWN_SUM, X_OUT_X, XW_OUT_X, BX)
    launch_end(sync_ptr, trace_ptr, pid, epoch, ok, NPROG, N_STAGES, TRACE)


KIND = TritonKind(table=dense_kind.TABLE, kernel=dense_layer_kernel, dims=layer_dims, constexprs=constexprs,
                  scalars=scalars, refusals=dense_kind.refusals, absent=("input_ids_ptr", "emb_ptr"))
KIND_TOKENS = TritonKind(table=dense_kind.TOKENS_TABLE, kernel=dense_layer_kernel, dims=layer_dims,
                         constexprs=lambda d: constexprs(d, tokens=True), scalars=scalars,
                         refusals=dense_kind.tokens_refusals, aliases={"hidden_ptr": "embed_ptr"},
                         absent=("residual_ptr",))
