"""The indexer's tile defaults by width (`index_by_width`, from `Tiles.for_width`): the select scans' step, sel1's
lists, the score loop's block, the floor, the pair digits and the scores' cache policy, each with the runs that chose
it (test/kernels/glm53/results/), and the options timed beside them and not taken.
"""

import dataclasses

# The select scans' keys a step (Tiles.index_scan 0) by width: (the widest width, its step). A row's keys split into
# index_slices // rows slices, so at 1 and 2 rows every slice is short (256 keys at 8K and 1 row): 256 keys a step
# there, 512 at more rows. H200, one process, TP8, a decode row a request, these defaults against 512 at every width
# (results/indexer17_h200_time_specs_scan_width.log, 1024 at 8 rows then), rows 1 / 2: 8K 131.7 / 145.6 us against
# 133.6 / 146.9, 128K 142.6 / 163.4 against 143.4 / 163.7; 1024 at 8 rows: 8K 203.3 against 198.8, 128K 260.5
# against 263.0 (mixed: not taken). One width for every slice before (results/indexer16_h200_time_specs_scan.log),
# rows 1 / 2 / 4 / 8: 512 8K 131.9 / 144.9 / 164.4 / 198.1 us, 128K 143.6 / 160.7 / 194.6 / 261.6; 256 130.1 /
# 142.6 / 162.4 / 196.3, 140.9 / 160.9 / 196.4 / 272.3; 1024 136.2 / 147.9 / 167.9 / 200.4, 145.2 / 163.2 / 193.0 /
# 256.9.
INDEX_SCAN_BY_WIDTH = ((2, 256), (1 << 30, 512))
# sel1's lists (Tiles.index_compact -1) by width: (the widest width, the listing's keys a tile row, 0: no list). At
# 1 and 2 rows the lists cost at 8K what they save at 128K. H200, one process, TP8, a decode row a request
# (results/indexer18_h200_time_specs_compact.log), defaults without lists, then index_compact 2 / 4 / 8, rows 1 / 2 /
# 4 / 8: 8K 129.9 / 143.1 / 164.1 / 197.2 us; 131.4 / 144.5 / 165.9 / 197.6; 131.3 / 144.6 / 164.2 / 198.6; 131.9
# / 144.7 / 164.4 / 198.5; 128K 140.6 / 162.2 / 195.0 / 262.1; 140.3 / 158.7 / 189.5 / 256.0; 141.0 / 159.8 / 190.1
# / 254.2; 141.0 / 160.3 / 192.2 / 256.3. Whole chunks only, without list_tail's short ones (commit ce90e24,
# results/indexer18_h200_time_specs_compact_untailed.log): 8K 4 rows 163.9 -> 165.4 / 167.0 / 168.8 us (2 / 4 / 8),
# a 256-key slice scanned in a mostly masked chunk. 32 keys a tile row at 8 rows, H100, one process, the defaults timed
# first and last (results/indexer27_h100_specs_w8.log): 8K 221.2 / 220.9 -> 222.9 us, 128K 288.0 / 288.4 -> 301.6.
# At 128K 8 rows the stages that scan the lists vary by row, not by slice (results/indexer27_h100_trace_own.log, H100,
# each program's own µs): emit 9.0 on row 0's 16 programs, 7.2 on row 3's, 3.8-4.4 on the other rows', sel2 and sel3
# slowest on the same two rows. On the same kind of inputs (CPU, other weights: results/indexer27_lists_cpu.txt) the
# lists hold 7,340-32,900 keys a row.
INDEX_COMPACT_BY_WIDTH = ((2, 0), (1 << 30, 4))
# The score loop's block and the slices' unit (Tiles.index_block 0) by width: (the widest width, its keys). 128 at 1 and
# 2 rows (at 8K 1 row a row's 32 blocks of 256 keys become 64 tasks of 128), 256 at more. H100, one process, TP8, a
# decode row a request, 256 against 128 (results/indexer26_h100_time_indexer.log, both kinds and the per-op path in
# that run), rows 1 / 2 / 4 / 8: 8K 137.8 / 151.8 / 179.3 / 225.3 us -> 133.6 / 151.2 / 176.9 / 224.0, 128K 147.0 /
# 172.4 / 209.1 / 291.6 -> 144.6 / 171.8 / 209.5 / 298.0; an earlier process at 1 row (indexer26_h100_time_specs_w1
# .log, the defaults timed first and last): 8K 137.4 / 135.5 -> 133.5 (64: 134.6), 128K 146.3 / 145.2 -> 144.2.
# No A/B of it ran on an H200 (there, with it, both kinds in one call: indexer26_h200_time_*_w1.log). Again on an H100,
# 256 at 1 row beside it (results/indexer27_h100_specs_w1.log, the defaults timed first and last): 8K 133.5 / 133.3 ->
# 134.2 us, 128K 144.9 / 144.5 -> 145.6.
INDEX_BLOCK_BY_WIDTH = ((2, 128), (1 << 30, 256))
# Each decode row's floor (Tiles.index_floor -1) by width: (the widest width, 1: on, 0: off). Each score task of a
# slice of 16 blocks or more keeps each lane's largest score and writes the largest of 16 order keys between its lanes'
# smallest and largest that ceil(top-k / slices) lanes reach (`stages_index.lane_floor`); sel1 lists and counts only
# the keys at or above the smallest of a row's (`stages_select.select_digit`): the same list. On time_layers' kind of
# 128K 8-row inputs (CPU, results/indexer31_lists_floor_cpu.txt) sel1's lists hold 3,748-5,087 keys a row instead of
# 7,340-32,900. H100, one process, TP8, a decode row a request, the defaults timed first and last: a first build
# (masked order keys in the score loop, 353 sm_90 loop instructions against 325; results/indexer31_h100_specs_floor_w8
# .log, _w4.log) 8 rows 8K 220.1 / 221.2 -> 222.3 us, 128K 284.5 / 283.9 -> 283.6, 4 rows 8K 176.8 / 176.2 -> 180.0,
# 128K 206.3 / 204.3 -> 206.7; its 128K 8-row trace (results/indexer31_h100_trace_floor_128k.log, work us) sel2 4.4 ->
# 2.8, sel3 5.1 -> 3.6, emit 7.7 -> 4.1, score 55.3 -> 57.1. This build (the scores' own max, 331 instructions; no floor
# under 16 blocks a slice; results/indexer31_h100_specs_floor2_w8.log, _w4.log): 8 rows 8K 220.1 / 220.9 -> 221.2,
# 128K 284.8 / 284.1 -> 283.0; 4 rows 8K 177.5 / 175.9 -> 177.1, 128K 206.0 / 205.4 -> 206.2. Chosen at 8 rows, where
# 128K is the indexer's one missed ratio (the shared launch 186.3 us in that run, results/indexer31_h100_time_shared
# _w8.log: 1.527 -> 1.519) and 8K has room (1.20). Again on another H100 (results/indexer32_h100_specs_l2_floor_w8.log,
# the defaults timed first and last): 8 rows 8K 223.5 / 225.3 -> 224.7, 128K 289.2 / 288.7 -> 286.6. Its checks there,
# 0 failures and every control failing: check_layer TP8 bf16 8 rows at 8K / 128K (results/indexer32_h100_check_layer
# _floor_w8.log) and check_topk's decode shape at 128K / 300K over all four key caches, every list exact
# (results/indexer32_h100_check_topk_decode_floor.log); the first build's at 8K / 128K / 300K
# (results/indexer31_h100_check_topk_decode_floor.log).
INDEX_FLOOR_BY_WIDTH = ((4, 0), (1 << 30, 1))
# sel1 counting digits 1 and 2 as one 16-bit digit and sel3 finding both (Tiles.index_pair -1) by width: (the widest
# width, 1: on, 0: off). Stage sel2 and its hand-off passed (every program arrives without waiting); sel1 adds an
# atomic a key it counts into a 65536-bin histogram a row and zeroes the other parity's R x 256 KB; sel3 reads digit
# 1's 16 copies and then the pair histogram's 256 bins at that digit. Traced on an H100 (results/indexer35_h100_trace
# _pair.log, span us): 8K 1 row sel1 3.3 -> 3.6, sel2 3.3 -> 1.0, sel3 3.8 -> 4.6 (launch 132.6 -> 130.7); 128K 8
# rows sel1 10.8 -> 12.5, sel2 4.4 -> 1.0, sel3 4.9 -> 5.9 (270.3 -> 268.6 in the trace build). H100, one process,
# TP8, a decode row a request, the defaults timed first and last (results/indexer35_h100_specs_pair12_w1248.log),
# rows 1 / 2 / 4 / 8: 8K 133.5 / 149.9 / 176.8 / 219.5 and 131.8 / 149.4 / 175.8 / 221.0 us -> 129.2 / 148.5 / 175.2
# / 219.7; 128K 144.1 / 169.4 / 205.1 / 281.0 and 142.3 / 168.2 / 204.3 / 281.8 -> 140.8 / 166.2 / 202.6 / 282.0.
# Two other H100s (results/indexer35_h100_specs_pair_w1w8.log, _w2w4.log): rows 1 / 8, 8K 134.2 / 223.5 and 133.4 /
# 225.0 -> 131.7 / 223.2, 128K 144.7 / 286.8 and 143.6 / 287.8 -> 141.6 / 287.3; rows 2 / 4, 8K 149.7 / 175.8 and
# 148.0 / 175.5 -> 146.9 / 173.7, 128K 169.8 / 205.2 and 168.5 / 202.8 -> 165.9 / 204.2. On at 1-4 rows, off at 8
# (no gain there). Its checks, 0 failures and every control failing: check_layer TP8 bf16 rows 1 / 8 at 8K / 128K and
# check_topk at 128K / 300K (results/indexer35_h100_check_*_pair1.log). Also built, checked and timed, not taken,
# reverted: the other parity zeroed by the programs absorb's stage leaves idle instead of in sel1's (index_pair 2;
# the same process): rows 1 / 2 / 4 / 8, 8K 129.3 / 148.3 / 175.1 / 220.1 us, 128K 139.4 / 167.1 / 204.4 / 285.0;
# its checks 0 failures (results/indexer35_h100_check_*_pair2.log). Moving the zeroing does not recover 8 rows; whether
# sel1's 1.7 us there is its zeroing or its pair atomics was not traced apart. Then built, checked and timed, not
# taken, reverted (commit 2188546: index_pair 3): no zeroing in sel1; emit stores 0 at the pair bin of each key it scans
# whose digit 0 is the threshold's (every key sel1 counted), so the histogram is all zero after each launch (its
# interpreter cases: the same bits, both parities zero after three launches). Another H100, one process, the defaults
# first and index_scan 0 (the defaults again) last (results/indexer36_h100_specs_pair3_w1248.log, 3.11 TB/s), rows 1
# / 2 / 4 / 8 (the defaults: index_pair 1 at 1-4 rows, off at 8): 8K 131.3 / 149.6 / 176.6 / 224.2 and 130.6 / 148.3
# / 175.8 / 225.5 us -> 130.9 / 147.9 / 175.4 / 223.2; 128K 142.3 / 167.8 / 206.4 / 286.4 and 141.7 / 166.9 / 204.9 /
# 286.9 -> 142.2 / 168.2 / 207.2 / 286.5. Its checks, 0 failures, every control failing: check_layer TP8 bf16 rows 2 /
# 8 at 8K / 128K, check_topk at 128K / 300K (results/indexer36_h100_check_*_pair3.log). Traced at 128K 8 rows against
# the defaults (results/indexer36_h100_trace_pair3_128k.log, span us): sel1 10.8 -> 12.0 with no zeroing at all (so
# most of the growth is its pair atomics, not the zeroing), sel2 4.4 -> 1.0, sel3 5.1 -> 5.9, emit 5.4 -> 5.9.
INDEX_PAIR_BY_WIDTH = ((4, 1), (1 << 30, 0))
# The scores' stores marked to leave L2 last (Tiles.index_keep_scores -1) by width: (the widest width, 1: on, 0: off).
# sm_90: an evict_last cache policy on each score block's store (`tile_ops.store_kept`: 3 such stores in the
# 8-row build's PTX, 255 registers and 136 spill bytes either way; AOT on a CPU, Triton 3.8). H100, one process each,
# TP8, a decode row a request, rows 4 / 8 (results/indexer38_h100_specs_keep_w4w8.log: the defaults first and
# index_scan 0, the defaults again, last; results/indexer38_h100_specs_keep_reversed.log: on first, then off, then on
# twice), 128K: off 203.6 / 282.0, 202.8 / 281.5, 204.1 / 282.0 us; on 202.5 / 279.4, 202.3 / 278.8, 201.2 / 279.2,
# 200.9 / 280.1. 8K: off 175.0 / 219.9, 173.6 / 220.6, 173.9 / 219.9; on 174.5 / 220.8, 174.8 / 221.0, 174.3 /
# 220.8, 173.7 / 220.7. Traced at 128K 8 rows (results/indexer38_h100_trace_indexer_keep{0,1}.log, work us): score
# 57.1 -> 54.8, sel1 9.7 -> 9.5: the score stage itself gains, not sel1's reads of the scores (what it was written
# for); why the stream gains was not measured. The keys' own loads cannot be marked the other way (evict_first, to
# leave L2 first): the pipelined loop brings them by cp.async, and Triton (3.8, sm_90 PTX of a small pipelined
# loop, CPU) drops a load's eviction policy there. On at more than 4 rows, where 128K is the indexer's one missed ratio
# (8K 8 rows about 0.7 us slower); 4 rows gained 1.8 us at 128K, but on there it would change the TP1 step's build
# (the served TP1 step, rows 1-4, ran with it off: served.RAN). Its checks, 0 failures, every control failing:
# check_layer TP8 bf16 8 rows at 128K / 8K, check_topk's decode shape at 128K / 300K over all four key caches
# (results/indexer38_h100_check_{layer,topk}_keep.log).
INDEX_KEEP_BY_WIDTH = ((4, 0), (1 << 30, 1))
# The select's row-scoped hand-offs (Tiles.index_row_waits -1) by width: (the widest width, 1: on, 0: off). With four
# digits and no pairs (so at more than 4 rows, where index_pair is off), each task of sel2, sel3, emit and attn waits at
# its own row's word for that row's tasks of the stage before (`sync.wait_row`; the table's `indexer.row_words`) and
# the global hand-offs from sel1 to emit are passed: a row's 16 programs (at 8 rows) go from sel1 to attn without
# waiting on the other rows'. H100, one process, TP8, a decode row a request, 8 rows, the defaults first and
# index_scan 0 (the defaults again) last (results/indexer42_h100_specs_row_waits_w8.log, 3.18 TB/s): 128K 279.5 /
# 280.4 us -> 279.1, 8K 222.0 / 222.0 -> 221.3; the shared launch in the same call 185.7 / 181.3
# (indexer42_h100_time_shared_w8_tail.txt): 128K 1.505 / 1.510 -> 1.503, 8K 1.224 -> 1.221. Faster at both points
# than both default runs, by less than a process's spread (about 1 us). Its checks, 0 failures, every control failing:
# check_layer TP8 bf16 8 rows at 128K (decode shape), check_topk at 128K, decode and requests shapes
# (results/indexer42_h100_check_{layer,topk}_row_waits.log); 255 registers and 18 spill bytes either way
# (results/indexer42_h100_pre.log). Not traced (the call's time). In the same call the SM
# clock stayed at its 1980 MHz maximum through both kinds' runs, 320 W at most against 700, no throttle reason
# (results/indexer42_h100_clocks.csv): the post-select stages running longer in the indexer's launch than in the
# shared kind's (attn 18.4 against 16.6 us of work, indexer38 traces) is not the card's clock. index_row_waits 2 (sel1's
# tasks also waiting for their request's score tasks, score's global hand-off passed) is built and checked under the
# interpreter, not yet timed; sm_90 AOT on a CPU (results/indexer42_row_waits_survey_cpu.txt) 255 registers, 92 / 100
# / 96 spill bytes for 2 / 1 / 0 (Triton 3.6, a 4096-key page table).
INDEX_ROW_WAITS_BY_WIDTH = ((4, 0), (1 << 30, 1))
# Built and timed, not taken, removed (commit 6133aff: Tiles.index_keep_front 1): res1 (norm1) and qcat (absorb) of the
# index kinds stored to leave L2 last too. They are written before the score stage's stream and read after it (o_proj's
# residual, attn's queries); in the trace each stage after the select ran a little longer than the shared launch's on
# its decode step (results/indexer38_h100_trace_*: attn 18.4 against 16.6 us of work, w_uv 6.9 / 6.4, o_proj 10.5 /
# 10.0). H100, one process, TP8, a decode row a request, 8 rows, the defaults first and index_scan 0 (the defaults
# again) last (results/indexer39_h100_specs_lsel_keepf_w8.log, 3.17 TB/s): 128K 279.5 / 280.0 us -> 280.3; 8K 222.0 /
# 222.2 -> 219.5. No gain where the ratio is missed (128K); the 8K gain (met there) not repeated in a second process.
# Built, checked and timed, slower, reverted (commit fe3c6a8: Tiles.index_list_select): when every list sel1 left fit
# an [NSL, 8192 / NSL] tile, one task a sliced row selected its whole list in sel2's stage (the threshold's top 16 bits
# from sel1's histograms, the other 16 a bit at a time by block-wide counts over the listed keys, the entries by one
# two-level scan) and every program passed sel3 and emit. The same bits under the interpreter (16- and 24-bit
# prefixes, lists past the tile on the sliced stages); sm_90 AOT 255 registers, spills 136 -> 148 bytes (Triton
# 3.8; the GPU's 3.6: 18 either way). The same process as above: 128K 8 rows 306.3 us, 8K 254.6. Traced at 128K 8
# rows (results/indexer39_h100_trace_lsel.log, work us): sel2 46.6 (one row's task), sel3 and emit passed at 0.0 (0.5
# of span each), against sel2 + sel3 + emit 14.4 of span in the sliced stages (indexer38_h100_trace_indexer_keep1
# .log): one program's sixteen [16, 512] block-wide counts and scans take about three times the three stages over 128
# programs. Its checks there, 0 failures and every control failing: check_layer TP8 bf16 8 rows at 128K / 8K (decode
# shape), check_topk at 128K, decode and chain shapes (the decode step's recent-keys case took the lists, the others
# the sliced stages; results/indexer39_h100_check_{layer,topk}_lsel.log). A passed stage costs about 0.5 us of span.


