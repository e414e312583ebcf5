"""Which ISAs have a launch backend that runs a whole GLM-5.3 step: the one place `explain` and the
runner ask before promising a served step."""

from __future__ import annotations

from typing import Optional

# ISA -> the backend that runs every launch of a GLM-5.3 step there. Empty today: the Triton and
# FlyDSL launches do not yet cover a whole step on any ISA, so `build` refuses every server.
LAUNCH_BACKENDS: dict[str, str] = {}


def launch_backend_reason(isa: str) -> Optional[str]:
    """None when `isa` has a whole-step launch backend, else the sentence `build` refuses with."""
    if isa in LAUNCH_BACKENDS:
        return None
    return (
        f"no launch backend runs a whole GLM-5.3 step on {isa} yet "
        f"(backends with whole steps: {sorted(LAUNCH_BACKENDS) or 'none'}); build refuses this server at startup"
    )
