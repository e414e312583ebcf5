"""The cross-rank push protocol (`backends/triton/exchange.py`) under Triton's interpreter with emulated ranks
(`_exchange_main.py`, a subprocess): every rank's sum the same bits, the rank-ordered f32 sum (another order gives
other bits, so the order is held), launch after launch on the same peer buffers; a rank that does not push stops
the waits at the deadline with an error word naming the stage and the peer, also when its slot still holds an
earlier launch's words. The same across concurrent processes sharing their buffers (`_exchange_procs.py`)."""

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(__file__)


def _run(*args):
    env = dict(os.environ, TRITON_INTERPRET="1")
    r = subprocess.run([sys.executable, os.path.join(HERE, "_exchange_main.py"), *map(str, args)], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_every_rank_holds_the_rank_ordered_sum(ranks):
    res = _run(ranks)
    assert set(res) == {"epoch1", "epoch2", "epoch3"}, res
    for v in res.values():
        assert v["ranks_equal"] and v["rank_order_sum"], res
        assert v["other_order_differs"] in ((True,) if ranks > 2 else (None,)), res


@pytest.mark.parametrize("skip_epoch", [1, 2])
def test_a_peer_that_never_pushes_is_named(skip_epoch):
    res = _run(4, 2, skip_epoch)
    assert res["error"] == (f"launch toy: program 0 in stage sum missed its deadline waiting on rank 2's push "
                            f"(0 of 128 words arrived, epoch {skip_epoch})"), res
    assert ("epoch1" in res) == (skip_epoch == 2)


@pytest.mark.parametrize("target", ["sm_90", "gfx950"])
def test_compiles(target):
    """The toy launch through Triton's AOT path on this CPU (sm_90 with the global-timer deadline)."""
    import torch
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from _exchange_kernel import toy_exchange
    from sgl_amd_mono.backends.triton import survey

    meta = lambda *s, dt=torch.float32: torch.empty(*s, dtype=dt, device="meta")  # noqa: E731
    kw = dict(x_ptr=meta(4, 300), out_ptr=meta(4, 300), peers_ptr=meta(4, dt=torch.int64),
              err_ptr=meta(9, dt=torch.int64), epoch=3, bound=2 * 10**9, N=300, R=4, BLOCK=128, SKIP_RANK=-1,
              TIMER=target == "sm_90")
    sig, consts = survey.signature(toy_exchange, kw)
    backend, arch, warp = survey.TARGETS[target]
    k = triton.compile(ASTSource(toy_exchange, sig, consts, survey.divisibility(toy_exchange, kw)),
                       target=GPUTarget(backend, arch, warp), options={"num_warps": 4})
    assert k.asm and k.metadata.name.startswith("toy_exchange")


def _procs(tmp_path, *args):
    r = subprocess.run([sys.executable, os.path.join(HERE, "_exchange_procs.py"), *map(str, args)], env=dict(os.environ),
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_concurrent_processes_hold_the_rank_ordered_sum(tmp_path):
    """4 processes, one rank each, sharing their peer buffers through a file mapping (`peer.file_backed`), each
    running its own launch at once: the same bits on every rank, the rank-ordered sum."""
    res = _procs(tmp_path, 4, tmp_path)
    assert res["exitcodes"] == [0] * 4 and res["errors"] == [None] * 4, res
    assert res["ranks_equal"] and res["rank_order_sum"], res


def test_a_missing_rank_stops_every_process_with_the_same_error(tmp_path):
    """Rank 1 never pushes: every rank (rank 1 too, waiting on its own slot) ends with the error naming the stage and
    rank 1, bounded by its deadline (3000 polls, a few seconds under the interpreter); none hangs."""
    res = _procs(tmp_path, 4, tmp_path, 1)
    want = ("launch toy: program 0 in stage sum missed its deadline waiting on rank 1's push (0 of 128 words "
            "arrived, epoch 1)")
    assert res["exitcodes"] == [0] * 4 and res["errors"] == [want] * 4, res
    assert max(res["seconds"]) < 60, res


def test_a_missing_rank_faults_every_process_in_serving_builds(tmp_path):
    """The same missing rank in serving builds: every process dies at address 0x0 (SIGSEGV under the interpreter, a
    GPU fault on a device) before its launch returns, and each rank's host copy names the stage and rank 1; none
    drains into a result."""
    import signal

    res = _procs(tmp_path, 2, tmp_path, 1, "fault")
    want = ("launch toy: program 0 in stage sum missed its deadline waiting on rank 1's push (0 of 128 words "
            "arrived, epoch 1)")
    assert res["exitcodes"] == [-signal.SIGSEGV] * 2 and res["returned"] == [False, False], res
    assert res["copies"] == [want] * 2, res
