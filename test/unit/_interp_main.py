"""One launch kind, one case, under Triton's interpreter (run as a subprocess by test_launch_interp.py, so
TRITON_INTERPRET=1 is set before triton is imported). Prints one JSON line: the bounds' values, the
planted control's values, the outputs' digests, the task counts each stage ran against the table's, and
the cache and epoch checks.

python test/unit/_interp_main.py KIND CASE
"""
import dataclasses
import json
import os
import sys

assert os.environ.get("TRITON_INTERPRET") == "1"
import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "kernels", "glm53"))
import registry  # noqa: E402

from sgl_amd_mono.backends.triton import kinds  # noqa: E402
from sgl_amd_mono.backends.triton.tiles import Tiles  # noqa: E402
from sgl_amd_mono.common import numerics as nm  # noqa: E402
from sgl_amd_mono.common.kind import check_task_counts  # noqa: E402
from sgl_amd_mono.common.launch import LaunchOptions  # noqa: E402
from sgl_amd_mono.glm53 import launch_inputs as li  # noqa: E402
from sgl_amd_mono.glm53.indexer import order_keys  # noqa: E402

FP8 = torch.float8_e4m3fn
# case -> (width, kv dtype, tile spec[, context: 300 if not given]); 'target=gfx950' first takes that target's
# tiles. The tiny geometry's 64 top-k slots fit gfx950's 8 attention splits only with blocks of 8 (32 would fall back
# to one split).
CASES = {
    "w1": (1, torch.bfloat16, ""),
    "w2": (2, torch.bfloat16, ""),
    "w3": (3, torch.bfloat16, ""),
    "w4fp8": (4, FP8, ""),
    "w2_options": (2, torch.bfloat16, "progs_per_sm=2,wuv_sh=2,route_rc=16,preload=1,swap_ab=1,dn_parts=2"),
    "w2_gfx950": (2, torch.bfloat16, "target=gfx950,att_blk=8"),
    "w3_index_options": (3, torch.bfloat16, "index_swap=0,index_pipe=3"),
    "w3_index_atomics": (3, torch.bfloat16, "index_atomics=1"),
    "w3_index_atomics_pipe": (3, torch.bfloat16, "index_atomics=1,index_pipe=3"),
    "w3_index_copies": (3, torch.bfloat16, "index_atomics=4"),
    "w3_index_copies_pipe": (3, torch.bfloat16, "index_atomics=4,index_pipe=3,index_block=128"),
    "w3_index_behind": (3, torch.bfloat16, "index_ahead=0"),
    "w3_ks_w1": (3, torch.bfloat16, "ks_w=1"),
    "w3_index_ahead_pipe4": (3, torch.bfloat16, "index_pipe=4"),
    "w3_index_ahead_pages": (3, torch.bfloat16, "index_ahead=2,index_block=128"),
    "w3_index_ahead_keys": (3, torch.bfloat16, "index_ahead=1"),
    "w3_index_sel_atomics": (3, torch.bfloat16, "index_sel_atomics=1"),
    "w3_index_sel_atomics_one": (3, torch.bfloat16, "index_sel_atomics=1,index_atomics=0"),
    "w3_index_digits3": (3, torch.bfloat16, "index_digits=3,index_atomics=2"),
    "w3_index_compact": (3, torch.bfloat16, "index_compact=1"),
    "w3_index_page_chunk1": (3, torch.bfloat16, "index_page_chunk=1"),
    "w3_index_page_chunk4": (3, torch.bfloat16, "index_page_chunk=4"),
    "w3_index_page_chunk_pages": (3, torch.bfloat16, "index_page_chunk=2,index_block=128"),
    "w3_index_emit_k1": (3, torch.bfloat16, "index_emit_k=1"),
    "w3_index_emit_k2_compact": (3, torch.bfloat16, "index_emit_k=2,index_compact=1"),
    "w3_index_unpacked": (3, torch.bfloat16, "index_packed_counts=0"),
    "w3_index_unpacked_compact": (3, torch.bfloat16, "index_packed_counts=0,index_compact=1,index_emit_k=2"),
    "w3_index_unpacked_digits3": (3, torch.bfloat16, "index_packed_counts=0,index_digits=3,index_atomics=2"),
    "w3_index_relist": (3, torch.bfloat16, "index_compact=1,index_relist=1"),
    "w3_index_relist_emit_k2": (3, torch.bfloat16, "index_compact=1,index_relist=1,index_emit_k=2"),
    # two slices of the sliced row, sel1's lists 89 and 53 keys long: the first relisted, the second left
    "w3_index_relist_some": (3, torch.bfloat16, "index_compact=1,index_relist=60,index_slices=8"),
    # sel1's lists and counts at or above each decode row's floor: at 300 keys every slice is under 16 blocks (no
    # floor: 0), one slice a row or two
    "w3_index_floor": (3, torch.bfloat16, "index_compact=1,index_floor=1"),
    "w3_index_floor_slices": (3, torch.bfloat16, "index_compact=1,index_floor=1,index_slices=8"),
    # 2000-key contexts (a 4th field: the context), a slice a row: w3long's lists at the 8-bit prefix (its bits
    # pinned), then with the floors (a task's: the smallest of its 64 lanes' largest keys), which leave keys out
    "w3long": (3, torch.bfloat16, "index_compact=1", 2000),
    "w3long_index_floor": (3, torch.bfloat16, "index_compact=1,index_floor=1", 2000),
    # sel1 counting digits 1 and 2 as a pair, sel3 finding both, sel2 passed (index_pair: by width, on at w3, so w3
    # itself counts the pairs over sel1's lists): off (sel2 scans), over the slices' scores (no lists), with the
    # floors, and at 2000 keys with the floors
    "w3_index_pair_off": (3, torch.bfloat16, "index_pair=0"),
    "w3_index_pair_scan": (3, torch.bfloat16, "index_pair=1,index_compact=0"),
    "w3_index_pair_floor": (3, torch.bfloat16, "index_pair=1,index_compact=1,index_floor=1,index_slices=8"),
    "w3long_index_pair": (3, torch.bfloat16, "index_pair=1,index_compact=1,index_floor=1", 2000),
    # the scores stored to leave L2 last (an evict_last cache policy on sm_90; none under the interpreter)
    "w3_index_keep_scores": (3, torch.bfloat16, "index_keep_scores=1"),
    # a 5th field: the step's shape (`registry.STEP_SHAPES`); decode: a row a request, the targets' timing shape
    "w3_decode": (3, torch.bfloat16, "", 300, "decode"),
    # the select's row-scoped hand-offs (four digits, no pairs): over the slices' scores, and over sel1's lists with
    # the floors, two slices a row
    "w3_index_row_waits": (3, torch.bfloat16, "index_pair=0,index_compact=0,index_row_waits=1"),
    "w3_index_row_waits_floor": (3, torch.bfloat16,
                                 "index_pair=0,index_compact=1,index_floor=1,index_slices=8,index_row_waits=1"),
    # and from the score stage (sel1 waiting for its request's score tasks): w3's decode rows, w4fp8's requests of 2
    # rows and its pad request
    "w3_index_row_waits_score": (3, torch.bfloat16, "index_pair=0,index_compact=1,index_row_waits=2,index_short=0"),
    "w4fp8_index_row_waits_score": (4, FP8, "index_pair=0,index_compact=1,index_row_waits=2,index_short=0"),
}


