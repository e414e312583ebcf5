"""common/numerics: the metric a bound's name selects, and how a bound passes."""

import math

import pytest
import torch

from sgl_amd_mono.common import numerics as nm


def test_metrics_by_name():
    b = torch.tensor([4.0, -2.0, 0.0, 0.0])
    a = b + torch.tensor([0.0, 0.0, 1.0, 0.0])
    assert nm.measure("x.y.max_abs", a, b) == 1.0
    assert nm.measure("x.y.max_rel", a, b) == 0.25  # worst element / largest reference element
    assert nm.measure("x.y.rel", a, b) == pytest.approx(1.0 / math.sqrt(20.0))  # norm ratio
    assert nm.measure("x.y.cosine", b, b) == pytest.approx(1.0)
    assert nm.max_rel(torch.zeros(3), torch.zeros(3)) == 0.0
    assert nm.max_rel(torch.ones(3), torch.zeros(3)) == float("inf")
    with pytest.raises(ValueError, match="metric 'l2' is not one of"):
        nm.measure("x.y.l2", a, b)


def test_passes():
    assert nm.passes("x.y.max_rel", 0.01, 0.02) and not nm.passes("x.y.max_rel", 0.03, 0.02)
    assert nm.passes("x.y.cosine", 0.999, 0.995) and not nm.passes("x.y.cosine", 0.99, 0.995)
    assert not nm.passes("x.y.rel", float("nan"), 1.0)


@pytest.mark.parametrize("metric", ["max_abs", "rel", "cosine"])
def test_by_row_is_the_metric_of_each_row(metric):
    g = torch.Generator().manual_seed(0)
    b = torch.randn(1, 3, 8, generator=g).expand(5, 3, 8)
    a = b + 0.1 * torch.randn(1, 3, 8, generator=g) * torch.arange(5.0)[:, None, None]  # row 0 equal, then worse
    per_row = nm.by_row(metric, a, b)
    assert per_row.shape == (5,)
    for r in range(5):
        assert per_row[r].item() == pytest.approx(nm.measure(f"x.y.{metric}", a[r], b[r]), rel=1e-12, abs=1e-15)
    value, row = nm.worst(f"x.y.{metric}", per_row)
    assert row == 4 and value == per_row[4].item()  # the least cosine / the greatest distance
    with pytest.raises(ValueError, match="metric 'missed' is not one of"):
        nm.by_row("missed", a, b)


def test_worst_takes_a_nan_row():
    value, row = nm.worst("x.y.rel", torch.tensor([0.1, float("nan"), 0.5]))
    assert math.isnan(value) and row == 1
