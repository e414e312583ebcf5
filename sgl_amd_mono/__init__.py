"""sgl-amd-mono: SGLang monokernel specs; register() is the sglang.srt.plugins entry point."""

__version__ = "0.1.0"

# architecture -> "module:attribute" of its MonoSpec; imported only when SGLang asks for it
SPEC_PATHS = {
    "GlmMoeDsaForCausalLM": "sgl_amd_mono.glm53.spec:SPEC",
}


def register() -> None:
    """Register every spec path with SGLang's AMD monokernel registry (no kernel, no weights)."""
    from sglang.kernels.plugin_kernels.amd.spec import BACKEND, register as register_spec

    for architecture, path in SPEC_PATHS.items():
        register_spec(backend=BACKEND, architecture=architecture, path=path)