def tiles_of(spec: str) -> Tiles:
    """The case's tiles; indexer kinds split a row's keys into 4 / rows slices of 64-key blocks here, scanned
    128 keys a step (several slices, blocks and steps over the 300-key contexts), and one task selects a row of
    at most 256 keys (of the mixed steps' rows: 300-key ones sliced, shorter ones by one task)."""
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    target = next((p.split("=", 1)[1] for p in parts if p.startswith("target=")), "")
    tiles = Tiles(index_slices=4, index_block=64, index_scan=128, index_short=256).for_target(target)
    return tiles.with_spec(",".join(p for p in parts if not p.startswith("target=")))


def hist0_matches(plan, kind: str, lengths: torch.Tensor, plant: bool = False) -> bool:
    """This launch's digit-0 histogram (hist0[epoch % 2], its copies summed) equals torch's count of digit 0 over
    each sliced row's own scores (rows of at most LS keys: none counted). plant: one count off by one first (the
    check's own control)."""
    c = kinds.get(kind).constexprs(plan.dims)
    r, nb = plan.dims.R, 1 << c["IW0"]
    got = plan.scratch["hist0"].reshape(2, r, c["IHC"], nb)[plan.sync.epoch & 1].sum(1).clone()
    if plant:
        got[0, 0] += 1
    want = torch.zeros_like(got)
    for row, n in enumerate(lengths.tolist()):
        if n > c["LS"]:
            digits = order_keys(plan.scratch["scores"][row, :n]) >> (32 - c["IW0"])
            want[row] = torch.bincount(digits, minlength=nb).to(got.dtype)
    return bool(torch.equal(got, want))


