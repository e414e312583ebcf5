"""The launch kinds the check scripts know: for each, how to draw its inputs, its oracle, how its outputs are
compared, its bounds and its planted controls. `check_layer.py`, `time_layers.py`, `precompile.py` and the
CPU interpreter harness (`test/unit/_interp_main.py`) take a kind by name from `KINDS`; adding a kind adds
one entry here.

Bounds live beside their kind (`sgl_amd_mono/glm53/kinds/<kind>.py`); `sgl_amd_mono/glm53/bounds.py` says
which comparison each table is for.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Callable

import torch

from sgl_amd_mono.common import numerics as nm
from sgl_amd_mono.glm53 import launch_inputs as li
from sgl_amd_mono.glm53 import layer
from sgl_amd_mono.glm53.kinds import shared as shared_kind


@dataclasses.dataclass(frozen=True)
class KindCheck:
    name: str  # the Triton kind (`sgl_amd_mono/backends/triton/kinds.py`)
    weights: Callable  # (geo, *, tp, seed, device, rank=0) -> one layer's weights (cut from one full draw)
    step: Callable  # (geo, *, width, context, kv_dtype, seed, device) -> a step (mtp rows and a pad row at width > 1)
    tensors: Callable  # weights -> {table name: tensor} (what `plan.bind` takes)
    oracle: Callable  # (geo, weights, step) -> (outputs by table name, the cache after the step)
    compare: Callable  # (geo, outs, cache, ref, cache_ref, step, plan, weights) -> {bound name: value}
    bounds: dict  # launch vs oracle on the GPU
    interp_bounds: dict  # launch vs oracle under Triton's interpreter, per case
    controls: Callable  # (geo, weights) -> [(name, [bounds it must fail], perturbed weights)]
    stages: str  # the module of the oracle per stage (run, run_isolated, compare, STAGE_BOUNDS)
    per_op: Callable  # (geo, tp, weights, width) -> SGLang's per-op path for the layer: fn(step fields) -> out

    def inputs(self, geo, *, tp, width, context, kv_dtype, seed, device, rank=0):
        """(weights, step): the layer drawn from `seed`, the step from `seed + 1`."""
        return (self.weights(geo, tp=tp, seed=seed, device=device, rank=rank),
                self.step(geo, width=width, context=context, kv_dtype=kv_dtype, seed=seed + 1, device=device))

    def stage_oracle(self):
        return importlib.import_module(self.stages)


def _shared_step(geo, *, width, context, kv_dtype, seed, device):
    return li.random_step(geo, width=width, context=context, kv_dtype=kv_dtype, seed=seed, device=device,
                          mtp=width > 1, pad_rows=1 if width > 1 else 0)


def _shared_per_op(geo, tp, weights, width):
    from per_op import SharedPerOp

    return SharedPerOp(geo, tp, *weights, width)


def _cache_rows(cache, slots):
    c = cache.view(torch.float8_e4m3fn) if cache.dtype == torch.uint8 else cache
    return c[slots].float()


def _shared_compare(geo, outs, cache, ref, cache_ref, step, plan, weights):
    """Outputs against the oracle; the routing against the oracle's router on the launch's own norm2 output,
    so a near-tie flipped by upstream rounding does not count, and a wrong router still fails."""
    slots = step.out_loc[: step.live]
    vals = {
        "shared.o.rel": nm.rel(outs["o"], ref["o"]),
        "shared.residual_out.rel": nm.rel(outs["residual_out"], ref["residual_out"]),
        "shared.out.rel": nm.rel(outs["out"], ref["out"]),
        "shared.out.cosine": nm.cosine(outs["out"], ref["out"]),
        "shared.kv.max_abs": nm.max_abs(_cache_rows(cache, slots), _cache_rows(cache_ref, slots)),
    }
    w_ref, ids_ref = layer.route(geo, weights[1], plan.scratch["xn2"])
    vals["shared.expert_weights.max_abs"] = nm.max_abs(outs["expert_weights"], w_ref)
    vals["shared.expert_ids.max_abs"] = nm.max_abs(outs["expert_ids"].float(), ids_ref.float())
    return vals


def _shared_controls(geo, weights):
    """(name, bounds it must fail, perturbed weights): one planted error per bound."""
    aw, mw = weights
    out = []
    a = dataclasses.replace(aw, o_proj_s=aw.o_proj_s.clone())
    a.o_proj_s[0, :] *= 1.2  # one 128-row block of o_proj scales x1.2
    out.append(("o_proj scale block x1.2", ["shared.o.rel"], (a, mw)))
    a = dataclasses.replace(aw, o_proj_s=aw.o_proj_s * 1.3)  # every o_proj scale x1.3
    out.append(("o_proj scales x1.3", ["shared.residual_out.rel"], (a, mw)))
    a = dataclasses.replace(aw, post_norm=aw.post_norm.clone())
    a.post_norm[: geo.hidden // 2] *= 1.1  # half the post-attention norm weight x1.1
    out.append(("post_norm weight x1.1 on half", ["shared.out.rel", "shared.out.cosine"], (a, mw)))
    a = dataclasses.replace(aw, kv_a_norm=aw.kv_a_norm.clone())
    a.kv_a_norm[:16] *= 1.1  # sixteen kv_a norm weights x1.1 (an fp8 cache row steps by 1/16 relative)
    out.append(("kv_a_norm[0:16] x1.1", ["shared.kv.max_abs"], (a, mw)))
    m = dataclasses.replace(mw, bias=mw.bias.clone())
    m.bias[:] = m.bias.flip(0)  # correction bias reversed: other experts routed
    out.append(("gate bias reversed", ["shared.expert_ids.max_abs", "shared.expert_weights.max_abs"], (aw, m)))
    return out


def _shared_oracle(geo, weights, step):
    return li.oracle(geo, *weights, step)


KINDS = {
    "shared": KindCheck(
        name="shared", weights=li.random_weights, step=_shared_step, tensors=lambda w: layer.layer_tensors(*w),
        oracle=_shared_oracle, compare=_shared_compare, bounds=shared_kind.BOUNDS_GPU,
        interp_bounds=shared_kind.BOUNDS_INTERP, controls=_shared_controls, stages="sgl_amd_mono.glm53.kinds.oracle",
        per_op=_shared_per_op),
}


def get(name: str) -> KindCheck:
    if name not in KINDS:
        raise SystemExit(f"--kind {name!r} is not one of {sorted(KINDS)}")
    return KINDS[name]
