"""The reference against SGLang's Triton kernels run on CPU by Triton's interpreter, in a
subprocess (TRITON_INTERPRET must be set before Triton decorates a kernel, and would break the AOT
compile tests if set in this process): per_token_group_quant_fp8 scales, the block-FP8 w8a8 GEMM,
and act_quant(ue8m0) scales.

Triton's interpreter mis-rounds an f32 -> fp8 cast that carries into the next binade (0.488 ->
0.25, not 0.5), so the kernels' fp8 bytes are not compared: scales bitwise, the GEMM fed the
reference's quantized activations, act_quant's bytes against its own formula.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from sgl_amd_mono.backends import reference as ref
from sgl_amd_mono.glm53.reference_bounds import BOUNDS, within

D = 256


def _inputs():
    gen = torch.Generator().manual_seed(11)
    sys.path.insert(0, os.path.dirname(__file__))
    from tiny_glm53 import block_quant

    x = torch.randn(5, D, generator=gen).to(torch.bfloat16)
    w, ws = block_quant((torch.randn(320, D, generator=gen) * 0.02).to(torch.bfloat16))
    return {"x": x, "w": w, "ws": ws}


def _sglang_side(path: str) -> None:
    """Runs in the subprocess: SGLang's Triton kernels, interpreted, on the saved inputs."""
    import sglang.kernels.ops.gemm.fp8_kernel as fp8_kernel
    from sglang.kernels.ops.quantization.act_quant_triton import act_quant
    from sglang.srt.layers.quantization.fp8_utils import per_token_group_quant_fp8

    fp8_kernel.get_device_name = lambda *args, **kwargs: "cpu"  # tuned-config lookup by GPU name
    t = torch.load(path)
    xq, xs = ref.group_quant_fp8(t["x"])
    out = {
        "group_scale": per_token_group_quant_fp8(t["x"], 128, column_major_scales=False)[1],
        "gemm": fp8_kernel.w8a8_block_fp8_matmul_triton(xq, t["w"], xs, t["ws"], [128, 128], output_dtype=torch.bfloat16),
        "act_quant_scale": act_quant(t["x"].contiguous(), 128, "ue8m0")[1],
    }
    torch.save(out, path + ".out")


@pytest.fixture(scope="module")
def sglang_out(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("triton") / "inputs.pt")
    t = _inputs()
    torch.save(t, path)
    env = dict(os.environ, TRITON_INTERPRET="1")
    code = f"import sys; sys.path.insert(0, {os.path.dirname(__file__)!r}); import test_reference_triton as m; m._sglang_side({path!r})"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return t, torch.load(path + ".out")


def _check(name, ours, theirs, planted):
    ok, value = within(name, ours, theirs)
    assert ok, f"{name} = {value:.3g} > {BOUNDS[name]}"
    bad_ok, bad = within(name, planted, theirs)
    assert not bad_ok, f"{name}: planted error {bad:.3g} passes"
    print(f"{name}: {value:.3g} (bound {BOUNDS[name]}, control {bad:.3g})")


def test_block_fp8_linear(sglang_out):
    t, out = sglang_out
    xq, xs = ref.group_quant_fp8(t["x"])
    _check("reference.group_quant_scale.max_abs", xs, out["group_scale"], xs * 2)
    ours = ref.block_fp8_linear(t["x"], t["w"], t["ws"])
    _check("reference.linear_fp8.max_rel", ours, out["gemm"], ref.block_fp8_linear(t["x"], t["w"], t["ws"] * 1.2))


def test_act_quant_ue8m0(sglang_out):
    t, out = sglang_out
    q, s = ref.act_quant_ue8m0(t["x"])
    _check("reference.index_act_quant.max_abs", s, out["act_quant_scale"], s * 2)
    x = t["x"].float().view(5, D // 128, 128)
    want = (x / out["act_quant_scale"][..., None]).clamp(-448, 448).to(torch.float8_e4m3fn)
    assert torch.equal(q.view(5, D // 128, 128).view(torch.uint8), want.view(torch.uint8))
