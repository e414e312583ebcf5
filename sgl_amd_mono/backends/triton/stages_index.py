"""The DSA indexer's stages in Triton (`glm53/kinds/indexer.py` is the table), but its top-k: the index
projections as task groups of the attention half's stages, the index key and query, and the scores
(`score`: scores in scratch as f32, a row's in position order, and the first radix digit's histogram of the rows
that take the sliced select). The exact top-k over those scores is `stages_select.py`'s. Lengths are clamped to
the page table's PMAX * 64 keys; a longer row writes the error word (`sync.report_input`) and reads nothing past
its page table.
"""

import triton
import triton.language as tl

from sgl_amd_mono.backends.triton.sync import arrive_row, count_task, report_input, stage_tasks, task_runs
from sgl_amd_mono.backends.triton.tile_ops import dot_bf16, store_kept, sum_parts, to_bf16, to_fp8
from sgl_amd_mono.glm53.kinds.indexer import RADIX_BINS

PAGE: tl.constexpr = tl.constexpr(64)  # tokens an index-K page holds
KEY_BYTES: tl.constexpr = tl.constexpr(128)  # fp8 bytes of one cached index key
FP8_MAX: tl.constexpr = tl.constexpr(448.0)
BINS: tl.constexpr = tl.constexpr(RADIX_BINS)  # a digit's histogram


