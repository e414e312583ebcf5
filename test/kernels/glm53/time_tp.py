"""`time_layers.py --tp-emulate R`: the cross-rank pushes' cost on one GPU, and a projection for NVLink.

For each width: R emulated ranks (`tp_emulate.Group`: R concurrent launches, SMs // R programs each) launching one
layer of the kind, in a CUDA graph, with the pushes (the build a server runs) and without them (the same build with
`LaunchOptions.local_partials`: each rank keeps its partial, no push and no cross-rank sum), in the same run; the
difference is what the exchange costs here. Emulated pushes land in this GPU's L2, not a peer's HBM over NVLink, and
each rank has 1 / R of the SMs, so these figures are reported, not held to a target (the <= 3 µs target is the
multi-GPU run's).

The projection: the bytes a rank pushes to its peers per layer (each exchange region's slot, 8-byte words, to TP - 1
peers; its own slot is a local store) over NVLink at the bandwidth NVIDIA documents for the H200 (NVLink 4, 900 GB/s
bidirectional: 450 GB/s a direction) and at the 376-380 GB/s a direction measured on H100 P2P
(`../shared/reference/anchors.md`), plus one P2P write latency an exchange (1.8-2.3 µs measured with
p2pBandwidthLatencyTest; NVIDIA documents no H200 figure; --nvlink-latency-us, default 2.0). The projection needs no
GPU: `python test/kernels/glm53/time_tp.py` prints it for every kind at TP 2 / 4 / 8 and 1-8 rows (plans on the meta
device). A benchmark, not a test.
"""

from __future__ import annotations

import dataclasses

import torch

import registry
from check_layer import fresh_caches, step_dict
from timing import graph_time_us
from tp_emulate import Group

NVLINK_DOC_GBS = 450.0  # H200 SXM NVLink 4: 900 GB/s bidirectional (NVIDIA's H200 datasheet), a direction
NVLINK_MEASURED_GBS = 378.0  # H100 P2P, measured 376-380 GB/s a direction (anchors.md: NCCL issue 1264)


def pushed_bytes(plan) -> tuple[int, int]:
    """(bytes a rank pushes to its peers a launch, exchanges a launch): every exchange region's slot, to TP - 1
    peers (the own slot is a local store)."""
    regions = plan.peer_layout.regions
    return sum(n for _, n in regions.values()) * 8 * (plan.tp - 1), len(regions)


def projection_us(nbytes: int, n_x: int, latency_us: float) -> tuple[float, float]:
    """The NVLink projection of one rank's pushes a launch (`pushed_bytes`): an exchange's P2P latency each, plus the
    bytes at the documented and at the measured bandwidth."""
    return tuple(n_x * latency_us + nbytes / (gbs * 1e3) for gbs in (NVLINK_DOC_GBS, NVLINK_MEASURED_GBS))


def projection_table(kind_names, tps, widths, latency_us: float = 2.0) -> list[str]:
    """Markdown rows of the projection for each kind, TP and width: plans on the meta device (no GPU)."""
    from sgl_amd_mono.backends.triton import kinds
    from sgl_amd_mono.backends.triton.tiles import Tiles
    from sgl_amd_mono.glm53 import launch_inputs as li

    geo = li.glm53_geometry()
    out = ["| kind | TP | rows | exchanges | KiB pushed a rank | NVLink "
           f"{NVLINK_DOC_GBS:.0f} GB/s us | NVLink {NVLINK_MEASURED_GBS:.0f} GB/s us |", "|---|---|---|---|---|---|---|"]
    for k in kind_names:
        for tp in tps:
            for w in widths:
                opts = dataclasses.replace(registry.get(k).options(8192), n_programs=1)
                plan = kinds.plan(k, geo, tp=tp, width=w, kv_dtype=torch.bfloat16, device="meta", options=opts,
                                  tiles=Tiles(), rank=0)
                nbytes, n_x = pushed_bytes(plan)
                p0, p1 = projection_us(nbytes, n_x, latency_us)
                out.append(f"| {k} | {tp} | {w} | {n_x} | {nbytes / 1024:.1f} | {p0:.2f} | {p1:.2f} |")
    return out


