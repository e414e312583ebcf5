"""The shared launch compiles for gfx950 and sm_90 through Triton's AOT path on a CPU (tiny geometry;
`python -m sgl_amd_mono.backends.triton.survey` reports GLM-5.3's real build keys)."""

import pytest

from sgl_amd_mono.backends.triton import survey
from sgl_amd_mono.glm53 import launch_inputs as li


@pytest.mark.parametrize("target,variant", [("gfx950", "pp2"), ("sm_90", "baseline"), ("sm_90", "pp2")])
def test_compiles(target, variant):
    """Both build options (one program a SM at 8 warps, two at 4) compile for both targets."""
    import torch

    from sgl_amd_mono.backends.triton.tiles import Tiles

    tiles = Tiles().variant(variant)
    r = survey.compile_one(target, geo=li.tiny_geometry(), tp=1, width=2, kv_dtype=torch.bfloat16,
                           n_programs=8 * tiles.progs_per_sm, tiles=tiles)
    r.pop("kernel")
    print(r)
    assert r["num_warps"] == (4 if variant == "pp2" else 8)
    # the tiny geometry spills nothing on either target (a parse failure reads -1 and fails too)
    if target == "sm_90":
        assert 0 < r["regs"] <= 255 and r["spill_bytes"] == 0, r
    else:
        assert 0 < r["vgprs"] <= 512 and r["vgpr_spill"] == 0, r


# gfx950 VGPR spills (to scratch) allowed at GLM-5.3 TP8 width 1: measured 0 with Tiles.for_target("gfx950")
# (4 wave64s, nsplit 8), 597 with the sm_90 tiles (8 wave64s, nsplit 16); results/survey_gfx950.txt.
# The tiny geometry cannot tell them apart (0 spills either way), so this compiles the real key (~15 s).
GFX950_VGPR_SPILL_MAX = 0


def test_gfx950_tiles_do_not_spill():
    import torch

    from sgl_amd_mono.backends.triton.tiles import Tiles

    tiles = Tiles().for_target("gfx950")
    r = survey.compile_one("gfx950", geo=li.glm53_geometry(), tp=8, width=1, kv_dtype=torch.bfloat16,
                           n_programs=256, tiles=tiles)
    r.pop("kernel")
    print(r)
    assert r["num_warps"] == 4 and r["vgprs"] > 0
    assert 0 <= r["vgpr_spill"] <= GFX950_VGPR_SPILL_MAX, r
    assert r["resident"] >= r["grid"], r  # the whole grid fits the CUs (VGPRs and LDS)


H200_SMEM_BYTES = 232448  # the opt-in SMEM a block may use on sm_90 (Triton's check at load)


@pytest.mark.parametrize("tp", [1, 8])
def test_sm90_shared_memory_fits(tp):
    """GLM-5.3's real build keys at TP1 and TP8 fit sm_90's SMEM (else the launch fails to load,
    as TP1 did on the H200 when MoE down unrolled all 16 k blocks of an expert: 506892 bytes)."""
    import torch

    r = survey.compile_one("sm_90", geo=li.glm53_geometry(), tp=tp, width=1, kv_dtype=torch.bfloat16,
                           n_programs=132)
    r.pop("kernel")
    print(r)
    assert 0 < r["smem"] <= H200_SMEM_BYTES, r
