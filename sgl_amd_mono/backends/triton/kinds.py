"""The Triton lowering's launch kinds by name: one line a kind (its kernel module, which defines `KIND`)."""

from __future__ import annotations

import importlib

from sgl_amd_mono.backends.triton.launch import LaunchPlan, TritonKind

KINDS = {
    "shared": "sgl_amd_mono.backends.triton.kernel_shared",
}


def get(name: str) -> TritonKind:
    if name not in KINDS:
        raise ValueError(f"launch kind {name!r} is not one of {sorted(KINDS)}")
    return importlib.import_module(KINDS[name]).KIND


def plan(name: str, geo, **kw) -> LaunchPlan:
    """A `LaunchPlan` of kind `name` (keyword arguments as LaunchPlan's)."""
    return LaunchPlan(get(name), geo, **kw)
