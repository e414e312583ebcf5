"""The DSA indexer's exact top-k in Triton (`glm53/kinds/indexer.py` is the table; the scores are
`stages_index.score`'s, in scratch as f32, a row's in position order).

A row of L keys takes one of three paths, by L alone (every program reads the same lengths, so every program
agrees):
  * L <= KTOP: every position in order, then -1 (one task, in stage sel1);
  * KTOP < L <= LS (LS = max(KTOP, ISHORT)): one task selects the whole list from the row's scores held in
    registers (`select_row`, stage sel1): the KTOP-th largest key found a bit at a time from the top;
  * L > LS: the sliced radix select. Keys are compared as order-preserving uint32 (`order_key`); the KTOP-th
    largest is found digit by digit (from the top: four of 8 bits, or 12, 12 and 8 bits, the table's
    `radix_digits`; the last always 8 bits): a digit's histogram is accumulated
    over the row's slices with integer atomics (exact, so the same bits every run), into hist_p[epoch % 2];
    the same stage zeroes hist_p[1 - epoch % 2] for the next launch on these buffers. Each stage's tasks find
    the digits so far from the prefix the stage before kept and that stage's histogram (`found_prefix`), and a
    row's first task keeps the result for the next (`keep_prefix`). A row's keys are split into slices of whole
    IBLK blocks, a task each; the selection's tasks scan their slice ISCAN keys a step, loading the next step's
    scores before they use this one's. With tiles.index_compact (by width: 4 rows and more), sel1 also lists each
    slice's keys at or above digit 0's prefix (`list_chunks`), and sel2, sel3 and emit scan the lists instead.
    With tiles.index_last16 sel2 counts the keys at its 16-bit prefix by their last 16 bits and lists them
    (`select_low16`), sel3 is passed, and emit finds the last two digits itself. The last stage, emit, is
    `stages_emit.py`'s.
Both selections give the list of the exactness rule (`glm53/kinds/indexer.py`), so which one ran changes no
bit. (Three passes of 11 / 11 / 10-bit digits were slower on the H200: a 2048-bin histogram in registers spills,
and Triton's histogram costs grow with its bins.)
"""

import triton
import triton.language as tl

from sgl_amd_mono.backends.triton.stages_index import (BINS, PAGE, load_scores, order_key, slice_of, zero_other_parity,
                                                       zero_other_parity_spread)
from sgl_amd_mono.backends.triton.sync import count_task, live_tasks

# the tile rows of emit's chunks (tiles.index_emit_k > 0) and sel1's listing chunks (tiles.index_compact): a tile row
# a thread at the kernels' 8 warps
EMIT_ROWS: tl.constexpr = tl.constexpr(256)


@triton.jit
def digit_of(h, need, prefix, NB: tl.constexpr = BINS):
    """One digit of the radix select from its histogram h [NB]: the largest digit d whose keys, with the
    keys of every larger digit, reach `need`. Returns (what is still needed among d's keys, prefix.d)."""
    bins = tl.arange(0, NB)
    suffix = tl.cumsum(h, axis=0, reverse=True)  # keys of digit >= b
    d = tl.max(tl.where(suffix >= need, bins, -1), axis=0)
    above = tl.sum(tl.where(bins > d, h, 0), axis=0)
    return need - above, prefix * NB + d.to(tl.int64)


