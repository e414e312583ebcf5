"""Peer buffers (`common/peer.py`): the emulated layout, retirement instead of a free, and a setup that fails on
one rank failing on every rank with that rank's reason (two gloo processes on CPU): a backend's own failure, and the
handle exchange ("cuda_ipc"'s and "file"'s logic, run here with files as the handles) failing to export or to open
on one rank; the file backend's buffers written through `ptrs` across the two processes."""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.multiprocessing as mp

from sgl_amd_mono.common import peer


def test_emulated_ranks_share_one_allocation():
    bufs = peer.emulated(4, 1000, "cpu")
    assert [b.rank for b in bufs] == [0, 1, 2, 3] and all(b.size == 4 and b.nbytes == 1000 for b in bufs)
    ptrs = bufs[0].ptrs.tolist()
    assert ptrs == [b.local.data_ptr() for b in bufs] and all(torch.equal(b.ptrs, bufs[0].ptrs) for b in bufs)
    assert all(p % 256 == 0 for p in ptrs) and len(set(ptrs)) == 4
    bufs[2].local.fill_(7)  # a rank's buffer is its own bytes
    assert int(bufs[1].local.sum()) == 0 and int(bufs[3].local.sum()) == 0
    with pytest.raises(ValueError):
        peer.emulated(0, 10, "cpu")


def test_close_retires_and_keeps_the_memory():
    b = peer.emulated(2, 64, "cpu")[0]
    b.close()
    b.close()
    assert peer._RETIRED.count(b) == 1 and b.keep is not None and b.local.numel() == 64


def _poke(address: int, value: int) -> None:
    import ctypes

    ctypes.c_uint8.from_address(address).value = value


def _scenario(name: str, rank: int, size: int):
    """What rank `rank` allocates in scenario `name`, and what it checks after (returns "ok" or raises)."""
    import torch.distributed as dist

    if name in (None, 1, "default"):  # a backend of its own failing on rank `name` (None: on none); "default": symmetric
        def make(nbytes, group, device):
            if name == 1 and dist.get_rank(group) == 1:
                raise OSError("planted: no IPC handle")
            return peer.emulated(size, nbytes, device)[dist.get_rank(group)]

        peer.allocate(256, group=dist.group.WORLD, device="cpu", make=make if name != "default" else None)
        return "ok"
    if name == "file":  # the exchange for real: rank r writes 10 p + r + 1 at byte r of ptrs[p], for every p
        buf = peer.allocate(1000, group=dist.group.WORLD, device="cpu", backend="file",
                            report_group=dist.new_group(backend="gloo"))
        assert buf.backend == "file" and buf.rank == rank and buf.size == size and buf.nbytes == 1000
        assert buf.ptrs[rank] == buf.local.data_ptr() and int(buf.local.sum()) == 0  # zeroed
        dist.barrier()  # every rank saw its buffer zeroed before any pokes
        for p, address in enumerate(buf.ptrs.tolist()):
            _poke(address + rank, 10 * p + rank + 1)
        dist.barrier()
        assert buf.local[:size].tolist() == [10 * rank + r + 1 for r in range(size)], buf.local[:size]
        return "ok"
    if name == "cuda_ipc_on_cpu":
        peer.allocate(256, group=dist.group.WORLD, device="cpu", backend="cuda_ipc")
        return "ok"
    if name in ("export", "open"):  # the handle exchange failing on rank 1's export, or on rank 0's open
        def export(nbytes, device):
            if name == "export" and rank == 1:
                raise OSError("planted: cudaIpcGetMemHandle failed")
            return peer._file_export(nbytes, device)

        def open_(handle, device):
            if name == "open" and rank == 0:
                raise OSError("planted: cudaIpcOpenMemHandle failed")
            return peer._file_open(handle, device)

        make = lambda n, g, d: peer.exchanged(n, g, d, export=export, open_=open_, backend="file")  # noqa: E731
        peer.allocate(256, group=dist.group.WORLD, device="cpu", make=make)
        return "ok"
    raise ValueError(name)


SCENARIOS = (None, 1, "default", "file", "export", "open", "cuda_ipc_on_cpu")


def _rank(rank, size, port, out):
    """Every scenario in turn on one group (a failed setup leaves the group usable: every rank raised after the
    same gathers)."""
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=size)
    try:
        for scenario in SCENARIOS:
            try:
                res = _scenario(scenario, rank, size)
            except (RuntimeError, AssertionError) as e:
                res = f"{type(e).__name__}: {e}"
            out[(scenario, rank)] = res
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def results():
    """{scenario: {rank: "ok" or its error}} of two gloo processes."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = mp.Manager().dict()
    mp.spawn(_rank, args=(2, port, out), nprocs=2, join=True)
    return {sc: {r: out[(sc, r)] for r in range(2)} for sc in SCENARIOS}


def test_setup_fails_on_every_rank_naming_the_failed_one(results):
    assert results[None] == {0: "ok", 1: "ok"}
    out = results[1]
    assert out[0] == out[1] and "rank 1: OSError: planted: no IPC handle" in out[0] and "rank 0" not in out[0], out
    out = results["default"]  # torch's symmetric memory on a CPU tensor: refused on both ranks, both named
    assert out[0] == out[1] and "rank 0: " in out[0] and "rank 1: " in out[0], out


def test_file_backend_maps_every_ranks_buffer_in_rank_order(results):
    assert results["file"] == {0: "ok", 1: "ok"}


def test_handle_exchange_fails_on_every_rank_naming_the_failed_one(results):
    out = results["export"]  # rank 1 exports nothing: it names its reason, rank 0 that rank 1 shared no handle
    assert out[0] == out[1] and out[0].startswith("RuntimeError: peer buffers could not be set up on every rank"), out
    assert "rank 1: RuntimeError: could not export this rank's buffer: OSError: planted: cudaIpcGetMemHandle" in out[0]
    assert "rank 0: RuntimeError: rank(s) [1] shared no handle" in out[0], out
    out = results["open"]  # rank 0 cannot open rank 1's handle: every rank fails, naming rank 0 alone
    assert out[0] == out[1] and "rank 0: RuntimeError: could not open rank 1's handle: OSError: planted" in out[0], out
    assert "rank 1: " not in out[0], out
    out = results["cuda_ipc_on_cpu"]
    assert out[0] == out[1] and out[0].count("cuda_ipc peer buffers live on a GPU; the device is cpu") == 2, out


def test_unknown_backend_is_named():
    with pytest.raises(ValueError, match="peer backend 'nvshmem' is not one of"):
        peer.allocate(256, group=None, device="cpu", backend="nvshmem")
