"""Runs in a subprocess with TRITON_INTERPRET=1 set before triton is imported (see test_stage_oracle.py): one
case's shared launch under Triton's interpreter, then the per-stage oracle over its buffers. Prints one JSON
object: {"isolated": {stage: {name: value}}, "control": {stage: {name: value}}, "chain": {name: value},
"chain_control": {name: value}, "launch_vs_chain": {name: value}, "n_used": int, "seconds": {...}}."""
import json
import os
import sys
import time

assert os.environ.get("TRITON_INTERPRET") == "1"
import torch  # noqa: E402

from sgl_amd_mono.backends.triton import kinds  # noqa: E402
from sgl_amd_mono.backends.triton.tiles import Tiles  # noqa: E402
from sgl_amd_mono.common import numerics as nm  # noqa: E402
from sgl_amd_mono.common.launch import LaunchOptions  # noqa: E402
from sgl_amd_mono.glm53 import launch_inputs as li  # noqa: E402
from sgl_amd_mono.glm53 import layer  # noqa: E402
from sgl_amd_mono.glm53.kinds import oracle  # noqa: E402
from sgl_amd_mono.glm53.kinds.oracle_moe import n_used  # noqa: E402

# case: (width, kv dtype, tiles spec)
CASES = {
    "w1": (1, torch.bfloat16, ""),
    "w4fp8": (4, torch.float8_e4m3fn, ""),
    "w4fp8_split": (4, torch.float8_e4m3fn, "nsplit=8,att_blk=8,dn_parts=3"),  # 8 attention splits, 3 down parts
    "w2_dn1": (2, torch.bfloat16, "dn_parts=1,ks_u=1"),  # one down part: out straight from the sum
}
# the whole-layer oracle's keys have been renamed once; either spelling is read
ALIASES = {"residual_out": ("residual_out", "residual"), "expert_ids": ("expert_ids", "ids"),
           "expert_weights": ("expert_weights", "weights")}


def _get(outs, name):
    for k in ALIASES.get(name, (name,)):
        if k in outs:
            return outs[k]
    raise KeyError(f"layer.shared_layer returned no {name} ({sorted(outs)})")


def _final(outs_got, outs_want, kv_got, kv_want, out_loc, d, prefix):
    vals = {}
    for k in ("out", "residual_out", "o", "expert_weights"):
        for m in ("rel", "max_abs"):
            vals[f"{prefix}.{k}.{m}"] = nm.measure(f"x.{m}", _get(outs_got, k).float(), _get(outs_want, k).float())
    vals[f"{prefix}.expert_ids.max_abs"] = nm.max_abs(_get(outs_got, "expert_ids").float(),
                                                      _get(outs_want, "expert_ids").float())
    slots = torch.unique(out_loc.long())
    g, t = oracle.cache_view(kv_got, d)[slots].float(), oracle.cache_view(kv_want, d)[slots].float()
    vals[f"{prefix}.kv_cache.rel"], vals[f"{prefix}.kv_cache.max_abs"] = nm.rel(g, t), nm.max_abs(g, t)
    return vals


def main(case):
    width, kv, spec = CASES[case]
    t0 = time.perf_counter()
    geo = li.tiny_geometry()
    aw, mw = li.random_weights(geo, tp=1, seed=3)
    st = li.random_step(geo, width=width, context=300, kv_dtype=kv, seed=4, mtp=width > 1,
                        pad_rows=1 if width > 1 else 0)
    plan = kinds.plan("shared", geo, tp=1, width=width, kv_dtype=kv, device="cpu",
                      options=LaunchOptions(placement="sequential"), tiles=Tiles().with_spec(spec))
    table, d = plan.table, plan.dims
    weights = layer.layer_tensors(aw, mw)
    bound = plan.bind(weights)
    kv_t = st.kv_cache.clone()
    step = dict(hidden=st.hidden, residual=st.residual, cos_sin=st.cos_sin, kv_cache=kv_t, out_loc=st.out_loc,
                topk_slots=st.topk_slots)
    plan.run(bound, step)
    plan.check_error()
    t_launch = time.perf_counter() - t0

    # the launch's buffers as it left them
    launch = {**weights, **step, **plan.scratch, **plan.out, "kv_cache": oracle.cache_view(kv_t, d)}
    res = {"isolated": {}, "control": {}, "n_used": n_used(plan.scratch["uniq"], d.E), "dims": str(d)}
    for s in table.stage_names():
        res["isolated"][s] = oracle.compare(table, d, s, launch, oracle.run_isolated(table, d, s, launch))
        res["control"][s] = oracle.compare(table, d, s, launch,
                                           oracle.run_isolated(table, d, s, oracle.perturbed(s, launch)))

    # the chained oracle against the SGLang-pinned whole-layer oracle (and the launch's final outputs)
    inputs = {**weights, **{k: v for k, v in step.items() if k != "kv_cache"}, "kv_cache": st.kv_cache}
    b = oracle.run(table, d, oracle.new_buffers(table, d, inputs, "cpu"))
    want, kv_want = li.oracle(geo, aw, mw, st)
    res["chain"] = _final(b, want, b["kv_cache"], kv_want, st.out_loc, d, "shared")
    res["launch_vs_chain"] = _final(plan.out, b, kv_t, b["kv_cache"], st.out_loc, d, "launch")
    # chain control: one o_proj scale block 20% off (as test_launch_shared_interp's), kv_a_norm's weights mixed
    # with their neighbours' (the cache rows) and the gate's rows rolled by one expert (the picks)
    aw.o_proj_s[0, :] *= 1.2
    aw.kv_a_norm = (aw.kv_a_norm.float() + 0.05 * aw.kv_a_norm.float().roll(1, -1)).to(torch.bfloat16)
    mw.gate = mw.gate.roll(1, 0)
    bc = oracle.run(table, d, oracle.new_buffers(table, d, {**inputs, **layer.layer_tensors(aw, mw)}, "cpu"))
    res["chain_control"] = _final(bc, want, bc["kv_cache"], kv_want, st.out_loc, d, "shared")
    res["seconds"] = {"launch": t_launch, "total": time.perf_counter() - t0}
    print(json.dumps(res))


if __name__ == "__main__":
    main(sys.argv[1])
