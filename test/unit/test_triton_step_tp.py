"""Whole GLM-5.3 steps at TP 2 on the Triton backend through SGLang's real binding (`_triton_step_tp_main.py`): two
processes, one a rank of SGLang's TP group, each building the launches over its own SGLang shards (the rank and group
read from SGLang, peer buffers allocated on both ranks and attached), every launch under Triton's interpreter, the
partials exchanged inside the launches. A decode step with a pad row and an MTP verify step: the two ranks' logits
(the whole vocab: every rank's shard gathered, as SGLang's `_get_logits` hands them on), hidden states and written
cache rows bitwise equal; against the reference backend at TP 1 on the same checkpoint within
`bounds.STEP_TP2_BOUNDS_INTERP`, each bound failed by its planted error; every row's top-1 the reference's; layer 0's
rows exact; nothing written outside out_cache_loc."""

import json
import os
import subprocess
import sys

import pytest

from sgl_amd_mono.common import numerics as nm
from sgl_amd_mono.glm53.bounds import STEP_TP2_BOUNDS_INTERP as BOUNDS

HERE = os.path.dirname(__file__)


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tp2_step")
    env = dict(os.environ, TRITON_INTERPRET="1")
    r = subprocess.run([sys.executable, os.path.join(HERE, "_triton_step_tp_main.py"), str(folder)], env=env,
                       capture_output=True, text=True, timeout=1200)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    assert r.returncode == 0 and lines, r.stderr[-3000:]
    res = json.loads(lines[-1])
    assert res["exitcodes"] == [0, 0], (res, r.stderr[-3000:])
    return res


def test_each_rank_built_its_own_launches_over_its_shards(result):
    for rank, r in enumerate(result["ranks"]):
        assert r == {"rank": rank, "tp": 2, "built_rank": rank, "lm_head_rows": 128, "peer_backends": ["file"]}, r


def test_ranks_are_bitwise_equal(result):
    assert result["ranks_equal"] == {"decode": True, "verify": True}


@pytest.mark.parametrize("step", ["decode", "verify"])
def test_step_matches_the_tp1_reference(result, step):
    r = result["steps"][step]
    assert r["values"]["step.logits.top1"] == 1.0, r
    for name, value in r["values"].items():
        if name in BOUNDS:
            assert nm.passes(name, value, BOUNDS[name]), (name, value)
    assert set(r["controls"]) == {n for n in BOUNDS if n in r["values"]}
    for name, value in r["controls"].items():
        assert not nm.passes(name, value, BOUNDS[name]), (name, value)


@pytest.mark.parametrize("step,rows", [("decode", 3), ("verify", 4)])
def test_the_whole_vocab_handed_on_and_layer0_exact(result, step, rows):
    r = result["steps"][step]
    assert r["logits_shape"] == [rows, 256] and r["hidden_is_none"] == (step == "decode"), r
    assert r["layer0"] == {"kv": 0.0, "index_k": 0.0} and r["written_outside_out_loc"] == 0, r
