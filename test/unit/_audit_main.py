"""The auditor (SGLANG_AMD_MONO_CHECK=1) through SGLang's real binding on the tiny model, launches under Triton's
interpreter (run as a subprocess by test_audit.py, so TRITON_INTERPRET=1 is set before triton is imported); also the
driver `test/kernels/glm53/audit_step.py` runs on a GPU. Prints one JSON line:

- "unchecked": a build without the variable (the auditor not imported, no hook) and its steps' logits and cache rows;
- "runs": a clean check build, then a build with each planted fault (SGLANG_AMD_MONO_FAULT), each step through the
  binding: the report's summary (violations and worst value a metric) and its file;
- "same_as_unchecked": per step, the clean check run's logits and every layer's cache rows bitwise the unchecked
  run's (check mode changes nothing a step computes);
- "provider" (the fp8 process): `provider_check`, the GPU provider's plumbing against cpu-modules.
argv: REPORT_DIR bf16 (the unchecked run, the clean run, every fault) or fp8 (the clean run, the provider check).
"""
import gc
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from dsa_fixture import DsaCaches, make_step  # noqa: E402

from sgl_amd_mono.glm53.config import Glm53Geometry  # noqa: E402

FAULTS = ("o_proj_scale", "kv_norm", "rope_shift", "topk_swap", "down_scale", "lm_head_scale")


def build(model, cfg, *, isa, widths, env: dict):
    """The Triton backend built through the spec with `env` set (and removed after)."""
    from sglang.kernels.plugin_kernels.amd.spec import BuildContext

    from sgl_amd_mono.glm53.spec import make_spec

    spec = make_spec(backend="triton", is_expert_fusion_required=False, on_error="drain")
    ctx = BuildContext(isa=isa, widths=tuple(widths), deadline_s=10.0, copies={})
    keep = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return spec.build(model, cfg, ctx), spec
    finally:
        for k, v in keep.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)


def run_steps(model, geo, built, spec, steps: dict, *, device, seed=4) -> dict:
    """Each step through the binding on fresh caches: {name: (logits [rows, V] f32, {layer: cache bytes})}."""
    from _triton_step_main import routed, step_key
    from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

    out = {}
    with routed(model, built, spec, [step_key(s) for s in steps.values()]):
        for name, s in steps.items():
            max_ctx = max(256, max(s["seq_lens"]) + s["tokens"] + 1)
            caches = DsaCaches(geo, kv_dtype=s["kv"], bs=len(s["seq_lens"]) + s["pad_rows"], max_ctx=max_ctx,
                               seed=seed, device=device)
            batch, backend, pos = make_step(caches, seq_lens=s["seq_lens"], tokens=s["tokens"],
                                            input_ids=torch.tensor(s["ids"]), pad_rows=s["pad_rows"],
                                            capture_hidden=s["capture"])
            with forward_context(ForwardContext(attn_backend=backend)):
                logits = model.forward(batch.input_ids.to(device), pos.to(device), batch).next_token_logits
            built.check_error()
            loc = batch.out_cache_loc.long()
            rows = {i: caches.pool.get_key_buffer(i).view(-1, geo.kv_cache_dim)[loc].view(torch.uint8).clone()
                    for i in range(geo.n_layers)}
            rows.update({f"index{i}": caches.pool.get_index_k_with_scale_buffer(i).clone()
                         for i in range(geo.n_layers) if geo.runs_indexer[i]})
            out[name] = (logits.clone(), rows)
            del caches
    return out


def run(model, cfg, *, steps: dict, fault_steps: dict, faults=FAULTS, device="cpu", isa="cpu", report_dir: str,
        tag: str = "", is_unchecked_run: bool = True) -> dict:
    """The unchecked build (with is_unchecked_run), the clean check build on `steps`, then each fault's build on
    `fault_steps`."""
    geo = Glm53Geometry.from_hf(cfg)
    widths = sorted({len(s["ids"]) for s in steps.values()})
    lp = model.logits_processor
    get_logits = lp._get_logits  # each build wraps it: restored so a build can be freed
    res = {"runs": {}}
    plain = None
    if is_unchecked_run:
        built, spec = build(model, cfg, isa=isa, widths=widths, env={})
        res["unchecked"] = {"audit_imported": "sgl_amd_mono.glm53.audit" in sys.modules, "audit": repr(built.audit)}
        plain = run_steps(model, geo, built, spec, steps, device=device)
        lp._get_logits = get_logits
        del built
        gc.collect()
    for fault in (None, *faults):
        label = fault or "clean"
        path = os.path.join(report_dir, f"audit{tag}_{label}.jsonl")
        if os.path.exists(path):
            os.remove(path)
        env = {"SGLANG_AMD_MONO_CHECK": "1", "SGLANG_AMD_MONO_FAULT": fault or "",
               "SGLANG_AMD_MONO_CHECK_REPORT": path}
        built, spec = build(model, cfg, isa=isa, widths=widths, env=env)
        got = run_steps(model, geo, built, spec, steps if fault is None else fault_steps, device=device)
        a = built.audit
        a.close()
        res["runs"][label] = {"report": path, "violations": a.summary.violations,
                              "violations_by_metric": a.summary.violations_by_metric(),
                              "metrics": a.summary.metrics, "provider": sorted(a.summary.providers),
                              "steps": a.steps}
        if fault is None and plain is not None:
            res["same_as_unchecked"] = {
                name: bool(torch.equal(got[name][0], plain[name][0])
                           and all(torch.equal(got[name][1][k], plain[name][1][k]) for k in plain[name][1]))
                for name in steps}
        lp._get_logits = get_logits
        del built, a, got
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()  # each build's launch buffers and copies freed before the next
    return res


