"""sel1's lists shared over the select's later tasks in proportion to their keys (tiles.index_balance).

With sel1's lists (tiles.index_compact), slice s of row r lists ncand[r * NSL + s] keys from its slice's start in
the row's list columns (`stages_select.list_chunks`), and sel2, sel3 and emit scan them a task (r, s) each: a row
whose lists are long takes as long in every one of its tasks. Balanced, the R * NSL tasks take the rows' listed
keys row by row in proportion to them: row r the tasks [ends[r - 1], ends[r]), ends[r] = r + 1 + (R NSL - R) *
(the keys of rows 0..r) // (all rows' keys), at least one each; its j-th of n tasks the keys [j L / n, (j + 1) L /
n) of its L, counted through its slices' lists in slice order (so in position order). A task's keys are read
through `share_at`, its counts (sel3's cnt) kept at its own task id, and emit counts the keys before its share
from the row's earlier tasks (`share_counts`): the same histograms, counts and list as by slices."""

import triton
import triton.language as tl

from sgl_amd_mono.backends.triton.stages_index import BINS, slice_of


@triton.jit
def list_share(ncand_ptr, lens, t, R: tl.constexpr, NSL: tl.constexpr, IBLK: tl.constexpr, LS: tl.constexpr):
    """Task t's share: (r, j, q0, q1, c0, kin, goff): its row, its place among the row's tasks (0: the row's first,
    which keeps the row's prefix), the share [q0, q1) of the row's concatenated lists, the row's first task, and
    for `share_at` each slice's listed keys through it (inclusive cumulative, [NSL]) and the room the lists before
    it leave in their slices (each slice's width less its keys, summed over the slices before, [NSL]). Every task
    reads the same counts, so all agree."""
    T: tl.constexpr = R * NSL
    rows = tl.arange(0, 16)
    sls = tl.arange(0, NSL)
    sliced = (rows < R) & (lens > LS)
    nc = tl.load(ncand_ptr + rows[:, None] * NSL + sls[None, :], mask=sliced[:, None], other=0, cache_modifier=".cg")
    keys = tl.sum(nc, axis=1)
    total = tl.maximum(tl.sum(keys, axis=0), 1).to(tl.int64)
    ends = rows + 1 + ((T - R) * tl.cumsum(keys, axis=0).to(tl.int64) // total).to(tl.int32)
    r = tl.sum(((ends <= t) & (rows < R)).to(tl.int32), axis=0)
    c0 = tl.sum(tl.where(rows == r - 1, ends, 0), axis=0)
    n = tl.sum(tl.where(rows == r, ends, 0), axis=0) - c0
    j = t - c0
    n_keys = tl.sum(tl.where(rows == r, keys, 0), axis=0)
    nc_r = tl.sum(tl.where(rows[:, None] == r, nc, 0), axis=0)
    width = slice_of(tl.sum(tl.where(rows == r, lens, 0), axis=0), 1, NSL, IBLK)[0]
    room = width - nc_r
    return r, j, j * n_keys // n, (j + 1) * n_keys // n, c0, tl.cumsum(nc_r, axis=0), tl.cumsum(room, axis=0) - room


@triton.jit
def share_at(q, kin, goff):
    """Where a scan step's concatenated list indices q (consecutive, [N]) lie in the row's list columns: q plus
    the room before its slice (goff). The step's first and last index find the slices it spans (from kin); a
    loop over those (usually one or two) moves each index from the first slice's place to its own, so the code
    is a few scalar reductions over [NSL] whatever the step's width (a [N, NSL] comparison a step, inlined at
    each read, made the 8-row build 37,112 instructions against 26,992: sm_90 AOT on a CPU)."""
    N: tl.constexpr = q.shape[0]
    sls = tl.arange(0, kin.shape[0])
    lo = tl.min(q, axis=0)
    first = tl.sum((kin <= lo).to(tl.int32), axis=0)  # the slice holding the step's first index
    last = tl.minimum(tl.sum((kin <= lo + N - 1).to(tl.int32), axis=0), kin.shape[0] - 1)
    at = q + tl.sum(tl.where(sls == first, goff, 0), axis=0)
    for s in range(first + 1, last + 1):  # the later slices the step reaches: from their first index on
        start = tl.sum(tl.where(sls == s - 1, kin, 0), axis=0)
        at = tl.where(q >= start, q + tl.sum(tl.where(sls == s, goff, 0), axis=0), at)
    return at


@triton.jit
def share_counts(cnt_ptr, d, t, c0, NSL: tl.constexpr):
    """The row's keys above the threshold and at it before task t's share: sel3's counts of the row's earlier tasks
    [c0, t) at the threshold's last digit d (cnt[., d + 1] above, cnt[., d] at or above); (above, at). The tasks
    are fewer than 16 NSL (a power of two: at most 16 rows)."""
    tasks = tl.arange(0, 16 * NSL)
    before = (tasks >= c0) & (tasks < t)
    at_or_above = tl.load(cnt_ptr + tasks * (BINS + 1) + d, mask=before, other=0, cache_modifier=".cg")
    above = tl.load(cnt_ptr + tasks * (BINS + 1) + d + 1, mask=before, other=0, cache_modifier=".cg")
    n_above = tl.sum(above, axis=0)
    return n_above, tl.sum(at_or_above, axis=0) - n_above
