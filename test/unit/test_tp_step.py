"""`test/kernels/glm53/tp_step.py` on CPU under torchrun (2 processes, one a rank; Triton's interpreter, the tiny
geometry, peers through files): a whole step of layers tokens, dense, indexer, shared and the tail at TP 2, width 2.
Healthy: every launch ends without an error word, the ranks' outputs and caches are bitwise equal, and every layer
is within its interpreter bounds against the oracle at TP 2 on the launch's own inputs. Planted (the last rank's
layer-2 weights carry every control of its kind): the script reports the ranks differing and layer 2 outside its
bounds. Held (rank 1 starts once rank 0's step ended, the deadline a few thousand polls): every rank's step ends,
each with error words naming a stage and the missing peer."""

import json
import os
import subprocess
import sys

import pytest

from sgl_amd_mono.common import numerics as nm

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
KERNELS = os.path.join(ROOT, "test", "kernels", "glm53")
sys.path.insert(0, KERNELS)
import registry  # noqa: E402


def _tp_step(*args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, KERNELS, os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                        os.path.join(KERNELS, "tp_step.py"), "--device", "cpu", *args], env=env, capture_output=True,
                       text=True, timeout=600)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    assert lines, r.stderr[-3000:]
    res = json.loads(lines[-1])
    assert (r.returncode == 0) == res["ok"], (r.returncode, res)
    return res


@pytest.fixture(scope="module")
def healthy():
    return _tp_step()


def test_the_step_runs_on_both_ranks_bitwise_equal(healthy):
    assert healthy["ok"] and healthy["failures"] == [], healthy["failures"]
    assert healthy["errors"] == [{}, {}] and healthy["ranks_equal"] is True
    assert healthy["layers"] == ["tokens", "dense", "indexer", "shared", "tail"] and healthy["peers"] == "file"


def test_every_layer_within_its_bounds_against_the_tp2_oracle(healthy):
    values = healthy["values"]
    assert list(values) == ["0 tokens", "1 dense", "2 indexer", "3 shared", "4 tail"]
    for layer, vals in values.items():
        bounds = registry.get(layer.split()[1]).interp_bounds["w2"]
        assert set(vals) == set(bounds), (layer, sorted(vals))
        for name, v in vals.items():
            assert nm.passes(name, v, bounds[name]), (layer, name, v)


def test_a_planted_rank_fails_the_checks():
    res = _tp_step("--plant-layer", "2")
    assert not res["ok"] and res["ranks_equal"] is False, res
    assert any(f.startswith("the ranks differ in") and "layer 2" in f for f in res["failures"]), res["failures"]
    assert any(f.startswith("layer 2 (indexer): indexer.out.rel") for f in res["failures"]), res["failures"]
    assert not any(f.startswith(("layer 0", "layer 1")) for f in res["failures"]), res["failures"]


def test_a_held_rank_stops_every_rank_naming_the_missing_peer():
    res = _tp_step("--hold-rank", "1", "--deadline", "0.002")
    assert res["ok"], res["failures"]
    r0, r1 = res["held"]
    assert not r0["held"] and r1["held"]
    assert r0["errors"]["tokens"] == ("launch tokens[tp2,w2] rank 0 layer 0: program 0 in stage embed_sum missed its "
                                      "deadline waiting on rank 1's push (0 of 512 words arrived, epoch 1)"), r0
    assert r1["errors"]["tokens"] == ("launch tokens[tp2,w2] rank 1 layer 0: program 0 in stage o_sum missed its "
                                      "deadline waiting on rank 0's push (0 of 512 words arrived, epoch 1)"), r1
    assert max(r0["seconds"], r1["seconds"]) < 300, res["held"]
