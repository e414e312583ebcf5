"""Tile choices the shared launch resolves at build: MoE down's column slice for a grid, attention splits
for a width (`launch_shared.Tiles.for_programs` / `for_width`)."""

import pytest

from sgl_amd_mono.glm53 import launch_inputs as li
from sgl_amd_mono.glm53 import launch_shared as ls


@pytest.mark.parametrize("programs,want", [(132, 48), (256, 24), (264, 24), (1, 6144)])
def test_down_slice_covers_hidden_in_one_round(programs, want):
    geo = li.glm53_geometry()
    dcw = ls.Tiles().for_programs(geo, programs).dcw
    assert dcw == want
    assert -(-geo.hidden // dcw) <= programs  # every output slice has its own program


def test_down_slice_given_is_kept():
    assert ls.Tiles(dcw=96).for_programs(li.glm53_geometry(), 132).dcw == 96


@pytest.mark.parametrize("width,want", [(1, 32), (2, 32), (4, 32), (8, 16)])
def test_attention_splits_by_width(width, want):
    assert ls.Tiles().for_width(width).nsplit == want
    assert ls.Tiles(nsplit=8).for_width(width).nsplit == 8  # a given split count is kept


def test_built_launch_resolves_both():
    """describe() of a built width counts the tasks of the resolved tiles (no 0-sized stage)."""
    geo = li.glm53_geometry()
    prog = ls.describe(geo, tp=8, width=1, tiles=ls.Tiles(), n_programs=132)
    tasks = {s.name: s.n_tasks for s in prog.stages}
    assert tasks["attn"] == 32 and tasks["down"] == 128
