"""The "shared" kind: one GLM-5.3 MoE layer that reuses the previous layer's top-k (57 of the 78 layers).

Its table is the attention half, then the MoE half (`halves.py`): 16 stages (o_sum and down_sum only at TP > 1), each task of a stage
reading what earlier stages wrote. `refusals` says what a build of this kind cannot serve, as plain
facts; the weights and step are checked against the table's shapes when they are bound.
"""

from __future__ import annotations

import torch

from sgl_amd_mono.common.kind import KindTable
from sgl_amd_mono.glm53.config import Glm53Geometry
from sgl_amd_mono.glm53.kinds import halves
from sgl_amd_mono.glm53.kinds.dims import KV_DTYPES

TABLE = KindTable(
    name="shared",
    inputs=(*halves.ATTN_INPUTS, halves.TOPK_INPUT),
    weights=(*halves.ATTN_WEIGHTS, *halves.MOE_WEIGHTS),
    outputs=(*halves.ATTN_OUTPUTS, *halves.MOE_OUTPUTS),
    scratch=(*halves.ATTN_SCRATCH, *halves.MOE_SCRATCH),
    stages=(*halves.ATTN_STAGES, *halves.MOE_STAGES),
    cache="kv_cache",
    exchanges=(halves.O_X, halves.OUT_X),
)

ROWS_MAX = 16  # rows a task pads to (its tl.dot tiles, the router's [expert, row] scores)


def refusals(geo: Glm53Geometry, *, tp: int, width: int, kv_dtype: torch.dtype) -> list[str]:
    """Every reason this kind cannot be built for (geo, tp, width, kv_dtype), as plain facts."""
    bad = []
    if not 1 <= width <= ROWS_MAX:
        bad.append(f"width {width} is not between 1 and {ROWS_MAX} rows")
    if kv_dtype not in KV_DTYPES:
        bad.append(f"kv cache dtype {kv_dtype} is not one of {[str(d) for d in KV_DTYPES]}")
    try:
        s = geo.shard(tp)
    except ValueError as e:
        return bad + [f"tp {tp}: {e}"]
    g = geo
    checks = [
        (g.hidden % 128 == 0, f"hidden {g.hidden} is not a multiple of 128"),
        (g.q_lora & (g.q_lora - 1) == 0 and g.q_lora % 128 == 0, f"q_lora {g.q_lora} is not a power of two >= 128"),
        (g.kv_lora & (g.kv_lora - 1) == 0 and g.kv_lora % 128 == 0, f"kv_lora {g.kv_lora} is not a power of two >= 128"),
        (g.qk_rope & (g.qk_rope - 1) == 0 and g.qk_rope >= 32, f"qk_rope {g.qk_rope} is not a power of two >= 32"),
        (g.qk_nope % 64 == 0, f"qk_nope {g.qk_nope} is not a multiple of 64"),
        (g.v_head % 128 == 0, f"v_head {g.v_head} is not a multiple of 128"),
        ((s.heads * g.v_head) % 128 == 0, f"heads/tp x v_head {s.heads * g.v_head} is not a multiple of 128"),
        (s.moe_inter % 128 == 0, f"moe_inter/tp {s.moe_inter} is not a multiple of 128"),
        (g.index_topk % 32 == 0, f"index_topk {g.index_topk} is not a multiple of 32"),
        (g.n_fused == 1, f"n_shared_experts {g.n_fused} is not 1 (the launch fuses exactly one always-on expert as expert E)"),
        (g.top_k + 1 <= 16, f"top_k {g.top_k} + 1 exceeds 16"),
    ]
    return bad + [msg for good, msg in checks if not good]


