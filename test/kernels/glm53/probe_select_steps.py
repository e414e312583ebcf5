"""Time the sliced radix select's stages alone on a GPU (`stages_select.select_digit` as sel1 / sel2 / sel3, then
`stages_emit.emit`), each launched on its own over random scores at a scan step width (`Tiles.index_scan`), and a
bare scan loop with and without sel1's atomics (and its loads two steps ahead), so that a stage's time splits into
its scan, its atomics and the rest.

python test/kernels/glm53/probe_select_steps.py [--shapes 8x131072 4x131072 1x8192] [--scans 512 1024 2048]
A shape RxL: R rows of L keys each, split into max(1, 128 // R) slices a row (the launch's index_slices // rows), one
task a (row, slice) on 132 programs. The chain sel1 -> sel2 -> sel3 -> emit runs once and its list is checked
against the exactness rule (`glm53.indexer.radix_select`); then each stage is timed alone (µs a launch under a CUDA
graph, launch gaps included: compare the variants with each other, not with the launch's stage spans). A repeated
select stage counts into its histogram again (its counts grow, its work does not change); emit is idempotent.
--rows-k K ...: emit in [256, K] tiles too (`stages_emit.emit_chunks`, tiles.index_emit_k), checked against the
rule and timed beside emit's steps.
--lists N ...: the chain with sel<N> listing each slice's keys at or above its prefix in [256, K] chunks for each
--rows-k K (`stages_select.list_chunks`; tiles.index_compact K lists in sel1, at the 8-bit prefix) and the later
stages scanning the lists, checked, and its stages timed.
--scale S draws mean 1 + randn x S instead (a narrow band: hot digit-0 and digit-1 bins).
--device cpu runs the chain's check only, under TRITON_INTERPRET=1; --plant corrupts digit 0's histogram (and a
listed position), which the checks must report (test/unit/test_select_lists_interp.py runs both).
"""

from __future__ import annotations

import argparse

import torch
import triton
import triton.language as tl

from sgl_amd_mono.backends.triton import stages_emit
from sgl_amd_mono.backends.triton import stages_select as S
from sgl_amd_mono.backends.triton.stages_index import load_scores, order_key, slice_of
from sgl_amd_mono.glm53.indexer import order_keys, radix_select, to_slots
from sgl_amd_mono.glm53.kinds.dims import cdiv

KTOP, NPROG, COPIES, PAGE = 2048, 132, 16, 64


@triton.jit
def _sel(scores_ptr, lengths_ptr, hist_prev_ptr, hist_out_ptr, kept_prev_ptr, kept_ptr, cnt_ptr, topk_ptr,
         task_count_ptr, epoch, R: tl.constexpr, KTOP: tl.constexpr, PMAX: tl.constexpr, NSL: tl.constexpr,
         IBLK: tl.constexpr, ISCAN: tl.constexpr, NPROG: tl.constexpr, HI: tl.constexpr, WP: tl.constexpr,
         HCP: tl.constexpr, HCO: tl.constexpr, SATOM: tl.constexpr, cand_pos_ptr=None, cand_key_ptr=None, ncand_ptr=None,
         LIST: tl.constexpr = 0, LK: tl.constexpr = 0):
    """One select stage as the launch calls it: digit HI .. HI + 8 (sel1: HI 8, sel2: 16, sel3: 24); LIST 1: the
    slice's keys at or above the prefix found listed in [256, LK] chunks, 2: that list scanned
    (`stages_select.select_digit`)."""
    pid = tl.program_id(0)
    rows = tl.arange(0, 16)
    lens = tl.load(lengths_ptr + rows, mask=rows < R, other=0)
    S.select_digit(scores_ptr, lens, hist_prev_ptr, hist_out_ptr, kept_prev_ptr, kept_ptr, cnt_ptr, topk_ptr, epoch,
                   pid, pid * 0 + 1, task_count_ptr, 7, HI, 8, WP, R, KTOP, PMAX, NSL, IBLK, ISCAN, KTOP, NPROG, 0,
                   False, HCP, HCO, SATOM, cand_pos_ptr, cand_key_ptr, ncand_ptr, LIST, LK)


