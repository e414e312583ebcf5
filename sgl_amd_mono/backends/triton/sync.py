"""Device-side hand-offs for persistent Triton launches: epoch-tagged arrival counters, bounded waits,
last-arrival counts, trace stamps, and a launch's start and end. Every kind's kernel uses these, with its
stage count as a constexpr, so a change to the hand-off lands in every kind at once.

sync: [1 + N_STAGES + counts] int32 (`common/kind.SyncLayout`). sync[0] is the epoch (launches completed
on this sync buffer); sync[1 + s] counts arrivals at stage s over every launch. Counters are monotonic and
never reset: in the launch with epoch E (E = sync[0] + 1 read at launch start) stage s is complete when its
counter reaches E * NPROG. Every comparison of a counter with its target is taken on their int32
difference, so it stays right when the words wrap (a sync buffer shared by the 57 shared layers of a width
takes 57 * 132 arrivals a step at a stage: int32 wraps after ~285K steps). The launch advances sync[0]
itself at its end (the last program to arrive at the last stage's counter), so a replayed CUDA graph needs
no host write. A wait that passes its deadline writes the error word (`common/guard.py`, whose field names
index it here) and returns 0; every later wait sees err[flag] != 0 and returns 0 at once, so the launch
drains instead of hanging (a check build); a serving build's first failing program faults at address 0x0
instead (`report_error`).
"""

import triton
import triton.language as tl

from sgl_amd_mono.common import guard

ERR_FLAG: tl.constexpr = tl.constexpr(guard.ERR_FLAG)
ERR_INPUT: tl.constexpr = tl.constexpr(guard.ERR_INPUT)
ERR_INVARIANT: tl.constexpr = tl.constexpr(guard.ERR_INVARIANT)
ERR_PEER: tl.constexpr = tl.constexpr(guard.ERR_PEER)
INPUT_LENGTH: tl.constexpr = tl.constexpr(guard.INPUT_LENGTH)
INPUT_TOKEN: tl.constexpr = tl.constexpr(guard.INPUT_TOKEN)
_E_FLAG: tl.constexpr = tl.constexpr(guard.ERR_FIELDS.index("flag"))
_E_LAUNCH: tl.constexpr = tl.constexpr(guard.ERR_FIELDS.index("launch"))
_E_STAGE: tl.constexpr = tl.constexpr(guard.ERR_FIELDS.index("stage"))
_E_PROGRAM: tl.constexpr = tl.constexpr(guard.ERR_FIELDS.index("program"))
_E_WAITED_ON: tl.constexpr = tl.constexpr(guard.ERR_FIELDS.index("waited_on"))
_E_SEEN: tl.constexpr = tl.constexpr(guard.ERR_FIELDS.index("seen"))
_E_TARGET: tl.constexpr = tl.constexpr(guard.ERR_FIELDS.index("target"))
_E_EPOCH: tl.constexpr = tl.constexpr(guard.ERR_FIELDS.index("epoch"))
_E_HOST_COPY: tl.constexpr = tl.constexpr(guard.ERR_FIELDS.index("host_copy"))


@triton.jit
def read_epoch(sync_ptr):
    """The epoch of this launch (launches completed on this sync buffer + 1)."""
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
def wait_start(TIMER: tl.constexpr):
    """A wait's start: the program's global time (ns) with TIMER, else 0 (the bound counts polls)."""
    if TIMER:
        return _program_time()
    else:
        return tl.zeros((), dtype=tl.int64)


@triton.jit
def error_flag(err_ptr):
    """The error word's flag as this launch sees it now (non-zero once any program failed: the waits drain)."""
    return tl.atomic_add(err_ptr + _E_FLAG, 0, sem="relaxed")


@triton.jit
def deadline_passed(polls, t0, bound, TIMER: tl.constexpr):
    """Whether a wait that started at t0 (`wait_start`) and has polled `polls` times is past its bound (ns with
    TIMER, else polls). The same value in all of the program's threads."""
    if TIMER:
        return (_program_time() - t0) > bound
    else:
        return polls > bound


