"""Launch kinds as tables (`common/kind.py`): the kernel's arguments are the table's names, the layout checks
catch each planted defect, the task counts of a build are checked against the table, the spec promises no
TP size or width the kinds refuse, and a new kind (`_toy_kind.py`) needs only its table, its stage calls and
a registry line."""

import dataclasses
import json
import os
import subprocess
import sys

import pytest
import torch

from sgl_amd_mono.backends.triton import kinds
from sgl_amd_mono.backends.triton.launch import LaunchPlan
from sgl_amd_mono.backends.triton.tiles import Tiles
from sgl_amd_mono.common.kind import Buffer, KindTable, StageDef, check_task_counts
from sgl_amd_mono.common.launch import LaunchOptions
from sgl_amd_mono.glm53 import launch_inputs as li
from sgl_amd_mono.glm53.kinds import shared
from sgl_amd_mono.glm53.layer import layer_tensors

HERE = os.path.dirname(__file__)


def _meta_plan(kind, *, width=2, tp=8):
    geo = li.glm53_geometry()
    return kinds.plan(kind, geo, tp=tp, width=width, kv_dtype=torch.bfloat16, device="meta",
                      options=LaunchOptions(n_programs=132), tiles=Tiles()), geo


def _kernel_args(plan, geo, tp=8):
    layer = plan.bind({**plan.example_weights(), **layer_tensors(*li.meta_weights(geo, tp=tp))})
    step = {**plan.example_step(), **vars(li.meta_step(geo, width=plan.width, context=4096, kv_dtype=torch.bfloat16))}
    return plan.kernel_args(layer, step)


@pytest.mark.parametrize("kind", sorted(kinds.KINDS))
def test_kernel_arguments_are_the_tables_names(kind):
    """Every argument the engine derives from the table is a parameter of the kernel, and every parameter
    is given but those with a default that another table of the same kernel passes (the tokens kind's embedding
    exchange in the dense kernel): passed by name, a buffer cannot land in another's place."""
    import inspect

    plan, geo = _meta_plan(kind, tp=8)
    args = _kernel_args(plan, geo, tp=8)
    params = {p.name: p for p in plan.kind.kernel.params}
    assert set(args) <= set(params), sorted(set(args) - set(params))
    missing = set(params) - set(args)
    assert all(params[m].default is not inspect.Parameter.empty for m in missing), sorted(missing)
    assert missing <= {"S_EMBED", "S_EMBED_SUM", "T_EMBED", "T_EMBED_SUM", "X_EMB_X", "XW_EMB_X"}, sorted(missing)
    first = plan.table.stages[0].name
    assert args[f"S_{first.upper()}"] == 0 and args[f"T_{first.upper()}"] == plan.program.stages[0].n_tasks
    if "attn" in plan.table.stage_names():  # the layer kinds
        attn = plan.table.stage_id("attn")
        assert args["S_ATTN"] == attn and args["T_ATTN"] == plan.program.stages[attn].n_tasks
        first_count = min(v for k, v in args.items() if k.startswith("C_"))  # the first count (the indexer kinds':
        assert first_count == 1 + len(plan.table.stages)  # sel1_rows; else wuv_cnt) follows the stage counters


def test_a_buffer_missing_from_the_table_is_caught():
    """The control: drop one scratch buffer from the table and the names no longer match the kernel."""
    plan, geo = _meta_plan("shared")
    table = dataclasses.replace(shared.TABLE, scratch=tuple(b for b in shared.TABLE.scratch if b.name != "xs2"),
                                stages=tuple(dataclasses.replace(s, reads=tuple(r for r in s.reads if r != "xs2"),
                                                                 writes=tuple(w for w in s.writes if w != "xs2"))
                                             for s in shared.TABLE.stages))
    bad = LaunchPlan(dataclasses.replace(plan.kind, table=table), geo, tp=8, width=2, kv_dtype=torch.bfloat16,
                     device="meta", options=LaunchOptions(n_programs=132), tiles=Tiles())
    missing = set(bad.kind.kernel.arg_names) - set(_kernel_args(bad, geo))
    assert missing == {"xs2_ptr"}


def _table(**kw):
    b = lambda n: Buffer(n, lambda d: (2,), "f32")  # noqa: E731
    base = dict(name="t", inputs=(b("x"),), weights=(), outputs=(b("y"),), scratch=(b("s"),),
                stages=(StageDef("a", lambda d: 1, ("x",), ("s",)), StageDef("b", lambda d: 1, ("s",), ("y",))))
    base.update(kw)
    return KindTable(**base)


def test_layout_checks_catch_each_defect():
    _table().check_table()
    b = lambda n: Buffer(n, lambda d: (2,), "f32")  # noqa: E731
    cases = [
        (dict(stages=(StageDef("a", lambda d: 1, ("x",), ("s",)), StageDef("b", lambda d: 1, ("s", "z"), ("y",)))),
         "names buffer 'z', which is not declared"),
        (dict(stages=(StageDef("a", lambda d: 1, ("x",), ("s",)), StageDef("b", lambda d: 1, ("s",), ("y", "s")))),
         "scratch buffer s is written by 2 stages"),
        (dict(scratch=(b("s"), b("u"))), "scratch buffer u is written by 0 stages"),
        (dict(stages=(StageDef("a", lambda d: 1, ("x",), ("s",)), StageDef("b", lambda d: 1, ("x",), ("y",)))),
         "scratch buffer s is never read"),
        (dict(outputs=(b("y"), b("y2"))), "output y2 is written by no stage"),
        (dict(scratch=(b("s"), b("x"))), "buffers declared twice"),
        (dict(stages=(StageDef("a", lambda d: 1, ("x",), ("s", "x")), StageDef("b", lambda d: 1, ("s",), ("y",)))),
         "x is a launch input but stage a writes it"),
    ]
    for kw, text in cases:
        with pytest.raises(ValueError, match=text):
            _table(**kw).check_table()


