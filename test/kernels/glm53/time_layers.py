"""µs per shared launch at 1/2/4/8 rows and ~8K / ~128K context, against its byte floor and SGLang's per-op path.

torchrun --nproc-per-node 1 test/kernels/glm53/time_layers.py [--tp 8] [--widths 1 2 4 8] [--contexts 8192 131072]
- bandwidth: a read-only streaming Triton kernel over 4 GiB (no writes), measured in this run;
- floor: geo.layer_bytes(tp, rows, context, experts = the distinct experts actually routed)['total'] / bandwidth;
- launch: CUDA graph of the launch cycling over N_LAYERS independent layers (so L2 holds none of them);
- per-op: the same layer from SGLang's own Triton kernels (act_quant_triton, w8a8_block_fp8_matmul_triton,
  triton_sparse_mla_decode, the fused-MoE Triton kernel) with torch glue, CUDA-graphed, same layers;
- the torch oracle `layer.shared_layer` once, eager.
Prints a table; a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import traceback

import torch
import triton
import triton.language as tl

from sgl_amd_mono.glm53 import launch_inputs as li
from sgl_amd_mono.glm53 import launch_shared as ls

N_LAYERS = 4


@triton.jit
def _stream_read(x_ptr, out_ptr, n, BLOCK: tl.constexpr, NPROG: tl.constexpr):
    """grid=(NPROG,): each program reads blocks pid, pid+NPROG, ... and writes one tiny partial."""
    pid = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.int32)
    for b in range(pid, tl.cdiv(n, BLOCK), NPROG):
        offs = b.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        acc ^= tl.load(x_ptr + offs, mask=offs < n, other=0)
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))


def graph_time_us(fn, reps=20, inner=10):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(inner):
            fn()
    g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) * 1e3 / inner)
    ts.sort()
    return ts[len(ts) // 2]


def read_bandwidth() -> float:
    """Bytes/s of a read-only streaming kernel over 4 GiB."""
    n = 2**30  # int32 words = 4 GiB
    x = torch.randint(0, 2**30, (n,), dtype=torch.int32, device="cuda")
    nsm = torch.cuda.get_device_properties(0).multi_processor_count
    best = 0.0
    for nprog in (nsm * 4, nsm * 8):
        out = torch.empty(nprog, dtype=torch.int32, device="cuda")
        us = graph_time_us(lambda: _stream_read[(nprog,)](x, out, n, BLOCK=4096, NPROG=nprog, num_warps=8), reps=10, inner=3)
        best = max(best, 4 * n / (us * 1e-6))
    del x
    return best


# ---------------- SGLang per-op path ----------------
class PerOp:
    """The layer from SGLang's Triton kernels; torch for norms, rope, routing and MoE alignment glue."""

    def __init__(self, geo, tp, aw, mw, width):
        from sglang.kernels.ops.attention.dsa.triton_sparse_mla_decode import triton_sparse_mla_decode
        from sglang.kernels.ops.gemm.fp8_kernel import w8a8_block_fp8_matmul_triton
        from sglang.kernels.ops.moe.fused_moe_triton_kernels import invoke_fused_moe_kernel
        from sglang.kernels.ops.quantization.act_quant_triton import act_quant

        self.mla, self.mm, self.moe, self.quant = triton_sparse_mla_decode, w8a8_block_fp8_matmul_triton, invoke_fused_moe_kernel, act_quant
        self.geo, self.aw, self.mw, self.r = geo, aw, mw, width
        self.s = geo.shard(tp)
        k = geo.top_k + 1
        self.block_m = 16
        self.max_pad = width * k + (geo.n_routed + 1) * (self.block_m - 1)
        self.cfg = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1,
                    "num_warps": 4, "num_stages": 3}

    def linear(self, x, w, ws):
        q, s = self.quant(x.contiguous(), 128, None)
        return self.mm(q, w, s, ws, [128, 128], output_dtype=torch.bfloat16)

    @staticmethod
    def rms(x, w, eps, res=None):
        xf = x.float() + (res.float() if res is not None else 0)
        nr = xf.to(torch.bfloat16) if res is not None else x
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(torch.bfloat16), nr

    @staticmethod
    def rope(x, cs):
        cos, sin = cs.chunk(2, dim=-1)
        cos, sin = cos[:, None], sin[:, None]
        x1, x2 = x.float()[..., ::2], x.float()[..., 1::2]
        return torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), -1).flatten(-2).to(x.dtype)

    def align(self, ids):
        """moe_align_block_size in torch, no host sync: sorted token ids, block experts, padded count."""
        e_all = self.geo.n_routed + 1
        flat = ids.flatten().long()
        n = flat.numel()
        counts = torch.zeros(e_all, dtype=torch.int64, device=ids.device).scatter_add_(0, flat, torch.ones_like(flat))
        padded = (counts + self.block_m - 1) // self.block_m * self.block_m
        starts = torch.cumsum(padded, 0) - padded
        order = torch.argsort(flat, stable=True)
        first = torch.cumsum(counts, 0) - counts
        rank = torch.arange(n, device=ids.device) - first[flat[order]]
        sorted_ids = torch.full((self.max_pad,), n, dtype=torch.int32, device=ids.device)
        sorted_ids[starts[flat[order]] + rank] = order.to(torch.int32)
        nblk = self.max_pad // self.block_m + 1
        bstart = torch.arange(nblk, device=ids.device) * self.block_m
        ends = torch.cumsum(padded, 0)
        exp_ids = torch.searchsorted(ends, bstart, right=True).to(torch.int32)
        exp_ids = torch.where(exp_ids >= e_all, -1, exp_ids).to(torch.int32)
        total = ends[-1:].to(torch.int32)
        return sorted_ids, exp_ids, total

    def __call__(self, hidden, residual, cos_sin, kv, out_loc, topk):
        g, a, m, r, s = self.geo, self.aw, self.mw, self.r, self.s
        x, res = self.rms(hidden, a.input_norm, g.rms_eps, residual)
        qkv = self.linear(x, a.qkv_a, a.qkv_a_s)
        q, c, kpe = qkv.split([g.q_lora, g.kv_lora, g.qk_rope], -1)
        ql, _ = self.rms(q, a.q_a_norm, g.rms_eps)
        c, _ = self.rms(c, a.kv_a_norm, g.rms_eps)
        qf = self.linear(ql, a.q_b, a.q_b_s).view(r, s.heads, g.qk_head)
        qn, qpe = qf.split([g.qk_nope, g.qk_rope], -1)
        qn = torch.bmm(qn.transpose(0, 1), a.w_kc).transpose(0, 1)
        qpe = self.rope(qpe, cos_sin)
        kpe = self.rope(kpe.reshape(r, 1, g.qk_rope), cos_sin).view(r, g.qk_rope)
        kv[out_loc] = torch.cat((c, kpe), -1).to(kv.dtype)
        o = self.mla(qn.contiguous(), qpe.contiguous(), kv.view(kv.shape[0], 1, -1), topk.view(r, 1, -1),
                     g.softmax_scale, g.kv_lora)[0]
        v = torch.bmm(o.transpose(0, 1), a.w_vc).transpose(0, 1).reshape(r, -1)
        o = self.linear(v, a.o_proj, a.o_proj_s)
        x2, res2 = self.rms(o, a.post_norm, g.rms_eps, res)
        logits = x2.float() @ m.gate.float().t()
        sc = logits.sigmoid()
        ids = torch.topk(sc + m.bias, g.top_k, dim=-1)[1]
        w = sc.gather(1, ids)
        w = w / (w.sum(-1, keepdim=True) + 1e-20) * g.routed_scaling
        ids = torch.cat((ids, torch.full((r, 1), g.n_routed, device=ids.device)), 1).to(torch.int32)
        w = torch.cat((w, torch.ones(r, 1, device=w.device)), 1).float().contiguous()
        sorted_ids, exp_ids, total = self.align(ids)
        k = g.top_k + 1
        xq, xs = self.quant(x2.contiguous(), 128, None)
        c1 = torch.empty(r, k, 2 * s.moe_inter, dtype=torch.bfloat16, device=x.device)
        self.moe(xq, m.w13, None, c1, xs, m.w13_s, None, w, ids, sorted_ids, exp_ids, total, False, k, self.cfg,
                 compute_type=tl.bfloat16, use_fp8_w8a8=True, use_int8_w8a8=False, use_int8_w8a16=False,
                 use_int4_w4a16=False, per_channel_quant=False, block_shape=[128, 128])
        gg, uu = c1.view(r * k, -1).float().chunk(2, -1)
        act = (torch.nn.functional.silu(gg) * uu).to(torch.bfloat16)
        aq, as_ = self.quant(act, 128, None)
        c3 = torch.empty(r, k, g.hidden, dtype=torch.bfloat16, device=x.device)
        self.moe(aq, m.w2, None, c3, as_, m.w2_s, None, w, ids, sorted_ids, exp_ids, total, True, 1, self.cfg,
                 compute_type=tl.bfloat16, use_fp8_w8a8=True, use_int8_w8a8=False, use_int8_w8a16=False,
                 use_int4_w4a16=False, per_channel_quant=False, block_shape=[128, 128])
        return c3.float().sum(1).to(torch.bfloat16), res2, o


