"""The indexer's per-row tasks alone (`stages_index.index_keys`, `index_query`): each task's own time on a GPU, in
a launch as small as the indexer launch gives them, or their sm_90 instruction mix from an AOT compile on a CPU.

python test/kernels/glm53/probe_index_rows.py --sass          # CPU: instructions, barriers, registers of each task
python test/kernels/glm53/probe_index_rows.py --rows 1 8      # GPU: µs a task, with the L2 warm and flushed
python test/kernels/glm53/probe_index_rows.py --busy 96 --stream-kb 128  # and with other programs streaming meanwhile
Program p runs one task (the launch's: index_keys of row p, or index_query of (row p // groups, group p % groups)),
stamps the GPU's clock when it starts and again after a release atomic (as the launch's arrival, so the stores are
done), and writes the difference. Each launch's largest difference is a task's time as the launch sees it;
reported: the median over launches. Flushed: a 512 MB write before every launch evicts L2 (the launch's code and
inputs arrive cold, as in the indexer launch, whose weights stream through L2 between two layers' tasks). With
--busy N, N more programs each read --stream-kb KB of a 1 GiB buffer meanwhile (as q_b's GEMV tasks stream their
weights beside the index key's task in the launch), so the task's loads queue as they do there.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import triton
import triton.language as tl

from sgl_amd_mono.backends.triton import stages_index as index

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

IH, ID, ROPE, IQG, KS_I, KS_W, KS_IQ, PAGE = 32, 128, 64, 16, 6, 16, 2, 64
FNS = {1: "index_keys", 2: "index_query"}


@triton.jit
def _rows_probe(ik_part_ptr, iq_part_ptr, iw_part_ptr, cos_sin_ptr, out_loc_ptr, k_norm_w_ptr, k_norm_b_ptr,
                index_k_cache_ptr, stride_index_k_cache, iq_ptr, head_w_ptr, count_ptr, us_ptr, busy_ptr, sink_ptr,
                n_tasks, R: tl.constexpr, FN: tl.constexpr, IH: tl.constexpr, ID: tl.constexpr, ROPE: tl.constexpr,
                IQG: tl.constexpr, KS_I: tl.constexpr, KS_W: tl.constexpr, KS_IQ: tl.constexpr,
                STREAM: tl.constexpr = 0):
    """grid = (tasks + busy,): program p < n_tasks runs task p of FN (1: index_keys, 2: index_query) and writes its ns
    to us_ptr[p]; the others each read STREAM bytes of busy_ptr (their own range) and write one word to sink_ptr."""
    pid = tl.program_id(0)
    if pid >= n_tasks:
        offs = tl.arange(0, 4096)
        acc = tl.zeros((4096,), dtype=tl.int32)
        base = busy_ptr + (pid - n_tasks).to(tl.int64) * (STREAM // 4)
        for b in tl.range(0, STREAM // 16384, num_stages=4):
            acc ^= tl.load(base + b * 4096 + offs)
        tl.store(sink_ptr + pid, tl.sum(acc, axis=0))
    else:
        t0 = tl.extra.cuda.globaltimer()
        if FN == 1:
            index.index_keys(ik_part_ptr, cos_sin_ptr, out_loc_ptr, k_norm_w_ptr, k_norm_b_ptr, index_k_cache_ptr,
                             stride_index_k_cache, 1e-6, pid, R, ID, ROPE, KS_I)
        else:
            index.index_query(iq_part_ptr, iw_part_ptr, cos_sin_ptr, iq_ptr, head_w_ptr, pid // (IH // IQG),
                              pid % (IH // IQG), R, IH, ID, ROPE, IQG, KS_W, KS_IQ)
        tl.atomic_add(count_ptr, 1, sem="release")
        tl.store(us_ptr + pid, tl.extra.cuda.globaltimer() - t0)


def _sig() -> dict:
    return {"ik_part_ptr": "*fp32", "iq_part_ptr": "*fp32", "iw_part_ptr": "*fp32", "cos_sin_ptr": "*fp32",
            "out_loc_ptr": "*i64", "k_norm_w_ptr": "*fp32", "k_norm_b_ptr": "*fp32", "index_k_cache_ptr": "*u8",
            "stride_index_k_cache": "i32", "iq_ptr": "*fp8e4nv", "head_w_ptr": "*fp32", "count_ptr": "*i32",
            "us_ptr": "*i64", "busy_ptr": "*i32", "sink_ptr": "*i32", "n_tasks": "i32"}


def _consts(rows: int, fn: int, stream: int = 0) -> dict:
    return {"R": rows, "FN": fn, "IH": IH, "ID": ID, "ROPE": ROPE, "IQG": IQG, "KS_I": KS_I, "KS_W": KS_W,
            "KS_IQ": KS_IQ, "STREAM": stream}


def sass_report(rows_list) -> None:
    import collections
    import re

    import sass_mix
    from sgl_amd_mono.backends.triton.survey import _ptxas_usage

    for rows in rows_list:
        for fn, name in FNS.items():
            k = sass_mix.compile_sm90(_rows_probe, _sig(), _consts(rows, fn), 8, divisible=("stride_index_k_cache",))
            text = sass_mix.disassemble(k)
            ops = collections.Counter(op for _, op in re.findall(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P[0-9T]\s+)?"
                                                                 r"([A-Z][A-Z0-9_]*)", text))
            use = _ptxas_usage(k.asm["ptx"])
            print(f"{name} rows {rows}: {sum(ops.values())} instructions, registers {use['regs']}, spill bytes "
                  f"{use['spill_bytes']}, shared memory {k.metadata.shared} bytes, BAR {ops['BAR']}", flush=True)
            print("  " + ", ".join(f"{op} {n}" for op, n in ops.most_common(30)), flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sass", action="store_true", help="CPU: compile for sm_90 and print each task's instructions")
    p.add_argument("--rows", type=int, nargs="+", default=[1, 8], help="rows of the launch (R)")
    p.add_argument("--launches", type=int, default=50)
    p.add_argument("--busy", type=int, nargs="+", default=[0], help="programs streaming meanwhile (each a run)")
    p.add_argument("--stream-kb", type=int, default=128, help="KB each busy program reads (a multiple of 16)")
    a = p.parse_args()
    if a.sass:
        sass_report(a.rows)
        return
    g = torch.Generator(device="cuda").manual_seed(5)
    dev = "cuda"
    flush = torch.empty(512 << 20, dtype=torch.uint8, device=dev)
    busy = torch.randint(0, 1 << 30, (1 << 28,), dtype=torch.int32, device=dev)  # 1 GiB
    sink = torch.zeros(1024, dtype=torch.int32, device=dev)
    stream = a.stream_kb * 1024
    if stream % 16384 or max(a.busy) * stream > busy.numel() * 4:
        raise SystemExit(f"--stream-kb {a.stream_kb} is not a multiple of 16, or --busy x --stream-kb exceeds 1 GiB")
    for rows in a.rows:
        ik_part = torch.randn(KS_I, rows, ID, device=dev, generator=g)
        iq_part = torch.randn(KS_IQ, rows, IH * ID, device=dev, generator=g)
        iw_part = torch.randn(KS_W, rows, IH, device=dev, generator=g)
        cos_sin = torch.rand(rows, ROPE, device=dev, generator=g)
        out_loc = torch.arange(rows, device=dev, dtype=torch.int64) * 3
        knw, knb = torch.rand(ID, device=dev, generator=g), torch.rand(ID, device=dev, generator=g)
        cache = torch.zeros(4, PAGE * (ID + 4), dtype=torch.uint8, device=dev)
        iq = torch.empty(rows, IH, ID, device=dev, dtype=torch.float8_e4m3fn)
        head_w = torch.empty(rows, IH, device=dev)
        count = torch.zeros(1, dtype=torch.int32, device=dev)
        for (fn, name), n_busy in ((f, b) for f in FNS.items() for b in a.busy):
            tasks = rows if fn == 1 else rows * (IH // IQG)
            ns = torch.zeros(tasks, dtype=torch.int64, device=dev)
            for cold in (False, True):
                worst = []
                for i in range(a.launches + 3):
                    if cold:
                        flush.fill_(i & 0xFF)
                    _rows_probe[(tasks + n_busy,)](ik_part, iq_part, iw_part, cos_sin, out_loc, knw, knb, cache,
                                                   cache.stride(0), iq, head_w, count, ns, busy, sink, tasks,
                                                   **_consts(rows, fn, stream if n_busy else 0), num_warps=8)
                    torch.cuda.synchronize()
                    if i >= 3:
                        worst.append(int(ns.max()) / 1e3)
                worst.sort()
                beside = f", {n_busy} programs reading {a.stream_kb} KB each meanwhile" if n_busy else ""
                print(f"{name} rows {rows} ({tasks} tasks{beside}), L2 {'flushed' if cold else 'warm'}: a task "
                      f"{worst[len(worst) // 2]:.2f} us (median of {len(worst)} launches' slowest; min {worst[0]:.2f}, "
                      f"max {worst[-1]:.2f})", flush=True)

if __name__ == "__main__":
    main()
