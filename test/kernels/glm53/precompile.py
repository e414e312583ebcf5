"""Warm Triton's on-disk cache for shared-launch builds in parallel processes (the GPU scripts then
hit the cache instead of compiling one variant after another).

python test/kernels/glm53/precompile.py --jobs 16 --builds 'SPEC|WIDTH|KV|SKIP_MASK|SKIP_ARRIVE|TRACE' ...
Each build: weights and step as uninitialised CUDA tensors with the real shapes and strides (no
kernel runs on the GPU), `build_shared`, then the JIT's own `warmup` with the exact arguments a
launch passes (same cache key). Prints one line a build with its compile seconds.
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing as mp
import sys
import time


def _empty_like(x):
    import torch

    if isinstance(x, torch.Tensor):
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="cuda")
    return x


def warm(build: str) -> str:
    import torch

    from sgl_amd_mono.backends.triton.shared_layer import shared_layer_kernel
    from sgl_amd_mono.glm53 import launch_inputs as li
    from sgl_amd_mono.glm53 import launch_shared as ls

    t0 = time.time()
    try:
        spec, width, kv, mask, skip, trace = (build.split("|") + [""] * 6)[:6]
        width = int(width or 1)
        kvd = torch.float8_e4m3fn if kv == "fp8" else torch.bfloat16
        geo = li.glm53_geometry()
        aw, mw = li.meta_weights(geo, tp=8)
        aw = dataclasses.replace(aw, **{f.name: _empty_like(getattr(aw, f.name)) for f in dataclasses.fields(aw)})
        mw = dataclasses.replace(mw, **{f.name: _empty_like(getattr(mw, f.name)) for f in dataclasses.fields(mw)})
        st = li.meta_step(geo, width=width, context=8192, kv_dtype=kvd)
        st = dataclasses.replace(st, **{f.name: _empty_like(getattr(st, f.name)) for f in dataclasses.fields(st)})
        opts = ls.LaunchOptions(skip_mask=int(mask or 0), skip_arrive=int(skip or -1),
                                deadline_s=0.05 if skip else 2.0, trace=bool(int(trace or 0)))
        L = ls.build_shared(geo, aw, mw, tp=8, width=width, kv_dtype=kvd, device="cuda", options=opts,
                            tiles=ls.Tiles().with_spec(spec))
        args, meta = L.kernel_args(st.hidden, st.residual, st.cos_sin, st.kv_cache, st.out_loc, st.topk_slots)
        k = shared_layer_kernel.warmup(*args, grid=(L.n_programs,), num_warps=L.num_warps, **meta)
        if hasattr(k, "_init_handles"):
            k._init_handles()
        return f"precompiled '{build}' in {time.time() - t0:.1f} s: regs {k.n_regs} spills {k.n_spills} shared {k.metadata.shared}"
    except Exception as e:  # noqa: BLE001 (reported, the caller's run goes on and compiles itself)
        return f"precompile '{build}' FAILED after {time.time() - t0:.1f} s: {type(e).__name__}: {e}"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--builds", nargs="+", required=True)
    p.add_argument("--jobs", type=int, default=16)
    a = p.parse_args()
    t = time.time()
    with mp.get_context("spawn").Pool(min(a.jobs, len(a.builds))) as pool:
        for line in pool.imap_unordered(warm, a.builds):
            print(line, flush=True)
    print(f"precompile: {len(a.builds)} builds in {time.time() - t:.1f} s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
