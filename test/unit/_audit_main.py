"""The auditor (SGLANG_AMD_MONO_CHECK=1) through SGLang's real binding on the tiny model, launches under Triton's
interpreter (run as a subprocess by test_audit.py, so TRITON_INTERPRET=1 is set before triton is imported); also the
driver `test/kernels/glm53/audit_step.py` runs on a GPU. Prints one JSON line:

- "unchecked": a build without the variable (the auditor not imported, no hook) and its steps' logits and cache rows;
- "runs": a clean check build, then a build with each planted fault (SGLANG_AMD_MONO_FAULT), each step through the
  binding: the report's summary (violations and worst value a metric) and its file;
- "same_as_unchecked": per step, the clean check run's logits and every layer's cache rows bitwise the unchecked
  run's (check mode changes nothing a step computes);
- "provider" (the fp8 process): `provider_check`, the GPU provider's plumbing against cpu-modules;
- "own_inputs" (the fp8 process): `own_inputs_check`, the auditor's comparison where a launch attends to a list with
  one key traded at the threshold and routes a row to another expert.
argv: REPORT_DIR bf16 (the unchecked run, the clean run, every fault) or fp8 (the clean run, the provider check, the
own-inputs check).
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

FAULTS = ("o_proj_scale", "kv_norm", "rope_shift", "topk_swap", "down_scale", "lm_head_scale", "router_gate")


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


def _tiny_step(geo, s: dict, *, seed: int = 4):
    """(batch, step fields, caches) of step `s` on fresh caches (CPU)."""
    from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

    from sgl_amd_mono.glm53.step import read_step

    c = DsaCaches(geo, kv_dtype=s["kv"], bs=len(s["seq_lens"]) + s["pad_rows"], max_ctx=256, seed=seed)
    batch, backend, pos = make_step(c, seq_lens=s["seq_lens"], tokens=s["tokens"], input_ids=torch.tensor(s["ids"]),
                                    pad_rows=s["pad_rows"])
    with forward_context(ForwardContext(attn_backend=backend)):
        return batch, read_step(batch, pos, tokens=s["tokens"]), c


def _parts_of(d: dict):
    """A provider's own outputs as the LaunchParts a launch would hand on."""
    from sgl_amd_mono.glm53.audit_provider import LaunchParts

    is_moe = "expert_ids" in d
    return LaunchParts(topk=d.get("topk"), o=d["o"], expert_ids=d.get("expert_ids"),
                       expert_weights=d.get("expert_weights"), xn2=d["xn2"] if is_moe else None)


def provider_check(model, cfg, s: dict) -> dict:
    """sglang-triton-kernels (`per_op.py`) against cpu-modules layer by layer on the tiny model, on CPU with stand-ins
    where SGLang's kernels need a GPU: its block-FP8 GEMM and act_quant (which rounds fp8 otherwise under the
    interpreter) by the reference's, its sparse MLA decode (no result at the tiny 192-value rows under the
    interpreter) by the reference's; its fused-MoE Triton kernel runs. cpu-modules runs each layer end to end on its
    own parts (LaunchParts()); the kernels provider is fed cpu-modules' parts as a launch's (its list, o, routing and
    norm output), both on the same inputs (cpu-modules' previous outputs). {layer: {output: value}}."""
    from sgl_amd_mono.backends import reference as ref
    from sgl_amd_mono.common import numerics as nm
    from sgl_amd_mono.glm53.audit import _index_values, _rows, routing_disagreement
    from sgl_amd_mono.glm53.audit_provider import LaunchParts, LayerInputs, ModulesProvider, TritonKernelsProvider
    from sgl_amd_mono.glm53.runner_triton import layer_kinds
    from sgl_amd_mono.glm53.step import kv_view
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
    (batch, f_m, _c0), (_, f_k, _c1) = _tiny_step(geo, s), _tiny_step(geo, s)
    cos_sin = weights.layers[0].cos_sin_cache[f_m.positions].float()
    hidden = residual = topk = None
    out = {}
    live = f_m.out_loc[f_m.out_loc != 0]

    def inputs(f, i, kind):
        return LayerInputs(input_ids=batch.input_ids, hidden=hidden, residual=residual, cos_sin=cos_sin,
                           positions=f.positions, kv_cache=kv_view(f.pool, i, geo.kv_cache_dim),
                           index_k_cache=None if kind == "shared" else f.pool.get_index_k_with_scale_buffer(i),
                           out_loc=f.out_loc, page_table=f.page_table, lengths=f.lengths, topk_slots=topk)

    for i, kind in enumerate(kinds):
        xm, xk = inputs(f_m, i, kind), inputs(f_k, i, kind)
        m = mods.layer(i, kind, xm, LaunchParts())
        k = kern.layer(i, kind, xk, _parts_of(m))
        mr, kr = (_rows(x.kv_cache, x.index_k_cache, live, geo.index_dim) for x in (xm, xk))
        v = {"o": nm.rel(k["o"], m["o"]), "out": nm.rel(k["out"], m["out"]),
             "kv": nm.max_abs(kr["kv"].float(), mr["kv"].float())}
        if kind != "shared":
            v["index_k"] = nm.max_abs(_index_values(kr), _index_values(mr))
            v["topk_missed"] = nm.missed(k["topk"], m["topk"])
        if "expert_ids" in m:
            ids_missed, w_diff = routing_disagreement(k["expert_ids"], k["expert_weights"], m["expert_ids"],
                                                      m["expert_weights"])
            v["routing"] = max(float(ids_missed.max()), float(w_diff.max()))
        out[f"{i} {kind}"] = v
        hidden, residual, topk = m["out"], m["residual_out"], m.get("topk", topk)
    t_m, t_k = (p.tail(hidden=hidden, residual=residual) for p in (mods, kern))
    out["tail"] = {"logits": nm.rel(t_k["logits"], t_m["logits"]), "normed": nm.rel(t_k["normed"], t_m["normed"])}
    return out


