"""precompile.py binds views of one uninitialised buffer in the shapes, strides and dtypes of
`precompile.build_tensors`; its builds warm the cache the check and timing scripts hit only if those equal the
scripts' own draws (the registry's `weights`, through the kind's `tensors`). Checked here for every kind at TP 1
and 2 on the tiny geometry, on CPU (the plan on the meta device)."""

import dataclasses
import os
import sys

import pytest
import torch

from sgl_amd_mono.backends.triton import kinds
from sgl_amd_mono.backends.triton.tiles import Tiles
from sgl_amd_mono.common.launch import LaunchOptions
from sgl_amd_mono.glm53 import launch_inputs as li

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "kernels", "glm53"))
import precompile  # noqa: E402
import registry  # noqa: E402

GEO = dataclasses.replace(li.tiny_geometry(), moe_inter=256)  # shards at TP 2


def _layout(tensors: dict) -> dict:
    return {k: (tuple(v.shape), v.stride(), v.dtype) for k, v in tensors.items() if isinstance(v, torch.Tensor)}


@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("kind", ["tokens", "dense", "indexer", "shared", "tail"])
def test_build_tensors_are_the_scripts_draw(kind, tp):
    kc = registry.get(kind)
    plan = kinds.plan(kind, GEO, tp=tp, width=1, kv_dtype=torch.bfloat16, device="meta",
                      tiles=Tiles(index_slices=4, index_block=64, index_scan=128), options=LaunchOptions(n_programs=8))
    built = _layout(precompile.build_tensors(plan, GEO, tp))
    drawn = _layout(kc.tensors(kc.weights(GEO, tp=tp, seed=0, device="cpu")))
    assert built == {k: drawn.get(k) for k in built}
    assert set(built) == {b.name for b in plan.table.weights}


def test_a_strided_weight_is_told_apart():  # the comparison sees a transposed view's strides
    kc = registry.get("shared")
    drawn = kc.tensors(kc.weights(GEO, tp=1, seed=0, device="cpu"))
    w = drawn["w_kc"]
    assert _layout({"w": w}) != _layout({"w": w.contiguous()})
