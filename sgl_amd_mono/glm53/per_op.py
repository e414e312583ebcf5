"""SGLang's own per-op path for one layer: the baseline `test/kernels/glm53/time_layers.py` times a launch kind
against, and the auditor's provider on a GPU without SGLang's full stack (`audit_provider.py`: no FlashMLA,
DeepGEMM or sgl_kernel, as on the H200).

`SharedPerOp`: the shared kind's layer from SGLang's Triton kernels (act_quant_triton,
w8a8_block_fp8_matmul_triton, triton_sparse_mla_decode, the fused-MoE Triton kernel) with torch glue for
norms, rope, routing and the MoE alignment, capturable in a CUDA graph; `IndexerPerOp`, `DensePerOp` and
`TailPerOp` the other kinds. Each layer class's `layer(...)` returns its outputs by the launch kinds' names
({"out", "residual_out", "o"} and "topk" where the layer selects its own). Needs SGLang's kernels importable
(on the H200: the wheels of `../shared/reference/cpu-install.md`). Every SGLang name read is in
`sglang_reads.py`.
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

    def step(self, st, caches):
        """The layer on a step (`launch_inputs.random_step`) and its caches."""
        return self(st.hidden, st.residual, st.cos_sin, caches["kv_cache"], st.out_loc, st.topk_slots)

    def __call__(self, hidden, residual, cos_sin, kv, out_loc, topk):
        """Returns (out, residual_out, o) [R, D] bf16; writes the rows' cache rows."""
        x, res, ql, qn, qpe = self.front(hidden, residual, cos_sin, kv, out_loc)
        return self.back(res, qn, qpe, kv, topk)

    def layer(self, *, hidden, residual, cos_sin, kv_cache, out_loc, topk_slots, **_):
        """{"out", "residual_out", "o"} [R, D] bf16 on the previous layer's top-k topk_slots [R, K] int32;
        writes the rows' MLA cache rows (kv_cache [slots, kv_lora + rope])."""
        out, res, o = self(hidden, residual, cos_sin, kv_cache, out_loc, topk_slots)
        return {"out": out, "residual_out": res, "o": o}

    def front(self, hidden, residual, cos_sin, kv, out_loc):
        """norm1 .. rope and the MLA cache write: (x, residual, q_lora normed, absorbed q nope, q rope)."""
        g, a, r, s = self.geo, self.aw, self.r, self.s
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
        return x, res, ql, qn, qpe

    def attend(self, res, qn, qpe, kv, topk):
        """Sparse MLA over topk, W_UV, o_proj and the post-attention norm: (x2, residual_out, o)."""
        g, a, r = self.geo, self.aw, self.r
        o = self.mla(qn.contiguous(), qpe.contiguous(), kv.view(kv.shape[0], 1, -1), topk.view(r, 1, -1),
                     g.softmax_scale, g.kv_lora)[0]
        v = torch.bmm(o.transpose(0, 1), a.w_vc).transpose(0, 1).reshape(r, -1)
        o = self.linear(v, a.o_proj, a.o_proj_s)
        x2, res2 = self.rms(o, a.post_norm, g.rms_eps, res)
        return x2, res2, o

    def back(self, res, qn, qpe, kv, topk):
        """Sparse MLA over topk .. the MoE: (out, residual_out, o)."""
        x2, res2, o = self.attend(res, qn, qpe, kv, topk)
        ids, w = self.route(x2)
        return self.experts(x2, ids, w), res2, o

    def route(self, x2):
        """The router on x2 [R, D] bf16 (torch glue: SGLang's biased top-k, the fused expert last with weight 1):
        (ids [R, top_k + 1] int32, weights [R, top_k + 1] f32)."""
        g, m, r = self.geo, self.mw, self.r
        logits = x2.float() @ m.gate.float().t()
        sc = logits.sigmoid()
        ids = torch.topk(sc + m.bias, g.top_k, dim=-1)[1]
        w = sc.gather(1, ids)
        w = w / (w.sum(-1, keepdim=True) + 1e-20) * g.routed_scaling
        ids = torch.cat((ids, torch.full((r, 1), g.n_routed, device=ids.device)), 1).to(torch.int32)
        w = torch.cat((w, torch.ones(r, 1, device=w.device)), 1).float().contiguous()
        return ids, w

    def experts(self, x2, ids, w):
        """The routed and fused experts on x2 [R, D] bf16 with the routing (ids [R, k] int32, w [R, k] f32), SGLang's
        fused-MoE Triton kernel (the alignment in torch): [R, D] bf16."""
        g, m, r, s = self.geo, self.mw, self.r, self.s
        ids, w = ids.to(torch.int32).contiguous(), w.float().contiguous()
        sorted_ids, exp_ids, total = self.align(ids)
        k = ids.shape[1]
        xq, xs = self.quant(x2.contiguous(), 128, None)
        c1 = torch.empty(r, k, 2 * s.moe_inter, dtype=torch.bfloat16, device=x2.device)
        self.moe(xq, m.w13, None, c1, xs, m.w13_s, None, w, ids, sorted_ids, exp_ids, total, False, k, self.cfg,
                 compute_type=tl.bfloat16, use_fp8_w8a8=True, use_int8_w8a8=False, use_int8_w8a16=False,
                 use_int4_w4a16=False, per_channel_quant=False, block_shape=[128, 128])
        gg, uu = c1.view(r * k, -1).float().chunk(2, -1)
        act = (torch.nn.functional.silu(gg) * uu).to(torch.bfloat16)
        aq, as_ = self.quant(act, 128, None)
        c3 = torch.empty(r, k, g.hidden, dtype=torch.bfloat16, device=x2.device)
        self.moe(aq, m.w2, None, c3, as_, m.w2_s, None, w, ids, sorted_ids, exp_ids, total, True, 1, self.cfg,
                 compute_type=tl.bfloat16, use_fp8_w8a8=True, use_int8_w8a8=False, use_int8_w8a16=False,
                 use_int4_w4a16=False, per_channel_quant=False, block_shape=[128, 128])
        return c3.float().sum(1).to(torch.bfloat16)