def lists_match(plan, kind: str, lengths: torch.Tensor, plant: bool = False) -> bool:
    """With index_relist K: each sliced row's slice lists, as sel2 left them (cand_pos / cand_key from the slice's
    start, ncand long), are exactly the slice's keys whose top 16 bits are at or above the row's 16-bit prefix (kept2,
    sel2's) where sel1 listed at least K keys (its keys at or above the 8-bit prefix, kept1), else exactly sel1's
    list, in position order, with their order keys. Returns (match, the slices relisted, the slices left as listed).
    plant: one slice's list one key short first (the check's own control)."""
    c, d, s = kinds.get(kind).constexprs(plan.dims), plan.dims, plan.scratch
    ncand = s["ncand"].view(d.R, d.NSL).clone()
    if plant:
        ncand.view(-1)[int((ncand.view(-1) > 0).nonzero()[0])] -= 1
    relisted = kept = 0
    for row, n in enumerate(lengths.tolist()):
        if n <= c["LS"]:
            continue
        keys, p8, p16 = order_keys(s["scores"][row, :n]), int(s["kept1"][row, 1]), int(s["kept2"][row, 1])
        for sl, a, b in slices_of(n, d):
            keep = (keys[a:b] >> 24) >= p8
            if int(keep.sum()) >= plan.tiles.index_relist:
                keep = (keys[a:b] >> 16) >= p16
                relisted += 1
            else:
                kept += 1
            if not listed_exactly(s, row, a, b, int(ncand[row, sl]), keys, keep):
                return False, relisted, kept
    return True, relisted, kept


