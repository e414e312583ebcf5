"""The indexer's q_b stage alone: its two split-K block-FP8 GEMVs (q_b and wq_b, 128-column tiles of 2 k parts, 96
tasks of 128 KB) in a persistent grid, against qkv_a's stage (126 + 6 tasks of the same size) and the shared kind's
q_b (128 tasks of 32 KB), timed inside the kernel (each program's global-timer start and end: the span from the
first start to the last end, median of the launches), each launch on its own copy of the weights (L2 holds none).

python test/kernels/glm53/probe_qb.py [--reps 30]

Variants: the block products rows first (an mma.sync of f16-converted tiles, as the launch) or swapped (an fp8
wgmma: `tile_ops._block_dot` SWAP), swapped with `max_num_imprecise_acc` 32 (each 32-long k slice's wgmma sum
added in f32); the weight rows padded past K (a row stride of K + 256 bytes); every program arriving at a counter
when done and spinning on it until all have (as a hand-off: the idle programs poll while the busy ones stream).
Each line gives the span, the bytes' floor at the read bandwidth measured in this run, and the largest error of
the GEMV's outputs against an f64 product, relative to the largest output. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import read_bandwidth  # noqa: E402

COPIES = 8


@triton.jit
def _part(xq_ptr, xs_ptr, w_ptr, ws_ptr, n0, N, kb0, stride_wn, R: tl.constexpr, K: tl.constexpr,
          NKB: tl.constexpr, BN: tl.constexpr, STAGES: tl.constexpr, MODE: tl.constexpr):
    """One task's k part: [16, BN] rows first (MODE 0), or [BN, 16] swapped (1; 2: max_num_imprecise_acc 32)."""
    rows = tl.arange(0, 16)
    rmask = rows < R
    offs_n = n0 + tl.arange(0, BN)
    nmask = offs_n < N
    if MODE == 0:
        acc = tl.zeros((16, BN), dtype=tl.float32)
    else:
        acc = tl.zeros((BN, 16), dtype=tl.float32)
    for kb in tl.range(kb0, kb0 + NKB, num_stages=STAGES):
        ws = tl.load(ws_ptr + (offs_n // 128) * (K // 128) + kb, mask=nmask, other=0.0)
        xs = tl.load(xs_ptr + rows * (K // 128) + kb, mask=rmask, other=0.0, cache_modifier=".cg")
        offs_k = kb * 128 + tl.arange(0, 128)
        if MODE == 0:
            x = tl.load(xq_ptr + rows[:, None] * K + offs_k[None, :], mask=rmask[:, None], other=0.0,
                        cache_modifier=".cg")
            w = tl.load(w_ptr + offs_n[None, :] * stride_wn + offs_k[:, None], mask=nmask[None, :], other=0.0)
            acc += tl.dot(x, w) * xs[:, None] * ws[None, :]
        else:
            x = tl.load(xq_ptr + rows[None, :] * K + offs_k[:, None], mask=rmask[None, :], other=0.0,
                        cache_modifier=".cg")
            w = tl.load(w_ptr + offs_n[:, None] * stride_wn + offs_k[None, :], mask=nmask[:, None], other=0.0)
            if MODE == 1:
                d = tl.dot(w, x)
            else:
                d = tl.dot(w, x, max_num_imprecise_acc=32)
            acc += d * ws[:, None] * xs[None, :]
    return acc


@triton.jit
def _group(xq_ptr, xs_ptr, w_ptr, ws_ptr, part_ptr, N, stride_wn, pid, T0, R: tl.constexpr, K: tl.constexpr,
           KS: tl.constexpr, BN: tl.constexpr, STAGES: tl.constexpr, NPROG: tl.constexpr, MODE: tl.constexpr):
    """A GEMV's tasks numbered from T0 in the stage (task t on program (T0 + t) % NPROG, as `gemv_stage`)."""
    rows = tl.arange(0, 16)
    cols = tl.arange(0, BN)
    NKB: tl.constexpr = (K // 128) // KS
    n_tasks = tl.cdiv(N, BN) * KS
    for t in tl.range((pid - T0 % NPROG + NPROG) % NPROG, n_tasks, NPROG, num_stages=1):
        nt = t // KS
        ks = t % KS
        acc = _part(xq_ptr, xs_ptr, w_ptr, ws_ptr, nt * BN, N, ks * NKB, stride_wn, R, K, NKB, BN, STAGES, MODE)
        offs_n = nt * BN + cols
        if MODE == 0:
            tl.store(part_ptr + (ks * R + rows[:, None]) * N + offs_n[None, :], acc,
                     mask=(rows < R)[:, None] & (offs_n < N)[None, :])
        else:
            tl.store(part_ptr + (ks * R + rows[None, :]) * N + offs_n[:, None], acc,
                     mask=(rows < R)[None, :] & (offs_n < N)[:, None])


@triton.jit
def _stage(xq_ptr, xs_ptr, w1_ptr, ws1_ptr, p1_ptr, w2_ptr, ws2_ptr, p2_ptr, cnt_ptr, stamp_ptr, N1, N2, stride1,
           stride2, R: tl.constexpr, K: tl.constexpr, KS1: tl.constexpr, BN1: tl.constexpr, KS2: tl.constexpr,
           BN2: tl.constexpr, TWO: tl.constexpr, STAGES: tl.constexpr, NPROG: tl.constexpr, MODE: tl.constexpr,
           POLL: tl.constexpr):
    pid = tl.program_id(0)
    t0 = tl.max(tl.zeros((256,), dtype=tl.int64) + tl.extra.cuda.globaltimer(), axis=0)
    _group(xq_ptr, xs_ptr, w1_ptr, ws1_ptr, p1_ptr, N1, stride1, pid, 0, R, K, KS1, BN1, STAGES, NPROG, MODE)
    if TWO:
        _group(xq_ptr, xs_ptr, w2_ptr, ws2_ptr, p2_ptr, N2, stride2, pid, tl.cdiv(N1, BN1) * KS1, R, K, KS2, BN2,
               STAGES, NPROG, MODE)
    if POLL:  # a hand-off: arrive, then poll until every program has
        tl.debug_barrier()
        tl.atomic_add(cnt_ptr, 1, sem="release")
        seen = tl.atomic_add(cnt_ptr, 0, sem="acquire")
        while seen < NPROG:
            seen = tl.atomic_add(cnt_ptr, 0, sem="acquire")
    t1 = tl.max(tl.zeros((256,), dtype=tl.int64) + tl.extra.cuda.globaltimer(), axis=0)
    tl.store(stamp_ptr + pid * 2, t0)
    tl.store(stamp_ptr + pid * 2 + 1, t1)


def _weights(n, k, pad):
    w = (torch.randn(n, k + pad, device="cuda") * 0.1).to(torch.float8_e4m3fn)
    return w, torch.rand((n + 127) // 128, k // 128, device="cuda") + 0.5


def _ref(xq, xs, w, ws, k):
    x = (xq.double().view(1, k // 128, 128) * xs.double()[..., None]).view(1, k)
    wd = w[:, :k].double() * ws.double().repeat_interleave(128, 0)[: w.shape[0]].repeat_interleave(128, 1)
    return x @ wd.t()


def run(name, groups, k, modes, pads, polls, reps, bw, nsm):
    kb = k // 128
    x = torch.randn(1, k, device="cuda")
    xs = x.view(1, kb, 128).abs().amax(-1) / 448
    xq = (x.view(1, kb, 128) / xs[..., None]).to(torch.float8_e4m3fn).view(1, k)
    nbytes = sum(n * k for n, _, _ in groups)
    floor = nbytes / bw * 1e6
    for pad in pads:
        ws_ = [[_weights(n, k, pad) for n, _, _ in groups] for _ in range(COPIES)]
        refs = [_ref(xq, xs, w, s, k) for w, s in ws_[0]]
        parts = [torch.empty(ks, 1, n, device="cuda") for n, _, ks in groups]
        for mode in modes:
            for poll in polls:
                cnt = torch.zeros(1, dtype=torch.int32, device="cuda")
                stamps = torch.zeros(nsm, 2, dtype=torch.int64, device="cuda")
                g2 = groups[1] if len(groups) > 1 else groups[0]

                def launch(c):
                    (w1, s1), (w2, s2) = ws_[c][0], ws_[c][-1]
                    _stage[(nsm,)](xq, xs, w1, s1, parts[0], w2, s2, parts[-1], cnt, stamps, groups[0][0], g2[0],
                                   w1.stride(0), w2.stride(0), R=1, K=k, KS1=groups[0][2], BN1=groups[0][1],
                                   KS2=g2[2], BN2=g2[1], TWO=len(groups) > 1, STAGES=4, NPROG=nsm, MODE=mode,
                                   POLL=poll, num_warps=8)

                spans = []
                for i in range(reps + 2):
                    cnt.zero_()
                    launch(i % COPIES)
                    torch.cuda.synchronize()
                    st = stamps.cpu()
                    if i >= 2:
                        spans.append((st[:, 1].max() - st[:, 0].min()).item() / 1e3)
                launch(0)
                torch.cuda.synchronize()
                err = max(((p.double().sum(0) - r).abs().max() / r.abs().max()).item() for p, r in zip(parts, refs))
                spans.sort()
                tasks = sum(-(-n // bn) * ks for n, bn, ks in groups)
                print(f"{name} ({tasks} tasks, {nbytes / 2**20:.0f} MiB) mode={['rows-first', 'swapped', 'swapped-acc32'][mode]}"
                      f" pad={pad} poll={poll}: {spans[len(spans) // 2]:.2f} us (p10 {spans[len(spans) // 10]:.2f}; "
                      f"floor {floor:.2f}) max rel {err:.1e}", flush=True)
        del ws_
        torch.cuda.empty_cache()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=30)
    a = p.parse_args()
    nsm = torch.cuda.get_device_properties(0).multi_processor_count
    bw = read_bandwidth()
    print(f"read bandwidth {bw / 1e12:.2f} TB/s; grid {nsm}; {torch.cuda.get_device_name()}", flush=True)
    # (N, BN, KS) a GEMV of the stage
    run("indexer q_b stage: q_b + wq_b", [(2048, 128, 2), (4096, 128, 2)], 2048, (0, 1, 2), (0, 256), (False, True),
        a.reps, bw, nsm)
    run("qkv_a stage: qkv_a + wk", [(2624, 128, 6), (128, 128, 6)], 6144, (0, 1), (0,), (False, True), a.reps, bw,
        nsm)
    run("shared q_b", [(2048, 64, 4)], 2048, (0, 1), (0,), (False, True), a.reps, bw, nsm)
    run("indexer q_b stage in 32 KB tasks", [(2048, 64, 4), (4096, 64, 4)], 2048, (0, 1), (0,), (True,), a.reps, bw,
        nsm)


if __name__ == "__main__":
    main()