@triton.jit
def _emit(scores_ptr, lengths_ptr, page_table_ptr, hist3_ptr, kept3_ptr, cnt_ptr, topk_ptr, err_ptr, task_count_ptr,
          epoch, R: tl.constexpr, KTOP: tl.constexpr, PMAX: tl.constexpr, NSL: tl.constexpr, IBLK: tl.constexpr,
          ISCAN: tl.constexpr, NPROG: tl.constexpr, EK: tl.constexpr = 0, cand_pos_ptr=None, cand_key_ptr=None,
          ncand_ptr=None, LIST: tl.constexpr = False):
    pid = tl.program_id(0)
    rows = tl.arange(0, 16)
    lens = tl.load(lengths_ptr + rows, mask=rows < R, other=0)
    stages_emit.emit(scores_ptr, lens, page_table_ptr, hist3_ptr, kept3_ptr, cnt_ptr, topk_ptr, err_ptr, 0, epoch, pid,
           pid * 0 + 1, task_count_ptr, 9, R, KTOP, PMAX, NSL, IBLK, ISCAN, KTOP, NPROG, 0, False, cand_pos_ptr,
           cand_key_ptr, ncand_ptr, LIST, EK=EK)


@triton.jit
def _scan(scores_ptr, lengths_ptr, kept_ptr, hist_ptr, out_ptr, R: tl.constexpr, PMAX: tl.constexpr,
          NSL: tl.constexpr, IBLK: tl.constexpr, ISCAN: tl.constexpr, NPROG: tl.constexpr, ATOM: tl.constexpr,
          AHEAD: tl.constexpr, SPREAD: tl.constexpr = 1):
    """sel1's scan alone (the keys at the row's digit 0, kept[r] from the chain; digit 1 of each): ATOM, one
    atomic a key at the prefix into the task's copy (of 16 a row) of a 256-bin histogram, as sel1; else none, the
    hits counted in registers (the same loads and compares, no atomic). out[t]: the task's keys at the prefix.
    SPREAD: the task's copy split into that many, a key's by its place in the step (so one warp's keys in a hot bin
    go to SPREAD addresses). AHEAD: steps its loads run ahead of their use (1, as the launch's scans, or 2)."""
    pid = tl.program_id(0)
    rows = tl.arange(0, 16)
    lens = tl.load(lengths_ptr + rows, mask=rows < R, other=0)
    blk = tl.arange(0, ISCAN)
    for t in tl.range(pid, R * NSL, NPROG, num_stages=1):
        r = t // NSL
        rlen = tl.sum(tl.where(rows == r, lens, 0), axis=0)
        s0, s1 = slice_of(rlen, t % NSL, NSL, IBLK)
        src = scores_ptr + r * (PMAX * 64)
        prefix = tl.load(kept_ptr + r * 2 + 1)  # kept1: the row's (need, digit 0) as sel1 keeps them
        x = load_scores(src, s0 + blk, s1)
        x1 = load_scores(src, s0 + ISCAN + blk, s1)
        acc = tl.zeros((ISCAN,), dtype=tl.int32)
        for t0 in tl.range(s0, s1, ISCAN, num_stages=1):
            tt = t0 + blk
            if AHEAD == 2:
                x_next = x1
                x1 = load_scores(src, tt + 2 * ISCAN, s1)
            else:
                x_next = load_scores(src, tt + ISCAN, s1)
            u = order_key(x)
            hit = (tt < s1) & ((u >> 24).to(tl.int64) == prefix)
            digit = ((u >> 16) & 255).to(tl.int32)
            if ATOM:
                tl.atomic_add(hist_ptr + ((r * 16 + t % 16) * SPREAD + blk % SPREAD) * 256 + digit, 1, mask=hit,
                              sem="relaxed")
            acc += tl.where(hit, 1 + digit * 0, 0)  # the hits (their digits summed would do as well)
            x = x_next
        tl.store(out_ptr + t, tl.sum(acc, axis=0))


