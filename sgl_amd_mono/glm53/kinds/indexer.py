"""The "indexer" kind: one GLM-5.3 MoE layer that runs its own DSA indexer (18 of the 78 layers: 6, 10, ... 74)
and selects its own exact top-k, which the sparse MLA of the same launch reads and the launch publishes for
the shared layers after it (`topk`).

Its table is the shared kind's with the index work added to the attention half's stages (`index_stages`):
  norm1   + xn1 = RMSNorm(res1) in bf16 (weights_proj is a bf16 linear on it)
  qkv_a   + split-K parts (ks_i) of the index key wk (block FP8, on xq1)
  latent  + split-K parts (ks_w) of weights_proj (bf16, on xn1)
  q_b     + column tiles (bn_iq) x split-K parts (ks_iq) of the index query wq_b (block FP8, on qlq); then R
            tasks: a row's index key (LayerNorm, interleaved rope on the first ROPE dims, the Hadamard rotation,
            ue8m0 fp8 quantization), written into the index-K cache at out_loc
  absorb  + tasks [H*KVL/128, + R*IH/IQG): (row, IQG heads) of the index query: rope, Hadamard, ue8m0 fp8 a
          head, and those heads' weights
  score   (request, slice): scores of the request's rows over the slice's cached keys (each key read once a
          request), and the first radix digit's histogram of the rows that take the sliced select
  sel1    (row, slice): the second digit's histogram (sliced rows) (with tiles.index_compact, it also lists the
          slice's keys at or above the 8-bit prefix it found, in position order: cand_pos / cand_key, their count
          ncand; sel2, sel3 and emit then scan those, not the slice); then (row), each row of at most
          LS = max(KTOP, tiles.index_short) keys: its whole list (every position when it has at most KTOP, else
          one task's select over its scores in registers)
  sel2    (row, slice): the next radix digit's histogram among the keys whose higher digits are those found (only
          with four digits: `radix_digits`; with three, or with tiles.index_pair, every program passes it)
  sel3    (row, slice): the last digit's histogram, as sel2's (with index_pair: digits 1 and 2 found here, from
          sel1's digit-1 histogram and its pair histogram of both), and the slice's counts at or above each last digit
          (so emit finds the keys above the threshold and at it in the slices before its own); then (row): every
          sliced row's list filled with -1
  emit    (row, slice): the slice's selected keys at their place in the row's list, as physical slots
The sliced rows are those past LS keys; a launch with none skips sel2 .. emit (each program arrives at them
without waiting: `sync.pass_stages`). A row's keys are split into NSL slices (`dims.index_slices`: the tiles'
index_slices / rows, a power of two) of whole IBLK-key blocks; a request of N rows splits its keys into N x NSL
slices. Then attn (reading `topk`) and the rest as the shared kind. With tiles.index_row_waits (four digits, no
pairs) the sliced launch's hand-offs from sel1 to attn are a row's: each task of sel2, sel3, emit and attn waits for
its own row's tasks of the stage before at that row's word (`row_words`), and the stages' global hand-offs are passed;
with index_row_waits 2, sel1's tasks also wait for their request's score tasks, score's global hand-off passed.

The exactness rule: a row of L <= KTOP keys lists every position 0..L-1 in order, then -1. A longer row lists
exactly the result of a radix select over the launch's own scores: the keys whose score is above the
KTOP-th largest, in position order, then the keys whose score equals it, in position order, as many as make
KTOP. Scores are compared as their order-preserving uint32 keys (so -0.0 sorts below +0.0). Both selections
(one task a row, and the sliced radix select) give exactly this list.
"""

from __future__ import annotations

import dataclasses

import torch

from sgl_amd_mono.common.kind import Buffer, Count, KindTable, StageDef
from sgl_amd_mono.glm53.config import INDEX_K_BYTES, INDEX_PAGE, Glm53Geometry
from sgl_amd_mono.glm53.kinds import halves, shared
from sgl_amd_mono.glm53.kinds.dims import cdiv

B = Buffer
RADIX_PASSES = 4  # the most digits of a 32-bit key (stages score, sel1, sel2, sel3 count one each)
RADIX_BINS = 256  # the last digit's bins (8 bits: sel3's counts a slice, emit's threshold)
RADIX_PAIR_BINS = RADIX_BINS * RADIX_BINS  # tiles.index_pair: digits 1 and 2 counted together (sel1), a row
# tiles.index_digits -> the digits' widths, from the top bit: four of 8 bits, or three with 12-bit digits 0 and 1
# (counted by atomics only: a 4096-bin histogram is too large for registers); the last is always 8 bits
RADIX_DIGITS = {4: (8, 8, 8, 8), 3: (12, 12, 8)}


