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

Not yet read by a launch kind: the kinds' o_proj / MoE-down / dense-down partials, layer 0's embedding rows and
the tail's logits are to go through these (the TP issue).
"""

import triton
import triton.language as tl

from sgl_amd_mono.backends.triton.sync import ERR_PEER, deadline_passed, error_flag, report_error, wait_start


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
def wait_sum(peers_ptr, rank, region, N, offs, mask, epoch, err_ptr, launch_id, stage, pid, bound, ok,
             R: tl.constexpr, TIMER: tl.constexpr, BLOCK: tl.constexpr):
    """The sum, in rank order, of every rank's slot words at `offs` (a block of this rank's own buffer, region
    `region`, slots of N words), once each carries `epoch`. Returns (f32 block, ok): ok 0 once a peer missed the
    deadline (its error word written) or an earlier wait failed (then nothing is waited for)."""
    own = tl.load(peers_ptr + rank).to(tl.pointer_type(tl.int64))
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    tag = epoch.to(tl.int64)
    for p in tl.static_range(R):
        src = own + region + p * N + offs
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
                        report_error(err_ptr, ERR_PEER, launch_id, stage, pid, p,
                                     tl.sum(mask.to(tl.int32), axis=0) - missing, tl.sum(mask.to(tl.int32), axis=0),
                                     epoch)
                    ok = ok * 0
        acc += tl.where(mask, word_values(words), 0.0)
    return acc, ok
