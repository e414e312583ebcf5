"""The GLM-5.3 (GlmMoeDsaForCausalLM) MonoSpec: devices, features, requirements, numerics, refusals.

Importing this module is cheap: no kernel is compiled and no weight is touched; `build` imports the
runner lazily. The refusals live in refusals.py (before load) and refusals_model.py (after load).
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

from sgl_amd_mono.glm53 import refusals
from sgl_amd_mono.glm53.bounds import SERVING_VS_SGLANG
from sgl_amd_mono.glm53.served import serving

NAME = "glm53"

# Step rows a launch serves, per TP size. Seed 004 (MI355X) builds 2/4/8 rows at TP8 and 2/4 at TP4;
# the new launches also take 1 row. DeviceLimits holds one widths tuple per ISA, so DEVICES declares the
# union, and a width a TP size does not build (8 rows at TP4, TP2, TP1) is the runner's to hand back:
# at build time `model.forward` is still SGLang's own (the binding installs its wrapper after build),
# so the built object keeps it and runs such a step through it. `launch_widths` is that per-TP table.
WIDTHS_BY_TP = {8: (1, 2, 4, 8), 4: (1, 2, 4), 2: (1, 2, 4), 1: (1, 2, 4)}
WIDTHS = tuple(sorted({w for ws in WIDTHS_BY_TP.values() for w in ws}))

DEVICES = {
    # MI355X: 256 CUs, one resident workgroup a CU; TP4 and TP8 as seed 004, and TP1 / TP2 as on sm_90 (what
    # the launches build and serve there is `served.py`'s)
    "gfx950": DeviceLimits(widths=WIDTHS, tp_sizes=(1, 2, 4, 8), resident_blocks=256),
    # MI300X: 304 CUs
    "gfx942": DeviceLimits(widths=WIDTHS, tp_sizes=(1, 2, 4, 8), resident_blocks=304),
    # H200: 132 SMs; also TP1 / TP2, where the development machines run
    "sm_90": DeviceLimits(widths=WIDTHS, tp_sizes=(1, 2, 4, 8), resident_blocks=132),
}


def launch_widths(*, isa: str, tp: int) -> tuple[int, ...]:
    """The widths the launches build at this TP size on `isa` (the others run SGLang's forward)."""
    return tuple(w for w in WIDTHS_BY_TP.get(tp, ()) if w in DEVICES[isa].widths)


# Bounds against SGLang's standard path on the same GPU (serving vs SGLang): `bounds.py` lists every table.
BOUNDS = SERVING_VS_SGLANG

REQUIRES = Requirements(
    dtypes=frozenset({"bfloat16"}),
    attention_backends=frozenset({"dsa", "nsa"}),  # nsa: SGLang's deprecated alias of dsa
    server_args=refusals.SERVER_ARGS,
    hf_config=refusals.HF_EXACT,
    env=refusals.ENV,
)


def _config_disable_reasons(cfg: Any, hf_config: Any) -> list[str]:
    from sglang.srt.kernel_plugins.amd.binding import device_isa

    tokens = cfg.speculative_num_draft_tokens if cfg.speculative_algorithm is not None else None
    isa = device_isa()  # None without a GPU (the binding refuses that itself); explain asks `serving` for its --isa
    return (
        refusals.model_config_reasons(hf_config=hf_config, tp_size=int(cfg.tp_size))
        + refusals.server_reasons(cfg)
        + refusals.verify_tokens_reasons(tokens=tokens, widths=WIDTHS)
        + (list(serving(isa, int(cfg.tp_size)).reasons) if isa is not None else [])
    )


def _model_disable_reasons(model: Any, hf_config: Any, copies: dict, *, is_expert_fusion_required: bool) -> list[str]:
    from sgl_amd_mono.glm53.refusals_model import model_reasons

    return model_reasons(model=model, hf_config=hf_config, is_expert_fusion_required=is_expert_fusion_required)


def _build(model: Any, hf_config: Any, ctx: BuildContext, *, backend: str, on_error: str):
    from sgl_amd_mono.glm53 import runner

    return runner.build(model, hf_config, ctx, backend=backend, on_error=on_error)


def make_spec(*, backend: str = "triton", is_expert_fusion_required: bool = True, on_error: str = "fault") -> MonoSpec:
    """The GLM-5.3 MonoSpec whose build runs `backend` ("triton": the launches, a server's; "reference": the torch
    step, tests and check tools).

    on_error: what a launch does on a missed wait or a bad step input: "fault" (a server's: a GPU fault at
    address 0x0, `common/guard.py`) or "drain" (the check tools': the launch ends, and `check_error` names it).
    On a GPU server SGLang fuses its shared_experts as expert n_routed_experts; on CPU it does not, so CPU
    tests pass is_expert_fusion_required=False. A server always gets SPEC.
    """
    # load_tensor is omitted: the launches read SGLang's loaded tensors (refusals_model checks their
    # layout and refuses a shuffled one), so no raw checkpoint tensor is copied at load.
    return MonoSpec(
        name=NAME,
        devices=DEVICES,
        features=frozenset({Feature.SPECULATIVE_DECODING}),  # MTP verify steps, a top-1 chain
        requires=REQUIRES,
        numerics=Numerics(kind=NumericsKind.TOLERANCE, bounds=BOUNDS),
        model_disable_reasons=functools.partial(
            _model_disable_reasons, is_expert_fusion_required=is_expert_fusion_required
        ),
        build=functools.partial(_build, backend=backend, on_error=on_error),
        api_version=MONOKERNEL_API_VERSION,
        config_disable_reasons=_config_disable_reasons,
    )


SPEC = make_spec()