def index_by_width(t, width: int):
    """Tiles t with the indexer's fields left to the width resolved from the tables here: index_scan 0, index_block
    0, and index_compact, index_floor, index_pair, index_keep_scores and index_row_waits -1; no lists (index_compact)
    where sel1 cannot list (three digits, or digit 1 not counted by atomics), no pairs where sel1 cannot count them
    (three digits, digit 1 not counted by atomics, index_relist)."""
    def pick(table):
        return next(n for w, n in table if width <= w)

    can_list = t.index_digits == 4 and t.index_sel_atomics
    by = {"index_scan": (not t.index_scan, lambda: pick(INDEX_SCAN_BY_WIDTH)),
          "index_block": (not t.index_block, lambda: pick(INDEX_BLOCK_BY_WIDTH)),
          "index_compact": (t.index_compact < 0, lambda: pick(INDEX_COMPACT_BY_WIDTH) if can_list else 0),
          "index_floor": (t.index_floor < 0, lambda: pick(INDEX_FLOOR_BY_WIDTH)),
          "index_pair": (t.index_pair < 0, lambda: pick(INDEX_PAIR_BY_WIDTH) if can_list and not t.index_relist else 0),
          "index_keep_scores": (t.index_keep_scores < 0, lambda: pick(INDEX_KEEP_BY_WIDTH)),
          "index_row_waits": (t.index_row_waits < 0, lambda: pick(INDEX_ROW_WAITS_BY_WIDTH))}
    return dataclasses.replace(t, **{name: value() for name, (left, value) in by.items() if left})
