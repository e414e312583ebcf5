"""A tiny GlmMoeDsaForCausalLM built from SGLang 0.5.23's own classes on CPU, with synthetic
checkpoint-named weights (bf16 or block-FP8), for tests that drive the plugin through SGLang.

Recipe from ../shared/examples/glm53_cpu_fp8_probe.py: single-process gloo groups (or one process a rank of a TP
group: `init_tp_dist`), a published ServerArgs(device="cpu"), and two rope monkeypatches (the CPU rope factory asserts yarn-only;
RotaryEmbedding imports vllm off-GPU).
"""

from __future__ import annotations

import math
import os
from typing import Any

import torch

from sgl_amd_mono.glm53.config import GLM53_PRESET, load_hf_config

# Tiny GLM-5.3: layer 0 dense + indexer, layers 1-2 MoE + indexer, layer 3 MoE reusing layer 2's top-k.
TINY_FIELDS = dict(
    GLM53_PRESET,
    vocab_size=256, hidden_size=256, intermediate_size=512, moe_intermediate_size=128,
    num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4,
    q_lora_rank=128, kv_lora_rank=128, qk_nope_head_dim=64, qk_rope_head_dim=64, v_head_dim=64,
    n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1,
    index_topk=16, index_n_heads=4, index_head_dim=128, index_topk_freq=2, index_skip_topk_offset=3,
    indexer_types=["full", "full", "full", "shared"], max_position_embeddings=4096, pad_token_id=0,
)

_IS_DIST_READY = False


def init_single_process_dist(**server_args: Any) -> None:
    """Single-process gloo TP/PP groups and a published CPU ServerArgs (once per process; server_args: more of its
    fields, e.g. kv_cache_dtype)."""
    for key, value in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29633"), ("RANK", "0"),
                       ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")):
        os.environ.setdefault(key, value)
    init_tp_dist(rank=0, world=1, **server_args)


def init_tp_dist(*, rank: int, world: int, **server_args: Any) -> None:
    """This process as rank `rank` of a TP group of `world` CPU processes (gloo; MASTER_ADDR / MASTER_PORT set by the
    caller) and a published CPU ServerArgs at tp_size `world` (once per process)."""
    global _IS_DIST_READY
    if _IS_DIST_READY:
        return
    from sglang.srt.distributed import parallel_state
    from sglang.srt.distributed.parallel_state import init_distributed_environment, initialize_model_parallel
    from sglang.srt.runtime_context import SpawnRanks, get_parallel, publish, reset_context
    from sglang.srt.server_args import ServerArgs

    if not torch.distributed.is_initialized():
        init_distributed_environment(world_size=world, rank=rank, local_rank=rank, backend="gloo")
    reset_context()
    publish(ServerArgs(model_path="dummy", tp_size=world, ep_size=1, pp_size=1, device="cpu", **server_args),
            role="test", ranks=SpawnRanks(world_rank=rank))
    if parallel_state._WORLD is not None:
        get_parallel().override_permanently(world_group=parallel_state._WORLD)
    if world > 1:  # a group of several ranks builds SGLang's GPU communicators (PyNccl, ...) unless told not to
        make_group = parallel_state.init_model_parallel_group

        def cpu_group(*args, **kwargs):
            kwargs.update(use_pynccl=False, use_custom_allreduce=False, use_mscclpp=False,
                          use_torch_symm_mem_allreduce=False)
            return make_group(*args, **kwargs)

        parallel_state.init_model_parallel_group = cpu_group
    initialize_model_parallel(backend="gloo")
    # CPU rope: the factory's CPU branch asserts yarn-only, and RotaryEmbedding imports vllm off-GPU.
    import sglang.srt.layers.attention.dsa.dsa_indexer as dsa_indexer
    import sglang.srt.layers.rotary_embedding.base as rope_base
    import sglang.srt.layers.rotary_embedding.factory as rope_factory
    import sglang.srt.models.deepseek_v2 as deepseek_v2

    rope_base._is_cpu = True

    def get_rope_wrapper(*args, device=None, **kwargs):
        return rope_factory.get_rope(*args, **kwargs)

    deepseek_v2.get_rope_wrapper = get_rope_wrapper
    dsa_indexer.get_rope_wrapper = get_rope_wrapper
    _IS_DIST_READY = True


def tiny_hf_config(**overrides: Any) -> Any:
    return load_hf_config(dict(TINY_FIELDS, **overrides))


