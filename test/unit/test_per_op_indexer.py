"""The per-op indexer path `time_layers.py --kind indexer` times (`test/kernels/glm53/per_op.IndexerPerOp.index`)
on CPU: its glue around SGLang's torch references (fp8_paged_mqa_logits_torch, topk_transform_pytorch_vectorized)
and its torch fallback select the oracle's list (`indexer.run_indexer` on the same x and q_lora) and write the same
index keys. SGLang's Triton GEMM and act_quant stand in as the oracle's `reference.linear` / `act_quant_ue8m0`:
the GEMM needs a GPU, and act_quant under Triton's interpreter rounds fp8 differently from the GPU."""

import dataclasses
import os
import sys

import pytest
import torch

from sgl_amd_mono.backends import reference as ref
from sgl_amd_mono.common import numerics as nm
from sgl_amd_mono.glm53 import launch_inputs as li
from sgl_amd_mono.glm53.indexer import run_indexer

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "kernels", "glm53"))
import per_op  # noqa: E402
import registry  # noqa: E402


def _index(geo, weights, st, *, sglang_refs: bool):
    p = per_op.IndexerPerOp(geo, 1, *weights, st.hidden.shape[0])
    p.linear = ref.linear
    p.quant = lambda t, block, fmt: ref.act_quant_ue8m0(t)
    if not sglang_refs:
        p.logits = p.transform = None
    aw = weights[0]
    x, _ = p.rms(st.hidden, aw.input_norm, geo.rms_eps, st.residual)
    ql, _ = p.rms(ref.linear(x, aw.qkv_a, aw.qkv_a_s)[:, : geo.q_lora], aw.q_a_norm, geo.rms_eps)
    buf = st.index_k_cache.clone()
    topk = p.index(x, ql, st.cos_sin, buf, st.out_loc, st.page_table, st.lengths)
    return p, x, ql, topk, buf


@pytest.mark.parametrize("width", [1, 2, 4])
@pytest.mark.parametrize("sglang_refs", [True, False])
def test_per_op_indexer_selects_the_oracles_list(width, sglang_refs):
    geo = li.tiny_geometry()
    kc = registry.get("indexer")
    weights, st = kc.inputs(geo, tp=1, width=width, context=300, kv_dtype=torch.bfloat16, seed=3, device="cpu")
    p, x, ql, topk, buf = _index(geo, weights, st, sglang_refs=sglang_refs)
    if sglang_refs:
        assert p.which.startswith("SGLang's fp8_paged_mqa_logits_torch"), p.which
    want_buf = st.index_k_cache.clone()
    want = run_indexer(weights[1], x=x, q_lora=ql, positions=st.positions, rope=geo.qk_rope, buf=want_buf,
                       out_loc=st.out_loc, page_table=st.page_table, lengths=st.lengths, topk=geo.index_topk,
                       cos_sin=st.cos_sin)
    assert torch.equal(buf, want_buf)
    assert nm.missed(topk, want) == 0.0 and nm.missed(want, topk) == 0.0
    # planted: the head weights negated selects other keys
    bad = (weights[0], dataclasses.replace(weights[1], weights_proj=-weights[1].weights_proj), weights[2])
    _, _, _, topk_bad, _ = _index(geo, bad, st, sglang_refs=sglang_refs)
    assert nm.missed(topk_bad, want) > 0.1
