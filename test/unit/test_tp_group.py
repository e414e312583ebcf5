"""The TP group's build agreement and peer backend choice (`glm53/tp_group.py`): a build that failed on one rank stops
every rank naming it (two gloo processes), and the peer backend by device and SGLANG_AMD_MONO_PEERS."""

import os
import socket

import pytest
import torch.multiprocessing as mp

from sgl_amd_mono.glm53 import tp_group


def _rank(rank, port, out):
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    g = tp_group.TpGroup(rank=rank, size=2, device_group=dist.group.WORLD, cpu_group=dist.group.WORLD)
    try:
        for case, why in (("healthy", ""), ("rank 1 fails", "ValueError: planted" if rank == 1 else "")):
            try:
                tp_group.agree(g, why, what="the launches' build")
                out[(case, rank)] = "ok"
            except RuntimeError as e:
                out[(case, rank)] = str(e)
    finally:
        dist.destroy_process_group()


def test_a_build_failed_on_one_rank_stops_every_rank_naming_it():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = mp.Manager().dict()
    mp.spawn(_rank, args=(port, out), nprocs=2, join=True)
    assert out[("healthy", 0)] == out[("healthy", 1)] == "ok"
    assert out[("rank 1 fails", 0)] == out[("rank 1 fails", 1)] == (
        "the launches' build failed on 1 of 2 ranks (every rank stops): rank 1: ValueError: planted")


def test_peer_backend_by_device_and_variable():
    assert tp_group.peer_backend("cpu", {tp_group.PEERS_ENV: "symmetric"}) == "file"
    assert tp_group.peer_backend("cuda:0", {}) == "cuda_ipc"
    assert tp_group.peer_backend("cuda:1", {tp_group.PEERS_ENV: "symmetric"}) == "symmetric"
    with pytest.raises(ValueError, match="SGLANG_AMD_MONO_PEERS='nvshmem' is not one of"):
        tp_group.peer_backend("cuda:0", {tp_group.PEERS_ENV: "nvshmem"})
