"""Every SGLang name the glm53 reference package reads, in one list (`kind`, `owner`, `name`, note).

`test/unit/test_sglang_reads.py` resolves each entry it can statically on the installed SGLang:
module attributes by import, class fields via dataclass fields / attributes, and model attributes
on the tiny SGLang model. The owner strings are dotted paths, or "model" / "layer" / "attn" /
"indexer" / "mlp" for the modules of a loaded GlmMoeDsaForCausalLM.
"""

from __future__ import annotations

SGLANG_READS: tuple[tuple[str, str, str, str], ...] = (
    # --- step fields: forward_context / ForwardBatch / DSA metadata / pools (step.py, runner.py)
    ("function", "sglang.srt.model_executor.forward_context", "get_attn_backend", "the DSA backend a forward runs on"),
    # --- server and host (spec.py, runner_triton.py)
    ("function", "sglang.srt.kernel_plugins.amd.binding", "device_isa", "the host GPU's ISA: the served rule"),
    ("function", "sglang.srt.runtime_context", "get_server_args", "--kv-cache-dtype: the launches' MLA cache type"),
    ("field", "sglang.srt.server_args.ServerArgs", "kv_cache_dtype", "fp8_e4m3, or bf16 for auto / bfloat16"),
    # --- the TP group (runner_triton.py, TP > 1): the launches' peer buffers are set up over it
    ("function", "sglang.srt.distributed.parallel_state", "get_tp_group", "this rank's TP GroupCoordinator"),
    ("attr", "sglang.srt.distributed.parallel_state.GroupCoordinator", "rank_in_group", "the launches' rank"),
    ("attr", "sglang.srt.distributed.parallel_state.GroupCoordinator", "world_size", "must be the shards' TP size"),
    ("attr", "sglang.srt.distributed.parallel_state.GroupCoordinator", "device_group", "symmetric memory's rendezvous"),
    ("attr", "sglang.srt.distributed.parallel_state.GroupCoordinator", "cpu_group",
     "gloo: IPC handles and every rank's setup report"),
    ("method", "model", "logits_processor._get_logits", "answered with the tail's logits inside a routed step"),
    ("attr", "sglang.srt.layers.attention.dsa_backend.DeepseekSparseAttnBackend", "forward_metadata", "per-step DSAMetadata"),
    ("attr", "sglang.srt.layers.attention.dsa_backend.DeepseekSparseAttnBackend", "token_to_kv_pool", "the DSATokenToKVPool"),
    ("field", "sglang.srt.model_executor.forward_batch_info.ForwardBatch", "forward_mode", "DECODE or TARGET_VERIFY"),
    ("field", "sglang.srt.model_executor.forward_batch_info.ForwardBatch", "batch_size", "requests"),
    ("field", "sglang.srt.model_executor.forward_batch_info.ForwardBatch", "input_ids", "[R] rows"),
    ("field", "sglang.srt.model_executor.forward_batch_info.ForwardBatch", "out_cache_loc", "[R] slot each row writes"),
    ("field", "sglang.srt.model_executor.forward_batch_info.ForwardBatch", "capture_hidden_mode", "read by SGLang's tail"),
    ("field", "sglang.srt.layers.attention.dsa_backend.DSAMetadata", "page_size", "must be 64"),
    ("field", "sglang.srt.layers.attention.dsa_backend.DSAMetadata", "real_page_table", "[bs or R, pages] int32"),
    ("field", "sglang.srt.layers.attention.dsa_backend.DSAMetadata", "cache_seqlens_int32", "decode: keys a row reads"),
    ("field", "sglang.srt.layers.attention.dsa_backend.DSAMetadata", "dsa_seqlens_expanded", "verify: seq_lens + j + 1 a row"),
    ("method", "sglang.srt.mem_cache.memory_pool.DSATokenToKVPool", "get_key_buffer", "[slots, 1, 576] bf16/fp8 view"),
    ("method", "sglang.srt.mem_cache.memory_pool.DSATokenToKVPool", "get_index_k_with_scale_buffer", "[pages, 64·132] uint8"),
    ("attr", "sglang.srt.mem_cache.memory_pool.DSATokenToKVPool", "index_page_size", "must be 64"),
    ("attr", "sglang.srt.mem_cache.index_key_cache", "_use_aiter_preshuffle", "refused: 16×16-tiled keys"),
    # --- SGLang's Triton kernels: the auditor's provider on a GPU without SGLang's full stack, and the per-op
    # baseline (per_op.py, audit_provider.py)
    ("function", "sglang.kernels.ops.attention.dsa.triton_sparse_mla_decode", "triton_sparse_mla_decode",
     "sparse MLA decode over the rows' top-k"),
    ("function", "sglang.kernels.ops.gemm.fp8_kernel", "w8a8_block_fp8_matmul_triton", "block-FP8 W8A8 linears"),
    ("function", "sglang.kernels.ops.moe.fused_moe_triton_kernels", "invoke_fused_moe_kernel", "fused-MoE GEMMs"),
    ("function", "sglang.kernels.ops.quantization.act_quant_triton", "act_quant", "per-128 fp8 activations (ue8m0)"),
    ("function", "sglang.srt.layers.attention.dsv4.indexer", "fp8_paged_mqa_logits_torch", "index scores (torch)"),
    ("function", "sglang.srt.layers.attention.dsv4.indexer", "topk_transform_pytorch_vectorized", "top-k as slots"),
    # --- model modules and weights (weights.py, runner.py)
    ("attr", "model", "model.embed_tokens.weight", "[V / tp, D] bf16: this rank's vocab rows"),
    ("attr", "model", "model.embed_tokens.tp_size", "the TP size the model is sharded for"),
    ("attr", "model", "model.norm.weight", "final RMSNorm"),
    ("attr", "model", "model.layers", "decoder layers"),
    ("attr", "model", "lm_head", "passed to the logits processor"),
    ("attr", "model", "lm_head.weight", "[V / tp, D] bf16: the tail's vocab rows"),
    ("attr", "model", "logits_processor.vocab_size", "_get_logits slices the gathered [R, padded V] logits to it"),
    ("method", "model", "logits_processor", "SGLang's own tail: LogitsProcessorOutput"),
    ("attr", "layer", "input_layernorm.weight", ""),
    ("attr", "layer", "post_attention_layernorm.weight", ""),
    ("attr", "attn", "fused_qkv_a_proj_with_mqa.weight", "fp8 + weight_scale_inv, or bf16"),
    ("attr", "attn", "q_a_layernorm.weight", ""),
    ("attr", "attn", "kv_a_layernorm.weight", ""),
    ("attr", "attn", "q_b_proj.weight", ""),
    ("attr", "attn", "o_proj.weight", ""),
    ("attr", "attn", "w_kc", "[H, nope, kv_lora] absorbed W_UK"),
    ("attr", "attn", "w_vc", "[H, kv_lora, v] absorbed W_UV"),
    ("attr", "attn", "w_scale", "per-tensor scale of an fp8 w_kc / w_vc"),
    ("attr", "attn", "num_local_heads", "heads on this rank"),
    ("attr", "attn", "rotary_emb.cos_sin_cache", "[max_pos, rope] = [cos | sin]"),
    ("attr", "indexer", "wq_b.weight", ""),
    ("attr", "indexer", "wk.weight", ""),
    ("attr", "indexer", "weights_proj.weight", "bf16 head gates"),
    ("attr", "indexer", "k_norm.weight", "LayerNorm"),
    ("attr", "indexer", "k_norm.bias", ""),
    ("attr", "indexer", "k_norm.variance_epsilon", ""),
    ("attr", "indexer", "k_norm.dtype", "the LayerNorm's compute dtype"),
    ("attr", "indexer", "rotary_emb.cos_sin_cache", ""),
    ("attr", "indexer", "rotary_emb.is_neox_style", "refused if True"),
    ("attr", "indexer", "use_dsa_indexer_fusion", "no Hadamard when set (Indexer._maybe_rotate)"),
    ("attr", "indexer", "use_aiter_fused_fp8_writer", "no Hadamard when set"),
    ("attr", "mlp", "gate.weight", "[E, D] bf16 router"),
    ("attr", "mlp", "gate.e_score_correction_bias", "[E] f32"),
    ("attr", "mlp", "experts.w13_weight", "[E(+fused), 2I, D]"),
    ("attr", "mlp", "experts.w2_weight", "[E(+fused), D, I]"),
    ("attr", "mlp", "experts.w13_weight_scale_inv", "fp8 only"),
    ("attr", "mlp", "experts.w2_weight_scale_inv", "fp8 only"),
    ("attr", "mlp", "num_fused_shared_experts", "0: shared_experts is stacked in as expert n_routed (a copy)"),
    ("attr", "mlp", "shared_experts.gate_up_proj.weight", "when not fused"),
    ("attr", "mlp", "shared_experts.down_proj.weight", "when not fused"),
)