class IndexerPerOp(SharedPerOp):
    """The indexer layer: the shared layer's path, with the top-k from the indexer in between. SGLang's Triton
    kernels where they run here: w8a8_block_fp8_matmul_triton for wk and wq_b, act_quant_triton (ue8m0) for the
    index q and k. Torch for the LayerNorm, rope, Hadamard (SGLang's is the fast_hadamard_transform CUDA
    library), weights_proj (an f32 mm, as SGLang's CUDA path) and the index-K write. Scores and top-k: SGLang's
    torch references fp8_paged_mqa_logits_torch and topk_transform_pytorch_vectorized where they import (SGLang's
    CUDA default scores through DeepGEMM, which is not on the H200), else torch's topk over the oracle's scores
    (`glm53/indexer.index_scores`); `which` says."""

    def __init__(self, geo, tp, aw, iw, mw, width):
        super().__init__(geo, tp, aw, mw, width)
        self.iw = iw
        try:
            from sglang.srt.layers.attention.dsv4.indexer import (fp8_paged_mqa_logits_torch,
                                                                   topk_transform_pytorch_vectorized)

            self.logits, self.transform = fp8_paged_mqa_logits_torch, topk_transform_pytorch_vectorized
            self.which = "SGLang's fp8_paged_mqa_logits_torch and topk_transform_pytorch_vectorized"
        except Exception as e:  # noqa: BLE001 (any import failure: the torch fallback, named)
            self.logits = self.transform = None
            self.which = f"torch.topk over glm53/indexer.index_scores (SGLang's references: {type(e).__name__}: {e})"

    def step(self, st, caches):
        x, res, ql, qn, qpe = self.front(st.hidden, st.residual, st.cos_sin, caches["kv_cache"], st.out_loc)
        topk = self.index(x, ql, st.cos_sin, caches["index_k_cache"], st.out_loc, st.page_table, st.lengths)
        return self.back(res, qn, qpe, caches["kv_cache"], topk)

    def layer(self, *, hidden, residual, cos_sin, kv_cache, out_loc, index_k_cache, page_table, lengths, **_):
        """{"out", "residual_out", "o", "topk"}: the layer with its own top-k [R, index_topk] int32 slots; writes
        the rows' MLA cache rows and index keys (index_k_cache [pages, 64 * 132] uint8)."""
        x, res, ql, qn, qpe = self.front(hidden, residual, cos_sin, kv_cache, out_loc)
        topk = self.index(x, ql, cos_sin, index_k_cache, out_loc, page_table, lengths)
        out, res2, o = self.back(res, qn, qpe, kv_cache, topk)
        return {"out": out, "residual_out": res2, "o": o, "topk": topk}

    def index(self, x, ql, cos_sin, ibuf, out_loc, page_table, lengths):
        """This step's index keys written at out_loc; the rows' top-k as physical slots [R, KTOP] int32."""
        from sgl_amd_mono.glm53.indexer import INDEX_PAGE, IndexQK, _page_views, hadamard, index_scores, to_slots

        g, w, r = self.geo, self.iw, self.r
        dim, heads, rope = g.index_dim, g.index_heads, g.qk_rope
        k = self.linear(x, w.wk, w.wk_s)
        k = torch.nn.functional.layer_norm(k.float(), (dim,), w.k_norm_w, w.k_norm_b, w.k_norm_eps).to(k.dtype)
        k = torch.cat((self.rope(k[:, None, :rope], cos_sin)[:, 0], k[:, rope:]), -1)
        q = self.linear(ql, w.wq_b, w.wq_b_s).view(r, heads, dim)
        q = torch.cat((self.rope(q[..., :rope], cos_sin), q[..., rope:]), -1)
        qq, qs = self.quant(hadamard(q).reshape(r * heads, dim).contiguous(), 128, "ue8m0")
        kq, ks = self.quant(hadamard(k).contiguous(), 128, "ue8m0")
        keys, scales = _page_views(ibuf, dim)
        loc = out_loc.long()
        keys[loc // INDEX_PAGE, loc % INDEX_PAGE] = kq.view(torch.uint8)
        scales[loc // INDEX_PAGE, loc % INDEX_PAGE] = ks[:, 0].float()
        head_w = (x.float() @ w.weights_proj.float().t()) * heads**-0.5 * qs.view(r, heads).float() * dim**-0.5
        span = page_table.shape[1] * INDEX_PAGE
        if self.logits is not None:
            logits = self.logits(qq.view(r, 1, heads, dim), ibuf.view(-1, INDEX_PAGE, 1, dim + 4), head_w, lengths,
                                 page_table, None, span, clean_logits=False)
            out = torch.empty(r, g.index_topk, dtype=torch.int32, device=x.device)
            self.transform(logits, lengths, page_table, out, INDEX_PAGE)
            return out
        scores = index_scores(IndexQK(qq.view(r, heads, dim), head_w, None, None), ibuf, page_table=page_table,
                              lengths=lengths)
        pos = torch.topk(scores, min(g.index_topk, span), dim=1).indices.int()
        pos = torch.where(scores.gather(1, pos.long()) > float("-inf"), pos, -1)
        return to_slots(pos, page_table=page_table)


class DensePerOp(IndexerPerOp):
    """A dense layer (GLM-5.3's layers 0-2): the indexer layer's attention path, then SGLang's dense block-FP8
    SwiGLU MLP from its Triton kernels (act_quant_triton and w8a8_block_fp8_matmul_triton for gate_up and down,
    as its Fp8LinearMethod's Triton path), SiLU-and-mul in torch (SGLang's is `sgl_kernel`, absent here)."""

    def __init__(self, geo, tp, aw, iw, dw, width):
        super().__init__(geo, tp, aw, iw, None, width)
        self.dw = dw

    def step(self, st, caches):
        d = self.layer(hidden=st.hidden, residual=st.residual, cos_sin=st.cos_sin, kv_cache=caches["kv_cache"],
                       out_loc=st.out_loc, index_k_cache=caches["index_k_cache"], page_table=st.page_table,
                       lengths=st.lengths)
        return d["out"], d["residual_out"], d["o"]

    def layer(self, *, hidden, residual, cos_sin, kv_cache, out_loc, index_k_cache, page_table, lengths, **_):
        """As IndexerPerOp.layer, the MLP in place of the MoE (residual None: layer 0, hidden its embedding
        rows)."""
        x, res, ql, qn, qpe = self.front(hidden, residual, cos_sin, kv_cache, out_loc)
        topk = self.index(x, ql, cos_sin, index_k_cache, out_loc, page_table, lengths)
        x2, res2, o = self.attend(res, qn, qpe, kv_cache, topk)
        return {"out": self.mlp(x2), "residual_out": res2, "o": o, "topk": topk}

    def mlp(self, x2):
        """The dense MLP on x2 [R, D] bf16: [R, D] bf16."""
        gg, uu = self.linear(x2, self.dw.gate_up, self.dw.gate_up_s).float().chunk(2, -1)
        act = (torch.nn.functional.silu(gg) * uu).to(torch.bfloat16)
        return self.linear(act, self.dw.down, self.dw.down_s)


class TailPerOp:
    """SGLang's tail on this GPU, per op: its RMSNorm with the residual in torch (SGLang's CUDA path fuses it in
    `sgl_kernel`, not on the H200) and its `_get_logits`, a bf16 torch.matmul (cuBLAS) handed on in f32."""

    which = "torch RMSNorm (sgl_kernel absent) and SGLang's bf16 torch.matmul LM head"

    def __init__(self, geo, tp, weights, width):
        self.geo, self.w = geo, weights

    def step(self, st, caches):
        d = self.tail(hidden=st.hidden, residual=st.residual)
        return d["logits"], d["normed"]

    def tail(self, *, hidden, residual):
        """{"logits": [R, V] f32 (bf16 values), "normed": [R, D] bf16}."""
        xf = hidden.float() + residual.float()
        normed = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.geo.rms_eps)
                  * self.w.final_norm.float()).to(torch.bfloat16)
        return {"logits": torch.matmul(normed, self.w.lm_head.t()).float(), "normed": normed}
