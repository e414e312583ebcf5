"""Benchmark: the launch's split-K block-FP8 GEMV stage helper alone, in a persistent grid, per stage shape.

python test/kernels/glm53/probe_gemv.py [--rows 1 8]
For each GEMV of the TP8 shared launch (qkv_a, q_b, o_proj; the MoE up/down as one dense weight of the
same bytes) and each tile choice: µs per launch (CUDA graph of 4 copies of the weight, so L2 holds none),
its byte floor at the read bandwidth measured in this run, and the fraction reached. Answers whether a
stage's time in the full launch is the tile code or the launch around it. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys

import torch
import triton
import triton.language as tl

from sgl_amd_mono.backends.triton.stages_attention import gemv_stage

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import graph_time_us, read_bandwidth  # noqa: E402

N_COPIES = 4


@triton.jit
def gemv_stage_kernel(xq, xs, w, ws, part, N, R: tl.constexpr, K: tl.constexpr, KS: tl.constexpr,
                      BN: tl.constexpr, STAGES: tl.constexpr, NPROG: tl.constexpr):
    pid = tl.program_id(0)
    gemv_stage(xq, xs, w, ws, part, tl.cdiv(N, BN) * KS, pid, N, 0.0, 0.0, part, R, K, KS, BN, STAGES, NPROG, False, False,
               0, False)


SHAPES = {"qkv_a": (2624, 6144), "up(9 experts)": (9 * 512, 6144), "o_proj": (6144, 2048), "q_b": (2048, 2048),
          "down(9 experts)": (9 * 6144, 256)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, nargs="+", default=[1])
    p.add_argument("--warps", type=int, nargs="+", default=[4, 8])
    args = p.parse_args()
    nsm = torch.cuda.get_device_properties(0).multi_processor_count
    bw = read_bandwidth()
    print(f"read bandwidth {bw / 1e12:.2f} TB/s; grid {nsm}", flush=True)
    for name, (n, k) in SHAPES.items():
        kb = k // 128
        ws_ = [((torch.randn(n, k, device="cuda") * 0.1).to(torch.float8_e4m3fn),
                torch.rand((n + 127) // 128, kb, device="cuda") + 0.5) for _ in range(N_COPIES)]
        floor = n * k / bw * 1e6
        for r in args.rows:
            x = torch.randn(r, k, device="cuda")
            xs = x.view(r, kb, 128).abs().amax(-1) / 448
            xq = (x.view(r, kb, 128) / xs[..., None]).to(torch.float8_e4m3fn).view(r, k)
            ref = (xq.float().view(r, kb, 128) * xs[..., None]).view(r, k) @ (
                ws_[0][0].float() * ws_[0][1].repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)).t()
            res = []
            for bn, ks, st, nw in itertools.product((32, 64, 128), (1, 2, 4, 8), (3, 4), args.warps):
                if kb % ks:
                    continue
                part = torch.empty(ks, r, n, device="cuda")
                try:
                    fns = [lambda w=w, s=s: gemv_stage_kernel[(nsm,)](xq, xs, w, s, part, n, R=r, K=k, KS=ks, BN=bn,
                                                                       STAGES=st, NPROG=nsm, num_warps=nw)
                           for w, s in ws_]
                    us = graph_time_us(lambda: [f() for f in fns], reps=10, inner=5) / N_COPIES
                    fns[0]()
                    err = ((part.sum(0) - ref).norm() / ref.norm()).item()
                except Exception as e:  # a tile the compiler refuses (SMEM): skipped, said
                    print(f"  {name} R={r} bn={bn} ks={ks} st={st} w={nw}: {type(e).__name__}", flush=True)
                    continue
                tasks = -(-n // bn) * ks
                res.append((us, bn, ks, st, nw, tasks, err))
            res.sort()
            for us, bn, ks, st, nw, tasks, err in res[:4] + res[-1:]:
                print(f"{name} N={n} K={k} R={r}: {us:.1f} us (floor {floor:.1f}, {floor / us:.0%}) bn={bn} ks={ks} "
                      f"stages={st} warps={nw} tasks={tasks} rel={err:.1e}", flush=True)
        del ws_
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
