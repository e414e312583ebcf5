"""The shared launch compiles for gfx950 and sm_90 through Triton's AOT path on a CPU (tiny geometry;
`python -m sgl_amd_mono.backends.triton.survey` reports GLM-5.3's real build keys)."""

import pytest

from sgl_amd_mono.backends.triton import survey
from sgl_amd_mono.glm53 import launch_inputs as li


@pytest.mark.parametrize("target", ["gfx950", "sm_90"])
def test_compiles(target):
    import torch

    r = survey.compile_one(target, geo=li.tiny_geometry(), tp=1, width=2, kv_dtype=torch.bfloat16, n_programs=8)
    print(r)
    if target == "sm_90":
        assert r["regs"] > 0 and r["spill_bytes"] >= 0
    else:
        assert r["vgprs"] > 0 and r["vgpr_spill"] >= 0
