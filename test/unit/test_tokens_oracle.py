"""The tokens kind's oracle (`test/kernels/glm53/registry._tokens_oracle`) embeds ids drawn over the whole vocab:
given one rank's weights alone at TP > 1 (1/tp of the embedding rows) it refuses them with a ValueError naming the
rows, where a gather past the rows would be an out-of-bounds read (on a GPU, a device-side assert)."""

import dataclasses
import os
import sys

import pytest
import torch

from sgl_amd_mono.glm53 import launch_inputs as li

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "kernels", "glm53"))
import registry  # noqa: E402


def test_tokens_oracle_refuses_one_rank_alone():
    geo = dataclasses.replace(li.tiny_geometry(), moe_inter=256)  # shards at TP 2
    kc = registry.get("tokens")
    st = kc.step(geo, width=2, context=256, kv_dtype=torch.bfloat16, seed=1, device="cpu")
    assert int(st.input_ids.max()) >= geo.shard(2).vocab  # an id past rank 0's rows: the case refused
    outs, _ = kc.oracle(geo, kc.weights(geo, tp=1, seed=0, device="cpu"), st)
    assert outs["out"].shape[0] == 2
    with pytest.raises(ValueError, match=r"whole vocab \(256 rows\).*hold 128"):
        kc.oracle(geo, kc.weights(geo, tp=2, seed=0, device="cpu"), st)
