"""Warm Triton's on-disk cache for launch builds in parallel processes (the GPU scripts then hit the cache
instead of compiling one variant after another).

python test/kernels/glm53/precompile.py [--kind shared] --jobs 16 --builds '[KIND:]SPEC|WIDTH|KV|SKIP_MASK|SKIP_ARRIVE|TRACE|TP|CTX|EMU|LOCAL' ...
(a build's KIND: prefix overrides --kind, so one pool warms every kind of a whole step; EMU 1: an emulated rank's
build, `tp_emulate`'s grid and tiles, for check_layer.py --tp-emulate TP; with LOCAL 1 the same rank's build without
the pushes (`LaunchOptions.local_partials`), the push-free half of time_layers.py --tp-emulate TP)
Each build: a plan (its options the kind's for steps of CTX keys, default 8192, as the scripts build them), and
its first bind of uninitialised CUDA weights with the real shapes and strides, which compiles exactly what the
scripts' binds compile (same arguments, same cache key). Prints one line a build
with its compile seconds.
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing as mp
import sys
import time


def _views_of_one_buffer(tensors: dict) -> dict:
    """CUDA tensors of the given (meta) tensors' shapes, strides and dtypes, all views of one uninitialised buffer
    as large as the largest of them: a compile reads only their dtypes, strides and 16-byte alignment, and the
    TP1 MoE weights (17 GB a layer) as separate buffers ran 14 parallel builds out of the H200's memory."""
    import torch

    def extent(t):  # bytes from the first element to one past the last
        return (1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()) if n)) * t.element_size()

    ts = {k: v for k, v in tensors.items() if isinstance(v, torch.Tensor)}
    base = torch.empty(max(map(extent, ts.values())) + 16, dtype=torch.uint8, device="cuda")
    out = dict(tensors)
    for k, t in ts.items():
        n = extent(t) // t.element_size()
        out[k] = base[: n * t.element_size()].view(t.dtype).as_strided(t.shape, t.stride())
    return out


def build_tensors(plan, geo, tp: int) -> dict:
    """Meta tensors of a build's weights as the check and timing scripts bind them: the table's contiguous weights
    (`example_weights` on the meta device) with the attention and MoE weights in SGLang's strides over them
    (`launch_inputs.meta_weights`). Equal in shapes, strides and dtypes to every kind's draw (the registry's
    `weights`, test_precompile_tensors.py), so a bind of their views compiles what the scripts' binds compile.
    Every kind binds views of one buffer: the dense kinds' own draws (the attention's full draw and a MoE draw
    they do not use) took 17-22 GB a process and ran the H100's pools out of memory."""
    from sgl_amd_mono.glm53 import launch_inputs as li
    from sgl_amd_mono.glm53.layer import layer_tensors

    ex = plan.example_weights(device="meta")
    return {**ex, **{k: v for k, v in layer_tensors(*li.meta_weights(geo, tp=tp)).items() if k in ex}}


def warm(job: tuple) -> str:
    import torch

    from sgl_amd_mono.backends.triton import kinds
    from sgl_amd_mono.backends.triton.tiles import Tiles
    from sgl_amd_mono.glm53 import launch_inputs as li

    import registry

    kind, build, deadline = job
    t0 = time.time()
    try:
        spec, width, kv, mask, skip, trace, tp, ctx, emu, local = (build.split("|") + [""] * 10)[:10]
        width, tp, ctx = int(width or 1), int(tp or 8), int(ctx or 8192)
        kvd = torch.float8_e4m3fn if kv == "fp8" else torch.bfloat16
        geo = li.glm53_geometry()
        opts = dataclasses.replace(registry.get(kind).options(ctx), skip_mask=int(mask or 0), skip_arrive=int(skip or -1),
                                   deadline_s=0.05 if skip else deadline, trace=bool(int(trace or 0)))
        tiles = Tiles().with_spec(spec)
        if not int(emu or 0):  # one rank alone at its shard, as the check and timing scripts build it
            opts = registry.rank_alone(opts, tp)
        else:
            import tp_emulate

            tiles = tp_emulate.rank_tiles(tiles, kind, geo, tp=tp, width=width)
            opts = tp_emulate.rank_options(dataclasses.replace(opts, local_partials=bool(int(local or 0))), tp, tiles)
        plan = kinds.plan(kind, geo, tp=tp, width=width, kv_dtype=kvd, device="cuda", options=opts, tiles=tiles)
        plan.bind(_views_of_one_buffer(build_tensors(plan, geo, tp)))
        r = plan.resources
        return (f"precompiled {kind} '{build}' in {time.time() - t0:.1f} s: regs {r['n_regs']} spills {r['n_spills']} "
                f"smem {r['smem']} hash {r['hash']}")
    except Exception as e:  # noqa: BLE001 (reported, the caller's run goes on and compiles itself)
        return f"precompile {kind} '{build}' FAILED after {time.time() - t0:.1f} s: {type(e).__name__}: {e}"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kind", default="shared")
    p.add_argument("--builds", nargs="+", required=True)
    p.add_argument("--jobs", type=int, default=16)
    p.add_argument("--deadline", type=float, default=2.0,
                   help="the wait deadline of the run to warm (s): a deadline past ~2.1 s makes the timer bound a 64-bit "
                        "argument, another compiled signature (check_step: 10; the check scripts: 2)")
    a = p.parse_args()
    t = time.time()
    builds = list(dict.fromkeys(a.builds))  # each once
    ctx = mp.get_context("spawn")
    jobs = [(*(b.split(":", 1) if ":" in b else (a.kind, b)), a.deadline) for b in builds]
    with ctx.Pool(min(a.jobs, len(builds))) as pool:
        for line in pool.imap_unordered(warm, jobs):
            print(line, flush=True)
    print(f"precompile: {len(builds)} builds in {time.time() - t:.1f} s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
