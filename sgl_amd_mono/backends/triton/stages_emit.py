"""The sliced radix select's last stage in Triton, emit (`glm53/kinds/indexer.py` is the table): each (row, slice)
task puts its slice's selected keys in the row's list, as physical slots, from the threshold and the slices' counts
the stages before it left (`stages_select.py`: sel1 .. sel3)."""

import triton
import triton.language as tl

from sgl_amd_mono.backends.triton.stages_index import BINS, PAGE, slice_of
from sgl_amd_mono.backends.triton.stages_select import EMIT_ROWS, chunk_offsets, found_prefix, key_of, load_step
from sgl_amd_mono.backends.triton.sync import arrive_row, count_task, report_invariant, stage_tasks, task_runs, wait_row


@triton.jit
def dropped_entry(n_above0, n_above, n_at0, n_at, need, KTOP: tl.constexpr):
    """The furthest list entry outside [0, KTOP) that an emit task's slice would have put (+1; 0: none), from its
    counts before and after its scan: its keys above the threshold went to entries [n_above0, n_above), those at
    it to KTOP - need + [n_at0, min(n_at, need)). Only counts that disagree with the threshold (a bug) give one;
    the scan's stores dropped it."""
    put_above = n_above > n_above0
    first_at = KTOP - need + n_at0
    worst = tl.where(put_above & (n_above > KTOP), n_above, 0)  # the last entry n_above - 1, +1
    worst = tl.maximum(worst, tl.where(put_above & (n_above0 < 0), 1 - n_above0, 0))
    return tl.maximum(worst, tl.where((tl.minimum(n_at, need) > n_at0) & (first_at < 0), 1 - first_at, 0))


@triton.jit
def emit(scores_ptr, lens, page_table_ptr, hist3_ptr, kept3_ptr, cnt_ptr, topk_ptr, err_ptr,
         launch_id, epoch, pid, ok, task_count_ptr, S: tl.constexpr, R: tl.constexpr, KTOP: tl.constexpr,
         PMAX: tl.constexpr, NSL: tl.constexpr, IBLK: tl.constexpr, ISCAN: tl.constexpr, LS: tl.constexpr,
         NPROG: tl.constexpr, SKIP_MASK: tl.constexpr, COUNT_TASKS: tl.constexpr, cand_pos_ptr=None, cand_key_ptr=None,
         ncand_ptr=None, LIST: tl.constexpr = False, EK: tl.constexpr = 0, PACKED: tl.constexpr = False,
         ROWS: tl.constexpr = False, rows_ptr=None, wait_rows_ptr=None, WAIT_PARTS: tl.constexpr = 0,
         S_WAIT: tl.constexpr = 0, bound=0,
         TIMER: tl.constexpr = False, SKIP_ARRIVE: tl.constexpr = -1):
    """Task (row r, slice s) of the rows past LS keys: row r's list entries from the slice, as physical slots
    page_table[r, t // 64] * 64 + t % 64: its keys above the threshold at entries [above before the slice + rank
    in the slice), then its keys at the threshold at [KTOP - need + equal before + rank), the first `need` of
    them (position order throughout). The earlier slices' keys above the threshold and at it come from sel3's
    counts at the threshold's last digit d: cnt[., d + 1] and cnt[., d] - cnt[., d + 1]. An entry that would land
    outside the row's list (the counts and the threshold disagree: a bug) is dropped and the error word written
    (ERR_INVARIANT: this stage, the row, the entry, KTOP). LIST (tiles.index_compact): the scan reads the slice's
    list that sel1 left (its keys at or above a prefix of the threshold, in position order: `select_digit`), not
    its scores. EK > 0 (tiles.index_emit_k): the slice in chunks of EMIT_ROWS x EK keys (`emit_chunks`), not
    ISCAN-key steps. PACKED: `slice_counts`' (tiles.index_packed_counts). ROWS (tiles.index_row_waits): every task
    index, each launch, first waits until its row's word at wait_rows_ptr holds WAIT_PARTS arrivals of stage S_WAIT
    (`sync.wait_row`: sel3's tasks of the row) and after its work arrives at the row's word at rows_ptr, which the
    row's attention tasks wait on. Returns ok."""
    parity = epoch & 1
    n_tasks = stage_tasks(R * NSL, ok, S, SKIP_MASK, ROWS)
    for t in tl.range(pid, n_tasks, NPROG, num_stages=1):  # tasks: never pipelined
        r = t // NSL
        s = t % NSL
        if ROWS:
            ok = wait_row(wait_rows_ptr, r, WAIT_PARTS, S_WAIT, epoch, ok, err_ptr, launch_id, S, pid, bound, TIMER)
        rlen = tl.sum(tl.where(tl.arange(0, 16) == r, lens, 0), axis=0)
        s0, s1 = slice_of(rlen, s, NSL, IBLK)
        if ROWS:  # a failed wait or an emptied stage: the task only arrives
            go = (rlen > LS) & (s0 < s1) & task_runs(ok, S, SKIP_MASK)
        else:
            go = (rlen > LS) & (s0 < s1)
        if go:
            count_task(task_count_ptr, S, COUNT_TASKS)
            if EK > 0:
                n_above0, n_above, n_at0, n_at, need = emit_chunks(
                    scores_ptr, page_table_ptr, hist3_ptr, kept3_ptr, cnt_ptr, topk_ptr, r, s, t, s0, s1, parity, R,
                    KTOP, PMAX, NSL, EK, cand_pos_ptr, cand_key_ptr, ncand_ptr, LIST, PACKED)
            else:
                n_above0, n_above, n_at0, n_at, need = emit_steps(
                    scores_ptr, page_table_ptr, hist3_ptr, kept3_ptr, cnt_ptr, topk_ptr, r, s, t, s0, s1, parity, R,
                    KTOP, PMAX, NSL, ISCAN, cand_pos_ptr, cand_key_ptr, ncand_ptr, LIST, PACKED)
            # checked once a slice, not a step: a reduction and the error branch inside the scan cost about twice
            # its instructions (sm_90)
            worst = dropped_entry(n_above0, n_above, n_at0, n_at, need, KTOP)
            if worst > 0:  # counts and threshold disagree: the entries past the row's list were not written
                report_invariant(err_ptr, launch_id, S, pid, r, worst - 1, KTOP)
        if ROWS:
            arrive_row(rows_ptr, r, S, SKIP_ARRIVE)
    return ok


