"""Device-side hand-offs for persistent Triton launches: epoch-tagged arrival counters and bounded waits.

sync: [1 + n_counters] int32. sync[0] is the epoch (steps completed); sync[1 + s] counts arrivals
at stage s over every step. Counters are monotonic and never reset: in the step with epoch E
(E = sync[0] + 1 read at launch start) a stage is complete when its counter reaches E * NPROG.
The launch advances sync[0] itself at its end (the last program to arrive at the last counter, so no
program waits there), so a replayed CUDA graph needs no host write.
A wait that passes its deadline writes the error word (`common/guard.py`) and returns 0; every
other wait then sees err[0] != 0 and returns 0 at once, so the launch drains instead of hanging.
"""

import triton
import triton.language as tl

ERR_FLAG: tl.constexpr = tl.constexpr(0x5EAD)


@triton.jit
def read_epoch(sync_ptr):
    """The epoch of this step (steps completed so far + 1)."""
    return tl.atomic_add(sync_ptr, 0, sem="acquire") + 1


@triton.jit
def arrive(sync_ptr, counter):
    """Publish this program's work in stage `counter` (all threads' stores first, then release)."""
    tl.debug_barrier()
    tl.atomic_add(sync_ptr + 1 + counter, 1, sem="release")


@triton.jit
def _program_time():
    """The global timer (ns) as one value for the whole program (the latest of its threads' reads).
    Each thread reads its own timer; a wait that compared per-thread reads could let the threads of one
    program leave it at different polls (seen on the H200 under compute-sanitizer after a planted
    missed deadline: the threads then disagreed on every later stage and wrote through garbage)."""
    return tl.max(tl.zeros((256,), dtype=tl.int64) + tl.extra.cuda.globaltimer(), axis=0)


@triton.jit
def wait_counter(sync_ptr, counter, target, err_ptr, launch_id, stage, pid, epoch, bound,
                 TIMER: tl.constexpr):
    """Spin until sync[1 + counter] >= target, at most `bound` (ns with TIMER, else polls).

    Returns 1 when satisfied, 0 when the deadline passed or another program already failed. Every
    value the loop decides on is the same in all of the program's threads (atomics return one value a
    program; the timer is `_program_time`), so its threads leave the wait together.
    """
    seen = tl.atomic_add(sync_ptr + 1 + counter, 0, sem="acquire")
    stop = seen * 0
    polls = seen * 0
    over = seen < 0
    if TIMER:
        t0 = _program_time()
    while (seen < target) & (stop == 0):
        polls += 1
        # the error word and the deadline every 8th poll only, so a poll is one load of the counter (each
        # read here is a round trip to L2 and a block barrier, and reading both every poll doubled the poll)
        if polls % 8 == 0:
            flag = tl.atomic_add(err_ptr, 0, sem="relaxed")
            if TIMER:
                over = (_program_time() - t0) > bound
            else:
                over = polls > bound
            stop = (over | (flag != 0)).to(tl.int32)
        seen = tl.atomic_add(sync_ptr + 1 + counter, 0, sem="acquire")
    ok = (seen >= target).to(tl.int32)
    if ok == 0:
        z = seen.to(tl.int64) * 0
        first = tl.atomic_cas(err_ptr, z, z + ERR_FLAG, sem="acq_rel")
        if first == 0:  # the first program to miss writes where
            tl.store(err_ptr + 1, (z + launch_id).to(tl.int64))
            tl.store(err_ptr + 2, (z + stage).to(tl.int64))
            tl.store(err_ptr + 3, (z + pid).to(tl.int64))
            tl.store(err_ptr + 4, (z + counter).to(tl.int64))
            tl.store(err_ptr + 5, seen.to(tl.int64))
            tl.store(err_ptr + 6, (z + target).to(tl.int64))
            tl.store(err_ptr + 7, (z + epoch).to(tl.int64))
    tl.debug_barrier()
    return ok
