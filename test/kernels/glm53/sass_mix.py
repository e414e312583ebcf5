"""The instruction mix of the GEMV helpers' k loops on sm_90, from an AOT compile on a CPU (no GPU).

python test/kernels/glm53/sass_mix.py
Compiles `probe_tiles.py`'s MoE down and up kernels (TP8 shard, 8 rows, the launch's 8 warps and
pipeline depths), rows first and swapped, disassembles the cubin with Triton's bundled cuobjdump, and
prints for each the instructions of its innermost loop (the body between the last backward branch and
its target) by opcode. With ncu's cycles per issued instruction of a warp, that body's length is the
time of one loop iteration when the loop is bound by issue (results/ncu notes in the issue).
"""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import probe_tiles as P  # noqa: E402

_INSN = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P[0-9T]\s+)?([A-Z][A-Z0-9_]*)")
_BRA = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P[0-9T]\s+)?BRA\s+(?:`\(\.L_x_\d+\)|0x([0-9a-f]+))")


def compile_sm90(fn, sig: dict, consts: dict, num_warps: int, divisible=()):
    """fn compiled for sm_90 on this machine (no GPU): sig's pointers (and the names in divisible) 16-divisible."""
    sig = dict(sig, **{k: "constexpr" for k in consts})
    attrs = {(i,): [["tt.divisibility", 16]] for i, (n, t) in enumerate(sig.items())
             if t.startswith("*") or n in divisible}
    return triton.compile(ASTSource(fn, sig, consts, attrs), target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": num_warps})


def disassemble(kernel) -> str:
    """A compiled kernel's SASS, by Triton's bundled cuobjdump."""
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.cubin")
        with open(path, "wb") as f:
            f.write(kernel.asm["cubin"])
        return subprocess.run([tool, "-sass", path], capture_output=True, text=True, check=True).stdout


def sass(fn, sig: dict, consts: dict, num_warps: int) -> str:
    return disassemble(compile_sm90(fn, sig, consts, num_warps))


def loop_bodies(text: str) -> list[list[str]]:
    """The opcodes of each loop of the disassembly (the body of each backward branch), innermost (shortest) first."""
    insns = [(int(a, 16), op) for a, op in _INSN.findall(text)]
    loops = sorted(((int(t, 16), int(a, 16)) for a, t in _BRA.findall(text) if t and int(t, 16) < int(a, 16)),
                   key=lambda se: se[1] - se[0])
    return [[op for addr, op in insns if start <= addr <= end] for start, end in loops]


def loop_mix(text: str) -> collections.Counter:
    """Opcodes of the innermost loop: the body of the backward branch whose target is the latest."""
    insns = [(int(a, 16), op) for a, op in _INSN.findall(text)]
    loops = [(int(t, 16), int(a, 16)) for a, t in _BRA.findall(text) if t and int(t, 16) < int(a, 16)]
    if not loops:
        raise ValueError("no backward branch in the disassembly")
    start, end = max(loops)
    return collections.Counter(op for addr, op in insns if start <= addr <= end)


def main():
    down_sig = {"aq": "*fp8e4nv", "as_": "*fp32", "w2": "*fp8e4nv", "w2s": "*fp32", "experts": "*i32", "n_exp": "i32",
                "out": "*fp32"}
    up_sig = {"xq": "*fp8e4nv", "xs": "*fp32", "w13": "*fp8e4nv", "w13s": "*fp32", "experts": "*i32", "n_exp": "i32",
              "part": "*fp32"}
    for swap in (False, True):
        kernels = {
            "down (48 columns, 8 stages)": (P.down_kernel, down_sig, dict(R=8, D=6144, I=256, E=256, DCW=48, DCW_P=64,
                                                                          STAGES=8, NPROG=132, SWAP=swap)),
            "up (128 columns, 4 stages)": (P.up_kernel, up_sig, dict(R=8, I=256, D=6144, E=256, BU=128, KS=4, NPROG=132,
                                                                     MT=4, STAGES=4, SWAP=swap)),
        }
        for name, (fn, sig, consts) in kernels.items():
            mix = loop_mix(sass(fn, sig, consts, num_warps=8))
            top = ", ".join(f"{op} {n}" for op, n in mix.most_common(10))
            print(f"{name} {P.orient(swap)}: loop body {sum(mix.values())} instructions a warp: {top}", flush=True)


if __name__ == "__main__":
    main()
