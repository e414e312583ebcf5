"""The halves GLM-5.3's layer kinds share, as table pieces: the attention half (norm1 ... o_proj and the
residual), the MoE half (norm2 ... down) and the dense MLP half (norm2, mlp_up, mlp_act, mlp_down). A kind's table
is its halves' stages in launch order.

Sizes are functions of `LayerDims` (d) and its tiles (d.tiles: bn_* columns a GEMV task, ks_* split-K
parts, be gate experts a task, bu up columns a task, route_rc experts a router task, dcw / dn_parts MoE
down's columns a task and parts of the experts; bn_mu / ks_mu and bn_md / ks_md: the dense MLP's gate_up and
down). Split-K part buffers are [parts, R, N] f32; quantized
activations [R, K] fp8 with per-128-group scales [R, K / 128] f32.
"""

from __future__ import annotations

from sgl_amd_mono.common.kind import Buffer, Count, Exchange, StageDef
from sgl_amd_mono.glm53.kinds.dims import cdiv

B = Buffer


# ---------------- cross-rank sums (TP > 1) ----------------
# At TP > 1 a stage that ends in a rank's partial (o_proj, the MoE or MLP down, layer 0's embedding rows) pushes it,
# rounded to bf16 as SGLang rounds a rank's output before its all-reduce, into its slot of every rank's region; a
# sum stage after it waits for every rank's words of a block and sums them in rank order in f32 (`layer.
# sum_in_rank_order`), so every rank holds the same bits. At TP 1 the sum stages have no tasks and the partial
# stage writes the output itself (the kernels branch on TP, so TP 1 pays nothing). A sum task covers tiles.bx words.
def sum_tasks(d, words: int) -> int:
    """Tasks of a cross-rank sum stage over `words` words a slot (0 at TP 1)."""
    return cdiv(words, d.tiles.bx) if d.tp > 1 else 0


O_X = Exchange("o_x", lambda d: d.R * d.D, "each rank's o_proj output [R, D] (bf16 values), for o_sum")
OUT_X = Exchange("out_x", lambda d: d.R * d.D, "each rank's MoE / MLP output [R, D] (bf16 values), for the sum")

# ---------------- attention half ----------------
ATTN_INPUTS = (
    B("hidden", lambda d: (d.R, d.D), "bf16", "the previous layer's output rows"),
    B("residual", lambda d: (d.R, d.D), "bf16", "the residual stream before this layer"),
    B("cos_sin", lambda d: (d.R, d.ROPE), "f32", "SGLang's cos_sin_cache rows at the rows' positions: [cos | sin]"),
    B("out_loc", lambda d: (d.R,), "i64", "the cache slot each row writes (pad rows: slot 0)"),
    B("kv_cache", lambda d: (None, d.KVD), lambda d: d.kv_dtype, "SGLang's MLA cache [slots, kv_lora + rope], written in place"),
)
TOPK_INPUT = B("topk_slots", lambda d: (d.R, d.KTOP), "i32", "physical slots each row attends, -1 = none")