@triton.jit
def wait_counter(sync_ptr, counter, target, err_ptr, launch_id, stage, pid, epoch, bound,
                 TIMER: tl.constexpr):
    """Spin until sync[1 + counter] has reached target (their int32 difference >= 0), at most `bound`
    (ns with TIMER, else polls). Returns 1 when satisfied, 0 when the deadline passed or another program
    already failed (`wait_word`)."""
    return wait_word(sync_ptr + 1 + counter, counter, target, err_ptr, launch_id, stage, pid, epoch, bound, TIMER)


@triton.jit
def wait_word(word_ptr, waited_on, target, err_ptr, launch_id, stage, pid, epoch, bound, TIMER: tl.constexpr):
    """Spin until the arrival word at word_ptr has reached target (their int32 difference >= 0), at most `bound`
    (ns with TIMER, else polls); a miss reports `waited_on` (the stage whose arrivals the word counts).

    Returns 1 when satisfied, 0 when the deadline passed or another program already failed. Every
    value the loop decides on is the same in all of the program's threads (atomics return one value a
    program; the timer is `_program_time`), so its threads leave the wait together.
    """
    seen = tl.atomic_add(word_ptr, 0, sem="acquire")
    stop = seen * 0
    polls = seen * 0
    over = seen < 0
    t0 = wait_start(TIMER)
    while ((seen - target) < 0) & (stop == 0):  # int32 difference: right across a wrap
        polls += 1
        # the error word and the deadline every 8th poll only, so a poll is one load of the counter (each
        # read here is a round trip to L2 and a block barrier, and reading both every poll doubled the poll)
        if polls % 8 == 0:
            flag = error_flag(err_ptr)
            over = deadline_passed(polls, t0, bound, TIMER)
            stop = (over | (flag != 0)).to(tl.int32)
        seen = tl.atomic_add(word_ptr, 0, sem="acquire")
    ok = ((seen - target) >= 0).to(tl.int32)
    if ok == 0:  # the first program to miss writes where (and a serving build faults)
        report_error(err_ptr, ERR_FLAG, launch_id, stage, pid, waited_on, seen, target, epoch)
    tl.debug_barrier()
    return ok


@triton.jit
def report_input(err_ptr, launch_id, stage, pid, row, value, limit, WHAT: tl.constexpr = INPUT_LENGTH):
    """A step input the launch cannot serve (row's `value` past `limit`): the first error of the launch writes
    the error word (ERR_INPUT: the stage, the row, the value, the limit); every wait then stops, so the
    launch drains, and the host raises naming them. The caller reads the value clamped to the limit. WHAT: which
    input (`guard.INPUT_LENGTH`, a row's length; `guard.INPUT_TOKEN`, a token id), in the word's epoch field."""
    report_error(err_ptr, ERR_INPUT, launch_id, stage, pid, row, value, limit, WHAT)


@triton.jit
def report_invariant(err_ptr, launch_id, stage, pid, row, value, limit):
    """The launch's own state broke an invariant (row's `value` past `limit`, e.g. a list entry past its row's
    top-k): the error word as report_input's, flagged ERR_INVARIANT. The caller drops the writes past it."""
    report_error(err_ptr, ERR_INVARIANT, launch_id, stage, pid, row, value, limit, 0)


@triton.jit
def report_error(err_ptr, FLAG: tl.constexpr, launch_id, stage, pid, waited_on, seen, target, epoch):
    """The first error of the launch writes the error word (FLAG and its fields); later ones change nothing.
    In a serving build (err[host_copy] != 0, `common/guard.py`) that first program writes the same fields to the
    host copy, flag last, then stores to address 0x0: the GPU faults and the step never ends in tokens."""
    z = (seen * 0).to(tl.int64)
    first = tl.atomic_cas(err_ptr + _E_FLAG, z, z + FLAG, sem="acq_rel")
    if first == 0:
        _write_fields(err_ptr, z, launch_id, stage, pid, waited_on, seen, target, epoch)
        host = tl.load(err_ptr + _E_HOST_COPY)
        if host != 0:
            copy = host.to(tl.pointer_type(tl.int64))
            _write_fields(copy, z, launch_id, stage, pid, waited_on, seen, target, epoch)
            tl.store(copy + _E_FLAG, z + FLAG)  # the flag last
            tl.store((z * 0).to(tl.pointer_type(tl.int64)), z + FLAG)  # address 0x0: the fault