def test_task_counts_checked_against_the_table():
    table = dataclasses.replace(_table(), stages=(StageDef("a", lambda d: 3, ("x",), ("s",)),
                                                  StageDef("b", lambda d: 4, ("s",), ("y",), is_bound=True)))
    check_task_counts(table, None, [3, 4])
    check_task_counts(table, None, [3, 2])  # a data-dependent stage may run fewer
    with pytest.raises(ValueError, match="a ran 2 tasks, the table says 3"):
        check_task_counts(table, None, [2, 4])
    with pytest.raises(ValueError, match="b ran 5 tasks, the table says at most 4"):
        check_task_counts(table, None, [3, 5])


def test_spec_promises_nothing_the_kinds_refuse():
    """Every (ISA, TP size) the spec serves and every width it builds there: every kind builds it for GLM-5.3 (no
    refusal, the tokens kind at TP > 1 too: its embedding rows come through the cross-rank push); a TP size whose
    shard the launch cannot tile is refused by name."""
    from sgl_amd_mono.glm53 import spec

    geo = li.glm53_geometry()
    for isa, limits in spec.DEVICES.items():
        for tp in limits.tp_sizes:
            for width in spec.launch_widths(isa=isa, tp=tp):
                for kv in (torch.bfloat16, torch.float8_e4m3fn):
                    for kind in sorted(kinds.KINDS):
                        bad = kinds.get(kind).refusals(geo, tp=tp, width=width, kv_dtype=kv)
                        assert bad == [], (kind, isa, tp, width, bad)
    assert shared.refusals(geo, tp=32, width=1, kv_dtype=torch.bfloat16) == ["moe_inter/tp 64 is not a multiple of 128"]


def test_a_toy_kind_runs_on_the_engine():
    """`_toy_kind.py` (a table, two stage calls, a registry line) built and run by the engine under Triton's
    interpreter: its outputs equal torch's, twice on the same sync words, with the tasks the table says."""
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    code = """
import json, torch
from sgl_amd_mono.backends.triton import kinds
from sgl_amd_mono.common.kind import check_task_counts
from sgl_amd_mono.common.launch import LaunchOptions
import _toy_kind as toy
kinds.KINDS["toy"] = "_toy_kind"   # the registry line
plan = kinds.plan("toy", {"D": 64}, tp=1, width=4, kv_dtype=None, device="cpu", tiles=toy.ToyTiles(),
                  options=LaunchOptions(placement="sequential", count_tasks=True))
g = torch.Generator().manual_seed(0)
x, w = torch.randn(4, 64, generator=g), torch.randn(64, generator=g)
layer = plan.bind({"w": w})
res = {}
for i in range(2):
    out = plan.run(layer, {"x": x})
    plan.check_error()
    y, s = toy.reference(x, w)
    res[f"y{i}"] = (out["y"] - y).abs().max().item()
    res[f"s{i}"] = (out["s"] - s).abs().max().item()
check_task_counts(plan.table, plan.dims, (plan.sync.task_count // 2).tolist())
res["counts"] = plan.sync.task_count.tolist()
res["epoch"] = plan.sync.epoch
try:
    kinds.plan("toy", {"D": 64}, tp=1, width=3, kv_dtype=None, device="cpu", tiles=toy.ToyTiles(),
               options=LaunchOptions(placement="sequential"))
except ValueError as e:
    res["refused"] = str(e)
print(json.dumps(res))
"""
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["y0"] <= 1e-6 and res["y1"] <= 1e-6 and res["s0"] <= 1e-4 and res["s1"] <= 1e-4, res
    assert res["counts"] == [8, 8] and res["epoch"] == 2, res
    assert res["refused"] == "toy launch refused: width 3 is not a power of two"


def test_build_binds_every_layer_to_one_plan_a_width(caplog):
    """The server-side build: a plan a width, every layer bound to it, progress logged a width."""
    import logging

    geo = li.glm53_geometry()
    layers = [layer_tensors(*li.meta_weights(geo, tp=8)) for _ in range(3)]
    with caplog.at_level(logging.INFO, logger="sgl_amd_mono.backends.triton.kinds"):
        built = kinds.build("shared", geo, widths=(1, 4), layers=layers, tp=8, kv_dtype=torch.bfloat16, device="meta",
                            options=LaunchOptions(n_programs=132), tiles=Tiles())
    assert sorted(built) == [1, 4]
    for w, (plan, bound) in built.items():
        assert plan.width == w and [b.launch_id for b in bound] == [0, 1, 2]
    msgs = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("[1/2] shared[tp8,w1] rank 0: 3 layers bound") for m in msgs), msgs
    assert any(m.startswith("[2/2] shared[tp8,w4] rank 0: 3 layers bound") for m in msgs), msgs
