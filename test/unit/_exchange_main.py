"""The cross-rank push protocol (`backends/triton/exchange.py`) under Triton's interpreter, R emulated ranks in one
program in stage order (every rank's push, then every rank's rank-ordered sum): run as a subprocess by
test_exchange.py (TRITON_INTERPRET=1 before triton is imported). Prints one JSON line.

python test/unit/_exchange_main.py R [SKIP_RANK [SKIP_EPOCH]]   (that rank does not push in that launch, default the
first: the deadline case; in a later launch its slot holds the earlier launch's words, which must not pass)
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

assert os.environ.get("TRITON_INTERPRET") == "1"
import torch  # noqa: E402
from _exchange_kernel import toy_exchange  # noqa: E402
from sgl_amd_mono.common import guard, peer  # noqa: E402


def main(R: int, skip: int, skip_epoch: int) -> None:
    N, BLOCK = 300, 128
    g = torch.Generator().manual_seed(R)
    x = (torch.randn(R, N, generator=g) * torch.logspace(-3, 3, N)).float()
    bufs = peer.emulated(R, R * N * 8, "cpu")
    res = {}
    for epoch in (1, 2, 3):  # launches on the same buffers: the words of the last one never pass for this one
        out = torch.zeros(R, N)
        err = guard.new_error_word("cpu")
        xe = x * epoch
        toy_exchange[(1,)](xe, out, bufs[0].ptrs, err, epoch, 200, N=N, R=R, BLOCK=BLOCK,
                           SKIP_RANK=skip if epoch == skip_epoch else -1, TIMER=False)
        e = guard.read_error(err)
        if e is not None:
            res["error"] = e.describe({7: "toy"}, ["push", "sum"])
            break
        want = xe[0].clone()
        for r in range(1, R):  # rank order, in f32
            want = want + xe[r]
        res[f"epoch{epoch}"] = {"ranks_equal": all(torch.equal(out[r], out[0]) for r in range(R)),
                                "rank_order_sum": bool(torch.equal(out[0], want)),
                                "other_order_differs": bool(not torch.equal(out[0], xe.flip(0).sum(0)))
                                if R > 2 else None}
    print(json.dumps(res))


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else -1, int(sys.argv[3]) if len(sys.argv) > 3 else 1)
