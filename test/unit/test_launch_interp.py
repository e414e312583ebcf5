"""Every launch kind under Triton's interpreter (sequential placement, tiny GLM-5.3-shaped geometry) against
its oracle, one harness for all kinds (`_interp_main.py`, run in a subprocess so TRITON_INTERPRET=1 is set
before triton is imported). Each case: its bounds (`<kind>.BOUNDS_INTERP[case]`), the planted controls (the
kind's weight controls at once, and planted errors in the outputs, e.g. the indexer's list) failing every
bound, its outputs' and caches' bits against `launch_digests.txt`, the tasks each stage ran against the
table, the cache rows written (every cache), the epoch advanced once a launch."""

import json
import os
import subprocess
import sys

import pytest

from sgl_amd_mono.common import numerics as nm

HERE = os.path.dirname(__file__)
sys.path.insert(0, os.path.join(HERE, "..", "kernels", "glm53"))
import registry  # noqa: E402

CASES = ["w1", "w2", "w3", "w4fp8", "w2_options", "w2_gfx950"]


def _run(kind, case, **env_extra):
    env = dict(os.environ, TRITON_INTERPRET="1", **env_extra)
    r = subprocess.run([sys.executable, os.path.join(HERE, "_interp_main.py"), kind, case], env=env,
                       capture_output=True, text=True, timeout=600)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    return r, (json.loads(lines[-1]) if lines else None)


def _pinned():
    out = {}
    with open(os.path.join(HERE, "launch_digests.txt")) as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                kind, case, name, digest = line.split()
                out.setdefault((kind, case), {})[name] = digest
    return out


@pytest.mark.parametrize("kind, case", [(k, c) for c in CASES for k in sorted(registry.KINDS)]
                         + [("shared", "w3_decode")])  # the targets' timing shape: a decode row a request
def test_launch_matches_oracle(kind, case):
    r, res = _run(kind, case)
    assert r.returncode == 0 and res is not None, r.stderr[-3000:]
    bounds = registry.get(kind).interp_bounds[case]
    assert set(res["values"]) == set(bounds), (sorted(res["values"]), sorted(bounds))
    for name, bound in bounds.items():
        assert nm.passes(name, res["values"][name], bound), f"{name} = {res['values'][name]} outside {bound}"
        caught = [v[name] for v in (res["control_values"], *res["output_controls"].values())
                  if name in v and not nm.passes(name, v[name], bound)]
        assert caught, f"{name}: no planted control fails {bound} ({res['control_values'][name]})"
    for control, vals in res["output_controls"].items():  # each planted error in the outputs fails its bounds
        assert all(not nm.passes(n, v, bounds[n]) for n, v in vals.items()), (control, vals)
    assert res["digests"] == _pinned()[(kind, case)], "the launch's bits changed (launch_digests.txt)"
    assert res["task_counts_ok"] is True, res["task_counts_ok"]
    _pairs_checked(res)  # the indexer kinds at widths up to 4 count the pairs (index_pair by width)
    assert res["cache_rows_outside_out_loc"] == 0 and res["cache_rows_differ"] == 0
    assert res["epoch"] == 1 and res["epoch_after_control"] == 2  # one epoch a launch, on shared sync words


def test_build_options_change_no_bit():
    """Two programs a SM, w_uv's splits 2 at a time, the router 16 experts a task, preloaded GEMV blocks,
    swapped GEMV products (exact here; the H200's fp8 wgmma is not, hence swap_ab off by default), MoE down
    in 2 parts, and gfx950's tiles: the same bits as the default build (pinned digests, equal here)."""
    pinned = _pinned()
    for kind in registry.KINDS:
        assert pinned[(kind, "w2_options")] == pinned[(kind, "w2")], kind
        if kind != "tokens":  # its w2_gfx950 step flips one fp8 rounding of v (8 attention splits of 8 slots
            # against 32 of 2: another summation order), within its bounds (dense.TOKENS_BOUNDS_INTERP)
            assert pinned[(kind, "w2")] == pinned[(kind, "w2_gfx950")], kind


