"""The indexer's score loop alone (`stages_index.key_block` + `score_keys`, a decode row's task over its slice):
its sm_90 instruction mix from an AOT compile on a CPU, or its time on a GPU.

python test/kernels/glm53/probe_score.py --sass          # CPU: the loop body's opcodes, with and without digit 0
python test/kernels/glm53/probe_score.py --keys 1024 8192 # GPU: µs a launch of 132 programs, a slice each
python test/kernels/glm53/probe_score.py --iblk 128 256 --variants 1,1,0,0 1,1,4,1,1  # chosen variants and steps
python test/kernels/glm53/probe_score.py --iblk 256 64 --variants 1,1,3,1,1,16 --tma 3 4  # and the TMA loop
python test/kernels/glm53/probe_score.py --iblk 256 --variants 0,1,3,0,1 --lookahead 0,3 1,3 2,3 2,4 3,4  # page ids
python test/kernels/glm53/probe_score.py --iblk 256 --variants 1,1,3,1,1,16 --orders random local sorted inorder band16
Each program scores `keys` keys of one row (IBLK a step, the next block's keys and the page ids after them
loaded a step ahead, as `stages_index.score`), with or without digit 0's histogram (HIST), the dots as q @ k^T or
swapped (SWAP), prefetched by hand or software-pipelined by Triton (PIPE: `stages_index.score_pipelined` itself),
digit 0 counted by tl.histogram a block or by one atomic a key (ATOM, `Tiles.index_atomics`), and the pipelined
loop's page ids loaded a step ahead or not (AHEAD, `Tiles.index_ahead`). --orders: where the page table puts the
pages (`page_orders`), each order timed with every variant. --sass also reads the pipelined loop's
TTGIR: its waits for the async copies (`num` = copies left in flight) and its shared-memory key buffers.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import sys

import torch
import triton
import triton.language as tl

from sgl_amd_mono.backends.triton import stages_index as index

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

IH, ID, PAGE = 32, 128, 64


@triton.jit
def _program_row(iq_ptr, head_w_ptr, n_keys, IH: tl.constexpr, ID: tl.constexpr):
    """This program's (query, head weights, first key, end key): keys [pid n_keys, (pid + 1) n_keys) of one row."""
    heads = tl.arange(0, IH)
    s0 = tl.program_id(0) * n_keys
    return (tl.load(iq_ptr + heads[:, None] * ID + tl.arange(0, ID)[None, :]), tl.load(head_w_ptr + heads), s0,
            s0 + n_keys)


