"""The DSA indexer's rows listed by one task (`glm53/kinds/indexer.py`): in stage sel1, a row of at most KTOP keys
lists every position in order, and a row of at most ISHORT keys selects its whole list from its scores in registers;
in stage sel2 (tiles.index_list_select), a sliced row selects its whole list from sel1's lists of its slices when
they fit one task's tile. The exactness rule's list, as the sliced radix select's (`stages_select.py`).
"""

import triton
import triton.language as tl

from sgl_amd_mono.backends.triton.stages_index import PAGE, slice_of
from sgl_amd_mono.backends.triton.stages_select import found_prefix, slots_of
from sgl_amd_mono.backends.triton.sync import count_task, live_tasks, report_invariant


@triton.jit
def signed_key(x):
    """f32 -> int32 whose signed order is the floats' (order_key(x) - 2^31: -0.0 below +0.0)."""
    b = x.to(tl.int32, bitcast=True)
    return tl.where(b < 0, b ^ 0x7FFFFFFF, b)


@triton.jit
def select_row(scores_ptr, page_table_ptr, topk_ptr, r, rlen, KTOP: tl.constexpr, PMAX: tl.constexpr,
               ISHORT: tl.constexpr):
    """Row r's whole list in one task, for KTOP < rlen <= ISHORT: its scores in registers (ISHORT / 256 a
    thread), the KTOP-th largest key u* found a bit at a time from the top (the largest threshold with KTOP keys
    at or above it: 32 counts), then the keys above u* at entries [0, above) and the first KTOP - above keys at
    u* after them, each in position order (prefix sums), as physical slots. The list of the exactness rule, as
    the sliced radix select's."""
    tt = tl.arange(0, ISHORT)
    valid = tt < rlen
    x = tl.load(scores_ptr + r * (PMAX * PAGE) + tt, mask=valid, other=0.0, cache_modifier=".cg")
    page = tl.load(page_table_ptr + r * PMAX + tt // PAGE, mask=valid, other=0)
    sk = signed_key(x)
    thr = (rlen * 0).to(tl.int64)  # u*'s bits found so far, as order_key's uint32 value
    one = thr + 1
    for b in tl.static_range(32):
        cand = thr | (one << (31 - b))
        n = tl.sum((valid & (sk >= (cand - (one << 31)).to(tl.int32))).to(tl.int32), axis=0)
        thr = tl.where(n >= KTOP, cand, thr)
    thr_s = (thr - (one << 31)).to(tl.int32)
    is_above = valid & (sk > thr_s)
    is_at = valid & (sk == thr_s)
    above = tl.sum(is_above.to(tl.int32), axis=0)
    rank_at = tl.cumsum(is_at.to(tl.int32), axis=0) - 1
    dest = tl.where(is_above, tl.cumsum(is_above.to(tl.int32), axis=0) - 1, above + rank_at)
    tl.store(topk_ptr + r * KTOP + dest, page * PAGE + tt % PAGE, mask=is_above | (is_at & (rank_at < KTOP - above)))


@triton.jit
def listed_rows(scores_ptr, lens, page_table_ptr, topk_ptr, pid, ok, task_count_ptr, S: tl.constexpr, R: tl.constexpr,
                KTOP: tl.constexpr, PMAX: tl.constexpr, ISHORT: tl.constexpr, LS: tl.constexpr, NPROG: tl.constexpr,
                SKIP_MASK: tl.constexpr, COUNT_TASKS: tl.constexpr):
    """R tasks (row r) on the last programs, of the rows of at most LS keys: the whole list. A row of L <= KTOP
    keys: position t at entry t (as a physical slot page_table[r, t // 64] * 64 + t % 64), then -1; a longer
    one: `select_row`."""
    KB: tl.constexpr = 256 if KTOP > 256 else KTOP
    for r in tl.range(NPROG - 1 - pid, live_tasks(R, ok, S, SKIP_MASK), NPROG, num_stages=1):  # tasks: never pipelined
        rlen = tl.sum(tl.where(tl.arange(0, 16) == r, lens, 0), axis=0)
        if rlen <= KTOP:
            count_task(task_count_ptr, S, COUNT_TASKS)
            for k0 in range(0, KTOP, KB):
                tt = k0 + tl.arange(0, KB)
                page = tl.load(page_table_ptr + r * PMAX + tt // PAGE, mask=tt < rlen, other=0)
                tl.store(topk_ptr + r * KTOP + tt, tl.where(tt < rlen, page * PAGE + tt % PAGE, -1))
        if ISHORT > KTOP:
            if (rlen > KTOP) & (rlen <= LS):
                count_task(task_count_ptr, S, COUNT_TASKS)
                select_row(scores_ptr, page_table_ptr, topk_ptr, r, rlen, KTOP, PMAX, ISHORT)


@triton.jit
def lists_fit(ncand_ptr, lens, R: tl.constexpr, NSL: tl.constexpr, LS: tl.constexpr, LT: tl.constexpr):
    """Whether each slice's list that sel1 left (tiles.index_compact: ncand[r, s] keys) holds at most LT / NSL keys,
    on every row past LS keys (lens: `row_lengths`), so that `select_listed` can take every sliced row: read after
    sel1's hand-off, the same answer in every program."""
    rows = tl.arange(0, 16)
    n = tl.load(ncand_ptr + rows[:, None] * NSL + tl.arange(0, NSL)[None, :],
                mask=((rows < R) & (lens > LS))[:, None], other=0, cache_modifier=".cg")
    return tl.max(tl.max(n, axis=1), axis=0) <= LT // NSL


@triton.jit
def select_listed(cand_pos_ptr, cand_key_ptr, ncand_ptr, kept1_ptr, hist1_ptr, pair_ptr, page_table_ptr, topk_ptr,
                  err_ptr, launch_id, lens, epoch, pid, ok, task_count_ptr, S: tl.constexpr, R: tl.constexpr,
                  KTOP: tl.constexpr, PMAX: tl.constexpr, NSL: tl.constexpr, IBLK: tl.constexpr, LS: tl.constexpr,
                  LT: tl.constexpr, HCP: tl.constexpr, NBP: tl.constexpr, KNOWN: tl.constexpr,
                  PACKED: tl.constexpr, PAIR: tl.constexpr, NPROG: tl.constexpr, SKIP_MASK: tl.constexpr,
                  COUNT_TASKS: tl.constexpr):
    """Task (row r) of the rows past LS keys, once `lists_fit`: row r's whole list from sel1's lists (a slice's keys
    at or above digit 0's prefix and the row's floor, in position order, at the slice's start in cand_pos / cand_key)
    held as one [NSL, LT / NSL] tile, a slice a tile row, so the tile in row-major order is the keys in position
    order. The threshold's top KNOWN bits come from the histograms sel1 counted (`found_prefix` over kept1 and hist1,
    with PAIR the pair histogram too: the same digits sel2 and sel3 would find), its other bits a bit at a time from
    the top among the listed keys with that prefix (the largest value that `need` of them reach: a key at or above the
    threshold is always listed, so the count is exact wherever it decides). Then the keys above the threshold at
    entries [0, above) and the first KTOP - above at it after them, in position order, as physical slots: the list
    of the exactness rule, every entry written. Counts that disagree with it (a bug) write the error word
    (ERR_INVARIANT: this stage, the row, the entries the list would fill, KTOP) and drop entries past KTOP."""
    SCOL: tl.constexpr = PMAX * PAGE
    LW: tl.constexpr = LT // NSL
    LOW: tl.constexpr = 32 - KNOWN
    sl = tl.arange(0, NSL)
    i = tl.arange(0, LW)
    parity = epoch & 1
    for r in tl.range(pid, live_tasks(R, ok, S, SKIP_MASK), NPROG, num_stages=1):  # tasks: never pipelined
        rlen = tl.sum(tl.where(tl.arange(0, 16) == r, lens, 0), axis=0)
        if rlen > LS:
            count_task(task_count_ptr, S, COUNT_TASKS)
            s0, _ = slice_of(rlen, sl, NSL, IBLK)
            n = tl.load(ncand_ptr + r * NSL + sl, cache_modifier=".cg")
            valid = i[None, :] < n[:, None]
            at = r * SCOL + s0[:, None] + i[None, :]
            u = tl.load(cand_key_ptr + at, mask=valid, other=0, cache_modifier=".cg").to(tl.uint32, bitcast=True)
            pos = tl.load(cand_pos_ptr + at, mask=valid, other=0, cache_modifier=".cg")
            need, prefix = found_prefix(kept1_ptr, hist1_ptr, r, parity * R + r, KTOP, False, HCP, NBP, PACKED,
                                        pair_ptr, PAIR)
            in_bin = valid & ((u >> LOW) == prefix.to(tl.uint32))
            thr = (prefix << LOW).to(tl.uint32)
            for b in tl.static_range(LOW):
                cand = thr | (1 << (LOW - 1 - b))
                n_at_cand = tl.sum(tl.sum((in_bin & (u >= cand)).to(tl.int32), axis=1), axis=0)
                thr = tl.where(n_at_cand >= need, cand, thr)
            is_above = valid & (u > thr)
            is_at = valid & (u == thr)
            # each key's inclusive count of the keys above (low 16 bits) and at the threshold (high) before it in
            # position order: a tile row's own, then the rows' before it (a list holds < 2^16 keys)
            both = is_above.to(tl.int32) + is_at.to(tl.int32) * 65536
            row_tot = tl.sum(both, axis=1)
            incl = tl.cumsum(both, axis=1) + (tl.cumsum(row_tot, axis=0) - row_tot)[:, None]
            tot = tl.sum(row_tot, axis=0)
            above = tot & 65535
            n_at = tot >> 16
            rank_at = (incl >> 16) - 1
            dest = tl.where(is_above, (incl & 65535) - 1, above + rank_at)
            put = (is_above | (is_at & (rank_at < KTOP - above))) & (dest < KTOP)
            tl.store(topk_ptr + r * KTOP + dest, slots_of(page_table_ptr, r, pos, put, PMAX), mask=put)
            if (above >= KTOP) | (above + n_at < KTOP):  # the threshold and the counts disagree: not this rule's list
                report_invariant(err_ptr, launch_id, S, pid, r, above + n_at, KTOP)
