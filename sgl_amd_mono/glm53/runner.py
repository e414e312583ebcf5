"""The GLM-5.3 step executor SGLang's binding routes to: `build` (called by the spec's build) and
the reference backend's whole-step forward, in torch, over SGLang's weights and caches.

The reference backend is the oracle for every launch and the way tests run the plugin without a
GPU; tests and check tools choose it explicitly. A server's spec asks for "triton" (`runner_triton.py`: the
launches), whose configurations the startup check has already passed (`served.py`: served by default only
where they have run; SGLANG_AMD_MONO_UNVERIFIED=1 otherwise, warned here).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Optional

import torch

from sgl_amd_mono.backends import reference as ref
from sgl_amd_mono.glm53.served import DRAFT_NOTE, serving
from sgl_amd_mono.glm53.config import Glm53Geometry
from sgl_amd_mono.glm53.indexer import run_indexer
from sgl_amd_mono.glm53.layer import MoeWeights, attention_half, dense_half, moe_half
from sgl_amd_mono.glm53.step import StepFields, kv_view, read_step
from sgl_amd_mono.glm53.weights import ModelWeights, bind_model

logger = logging.getLogger(__name__)

BACKENDS = ("reference", "triton")


class ReferenceMonokernels:
    """Runs whole DECODE / TARGET_VERIFY steps of one GLM-5.3 model in torch (SGLang's numerics).

    Not capturable in a CUDA graph (the exact top-k reads row lengths on the host): an oracle
    and a CPU path, not a serving backend.
    """

    def __init__(self, *, model: Any, geo: Glm53Geometry, weights: ModelWeights, widths: tuple[int, ...]):
        self.model, self.geo, self.weights, self.widths = model, geo, weights, widths

    def forward(self, plan: Any, input_ids: torch.Tensor, positions: torch.Tensor, forward_batch: Any, *args: Any, **kwargs: Any) -> Any:
        """What `model.forward` returns: SGLang's LogitsProcessorOutput (fp32 logits [R, vocab];
        post-norm hidden states [R, D] bf16 when the batch captures them, e.g. verify).

        input_ids: [R] int64; positions: [R] int64; forward_batch: SGLang's ForwardBatch, read
        with the DSA backend published by forward_context. Writes every row's KV and index-K row
        at out_cache_loc (pad rows at slot 0).
        """
        if kwargs.get("input_embeds") is not None or (args and args[0] is not None):
            raise ValueError("input_embeds is not supported by the GLM-5.3 reference step")
        out, _ = self.step(plan=plan, input_ids=input_ids, positions=positions, forward_batch=forward_batch)
        return out

    @torch.no_grad()
    def step(self, *, plan: Any, input_ids: torch.Tensor, positions: torch.Tensor, forward_batch: Any,
             is_traced: bool = False) -> tuple[Any, Optional[dict]]:
        """forward's result and, when is_traced, per-layer tensors {"topk": [...], "kv_rows": [...], "hidden": ...}."""
        geo, w = self.geo, self.weights
        f = read_step(forward_batch, positions, tokens=int(plan.key.tokens_per_request))
        trace = {"topk": [], "kv_rows": [], "x_normed": [], "q_lora": []} if is_traced else None
        hidden = torch.nn.functional.embedding(input_ids.long(), w.embed)  # (R, D) bf16
        residual: Optional[torch.Tensor] = None
        topk: Optional[torch.Tensor] = None
        for i, lw in enumerate(w.layers):
            chosen = {}
            select = None
            if lw.indexer is not None:
                select = self._selector(lw.indexer, f, layer_id=i, chosen=chosen)
            a = attention_half(
                geo, lw.attn, hidden=hidden, residual=residual,
                cos_sin=lw.cos_sin_cache[f.positions],
                kv_cache=kv_view(f.pool, i, geo.kv_cache_dim), out_loc=f.out_loc,
                topk_slots=topk, select=select,
            )
            topk = chosen.get("slots", topk)  # shared layers carry the previous layer's slots as-is
            if isinstance(lw.ffn, MoeWeights):
                hidden, residual, _ = moe_half(geo, lw.ffn, lw.attn.post_norm, attn_o=a.o, residual=a.residual)
            else:
                hidden, residual = dense_half(geo, lw.ffn, lw.attn.post_norm, attn_o=a.o, residual=a.residual)
            if trace is not None:
                for key, value in (("topk", topk), ("kv_rows", a.kv_rows), ("x_normed", a.x_normed), ("q_lora", a.q_lora)):
                    trace[key].append(value)
        normed, _ = ref.rms_norm(hidden, w.final_norm, geo.rms_eps, residual)
        if trace is not None:
            trace["hidden"] = normed
        m = self.model
        return m.logits_processor(input_ids, normed, m.lm_head, forward_batch), trace

    def _selector(self, iw: Any, f: StepFields, *, layer_id: int, chosen: dict):
        geo = self.geo

        def select(x: torch.Tensor, q_lora: torch.Tensor) -> torch.Tensor:
            chosen["slots"] = run_indexer(
                iw, x=x, q_lora=q_lora, positions=f.positions, rope=geo.qk_rope,
                buf=f.pool.get_index_k_with_scale_buffer(layer_id), out_loc=f.out_loc,
                page_table=f.page_table, lengths=f.lengths, topk=geo.index_topk,
            )
            return chosen["slots"]

        return select


