"""The TP group a rank's launches exchange their partials over (TP > 1): SGLang's TP group read once at build, the
build's outcome agreed by every rank, and one peer buffer a plan allocated and attached on every rank or on none.

SGLang's `GroupCoordinator` holds two groups of the same ranks: the device group (NCCL / RCCL: torch's symmetric
memory rendezvous over it) and the CPU group (gloo: IPC handles, file paths and every rank's setup report travel
over it, so a report needs no device stream). Every SGLang name read here is listed in `sglang_reads.py`.

Peer backends (`common/peer.py`), by the plans' device: "file" on a CPU host (Triton's interpreter: tests), else
`SGLANG_AMD_MONO_PEERS` ("cuda_ipc", the default: CUDA IPC handles, HIP IPC on ROCm through torch's same reductions;
or "symmetric": torch's symmetric memory).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any, Iterable

import torch

logger = logging.getLogger(__name__)

PEERS_ENV = "SGLANG_AMD_MONO_PEERS"
GPU_PEER_BACKENDS = ("cuda_ipc", "symmetric")


@dataclasses.dataclass(frozen=True)
class TpGroup:
    """One rank's view of its TP group."""

    rank: int  # this rank in the group (SGLang's rank_in_group): the launches' rank
    size: int  # ranks in the group
    device_group: Any  # torch.distributed ProcessGroup on the device (NCCL / RCCL; gloo on a CPU host)
    cpu_group: Any  # torch.distributed ProcessGroup, gloo


def sglang_tp_group(tp: int) -> TpGroup:
    """This rank's TP group from SGLang's parallel state; ValueError if its size is not `tp` (the shards' TP size)."""
    from sglang.srt.distributed.parallel_state import get_tp_group

    g = get_tp_group()
    if int(g.world_size) != tp:
        raise ValueError(f"SGLang's TP group has {g.world_size} ranks, the model's shards are cut for TP {tp}")
    return TpGroup(rank=int(g.rank_in_group), size=int(g.world_size), device_group=g.device_group,
                   cpu_group=g.cpu_group)


def peer_backend(device, env=None) -> str:
    """The peer backend for plans on `device`: "file" on a CPU host, else SGLANG_AMD_MONO_PEERS (default "cuda_ipc");
    ValueError naming a value that is not one."""
    if torch.device(device).type == "cpu":
        return "file"
    name = (os.environ if env is None else env).get(PEERS_ENV, "cuda_ipc")
    if name not in GPU_PEER_BACKENDS:
        raise ValueError(f"{PEERS_ENV}={name!r} is not one of {list(GPU_PEER_BACKENDS)}")
    return name


def agree(group: TpGroup, why: str, *, what: str) -> None:
    """Every rank's outcome of `what` ("" where it worked) gathered over the CPU group: RuntimeError on every rank
    naming each rank that failed and why, so no rank goes on to a collective its peers will never join."""
    import torch.distributed as dist

    reports: list = [None] * group.size
    dist.all_gather_object(reports, (group.rank, why), group=group.cpu_group)
    failed = [f"rank {r}: {w}" for r, w in reports if w]
    if failed:
        raise RuntimeError(f"{what} failed on {len(failed)} of {group.size} ranks (every rank stops): "
                           + "; ".join(failed))


def attach_peer_buffers(plans: Iterable, group: TpGroup, *, device, backend: str) -> int:
    """One peer buffer a plan (`plan.peer_nbytes`), allocated over the group on every rank or none
    (`peer.allocate`) and attached (`plan.attach_peers`: checked, this rank's words zeroed), in the plans' order (the
    same on every rank). Returns the bytes allocated on this rank. The buffers are never freed while serving."""
    from sgl_amd_mono.common import peer

    plans, bufs = list(plans), []
    for plan in plans:
        if backend == "symmetric":  # its rendezvous over the device group, the reports over the CPU group
            bufs.append(peer.allocate(plan.peer_nbytes, group=group.device_group, device=device, backend=backend,
                                      report_group=group.cpu_group))
        else:  # handles (IPC handles, file paths) are Python objects: gathered over the CPU group
            bufs.append(peer.allocate(plan.peer_nbytes, group=group.cpu_group, device=device, backend=backend))
    why = ""
    try:
        for plan, buf in zip(plans, bufs):
            plan.attach_peers(buf)
        if torch.device(device).type == "cuda":
            torch.cuda.synchronize(device)
    except Exception as e:  # noqa: BLE001 (agreed below: every rank stops, naming this one)
        why = f"{type(e).__name__}: {e}"
    # attach_peers zeroed this rank's words: a peer's first push of a step must land after that on every rank, so
    # this gather (which every rank reaches only once its zeroing is done) is also the barrier
    agree(group, why, what="attaching the peer buffers")
    return sum(b.nbytes for b in bufs)
