"""The DSA indexer's rows listed by one task (stage sel1's row tasks, `glm53/kinds/indexer.py`): a row of at most
KTOP keys lists every position in order, and a row of at most ISHORT keys selects its whole list from its scores in
registers. The exactness rule's list, as the sliced radix select's (`stages_select.py`).
"""

import triton
import triton.language as tl

from sgl_amd_mono.backends.triton.stages_index import PAGE
from sgl_amd_mono.backends.triton.sync import arrive_row, count_task, stage_tasks


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
                SKIP_MASK: tl.constexpr, COUNT_TASKS: tl.constexpr, ROWS: tl.constexpr = False, rows_ptr=None,
                SKIP_ARRIVE: tl.constexpr = -1):
    """R tasks (row r) on the last programs, of the rows of at most LS keys: the whole list. A row of L <= KTOP
    keys: position t at entry t (as a physical slot page_table[r, t // 64] * 64 + t % 64), then -1; a longer
    one: `select_row`. ROWS (tiles.index_row_waits): every row's task, each launch, then arrives at the row's word
    at rows_ptr (`sync.arrive_row`: sel1's, which sel2's tasks of the row wait on)."""
    KB: tl.constexpr = 256 if KTOP > 256 else KTOP
    for r in tl.range(NPROG - 1 - pid, stage_tasks(R, ok, S, SKIP_MASK, ROWS), NPROG, num_stages=1):  # not pipelined
        if ((SKIP_MASK >> S) & 1) == 0:  # (ROWS: an emptied stage's tasks only arrive)
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
        if ROWS:
            arrive_row(rows_ptr, r, S, SKIP_ARRIVE)