def test_index_score_options_change_no_bit():
    """The indexer's score loop with its dots not swapped (queries @ keys^T; the default swaps them: an fp8 wgmma
    on sm_90) and pipelined by Triton (tiles index_swap=0, index_pipe=3; each of w3's 3 decode requests takes the
    pipelined loop): under the interpreter, whose dots are exact, the same bits as w3's default build, and every
    list the rule's."""
    r, res = _run("indexer", "w3_index_options")
    assert r.returncode == 0 and res is not None, r.stderr[-3000:]
    for name, bound in registry.get("indexer").interp_bounds["w3"].items():
        assert nm.passes(name, res["values"][name], bound), f"{name} = {res['values'][name]} outside {bound}"
    assert res["digests"] == _pinned()[("indexer", "w3")]
    assert res["task_counts_ok"] is True, res["task_counts_ok"]
    assert (res["hist0_ok"], res["hist0_planted_caught"]) == (True, True)


@pytest.mark.parametrize("kind, case", [("indexer", c) for c in (
    "w3_index_atomics", "w3_index_atomics_pipe", "w3_index_copies", "w3_index_copies_pipe", "w3_index_behind",
    "w3_index_ahead_pipe4", "w3_index_ahead_pages", "w3_index_ahead_keys",
    "w3_ks_w1", "w3_index_sel_atomics", "w3_index_sel_atomics_one", "w3_index_digits3",
    "w3_index_compact", "w3_index_page_chunk1", "w3_index_page_chunk4", "w3_index_page_chunk_pages",
    "w3_index_emit_k1",
    "w3_index_emit_k2_compact", "w3_index_unpacked", "w3_index_unpacked_compact", "w3_index_unpacked_digits3",
    "w3_index_relist", "w3_index_relist_emit_k2", "w3_index_relist_some", "w3_index_floor",
    "w3_index_floor_slices", "w3long_index_floor", "w3_index_pair_off", "w3_index_pair_scan", "w3_index_pair_floor",
    "w3long_index_pair", "w3_index_keep_scores", "w3_index_row_waits", "w3_index_row_waits_floor",
    "w3_index_row_waits_score", "w4fp8_index_row_waits_score")] + [
    ("dense", c) for c in ("w3_ks_w1", "w3_index_sel_atomics", "w3_index_digits3", "w3_index_compact",
                           "w3_index_unpacked", "w3_index_relist", "w3_index_floor", "w3_index_pair_off",
                           "w3_index_keep_scores", "w3_index_row_waits", "w3_index_row_waits_score")])
