"""The "tail" launch kind of GLM-5.3 as a table: the step's last launch, after layer 77.

  norm     (row): normed = RMSNorm(hidden + residual) with the final norm's weight (SGLang's fused add, f32 math
           over the f32 sum, rounded to bf16): what SGLang's model hands its logits processor, and the hidden
           state a step captures (MTP, return_hidden_states)
  lm_head  (vocab tile of bn_v rows): logits[:, tile] = f32(bf16(normed @ lm_head[tile]^T)), the bf16 LM head
           over the whole hidden row (f32 sums), rounded to bf16 and handed on in f32, as SGLang's
           `LogitsProcessor._get_logits` returns them (`test/unit/test_reference_pinned.py` pins that)

At TP > 1 each rank holds its vocab shard's rows of the LM head (SGLang's ParallelLMHead): lm_head pushes its shard
of the logits to every rank (`logits_x`), and `gather` places every rank's shard in rank order, so each rank holds
the whole vocab's logits [R, TP x V] (SGLang's all-gather in `_get_logits`). Lowering-neutral: the Triton kernel is
`backends/triton/kernel_tail.py`.
"""

from __future__ import annotations

import torch

from sgl_amd_mono.common.kind import Buffer, Exchange, KindTable, StageDef
from sgl_amd_mono.glm53.config import Glm53Geometry
from sgl_amd_mono.glm53.kinds.dims import cdiv

B = Buffer

TABLE = KindTable(
    name="tail",
    inputs=(
        B("hidden", lambda d: (d.R, d.D), "bf16", "the last layer's output"),
        B("residual", lambda d: (d.R, d.D), "bf16", "the last layer's residual stream"),
    ),
    weights=(
        B("final_norm", lambda d: (d.D,), "bf16", "model.norm.weight"),
        B("lm_head", lambda d: (d.V, d.D), "bf16", "this rank's vocab rows of lm_head.weight"),
    ),
    outputs=(
        B("normed", lambda d: (d.R, d.D), "bf16", "RMSNorm(hidden + residual): the step's hidden states"),
        B("logits", lambda d: (d.R, d.tp * d.V), "f32", "bf16 LM-head values in f32, every rank's vocab shard"),
    ),
    scratch=(),
    stages=(
        StageDef("norm", lambda d: d.R, ("hidden", "residual", "final_norm"), ("normed",),
                 doc="(row): the final RMSNorm of hidden + residual"),
        StageDef("lm_head", lambda d: cdiv(d.V, d.tiles.bn_v), ("normed", "lm_head"), ("logits", "logits_x"),
                 doc="(vocab tile): the bf16 LM head, rounded to bf16, in f32 (TP 1: into logits; TP > 1: pushed to "
                     "every rank)"),
        StageDef("gather", lambda d: d.tp * cdiv(d.R * d.V, d.tiles.bx) if d.tp > 1 else 0, ("logits_x",),
                 ("logits",), doc="TP > 1: (rank, block): a block of that rank's shard, once every word of it came"),
    ),
    exchanges=(Exchange("logits_x", lambda d: d.R * d.V, "each rank's logits shard [R, V] (bf16 values)"),),
)


def refusals(geo: Glm53Geometry, *, tp: int, width: int, kv_dtype: torch.dtype) -> list[str]:
    """Every reason this kind cannot be built for (geo, tp, width), as plain facts (the KV dtype is not read)."""
    bad = []
    if not 1 <= width <= 16:
        bad.append(f"width {width} is not between 1 and 16 rows (one 16-row tile)")
    try:
        geo.shard(tp)
    except ValueError as e:
        bad.append(f"tp {tp}: {e}")
    if geo.hidden % 128:
        bad.append(f"hidden {geo.hidden} is not a multiple of 128")
    return bad


# ---- bounds of this kind's launch against the oracle (`glm53/bounds.py` lists every table) ----
# Under Triton's interpreter (tiny geometry, TP1; test/unit/test_launch_interp.py): bitwise equal to the oracle in
# every case (the norm's f32 sums and the LM head's exact f32 dots there round as torch's do), so the bounds are
# exact. The planted controls (the registry's: the final norm's weight x1.1 on half the row, a 128-row block of the
# LM head x1.5) give normed.rel >= 0.067, logits.rel >= 0.41, logits.cosine <= 0.981.
_EXACT = {"tail.normed.rel": 0.0, "tail.logits.rel": 0.0, "tail.logits.cosine": 0.999999}
BOUNDS_INTERP: dict[str, dict[str, float]] = {c: _EXACT for c in ("w1", "w2", "w3", "w4fp8", "w2_options", "w2_gfx950")}
# On a GPU: the H200 at the TP8 shard, rows 1 and 8 (results/tail1_h200_check_layer.log): bitwise equal to the
# torch tail (cuBLAS's bf16 GEMM) there, 0 on every bound. As where the shared kind's stages were bitwise, the bounds
# allow a few roundings to the neighbouring bf16 value (2^-8 of a logit) instead of 0, since the LM head's bf16
# products are summed in another order than cuBLAS's; the controls above fail them by 40x or more.
BOUNDS_GPU = {"tail.normed.rel": 1e-3, "tail.logits.rel": 1e-3, "tail.logits.cosine": 0.99999}
