"""Whole GLM-5.3 steps on the Triton backend through SGLang's real binding (`_install_forward`), every launch
under Triton's interpreter (`_triton_step_main.py`, a subprocess: TRITON_INTERPRET=1 before triton is imported):
a decode step with a pad row and an MTP verify step capturing hidden states, on a tiny model with a layer of every
kind (tokens, dense, indexer, shared) and the tail, against the reference backend on an identical pool, with a bf16
and an fp8 MLA cache (SGLang's --kv-cache-dtype auto / fp8_e4m3): logits, hidden states and every layer's written
MLA and index-K cache rows within `bounds.STEP_BOUNDS_INTERP` (`_FP8`), each bound failed by its planted error,
every row's top-1 the reference's, layer 0's rows exact, nothing written outside out_cache_loc; no served key ran
SGLang's forward, and the steps the launches do not take ran it."""

import json
import os
import socket
import subprocess
import sys

import pytest

from sgl_amd_mono.common import numerics as nm
from sgl_amd_mono.glm53.bounds import STEP_BOUNDS_INTERP, STEP_BOUNDS_INTERP_FP8

HERE = os.path.dirname(__file__)


BOUNDS = {"bf16": STEP_BOUNDS_INTERP, "fp8": STEP_BOUNDS_INTERP_FP8}


@pytest.fixture(scope="module", params=["bf16", "fp8"])
def result(request):
    """The run with SGLang's --kv-cache-dtype auto (bf16) or fp8_e4m3, its "kv" the bounds' key."""
    with socket.socket() as sock:  # its own gloo port: this process's tiny models hold conftest's
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    env = dict(os.environ, TRITON_INTERPRET="1", MASTER_PORT=port)
    r = subprocess.run([sys.executable, os.path.join(HERE, "_triton_step_main.py"), request.param], env=env,
                       capture_output=True, text=True, timeout=900)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    assert r.returncode == 0 and lines, r.stderr[-3000:]
    return dict(json.loads(lines[-1]), kv=request.param)


def test_every_kind_runs(result):
    assert result["kinds"] == ["tokens", "dense", "indexer", "shared"]


@pytest.mark.parametrize("step", ["decode", "verify"])
def test_step_matches_reference(result, step):
    r, bounds = result["steps"][step], BOUNDS[result["kv"]]
    assert r["values"]["step.logits.top1"] == 1.0, r
    for name, value in r["values"].items():
        if name in bounds:
            assert nm.passes(name, value, bounds[name]), (name, value)
    for name, value in r["controls"].items():
        assert not nm.passes(name, value, bounds[name]), (name, value)
    assert set(r["controls"]) == {n for n in bounds if n in r["values"]}


def test_decode_is_bitwise(result):
    v = result["steps"]["decode"]["values"]
    assert v["step.logits.rel"] == 0.0 and v["step.kv.max_abs"] == 0.0 and v["step.index_k.max_abs"] == 0.0


def test_hidden_states_where_captured(result):
    assert result["steps"]["verify"]["hidden_is_none"] is False and result["steps"]["decode"]["hidden_is_none"] is True
    assert result["steps"]["verify"]["logits_shape"] == [4, 256] and result["steps"]["decode"]["logits_shape"] == [3, 256]


@pytest.mark.parametrize("step", ["decode", "verify"])
def test_caches_written_only_at_out_cache_loc(result, step):
    r = result["steps"][step]
    assert r["written_outside_out_loc"] == 0 and r["written_outside_planted"] >= 1, r


@pytest.mark.parametrize("step", ["decode", "verify"])
def test_layer0_rows_are_bitwise(result, step):
    """Layer 0's MLA and index-K rows (nothing upstream of them differs) equal the reference's; each planted error
    (a cache value +0.1, an index-key value +1) is seen. check_step.py holds the same at GLM-5.3's real shapes."""
    l0 = result["steps"][step]["layer0"]
    assert l0["kv"] == 0.0 and l0["index_k"] == 0.0, l0
    assert l0["kv_planted"] > 0.0 and l0["index_k_planted"] > 0.0, l0


def test_steps_the_launches_do_not_take_run_sglangs_forward(result):
    """A width the build does not hold (5 rows: built 3 and 4), and a step with input embeddings."""
    assert result["sglang_forward_ran_for"] == [[5, False], [3, True]], result["sglang_forward_ran_for"]
