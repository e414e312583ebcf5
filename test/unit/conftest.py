"""Unit-test process setup, before SGLang or Triton is imported.

- TRITON_INTERPRET=1: SGLang's Triton kernels (its block-FP8 GEMM, act_quant) run on CPU under
  Triton's interpreter, so the reference is pinned to them without a GPU. A run that already set
  the variable keeps its value.
- MASTER_PORT: a free port for the single-process gloo group, so concurrent test runs on one
  machine do not collide on tiny_glm53's default port.
"""

import os
import socket

os.environ.setdefault("TRITON_INTERPRET", "1")
if "MASTER_PORT" not in os.environ:
    with socket.socket() as _s:
        _s.bind(("127.0.0.1", 0))
        os.environ["MASTER_PORT"] = str(_s.getsockname()[1])
