"""Served only what has run: the rule (`glm53/served.py`) as the spec's startup check applies it on a GPU host."""

from __future__ import annotations

import os

import pytest

from sgl_amd_mono.glm53 import served
from sgl_amd_mono.glm53 import spec as glm53_spec
from sgl_amd_mono.glm53.config import load_hf_config

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def test_every_served_configuration_cites_a_results_log_that_exists():
    assert served.RAN, "nothing has run"
    for (isa, tp), path in served.RAN.items():
        assert isa in glm53_spec.DEVICES and tp in served.BUILT_TP
        assert os.path.isfile(os.path.join(ROOT, path)), path


@pytest.mark.parametrize("isa,tp,env,refused,unverified", [
    ("sm_90", 1, {}, False, False),
    ("gfx950", 1, {}, True, False),
    ("gfx950", 1, {"SGLANG_AMD_MONO_UNVERIFIED": "1"}, False, True),
    ("gfx942", 1, {"SGLANG_AMD_MONO_UNVERIFIED": "1"}, False, True),
    ("gfx950", 1, {"SGLANG_AMD_MONO_UNVERIFIED": "yes"}, True, False),  # only "1" opts in
    ("sm_90", 8, {"SGLANG_AMD_MONO_UNVERIFIED": "1"}, True, False),  # not built: refused whatever the variable
    ("sm_100", 1, {"SGLANG_AMD_MONO_UNVERIFIED": "1"}, True, False),
])
def test_rule(isa, tp, env, refused, unverified):
    s = served.serving(isa, tp, env)
    assert bool(s.reasons) == refused and bool(s.unverified) == unverified, s
    assert all(isa in r or f"tp {tp}" in r for r in s.reasons)


class _Cfg:
    tp_size, kv_cache_dtype, dsa_decode_backend = 1, "bfloat16", "fa3"
    speculative_algorithm = speculative_num_draft_tokens = speculative_num_steps = None


@pytest.mark.parametrize("isa,want", [("gfx950", "no whole step of them has run on gfx950"), ("sm_90", None),
                                      (None, None)])
def test_startup_check_asks_the_rule_for_this_hosts_gpu(monkeypatch, isa, want):
    import sglang.srt.kernel_plugins.amd.binding as binding

    monkeypatch.delenv(served.UNVERIFIED_ENV, raising=False)
    monkeypatch.setattr(binding, "device_isa", lambda: isa)
    reasons = glm53_spec.SPEC.config_disable_reasons(_Cfg(), load_hf_config("glm-5.3"))
    assert [r for r in reasons if "whole step" in r or "tp " in r] == ([] if want is None else
                                                                       [r for r in reasons if want in r]), reasons
    if want:
        assert any(want in r for r in reasons)


def test_startup_check_refuses_tp_above_1_on_any_isa(monkeypatch):
    import sglang.srt.kernel_plugins.amd.binding as binding

    monkeypatch.setenv(served.UNVERIFIED_ENV, "1")
    for isa in ("gfx950", "sm_90"):
        monkeypatch.setattr(binding, "device_isa", lambda isa=isa: isa)
        cfg = _Cfg()
        cfg.tp_size = 2
        reasons = glm53_spec.SPEC.config_disable_reasons(cfg, load_hf_config("glm-5.3"))
        assert any("tp 2: the launches build TP [1] only" in r for r in reasons), reasons