@triton.jit
def _write_fields(w, z, launch_id, stage, pid, waited_on, seen, target, epoch):
    tl.store(w + _E_LAUNCH, (z + launch_id).to(tl.int64))
    tl.store(w + _E_STAGE, (z + stage).to(tl.int64))
    tl.store(w + _E_PROGRAM, (z + pid).to(tl.int64))
    tl.store(w + _E_WAITED_ON, (z + waited_on).to(tl.int64))
    tl.store(w + _E_SEEN, (z + seen).to(tl.int64))
    tl.store(w + _E_TARGET, (z + target).to(tl.int64))
    tl.store(w + _E_EPOCH, (z + epoch).to(tl.int64))


@triton.jit
def stamp(trace_ptr, pid, slot, N_STAGES: tl.constexpr, TRACE: tl.constexpr):
    """TRACE builds only: this program's global timer (ns) at trace[pid, slot] (`common/trace.py`)."""
    if TRACE:
        tl.debug_barrier()
        tl.store(trace_ptr + pid * (2 * N_STAGES) + slot, tl.extra.cuda.globaltimer())


@triton.jit
def hand_off(sync_ptr, err_ptr, trace_ptr, S: tl.constexpr, epoch, ok, pid, launch_id, bound, NPROG: tl.constexpr,
             N_STAGES: tl.constexpr, TIMER: tl.constexpr, SKIP_ARRIVE: tl.constexpr, TRACE: tl.constexpr, needs=True):
    """End stage S on this program and wait for every program to end it. Returns the new ok.
    TRACE: stamps trace[pid, 2S] at the arrival and trace[pid, 2S + 1] at the wait's exit.
    SKIP_ARRIVE: a planted missing arrival at that stage (deadline tests); -1 = none.
    needs (runtime, the same in all of the program's threads): false when this program's work up to its next wait
    reads nothing that stage S wrote: it arrives and goes on. Its next wait covers S: every program arrives at S
    before it arrives at a later stage, each arrival releasing the program's writes before it, so a later counter
    complete means S complete and its writes seen (a program missing at S is then reported at that later stage)."""
    stamp(trace_ptr, pid, 2 * S, N_STAGES, TRACE)
    if S != SKIP_ARRIVE:
        arrive(sync_ptr, S)
    if (ok != 0) & needs:
        ok = wait_counter(sync_ptr, S, epoch * NPROG, err_ptr, launch_id, S, pid, epoch, bound, TIMER)
    stamp(trace_ptr, pid, 2 * S + 1, N_STAGES, TRACE)
    return ok


@triton.jit
def arrive_row(rows_ptr, r, S: tl.constexpr, SKIP_ARRIVE: tl.constexpr):
    """A row-scoped hand-off's arrival: this task of stage S, on step row r, publishes its work at the row's word
    (rows_ptr: a table count of a word a row, each taking the stage's tasks a row a launch); all threads' stores
    first, then release. SKIP_ARRIVE: the planted missing arrival skips these too (deadline tests)."""
    tl.debug_barrier()
    if S != SKIP_ARRIVE:
        tl.atomic_add(rows_ptr + r, 1, sem="release")


@triton.jit
def wait_row(rows_ptr, r, parts, S_PREV: tl.constexpr, epoch, ok, err_ptr, launch_id, stage, pid, bound,
             TIMER: tl.constexpr):
    """A row-scoped hand-off's wait: before a task of `stage` on step row r reads what stage S_PREV wrote for that
    row, spin until the row's word (`arrive_row`) holds all `parts` of S_PREV's tasks of this launch (epoch x
    parts, every launch's arrivals counted, never reset), bounded as every wait (`wait_word`). The tasks of a row
    then go on as soon as their own row's tasks of the stage before have landed, not every program's (the stages'
    global hand-offs are passed: `hand_off`'s needs). Returns the new ok (0 once any wait failed)."""
    if ok != 0:
        ok = wait_word(rows_ptr + r, S_PREV, epoch * parts, err_ptr, launch_id, stage, pid, epoch, bound, TIMER)
    return ok


