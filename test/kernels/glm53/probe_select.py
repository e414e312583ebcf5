"""Time the indexer's one-task row select (`stages_select_row.select_row`) alone on a GPU, and its parts, against the
exactness rule (`glm53.indexer.radix_select`) on random scores.

python test/kernels/glm53/probe_select.py [--rows 1 8] [--ishort 8192 4096] [--keys 8192 4000]
Modes: full (select_row), count (the 32 counts of the threshold search only), place (the prefix sums and the
stores only, from a given threshold), load (the scores' and page ids' loads only), count2bit (the threshold 2 bits
a round: 16 rounds of 3 counts). µs a launch of R programs
(one a row) under a CUDA graph, launch gaps included (compare modes with each other, not with stage spans).
"""

from __future__ import annotations

import argparse

import torch
import triton
import triton.language as tl

from sgl_amd_mono.backends.triton import stages_select_row as index
from sgl_amd_mono.glm53.indexer import radix_select
from timing import graph_time_us

MODES = {"full": 0, "count": 1, "place": 2, "load": 3, "count2bit": 4}


@triton.jit
def _probe(scores_ptr, page_table_ptr, topk_ptr, lengths_ptr, thr_ptr, KTOP: tl.constexpr, PMAX: tl.constexpr,
           ISHORT: tl.constexpr, MODE: tl.constexpr):
    """grid = (rows,): program r selects row r's list (MODE 0) or runs one part of it."""
    r = tl.program_id(0)
    rlen = tl.load(lengths_ptr + r)
    if MODE == 0:
        index.select_row(scores_ptr, page_table_ptr, topk_ptr, r, rlen, KTOP, PMAX, ISHORT)
    else:
        tt = tl.arange(0, ISHORT)
        valid = tt < rlen
        x = tl.load(scores_ptr + r * (PMAX * 64) + tt, mask=valid, other=0.0, cache_modifier=".cg")
        page = tl.load(page_table_ptr + r * PMAX + tt // 64, mask=valid, other=0)
        sk = index.signed_key(x)
        if MODE == 1:
            thr = (rlen * 0).to(tl.int64)
            one = thr + 1
            for b in tl.static_range(32):
                cand = thr | (one << (31 - b))
                n = tl.sum((valid & (sk >= (cand - (one << 31)).to(tl.int32))).to(tl.int32), axis=0)
                thr = tl.where(n >= KTOP, cand, thr)
            tl.store(thr_ptr + r, thr)
        if MODE == 2:
            thr_s = (tl.load(thr_ptr + r) - 2147483648).to(tl.int32)
            is_above = valid & (sk > thr_s)
            is_at = valid & (sk == thr_s)
            above = tl.sum(is_above.to(tl.int32), axis=0)
            rank_at = tl.cumsum(is_at.to(tl.int32), axis=0) - 1
            dest = tl.where(is_above, tl.cumsum(is_above.to(tl.int32), axis=0) - 1, above + rank_at)
            tl.store(topk_ptr + r * KTOP + dest, page * 64 + tt % 64, mask=is_above | (is_at & (rank_at < KTOP - above)))
        if MODE == 4:  # the threshold 2 bits a round: 16 rounds of 3 counts
            thr = (rlen * 0).to(tl.int64)
            one = thr + 1
            for b in tl.static_range(16):
                c1 = thr | (one << (30 - 2 * b))
                c2 = thr | (one << (31 - 2 * b))
                c3 = c2 | c1
                n1 = tl.sum((valid & (sk >= (c1 - (one << 31)).to(tl.int32))).to(tl.int32), axis=0)
                n2 = tl.sum((valid & (sk >= (c2 - (one << 31)).to(tl.int32))).to(tl.int32), axis=0)
                n3 = tl.sum((valid & (sk >= (c3 - (one << 31)).to(tl.int32))).to(tl.int32), axis=0)
                thr = tl.where(n3 >= KTOP, c3, tl.where(n2 >= KTOP, c2, tl.where(n1 >= KTOP, c1, thr)))
            tl.store(thr_ptr + r, thr)
        if MODE == 3:
            tl.store(topk_ptr + r * KTOP + tt % KTOP, page + sk, mask=tt < KTOP)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, nargs="+", default=[1, 8])
    p.add_argument("--ishort", type=int, nargs="+", default=[8192, 4096])
    p.add_argument("--keys", type=int, default=0, help="keys a row (0: ishort - 64 x row)")
    p.add_argument("--warps", type=int, nargs="+", default=[8])
    p.add_argument("--device", default="cuda", help="cpu: under TRITON_INTERPRET=1, the check only")
    a = p.parse_args()
    dev = a.device
    ktop, pmax = 2048, 4096
    g = torch.Generator(device=dev).manual_seed(5)
    for ishort in a.ishort:
        for rows in a.rows:
            lengths = torch.tensor([a.keys or max(ktop + 1, ishort - 64 * r) for r in range(rows)], dtype=torch.int32,
                                   device=dev)
            scores = torch.randn(rows, pmax * 64, generator=g, device=dev)
            page_table = torch.randperm(pmax * rows, generator=g, device=dev).view(rows, pmax).to(torch.int32)
            topk = torch.full((rows, ktop), -7, dtype=torch.int32, device=dev)
            thr = torch.zeros(rows, dtype=torch.int64, device=dev)
            pos = radix_select(scores, lengths=lengths, topk=ktop).long()
            want = page_table.long().gather(1, pos.clamp(min=0) // 64) * 64 + pos.clamp(min=0) % 64
            for warps in a.warps:
                line = []
                for mode, m in MODES.items():
                    def fn(m=m):
                        _probe[(rows,)](scores, page_table, topk, lengths, thr, KTOP=ktop, PMAX=pmax, ISHORT=ishort,
                                        MODE=m, num_warps=warps)
                    topk.fill_(-7)
                    fn()
                    if dev == "cuda":
                        torch.cuda.synchronize()
                    if m == 0:
                        ok = torch.equal(topk.long(), want)
                        if not ok:
                            print(f"ishort {ishort} rows {rows}: full select DIFFERS from the rule "
                                  f"({int((topk.long() != want).sum())} entries)", flush=True)
                    line.append(f"{mode} {graph_time_us(fn):.1f}" if dev == "cuda" else mode)
                print(f"ishort {ishort} rows {rows} warps {warps} keys {lengths.tolist()[:2]}: us " + ", ".join(line),
                      flush=True)


if __name__ == "__main__":
    main()
