"""A decode row's digit-0 counting with index_lane_bins alone under Triton's interpreter (run as a subprocess by
test_lane_bins_interp.py, so TRITON_INTERPRET=1 is set before triton is imported): `stages_index.count_digit0_lanes`
over a slice of scores 256 a step, then `flush_digit0_lanes`, against torch's count of the scores' digit 0. The
scores: both signs in a narrow band of magnitudes (most lanes' windows within the program's span, summed there), a
quarter of the lanes starting far from it (their own atomics), ±0.0, keys outside every window, and a partial last
step. Prints one JSON line: per (LB, W0) whether the histogram equals torch's, and how many lanes' counts took each
path (both must be non-zero for the check to cover both)."""
import json
import os
import sys

assert os.environ.get("TRITON_INTERPRET") == "1"
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from sgl_amd_mono.backends.triton import stages_index as si  # noqa: E402
from sgl_amd_mono.glm53.indexer import order_keys  # noqa: E402

BLK = 256


@triton.jit
def _count(scores_ptr, hist_ptr, n, LB: tl.constexpr, W0: tl.constexpr, BLK: tl.constexpr):
    lo = tl.full((BLK,), si.NO_LO, dtype=tl.int32)
    acc = tl.zeros((BLK, 2 * LB), dtype=tl.int32)
    for t0 in range(0, n, BLK):
        tt = t0 + tl.arange(0, BLK)
        sc = tl.load(scores_ptr + tt, mask=tt < n, other=0.0)
        lo, acc = si.count_digit0_lanes(sc, tt < n, hist_ptr, lo, acc, LB, W0)
    si.flush_digit0_lanes(hist_ptr, lo, acc, LB, W0)


def scores(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    mag = 2.0 ** (torch.rand(n, generator=g) * 3 + 2)  # |score| in [4, 32): a few digit-0 bins
    s = torch.where(torch.rand(n, generator=g) < 0.4, -mag, mag)
    far = torch.arange(n) % BLK < BLK // 4  # a quarter of the lanes: their keys of even steps far above the band
    s = torch.where(far & (torch.arange(n) // BLK % 2 == 0), s * 2.0 ** 40, s)
    s[BLK + torch.randperm(n - BLK, generator=g)[: n // 50]] *= 2.0 ** -60  # keys outside every window (after
    s[BLK + 5], s[BLK + 7] = 0.0, -0.0  # the first step, which places the windows)
    return s


def main():
    n = 9 * BLK + 77
    s = scores(n, 3)
    res = {}
    for lb in (1, 2, 4):
        for w0 in (8, 12):
            hist = torch.zeros(1 << w0, dtype=torch.int32)
            _count[(1,)](s, hist, n, lb, w0, BLK)
            want = torch.bincount(order_keys(s) >> (32 - w0), minlength=1 << w0).to(torch.int32)
            mag = order_keys(s[:BLK]) >> (32 - w0)  # each lane's first key (every lane has one)
            mag = torch.where(mag < (1 << (w0 - 1)), (1 << w0) - 1 - mag, mag) - (lb - 1) // 2
            far = int((mag - mag.min() > int(si.LANE_SPAN) - lb).sum())
            res[f"{lb},{w0}"] = {"equal": bool(torch.equal(hist, want)), "lanes_far": far, "lanes_in_span": BLK - far}
    print(json.dumps(res))


if __name__ == "__main__":
    main()