def time_group(kc, geo, tp, width, context, tiles, *, local_partials: bool) -> tuple[float, object]:
    weights = [kc.weights(geo, tp=tp, seed=11, device="cuda", rank=r) for r in range(tp)]
    step = kc.step(geo, width=width, context=context, kv_dtype=torch.bfloat16, seed=12, device="cuda")
    if local_partials and hasattr(step, "input_ids"):  # layer 0 without pushes reads its ids as rows of its own
        # vocab shard (the kernels' TP 1 path): ids taken into [0, V) read one row each, as the pushes' build does
        step = dataclasses.replace(step, input_ids=step.input_ids % geo.shard(tp).vocab)
    opts = dataclasses.replace(kc.options(context), local_partials=local_partials)
    g = Group(kc.name, geo, tp=tp, width=width, kv_dtype=torch.bfloat16, options=opts, tiles=tiles)
    layers = g.bind(weights, launch_id=1, tensors=kc.tensors)
    steps = [step_dict(step, fresh_caches(kc, step)) for _ in range(tp)]
    us = graph_time_us(lambda: g.run(layers, steps))
    errs = g.errors()
    if any(errs):
        raise RuntimeError(f"{kc.name} tp{tp} w{width}: {errs}")
    return us, g.plans[0]


def main(kind: str, tp: int, widths, context: int, tiles, latency_us: float) -> None:
    from sgl_amd_mono.glm53 import launch_inputs as li

    kc, geo = registry.get(kind), li.glm53_geometry()
    print(f"{kind} at TP {tp} as {tp} emulated ranks on one GPU, context {context}: each rank {torch.cuda.get_device_properties(0).multi_processor_count // tp} programs")
    rows = []
    for w in widths:
        with_push, plan = time_group(kc, geo, tp, w, context, tiles, local_partials=False)
        without, _ = time_group(kc, geo, tp, w, context, tiles, local_partials=True)
        nbytes, n_x = pushed_bytes(plan)
        proj = projection_us(nbytes, n_x, latency_us)
        rows.append((w, with_push, without, with_push - without, nbytes, n_x, *proj))
        print(f"rows {w}: {with_push:.1f} us with the pushes, {without:.1f} without (+{with_push - without:.1f}); "
              f"a rank pushes {nbytes / 1024:.1f} KiB in {n_x} exchanges a layer: NVLink projection "
              f"{proj[0]:.2f} us at {NVLINK_DOC_GBS:.0f} GB/s, {proj[1]:.2f} us at {NVLINK_MEASURED_GBS:.0f} GB/s "
              f"(+ {latency_us} us an exchange)", flush=True)
    print(f"\n{kind} at TP {tp}, {tp} emulated ranks, context {context}:")
    print("| rows | with pushes us | without us | pushes us (emulated) | KiB pushed a rank | exchanges | "
          f"NVLink {NVLINK_DOC_GBS:.0f} GB/s us | NVLink {NVLINK_MEASURED_GBS:.0f} GB/s us |")
    print("|---|---|---|---|---|---|---|---|")
    for w, a, b, c, nb, nx, p0, p1 in rows:
        print(f"| {w} | {a:.1f} | {b:.1f} | {c:+.1f} | {nb / 1024:.1f} | {nx} | {p0:.2f} | {p1:.2f} |")


if __name__ == "__main__":
    import argparse

    p = argparse.ArgumentParser(description="the NVLink projection of the cross-rank pushes (no GPU)")
    p.add_argument("--kinds", nargs="+", default=["tokens", "dense", "indexer", "shared", "tail"])
    p.add_argument("--tp", type=int, nargs="+", default=[2, 4, 8])
    p.add_argument("--widths", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--nvlink-latency-us", type=float, default=2.0)
    a = p.parse_args()
    print("\n".join(projection_table(a.kinds, a.tp, a.widths, a.nvlink_latency_us)))
