"""Every launch kind at TP 2 under Triton's interpreter, one process a rank (`_tp_main.py`): each rank runs its own
launch on its shard of one full draw, the partials (o_proj, the MoE or MLP down, layer 0's embedding rows, the
tail's logits) pushed into every rank's peer buffer and summed (or gathered) in rank order inside the launch. Every
rank holds the same bits, equal to the oracle at TP 2 (`layer.layer_ranks`: the rank partials summed in rank order)
within the kind's interpreter bounds; the last rank's planted controls (`_interp_main.combined_control`, on that rank
alone: its replicated weights then differ from the others', so only the exchanged outputs stay equal) fail every
bound on some rank. A rank held back until the others ended stops nobody forever: each rank ends with the error word
naming a stage and a missing peer."""

import json
import os
import subprocess
import sys

import pytest

from sgl_amd_mono.common import numerics as nm

HERE = os.path.dirname(__file__)
sys.path.insert(0, os.path.join(HERE, "..", "kernels", "glm53"))
import registry  # noqa: E402

# the list's own rule (topk.max_abs) is failed by planted errors in a launch's list (test_launch_interp's output
# controls); the weights controls here leave every rank's list the rule's over its own scores
LIST_RULE = "topk.max_abs"


def _run(tmp_path, kind, ranks, width, hold=-1):
    r = subprocess.run([sys.executable, os.path.join(HERE, "_tp_main.py"), kind, str(ranks), str(width), str(tmp_path),
                        str(hold)], capture_output=True, text=True, timeout=1500)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads([ln for ln in r.stdout.splitlines() if ln.startswith("{")][-1])


@pytest.mark.parametrize("kind", sorted(registry.KINDS))
def test_ranks_hold_the_rank_ordered_layer(tmp_path, kind):
    res = _run(tmp_path, kind, 2, 2)
    assert res["exitcodes"] == [0, 0], res
    ranks = res["ranks"]
    assert all(r["error"] is None and r["control_error"] is None for r in ranks), res
    assert ranks[0]["digests"] == ranks[1]["digests"], "the ranks' outputs differ"
    bounds = registry.get(kind).interp_bounds["w2"]
    for r in ranks:
        assert set(r["values"]) == set(bounds), (sorted(r["values"]), sorted(bounds))
        for name, bound in bounds.items():
            assert nm.passes(name, r["values"][name], bound), f"rank {r['rank']}: {name} = {r['values'][name]}"
        assert r["task_counts_ok"] is True and r["cache_rows_outside_out_loc"] == 0 and r["epoch"] == 2, r
    for name, bound in bounds.items():
        if not name.endswith(LIST_RULE):
            assert any(not nm.passes(name, r["control_values"][name], bound) for r in ranks), \
                f"{name}: no rank's planted control fails {bound}"


def test_a_held_rank_stops_every_rank_with_a_named_peer(tmp_path):
    """Rank 1 launches only after rank 0's launch ended: rank 0 stops at o_sum's deadline naming rank 1; rank 1 then
    finds rank 0's o_proj words (pushed before it waited) and stops at down_sum naming rank 0, which drained."""
    res = _run(tmp_path, "shared", 2, 1, 1)
    assert res["exitcodes"] == [0, 0], res
    r0, r1 = res["ranks"]
    assert r0["error"] == ("launch shared[tp2,w1] rank 0 layer 3: program 0 in stage o_sum missed its deadline waiting "
                           "on rank 1's push (0 of 256 words arrived, epoch 1)"), r0
    assert r1["held"] and r1["error"] == ("launch shared[tp2,w1] rank 1 layer 3: program 0 in stage down_sum missed its "
                                          "deadline waiting on rank 0's push (0 of 256 words arrived, epoch 1)"), r1
    assert max(r0["seconds"], r1["seconds"]) < 120, res


LOCAL_PARTIALS = r"""
import dataclasses, json, os, sys
os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, sys.argv[1]); sys.path.insert(0, os.path.join(sys.argv[1], "..", "kernels", "glm53"))
import torch, registry
from _interp_main import tiles_of
from _tp_main import geometry
from sgl_amd_mono.backends.triton import kinds
from sgl_amd_mono.glm53 import layer
geo, kc = geometry(), registry.get("shared")
w = kc.weights(geo, tp=2, seed=3, device="cpu", rank=1)
step = kc.step(geo, width=2, context=300, kv_dtype=torch.bfloat16, seed=4, device="cpu")
opts = dataclasses.replace(kc.options(300), placement="sequential", local_partials=True)
plan = kinds.plan("shared", geo, tp=2, width=2, kv_dtype=torch.bfloat16, device="cpu", options=opts,
                  tiles=tiles_of(""), rank=1)
out = plan.run(plan.bind(kc.tensors(w)), {**vars(step), "kv_cache": step.kv_cache.clone()})
plan.check_error()
a = layer.attention_half(geo, w[0], hidden=step.hidden, residual=step.residual, cos_sin=step.cos_sin,
                         kv_cache=step.kv_cache.clone(), out_loc=step.out_loc, topk_slots=step.topk_slots)
print(json.dumps({"o_is_rank_partial": bool(torch.equal(out["o"], a.o)), "peers": plan.peers is None}))
"""


def test_local_partials_keep_a_ranks_partial():
    """The push-free timing variant (`LaunchOptions.local_partials`, time_layers --tp-emulate's A/B) at TP 2 runs
    without peer buffers and leaves rank 1's own o_proj partial in o (the oracle's rank partial, bitwise)."""
    r = subprocess.run([sys.executable, "-c", LOCAL_PARTIALS, HERE], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res == {"o_is_rank_partial": True, "peers": True}, res
