"""The GLM-5.3 (GlmMoeDsaForCausalLM) MonoSpec: devices, features, requirements, numerics, refusals.

Importing this module is cheap: no kernel is compiled and no weight is touched; `build`
imports the runner lazily.
"""

from __future__ import annotations

import functools
from typing import Any

from sglang.kernels.plugin_kernels.amd.spec import (
    MONOKERNEL_API_VERSION,
    BuildContext,
    DeviceLimits,
    Feature,
    MonoSpec,
    Numerics,
    NumericsKind,
    Requirements,
)

NAME = "glm53"

DEVICES = {
    "gfx950": DeviceLimits(widths=(1, 2, 4, 8), tp_sizes=(4, 8), resident_blocks=256),
    "gfx942": DeviceLimits(widths=(1, 2, 4, 8), tp_sizes=(4, 8), resident_blocks=304),
    "sm_90": DeviceLimits(widths=(1, 2, 4, 8), tp_sizes=(1, 2, 4, 8), resident_blocks=132),
}

BOUNDS = {
    "tokens.hidden.cosine": 0.999,
}


def _config_disable_reasons(cfg: Any, hf_config: Any) -> list[str]:
    return []


def _model_disable_reasons(model: Any, hf_config: Any, copies: dict) -> list[str]:
    return []


def _build(model: Any, hf_config: Any, ctx: BuildContext, *, backend: str):
    from sgl_amd_mono.glm53 import runner

    return runner.build(model, hf_config, ctx, backend=backend)


def make_spec(*, backend: str = "launch") -> MonoSpec:
    """The GLM-5.3 MonoSpec whose build runs `backend` ("launch" for a server, "reference" in tests)."""
    return MonoSpec(
        name=NAME,
        devices=DEVICES,
        features=frozenset({Feature.SPECULATIVE_DECODING}),
        requires=Requirements(dtypes=frozenset({"bfloat16"}), attention_backends=frozenset({"dsa", "nsa"})),
        numerics=Numerics(kind=NumericsKind.TOLERANCE, bounds=BOUNDS),
        model_disable_reasons=_model_disable_reasons,
        build=functools.partial(_build, backend=backend),
        api_version=MONOKERNEL_API_VERSION,
        config_disable_reasons=_config_disable_reasons,
    )


SPEC = make_spec()