def bad_lists(scores, keys, nsl, iblk, prefix, bits, cand_pos, cand_key, ncand):
    """Slices whose list (`select_digit` LIST 1) is not their keys whose top `bits` bits are at or above the row's
    prefix, positions in order and order keys beside them (every row `keys` long, `slice_of`'s slices)."""
    u = order_keys(scores)
    width = cdiv(cdiv(keys, nsl), iblk) * iblk  # stages_index.slice_of's
    bad = 0
    for r in range(scores.shape[0]):
        for s in range(nsl):
            s0, s1 = min(s * width, keys), min(s * width + width, keys)
            pos = s0 + torch.nonzero((u[r, s0:s1] >> (32 - bits)) >= int(prefix[r])).flatten()
            n = int(ncand[r, s])
            got_pos, got_key = cand_pos[r, s0: s0 + n].long(), cand_key[r, s0: s0 + n].long() & 0xFFFFFFFF
            bad += not (n == len(pos) and torch.equal(got_pos, pos) and torch.equal(got_key, u[r, pos]))
    return bad


@triton.jit
def _noop(out_ptr):
    """The launch gap alone: 132 programs that store one word each."""
    tl.store(out_ptr + tl.program_id(0), 1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", nargs="+", default=["8x131072", "4x131072", "1x8192"])
    p.add_argument("--scans", type=int, nargs="+", default=[512, 1024, 2048])
    p.add_argument("--iblk", type=int, default=256)
    p.add_argument("--rows-k", type=int, nargs="*", default=[8, 16],
                   help="emit's keys a tile row in [256, K] chunks (`stages_emit.emit_chunks`) beside its steps")
    p.add_argument("--lists", type=int, nargs="*", default=[],
                   help="also the chain with each slice's keys at or above the prefix listed by sel<N> (1: at digit "
                        "0's 8-bit prefix, as tiles.index_compact; 2: at the 16-bit one) in [256, K] chunks for each "
                        "--rows-k K, the later stages scanning the lists; checked, and its stages timed")
    p.add_argument("--device", default="cuda")
    p.add_argument("--plant", action="store_true", help="digit 0's histogram of row 0 corrupted, and with --lists "
                   "the first listed position of row 0 moved: the checks must fail")
    p.add_argument("--scale", type=float, nargs="+", default=[0.0],
                   help="scores mean + randn x this (0: randn alone; e.g. 0.05: a narrow band, few digit-0 / 1 bins)")
    a = p.parse_args()
    dev = a.device
    gpu = dev == "cuda"
    if gpu:
        from timing import graph_time_us
    g = torch.Generator(device=dev).manual_seed(11)
    for shape, scale in ((sh, sc) for sh in a.shapes for sc in a.scale):
        rows, keys = (int(v) for v in shape.split("x"))
        shape = shape + (f" scale {scale}" if scale else "")
        nsl = max(1, 128 // rows) if gpu else 4
        pmax = -(-keys // PAGE)
        lengths = torch.full((rows,), keys, dtype=torch.int32, device=dev)
        scores = torch.randn(rows, pmax * PAGE, generator=g, device=dev)
        if scale:  # a narrow band of positive scores: most keys in one or two digit-0 bins, digit 1 in a few
            scores = 1.0 + scale * scores
        page_table = torch.randperm(pmax * rows, generator=g, device=dev).view(rows, pmax).to(torch.int32)
        pos = radix_select(scores, lengths=lengths, topk=KTOP)
        want = to_slots(pos, page_table=page_table).long()
        # digit 0's histogram as the score stage leaves it (parity 0, copy 0 of COPIES)
        top8 = order_keys(scores) >> 24
        valid = torch.arange(pmax * PAGE, device=dev)[None, :] < lengths[:, None]
        hist0 = torch.zeros(2, rows, COPIES, 256, dtype=torch.int32, device=dev)
        for r in range(rows):
            hist0[0, r, 0] = torch.bincount(top8[r][valid[r]], minlength=256).to(torch.int32)
        if a.plant:  # the bin above the threshold's claims KTOP keys more: the chain lists a wrong row 0
            hist0[0, 0, 0, min(255, int(top8[0][pos[0, KTOP - 1]]) + 1)] += KTOP
        hist = {p: torch.zeros(2, rows, (COPIES if p == 1 else 1) * 256, dtype=torch.int32, device=dev)
                for p in (1, 2, 3)}
        kept = {p: torch.zeros(rows, 2, dtype=torch.int64, device=dev) for p in (1, 2, 3)}
        cnt = torch.zeros(rows, nsl, 257, dtype=torch.int32, device=dev)
        topk = torch.full((rows, KTOP), -7, dtype=torch.int32, device=dev)
        err = torch.zeros(4, dtype=torch.int64, device=dev)
        tasks = torch.zeros(32, dtype=torch.int32, device=dev)
        out = torch.zeros(max(rows * nsl, NPROG), dtype=torch.int32, device=dev)
        scratch_hist = torch.zeros(rows, COPIES * 8, 256, dtype=torch.int32, device=dev)
        grid = (NPROG,)

        cand_pos = torch.zeros(rows, pmax * PAGE, dtype=torch.int32, device=dev)
        cand_key = torch.zeros_like(cand_pos)
        ncand = torch.zeros(rows, nsl, dtype=torch.int32, device=dev)

        def stage(p, scan, hco=COPIES, satom=True, at=0, k=4):
            """sel<p>; at: the stage that lists (0: none): p lists (in [256, k] chunks), a later stage reads the
            lists."""
            prev = hist0 if p == 1 else hist[p - 1]
            return lambda: _sel[grid](scores, lengths, prev, hist[p], kept[max(1, p - 1)], kept[p], cnt, topk, tasks, 0,
                                      R=rows, KTOP=KTOP, PMAX=pmax, NSL=nsl, IBLK=a.iblk, ISCAN=scan, NPROG=NPROG,
                                      HI=8 * p, WP=8, HCP=COPIES if p <= 2 else 1, HCO=hco if p == 1 else 1,
                                      SATOM=satom and p < 3, cand_pos_ptr=cand_pos, cand_key_ptr=cand_key,
                                      ncand_ptr=ncand, LIST=0 if not at or p < at else 1 if p == at else 2, LK=k,
                                      num_warps=8)

        def emit(scan, k=0, at=0):
            return lambda: _emit[grid](scores, lengths, page_table, hist[3], kept[3], cnt, topk, err, tasks, 0, R=rows,
                                       KTOP=KTOP, PMAX=pmax, NSL=nsl, IBLK=a.iblk, ISCAN=scan, NPROG=NPROG, EK=k,
                                       cand_pos_ptr=cand_pos, cand_key_ptr=cand_key, ncand_ptr=ncand, LIST=at > 0,
                                       num_warps=8)

        def scan_only(scan, atom, ahead=1, spread=1):
            return lambda: _scan[grid](scores, lengths, kept[1], scratch_hist, out, R=rows, PMAX=pmax, NSL=nsl,
                                       IBLK=a.iblk, ISCAN=scan, NPROG=NPROG, ATOM=atom, AHEAD=ahead, SPREAD=spread,
                                       num_warps=8)

        hist1_wide = torch.zeros(2, rows, COPIES * 4 * 256, dtype=torch.int32, device=dev)

        def sel2_wide(scan):  # sel2 reading digit 1's histogram in 4 x COPIES copies (the readers' cost of SPREAD 4)
            return lambda: _sel[grid](scores, lengths, hist1_wide, hist[2], kept[1], kept[2], cnt, topk, tasks, 0,
                                      R=rows, KTOP=KTOP, PMAX=pmax, NSL=nsl, IBLK=a.iblk, ISCAN=scan, NPROG=NPROG,
                                      HI=16, WP=8, HCP=COPIES * 4, HCO=1, SATOM=True, num_warps=8)

        for scan in a.scans:
            for h in hist.values():
                h.zero_()
            topk.fill_(-7)
            for p in (1, 2, 3):
                stage(p, scan)()
            emit(scan)()
            if gpu:
                torch.cuda.synchronize()
            same = torch.equal(topk.long(), want)
            for k in a.rows_k:  # emit in [256, k] tiles over the same counts: the same list
                topk.fill_(-7)
                emit(scan, k)()
                if gpu:
                    torch.cuda.synchronize()
                print(f"{shape} scan {scan}: emit in [256, {k}] tiles' list "
                      f"{'EQUALS' if torch.equal(topk.long(), want) else 'DIFFERS FROM'} the rule", flush=True)
            print(f"{shape} slices {nsl} scan {scan}: chain's list {'EQUALS' if same else 'DIFFERS FROM'} the rule"
                  + ("" if same else f" ({int((topk.long() != want).sum())} entries)") + f", error word {err.tolist()}",
                  flush=True)
            out.zero_()
            scan_only(scan, True)()  # its hits: the row's keys at digit 0, as hist0 counts them
            d0 = kept[1][:, 1].long()
            want_hits = int(sum(int(hist0[0, r, 0, int(d0[r])]) for r in range(rows)))
            print(f"{shape} scan {scan}: the bare scan's hits {int(out.sum())} of {want_hits}", flush=True)
            for at in a.lists:  # the chain over the lists sel<at> leaves: the same list
                for k in a.rows_k:  # the listing in [256, k] chunks, emit over the lists in steps
                    for h in hist.values():
                        h.zero_()
                    ncand.fill_(-1)
                    for p in (1, 2, 3):
                        stage(p, scan, at=at, k=k)()
                    topk.fill_(-7)
                    emit(scan, 0, at)()
                    if gpu:
                        torch.cuda.synchronize()
                    if a.plant:  # the first listed position of row 0 moved: the lists' check must fail too
                        cand_pos[0, 0] += 1
                    bad = bad_lists(scores, keys, nsl, a.iblk, kept[at][:, 1], 8 * at, cand_pos, cand_key, ncand)
                    print(f"{shape} scan {scan}: lists at sel{at}, [256, {k}] chunks: list "
                          f"{'EQUALS' if torch.equal(topk.long(), want) else 'DIFFERS FROM'} the rule, "
                          f"{int(ncand.sum()) / rows:.0f} keys listed a row, slices' lists "
                          + ("as the prefix gives" if not bad else f"WRONG in {bad} slices"), flush=True)
                if gpu:
                    line = [f"sel{p} {graph_time_us(stage(p, scan, at=at)):.1f}" for p in (1, 2, 3) if p != at]
                    line += [f"sel{at} listing [256, {k}] {graph_time_us(stage(at, scan, at=at, k=k)):.1f}"
                             for k in a.rows_k]
                    line += [f"emit [256, {k}] {graph_time_us(emit(scan, k, at)):.1f}" for k in (0, *a.rows_k)]
                    print(f"{shape} slices {nsl} scan {scan}: lists at sel{at}: us a launch " + ", ".join(line),
                          flush=True)
            if not gpu:  # the interpreter checks the bare scans build and count
                scan_only(scan, False, 2)()
                scan_only(scan, True, spread=4)()
                continue
            line = [f"empty {graph_time_us(lambda: _noop[grid](out)):.1f}"]
            line += [f"sel{p} {graph_time_us(stage(p, scan)):.1f}" for p in (1, 2, 3)]
            line += [f"sel1 one copy {graph_time_us(stage(1, scan, hco=1)):.1f}",
                     f"sel1 block histograms {graph_time_us(stage(1, scan, satom=False)):.1f}"]
            line.append(f"emit {graph_time_us(emit(scan)):.1f}")
            line += [f"emit [256, {k}] {graph_time_us(emit(scan, k)):.1f}" for k in a.rows_k]
            line += [f"scan {graph_time_us(scan_only(scan, False)):.1f}",
                     f"scan 2 ahead {graph_time_us(scan_only(scan, False, 2)):.1f}",
                     f"scan+atomics {graph_time_us(scan_only(scan, True)):.1f}",
                     f"spread 4 {graph_time_us(scan_only(scan, True, spread=4)):.1f}",
                     f"spread 8 {graph_time_us(scan_only(scan, True, spread=8)):.1f}",
                     f"sel2 over 4x copies {graph_time_us(sel2_wide(scan)):.1f}"]
            print(f"{shape} slices {nsl} scan {scan}: us a launch " + ", ".join(line), flush=True)


if __name__ == "__main__":
    main()
