"""Benchmark: the shared launch's MoE down stage alone, in a persistent grid, in several loop shapes.

python test/kernels/glm53/probe_moe_down.py [--experts 9 48]
The TP8 down projection (w2: [257, 6144, 256] block-FP8) over n used experts (9 at 1 row, ~48 at 8 rows),
8 rows of activations. Each call uses another random expert list (4 lists cycled in a CUDA graph, so L2
holds little). For each loop shape and pipeline depth: µs per call, its byte floor at the read bandwidth
measured in the same run, and the max rel error against torch. Loop shapes (`mode`):
  0 the launch's helper (`fp8_gemv_experts`): one task per column slice, a pipelined loop over experts
    with the k blocks unrolled inside (it was this probe's mode 2, since removed as the same loop;
    results/probe_moe_down_h200.log has the run where mode 0 was still the (expert, k block) loop);
  1 one task per column slice, one pipelined loop over (expert, k block), expert u's weights at u (no
    id load: what the indirection costs; same bytes);
  3 one loop over (expert, k block) with the id list held in registers (picked by a masked sum);
  4 the former shape: one task per (expert, 256-column tile), its k blocks pipelined, partials summed
    afterwards (by torch here; the launch had a combine stage).
A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import triton
import triton.language as tl

from sgl_amd_mono.backends.triton.tile_ops import fp8_gemv_experts, fp8_gemv_part

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import graph_time_us, read_bandwidth  # noqa: E402

E, D, I, R = 256, 6144, 256, 8
N_LISTS = 4


@triton.jit
def _experts_loop(xq_ptr, xs_ptr, w_ptr, ws_ptr, experts_ptr, n_exp, n0, R: tl.constexpr, N: tl.constexpr,
                  K: tl.constexpr, E: tl.constexpr, BN: tl.constexpr, BP: tl.constexpr, STAGES: tl.constexpr,
                  MODE: tl.constexpr, MAXU_P: tl.constexpr):
    """Modes 1 and 3: one pipelined loop over (expert, k block)."""
    NKB: tl.constexpr = K // 128
    rows = tl.arange(0, 16)
    rmask = rows < R
    offs_n = n0 + tl.arange(0, BP)
    nmask = (tl.arange(0, BP) < BN) & (offs_n < N)
    acc = tl.zeros((16, BP), dtype=tl.float32)
    ids = tl.load(experts_ptr + tl.arange(0, MAXU_P), mask=tl.arange(0, MAXU_P) < n_exp, other=0)
    for i in tl.range(0, n_exp * NKB, num_stages=STAGES):
        u = i // NKB
        kb = i % NKB
        if MODE == 1:
            e = u.to(tl.int64)
        else:
            e = tl.sum(tl.where(tl.arange(0, MAXU_P) == u, ids, 0), axis=0).to(tl.int64)
        offs_k = kb * 128 + tl.arange(0, 128)
        w = tl.load(w_ptr + e * (N * K) + offs_n[None, :] * K + offs_k[:, None], mask=nmask[None, :], other=0.0)
        ws = tl.load(ws_ptr + e * ((N // 128) * NKB) + (offs_n // 128) * NKB + kb, mask=nmask, other=0.0)
        xq = tl.load(xq_ptr + (u * R + rows[:, None]) * K + offs_k[None, :], mask=rmask[:, None], other=0.0,
                     cache_modifier=".cg")
        xs = tl.load(xs_ptr + (u * R + rows) * NKB + kb, mask=rmask, other=0.0, cache_modifier=".cg")
        acc += tl.dot(xq, w) * xs[:, None] * ws[None, :]
    return acc


@triton.jit
def down_kernel(aq, as_, w2, w2s, experts, n_exp, out, R: tl.constexpr, D: tl.constexpr, I: tl.constexpr,
                E: tl.constexpr, DCW: tl.constexpr, DCW_P: tl.constexpr, STAGES: tl.constexpr, NPROG: tl.constexpr,
                MODE: tl.constexpr, MAXU_P: tl.constexpr):
    pid = tl.program_id(0)
    rows = tl.arange(0, 16)
    for t in tl.range(pid, tl.cdiv(D, DCW), NPROG, num_stages=1):
        if MODE == 0:
            acc = fp8_gemv_experts(aq, as_, w2, w2s, experts, n_exp, t * DCW, R, D, I, E, DCW, DCW_P, STAGES, False)
        else:
            acc = _experts_loop(aq, as_, w2, w2s, experts, n_exp, t * DCW, R, D, I, E, DCW, DCW_P, STAGES, MODE, MAXU_P)
        cols = t * DCW + tl.arange(0, DCW_P)
        tl.store(out + rows[:, None] * D + cols[None, :], acc,
                 mask=(rows < R)[:, None] & (tl.arange(0, DCW_P) < DCW)[None, :] & (cols < D)[None, :])


@triton.jit
def down_tiles_kernel(aq, as_, w2, w2s, experts, n_exp, part, R: tl.constexpr, D: tl.constexpr, I: tl.constexpr,
                      E: tl.constexpr, BD: tl.constexpr, STAGES: tl.constexpr, NPROG: tl.constexpr):
    pid = tl.program_id(0)
    rows = tl.arange(0, 16)
    NG: tl.constexpr = I // 128
    for t in tl.range(pid, n_exp * (D // BD), NPROG, num_stages=1):
        u = t // (D // BD)
        nt = t % (D // BD)
        e = tl.minimum(tl.maximum(tl.load(experts + u), 0), E).to(tl.int64)
        y = fp8_gemv_part(aq + u * R * I, as_ + u * R * NG, I, NG, w2 + e * (D * I), I, w2s + e * ((D // 128) * NG), NG,
                          nt * BD, D, 0, R, NG, BD, STAGES, False)
        cols = nt * BD + tl.arange(0, BD)
        tl.store(part + (u * 16 + rows[:, None]) * D + cols[None, :], y, mask=(rows < R)[:, None])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--experts", type=int, nargs="+", default=[9, 48])
    a = p.parse_args()
    nsm = torch.cuda.get_device_properties(0).multi_processor_count
    bw = read_bandwidth()
    print(f"read bandwidth {bw / 1e12:.2f} TB/s; grid {nsm}", flush=True)
    torch.manual_seed(0)
    w2 = (torch.randn(E + 1, D, I, device="cuda") * 0.1).to(torch.float8_e4m3fn)
    w2s = torch.rand(E + 1, D // 128, I // 128, device="cuda") + 0.5
    dcw = -(-D // (8 * nsm)) * 8
    for n in a.experts:
        maxu_p = triton.next_power_of_2(n)
        lists = [torch.cat([torch.randperm(E, device="cuda")[: n - 1].sort().values, torch.tensor([E], device="cuda")])
                 .to(torch.int32) for _ in range(N_LISTS)]
        x = torch.randn(n, R, I, device="cuda")
        xs = x.view(n, R, I // 128, 128).abs().amax(-1) / 448
        xq = (x.view(n, R, I // 128, 128) / xs[..., None]).to(torch.float8_e4m3fn).view(n, R, I)
        xd = (xq.float().view(n, R, I // 128, 128) * xs[..., None]).view(n, R, I)

        def ref(ids):
            wd = w2[ids.long()].float() * w2s[ids.long()].repeat_interleave(128, 1).repeat_interleave(128, 2)
            return torch.einsum("urk,unk->rn", xd, wd)

        floor = n * D * I / bw * 1e6
        out = torch.empty(R, D, device="cuda")
        part = torch.empty(n, 16, D, device="cuda")
        runs = [(m, st) for m in (0, 1, 3) for st in (4, 8, 12)] + [(4, 3), (4, 4)]
        for mode, st in runs:
            try:
                if mode == 4:
                    fns = [lambda ids=ids: down_tiles_kernel[(nsm,)](xq, xs, w2, w2s, ids, n, part, R=R, D=D, I=I, E=E,
                                                                     BD=256, STAGES=st, NPROG=nsm, num_warps=8)
                           for ids in lists]
                else:
                    fns = [lambda ids=ids: down_kernel[(nsm,)](xq, xs, w2, w2s, ids, n, out, R=R, D=D, I=I, E=E, DCW=dcw,
                                                               DCW_P=triton.next_power_of_2(dcw), STAGES=st, NPROG=nsm,
                                                               MODE=mode, MAXU_P=maxu_p, num_warps=8)
                           for ids in lists]
                us = graph_time_us(lambda: [f() for f in fns], reps=10, inner=5) / N_LISTS
                fns[0]()
                got = part[:, :R].sum(0) if mode == 4 else out
                want = ref(torch.arange(n, device="cuda", dtype=torch.int32) if mode == 1 else lists[0])
                err = ((got - want).abs().max() / want.abs().max()).item()
            except Exception as e:  # noqa: BLE001 (a shape the compiler refuses: said, skipped)
                print(f"experts {n} mode {mode} stages {st}: {type(e).__name__}: {str(e)[:200]}", flush=True)
                continue
            print(f"experts {n} mode {mode} stages {st}: {us:.1f} us (floor {floor:.1f}, {floor / us:.0%}) "
                  f"max rel {err:.1e}", flush=True)


if __name__ == "__main__":
    main()