def pair_bins(d) -> int:
    """A row's bins of the pair histogram (tiles.index_pair: sel1 counts digits 1 and 2 together, sel3 finds both,
    sel2 is passed); 1 (unused) without it."""
    return RADIX_PAIR_BINS if d.tiles.index_pair > 0 else 1


def sel2_runs(d) -> bool:
    """Whether stage sel2 scans (four digits without tiles.index_pair); else every program passes it."""
    return len(radix_digits(d)) == 4 and d.tiles.index_pair <= 0


def radix_digits(d) -> tuple[int, ...]:
    """The radix select's digit widths (bits, from the top) for these dims' tiles (tiles.index_digits)."""
    return RADIX_DIGITS[d.tiles.index_digits]


def index_query_heads(d) -> int:
    """IQG: index heads one index-query task rotates and quantizes (16, fewer when the model has fewer)."""
    return min(d.IH, 16)


def hist0_copies(d) -> int:
    """Copies of a row's digit-0 histogram: the score tasks' atomics spread over them (tiles.index_atomics), 1
    when digit 0 is counted in registers."""
    return max(1, int(d.tiles.index_atomics))


def hist1_copies(d) -> int:
    """Copies of a row's digit-1 histogram: hist0_copies when sel1 counts a key at a time (tiles.index_sel_atomics),
    else 1 (a task's block histograms added once)."""
    return hist0_copies(d) if d.tiles.index_sel_atomics else 1


INDEX_INPUTS = (
    B("index_k_cache", lambda d: (None, INDEX_PAGE * INDEX_K_BYTES), "u8",
      "SGLang's index-K pool of the layer [pages, 64 x 128 fp8 bytes then 64 f32 scales], written in place"),
    B("page_table", lambda d: (d.R, d.PMAX), "i32", "each row's 64-token page ids (real_page_table)"),
    B("lengths", lambda d: (d.R,), "i32", "keys each row reads (its own included); pad rows 1"),
    B("rows_per_req", lambda d: (1,), "i32", "consecutive rows of one request (N of an MTP verify, 1 in decode)"),
)

