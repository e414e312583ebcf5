"""Unit-test process setup, before SGLang or Triton is imported, and the tiny models shared by the
reference tests (built once per session: ~17 s each).

- TRITON_INTERPRET is NOT set here: it would turn every @triton.jit into an interpreted function
  and break AOT compile tests. test_reference_triton.py runs SGLang's Triton kernels under the
  interpreter in a subprocess instead.
- MASTER_PORT: a free port for the single-process gloo group, so concurrent test runs on one
  machine do not collide on tiny_glm53's default port.
- OPENBLAS_CORETYPE=Haswell: the kernels numpy's OpenBLAS picks for the interpreter's dots. On a CPU with AVX-512
  FP16, OpenBLAS's own choice sums in another order than on the machine that pinned the digests, and the launches'
  bits changed there (indexer w3: o 1.4e-3 from the oracle, where it was bitwise); with its Haswell (AVX2) kernels
  that CPU gives the pinned bits, which any x86-64 CPU with AVX2 runs alike. Torch's CPU kernels are left as they dispatch (pinning MKL to AVX2 moves
  the oracle instead: tokens w2's o by 1.5e-3). Set for this process and every subprocess the tests start.
"""

import os
import socket

import pytest

os.environ.setdefault("OPENBLAS_CORETYPE", "Haswell")

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
