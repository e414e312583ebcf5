"""The auditor's report (`audit.py`): its JSON-lines file, the summary of one, and `sgl-amd-mono check-report`.

The file holds one JSON object a line, one a (step, layer, metric):

  step      int    the audited step's number in this process, from 0
  mode      str    "decode" or "target_verify"
  rows      int    the step's rows (its width, pad rows included)
  layer     int    the layer's index; the tail is the number of layers
  kind      str    the launch kind: "tokens", "dense", "indexer", "shared" or "tail"
  metric    str    the bound's name, <kind>.<output>.<metric> (`audit.OUTPUTS` says what each output is,
                   `audit.metric_names` which a kind reports): every layer's o.rel, kv.max_abs, kv.cosine,
                   streams.cosine and out.rel; the MoE kinds' (indexer, shared) routing, expert_ids.max_abs (a
                   count of experts) and expert_weights.max_abs; the selecting kinds' (tokens, dense, indexer)
                   index_k.max_abs, index_k.cosine, topk_missed.max_abs and topk_own.max_abs (counts of keys);
                   the tail's logits.rel
  value     float  the metric's worst row (a cosine's least, any other's greatest; NaN where a row is NaN)
  row       int    that row (the step's row index)
  bound     float  the bound (null: reported, not bounded by this table)
  pass      bool   the value within the bound (null where unbounded)
  provider  str    SGLang's path it was compared with (`audit_provider.py`: "cpu-modules", "sglang-triton-kernels")
  table     str    the bound table: "interpreter" (`bounds.AUDIT_BOUNDS_INTERP`) or "gpu" (`SPEC.numerics`)
  kv_cache  str    the MLA cache's dtype: "bfloat16" or "float8_e4m3fn"
  fault     str    the planted fault of this build (`audit.FAULTS`), null in a clean run

The summary (logged at shutdown, printed by check-report): each metric's checks, violations, its worst value with
its layer, step and row, and its bound. The plot: a panel per <output>.<metric>, the worst value a layer over the
file's steps, a line per step mode (and KV dtype, where the file holds several), the bound as a dashed line.
"""

from __future__ import annotations

import json
import math
import os
from typing import Iterable, Iterator, Optional, Sequence

FIELDS = ("step", "mode", "rows", "layer", "kind", "metric", "value", "row", "bound", "pass", "provider", "table",
          "kv_cache", "fault")


def is_worse(metric: str, value: float, than: Optional[float]) -> bool:
    """A NaN is the worst; then the lesser cosine, or the greater of any other metric."""
    if than is None or (isinstance(than, float) and math.isnan(than)):
        return than is None
    if value != value:
        return True
    return value < than if metric.endswith(".cosine") else value > than


class Summary:
    """Violations and the worst value a metric, over records fed one at a time (a server holds no record list)."""

    def __init__(self):
        self.metrics: dict[str, dict] = {}
        self.providers: set[str] = set()
        self.faults: set[Optional[str]] = set()
        self.steps: set[tuple] = set()  # (step, mode, KV dtype, fault): files of several runs merged stay apart

    def add(self, r: dict) -> None:
        m = self.metrics.setdefault(r["metric"], {"checks": 0, "violations": 0, "worst": None, "layer": None,
                                                   "step": None, "row": None, "bound": r["bound"]})
        m["checks"] += 1
        m["violations"] += r["pass"] is False
        if is_worse(r["metric"], r["value"], m["worst"]):
            m.update(worst=r["value"], layer=r["layer"], step=r["step"], row=r["row"], bound=r["bound"])
        self.providers.add(r["provider"])
        self.faults.add(r["fault"])
        self.steps.add((r["step"], r["mode"], r["kv_cache"], r["fault"]))

    @property
    def violations(self) -> int:
        return sum(m["violations"] for m in self.metrics.values())

    def violations_by_metric(self) -> dict[str, int]:
        return {k: m["violations"] for k, m in sorted(self.metrics.items()) if m["violations"]}

    def format(self) -> str:
        faults = sorted(f or "none" for f in self.faults)
        lines = [f"sgl-amd-mono check: {len(self.steps)} steps, {self.violations} violations; provider "
                 f"{', '.join(sorted(self.providers)) or '-'}; planted fault {', '.join(faults) or '-'}"]
        for name, m in sorted(self.metrics.items()):
            bound = "unbounded" if m["bound"] is None else f"bound {m['bound']:.12g}"
            worst = f"{m['worst']:.9g}" if name.endswith(".cosine") else f"{m['worst']:.4g}"
            lines.append(f"  {name:32s} {m['violations']:4d} of {m['checks']:4d} outside; worst {worst} "
                         f"(layer {m['layer']}, step {m['step']}, row {m['row']}); {bound}")
        return "\n".join(lines)