@triton.jit
def _score_probe(iq_ptr, head_w_ptr, index_k_cache_ptr, stride_index_k_cache, page_table_ptr, scores_ptr, hist_ptr,
                 n_keys, PMAX: tl.constexpr, IBLK: tl.constexpr, IH: tl.constexpr, ID: tl.constexpr,
                 HIST: tl.constexpr, SWAP: tl.constexpr, PIPE: tl.constexpr, ATOM: tl.constexpr,
                 AHEAD: tl.constexpr, COPIES: tl.constexpr = 1, PCH: tl.constexpr = 0, FLOOR: tl.constexpr = 0):
    """grid = (programs,): program p scores keys [p n_keys, (p + 1) n_keys) of one row's page table. PIPE 0: the
    next block's keys and the page ids after them loaded a step ahead by hand (`stages_index.score`); PIPE > 1:
    the loads inside the loop, software-pipelined by Triton over PIPE stages. ATOM: into copy pid % COPIES of the
    histogram (256 bins each). PCH: the pipelined loop's page ids a chunk of PCH steps at once. FLOOR (PIPE > 1):
    also the slice's floor of FLOOR keys (`stages_index.lane_floor`), stored after the histograms."""
    pid = tl.program_id(0)
    hist_ptr += (pid % COPIES) * 256
    dims = tl.arange(0, ID)
    blk = tl.arange(0, IBLK)
    q0, hw0, s0, s1 = _program_row(iq_ptr, head_w_ptr, n_keys, IH, ID)
    h = tl.zeros((16, 256), dtype=tl.int32)
    if PIPE == 0:
        tn = s0 + blk
        page = tl.load(page_table_ptr + tn // 64, mask=tn < s1, other=0)
        k, ks = index.key_block(index_k_cache_ptr, stride_index_k_cache, page, tn, s1, dims)
        page = tl.load(page_table_ptr + (tn + IBLK) // 64, mask=tn + IBLK < s1, other=0)
        for t0 in tl.range(s0, s1, IBLK, num_stages=1):
            tt = t0 + blk
            tn = tt + IBLK
            k_next, ks_next = index.key_block(index_k_cache_ptr, stride_index_k_cache, page, tn, s1, dims)
            page = tl.load(page_table_ptr + (tn + IBLK) // 64, mask=tn + IBLK < s1, other=0)
            h = index.score_keys(q0, hw0, k, ks, scores_ptr, tt, s1, h, 0, s1, HIST, 0, SWAP, hist_ptr, ATOM)
            k, ks = k_next, ks_next
    else:  # the launch's own loop (its row's histogram at hist_ptr)
        h, floor = index.score_pipelined(q0, hw0, s1, index_k_cache_ptr, stride_index_k_cache, page_table_ptr,
                                         scores_ptr, h, s0, s1, HIST, ID, IBLK, 0, SWAP, PIPE, hist_ptr, ATOM, AHEAD, 8,
                                         PCH, FLOOR)
        if FLOOR > 0:
            tl.store((hist_ptr + (COPIES - pid % COPIES) * 256).to(tl.pointer_type(tl.int64)) + pid, floor)
    if not ATOM:
        tl.atomic_add(hist_ptr + tl.arange(0, 256), tl.sum(h, axis=0), sem="relaxed")


@triton.jit
def _score_probe_tma(iq_ptr, head_w_ptr, index_k_cache_ptr, page_table_ptr, scores_ptr, hist_ptr, n_keys, n_rows,
                     IH: tl.constexpr, ID: tl.constexpr, PIPE: tl.constexpr, ATOM: tl.constexpr,
                     COPIES: tl.constexpr = 1, PAGE: tl.constexpr = 64, PPS: tl.constexpr = 1):
    """The score loop with each page's keys brought by the Tensor Memory Accelerator (sm_90): the cache as rows of
    128 bytes (a page: its 64 key rows, then 2 rows of its 64 f32 scales), a [64, 128] box a page at row
    page x 66 through a descriptor made in the kernel; the scales by a plain load; the dots swapped (an fp8 wgmma
    of 64 keys), digit 0 counted by an atomic a key (ATOM) into copy pid % COPIES. Program p scores keys
    [p n_keys, (p + 1) n_keys) of one row, PPS pages a step (1 or 4: a descriptor load each), pipelined by Triton
    over PIPE stages (the next step's page ids loaded a step ahead)."""
    pid = tl.program_id(0)
    hist_ptr += (pid % COPIES) * 256
    heads = tl.arange(0, IH)
    dims = tl.arange(0, ID)
    keys = tl.arange(0, PAGE)
    desc = tl.make_tensor_descriptor(index_k_cache_ptr, shape=[n_rows, ID], strides=[ID, 1], block_shape=[PAGE, ID])
    s0 = pid * n_keys
    s1 = s0 + n_keys
    q0 = tl.load(iq_ptr + heads[:, None] * ID + dims[None, :])
    hw0 = tl.load(head_w_ptr + heads)
    p0 = tl.load(page_table_ptr + s0 // PAGE)
    p1 = tl.load(page_table_ptr + s0 // PAGE + 1 % PPS)  # PPS 1: p1-p3 the first page again, unused
    p2 = tl.load(page_table_ptr + s0 // PAGE + 2 % PPS)
    p3 = tl.load(page_table_ptr + s0 // PAGE + 3 % PPS)
    for t0 in tl.range(s0, s1, PAGE * PPS, num_stages=PIPE):
        nxt = tl.minimum(t0 + PAGE * PPS, s1 - PAGE * PPS) // PAGE  # the next step's first page (the last: again)
        _tma_page(desc, q0, hw0, index_k_cache_ptr, scores_ptr + t0, hist_ptr, p0, keys, ID, PAGE, ATOM)
        p0 = tl.load(page_table_ptr + nxt)
        if PPS == 4:
            _tma_page(desc, q0, hw0, index_k_cache_ptr, scores_ptr + t0 + PAGE, hist_ptr, p1, keys, ID, PAGE, ATOM)
            _tma_page(desc, q0, hw0, index_k_cache_ptr, scores_ptr + t0 + 2 * PAGE, hist_ptr, p2, keys, ID, PAGE, ATOM)
            _tma_page(desc, q0, hw0, index_k_cache_ptr, scores_ptr + t0 + 3 * PAGE, hist_ptr, p3, keys, ID, PAGE, ATOM)
            p1 = tl.load(page_table_ptr + nxt + 1)
            p2 = tl.load(page_table_ptr + nxt + 2)
            p3 = tl.load(page_table_ptr + nxt + 3)


@triton.jit
def _tma_page(desc, q0, hw0, index_k_cache_ptr, out_ptr, hist_ptr, page, keys, ID: tl.constexpr, PAGE: tl.constexpr,
              ATOM: tl.constexpr):
    """One page's 64 keys by the descriptor, scored (swapped dots) and stored at out_ptr; ATOM: digit 0 counted."""
    k = desc.load([page * (PAGE + 2), 0]).to(tl.float8e4nv, bitcast=True)
    ks = tl.load((index_k_cache_ptr + page.to(tl.int64) * ((PAGE + 2) * ID) + PAGE * ID).to(
        tl.pointer_type(tl.float32)) + keys)
    sc = index.block_scores(q0, hw0, k, ks, True)
    tl.store(out_ptr + keys, sc)
    if ATOM:
        tl.atomic_add(hist_ptr + (index.order_key(sc) >> 24).to(tl.int32), 1, sem="relaxed")


@triton.jit
def _score_probe_lookahead(iq_ptr, head_w_ptr, index_k_cache_ptr, stride_index_k_cache, page_table_ptr, scores_ptr,
                           n_keys, IBLK: tl.constexpr, IH: tl.constexpr, ID: tl.constexpr, PIPE: tl.constexpr,
                           LA: tl.constexpr):
    """The pipelined score loop (swapped dots, digit 0 not counted) with its page ids loaded LA steps ahead (1, as
    `stages_index.score_pipelined` with AHEAD; 2 or 3: carried through as many registers), or none loaded (LA 0:
    the pages in order, page = key // 64, so no key address waits on a load)."""
    dims = tl.arange(0, ID)
    blk = tl.arange(0, IBLK)
    q0, hw0, s0, s1 = _program_row(iq_ptr, head_w_ptr, n_keys, IH, ID)
    p1 = tl.load(page_table_ptr + (s0 + blk) // 64, mask=s0 + blk < s1, other=0)
    p2 = tl.load(page_table_ptr + (s0 + IBLK + blk) // 64, mask=s0 + IBLK + blk < s1, other=0)
    p3 = tl.load(page_table_ptr + (s0 + 2 * IBLK + blk) // 64, mask=s0 + 2 * IBLK + blk < s1, other=0)
    for t0 in tl.range(s0, s1, IBLK, num_stages=PIPE):
        tt = t0 + blk
        if LA == 0:
            page = tt // 64
        else:
            page = p1
        k, ks = index.key_block(index_k_cache_ptr, stride_index_k_cache, page, tt, s1, dims)
        nxt = tt + LA * IBLK
        if LA == 1:
            p1 = tl.load(page_table_ptr + nxt // 64, mask=nxt < s1, other=0)
        if LA == 2:
            p1 = p2
            p2 = tl.load(page_table_ptr + nxt // 64, mask=nxt < s1, other=0)
        if LA == 3:
            p1 = p2
            p2 = p3
            p3 = tl.load(page_table_ptr + nxt // 64, mask=nxt < s1, other=0)
        sc = index.block_scores(q0, hw0, k, ks, True)
        tl.store(scores_ptr + tt, sc, mask=tt < s1)


@triton.jit
def _score_probe_paged(iq_ptr, head_w_ptr, index_k_cache_ptr, stride_index_k_cache, page_table_ptr, scores_ptr,
                       hist_ptr, n_keys, IBLK: tl.constexpr, IH: tl.constexpr, ID: tl.constexpr, PIPE: tl.constexpr,
                       HIST: tl.constexpr):
    """The pipelined score loop (swapped dots) with a step's keys addressed by page: its IBLK / 64 page ids (one
    load of IBLK / 64 values, a step ahead), the keys as an [IBLK / 64, 64, ID] tile (each page's 8 KiB of keys one
    contiguous run from its page's base) and the scales as [IBLK / 64, 64] (a page's 256 bytes contiguous), both
    reshaped to [IBLK, .] for the dots; HIST: digit 0 by an atomic a key into copy pid % 16."""
    NP: tl.constexpr = IBLK // 64
    pid = tl.program_id(0)
    hist_ptr += (pid % 16) * 256
    dims = tl.arange(0, ID)
    pg = tl.arange(0, NP)
    off = tl.arange(0, 64)
    blk = tl.arange(0, IBLK)
    q0, hw0, s0, s1 = _program_row(iq_ptr, head_w_ptr, n_keys, IH, ID)
    pages = tl.load(page_table_ptr + s0 // 64 + pg, mask=s0 + pg * 64 < s1, other=0)
    for t0 in tl.range(s0, s1, IBLK, num_stages=PIPE):
        tt = t0 + blk
        base = index_k_cache_ptr + pages.to(tl.int64) * stride_index_k_cache  # [NP]
        k = tl.load(base[:, None, None] + off[None, :, None] * 128 + dims[None, None, :])
        ks = tl.load((base[:, None] + 64 * 128 + off[None, :] * 4).to(tl.pointer_type(tl.float32)))
        nxt = t0 + IBLK
        pages = tl.load(page_table_ptr + nxt // 64 + pg, mask=nxt + pg * 64 < s1, other=0)
        k2 = tl.reshape(k, (IBLK, ID)).to(tl.float8e4nv, bitcast=True)
        sc = index.block_scores(q0, hw0, k2, tl.reshape(ks, (IBLK,)), True)
        tl.store(scores_ptr + tt, sc, mask=tt < s1)
        if HIST:
            tl.atomic_add(hist_ptr + (index.order_key(sc) >> 24).to(tl.int32), 1, mask=tt < s1, sem="relaxed")


# (HIST, SWAP, PIPE, ATOM, AHEAD)
VARIANTS = [(False, False, 0, False, False), (True, False, 0, False, False), (False, True, 0, False, False),
            (True, True, 0, False, False), (True, True, 3, False, False), (True, False, 3, False, False),
            (True, True, 0, True, False), (True, True, 3, True, False), (True, True, 3, True, True),
            (False, True, 3, False, True)]


# 2 MiB (a large GPU memory page, one TLB entry) over an index-K page's bytes
PAGES_2M = (2 << 20) // (PAGE * (ID + 4))


def page_orders(pages: int, per_program: int, g: torch.Generator, device) -> dict:
    """Page tables of the same pages in four placements: "random" (a permutation of the pool, as time_layers'
    inputs: a program's pages spread over the whole cache), "inorder" (page i at position i), "local" (the pool's
    pages permuted within each 2 MiB group, so a program's consecutive pages share a few 2 MiB ranges: random
    order, TLB reach kept), "sorted" (random, each program's pages then sorted by id: the same pages as random a
    program, visited in address order), "band16" (permuted within 16 equal bands of the pool: a program's pages
    random within a sixteenth of the cache, as tasks that each took the pages of one band would read them)."""
    def within(group: int) -> torch.Tensor:  # the pool's pages permuted within each run of `group` pages
        out = torch.arange(pages, device=device)
        for g0 in range(0, pages, group):
            n = min(group, pages - g0)
            out[g0:g0 + n] = g0 + torch.randperm(n, device=device, generator=g)
        return out

    rnd = torch.randperm(pages, device=device, generator=g)
    srt = rnd.clone()
    for p0 in range(0, pages, per_program):
        srt[p0:p0 + per_program] = srt[p0:p0 + per_program].sort().values
    return {"random": rnd, "inorder": torch.arange(pages, device=device), "local": within(PAGES_2M), "sorted": srt,
            "band16": within(-(-pages // 16))}


def _sig(hist: bool, iblk: int, pmax: int, swap: bool = False, pipe: int = 0, atom: bool = False,
         ahead: int = 0, copies: int = 1, floor: int = 0, pch: int = 0) -> tuple[dict, dict]:
    sig = {"iq_ptr": "*fp8e4nv", "head_w_ptr": "*fp32", "index_k_cache_ptr": "*u8", "stride_index_k_cache": "i32",
           "page_table_ptr": "*i32", "scores_ptr": "*fp32", "hist_ptr": "*i32", "n_keys": "i32"}
    consts = {"PMAX": pmax, "IBLK": iblk, "IH": IH, "ID": ID, "HIST": hist, "SWAP": swap, "PIPE": pipe, "ATOM": atom,
              "AHEAD": ahead, "COPIES": copies, "PCH": pch, "FLOOR": floor}
    return sig, consts


def _variant(text: str) -> tuple:
    """'H,S,P,A[,AH[,COPIES[,FLOOR]]]' (0 / 1, 0 / 1, a pipeline depth, 0 / 1[, 0 / 1 / 2 (Tiles.index_ahead)[,
    copies[, the keys a slice's floor guarantees (Tiles.index_floor: ceil(2048 / slices); 0 none)]]]) -> a VARIANTS
    tuple, COPIES and FLOOR appended when given."""
    try:
        v = [int(x) for x in text.split(",")]
        h, s, p, at = v[:4]
        ahead = v[4] if len(v) >= 5 else 0
        if len(v) not in (4, 5, 6, 7) or (len(v) >= 6 and v[5] < 1) or ahead not in (0, 1, 2):
            raise ValueError
    except ValueError:
        raise SystemExit(f"variant {text!r} is not HIST,SWAP,PIPE,ATOM[,AHEAD[,COPIES[,FLOOR]]] (integers, e.g. "
                         "1,1,3,1,2,16,128)")
    return (bool(h), bool(s), p, bool(at), ahead, *v[5:])


def sass_report(iblk: int, variants) -> None:
    import sass_mix

    for hist, swap, pipe, atom, ahead, *more in variants:
        sig, consts = _sig(hist, iblk, 4096, swap, pipe, atom, ahead, *more)
        k = sass_mix.compile_sm90(_score_probe, sig, consts, 8, divisible=("stride_index_k_cache",))
        text = sass_mix.disassemble(k)
        mix = sass_mix.loop_mix(text)
        ptx = k.asm["ptx"]
        from sgl_amd_mono.backends.triton.survey import _ptxas_usage

        use = _ptxas_usage(ptx)
        print(f"HIST={hist} SWAP={swap} PIPE={pipe} ATOM={atom} AHEAD={ahead} COPIES,FLOOR={more} IBLK={iblk}: "
              f"registers {use['regs']}, "
              f"spill bytes {use['spill_bytes']}; loop body {sum(mix.values())} instructions", flush=True)
        print("  " + ", ".join(f"{op} {n}" for op, n in mix.most_common(40)), flush=True)
        wide = collections.Counter(w for w in ("ld.global.v4", "ld.global.v2", "ld.global.b8", "ld.global.u8",
                                               "ld.global.L1::evict_last") if w in ptx for _ in range(ptx.count(w)))
        print(f"  PTX loads: {dict(wide)}; wgmma {ptx.count('wgmma.mma_async')}, mma.sync {ptx.count('mma.sync')}, "
              f"bar.sync {ptx.count('bar.sync')}", flush=True)
        g = k.asm["ttgir"]
        waits = re.findall(r"async_wait[^{]*[{]num = (\d+)", g)
        bufs = sorted(set(re.findall(r"memdesc<([0-9x]+)xi8", g)))
        print(f"  TTGIR (Triton {triton.__version__}): async waits num={waits}, key buffers {bufs}, shared memory "
              f"{k.metadata.shared} bytes", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sass", action="store_true", help="CPU: compile for sm_90 and print the loop's instructions")
    p.add_argument("--keys", type=int, nargs="+", default=[1024, 8192], help="keys a program scores (GPU)")
    p.add_argument("--iblk", type=int, nargs="+", default=[128], help="keys a loop step (each one timed)")
    p.add_argument("--tma", type=int, nargs="*", default=None,
                   help="also time the TMA loop (`_score_probe_tma`, 4 pages a step, then 1) at these pipeline depths, "
                        "digit 0 by atomics in 16 copies and not counted")
    p.add_argument("--page-chunk", type=int, nargs="+", default=[0],
                   help="the pipelined variants also with their page ids this many steps at once (0: as the variant)")
    p.add_argument("--lookahead", type=lambda v: tuple(int(x) for x in v.split(",")), nargs="*", default=[],
                   help="also time `_score_probe_lookahead` at these LA,PIPE pairs (e.g. 0,3 2,4)")
    p.add_argument("--paged", type=lambda v: tuple(int(x) for x in v.split(",")), nargs="*", default=[],
                   help="also time `_score_probe_paged` at these PIPE,HIST pairs (e.g. 3,1 4,0)")
    p.add_argument("--orders", nargs="+", default=["random"],
                   choices=["random", "inorder", "local", "sorted", "band16"],
                   help="the page tables' placements (`page_orders`), each timed with every variant")
    p.add_argument("--variants", nargs="+", default=None,
                   help="HIST,SWAP,PIPE,ATOM tuples (e.g. 1,1,4,1); default VARIANTS")
    a = p.parse_args()
    variants = VARIANTS if a.variants is None else [_variant(v) for v in a.variants]
    if a.sass:
        for iblk in a.iblk:
            sass_report(iblk, variants)
        return
    from timing import graph_time_us

    nprog, pmax = 132, 4096
    g = torch.Generator(device="cuda").manual_seed(3)
    for keys, iblk in ((k, b) for k in a.keys for b in a.iblk):
        pages = -(-keys * nprog // PAGE)
        cache = torch.randint(0, 120, (pages, PAGE * (ID + 4)), dtype=torch.uint8, device="cuda", generator=g)
        cache.view(-1, PAGE * (ID + 4))[:, PAGE * ID:] = 0
        cache[:, PAGE * ID:].view(torch.float32).copy_(torch.rand(pages, PAGE, device="cuda", generator=g))
        tables = page_orders(pages, keys // PAGE, g, "cuda")
        iq = torch.randn(IH, ID, device="cuda", generator=g).to(torch.float8_e4m3fn)
        hw = torch.randn(IH, device="cuda", generator=g)
        scores = torch.empty(keys * nprog, device="cuda")
        hist = torch.zeros((256 + 2) * nprog, dtype=torch.int32, device="cuda")  # then FLOOR's floors (i64)
        for order, (h, sw, pipe, atom, ahead, *more), pch in ((o, v, c) for o in a.orders for v in variants
                                                             for c in a.page_chunk):
            pt = tables[order].to(torch.int32)
            copies = more[0] if more else 1
            floor = more[1] if len(more) > 1 else 0
            if pch and not pipe:
                continue

            def fn(h=h, sw=sw, pipe=pipe, atom=atom, ahead=ahead, copies=copies, pch=pch, pt=pt, floor=floor):
                _score_probe[(nprog,)](iq, hw, cache, cache.stride(0), pt, scores, hist, keys, PMAX=pmax, IBLK=iblk,
                                       IH=IH, ID=ID, HIST=h, SWAP=sw, PIPE=pipe, ATOM=atom, AHEAD=ahead,
                                       COPIES=copies, PCH=pch, FLOOR=floor, num_warps=8)
            name = (f"keys {keys} a program, {nprog} programs, IBLK={iblk} HIST={h} SWAP={sw} PIPE={pipe} ATOM={atom} "
                    f"AHEAD={ahead} COPIES={copies} FLOOR={floor}{f' page ids {pch} steps at once' if pch else ''} "
                    f"pages {order}")
            _report(name, fn, keys * nprog)
        pt = tables["random"].to(torch.int32)  # the lookahead, paged and TMA loops': time_layers' placement
        for pipe, h in a.paged:
            def fn(pipe=pipe, h=h):
                _score_probe_paged[(nprog,)](iq, hw, cache, cache.stride(0), pt, scores, hist, keys, IBLK=iblk, IH=IH,
                                             ID=ID, PIPE=pipe, HIST=bool(h), num_warps=8)
            _report(f"keys {keys} a program, {nprog} programs, IBLK={iblk} keys addressed by page PIPE={pipe} "
                    f"HIST={bool(h)}", fn, keys * nprog)
        for la, pipe in a.lookahead:
            def fn(la=la, pipe=pipe):
                _score_probe_lookahead[(nprog,)](iq, hw, cache, cache.stride(0), pt, scores, keys, IBLK=iblk, IH=IH,
                                                 ID=ID, PIPE=pipe, LA=la, num_warps=8)
            _report(f"keys {keys} a program, {nprog} programs, IBLK={iblk} page ids {la} step(s) ahead"
                    f"{' (none: pages in order)' if la == 0 else ''} PIPE={pipe}", fn, keys * nprog)
        if a.tma is None or iblk != a.iblk[0]:
            continue
        ref = scores.clone()  # the last variant's scores: the TMA loop's are compared with them
        flat = cache.view(torch.float32)  # the same bytes read by torch (a sum): the bandwidth this GPU gives now
        us = graph_time_us(lambda: flat.sum())
        print(f"torch sum over the same cache: {us:.1f} us ({cache.numel() / 1e6 / us:.2f} TB/s)", flush=True)
        triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
        for pps, pipe, atom in ((n, p, at) for n in (4, 1) for p in a.tma for at in (True, False)):
            def fn(pipe=pipe, atom=atom, pps=pps):
                _score_probe_tma[(nprog,)](iq, hw, cache, pt, scores, hist, keys, pages * (PAGE + 2), IH=IH, ID=ID,
                                           PIPE=pipe, ATOM=atom, COPIES=16, PPS=pps, num_warps=8)
            name = (f"keys {keys} a program, {nprog} programs, TMA {pps} page(s) a step, PIPE={pipe} ATOM={atom} "
                    "COPIES=16")
            if _report(name, fn, keys * nprog):
                diff = (scores - ref).abs().max().item()
                print(f"  scores vs the last variant's: max abs diff {diff:.3g}", flush=True)


def _report(name: str, fn, n_keys: int) -> bool:
    """One line: fn's µs a launch (CUDA graph) and the keys' bandwidth; a variant that does not build (shared memory,
    registers) is reported, not fatal (False)."""
    from timing import graph_time_us

    try:
        us = graph_time_us(fn)
    except Exception as e:
        print(f"{name}: FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
        return False
    mb = n_keys * (ID + 4) / 1e6
    print(f"{name}: {us:.1f} us ({mb:.1f} MB of keys, {mb / us:.2f} TB/s)", flush=True)
    return True


if __name__ == "__main__":
    main()
