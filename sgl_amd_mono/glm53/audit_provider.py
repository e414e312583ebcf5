"""SGLang's path for one layer on a launch's own inputs: the auditor's provider (`audit.py`), chosen by what runs on
the host, and named in every report record.

  cpu-modules            CPU (the launches under Triton's interpreter): SGLang's modules' numerics as the reference
                         pins them, `layer.py` (attention_half, route, the MoE and dense MLP) and `indexer.py`
                         (indexer_select, the exact top-k), held to SGLang's own modules by
                         `test/unit/test_reference_pinned.py` and `test_indexer_pinned.py`; the tail as the reference
                         backend's (RMSNorm, then the bf16 LM head `test_lm_head_logits` pins to SGLang's
                         LogitsProcessor).
  sglang-triton-kernels  A GPU without SGLang's full stack (no FlashMLA, DeepGEMM or sgl_kernel, as on the H200):
                         SGLang's kernels that run there (triton_sparse_mla_decode, w8a8_block_fp8_matmul_triton, the
                         fused-MoE Triton kernel with the alignment in torch, act_quant) and torch for the rest
                         (`per_op.py`'s parts).
SGLang's own layer modules (a user's GPU with the full stack) are not a provider yet: where that stack is found, the
kernels provider runs and the log says so.

Each part of a layer runs on what the launch fed that part (`LaunchParts`), as check_layer compares a launch kind: the
attention over the list the launch's attention read (SGLang's own list is still computed, for the list's own
comparison), the FFN on the launch's o_proj output with the launch's routing, and the router on the launch's own
post-attention norm output (compared with the launch's routing). So rounding upstream of a part (keys traded at the
top-k threshold between fp8 scores, a near-tie expert flipped) is compared where it arises, not again in every part
after it.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
from typing import Any, Optional

import torch

from sgl_amd_mono.glm53.config import Glm53Geometry
from sgl_amd_mono.glm53.weights import ModelWeights

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class LayerInputs:
    """What a layer's launch read, as SGLang's path takes it (copies where a launch overwrites them in place)."""

    input_ids: torch.Tensor  # [R] int64: layer 0 reads its embedding rows
    hidden: Optional[torch.Tensor]  # [R, D] bf16, the previous layer's output; None on layer 0
    residual: Optional[torch.Tensor]  # [R, D] bf16; None on layer 0
    cos_sin: torch.Tensor  # [R, rope] f32: SGLang's cos_sin_cache rows at the rows' positions
    positions: torch.Tensor  # [R] int64
    kv_cache: torch.Tensor  # [slots, kv_lora + rope] bf16 / fp8, written in place at out_loc
    index_k_cache: Optional[torch.Tensor]  # [pages, 64 * 132] uint8, written in place; None on shared layers
    out_loc: torch.Tensor  # [R] int64
    page_table: torch.Tensor  # [R, P] int32: the step's own (not the launches' padded buffer)
    lengths: torch.Tensor  # [R] int32
    topk_slots: Optional[torch.Tensor]  # [R, index_topk] int32: the previous top-k (shared layers)


@dataclasses.dataclass
class LaunchParts:
    """What a launch fed its later parts: SGLang's path takes each part's inputs from here. None: SGLang's path uses
    its own (a kind without the part, or `_audit_main.provider_check`'s end-to-end run)."""

    topk: Optional[torch.Tensor] = None  # [R, index_topk] int32: the list the launch's attention read (its own top-k)
    o: Optional[torch.Tensor] = None  # [R, D] bf16: the launch's o_proj output, the FFN half's input (with res1)
    expert_ids: Optional[torch.Tensor] = None  # [R, top_k + 1] int32: the launch's routing, the experts' input
    expert_weights: Optional[torch.Tensor] = None  # [R, top_k + 1] f32: its weights
    xn2: Optional[torch.Tensor] = None  # [R, D] bf16: the launch's post-attention norm output, the router's input


class ModulesProvider:
    """cpu-modules: the reference's layer functions over SGLang's loaded weights (`bind_model`'s)."""

    name = "cpu-modules"
    what = ("SGLang's modules' numerics: glm53/layer.py and glm53/indexer.py, pinned to SGLang's modules by "
            "test_reference_pinned.py and test_indexer_pinned.py")

    def __init__(self, geo: Glm53Geometry, weights: ModelWeights, lm_head: torch.Tensor):
        self.geo, self.w, self.lm_head = geo, weights, lm_head  # lm_head: the model's lm_head.weight [V, D] bf16

    def layer(self, i: int, kind: str, x: LayerInputs, parts: LaunchParts) -> dict[str, torch.Tensor]:
        """Layer i's parts, each on the launch's input to it (`LaunchParts`), by the launch kinds' names: "o" (over
        parts.topk), "residual_out" (res1 + that o), "out" (on parts.o, routed by parts' routing), "xn2" (the FFN's
        normed input), "topk" (SGLang's own list, where the layer selects one), "expert_ids" / "expert_weights" (the
        router on parts.xn2, MoE layers). Writes its MLA (and index-K) rows at out_loc."""
        from sgl_amd_mono.backends import reference as ref
        from sgl_amd_mono.glm53 import layer as lay

        geo, lw = self.geo, self.w.layers[i]
        hidden = x.hidden if x.hidden is not None else torch.nn.functional.embedding(x.input_ids, self.w.embed)
        own: dict = {}
        select = None
        if kind != "shared":
            pick = lay.indexer_select(geo, lw.indexer, positions=x.positions, cos_sin=x.cos_sin,
                                      index_k_cache=x.index_k_cache, out_loc=x.out_loc, page_table=x.page_table,
                                      lengths=x.lengths)

            def select(xn, q_lora):  # SGLang's own list selected (its index keys written); the launch's attended
                own["topk"] = pick(xn, q_lora)
                return own["topk"] if parts.topk is None else parts.topk

        a = lay.attention_half(geo, lw.attn, hidden=hidden, residual=x.residual, cos_sin=x.cos_sin,
                               kv_cache=x.kv_cache, out_loc=x.out_loc,
                               topk_slots=x.topk_slots if kind == "shared" else None, select=select)
        post = lw.attn.post_norm
        _, residual_out = ref.rms_norm(a.o, post, geo.rms_eps, a.residual)
        xn2, _ = ref.rms_norm(a.o if parts.o is None else parts.o, post, geo.rms_eps, a.residual)
        d = {"o": a.o, "residual_out": residual_out, "xn2": xn2, **own}
        f = lw.ffn
        if isinstance(f, lay.DenseWeights):
            d["out"] = ref.dense_mlp_block_fp8(xn2, f.gate_up, f.gate_up_s, f.down, f.down_s)
            return d
        weights, ids = lay.route(geo, f, xn2 if parts.xn2 is None else parts.xn2)
        if parts.expert_ids is not None:
            use_w, use_ids = parts.expert_weights, parts.expert_ids
        else:
            use_w, use_ids = weights, ids
        d.update(out=ref.moe_block_fp8(xn2, f.w13, f.w13_s, f.w2, f.w2_s, use_w, use_ids), expert_ids=ids,
                 expert_weights=weights)
        return d

    def tail(self, *, hidden: torch.Tensor, residual: torch.Tensor) -> dict[str, torch.Tensor]:
        """{"logits": [R, V] f32, "normed": [R, D] bf16}: the final RMSNorm and SGLang's bf16 LM head."""
        from sgl_amd_mono.backends import reference as ref

        normed, _ = ref.rms_norm(hidden, self.w.final_norm, self.geo.rms_eps, residual)
        return {"logits": torch.nn.functional.linear(normed, self.lm_head).float(), "normed": normed}


class TritonKernelsProvider:
    """sglang-triton-kernels: `per_op.py`'s layers (one a layer and width, made on first use)."""

    name = "sglang-triton-kernels"
    what = ("SGLang's Triton kernels that run without its full stack (triton_sparse_mla_decode, "
            "w8a8_block_fp8_matmul_triton, invoke_fused_moe_kernel, act_quant) and torch glue: glm53/per_op.py")

    def __init__(self, geo: Glm53Geometry, weights: ModelWeights, lm_head: torch.Tensor):
        self.geo, self.w, self.lm_head = geo, weights, lm_head
        self._ops: dict = {}
        self._is_logged = False

    def _op(self, i: int, kind: str, width: int):
        from sgl_amd_mono.glm53 import per_op

        key = (i, width)
        if key not in self._ops:
            lw = self.w.layers[i]
            aw = lw.attn
            if aw.w_kc.dtype != torch.bfloat16:  # per_op's bmm is CUDA's bf16 one: an fp8 W_UK / W_UV as SGLang's
                from sgl_amd_mono.glm53.runner_triton import _bf16_absorb  # CPU forward dequantizes them

                aw = dataclasses.replace(aw, w_kc=_bf16_absorb(aw.w_kc, aw.w_scale),
                                         w_vc=_bf16_absorb(aw.w_vc, aw.w_scale), w_scale=None)
            if kind == "shared":
                self._ops[key] = per_op.SharedPerOp(self.geo, 1, aw, lw.ffn, width)
            elif kind in ("tokens", "dense"):
                self._ops[key] = per_op.DensePerOp(self.geo, 1, aw, lw.indexer, lw.ffn, width)
            else:
                self._ops[key] = per_op.IndexerPerOp(self.geo, 1, aw, lw.indexer, lw.ffn, width)
            if kind != "shared" and not self._is_logged:
                logger.info("sgl-amd-mono check: %s: index scores and top-k by %s", self.name, self._ops[key].which)
                self._is_logged = True
        return self._ops[key]

    def layer(self, i: int, kind: str, x: LayerInputs, parts: LaunchParts) -> dict[str, torch.Tensor]:
        """As ModulesProvider.layer, from per_op's parts (SGLang's kernels)."""
        op = self._op(i, kind, int(x.out_loc.shape[0]))
        hidden = x.hidden if x.hidden is not None else torch.nn.functional.embedding(x.input_ids, self.w.embed)
        xn, res, ql, qn, qpe = op.front(hidden, x.residual, x.cos_sin, x.kv_cache, x.out_loc)
        d: dict = {}
        topk = x.topk_slots
        if kind != "shared":  # SGLang's own list (its index keys written); the launch's attended
            d["topk"] = op.index(xn, ql, x.cos_sin, x.index_k_cache, x.out_loc, x.page_table, x.lengths)
            topk = d["topk"] if parts.topk is None else parts.topk.contiguous()
        xn2, res2, o = op.attend(res, qn, qpe, x.kv_cache, topk)
        if parts.o is not None:
            xn2, _ = op.rms(parts.o, op.aw.post_norm, self.geo.rms_eps, res)
        d.update(o=o, residual_out=res2, xn2=xn2)
        if kind in ("tokens", "dense"):
            d["out"] = op.mlp(xn2)
            return d
        ids, weights = op.route(xn2 if parts.xn2 is None else parts.xn2)
        routing = (ids, weights) if parts.expert_ids is None else (parts.expert_ids, parts.expert_weights)
        d.update(out=op.experts(xn2, *routing), expert_ids=ids, expert_weights=weights)
        return d

    def tail(self, *, hidden: torch.Tensor, residual: torch.Tensor) -> dict[str, torch.Tensor]:
        from sgl_amd_mono.glm53.per_op import TailPerOp

        w = dataclasses.make_dataclass("TailWeights", ["final_norm", "lm_head"])(self.w.final_norm, self.lm_head)
        return TailPerOp(self.geo, 1, w, int(hidden.shape[0])).tail(hidden=hidden, residual=residual)


def has_full_stack() -> bool:
    """SGLang's CUDA stack whose own layer modules would run here: real sgl_kernel, deep_gemm and flash_mla (an
    import-only stand-in, as the H200 harness carries, does not count)."""
    try:
        sk = importlib.import_module("sgl_kernel")
        importlib.import_module("deep_gemm")
        importlib.import_module("flash_mla")
    except Exception:  # noqa: BLE001 (any import failure: not the full stack)
        return False
    return "stand-in" not in str(getattr(sk, "__version__", "stand-in"))


def choose(geo: Glm53Geometry, weights: ModelWeights, lm_head: torch.Tensor, device: Any):
    """The provider for launches on `device`: cpu-modules on CPU, sglang-triton-kernels on a GPU."""
    if torch.device(device).type == "cpu":
        return ModulesProvider(geo, weights, lm_head)
    if has_full_stack():
        logger.warning("sgl-amd-mono check: SGLang's full stack is here, but its own layer modules are not an audit "
                       "provider yet; auditing against its Triton kernels (per_op.py)")
    return TritonKernelsProvider(geo, weights, lm_head)
