"""Peer buffers: one buffer a TP rank that every rank of the group can write, for the launches' cross-rank pushes.

A TP group allocates its peer buffers once, at build, and never frees them while the process runs: seed 004
(PR "PeerBuffer.close") found that freeing polled peer memory on MI355X left stale L2 lines that corrupted later
allocations, so `PeerBuffers.close` only retires a buffer (it stays in `_RETIRED` until exit).

Backends, behind one interface (`PeerBuffers`: this rank's `local` bytes, and `ptrs`, every rank's buffer address
in rank order, as the launches read it; `allocate(nbytes, group=, device=, backend=)` sets one up over a group):
- "emulated": R ranks in one process on one device (`emulated(R, ...)`): one allocation, rank r's buffer its r-th
  slice; how the cross-rank protocol is proved on one GPU. What it cannot show: NVLink's latency and bandwidth
  (a push lands in the one GPU's L2), and separate processes (one CUDA context, one address space).
- "symmetric": torch's symmetric memory (`torch.distributed._symmetric_memory`) over the group's device (NCCL)
  group: CUDA (the driver's VMM handles) and, where torch builds it, ROCm. Not yet run on several GPUs; two
  processes on one H200 are refused by torch ("detected allocations from overlapping devices from different ranks",
  test/kernels/glm53/results/tp2_h200_tp_step.log), on every rank.
- "cuda_ipc": each rank allocates its own zeroed buffer on its device and shares its IPC handle with the group
  (`torch.multiprocessing.reductions.reduce_tensor`, gathered with `all_gather_object` over a CPU / gloo group);
  each rank opens every other's handle with its own GPU current (`_ipc_open`), which maps the peer's buffer into
  this process (from another GPU: with peer access enabled by the driver; on the same GPU plainly, so several
  processes on one GPU work too). On ROCm torch's same reductions call HIP's IPC (hipIpcGetMemHandle /
  hipIpcOpenMemHandle), so this backend is the HIP IPC one there: written for it, not run on an AMD GPU (none
  here). Run so far: two processes on one H200 (tp_step_h200.sh, results/tp2_h200_summary.md: a step of every
  kind at TP 2, 20 graph replays, a held rank); on several GPUs: not yet.
- "file": R processes on one host sharing host memory through files (CPU, Triton's interpreter): each rank's
  buffer a file of its own, exchanged as "cuda_ipc" exchanges handles (a path is the handle); `file_backed` is the
  older one-file form the launch tests share through a folder.

Setup is all or nothing: every rank reports whether its allocation and mapping worked, the reports are gathered
over the group (`torch.distributed.all_gather_object`, over `report_group` where the backend's group is a device
group), and if any rank failed, every rank raises the same error naming each failed rank and its reason. No rank
falls back alone. A backend that exchanges handles (`exchanged`) gathers every rank's export, failed or not, before
any rank opens one, so a rank that fails to export never leaves the others waiting.
Model-independent; imports nothing from SGLang.
"""

from __future__ import annotations

import dataclasses
import os
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


def exchanged(nbytes: int, group, device, *, export: Callable, open_: Callable, backend: str) -> PeerBuffers:
    """Peer buffers by handle exchange over `group` (a CPU-capable process group): export(nbytes, device) -> (this
    rank's zeroed buffer [nbytes] uint8, a picklable handle); every rank's (handle, reason) gathered, failed or not;
    then open_(handle, device) -> a peer's buffer mapped here, for every other rank. RuntimeError on a failed
    export (this rank's reason, or the ranks that shared none) or open."""
    import torch.distributed as dist

    rank, size = dist.get_rank(group), dist.get_world_size(group)
    local, handle, why = None, None, ""
    try:
        local, handle = export(nbytes, device)
    except Exception as e:  # noqa: BLE001 (gathered first: a rank that raised here must still join the exchange)
        why = f"{type(e).__name__}: {e}"
    shared: list = [None] * size
    # every rank joins this gather whatever its export did; one that skipped it would leave its peers waiting
    dist.all_gather_object(shared, (handle, why), group=group)
    if why:
        raise RuntimeError(f"could not export this rank's buffer: {why}")
    missing = [r for r, (h, _) in enumerate(shared) if h is None]
    if missing:
        raise RuntimeError(f"rank(s) {missing} shared no handle")
    views = []
    for r, (h, _) in enumerate(shared):
        if r == rank:
            views.append(local)
            continue
        try:
            views.append(open_(h, device))
        except Exception as e:  # noqa: BLE001 (reported by allocate to every rank)
            raise RuntimeError(f"could not open rank {r}'s handle: {type(e).__name__}: {e}") from e
        if views[-1].numel() < nbytes:
            raise RuntimeError(f"rank {r}'s buffer holds {views[-1].numel()} bytes, not {nbytes}")
    ptrs = torch.tensor([v.data_ptr() for v in views], dtype=torch.int64, device=device)
    return PeerBuffers(rank=rank, size=size, local=local[:nbytes], ptrs=ptrs, backend=backend, keep=views)