class StandInLaunch:
    """A launch that is SGLang's path itself (cpu-modules) attending to a given list and routing with given experts:
    what a launch whose own scores traded a key at the threshold, and whose router flipped a near-tie, computes."""

    def __init__(self, mods, i: int, kind: str, f, *, topk, trade_row: int):
        import types

        self.mods, self.i, self.f, self.topk, self.trade_row = mods, i, f, topk, trade_row
        self.table = types.SimpleNamespace(name=kind)
        self.scratch: dict = {}

    def run(self, layer, step: dict) -> dict:
        from sgl_amd_mono.glm53.audit_provider import LaunchParts, LayerInputs

        f, geo, r = self.f, self.mods.geo, self.trade_row
        x = LayerInputs(input_ids=step["input_ids"], hidden=step["hidden"], residual=step["residual"],
                        cos_sin=step["cos_sin"], positions=f.positions, kv_cache=step["kv_cache"],
                        index_k_cache=step["index_k_cache"], out_loc=f.out_loc, page_table=f.page_table,
                        lengths=f.lengths, topk_slots=None)
        first = self.mods.layer(self.i, self.table.name, x, LaunchParts(topk=self.topk))
        ids, w = first["expert_ids"].clone(), first["expert_weights"].clone()
        mw = self.mods.w.layers[self.i].ffn
        choice = (first["xn2"].float() @ mw.gate.float().t()).sigmoid() + mw.bias.float()
        choice[r, ids[r, :geo.top_k].long()] = float("-inf")
        ids[r, geo.top_k - 1] = int(choice[r].argmax())  # its weakest pick for the best expert it did not pick
        d = self.mods.layer(self.i, self.table.name, x, LaunchParts(topk=self.topk, o=first["o"], expert_ids=ids,
                                                                    expert_weights=w, xn2=first["xn2"]))
        self.scratch["xn2"] = first["xn2"]
        return {"o": d["o"], "residual_out": d["residual_out"], "out": d["out"], "topk": self.topk.clone(),
                "expert_ids": ids, "expert_weights": w}