def read(path: str) -> Iterator[dict]:
    """The records of a report file; ValueError naming the line that is not one."""
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not a JSON object ({e})") from None
            missing = [k for k in FIELDS if k not in r]
            if missing:
                raise ValueError(f"{path}:{n}: a record lacks {missing}")
            yield r


def summarize(records: Iterable[dict]) -> Summary:
    s = Summary()
    for r in records:
        s.add(r)
    return s


def plot(records: Sequence[dict], path: str) -> None:
    """A PNG at path: a panel per <output>.<metric> (kinds together), the worst value a layer and step mode over the
    records (with its KV dtype where the records hold several), its bound dashed (a bound a layer: each kind's own); a
    cosine drawn as 1 - cosine, every panel on a symmetric log scale from 0."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels: dict[str, dict] = {}
    tail = None
    is_kv_named = len({r["kv_cache"] for r in records}) > 1  # a line a mode, and a KV dtype where several are here
    for r in records:
        metric = r["metric"].split(".", 1)[1]
        p = panels.setdefault(metric, {"lines": {}, "bounds": {}})
        line = p["lines"].setdefault(f"{r['mode']} {r['kv_cache']}" if is_kv_named else r["mode"], {})
        if is_worse(r["metric"], r["value"], line.get(r["layer"])):
            line[r["layer"]] = r["value"]
        if r["bound"] is not None:
            p["bounds"][r["layer"]] = r["bound"]
        if r["kind"] == "tail":
            tail = r["layer"]
    if not panels:
        raise ValueError("no records to plot")
    layers = sorted({r["layer"] for r in records})
    cols = min(3, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.4 * rows), squeeze=False)
    for ax, (metric, p) in zip(axes.flat, sorted(panels.items())):
        is_cos = metric.endswith("cosine")
        y = (lambda v: 1.0 - v) if is_cos else (lambda v: v)  # noqa: E731
        for mode, line in sorted(p["lines"].items()):
            xs = sorted(line)
            ax.plot(xs, [y(line[x]) for x in xs], marker="o", label=mode)
        if p["bounds"]:
            xs = sorted(p["bounds"])
            ax.plot(xs, [y(p["bounds"][x]) for x in xs], "k--", drawstyle="steps-mid", label="bound")
        ax.set_yscale("symlog", linthresh=1e-13 if is_cos else 1e-6)
        ax.set_ylim(bottom=0)
        ax.set_xticks(layers, [("tail" if x == tail else str(x)) for x in layers])
        ax.set_title(f"{metric[:-len('.cosine')]}: 1 - cosine" if is_cos else metric)
        ax.set_xlabel("layer")
        ax.legend(fontsize="small")
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)


def check_report(path: str, *, plot_path: Optional[str] = None) -> tuple[Summary, list, str]:
    """`sgl-amd-mono check-report FILE`'s reading: (the file's summary, its records, the plot's path: plot_path, or
    FILE's name with .png)."""
    records = list(read(path))
    return summarize(records), records, plot_path or os.path.splitext(path)[0] + ".png"
