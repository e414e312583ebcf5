"""Runs in a subprocess with TRITON_INTERPRET=1 set before triton is imported (see test_launch_shared_interp.py)."""
import os
import sys

assert os.environ.get("TRITON_INTERPRET") == "1"
import torch  # noqa: E402

from sgl_amd_mono.common import numerics as nm  # noqa: E402
from sgl_amd_mono.glm53 import launch_inputs as li  # noqa: E402
from sgl_amd_mono.glm53 import launch_shared as ls  # noqa: E402


def main(case, spec=""):
    geo = li.tiny_geometry()
    width, kv = {"w1": (1, torch.bfloat16), "w4fp8": (4, torch.float8_e4m3fn), "w2": (2, torch.bfloat16),
                 "control": (2, torch.bfloat16), "deadline": (1, torch.bfloat16), "ties": (2, torch.bfloat16)}[case]
    aw, mw = li.random_weights(geo, tp=1, seed=3)
    st = li.random_step(geo, width=width, context=300, kv_dtype=kv, seed=4, mtp=width > 1, pad_rows=1 if width > 1 else 0)
    ref, kv_ref = li.oracle(geo, aw, mw, st)
    opts = ls.LaunchOptions(placement="sequential")
    if case == "control":
        aw.o_proj_s[0, :] *= 1.2
    if case == "deadline":
        opts = ls.LaunchOptions(placement="sequential", deadline_s=1e-3, skip_arrive=5)
    if case == "ties":  # a zero gate: every score 0.5; expert 11 alone gets a bias, the rest tie for 2nd
        mw.gate.zero_()
        mw.bias.zero_()
        mw.bias[11] = 1.0
    # e.g. 'progs_per_sm=2' (the build options the GPU scripts A/B); 'target=gfx950,...': that target's tiles first
    parts = [p for p in spec.split(",") if p.strip()]
    target = next((p.split("=", 1)[1].strip() for p in parts if p.strip().startswith("target=")), "")
    tiles = ls.Tiles().for_target(target).with_spec(",".join(p for p in parts if not p.strip().startswith("target=")))
    L = ls.build_shared(geo, aw, mw, tp=1, width=width, kv_dtype=kv, device="cpu", options=opts, tiles=tiles)
    kv_t = st.kv_cache.clone()
    out = L(st.hidden, st.residual, st.cos_sin, kv_t, st.out_loc, st.topk_slots)
    if case == "deadline":
        L.check_error()  # raises
        return
    L.check_error()
    if case == "ties":  # the lowest id wins a tie (an arg-max loop's order): ids [11, 0, shared]
        want = torch.tensor([[11, 0, geo.n_routed]] * width, dtype=torch.int32)
        print(f"ties_ids_ok={int(torch.equal(out['ids'], want))}")
        print(f"ties_weights_max_err={(out['weights'] - torch.tensor([1.25, 1.25, 1.0])).abs().max().item()!r}")
        return
    vals = {
        "shared.o.rel": nm.rel(out["o"], ref["o"]), "shared.residual.rel": nm.rel(out["residual"], ref["residual"]),
        "shared.out.rel": nm.rel(out["out"], ref["out"]),
        "shared.ids.max_abs": nm.max_abs(out["ids"].float(), ref["ids"].float()),
        "shared.weights.max_abs": nm.max_abs(out["weights"], ref["weights"]),
    }
    changed = (kv_t.view(torch.uint8) != st.kv_cache.view(torch.uint8)).any(-1).nonzero().flatten().tolist()
    vals["cache_rows_outside_out_loc"] = len(set(changed) - set(st.out_loc.tolist()))
    vals["kv_rows_differ"] = int((kv_t.view(torch.uint8) != kv_ref.view(torch.uint8)).any(-1).sum())
    vals["epoch"] = int(L.sync[0])
    bits = b"".join(t.contiguous().view(torch.uint8).numpy().tobytes() for t in (*out.values(), kv_t))
    import hashlib
    vals["bits_digest"] = int(hashlib.sha1(bits).hexdigest()[:12], 16)  # exact-bits fingerprint (< 2**48)
    for k, v in vals.items():
        print(f"{k}={v!r}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "")