def _triton_options(geo: Glm53Geometry, ctx: Any, device: torch.device, on_error: str):
    """The launches' build options: SGLang's deadline, the model's longest context, what a failed wait does, and
    on a CPU host (tests: Triton's interpreter) one program in stage order."""
    from sgl_amd_mono.common.launch import LaunchOptions

    return LaunchOptions(deadline_s=float(ctx.deadline_s), max_context=geo.max_positions, on_error=on_error,
                         placement="sequential" if device.type == "cpu" else "persistent")


def build(model: Any, hf_config: Any, ctx: Any, *, backend: str, on_error: str = "drain") -> Any:
    """The built object SGLang's binding installs. ctx: SGLang's BuildContext (isa, widths, ...).

    backend "reference" binds the model's weights in place (copies logged) and returns the torch
    step (TP 1 only); "triton" builds every launch of every width (`runner_triton.build_triton`; on_error: "fault" in a
    server's build, "drain" in the check tools'); any other backend raises ValueError.
    """
    if backend not in BACKENDS:
        raise ValueError(f"sgl-amd-mono: backend {backend!r} is not one of {list(BACKENDS)}")
    start = time.perf_counter()
    geo = Glm53Geometry.from_hf(hf_config)
    weights = bind_model(model, geo)
    tp = weights.tp
    if backend == "triton":
        from sgl_amd_mono.glm53.runner_triton import build_triton

        device = model.lm_head.weight.device
        rule = serving(ctx.isa, tp)
        for what in rule.unverified:
            logger.warning("sgl-amd-mono: UNVERIFIED (SGLANG_AMD_MONO_UNVERIFIED=1): %s", what)
        built = build_triton(model, geo, weights, ctx, tp=tp, device=device,
                             options=_triton_options(geo, ctx, device, on_error))
        logger.info("sgl-amd-mono triton GLM-5.3 on %s TP %d: widths %s built in %.1f s; a failed wait %s; %s; "
                    "verified by %s", ctx.isa, tp, list(ctx.widths), time.perf_counter() - start,
                    "faults the GPU at address 0x0" if on_error == "fault" else "drains and is reported",
                    DRAFT_NOTE, rule.evidence or "nothing (" + "; ".join(rule.unverified or rule.reasons) + ")")
        return built
    if tp != 1:  # its embedding, o_proj, MoE and dense sums are this rank's alone: no all-reduce runs in it
        raise ValueError(f"sgl-amd-mono: the reference backend runs TP 1 only (the model is sharded for TP {tp})")
    logger.info("sgl-amd-mono reference GLM-5.3 on %s: widths %s bound in %.2f s, copies %.2f MiB",
                ctx.isa, list(ctx.widths), time.perf_counter() - start, weights.copies_bytes / 2**20)
    return ReferenceMonokernels(model=model, geo=geo, weights=weights, widths=tuple(ctx.widths))
