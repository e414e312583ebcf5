"""The sglang.srt.plugins entry point registers the GLM-5.3 spec, and SGLang's find_spec resolves it."""

from __future__ import annotations

import importlib.metadata

import pytest
from sglang.kernels.plugin_kernels.amd.spec import BACKEND, MONOKERNEL_API_VERSION, MonoSpec, find_spec

from sgl_amd_mono.glm53 import spec as glm53_spec

ARCH = ["GlmMoeDsaForCausalLM"]


@pytest.fixture(scope="module", autouse=True)
def registered():
    (ep,) = [e for e in importlib.metadata.entry_points(group="sglang.srt.plugins") if e.name == "sgl_amd_mono"]
    assert ep.value == "sgl_amd_mono:register"
    ep.load()()  # what SGLang's plugin loader does


@pytest.mark.parametrize("isa", sorted(glm53_spec.DEVICES))
def test_find_spec_resolves_the_spec_on_each_isa(isa):
    spec, why = find_spec(backend=BACKEND, architectures=ARCH, isa=isa)
    assert spec is glm53_spec.SPEC and why == ""
    assert isinstance(spec, MonoSpec) and spec.api_version == MONOKERNEL_API_VERSION


@pytest.mark.parametrize("isa", ["gfx90a", "sm_100", None])
def test_find_spec_refuses_an_unknown_isa(isa):
    spec, why = find_spec(backend=BACKEND, architectures=ARCH, isa=isa)
    assert spec is None and str(isa) in why


def test_register_twice_is_idempotent():
    import sgl_amd_mono

    sgl_amd_mono.register()
    assert find_spec(backend=BACKEND, architectures=ARCH, isa="gfx950")[0] is glm53_spec.SPEC


def test_widths_per_tp_are_declared_widths():
    for isa, limits in glm53_spec.DEVICES.items():
        assert limits.widths == tuple(sorted(limits.widths))
        for tp in limits.tp_sizes:
            widths = glm53_spec.launch_widths(isa=isa, tp=tp)
            assert widths and set(widths) <= set(limits.widths)
    assert glm53_spec.launch_widths(isa="gfx950", tp=4) == (1, 2, 4)  # 8 rows at TP4 run SGLang's forward
    assert glm53_spec.launch_widths(isa="gfx950", tp=8) == (1, 2, 4, 8)


def test_every_launch_kind_has_bounds():
    kinds = {name.split(".")[0] for name in glm53_spec.SPEC.numerics.bounds}
    assert kinds == {"shared", "indexer", "dense", "tokens", "tail"}


def test_build_is_lazy_and_keeps_the_backend():
    assert glm53_spec.SPEC.build.keywords == {"backend": "triton", "on_error": "fault"}  # a server's: the launches
    assert glm53_spec.make_spec(backend="reference").build.keywords == {"backend": "reference", "on_error": "fault"}
