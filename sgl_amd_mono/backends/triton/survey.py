"""AOT compiles of the Triton launches for gfx950 and sm_90 on a CPU: registers and spills per build key.

python -m sgl_amd_mono.backends.triton.survey [--widths 1 8] [--tp 8] [--targets gfx950 sm_90] [--tiny]
Prints one row per (target, tp, width, kv dtype): registers (VGPR/SGPR or regs), spills, scratch
or SMEM. Uses Triton's compile path (ASTSource + GPUTarget) with no GPU; sm_90's register
counts come from the bundled ptxas (-v), gfx950's from the amdhsa metadata in the assembly.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import os
import re
import subprocess
import tempfile
import time

import torch

from sgl_amd_mono.common import program

_DT = {torch.bfloat16: "bf16", torch.float8_e4m3fn: "fp8e4nv", torch.float32: "fp32", torch.int32: "i32",
       torch.int64: "i64", torch.uint8: "u8", torch.float16: "fp16"}
TARGETS = {"gfx950": ("hip", "gfx950", 64), "gfx942": ("hip", "gfx942", 64), "sm_90": ("cuda", 90, 32)}


def signature(fn, kwargs: dict) -> tuple[dict, dict]:
    """Triton's AOT signature of a kernel called with `kwargs` (every argument by name): constexpr
    parameters take their values; tensors, ints and floats their types."""
    sig, consts = {}, {}
    for p in fn.params:
        a = kwargs[p.name] if p.name in kwargs or p.default is inspect.Parameter.empty else p.default
        if p.is_constexpr or a is None:  # None: a pointer the kind does not pass (read under a constexpr off)
            sig[p.name] = "constexpr"
            consts[p.name] = a
        elif isinstance(a, torch.Tensor):
            sig[p.name] = "*" + _DT[a.dtype]
        elif isinstance(a, bool):
            sig[p.name] = "i1"
        elif isinstance(a, int):
            sig[p.name] = "i64" if abs(a) >= 2**31 else "i32"
        elif isinstance(a, float):
            sig[p.name] = "fp32"
        else:
            raise ValueError(f"argument {p.name} of type {type(a).__name__} has no Triton signature type")
    return sig, consts


def divisibility(fn, kwargs: dict) -> dict:
    """The JIT's specialization: tensors (16-byte aligned allocations) and ints divisible by 16 get
    tt.divisibility 16, so the AOT build vectorizes and pipelines loads as the device build does; the
    kernel's do_not_specialize arguments get none."""
    attrs = {}
    for i, p in enumerate(fn.params):
        a = kwargs.get(p.name, p.default)
        if p.is_constexpr or p.do_not_specialize:
            continue
        if isinstance(a, torch.Tensor) or (isinstance(a, int) and not isinstance(a, bool) and a % 16 == 0 and a != 0):
            attrs[(i,)] = [["tt.divisibility", 16]]
    return attrs


def _ptxas_usage(ptx: str) -> dict:
    from triton.backends.nvidia.compiler import get_ptxas

    ptxas = get_ptxas(90).path
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "k.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        r = subprocess.run([ptxas, "-v", "--gpu-name=sm_90a", src, "-o", os.path.join(d, "k.o")],
                           capture_output=True, text=True)
    txt = r.stdout + r.stderr
    regs = re.search(r"Used (\d+) registers", txt)
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", txt)
    stack = re.search(r"(\d+) bytes stack frame", txt)
    return {"regs": int(regs.group(1)) if regs else -1, "spill_bytes": int(spill.group(1)) if spill else -1,
            "stack": int(stack.group(1)) if stack else -1}


def _amd_usage(amdgcn: str) -> dict:
    get = lambda pat: int(m.group(1)) if (m := re.search(pat, amdgcn)) else -1  # noqa: E731
    return {"vgprs": get(r"\.vgpr_count:\s+(\d+)"), "sgprs": get(r"\.sgpr_count:\s+(\d+)"),
            "vgpr_spill": get(r"\.vgpr_spill_count:\s+(\d+)"), "sgpr_spill": get(r"\.sgpr_spill_count:\s+(\d+)"),
            "scratch": get(r"ScratchSize:\s+(\d+)")}


