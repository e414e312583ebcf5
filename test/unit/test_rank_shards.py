"""TP shards cut from one full draw of weights (`launch_inputs.shard_weights`), and the oracle summing rank
partials in rank order (`layer.shared_layer_ranks`): at TP2 it gives the TP1 layer up to bf16 roundings; a
shard cut wrongly does not."""

import dataclasses

import pytest
import torch

from sgl_amd_mono.common import numerics as nm
from sgl_amd_mono.glm53 import launch_inputs as li
from sgl_amd_mono.glm53 import layer

# Measured (tiny geometry, moe_inter 256 so a rank keeps whole 128-blocks): o 3.0e-3, residual_out 6.0e-4,
# out 1.2e-2, expert_weights 6.4e-6, ids equal. The rank partials are bf16 and their sum is rounded once,
# where TP1 rounds o once: differences of a bf16 step. Bounds ~3x; the control (rank 1 given rank 0's
# slices) fails each.
BOUNDS = {"shared.o.rel": 1e-2, "shared.residual_out.rel": 2e-3, "shared.out.rel": 4e-2, "shared.expert_weights.max_abs": 2e-5}


def _geo():
    return dataclasses.replace(li.tiny_geometry(), moe_inter=256)


def _values(geo, shards):
    st = li.random_step(geo, width=2, context=300, kv_dtype=torch.bfloat16, seed=4)
    kw = dict(hidden=st.hidden, residual=st.residual, cos_sin=st.cos_sin, out_loc=st.out_loc, topk_slots=st.topk_slots)
    full = layer.shared_layer(geo, *li.random_weights(geo, tp=1, seed=3), kv_cache=st.kv_cache.clone(), **kw)
    ranks = layer.shared_layer_ranks(geo, shards, kv_cache=st.kv_cache.clone(), **kw)
    return {n: nm.measure(n, ranks[n.split(".")[1]], full[n.split(".")[1]]) for n in BOUNDS}


def test_rank_partials_sum_to_the_full_layer():
    geo = _geo()
    vals = _values(geo, [li.random_weights(geo, tp=2, seed=3, rank=r) for r in range(2)])
    for n, v in vals.items():
        assert nm.passes(n, v, BOUNDS[n]), (n, v)
    bad = _values(geo, [li.random_weights(geo, tp=2, seed=3, rank=0)] * 2)  # rank 1 cut as rank 0
    for n, v in bad.items():
        assert not nm.passes(n, v, BOUNDS[n]), (n, v)


def test_shards_partition_the_full_weights():
    """Every rank's slices, put back together in rank order, are the full tensors (replicated ones equal)."""
    geo = _geo()
    aw, mw = li.random_weights(geo, tp=1, seed=3)
    shards = [li.random_weights(geo, tp=2, seed=3, rank=r) for r in range(2)]
    i = geo.moe_inter // 2
    assert torch.equal(torch.cat([s[0].q_b for s in shards]).float(), aw.q_b.float())
    assert torch.equal(torch.cat([s[0].o_proj for s in shards], 1).float(), aw.o_proj.float())
    assert torch.equal(torch.cat([s[0].w_kc for s in shards]), aw.w_kc)
    gate = torch.cat([s[1].w13[:, :i] for s in shards], 1)
    up = torch.cat([s[1].w13[:, i:] for s in shards], 1)
    assert torch.equal(torch.cat((gate, up), 1).float(), mw.w13.float())
    assert torch.equal(torch.cat([s[1].w2 for s in shards], 2).float(), mw.w2.float())
    assert all(torch.equal(s[0].qkv_a.float(), aw.qkv_a.float()) and torch.equal(s[1].gate, mw.gate) for s in shards)
    assert shards[0][0].w_kc.stride() == aw.w_kc.stride()  # SGLang's layout kept


def test_a_shard_that_splits_a_scale_block_is_refused():
    with pytest.raises(ValueError, match="moe_inter 64 a rank is not a multiple of 128"):
        li.random_weights(li.tiny_geometry(), tp=2, seed=3, rank=1)
