"""The Triton lowering's launch kinds by name: one line a kind (its kernel module, which defines `KIND`, or
`module:NAME` where a module defines two)."""

from __future__ import annotations

import importlib
import logging
import time

from sgl_amd_mono.backends.triton.launch import LaunchPlan, TritonKind

log = logging.getLogger(__name__)

KINDS = {
    "shared": "sgl_amd_mono.backends.triton.kernel_shared",
    "indexer": "sgl_amd_mono.backends.triton.kernel_indexer",
    "tail": "sgl_amd_mono.backends.triton.kernel_tail",
    "dense": "sgl_amd_mono.backends.triton.kernel_dense",
    "tokens": "sgl_amd_mono.backends.triton.kernel_dense:KIND_TOKENS",
}


def get(name: str) -> TritonKind:
    if name not in KINDS:
        raise ValueError(f"launch kind {name!r} is not one of {sorted(KINDS)}")
    module, _, attr = KINDS[name].partition(":")
    return getattr(importlib.import_module(module), attr or "KIND")


def plan(name: str, geo, **kw) -> LaunchPlan:
    """A `LaunchPlan` of kind `name` (keyword arguments as LaunchPlan's)."""
    return LaunchPlan(get(name), geo, **kw)


def build(name: str, geo, *, widths, layers, **kw) -> dict:
    """What a server's build does for one kind: a plan a width, every layer bound to it (its weights checked
    once; the first bind of a width compiles, cached by Triton on disk and in process). Logs each width's
    progress and seconds. layers: every layer's weights {table name: tensor}, in launch_id order.
    Returns {width: (plan, [bound layer])}."""
    out, t_all = {}, time.perf_counter()
    for i, w in enumerate(widths):
        t0 = time.perf_counter()
        p = plan(name, geo, width=w, **kw)
        bound = [p.bind(weights, launch_id=j) for j, weights in enumerate(layers)]
        out[w] = (p, bound)
        log.info("[%d/%d] %s: %d layers bound in %.1f s (compile %.1f s; %.1f s in all)", i + 1, len(widths), p.name,
                 len(bound), time.perf_counter() - t0, p.compile_s, time.perf_counter() - t_all)
    return out