def _padded(nbytes: int) -> int:
    return -(-nbytes // 256) * 256


def _ipc_export(nbytes: int, device):
    from torch.multiprocessing.reductions import reduce_tensor

    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"cuda_ipc peer buffers live on a GPU; the device is {device}")
    local = torch.zeros(_padded(nbytes), dtype=torch.uint8, device=device)
    torch.cuda.synchronize(device)  # zeroed before any peer maps it and pushes
    return local, reduce_tensor(local)  # (rebuild function, its arguments): CUDA or HIP IPC handle, offset, size


def _ipc_open(handle, device) -> torch.Tensor:
    """A peer's buffer mapped into this process, opened with this rank's GPU current: torch's rebuild opens a handle
    on the device it names, which is the owner's; named ours, the driver maps it into this GPU's context and enables
    peer access to the owner's GPU (cudaIpcMemLazyEnablePeerAccess), as SGLang's custom all-reduce opens its peers'.
    On one GPU the two are the same device."""
    import inspect

    rebuild, args = handle
    device = torch.device(device)
    names = list(inspect.signature(rebuild).parameters)
    if "storage_device" in names:  # torch's rebuild_cuda_tensor (2.x)
        args = list(args)
        args[names.index("storage_device")] = device.index if device.index is not None else torch.cuda.current_device()
    with torch.cuda.device(device):
        return rebuild(*args)


def _cuda_ipc(nbytes: int, group, device) -> PeerBuffers:
    return exchanged(nbytes, group, device, export=_ipc_export, open_=_ipc_open, backend="cuda_ipc")


def _file_export(nbytes: int, device):
    import atexit
    import tempfile

    if torch.device(device).type != "cpu":
        raise ValueError(f"file peer buffers are host memory (Triton's interpreter); the device is {device}")
    fd, path = tempfile.mkstemp(prefix="sgl-amd-mono-peer-")
    os.ftruncate(fd, _padded(nbytes))  # zeroed
    os.close(fd)
    atexit.register(lambda: os.path.exists(path) and os.unlink(path))  # the peers mapped it at build, long before
    return torch.from_file(path, shared=True, size=_padded(nbytes), dtype=torch.uint8), path


def _file_open(path, device) -> torch.Tensor:
    return torch.from_file(path, shared=True, size=os.path.getsize(path), dtype=torch.uint8)


def _file(nbytes: int, group, device) -> PeerBuffers:
    return exchanged(nbytes, group, device, export=_file_export, open_=_file_open, backend="file")


BACKENDS = {"symmetric": _symmetric, "cuda_ipc": _cuda_ipc, "file": _file}


def allocate(nbytes: int, *, group, device, backend: str = "symmetric", make: Optional[Callable[..., PeerBuffers]] = None,
             report_group=None) -> PeerBuffers:
    """This rank's peer buffers of `nbytes` over `group` (a torch.distributed process group: the device group for
    "symmetric", a CPU / gloo group for "cuda_ipc" and "file"), set up on every rank or on none: RuntimeError on every
    rank, naming each rank that failed and why. backend: a `BACKENDS` name; make: a backend of its own, (nbytes,
    group, device) -> PeerBuffers (tests). report_group: where the ranks' reports are gathered (default `group`; a CPU
    group where `group` is a device group)."""
    import torch.distributed as dist

    if make is None and backend not in BACKENDS:
        raise ValueError(f"peer backend {backend!r} is not one of {sorted(BACKENDS)}")
    make = make or BACKENDS[backend]
    report_group = group if report_group is None else report_group
    buf, why = None, ""
    try:
        buf = make(nbytes, group, device)
        if buf.size != dist.get_world_size(group) or buf.ptrs.numel() != buf.size:
            raise RuntimeError(f"the backend mapped {buf.ptrs.numel()} buffers for a group of "
                               f"{dist.get_world_size(group)}")
        if buf.rank != dist.get_rank(group) or buf.nbytes < nbytes:
            raise RuntimeError(f"the backend gave rank {buf.rank}'s buffer of {buf.nbytes} bytes to rank "
                               f"{dist.get_rank(group)} asking {nbytes}")
    except Exception as e:  # noqa: BLE001 (reported to every rank, then raised on every rank)
        why = f"{type(e).__name__}: {e}"
    reports: list = [None] * dist.get_world_size(report_group)
    dist.all_gather_object(reports, (dist.get_rank(report_group), why), group=report_group)
    failed = [f"rank {r}: {w}" for r, w in reports if w]
    if failed:
        raise RuntimeError("peer buffers could not be set up on every rank (no rank falls back alone): "
                           + "; ".join(failed))
    _LIVE.append(buf)
    return buf