def compile_one(target: str, *, geo, tp: int, width: int, kv_dtype, n_programs: int, num_warps: int = 0,
                tiles=None, kind: str = "shared", options=None) -> dict:
    """num_warps 0: the tiles' (8 at one program per SM, 4 at two). Also returns the compiled kernel as
    out["kernel"] (its asm: ptx / cubin, or amdgcn / hsaco)."""
    import dataclasses as dc

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from sgl_amd_mono.backends.triton import kinds
    from sgl_amd_mono.backends.triton.tiles import Tiles
    from sgl_amd_mono.common.launch import LaunchOptions
    from sgl_amd_mono.glm53 import launch_inputs as li
    from sgl_amd_mono.glm53.kinds.dims import KV_DTYPES
    from sgl_amd_mono.glm53.layer import layer_tensors

    aw, mw = li.meta_weights(geo, tp=tp)
    tiles = tiles or Tiles().for_target(target)
    num_warps = num_warps or tiles.num_warps
    options = dc.replace(options or LaunchOptions(), placement="persistent", n_programs=n_programs)
    plan = kinds.plan(kind, geo, tp=tp, width=width, kv_dtype=kv_dtype, device="meta", options=options, tiles=tiles)
    layer = plan.bind({**plan.example_weights(), **layer_tensors(aw, mw)})  # SGLang's strides where it has them
    st = {**plan.example_step(), **vars(li.meta_step(geo, width=width, context=geo.index_topk * 2, kv_dtype=kv_dtype))}
    backend, arch, warp = TARGETS[target]
    kw = plan.kernel_args(layer, st, timer=backend == "cuda")
    fn = plan.kind.kernel
    sig, consts = signature(fn, kw)
    t = time.time()
    attrs = divisibility(fn, kw)
    k = triton.compile(ASTSource(fn, sig, consts, attrs), target=GPUTarget(backend, arch, warp),
                       options={"num_warps": num_warps, **tiles.compile_options()})
    out = {"kind": kind, "target": target, "tp": tp, "width": width, "kv": KV_DTYPES[kv_dtype],
           "num_warps": num_warps, "grid": n_programs, **tiles.compile_options(),
           "compile_s": round(time.time() - t, 1), "smem": k.metadata.shared}
    out.update(_ptxas_usage(k.asm["ptx"]) if backend == "cuda" else _amd_usage(k.asm["amdgcn"]))
    if backend == "hip":  # can the grid (n_programs on n_programs / progs_per_sm CUs) all be resident?
        out["resident"] = program.resident_programs_amd(
            n_cu=n_programs // tiles.progs_per_sm, vgprs=out["vgprs"], waves_per_program=num_warps,
            lds_bytes=out["smem"], lds_per_cu=program.AMD_LDS_PER_CU[target])
    code = k.asm["cubin"] if backend == "cuda" else k.asm["hsaco"]  # the code object's bytes
    out["sha"] = hashlib.sha256(code if isinstance(code, bytes) else code.encode()).hexdigest()[:12]
    out["kernel"] = k
    return out


def memory_report(geo, *, kind: str = "shared", tp: int = 8, widths=(1, 2, 4, 8), layers: int = 75,
                  n_programs: int = 132) -> dict:
    """Bytes of launch buffers (scratch, outputs, sync, error, trace and task-count words) a server holds for
    `layers` layers of `kind` at `widths`: one plan a width shared by every layer ("after"), against one launch
    instance a layer and width, each with its own buffers of the same layout ("before")."""
    import torch

    from sgl_amd_mono.backends.triton import kinds
    from sgl_amd_mono.backends.triton.tiles import Tiles
    from sgl_amd_mono.common.launch import LaunchOptions

    per_width = {}
    for w in widths:
        plan = kinds.plan(kind, geo, tp=tp, width=w, kv_dtype=torch.bfloat16, device="meta",
                          options=LaunchOptions(n_programs=n_programs), tiles=Tiles())
        outs = sum(t.numel() * t.element_size() for t in plan.out.values())
        per_width[w] = plan.scratch_bytes() + outs + plan.sync.nbytes()
    after = sum(per_width.values())
    return {"per_width": per_width, "before": layers * after, "after": after, "layers": layers}


def main(argv=None):
    from sgl_amd_mono.backends.triton.tiles import Tiles
    from sgl_amd_mono.glm53 import launch_inputs as li

    p = argparse.ArgumentParser()
    p.add_argument("--targets", nargs="+", default=["gfx950", "sm_90"])
    p.add_argument("--tp", type=int, nargs="+", default=[8])
    p.add_argument("--widths", type=int, nargs="+", default=[1, 8])
    p.add_argument("--kv", nargs="+", default=["bf16"])
    p.add_argument("--tiny", action="store_true", help="the tiny CI geometry instead of GLM-5.3")
    p.add_argument("--programs", type=int, default=0,
                   help="SMs/CUs (default: 256 for gfx950, 132 for sm_90); grid = this x progs_per_sm")
    p.add_argument("--spec", default="", help="Tiles fields over the target's defaults, 'warps=4,stages=2'")
    p.add_argument("--variants", nargs="+", default=["baseline"], help="backends.triton.tiles.VARIANTS names")
    p.add_argument("--kind", default="shared", help="the launch kind (backends.triton.kinds.KINDS)")
    p.add_argument("--memory", type=int, default=0, metavar="LAYERS",
                   help="only report the launch buffers LAYERS layers hold at --widths (one plan a width vs one a layer)")
    a = p.parse_args(argv)
    geo = li.tiny_geometry() if a.tiny else li.glm53_geometry()
    if a.memory:
        for tp in a.tp:
            m = memory_report(geo, kind=a.kind, tp=tp, widths=tuple(a.widths), layers=a.memory)
            print(f"{a.kind} tp{tp}, {a.memory} layers x widths {a.widths}: per width "
                  + ", ".join(f"w{w} {b / 2**20:.2f} MiB" for w, b in m["per_width"].items())
                  + f"; one launch a layer and width {m['before'] / 2**20:.1f} MiB, one plan a width "
                  f"{m['after'] / 2**20:.1f} MiB", flush=True)
        return []
    rows = []
    for target in a.targets:
        for tp in a.tp:
            for w in a.widths:
                for kv in a.kv:
                    kvd = torch.bfloat16 if kv == "bf16" else torch.float8_e4m3fn
                    for var in a.variants:
                        tiles = Tiles().for_target(target).variant(var)
                        if a.spec:
                            tiles = tiles.with_spec(a.spec)
                        n = (a.programs or (256 if target.startswith("gfx") else 132)) * tiles.progs_per_sm
                        r = compile_one(target, geo=geo, tp=tp, width=w, kv_dtype=kvd, n_programs=n, tiles=tiles,
                                        kind=a.kind)
                        r.pop("kernel")
                        r = {"variant": var, **r}
                        rows.append(r)
                        print(" ".join(f"{k}={v}" for k, v in r.items()), flush=True)
    return rows


if __name__ == "__main__":
    main()