# ---- bounds of this kind's launch against the oracle (`glm53/bounds.py` lists every table) ----
# On the H200 (check_layer.py; measured in results/bounds_h200_check_layer_*.log, held in
# results/final10_h200_check_layer_*.log): ~3x the largest value measured over TP8 rows
# 1 / 2 / 4 / 8 at 8K and rows 1 / 8 at 128K, bf16 and fp8 KV, TP4 rows 1 / 4, TP2 rows 1 / 2, TP1 row 1, on
# weights cut from one full draw (o.rel 5.8e-3 at TP4 w4; residual_out.rel 5.6e-4; out.rel 1.5e-2 at TP1;
# expert_weights.max_abs 1.2e-7; cache rows 7.6e-6 once, else 0). The fp8 requantization of v / act turns
# last-bit differences upstream (summation order; swap_moe's fp8 wgmma) into whole fp8 steps, hence o / out
# errors of 1e-3..1e-2. Routing is checked against the oracle's router on the launch's own norm2 output
# (registry `_shared_compare`). Each bound's planted control (registry `_shared_controls`) fails it.
BOUNDS_GPU = {
    "shared.o.rel": 1.8e-2,  # control: one o_proj scale block x1.2 gives >= 2.8e-2
    "shared.residual_out.rel": 1.7e-3,  # control: every o_proj scale x1.3
    "shared.out.rel": 4.5e-2,  # control: half the post-attention norm x1.1 gives >= 0.146
    "shared.out.cosine": 0.9995,  # the same control: <= 0.9964
    # cache rows: 0 but once 7.6e-6 (an rsqrt last-bit difference flipping one bf16 rounding of a small value);
    # the bound is one bf16 ulp at |x| <= 4 (0.0156), since a flip of a larger value is as legitimate.
    # Control: kv_a_norm[0:16] x1.1.
    "shared.kv.max_abs": 0.016,
    "shared.expert_weights.max_abs": 4e-7,  # control: the correction bias reversed gives >= 0.057
    "shared.expert_ids.max_abs": 0.0,
}

# Under Triton's interpreter (test/unit/test_launch_interp.py, tiny geometry, TP1), per case. The interpreter
# build rounds by hand to nearest-even and takes f32 dots of bf16 values, so every value is the oracle's up to
# summation order: bitwise (0) at 1 and 2 rows. The attention sums its top-k in online-softmax blocks and the
# oracle in one softmax: at 3 rows (bf16 cache) and 4 rows (fp8 cache) one bf16 rounding of o flips (measured
# o 2.5e-4 / 3.5e-4, residual_out 1.6e-5 / 2.7e-5, out 3.8e-6 / 6.4e-4); those bounds are ~3x that. The
# routing weights differ by one f32 step (1.2e-7: the oracle divides, the launch multiplies by the
# reciprocal). Each case's planted control (every control of the registry at once) fails every bound:
# o >= 0.37, residual_out >= 0.031, out >= 0.42, cosine <= 0.92, kv >= 3.7e-4, weights >= 0.086, ids >= 5.
_EXACT = {"shared.o.rel": 0.0, "shared.residual_out.rel": 0.0, "shared.out.rel": 0.0, "shared.out.cosine": 0.999999,
          "shared.kv.max_abs": 0.0, "shared.expert_weights.max_abs": 4e-7, "shared.expert_ids.max_abs": 0.0}
BOUNDS_INTERP: dict[str, dict[str, float]] = {
    "w1": _EXACT, "w2": _EXACT, "w2_options": _EXACT, "w2_gfx950": _EXACT,
    "w3": {**_EXACT, "shared.o.rel": 7e-4, "shared.residual_out.rel": 5e-5, "shared.out.rel": 1.2e-5},
    "w4fp8": {**_EXACT, "shared.o.rel": 1e-3, "shared.residual_out.rel": 8e-5, "shared.out.rel": 2e-3},
    # a decode row a request (the targets' timing shape: test/unit/test_launch_interp.py), measured o.rel 9.0e-4,
    # residual_out.rel 1.5e-4, out.rel 3.1e-7
    "w3_decode": {**_EXACT, "shared.o.rel": 1e-3, "shared.residual_out.rel": 2e-4, "shared.out.rel": 1.2e-5},
}