@triton.jit
def found_prefix(kept_ptr, hist_prev_ptr, r, row, KTOP: tl.constexpr, FIRST: tl.constexpr, HCP: tl.constexpr,
                 NBP: tl.constexpr = BINS):
    """(need, prefix) after the digits through the one counted in hist_prev of row r's select: prefix = the top
    bits of its KTOP-th largest key, need = how many keys with that prefix the list still takes. The digits before
    it as the stage before kept them (kept[r]: `keep_prefix`; none when FIRST, hist_prev being digit 0's) and that
    digit from its histogram at hist_prev_ptr (NBP bins), its HCP copies summed: one histogram loaded and one digit
    found a stage. row: the row's histogram in this parity (parity R + r; its copies start at row HCP NBP).
    A histogram of more than 256 bins is read as NBP / 256 groups of 256: the group first (`digit_of` over the
    groups' sums), then the bin in it, so no scan runs over more than 256 values."""
    if FIRST:
        need = KTOP + row * 0
        prefix = (row * 0).to(tl.int64)
    else:
        need = tl.load(kept_ptr + r * 2, cache_modifier=".cg")
        prefix = tl.load(kept_ptr + r * 2 + 1, cache_modifier=".cg")
    bins = tl.arange(0, BINS)
    base = hist_prev_ptr + row * (HCP * NBP)
    if NBP == BINS:
        h = tl.sum(tl.load(base + tl.arange(0, HCP)[:, None] * NBP + bins[None, :], cache_modifier=".cg"), axis=0)
        need, prefix = digit_of(h, need, prefix)
    else:
        G: tl.constexpr = NBP // BINS
        groups = tl.arange(0, G)
        h2 = tl.zeros((G, BINS), dtype=tl.int32)
        for c in tl.static_range(HCP):
            h2 += tl.load(base + c * NBP + groups[:, None] * BINS + bins[None, :], cache_modifier=".cg")
        gsum = tl.sum(h2, axis=1)
        need, g = digit_of(gsum, need, (row * 0).to(tl.int64), G)  # the group: need is left among its keys
        h = tl.sum(tl.where(groups[:, None] == g.to(tl.int32), h2, 0), axis=0)
        need, prefix = digit_of(h, need, prefix * G + g)
    return need, prefix


@triton.jit
def keep_prefix(kept_ptr, need, prefix, r, is_first):
    """Row r's (need, prefix) kept at kept[r] for the next stage, by the row's first slice's task (is_first): every
    task of the row found the same."""
    if is_first:
        tl.store(kept_ptr + r * 2, need.to(tl.int64))
        tl.store(kept_ptr + r * 2 + 1, prefix)


@triton.jit
def any_sliced_row(lens, LS: tl.constexpr):
    """Whether a row of this step takes the sliced select (its length past LS; lens: `row_lengths`): the same
    answer in every program, so every program takes the same branch around that select's stages."""
    return tl.max(lens, axis=0) > LS


@triton.jit
def load_step(src_ptr, tt, end, FROM_LIST: tl.constexpr):
    """A scan step's raw keys at tt below end, from L2: the row's f32 scores, or (FROM_LIST) the slice's listed
    order keys (cand_key, int32 bits). Converted where used (`key_of`), so the load of the step ahead waits on
    nothing."""
    if FROM_LIST:
        return tl.load(src_ptr + tt, mask=tt < end, other=0, cache_modifier=".cg")
    else:
        return load_scores(src_ptr, tt, end)


@triton.jit
def key_of(x, FROM_LIST: tl.constexpr):
    """`load_step`'s raw keys as order keys (uint32)."""
    if FROM_LIST:
        return x.to(tl.uint32, bitcast=True)
    else:
        return order_key(x)