@triton.jit
def pass_rows(rows_ptr, pid, R: tl.constexpr, PARTS: tl.constexpr, S: tl.constexpr, NPROG: tl.constexpr,
              SKIP_ARRIVE: tl.constexpr):
    """A passed stage's row words (`arrive_row`; a stage every program skips in this launch, `pass_stages`): each of
    the R rows' PARTS arrivals made, spread over the programs, so that every word stays at epoch x PARTS."""
    for t in tl.range(pid, R * PARTS, NPROG, num_stages=1):
        arrive_row(rows_ptr, t // PARTS, S, SKIP_ARRIVE)


@triton.jit
def pass_stages(sync_ptr, trace_ptr, S0: tl.constexpr, S1: tl.constexpr, pid, N_STAGES: tl.constexpr,
                SKIP_ARRIVE: tl.constexpr, TRACE: tl.constexpr):
    """Stages S0..S1 that every program skips in this launch (a branch that all programs decide alike, from the
    same inputs): this program arrives at each without waiting, so every counter still reaches epoch x NPROG.
    TRACE stamps each one's arrival and exit."""
    for s in tl.static_range(S0, S1 + 1):
        stamp(trace_ptr, pid, 2 * s, N_STAGES, TRACE)
        if s != SKIP_ARRIVE:
            arrive(sync_ptr, s)
        stamp(trace_ptr, pid, 2 * s + 1, N_STAGES, TRACE)


@triton.jit
def last_to_land(count_ptr, epoch, n_parts):
    """Count this task's part (its stores first) at an epoch-tagged arrival count that takes n_parts a
    launch; true for the launch's last part to land, which may then read all of them."""
    tl.debug_barrier()  # every thread's part stored before the arrival
    return tl.atomic_add(count_ptr, 1, sem="acq_rel") == epoch * n_parts - 1


@triton.jit
def live_tasks(n_tasks, ok, S: tl.constexpr, SKIP_MASK: tl.constexpr):
    """A stage's task count for this launch: 0 once a wait failed (the launch drains), or when its bit is
    set in SKIP_MASK (timing variants only: the stage is emptied)."""
    return n_tasks * ok * (1 - ((SKIP_MASK >> S) & 1))


@triton.jit
def stage_tasks(n_tasks, ok, S: tl.constexpr, SKIP_MASK: tl.constexpr, ROWS: tl.constexpr):
    """A stage's task count for its loop. ROWS (its tasks arrive at row words, `arrive_row`): every task index while
    ok, so that each row's word takes its arrivals every launch, the stage emptied by SKIP_MASK or not (its work then
    skipped: `task_runs`); else `live_tasks`."""
    if ROWS:
        return n_tasks * ok
    else:
        return live_tasks(n_tasks, ok, S, SKIP_MASK)


@triton.jit
def task_runs(ok, S: tl.constexpr, SKIP_MASK: tl.constexpr):
    """Whether a task of `stage_tasks`' ROWS loop does its work: no wait failed, and stage S not emptied."""
    return ok * (1 - ((SKIP_MASK >> S) & 1)) != 0


@triton.jit
def count_task(count_ptr, S: tl.constexpr, COUNT_TASKS: tl.constexpr):
    """COUNT_TASKS builds (the interpreter's task-count check): one more task ran in stage S."""
    if COUNT_TASKS:
        tl.atomic_add(count_ptr + S, 1)


@triton.jit
def launch_start(sync_ptr, trace_ptr, N_STAGES: tl.constexpr, TRACE: tl.constexpr):
    """(pid, epoch, ok) at a launch's start; TRACE stamps the start in the last stage's unused wait slot."""
    pid = tl.program_id(0)
    epoch = read_epoch(sync_ptr)
    stamp(trace_ptr, pid, 2 * N_STAGES - 1, N_STAGES, TRACE)
    return pid, epoch, pid * 0 + 1


@triton.jit
def launch_end(sync_ptr, trace_ptr, pid, epoch, ok, NPROG: tl.constexpr, N_STAGES: tl.constexpr,
               TRACE: tl.constexpr):
    """End of the launch: the last program to arrive at the last stage's counter advances the epoch (unless
    its own waits failed); none waits. After a missed deadline the host reads the error word and resets
    the sync words."""
    stamp(trace_ptr, pid, 2 * (N_STAGES - 1), N_STAGES, TRACE)
    if last_to_land(sync_ptr + N_STAGES, epoch, NPROG) & (ok != 0):  # the last stage's counter, sync[1 + N - 1]
        tl.atomic_xchg(sync_ptr, epoch, sem="release")
