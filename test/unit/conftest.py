"""Unit-test process setup, before SGLang or Triton is imported, and the tiny models shared by the
reference tests (built once per session: ~17 s each).

- TRITON_INTERPRET is NOT set here: it would turn every @triton.jit into an interpreted function
  and break AOT compile tests. test_reference_triton.py runs SGLang's Triton kernels under the
  interpreter in a subprocess instead.
- MASTER_PORT: a free port for the single-process gloo group, so concurrent test runs on one
  machine do not collide on tiny_glm53's default port.
"""

import os
import socket

import pytest

if "MASTER_PORT" not in os.environ:
    with socket.socket() as _s:
        _s.bind(("127.0.0.1", 0))
        os.environ["MASTER_PORT"] = str(_s.getsockname()[1])


@pytest.fixture(scope="session")
def tiny_fp8():
    """(model, hf_config): the block-FP8 tiny GLM-5.3, seed 0."""
    from tiny_glm53 import build_tiny_model

    return build_tiny_model(is_fp8=True, seed=0)


@pytest.fixture(scope="session")
def tiny_bf16():
    """(model, hf_config): the bf16 tiny GLM-5.3, seed 0 (the same draws as tiny_fp8 before quant)."""
    from tiny_glm53 import build_tiny_model

    return build_tiny_model(is_fp8=False, seed=0)
