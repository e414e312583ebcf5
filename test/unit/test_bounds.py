"""Bound names: one scheme, `<kind>.<output>.<metric>`, in every table `glm53/bounds.py` lists; a launch
kind's bounds name the kind's own outputs and buffers."""

import re

import pytest

from sgl_amd_mono.common import numerics
from sgl_amd_mono.glm53 import bounds
from sgl_amd_mono.glm53.kinds import dense, indexer, shared, tail

NAME = re.compile(r"^([a-z0-9_]+)\.([a-z0-9_]+)\.([a-z_]+)$")


def bad_names(names, *, buffers=None) -> list[str]:
    """The names that break the scheme (or, with `buffers`, name no buffer of the kind)."""
    out = []
    for n in names:
        m = NAME.match(n)
        if not m or m.group(3) not in numerics.METRICS:
            out.append(n)
        elif buffers is not None and m.group(2) not in buffers:
            out.append(n)
    return out


def test_every_bound_follows_the_scheme():
    assert bad_names(bounds.all_names()) == []


@pytest.mark.parametrize("comparison", [c for c in bounds.COMPARISONS if c.startswith("launch")])
def test_launch_bounds_name_the_kinds_buffers(comparison):
    tables = {"shared": shared.TABLE, "indexer": indexer.TABLE, "tail": tail.TABLE, "dense": dense.TABLE,
              "tokens": dense.TOKENS_TABLE}
    for kind, table in bounds.COMPARISONS[comparison].items():
        buffers = set(tables[kind].buffers()) | {"kv"}  # kv: the MLA cache rows this step wrote
        names = [k for v in table.values() for k in v] if all(isinstance(v, dict) for v in table.values()) else list(table)
        assert all(n.startswith(kind + ".") for n in names), names
        assert bad_names(names, buffers=buffers) == []


def test_a_bad_name_is_caught():
    assert bad_names(["shared.out.rel", "shared.out", "shared.out.relative", "Shared.out.rel"]) == [
        "shared.out", "shared.out.relative", "Shared.out.rel"]
    assert bad_names(["shared.nonexistent.rel"], buffers={"out"}) == ["shared.nonexistent.rel"]
