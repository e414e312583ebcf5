"""The launch kinds the check scripts know: for each, how to draw its inputs, its oracle, how its outputs are
compared, its bounds and its planted controls. `check_layer.py`, `time_layers.py`, `precompile.py` and the
CPU interpreter harness (`test/unit/_interp_main.py`) take a kind by name from `KINDS`; adding a kind adds
one entry here.

Bounds live beside their kind (`sgl_amd_mono/glm53/kinds/<kind>.py`); `sgl_amd_mono/glm53/bounds.py` says
which comparison each table is for.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from typing import Callable, Optional

import torch

from sgl_amd_mono.common import numerics as nm
from sgl_amd_mono.common.launch import LaunchOptions
from sgl_amd_mono.glm53 import dense_inputs as di
from sgl_amd_mono.glm53 import index_inputs as ii
from sgl_amd_mono.glm53 import launch_inputs as li
from sgl_amd_mono.glm53 import layer
from sgl_amd_mono.glm53.indexer import INDEX_PAGE, order_keys, radix_select
from sgl_amd_mono.glm53.kinds import dense as dense_kind
from sgl_amd_mono.glm53.kinds import indexer as indexer_kind
from sgl_amd_mono.glm53.kinds import shared as shared_kind
from sgl_amd_mono.glm53.kinds import tail as tail_kind

FP8 = torch.float8_e4m3fn


class RankWeights(tuple):
    """One rank's weights at TP > 1 (indexed as its own tuple) with every rank's beside them (`ranks`), for the
    comparisons that need the whole layer (the oracle's layer on a launch's own list, layer 0's embedding rows)."""

    def __new__(cls, own, ranks):
        t = super().__new__(cls, own)
        t.ranks = list(ranks)
        return t


@dataclasses.dataclass(frozen=True)
class KindCheck:
    name: str  # the Triton kind (`sgl_amd_mono/backends/triton/kinds.py`)
    weights: Callable  # (geo, *, tp, seed, device, rank=0) -> one layer's weights (cut from one full draw)
    step: Callable  # (geo, *, width, context, kv_dtype, seed, device) -> a step
    tensors: Callable  # weights -> {table name: tensor} (what `plan.bind` takes)
    oracle: Callable  # (geo, weights, step) -> (outputs by table name, {cache name: the cache after the step})
    compare: Callable  # (geo, outs, caches, ref, caches_ref, step, plan, weights) -> {bound name: value}
    bounds: dict  # launch vs oracle on the GPU
    interp_bounds: dict  # launch vs oracle under Triton's interpreter, per case
    controls: Callable  # (geo, weights) -> [(name, [bounds it must fail], perturbed weights)]
    stages: Optional[str]  # the module of the oracle per stage (run, run_isolated, compare, STAGE_BOUNDS), if any
    per_op: Optional[Callable]  # (geo, tp, weights, width) -> SGLang's per-op path: .step(step, caches) -> (out, residual_out, o)
    output_controls: Optional[Callable] = None  # (geo, outs, plan, step) -> [(name, bounds, outs, scores)]
    options: Callable = lambda context: LaunchOptions()  # the build options a step of `context` keys needs
    # (geo, [every rank's weights], step) -> (outputs, caches): the layer at TP = len(ranks), every rank's
    # partials summed in rank order (what every rank's launch must hold); None: the kind has no TP oracle
    oracle_ranks: Optional[Callable] = None

    def inputs(self, geo, *, tp, width, context, kv_dtype, seed, device, rank=0, **shape):
        """(weights, step): the layer drawn from `seed`, the step from `seed + 1` (shape: `step_shape`'s)."""
        return (self.weights(geo, tp=tp, seed=seed, device=device, rank=rank),
                self.step(geo, width=width, context=context, kv_dtype=kv_dtype, seed=seed + 1, device=device, **shape))

    def stage_oracle(self):
        return importlib.import_module(self.stages) if self.stages else None

    def caches(self, step) -> dict:
        """The step's caches a launch writes in place, by table name."""
        return {n: getattr(step, n) for n in ("kv_cache", "index_k_cache") if hasattr(step, n)}


def rank_alone(options, tp: int):
    """The build options of one rank's launch run alone at a TP shard (the single-GPU checks and timings): at TP > 1
    it keeps its partials (`LaunchOptions.local_partials`), as the oracle on that rank's shard computes them."""
    return dataclasses.replace(options, local_partials=tp > 1)


def changed_slots(name, before, after) -> set:
    """The slots whose row a launch changed in cache `name` (the index-K cache: a key's bytes or its scale in its
    page; the MLA cache: its rows)."""
    if name == "index_k_cache":
        from sgl_amd_mono.glm53.indexer import _page_views

        (kb, sb), (ka, sa) = _page_views(before, 128), _page_views(after, 128)
        diff = ((kb != ka).any(-1) | (sb.view(torch.int32) != sa.view(torch.int32))).nonzero()
        return set((diff[:, 0] * INDEX_PAGE + diff[:, 1]).tolist())
    return set((before.view(torch.uint8) != after.view(torch.uint8)).any(-1).nonzero().flatten().tolist())


def _cache_rows(cache, slots):
    c = cache.view(FP8) if cache.dtype == torch.uint8 else cache
    return c[slots].float()


def _layer_compare(kind, geo, outs, caches, ref, caches_ref, step, plan, moe_w):
    """A layer's outputs against the oracle; the routing against the oracle's router on the launch's own norm2
    output, so a near-tie flipped by upstream rounding does not count, and a wrong router still fails."""
    slots = step.out_loc[: step.live]
    vals = {
        f"{kind}.o.rel": nm.rel(outs["o"], ref["o"]),
        f"{kind}.residual_out.rel": nm.rel(outs["residual_out"], ref["residual_out"]),
        f"{kind}.out.rel": nm.rel(outs["out"], ref["out"]),
        f"{kind}.out.cosine": nm.cosine(outs["out"], ref["out"]),
        f"{kind}.kv.max_abs": nm.max_abs(_cache_rows(caches["kv_cache"], slots),
                                         _cache_rows(caches_ref["kv_cache"], slots)),
    }
    if isinstance(moe_w, layer.MoeWeights):  # the dense kinds have no routing
        w_ref, ids_ref = layer.route(geo, moe_w, plan.scratch["xn2"])
        vals[f"{kind}.expert_weights.max_abs"] = nm.max_abs(outs["expert_weights"], w_ref)
        vals[f"{kind}.expert_ids.max_abs"] = nm.max_abs(outs["expert_ids"].float(), ids_ref.float())
    return vals


def _layer_controls(kind, geo, aw, mw, rebuild):
    """(name, bounds it must fail, perturbed weights) of a layer's attention and MoE: one planted error per
    bound; rebuild(aw, mw) gives the kind's weights."""
    out = []
    a = dataclasses.replace(aw, o_proj_s=aw.o_proj_s.clone())
    a.o_proj_s[0, :] *= 1.2  # one 128-row block of o_proj scales x1.2
    out.append(("o_proj scale block x1.2", [f"{kind}.o.rel"], rebuild(a, mw)))
    a = dataclasses.replace(aw, o_proj_s=aw.o_proj_s * 1.3)  # every o_proj scale x1.3
    out.append(("o_proj scales x1.3", [f"{kind}.residual_out.rel"], rebuild(a, mw)))
    a = dataclasses.replace(aw, post_norm=aw.post_norm.clone())
    a.post_norm[: geo.hidden // 2] *= 1.1  # half the post-attention norm weight x1.1
    out.append(("post_norm weight x1.1 on half", [f"{kind}.out.rel", f"{kind}.out.cosine"], rebuild(a, mw)))
    a = dataclasses.replace(aw, kv_a_norm=aw.kv_a_norm.clone())
    a.kv_a_norm[:16] *= 1.1  # sixteen kv_a norm weights x1.1 (an fp8 cache row steps by 1/16 relative)
    out.append(("kv_a_norm[0:16] x1.1", [f"{kind}.kv.max_abs"], rebuild(a, mw)))
    if isinstance(mw, layer.MoeWeights):
        m = dataclasses.replace(mw, bias=mw.bias.clone())
        m.bias[:] = m.bias.flip(0)  # correction bias reversed: other experts routed
        out.append(("gate bias reversed", [f"{kind}.expert_ids.max_abs", f"{kind}.expert_weights.max_abs"],
                    rebuild(aw, m)))
    else:
        m = dataclasses.replace(mw, gate_up_s=mw.gate_up_s * 1.5)  # every gate_up scale x1.5
        out.append(("gate_up scales x1.5", [f"{kind}.out.rel"], rebuild(aw, m)))
    return out


# ---------------- shared ----------------
def _shared_step(geo, *, width, context, kv_dtype, seed, device, shape="mixed"):
    """shape "mixed" (the checks'): one request's rows of an MTP verify from 2 rows, the last a pad row, over one
    cache of `context` rows, 5% of the top-k entries empty; "decode" (the targets' timing shape, as the indexer
    kinds'): a decode row a request, each over its own `indexer_requests` context, every entry valid."""
    if shape == "decode":
        ctx = indexer_requests(geo, width=width, context=context, shape=shape)[1]
        return li.decode_step(geo, contexts=ctx, kv_dtype=kv_dtype, seed=seed, device=device)
    if shape != "mixed":
        raise ValueError(f"step shape {shape!r} is not one of {STEP_SHAPES}")
    return li.random_step(geo, width=width, context=context, kv_dtype=kv_dtype, seed=seed, device=device,
                          mtp=width > 1, pad_rows=1 if width > 1 else 0)


def _shared_per_op(geo, tp, weights, width):
    from per_op import SharedPerOp

    return SharedPerOp(geo, tp, *weights, width)


def _shared_oracle(geo, weights, step):
    outs, kv = li.oracle(geo, *weights, step)
    return outs, {"kv_cache": kv}


def _shared_oracle_ranks(geo, ranks, step):
    kv = step.kv_cache.clone()
    outs = layer.layer_ranks(geo, [(aw, mw) for aw, mw in ranks], hidden=step.hidden, residual=step.residual,
                             cos_sin=step.cos_sin, kv_cache=kv.view(FP8) if kv.dtype == torch.uint8 else kv,
                             out_loc=step.out_loc, topk_slots=step.topk_slots)
    return outs, {"kv_cache": kv}


def _shared_compare(geo, outs, caches, ref, caches_ref, step, plan, weights):
    return _layer_compare("shared", geo, outs, caches, ref, caches_ref, step, plan, weights[1])


def _shared_controls(geo, weights):
    return _layer_controls("shared", geo, *weights, lambda a, m: (a, m))


# ---------------- indexer ----------------
def _indexer_weights(geo, *, tp, seed, device, rank=0):
    aw, mw = li.random_weights(geo, tp=tp, seed=seed, device=device, rank=rank)
    return aw, ii.random_indexer_weights(geo, seed=seed + 1000, device=device), mw


STEP_SHAPES = ("mixed", "decode")


def indexer_requests(geo, *, width: int, context: int, shape: str = "mixed") -> tuple[int, list[int], int]:
    """(rows a request, each request's context, pad rows) of an indexer step of `width` rows. shape "decode":
    a decode row a request, every context `context` - 64 x its index (the targets' timing shape). shape "mixed"
    (the checks'): one decode row; at an even width requests of 2 rows (a draft chain), from 4 rows on with a
    pad request; at an odd width decode rows of several requests. Contexts run from `context` down; from 3
    requests on the last is a short one (<= index_topk: every position in order)."""
    if shape not in STEP_SHAPES:
        raise ValueError(f"step shape {shape!r} is not one of {STEP_SHAPES}")
    if shape == "decode":
        return 1, [max(geo.index_topk + 1, context - 64 * b) for b in range(width)], 0
    if width == 1:
        return 1, [context], 0
    rpr = 2 if width % 2 == 0 else 1
    pad = rpr if width >= 4 else 0
    n_req = (width - pad) // rpr
    ctx = [max(geo.index_topk + 1, context - b * (context // (2 * n_req))) for b in range(n_req)]
    if n_req >= 3:
        ctx[-1] = geo.index_topk // 2
    return rpr, ctx, pad


def _indexer_step(geo, *, width, context, kv_dtype, seed, device, keys="random", shape="mixed"):
    rpr, ctx, pad = indexer_requests(geo, width=width, context=context, shape=shape)
    return ii.random_index_step(geo, width=width, contexts=ctx, rows_per_req=rpr, max_context=max_context(context),
                                kv_dtype=kv_dtype, seed=seed, device=device, pad_rows=pad, keys=keys)


def max_context(context: int) -> int:
    """The page table's keys for steps of `context`: room for every request's draft rows, in whole pages."""
    return -(-(context + 16) // INDEX_PAGE) * INDEX_PAGE


def _indexer_per_op(geo, tp, weights, width):
    from per_op import IndexerPerOp

    return IndexerPerOp(geo, tp, *weights, width)


def _indexer_oracle(geo, weights, step):
    outs, kv, ibuf = ii.oracle(geo, *weights, step)
    return outs, {"kv_cache": kv, "index_k_cache": ibuf}


def _indexer_oracle_ranks(geo, ranks, step):
    """The indexer (or dense) layer at TP = len(ranks): the replicated indexer once, then every rank's halves."""
    kv, ibuf = step.kv_cache.clone(), step.index_k_cache.clone()
    select = layer.indexer_select(geo, ranks[0][1], positions=step.positions, cos_sin=step.cos_sin,
                                  index_k_cache=ibuf, out_loc=step.out_loc, page_table=step.page_table,
                                  lengths=step.lengths)
    outs = layer.layer_ranks(geo, [(w[0], w[2]) for w in ranks], select=select, hidden=step.hidden,
                             residual=step.residual, cos_sin=step.cos_sin,
                             kv_cache=kv.view(FP8) if kv.dtype == torch.uint8 else kv, out_loc=step.out_loc,
                             topk_slots=None)
    return outs, {"kv_cache": kv, "index_k_cache": ibuf}


def _index_rows(buf, slots):
    """The index keys at slots, dequantized: [n, 128] f32 (fp8 x its scale)."""
    from sgl_amd_mono.glm53.indexer import _page_views

    keys, scales = _page_views(buf, 128)
    s = slots.long()
    return keys[s // INDEX_PAGE, s % INDEX_PAGE].view(FP8).float() * scales[s // INDEX_PAGE, s % INDEX_PAGE][:, None]


def _layer_on_list(geo, weights, step, topk) -> dict:
    """The oracle's layer attending to a given list (the launch's own): o, residual_out and out of
    layer.shared_layer over a copy of the step's MLA cache."""
    kv = step.kv_cache.clone()
    shards = [(w[0], w[2]) for w in getattr(weights, "ranks", [weights])]  # at TP > 1 every rank's halves
    outs = layer.layer_ranks(geo, shards, hidden=step.hidden, residual=step.residual, cos_sin=step.cos_sin,
                             kv_cache=kv.view(FP8) if kv.dtype == torch.uint8 else kv, out_loc=step.out_loc,
                             topk_slots=topk)
    return {k: outs[k] for k in ("o", "residual_out", "out")}


def _indexer_compare(geo, outs, caches, ref, caches_ref, step, plan, weights, kind="indexer"):
    """The layer's comparisons, and the indexer's: this step's index keys (dequantized); the list entry by entry
    against the exactness rule over the launch's own scores (max_abs of the slots: 0 is every entry the rule's);
    the list as a set against the oracle's (missed: the worst row's fraction of the oracle's list it lacks). The
    layer's outputs are compared with the oracle's layer attending to the launch's own list, so keys at the
    threshold that trade places between the launch's fp8 scores and the oracle's (which `missed` bounds) do not
    count there, and a wrong attention or MoE still fails (as the routing is compared on the launch's norm2)."""
    own = _layer_on_list(geo, weights, step, outs["topk"])
    vals = _layer_compare(kind, geo, outs, caches, {**ref, **own}, caches_ref, step, plan, weights[2])
    slots = step.out_loc[: step.live]
    vals[f"{kind}.index_k_cache.max_abs"] = nm.max_abs(_index_rows(caches["index_k_cache"], slots),
                                                       _index_rows(caches_ref["index_k_cache"], slots))
    pos = radix_select(outs.get("scores", plan.scratch["scores"]),
                       lengths=step.lengths.clamp(max=plan.dims.PMAX * INDEX_PAGE), topk=geo.index_topk).long()
    want = torch.where(pos >= 0, step.page_table.long().gather(1, pos.clamp(min=0) // INDEX_PAGE) * INDEX_PAGE
                       + pos.clamp(min=0) % INDEX_PAGE, -1)
    vals[f"{kind}.topk.max_abs"] = nm.max_abs(outs["topk"], want)  # 0: every entry the rule's
    vals[f"{kind}.topk.missed"] = nm.missed(outs["topk"], ref["topk"])
    return vals


def _indexer_output_controls(geo, outs, plan, step, kind="indexer"):
    """Planted errors in a launch's own list and scores, each of which the exactness rule must catch: (name,
    bounds it must fail, perturbed outputs, perturbed scores)."""
    out = []
    topk = outs["topk"].clone()
    topk[0, [0, -1]] = topk[0, [-1, 0]]  # two entries swapped
    out.append(("two entries of row 0 swapped", [f"{kind}.topk.max_abs"], {**outs, "topk": topk}, None))
    scores = plan.scratch["scores"].clone()
    n = int(step.lengths[0])
    picked = set(outs["topk"][0].tolist())
    scores_row = scores[0].tolist()
    t_all = torch.arange(n, device=step.page_table.device)
    slots = step.page_table[0].long()[t_all // INDEX_PAGE] * INDEX_PAGE + t_all % INDEX_PAGE
    slot_list = slots.tolist()
    unpicked = [t for t in range(n) if slot_list[t] not in picked]
    if unpicked:  # one entry replaced by the best unselected key
        best = max(unpicked, key=lambda t: scores_row[t])
        topk = outs["topk"].clone()
        topk[0, -1] = slot_list[best]
        out.append(("row 0's last entry replaced by its best unselected key", [f"{kind}.topk.max_abs"],
                    {**outs, "topk": topk}, None))
    flip = _flip_changing_list(geo, scores[0, :n])
    if flip is None and n > geo.index_topk:
        raise RuntimeError(f"no single-bit flip of row 0's scores changes its list ({n} keys)")
    if flip is not None:  # one score's bit flipped, one that moves a key into or out of the rule's list
        t, bit = flip
        scores[0, :n].view(torch.int32)[t] ^= -(2**31) if bit == 31 else 1 << bit
        out.append((f"row 0's score {t} with bit {bit} flipped", [f"{kind}.topk.max_abs"], outs, scores))
    return out


def _flip_changing_list(geo, row):
    """(key, bit) of the first single-bit flip, of the row's top key, its lowest selected key or its best
    unselected key, in the sign bit or the exponent's top bit, that changes the rule's list; None if the row
    selects every key."""
    n = row.numel()
    if n <= geo.index_topk:
        return None
    lengths = torch.tensor([n], device=row.device)
    base = radix_select(row[None], lengths=lengths, topk=geo.index_topk)
    chosen = torch.zeros(n, dtype=torch.bool, device=row.device)
    chosen[base[0].long()] = True
    keys = order_keys(row)
    cands = [int(torch.argmax(keys)), int(torch.where(chosen, keys, keys.max() + 1).argmin()),
             int(torch.where(chosen, -1, keys).argmax())]
    for t in cands:
        for bit in (31, 30):
            bad = row.clone()
            bad.view(torch.int32)[t] ^= -(2**31) if bit == 31 else 1 << bit
            if not torch.equal(radix_select(bad[None], lengths=lengths, topk=geo.index_topk), base):
                return t, bit
    return None


def _indexer_controls(geo, weights, kind="indexer"):
    aw, iw, mw, *rest = weights  # rest: the tokens kind's embedding
    out = _layer_controls(kind, geo, aw, mw, lambda a, m: (a, iw, m, *rest))
    i2 = dataclasses.replace(iw, wq_b_s=iw.wq_b_s.clone())
    i2.wq_b_s[: i2.wq_b_s.shape[0] // 2] *= -1.0  # half the index query's heads negated: other keys selected
    out.append(("wq_b scales of half the heads negated", [f"{kind}.topk.missed"], (aw, i2, mw, *rest)))
    i2 = dataclasses.replace(iw, k_norm_b=iw.k_norm_b + 0.5)  # the index key's LayerNorm bias +0.5
    out.append(("k_norm bias +0.5", [f"{kind}.index_k_cache.max_abs"], (aw, i2, mw, *rest)))
    return out


# ---------------- dense, tokens ----------------
def _dense_per_op(geo, tp, weights, width):
    from per_op import DensePerOp

    return DensePerOp(geo, tp, *weights, width)


def _dense_weights(geo, *, tp, seed, device, rank=0):
    aw, _ = li.random_weights(geo, tp=tp, seed=seed, device=device, rank=rank)
    return (aw, ii.random_indexer_weights(geo, seed=seed + 1000, device=device),
            di.random_dense_weights(geo, tp=tp, seed=seed + 2000, device=device, rank=rank))


def _tokens_weights(geo, *, tp, seed, device, rank=0):
    return (*_dense_weights(geo, tp=tp, seed=seed, device=device, rank=rank),
            di.random_embedding(geo, tp=tp, seed=seed + 3000, device=device, rank=rank))


def _tokens_step(geo, *, width, context, kv_dtype, seed, device, **kw):
    step = _indexer_step(geo, width=width, context=context, kv_dtype=kv_dtype, seed=seed, device=device, **kw)
    return di.tokens_step(step, geo.shard(1).vocab, seed=seed + 2)


def _tokens_oracle(geo, weights, step):
    """The dense layer's oracle on the token ids' embedding rows, with no residual (layer 0). The ids span the whole
    vocab: weights of one rank alone at TP > 1 (1/tp of the rows) are refused, not read out of bounds."""
    rows, vocab = weights[3].embed.shape[0], geo.shard(1).vocab
    if rows < vocab:
        raise ValueError(f"the tokens oracle embeds ids of the whole vocab ({vocab} rows) but these weights hold {rows}: "
                         "one rank alone at TP > 1; check or time TP > 1 with --tp-emulate (every rank), or TP 1")
    return _indexer_oracle(geo, weights[:3], di.with_embedding_rows(step, weights[3]))


def _embedding(weights) -> di.EmbedWeights:
    """The whole embedding: the weights' own at TP 1, every rank's vocab rows in rank order at TP > 1."""
    ranks = getattr(weights, "ranks", None)
    return weights[3] if ranks is None else di.EmbedWeights(embed=torch.cat([w[3].embed for w in ranks]))


def _tokens_oracle_ranks(geo, ranks, step):
    """Layer 0 at TP = len(ranks): every rank's rows of the token ids' embedding (zeros for the others) summed in
    rank order are the rows themselves, so the dense layer at TP len(ranks) on the whole embedding's rows."""
    return _indexer_oracle_ranks(geo, ranks, di.with_embedding_rows(step, _embedding(RankWeights(ranks[0], ranks))))


def _tokens_compare(geo, outs, caches, ref, caches_ref, step, plan, weights):
    return _indexer_compare(geo, outs, caches, ref, caches_ref, di.with_embedding_rows(step, _embedding(weights)),
                            plan, weights, kind="tokens")


def _embed_controls(geo, weights):
    out = _indexer_controls(geo, weights, "tokens")
    e = di.EmbedWeights(embed=weights[3].embed * 1.05)  # every embedding row x1.05 (the norm hides it; res1 not)
    out.append(("embedding x1.05", ["tokens.residual_out.rel"], (*weights[:3], e)))
    return out


# ---------------- tail ----------------
@dataclasses.dataclass(frozen=True)
class TailWeights:
    final_norm: torch.Tensor  # [D] bf16
    lm_head: torch.Tensor  # [V / tp, D] bf16: this rank's vocab rows


@dataclasses.dataclass(frozen=True)
class TailStep:
    hidden: torch.Tensor  # [R, D] bf16
    residual: torch.Tensor  # [R, D] bf16


def _tail_weights(geo, *, tp, seed, device, rank=0):
    """Rank `rank`'s vocab rows of one full draw (SGLang's ParallelLMHead shards rows in rank order)."""
    norm, head = _full_tail(geo.vocab, geo.hidden, seed)
    v = geo.shard(tp).vocab
    return TailWeights(final_norm=norm.to(device), lm_head=head[rank * v:(rank + 1) * v].contiguous().to(device))


@functools.lru_cache(maxsize=1)
def _full_tail(vocab: int, hidden: int, seed: int):
    """One full draw on the CPU (GLM-5.3's LM head takes seconds), kept for the next rank's shard."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    norm = (1.0 + 0.1 * torch.randn(hidden, generator=g)).to(torch.bfloat16)
    return norm, (torch.randn(vocab, hidden, generator=g) * hidden**-0.5).to(torch.bfloat16)


def _tail_step(geo, *, width, context, kv_dtype, seed, device):
    g = torch.Generator(device="cpu").manual_seed(seed)
    h = torch.randn(width, geo.hidden, generator=g).to(torch.bfloat16)
    r = (torch.randn(width, geo.hidden, generator=g) * 4).to(torch.bfloat16)
    return TailStep(hidden=h.to(device), residual=r.to(device))


def _tail_oracle(geo, weights, step):
    """SGLang's tail in torch: its RMSNorm with the residual, then the bf16 LM head in f32 (`_get_logits`; pinned by
    test_reference_pinned.test_lm_head_logits)."""
    from sgl_amd_mono.backends import reference as ref

    normed, _ = ref.rms_norm(step.hidden, weights.final_norm, geo.rms_eps, step.residual)
    return {"normed": normed, "logits": torch.nn.functional.linear(normed, weights.lm_head).float()}, {}


def _tail_oracle_ranks(geo, ranks, step):
    """The tail at TP = len(ranks): every rank's logits shard in rank order, the tail on the whole LM head."""
    return _tail_oracle(geo, TailWeights(final_norm=ranks[0].final_norm,
                                         lm_head=torch.cat([w.lm_head for w in ranks])), step)


def _tail_compare(geo, outs, caches, ref, caches_ref, step, plan, weights):
    return {"tail.normed.rel": nm.rel(outs["normed"], ref["normed"]),
            "tail.logits.rel": nm.rel(outs["logits"], ref["logits"]),
            "tail.logits.cosine": nm.cosine(outs["logits"], ref["logits"])}


def _tail_per_op(geo, tp, weights, width):
    from per_op import TailPerOp

    return TailPerOp(geo, tp, weights, width)


def _tail_controls(geo, w):
    norm = w.final_norm.clone()
    norm[: geo.hidden // 2] *= 1.1  # half the final norm's weight x1.1
    head = w.lm_head.clone()
    head[:128] *= 1.5  # a 128-row block of the LM head x1.5
    return [("final_norm x1.1 on half", ["tail.normed.rel", "tail.logits.rel", "tail.logits.cosine"],
             dataclasses.replace(w, final_norm=norm)),
            ("lm_head rows 0-127 x1.5", ["tail.logits.rel"], dataclasses.replace(w, lm_head=head))]


KINDS = {
    "shared": KindCheck(
        name="shared", weights=li.random_weights, step=_shared_step, tensors=lambda w: layer.layer_tensors(*w),
        oracle=_shared_oracle, compare=_shared_compare, bounds=shared_kind.BOUNDS_GPU,
        interp_bounds=shared_kind.BOUNDS_INTERP, controls=_shared_controls, stages="sgl_amd_mono.glm53.kinds.oracle",
        per_op=_shared_per_op, oracle_ranks=_shared_oracle_ranks),
    "indexer": KindCheck(
        name="indexer", weights=_indexer_weights, step=_indexer_step, tensors=lambda w: layer.layer_tensors(*w),
        oracle=_indexer_oracle, compare=_indexer_compare, bounds=indexer_kind.BOUNDS_GPU,
        interp_bounds=indexer_kind.BOUNDS_INTERP, controls=_indexer_controls, stages=None, per_op=_indexer_per_op,
        output_controls=_indexer_output_controls, oracle_ranks=_indexer_oracle_ranks,
        options=lambda context: LaunchOptions(max_context=max_context(context))),
    "dense": KindCheck(
        name="dense", weights=_dense_weights, step=_indexer_step, tensors=lambda w: layer.layer_tensors(*w),
        oracle=_indexer_oracle, compare=lambda *a: _indexer_compare(*a, kind="dense"), bounds=dense_kind.BOUNDS_GPU,
        interp_bounds=dense_kind.BOUNDS_INTERP, controls=lambda g, w: _indexer_controls(g, w, "dense"), stages=None,
        per_op=_dense_per_op, output_controls=lambda *a: _indexer_output_controls(*a, kind="dense"),
        oracle_ranks=_indexer_oracle_ranks, options=lambda context: LaunchOptions(max_context=max_context(context))),
    "tokens": KindCheck(
        name="tokens", weights=_tokens_weights, step=_tokens_step, tensors=lambda w: layer.layer_tensors(*w),
        oracle=_tokens_oracle, compare=_tokens_compare,
        bounds=dense_kind.TOKENS_BOUNDS_GPU, interp_bounds=dense_kind.TOKENS_BOUNDS_INTERP, controls=_embed_controls,
        stages=None, per_op=None, output_controls=lambda *a: _indexer_output_controls(*a, kind="tokens"),
        oracle_ranks=_tokens_oracle_ranks, options=lambda context: LaunchOptions(max_context=max_context(context))),
    "tail": KindCheck(
        name="tail", weights=_tail_weights, step=_tail_step, tensors=lambda w: dataclasses.asdict(w),
        oracle=_tail_oracle, compare=_tail_compare, bounds=tail_kind.BOUNDS_GPU, interp_bounds=tail_kind.BOUNDS_INTERP,
        controls=_tail_controls, stages=None, per_op=_tail_per_op, oracle_ranks=_tail_oracle_ranks),
}


SHAPED_KINDS = ("shared", "indexer", "dense", "tokens")  # the kinds whose step takes a shape (STEP_SHAPES)


def step_shape(kind: str, shape: str) -> dict:
    """The step keywords of a --shape option for a kind ({} for a kind whose step has one shape)."""
    return {"shape": shape} if kind in SHAPED_KINDS else {}


def get(name: str) -> KindCheck:
    if name not in KINDS:
        raise SystemExit(f"--kind {name!r} is not one of {sorted(KINDS)}")
    return KINDS[name]