@triton.jit
def select_digit(scores_ptr, lens, hist_prev_ptr, hist_out_ptr, kept_prev_ptr, kept_ptr, cnt_ptr, topk_ptr, epoch,
                 pid, ok, task_count_ptr, S: tl.constexpr, HI: tl.constexpr, W: tl.constexpr, WP: tl.constexpr,
                 R: tl.constexpr, KTOP: tl.constexpr, PMAX: tl.constexpr, NSL: tl.constexpr, IBLK: tl.constexpr,
                 ISCAN: tl.constexpr, LS: tl.constexpr, NPROG: tl.constexpr, SKIP_MASK: tl.constexpr,
                 COUNT_TASKS: tl.constexpr, HCP: tl.constexpr = 1, HCO: tl.constexpr = 1, SATOM: tl.constexpr = False,
                 cand_pos_ptr=None, cand_key_ptr=None, ncand_ptr=None, LIST: tl.constexpr = 0, LK: tl.constexpr = 0):
    """Task (row r, slice s) of the rows past LS keys (lens: every row's length, `row_lengths`): the radix digit of
    W bits below the top HI bits (bits 31 - HI .. 32 - HI - W) of the slice's keys whose top HI bits are the prefix
    found so far (`found_prefix` from kept_prev and hist_prev, the WP-bit digit above this one, its histogram in
    HCP copies; digit 0's when HI == WP; kept at kept for the next stage), counted into hist_out[epoch % 2] (HCO
    copies a row of 2^W bins: task t counts into copy t % HCO). SATOM (tiles.index_sel_atomics, every digit but
    the last): one integer atomic a key at the prefix, not a block histogram (`tl.histogram` over every key of the
    step, 256 bins; W 8 only) added once a task: the same counts. The last digit (HI + W == 32, 8 bits) also
    leaves the slice's counts for emit: cnt[r, s, b] = its keys at or above the key prefix.b (b < 256),
    cnt[r, s, 256] = its keys above the prefix; then R tasks on the last programs fill each such row's list with
    -1 (emit writes over it). LIST (tiles.index_compact): 1, the slice's keys at or above the prefix found here
    (HI bits) listed in position order from the slice's start: positions at cand_pos, order keys at cand_key, their
    count at ncand[t], the slice scanned in [EMIT_ROWS, LK] chunks (`list_chunks`; LK: tiles.index_compact; SATOM
    only); 2, the scan reads that list instead of the slice's scores (a key below that prefix is below every later
    one, so the same counts).
    Loading the scan's scores two steps ahead instead of one was no faster on the H200
    (results/indexer9_h200_time_specs_scan_ahead.log): the scans are not waiting on those loads."""
    SCOL: tl.constexpr = PMAX * PAGE
    NB: tl.constexpr = 1 << W
    LAST: tl.constexpr = HI + W == 32
    parity = epoch & 1
    zero_other_parity(hist_out_ptr, parity, pid, R, NPROG, HCO, NB)
    ATOMS: tl.constexpr = SATOM and not LAST
    n_tasks = live_tasks(R * NSL, ok, S, SKIP_MASK)
    blk = tl.arange(0, ISCAN)
    bins = tl.arange(0, BINS)
    for t in tl.range(pid, n_tasks, NPROG, num_stages=1):  # tasks: never pipelined
        r = t // NSL
        rlen = tl.sum(tl.where(tl.arange(0, 16) == r, lens, 0), axis=0)
        if rlen > LS:
            count_task(task_count_ptr, S, COUNT_TASKS)
            s0, s1 = slice_of(rlen, t % NSL, NSL, IBLK)
            src = cand_key_ptr + r * SCOL if LIST == 2 else scores_ptr + r * SCOL  # the slice's list (sel1's)
            # issued before the histograms are read (a list's first step too: up to the slice's end, before its
            # length is known; the keys past it are masked where used)
            if LIST == 1:  # the first whole chunk's scores, and the first short one's (`list_chunks`)
                x = load_step(src, s0 + chunk_offsets(LK), list_tail(s0, s1, LK), False)
                x1 = load_step(src, list_tail(s0, s1, LK) + chunk_offsets(1), s1, False)
            else:
                x = load_step(src, s0 + blk, s1, LIST == 2)
            if LIST == 2:
                s1 = s0 + tl.load(ncand_ptr + t, cache_modifier=".cg")
            need, prefix = found_prefix(kept_prev_ptr, hist_prev_ptr, r, parity * R + r, KTOP, HI == WP, HCP,
                                        1 << WP)
            hist_row_ptr = hist_out_ptr + ((parity * R + r) * HCO + t % HCO) * NB  # the task's copy of the row's
            keep_prefix(kept_ptr, need, prefix, r, t % NSL == 0)
            h = tl.zeros((BINS,), dtype=tl.int32)
            above = rlen * 0  # keys above the prefix (the last digit's counts)
            if LIST == 1:
                n_listed = list_chunks(x, x1, src, s0, s1, prefix, hist_row_ptr, cand_pos_ptr, cand_key_ptr,
                                       r * SCOL + s0, HI, W, LK)
                tl.store(ncand_ptr + t, n_listed)
            else:
                for t0 in tl.range(s0, s1, ISCAN, num_stages=1):  # prefetched by hand, a block ahead
                    tt = t0 + blk
                    x_next = load_step(src, tt + ISCAN, s1, LIST == 2)
                    u = key_of(x, LIST == 2)
                    high = (u >> (32 - HI)).to(tl.int64)
                    hit = (tt < s1) & (high == prefix)
                    digit = ((u >> (32 - HI - W)) & (NB - 1)).to(tl.int32)
                    # a block with no key at the prefix skips its histogram (results/indexer6_h200_ab_sel_skip.log)
                    do_hist = not ATOMS  # digit 1: most blocks hold a key at the 8-bit prefix
                    if ATOMS:
                        tl.atomic_add(hist_row_ptr + digit, 1, mask=hit, sem="relaxed")
                    elif HI > WP:  # past digit 1
                        if LAST:  # hits and keys above the prefix in one sum (each < 2^16 a block)
                            both = tl.sum(hit.to(tl.int32) * 65536 + ((tt < s1) & (high > prefix)).to(tl.int32), axis=0)
                            above += both & 65535
                            do_hist = (both >> 16) > 0
                        else:
                            do_hist = tl.sum(hit.to(tl.int32), axis=0) > 0
                    if do_hist:
                        h += tl.histogram(digit, BINS, mask=hit)
                    x = x_next
            if not ATOMS:
                tl.atomic_add(hist_row_ptr + bins, h, mask=h > 0, sem="relaxed")
            if LAST:
                tl.store(cnt_ptr + t * (BINS + 1) + bins, tl.cumsum(h, axis=0, reverse=True) + above)
                tl.store(cnt_ptr + t * (BINS + 1) + BINS, above)
    if LAST:
        clear_lists(lens, topk_ptr, pid, ok, task_count_ptr, S, R, KTOP, LS, NPROG, SKIP_MASK, COUNT_TASKS)


