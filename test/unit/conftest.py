"""Unit-test process setup, before SGLang or Triton is imported, and the tiny models shared by the
reference tests (built once per session: ~17 s each).

- TRITON_INTERPRET=1: SGLang's Triton kernels (its block-FP8 GEMM, act_quant) run on CPU under
  Triton's interpreter, so the reference is pinned to them without a GPU. A run that already set
  the variable keeps its value.
- MASTER_PORT: a free port for the single-process gloo group, so concurrent test runs on one
  machine do not collide on tiny_glm53's default port.
"""

import os
import socket

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")
if "MASTER_PORT" not in os.environ:
    with socket.socket() as _s:
        _s.bind(("127.0.0.1", 0))
        os.environ["MASTER_PORT"] = str(_s.getsockname()[1])


def _cpu_fp8_gemm() -> None:
    """SGLang's block-FP8 Triton GEMM looks up tuned configs by GPU name; off-GPU the name is None."""
    import sglang.kernels.ops.gemm.fp8_kernel as fp8_kernel

    if fp8_kernel.get_device_name() is None:
        fp8_kernel.get_device_name = lambda *args, **kwargs: "cpu"


@pytest.fixture(scope="session")
def tiny_fp8():
    """(model, hf_config): the block-FP8 tiny GLM-5.3, seed 0."""
    from tiny_glm53 import build_tiny_model

    model, cfg = build_tiny_model(is_fp8=True, seed=0)
    _cpu_fp8_gemm()
    return model, cfg


@pytest.fixture(scope="session")
def tiny_bf16():
    """(model, hf_config): the bf16 tiny GLM-5.3, seed 0 (the same draws as tiny_fp8 before quant)."""
    from tiny_glm53 import build_tiny_model

    return build_tiny_model(is_fp8=False, seed=0)
