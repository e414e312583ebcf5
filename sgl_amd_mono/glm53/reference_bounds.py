"""How far the torch reference may sit from SGLang's own modules and torch references on CPU.

Each bound is named `reference.<output>.<metric>` (a `common/numerics` metric: max_abs, where 0 is
bitwise, or max_rel = max|a − b| / max|b|), set at about 3× the largest value measured on the tiny
GLM-5.3 (test/unit), and `test/unit/test_reference_pinned.py` / `test_indexer_pinned.py` ship a
planted error that fails each one.
"""

from __future__ import annotations

import torch

from sgl_amd_mono.common import numerics

# Measured on CPU (torch 2.14.1, Triton 3.x interpreter for SGLang's Triton kernels), tiny model, seed 0.
BOUNDS: dict[str, float] = {
    # The same ops as SGLang's: bitwise.
    "reference.embed.max_abs": 0.0,
    "reference.rms_norm.max_abs": 0.0,
    "reference.rms_norm_residual.max_abs": 0.0,
    "reference.lm_head.max_abs": 0.0,
    "reference.route_ids.max_abs": 0.0,
    "reference.route_weights.max_abs": 0.0,
    "reference.index_act_quant.max_abs": 0.0,
    "reference.linear_bf16.max_abs": 0.0,
    "reference.group_quant_scale.max_abs": 0.0,  # per_token_group_quant_fp8's scales
    # Different op orders: bounded.
    "reference.linear_fp8.max_rel": 0.02,  # SGLang's Triton w8a8 block GEMM (interpreted), same quantized inputs
    "reference.rope.max_rel": 0.015,  # SGLang's CPU rope (bf16 cos_sin_cache, bf16 steps) vs f32 math on the same cache rows
    "reference.dense_mlp.max_rel": 0.03,  # SGLang's CPU SiluAndMul rounds silu(g) to bf16 before ·up
    "reference.dense_mlp_fp8.max_rel": 0.1,  # vs SGLang's unquantized MLP on the dequantized weights
    "reference.moe_bf16.max_rel": 0.03,  # SGLang rounds the routed sum to bf16 before ×2.5 and the shared add
    "reference.moe_fp8.max_rel": 0.1,  # vs SGLang's unquantized MoE on the dequantized fp8 experts
    "reference.router_logits.max_rel": 0.02,  # f32 logits vs SGLang's CPU bf16 gate output
    "reference.kv_row.max_rel": 0.03,  # cached rows vs SGLang's kv_a_layernorm + rope (fp8 cache: one e4m3 step)
    "reference.index_k.max_rel": 0.12, # cached index keys (fp8 × scale) vs SGLang's wk/k_norm/rope
    "reference.index_scores.max_rel": 0.008,  # f32 dots vs fp8_paged_mqa_logits_torch's bf16 bmm
}


def measure(name: str, a: torch.Tensor, b: torch.Tensor) -> float:
    if a.shape != b.shape:
        raise ValueError(f"{name}: shapes {tuple(a.shape)} and {tuple(b.shape)} differ")
    return numerics.measure(name, a, b)


def within(name: str, a: torch.Tensor, b: torch.Tensor) -> tuple[bool, float]:
    """(whether `a` is within BOUNDS[name] of `b`, the measured value)."""
    value = measure(name, a, b)
    return numerics.passes(name, value, BOUNDS[name]), value