def block_quant(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Block-128 FP8 quant of a weight: (w_fp8 [N, K], scale_inv [ceil(N/128), ceil(K/128)] f32)."""
    n, k = w.shape
    nb, kb = math.ceil(n / 128), math.ceil(k / 128)
    wp = torch.zeros(nb * 128, kb * 128, device=w.device)
    wp[:n, :k] = w.float()
    blocks = wp.view(nb, 128, kb, 128)
    scale = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-12) / 448.0
    q = (blocks / scale[:, None, :, None]).clamp(-448, 448).view(nb * 128, kb * 128)[:n, :k]
    return q.to(torch.float8_e4m3fn), scale


def checkpoint_tensors(cfg: Any, *, is_fp8: bool, seed: int = 0) -> dict[str, torch.Tensor]:
    """Synthetic tensors under GLM-5.3 checkpoint names (norms and biases random, not ones)."""
    return dict(iter_checkpoint_tensors(cfg, is_fp8=is_fp8, seed=seed))


def iter_checkpoint_tensors(cfg: Any, *, is_fp8: bool, seed: int = 0, device="cpu"):
    """checkpoint_tensors' (name, tensor) pairs one linear at a time, drawn on `device` (a GPU draws GLM-5.3's
    real shapes in seconds and holds one linear at a time beyond the model; its draw is not the CPU's)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    hidden = cfg.hidden_size
    sd: dict[str, torch.Tensor] = {}

    def rand(*shape, scale=0.02):
        return (torch.randn(*shape, generator=gen, device=device) * scale).to(torch.bfloat16)

    def norm(n, dtype=torch.bfloat16):
        return (1.0 + 0.1 * torch.randn(n, generator=gen, device=device)).to(dtype)

    def linear(name, n, k):
        w = rand(n, k)
        if is_fp8:
            sd[name], sd[name.replace(".weight", ".weight_scale_inv")] = block_quant(w)
        else:
            sd[name] = w
        yield from _drain(sd)

    heads, nope, rope, v = (cfg.num_attention_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim)
    sd["model.embed_tokens.weight"] = rand(cfg.vocab_size, hidden, scale=1.0)
    sd["lm_head.weight"] = rand(cfg.vocab_size, hidden)
    sd["model.norm.weight"] = norm(hidden)
    for layer in range(cfg.num_hidden_layers):
        p = f"model.layers.{layer}."
        a = p + "self_attn."
        sd[p + "input_layernorm.weight"] = norm(hidden)
        sd[p + "post_attention_layernorm.weight"] = norm(hidden)
        yield from linear(a + "q_a_proj.weight", cfg.q_lora_rank, hidden)
        sd[a + "q_a_layernorm.weight"] = norm(cfg.q_lora_rank)
        yield from linear(a + "q_b_proj.weight", heads * (nope + rope), cfg.q_lora_rank)
        yield from linear(a + "kv_a_proj_with_mqa.weight", cfg.kv_lora_rank + rope, hidden)
        sd[a + "kv_a_layernorm.weight"] = norm(cfg.kv_lora_rank)
        yield from linear(a + "kv_b_proj.weight", heads * (nope + v), cfg.kv_lora_rank)
        yield from linear(a + "o_proj.weight", hidden, heads * v)
        if cfg.indexer_types[layer] == "full":
            yield from linear(a + "indexer.wq_b.weight", cfg.index_n_heads * cfg.index_head_dim, cfg.q_lora_rank)
            yield from linear(a + "indexer.wk.weight", cfg.index_head_dim, hidden)
            sd[a + "indexer.weights_proj.weight"] = rand(cfg.index_n_heads, hidden)
            sd[a + "indexer.k_norm.weight"] = norm(cfg.index_head_dim, torch.float32)
            sd[a + "indexer.k_norm.bias"] = (0.1 * torch.randn(cfg.index_head_dim, generator=gen, device=device)).float()
        m = p + "mlp."
        if layer < cfg.first_k_dense_replace:
            for n, shape in (("gate_proj", (cfg.intermediate_size, hidden)), ("up_proj", (cfg.intermediate_size, hidden)),
                             ("down_proj", (hidden, cfg.intermediate_size))):
                yield from linear(m + n + ".weight", *shape)
        else:
            sd[m + "gate.weight"] = rand(cfg.n_routed_experts, hidden, scale=0.1)
            sd[m + "gate.e_score_correction_bias"] = (0.05 * torch.randn(cfg.n_routed_experts, generator=gen, device=device)).float()
            inter = cfg.moe_intermediate_size
            shapes = (("gate_proj", (inter, hidden)), ("up_proj", (inter, hidden)), ("down_proj", (hidden, inter)))
            for e in range(cfg.n_routed_experts):
                for n, shape in shapes:
                    yield from linear(m + f"experts.{e}.{n}.weight", *shape)
            for n, shape in shapes:
                yield from linear(m + f"shared_experts.{n}.weight", *shape)
    yield from _drain(sd)


def _drain(sd: dict):
    """Yield and forget every pair gathered so far (insertion order)."""
    while sd:
        name = next(iter(sd))
        yield name, sd.pop(name)


def build_tiny_model(*, is_fp8: bool = True, seed: int = 0, **overrides: Any) -> tuple[torch.nn.Module, Any]:
    """(model, hf_config): a loaded, post-processed tiny GlmMoeDsaForCausalLM on CPU in bf16."""
    init_single_process_dist()
    from sglang.srt.model_loader.loader import DefaultModelLoader
    from sglang.srt.models.glm4_moe import GlmMoeDsaForCausalLM

    cfg = tiny_hf_config(**overrides)
    quant_config = None
    if is_fp8:
        from sglang.srt.layers.quantization.fp8 import Fp8Config

        quant_config = Fp8Config(is_checkpoint_fp8_serialized=True, activation_scheme="dynamic",
                                 weight_block_size=[128, 128])
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cpu"):
            model = GlmMoeDsaForCausalLM(cfg, quant_config=quant_config)
        model.load_weights(iter(checkpoint_tensors(cfg, is_fp8=is_fp8, seed=seed).items()))
        DefaultModelLoader.postprocess_weights(model, torch.device("cpu"))
    finally:
        torch.set_default_dtype(previous)
    return model.eval(), cfg
