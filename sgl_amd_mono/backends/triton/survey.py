"""AOT compiles of the Triton launches for gfx950 and sm_90 on a CPU: registers and spills per build key.

python -m sgl_amd_mono.backends.triton.survey [--widths 1 8] [--tp 8] [--targets gfx950 sm_90] [--tiny]
Prints one row per (target, tp, width, kv dtype): registers (VGPR/SGPR or regs), spills, scratch
or shared memory. Uses Triton's compile path (ASTSource + GPUTarget) with no GPU; sm_90's register
counts come from the bundled ptxas (-v), gfx950's from the amdhsa metadata in the assembly.
"""

from __future__ import annotations

import argparse
import hashlib
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


def signature(fn, args, meta) -> tuple[dict, dict]:
    names = fn.arg_names
    sig, consts = {}, {}
    it = iter(args)
    for name in names:
        if name in meta:
            sig[name] = "constexpr"
            consts[name] = meta[name]
            continue
        a = next(it)
        if isinstance(a, torch.Tensor):
            sig[name] = "*" + _DT[a.dtype]
        elif isinstance(a, bool):
            sig[name] = "i1"
        elif isinstance(a, int):
            sig[name] = "i64" if abs(a) >= 2**31 else "i32"
        elif isinstance(a, float):
            sig[name] = "fp32"
        else:
            raise ValueError(f"argument {name} of type {type(a).__name__} has no Triton signature type")
    return sig, consts


def divisibility(fn, args, meta) -> dict:
    """The JIT's specialization: tensors (16-byte aligned allocations) and ints divisible by 16 get
    tt.divisibility 16, so the AOT build vectorizes and pipelines loads as the device build does."""
    attrs = {}
    it = iter(args)
    for i, name in enumerate(fn.arg_names):
        if name in meta:
            continue
        a = next(it)
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
                tiles=None) -> dict:
    """num_warps 0: the tiles' (8 at one program per SM, 4 at two)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from sgl_amd_mono.backends.triton.shared_layer import shared_layer_kernel
    from sgl_amd_mono.glm53 import launch_inputs as li
    from sgl_amd_mono.glm53 import launch_shared as ls

    aw, mw = li.meta_weights(geo, tp=tp)
    tiles = tiles or ls.Tiles().for_target(target)
    num_warps = num_warps or tiles.num_warps
    L = ls.build_shared(geo, aw, mw, tp=tp, width=width, kv_dtype=kv_dtype, device="meta",
                        options=ls.LaunchOptions(placement="persistent", n_programs=n_programs),
                        tiles=tiles)
    st = li.meta_step(geo, width=width, context=geo.index_topk * 2, kv_dtype=kv_dtype)
    backend, arch, warp = TARGETS[target]
    args, meta = L.kernel_args(st.hidden, st.residual, st.cos_sin, st.kv_cache, st.out_loc, st.topk_slots,
                               timer=backend == "cuda")
    sig, consts = signature(shared_layer_kernel, args, meta)
    t = time.time()
    attrs = divisibility(shared_layer_kernel, args, meta)
    k = triton.compile(ASTSource(shared_layer_kernel, sig, consts, attrs), target=GPUTarget(backend, arch, warp),
                       options={"num_warps": num_warps, **tiles.compile_options()})
    out = {"target": target, "tp": tp, "width": width, "kv": ls.KV_DTYPES[kv_dtype],
           "num_warps": num_warps, "grid": n_programs, **tiles.compile_options(),
           "compile_s": round(time.time() - t, 1), "shared": k.metadata.shared}
    out.update(_ptxas_usage(k.asm["ptx"]) if backend == "cuda" else _amd_usage(k.asm["amdgcn"]))
    if backend == "hip":  # can the grid (n_programs on n_programs / progs_per_sm CUs) all be resident?
        out["resident"] = program.resident_programs_amd(
            n_cu=n_programs // tiles.progs_per_sm, vgprs=out["vgprs"], waves_per_program=num_warps,
            lds_bytes=out["shared"], lds_per_cu=program.AMD_LDS_PER_CU[target])
    code = k.asm["cubin"] if backend == "cuda" else k.asm["hsaco"]  # the code object's bytes
    out["sha"] = hashlib.sha256(code if isinstance(code, bytes) else code.encode()).hexdigest()[:12]
    return out


def main(argv=None):
    from sgl_amd_mono.glm53 import launch_inputs as li
    from sgl_amd_mono.glm53 import launch_shared as ls

    p = argparse.ArgumentParser()
    p.add_argument("--targets", nargs="+", default=["gfx950", "sm_90"])
    p.add_argument("--tp", type=int, nargs="+", default=[8])
    p.add_argument("--widths", type=int, nargs="+", default=[1, 8])
    p.add_argument("--kv", nargs="+", default=["bf16"])
    p.add_argument("--tiny", action="store_true", help="the tiny CI geometry instead of GLM-5.3")
    p.add_argument("--programs", type=int, default=0,
                   help="SMs/CUs (default: 256 for gfx950, 132 for sm_90); grid = this x progs_per_sm")
    p.add_argument("--spec", default="", help="Tiles fields over the target's defaults, 'warps=4,stages=2'")
    p.add_argument("--variants", nargs="+", default=["baseline"], help="launch_shared.VARIANTS names")
    a = p.parse_args(argv)
    geo = li.tiny_geometry() if a.tiny else li.glm53_geometry()
    rows = []
    for target in a.targets:
        for tp in a.tp:
            for w in a.widths:
                for kv in a.kv:
                    kvd = torch.bfloat16 if kv == "bf16" else torch.float8_e4m3fn
                    for var in a.variants:
                        tiles = ls.Tiles().for_target(target).variant(var)
                        if a.spec:
                            tiles = tiles.with_spec(a.spec)
                        n = (a.programs or (256 if target.startswith("gfx") else 132)) * tiles.progs_per_sm
                        r = compile_one(target, geo=geo, tp=tp, width=w, kv_dtype=kvd, n_programs=n, tiles=tiles)
                        r = {"variant": var, **r}
                        rows.append(r)
                        print(" ".join(f"{k}={v}" for k, v in r.items()), flush=True)
    return rows


if __name__ == "__main__":
    main()
