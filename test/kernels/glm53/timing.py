"""Timing helpers the GPU scripts share: a CUDA-graph timer and the read bandwidth of a streaming kernel.
Imports nothing of the package, so any tree's scripts (and `ab_split.py` under an older tree) can use it."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _stream_read(x_ptr, out_ptr, n, BLOCK: tl.constexpr, NPROG: tl.constexpr):
    """grid=(NPROG,): each program reads blocks pid, pid+NPROG, ... and writes one tiny partial."""
    pid = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.int32)
    for b in range(pid, tl.cdiv(n, BLOCK), NPROG):
        offs = b.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        acc ^= tl.load(x_ptr + offs, mask=offs < n, other=0)
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))


def graph_time_us(fn, reps=20, inner=10):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(inner):
            fn()
    g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) * 1e3 / inner)
    ts.sort()
    return ts[len(ts) // 2]


def read_bandwidth() -> float:
    """Bytes/s of a read-only streaming kernel over 4 GiB."""
    n = 2**30  # int32 words = 4 GiB
    x = torch.randint(0, 2**30, (n,), dtype=torch.int32, device="cuda")
    nsm = torch.cuda.get_device_properties(0).multi_processor_count
    best = 0.0
    for nprog in (nsm * 4, nsm * 8):
        out = torch.empty(nprog, dtype=torch.int32, device="cuda")
        us = graph_time_us(lambda: _stream_read[(nprog,)](x, out, n, BLOCK=4096, NPROG=nprog, num_warps=8), reps=10, inner=3)
        best = max(best, 4 * n / (us * 1e-6))
    del x
    return best
