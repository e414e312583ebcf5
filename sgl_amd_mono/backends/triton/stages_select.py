"""The DSA indexer's exact top-k in Triton (`glm53/kinds/indexer.py` is the table; the scores are
`stages_index.score`'s, in scratch as f32, a row's in position order): the stages sel1 .. sel3 here, the last stage,
emit, in `stages_emit.py`.

A row of L keys takes one of three paths, by L alone (every program reads the same lengths, so every program
agrees):
  * L <= KTOP: every position in order, then -1 (one task, in stage sel1);
  * KTOP < L <= LS (LS = max(KTOP, ISHORT)): one task selects the whole list from the row's scores held in
    registers (`stages_select_row.select_row`, stage sel1): the KTOP-th largest key found a bit at a time from the
    top;
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
Both selections give the list of the exactness rule (`glm53/kinds/indexer.py`), so which one ran changes no
bit. (Three passes of 11 / 11 / 10-bit digits were slower on the H200: a 2048-bin histogram in registers spills,
and Triton's histogram costs grow with its bins.)
"""

import triton
import triton.language as tl

from sgl_amd_mono.backends.triton.stages_index import BINS, PAGE, load_scores, order_key, slice_of, zero_other_parity
from sgl_amd_mono.backends.triton.sync import arrive_row, count_task, stage_tasks, task_runs, wait_row
from sgl_amd_mono.glm53.kinds.indexer import RADIX_PAIR_BINS

# the tile rows of emit's chunks (tiles.index_emit_k > 0) and sel1's listing chunks (tiles.index_compact): a tile row
# a thread at the kernels' 8 warps
EMIT_ROWS: tl.constexpr = tl.constexpr(256)
PAIR_BINS: tl.constexpr = tl.constexpr(RADIX_PAIR_BINS)  # a row's pair histogram (tiles.index_pair): two 8-bit digits
PAIR_ZERO: tl.constexpr = tl.constexpr(2048)  # its bins a zeroing task clears


@triton.jit
def digit_of(h, need, prefix, NB: tl.constexpr = BINS, PACKED: tl.constexpr = False):
    """One digit of the radix select from its histogram h [NB]: the largest digit d whose keys, with the
    keys of every larger digit, reach `need`. Returns (what is still needed among d's keys, prefix.d).
    PACKED (tiles.index_packed_counts): d and the keys above it from one block-wide reduction instead of two (the
    digits whose suffix reaches need are 0 .. d: their count in the high word, the other digits' keys in the low;
    a row's keys < 2^32). The same values."""
    bins = tl.arange(0, NB)
    suffix = tl.cumsum(h, axis=0, reverse=True)  # keys of digit >= b, non-increasing in b
    if PACKED:
        packed = tl.sum(tl.where(suffix >= need, tl.full(h.shape, 1 << 32, tl.int64), h.to(tl.int64)), axis=0)
        d = (packed >> 32) - 1
        above = (packed & 0xFFFFFFFF).to(tl.int32)
    else:
        d = tl.max(tl.where(suffix >= need, bins, -1), axis=0)
        above = tl.sum(tl.where(bins > d, h, 0), axis=0)
    return need - above, prefix * NB + d.to(tl.int64)