def test_index_atomics_change_no_bit(kind, case):
    """Digit 0 counted by one atomic a key into the row's histogram (tiles index_atomics=1), or into one of its 4
    copies that the select stages sum (index_atomics=4), by hand and in Triton's pipelined loop: the same counts,
    so the same bits as the default build, and every list the rule's. The pipelined loop with its page ids loaded
    in their own step (index_ahead=0; the default loads a step's ids a page each a step ahead, its keys addressed by
    page), ahead over 4 stages, with two pages a step (index_ahead=2, index_block=128), and a key's id each a step
    ahead (index_ahead=1): the same loads and sums in another order of issue, the same bits. weights_proj in one k
    part (ks_w=1) where wk takes two (ks_i resolves to 2 at the tiny hidden of 256), in the indexer and dense kinds:
    the same f32 sums in the same order, the same bits. The select's digits 1 and 2 counted by one atomic a key
    (index_sel_atomics), digit 1's into hist0's copies or into one (index_atomics=0: digit 0 in registers): the
    same counts, the same bits.
    Three radix digits (index_digits=3: 12, 12 and 8 bits, sel2 passed) in 2 atomic copies: the same list, every
    other output unchanged, the same bits. sel2 listing each slice's keys at or above its prefix for sel3 and emit
    (index_compact): the same counts and list, the same bits. The pipelined score loop's page ids a chunk at once
    (index_page_chunk 1: a chunk a step, so a slice of several chunks; 4: one chunk past the slice's end; 2 with two
    pages a step, each step's two page ids picked from the chunk's): the same keys, the same bits. emit in [256, k]
    tiles (index_emit_k 1: a slice of several 256-key chunks; 2 over sel2's lists: one chunk past the list's end):
    the same entries, the same bits. Each digit found with more block-wide
    reductions (index_packed_counts=0: the histogram's 16 copies summed across threads, the digit by a max and the
    keys above it by a sum, emit's earlier counts in two; the default packs them), over the slices, over sel1's lists
    with emit in tiles, and over three digits' 4096-bin histograms read by groups: the same digits and counts, the
    same bits. sel2 keeping those lists only at or above its 16-bit prefix, in place (index_relist), for sel3 and emit
    in steps or in tiles, or only the lists of at least 60 keys (two slices, one relisted): the same counts and
    list, the same bits. sel1 listing and counting only the keys at or above each decode row's floor from its score
    tasks (index_floor: a task's floor from its lanes' largest keys, one slice a row or two): the same digits and
    list, the same bits, and fewer keys listed. sel1 counting digits 1 and 2 as one 16-bit digit and sel3 finding both
    (index_pair, sel2 passed), over sel1's lists, over the slices' scores, with the floors: the same digits and list,
    the same bits, and the pair histogram torch's count over the launch's own keys after a launch on a parity an
    earlier one used (so its zeroing too; one count planted off by one fails). The scores stored to leave L2 last
    (index_keep_scores: a cache policy, none here): the same bits. The select's row-scoped hand-offs
    (index_row_waits: each task of sel2, sel3, emit and attn waits for its own row's tasks of the stage before), over
    the slices' scores and over sel1's lists with the floors, and from the score stage (2: sel1's tasks wait for their
    request's score tasks: decode rows, and requests of 2 rows with a pad request): the same bits, and every row word holds the launch's arrivals
    (one planted a word short fails). In every case the launch's digit-0 histogram equals torch's count
    over its own scores (and one count planted off by one fails)."""
    base = case.split("_")[0]
    r, res = _run(kind, case)
    assert r.returncode == 0 and res is not None, r.stderr[-3000:]
    for name, bound in registry.get(kind).interp_bounds[base].items():
        assert nm.passes(name, res["values"][name], bound), f"{name} = {res['values'][name]} outside {bound}"
    assert res["digests"] == _pinned()[(kind, base)]
    if "relist" in case:  # the lists sel2 left: the keys at or above its 16-bit prefix (a list one key short fails)
        assert (res.get("lists_ok"), res.get("lists_planted_caught")) == (True, True), res.get("lists_ok")
        # index_relist 60: one list relisted, one (shorter than 60) left as sel1 listed it
        assert (res["lists_relisted"] > 0, res["lists_left"] > 0) == (True, "some" in case), res
    if "floor" in case:  # sel1's lists at or above each row's floor, which KTOP keys reach (a floor above fails)
        assert (res.get("floors_ok"), res.get("floors_planted_caught")) == (True, True), res.get("floors_ok")
        # at 300 keys no slice has a floor (under 16 blocks); at 2000 a slice's 64 lanes hold 31-32 keys
        assert (res["floors_cut"] > 0) == case.startswith("w3long"), res["floors_cut"]
    if "pair" in case:  # index_pair on (off in w3_index_pair_off: sel2 scans, no pairs counted)
        assert ("pairs_ok" in res) == (not case.endswith("_off")), sorted(res)
        assert (res["task_counts"]["sel2"] == 0) == ("pairs_ok" in res), res["task_counts"]  # sel2 passed or scanning
    if "row_waits" in case:
        words = ("score_rows",) * case.endswith("_score") + ("sel1_rows", "sel2_rows", "sel3_rows", "emit_rows")
        assert res["row_words"] == {n: [] for n in words}, res
        assert res["row_words_planted_caught"] is True
    _pairs_checked(res)
    assert res["task_counts_ok"] is True, res["task_counts_ok"]
    assert (res["hist0_ok"], res["hist0_planted_caught"]) == (True, True)


def _pairs_checked(res):
    """Where the launch counted digits 1 and 2 as pairs (index_pair), its pair histogram is torch's count over its own
    keys after its last launch, on the parity its first used (so the zeroing between shows), and a count planted off
    by one fails."""
    if "pairs_ok" in res:
        assert (res["pairs_ok"], res["pairs_planted_caught"]) == (True, True), res["pairs_ok"]
        assert res["pairs_epoch"] >= 3, res["pairs_epoch"]  # three launches: the last on the first's parity