# Built, checked and timed, no faster, removed (commit 8445681: Tiles.index_list_one_layout): sel1's [256, K] listing
# chunks loaded a key a thread in the layout Triton gives their atomics and stores, whose addresses are data-dependent,
# instead of K keys a thread (one vector load) and each of those operands converted to that layout through shared
# memory. AOT on a CPU (results/indexer36_list_layout_sass_cpu.txt, sm_90), sel1 at 8 rows: Triton 3.8 21 -> 15 layout
# conversions (8 -> 2 in the chunk loop), 24 -> 16 barriers, 736 -> 816 instructions; Triton 3.6 (the GPU image's)
# 10 -> 4 conversions, 15 -> 15 barriers; gfx950 unchanged. The same bits under the interpreter. H100, one process,
# TP8, a decode row a request, the defaults first and index_scan 0 (the defaults again) last
# (results/indexer37_h100_specs_one_layout_w4w8.log, 3.11 TB/s), rows 4 / 8: 8K 176.5 / 224.9 and 176.2 / 226.3 us ->
# 176.2 / 224.7; 128K 206.1 / 287.9 and 204.5 / 287.2 -> 206.8 / 288.6. Its checks, 0 failures, every control
# failing: check_layer TP8 bf16 rows 4 / 8 at 8K / 128K, check_topk at 128K / 300K
# (results/indexer37_h100_check_{layer,topk}_one_layout.log).
# Also timed, slower (the same H100, one process at 8 rows: results/indexer37_h100_specs_slices_w8.log): index_slices
# 256 (32 score and select tasks a row) and 64 (8), 8K / 128K: defaults 225.0 / 287.7 and 223.7 / 287.6 us; 256
# 239.4 / 316.0; 64 226.3 / 308.6.
# Built, checked and timed, no faster, removed (commits 8745baa, 8f9a820, d2919ad, 2ae15e0: Tiles.index_peel): 1, the
# pipelined score loop over a slice's whole steps without masks, its partial last step alone; 2, also each key's and
# scale's address one 32-bit offset from the pool's start (the pool bounded under 2 GiB at bind). The same bits under
# the interpreter; 277 (1) and 256 (2) sm_90 instructions a 256-key step against the defaults' 331 (AOT on a CPU,
# results/indexer33_score_loop_peel_sass_cpu.txt). H100, one process, TP8, a decode row a request, the defaults
# first, index_scan 0 (the defaults again) last (results/indexer34_h100_specs_peel_w1w8.log), rows 1 / 8: 8K 133.2 /
# 223.7 us -> 131.9 / 225.9 (1), 132.4 / 224.9 (2), 132.0 / 224.9; 128K 144.1 / 286.6 -> 143.2 / 287.4 (1), 143.2 /
# 286.9 (2), 142.4 / 287.6. 2's check_layer (TP8 bf16 rows 1 / 8, 8K / 128K) and check_topk (the decode shape at
# 128K / 300K) 0 failures (results/indexer34_h100_check_*_peel2.log). The loop's instructions do not bound it: the
# loop alone (probe_score.py, 8192 keys a program, 132 programs, H100, results/indexer34_h100_probe_score_hist_floor
# .log) streams 2.46 TB/s of the card's 3.17 as the launch runs it at 8 rows (digit 0 by atomics, the floor: 58.0 us),
# 2.51 without digit 0 (56.8), 2.54 without either (56.2): so moving digit 0 out of the score loop would gain about
# 1.2 us at 128K 8 rows, not tried. Another H100 (results/indexer34_h100_probe_score_page_chunk.log): 58.2 us as the
# launch runs it, 56.0 with its page ids picked from 32 steps' at once (Tiles.index_page_chunk 32), 54.3 with neither
# digit 0 nor the floor; 52.8 without the page table (pages in order, no floor or digit 0: this loop's ceiling). In
# the launch the chunks are no faster (the same machine, one process, the defaults first, index_scan 0 the defaults
# again: results/indexer34_h100_specs_page_chunk_w1w8.log), rows 1 / 8: 8K 132.4 / 220.7 us -> 131.7 / 221.8 (32),
# 131.0 / 220.9 (16), 131.6 / 221.6; 128K 143.9 / 283.2 -> 142.6 / 283.5, 142.1 / 283.3, 142.6 / 282.4 (32's
# check_layer and check_topk there: 0 failures).
# Also built and timed, slower, reverted (commit a44cd92: Tiles.index_l2_ahead D): the pipelined score loop bringing the
# pages D steps ahead into L2 (cp.async.bulk.prefetch.L2, a page a thread), more bytes in flight than its buffers hold.
# H100, the same process as the floor's above, 8 rows, 8K / 128K: defaults 223.5 / 289.2 and 225.3 / 288.7 us; D 2
# 225.6 / 292.6, 4 225.7 / 295.2, 8 225.4 / 315.6.
# Also built and timed, not taken, reverted (commit 1c6d79e: Tiles.index_warm_pages P, index_warm_early): each program's
# first score task's first P pages brought into L2 (the same bulk prefetch) at q_b's start or the launch's, while the
# front leaves HBM idle. Another H100, one process, the defaults (the floor on at 8 rows) timed first and last
# (results/indexer32_h100_specs_warm_w148.log), rows 1 / 4 / 8: 8K 133.0 / 176.6 / 220.4 and 132.2 / 175.4 / 220.4 us;
# P 8 130.4 / 175.6 / 221.9, 16 130.9 / 176.0 / 223.0, 32 129.9 / 174.7 / 221.3; early 16 132.6 / 175.7 / 224.2, 32
# 131.3 / 176.7 / 223.0. 128K 144.2 / 204.9 / 281.0 and 143.1 / 204.2 / 282.4; P 8 143.8 / 204.2 / 282.9, 16 143.8 /
# 204.7 / 283.9, 32 144.2 / 205.1 / 283.2; early 16 146.0 / 206.8 / 286.8, 32 144.0 / 208.8 / 290.2. Nothing at 128K.
# Also timed, not taken (results/indexer19_h200_ab_five_trees.log, trees alternated in one run, means of two): the
# select finished inside sel1 by each row's last task to land (branch cand/finish-on: index_finish 4096, a row's lists
# in one [S, 4096 // S] tile, digits 2 / 3 by its own atomics), 8K 4 / 8 rows 166.5 / 200.9 -> 186.5 / 220.8 us, 128K
# 194.8 / 253.9 -> 211.9 / 264.0 (1 / 2 rows, which do not list, within 1 us); score's first key block loaded in
# absorb's stage (cand/score-first-block, no spills), 1.0-3.2 us slower at every point.
# Also timed, not taken: emit's own step per width, 1024 keys over slices of 1024 or more at 4 rows and more (both
# widths built, chosen a task by its slice, as commit c2f4ffe), trees alternated against these defaults
# (results/indexer17_h200_ab_emit_width.log, means of two runs), rows 4 / 8: 8K 164.8 / 198.2 -> 165.0 / 198.1 us,
# 128K 195.6 / 261.8 -> 194.8 / 260.4 (4 rows within the runs' spread). At 1 row, one process beside these defaults
# (results/indexer17_h200_time_specs_1row_blocks.log), 8K / 128K: 129.7 / 141.8 us; index_block 128 129.1 / 140.9
# (within a process's spread); its scans 128 a step too 131.2 / 144.6; index_pipe 0 132.5 / 146.0; index_slices 64
# 129.7 / 145.6; and (results/indexer17_h200_time_specs_scan_width.log, second process) 131.7 / 145.1 against
# index_atomics 4 131.7 / 150.1, wq_b in 64 KB tasks (ks_iq 4) 138.3 / 148.3, bn_iq 64 135.8 / 149.3.
# Timed again at 8 rows on an H100, each beside these defaults in one process, the defaults timed first and last, TP8,
# a decode row a request (results/indexer30_h100_specs_ahead3_chunk_relist.log, then indexer30_h100_specs_w8_scan
# _compact.log on the same machine), 8K / 128K: defaults 220.0 / 285.1 and 221.3 / 285.0 us; index_page_chunk 32
# (with index_ahead 2 a step's page ids picked from the chunk's, its keys addressed by page: commit 4a7eea7) 220.3 /
# 284.4; index_relist 1 222.5 / 284.1; defaults 220.6 / 285.1 and 221.5 / 285.1; index_scan 1024 223.3 / 285.5;
# index_compact 8 221.2 / 287.8; index_relist 1 with index_scan 1024 225.0 / 285.8. None taken: at most 1 us at 128K.
# Built, checked and timed, not taken, reverted (commit b8da990: Tiles.index_ahead 3): page_block's keys loaded as
# [IBLK, ID] rows through an fp8 pointer, so that the swapped dot reads them from shared memory in three buffers
# (Triton 3.8, sm_90 AOT on a CPU). The same run, 8 rows: 224.8 / 371.4 us; 1 row 8K / 128K 133.0 / 143.2 and 132.0 /
# 141.8 (defaults) -> 133.2 / 154.1; its check_layer (TP8 rows 1 / 8, 8K / 128K) 0 failures.
# Also built and timed, slower, reverted: every program prefetching into L2 (PTX prefetch.global.L2) the weights
# read after the top-k once its sel1 tasks were done, while the select leaves HBM idle (commit 8b148c8, reverted:
# Tiles.index_warm 1: w_vc and o_proj; 2: also the router's gate and the shared expert's gate | up rows). H200, one
# process, TP8, a decode row a request, rows 1 / 2 / 4 / 8 (results/indexer13_h200_time_specs_warm.log): 8K 132.9 /
# 146.7 / 166.7 / 198.6 us -> 135.0 / 148.6 / 169.1 / 200.7 (1), 135.0 / 148.5 / 169.4 / 200.8 (2); 128K 144.6 /
# 162.8 / 200.9 / 266.5 -> 147.0 / 165.9 / 200.0 / 267.6 (1), 146.3 / 164.2 / 200.7 / 268.4 (2) (not traced).
# Also built and timed, slower, reverted: the front's programs with no task in a stage bulk-prefetching a later
# stage's weights into L2 (cp.async.bulk.prefetch.L2, a range a thread; commit 0ea701d, Tiles.l2_prefetch: 2,
# latent's idle programs q_b's and wq_b's; 7, also norm1's qkv_a's and wk's and absorb's o_proj's). H200, one
# process, rows 1 / 2 / 4 / 8 (results/indexer15_h200_time_specs_l2_prefetch.log): defaults 8K 132.0 / 146.1 /
# 164.9 / 197.8 us, 128K 143.3 / 161.6 / 198.2 / 266.6; 2: 133.6 / 146.9 / 166.7 / 198.6, 143.4 / 164.0 / 198.1 /
# 267.7; 7: 135.1 / 148.2 / 173.3 / 206.6, 145.2 / 167.4 / 206.1 / 274.6.
# Also built, checked and timed, not taken, reverted (commits 3457fff, 0b82f8a: Tiles.index_balance): sel2, sel3 and
# emit taking sel1's lists in shares balanced over their tasks by each row's keys listed. H100, one process, rows
# 4 / 8 (results/indexer29_h100_specs_balance.log, 3457fff): 8K 175.9 / 219.7 -> 221.0 / 255.3 us, 128K 205.1 / 284.7
# -> 253.0 / 330.0 (its checks pass): its share reads inlined a [512, NSL] comparison at each, 37,112 sm_90
# instructions against 26,992, AOT on a CPU (0b82f8a's loop over the slices a step spans: 28,984; not timed).
# Tiles.index_relist's runs (off): sel2 keeping each slice's list only at or above its 16-bit prefix. On time_layers'
# kind of 128K inputs (CPU, the oracle's scores, results/indexer27_lists_cpu.txt) the threshold's 8-bit bin holds
# 7,340-32,149 keys a row, its 16-bit prefix and above 2,052-2,087, and at 128K 8 rows emit's programs take 3.8-9.0 us
# by row (results/indexer27_h100_trace_own.log). H100, one process at 8 rows, the defaults timed first and last
# (results/indexer27_h100_specs_relist_w8.log): 8K 220.9 / 221.9 -> 222.4 us, 128K 287.7 / 287.5 -> 286.1; its
# check_layer at TP8 8 rows, 8K and 128K, 0 failures (results/indexer27_h100_check_layer_relist_w8.log). Mixed, and far
# from emit's 5 us spread: off (not traced: what sel2's relisting costs is not yet known). index_relist K: the lists of
# at least K keys (1: every list); a shorter one is only counted (its keys scanned in the same chunks) and left as it is
# for sel3 and emit. Traced at 128K 8 rows with 1 (results/indexer28_h100_trace_own_128k*.log): sel2 + sel3 + emit 20.2
# -> 17.9 us of span. H100, one process at 8 rows (results/indexer28_h100_specs_w8.log, index_ahead 1 the default then):
# 8K 224.2 / 224.2 us -> 226.5 (1), 226.5 (1024), 225.1 (index_ahead 2) -> 226.1 (both); 128K 291.3 / 291.4 -> 290.3,
# 291.2, 290.5 -> 289.0. Mixed (8K slower with 1024 though no list of 8K reaches it): off.
# Tiles.index_last16's idea (tiles.py) built again another way, checked and timed, slower, reverted (commit ed69105:
# Tiles.index_ties 32): sel2 listing each slice's first 32 keys at its 16-bit prefix in order (a block-wide scan a step)
# and counting those above it, emit finding the last two digits from a [slices, 32] tile of those lists (two 256-bin
# histograms) and the earlier slices' counts from it, sel3 passed unless a slice had more (then run as before). The same
# bits under the interpreter, a spill case running sel3. H100, one process, TP8, a decode row a request, 8 rows, the
# defaults first and index_scan 0 (the defaults again) last (results/indexer40_h100_specs_ties_w8.log): 128K 280.5 /
# 280.3 us -> 285.0, 8K 220.9 / 220.6 -> 224.5. Traced at 128K 8 rows (results/indexer40_h100_trace_ties.log, work us,
# against indexer38_h100_trace_indexer_keep1.log): sel2 2.8 -> 4.9, sel3 3.6 -> 1.5 (passed: the fit check's load and
# hist3's zeroing), emit 4.1 -> 7.7. Its checks, 0 failures, every control failing: check_layer TP8 bf16 8 rows at 128K
# / 8K, check_topk at 128K, decode and chain shapes (random and recent keys 6-11 keys a slice at the prefix, sel3
# passed; repeated and zero keys 1,164-8,192, sel3 ran: results/indexer40_h100_check_*_ties.log).
# Built, checked and timed, slower, reverted (commit 4dec480: Tiles.qb_rotate; beside KIND_TILES' notes in tiles.py):
# each q_b / wq_b task summing its k blocks from the (column tile mod 16)-th on, wrapping, so that the stage's 96 tasks
# do not all read the same k block of their weight rows at once (with one k part every task starts on block 0; qkv_a's 6
# parts start on 6). The loop is not bound by its instructions (sm_90 AOT on a CPU: 145 SASS instructions a warp a
# 64-column step, its loads cp.async two steps ahead; results/indexer41_gemv_loop_sass_cpu.txt). H100, one process, TP8,
# a decode row a request, 8 rows, the defaults first and index_scan 0 (the defaults again) last
# (results/indexer41_h100_specs_rot_w8.log): 128K 279.9 / 280.2 us -> 282.5, 8K 221.3 / 221.2 -> 222.3; q_b's span 12.5
# us traced (results/indexer41_h100_trace_rot.log) against 12.0-12.3 in the defaults' traces. Its check_layer (TP8 bf16
# 8 rows, 128K / 8K) and check_topk (decode, 128K): 0 failures, every control failing
# (results/indexer41_h100_check_{layer,topk}_rot.log).
