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
    ("sm_90", 8, {}, True, False),  # built, never run on several GPUs
    ("sm_90", 2, {"SGLANG_AMD_MONO_UNVERIFIED": "1"}, False, True),
    ("sm_90", 8, {"SGLANG_AMD_MONO_UNVERIFIED": "1"}, False, True),
    ("gfx950", 8, {"SGLANG_AMD_MONO_UNVERIFIED": "1"}, False, True),
    ("sm_90", 3, {"SGLANG_AMD_MONO_UNVERIFIED": "1"}, True, False),  # not built: refused whatever the variable
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


def test_tp_above_1_names_what_has_not_run():
    """TP > 1 on sm_90 (where TP 1 ran whole steps): refused naming the several GPUs no step has run on and where
    the pushes did run; with the variable served, the same fact its unverified note. On gfx950: nothing has run."""
    s = served.serving("sm_90", 8, {})
    assert len(s.reasons) == 1 and "no whole step of them has run on several GPUs" in s.reasons[0], s
    assert "Triton's interpreter" in s.reasons[0] and served.UNVERIFIED_ENV in s.reasons[0], s
    s = served.serving("sm_90", 8, {served.UNVERIFIED_ENV: "1"})
    assert s.is_served and s.evidence is None and s.unverified == (served.what_is_unverified("sm_90", 8),), s
    assert served.what_is_unverified("gfx950", 8).endswith("no whole step of them has run on gfx950")


def test_startup_check_serves_tp_above_1_only_unverified(monkeypatch):
    import sglang.srt.kernel_plugins.amd.binding as binding

    for isa in ("gfx950", "sm_90"):
        monkeypatch.setattr(binding, "device_isa", lambda isa=isa: isa)
        cfg = _Cfg()
        cfg.tp_size = 2
        monkeypatch.delenv(served.UNVERIFIED_ENV, raising=False)
        reasons = glm53_spec.SPEC.config_disable_reasons(cfg, load_hf_config("glm-5.3"))
        assert reasons == [r for r in reasons if "triton launches at TP 2 on " + isa in r] and reasons, reasons
        monkeypatch.setenv(served.UNVERIFIED_ENV, "1")
        assert glm53_spec.SPEC.config_disable_reasons(cfg, load_hf_config("glm-5.3")) == []
