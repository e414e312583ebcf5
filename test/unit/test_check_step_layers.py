"""check_step.py --layers: the real-shape step's truncated config keeps the preset's layer kinds and ends on an
indexer MoE layer, so every launch kind runs (5 layers fit an 80 GB card; 7 is the preset's own truncation)."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "kernels", "glm53"))

from check_step import real_overrides  # noqa: E402

import tiny_glm53 as tg  # noqa: E402

from sgl_amd_mono.glm53.config import GLM53_PRESET, Glm53Geometry  # noqa: E402
from sgl_amd_mono.glm53.runner_triton import layer_kinds  # noqa: E402


def _kinds(cfg: dict) -> list[str]:
    """Each layer's launch kind, as the runner picks it from the HF config check_step builds SGLang's model from."""
    return layer_kinds(Glm53Geometry.from_hf(tg.tiny_hf_config(**cfg)))


def test_seven_layers_are_the_presets_truncation():
    cfg = real_overrides(7)
    assert cfg["indexer_types"] == GLM53_PRESET["indexer_types"][:7]
    assert _kinds(cfg) == ["tokens", "dense", "dense", "shared", "shared", "shared", "indexer"]


def test_five_layers_keep_a_shared_and_an_indexer_moe_layer():
    cfg = real_overrides(5)
    assert cfg["num_hidden_layers"] == 5 and len(cfg["indexer_types"]) == 5
    assert _kinds(cfg) == ["tokens", "dense", "dense", "shared", "indexer"]


def test_fewer_than_five_layers_refused():
    with pytest.raises(ValueError, match="at least 5"):
        real_overrides(4)