@triton.jit
def clear_lists(lens, topk_ptr, pid, ok, task_count_ptr, S: tl.constexpr, R: tl.constexpr, KTOP: tl.constexpr,
                LS: tl.constexpr, NPROG: tl.constexpr, SKIP_MASK: tl.constexpr, COUNT_TASKS: tl.constexpr):
    """R tasks (row r) on the last programs: each row that takes the sliced select (past LS keys) has its list
    filled with -1, which emit then writes over (the stage before emit: its hand-off orders them)."""
    KB: tl.constexpr = 256 if KTOP > 256 else KTOP
    for r in tl.range(NPROG - 1 - pid, live_tasks(R, ok, S, SKIP_MASK), NPROG, num_stages=1):  # never pipelined
        if tl.sum(tl.where(tl.arange(0, 16) == r, lens, 0), axis=0) > LS:
            count_task(task_count_ptr, S, COUNT_TASKS)
            for k0 in range(0, KTOP, KB):
                tl.store(topk_ptr + r * KTOP + k0 + tl.arange(0, KB), tl.full((KB,), -1, tl.int32))


@triton.jit
def select_low16(scores_ptr, lens, hist1_ptr, hist2_ptr, hist16_ptr, kept1_ptr, kept2_ptr, cnt16_ptr, low16_ptr,
                 topk_ptr, epoch, pid, ok, task_count_ptr, S: tl.constexpr, R: tl.constexpr, KTOP: tl.constexpr,
                 PMAX: tl.constexpr, NSL: tl.constexpr, IBLK: tl.constexpr, ISCAN: tl.constexpr, LS: tl.constexpr,
                 NPROG: tl.constexpr, SKIP_MASK: tl.constexpr, COUNT_TASKS: tl.constexpr, HCP: tl.constexpr,
                 cand_key_ptr=None, ncand_ptr=None, LIST: tl.constexpr = False):
    """sel2 with tiles.index_last16 (sel3 passed): task (row r, slice s) of the rows past LS keys finds the 16-bit
    prefix (`found_prefix` over kept1 and digit 1's histogram hist1 in HCP copies; kept at kept2 for emit), then
    counts each of the slice's keys at that prefix twice, one integer atomic each: by its third digit (bits 15..8)
    into hist2[epoch % 2] and by its low 16 bits into hist16[epoch % 2] (65536 bins a row); lists those low 16 bits
    in position order at the slice's start in low16, and stores the slice's keys above the prefix and at it at
    cnt16[t] (so emit finds the last two digits and every earlier slice's counts without another stage:
    `stages_emit.slice_counts16`). Then each such row's list filled with -1 (`clear_lists`). LIST: the scan
    reads the slice's list that sel1 left (cand_key, ncand[t] keys), not its scores (a key below sel1's prefix is
    below this one: the same counts)."""
    SCOL: tl.constexpr = PMAX * PAGE
    parity = epoch & 1
    zero_other_parity(hist2_ptr, parity, pid, R, NPROG)
    zero_other_parity_spread(hist16_ptr, parity, pid, R * 65536, NPROG)
    n_tasks = live_tasks(R * NSL, ok, S, SKIP_MASK)
    blk = tl.arange(0, ISCAN)
    for t in tl.range(pid, n_tasks, NPROG, num_stages=1):  # tasks: never pipelined
        r = t // NSL
        rlen = tl.sum(tl.where(tl.arange(0, 16) == r, lens, 0), axis=0)
        if rlen > LS:
            count_task(task_count_ptr, S, COUNT_TASKS)
            s0, s1 = slice_of(rlen, t % NSL, NSL, IBLK)
            src = cand_key_ptr + r * SCOL if LIST else scores_ptr + r * SCOL
            x = load_step(src, s0 + blk, s1, LIST)  # issued before the histograms are read
            if LIST:
                s1 = s0 + tl.load(ncand_ptr + t, cache_modifier=".cg")
            need, prefix = found_prefix(kept1_ptr, hist1_ptr, r, parity * R + r, KTOP, False, HCP)
            keep_prefix(kept2_ptr, need, prefix, r, t % NSL == 0)
            h2_ptr = hist2_ptr + (parity * R + r) * BINS
            h16_ptr = hist16_ptr + (parity * R + r) * 65536
            dst = low16_ptr + r * SCOL + s0
            above = rlen * 0
            at = rlen * 0
            for t0 in tl.range(s0, s1, ISCAN, num_stages=1):  # prefetched by hand, a block ahead
                tt = t0 + blk
                x_next = load_step(src, tt + ISCAN, s1, LIST)
                u = key_of(x, LIST)
                valid = tt < s1
                high = (u >> 16).to(tl.int64)
                hit = valid & (high == prefix)
                # keys at the prefix (high 16 bits) and above it (low), each < 2^16 a step
                both = tl.sum(hit.to(tl.int32) * 65536 + (valid & (high > prefix)).to(tl.int32), axis=0)
                above += both & 65535
                if both >= 65536:  # a step with a key at the prefix
                    low = (u & 65535).to(tl.int32)
                    tl.atomic_add(h2_ptr + (low >> 8), 1, mask=hit, sem="relaxed")
                    tl.atomic_add(h16_ptr + low, 1, mask=hit, sem="relaxed")
                    tl.store(dst + at + tl.cumsum(hit.to(tl.int32), axis=0) - 1, low, mask=hit)
                    at += both >> 16
                x = x_next
            tl.store(cnt16_ptr + t * 2, above)
            tl.store(cnt16_ptr + t * 2 + 1, at)
    clear_lists(lens, topk_ptr, pid, ok, task_count_ptr, S, R, KTOP, LS, NPROG, SKIP_MASK, COUNT_TASKS)


