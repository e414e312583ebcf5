"""Cross-rank pushes with rank-ordered sums: the device side of the TP protocol every kind is to use.

Each rank writes its partial (f32 values) as epoch-tagged 64-bit words, `epoch << 32 | f32 bits`, into its own slot
of every rank's peer buffer (`common/peer.py`: `ptrs`, every rank's buffer address in rank order). Each rank then
waits only on its own buffer: a slot is in once every word of it carries this launch's epoch, so no flag and no
fence orders the data (one 64-bit store a value). It sums the slots in rank order 0 .. R-1 in f32, so every rank
holds the same bits, on every run. Epochs grow by one a launch and are never reset, so a replayed graph needs no
host write and a word of an earlier launch never passes for this one.

A region of a peer buffer holds R slots of N words: rank p's slot starts at word `region + p * N`. A wait is
bounded like every other (`sync.wait_counter`: the global timer on NVIDIA, else polls): a peer that never pushes
writes the error word (ERR_PEER: the stage, the peer, the words that arrived of the block, the epoch) and the
launch drains, or in a serving build faults (`sync.report_error`).

The kinds' stages use them through two stage bodies over a region of the table (`common/kind.Exchange`; its
first word X and slot words XW come from the table by name): `sum_stage` (o_proj's, the MoE's and the dense MLP's
partials, layer 0's embedding rows: a block of every rank's slot summed in rank order) and `gather_stage` (the
tail's logits: every rank's shard placed in rank order). The pushes are in the stages that make the partials.
"""

import triton
import triton.language as tl

from sgl_amd_mono.backends.triton.sync import (ERR_PEER, count_task, deadline_passed, error_flag, live_tasks,
                                               report_error, wait_start)
from sgl_amd_mono.backends.triton.tile_ops import to_bf16


@triton.jit
def tag_words(vals, epoch):
    """f32 values -> int64 words `epoch << 32 | bits`."""
    bits = vals.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF
    return (epoch.to(tl.int64) << 32) | bits


@triton.jit
def word_values(words):
    """int64 words -> their f32 values."""
    return (words & 0xFFFFFFFF).to(tl.int32).to(tl.float32, bitcast=True)


@triton.jit
def push(peers_ptr, word_off, vals, offs, mask, epoch, R: tl.constexpr):
    """Write vals (a block of f32) as tagged words at word `word_off + offs` of every rank's peer buffer (the
    caller's slot: region + rank * N + its block's start)."""
    words = tag_words(vals, epoch)
    for p in tl.static_range(R):
        dst = tl.load(peers_ptr + p).to(tl.pointer_type(tl.int64))
        tl.store(dst + word_off + offs, words, mask=mask)


@triton.jit
def peer_bound(bound):
    """The bound of the hand-off after a cross-rank sum stage: twice the waits' own, so that when a peer never
    pushes, the programs waiting on its words (which name it) miss their deadline before the programs that had no
    sum task and wait at the hand-off (which would name only the stage)."""
    return bound.to(tl.int64) * 2


@triton.jit
def push_slot(peers_ptr, rank, X, XW, vals, offs, mask, epoch, TP: tl.constexpr):
    """This rank's part (f32 values at word offsets `offs` of a slot) pushed into its slot of region X (slots of XW
    words) of every rank's peer buffer."""
    push(peers_ptr, X + rank * XW, vals, offs, mask, epoch, TP)


@triton.jit
def wait_words(src, mask, epoch, err_ptr, launch_id, stage, pid, peer, bound, ok, TIMER: tl.constexpr):
    """The words at `src` (a block of one slot of this rank's own buffer) once each carries `epoch`: (words, ok). ok
    0 once the deadline passed (the error word names the stage and `peer`) or an earlier wait failed (then nothing is
    waited for)."""
    tag = epoch.to(tl.int64)
    words = tl.load(src, mask=mask, other=tag << 32, volatile=True)
    missing = tl.sum(((words >> 32) != tag).to(tl.int32), axis=0)
    polls = missing * 0
    t0 = wait_start(TIMER)
    while (missing > 0) & (ok != 0):
        polls += 1
        words = tl.load(src, mask=mask, other=tag << 32, volatile=True)
        missing = tl.sum(((words >> 32) != tag).to(tl.int32), axis=0)
        if (polls % 8 == 0) & (missing > 0):
            over = deadline_passed(polls, t0, bound, TIMER)
            if over | (error_flag(err_ptr) != 0):  # past the deadline, or another program failed: drain
                if over:
                    report_error(err_ptr, ERR_PEER, launch_id, stage, pid, peer,
                                 tl.sum(mask.to(tl.int32), axis=0) - missing, tl.sum(mask.to(tl.int32), axis=0),
                                 epoch)
                ok = ok * 0
    return words, ok


