"""SGLANG_AMD_MONO_CHECK=1: every routed layer's launch audited against SGLang's path on the launch's own inputs.

`runner_triton.build_triton` attaches an `Auditor` when the variable is 1; unset, this module is never imported and
each launch is called directly. With it set, routed steps must run eagerly (the audit reads values on the host:
a capture raises, naming --disable-cuda-graph). After each layer's launch the auditor runs SGLang's path for that
layer (`audit_provider.py`, chosen by the host and named in the report), each part on the launch's own inputs to
that part, as check_layer compares a launch kind: the attention over the list the launch's attention read, the MoE or
dense MLP on the launch's o_proj output with the launch's routing, the router on the launch's own post-attention norm
output. It compares (`OUTPUTS`): the attention output, the MLA and index-K cache rows written, the top-k as a set
(SGLang's own list against the launch's, and on each row's own draft-chain keys), the layer's output stream, the MoE
or dense output, the routing (expert ids and weights), and the tail's logits. Each value is the worst row's, named
`<kind>.<output>.<metric>`, bounded by `bounds.AUDIT_BOUNDS_INTERP` under Triton's interpreter and by `SPEC.numerics`
(`bounds.SERVING_VS_SGLANG`) on a GPU; a violation is logged with its step, layer and row. Every record goes to a
JSON-lines file (`audit_report.py` documents it; SGLANG_AMD_MONO_CHECK_REPORT names it, default
./sgl-amd-mono-check-<pid>.jsonl), and the summary is logged at shutdown.

A step continues exactly as a non-check server's would: the next layer reads the launch's outputs; the cache rows at
out_cache_loc are saved before the launch, the launch's kept, the saved ones put back for SGLang's path, and the
launch's written again after the comparison.

Planted faults (SGLANG_AMD_MONO_FAULT, read only here): each changes what the launches see, never SGLang's path's
input, and is logged at build; `FAULT_OF` names the fault that must fail each bound (`FAULT_OF_GPU` on a GPU).
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import json
import logging
import os
from typing import Any, Optional

import torch

from sgl_amd_mono.common import numerics as nm
from sgl_amd_mono.glm53.audit_provider import LaunchParts, LayerInputs, choose
from sgl_amd_mono.glm53.audit_report import Summary

logger = logging.getLogger(__name__)

ENV_CHECK = "SGLANG_AMD_MONO_CHECK"
ENV_FAULT = "SGLANG_AMD_MONO_FAULT"
ENV_REPORT = "SGLANG_AMD_MONO_CHECK_REPORT"

OUTPUTS = {
    "o": "the attention output: o_proj's [R, D] bf16, against SGLang's on the same hidden and residual, attending to "
         "the list the launch's attention read",
    "kv": "the MLA cache rows written at a live row's out_cache_loc (pad rows' dummy slot 0 aside)",
    "index_k": "the index-K rows written there, dequantized (fp8 x its scale)",
    "topk_missed": "the count of SGLang's top-k slots a row's launch list lacks (0: the same set)",
    "topk_own": "the count of a row's own draft-chain keys (its request's slots this step, up to its own) that one "
                "list holds and the other does not",
    "streams": "the layer's output stream, out + residual_out in f32 (SGLang's: its out on the launch's o, plus "
               "its own residual_out)",
    "out": "the MoE (or dense MLP) output, SGLang's on the launch's o_proj output (its own post-attention norm) and, "
           "for the MoE, the launch's expert ids and weights",
    "expert_ids": "the count of experts SGLang's router picks that a row's launch ids lack (0: the same set; the "
                  "router on the launch's own post-attention norm output)",
    "expert_weights": "a row's largest routing-weight difference, expert by expert (an expert one routing lacks "
                      "counts as weight 0 there)",
    "logits": "the tail's f32 logits",
}
LAYER_METRICS = ("o.rel", "kv.max_abs", "kv.cosine", "streams.cosine", "out.rel")
ROUTING_METRICS = ("expert_ids.max_abs", "expert_weights.max_abs")  # the MoE kinds (indexer, shared)
INDEX_METRICS = ("index_k.max_abs", "index_k.cosine", "topk_missed.max_abs", "topk_own.max_abs")
TAIL_METRICS = ("logits.rel",)

# fault -> what the launches see instead (SGLang's path reads the true weights and rows)
FAULTS = {
    "o_proj_scale": "every layer's launch reads its o_proj block scales x1.2 (a copy)",
    "kv_norm": "every layer's launch reads kv_a_layernorm's weight x1.2 (a copy)",
    "rope_shift": "every layer's launch reads the cos_sin rows of the next position",
    "topk_swap": "each launch's own top-k has two entries of two rows swapped (a row's own key for a key its list "
                 "lacks) before the comparison and the next layer",
    "down_scale": "every layer's launch reads its MoE down (w2) or dense down block scales x1.2 (a copy)",
    "lm_head_scale": "the tail launch reads the LM head x1.02 (a copy)",
    "router_gate": "every MoE layer's launch reads its router's gate negated (a copy): the least likely experts "
                   "picked",
}
# the copied weights of each weight fault (names in the launch kinds' tables) and what is done to the copy, in place
WEIGHT_FAULTS = {"o_proj_scale": (("o_proj_s",), lambda c: c.mul_(1.2)),
                 "kv_norm": (("kv_a_norm",), lambda c: c.mul_(1.2)),
                 "down_scale": (("w2_s", "down_s"), lambda c: c.mul_(1.2)),
                 "lm_head_scale": (("lm_head",), lambda c: c.mul_(1.02)),
                 "router_gate": (("gate",), lambda c: c.neg_())}
# <output>.<metric> -> the planted fault that must fail its bound (test_audit.py runs each)
FAULT_OF = {"o.rel": "o_proj_scale", "kv.max_abs": "kv_norm", "kv.cosine": "rope_shift",
            "index_k.max_abs": "rope_shift", "index_k.cosine": "rope_shift", "topk_missed.max_abs": "topk_swap",
            "topk_own.max_abs": "topk_swap", "streams.cosine": "rope_shift", "out.rel": "down_scale",
            "expert_ids.max_abs": "router_gate", "expert_weights.max_abs": "router_gate",
            "logits.rel": "lm_head_scale"}
# On a GPU (results/audit2_h200_summary.txt): the launch's fp8 index scores and SGLang's trade keys at the threshold in
# a clean run (16-26 of 2048), which hides topk_swap's one key, and rope_shift's 146-169 fail that bound; the output
# stream's clean distance from SGLang's (1e-6 from a cosine of 1) is as large as what rope_shift adds to it, and
# down_scale's (>= 9.6e-4) fails its bound
FAULT_OF_GPU = dict(FAULT_OF, **{"topk_missed.max_abs": "rope_shift", "streams.cosine": "down_scale"})


def metric_names(kind: str) -> list[str]:
    """The bound names the auditor reports for a launch kind."""
    if kind == "tail":
        return [f"tail.{m}" for m in TAIL_METRICS]
    ms = (LAYER_METRICS + (ROUTING_METRICS if kind in ("indexer", "shared") else ())
          + (INDEX_METRICS if kind != "shared" else ()))
    return [f"{kind}.{m}" for m in ms]


def read_fault() -> Optional[str]:
    """SGLANG_AMD_MONO_FAULT, or None; ValueError naming an unknown one."""
    fault = os.environ.get(ENV_FAULT) or None
    if fault is not None and fault not in FAULTS:
        raise ValueError(f"{ENV_FAULT}={fault!r} is not one of {sorted(FAULTS)}")
    return fault


def attach(built: Any, *, weights: Any, per_layer: list, tail_w: dict) -> "Auditor":
    """The auditor on `built` (runner_triton's TritonMonokernels), with SGLANG_AMD_MONO_FAULT's fault planted."""
    from sgl_amd_mono.glm53.bounds import AUDIT_BOUNDS_INTERP, SERVING_VS_SGLANG

    fault = read_fault()
    lm_head = tail_w["lm_head"]
    provider = choose(built.geo, weights, lm_head, lm_head.device)
    is_interp = lm_head.device.type == "cpu"
    if fault in WEIGHT_FAULTS:
        _plant(built, per_layer, tail_w, fault)
    path = os.environ.get(ENV_REPORT) or f"sgl-amd-mono-check-{os.getpid()}.jsonl"
    a = Auditor(geo=built.geo, provider=provider, bounds=AUDIT_BOUNDS_INTERP if is_interp else SERVING_VS_SGLANG,
                table="interpreter" if is_interp else "gpu", fault=fault, path=path,
                cos_sin_cache=built.cos_sin_cache)
    built.audit = a
    logger.warning("sgl-amd-mono check (%s=1): routed steps run eagerly, every layer audited against %s (%s); "
                   "bounds: %s table; report %s%s", ENV_CHECK, provider.name, provider.what, a.table,
                   os.path.abspath(path), f"; PLANTED FAULT {fault}: {FAULTS[fault]}" if fault else "")
    return a


def _plant(built: Any, per_layer: list, tail_w: dict, fault: str) -> None:
    """A weight fault: the launches of every width rebound to changed copies (SGLang's tensors untouched)."""
    names, change = WEIGHT_FAULTS[fault]
    copied = 0

    def changed(t: torch.Tensor) -> torch.Tensor:
        nonlocal copied
        copied += t.numel() * t.element_size()
        return change(t.clone())  # clone keeps SGLang's strides

    if fault == "lm_head_scale":
        tail = dict(tail_w, lm_head=changed(tail_w["lm_head"]))
        for w in built.bound:
            built.bound[w]["tail"] = built.plans[w]["tail"].bind(tail, launch_id=len(built.kinds_of))
    else:
        for i, kind in enumerate(built.kinds_of):
            t = dict(per_layer[i])
            t.update({n: changed(t[n]) for n in names if n in t})
            for w in built.bound:
                built.bound[w][i] = built.plans[w][kind].bind(t, launch_id=i)
    logger.warning("sgl-amd-mono check: planted fault %s: %s (%.2f MiB copied, read by the launches only)", fault,
                   FAULTS[fault], copied / 2**20)


@dataclasses.dataclass
class StepAudit:
    """One routed step's fields the audit reads."""

    number: int  # the audited step's number in this process
    f: Any  # step.StepFields
    live_rows: list  # rows whose out_cache_loc is not the pad rows' dummy slot 0
    slots: torch.Tensor  # [n] int64: every slot a row writes (the dummy slot too): saved and put back
    live_slots: torch.Tensor  # [live] int64: the live rows' slots, compared
    own: list  # each row's own draft-chain slots (none for a pad row)
    kv_cache: str  # the MLA cache's dtype
    cos_sin_next: Optional[torch.Tensor]  # [R, rope] f32: the next position's rows (rope_shift only)


def _copy(t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    return None if t is None else t.clone()


def _index_views(ik: torch.Tensor, dim: int):
    from sgl_amd_mono.glm53.indexer import _page_views

    return _page_views(ik, dim)


def _rows(kv: torch.Tensor, ik: Optional[torch.Tensor], slots: torch.Tensor, dim: int) -> dict:
    """Copies of the MLA rows (and index keys and scales) at slots."""
    out = {"kv": kv[slots].clone()}
    if ik is not None:
        keys, scales = _index_views(ik, dim)
        page, off = slots // 64, slots % 64
        out.update(keys=keys[page, off].clone(), scales=scales[page, off].clone())
    return out


def _put_rows(kv: torch.Tensor, ik: Optional[torch.Tensor], slots: torch.Tensor, rows: dict, dim: int) -> None:
    kv[slots] = rows["kv"]
    if ik is not None:
        keys, scales = _index_views(ik, dim)
        page, off = slots // 64, slots % 64
        keys[page, off] = rows["keys"]
        scales[page, off] = rows["scales"]


def _index_values(rows: dict) -> torch.Tensor:
    """Index keys dequantized: [n, dim] f32."""
    return rows["keys"].view(torch.float8_e4m3fn).float() * rows["scales"].float()[:, None]


def swap_two_entries(topk: torch.Tensor, *, out_loc: list, tokens: int) -> tuple[int, int, int, int]:
    """topk_swap, in place: the entry holding a live row's own key swapped with an entry of another live row (another
    request's first) that the first row's list lacks, where the other row's list lacks the first's key: both lists
    change, and the first loses its own key. Returns (row, entry, row, entry); ValueError where no rows allow it."""
    lists = topk.tolist()
    live = [r for r, s in enumerate(out_loc) if s != 0]
    for r1 in live:
        if out_loc[r1] not in lists[r1]:
            continue
        e1, s1 = lists[r1].index(out_loc[r1]), set(lists[r1])
        for r2 in sorted((r for r in live if r != r1), key=lambda r: (r // tokens == r1 // tokens, -r)):
            if out_loc[r1] in lists[r2]:
                continue
            e2 = next((e for e, v in enumerate(lists[r2]) if v != -1 and v not in s1), None)
            if e2 is not None:
                topk[r1, e1], topk[r2, e2] = lists[r2][e2], lists[r1][e1]
                return r1, e1, r2, e2
    raise ValueError("topk_swap: no live row lists its own key beside another live row that lacks it "
                     f"(out_cache_loc {out_loc})")


def topk_disagreement(got: torch.Tensor, want: torch.Tensor, own: list) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row ([R] f64 each): the count of want's slots got lacks, and of the row's own slots one list holds and
    the other does not (-1 entries are none)."""
    missed, own_d = [], []
    for g, w, mine in zip(got.tolist(), want.tolist(), own):
        sg, sw = set(g) - {-1}, set(w) - {-1}
        missed.append(len(sw - sg))
        own_d.append(sum((s in sg) != (s in sw) for s in mine))
    return torch.tensor(missed, dtype=torch.float64), torch.tensor(own_d, dtype=torch.float64)


def routing_disagreement(ids: torch.Tensor, weights: torch.Tensor, ids_ref: torch.Tensor,
                         weights_ref: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row ([R] f64 each): the count of ids_ref's experts ids lacks, and the largest weight difference expert by
    expert (an expert a routing lacks weighs 0 there). ids / ids_ref: [R, k] int; weights / weights_ref: [R, k] f32."""
    n = int(max(ids.max(), ids_ref.max())) + 1 if ids.numel() else 1
    dense = lambda i, w: torch.zeros(i.shape[0], n, dtype=torch.float64, device=i.device).scatter_add_(  # noqa: E731
        1, i.long(), w.double())
    missed = [len(set(r) - set(g)) for g, r in zip(ids.tolist(), ids_ref.tolist())]
    diff = (dense(ids, weights) - dense(ids_ref, weights_ref)).abs().amax(dim=1).cpu()
    return torch.tensor(missed, dtype=torch.float64), diff


class Auditor:
    """The audit of one built Triton backend: `launcher(f)` gives each routed step its launch call."""

    def __init__(self, *, geo: Any, provider: Any, bounds: dict, table: str, fault: Optional[str], path: str,
                 cos_sin_cache: torch.Tensor):
        self.geo, self.provider, self.bounds, self.table, self.fault = geo, provider, bounds, table, fault
        self.path, self.cos_sin_cache = path, cos_sin_cache
        self.summary = Summary()
        self.steps = 0
        self._file = open(path, "a", buffering=1)  # a line a record, each flushed
        atexit.register(self.close)

    def launcher(self, f: Any):
        """The step's launch call, (plan, layer, step tensors) -> the launch's outputs, each layer audited."""
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            raise RuntimeError(f"{ENV_CHECK}=1 audits eager steps only (it reads values on the host), and a routed "
                               "step is being captured in a CUDA graph: start the server with --disable-cuda-graph")
        loc = f.out_loc.tolist()
        live = [r for r, s in enumerate(loc) if s != 0]
        n = f.tokens
        own = [[s for s in loc[(r // n) * n: r + 1] if s != 0] if loc[r] != 0 else [] for r in range(len(loc))]
        nxt = None
        if self.fault == "rope_shift":
            pos = (f.positions + 1).clamp(max=self.cos_sin_cache.shape[0] - 1)
            nxt = self.cos_sin_cache.index_select(0, pos).float().contiguous()
        c = StepAudit(number=self.steps, f=f, live_rows=live, slots=torch.unique(f.out_loc),
                      live_slots=f.out_loc[live], own=own, cos_sin_next=nxt,
                      kv_cache=str(f.pool.get_key_buffer(0).dtype).replace("torch.", ""))
        self.steps += 1
        return functools.partial(self._launch, c)

    @torch.no_grad()  # SGLang's path reads the model's parameters: no autograd graph
    def _launch(self, c: StepAudit, plan: Any, layer: Any, step: dict) -> dict:
        if plan.table.name == "tail":
            return self._tail(c, plan, layer, step)
        return self._layer(c, plan, layer, step)

    def _layer(self, c: StepAudit, plan: Any, layer: Any, step: dict) -> dict:
        i, kind, f, dim = layer.launch_id, plan.table.name, c.f, self.geo.index_dim
        kv, ik = step["kv_cache"], step.get("index_k_cache")
        # the launch may overwrite its inputs (a kind's outputs are its plan's buffers): SGLang's path gets copies
        x = LayerInputs(input_ids=step["input_ids"], hidden=_copy(step["hidden"]), residual=_copy(step["residual"]),
                        cos_sin=step["cos_sin"].clone(), positions=f.positions, kv_cache=kv, index_k_cache=ik,
                        out_loc=f.out_loc, page_table=f.page_table, lengths=f.lengths,
                        topk_slots=_copy(step["topk_slots"]))
        saved = _rows(kv, ik, c.slots, dim)
        out = plan.run(layer, step if c.cos_sin_next is None else dict(step, cos_sin=c.cos_sin_next))
        attended = _copy(out.get("topk"))  # the list the launch's attention read (topk_swap changes it after)
        if self.fault == "topk_swap" and "topk" in out:  # in the launch's own buffer: the next layer reads it
            swap_two_entries(out["topk"], out_loc=f.out_loc.tolist(), tokens=f.tokens)
        got = {k: out[k].clone() for k in ("o", "out", "residual_out", "topk", "expert_ids", "expert_weights")
               if k in out}
        is_moe = "expert_ids" in got
        parts = LaunchParts(topk=attended, o=got["o"], expert_ids=got.get("expert_ids"),
                            expert_weights=got.get("expert_weights"),
                            xn2=plan.scratch["xn2"].clone() if is_moe else None)  # the router's input, as launched
        launch_rows, got_rows = _rows(kv, ik, c.slots, dim), _rows(kv, ik, c.live_slots, dim)
        _put_rows(kv, ik, c.slots, saved, dim)
        want = self.provider.layer(i, kind, x, parts)
        want_rows = _rows(kv, ik, c.live_slots, dim)
        _put_rows(kv, ik, c.slots, launch_rows, dim)  # the launch's rows, as a non-check server's step leaves them
        stream = lambda d: d["out"].float() + d["residual_out"].float()  # noqa: E731
        rows = list(range(int(f.out_loc.shape[0])))
        values = {"o.rel": (nm.by_row("rel", got["o"], want["o"]), rows),
                  "out.rel": (nm.by_row("rel", got["out"], want["out"]), rows),
                  "streams.cosine": (nm.by_row("cosine", stream(got), stream(want)), rows),
                  "kv.max_abs": (nm.by_row("max_abs", got_rows["kv"].float(), want_rows["kv"].float()), c.live_rows),
                  "kv.cosine": (nm.by_row("cosine", got_rows["kv"].float(), want_rows["kv"].float()), c.live_rows)}
        if is_moe:
            ids_missed, w_diff = routing_disagreement(got["expert_ids"], got["expert_weights"], want["expert_ids"],
                                                      want["expert_weights"])
            values.update({"expert_ids.max_abs": (ids_missed, rows), "expert_weights.max_abs": (w_diff, rows)})
        if kind != "shared":
            gi, wi = _index_values(got_rows), _index_values(want_rows)
            missed, own = topk_disagreement(got["topk"], want["topk"], c.own)
            values.update({"index_k.max_abs": (nm.by_row("max_abs", gi, wi), c.live_rows),
                           "index_k.cosine": (nm.by_row("cosine", gi, wi), c.live_rows),
                           "topk_missed.max_abs": (missed, rows), "topk_own.max_abs": (own, rows)})
        self._record(c, i, kind, values)
        return out

    def _tail(self, c: StepAudit, plan: Any, layer: Any, step: dict) -> dict:
        hidden, residual = step["hidden"].clone(), step["residual"].clone()
        out = plan.run(layer, step)
        want = self.provider.tail(hidden=hidden, residual=residual)
        rows = list(range(int(hidden.shape[0])))
        self._record(c, layer.launch_id, "tail", {"logits.rel": (nm.by_row("rel", out["logits"], want["logits"]),
                                                                 rows)})
        return out

    def _record(self, c: StepAudit, i: int, kind: str, values: dict) -> None:
        for suffix, (per_row, rows) in values.items():
            name = f"{kind}.{suffix}"
            if not rows:  # no live row (a step of pad rows only)
                continue
            value, at = nm.worst(name, per_row)
            bound = self.bounds.get(name)
            ok = None if bound is None else nm.passes(name, value, bound)
            r = {"step": c.number, "mode": c.f.mode, "rows": int(c.f.out_loc.shape[0]), "layer": i, "kind": kind,
                 "metric": name, "value": value, "row": rows[at], "bound": bound, "pass": ok,
                 "provider": self.provider.name, "table": self.table, "kv_cache": c.kv_cache, "fault": self.fault}
            self._file.write(json.dumps(r) + "\n")
            self.summary.add(r)
            if ok is False:
                logger.warning("sgl-amd-mono check: step %d (%s, %d rows) layer %d row %d: %s %.4g outside its bound "
                               "%.4g (against %s)", c.number, c.f.mode, r["rows"], i, r["row"], name, value, bound,
                               self.provider.name)

    def close(self) -> None:
        """Flush the report and log the summary (at shutdown, or when a tool is done)."""
        if self._file.closed:
            return
        self._file.close()
        atexit.unregister(self.close)
        log = logger.warning if self.summary.violations else logger.info
        log("%s\nreport: %s", self.summary.format(), os.path.abspath(self.path))
