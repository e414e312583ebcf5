"""common/trace.stage_table on hand-made stamps (what a trace build's programs write)."""

import pytest
import torch

from sgl_amd_mono.common import trace


def _stamps():
    # 2 programs, 3 stages; ns. Columns: s0 done, s0 out, s1 done, s1 out, s2 done, start.
    return torch.tensor([[1000, 2000, 5000, 6500, 7000, 0],
                         [1500, 2200, 4000, 6000, 8000, 100]], dtype=torch.int64)


def test_stage_table_values():
    rows = trace.stage_table(_stamps(), ["a", "b", "c"])
    got = {r["stage"]: (r["start"], r["work"], r["sync"], r["span"]) for r in rows}
    # a: starts when the last program started (0.1 us), last arrival 1.5 us, last out of its wait 2.2 us
    assert got["a"] == pytest.approx((0.0 + 0.1, 1.4, 0.7, 2.1))
    assert got["b"] == pytest.approx((2.2, 2.8, 1.5, 4.3))
    assert got["c"] == pytest.approx((6.5, 1.5, 0.0, 1.5))
    # the spans tile the launch from the last program's start to the last program's end
    assert sum(r["span"] for r in rows) == pytest.approx((8000 - 100) / 1e3)
    assert "| total |" in trace.format_table(rows)


def test_stage_table_own_time_and_last_program():
    """own: the median of each program's arrival minus its own exit from the previous wait (lower middle of 2);
    last: the latest arrival. b's work (2.8 us from the last exit of a's wait) is one program's: own 1.8 us
    (program 1 left a's wait at 2.2 us and arrived at 4.0; program 0 left at 2.0 and arrived last, at 5.0)."""
    rows = {r["stage"]: r for r in trace.stage_table(_stamps(), ["a", "b", "c"])}
    assert (rows["a"]["own"], rows["a"]["last"]) == (pytest.approx(1.0), 1)
    assert (rows["b"]["own"], rows["b"]["last"]) == (pytest.approx(1.8), 0)
    assert (rows["c"]["own"], rows["c"]["last"]) == (pytest.approx(0.5), 1)
    # b: own times 3.0 (program 0) and 1.8 (program 1): p90 the higher, 3.0, the last program's 3.0
    assert (rows["b"]["own_p90"], rows["b"]["last_own"]) == (pytest.approx(3.0), pytest.approx(3.0))
    assert (rows["a"]["own_p90"], rows["a"]["last_own"]) == (pytest.approx(1.4), pytest.approx(1.4))
    assert "| b | 2.2 | 2.8 | 1.5 | 4.3 | 1.8 | 0 | 3.0 | 3.0 |" in trace.format_table(list(rows.values()))


def test_stage_table_refuses_wrong_shape():
    with pytest.raises(ValueError, match="expected \\[programs, 8\\] for 4 stages"):
        trace.stage_table(_stamps(), ["a", "b", "c", "d"])


def test_stage_never_stamped_is_reported_not_counted():
    """A stage no program stamped (zeros: a cross-rank sum a one-rank build passes) is 'not stamped', the stages
    after it start where they would have, and the totals leave it out; a negative span would fail."""
    st = _stamps()
    st = torch.cat([st[:, :2], torch.zeros(2, 2, dtype=torch.int64), st[:, 2:]], dim=1)  # b2 between a and b
    rows = trace.stage_table(st, ["a", "b2", "b", "c"])
    got = {r["stage"]: r for r in rows}
    assert got["b2"]["span"] is None and got["b2"]["start"] is None
    assert (got["b"]["start"], got["b"]["span"]) == pytest.approx((2.2, 4.3))
    assert sum(r["span"] for r in rows if r["span"] is not None) == pytest.approx((8000 - 100) / 1e3)
    text = trace.format_table(rows)
    assert "| b2 | not stamped |" in text and "| total | | 5.7 | 2.2 | 7.9 |" in text
    assert got["b2"]["own_p90"] is None and got["b2"]["last_own"] is None
    assert got["b2"]["own"] is None and got["b2"]["last"] is None
    assert got["b"]["own"] == pytest.approx(1.8)  # each program's own exit from a's wait (b2 has none)


def test_program_own_matches_the_table():
    """program_own gives each program's own time, whose median and p90 are the table's own and own_p90; a stage
    never stamped gives None; a name not in the launch is refused."""
    own = trace.program_own(_stamps(), ["a", "b", "c"], "b")
    assert own.tolist() == pytest.approx([3.0, 1.8])
    st = torch.cat([_stamps()[:, :2], torch.zeros(2, 2, dtype=torch.int64), _stamps()[:, 2:]], dim=1)
    assert trace.program_own(st, ["a", "b2", "b", "c"], "b2") is None
    assert trace.program_own(st, ["a", "b2", "b", "c"], "b").tolist() == pytest.approx([3.0, 1.8])
    with pytest.raises(ValueError, match="'z' is not a stage"):
        trace.program_own(_stamps(), ["a", "b", "c"], "z")