ATTN_WEIGHTS = (
    B("input_norm", lambda d: (d.D,), "bf16"),
    B("qkv_a", lambda d: (d.QKV_N, d.D), "fp8"),
    B("qkv_a_s", lambda d: (cdiv(d.QKV_N, 128), d.D // 128), "f32"),
    B("q_a_norm", lambda d: (d.QL,), "bf16"),
    B("kv_a_norm", lambda d: (d.KVL,), "bf16"),
    B("q_b", lambda d: (d.H * d.QK, d.QL), "fp8"),
    B("q_b_s", lambda d: (cdiv(d.H * d.QK, 128), d.QL // 128), "f32"),
    B("w_kc", lambda d: (d.H, d.NOPE, d.KVL), "bf16", "read through its strides (SGLang's layout)", is_strided=True),
    B("w_vc", lambda d: (d.H, d.KVL, d.VH), "bf16", "read through its strides (SGLang's layout)", is_strided=True),
    B("o_proj", lambda d: (d.D, d.HV), "fp8"),
    B("o_proj_s", lambda d: (d.D // 128, cdiv(d.HV, 128)), "f32"),
    B("post_norm", lambda d: (d.D,), "bf16"),
)

ATTN_OUTPUTS = (
    B("o", lambda d: (d.R, d.D), "bf16", "o_proj's output (this rank's partial at TP > 1)"),
    B("residual_out", lambda d: (d.R, d.D), "bf16", "the residual after attention: o + res1"),
)

ATTN_SCRATCH = (
    B("res1", lambda d: (d.R, d.D), "bf16", "hidden + residual"),
    B("xq1", lambda d: (d.R, d.D), "fp8", "RMSNorm(res1), quantized"),
    B("xs1", lambda d: (d.R, d.D // 128), "f32"),
    B("qkv_part", lambda d: (d.tiles.ks_a, d.R, d.QKV_N), "f32"),
    B("ql", lambda d: (d.R, d.QL), "bf16", "q_a_norm(q latent)"),
    B("qlq", lambda d: (d.R, d.QL), "fp8"),
    B("qls", lambda d: (d.R, d.QL // 128), "f32"),
    B("qb_part", lambda d: (d.tiles.ks_b, d.R, d.H * d.QK), "f32"),
    B("qcat", lambda d: (d.R, d.H, d.KVD), "bf16", "[q_nope @ w_kc | rope(q_pe)] a head"),
    B("pm", lambda d: (d.R, d.NSPLIT, d.H), "f32", "attention split maxima"),
    B("pl", lambda d: (d.R, d.NSPLIT, d.H), "f32", "attention split sums of exp"),
    B("pacc", lambda d: (d.R, d.NSPLIT, d.H, d.KVL), "f32", "attention split sums of p * V"),
    B("vpart", lambda d: (d.KVL // 128, d.R, d.HV), "f32", "v a latent chunk"),
    B("vq", lambda d: (d.R, d.HV), "fp8"),
    B("vs", lambda d: (d.R, d.HV // 128), "f32"),
    B("o_part", lambda d: (d.tiles.ks_o, d.R, d.D), "f32"),
)


def _latent_rows(d, t: int) -> tuple[int, ...]:
    """latent's tasks [R, 2R) write the cache row of row t - R."""
    return (t - d.R,) if t >= d.R else ()


ATTN_STAGES = (
    StageDef("norm1", lambda d: d.R, ("hidden", "residual", "input_norm"), ("res1", "xq1", "xs1"),
             doc="res1 = hidden + residual; RMSNorm(res1) kept only quantized"),
    StageDef("qkv_a", lambda d: cdiv(d.QKV_N, d.tiles.bn_a) * d.tiles.ks_a, ("xq1", "xs1", "qkv_a", "qkv_a_s"),
             ("qkv_part",), doc="split-K parts of the block-FP8 fused qkv_a"),
    StageDef("latent", lambda d: 2 * d.R, ("qkv_part", "cos_sin", "out_loc", "q_a_norm", "kv_a_norm", "ql"),
             ("ql", "qlq", "qls", "kv_cache"), cache_rows=_latent_rows,
             doc="tasks [0, R): q_a_norm (+ quantized); [R, 2R): the row's cache row at out_loc"),
    StageDef("q_b", lambda d: cdiv(d.H * d.QK, d.tiles.bn_b) * d.tiles.ks_b, ("qlq", "qls", "q_b", "q_b_s"),
             ("qb_part",), doc="split-K parts of the block-FP8 q_b"),
    StageDef("absorb", lambda d: d.H * (d.KVL // 128), ("qb_part", "cos_sin", "w_kc"), ("qcat",),
             doc="q_nope @ w_kc a head and 128-chunk of the latent; rope(q_pe)"),
    StageDef("attn", lambda d: d.R * d.HG * d.NSPLIT, ("qcat", "kv_cache", "topk_slots"), ("pm", "pl", "pacc"),
             doc="split sparse-MLA partials over each row's top-k slots, 16 heads a task"),
    StageDef("w_uv", lambda d: d.H * (d.VH // 128) * (d.KVL // 128), ("pm", "pl", "pacc", "w_vc", "vpart"),
             ("vpart", "vq", "vs"),
             counts=(Count("wuv_cnt", lambda d: d.H * (d.VH // 128), lambda d: d.KVL // 128),),
             doc="the splits combined a latent chunk, @ w_vc; the last chunk of a v group to land sums and quantizes it"),
    StageDef("o_proj", lambda d: cdiv(d.D, d.tiles.bn_o) * d.tiles.ks_o, ("vq", "vs", "res1", "o_proj", "o_proj_s", "o_part"),
             ("o_part", "o", "residual_out", "o_x"),
             counts=(Count("oproj_cnt", lambda d: cdiv(d.D, d.tiles.bn_o), lambda d: d.tiles.ks_o),),
             doc="split-K parts; the last part of a column tile to land writes o and residual_out (TP 1), or pushes "
                 "bf16(o) to every rank (TP > 1)"),
    StageDef("o_sum", lambda d: sum_tasks(d, d.R * d.D), ("o_x", "res1"), ("o", "residual_out"),
             doc="TP > 1: a block of o summed over the ranks in rank order; residual_out = o + res1"),
)

# ---------------- MoE half ----------------
MOE_WEIGHTS = (
    B("gate", lambda d: (d.E, d.D), "bf16"),
    B("bias", lambda d: (d.E,), "f32", "the router's correction bias"),
    B("w13", lambda d: (d.E + 1, 2 * d.I, d.D), "fp8", "gate | up rows a expert; expert E is the fused shared one"),
    B("w13_s", lambda d: (d.E + 1, 2 * d.I // 128, d.D // 128), "f32"),
    B("w2", lambda d: (d.E + 1, d.D, d.I), "fp8"),
    B("w2_s", lambda d: (d.E + 1, d.D // 128, d.I // 128), "f32"),
)

MOE_OUTPUTS = (
    B("out", lambda d: (d.R, d.D), "bf16", "the MoE output (this rank's partial at TP > 1)"),
    B("expert_ids", lambda d: (d.R, d.TOPK + 1), "i32", "picked experts in rank order, the fused expert last"),
    B("expert_weights", lambda d: (d.R, d.TOPK + 1), "f32", "their routing weights (renormalised, x routed_scaling)"),
)

MOE_SCRATCH = (
    B("xn2", lambda d: (d.R, d.D), "bf16", "RMSNorm(o + res1)"),
    B("xq2", lambda d: (d.R, d.D), "fp8"),
    B("xs2", lambda d: (d.R, d.D // 128), "f32"),
    B("lg_part", lambda d: (d.tiles.ks_g, d.R, d.E), "f32", "router logits, split-K parts"),
    B("rw", lambda d: (d.E + 1, 16), "f32", "[expert, row] picked sigmoid scores (0: not picked); row r < 16"),
    B("uniq", lambda d: (d.n_programs, d.MAXU + 1), "i32", "each program's own list of the used experts"),
    B("up_part", lambda d: (d.MAXU * d.tiles.ks_u, d.R, 2 * d.I), "f32", "gate | up a used expert and k part"),
    B("aq", lambda d: (d.MAXU, d.R, d.I), "fp8", "SiLU(gate) * up a used expert, quantized"),
    B("as", lambda d: (d.MAXU, d.R, d.I // 128), "f32", "its group scales x the row's routing weight"),
    B("dn_part", lambda d: (d.tiles.dn_parts, d.R, d.D), "f32", "MoE down a part of the used experts"),
)


def router_task_experts(d) -> int:
    """Experts one router task ranks (a power of two dividing E_PAD)."""
    return min(d.tiles.route_rc, d.E_PAD)


MOE_STAGES = (
    StageDef("norm2", lambda d: d.R, ("o", "res1", "post_norm"), ("xn2", "xq2", "xs2"),
             doc="RMSNorm(o + res1), stored bf16 and quantized"),
    StageDef("gate", lambda d: cdiv(d.E, d.tiles.be) * d.tiles.ks_g, ("xn2", "gate"), ("lg_part",),
             doc="split-K parts of the f32 router logits of the bf16 gate"),
    StageDef("route", lambda d: d.R * (d.E_PAD // router_task_experts(d)), ("lg_part", "bias"), ("expert_ids", "rw"),
             doc="a row's picks among a chunk of experts: sigmoid + bias ranks"),
    StageDef("up", lambda d: d.MAXU * (d.I // d.tiles.bu) * d.tiles.ks_u, ("rw", "xq2", "xs2", "w13", "w13_s"),
             ("uniq", "up_part"), is_bound=True,
             doc="every program lists the used experts; split-K parts of gate | up a used expert"),
    StageDef("act", lambda d: d.MAXU * (d.I // 128) + d.R, ("up_part", "uniq", "rw", "expert_ids"),
             ("aq", "as", "expert_weights"), is_bound=True,
             doc="SiLU(gate) * up quantized a used expert and 128-group, scales x routing weight; then a row's weights"),
    StageDef("down", lambda d: cdiv(d.D, d.tiles.dcw) * d.tiles.dn_parts, ("aq", "as", "uniq", "w2", "w2_s", "dn_part"),
             ("dn_part", "out", "out_x"),
             counts=(Count("dn_cnt", lambda d: cdiv(d.D, d.tiles.dcw), lambda d: d.tiles.dn_parts),),
             doc="a column tile summed over a part of the used experts; the last part to land sums the parts (into "
                 "out at TP 1, pushed to every rank at TP > 1)"),
    StageDef("down_sum", lambda d: sum_tasks(d, d.R * d.D), ("out_x",), ("out",),
             doc="TP > 1: a block of out summed over the ranks in rank order"),
)

# ---------------- dense MLP half (GLM-5.3's layers 0-2: SGLang's DeepseekV2MLP, block FP8) ----------------
# norm2 as the MoE half's; gate_up and down are block-FP8 linears on activations quantized per 128 (SGLang's
# dense FP8 linears), SiLU(gate) * up rounded to bf16 (its SiluAndMul) and quantized per 128 before down.
DENSE_WEIGHTS = (
    B("gate_up", lambda d: (2 * d.DI, d.D), "fp8", "mlp.gate_up_proj.weight: gate rows, then up"),
    B("gate_up_s", lambda d: (2 * d.DI // 128, d.D // 128), "f32"),
    B("down", lambda d: (d.D, d.DI), "fp8", "mlp.down_proj.weight"),
    B("down_s", lambda d: (d.D // 128, d.DI // 128), "f32"),
)

DENSE_OUTPUTS = (B("out", lambda d: (d.R, d.D), "bf16", "the MLP output (this rank's partial at TP > 1)"),)

DENSE_SCRATCH = (
    B("xq2", lambda d: (d.R, d.D), "fp8", "RMSNorm(o + res1), quantized"),
    B("xs2", lambda d: (d.R, d.D // 128), "f32"),
    B("mu_part", lambda d: (d.tiles.ks_mu, d.R, 2 * d.DI), "f32", "gate | up, split-K parts"),
    B("mq", lambda d: (d.R, d.DI), "fp8", "SiLU(gate) * up, quantized"),
    B("ms", lambda d: (d.R, d.DI // 128), "f32"),
    B("md_part", lambda d: (d.tiles.ks_md, d.R, d.D), "f32", "down, split-K parts"),
)

DENSE_STAGES = (
    StageDef("norm2", lambda d: d.R, ("o", "res1", "post_norm"), ("xq2", "xs2"), doc="RMSNorm(o + res1), quantized"),
    StageDef("mlp_up", lambda d: cdiv(2 * d.DI, d.tiles.bn_mu) * d.tiles.ks_mu, ("xq2", "xs2", "gate_up", "gate_up_s"),
             ("mu_part",), doc="split-K parts of the block-FP8 gate_up"),
    StageDef("mlp_act", lambda d: d.DI // 128, ("mu_part",), ("mq", "ms"),
             doc="a 128-group of SiLU(bf16 gate) * bf16 up, rounded to bf16 and quantized"),
    StageDef("mlp_down", lambda d: cdiv(d.D, d.tiles.bn_md) * d.tiles.ks_md, ("mq", "ms", "down", "down_s", "md_part"),
             ("md_part", "out", "out_x"),
             counts=(Count("md_cnt", lambda d: cdiv(d.D, d.tiles.bn_md), lambda d: d.tiles.ks_md),),
             doc="split-K parts of the block-FP8 down; the last part of a column tile to land writes out (TP 1), or "
                 "pushes it to every rank (TP > 1)"),
    StageDef("mlp_down_sum", lambda d: sum_tasks(d, d.R * d.D), ("out_x",), ("out",),
             doc="TP > 1: a block of out summed over the ranks in rank order"),
)