@triton.jit
def put_entries(topk_ptr, r, slot, incl, is_above, is_at, n_above, n_at, need, KTOP: tl.constexpr):
    """A scan step's keys put in row r's list as their slots: incl, each key's inclusive count in the slice's step
    of the keys above the threshold (low 16 bits) and at it (high 16), so its entry is above-before + rank for a key
    above and KTOP - need + at-before + rank for one of the first `need` at it. An entry outside [0, KTOP) is dropped
    (`dropped_entry` reports it)."""
    rank_above = n_above + (incl & 65535) - 1
    rank_at = n_at + (incl >> 16) - 1
    take_at = is_at & (rank_at < need)
    dest = tl.where(is_above, rank_above, KTOP - need + rank_at)
    put = is_above | take_at
    tl.store(topk_ptr + r * KTOP + dest, slot, mask=put & (dest >= 0) & (dest < KTOP))


@triton.jit
def positions(cand_pos_ptr, r, tt, end, SCOL: tl.constexpr, LIST: tl.constexpr):
    """A scan step's key positions at tt below end: tt itself, or (LIST) the slice's listed positions there
    (cand_pos, from L2)."""
    if LIST:
        return tl.load(cand_pos_ptr + r * SCOL + tt, mask=tt < end, other=0, cache_modifier=".cg")
    else:
        return tt


