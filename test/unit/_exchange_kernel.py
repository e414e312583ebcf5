"""A toy launch of the cross-rank push protocol (`backends/triton/exchange.py`): R emulated ranks in one program, in
stage order. Run under the interpreter by `_exchange_main.py`, compiled for sm_90 and gfx950 by test_exchange.py."""
import triton
import triton.language as tl

from sgl_amd_mono.backends.triton.exchange import push, wait_sum


@triton.jit
def toy_exchange(x_ptr, out_ptr, peers_ptr, err_ptr, epoch, bound, N: tl.constexpr, R: tl.constexpr,
                 BLOCK: tl.constexpr, SKIP_RANK: tl.constexpr, TIMER: tl.constexpr):
    """x: [R, N] f32, rank r's partial in row r; out: [R, N] f32, rank r's sum. One program: every rank's pushes,
    then every rank's sums (a sequential placement's stage order)."""
    pid = tl.program_id(0)
    ok = pid * 0 + 1
    for r in tl.static_range(R):  # stage 0: each rank pushes its partial into its slot of every rank's region
        if r != SKIP_RANK:
            for b in tl.static_range(0, N, BLOCK):
                offs = b + tl.arange(0, BLOCK)
                m = offs < N
                push(peers_ptr, r * N, tl.load(x_ptr + r * N + offs, mask=m), offs, m, epoch, R)
    for r in tl.static_range(R):  # stage 1: each rank sums its own region's slots in rank order
        for b in tl.static_range(0, N, BLOCK):
            offs = b + tl.arange(0, BLOCK)
            m = offs < N
            acc, ok = wait_sum(peers_ptr, r, 0, N, offs, m, epoch, err_ptr, 7, 1, pid, bound, ok, R, TIMER, BLOCK)
            tl.store(out_ptr + r * N + offs, acc, mask=m)


@triton.jit
def rank_exchange(x_ptr, out_ptr, peers_ptr, err_ptr, rank, epoch, bound, N: tl.constexpr, R: tl.constexpr,
                  BLOCK: tl.constexpr, SKIP_PUSH: tl.constexpr, TIMER: tl.constexpr):
    """One rank's launch (its own process): push x [N] f32 into its slot of every rank's region, then sum its own
    region's slots in rank order into out [N]. SKIP_PUSH: this rank does not push (the fault case)."""
    pid = tl.program_id(0)
    ok = pid * 0 + 1
    if not SKIP_PUSH:
        for b in tl.static_range(0, N, BLOCK):
            offs = b + tl.arange(0, BLOCK)
            m = offs < N
            push(peers_ptr, rank * N, tl.load(x_ptr + offs, mask=m), offs, m, epoch, R)
    for b in tl.static_range(0, N, BLOCK):
        offs = b + tl.arange(0, BLOCK)
        m = offs < N
        acc, ok = wait_sum(peers_ptr, rank, 0, N, offs, m, epoch, err_ptr, 7, 1, pid, bound, ok, R, TIMER, BLOCK)
        tl.store(out_ptr + offs, acc, mask=m)