def trace_tables(geo, layers, tiles, tp, widths, replays=15, skip_mask=0):
    """Per-stage start/work/sync/span (median over replays of the last layer's stamps), and the launch's
    µs with and without the stamps (the trace's own cost). skip_mask: stages emptied (timing only: the
    stages after read stale inputs), to see what a stage's time depends on."""
    from sgl_amd_mono.common import trace

    for w in widths:
        st = li.random_step(geo, width=w, context=8192, kv_dtype=torch.bfloat16, seed=77, device="cuda")
        kv = st.kv_cache.clone()
        us = {}
        for on in (False, True):
            Ls = [ls.build_shared(geo, aw, mw, tp=tp, width=w, kv_dtype=torch.bfloat16, device="cuda",
                                  options=ls.LaunchOptions(trace=on, skip_mask=skip_mask), tiles=tiles)
                  for aw, mw in layers]
            run = lambda: [L(st.hidden, st.residual, st.cos_sin, kv, st.out_loc, st.topk_slots) for L in Ls]  # noqa: E731
            us[on] = graph_time_us(run) / N_LAYERS
        tabs = []
        for _ in range(replays):
            run()
            torch.cuda.synchronize()
            tabs.append(Ls[-1].trace_table())
        med = [{k: (sorted(t[i][k] for t in tabs)[len(tabs) // 2] if k != "stage" else tabs[0][i][k])
                for k in tabs[0][i]} for i in range(len(tabs[0]))]
        skipped = f", stages {skip_mask:#x} emptied" if skip_mask else ""
        print(f"\ntrace rows {w} ctx 8192{skipped}: launch {us[False]:.1f} us (trace build {us[True]:.1f} us); "
              f"median of {replays} eager steps of the last of {N_LAYERS} layers", flush=True)
        print(trace.format_table(med), flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tp", type=int, default=8)
    p.add_argument("--widths", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--contexts", type=int, nargs="+", default=[8192, 131072])
    p.add_argument("--no-perop", action="store_true")
    p.add_argument("--stages-only", action="store_true",
                   help="only time the launch with each single stage emptied (rows 1, ctx 8K): per-stage cost")
    p.add_argument("--trace", type=int, nargs="*", default=None,
                   help="only the per-stage table of a trace build (global-timer stamps) at these rows (default 1 8), ctx 8K")
    p.add_argument("--skip", nargs="*", default=[],
                   help="with --trace: stages (names) to empty in the traced build (timing only, results invalid)")
    p.add_argument("--tiles", default="", help="tile overrides, e.g. 'bn_a=32,ks_a=8' (default: ls.Tiles())")
    p.add_argument("--sweep", nargs="*", default=None,
                   help="only time these tile overrides (one spec each; '' = the defaults) at rows 1 and 8, ctx 8K")
    p.add_argument("--no-variants", action="store_true", help="skip the stage-group variants")
    p.add_argument("--variants", nargs="+", default=None,
                   help="build variants (launch_shared.VARIANTS names) timed in the same run, one table each")
    p.add_argument("--pick", default=None,
                   help="with --variants: write the fastest variant's tile spec here (least summed us at the first context)")
    args = p.parse_args()
    from sgl_amd_mono.backends.triton.shared_layer import STAGES

    bad = [n for n in args.skip if n not in STAGES]
    if bad:
        raise SystemExit(f"--skip {bad}: not stages of the launch ({', '.join(STAGES)})")
    tiles = ls.Tiles().with_spec(args.tiles)
    print("tiles:", tiles, flush=True)
    variants = [(v, tiles.variant(v)) for v in args.variants] if args.variants else [("tiles", tiles)]
    geo = li.glm53_geometry()
    bw = read_bandwidth()
    print(f"read-only streaming bandwidth: {bw / 1e12:.2f} TB/s (4 GiB, same run)", flush=True)
    layers = [li.random_weights(geo, tp=args.tp, seed=10 + i, device="cuda") for i in range(N_LAYERS)]
    if args.sweep is not None:
        for w in (1, 8):
            st = li.random_step(geo, width=w, context=8192, kv_dtype=torch.bfloat16, seed=77, device="cuda")
            for spec in args.sweep:
                t = tiles.with_spec(spec)
                Ls = [ls.build_shared(geo, aw, mw, tp=args.tp, width=w, kv_dtype=torch.bfloat16, device="cuda",
                                      tiles=t) for aw, mw in layers]
                kv = st.kv_cache.clone()
                us = graph_time_us(lambda: [L(st.hidden, st.residual, st.cos_sin, kv, st.out_loc, st.topk_slots)
                                            for L in Ls]) / N_LAYERS
                for L in Ls:
                    L.check_error()
                print(f"sweep rows {w} ctx 8192 tiles '{spec}': {us:.1f} us  regs={Ls[0].resources}", flush=True)
        return
    if args.trace is not None:
        trace_tables(geo, layers, tiles, args.tp, args.trace or [1, 8],
                     skip_mask=sum(1 << STAGES.index(n) for n in args.skip))
        return
    if args.stages_only:
        st = li.random_step(geo, width=1, context=8192, kv_dtype=torch.bfloat16, seed=77, device="cuda")
        base = None
        for i, name in [(-1, "full")] + list(enumerate(STAGES)):
            Ls = [ls.build_shared(geo, aw, mw, tp=args.tp, width=1, kv_dtype=torch.bfloat16, device="cuda",
                                  options=ls.LaunchOptions(skip_mask=0 if i < 0 else 1 << i), tiles=tiles) for aw, mw in layers]
            kv = st.kv_cache.clone()
            us = graph_time_us(lambda: [L(st.hidden, st.residual, st.cos_sin, kv, st.out_loc, st.topk_slots)
                                        for L in Ls]) / N_LAYERS
            base = us if base is None else base
            print(f"rows 1 ctx 8192 without stage {name}: {us:.1f} us (stage costs ~{base - us:.1f} us)", flush=True)
        return
    rows = []
    oracle_done = False
    for ctx in args.contexts:
        for w in args.widths:
            steps = [li.random_step(geo, width=w, context=ctx, kv_dtype=torch.bfloat16, seed=50 + i, device="cuda")
                     for i in range(N_LAYERS)]
            kvs = [st.kv_cache.clone() for st in steps]
            var_us = {}
            for vname, vt in variants:
                try:
                    launches = [ls.build_shared(geo, aw, mw, tp=args.tp, width=w, kv_dtype=torch.bfloat16,
                                                device="cuda", tiles=vt) for aw, mw in layers]

                    def run_all():
                        for L, st, kv in zip(launches, steps, kvs):
                            L(st.hidden, st.residual, st.cos_sin, kv, st.out_loc, st.topk_slots)

                    var_us[vname] = graph_time_us(run_all) / N_LAYERS
                    for L in launches:
                        L.check_error()
                    print(f"ctx {ctx} rows {w} variant {vname}: launch {var_us[vname]:.1f} us "
                          f"resources={launches[0].resources}", flush=True)
                except Exception:
                    traceback.print_exc()
                    var_us[vname] = float("nan")
                    print(f"ctx {ctx} rows {w} variant {vname}: FAILED (see traceback)", flush=True)
            us = var_us[variants[0][0]]
            experts = sum(len(set(L.out["ids"].flatten().tolist())) for L in launches) / N_LAYERS
            floor_b = geo.layer_bytes(tp=args.tp, rows=w, context=ctx, experts=experts)["total"]
            floor_us = floor_b / bw * 1e6
            perop_us = float("nan")
            if not args.no_perop:
                try:
                    pops = [PerOp(geo, args.tp, aw, mw, w) for aw, mw in layers]

                    def run_perop():
                        for P, st, kv in zip(pops, steps, kvs):
                            P(st.hidden, st.residual, st.cos_sin, kv, st.out_loc, st.topk_slots)

                    perop_us = graph_time_us(run_perop) / N_LAYERS
                    if not oracle_done:  # the per-op path agrees with the launch (sanity of the baseline)
                        st = steps[0]
                        po = pops[0](st.hidden, st.residual, st.cos_sin, st.kv_cache.clone(), st.out_loc, st.topk_slots)
                        lo = launches[0](st.hidden, st.residual, st.cos_sin, st.kv_cache.clone(), st.out_loc, st.topk_slots)
                        rel = ((po[0].float() - lo["out"].float()).norm() / lo["out"].float().norm()).item()
                        print(f"per-op path vs launch: out rel {rel:.3g}", flush=True)
                except Exception:
                    traceback.print_exc()
                    print("per-op path unavailable (see traceback); reporting the launch alone", flush=True)
            if not oracle_done:
                from sgl_amd_mono.glm53 import layer
                aw, mw = layers[0]
                st = steps[0]
                kw = dict(hidden=st.hidden, residual=st.residual, cos_sin=st.cos_sin, kv_cache=st.kv_cache.clone(),
                          out_loc=st.out_loc, topk_slots=st.topk_slots)
                layer.shared_layer(geo, aw, mw, **kw)
                torch.cuda.synchronize()
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                layer.shared_layer(geo, aw, mw, **kw)
                b.record()
                torch.cuda.synchronize()
                print(f"torch oracle shared_layer (tp{args.tp}, {w} rows, ctx {ctx}, eager): {a.elapsed_time(b) * 1e3:.0f} us",
                      flush=True)
                oracle_done = True
            for vname, us in var_us.items():
                rows.append((vname, ctx, w, us, floor_us, floor_b / 1e6, experts, perop_us))
                print(f"ctx {ctx} rows {w} [{vname}]: launch {us:.1f} us, floor {floor_us:.1f} us "
                      f"({floor_b / 1e6:.1f} MB, {experts:.1f} experts), {floor_us / us:.0%} of floor; "
                      f"per-op {perop_us:.1f} us, ratio {perop_us / us:.2f}x", flush=True)
            del launches, kvs, steps
            torch.cuda.empty_cache()
    # where the time goes: the same launch with stage groups running no tasks (barriers kept)
    n = len(STAGES)
    groups = {"no attention stages (1-7)": sum(1 << i for i in range(1, 8)),
              f"no MoE stages (9-{n - 1})": sum(1 << i for i in range(9, n)),
              "barriers only (all stages empty)": (1 << n) - 1}
    for w in () if args.no_variants else (1, 8):
        st = li.random_step(geo, width=w, context=8192, kv_dtype=torch.bfloat16, seed=77, device="cuda")
        for name, mask in [("full", 0)] + list(groups.items()):
            Ls = [ls.build_shared(geo, aw, mw, tp=args.tp, width=w, kv_dtype=torch.bfloat16, device="cuda",
                                  options=ls.LaunchOptions(skip_mask=mask), tiles=tiles) for aw, mw in layers]
            kv = st.kv_cache.clone()
            us = graph_time_us(lambda: [L(st.hidden, st.residual, st.cos_sin, kv, st.out_loc, st.topk_slots)
                                        for L in Ls]) / N_LAYERS
            print(f"variant rows {w} ctx 8192 {name}: {us:.1f} us", flush=True)
    for vname, vt in variants:
        print(f"\nvariant {vname}: progs_per_sm={vt.progs_per_sm} num_warps={vt.num_warps}")
        print("| context | rows | launch us | floor us | MB | experts | fraction | per-op us | per-op/launch |")
        print("|---|---|---|---|---|---|---|---|---|")
        for vn, ctx, w, us, fl, mb, ex, po in rows:
            if vn == vname:
                print(f"| {ctx} | {w} | {us:.1f} | {fl:.1f} | {mb:.1f} | {ex:.1f} | {fl / us:.0%} | {po:.1f} | "
                      f"{po / us:.2f} |")
    if args.variants:
        c0 = args.contexts[0]
        tot = {v: sum(r[3] for r in rows if r[0] == v and r[1] == c0) for v, _ in variants}
        tot = {v: t for v, t in tot.items() if t == t}  # NaN = failed variant
        best = min(tot, key=tot.get) if tot else variants[0][0]
        vt = dict(variants)[best]
        spec = f"progs_per_sm={vt.progs_per_sm}"
        print("\nsummed us at ctx", c0, {v: round(t, 1) for v, t in tot.items()})
        print(f"FASTEST VARIANT: {best} ({spec})", flush=True)
        if args.pick:
            with open(args.pick, "w") as f:
                f.write(f"{best} {spec}\n")


if __name__ == "__main__":
    main()
