"""GLM-5.3 refusals before load: what `Requirements` states, and the model-config and server checks it cannot.

Each reason is one plain fact naming the setting, its value and what is accepted, e.g.
"config.index_topk 1024 is not 2048". SGLang adds the rank prefix and raises one error with all of them.
Accepted values come from `GLM53_PRESET` (the geometry the launches are built for), never retyped.
"""

from __future__ import annotations

from typing import Any

from sgl_amd_mono.glm53.config import FP8_BLOCK, GLM53_PRESET, Glm53Geometry, layer_runs_indexer

# HF config fields the launches are built for, each required to equal GLM-5.3's value
# (checked by SGLang itself through Requirements.hf_config: "config.<field> <value> is not <want>").
EXACT_FIELDS = (
    "hidden_size", "intermediate_size", "num_attention_heads", "q_lora_rank", "kv_lora_rank",
    "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
    "n_routed_experts", "num_experts_per_tok", "n_shared_experts", "moe_intermediate_size",
    "first_k_dense_replace", "moe_layer_freq", "hidden_act",
    # plain sigmoid top-8 with renormalized weights: one group, no group selection
    "n_group", "topk_group", "topk_method", "scoring_func", "norm_topk_prob",
    "index_n_heads", "index_head_dim", "index_topk", "vocab_size", "tie_word_embeddings",
    # interleaved (GPT-J) RoPE pairs (2i, 2i+1) in MLA and in the indexer; a missing
    # indexer_rope_interleave makes SGLang use NeoX pairs, so it must be present and true
    "rope_interleave", "indexer_rope_interleave",
)
HF_EXACT = {field: GLM53_PRESET[field] for field in EXACT_FIELDS}

# Features of other DSA models the launches do not implement: accepted only absent, None, false or 0.
ABSENT_FIELDS = (
    "mla_nope", "swiglu_limit", "llama_4_scaling", "learnable_sink", "num_hash_layers", "cli_factor",
    "router_fp32", "index_kpool_compress", "enable_lm_head_fp32", "enable_lm_head_output_fp32",
    "index_init_tokens", "index_local_tokens",
)

# kv_cache_dtype strings whose MLA rows are 576 values [c_kv 512 | k_pe 64]: bf16, or fp8 e4m3 without
# scales. "auto" resolves to bfloat16 for DSA below sm_100 (overrides.py _dsa_kv_cache_dtype_default),
# which covers every ISA in DEVICES; a resolved server holds "bfloat16" or "fp8_e4m3".
KV_CACHE_DTYPES = frozenset({"auto", "bf16", "bfloat16", "fp8_e4m3"})
FP8_KV_CACHE_DTYPES = frozenset({"fp8_e4m3"})
# DSA decode backends whose MLA cache rows the launches read and write. ROCm: triton (default), tilelang,
# aiter. CUDA: fa3 (sm_90 bf16 default), flashmla_sparse, flashmla_kv (sm_90 fp8 default), trtllm.
DSA_DECODE_BACKENDS = frozenset({"triton", "tilelang", "aiter", "fa3", "flashmla_sparse", "flashmla_kv", "trtllm"})
# With an fp8 cache, flashmla_kv / flashmla_sparse pack a 656-byte row [512 fp8 | 4 fp32 scales | 64 bf16]
# (kv_cache_configurator.py); these keep the 576 fp8 values without scales.
FP8_DSA_DECODE_BACKENDS = frozenset({"triton", "tilelang", "aiter", "trtllm"})
# SGLang's DSA page: 64 tokens (64 * index_kpool, and index_kpool must be 1); the legacy ROCm page of 1
# (no aiter preshuffled paged-MQA) has another index-K layout.
PAGE_SIZES = frozenset({64})
# MTP verify as a chain: NEXTN is an alias SGLang resolves to EAGLE; one draft token a step.
SPECULATIVE_ALGORITHMS = frozenset({None, "EAGLE", "NEXTN"})
EAGLE_TOPKS = frozenset({None, 1})

SERVER_ARGS = {
    "kv_cache_dtype": KV_CACHE_DTYPES,
    "page_size": PAGE_SIZES,
    "dsa_decode_backend": DSA_DECODE_BACKENDS,
    "speculative_algorithm": SPECULATIVE_ALGORITHMS,
    "speculative_eagle_topk": EAGLE_TOPKS,
    # (no "quantization" entry: SGLang's ModelConfig already refuses one that differs from the checkpoint's)
    # the tail writes bf16 logits of a bf16 LM head, gathered over the whole TP group
    "enable_fp32_lm_head": frozenset({False}),
    "enable_dp_lm_head": frozenset({False}),
    "enable_tp_lm_head_all_to_all": frozenset({None, False}),
}
# the embedding is read vocab-sharded, one rank a row; replication changes its layout
ENV = {"SGLANG_ENABLE_EMBED_REPLICATION": False}

QUANT_EXACT = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic"}
WEIGHT_BLOCK = [FP8_BLOCK, FP8_BLOCK]