@triton.jit
def found_prefix(kept_ptr, hist_prev_ptr, r, row, KTOP: tl.constexpr, FIRST: tl.constexpr, HCP: tl.constexpr,
                 NBP: tl.constexpr = BINS, PACKED: tl.constexpr = False, pair_ptr=None, PAIR: tl.constexpr = False):
    """(need, prefix) after the digits through the one counted in hist_prev of row r's select: prefix = the top
    bits of its KTOP-th largest key, need = how many keys with that prefix the list still takes. The digits before
    it as the stage before kept them (kept[r]: `keep_prefix`; none when FIRST, hist_prev being digit 0's) and that
    digit from its histogram at hist_prev_ptr (NBP bins), its HCP copies summed: one histogram loaded and one digit
    found a stage. row: the row's histogram in this parity (parity R + r; its copies start at row HCP NBP).
    A histogram of more than 256 bins is read as NBP / 256 groups of 256: the group first (`digit_of` over the
    groups' sums), then the bin in it, so no scan runs over more than 256 values. PACKED (tiles.index_packed_counts):
    a histogram's copies added bin by bin in each thread (no reduction across them), and `digit_of` PACKED.
    PAIR (tiles.index_pair): then the next digit too, from the row's pair histogram at pair_ptr (sel1's: the next
    two digits of the keys at the prefix before hist_prev's digit, PAIR_BINS bins a row), its group of 256 at the
    digit just found: two digits a stage."""
    if FIRST:
        need = KTOP + row * 0
        prefix = (row * 0).to(tl.int64)
    else:
        need = tl.load(kept_ptr + r * 2, cache_modifier=".cg")
        prefix = tl.load(kept_ptr + r * 2 + 1, cache_modifier=".cg")
    bins = tl.arange(0, BINS)
    base = hist_prev_ptr + row * (HCP * NBP)
    if NBP == BINS:
        if PACKED:
            h = tl.load(base + bins, cache_modifier=".cg")
            for c in tl.static_range(1, HCP):
                h += tl.load(base + c * NBP + bins, cache_modifier=".cg")
        else:
            h = tl.sum(tl.load(base + tl.arange(0, HCP)[:, None] * NBP + bins[None, :], cache_modifier=".cg"), axis=0)
        need, prefix = digit_of(h, need, prefix, BINS, PACKED)
    else:
        G: tl.constexpr = NBP // BINS
        groups = tl.arange(0, G)
        h2 = tl.zeros((G, BINS), dtype=tl.int32)
        for c in tl.static_range(HCP):
            h2 += tl.load(base + c * NBP + groups[:, None] * BINS + bins[None, :], cache_modifier=".cg")
        gsum = tl.sum(h2, axis=1)
        need, g = digit_of(gsum, need, (row * 0).to(tl.int64), G, PACKED)  # the group: need is left among its keys
        h = tl.sum(tl.where(groups[:, None] == g.to(tl.int32), h2, 0), axis=0)
        need, prefix = digit_of(h, need, prefix * G + g, BINS, PACKED)
    if PAIR:
        hp = tl.load(pair_ptr + row * PAIR_BINS + (prefix & (BINS - 1)).to(tl.int32) * BINS + bins,
                     cache_modifier=".cg")
        need, prefix = digit_of(hp, need, prefix, BINS, PACKED)
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
                 cand_pos_ptr=None, cand_key_ptr=None, ncand_ptr=None, LIST: tl.constexpr = 0, LK: tl.constexpr = 0,
                 PACKED: tl.constexpr = False, RL: tl.constexpr = 1, floor_ptr=None, FLOOR: tl.constexpr = False,
                 pair_ptr=None, PAIR: tl.constexpr = 0, ROWS: tl.constexpr = False, rows_ptr=None,
                 wait_rows_ptr=None, WAIT_PARTS: tl.constexpr = 0, S_WAIT: tl.constexpr = 0, err_ptr=None,
                 launch_id=0, bound=0, TIMER: tl.constexpr = False, SKIP_ARRIVE: tl.constexpr = -1,
                 WAIT_REQ: tl.constexpr = False, rpr=1):
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
    one, so the same counts); 3 (tiles.index_relist), as 2 and the list kept only at or above the prefix found here
    (HI bits), in place and in order, its new count at ncand[t] (`relist_chunks`), so the stages after it scan
    fewer keys; a list of fewer than RL keys (tiles.index_relist) only counted, left as it is. PACKED:
    `found_prefix`'s (tiles.index_packed_counts). FLOOR (tiles.index_floor, LIST 1 only): the list and the counts
    only of the keys at or above the row's floor, the smallest of its NSL score tasks' (`stages_index.score`: at
    least KTOP keys reach it, so it is at or below the row's threshold, and every key the stages after count or
    list is at or above it): the same digits and list. PAIR (tiles.index_pair, four digits): 1 (sel1), each key it
    counts also counted by one atomic at its next 16 bits (digits 1 and 2) into the row's pair histogram at
    pair_ptr[epoch % 2] (the other parity zeroed in the same stage: `zero_pairs`); 2 (sel3, stage sel2 passed),
    the digits 1 and 2 both found here (`found_prefix` PAIR) from hist_prev (digit 1's) and that histogram: the
    same digits.
    ROWS (tiles.index_row_waits): row-scoped hand-offs. Each task index, of every row and launch (the stage emptied
    by SKIP_MASK or not), arrives at its row's word at rows_ptr after its work (`sync.arrive_row`; the LAST stage's
    -1 fill tasks too), and with WAIT_PARTS > 0 first waits until its row's word at wait_rows_ptr holds that many
    arrivals of stage S_WAIT this launch (`sync.wait_row`; err_ptr, launch_id, bound, TIMER: the wait's); WAIT_REQ,
    at each word of its row's request (rpr rows a request: the score tasks of a request write all its rows). Returns ok.
    Loading the scan's scores two steps ahead instead of one was no faster on the H200
    (results/indexer9_h200_time_specs_scan_ahead.log): the scans are not waiting on those loads."""
    SCOL: tl.constexpr = PMAX * PAGE
    NB: tl.constexpr = 1 << W
    LAST: tl.constexpr = HI + W == 32
    parity = epoch & 1
    zero_other_parity(hist_out_ptr, parity, pid, R, NPROG, HCO, NB)
    ATOMS: tl.constexpr = SATOM and not LAST
    n_tasks = stage_tasks(R * NSL, ok, S, SKIP_MASK, ROWS)
    blk = tl.arange(0, ISCAN)
    bins = tl.arange(0, BINS)
    for t in tl.range(pid, n_tasks, NPROG, num_stages=1):  # tasks: never pipelined
        r = t // NSL
        if WAIT_PARTS > 0:
            if WAIT_REQ:
                for u in range(r // rpr * rpr, tl.minimum(r // rpr * rpr + rpr, R)):
                    ok = wait_row(wait_rows_ptr, u, WAIT_PARTS, S_WAIT, epoch, ok, err_ptr, launch_id, S, pid, bound,
                                  TIMER)
            else:
                ok = wait_row(wait_rows_ptr, r, WAIT_PARTS, S_WAIT, epoch, ok, err_ptr, launch_id, S, pid, bound, TIMER)
        rlen = tl.sum(tl.where(tl.arange(0, 16) == r, lens, 0), axis=0)
        if ROWS:  # a failed wait or an emptied stage: the task only arrives
            go = (rlen > LS) & task_runs(ok, S, SKIP_MASK)
        else:
            go = rlen > LS
        if go:
            count_task(task_count_ptr, S, COUNT_TASKS)
            s0, s1 = slice_of(rlen, t % NSL, NSL, IBLK)
            src = cand_key_ptr + r * SCOL if LIST >= 2 else scores_ptr + r * SCOL  # the slice's list (sel1's)
            # issued before the histograms are read (a list's first step too: up to the slice's end, before its
            # length is known; the keys past it are masked where used)
            floor = (rlen * 0).to(tl.uint32)  # an order key, compared with the keys' own
            if LIST == 1:  # the first whole chunk's scores, and the first short one's (`list_chunks`)
                x = load_step(src, s0 + chunk_offsets(LK), list_tail(s0, s1, LK), False)
                x1 = load_step(src, list_tail(s0, s1, LK) + chunk_offsets(1), s1, False)
                if FLOOR:
                    floor = tl.min(tl.load(floor_ptr + r * NSL + tl.arange(0, NSL), cache_modifier=".cg"),
                                   axis=0).to(tl.uint32)
            elif LIST == 3:  # the list's first chunk, keys and positions, up to the slice's end (its length not yet in)
                x = load_step(src, s0 + chunk_offsets(LK), s1, True)
                x1 = load_step(cand_pos_ptr + r * SCOL, s0 + chunk_offsets(LK), s1, True)
            else:
                x = load_step(src, s0 + blk, s1, LIST == 2)
            if LIST >= 2:
                s1 = s0 + tl.load(ncand_ptr + t, cache_modifier=".cg")
            need, prefix = found_prefix(kept_prev_ptr, hist_prev_ptr, r, parity * R + r, KTOP, HI == WP, HCP,
                                        1 << WP, PACKED, pair_ptr, PAIR == 2)
            hist_row_ptr = hist_out_ptr + ((parity * R + r) * HCO + t % HCO) * NB  # the task's copy of the row's
            pair_row_ptr = pair_ptr + (parity * R + r) * PAIR_BINS if PAIR == 1 else None
            keep_prefix(kept_ptr, need, prefix, r, t % NSL == 0)
            h = tl.zeros((BINS,), dtype=tl.int32)
            above = rlen * 0  # keys above the prefix (the last digit's counts)
            if LIST == 1:
                n_listed = list_chunks(x, x1, src, s0, s1, prefix, hist_row_ptr, cand_pos_ptr, cand_key_ptr,
                                       r * SCOL + s0, HI, W, LK, floor, pair_row_ptr)
                tl.store(ncand_ptr + t, n_listed)
            elif LIST == 3:  # a list of fewer than RL keys counted, not relisted (sel3 and emit scan it as it is)
                relisting = s1 - s0 >= RL
                n_listed = relist_chunks(x, x1, src, cand_pos_ptr + r * SCOL, s0, s1, prefix, hist_row_ptr, HI, W, LK,
                                         relisting)
                if relisting:
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
                        if PAIR == 1:
                            count_pair(u, hit, pair_row_ptr, HI)
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
        if ROWS:
            arrive_row(rows_ptr, r, S, SKIP_ARRIVE)
    if LAST:
        KB: tl.constexpr = 256 if KTOP > 256 else KTOP
        n_fill = stage_tasks(R, ok, S, SKIP_MASK, ROWS)
        for r in tl.range(NPROG - 1 - pid, n_fill, NPROG, num_stages=1):  # never pipelined
            if ((SKIP_MASK >> S) & 1) == 0:  # (ROWS: an emptied stage's tasks only arrive)
                if tl.sum(tl.where(tl.arange(0, 16) == r, lens, 0), axis=0) > LS:
                    count_task(task_count_ptr, S, COUNT_TASKS)
                    for k0 in range(0, KTOP, KB):
                        tl.store(topk_ptr + r * KTOP + k0 + tl.arange(0, KB), tl.full((KB,), -1, tl.int32))
            if ROWS:
                arrive_row(rows_ptr, r, S, SKIP_ARRIVE)
    return ok


@triton.jit
def chunk_offsets(K: tl.constexpr):
    """A chunk's key offsets as an [EMIT_ROWS, K] tile, a tile row's K keys consecutive."""
    return tl.arange(0, EMIT_ROWS)[:, None] * K + tl.arange(0, K)[None, :]


@triton.jit
def list_chunk(u, pos, valid, prefix, hist_row_ptr, cand_pos_ptr, cand_key_ptr, dst, HI: tl.constexpr,
               W: tl.constexpr, listing=True, pair_row_ptr=None):
    """One [EMIT_ROWS, K] chunk of order keys u at row positions pos (where valid), of `list_chunks` or
    `relist_chunks`: each key whose top HI bits are the prefix counted by one atomic at its digit (W bits below
    them) into hist_row_ptr (and, given pair_row_ptr, at its next 16 bits there: `count_pair`), and (where listing)
    the keys at or above the prefix listed in order from dst (positions at cand_pos_ptr, order keys at
    cand_key_ptr). Returns its keys listed (0 where not listing)."""
    high = (u >> (32 - HI)).to(tl.int64)
    digit = ((u >> (32 - HI - W)) & ((1 << W) - 1)).to(tl.int32)
    tl.atomic_add(hist_row_ptr + digit, 1, mask=valid & (high == prefix), sem="relaxed")
    if pair_row_ptr is not None:
        count_pair(u, valid & (high == prefix), pair_row_ptr, HI)
    n = dst * 0
    if listing:
        keep = (valid & (high >= prefix)).to(tl.int32)
        row_tot = tl.sum(keep, axis=1)
        at = dst + (tl.cumsum(row_tot, axis=0) - row_tot)[:, None] + tl.cumsum(keep, axis=1) - 1
        tl.store(cand_pos_ptr + at, pos, mask=keep > 0)
        tl.store(cand_key_ptr + at, u.to(tl.int32, bitcast=True), mask=keep > 0)
        n = tl.sum(row_tot, axis=0)
    return n


@triton.jit
def count_pair(u, hit, pair_row_ptr, HI: tl.constexpr):
    """The order keys u where hit, each counted by one integer atomic at its 16 bits below the top HI (the next two
    8-bit digits) into a row's pair histogram (PAIR_BINS bins at pair_row_ptr): tiles.index_pair."""
    tl.atomic_add(pair_row_ptr + ((u >> (16 - HI)) & (PAIR_BINS - 1)).to(tl.int32), 1, mask=hit, sem="relaxed")


@triton.jit
def zero_pairs(pair_ptr, parity, pid, R: tl.constexpr, NPROG: tl.constexpr):
    """The other parity's pair histograms ([2, R, PAIR_BINS]: R x PAIR_BINS bins) zeroed for the next launch, in
    tasks of PAIR_ZERO bins spread over the programs (a row's 65536 bins are too many for one program's
    registers)."""
    base = pair_ptr + (1 - parity) * (R * PAIR_BINS)
    for c in tl.range(pid, R * (PAIR_BINS // PAIR_ZERO), NPROG, num_stages=1):
        tl.store(base + c * PAIR_ZERO + tl.arange(0, PAIR_ZERO), tl.zeros((PAIR_ZERO,), dtype=tl.int32))


@triton.jit
def list_tail(s0, s1, K: tl.constexpr):
    """Where `list_chunks`' whole [EMIT_ROWS, K] chunks of a slice [s0, s1) end (its last keys go EMIT_ROWS at a
    time)."""
    return s0 + (s1 - s0) // (EMIT_ROWS * K) * (EMIT_ROWS * K)


@triton.jit
def list_chunks(x, x1, src, s0, s1, prefix, hist_row_ptr, cand_pos_ptr, cand_key_ptr, dst0, HI: tl.constexpr,
                W: tl.constexpr, K: tl.constexpr, floor, pair_row_ptr=None):
    """`select_digit`'s LIST 1 scan of a slice [s0, s1) of scores at src: each key whose top HI bits are the prefix
    counted by one atomic at its digit (W bits below them) into hist_row_ptr, and the keys at or above the prefix
    listed in position order from dst0 (their positions in the row at cand_pos, their order keys at cand_key), in
    [EMIT_ROWS, K] chunks (`chunk_offsets`: a key's place from a scan along its tile row plus one block-wide scan
    of the rows' totals a chunk), then the keys past the whole chunks (`list_tail`) in [EMIT_ROWS, 1] chunks, so no
    chunk is mostly past the slice's end. x: the first whole chunk's scores, x1: the first short one's (loaded).
    Only keys at or above floor (an order key; 0: every key) are counted or listed. pair_row_ptr: `list_chunk`'s.
    Returns the keys listed."""
    CH: tl.constexpr = EMIT_ROWS * K
    offs = chunk_offsets(K)
    one = chunk_offsets(1)
    tail = list_tail(s0, s1, K)
    listed = s0 * 0
    for c0 in tl.range(s0, tail, CH, num_stages=1):  # prefetched by hand, a chunk ahead
        tt = c0 + offs
        x_next = load_step(src, tt + CH, tail, False)
        u = order_key(x)
        listed += list_chunk(u, tt, (tt < s1) & (u >= floor), prefix, hist_row_ptr, cand_pos_ptr,
                             cand_key_ptr, dst0 + listed, HI, W, True, pair_row_ptr)
        x = x_next
    for c0 in tl.range(tail, s1, EMIT_ROWS, num_stages=1):  # prefetched by hand, a chunk ahead
        tt = c0 + one
        x1_next = load_step(src, tt + EMIT_ROWS, s1, False)
        u = order_key(x1)
        listed += list_chunk(u, tt, (tt < s1) & (u >= floor), prefix, hist_row_ptr, cand_pos_ptr,
                             cand_key_ptr, dst0 + listed, HI, W, True, pair_row_ptr)
        x1 = x1_next
    return listed


@triton.jit
def relist_chunks(x, p, keys_ptr, pos_ptr, s0, s1, prefix, hist_row_ptr, HI: tl.constexpr, W: tl.constexpr,
                  K: tl.constexpr, relisting=True):
    """`select_digit`'s LIST 3 scan of a slice's list [s0, s1) (order keys at keys_ptr, positions at pos_ptr, the row's
    own; x / p: its first [EMIT_ROWS, K] chunk's keys and positions, loaded), each chunk's keys and positions loaded a
    chunk ahead, each chunk `list_chunk`'s work, its kept keys listed from the list's start. In place: a chunk's kept
    keys go at or before its own entries, stored after the chunk's block-wide scan (which every thread reaches with
    its loads of this chunk and of the next done), and no later chunk is read before it was loaded. Returns the
    keys kept. relisting false (a list too short to relist): the counts only, the list left as it is (no positions
    loaded past the first chunk's), 0 returned."""
    CH: tl.constexpr = EMIT_ROWS * K
    offs = chunk_offsets(K)
    kept = s0 * 0
    p_end = tl.where(relisting, s1, 0)  # the positions read: none past the first chunk's when not relisting
    for c0 in tl.range(s0, s1, CH, num_stages=1):  # prefetched by hand, a chunk ahead
        tt = c0 + offs
        x_next = load_step(keys_ptr, tt + CH, s1, True)
        p_next = load_step(pos_ptr, tt + CH, p_end, True)
        kept += list_chunk(key_of(x, True), p, tt < s1, prefix, hist_row_ptr, pos_ptr, keys_ptr, s0 + kept, HI, W,
                           relisting)
        x = x_next
        p = p_next
    return kept
