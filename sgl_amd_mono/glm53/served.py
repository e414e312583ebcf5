"""Which configurations the launches serve by default: only those whose launches have run on that hardware.

A configuration is an (ISA, TP size). The launches build it when the Triton lowering covers the ISA and the TP
size is one they exchange their partials for (`BUILT_TP`: 1, and 2 / 4 / 8, whose partial sums the launches push
to every rank and sum in rank order themselves). A built configuration is served by default only where a whole
step of it ran on that hardware, with the results log that shows it (`RAN`). Any other built configuration is
refused at startup unless `SGLANG_AMD_MONO_UNVERIFIED=1` is set; then the startup log warns and names what is
unverified (`what_is_unverified`: at TP > 1 on sm_90, that no whole step ran on several GPUs and where the
cross-rank pushes did run). A configuration the launches cannot build is refused whatever the variable says. The spec's startup check (`config_disable_reasons`), `explain` and the build all ask
`serving`; nothing else decides it.

The MTP draft model (GlmMoeDsaForCausalLMNextN) is not a launch model: its draft steps stay on SGLang's path.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Mapping, Optional

UNVERIFIED_ENV = "SGLANG_AMD_MONO_UNVERIFIED"

# ISA -> the lowering whose launches run a whole step there ("compiles for gfx950" is all the AMD entries claim)
BACKEND_OF_ISA = {"sm_90": "triton", "gfx950": "triton", "gfx942": "triton"}
BUILT_TP = (1, 2, 4, 8)  # TP sizes the launches build (at TP > 1 every kind exchanges its partials in the launch)
# (ISA, TP) whose whole step ran on that hardware -> the results log that shows it
RAN: dict[tuple[str, int], str] = {
    # an H100, 5 layers, with index_pair (step6_h100_check_step_fp8.log: fp8 KV); the 7-layer step on an H200 (older
    # tiles): step3_h200_check_step_*.log
    ("sm_90", 1): "test/kernels/glm53/results/step5_h100_check_step_bf16.log",
}
DRAFT_NOTE = "the MTP draft model (GlmMoeDsaForCausalLMNextN) runs on SGLang's own path"
# where the cross-rank pushes have run so far (none of it a whole step on several GPUs): update with each run
TP_PUSHES_RAN = ("the cross-rank pushes ran as processes under Triton's interpreter on CPU (test_tp_launch.py: "
                 "each kind at TP 2; test_tp_step.py: a whole step at TP 2), as emulated ranks on one H200 (every kind "
                 "at TP 8, shared and tail at TP 2: results/tp2_h200_summary.md), and as two processes on one H200 "
                 "through CUDA IPC (a step of every kind at TP 2, tp2_h200_tp_step.log); nothing has run on several "
                 "GPUs (NVLink, peer access between GPUs, TP 4 / 8 as processes)")


@dataclasses.dataclass(frozen=True)
class Serving:
    """What the launches do with one configuration: refused (reasons), or served (unverified: what has not run,
    empty when the configuration ran on that hardware)."""

    reasons: tuple[str, ...]
    unverified: tuple[str, ...]
    evidence: Optional[str]

    @property
    def is_served(self) -> bool:
        return not self.reasons


def is_unverified_allowed(env: Optional[Mapping[str, str]] = None) -> bool:
    return (os.environ if env is None else env).get(UNVERIFIED_ENV, "") == "1"


def serving(isa: str, tp: int, env: Optional[Mapping[str, str]] = None) -> Serving:
    """The rule for (isa, tp) under `env` (default os.environ)."""
    reasons, unverified = [], []
    if isa not in BACKEND_OF_ISA:
        reasons.append(f"no launch lowering builds a GLM-5.3 step on {isa} (lowerings: {sorted(BACKEND_OF_ISA)})")
    if tp not in BUILT_TP:
        reasons.append(f"tp {tp}: the launches build TP {list(BUILT_TP)} only")
    evidence = RAN.get((isa, tp))
    if not reasons and evidence is None:
        what = what_is_unverified(isa, tp)
        if is_unverified_allowed(env):
            unverified.append(what)
        else:
            ran = ", ".join(f"{i} TP {t}" for i, t in sorted(RAN)) or "none"
            reasons.append(f"{what} (served by default: {ran}; {UNVERIFIED_ENV}=1 runs it anyway, unverified)")
    return Serving(reasons=tuple(reasons), unverified=tuple(unverified), evidence=evidence)


def what_is_unverified(isa: str, tp: int) -> str:
    """What has not run of a built configuration that `RAN` lacks, as one plain fact."""
    what = f"{BACKEND_OF_ISA[isa]} launches at TP {tp} on {isa}: "
    if tp > 1 and any(i == isa for i, _ in RAN):  # this hardware ran whole steps, on one GPU
        return what + f"no whole step of them has run on several GPUs; {TP_PUSHES_RAN}"
    return what + f"no whole step of them has run on {isa}"
