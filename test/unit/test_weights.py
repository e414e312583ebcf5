"""weights.bind_model: SGLang's tensors bound in place, the one listed copy, and ValueErrors naming
a tensor of the wrong dtype or shape."""

from __future__ import annotations

import pytest
import torch

from sgl_amd_mono.glm53.config import Glm53Geometry
from sgl_amd_mono.glm53.weights import bind_model


def test_binds_in_place_and_stacks_the_shared_expert(tiny_fp8):
    model, cfg = tiny_fp8
    geo = Glm53Geometry.from_hf(cfg)
    w = bind_model(model, geo)
    a = model.model.layers[1].self_attn
    assert w.layers[1].attn.qkv_a.data_ptr() == a.fused_qkv_a_proj_with_mqa.weight.data_ptr()
    mlp = model.model.layers[1].mlp
    assert w.layers[1].ffn.w13.shape[0] == geo.n_routed + 1  # the copy: shared_experts as id n_routed
    assert torch.equal(w.layers[1].ffn.w13[geo.n_routed].float(), mlp.shared_experts.gate_up_proj.weight.float())
    assert w.copies_bytes > 0 and w.layers[3].indexer is None and w.layers[2].indexer is not None


def test_refuses_wrong_dtype_and_shape(tiny_fp8):
    model, cfg = tiny_fp8
    geo = Glm53Geometry.from_hf(cfg)
    a = model.model.layers[2].self_attn
    saved = a.o_proj.weight
    try:
        a.o_proj.weight = torch.nn.Parameter(saved.float(), requires_grad=False)
        with pytest.raises(ValueError, match=r"model\.layers\.2\.self_attn\.o_proj\.weight has dtype torch\.float32"):
            bind_model(model, geo)
        a.o_proj.weight = torch.nn.Parameter(saved[:, :128].contiguous(), requires_grad=False)
        with pytest.raises(ValueError, match=r"model\.layers\.2\.self_attn\.o_proj\.weight has shape \(256, 128\)"):
            bind_model(model, geo)
    finally:
        a.o_proj.weight = saved
    bind_model(model, geo)  # restored: binds again
