"""Where a launch's warps wait, stage by stage: Nsight Compute's warp-state samples of one launch, by the code
between two hand-offs.

python test/kernels/glm53/ncu_stalls.py --csv src.csv.gz --cubin k.cubin --launch-us 284
src.csv: `ncu --import R.ncu-rep --page source --csv --print-source sass` of a launch profiled with
`--section SourceCounters` (`ncu_stalls.sh` makes both files on the GPU machine); k.cubin: the same build's
cubin from Triton's cache. The cubin is disassembled with Triton's bundled nvdisasm (-g: each instruction's
source line). A stage's code is taken to run from one hand-off's wait exit (`sync.wait_word`'s closing
barrier) to the next, and is named by the functions of the stage modules that hold most of its instructions.
Per stage: its instructions, the warp samples at them, those samples as µs of the whole GPU's warps
(samples / all samples x launch µs: a stage whose every program stalls 1 µs shows about 1 µs), and the
samples whose warp waited for its next instruction to be fetched (`no_inst`: code not in the SM's
instruction caches). Samples, not a timeline: a program that waits at a hand-off for others is counted at
the hand-off's code (the `hand-off` rows)."""

from __future__ import annotations

import argparse
import ast
import bisect
import collections
import csv
import gzip
import inspect
import os
import re
import subprocess

_LINE = re.compile(r'//## File "(.*)", line (\d+)')
_INSN = re.compile(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*)")
MODULES = "sgl_amd_mono/backends/triton"


def nvdisasm() -> str:
    import triton

    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "nvdisasm")


def source_lines(cubin: str) -> dict[int, tuple[str, int]]:
    """Each instruction's offset -> (file base name, line), from `nvdisasm -g`."""
    text = subprocess.run([nvdisasm(), "-g", "-c", cubin], capture_output=True, text=True, check=True).stdout
    out, cur = {}, ("?", 0)
    for line in text.splitlines():
        m = _LINE.search(line)
        if m:
            cur = (os.path.basename(m.group(1)), int(m.group(2)))
            continue
        m = _INSN.match(line)
        if m:
            out[int(m.group(1), 16)] = cur
    return out


def samples(path: str) -> tuple[list[dict], list[str]]:
    """The source page's rows (offset from the kernel's first instruction, all samples, each stall reason's
    samples) and the stall reasons' names."""
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        rows = list(csv.reader(f))
    head = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    hdr, data = rows[head], [r for r in rows[head + 1:] if r and r[0].startswith("0x")]
    reasons = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    col = {h: hdr.index(h) for h in ["Address", "Warp Stall Sampling (All Samples)", *reasons]}
    base = int(data[0][col["Address"]], 16)
    out = [{"at": int(r[col["Address"]], 16) - base,
            "all": int(r[col["Warp Stall Sampling (All Samples)"]] or 0),
            **{h[6:]: int(r[col[h]] or 0) for h in reasons}} for r in data]
    return out, [h[6:] for h in reasons]


def functions(root: str) -> dict[str, list[tuple[int, int, str]]]:
    """Each stage module's functions as (first line, last line, name), by file base name."""
    out = {}
    for name in os.listdir(os.path.join(root, MODULES)):
        if name.endswith(".py"):
            tree = ast.parse(open(os.path.join(root, MODULES, name)).read())
            out[name] = sorted((n.lineno, n.end_lineno, n.name) for n in ast.walk(tree)
                               if isinstance(n, ast.FunctionDef))
    return out


def function_of(funcs, where: tuple[str, int]) -> str | None:
    """The innermost function of a stage module holding that source line (None: not a stage module's)."""
    best = None
    for lo, hi, name in funcs.get(where[0], []):
        if lo <= where[1] <= hi and (best is None or lo >= best[0]):
            best = (lo, name)
    return best[1] if best else None


def wait_exit_line() -> int:
    """sync.wait_word's closing barrier: where every hand-off's wait ends (`wait_counter`'s and the row waits')."""
    from sgl_amd_mono.backends.triton import sync

    src, first = inspect.getsourcelines(sync.wait_word.fn)
    return first + next(i for i, line in enumerate(src) if "tl.debug_barrier()" in line)


def stages(lines: dict[int, tuple[str, int]], funcs, exit_line: int) -> list[tuple[int, int, str]]:
    """The code split after each hand-off's wait exit (start, end, name): a stage's code, then its hand-off (the
    piece's last run of `sync.py` / `standard.py` instructions, through the wait's exit), each stage named by the
    stage modules' functions (not `sync.py`'s) holding most of its instructions."""
    at = sorted(lines)
    is_exit = [lines[a] == ("sync.py", exit_line) for a in at]
    ends = [at[i + 1] for i in range(len(at) - 1) if is_exit[i] and not is_exit[i + 1]] + [at[-1] + 16]
    out, lo = [], 0
    for hi in ends:
        seg = at[bisect.bisect_left(at, lo): bisect.bisect_left(at, hi)]
        tail = len(seg)
        while tail > 0 and lines[seg[tail - 1]][0] in ("sync.py", "standard.py", "core.py"):
            tail -= 1
        names = collections.Counter(f for a in seg[:tail] if lines[a][0] != "sync.py"
                                    and (f := function_of(funcs, lines[a])))
        mid = seg[tail] if tail < len(seg) else hi
        if mid > lo:
            out.append((lo, mid, " + ".join(n for n, _ in names.most_common(2)) or "-"))
        if mid < hi:
            out.append((mid, hi, "hand-off"))
        lo = hi
    return out


def stall_counts(rows, reasons) -> collections.Counter:
    """Each stall reason's samples over these rows of `samples`."""
    c = collections.Counter()
    for r in rows:
        c.update({k: r[k] for k in reasons})
    return c


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--csv", required=True, help="ncu's source page (sass), .csv or .csv.gz")
    p.add_argument("--cubin", required=True, help="the profiled build's cubin")
    p.add_argument("--launch-us", type=float, required=True, help="the launch's µs (time_layers' figure)")
    p.add_argument("--root", default=os.getcwd(), help="the repository root the build was compiled from")
    a = p.parse_args(argv)
    lines = source_lines(a.cubin)
    rows, reasons = samples(a.csv)
    funcs = functions(a.root)
    total = sum(r["all"] for r in rows)
    us = a.launch_us / total  # µs of all warps per sample
    tot = stall_counts(rows, reasons)
    n_stall = sum(tot.values())
    print(f"{len(lines)} instructions ({len(lines) * 16 / 1024:.0f} KB), {total} warp samples over {a.launch_us} us")
    print("stall reasons, all code: " + ", ".join(f"{k} {100 * v / n_stall:.1f}%" for k, v in tot.most_common(8)))
    print("\n| code | from | instructions | samples | us of all warps | no_inst us | no_inst share | top stall |")
    print("|---|---|---|---|---|---|---|---|")
    for lo, hi, label in stages(lines, funcs, wait_exit_line()):
        seg = [r for r in rows if lo <= r["at"] < hi]
        s = sum(r["all"] for r in seg)
        c = stall_counts(seg, reasons)
        ni = c["no_inst"]
        top = c.most_common(1)[0][0] if s else "-"
        share = f"{100 * ni / max(sum(c.values()), 1):.0f}%"
        print(f"| {label} | {lo:#x} | {(hi - lo) // 16} | {s} | {s * us:.1f} | {ni * us:.1f} | {share} | {top} |")


if __name__ == "__main__":
    main()