INDEX_WEIGHTS = (
    B("wq_b", lambda d: (d.IH * d.ID, d.QL), "fp8"),
    B("wq_b_s", lambda d: (cdiv(d.IH * d.ID, 128), d.QL // 128), "f32"),
    B("wk", lambda d: (d.ID, d.D), "fp8"),
    B("wk_s", lambda d: (cdiv(d.ID, 128), d.D // 128), "f32"),
    B("weights_proj", lambda d: (d.IH, d.D), "bf16"),
    B("k_norm_w", lambda d: (d.ID,), "f32"),
    B("k_norm_b", lambda d: (d.ID,), "f32"),
)

INDEX_OUTPUTS = (B("topk", lambda d: (d.R, d.KTOP), "i32", "the selected physical slots a row, -1 = none"),)

INDEX_SCRATCH = (
    B("xn1", lambda d: (d.R, d.D), "bf16", "RMSNorm(res1): the indexer's x"),
    B("ik_part", lambda d: (d.tiles.ks_i, d.R, d.ID), "f32", "wk parts"),
    B("iw_part", lambda d: (d.tiles.ks_w, d.R, d.IH), "f32", "weights_proj parts"),
    B("iq_part", lambda d: (d.tiles.ks_iq, d.R, d.IH * d.ID), "f32", "wq_b parts"),
    B("iq", lambda d: (d.R, d.IH, d.ID), "fp8", "the index query, a ue8m0 group a head"),
    B("head_w", lambda d: (d.R, d.IH), "f32", "weights_proj x IH^-0.5 x q scale x ID^-0.5"),
    B("scores", lambda d: (d.R, d.PMAX * INDEX_PAGE), "f32", "a row's index scores in position order"),
    B("hist0", lambda d: (2, d.R, hist0_copies(d) << radix_digits(d)[0]), "i32",
      "radix digit 0's histogram a row, in hist0_copies copies; [epoch % 2] this launch's, the other zeroed"),
    B("hist1", lambda d: (2, d.R, hist1_copies(d) << radix_digits(d)[1]), "i32",
      "radix digit 1's histogram a row, in hist1_copies copies; [epoch % 2] this launch's, the other zeroed"),
    *(B(f"hist{p}", lambda d: (2, d.R, RADIX_BINS), "i32",
        f"radix digit {p}'s histogram a row (with three digits: hist2 unused, hist3 the last digit's); [epoch % 2] "
      "this launch's, the other zeroed for the next")
      for p in range(2, RADIX_PASSES)),
    B("hist_pair", lambda d: (2, d.R, pair_bins(d)), "i32",
      "with index_pair: digits 1 and 2 of the keys at digit 0's prefix counted as one 16-bit digit a row (sel1), "
      "read a group of 256 at digit 1 (sel3); [epoch % 2] this launch's, the other zeroed for the next (sel1)"),
    *(B(f"kept{p}", lambda d: (d.R, 2), "i64", f"a row's (need, prefix) after the digits before sel{p}'s, kept by "
        f"sel{p} for the next stage (with three digits: kept2 unused)") for p in range(1, RADIX_PASSES)),
    B("cand_pos", lambda d: (d.R, d.PMAX * INDEX_PAGE if d.tiles.index_compact else 1), "i32",
      "with index_compact: a slice's keys at or above sel1's 8-bit prefix, their positions in order from the slice's "
      "start (sel1), which sel2, sel3 and emit scan instead of the slice"),
    B("cand_key", lambda d: (d.R, d.PMAX * INDEX_PAGE if d.tiles.index_compact else 1), "i32",
      "with index_compact: those keys' order keys (the uint32 bits), beside cand_pos"),
    B("ncand", lambda d: (d.R, d.NSL), "i32", "with index_compact: the keys of each slice's list in cand_pos"),
    B("floor", lambda d: (d.R, d.NSL), "i64",
      "with index_floor: each score task's floor, an order key that at least ceil(KTOP / NSL) of its keys reach "
      "(0: none); sel1 lists and counts only the keys at or above the smallest of a row's"),
    B("cnt", lambda d: (d.R, d.NSL, RADIX_BINS + 1), "i32",
      "a slice's keys at or above the 24-bit prefix found . b (b < 256), and above that prefix (256)"),
)


def _mla_rows(d, t: int) -> tuple[int, ...]:
    """latent's tasks [R, 2R) write the MLA cache row of row t - R (its weights_proj tasks after them none)."""
    return (t - d.R,) if d.R <= t < 2 * d.R else ()


def row_words(name: str, extra: int) -> Count:
    """A stage's row-scoped hand-off (tiles.index_row_waits, `sync.wait_row`): a word a step row, which that row's NSL
    (row, slice) tasks of the stage (score's: its (request, slice) tasks of that unit row) and `extra` row tasks
    (sel1's whole lists, sel3's -1 fill) arrive at every launch, used or not."""
    return Count(name, lambda d: d.R, lambda d: d.NSL + extra)


def _stages() -> tuple[StageDef, ...]:
    a = {s.name: s for s in halves.ATTN_STAGES}
    rep = dataclasses.replace
    bound = lambda d: d.R * d.NSL  # noqa: E731 (every row's slices: an upper bound)
    return (
        rep(a["norm1"], writes=(*a["norm1"].writes, "xn1")),
        rep(a["qkv_a"], tasks=lambda d: a["qkv_a"].tasks(d) + d.tiles.ks_i, reads=(*a["qkv_a"].reads, "wk", "wk_s"),
            writes=("qkv_part", "ik_part")),
        rep(a["latent"], tasks=lambda d: a["latent"].tasks(d) + d.tiles.ks_w,
            reads=(*a["latent"].reads, "xn1", "weights_proj"), writes=(*a["latent"].writes, "iw_part"),
            cache_rows=_mla_rows),
        # the index keys in q_b's stage, beside its GEMVs (the index-K rows: the check scripts' write sets)
        rep(a["q_b"], tasks=lambda d: a["q_b"].tasks(d) + cdiv(d.IH * d.ID, d.tiles.bn_iq) * d.tiles.ks_iq + d.R,
            reads=(*a["q_b"].reads, "wq_b", "wq_b_s", "ik_part", "cos_sin", "out_loc", "k_norm_w", "k_norm_b"),
            writes=("qb_part", "iq_part", "index_k_cache")),
        rep(a["absorb"], tasks=lambda d: a["absorb"].tasks(d) + d.R * (d.IH // index_query_heads(d)),
            reads=(*a["absorb"].reads, "iq_part", "iw_part"), writes=("qcat", "iq", "head_w")),
        StageDef("score", bound, ("iq", "head_w", "index_k_cache", "page_table", "lengths",
                                                       "rows_per_req"), ("scores", "hist0", "floor"),
                 counts=(row_words("score_rows", 0),), is_bound=True,
                 doc="(request, slice): the request's rows' scores over the slice's keys; digit 0's histogram"),
        StageDef("sel1", lambda d: d.R * d.NSL + d.R, ("scores", "lengths", "page_table", "hist0", "floor"),
                 ("hist1", "kept1", "topk", "cand_pos", "cand_key", "ncand", "hist_pair"),
                 counts=(row_words("sel1_rows", 1),), is_bound=True,
                 doc="(row, slice) of the sliced rows: digit 1's histogram under digit 0 (with index_compact, the "
                     "slice's keys at or above the 8-bit prefix listed); then (row) of the others: the whole list"),
        StageDef("sel2", lambda d: bound(d) if sel2_runs(d) else 0, ("scores", "lengths", "kept1", "hist1",
                                                                                  "cand_key", "ncand"),
                 ("hist2", "kept2"), counts=(row_words("sel2_rows", 0),), is_bound=True,
                 doc="(row, slice) of the sliced rows: digit 2's histogram under the digits found (four digits; "
                     "with three or index_pair, passed)"),
        StageDef("sel3", lambda d: d.R * d.NSL + d.R, ("scores", "lengths", "kept1", "hist1", "kept2", "hist2",
                                                      "cand_key", "ncand", "hist_pair"),
                 ("hist3", "kept3", "cnt", "topk"), counts=(row_words("sel3_rows", 1),), is_bound=True,
                 doc="(row, slice) of the sliced rows: the last digit's histogram under the digits found, and the slice's "
                     "counts at or above each last digit; then (row): each sliced row's list filled with -1"),
        StageDef("emit", bound, ("scores", "lengths", "page_table", "cnt", "kept3", "hist3", "cand_pos", "cand_key",
                                 "ncand"), ("topk",), counts=(row_words("emit_rows", 0),),
                 is_bound=True, doc="(row, slice) of the sliced rows: the slice's selected keys in the row's list, as "
                                    "slots"),
        rep(a["attn"], reads=("qcat", "kv_cache", "topk")),
        a["w_uv"], a["o_proj"], a["o_sum"],
    )


# the attention half with the index work (the dense and tokens kinds' too: `kinds/dense.py`)
INDEX_ATTN_STAGES = _stages()

TABLE = KindTable(
    name="indexer",
    inputs=(*halves.ATTN_INPUTS, *INDEX_INPUTS),
    weights=(*halves.ATTN_WEIGHTS, *INDEX_WEIGHTS, *halves.MOE_WEIGHTS),
    outputs=(*halves.ATTN_OUTPUTS, *INDEX_OUTPUTS, *halves.MOE_OUTPUTS),
    scratch=(*halves.ATTN_SCRATCH, *INDEX_SCRATCH, *halves.MOE_SCRATCH),
    stages=(*INDEX_ATTN_STAGES, *halves.MOE_STAGES),
    cache="kv_cache",
    in_place=("index_k_cache",),
    exchanges=(halves.O_X, halves.OUT_X),
)


def refusals(geo: Glm53Geometry, *, tp: int, width: int, kv_dtype: torch.dtype) -> list[str]:
    """Every reason this kind cannot be built, as plain facts: the shared kind's, and the indexer's."""
    bad = shared.refusals(geo, tp=tp, width=width, kv_dtype=kv_dtype)
    if geo.index_dim != 128:
        bad.append(f"index_head_dim {geo.index_dim} is not 128 (one fp8 group a head and a key)")
    if geo.index_heads * geo.index_dim % 128:
        bad.append(f"index_n_heads x index_head_dim {geo.index_heads * geo.index_dim} is not a multiple of 128")
    if geo.index_heads > 32 or geo.index_heads & (geo.index_heads - 1):
        bad.append(f"index_n_heads {geo.index_heads} is not a power of two <= 32")
    if geo.qk_rope > geo.index_dim:
        bad.append(f"qk_rope {geo.qk_rope} exceeds index_head_dim {geo.index_dim} (rope on the index keys' first dims)")
    if geo.index_topk & (geo.index_topk - 1):
        bad.append(f"index_topk {geo.index_topk} is not a power of two")
    return bad


# ---- bounds of this kind's launch against the oracle (`glm53/bounds.py` lists every table) ----
# On the GPU: the layer's as the shared kind's until the indexer's own run measures them; the list must obey the
# exactness rule on every row (0 rows break it); topk_missed is the fraction of the oracle's list a row's lacks
# (the launch scores with fp8 dots whose sums differ from the oracle's f32 ones, so keys at the threshold may
# trade places); index_k is this step's index keys dequantized (an fp8 step of a key is up to 0.25 x its scale).
BOUNDS_GPU = {
    **{k.replace("shared.", "indexer."): v for k, v in shared.BOUNDS_GPU.items()},
    "indexer.index_k_cache.max_abs": 0.5,
    "indexer.topk.max_abs": 0.0,
    "indexer.topk.missed": 0.02,
}

# Under Triton's interpreter (test/unit/test_launch_interp.py, tiny geometry, TP1, 300-key contexts in slices of
# 64-key blocks): every case bitwise equal to the oracle (layer.indexer_layer) but the routing weights' one f32 step, and
# the list the oracle's set; so every bound is exact. The planted controls (the registry's weights controls at
# once: o >= 0.74, residual_out >= 0.1, out >= 0.54, cosine <= 0.9, kv >= 0.18, weights >= 0.029, ids >= 7,
# index_k >= 4.2, topk_missed >= 0.52; and the list's own: two entries swapped, an entry replaced by the best
# unselected key, a score's bit flipped that changes the rule's list) fail each.
_EXACT = {"indexer.o.rel": 0.0, "indexer.residual_out.rel": 0.0, "indexer.out.rel": 0.0, "indexer.out.cosine": 0.999999,
          "indexer.kv.max_abs": 0.0, "indexer.expert_weights.max_abs": 4e-7, "indexer.expert_ids.max_abs": 0.0,
          "indexer.index_k_cache.max_abs": 0.0, "indexer.topk.max_abs": 0.0, "indexer.topk.missed": 0.0}
BOUNDS_INTERP: dict[str, dict[str, float]] = {c: _EXACT for c in ("w1", "w2", "w3", "w4fp8", "w2_options", "w2_gfx950")}
# w3long (2000-key contexts, `test/unit/_interp_main.py`): the list exact; the outputs one bf16 rounding from the
# oracle's in places (o.rel 4.6e-3 measured), held to their pinned bits instead (launch_digests.txt)
BOUNDS_INTERP["w3long"] = {"indexer.topk.max_abs": 0.0, "indexer.topk.missed": 0.0}

# The launch's scores against an f64 reference over its own index queries, head weights and written keys
# (`test/kernels/glm53/check_topk.py`: the worst row's max_rel, rows past the top-k), with the list's rule and the
# oracle's set as above (this step's index keys: BOUNDS_GPU, check_layer.py). GPU: first set to 2e-3 from Hopper's
# fp8 dot, which keeps about 14 bits of its sums (DeepSeek-V3 report, 3.3.2): 2^-14 of a head's terms, summed over
# 32 heads of either sign; measured up to 1.79e-3 over the chain and requests shapes (H100 and H200,
# results/indexer*_check_topk.log), and 5.38e-3 in the decode shape over all-zero keys at 8K
# (results/indexer31_h100_check_topk_decode.log: a decode row's one nonzero score is its own key's, so max_rel is
# that one sum's error against itself, its heads' terms cancelling); 1e-2 since. Interpreter: f32 dots against
# f64, measured at most 4.1e-7 (tiny geometry, 300- and 1000-key contexts, every key cache and step shape). The
# controls (one score moved by twice its size; the scores of a launch reading this step's keys from the poisoned
# cache) fail with max_rel >= 2.
TOPK_BOUNDS_GPU = {"indexer.scores.max_rel": 1e-2, "indexer.topk.max_abs": 0.0, "indexer.topk.missed": 0.02}
TOPK_BOUNDS_INTERP = {**TOPK_BOUNDS_GPU, "indexer.scores.max_rel": 1.5e-6, "indexer.topk.missed": 0.0}
