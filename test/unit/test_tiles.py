"""Tile choices the shared launch resolves at build: MoE down's column slice for a grid, attention splits
for a width (`launch_shared.Tiles.for_programs` / `for_width`)."""

import pytest

from sgl_amd_mono.glm53 import launch_inputs as li
from sgl_amd_mono.glm53 import launch_shared as ls


@pytest.mark.parametrize("programs,parts,want", [(132, 1, 48), (256, 1, 24), (264, 1, 24), (1, 1, 6144),
                                                  (132, 2, 96), (256, 2, 48), (1, 2, 6144)])
def test_down_slice_covers_hidden_in_one_round(programs, parts, want):
    geo = li.glm53_geometry()
    dcw = ls.Tiles(dn_parts=parts).for_programs(geo, programs).dcw
    assert dcw == want
    # every (output slice, part of the experts) task has its own program (a grid of 1 runs both parts)
    assert -(-geo.hidden // dcw) * parts <= max(programs, parts)


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
