"""Metrics (max_abs, rel, max_rel, cosine, missed), named bounds `<launch>.<output>.<metric>`, and their report.

A bound passes when the metric is within its limit (cosine: at least the limit). Every bound is
shipped with a negative control (a planted error) that must fail it; `report` prints both.
Model-independent; imports nothing from SGLang.
"""

from __future__ import annotations

import hashlib

import torch


def max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.float() - b.float()).abs().max().item() if a.numel() else 0.0


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """||a - b|| / ||b|| in f64."""
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp(min=1e-30)).item()


def max_rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """max|a - b| / max|b| (0 when both are zero): the worst element against the largest reference."""
    den = b.float().abs().max().item() if b.numel() else 0.0
    num = max_abs(a, b)
    return num / den if den else (0.0 if num == 0 else float("inf"))


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return torch.nn.functional.cosine_similarity(a.double().flatten(), b.double().flatten(), dim=0).item()


def missed(a: torch.Tensor, b: torch.Tensor) -> float:
    """Lists [rows, k] (-1 = none): the worst row's fraction of b's entries that a's row lacks (order aside)."""
    worst = 0.0
    for ra, rb in zip(a.tolist(), b.tolist()):
        want = set(rb) - {-1}
        worst = max(worst, len(want - set(ra)) / max(1, len(rb)))
    return worst


METRICS = {"max_abs": max_abs, "rel": rel, "max_rel": max_rel, "cosine": cosine, "missed": missed}


def by_row(metric: str, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """max_abs, rel or cosine of each row of a against b's ([R, ...] -> [R] f64): row r's value is the whole-tensor
    metric of a[r] against b[r]."""
    if metric == "max_abs":  # in f32, as max_abs
        d = (a.float() - b.float()).flatten(1).abs()
        return d.amax(dim=1).double() if d.shape[1] else torch.zeros(d.shape[0], dtype=torch.float64)
    a, b = a.double().flatten(1), b.double().flatten(1)
    if metric == "rel":
        return (a - b).norm(dim=1) / b.norm(dim=1).clamp(min=1e-30)
    if metric == "cosine":
        return torch.nn.functional.cosine_similarity(a, b, dim=1)
    raise ValueError(f"by_row: metric {metric!r} is not one of ['cosine', 'max_abs', 'rel']")


def worst(name: str, values: torch.Tensor) -> tuple[float, int]:
    """(the worst of per-row values of bound `name`, its row): the least for a cosine, else the greatest (NaN
    first: it never passes)."""
    v = values.double()
    nan = torch.isnan(v)
    if bool(nan.any()):
        return float("nan"), int(nan.nonzero()[0])
    row = int(v.argmin() if name.endswith(".cosine") else v.argmax())
    return float(v[row]), row


def measure(name: str, a: torch.Tensor, b: torch.Tensor) -> float:
    """The metric named by the last part of `name` (e.g. "shared.out.rel")."""
    metric = name.rsplit(".", 1)[-1]
    if metric not in METRICS:
        raise ValueError(f"bound {name!r}: metric {metric!r} is not one of {sorted(METRICS)}")
    return METRICS[metric](a, b)


def passes(name: str, value: float, limit: float) -> bool:
    if value != value:  # NaN never passes
        return False
    return value >= limit if name.endswith(".cosine") else value <= limit


def digest(t: torch.Tensor) -> str:
    """sha256 of a tensor's bytes (first 16 hex digits)."""
    b = t.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes()
    return hashlib.sha256(b).hexdigest()[:16]
