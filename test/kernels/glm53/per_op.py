"""SGLang's own per-op path for one layer, the baseline `time_layers.py` times a launch kind against.

`SharedPerOp`: the shared kind's layer from SGLang's Triton kernels (act_quant_triton,
w8a8_block_fp8_matmul_triton, triton_sparse_mla_decode, the fused-MoE Triton kernel) with torch glue for
norms, rope, routing and the MoE alignment, capturable in a CUDA graph. Needs SGLang's kernels importable
(on the H200: the wheels of `../shared/reference/cpu-install.md`).
"""

from __future__ import annotations

import torch
import triton.language as tl


class SharedPerOp:
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
        """Returns (out, residual_out, o) [R, D] bf16; writes the rows' cache rows."""
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