def own_inputs_check(model, cfg, s: dict, report_dir: str) -> dict:
    """The auditor (`Auditor`, cpu-modules, the interpreter's bounds) on the tiny model's indexer layer (2) of step
    `s`, whose launch is `StandInLaunch`: SGLang's own list with one key traded at the threshold on the longest row
    (its lowest-scoring selected key, not the row's own, for its best unselected key), and that row's weakest expert
    for the best one it did not pick. {"row": that row, "values": the auditor's worst value a metric, "violations":
    its violations by metric, "own_list_o": o.rel at that row of SGLang's path attending to its own list against
    the launch's (what the comparison counted while SGLang's path took its own list)}."""
    import types

    from sgl_amd_mono.common import numerics as nm
    from sgl_amd_mono.glm53 import audit
    from sgl_amd_mono.glm53 import layer as lay
    from sgl_amd_mono.glm53.audit_provider import LaunchParts, LayerInputs, ModulesProvider
    from sgl_amd_mono.glm53.bounds import AUDIT_BOUNDS_INTERP
    from sgl_amd_mono.glm53.indexer import index_qk, index_scores, select_topk, to_slots
    from sgl_amd_mono.glm53.runner_triton import layer_kinds
    from sgl_amd_mono.glm53.step import kv_view
    from sgl_amd_mono.glm53.weights import bind_model

    geo = Glm53Geometry.from_hf(cfg)
    i, kind = 2, "indexer"
    assert layer_kinds(geo)[i] == kind, layer_kinds(geo)
    weights = bind_model(model, geo)
    lw = weights.layers[i]
    mods = ModulesProvider(geo, weights, model.lm_head.weight)
    batch, f, _caches = _tiny_step(geo, s)
    n_rows = int(f.out_loc.shape[0])
    g = torch.Generator().manual_seed(5)
    hidden = torch.randn(n_rows, geo.hidden, generator=g).to(torch.bfloat16)
    residual = (2 * torch.randn(n_rows, geo.hidden, generator=g)).to(torch.bfloat16)
    cos_sin = weights.layers[0].cos_sin_cache[f.positions].float()
    kv, ibuf = kv_view(f.pool, i, geo.kv_cache_dim), f.pool.get_index_k_with_scale_buffer(i)
    # SGLang's index scores (the layer's own inputs to its indexer, over copies of the caches): the row's threshold
    buf = ibuf.clone()
    pick = lay.indexer_select(geo, lw.indexer, positions=f.positions, cos_sin=cos_sin, index_k_cache=buf,
                              out_loc=f.out_loc, page_table=f.page_table, lengths=f.lengths)
    a = lay.attention_half(geo, lw.attn, hidden=hidden, residual=residual, cos_sin=cos_sin, kv_cache=kv.clone(),
                           out_loc=f.out_loc, topk_slots=None, select=pick)
    qk = index_qk(lw.indexer, x=a.x_normed, q_lora=a.q_lora, positions=f.positions, rope=geo.qk_rope, cos_sin=cos_sin)
    scores = index_scores(qk, buf, page_table=f.page_table, lengths=f.lengths)
    pos = select_topk(scores, lengths=f.lengths, topk=geo.index_topk)
    r = int(f.lengths.argmax())
    n = int(f.lengths[r])
    assert n > geo.index_topk, (n, geo.index_topk)
    chosen = set(pos[r].tolist())
    own_pos = n - 1  # a decode row's own key: its last position
    low = min((p for p in chosen if p != own_pos), key=lambda p: float(scores[r, p]))
    best = max((p for p in range(n) if p not in chosen), key=lambda p: float(scores[r, p]))
    pos[r][pos[r] == low] = best
    traded = to_slots(pos, page_table=f.page_table)
    path = os.path.join(report_dir, "audit_own_inputs.jsonl")
    if os.path.exists(path):
        os.remove(path)
    auditor = audit.Auditor(geo=geo, provider=mods, bounds=AUDIT_BOUNDS_INTERP, table="interpreter", fault=None,
                            path=path, cos_sin_cache=weights.layers[0].cos_sin_cache)
    launch = StandInLaunch(mods, i, kind, f, topk=traded, trade_row=r)
    step = {"input_ids": batch.input_ids, "hidden": hidden, "residual": residual, "cos_sin": cos_sin, "kv_cache": kv,
            "index_k_cache": ibuf, "topk_slots": None}
    got = auditor.launcher(f)(launch, types.SimpleNamespace(launch_id=i), step)
    got = {k: v.clone() for k, v in got.items()}
    auditor.close()
    x = LayerInputs(input_ids=batch.input_ids, hidden=hidden, residual=residual, cos_sin=cos_sin, positions=f.positions,
                    kv_cache=kv, index_k_cache=ibuf, out_loc=f.out_loc, page_table=f.page_table, lengths=f.lengths,
                    topk_slots=None)
    own = mods.layer(i, kind, x, LaunchParts())
    return {"row": r, "values": {k: m["worst"] for k, m in auditor.summary.metrics.items()},
            "violations": auditor.summary.violations_by_metric(), "own_list_o": nm.rel(own["o"][r], got["o"][r])}


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
        res["own_inputs"] = own_inputs_check(model, cfg, dict(STEPS["decode"], kv=torch.bfloat16), report_dir)
    print(json.dumps(res))