def test_missed_deadline_reports_error_word():
    r, _ = _run("shared", "deadline")
    assert r.returncode != 0
    assert "layer 3: program 0 in stage attn missed its deadline" in r.stderr, r.stderr[-2000:]


def test_missed_wait_in_a_serving_build_faults(tmp_path):
    """The same missed arrival in a serving build (on_error "fault"): the failing program writes the error
    word's host copy (here a file, so this process reads it after the child died), then stores to address 0x0.
    The child dies by the signal before its launch returns; the copy names the launch, stage and program."""
    import signal

    from sgl_amd_mono.common import guard

    copy = tmp_path / "host_copy"
    copy.write_bytes(bytes(8 * guard.ERR_WORDS))
    env = dict(os.environ, TRITON_INTERPRET="1", FAULT_COPY_FILE=str(copy))
    r = subprocess.run([sys.executable, os.path.join(HERE, "_interp_main.py"), "shared", "fault"], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == -signal.SIGSEGV, (r.returncode, r.stderr[-2000:])
    assert "launching" in r.stdout and "the launch returned" not in r.stdout
    w = dict(zip(guard.ERR_FIELDS, (int.from_bytes(copy.read_bytes()[8 * i: 8 * i + 8], "little", signed=True)
                                    for i in range(guard.ERR_WORDS))))
    assert w["flag"] == guard.ERR_FLAG and w["launch"] == 3 and w["program"] == 0, w
    from sgl_amd_mono.backends.triton import kinds

    stages = kinds.get("shared").table.stage_names()
    assert w["stage"] == stages.index("attn"), w
    assert "program 0 in stage attn missed its deadline" in guard.ErrorWord(**w).describe(None, stages)


def test_router_ties_pick_lowest_id():
    """A zero gate makes every score 0.5; expert 11 alone is biased, so it ranks first and the other 15 tie
    for the second pick, which must go to the lowest id (0); weights 0.5 / (0.5 + 0.5) * 2.5 each."""
    r, res = _run("shared", "ties")
    assert r.returncode == 0, r.stderr[-3000:]
    assert res["ties_ids_ok"] and res["ties_weights_max_err"] <= 1e-6, res


def test_sync_words_wrap():
    """One launch short of int32's wrap: the launch gives w1's bits and its epoch wraps, and a planted missing
    arrival there is still caught (a wait comparing `seen < target` passes it: -2**31 is below every count)."""
    r, res = _run("shared", "wrap")
    assert r.returncode == 0, r.stderr[-3000:]
    w1 = {k: v for k, v in _pinned()[("shared", "w1")].items() if k != "kv_cache"}
    assert res["digests"] == w1
    assert res["epoch"] == -2**31
    assert res["wrap_missed_arrival_caught"] is True


def test_selection_invariant_reports_and_drops():
    """The indexer's digit-0 histogram corrupted before a launch (-KTOP in every bin): the threshold it finds
    is below every key, so its emit stage would place entries past the row's top-k. It must drop those writes
    and write the error word (ERR_INVARIANT), which the host raises naming the stage and the row."""
    r, res = _run("indexer", "invariant")
    assert r.returncode == 0, r.stderr[-3000:]
    assert res["invariant_error"].startswith("launch invariant broken: "), res
    assert "in stage emit found row 0's value" in res["invariant_error"], res
    assert res["topk_in_range"] is True


def test_a_token_id_past_the_vocabulary_is_named():
    """Layer 0 with row 0's token id one past the vocabulary: the launch reads the nearest row, drains, and the
    host raises naming the stage, the row, the id and the vocabulary's rows (not a page table's length)."""
    r, res = _run("tokens", "bad_token")
    assert r.returncode == 0, r.stderr[-3000:]
    from sgl_amd_mono.glm53 import launch_inputs as li

    v = li.tiny_geometry().vocab
    want = f"in stage norm1 found step row 0's token id {v} outside the vocabulary's {v} rows"
    assert res["bad_token_error"].startswith("bad step input: ") and want in res["bad_token_error"], res


def test_skipped_select_stages_keep_the_next_launch_exact():
    """Rows of 300 keys (sliced select: index_short 256 here), then rows of 200 (each listed by one task, so the
    launch skips sel2, sel3 and emit: every program arrives there without waiting), then other rows of 300 keys: every
    list is the exactness rule's over the launch's own scores and the oracle's set. Without the skipped stages
    zeroing their histograms' other parity, the third launch sums the first's counts into its own, and its
    threshold is wrong."""
    r, res = _run("indexer", "alternate")
    assert r.returncode == 0 and res is not None, r.stderr[-3000:]
    ls = res["ls"]
    assert min(res["lengths"][0] + res["lengths"][2]) > ls >= max(res["lengths"][1]), res["lengths"]
    for vals in res["values"]:
        assert vals["indexer.topk.max_abs"] == 0 and vals["indexer.topk.missed"] == 0, vals


def test_row_waits_keep_every_word_in_step():
    """The select's row-scoped hand-offs (tiles index_row_waits) over the same three launches as
    test_skipped_select_stages_keep_the_next_launch_exact: the all-listed launch passes sel2, sel3 and emit and
    still makes their row words' arrivals (`sync.pass_rows`), so the third launch's row waits find their targets;
    every list the rule's, every word at its launches' arrivals (one planted a word short fails)."""
    r, res = _run("indexer", "alternate", INTERP_TILES="index_pair=0,index_row_waits=1")
    assert r.returncode == 0 and res is not None, r.stderr[-3000:]
    for vals in res["values"]:
        assert vals["indexer.topk.max_abs"] == 0 and vals["indexer.topk.missed"] == 0, vals
    assert res["row_words"] == {n: [] for n in ("sel1_rows", "sel2_rows", "sel3_rows", "emit_rows")}, res
    assert res["row_words_planted_caught"] is True


@pytest.mark.parametrize("rows, missing, waiting", [(1, "sel2", "sel3"), (2, "score", "sel1")])
def test_row_waits_report_a_missed_row_arrival(rows, missing, waiting):
    """A planted missing arrival (its tasks' row arrivals too) with the row-scoped hand-offs, at sel2, and with them
    from the score stage (index_row_waits 2) at score: the next stage's row wait misses its deadline and the error
    word names both stages."""
    r, _ = _run("indexer", "deadline", INTERP_TILES=f"index_pair=0,index_row_waits={rows},index_short=0",
                INTERP_SKIP_STAGE=missing)
    assert r.returncode != 0
    assert f"in stage {waiting} missed its deadline waiting on stage {missing}" in r.stderr, r.stderr[-2000:]


def test_nan_row_routes_in_range():
    """A NaN input row: its router ranks every NaN score as -inf, so it picks experts 0.. (exactly TOPK) and
    the used-expert lists stay within their buffers (ranked as the largest, every expert would be picked and
    the lists overrun: under the interpreter, a heap corruption). The other row keeps its bits."""
    r, res = _run("shared", "nan")
    assert r.returncode == 0, r.stderr[-3000:]
    assert res["nan_ids"] == [0, 1, 16], res  # the tiny geometry: top-2 of 16 routed experts, then the fused one
    assert res["nan_row1_same"] is True


@pytest.mark.parametrize("kind", sorted(registry.KINDS))
def test_reads_stay_inside_their_tensors(kind):
    """Every step input, weight, scratch and output buffer in memory that ends at an inaccessible page
    (`_guard_pages.py`), 3 rows: a read past any tensor's end kills the process (SIGSEGV, return code -11).
    Caught the index key's rope reading cos/sin for all 16 rows of its tile (rows past R: past cos_sin's end),
    which on the H200 faulted only when cos_sin ended a cached segment. The same bits as on plain tensors."""
    r, res = _run(kind, "guarded")
    assert r.returncode == 0 and res is not None, f"return code {r.returncode}: {r.stderr[-3000:]}"
    assert res["guarded_same_bits"] and all(res["guarded_same_bits"].values()), res
