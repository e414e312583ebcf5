"""The oracle per stage (`glm53/kinds/oracle.py`) against the real shared launch under Triton's interpreter
(sequential placement, tiny GLM-5.3-shaped geometry): every stage's oracle run alone on the launch's own
buffers within STAGE_BOUNDS, and failing them under its negative control (CONTROLS); the chained oracle
against the SGLang-pinned whole-layer oracle (layer.shared_layer). Each case runs in a subprocess
(`_stage_oracle_main.py`: TRITON_INTERPRET=1 must be set before triton is imported), all at once (~50 s on
2 cores)."""

import json
import os
import subprocess
import sys

import pytest

from sgl_amd_mono.glm53.kinds import oracle
from sgl_amd_mono.glm53.kinds.shared import TABLE

HERE = os.path.dirname(__file__)
CASES = ("w1", "w4fp8", "w4fp8_split", "w2_dn1")  # `_stage_oracle_main.CASES`

# The chained oracle's outputs against layer.shared_layer, measured: bitwise equal in every case but the
# routing weights (1 ulp: the launch's renormalisation is score x (scaling / sum), SGLang's score / sum x
# scaling; measured 1.2e-7). The control (`_stage_oracle_main`: o_proj scale, kv_a_norm, gate rows) fails each.
CHAIN_BOUNDS = {"shared.out.rel": 0.0, "shared.residual_out.rel": 0.0, "shared.o.rel": 0.0,
                "shared.expert_ids.max_abs": 0.0, "shared.expert_weights.max_abs": 4e-7, "shared.kv_cache.max_abs": 0.0}


@pytest.fixture(scope="module")
def results():
    """{case: the JSON `_stage_oracle_main.py` printed}, every case run in parallel."""
    env = dict(os.environ, TRITON_INTERPRET="1")
    procs = {c: subprocess.Popen([sys.executable, os.path.join(HERE, "_stage_oracle_main.py"), c], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in CASES}
    out = {}
    for c, p in procs.items():
        stdout, stderr = p.communicate(timeout=600)
        assert p.returncode == 0, f"{c}: {stderr[-3000:]}"
        out[c] = json.loads(stdout.strip().splitlines()[-1])
    return out


def test_table_coverage():
    """One function a stage, a bound for every name compare can produce, a control for every stage reading
    only the stage's inputs, and every buffer's layout in the module docstring."""
    assert list(oracle.STAGES) == TABLE.stage_names()
    assert sorted(oracle.STAGE_BOUNDS) == sorted(oracle.bound_names(TABLE))
    assert sorted(oracle.CONTROLS) == sorted(TABLE.stage_names())
    for st in TABLE.stages:
        assert set(oracle.CONTROLS[st.name]) <= set(st.reads), st.name
    for name in TABLE.buffers():
        assert f" {name}:" in oracle.__doc__ or f", {name}:" in oracle.__doc__, f"{name} missing from the docstring"


@pytest.mark.parametrize("case", CASES)
def test_isolated_stages_within_bounds(results, case):
    r = results[case]
    bad, seen = [], set()
    for stage, vals in r["isolated"].items():
        assert set(vals) <= set(oracle.bound_names(TABLE, stage)), stage
        seen |= set(vals)
        bad += [f"{stage}: {f}" for f in oracle.failures(vals)]
    assert not bad, f"{case}: " + "; ".join(bad)
    want = set(oracle.STAGE_BOUNDS) - ({"shared.dn_part.rel", "shared.dn_part.max_rel"} if case == "w2_dn1" else set())
    assert seen == want, sorted(want ^ seen)


@pytest.mark.parametrize("case", CASES)
def test_controls_fail_every_bound(results, case):
    """Each stage's oracle on perturbed inputs (oracle.CONTROLS) against the launch: every bound fails."""
    r = results[case]
    missed = []
    for stage, vals in r["control"].items():
        failed = {f.split(" =")[0] for f in oracle.failures(vals)}
        missed += [f"{stage}: {k} = {v:.3g}" for k, v in vals.items() if k not in failed]
    assert not missed, f"{case}: controls passing their bounds: " + "; ".join(missed)


@pytest.mark.parametrize("case", CASES)
def test_chain_matches_shared_layer(results, case):
    vals = results[case]["chain"]
    bad = oracle.failures({k: vals[k] for k in CHAIN_BOUNDS}, CHAIN_BOUNDS)
    assert not bad, f"{case}: " + "; ".join(bad)
    control = results[case]["chain_control"]
    passing = [k for k in CHAIN_BOUNDS if not oracle.failures({k: control[k]}, CHAIN_BOUNDS)]
    assert not passing, f"{case}: the chain's control passes {passing}"