@triton.jit
def chunk_offsets(K: tl.constexpr):
    """A chunk's key offsets as an [EMIT_ROWS, K] tile, a tile row's K keys consecutive."""
    return tl.arange(0, EMIT_ROWS)[:, None] * K + tl.arange(0, K)[None, :]


@triton.jit
def list_chunk(x, tt, s1, prefix, hist_row_ptr, cand_pos_ptr, cand_key_ptr, dst, HI: tl.constexpr, W: tl.constexpr):
    """`list_chunks`' work on one [EMIT_ROWS, K] chunk of scores x at positions tt (below s1), listed from dst.
    Returns its keys listed."""
    u = order_key(x)
    high = (u >> (32 - HI)).to(tl.int64)
    valid = tt < s1
    digit = ((u >> (32 - HI - W)) & ((1 << W) - 1)).to(tl.int32)
    tl.atomic_add(hist_row_ptr + digit, 1, mask=valid & (high == prefix), sem="relaxed")
    keep = (valid & (high >= prefix)).to(tl.int32)
    row_tot = tl.sum(keep, axis=1)
    at = dst + (tl.cumsum(row_tot, axis=0) - row_tot)[:, None] + tl.cumsum(keep, axis=1) - 1
    tl.store(cand_pos_ptr + at, tt, mask=keep > 0)
    tl.store(cand_key_ptr + at, u.to(tl.int32, bitcast=True), mask=keep > 0)
    return tl.sum(row_tot, axis=0)


