"""The Triton backend's whole GLM-5.3 step: SGLang's binding routes a DECODE or TARGET_VERIFY step here and it
runs one launch a layer (tokens for layer 0, dense for the other dense layers, indexer or shared for the MoE
layers as the IndexShare schedule says) and the tail, then hands SGLang what its own forward hands on.

Build (`build_triton`): SGLang's loaded tensors bound in place (`weights.bind_model`; every copy logged: the fused
expert where SGLang leaves it unfused, a bf16 W_UK / W_UV where SGLang keeps them fp8 with a per-tensor scale,
as its own CPU path dequantizes them), one plan a (kind, width) with every layer bound to it (each width's
first bind compiles: progress and seconds logged, Triton's cache on disk), and per-width step buffers (token ids,
rope rows, cache slots, lengths, the page table), so a captured graph reads the same addresses on every replay.

A step: the step tables copied into the width's buffers (small torch copies and one gather of SGLang's
cos_sin_cache rows, no host sync), the launches in layer order (each reads the previous one's outputs in place),
then SGLang's logits processor on the tail's normed rows with its `_get_logits` answering the tail's logits
(bound at build, active only inside a routed step): pruning, logprobs and sampling stay SGLang's, and SGLang's
LM head does not run again.

At TP > 1 each rank builds its own launches (`rank=`: SGLang's TP group, `tp_group.py`) over SGLang's loaded shards
as they are (the embedding's and LM head's vocab rows, q_b / W_UK / W_UV by head, o_proj's input columns, every
expert's and the dense MLP's intermediate columns: `weights.py`), and the launches exchange their partials
themselves (o_proj, the MoE and MLP downs, layer 0's embedding rows, the tail's logits: each kind's `Exchange`
regions), so no SGLang collective runs in a routed step. Build is all or nothing: every rank's outcome of its local
build is agreed over the group before any peer buffer is allocated, then one peer buffer a plan (`peer.allocate`,
every rank or none) is attached, and a barrier ends it. Every rank writes its own (replicated) MLA and index-K cache
rows. The tail's logits are every rank's vocab shard gathered in rank order, [R, TP x V / TP] f32: what SGLang's
`LogitsProcessor._get_logits` returns at TP > 1 (its all-gather of the shards, sliced to `vocab_size`), handed on as
they are, since a vocab SGLang pads (to a multiple of 64, x TP where 64 rows do not split) is refused at build.

With SGLANG_AMD_MONO_CHECK=1 build attaches the auditor (`audit.py`): routed steps run eagerly and each launch goes
through it; unset, it is never imported and each launch is called directly.

Pad rows come as SGLang makes them (stale input_ids, out_cache_loc 0, sequence length 1): the launches run them as
rows of one key at slot 0 (the dummy slot every pad row writes), so nothing marks them; their logits are SGLang's
to drop. A row longer than the page table the launches were built for is reported by the launch (error word).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from typing import Any, Optional

import torch

from sgl_amd_mono.common.launch import LaunchOptions
from sgl_amd_mono.glm53.config import INDEX_PAGE, Glm53Geometry
from sgl_amd_mono.glm53.layer import MoeWeights, layer_tensors
from sgl_amd_mono.glm53.step import kv_view, read_step
from sgl_amd_mono.glm53.weights import ModelWeights

logger = logging.getLogger(__name__)


def layer_kinds(geo: Glm53Geometry) -> list[str]:
    """The launch kind of every layer: tokens (layer 0), dense (the other dense layers), indexer or shared (the
    MoE layers that run their own indexer, and those that reuse the previous top-k). ValueError where a layer
    has no kind (a dense layer that reuses a top-k, a MoE layer 0)."""
    out, bad = [], []
    for i in range(geo.n_layers):
        moe, own = geo.is_moe_layer(i), geo.runs_indexer[i]
        if not moe and not own:
            bad.append(f"dense layer {i} reuses a top-k (no launch kind: dense layers run their indexer)")
        if i == 0 and moe:
            bad.append("layer 0 is a MoE layer (the tokens kind is the dense launch)")
        out.append("tokens" if i == 0 else "dense" if not moe else "indexer" if own else "shared")
    if bad:
        raise ValueError("; ".join(bad))
    return out


def _bf16_absorb(w: torch.Tensor, w_scale: Optional[float]) -> torch.Tensor:
    """A bf16 W_UK / W_UV as SGLang's CPU forward_mla makes it from an fp8 one (`w.to(bf16) * w_scale`, in bf16),
    with SGLang's strides kept."""
    return (w.to(torch.bfloat16) * (1.0 if w_scale is None else float(w_scale))).as_strided(w.shape, w.stride())


