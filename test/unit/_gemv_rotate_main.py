"""`tile_ops.fp8_gemv_part` under Triton's interpreter (run by test_gemv_rotate.py, which sets TRITON_INTERPRET=1):
a block-FP8 GEMV of 5 k blocks in 64-column tasks, in order and with ROT (each task's k blocks from its column tile
mod 5 on, wrapping: tiles.qb_rotate), against torch's f64 product of the dequantized operands. Prints one JSON line:
each one's largest relative error, and the planted control's (the reference without k block 2)."""
import json
import os

assert os.environ.get("TRITON_INTERPRET") == "1"
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from sgl_amd_mono.backends.triton.tile_ops import fp8_gemv_part  # noqa: E402

R, N, NKB, BN = 3, 256, 5, 64
K = NKB * 128


@triton.jit
def gemv(xq, xs, w, ws, out, R: tl.constexpr, N: tl.constexpr, K: tl.constexpr, BN: tl.constexpr,
         ROT: tl.constexpr):
    nt = tl.program_id(0)
    rows = tl.arange(0, 16)
    acc = fp8_gemv_part(xq, xs, K, K // 128, w, K, ws, K // 128, nt * BN, N, 0, R, K // 128, BN, 2, False, ROT, nt)
    cols = nt * BN + tl.arange(0, BN)
    tl.store(out + rows[:, None] * N + cols[None, :], acc, mask=(rows < R)[:, None])


def main():
    g = torch.Generator().manual_seed(5)
    # each k block at its own scale (1, 10, 100, ...): a block skipped or taken twice moves the sum far
    x = torch.randn(R, K, generator=g) * (10.0 ** torch.arange(NKB)).repeat_interleave(128)
    xs = x.view(R, NKB, 128).abs().amax(-1).clamp_min(1e-10) / 448
    xq = (x.view(R, NKB, 128) / xs[..., None]).to(torch.float8_e4m3fn).view(R, K)
    w = (torch.randn(N, K, generator=g) * 0.1).to(torch.float8_e4m3fn)
    ws = torch.rand(N // 128, NKB, generator=g) + 0.5
    xd = xq.double().view(R, NKB, 128) * xs.double()[..., None]
    wd = w.double().view(N, NKB, 128) * ws.double().repeat_interleave(128, 0)[..., None]
    want = torch.einsum("rkc,nkc->rn", xd, wd)
    dropped = want - torch.einsum("rc,nc->rn", xd[:, 2], wd[:, 2])  # the control: block 2 left out
    res = {}
    for rot in (False, True):
        out = torch.zeros(R, N)
        gemv[(N // BN,)](xq, xs, w, ws, out, R, N, K, BN, rot)
        res[f"rel_rot{int(rot)}"] = ((out.double() - want).abs().max() / want.abs().max()).item()
        if rot:
            res["rel_control"] = ((out.double() - dropped).abs().max() / dropped.abs().max()).item()
    print(json.dumps(res))


if __name__ == "__main__":
    main()