@triton.jit
def list_tail(s0, s1, K: tl.constexpr):
    """Where `list_chunks`' whole [EMIT_ROWS, K] chunks of a slice [s0, s1) end (its last keys go EMIT_ROWS at a
    time)."""
    return s0 + (s1 - s0) // (EMIT_ROWS * K) * (EMIT_ROWS * K)


@triton.jit
def list_chunks(x, x1, src, s0, s1, prefix, hist_row_ptr, cand_pos_ptr, cand_key_ptr, dst0, HI: tl.constexpr,
                W: tl.constexpr, K: tl.constexpr):
    """`select_digit`'s LIST 1 scan of a slice [s0, s1) of scores at src: each key whose top HI bits are the prefix
    counted by one atomic at its digit (W bits below them) into hist_row_ptr, and the keys at or above the prefix
    listed in position order from dst0 (their positions in the row at cand_pos, their order keys at cand_key), in
    [EMIT_ROWS, K] chunks (`chunk_offsets`: a key's place from a scan along its tile row plus one block-wide scan
    of the rows' totals a chunk), then the keys past the whole chunks (`list_tail`) in [EMIT_ROWS, 1] chunks, so no
    chunk is mostly past the slice's end. x: the first whole chunk's scores, x1: the first short one's (loaded).
    Returns the keys listed."""
    CH: tl.constexpr = EMIT_ROWS * K
    offs = chunk_offsets(K)
    one = chunk_offsets(1)
    tail = list_tail(s0, s1, K)
    listed = s0 * 0
    for c0 in tl.range(s0, tail, CH, num_stages=1):  # prefetched by hand, a chunk ahead
        tt = c0 + offs
        x_next = load_step(src, tt + CH, tail, False)
        listed += list_chunk(x, tt, s1, prefix, hist_row_ptr, cand_pos_ptr, cand_key_ptr, dst0 + listed, HI, W)
        x = x_next
    for c0 in tl.range(tail, s1, EMIT_ROWS, num_stages=1):  # prefetched by hand, a chunk ahead
        tt = c0 + one
        x1_next = load_step(src, tt + EMIT_ROWS, s1, False)
        listed += list_chunk(x1, tt, s1, prefix, hist_row_ptr, cand_pos_ptr, cand_key_ptr, dst0 + listed, HI, W)
        x1 = x1_next
    return listed


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
