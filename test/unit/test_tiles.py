"""Tile choices the shared launch resolves at build: MoE down's column slice for a grid, MoE up's k parts
for a grid and width, attention splits for a width (`backends/triton/tiles.Tiles.for_programs` / `for_width`)."""

import pytest

import torch

from sgl_amd_mono.backends.triton.tiles import Tiles
from sgl_amd_mono.glm53 import launch_inputs as li
from sgl_amd_mono.glm53.kinds import shared
from sgl_amd_mono.glm53.kinds.dims import layer_dims, max_used_experts


@pytest.mark.parametrize("programs,parts,want", [(132, 1, 48), (256, 1, 24), (264, 1, 24), (1, 1, 6144),
                                                  (132, 2, 96), (256, 2, 48), (1, 2, 6144)])
def test_down_slice_covers_hidden_in_one_round(programs, parts, want):
    geo = li.glm53_geometry()
    dcw = Tiles(dn_parts=parts).for_programs(geo, programs, tp=8, width=1).dcw
    assert dcw == want
    # every (output slice, part of the experts) task has its own program (a grid of 1 runs both parts)
    assert -(-geo.hidden // dcw) * parts <= max(programs, parts)


def test_down_slice_given_is_kept():
    assert Tiles(dcw=96).for_programs(li.glm53_geometry(), 132, tp=8, width=1).dcw == 96


@pytest.mark.parametrize("width,want", [(1, 6), (2, 4), (4, 4), (8, 4)])
def test_up_parts_fill_one_round_at_one_row(width, want):
    geo = li.glm53_geometry()
    t = Tiles().for_programs(geo, 132, tp=8, width=width)
    assert t.ks_u == want
    # one row's up tasks (its top_k + 1 experts' column tiles x k parts) fit one round of the grid, with
    # fewer k blocks a task than 4 parts leave
    tasks = max_used_experts(geo, width) * (geo.shard(8).moe_inter // t.bu) * t.ks_u
    if width == 1:
        assert tasks <= 132 and (geo.hidden // 128) // t.ks_u < (geo.hidden // 128) // 4
    assert Tiles(ks_u=8).for_programs(geo, 132, tp=8, width=width).ks_u == 8  # a given count is kept
    assert Tiles().for_target("gfx950").for_programs(geo, 256, tp=8, width=width).ks_u == 4


@pytest.mark.parametrize("width,want", [(1, 32), (2, 32), (4, 32), (8, 16)])
def test_attention_splits_by_width(width, want):
    assert Tiles().for_width(width).nsplit == want
    assert Tiles(nsplit=8).for_width(width).nsplit == 8  # a given split count is kept


@pytest.mark.parametrize("width,want", [(1, 0), (2, 0), (4, 4), (8, 4)])
def test_index_lists_by_width(width, want):
    """sel1's lists (index_compact -1) resolve by width, a given value is kept, and a build that cannot list (three
    digits, digit 1 in block histograms) resolves to none; a list it cannot build is refused with both reasons."""
    assert Tiles().for_width(width).index_compact == want
    assert Tiles(index_compact=0).for_width(width).index_compact == 0
    assert Tiles(index_compact=2).for_width(width).index_compact == 2
    assert Tiles(index_digits=3, index_atomics=2).for_width(width).index_compact == 0
    assert Tiles(index_sel_atomics=False).for_width(width).index_compact == 0
    with pytest.raises(ValueError, match="index_compact needs index_digits 4 .* and index_sel_atomics"):
        Tiles(index_compact=4, index_sel_atomics=False).resolve(li.glm53_geometry(), tp=8, width=width, n_programs=132)
    with pytest.raises(ValueError, match="index_compact 3 is neither"):
        Tiles(index_compact=3).resolve(li.glm53_geometry(), tp=8, width=width, n_programs=132)


@pytest.mark.parametrize("width,want", [(1, 1), (2, 1), (4, 1), (8, 0)])
def test_index_pair_by_width(width, want):
    """The pair digits (index_pair -1) resolve by width, a given value is kept, and a build that cannot count the pairs
    (three digits, digit 1 in block histograms, sel2's relisting) resolves to none; a pair it cannot build is refused
    with every reason, and a value that is not -1, 0 or 1 is refused."""
    geo = li.glm53_geometry()
    assert Tiles().for_width(width).index_pair == want
    assert Tiles(index_pair=0).for_width(width).index_pair == 0
    assert Tiles(index_pair=1).for_width(width).index_pair == 1
    assert Tiles(index_digits=3, index_atomics=2).for_width(width).index_pair == 0
    assert Tiles(index_sel_atomics=False).for_width(width).index_pair == 0
    assert Tiles(index_relist=1).for_width(width).index_pair == 0
    with pytest.raises(ValueError, match="index_pair needs index_digits 4 .is 3., index_sel_atomics .is True. and "
                                         "index_relist 0 .is 1."):
        Tiles(index_pair=1, index_digits=3, index_atomics=2, index_relist=1).resolve(geo, tp=8, width=width,
                                                                                    n_programs=132)
    with pytest.raises(ValueError, match="index_pair 2 is not -1 .by width., 0 or 1"):
        Tiles(index_pair=2).resolve(geo, tp=8, width=width, n_programs=132)


@pytest.mark.parametrize("width,want", [(1, 0), (2, 0), (4, 0), (8, 1)])
def test_index_keep_scores_by_width(width, want):
    """The scores' cache policy (index_keep_scores -1) resolves by width, a given value is kept, gfx950 keeps none,
    the build's constant follows it, and a value that is not -1, 0 or 1 is refused."""
    from sgl_amd_mono.backends.triton.kernel_indexer import constexprs

    geo = li.glm53_geometry()
    assert Tiles().for_width(width).index_keep_scores == want
    assert Tiles(index_keep_scores=1).for_width(width).index_keep_scores == 1
    assert Tiles(index_keep_scores=0).for_width(width).index_keep_scores == 0
    assert Tiles().for_target("gfx950").for_width(width).index_keep_scores == 0
    t = Tiles().resolve(geo, tp=8, width=width, n_programs=132, kind="indexer")
    d = layer_dims(geo, tp=8, width=width, tiles=t, n_programs=132, kv_dtype=torch.bfloat16)
    assert constexprs(d)["IKEEP"] == bool(want)
    with pytest.raises(ValueError, match="index_keep_scores 2 is not -1 .by width., 0 or 1"):
        Tiles(index_keep_scores=2).resolve(geo, tp=8, width=width, n_programs=132)


@pytest.mark.parametrize("width,want", [(1, 128), (2, 128), (4, 256), (8, 256)])
def test_index_block_by_width(width, want):
    """The score loop's block (index_block 0) resolves by width, a given value is kept (gfx950's 128 too), and a
    block that is not whole index-K pages is refused."""
    geo = li.glm53_geometry()
    assert Tiles().resolve(geo, tp=8, width=width, n_programs=132, kind="indexer").index_block == want
    assert Tiles(index_block=64).for_width(width).index_block == 64
    assert Tiles().for_target("gfx950").for_width(width).index_block == 128
    with pytest.raises(ValueError, match="index_block 96 is not a power of two >= 64"):
        Tiles(index_block=96).resolve(geo, tp=8, width=width, n_programs=132)


def test_built_launch_resolves_both():
    """The table's task counts at a resolved build (`Tiles.resolve`): no 0-sized stage."""
    geo = li.glm53_geometry()
    tiles = Tiles().resolve(geo, tp=8, width=1, n_programs=132)
    tasks = shared.TABLE.task_counts(layer_dims(geo, tp=8, width=1, tiles=tiles, n_programs=132,
                                                kv_dtype=torch.bfloat16))
    assert tasks["attn"] == 32 and tasks["down"] == 128 and tasks["up"] == 9 * 2 * 6