def provider_check(model, cfg, s: dict) -> dict:
    """sglang-triton-kernels (`per_op.py`) against cpu-modules layer by layer on the tiny model (both on the same
    inputs: cpu-modules' previous outputs), on CPU with stand-ins where SGLang's kernels need a GPU: its block-FP8
    GEMM and act_quant (which rounds fp8 otherwise under the interpreter) by the reference's, its sparse MLA decode
    (no result at the tiny 192-value rows under the interpreter) by the reference's; its fused-MoE Triton kernel
    runs. {layer: {output: value}}."""
    from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

    from sgl_amd_mono.backends import reference as ref
    from sgl_amd_mono.common import numerics as nm
    from sgl_amd_mono.glm53.audit import _index_values, _rows
    from sgl_amd_mono.glm53.audit_provider import LayerInputs, ModulesProvider, TritonKernelsProvider
    from sgl_amd_mono.glm53.runner_triton import layer_kinds
    from sgl_amd_mono.glm53.step import kv_view, read_step
    from sgl_amd_mono.glm53.weights import bind_model

    geo = Glm53Geometry.from_hf(cfg)
    weights = bind_model(model, geo)
    mods = ModulesProvider(geo, weights, model.lm_head.weight)
    kern = TritonKernelsProvider(geo, weights, model.lm_head.weight)

    def mla(qn, qpe, kv3, idx, scale, dv):  # per_op's call: kv [slots, 1, D], idx [R, 1, K] -> [1, R, H, dv]
        return ref.sparse_mla_decode(torch.cat((qn, qpe), -1), kv3.view(kv3.shape[0], -1),
                                     idx.view(idx.shape[0], -1), scale=scale, v_dim=dv)[None]

    rows = len(s["ids"])
    kinds = layer_kinds(geo)
    for i, kind in enumerate(kinds):
        op = kern._op(i, kind, rows)
        op.linear = ref.linear
        op.quant = lambda t, block, fmt: ref.act_quant_ue8m0(t) if fmt else ref.group_quant_fp8(t)
        op.mla = mla
    caches = [DsaCaches(geo, kv_dtype=s["kv"], bs=len(s["seq_lens"]) + s["pad_rows"], max_ctx=256, seed=4)
              for _ in range(2)]
    fields = []
    for c in caches:
        batch, backend, pos = make_step(c, seq_lens=s["seq_lens"], tokens=s["tokens"], input_ids=torch.tensor(s["ids"]),
                                        pad_rows=s["pad_rows"])
        with forward_context(ForwardContext(attn_backend=backend)):
            fields.append(read_step(batch, pos, tokens=s["tokens"]))
    cos_sin = weights.layers[0].cos_sin_cache[fields[0].positions].float()
    hidden = residual = topk = None
    out = {}
    live = fields[0].out_loc[fields[0].out_loc != 0]
    for i, kind in enumerate(kinds):
        got = []
        for provider, f in ((mods, fields[0]), (kern, fields[1])):
            x = LayerInputs(input_ids=batch.input_ids, hidden=hidden, residual=residual, cos_sin=cos_sin,
                            positions=f.positions, kv_cache=kv_view(f.pool, i, geo.kv_cache_dim),
                            index_k_cache=None if kind == "shared" else f.pool.get_index_k_with_scale_buffer(i),
                            out_loc=f.out_loc, page_table=f.page_table, lengths=f.lengths, topk_slots=topk)
            d = provider.layer(i, kind, x)
            got.append((d, _rows(x.kv_cache, x.index_k_cache, live, geo.index_dim)))
        (m, mr), (k, kr) = got
        v = {"o": nm.rel(k["o"], m["o"]), "out": nm.rel(k["out"], m["out"]),
             "kv": nm.max_abs(kr["kv"].float(), mr["kv"].float())}
        if kind != "shared":
            v["index_k"] = nm.max_abs(_index_values(kr), _index_values(mr))
            v["topk_missed"] = nm.missed(k["topk"], m["topk"])
        out[f"{i} {kind}"] = v
        hidden, residual, topk = m["out"], m["residual_out"], m.get("topk", topk)
    t_m, t_k = (p.tail(hidden=hidden, residual=residual) for p in (mods, kern))
    out["tail"] = {"logits": nm.rel(t_k["logits"], t_m["logits"]), "normed": nm.rel(t_k["normed"], t_m["normed"])}
    return out


if __name__ == "__main__":
    # argv: REPORT_DIR [bf16|fp8]
    assert os.environ.get("TRITON_INTERPRET") == "1"
    from _triton_step_main import LAUNCH_TINY, STEPS
    from tiny_glm53 import build_tiny_model, init_single_process_dist

    report_dir, kv = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "bf16"
    if kv == "fp8":
        init_single_process_dist(kv_cache_dtype="fp8_e4m3", dsa_decode_backend="triton")
    model, cfg = build_tiny_model(is_fp8=True, seed=0, **LAUNCH_TINY)
    dt = torch.float8_e4m3fn if kv == "fp8" else torch.bfloat16
    steps = {k: dict(s, kv=dt) for k, s in STEPS.items()}
    is_bf16 = kv == "bf16"  # bf16: the unchecked run and every fault too; fp8: the clean check run, then the
    res = run(model, cfg, steps=steps, fault_steps={"decode": steps["decode"]},  # kernels provider's check
              faults=FAULTS if is_bf16 else (), report_dir=report_dir, tag="_" + kv, is_unchecked_run=is_bf16)
    if not is_bf16:
        res["provider"] = provider_check(model, cfg, dict(STEPS["decode"], kv=torch.bfloat16))
    print(json.dumps(res))