@triton.jit
def bf16_gemv_stage(x_ptr, w_ptr, part_ptr, n_tasks, pid, task_count_ptr, R: tl.constexpr, N: tl.constexpr,
                    K: tl.constexpr, KS: tl.constexpr, NPROG: tl.constexpr, S: tl.constexpr,
                    COUNT_TASKS: tl.constexpr, T0: tl.constexpr):
    """This program's tasks of a split-K bf16 GEMV of N <= 32 columns (one tile): task t is k part t;
    part[t, r, n] = sum over its k blocks of x @ w^T (bf16 products, f32 sums). x: [R, K] bf16; w: [N, K]
    bf16; part: [KS, R, N] f32. T0: the stage's tasks before this group's (`gemv_stage`)."""
    rows = tl.arange(0, 16)
    cols = tl.arange(0, 32)
    NKB: tl.constexpr = (K // 128) // KS
    for t in tl.range((pid - T0 % NPROG + NPROG) % NPROG, n_tasks, NPROG, num_stages=1):  # tasks: never pipelined
        count_task(task_count_ptr, S, COUNT_TASKS)
        acc = tl.zeros((16, 32), dtype=tl.float32)
        for kb in tl.range(t * NKB, t * NKB + NKB):
            ks = kb * 128 + tl.arange(0, 128)
            x = tl.load(x_ptr + rows[:, None] * K + ks[None, :], mask=(rows < R)[:, None], other=0.0,
                        cache_modifier=".cg")
            w = tl.load(w_ptr + cols[None, :] * K + ks[:, None], mask=(cols < N)[None, :], other=0.0)
            acc += dot_bf16(x, w)
        tl.store(part_ptr + (t * R + rows[:, None]) * N + cols[None, :], acc,
                 mask=(rows < R)[:, None] & (cols < N)[None, :])


@triton.jit
def hadamard(x, N: tl.constexpr):
    """x [M, N] bf16 @ H_N / sqrt(N) in f32 (H_N Sylvester's: H[i, j] = (-1)^popcount(i & j), N <= 2^16);
    the products are exact, the sums f32."""
    i = tl.arange(0, N)
    v = i[:, None] & i[None, :]
    for s in tl.static_range(3, -1, -1):  # the parity of its bits folded into bit 0: shifts 8, 4, 2, 1 (below N)
        if (1 << (1 << s)) < N:
            v ^= v >> (1 << s)
    h = (1.0 - 2.0 * (v & 1).to(tl.float32)).to(tl.bfloat16)  # +-1: exact in bf16
    return dot_bf16(x, h) * (N ** -0.5)


@triton.jit
def ue8m0_quant(x):
    """x [M, 128] f32 (bf16 values) -> (fp8 [M, 128], scale [M] f32): SGLang's act_quant(scale_fmt="ue8m0"):
    s = 2^ceil(log2(max(amax, 1e-4) x (1 / 448))), taken from the bits (a power of two stays itself)."""
    amax = tl.maximum(tl.max(tl.abs(x), axis=1), 1e-4)
    y = amax * (1.0 / FP8_MAX)
    b = y.to(tl.int32, bitcast=True)
    up = ((b & 0x7FFFFF) != 0).to(tl.int32)
    s = (((b >> 23) + up) << 23).to(tl.float32, bitcast=True)
    return to_fp8(tl.clamp(x / s[:, None], -FP8_MAX, FP8_MAX)), s


@triton.jit
def rope_pairs(e, o, cos_ptr, row_ok, ROPE: tl.constexpr, HALF: tl.constexpr):
    """Interleaved rope of the pairs (e[i], o[i]) = dims (2i, 2i + 1), [M, HALF] f32 each, on pairs i < ROPE / 2
    (cos at cos_ptr + i, sin at cos_ptr + ROPE / 2 + i, a row's each: cos_ptr is [M, 1]); the rest unchanged.
    Rows where row_ok [M, 1] is false read nothing (a 16-row tile over fewer rows: past the end of cos_sin).
    Returns the [M, 2 HALF] row interleaved again, bf16."""
    i = tl.arange(0, HALF)[None, :]
    is_rope = (i < ROPE // 2) & row_ok
    cos = tl.load(cos_ptr + i, mask=is_rope, other=1.0)
    sin = tl.load(cos_ptr + ROPE // 2 + i, mask=is_rope, other=0.0)
    e2 = tl.where(is_rope, e * cos - o * sin, e)
    o2 = tl.where(is_rope, o * cos + e * sin, o)
    return tl.reshape(tl.join(to_bf16(e2), to_bf16(o2)), (e.shape[0], 2 * HALF))


@triton.jit
def index_keys(ik_part_ptr, cos_sin_ptr, out_loc_ptr, k_norm_w_ptr, k_norm_b_ptr, index_k_cache_ptr,
               stride_index_k_cache, k_norm_eps, r, R: tl.constexpr, ID: tl.constexpr, ROPE: tl.constexpr,
               KS_I: tl.constexpr):
    """Row r's index key (a task a row): k = bf16(sum of wk parts); LayerNorm (f32, weight and bias); rope on
    the first ROPE dims (interleaved); Hadamard; ue8m0 fp8; written at out_loc into the index-K cache's page
    layout: a page's 64 keys of ID fp8 bytes, then its 64 f32 scales. Held as even / odd dims [16, ID / 2]
    (the row's place in a 16-row tile, the other rows masked)."""
    HALF: tl.constexpr = ID // 2
    rows = tl.arange(0, 16)
    rmask = rows == r
    i = tl.arange(0, HALF)
    base = rows[:, None] * ID + 2 * i[None, :]
    e = to_bf16(sum_parts(ik_part_ptr, R * ID, base, rmask[:, None], KS_I)).to(tl.float32)
    o = to_bf16(sum_parts(ik_part_ptr + 1, R * ID, base, rmask[:, None], KS_I)).to(tl.float32)
    w_e, w_o = tl.load(k_norm_w_ptr + 2 * i), tl.load(k_norm_w_ptr + 2 * i + 1)
    b_e, b_o = tl.load(k_norm_b_ptr + 2 * i), tl.load(k_norm_b_ptr + 2 * i + 1)
    slot = tl.load(out_loc_ptr + rows, mask=rows < R, other=0).to(tl.int64)
    mean = (tl.sum(e, axis=1) + tl.sum(o, axis=1)) / ID
    ec, oc = e - mean[:, None], o - mean[:, None]
    rstd = tl.math.rsqrt((tl.sum(ec * ec, axis=1) + tl.sum(oc * oc, axis=1)) / ID + k_norm_eps)
    e = to_bf16(ec * rstd[:, None] * w_e[None, :] + b_e[None, :])
    o = to_bf16(oc * rstd[:, None] * w_o[None, :] + b_o[None, :])
    k = rope_pairs(e.to(tl.float32), o.to(tl.float32), cos_sin_ptr + rows[:, None] * ROPE, (rows < R)[:, None], ROPE,
                   HALF)
    kq, ks = ue8m0_quant(to_bf16(hadamard(k, ID)).to(tl.float32))
    # pad rows all write slot 0: only the last row writing a slot writes it (the same bits every run)
    later = (slot[None, :] == slot[:, None]) & (rows[None, :] > rows[:, None]) & (rows[None, :] < R)
    write = rmask & (tl.sum(later.to(tl.int32), axis=1) == 0)
    page = index_k_cache_ptr + (slot // PAGE) * stride_index_k_cache
    off = slot % PAGE
    dims = tl.arange(0, ID)
    tl.store(key_ptrs(page[:, None], off[:, None], dims[None, :]), kq.to(tl.uint8, bitcast=True), mask=write[:, None])
    tl.store(scale_ptrs(page, off), ks, mask=write)


@triton.jit
def index_query(iq_part_ptr, iw_part_ptr, cos_sin_ptr, iq_ptr, head_w_ptr, r, g, R: tl.constexpr, IH: tl.constexpr,
                ID: tl.constexpr, ROPE: tl.constexpr, IQG: tl.constexpr, KS_W: tl.constexpr, KS_IQ: tl.constexpr):
    """Heads [g IQG, + IQG) of row r's index query: q = bf16(sum of wq_b parts) [IQG, ID]; rope on each head's
    first ROPE dims; Hadamard; ue8m0 fp8 a head (iq); head weights = bf16(weights_proj x) x IH^-0.5 x q scale
    x ID^-0.5."""
    HALF: tl.constexpr = ID // 2
    heads = g * IQG + tl.arange(0, IQG)
    i = tl.arange(0, HALF)
    base = heads[:, None] * ID + 2 * i[None, :]
    part = iq_part_ptr + r * (IH * ID)
    w_raw = to_bf16(sum_parts(iw_part_ptr + r * IH, R * IH, heads, heads < IH, KS_W)).to(tl.float32)
    e = to_bf16(sum_parts(part, R * IH * ID, base, heads[:, None] < IH, KS_IQ)).to(tl.float32)
    o = to_bf16(sum_parts(part + 1, R * IH * ID, base, heads[:, None] < IH, KS_IQ)).to(tl.float32)
    q = rope_pairs(e, o, cos_sin_ptr + r * ROPE + heads[:, None] * 0, heads[:, None] < IH, ROPE, HALF)
    qq, qs = ue8m0_quant(to_bf16(hadamard(q, ID)).to(tl.float32))
    dims = tl.arange(0, ID)
    tl.store(iq_ptr + (r * IH + heads[:, None]) * ID + dims[None, :], qq)
    tl.store(head_w_ptr + r * IH + heads, w_raw * (IH ** -0.5) * qs * (ID ** -0.5))


@triton.jit
def order_key(s):
    """f32 -> uint32 whose unsigned order is the floats' (larger score, larger key; -0.0 below +0.0)."""
    b = s.to(tl.uint32, bitcast=True)
    return tl.where((b >> 31) != 0, b ^ 0xFFFFFFFF, b | 0x80000000)


@triton.jit
def row_lengths(lengths_ptr, err_ptr, launch_id, pid, is_report, R: tl.constexpr, CAP: tl.constexpr,
                S: tl.constexpr):
    """Every row's length [16] (0 past R), clamped to the page table's CAP keys; where is_report, a longer row
    writes the error word (the stage and the row)."""
    rows = tl.arange(0, 16)
    n = tl.load(lengths_ptr + rows, mask=rows < R, other=0)
    bad = tl.max(tl.where(n > CAP, rows, -1), axis=0)
    if is_report & (bad >= 0):
        report_input(err_ptr, launch_id, S, pid, bad, tl.sum(tl.where(rows == bad, n, 0), axis=0), CAP)
    return tl.minimum(tl.maximum(n, 0), CAP)


@triton.jit
def slice_of(n, s, n_slices, IBLK: tl.constexpr):
    """Slice s of n_slices over n keys: [start, end), whole IBLK blocks a slice (the last ones may be empty)."""
    width = ((n + n_slices - 1) // n_slices + IBLK - 1) // IBLK * IBLK
    start = s * width
    return start, tl.minimum(start + width, n)


@triton.jit
def load_scores(scores_ptr, tt, end):
    """A row's scores at positions tt below end (0.0 elsewhere, masked out by the callers), from L2."""
    return tl.load(scores_ptr + tt, mask=tt < end, other=0.0, cache_modifier=".cg")


@triton.jit
def zero_other_parity(hist_ptr, parity, pid, R: tl.constexpr, NPROG: tl.constexpr, HC: tl.constexpr = 1,
                      NB: tl.constexpr = BINS):
    """The other parity's histograms (HC copies a row of NB bins), zeroed for the next launch (a row a program)."""
    for r in tl.range(pid, R, NPROG):
        tl.store(hist_ptr + ((1 - parity) * R + r) * (HC * NB) + tl.arange(0, HC * NB),
                 tl.zeros((HC * NB,), dtype=tl.int32))


@triton.jit
def block_scores(q, hw, k, ks, SWAP: tl.constexpr):
    """One row's scores over a block of keys k [IBLK, ID] (scales ks): s[t] = ks[t] x sum_h hw[h] x
    relu(q[h] . k[t]) (fp8 dots, f32 sums). SWAP: the dots as k @ q^T ([IBLK, IH]: the keys as the product's
    rows, an fp8 wgmma on sm_90) instead of q @ k^T ([IH, IBLK]: 32 heads as rows, an mma.sync of f16-converted
    tiles)."""
    if SWAP:
        dots_t = tl.dot(k, tl.trans(q))  # [IBLK, IH] f32
        return tl.sum(tl.maximum(dots_t, 0.0) * hw[None, :], axis=1) * ks
    else:
        dots = tl.dot(q, tl.trans(k))  # [IH, IBLK] f32
        return tl.sum(tl.maximum(dots, 0.0) * hw[:, None], axis=0) * ks


@triton.jit
def count_digit0(sc, counted, hist_row_ptr, ATOM: tl.constexpr, W0: tl.constexpr = 8):
    """The first radix digit (the top W0 bits of `order_key`) of the scores sc where counted: their histogram
    [BINS] (W0 8); ATOM: one integer atomic a key into the row's histogram at hist_row_ptr instead (returns zeros;
    any W0)."""
    d = (order_key(sc) >> (32 - W0)).to(tl.int32)
    if ATOM:
        tl.atomic_add(hist_row_ptr + d, 1, mask=counted, sem="relaxed")
        return tl.zeros((BINS,), dtype=tl.int32)
    else:
        return tl.histogram(d, BINS, mask=counted)


@triton.jit
def score_keys(q, hw, k, ks, scores_ptr, tt, end, h, j, rlen, is_hist, LS: tl.constexpr, SWAP: tl.constexpr = False,
               hist_row_ptr=None, ATOM: tl.constexpr = False, W0: tl.constexpr = 8, KEEP: tl.constexpr = False):
    """One row's scores over a block of keys (`block_scores`), stored at scores_ptr + tt (tt < end). If is_hist
    and the row takes the sliced select (rlen > LS), its keys below rlen are counted by digit 0 into row j of h
    [16, BINS]; ATOM: into the row's histogram at hist_row_ptr instead, one integer atomic a key (h unchanged; W0:
    digit 0's bits); KEEP: the scores stored to leave L2 last (`tile_ops.store_kept`)."""
    sc = block_scores(q, hw, k, ks, SWAP)
    store_kept(scores_ptr + tt, sc, tt < end, KEEP)
    if is_hist:
        hj = count_digit0(sc, (tt < end) & (tt < rlen) & (rlen > LS), hist_row_ptr, ATOM, W0)
        if not ATOM:
            h += tl.where(tl.arange(0, 16)[:, None] == j, hj[None, :], 0)
    return h


@triton.jit
def score_by_hand(q0, hw0, len0, iq_ptr, head_w_ptr, index_k_cache_ptr, stride_index_k_cache, pt, scores_ptr, lens, h,
                  r0, nrows, s0, s1, is_hist, IH: tl.constexpr, ID: tl.constexpr, IBLK: tl.constexpr, LS: tl.constexpr,
                  SCOL: tl.constexpr, SWAP: tl.constexpr, hist_ptr, ATOM: tl.constexpr, HC: tl.constexpr,
                  W0: tl.constexpr = 8, KEEP: tl.constexpr = False):
    """A request's slice [s0, s1) scored for its nrows rows from r0 (page table pt; the first row's query and head
    weights given), prefetched by hand: the next block's keys load while this one's are scored, and the page ids
    of the block after that while those keys load (no wait on a load before the dots but the keys' own). ATOM:
    digit 0 counted into row r's histogram copy at hist_ptr + r HC 2^W0 (`score_keys`; hist_ptr: the task's
    copy of row 0's; HC copies a row of 2^W0 bins). KEEP: `score_keys`'."""
    NB0: tl.constexpr = 1 << W0
    rows = tl.arange(0, 16)
    heads = tl.arange(0, IH)
    dims = tl.arange(0, ID)
    blk = tl.arange(0, IBLK)
    tn = s0 + blk
    page = tl.load(pt + tn // PAGE, mask=tn < s1, other=0)
    k, ks = key_block(index_k_cache_ptr, stride_index_k_cache, page, tn, s1, dims)
    page = tl.load(pt + (tn + IBLK) // PAGE, mask=tn + IBLK < s1, other=0)
    for t0 in tl.range(s0, s1, IBLK, num_stages=1):  # prefetched by hand
        tt = t0 + blk
        tn = tt + IBLK
        k_next, ks_next = key_block(index_k_cache_ptr, stride_index_k_cache, page, tn, s1, dims)
        page = tl.load(pt + (tn + IBLK) // PAGE, mask=tn + IBLK < s1, other=0)
        h = score_keys(q0, hw0, k, ks, scores_ptr + r0 * SCOL, tt, s1, h, 0, len0, is_hist, LS, SWAP,
                       hist_ptr + r0 * (HC * NB0), ATOM, W0, KEEP)
        for j in range(1, nrows):  # a verify request's other rows
            r = r0 + j
            q = tl.load(iq_ptr + (r * IH + heads[:, None]) * ID + dims[None, :], cache_modifier=".cg")
            hw = tl.load(head_w_ptr + r * IH + heads, cache_modifier=".cg")
            rlen = tl.sum(tl.where(rows == r, lens, 0), axis=0)
            h = score_keys(q, hw, k, ks, scores_ptr + r * SCOL, tt, s1, h, j, rlen, is_hist, LS, SWAP,
                           hist_ptr + r * (HC * NB0), ATOM, W0, KEEP)
        k, ks = k_next, ks_next
    return h


@triton.jit
def row_block(q0, hw0, k, ks, scores_row_ptr, tt, s1, len0, h0, mx, HIST: tl.constexpr, LS: tl.constexpr,
              SWAP: tl.constexpr, hist_row_ptr, ATOM: tl.constexpr, W0: tl.constexpr, FLOOR: tl.constexpr = False,
              KEEP: tl.constexpr = False):
    """A decode row's block of keys in `score_pipelined`: its scores (`block_scores`) stored at scores_row_ptr + tt
    (tt < s1); HIST: the row's keys counted by digit 0 (`count_digit0`) into h0 [BINS], or by atomics (ATOM); FLOOR:
    each lane's largest score so far in mx [IBLK] (f32; a key past s1 scores 0.0 there, `lane_floor` allows for it).
    KEEP: the scores stored to leave L2 last (`tile_ops.store_kept`). Returns (h0, mx)."""
    sc = block_scores(q0, hw0, k, ks, SWAP)
    store_kept(scores_row_ptr + tt, sc, tt < s1, KEEP)
    if HIST:
        hj = count_digit0(sc, (tt < s1) & (tt < len0) & (len0 > LS), hist_row_ptr, ATOM, W0)
        if not ATOM:
            h0 += hj
    if FLOOR:
        mx = tl.maximum(mx, sc)  # one max a key: the loop's instructions bound it (masking it cost 28 a step, sm_90)
    return h0, mx


@triton.jit
def lane_floor(mx, C: tl.constexpr):
    """A score task's floor from its lanes' largest scores mx [IBLK] (`row_block`): of 16 order keys evenly spaced
    from the lanes' smallest toward their largest, the largest that at least C lanes reach, so at least C of the
    task's keys (a lane's largest is one of its keys) are at or above it. A lane's keys past the slice score 0.0
    (unmasked there), so a floor at or below +0.0's order key (or none that C lanes reach: C > IBLK) gives 0: no
    floor. One [IBLK, 16] count."""
    m = order_key(mx).to(tl.int64)
    lo = tl.min(m, axis=0)
    lv = tl.arange(0, 16)
    cand = lo + (tl.max(m, axis=0) - lo) * lv // 16
    n = tl.sum((m[:, None] >= cand[None, :]).to(tl.int32), axis=0)
    floor = tl.max(tl.where(n >= C, cand, 0), axis=0)
    return tl.where(floor > 0x80000000, floor, 0)  # 0x80000000: +0.0's order key


@triton.jit
def score_pipelined(q0, hw0, len0, index_k_cache_ptr, stride_index_k_cache, pt, scores_row_ptr, h, s0, s1,
                    HIST: tl.constexpr, ID: tl.constexpr, IBLK: tl.constexpr, LS: tl.constexpr, SWAP: tl.constexpr,
                    PIPE: tl.constexpr, hist_row_ptr, ATOM: tl.constexpr, AHEAD: tl.constexpr = False,
                    W0: tl.constexpr = 8, PCH: tl.constexpr = 0, FLOOR: tl.constexpr = 0, KEEP: tl.constexpr = False):
    """One row's slice [s0, s1) scored with the loads inside the loop, software-pipelined by Triton over PIPE
    stages; HIST: digit 0 counted (ATOM: into the row's histogram at hist_row_ptr, `score_keys`). With a step's
    page ids loaded in that step, Triton (3.6 and 3.8, sm_90) gives the keys one shared-memory buffer and waits
    for every copy at the step's start: their load overlaps no work.
    AHEAD (tiles.index_ahead): the next step's page ids loaded a step ahead and carried, so no key address waits on
    a load of its own step, and Triton gives the keys PIPE - 1 buffers, PIPE - 2 steps in flight
    (results/indexer8_score_loop_ttgir_cpu.txt); 1: a page id a key, 2: a step's IBLK / 64 page ids, its keys
    addressed by page (`page_block`).
    PCH > 0 (tiles.index_page_chunk): the slice in chunks of PCH steps, a chunk's page ids loaded at once (the next
    chunk's while this one is scored) and each step's picked from them in registers (tl.gather: a page id a key, or
    with AHEAD 2 the step's IBLK / 64 page ids for `page_block`), so that no key address waits on a load inside the
    pipelined loop: the loop alone at 8192 keys a program with its page ids a step ahead streams 3.0 TB/s, with none
    loaded 3.6 (results/indexer15_h200_probe_score_lookahead.log).
    FLOOR > 0 (tiles.index_floor): also the slice's floor, an order key that at least FLOOR of its keys reach
    (`lane_floor`; 0: none, and for slices under 16 blocks). Returns (h, the floor)."""
    dims = tl.arange(0, ID)
    blk = tl.arange(0, IBLK)
    h0 = tl.zeros((BINS,), dtype=tl.int32)  # the row's digit-0 counts (one row: no [16, BINS] select a block)
    mx = tl.full((IBLK,), float("-inf"), tl.float32)  # each lane's largest score (FLOOR)
    if PCH > 0:
        CK: tl.constexpr = PCH * IBLK  # keys a chunk
        pj = tl.arange(0, PCH * (IBLK // PAGE))  # a chunk's pages
        pc = tl.load(pt + s0 // PAGE + pj, mask=s0 + pj * PAGE < s1, other=0)
        for c0 in tl.range(s0, s1, CK, num_stages=1):  # chunks: never pipelined
            pc_next = tl.load(pt + (c0 + CK) // PAGE + pj, mask=c0 + CK + pj * PAGE < s1, other=0)
            for t0 in tl.range(c0, tl.minimum(c0 + CK, s1), IBLK, num_stages=PIPE):
                tt = t0 + blk
                if AHEAD == 2:  # the step's IBLK / 64 page ids picked from the chunk's, its keys addressed by page
                    k, ks = page_block(index_k_cache_ptr, stride_index_k_cache,
                                       tl.gather(pc, (t0 - c0) // PAGE + tl.arange(0, IBLK // PAGE), 0), t0, s1, dims)
                else:
                    k, ks = key_block(index_k_cache_ptr, stride_index_k_cache, tl.gather(pc, (tt - c0) // PAGE, 0),
                                      tt, s1, dims)
                h0, mx = row_block(q0, hw0, k, ks, scores_row_ptr, tt, s1, len0, h0, mx, HIST, LS, SWAP, hist_row_ptr,
                                   ATOM, W0, FLOOR > 0, KEEP)
            pc = pc_next
    elif AHEAD == 2:
        pg = tl.arange(0, IBLK // PAGE)
        pages = tl.load(pt + s0 // PAGE + pg, mask=s0 + pg * PAGE < s1, other=0)  # the first step's
        for t0 in tl.range(s0, s1, IBLK, num_stages=PIPE):
            k, ks = page_block(index_k_cache_ptr, stride_index_k_cache, pages, t0, s1, dims)
            pages = tl.load(pt + (t0 + IBLK) // PAGE + pg, mask=t0 + IBLK + pg * PAGE < s1, other=0)
            h0, mx = row_block(q0, hw0, k, ks, scores_row_ptr, t0 + blk, s1, len0, h0, mx, HIST, LS, SWAP, hist_row_ptr,
                               ATOM, W0, FLOOR > 0, KEEP)
    else:
        if AHEAD:
            page = tl.load(pt + (s0 + blk) // PAGE, mask=s0 + blk < s1, other=0)  # the first step's
        for t0 in tl.range(s0, s1, IBLK, num_stages=PIPE):
            tt = t0 + blk
            if not AHEAD:
                page = tl.load(pt + tt // PAGE, mask=tt < s1, other=0)
            k, ks = key_block(index_k_cache_ptr, stride_index_k_cache, page, tt, s1, dims)
            if AHEAD:
                page = tl.load(pt + (tt + IBLK) // PAGE, mask=tt + IBLK < s1, other=0)
            h0, mx = row_block(q0, hw0, k, ks, scores_row_ptr, tt, s1, len0, h0, mx, HIST, LS, SWAP, hist_row_ptr,
                               ATOM, W0, FLOOR > 0, KEEP)
    floor = (s0 * 0).to(tl.int64)
    if FLOOR > 0:
        if s1 - s0 >= 16 * IBLK:  # a shorter slice's lanes hold too few keys for a floor worth its reductions
            floor = lane_floor(mx, FLOOR)
    return h + tl.where(tl.arange(0, 16)[:, None] == 0, h0[None, :], 0), floor


@triton.jit
def score(iq_ptr, head_w_ptr, index_k_cache_ptr, stride_index_k_cache, page_table_ptr, lens, rpr, scores_ptr, hist0_ptr,
          floor_ptr, epoch, pid, ok, task_count_ptr, S: tl.constexpr,
          R: tl.constexpr, IH: tl.constexpr, ID: tl.constexpr, KTOP: tl.constexpr, PMAX: tl.constexpr,
          NSL: tl.constexpr, IBLK: tl.constexpr, LS: tl.constexpr, SWAP: tl.constexpr, PIPE: tl.constexpr,
          ATOM: tl.constexpr, NPROG: tl.constexpr, SKIP_MASK: tl.constexpr, COUNT_TASKS: tl.constexpr,
          HC: tl.constexpr, AHEAD: tl.constexpr, W0: tl.constexpr = 8, PCH: tl.constexpr = 0,
          FLOOR: tl.constexpr = False, KEEP: tl.constexpr = False, ROWS: tl.constexpr = False, rows_ptr=None,
          SKIP_ARRIVE: tl.constexpr = -1):
    """Tasks (request b, slice) of the requests with a row past KTOP keys: the slice's cached keys, read once
    (IBLK at a time through the page table), scored for every row of the request (`score_keys`), stored at
    scores[r, t]; the rows that take the sliced select also count their first radix digit over the slice into
    hist0[epoch % 2] (integer atomics). Rows of a request are rows_per_req consecutive rows sharing a page table;
    its keys split into (its rows x NSL) slices, the tasks of its rows' places (task t: unit row t // NSL). The
    request's first row's query and head weights load once a task (a decode request's only row). lens: every
    row's length (`row_lengths`); rpr: rows_per_req. SWAP: the dots swapped (`score_keys`); PIPE > 0: a decode
    request's loop pipelined by Triton (`score_pipelined`), else prefetched by hand (`score_by_hand`). ATOM > 0:
    digit 0 counted by one atomic a key straight into hist0 (`score_keys`), not a register histogram added once a
    task; hist0 then holds HC copies of each row's histogram (the table's hist0_copies), task t counting into
    copy t % HC (fewer tasks contend for one address), summed where read (`stages_select.found_prefix`).
    AHEAD: the pipelined loop's page ids a step ahead, PCH: a chunk of PCH steps' at once (`score_pipelined`).
    W0: digit 0's bits (8, or 12 with ATOM: the table's radix_digits).
    FLOOR (tiles.index_floor): each task also writes its floor at floor[t], an order key that at least
    ceil(KTOP / NSL) of its slice's keys reach (a decode request's pipelined loop: `score_pipelined`; else 0), so at
    least KTOP of a decode row's keys reach the smallest of its NSL tasks' floors: a key below it is below the row's
    threshold (sel1 lists and counts none: `stages_select.select_digit`).
    ROWS (tiles.index_row_waits 2): every task index t, each launch, then arrives at its unit row t // NSL's word at
    rows_ptr (`sync.arrive_row`), which sel1's tasks of the request's rows wait on.
    KEEP (tiles.index_keep_scores): the scores stored to leave L2 last (`tile_ops.store_kept`: meant for sel1's reads
    of them; on an H100 the score stage itself gains, tiles_index.INDEX_KEEP_BY_WIDTH)."""
    SCOL: tl.constexpr = PMAX * PAGE  # a row of scores
    FC: tl.constexpr = (KTOP + NSL - 1) // NSL if FLOOR else 0  # keys a task's floor guarantees
    NB0: tl.constexpr = 1 << W0
    parity = epoch & 1
    zero_other_parity(hist0_ptr, parity, pid, R, NPROG, HC, NB0)
    hist_ptr = hist0_ptr + parity * R * (HC * NB0)  # this launch's histograms, a row's HC x NB0 counts each
    rows = tl.arange(0, 16)
    heads = tl.arange(0, IH)
    dims = tl.arange(0, ID)
    bins = tl.arange(0, BINS)
    n_tasks = stage_tasks(R * NSL, ok, S, SKIP_MASK, ROWS)
    for t in tl.range(pid, n_tasks, NPROG, num_stages=1):  # tasks: never pipelined
        r0 = (t // NSL) // rpr * rpr  # the request's first row
        nrows = tl.minimum(rpr, R - r0)
        blen = tl.max(tl.where((rows >= r0) & (rows < r0 + nrows), lens, 0), axis=0)
        if ROWS:  # an emptied stage: the task only arrives
            go = (blen > KTOP) & task_runs(ok, S, SKIP_MASK)
        else:
            go = blen > KTOP
        if go:
            count_task(task_count_ptr, S, COUNT_TASKS)
            s0, s1 = slice_of(blen, t - r0 * NSL, nrows * NSL, IBLK)
            pt = page_table_ptr + r0 * PMAX
            q0 = tl.load(iq_ptr + (r0 * IH + heads[:, None]) * ID + dims[None, :], cache_modifier=".cg")
            hw0 = tl.load(head_w_ptr + r0 * IH + heads, cache_modifier=".cg")
            len0 = tl.sum(tl.where(rows == r0, lens, 0), axis=0)
            is_hist = blen > LS  # a row of the request takes the sliced select
            h = tl.zeros((16, BINS), dtype=tl.int32)  # digit 0's histogram of each of the request's rows
            floor = (blen * 0).to(tl.int64)
            if PIPE > 0:
                if nrows == 1:  # a decode request: its row's loop pipelined by Triton, digit 0 counted or not
                    if is_hist:
                        h, floor = score_pipelined(q0, hw0, len0, index_k_cache_ptr, stride_index_k_cache, pt,
                                                   scores_ptr + r0 * SCOL, h, s0, s1, True, ID, IBLK, LS, SWAP, PIPE,
                                                   hist_ptr + (r0 * HC + t % HC) * NB0, ATOM, AHEAD, W0, PCH, FC, KEEP)
                    else:
                        h, floor = score_pipelined(q0, hw0, len0, index_k_cache_ptr, stride_index_k_cache, pt,
                                                   scores_ptr + r0 * SCOL, h, s0, s1, False, ID, IBLK, LS, SWAP, PIPE,
                                                   hist_ptr, ATOM, AHEAD, 8, PCH, KEEP=KEEP)
                else:
                    h = score_by_hand(q0, hw0, len0, iq_ptr, head_w_ptr, index_k_cache_ptr, stride_index_k_cache, pt,
                                      scores_ptr, lens, h, r0, nrows, s0, s1, is_hist, IH, ID, IBLK, LS, SCOL, SWAP,
                                      hist_ptr + (t % HC) * NB0, ATOM, HC, W0, KEEP)
            else:
                h = score_by_hand(q0, hw0, len0, iq_ptr, head_w_ptr, index_k_cache_ptr, stride_index_k_cache, pt,
                                  scores_ptr, lens, h, r0, nrows, s0, s1, is_hist, IH, ID, IBLK, LS, SCOL, SWAP,
                                  hist_ptr + (t % HC) * NB0, ATOM, HC, W0, KEEP)
            if FLOOR:
                tl.store(floor_ptr + t, floor)
            if ATOM == 0:  # the task's register histograms added into hist0's one copy (ATOM: counted there already)
                if is_hist:
                    for j in range(0, nrows):
                        r = r0 + j
                        if tl.sum(tl.where(rows == r, lens, 0), axis=0) > LS:
                            hj = tl.sum(tl.where(rows[:, None] == j, h, 0), axis=0)
                            tl.atomic_add(hist_ptr + r * BINS + bins, hj, mask=hj > 0, sem="relaxed")
        if ROWS:
            arrive_row(rows_ptr, t // NSL, S, SKIP_ARRIVE)


@triton.jit
def key_ptrs(page, off, dims):
    """The fp8 bytes dims of keys off (0 .. 63) of the index-K pages whose bytes start at page: a page holds its 64
    keys of KEY_BYTES bytes, then their 64 f32 scales (`scale_ptrs`). Broadcast as the arguments are shaped."""
    return page + off * KEY_BYTES + dims


@triton.jit
def scale_ptrs(page, off):
    """The f32 scales of keys off (0 .. 63) of the index-K pages whose bytes start at page (after the page's 64
    keys: `key_ptrs`)."""
    return (page + PAGE * KEY_BYTES + off * 4).to(tl.pointer_type(tl.float32))


@triton.jit
def page_block(index_k_cache_ptr, stride_index_k_cache, pages, t0, end, dims):
    """`key_block`'s keys and scales at positions t0 + [0, IBLK) below end, addressed by page: pages [IBLK / 64]
    the step's page ids, the keys loaded as an [IBLK / 64, 64, ID] tile (a page's 64 keys one contiguous run from
    its base) and the scales as [IBLK / 64, 64], then laid out as key_block's [IBLK, ID] and [IBLK]."""
    NP: tl.constexpr = pages.shape[0]
    off = tl.arange(0, PAGE)
    tt = t0 + tl.arange(0, NP)[:, None] * PAGE + off[None, :]  # [NP, 64]
    pbase = index_k_cache_ptr + pages.to(tl.int64) * stride_index_k_cache
    k = tl.load(key_ptrs(pbase[:, None, None], off[None, :, None], dims[None, None, :]), mask=(tt < end)[:, :, None],
                other=0)
    ks = tl.load(scale_ptrs(pbase[:, None], off[None, :]), mask=tt < end, other=0.0)
    return (tl.reshape(k, (NP * PAGE, dims.shape[0])).to(tl.float8e4nv, bitcast=True), tl.reshape(ks, (NP * PAGE,)))


@triton.jit
def key_block(index_k_cache_ptr, stride_index_k_cache, page, tt, end, dims):
    """The cached index keys at positions tt [IBLK] below end (fp8 [IBLK, ID]) and their scales (f32 [IBLK]),
    from their pages' ids `page` (0 past end: nothing read there)."""
    pbase = index_k_cache_ptr + page.to(tl.int64) * stride_index_k_cache
    valid = tt < end
    k = tl.load(key_ptrs(pbase[:, None], (tt % PAGE)[:, None], dims[None, :]), mask=valid[:, None],
                other=0).to(tl.float8e4nv, bitcast=True)
    ks = tl.load(scale_ptrs(pbase, tt % PAGE), mask=valid, other=0.0)
    return k, ks
