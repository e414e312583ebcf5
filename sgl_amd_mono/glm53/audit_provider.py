"""SGLang's path for one layer on a launch's own inputs: the auditor's provider (`audit.py`), chosen by what runs on
the host, and named in every report record.

  cpu-modules            CPU (the launches under Triton's interpreter): SGLang's modules' numerics as the reference
                         pins them, `layer.py` (attention_half, moe_half, dense_half) and `indexer.py` (run_indexer,
                         the exact top-k), held to SGLang's own modules by `test/unit/test_reference_pinned.py` and
                         `test_indexer_pinned.py`; the tail as the reference backend's (RMSNorm, then the bf16 LM head
                         `test_lm_head_logits` pins to SGLang's LogitsProcessor).
  sglang-triton-kernels  A GPU without SGLang's full stack (no FlashMLA, DeepGEMM or sgl_kernel, as on the H200):
                         SGLang's kernels that run there (triton_sparse_mla_decode, w8a8_block_fp8_matmul_triton, the
                         fused-MoE Triton kernel with the alignment in torch, act_quant) and torch for the rest
                         (`per_op.py`).
SGLang's own layer modules (a user's GPU with the full stack) are not a provider yet: where that stack is found, the
kernels provider runs and the log says so.
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


class ModulesProvider:
    """cpu-modules: the reference's layer functions over SGLang's loaded weights (`bind_model`'s)."""

    name = "cpu-modules"
    what = ("SGLang's modules' numerics: glm53/layer.py and glm53/indexer.py, pinned to SGLang's modules by "
            "test_reference_pinned.py and test_indexer_pinned.py")

    def __init__(self, geo: Glm53Geometry, weights: ModelWeights, lm_head: torch.Tensor):
        self.geo, self.w, self.lm_head = geo, weights, lm_head  # lm_head: the model's lm_head.weight [V, D] bf16

    def layer(self, i: int, kind: str, x: LayerInputs) -> dict[str, torch.Tensor]:
        """Layer i's outputs by the launch kinds' names ({"out", "residual_out", "o"}, and "topk" where the layer
        selects its own); writes its MLA (and index-K) rows at out_loc."""
        from sgl_amd_mono.glm53.layer import indexer_layer, shared_layer

        geo, lw = self.geo, self.w.layers[i]
        hidden = x.hidden if x.hidden is not None else torch.nn.functional.embedding(x.input_ids, self.w.embed)
        common = dict(hidden=hidden, residual=x.residual, cos_sin=x.cos_sin, kv_cache=x.kv_cache, out_loc=x.out_loc)
        if kind == "shared":
            return shared_layer(geo, lw.attn, lw.ffn, topk_slots=x.topk_slots, **common)
        return indexer_layer(geo, lw.attn, lw.indexer, lw.ffn, positions=x.positions, index_k_cache=x.index_k_cache,
                             page_table=x.page_table, lengths=x.lengths, **common)

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

    def layer(self, i: int, kind: str, x: LayerInputs) -> dict[str, torch.Tensor]:
        hidden = x.hidden if x.hidden is not None else torch.nn.functional.embedding(x.input_ids, self.w.embed)
        return self._op(i, kind, int(x.out_loc.shape[0])).layer(
            hidden=hidden, residual=x.residual, cos_sin=x.cos_sin, kv_cache=x.kv_cache, out_loc=x.out_loc,
            topk_slots=x.topk_slots, index_k_cache=x.index_k_cache, page_table=x.page_table, lengths=x.lengths)

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