def slices_of(n: int, d):
    """A row of n keys' slices (index, start, end), as `stages_index.slice_of` splits them."""
    width = -(-(-(-n // d.NSL)) // d.IBLK) * d.IBLK
    return [(sl, min(sl * width, n), min(sl * width + width, n)) for sl in range(d.NSL)]


def listed_exactly(s, row: int, a: int, b: int, m: int, keys: torch.Tensor, keep: torch.Tensor) -> bool:
    """Whether the slice [a, b)'s list in scratch s (m entries of cand_pos / cand_key from a) is exactly its keys
    where keep, in position order, with their order keys."""
    got_pos, got_key = s["cand_pos"][row, a:a + m].long(), s["cand_key"][row, a:a + m].long() & 0xFFFFFFFF
    return m == int(keep.sum()) and torch.equal(got_pos, torch.arange(a, b)[keep]) \
        and torch.equal(got_key, keys[a:b][keep])


def floors_match(plan, kind: str, lengths: torch.Tensor, plant: bool = False) -> tuple[bool, int]:
    """With index_floor: each sliced row's floor (the smallest of its score tasks', floor[r]) has at least KTOP of
    the row's keys at or above it, and sel1's slice lists are exactly the keys at or above both the 8-bit prefix
    (kept1) and the floor, in position order, with their order keys. Returns (match, the keys the floors left out
    of the lists). plant: one row's floor one above its threshold first (the check's own control)."""
    c, d, s = kinds.get(kind).constexprs(plan.dims), plan.dims, plan.scratch
    floors = s["floor"].view(d.R, d.NSL).amin(1)
    cut = 0
    for row, n in enumerate(lengths.tolist()):
        if n <= c["LS"]:
            continue
        keys, p8 = order_keys(s["scores"][row, :n]), int(s["kept1"][row, 1])
        lo = int(floors[row]) if not plant else int(torch.topk(keys, d.KTOP).values[-1]) + 1
        if int((keys >= lo).sum()) < d.KTOP:
            return False, cut
        for sl, a, b in slices_of(n, d):
            keep = ((keys[a:b] >> 24) >= p8) & (keys[a:b] >= lo)
            cut += int(((keys[a:b] >> 24) >= p8).sum()) - int(keep.sum())
            if not listed_exactly(s, row, a, b, int(s["ncand"].view(d.R, d.NSL)[row, sl]), keys, keep):
                return False, cut
    return True, cut


def pairs_match(plan, kind: str, lengths: torch.Tensor, plant: bool = False) -> bool:
    """With index_pair: the last launch's pair histogram (hist_pair[epoch % 2]) equals torch's count of the 16 bits
    below digit 0 (digits 1 and 2) over each sliced row's keys at its 8-bit prefix (kept1) and, with the floors, at or
    above the row's floor (rows of at most LS keys: none counted). plant: one count off by one first (the check's own
    control)."""
    c, d, s = kinds.get(kind).constexprs(plan.dims), plan.dims, plan.scratch
    got = s["hist_pair"].view(2, d.R, -1)[plan.sync.epoch & 1].clone()
    if plant:
        got[0, 0] += 1
    want = torch.zeros_like(got)
    for row, n in enumerate(lengths.tolist()):
        if n > c["LS"]:
            keys = order_keys(s["scores"][row, :n])
            at = (keys >> 24) == int(s["kept1"][row, 1])
            if c["IFLOOR"]:
                at &= keys >= int(s["floor"].view(d.R, d.NSL)[row].amin())
            want[row] = torch.bincount((keys[at] >> 8) & 0xFFFF, minlength=got.shape[1]).to(got.dtype)
    return bool(torch.equal(got, want))


def row_words(plan) -> dict:
    """Each row-scoped hand-off's words (`glm53/kinds/indexer.row_words`) against epoch x its parts: {name: [words
    off]} (every word of every row must hold every launch's arrivals, its stage run or passed)."""
    out = {}
    for st in plan.table.stages:
        for c in st.counts:
            if c.name.endswith("_rows") and (c.name != "score_rows" or plan.tiles.index_row_waits >= 2):
                at, n = plan.sync.layout.counts[c.name]
                want = plan.sync.epoch * c.parts(plan.dims)
                out[c.name] = [i for i, v in enumerate(plan.sync.sync[at: at + n].tolist()) if v != want]
    return out


def planted_row_word_caught(plan) -> bool:
    """`row_words`' own control: the last row's sel2 word one arrival short must show."""
    at, n = plan.sync.layout.counts["sel2_rows"]
    plan.sync.sync[at + n - 1] -= 1
    caught = row_words(plan)["sel2_rows"] == [n - 1]
    plan.sync.sync[at + n - 1] += 1
    return caught


def combined_control(kc, geo, weights):
    """Every planted control of the kind at once (each perturbs its own tensor): every bound must fail."""
    w = weights
    for i in range(len(kc.controls(geo, weights))):
        w = kc.controls(geo, w)[i][2]
    return w


def short_of_wrap(plan) -> None:
    """The sync words as if 2**31 - 1 launches had completed on them (grid 1): the next launch's epoch, its
    targets and its counters all wrap past int32's largest value."""
    last = 2**31 - 1
    plan.sync.sync.fill_(last)  # the epoch, and one counter a stage (one program a launch)
    for st in plan.table.stages:
        for c in st.counts:
            at, n = plan.sync.layout.counts[c.name]
            plan.sync.sync[at: at + n] = (last * c.parts(plan.dims) + 2**31) % 2**32 - 2**31  # as int32 holds it


def special(kind: str, case: str) -> None:
    """deadline: a planted missing arrival at attn must end the launch with the error word (exit 1).
    ties: a zero gate ties every score; the lowest id must win. wrap: the sync words one launch short of
    int32's wrap; a launch must give w1's bits, and a planted missing arrival there must still be caught.
    nan: a NaN input row routes to experts 0.. (NaN ranks as -inf) and leaves the other rows' bits.
    invariant (indexer kinds): a corrupted histogram; the list's writes past its row must be dropped and the
    error word must name the stage and the row. alternate (indexer kinds): three launches on one plan, of rows
    the sliced select takes, of rows all listed by one task (the sliced select's last three stages skipped), and
    of other rows the sliced select takes: each list the rule's (a skipped stage still zeroes its histograms
    for the next launch; with INTERP_TILES' row waits, every row word in step after the passed stages). deadline's
    stage: INTERP_SKIP_STAGE (default attn). ranks (the tail kind): its two TP2 ranks' logits, weights cut from one
    full draw, side by side equal the TP1 launch's. guarded: every step input, cache, weight, scratch and output
    buffer in memory that ends at an inaccessible page (`_guard_pages.py`): a read past any of them kills the
    process; the launch must give the same bits (outputs and caches) as on the plain tensors. bad_token (the
    tokens kind): row 0's token id one past the vocabulary; the error word must name the stage, the row and the id."""
    kc = registry.get(kind)
    geo = li.tiny_geometry()
    width = {"ties": 2, "nan": 2, "guarded": 3, "alternate": 2}.get(case, 1)
    weights, step = kc.inputs(geo, tp=1, width=width, context=300, kv_dtype=torch.bfloat16, seed=3, device="cpu")
    opts = dataclasses.replace(kc.options(300), placement="sequential")
    if case in ("deadline", "fault"):
        skip_at = kinds.get(kind).table.stage_id(os.environ.get("INTERP_SKIP_STAGE", "attn"))
        opts = dataclasses.replace(kc.options(300), placement="sequential", deadline_s=1e-3, skip_arrive=skip_at,
                                   on_error="drain" if case == "deadline" else "fault")
    if case == "ties":  # a zero gate: every score 0.5; expert 11 alone gets a bias, the rest tie for 2nd
        weights[1].gate.zero_()
        weights[1].bias.zero_()
        weights[1].bias[11] = 1.0
    plan = kinds.plan(kind, geo, tp=1, width=width, kv_dtype=torch.bfloat16, device="cpu", options=opts,
                      tiles=tiles_of(os.environ.get("INTERP_TILES", "")))
    layer = plan.bind(kc.tensors(weights), launch_id=3)
    res = {}
    if case == "wrap":
        short_of_wrap(plan)
    if case == "fault":  # a serving build: the host copy (here a file the parent reads), then address 0x0
        copy = torch.from_file(os.environ["FAULT_COPY_FILE"], shared=True, size=len(plan.sync.host_copy),
                               dtype=torch.int64)
        plan.sync.host_copy = copy
        plan.sync.reset()  # err[host_copy] = the file's address
        print("launching", flush=True)
        plan.run(layer, dict(vars(step), kv_cache=step.kv_cache.clone()))
        print("the launch returned", flush=True)  # never reached: the store to 0x0 kills the process
        return
    if case == "nan":  # row 0's hidden all NaN: its router ranks NaN as -inf; row 1 must keep its bits
        clean = plan.run(layer, dict(vars(step), kv_cache=step.kv_cache.clone()))
        clean = {k: v.clone() for k, v in clean.items()}
        hidden = step.hidden.clone()
        hidden[0] = float("nan")
        out = plan.run(layer, dict(vars(step), hidden=hidden, kv_cache=step.kv_cache.clone()))
        plan.check_error()
        res["nan_ids"] = out["expert_ids"][0].tolist()
        res["nan_row1_same"] = all(torch.equal(out[k][1:], clean[k][1:]) for k in ("out", "expert_ids", "o"))
        print(json.dumps(res))
        return
    if case == "guarded":  # 3 rows: a 16-row tile over them reads rows 3.. only where it forgets its row mask
        from _guard_pages import guarded_all

        caches = {n: c.clone() for n, c in kc.caches(step).items()}
        plain = {k: v.clone() for k, v in plan.run(layer, {**vars(step), **caches}).items()}
        plan.check_error()
        glayer = plan.bind(guarded_all(kc.tensors(weights)), launch_id=3)
        plan.scratch, plan.out = guarded_all(plan.scratch), guarded_all(plan.out)  # the plan's own buffers too
        gcaches = guarded_all(kc.caches(step))
        out = plan.run(glayer, guarded_all({**vars(step), **gcaches}) | gcaches)
        plan.check_error()
        res["guarded_same_bits"] = {k: torch.equal(out[k], plain[k]) for k in plain}
        res["guarded_same_bits"].update({n: torch.equal(gcaches[n], caches[n]) for n in caches})
        print(json.dumps(res))
        return
    if case == "alternate":  # sliced, all-listed (the sliced select's last stages skipped), sliced again
        from sgl_amd_mono.glm53 import index_inputs as ii

        short = ii.random_index_step(geo, width=width, contexts=[200], rows_per_req=2,
                                     max_context=registry.max_context(300), kv_dtype=torch.bfloat16, seed=5,
                                     device="cpu")
        other = kc.step(geo, width=width, context=300, kv_dtype=torch.bfloat16, seed=9, device="cpu")
        res["values"] = []
        for st in (step, short, other):
            ref, caches_ref = kc.oracle(geo, weights, st)
            caches = {n: c.clone() for n, c in kc.caches(st).items()}
            out = plan.run(layer, {**vars(st), **caches})
            plan.check_error()
            res["values"].append(kc.compare(geo, out, caches, ref, caches_ref, st, plan, weights))
        res["lengths"] = [step.lengths.tolist(), short.lengths.tolist(), other.lengths.tolist()]
        if plan.tiles.index_row_waits:
            res["row_words"], res["row_words_planted_caught"] = row_words(plan), planted_row_word_caught(plan)
        res["ls"] = kinds.get(kind).constexprs(plan.dims)["LS"]  # the longest row one task lists
        print(json.dumps(res))
        return
    if case == "bad_token":  # row 0's id one past the vocabulary's rows
        ids = step.input_ids.clone()
        ids[0] = geo.vocab
        plan.run(layer, {**vars(step), "input_ids": ids, **{n: c.clone() for n, c in kc.caches(step).items()}})
        try:
            plan.check_error()
            res["bad_token_error"] = ""
        except RuntimeError as e:
            res["bad_token_error"] = str(e)
        print(json.dumps(res))
        return
    if case == "invariant":  # this launch's digit-0 histogram preloaded with -KTOP a bin: its threshold falls
        parity = (plan.sync.epoch + 1) & 1  # below every key, so more keys than KTOP rank above it
        plan.scratch["hist0"][parity] -= geo.index_topk
        caches = {n: c.clone() for n, c in kc.caches(step).items()}
        out = plan.run(layer, {**vars(step), **caches})
        try:
            plan.check_error()
            res["invariant_error"] = ""
        except RuntimeError as e:
            res["invariant_error"] = str(e)
        res["topk_in_range"] = bool(((out["topk"] >= -1) & (out["topk"] < caches["kv_cache"].shape[0])).all())
        print(json.dumps(res))
        return
    out = plan.run(layer, dict(vars(step), kv_cache=step.kv_cache.clone()))
    plan.check_error()  # deadline: raises, naming the stage
    if case == "ties":  # the lowest id wins a tie (an arg-max loop's order): ids [11, 0, shared]
        want = torch.tensor([[11, 0, geo.n_routed]] * width, dtype=torch.int32)
        res["ties_ids_ok"] = bool(torch.equal(out["expert_ids"], want))
        res["ties_weights_max_err"] = (out["expert_weights"] - torch.tensor([1.25, 1.25, 1.0])).abs().max().item()
    if case == "wrap":
        res["digests"] = {k: nm.digest(v) for k, v in out.items()}
        res["epoch"] = plan.sync.epoch
        skip = kinds.plan(kind, geo, tp=1, width=width, kv_dtype=torch.bfloat16, device="cpu", tiles=Tiles(),
                          options=LaunchOptions(placement="sequential", deadline_s=1e-3, skip_arrive=5))
        short_of_wrap(skip)
        skip.run(skip.bind(kc.tensors(weights)), dict(vars(step), kv_cache=step.kv_cache.clone()))
        try:
            skip.check_error()
            res["wrap_missed_arrival_caught"] = False
        except RuntimeError as e:
            res["wrap_missed_arrival_caught"] = "missed its deadline" in str(e)
    print(json.dumps(res))


def main(kind: str, case: str) -> None:
    if case in ("deadline", "fault", "ties", "wrap", "invariant", "nan", "guarded", "alternate", "bad_token"):
        return special(kind, case)
    kc = registry.get(kind)
    width, kv, spec, *more = CASES[case]
    context = more[0] if more else 300
    shape = registry.step_shape(kind, more[1]) if len(more) > 1 else {}
    geo = li.tiny_geometry()
    weights, step = kc.inputs(geo, tp=1, width=width, context=context, kv_dtype=kv, seed=3, device="cpu", **shape)
    ref, caches_ref = kc.oracle(geo, weights, step)
    opts = dataclasses.replace(kc.options(context), placement="sequential", count_tasks=True)
    plan = kinds.plan(kind, geo, tp=1, width=width, kv_dtype=kv, device="cpu", options=opts, tiles=tiles_of(spec))
    layer = plan.bind(kc.tensors(weights))
    caches = {n: c.clone() for n, c in kc.caches(step).items()}
    out = plan.run(layer, {**vars(step), **caches})
    plan.check_error()
    res = {"values": kc.compare(geo, out, caches, ref, caches_ref, step, plan, weights)}
    res["digests"] = {k: nm.digest(v) for k, v in out.items()}
    res["digests"].update({n: nm.digest(c) for n, c in caches.items()})
    if "hist0" in plan.scratch:
        res["hist0_ok"] = hist0_matches(plan, kind, step.lengths)
        res["hist0_planted_caught"] = not hist0_matches(plan, kind, step.lengths, plant=True)
    if plan.tiles.index_relist and plan.tiles.index_compact > 0:
        res["lists_ok"], res["lists_relisted"], res["lists_left"] = lists_match(plan, kind, step.lengths)
        res["lists_planted_caught"] = not lists_match(plan, kind, step.lengths, plant=True)[0]
    if plan.tiles.index_floor > 0 and plan.tiles.index_compact > 0:
        res["floors_ok"], res["floors_cut"] = floors_match(plan, kind, step.lengths)
        res["floors_planted_caught"] = not floors_match(plan, kind, step.lengths, plant=True)[0]
    counted = plan.sync.task_count.tolist()
    res["task_counts"] = dict(zip(plan.table.stage_names(), counted))
    try:
        check_task_counts(plan.table, plan.dims, counted)
        res["task_counts_ok"] = True
    except ValueError as e:
        res["task_counts_ok"] = str(e)
    allowed = set(step.out_loc.tolist()) if hasattr(step, "out_loc") else set()  # kinds with no cache: none
    res["cache_rows_outside_out_loc"] = sum(len(registry.changed_slots(n, c0, caches[n]) - allowed)
                                            for n, c0 in kc.caches(step).items())
    res["cache_rows_differ"] = sum(len(registry.changed_slots(n, caches_ref[n], caches[n])) for n in caches)
    res["epoch"] = plan.sync.epoch
    if plan.tiles.index_row_waits:
        res["row_words"], res["row_words_planted_caught"] = row_words(plan), planted_row_word_caught(plan)
    # the planted control, bound to the same plan: a second launch on the same buffers and sync words
    bad = plan.bind(kc.tensors(combined_control(kc, geo, weights)), launch_id=1)
    caches2 = {n: c.clone() for n, c in kc.caches(step).items()}
    out2 = plan.run(bad, {**vars(step), **caches2})
    plan.check_error()
    res["control_values"] = kc.compare(geo, out2, caches2, ref, caches_ref, step, plan, weights)
    res["epoch_after_control"] = plan.sync.epoch
    # planted errors in the first launch's own outputs (the list's rule): each must fail its bounds
    res["output_controls"] = {}
    if kc.output_controls is not None:
        plan.run(layer, {**vars(step), **{n: c.clone() for n, c in kc.caches(step).items()}})  # its buffers back
        for name, bounds, outs_c, scores in kc.output_controls(geo, out, plan, step):
            outs_c = dict(outs_c, **({"scores": scores} if scores is not None else {}))
            vals = kc.compare(geo, outs_c, caches, ref, caches_ref, step, plan, weights)
            res["output_controls"][name] = {b: vals[b] for b in bounds}
    # the pairs after the last launch, whose parity an earlier one used: its zeroing shows too
    if "hist_pair" in plan.scratch and plan.tiles.index_pair > 0:
        res["pairs_ok"], res["pairs_epoch"] = pairs_match(plan, kind, step.lengths), plan.sync.epoch
        res["pairs_planted_caught"] = not pairs_match(plan, kind, step.lengths, plant=True)
    print(json.dumps(res))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