def layer_weights(geo: Glm53Geometry, weights: ModelWeights, lm_head: torch.Tensor) -> tuple[list[dict], dict, int]:
    """([each layer's tensors by its kind's table names], the tail's, bytes copied). ValueError naming every
    linear the launches cannot read (they read block-FP8 linears)."""
    out, bad, copied = [], [], 0
    for i, lw in enumerate(weights.layers):
        a = lw.attn
        for name in ("qkv_a", "q_b", "o_proj"):
            if getattr(a, name + "_s") is None:
                bad.append(f"layer {i} {name} is bf16 (the launches read block-FP8 linears)")
        if lw.indexer is not None and (lw.indexer.wq_b_s is None or lw.indexer.wk_s is None or not lw.indexer.is_rotate):
            bad.append(f"layer {i}'s indexer is not block-FP8 with the Hadamard rotation")
        t = layer_tensors(a, lw.ffn) | (layer_tensors(lw.indexer) if lw.indexer is not None else {})
        if a.w_kc.dtype != torch.bfloat16:
            t["w_kc"], t["w_vc"] = _bf16_absorb(a.w_kc, a.w_scale), _bf16_absorb(a.w_vc, a.w_scale)
            copied += 2 * (a.w_kc.numel() + a.w_vc.numel())
        if not isinstance(lw.ffn, MoeWeights) and lw.ffn.gate_up_s is None:
            bad.append(f"layer {i}'s dense MLP is bf16")
        if i == 0:
            t["embed"] = weights.embed
        out.append(t)
    if bad:
        raise ValueError("; ".join(bad))
    return out, {"final_norm": weights.final_norm, "lm_head": lm_head}, copied


class StepBuffers:
    """One width's step tables, filled by each routed step in place (fixed addresses for graph capture)."""

    def __init__(self, geo: Glm53Geometry, width: int, pmax: int, device):
        z = lambda *s, dt: torch.zeros(*s, dtype=dt, device=device)  # noqa: E731
        self.input_ids = z(width, dt=torch.int64)
        self.cos_sin = z(width, geo.qk_rope, dt=torch.float32)
        self.out_loc = z(width, dt=torch.int64)
        self.lengths = z(width, dt=torch.int32)
        self.page_table = z(width, pmax, dt=torch.int32)
        self.rows_per_req = z(1, dt=torch.int32)

    def fill(self, f, input_ids: torch.Tensor, cos_sin_cache: torch.Tensor) -> None:
        self.input_ids.copy_(input_ids)
        self.cos_sin.copy_(cos_sin_cache.index_select(0, f.positions))  # in f32 (exact from a bf16 cache)
        self.out_loc.copy_(f.out_loc)
        self.lengths.copy_(f.lengths)
        n = min(f.page_table.shape[1], self.page_table.shape[1])  # a longer row: the launch reports it
        self.page_table[:, :n].copy_(f.page_table[:, :n])
        self.rows_per_req.fill_(f.tokens)

    def tables(self) -> dict:
        return {"input_ids": self.input_ids, "cos_sin": self.cos_sin, "out_loc": self.out_loc,
                "lengths": self.lengths, "page_table": self.page_table, "rows_per_req": self.rows_per_req}


def _launch(plan: Any, layer: Any, step: dict) -> dict:
    return plan.run(layer, step)


