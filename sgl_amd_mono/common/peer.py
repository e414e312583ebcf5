"""Peer buffers: one buffer a TP rank that every rank of the group can write, for the launches' cross-rank pushes.

A TP group allocates its peer buffers once, at build, and never frees them while the process runs: seed 004
(PR "PeerBuffer.close") found that freeing polled peer memory on MI355X left stale L2 lines that corrupted later
allocations, so `PeerBuffers.close` only retires a buffer (it stays in `_RETIRED` until exit).

Backends, behind one interface (`PeerBuffers`: this rank's `local` bytes, and `ptrs`, every rank's buffer address
in rank order, as the launches read it):
- "emulated": R ranks in one process on one device (`emulated(R, ...)`): one allocation, rank r's buffer its r-th
  slice; how the cross-rank protocol is proved on one GPU. What it cannot show: NVLink's latency and bandwidth
  (a push lands in the one GPU's L2), and separate processes (one CUDA context, one address space).
- "file": R processes on one host sharing one file mapping (`file_backed`): the protocol across separate,
  concurrent processes under Triton's interpreter, on CPU.
- "symmetric": torch's symmetric memory (`torch.distributed._symmetric_memory`) over the group: CUDA (IPC /
  the driver's VMM handles) and, where torch builds it, ROCm (HIP IPC). Not yet run on several GPUs.

Setup is all or nothing: every rank reports whether its allocation and mapping worked, the reports are gathered
over the group (`torch.distributed.all_gather_object`), and if any rank failed, every rank raises the same
error naming each failed rank and its reason. No rank falls back alone.
Model-independent; imports nothing from SGLang.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

import torch

_LIVE: list = []  # every peer buffer this process allocated (kept: never freed while the process runs)
_RETIRED: list = []  # closed ones, kept until exit for the same reason


@dataclasses.dataclass
class PeerBuffers:
    """One rank's view of its group's peer buffers."""

    rank: int
    size: int  # ranks in the group
    local: torch.Tensor  # [nbytes] uint8: this rank's buffer (what peers push into)
    ptrs: torch.Tensor  # [size] int64 on the device: every rank's buffer address, in rank order
    backend: str
    keep: Any = None  # the backend's handle (kept alive with the buffer)

    @property
    def nbytes(self) -> int:
        return self.local.numel()

    def close(self) -> None:
        """Retire the buffer: it stays allocated (and mapped) until the process exits (see the module doc)."""
        if self not in _RETIRED:
            _RETIRED.append(self)


def emulated(ranks: int, nbytes: int, device) -> list[PeerBuffers]:
    """`ranks` ranks' peer buffers in one allocation on one device (rank r's buffer: bytes [r * nbytes, ...))."""
    if ranks < 1 or nbytes < 1:
        raise ValueError(f"emulated peer buffers need ranks >= 1 and nbytes >= 1 (got {ranks}, {nbytes})")
    stride = -(-nbytes // 256) * 256  # each rank's buffer 256-byte aligned (the allocation's start too)
    raw = torch.zeros(ranks * stride + 256, dtype=torch.uint8, device=device)
    block = raw[(-raw.data_ptr()) % 256:][: ranks * stride]
    ptrs = torch.tensor([block.data_ptr() + r * stride for r in range(ranks)], dtype=torch.int64, device=device)
    out = [PeerBuffers(rank=r, size=ranks, local=block[r * stride: r * stride + nbytes], ptrs=ptrs,
                       backend="emulated", keep=raw) for r in range(ranks)]
    _LIVE.append(raw)
    return out


def file_backed(ranks: int, rank: int, nbytes: int, path: str) -> PeerBuffers:
    """Rank `rank`'s peer buffers in host memory shared by R processes through one file (`path`, created by the
    first): every process maps it and `ptrs` holds this process's addresses of the R buffers. CPU only: how the
    protocol runs in separate, concurrent processes under Triton's interpreter."""
    stride = -(-nbytes // 256) * 256
    block = torch.from_file(path, shared=True, size=ranks * stride, dtype=torch.uint8)
    ptrs = torch.tensor([block.data_ptr() + r * stride for r in range(ranks)], dtype=torch.int64)
    _LIVE.append(block)
    return PeerBuffers(rank=rank, size=ranks, local=block[rank * stride: rank * stride + nbytes], ptrs=ptrs,
                       backend="file", keep=block)


def _symmetric(nbytes: int, group, device) -> PeerBuffers:
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    t = symm_mem.empty(nbytes, dtype=torch.uint8, device=device)
    handle = symm_mem.rendezvous(t, group)
    t.zero_()
    ptrs = torch.tensor(list(handle.buffer_ptrs), dtype=torch.int64, device=device)
    return PeerBuffers(rank=dist.get_rank(group), size=dist.get_world_size(group), local=t, ptrs=ptrs,
                       backend="symmetric", keep=handle)


def allocate(nbytes: int, *, group, device, make: Optional[Callable[..., PeerBuffers]] = None) -> PeerBuffers:
    """This rank's peer buffers of `nbytes` over `group` (a torch.distributed process group), set up on every rank
    or on none: RuntimeError on every rank, naming each rank that failed and why. make: the backend (default
    torch's symmetric memory), (nbytes, group, device) -> PeerBuffers."""
    import torch.distributed as dist

    make = make or _symmetric
    buf, why = None, ""
    try:
        buf = make(nbytes, group, device)
        if buf.size != dist.get_world_size(group) or buf.ptrs.numel() != buf.size:
            raise RuntimeError(f"the backend mapped {buf.ptrs.numel()} buffers for a group of "
                               f"{dist.get_world_size(group)}")
    except Exception as e:  # noqa: BLE001 (reported to every rank, then raised on every rank)
        why = f"{type(e).__name__}: {e}"
    reports: list = [None] * dist.get_world_size(group)
    dist.all_gather_object(reports, (dist.get_rank(group), why), group=group)
    failed = [f"rank {r}: {w}" for r, w in reports if w]
    if failed:
        raise RuntimeError("peer buffers could not be set up on every rank (no rank falls back alone): "
                           + "; ".join(failed))
    _LIVE.append(buf)
    return buf
