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
