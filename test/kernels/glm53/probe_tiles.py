"""Benchmark: the shared launch's block-FP8 GEMV helpers alone, rows first or swapped, in a persistent grid.

python test/kernels/glm53/probe_tiles.py [--rows 1 8] [--warps 4 8]
At the TP8 shard, one program a SM: MoE down over 48 used experts (`fp8_gemv_experts`, 8 rows), MoE up
over the same experts (`fp8_gemv2_expert_tasks`, 8 rows), and the dense qkv_a (2624 x 6144) and o_proj
(6144 x 2048) GEMVs (`fp8_gemv_part`) in several (columns a task, k parts) shapes at each row count;
each with its block products rows first (dot(xq, w^T): on sm_90 an mma.sync of f16-converted tiles)
and swapped (dot(w, xq^T): a wgmma of the fp8 tiles), at several pipeline depths and warp counts.
Per run: us per call (4 expert lists or weight copies cycled in a CUDA graph, so L2 holds little),
the byte floor at the read bandwidth of the same run, and the max rel error against torch in f64.
A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import triton
import triton.language as tl

from sgl_amd_mono.backends.triton.tile_ops import fp8_gemv2_expert_tasks, fp8_gemv_experts, fp8_gemv_part

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import graph_time_us, read_bandwidth  # noqa: E402

E, D, I, N_USED, N_LISTS = 256, 6144, 256, 48, 4


@triton.jit
def down_kernel(aq, as_, w2, w2s, experts, n_exp, out, R: tl.constexpr, D: tl.constexpr, I: tl.constexpr,
                E: tl.constexpr, DCW: tl.constexpr, DCW_P: tl.constexpr, STAGES: tl.constexpr, NPROG: tl.constexpr,
                SWAP: tl.constexpr):
    pid = tl.program_id(0)
    rows = tl.arange(0, 16)
    for t in tl.range(pid, tl.cdiv(D, DCW), NPROG, num_stages=1):
        acc = fp8_gemv_experts(aq, as_, w2, w2s, experts, n_exp, t * DCW, R, D, I, E, DCW, DCW_P, STAGES, SWAP)
        cols = t * DCW + tl.arange(0, DCW_P)
        tl.store(out + rows[:, None] * D + cols[None, :], acc,
                 mask=(rows < R)[:, None] & (tl.arange(0, DCW_P) < DCW)[None, :] & (cols < D)[None, :])


@triton.jit
def up_kernel(xq, xs, w13, w13s, experts, n_exp, part, R: tl.constexpr, I: tl.constexpr, D: tl.constexpr,
              E: tl.constexpr, BU: tl.constexpr, KS: tl.constexpr, NPROG: tl.constexpr, MT: tl.constexpr,
              STAGES: tl.constexpr, SWAP: tl.constexpr):
    fp8_gemv2_expert_tasks(xq, xs, w13, w13s, experts, part, tl.program_id(0), n_exp * (I // BU) * KS, R, I, D, E, BU,
                           KS, NPROG, MT, STAGES, SWAP)


@triton.jit
def gemv_kernel(xq, xs, w, ws, part, N, R: tl.constexpr, K: tl.constexpr, KS: tl.constexpr, BN: tl.constexpr,
                STAGES: tl.constexpr, NPROG: tl.constexpr, SWAP: tl.constexpr):
    pid = tl.program_id(0)
    rows = tl.arange(0, 16)
    NKB: tl.constexpr = (K // 128) // KS
    for t in tl.range(pid, tl.cdiv(N, BN) * KS, NPROG, num_stages=1):
        nt = t // KS
        ks = t % KS
        acc = fp8_gemv_part(xq, xs, K, K // 128, w, K, ws, K // 128, nt * BN, N, ks * NKB, R, NKB, BN, STAGES, SWAP)
        offs_n = nt * BN + tl.arange(0, BN)
        tl.store(part + (ks * R + rows[:, None]) * N + offs_n[None, :], acc,
                 mask=(rows < R)[:, None] & (offs_n[None, :] < N))


def quant(x):
    """[..., K] f32 -> fp8, per-128-group scales, and the dequantized value in f64."""
    g = x.view(*x.shape[:-1], -1, 128)
    s = g.abs().amax(-1).clamp_min(1e-10) / 448
    q = (g / s[..., None]).to(torch.float8_e4m3fn)
    return q.view(x.shape), s.contiguous(), (q.double() * s[..., None].double()).view(x.shape)


def block_w(n_mat, N, K):
    w = (torch.randn(n_mat, N, K, device="cuda") * 0.1).to(torch.float8_e4m3fn)
    return w, torch.rand(n_mat, -(-N // 128), K // 128, device="cuda") + 0.5


def deq(w, ws):
    N = w.shape[-2]
    return w.double() * ws.double().repeat_interleave(128, -2)[..., :N, :].repeat_interleave(128, -1)


def rel(got, want):
    return ((got.double() - want).abs().max() / want.abs().max()).item()


def timed(name, floor_us, launch, check):
    try:
        us = graph_time_us(lambda: [launch(j) for j in range(N_LISTS)], reps=10, inner=5) / N_LISTS
        err = check()
    except Exception as e:  # noqa: BLE001 (a shape the compiler refuses: said, skipped)
        print(f"{name}: {type(e).__name__}: {str(e)[:200]}", flush=True)
        return
    print(f"{name}: {us:.1f} us (floor {floor_us:.1f}, {floor_us / us:.0%}) max rel {err:.1e}", flush=True)


def orient(swap):
    return "swapped" if swap else "rows-first"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, nargs="+", default=[1, 8])
    p.add_argument("--warps", type=int, nargs="+", default=[4, 8])
    p.add_argument("--stages-dn", type=int, nargs="+", default=[6, 8, 10, 12])
    p.add_argument("--parts", nargs="+", default=["down", "up", "dense"], choices=["down", "up", "dense"])
    a = p.parse_args()
    nsm = torch.cuda.get_device_properties(0).multi_processor_count
    bw = read_bandwidth()
    print(f"read bandwidth {bw / 1e12:.2f} TB/s; grid {nsm}", flush=True)
    torch.manual_seed(0)
    lists = [torch.cat([torch.randperm(E, device="cuda")[: N_USED - 1].sort().values, torch.tensor([E], device="cuda")])
             .to(torch.int32) for _ in range(N_LISTS)]
    if "down" in a.parts:
        probe_down(a, nsm, bw, lists)
    if "up" in a.parts:
        probe_up(a, nsm, bw, lists)
    if "dense" in a.parts:
        probe_dense(a, nsm, bw)


def probe_down(a, nsm, bw, lists):
    r = 8
    w2, w2s = block_w(E + 1, D, I)
    aq, as_, ad = quant(torch.randn(N_USED, r, I, device="cuda"))
    out = torch.empty(r, D, device="cuda")
    dcw = -(-D // (8 * nsm)) * 8
    want = torch.einsum("urk,unk->rn", ad, deq(w2[lists[0].long()], w2s[lists[0].long()]))
    for swap in (False, True):
        for nw in a.warps:
            for st in a.stages_dn:
                def down(j, st=st, swap=swap, nw=nw):
                    down_kernel[(nsm,)](aq, as_, w2, w2s, lists[j], N_USED, out, R=r, D=D, I=I, E=E, DCW=dcw,
                                        DCW_P=triton.next_power_of_2(dcw), STAGES=st, NPROG=nsm, SWAP=swap, num_warps=nw)
                timed(f"down rows {r} experts {N_USED} {orient(swap)} warps {nw} stages {st}",
                      N_USED * D * I / bw * 1e6, down, lambda down=down: (down(0), rel(out, want))[1])


def probe_up(a, nsm, bw, lists):
    r = 8
    w13, w13s = block_w(E + 1, 2 * I, D)
    xq, xs, xd = quant(torch.randn(r, D, device="cuda"))
    bu, ks = 128, 4
    part = torch.empty(N_USED * ks, r, 2 * I, device="cuda")
    mt = triton.next_power_of_2(-(-N_USED * (I // bu) * ks // nsm))
    want = torch.einsum("rk,unk->urn", xd, deq(w13[lists[0].long()], w13s[lists[0].long()]))
    for swap in (False, True):
        for nw in a.warps:
            for st in (3, 4, 5):
                def up(j, st=st, swap=swap, nw=nw):
                    up_kernel[(nsm,)](xq, xs, w13, w13s, lists[j], N_USED, part, R=r, I=I, D=D, E=E, BU=bu, KS=ks,
                                      NPROG=nsm, MT=mt, STAGES=st, SWAP=swap, num_warps=nw)
                timed(f"up rows {r} experts {N_USED} {orient(swap)} warps {nw} stages {st}",
                      N_USED * 2 * I * D / bw * 1e6, up,
                      lambda up=up: (up(0), rel(part.view(N_USED, ks, r, 2 * I).sum(1), want))[1])


def probe_dense(a, nsm, bw):
    for name, n, k, shapes in (("qkv_a", 2624, 6144, ((128, 4), (128, 6))), ("o_proj", 6144, 2048, ((128, 2),))):
        ws_all = [block_w(1, n, k) for _ in range(N_LISTS)]
        for r in a.rows:
            xq, xs, xd = quant(torch.randn(r, k, device="cuda"))
            want = xd @ deq(ws_all[0][0][0], ws_all[0][1][0]).T
            for bn, kparts in shapes:
                part = torch.empty(kparts, r, n, device="cuda")
                for swap in (False, True):
                    for nw in a.warps:
                        def dense(j, bn=bn, kparts=kparts, part=part, xq=xq, xs=xs, r=r, swap=swap, nw=nw):
                            w, ws = ws_all[j]
                            gemv_kernel[(nsm,)](xq, xs, w, ws, part, n, R=r, K=k, KS=kparts, BN=bn, STAGES=4, NPROG=nsm,
                                                SWAP=swap, num_warps=nw)
                        tasks = -(-n // bn) * kparts
                        timed(f"{name} rows {r} bn {bn} ks {kparts} ({tasks} tasks) {orient(swap)} warps {nw} stages 4",
                              n * k / bw * 1e6, dense, lambda dense=dense, part=part: (dense(0), rel(part.sum(0), want))[1])


if __name__ == "__main__":
    main()