@triton.jit
def slots_of(page_table_ptr, r, pos, valid, PMAX: tl.constexpr):
    """Row r's key positions pos (where valid) as physical slots: page_table[r, pos // 64] * 64 + pos % 64."""
    return tl.load(page_table_ptr + r * PMAX + pos // PAGE, mask=valid, other=0) * PAGE + pos % PAGE


@triton.jit
def emit_start(scores_ptr, page_table_ptr, cand_pos_ptr, cand_key_ptr, ncand_ptr, r, t, s0, s1, offs,
               PMAX: tl.constexpr, LIST: tl.constexpr):
    """An emit task's first step, its keys at s0 + offs: (src, x, slot, s1), the scan's source (the row's scores,
    or with LIST the slice's listed order keys), the step's raw keys and their slots, and the scan's end (with
    LIST s0 + the list's length). A listed step's positions load before the list's length is known (masked at the
    slice's end); their slots as soon as both are in, beside the threshold's loads, not after them."""
    SCOL: tl.constexpr = PMAX * PAGE
    if LIST:
        src = cand_key_ptr + r * SCOL
    else:
        src = scores_ptr + r * SCOL
    pos = positions(cand_pos_ptr, r, s0 + offs, s1, SCOL, LIST)
    x = load_step(src, s0 + offs, s1, LIST)
    if LIST:
        s1 = s0 + tl.load(ncand_ptr + t, cache_modifier=".cg")
    return src, x, slots_of(page_table_ptr, r, pos, s0 + offs < s1, PMAX), s1


@triton.jit
def slice_counts(hist3_ptr, kept3_ptr, cnt_ptr, r, s, parity, R: tl.constexpr, KTOP: tl.constexpr,
                 NSL: tl.constexpr, PACKED: tl.constexpr = False):
    """An emit task's start, row r and slice s: (need, thr, n_above, n_at), the row's threshold (its KTOP-th
    largest order key), how many keys at it the list takes, and the row's keys above it and at it in the slices
    before s (sel3's counts at the threshold's last digit d: cnt[., d + 1] and cnt[., d] - cnt[., d + 1]). PACKED
    (tiles.index_packed_counts): `found_prefix`'s, and both sums from one reduction (at or above in the high word,
    above in the low; each < 2^32): the same values."""
    sls = tl.arange(0, NSL)
    need, thr = found_prefix(kept3_ptr, hist3_ptr, r, parity * R + r, KTOP, False, 1, BINS, PACKED)
    d = (thr & 255).to(tl.int32)
    before = sls < s
    at_or_above = tl.load(cnt_ptr + (r * NSL + sls) * (BINS + 1) + d, mask=before, other=0, cache_modifier=".cg")
    above = tl.load(cnt_ptr + (r * NSL + sls) * (BINS + 1) + d + 1, mask=before, other=0, cache_modifier=".cg")
    if PACKED:
        packed = tl.sum((at_or_above.to(tl.int64) << 32) + above.to(tl.int64), axis=0)
        n_above = (packed & 0xFFFFFFFF).to(tl.int32)
        n_at = (packed >> 32).to(tl.int32) - n_above
    else:
        n_above = tl.sum(above, axis=0)
        n_at = tl.sum(at_or_above, axis=0) - n_above
    return need, thr, n_above, n_at


@triton.jit
def emit_steps(scores_ptr, page_table_ptr, hist3_ptr, kept3_ptr, cnt_ptr, topk_ptr, r, s, t, s0, s1, parity,
               R: tl.constexpr, KTOP: tl.constexpr, PMAX: tl.constexpr, NSL: tl.constexpr, ISCAN: tl.constexpr,
               cand_pos_ptr, cand_key_ptr, ncand_ptr, LIST: tl.constexpr, PACKED: tl.constexpr = False):
    """`emit`'s task over its slice [s0, s1) ISCAN keys a step, one block-wide scan a step; returns the row's
    counts before and after the slice (n_above0, n_above, n_at0, n_at) and need."""
    SCOL: tl.constexpr = PMAX * PAGE
    blk = tl.arange(0, ISCAN)
    src, x, slot, s1 = emit_start(scores_ptr, page_table_ptr, cand_pos_ptr, cand_key_ptr, ncand_ptr, r, t, s0, s1, blk,
                                  PMAX, LIST)
    # a listed step's positions load two steps ahead, so that its slots' page ids (a load on that load) go out a
    # step ahead with the keys and no step waits on two loads in a row
    pos_next = positions(cand_pos_ptr, r, s0 + ISCAN + blk, s1, SCOL, LIST)
    need, thr, n_above, n_at = slice_counts(hist3_ptr, kept3_ptr, cnt_ptr, r, s, parity, R, KTOP, NSL, PACKED)
    n_above0 = n_above
    n_at0 = n_at
    for t0 in tl.range(s0, s1, ISCAN, num_stages=1):  # prefetched by hand, a block ahead (positions two)
        tt = t0 + blk
        valid = tt < s1
        x_next = load_step(src, tt + ISCAN, s1, LIST)
        slot_next = slots_of(page_table_ptr, r, pos_next, tt + ISCAN < s1, PMAX)
        pos_next = positions(cand_pos_ptr, r, tt + 2 * ISCAN, s1, SCOL, LIST)
        u = key_of(x, LIST).to(tl.int64)
        is_above = valid & (u > thr)
        is_at = valid & (u == thr)
        # both ranks from one scan: the keys above in the low 16 bits, those at the threshold in the high
        # (each < 2^16 a block: index_scan <= 32768), inclusive, so nondecreasing: its max is the block's
        both = tl.cumsum(is_above.to(tl.int32) + is_at.to(tl.int32) * 65536, axis=0)
        put_entries(topk_ptr, r, slot, both, is_above, is_at, n_above, n_at, need, KTOP)
        counts = tl.max(both, axis=0)  # the block's (inclusive: its last)
        n_above += counts & 65535
        n_at += counts >> 16
        x = x_next
        slot = slot_next
    return n_above0, n_above, n_at0, n_at, need


@triton.jit
def emit_chunks(scores_ptr, page_table_ptr, hist3_ptr, kept3_ptr, cnt_ptr, topk_ptr, r, s, t, s0, s1, parity,
                R: tl.constexpr, KTOP: tl.constexpr, PMAX: tl.constexpr, NSL: tl.constexpr, EK: tl.constexpr,
                cand_pos_ptr, cand_key_ptr, ncand_ptr, LIST: tl.constexpr, PACKED: tl.constexpr = False):
    """`emit_steps` in chunks of EMIT_ROWS x EK keys, a [EMIT_ROWS, EK] tile (a tile row's EK keys consecutive): a
    key's counts from a scan along its tile row plus an exclusive scan of the rows' totals, so one block-wide scan
    a chunk (`emit_steps`: one an ISCAN-key step). The same entries; the next chunk's loads issued before this
    one's scans."""
    SCOL: tl.constexpr = PMAX * PAGE
    CH: tl.constexpr = EMIT_ROWS * EK
    offs = chunk_offsets(EK)
    src, x, slot, s1 = emit_start(scores_ptr, page_table_ptr, cand_pos_ptr, cand_key_ptr, ncand_ptr, r, t, s0, s1,
                                  offs, PMAX, LIST)
    need, thr, n_above, n_at = slice_counts(hist3_ptr, kept3_ptr, cnt_ptr, r, s, parity, R, KTOP, NSL, PACKED)
    n_above0 = n_above
    n_at0 = n_at
    for c0 in tl.range(s0, s1, CH, num_stages=1):  # prefetched by hand, a chunk ahead
        tt = c0 + offs
        valid = tt < s1
        x_next = load_step(src, tt + CH, s1, LIST)
        slot_next = slots_of(page_table_ptr, r, positions(cand_pos_ptr, r, tt + CH, s1, SCOL, LIST), tt + CH < s1,
                             PMAX)
        u = key_of(x, LIST).to(tl.int64)
        is_above = valid & (u > thr)
        is_at = valid & (u == thr)
        both = is_above.to(tl.int32) + is_at.to(tl.int32) * 65536  # each count < 2^16 a chunk (EK <= 64)
        row_tot = tl.sum(both, axis=1)
        incl = (tl.cumsum(row_tot, axis=0) - row_tot)[:, None] + tl.cumsum(both, axis=1)
        put_entries(topk_ptr, r, slot, incl, is_above, is_at, n_above, n_at, need, KTOP)
        counts = tl.sum(row_tot, axis=0)
        n_above += counts & 65535
        n_at += counts >> 16
        x = x_next
        slot = slot_next
    return n_above0, n_above, n_at0, n_at, need