@triton.jit
def wait_sum(peers_ptr, rank, region, N, offs, mask, epoch, err_ptr, launch_id, stage, pid, bound, ok,
             R: tl.constexpr, TIMER: tl.constexpr, BLOCK: tl.constexpr):
    """The sum, in rank order, of every rank's slot words at `offs` (a block of this rank's own buffer, region
    `region`, slots of N words), once each carries `epoch`. Returns (f32 block, ok): ok 0 once a peer missed the
    deadline (its error word written) or an earlier wait failed (then nothing is waited for)."""
    own = tl.load(peers_ptr + rank).to(tl.pointer_type(tl.int64))
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for p in tl.static_range(R):
        words, ok = wait_words(own + region + p * N + offs, mask, epoch, err_ptr, launch_id, stage, pid, p, bound, ok,
                               TIMER)
        acc += tl.where(mask, word_values(words), 0.0)
    return acc, ok


@triton.jit
def sum_stage(peers_ptr, rank, out_ptr, res_ptr, res_out_ptr, err_ptr, launch_id, epoch, pid, ok, bound,
              task_count_ptr, X: tl.constexpr, XW: tl.constexpr, S: tl.constexpr, T: tl.constexpr, BX: tl.constexpr,
              TP: tl.constexpr, NPROG: tl.constexpr, TIMER: tl.constexpr, SKIP_MASK: tl.constexpr,
              COUNT_TASKS: tl.constexpr, HAS_RES: tl.constexpr):
    """Task t: words [t BX, (t + 1) BX) of region X's slots (XW words each: a [rows, D] bf16 output, row-major)
    summed over the ranks in rank order in f32 once every rank's came, rounded to bf16 into out; HAS_RES: res_out =
    bf16(out + res) there too (o_sum's residual). Returns ok (0 once a peer missed its deadline: the launch drains)."""
    for t in tl.range(pid, live_tasks(T, ok, S, SKIP_MASK), NPROG, num_stages=1):  # tasks: never pipelined
        count_task(task_count_ptr, S, COUNT_TASKS)
        offs = t * BX + tl.arange(0, BX)
        m = offs < XW
        acc, ok = wait_sum(peers_ptr, rank, X, XW, offs, m, epoch, err_ptr, launch_id, S, pid, bound, ok, TP, TIMER,
                           BX)
        v = to_bf16(acc)
        tl.store(out_ptr + offs, v, mask=m)
        if HAS_RES:
            r = tl.load(res_ptr + offs, mask=m, other=0.0, cache_modifier=".cg")
            tl.store(res_out_ptr + offs, to_bf16(v.to(tl.float32) + r.to(tl.float32)), mask=m)
    return ok


@triton.jit
def gather_stage(peers_ptr, rank, out_ptr, err_ptr, launch_id, epoch, pid, ok, bound, task_count_ptr,
                 X: tl.constexpr, XW: tl.constexpr, COLS: tl.constexpr, S: tl.constexpr, T: tl.constexpr,
                 BX: tl.constexpr, TP: tl.constexpr, NPROG: tl.constexpr, TIMER: tl.constexpr,
                 SKIP_MASK: tl.constexpr, COUNT_TASKS: tl.constexpr):
    """Task t = (rank p, block b): words [b BX, (b + 1) BX) of rank p's slot of region X (XW words: a [rows, COLS]
    f32 shard, row-major) once they came, stored at out[row, p COLS + col] (out: [rows, TP x COLS] f32). Returns ok."""
    NB: tl.constexpr = (XW + BX - 1) // BX
    own = tl.load(peers_ptr + rank).to(tl.pointer_type(tl.int64))
    for t in tl.range(pid, live_tasks(T, ok, S, SKIP_MASK), NPROG, num_stages=1):  # tasks: never pipelined
        count_task(task_count_ptr, S, COUNT_TASKS)
        p = t // NB
        offs = (t % NB) * BX + tl.arange(0, BX)
        m = offs < XW
        words, ok = wait_words(own + X + p * XW + offs, m, epoch, err_ptr, launch_id, S, pid, p, bound, ok, TIMER)
        row = offs // COLS
        tl.store(out_ptr + row.to(tl.int64) * (TP * COLS) + p * COLS + offs % COLS, word_values(words), mask=m)
    return ok