class TritonMonokernels:
    """Whole DECODE / TARGET_VERIFY steps of one GLM-5.3 model as launches (one rank's at TP > 1)."""

    def __init__(self, *, model: Any, geo: Glm53Geometry, plans: dict, bound: dict, kinds_of: list, buffers: dict,
                 cos_sin_cache: torch.Tensor, tp: int = 1, rank: int = 0):
        self.model, self.geo, self.plans, self.bound = model, geo, plans, bound
        self.tp, self.rank = tp, rank
        self.kinds_of, self.buffers, self.cos_sin_cache = kinds_of, buffers, cos_sin_cache
        self.widths = tuple(sorted(buffers))
        self.audit = None  # SGLANG_AMD_MONO_CHECK=1: glm53/audit.py's Auditor (build_triton attaches it)
        # SGLang's own forward: build runs before the binding installs its wrapper, so this is the model's own
        self._sglang_forward = model.forward
        self._logits: Optional[torch.Tensor] = None
        lp = model.logits_processor
        original = lp._get_logits

        def get_logits(hidden_states, lm_head, logits_metadata, *args, **kwargs):  # SGLang's, outside a routed step
            return self._logits if self._logits is not None else original(hidden_states, lm_head, logits_metadata,
                                                                          *args, **kwargs)

        lp._get_logits = get_logits

    @contextlib.contextmanager
    def _answering(self, logits: torch.Tensor):
        self._logits = logits
        try:
            yield
        finally:
            self._logits = None

    def forward(self, plan: Any, input_ids: torch.Tensor, positions: torch.Tensor, forward_batch: Any, *args: Any,
                **kwargs: Any) -> Any:
        """What `model.forward` returns (SGLang's LogitsProcessorOutput). A step the launches do not take runs
        SGLang's own forward: one with input embeddings, or of a width this TP size does not build (both known from
        the step's static shape, so a captured graph takes the same path on every replay)."""
        if (kwargs.get("input_embeds") is not None or (args and args[0] is not None)
                or int(input_ids.shape[0]) not in self.buffers):
            return self._sglang_forward(input_ids, positions, forward_batch, *args, **kwargs)
        return self.step(plan=plan, input_ids=input_ids, positions=positions, forward_batch=forward_batch)

    def step(self, *, plan: Any, input_ids: torch.Tensor, positions: torch.Tensor, forward_batch: Any) -> Any:
        f = read_step(forward_batch, positions, tokens=int(plan.key.tokens_per_request))
        width = int(input_ids.shape[0])
        if width not in self.buffers:
            raise ValueError(f"width {width} is not built (widths {list(self.widths)})")
        buf, plans, bound = self.buffers[width], self.plans[width], self.bound[width]
        buf.fill(f, input_ids, self.cos_sin_cache)
        tables, hidden, residual, topk = buf.tables(), None, None, None
        launch = _launch if self.audit is None else self.audit.launcher(f)  # the hook: each launch audited
        for i, kind in enumerate(self.kinds_of):
            step = {**tables, "kv_cache": kv_view(f.pool, i, self.geo.kv_cache_dim), "hidden": hidden,
                    "residual": residual, "topk_slots": topk}
            if kind != "shared":
                step["index_k_cache"] = f.pool.get_index_k_with_scale_buffer(i)
            out = launch(plans[kind], bound[i], step)
            hidden, residual, topk = out["out"], out["residual_out"], out.get("topk", topk)
        tail = launch(plans["tail"], bound["tail"], {"hidden": hidden, "residual": residual})
        m = self.model
        with self._answering(tail["logits"]):
            return m.logits_processor(input_ids, tail["normed"], m.lm_head, forward_batch)

    def check_error(self) -> None:
        """RuntimeError naming the launch, stage and program of a missed wait or a bad input (synchronises: the
        check tools' call, never a step's)."""
        for plans in self.plans.values():
            for p in plans.values():
                p.check_error()


def build_triton(model: Any, geo: Glm53Geometry, weights: ModelWeights, ctx: Any, *, tp: int, device,
                 tiles=None, options: Optional[LaunchOptions] = None, tp_group=None) -> TritonMonokernels:
    """Every launch of every width built and bound at startup (the build of one kind fails the server with the
    launch and the reason). options: the launches' build options (max_context: the longest context a page
    table holds, default the model's max positions). tp_group: this rank's `tp_group.TpGroup` at TP > 1 (default
    SGLang's TP group)."""
    from sgl_amd_mono.glm53 import tp_group as tpg

    group = None
    if tp > 1:
        group = tp_group or tpg.sglang_tp_group(tp)
    why, built, per_layer, tail_w = "", None, None, None
    try:  # a failure here on one rank must stop every rank before the peer buffers' collectives
        built, per_layer, tail_w = _build_rank(model, geo, weights, ctx, tp=tp, rank=group.rank if group else 0, device=device,
                            tiles=tiles, options=options)
    except Exception as e:  # noqa: BLE001 (at TP 1 raised as it is; at TP > 1 agreed first)
        if group is None:
            raise
        why = f"{type(e).__name__}: {e}"
    if group is not None:
        tpg.agree(group, why, what="the launches' build")
        backend = tpg.peer_backend(device)
        t0 = time.perf_counter()
        plans = [p for w in sorted(built.plans) for _, p in sorted(built.plans[w].items())]
        nbytes = tpg.attach_peer_buffers(plans, group, device=device, backend=backend)
        logger.info("sgl-amd-mono triton GLM-5.3 rank %d of %d: %d peer buffers (%s), %.2f MiB, set up in %.1f s",
                    group.rank, tp, len(plans), backend, nbytes / 2**20, time.perf_counter() - t0)
    if os.environ.get("SGLANG_AMD_MONO_CHECK") == "1":  # the auditor, imported only when asked for
        if tp != 1:
            raise ValueError("SGLANG_AMD_MONO_CHECK=1: the auditor runs TP 1 only (SGLang's path for a layer at "
                             "TP > 1 needs its all-reduce inside a routed step)")
        from sgl_amd_mono.glm53.audit import attach

        attach(built, weights=weights, per_layer=per_layer, tail_w=tail_w)
    return built


