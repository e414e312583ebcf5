"""A/B of the shared launch before and after its split into a stage table and stage functions (issue "one
engine for every launch kind"): the same inputs through either tree's API, for digests of every output and
for µs per launch. Run once with each tree on PYTHONPATH (commit a6c80a3 has `glm53.launch_shared`, later
trees `backends.triton.kinds`); it finds which one it has.

python test/kernels/glm53/ab_split.py digests OUT.txt
python test/kernels/glm53/ab_split.py time [--reps 3]
The weights are drawn here, as a6c80a3's `launch_inputs.random_weights(tp=8)` drew them (a TP8 shard drawn
directly), so both trees see the same tensors; steps come from `launch_inputs.random_step` (unchanged).
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import graph_time_us  # noqa: E402

from sgl_amd_mono.common import numerics as nm  # noqa: E402
from sgl_amd_mono.glm53 import launch_inputs as li  # noqa: E402
from sgl_amd_mono.glm53.layer import AttentionWeights, MoeWeights  # noqa: E402

FP8 = torch.float8_e4m3fn
NAMES = {"out": "out", "residual": "residual_out", "o": "o", "ids": "expert_ids", "weights": "expert_weights"}


def weights_tp8(geo, seed, device="cuda"):
    """a6c80a3's random_weights(geo, tp=8, seed=seed), drawn here."""
    g = torch.Generator(device=device).manual_seed(seed)
    s = geo.shard(8)
    h, d = s.heads, geo.hidden

    def lin(n, k):
        w = (torch.randn(n, k, generator=g, device=device) * 0.5).to(FP8)
        return w, (torch.rand(-(-n // 128), k // 128, generator=g, device=device) + 0.5) / (0.5 * k**0.5)

    norm = lambda n: (1.0 + 0.1 * torch.randn(n, generator=g, device=device)).to(torch.bfloat16)  # noqa: E731
    qkv_a, qkv_a_s = lin(geo.qkv_a_out, d)
    q_b, q_b_s = lin(h * geo.qk_head, geo.q_lora)
    o_proj, o_proj_s = lin(d, h * geo.v_head)
    w_kc = (torch.randn(h, geo.kv_lora, geo.qk_nope, generator=g, device=device) / geo.qk_nope**0.5).to(torch.bfloat16)
    w_vc = (torch.randn(h, geo.v_head, geo.kv_lora, generator=g, device=device) / geo.kv_lora**0.5).to(torch.bfloat16)
    attn = AttentionWeights(input_norm=norm(d), qkv_a=qkv_a, qkv_a_s=qkv_a_s, q_a_norm=norm(geo.q_lora),
                            kv_a_norm=norm(geo.kv_lora), q_b=q_b, q_b_s=q_b_s, w_kc=w_kc.transpose(1, 2),
                            w_vc=w_vc.transpose(1, 2), o_proj=o_proj, o_proj_s=o_proj_s, post_norm=norm(d))
    e, i = geo.n_routed + 1, s.moe_inter
    kw = dict(generator=g, device=device)
    w13 = torch.cat([(torch.randn(1, 2 * i, d, **kw) * 0.5).to(FP8) for _ in range(e)])
    w13_s = (torch.rand(e, 2 * i // 128, d // 128, **kw) + 0.5) / (0.5 * d**0.5)
    w2 = torch.cat([(torch.randn(1, d, i, **kw) * 0.5).to(FP8) for _ in range(e)])
    w2_s = (torch.rand(e, d // 128, i // 128, **kw) + 0.5) / (0.5 * i**0.5)
    moe = MoeWeights(gate=(torch.randn(geo.n_routed, d, **kw) / d**0.5).to(torch.bfloat16),
                     bias=0.1 * torch.randn(geo.n_routed, **kw), w13=w13, w13_s=w13_s, w2=w2, w2_s=w2_s)
    return attn, moe


class Launches:
    """Layers of the shared kind at one width through whichever API this tree has."""

    def __init__(self, geo, layers, width, kv_dtype):
        try:
            from sgl_amd_mono.glm53 import launch_shared as ls  # a6c80a3
        except ImportError:
            ls = None
        self.api = "a6c80a3 (launch_shared)" if ls else "split (kinds.plan)"
        if ls:
            self.Ls = [ls.build_shared(geo, aw, mw, tp=8, width=width, kv_dtype=kv_dtype, device="cuda")
                       for aw, mw in layers]
            self.calls = [lambda st, kv, L=L: {NAMES[k]: v for k, v in L(st.hidden, st.residual, st.cos_sin, kv,
                                                                         st.out_loc, st.topk_slots).items()}
                          for L in self.Ls]
        else:
            from sgl_amd_mono.backends.triton import kinds
            from sgl_amd_mono.backends.triton.tiles import Tiles
            from sgl_amd_mono.glm53.layer import layer_tensors

            from sgl_amd_mono.common.launch import LaunchOptions

            plan = kinds.plan("shared", geo, tp=8, width=width, kv_dtype=kv_dtype, device="cuda", tiles=Tiles(),
                              options=LaunchOptions(local_partials=True))  # one rank alone at the TP8 shard
            bound = [plan.bind(layer_tensors(aw, mw), launch_id=i) for i, (aw, mw) in enumerate(layers)]
            self.calls = [lambda st, kv, b=b: plan.run(b, dict(vars(st), kv_cache=kv)) for b in bound]


def digests(path):
    geo = li.glm53_geometry()
    with open(path, "w") as f:
        for width, ctx, kv in [(1, 8192, torch.bfloat16), (2, 8192, torch.bfloat16), (4, 8192, FP8),
                               (8, 8192, torch.bfloat16), (8, 131072, FP8)]:
            layers = [weights_tp8(geo, seed=200 + width)]
            st = li.random_step(geo, width=width, context=ctx, kv_dtype=kv, seed=300 + width, device="cuda",
                                mtp=width > 1, pad_rows=1 if width > 1 else 0)
            L = Launches(geo, layers, width, kv)
            cache = st.kv_cache.clone()
            out = L.calls[0](st, cache)
            torch.cuda.synchronize()
            tag = f"w{width} ctx{ctx} {'fp8' if kv == FP8 else 'bf16'}"
            for k in sorted(out):
                f.write(f"{tag} {k} {nm.digest(out[k])}\n")
            f.write(f"{tag} kv_cache {nm.digest(cache[st.out_loc[: st.live]])}\n")
            print(f"{L.api}: {tag} done", flush=True)


def timing(reps):
    geo = li.glm53_geometry()
    layers = [weights_tp8(geo, seed=10 + i) for i in range(4)]
    for width in (1, 2, 4, 8):
        steps = [li.random_step(geo, width=width, context=8192, kv_dtype=torch.bfloat16, seed=50 + i, device="cuda")
                 for i in range(4)]
        kvs = [st.kv_cache.clone() for st in steps]
        L = Launches(geo, layers, width, torch.bfloat16)
        run = lambda: [c(st, kv) for c, st, kv in zip(L.calls, steps, kvs)]  # noqa: E731
        us = [graph_time_us(run) / 4 for _ in range(reps)]
        print(f"{L.api}: rows {width} ctx 8192: " + " / ".join(f"{u:.1f}" for u in us) + " us a launch", flush=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["digests", "time"])
    p.add_argument("out", nargs="?", default="digests.txt")
    p.add_argument("--reps", type=int, default=3)
    a = p.parse_args()
    digests(a.out) if a.mode == "digests" else timing(a.reps)
