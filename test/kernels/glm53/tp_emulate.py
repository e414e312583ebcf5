"""Emulated TP ranks on one GPU: R ranks of one launch kind and width as R concurrent launches on R streams, each its
own plan (its weights shard, scratch and sync words; a grid of SMs // R programs), their peer buffers one allocation
of this GPU's memory (`common/peer.emulated`), exchanging through the same push protocol as real ranks
(`backends/triton/exchange.py`). Each rank builds exactly a real rank's launch (the same tile resolution as on the
whole GPU: `rank_tiles`), with 1 / R of the programs.

What emulation cannot show: NVLink's latency and bandwidth (a push lands in this GPU's L2, not a peer's HBM), separate
processes (one CUDA context and address space), and a rank's speed on a whole GPU (each has 1 / R of the SMs). And
concurrent kernels are allowed, not guaranteed: where the R launches do not co-run, the waits' deadline turns the
stall into an error word naming the stage and the peer (`../shared/examples/rank_emulation_probe.py` saw 2 of 3
long runs at R = 8 stall).

GPU only: on a CPU the ranks are processes (`test/unit/test_tp_launch.py`), since Triton's interpreter cannot run two
launches at once in one process (seen: its threads fail at random with "_semantic argument must be provided").

Used by `check_layer.py --tp-emulate R`, `time_layers.py --tp-emulate R` and `precompile.py` (builds of field EMU 1).
"""

from __future__ import annotations

import dataclasses
import time

import torch

from sgl_amd_mono.backends.triton import kinds
from sgl_amd_mono.common import guard, peer


def rank_tiles(tiles, kind: str, geo, *, tp: int, width: int):
    """`tiles` with the grid-resolved fields (MoE down's columns, up's k parts) as a whole GPU's grid resolves them,
    so a rank of SMs // R programs runs the same tasks as a real rank (more a program)."""
    full = tiles.resolve(geo, tp=tp, width=width, n_programs=sms() * tiles.progs_per_sm, kind=kind)
    return dataclasses.replace(tiles, dcw=full.dcw, ks_u=full.ks_u)


def sms() -> int:
    return torch.cuda.get_device_properties(0).multi_processor_count


def rank_options(options, tp: int, tiles):
    """A rank's build options: SMs // R programs (times the tiles' programs a SM)."""
    return dataclasses.replace(options, n_programs=(sms() // tp) * tiles.progs_per_sm)


class Group:
    """R emulated ranks of one kind and width: `plans[r]` (rank r's plan), peer buffers attached, one stream a
    rank. `run` launches every rank's layer on its step, each on its stream, joined back to the caller's stream
    (capturable: a graph forks and joins the streams)."""

    def __init__(self, kind: str, geo, *, tp: int, width: int, kv_dtype, options, tiles):
        t = rank_tiles(tiles, kind, geo, tp=tp, width=width)
        opts = rank_options(options, tp, t)
        self.plans = [kinds.plan(kind, geo, tp=tp, width=width, kv_dtype=kv_dtype, device="cuda", options=opts,
                                 tiles=t, rank=r) for r in range(tp)]
        for p, pb in zip(self.plans, peer.emulated(tp, self.plans[0].peer_nbytes, "cuda")):
            p.attach_peers(pb)
        self.streams = [torch.cuda.Stream() for _ in range(tp)]
        self.tp = tp

    def bind(self, rank_weights: list, *, launch_id: int, tensors) -> list:
        return [p.bind(tensors(w), launch_id=launch_id) for p, w in zip(self.plans, rank_weights)]

    def run(self, layers: list, steps: list, *, hold: int = -1, hold_s: float = 0.0) -> list:
        """Every rank's launch on its stream; hold: that rank's stream first sleeps hold_s (a rank held back)."""
        cur = torch.cuda.current_stream()
        outs = []
        for r, (p, layer, step, s) in enumerate(zip(self.plans, layers, steps, self.streams)):
            s.wait_stream(cur)
            with torch.cuda.stream(s):
                if r == hold:
                    torch.cuda._sleep(int(hold_s * clock_hz()))
                outs.append(p.run(layer, step))
        for s in self.streams:
            cur.wait_stream(s)
        return outs

    def errors(self) -> list:
        """Each rank's error word described (None where its launches ended healthy); synchronises."""
        out = []
        for p in self.plans:
            e = guard.read_error(p.sync.err)
            out.append(p.describe_error(e) if e is not None else None)
        return out

    def reset(self) -> None:
        for p in self.plans:
            p.reset_sync()
        torch.cuda.synchronize()

    def compiled_variants(self):
        return self.plans[0].compiled_variants()


_CLOCK: list = []


def clock_hz() -> float:
    """This GPU's SM clock while busy, measured once (torch.cuda._sleep counts cycles)."""
    if not _CLOCK:
        torch.cuda.synchronize()
        t = time.perf_counter()
        torch.cuda._sleep(200_000_000)
        torch.cuda.synchronize()
        _CLOCK.append(200_000_000 / (time.perf_counter() - t))
    return _CLOCK[0]