def _build_rank(model: Any, geo: Glm53Geometry, weights: ModelWeights, ctx: Any, *, tp: int, rank: int, device,
                tiles, options: Optional[LaunchOptions]) -> tuple[TritonMonokernels, list, dict]:
    """(this rank's launches built and bound, each layer's tensors, the tail's): no collective."""
    from sgl_amd_mono.backends.triton import kinds
    from sgl_amd_mono.backends.triton.tiles import Tiles

    kinds_of = layer_kinds(geo)
    per_layer, tail_w, copied = layer_weights(geo, weights, model.lm_head.weight)
    gathered = int(model.lm_head.weight.shape[0]) * tp
    if gathered != geo.vocab or int(model.logits_processor.vocab_size) != geo.vocab:
        raise ValueError(f"lm_head holds {model.lm_head.weight.shape[0]} vocab rows a rank at TP {tp} ({gathered} "
                         f"gathered) for vocab_size {geo.vocab}: SGLang padded the vocab, and the tail hands on every "
                         f"rank's rows unpadded")
    caches = {lw.cos_sin_cache.data_ptr() for lw in weights.layers}
    if len(caches) != 1 and not all(torch.equal(lw.cos_sin_cache, weights.layers[0].cos_sin_cache)
                                    for lw in weights.layers):
        raise ValueError("the layers' rope caches differ (the launches read one cos_sin row a step row)")
    opts = options or LaunchOptions(max_context=geo.max_positions, deadline_s=float(ctx.deadline_s))
    from sgl_amd_mono.glm53.spec import DEVICES, launch_widths

    built_widths = [w for w in ctx.widths if ctx.isa not in DEVICES or w in launch_widths(isa=ctx.isa, tp=tp)]
    if len(built_widths) < len(ctx.widths):
        logger.info("sgl-amd-mono triton GLM-5.3: widths %s run SGLang's forward (TP %d builds %s)",
                    sorted(set(ctx.widths) - set(built_widths)), tp, list(launch_widths(isa=ctx.isa, tp=tp)))
    tiles = tiles or Tiles()
    pmax = -(-(opts.max_context or geo.max_positions) // INDEX_PAGE)
    plans, bound, buffers, t_all = {}, {}, {}, time.perf_counter()
    for n, w in enumerate(built_widths):
        t0 = time.perf_counter()
        plans[w], bound[w] = {}, {}
        for kind in sorted(set(kinds_of)) + ["tail"]:
            try:
                plans[w][kind] = kinds.plan(kind, geo, tp=tp, width=w, kv_dtype=_kv_dtype(model), device=device,
                                            options=opts, tiles=tiles, rank=rank)
            except ValueError as e:
                raise ValueError(f"width {w}, {kind} launch: {e}") from None
        for i, kind in enumerate(kinds_of):
            bound[w][i] = plans[w][kind].bind(per_layer[i], launch_id=i)
        bound[w]["tail"] = plans[w]["tail"].bind(tail_w, launch_id=len(kinds_of))
        buffers[w] = StepBuffers(geo, w, pmax, device)
        logger.info("sgl-amd-mono triton GLM-5.3 [%d/%d] width %d: %d launches bound in %.1f s (%.1f s in all)",
                    n + 1, len(built_widths), w, len(kinds_of) + 1, time.perf_counter() - t0,
                    time.perf_counter() - t_all)
    logger.info("sgl-amd-mono triton GLM-5.3: launch copies %.2f MiB (bf16 W_UK / W_UV of fp8 ones)", copied / 2**20)
    built = TritonMonokernels(model=model, geo=geo, plans=plans, bound=bound, kinds_of=kinds_of, buffers=buffers,
                              cos_sin_cache=weights.layers[0].cos_sin_cache, tp=tp, rank=rank)
    return built, per_layer, tail_w


def _kv_dtype(model: Any) -> torch.dtype:
    """The MLA cache's element type the launches are built for: SGLang's --kv-cache-dtype (fp8_e4m3, or bf16 for
    "auto" / "bfloat16"). A pool of another type fails the step's first launch with a ValueError naming it."""
    from sglang.srt.runtime_context import get_server_args

    name = str(getattr(get_server_args(), "kv_cache_dtype", "auto"))
    return torch.float8_e4m3fn if name.startswith("fp8") else torch.bfloat16
