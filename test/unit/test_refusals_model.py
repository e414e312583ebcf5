"""model_disable_reasons on SGLang's own tiny GlmMoeDsaForCausalLM (CPU, block FP8) with planted defects."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from tiny_glm53 import build_tiny_model  # noqa: E402

from sgl_amd_mono.glm53.spec import SPEC, make_spec  # noqa: E402

# CPU SGLang does not fuse shared_experts (it does on gfx942+ / sm_80+), so the defects are checked
# with the CPU spec; the server's SPEC is checked to refuse exactly that on CPU.
CPU_SPEC = make_spec(backend="reference", is_expert_fusion_required=False)


@pytest.fixture(scope="module")
def tiny():
    return build_tiny_model(is_fp8=True)


def _param(t: torch.Tensor) -> torch.nn.Parameter:
    return torch.nn.Parameter(t, requires_grad=False)


def _plant(mp, module: torch.nn.Module, name: str, value) -> None:
    """Set a module's parameter, submodule or attribute for one test; restored after it. Parameters and
    submodules go through the module's own dicts (pytest >= 9.2 restores module attributes that live
    outside __dict__ by deleting them)."""
    for table in (module._parameters, module._modules, module._buffers):
        if name in table:
            mp.setitem(table, name, value)
            return
    mp.setattr(module, name, value)


def _attn(m, i=1):
    return m.model.layers[i].self_attn


# (id, plant(monkeypatch, model), text a reason names)
DEFECTS = [
    ("embed_fp16", lambda mp, m: _plant(mp, m.model.embed_tokens, "weight", _param(m.model.embed_tokens.weight.half())),
     "model.embed_tokens.weight dtype float16"),
    ("lm_head_quantized", lambda mp, m: _plant(mp, m.lm_head, "quant_method", object()), "lm_head quant_method object"),
    ("q_b_rows", lambda mp, m: _plant(mp, _attn(m).q_b_proj, "weight", _param(_attn(m).q_b_proj.weight[:-128])),
     "model.layers.1.self_attn.q_b_proj.weight shape"),
    ("o_proj_shuffled", lambda mp, m: mp.setattr(_attn(m).o_proj.weight, "is_shuffled", True, raising=False),
     "model.layers.1.self_attn.o_proj.weight is shuffled"),
    ("qkv_a_preshuffled", lambda mp, m: mp.setattr(_attn(m).fused_qkv_a_proj_with_mqa, "aiter_bpreshuffled", True, raising=False),
     "fused_qkv_a_proj_with_mqa is preshuffled"),
    ("w_kc_fp32", lambda mp, m: _plant(mp, _attn(m), "w_kc", _attn(m).w_kc.float()), "self_attn.w_kc dtype float32"),
    ("w_scale_vector", lambda mp, m: _plant(mp, _attn(m), "w_scale", torch.ones(4)), "self_attn.w_scale"),
    ("indexer_missing", lambda mp, m: _plant(mp, _attn(m), "indexer", None), "model.layers.1.self_attn.indexer is missing"),
    ("k_norm_fp16", lambda mp, m: _plant(mp, _attn(m).indexer.k_norm, "weight", _param(_attn(m).indexer.k_norm.weight.half())),
     "indexer.k_norm.weight dtype float16"),
    ("k_norm_rms", lambda mp, m: _plant(mp, _attn(m).indexer, "k_norm", torch.nn.RMSNorm(128)), "k_norm RMSNorm is not LayerNorm"),
    ("bias_bf16", lambda mp, m: _plant(mp, m.model.layers[1].mlp.gate, "e_score_correction_bias",
                                           _param(m.model.layers[1].mlp.gate.e_score_correction_bias.bfloat16())),
     "gate.e_score_correction_bias dtype bfloat16"),
    ("experts_bf16", lambda mp, m: _plant(mp, m.model.layers[2].mlp.experts, "w13_weight",
                                              _param(m.model.layers[2].mlp.experts.w13_weight.bfloat16())),
     "model.layers.2.mlp.experts.w13_weight dtype bfloat16"),
    ("dense_bf16", lambda mp, m: _plant(mp, m.model.layers[0].mlp.gate_up_proj, "weight",
                                            _param(m.model.layers[0].mlp.gate_up_proj.weight.bfloat16())),
     "model.layers.0.mlp.gate_up_proj.weight dtype bfloat16"),
    ("scale_missing", lambda mp, m: mp.delitem(_attn(m, 3).o_proj._parameters, "weight_scale_inv"),
     "model.layers.3.self_attn.o_proj.weight_scale_inv is missing"),
]


def test_cpu_model_passes_the_cpu_spec(tiny):
    model, hf_config = tiny
    assert CPU_SPEC.model_disable_reasons(model, hf_config, {}) == []


def test_server_spec_requires_the_fused_shared_expert(tiny):
    model, hf_config = tiny
    reasons = SPEC.model_disable_reasons(model, hf_config, {})
    moe_layers = [i for i in range(hf_config.num_hidden_layers) if i >= hf_config.first_k_dense_replace]
    assert reasons == [
        f"model.layers.{i}.mlp.experts num_fused_shared_experts 0 is not n_shared_experts 1 "
        "(shared_experts as expert 8, as SGLang fuses it on gfx942+ and sm_80+)"
        for i in moe_layers
    ]


@pytest.mark.parametrize("name,plant,names", DEFECTS, ids=[d[0] for d in DEFECTS])
def test_planted_defect_is_refused(tiny, monkeypatch, name, plant, names):
    model, hf_config = tiny
    plant(monkeypatch, model)
    reasons = CPU_SPEC.model_disable_reasons(model, hf_config, {})
    assert any(names in r for r in reasons), reasons


def test_a_model_of_another_geometry_is_refused_not_crashed(tiny):
    """A config of 3 heads over the 4-head model: every head-sized tensor of every layer is named with
    its shape and the 3-head shape (q_b_proj 4*128 rows, o_proj 4*64 columns, w_kc / w_vc 4 heads);
    o_proj's scale has ceil(192/128) = ceil(256/128) blocks either way, and nothing else depends on heads.
    The clean model under its own config has no reason (test_cpu_model_passes_the_cpu_spec)."""
    model, hf_config = tiny
    assert hf_config.num_attention_heads == 4
    other = type(hf_config)(**{**hf_config.to_dict(), "num_attention_heads": 3})
    reasons = CPU_SPEC.model_disable_reasons(model, other, {})
    assert reasons == [
        reason
        for i in range(hf_config.num_hidden_layers)
        for reason in (
            f"model.layers.{i}.self_attn.q_b_proj.weight shape [512, 128] is not [384, 128]",
            f"model.layers.{i}.self_attn.q_b_proj.weight_scale_inv shape [4, 1] is not [3, 1]",
            f"model.layers.{i}.self_attn.o_proj.weight shape [256, 256] is not [256, 192]",
            f"model.layers.{i}.self_attn.w_kc shape [4, 64, 128] is not [3, 64, 128]",
            f"model.layers.{i}.self_attn.w_vc shape [4, 128, 64] is not [3, 128, 64]",
        )
    ]
