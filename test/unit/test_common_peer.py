"""Peer buffers (`common/peer.py`): the emulated layout, retirement instead of a free, and a setup that fails on
one rank failing on every rank with that rank's reason (two gloo processes on CPU)."""

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


def _rank(rank, size, port, fail_rank, out):
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=size)
    try:
        def make(nbytes, group, device):
            if fail_rank is not None and dist.get_rank(group) == fail_rank:
                raise OSError("planted: no IPC handle")
            return peer.emulated(size, nbytes, device)[dist.get_rank(group)]

        peer.allocate(256, group=dist.group.WORLD, device="cpu", make=make if fail_rank != "default" else None)
        out[rank] = "ok"
    except RuntimeError as e:
        out[rank] = str(e)
    finally:
        dist.destroy_process_group()


def _run(fail_rank):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = mp.Manager().dict()
    mp.spawn(_rank, args=(2, port, fail_rank, out), nprocs=2, join=True)
    return dict(out)


def test_setup_fails_on_every_rank_naming_the_failed_one():
    assert _run(None) == {0: "ok", 1: "ok"}
    out = _run(1)
    assert out[0] == out[1] and "rank 1: OSError: planted: no IPC handle" in out[0] and "rank 0" not in out[0], out
    out = _run("default")  # torch's symmetric memory on a CPU tensor: refused on both ranks, both named
    assert out[0] == out[1] and "rank 0: " in out[0] and "rank 1: " in out[0], out