def model_config_reasons(*, hf_config: Any, tp_size: int) -> list[str]:
    """Model-config refusals that Requirements.hf_config cannot state (nested, absent or derived fields)."""
    reasons = []
    for name in ("rope_parameters", "rope_scaling"):
        params = getattr(hf_config, name, None)
        if isinstance(params, dict):
            rope_type = params.get("rope_type", params.get("type", "default"))
            if rope_type not in (None, "default"):
                reasons.append(f"config.{name}.rope_type {rope_type!r} is not 'default' (unscaled RoPE)")
    quant = getattr(hf_config, "quantization_config", None)
    if not isinstance(quant, dict):
        reasons.append(f"config.quantization_config {quant!r} is not block FP8 ({dict(QUANT_EXACT, weight_block_size=WEIGHT_BLOCK)})")
    else:
        reasons += [
            f"config.quantization_config.{key} {quant.get(key)!r} is not {want!r}"
            for key, want in QUANT_EXACT.items()
            if quant.get(key) != want
        ]
        if list(quant.get("weight_block_size") or ()) != WEIGHT_BLOCK:
            reasons.append(f"config.quantization_config.weight_block_size {quant.get('weight_block_size')!r} is not {WEIGHT_BLOCK}")
    reasons += [
        f"config.{name} {getattr(hf_config, name)!r} is set; accepted: absent, None, false or 0"
        for name in ABSENT_FIELDS
        if getattr(hf_config, name, None) not in (None, False, 0)
    ]
    kpool = getattr(hf_config, "index_kpool", 1)
    if kpool != 1:
        reasons.append(f"config.index_kpool {kpool!r} is not 1")
    norm = getattr(hf_config, "index_k_norm_type", "layer")
    if norm != "layer":
        reasons.append(f"config.index_k_norm_type {norm!r} is not 'layer' (LayerNorm with bias)")
    reasons += _index_share_reasons(hf_config)
    try:
        Glm53Geometry.from_hf(hf_config).shard(tp_size)
    except ValueError as e:  # names each size tp does not divide
        reasons += [f"config.{part}" for part in str(e).split("; ")]
    except (AttributeError, TypeError) as e:
        reasons.append(f"config is not a GLM-5.3 config: {type(e).__name__}: {e}")
    return reasons


def _index_share_reasons(hf_config: Any) -> list[str]:
    """The IndexShare schedule: each shared layer reuses the previous layer's top-k, so layer 0 runs its own."""
    types = getattr(hf_config, "indexer_types", None)
    pattern = getattr(hf_config, "index_topk_pattern", None)
    reasons = []
    if types is not None:
        n_layers = getattr(hf_config, "num_hidden_layers", None)
        if len(types) != n_layers:
            reasons.append(f"config.indexer_types has {len(types)} entries, not num_hidden_layers {n_layers}")
        bad = sorted({t for t in types if t not in ("full", "shared")})
        if bad:
            reasons.append(f"config.indexer_types holds {bad}; accepted: 'full', 'shared'")
    if not layer_runs_indexer(hf_config, 0):
        sources = [f"config.indexer_types[0] {types[0]!r}"] if types else []
        sources += [f"config.index_topk_pattern[0] {pattern[0]!r}"] if pattern else []
        source = " and ".join(sources) or "config.index_topk_freq / index_skip_topk_offset"
        reasons.append(f"{source} makes layer 0 share a previous layer's top-k; layer 0 must run its indexer ('full')")
    return reasons


def server_reasons(cfg: Any) -> list[str]:
    """Server refusals that Requirements.server_args cannot state (values that depend on each other)."""
    reasons = []
    kv, backend = cfg.kv_cache_dtype, cfg.dsa_decode_backend
    if kv in FP8_KV_CACHE_DTYPES and backend not in FP8_DSA_DECODE_BACKENDS:
        reasons.append(
            f"dsa_decode_backend {backend!r} with kv_cache_dtype {kv!r} is not one of "
            f"{sorted(FP8_DSA_DECODE_BACKENDS)}: the launches read fp8 MLA rows of 576 values without scales, "
            f"and {backend!r} packs 656-byte rows (512 fp8 values, 4 f32 scales, 64 bf16 rope values); on sm_90, "
            f"where SGLang's fp8 default is flashmla_kv, pass --dsa-decode-backend triton, tilelang or trtllm"
        )
    if cfg.speculative_algorithm is not None:
        tokens, steps = cfg.speculative_num_draft_tokens, cfg.speculative_num_steps
        if tokens is not None and steps is not None and int(tokens) != int(steps) + 1:
            reasons.append(
                f"speculative_num_draft_tokens {tokens} is not speculative_num_steps + 1 = {int(steps) + 1} "
                "(a top-1 draft chain)"
            )
    return reasons


def verify_tokens_reasons(*, tokens: Any, widths: tuple[int, ...]) -> list[str]:
    """A verify step of `tokens` rows a request must fit whole requests into some width."""
    if tokens is None or any(w % int(tokens) == 0 for w in widths):
        return []
    accepted = sorted({t for w in widths for t in range(1, w + 1) if w % t == 0})
    return [f"speculative_num_draft_tokens {tokens} is not one of {accepted} (divisors of the widths {list(widths)})"]
