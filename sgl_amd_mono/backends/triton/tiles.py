"""Tile sizes of the Triton launches (`Tiles`): GEMV column tiles and split-K parts, pipeline depths, grid
and warps, resolved per geometry, width, grid and target. Each tuning constant cites the H200 run that chose
it (test/kernels/glm53/results/); gfx950's defaults are compile-only evidence (no AMD device ran them).
"""

from __future__ import annotations

import dataclasses

import torch

from sgl_amd_mono.backends.triton.tiles_index import index_by_width  # the indexer's defaults by width, with their runs
from sgl_amd_mono.glm53.config import Glm53Geometry
from sgl_amd_mono.glm53.kinds.dims import max_used_experts, pow2

NUM_WARPS = 8  # at one program per SM; Tiles.num_warps gives 8 // progs_per_sm

# Build variants the GPU scripts A/B (time_layers --variants); Tiles' defaults are DEFAULT_VARIANT's.
VARIANTS = {
    "baseline": {"progs_per_sm": 1},
    "pp2": {"progs_per_sm": 2},
}
# H200 (Triton 3.6), TP8, 8K context, one run of an earlier build (results/final_h200_time_8k.log), µs at
# 1 / 2 rows: baseline 175.9 / 189.4, pp2 175.8 / 184.4; an L2 prefetch of the next stages' weights
# before each wait (since removed) made it slower: 192.5 / 194.2. Two programs an SM gains <= 3%: baseline.
DEFAULT_VARIANT = "baseline"

@dataclasses.dataclass(frozen=True)
class Tiles:
    """Tile sizes. bn_*: GEMV output columns a task; ks_*: split-K parts (clamped to a divisor of the
    k blocks); be: gate experts a task; stages: software-pipeline depth of every k loop.
    progs_per_sm: programs a SM (1 at 8 warps, 2 at 4 warps);
    the grid is progs_per_sm x SMs, refused unless the compiled kernel can keep all of it resident."""

    # H200 traces (test/kernels/glm53/results/trace_h200_tp8_*.log): 128-column GEMV tiles in 4 k parts and
    # 4 pipeline stages beat 32/64 columns in 8 parts (qkv_a 10.0 vs 17.9 us, MoE up at 8 rows 49.9 vs 62.7);
    # (MoE down, when it was one task per expert and column tile: 256-column tiles, 37.1 vs 49.9 us at 8 rows)
    # qkv_a in 6 k parts (126 tasks, most programs busy) instead of 4 (84): work 6.7 / 6.4 us at 1 / 8 rows
    # (results/final5_h200_trace.log) vs 8.7 / 8.7 (final4, in git at commit a6c80a3); swapped, 5.4-5.9 vs 6.9-7.2 at 1 / 4 / 8 rows
    # (results/trace_h200_swap_ab.log); the helper alone: results/probe_tiles_h200.log
    # ks_a, bn_b, ks_b: 0 = the kind's (KIND_TILES)
    bn_a: int = 128
    ks_a: int = 0
    bn_b: int = 0
    ks_b: int = 0
    bn_o: int = 128
    ks_o: int = 2
    be: int = 16
    ks_g: int = 8
    bu: int = 128
    # MoE up's k parts; 0: per grid and width (`for_programs`): at 1 row (always top_k + 1 used experts) the
    # fewest k blocks on the busiest program (ties: 4, then fewer parts), 6 on 132 programs; 4 at more rows,
    # where the count depends on how the rows' picks overlap. H200 TP8 8K (results/trace_h200_up_parts.log):
    # 1 row 96.7 / 96.9 us vs 100.8 / 98.8 at 4 parts (time_layers), 95.5-95.6 vs 97.2-97.9 (traces); 2 rows,
    # 3 parts: faster when all 17 experts are live (traces: 105.4-105.7 vs 109.0-109.1, 4 parts making 136
    # tasks for 132 programs) but slower at time_layers' 15.8 (105.2 / 105.4 vs 103.1 / 103.2), so 4. Built, checked
    # and timed, not taken, reverted (commit 6ffb0f2: Tiles.ks_u_wide, ks_u_until): 8 or 6 parts a step past 49 used
    # experts (42 or 40 k blocks on the busiest program at 50-57 / 50-55 against 48). H100, one process, TP8, 8 rows,
    # the defaults first and last (results/moe1_h100_specs_ks_u_wide_*.log), shared 8K / 128K 184.9 / 186.4 and 185.8
    # / 187.6 us -> 186.2 / 187.8 (8), 183.5 / 188.7 (6); indexer 220.8 / 282.2 and 220.7 / 282.2 -> 222.2 / 282.9,
    # 221.3 / 279.8.
    ks_u: int = 0
    dcw: int = 0  # MoE down's output columns a task; 0: ceil(hidden / (programs / dn_parts)) rounded up to 8
    # MoE down: 2 parts of the used experts, each a task per 96-column tile (a 128-row swapped wgmma tile over
    # both warpgroups) with 5 pipeline stages, against 1 part of 48-column tiles with 8 (H200, TP8 8K,
    # results/trace_h200_dn_parts.log): down 25.6 vs 29.4 us work at 8 rows, 8.2 vs 7.9 at 1; 4 stages: 39.2
    stages_dn: int = 5  # MoE down's pipeline depth over experts (its loop streams every used expert's slice)
    dn_parts: int = 2  # MoE down's used experts split into this many parts, a task each per column tile
    stages_up: int = 4  # MoE up's pipeline depth (its k loop holds gate and up tiles)
    # attention: H200 traces at TP8 8K (results/trace_h200_tp8_attn.log), attn span at 1 / 8 rows: nsplit 32
    # 11.5 / 20.5 us vs 16: 16.6 / 17.7 (w_uv 9.7 / 11.0 vs 7.4 / 8.2). att_blk 64 against 32
    # (results/trace_h200_moe_flat.log, with the flat MoE up and o_proj's last arrivers): attn work 6.9 / 6.9 /
    # 13.1 us vs 9.5 / 9.7 / 16.1 at 1 / 4 / 8 rows, launch 107.1 / 139.5 / 170.6 vs 110.2 / 141.5 / 174.2.
    # Loading a split's slots once before its block loop, or a deeper pipeline over the blocks, gained nothing
    # (results/trace_h200_attn_hoist.log): the blocks wait on their dot chains, not on their gathers.
    att_blk: int = 64  # top-k slots an attention block gathers
    # time_layers at 2 / 4 rows (results/time_layers_h200_nsplit_w2w4.txt): nsplit 32 118.0 / 145.8 us, 16 121.2 / 147.1
    nsplit: int = 0  # attention splits a row; 0: 32 at 1-4 rows, 16 at more (`for_width`)
    wuv_sh: int = 8  # attention splits w_uv loads at once ([16, wuv_sh, 128] f32), a power of two
    route_rc: int = 32  # experts one router task ranks ([route_rc, E] comparisons), a power of two
    stages: int = 4
    # indexer kinds: a row's key scan (scores, each radix digit, the counts, the list) is split into
    # max(1, index_slices // rows) slices (rounded down to a power of two), a task each; a task's loop steps over
    # index_block keys (a multiple of 64: whole index-K pages) when scoring, index_scan keys when selecting. wk and
    # weights_proj run in ks_i split-K parts; wq_b in column tiles of bn_iq and ks_iq parts. H200 traces at TP8 8K,
    # rows 1 / 8 (results/indexer2_h200_trace_8k*): ks_i 6 149.5 / 229.5 us vs 16 149.0 / 228.6; bn_iq 64 with
    # ks_iq 2 149.0 / 225.9; bn_iq 128 with ks_iq 1 152.8 / 231.8 (q_b 15.4 us); index_scan 256 146.2 / 225.8:
    # single traces, within their noise but the last-but-one; none taken. ks_i 6 with qkv_a in 6 parts (ks_a, the
    # indexer's KIND_TILES: 126 qkv_a tasks and wk's 6 on 132 programs, weights_proj's in latent), one process
    # (results/indexer7_h200_time_specs.log), rows 1 / 8: 8K 137.6 / 201.9 -> 136.6 / 201.0 us, 128K 150.2 /
    # 298.3 -> 148.1 / 297.0 (q_b in 64-column tiles of 4 parts with wq_b in 4 parts: 5-6 us slower).
    index_slices: int = 128
    index_block: int = 0  # 0: by width (INDEX_BLOCK_BY_WIDTH, `for_width`); below, index_atomics
    # index_scan 0: by width (INDEX_SCAN_BY_WIDTH, `for_width`): 256 keys a step at 1 and 2 rows, 512 at more.
    index_scan: int = 0
    # index_short: the longest row (keys, a power of two) whose whole list one task selects from its scores in
    # registers (`stages_select_row.select_row`); longer rows take the sliced radix select; 0: every row past the top-k
    # takes it (rows of at most top-k keys are listed by one task either way, and a launch with no sliced row skips
    # that select's last three stages). 0 on the H200: one process, TP8 8K, a decode row a request
    # (results/indexer4_h200_*): 179.1 / 247.5 us at 1 / 8 rows with 8192 against 147.4 / 217.2 with 0 (sel1's
    # one task per row took 56 us: 32 block-wide counts, 15.4 us of the 19.3 us it takes alone, probe_select.py).
    # Four 8-bit digits by tl.histogram instead of the 32 counts (commit 7aea26d, reverted): slower, 35.9 us alone
    # at 8192 keys (results/indexer15_h200_probe_select_radix.log); in the launch with index_short 8192 (one
    # process, TP8 8K rows 1 / 2 / 4 / 8, results/indexer15_h200_time_specs_short_radix.log) 202.7 / 210.4 /
    # 229.2 / 261.3 us against 134.0 / 147.4 / 166.2 / 199.0 with 0, 52-158 bytes spilled.
    index_short: int = 0
    # index_swap: the score dots as keys @ queries^T (an fp8 wgmma on sm_90; its reduced-precision sums within
    # indexer.scores.max_rel) instead of queries @ keys^T (an mma.sync of f16-converted tiles); index_pipe: a decode
    # request's score loop software-pipelined by Triton over that many stages (the keys by cp.async into shared
    # memory; into one buffer, not overlapped with the dots, unless index_ahead) instead of prefetched by hand a
    # block ahead (0). sm_90 AOT of the score loop alone (CPU, Triton 3.8,
    # `probe_score.py --sass`): 715 instructions a block with digit 0 at the defaults, 455 swapped, 242 swapped and
    # pipelined over 3 stages. The loop alone on the H200 (132 programs, digit 0 counted,
    # results/indexer4_h200_probe_score.log): 1024 keys a program 25.7 us, swapped 16.2, swapped and pipelined 15.7;
    # 8192 keys 190.9, 108.9, 116.6. The launch, one process, TP8 a decode row a request
    # (results/indexer5_h200_swap_time_specs.log), rows 1 / 8: 8K 142.1 / 213.2 us, swapped 138.3 / 205.9, swapped
    # and pipelined 139.9 / 205.3; 128K 167.8 / 438.8, 159.2 / 369.0, 156.5 / 360.4. Swapped by default: its
    # checks pass (check_layer TP8 rows 1 / 8 at 8K, check_topk at 8K and 128K: results/indexer5_h200_swap_*).
    # Pipelined over 3 stages in 256-key blocks with digit 0 in atomic copies by default (below: 8, then 16).
    index_swap: bool = True
    index_pipe: int = 3
    # index_atomics: digit 0 counted in the score loop by one integer atomic a key into its row's histogram in
    # scratch, instead of tl.histogram over each block (128 scores into 256 bins) kept in registers and added once a
    # task; its value is the copies of each row's histogram (a task counts into copy task % copies; the readers sum
    # them), 0: off. The same counts (exact integers), so the same bits. The loop alone on the H200 spends a quarter
    # of its time on the histogram (results/indexer4_h200_probe_score.log: 108.9 us at 8192 keys a program swapped,
    # 84.0 without digit 0). One copy (results/indexer6_h200_*, TP8, a decode row a request): faster where 16 tasks
    # share a row's copy (128K 8 rows 339.8 against 370.4 us), slower where 128 do (128K 1 row 189.8 against 159.9):
    # the atomics queue on a few hot bins; the probe's 132 programs on one histogram 345 against 109 us.
    # The loop alone (results/indexer6_h200_probe_score.log, 8192 keys a program): 256-key blocks pipelined over
    # 3 stages 86.1 us with tl.histogram, 59.6 without digit 0 (over 4). The launch, one process, TP8, a decode
    # row a request, rows 1 / 4 / 8 (results/indexer6_h200_time_specs.log): at 128K 159.9 / 251.9 / 373.4 us with
    # the old loop (128-key blocks by hand, digit 0 in registers), 155.8 / 237.4 / 343.0 with 256-key blocks
    # pipelined over 3 stages, 158.9 / 226.5 / 313.8 with 8 atomic copies too (32: 156.8 / 226.9 / 314.8); at
    # 8K 140.2 / 175.6 / 208.5, 142.2 / 175.1 / 209.1, 143.6 / 174.8 / 210.1. Taken: 256 / 3 / 8 (the 8K cost at
    # 1 row, 3.4 us, against 25-60 us at 128K and 4-8 rows). index_scan 1024 on top: 128K 158.4 / 224.3 / 307.7,
    # 8K 147.0 / 179.9 / 214.3 (2048: 8K 157.0 at 1 row): not taken.
    # 16 copies with index_sel_atomics (above; digit 1's histogram takes as many): results/indexer9_h200_time_specs.log.
    # The loop alone (results/indexer11_h200_probe_score_copies.log, 256-key blocks over 3 stages, page ids ahead): 8192
    # keys a program 47.6 us counting nothing, 49.2 with a copy a program (as the launch at 8 rows: a task a copy),
    # 56.4 with 16 copies (8 programs a copy); 1024 keys 7.6, 7.5, 9.8. Summing a block's keys at its two largest
    # digits first (one atomic each, the rest a key at a time) was slower: 67.4 / 67.5 us at 8192 keys, and in the
    # launch (results/indexer11_h200_time_specs_cands_agg.log, one process, rows 1 / 8) 8K 132.9 / 199.6 -> 133.1 /
    # 202.6 us, 128K 145.7 / 266.8 -> 147.6 / 287.4: removed. Deeper pipelines or 128-key blocks are no faster for the
    # loop alone (results/indexer11_h200_probe_score_pipe.log): it streams at about 3.0 TB/s, counting or not. 32 copies
    # in the launch, no faster (results/indexer11_h200_time_specs_stages_qb.log, one process, rows 1 / 2 / 4 / 8): 8K
    # 132.8 / 147.3 / 167.3 / 198.5 us -> 134.7 / 146.9 / 167.7 / 199.2, 128K 145.4 / 163.6 / 201.0 / 266.3 -> 145.4 /
    # 165.0 / 198.4 / 266.8. The loop alone with its keys brought by the Tensor Memory Accelerator instead (a
    # descriptor made in the kernel, a [64, 128] box a page; `probe_score.py --tma`, Triton 3.6): slower
    # (results/indexer13_h200_probe_score_tma.log, 8192 keys a program, digit 0 not counted): 65.6 us at 4 pages a
    # step over 3 stages (2.18 TB/s), 73.7 at a page a step over 4, against this loop's 47.0 (3.04) and torch's sum
    # over the same cache 40.0 (3.57); not built into the launch.
    index_atomics: int = 16
    # index_ahead: the pipelined score loop (index_pipe > 0) loads the next step's page ids a step ahead, so the
    # keys' addresses wait on no load of their own step. sm_90 AOT on a CPU, Triton 3.6 (the H200's) and 3.8
    # (results/indexer8_score_loop_ttgir_cpu.txt): without it the keys get one shared-memory buffer and each step
    # starts by waiting for every copy (their load overlaps no work); with it, index_pipe - 1 buffers. H200, one
    # process, TP8, a decode row a request (results/indexer8_h200_time_specs.log), rows 1 / 8: 8K 135.6 / 201.5 ->
    # 136.4 / 202.0 us, 128K 152.3 / 296.5 -> 148.2 / 278.0 (taken); with index_pipe 4: 137.6 / 202.4, 150.2 /
    # 283.9; with 128-key blocks over 4 stages: 136.3 / 201.6, 151.1 / 286.6. Counting each key's top 16 bits in
    # the score loop too (one atomic a key into a 65536-bin histogram a row), so that sel1 counted nothing and
    # sel2 found the first two digits: 134.1 / 200.7 at 8K, 161.4 / 327.3 at 128K, and with index_ahead 135.3 /
    # 201.8, 164.3 / 310.0 (the same log): removed.
    # index_ahead 2 (the default): a step's page ids loaded as its index_block / 64 pages (one id a page, not one a
    # key), its keys addressed by page (each page's 64 keys one contiguous run: `stages_index.page_block`). The loop
    # alone on an H100 at 8192 keys a program (results/indexer28_h100_probe_paged.log): 60.3 -> 57.9 us with 256-key
    # steps, 66.0 -> 62.1 with 128; where the table puts the pages moves it by at most 3%
    # (results/indexer28_h100_probe_orders.log). H100, one process, TP8, a decode row a request, 2 timed first and
    # last against 1 (results/indexer28_h100_time_indexer.log), rows 1 / 2 / 4 / 8: 8K 134.2 / 132.7 -> 132.7 us,
    # 149.6 / 149.8 -> 151.2, 177.0 / 177.2 -> 179.2, 220.8 / 221.5 -> 223.4; 128K 143.6 / 143.5 -> 145.0, 167.4 /
    # 166.6 -> 169.6, 206.2 / 206.0 -> 207.3, 286.0 / 286.4 -> 288.0 (taken).
    index_ahead: int = 2
    # index_sel_atomics: the select's digits 1 and 2 (stages sel1, sel2) counted by one integer atomic a key at the
    # prefix into the row's histogram (digit 1's in hist0's copies, task t into copy t % copies), instead of
    # tl.histogram over each scan step's keys (256 bins, every key of the step whether at the prefix or not) added
    # once a task. The same counts (exact integers), so the same bits. H200, one process, TP8, a decode row a
    # request (results/indexer9_h200_time_specs.log), rows 1 / 2 / 4 / 8: 8K 134.2 / 147.9 / 166.0 / 199.0 us ->
    # 132.8 / 146.7 / 166.5 / 199.0, 128K 149.5 / 168.7 / 204.8 / 276.2 -> 147.4 / 167.0 / 200.6 / 267.6; with
    # index_atomics 16 too: 133.5 / 146.6 / 166.8 / 198.7, 145.9 / 164.7 / 197.1 / 267.3 (taken: both); with
    # index_scan 1024 instead: 8K 136.3 / 149.4 / 168.4 / 203.3, 128K 146.0 / 166.8 / 200.8 / 264.8 (not taken).
    # The stages alone (`probe_select_steps.py`, results/indexer17_h200_probe_select_steps.log, 8 rows of 128K keys,
    # 512 a step, µs a launch with a 1.5-2 us gap): scores spread (randn: 2.3% of keys at digit 0's bin) sel1 6.2, its
    # bare scan 3.7, with its atomics 5.0-5.4; scores in a narrow band (every key at digit 0's bin) sel1 11.4-16.8,
    # the bare scan with its atomics 10.9-15.2: the L2's atomic rate (a million a launch), not one hot address: the
    # atomics spread over 4 or 8 copies a task 11.3-15.1; one copy a row 32.8-65.6; tl.histogram a step (this field
    # off) 13.4-13.8 whatever the scores. So with narrow scores sel1 costs about 10 us more than with spread ones.
    index_sel_atomics: bool = True
    # index_digits: the radix select's digits (`glm53/kinds/indexer.RADIX_DIGITS`): 4 of 8 bits, or 3 (12-bit digits
    # 0 and 1, the last 8), which drops stage sel2's scan and its hand-off (every program passes it) and spreads the
    # score loop's digit-0 atomics over 16 times the bins (a float's top 8 bits hold its sign and 7 of its exponent's
    # 8 bits, so most of a row's keys share one or two digit-0 bins; its top 12 bits split each octave in 8).
    # Needs index_sel_atomics and index_atomics of 1 to 4 copies (a 4096-bin histogram is not kept in registers, and
    # each reader sums the copies in them). H200, one process, TP8, a decode row a request, rows 1 / 2 / 4 / 8
    # (results/indexer10_h200_time_specs.log): 8K 132.7 / 147.1 / 167.5 / 199.3 us -> 134.1 / 148.3 / 166.7 / 199.3
    # with 4 copies, 128K 143.7 / 162.6 / 200.3 / 267.1 -> 145.8 / 166.8 / 200.3 / 270.4: the pass saved is lost
    # to the score loop's atomics, which still queue on few bins (the scores span about an octave); with a scan over
    # all 4096 bins where the digit is read (before the group lookup) 6-9 us slower at 8K
    # (results/indexer10_h200_time_specs_digits3_scan.log, with 1 / 2 / 4 copies). Not taken.
    index_digits: int = 4
    # index_compact K: sel1 (four digits) lists each slice's keys at or above the 8-bit prefix it found (their
    # positions and order keys, in position order), scanning the slice in [256, K] chunks (`stages_select.list_chunks`:
    # one block-wide scan a chunk), and sel2, sel3 and emit scan those lists instead of the slice's every key: every
    # key below that prefix is below the threshold, so the same counts and the same list. 0: none; -1: by width
    # (INDEX_COMPACT_BY_WIDTH, `for_width`; none where index_digits is 3 or index_sel_atomics off). The stages alone
    # (results/indexer18_h200_probe_lists.log; 132 programs, µs a launch with its gap, sel1 / sel2 / sel3 / emit):
    # 8 rows of 131072 keys 6.1 / 6.0 / 6.6 / 12.2 -> 8.1 / 3.2 / 3.6 / 3.5 listing in [256, 4] chunks (2992 keys
    # listed a row); in 512-key steps instead (results/indexer18_h200_probe_lists_1d.log) sel1 16.9.
    # Before (reverted), sel2 listed at the 16-bit prefix in index_scan-key steps, a block-wide scan a step. H200, one
    # process, TP8, a decode row a request, rows 1 / 2 / 4 / 8 (results/indexer10_h200_time_specs_compact.log): 8K
    # 133.0 / 147.0 / 166.9 / 198.9 us -> 135.4 / 149.4 / 169.4 / 200.9 (sel2's prefix sum and stores a step, where
    # sel3's and emit's one-step slices save nothing), 128K 144.4 / 163.2 / 199.9 / 266.6 -> 145.3 / 163.9 / 197.5 /
    # 263.3. Not taken (its checks pass: results/indexer10_h200_check_{layer,topk}_compact.log). Traced at 128K 4 / 8
    # rows (results/indexer13_h200_trace_128k_compact.log, against results/indexer13_h200_trace_128k_w2w4.log and
    # results/indexer12_h200_trace_keys_absorb.log): sel2 12.5 / 19.7 us of span (5.9 / 7.4 without: its prefix
    # sums and stores cost what emit's did, about 1.1 us a 512-key step), sel3 4.9 / 4.6 (6.4 / 8.4), emit 5.6 / 6.1
    # (11.0 / 18.2): one expensive pass moved from emit to sel2, two cheap ones shortened. Listing only rows of more
    # than 32768 keys (commit e409f18, reverted: both scan paths built, picked a task by the row's length), one
    # process, rows 1 / 4 / 8 (results/indexer13_h200_time_specs_compact_min.log): 8K 133.2 / 167.1 / 200.4 us ->
    # 135.1 / 169.0 / 201.2 (no 8K row listed: the second path's cost to the build, or one run's noise), 128K 145.7
    # / 199.8 / 267.9 -> 148.0 / 198.2 / 263.8. Not taken.
    index_compact: int = -1
    # index_page_chunk: a decode request's pipelined score loop (index_pipe) takes its slice in chunks of this many
    # steps, a chunk's page ids loaded at once (`stages_index.score_pipelined`); 0: a step's page ids a step ahead
    # (index_ahead) or in the step. The loop alone (results/indexer15_h200_probe_score_page_chunk.log, 8192 keys a
    # program, digit 0 not counted): 47.3 us -> 42.8 with 32 (3.0 -> 3.3 TB/s; with no page id loaded at all, the
    # pages in order, 39.7: results/indexer15_h200_probe_score_lookahead.log); counting digit 0 in 16 copies, 62.1 ->
    # 61.7. In the launch the score stage gains about 1 us (traced at 128K 4 / 8 rows, results/indexer15_h200_trace_128k_*).
    # Trees alternated, 32 against 0 (results/indexer15_h200_ab_page_chunk.log, means of two runs, rows 1 / 2 / 4 /
    # 8): 8K 131.5 / 145.1 / 164.9 / 197.7 -> 132.2 / 145.6 / 164.6 / 197.7 us, 128K 143.2 / 161.6 / 198.3 / 265.3 ->
    # 142.7 / 161.1 / 197.3 / 264.5; its check_layer passes (results/indexer15_h200_check_layer_page_chunk.log).
    # Mixed (0.7 us lost at 8K 1 row, where the target was missed; under 1 us at 128K): not taken (again: tiles_index.py).
    index_page_chunk: int = 0
    # index_emit_k: emit scans its slice in [256, index_emit_k] tiles (a tile row's keys consecutive, one block-wide
    # scan of the rows' totals a tile: `stages_emit.emit_chunks`) instead of index_scan keys a step (0). Alone
    # (results/indexer18_h200_probe_emit_chunks.log, 132 programs, µs a launch with its gap): 8 rows of 131072 keys
    # 12.5 -> 10.7 ([256, 2]), 8.7 ([256, 4]), 9.8 ([256, 8]); 4 rows 7.5 -> 5.5 ([256, 4]); 1 row of 8192 keys 3.5
    # -> 3.4. In the launch, one process, TP8, a decode row a request, rows 1 / 2 / 4 / 8, before sel1's lists
    # (results/indexer18_h200_time_specs_emit_k.log): 8K 131.3 / 144.9 / 166.8 / 197.9 us -> 133.5 / 146.1 / 166.6
    # / 198.7 ([256, 4]), 128K 144.3 / 161.9 / 196.4 / 262.8 -> 144.5 / 162.4 / 194.4 / 260.0. Not taken: at 4 rows
    # and more emit scans sel1's short lists (index_compact), where its steps are the faster (3.5 against 3.9 us
    # alone, 8 rows of 131072 keys: results/indexer18_h200_probe_lists.log).
    # Again after sel1's lists, on an H100 beside the defaults in one process (results/indexer20_h100_time_specs_qg
    # .log; the defaults timed first there, which favours the spec by about 1 us: indexer20_h100_time_specs_order
    # .log): [256, 4] at rows 4 / 8 8K 183.4 / 228.9 -> 184.2 / 228.4 us, 128K 212.6 / 293.7 -> 211.8 / 294.6. Not
    # taken. Also built and reverted: the index heads one index-query task covers (absorb's stage; commit 66ae323,
    # Tiles.index_qg 8 or 4 against 16, more tasks at 1 row, where absorb's last program is an index-query task):
    # on an H100 with trees alternated (results/indexer20_h100_ab_index_qg.log), 8 against 16 at rows 1 / 2 / 4 / 8:
    # 8K 138.65 / 154.45 / 182.5 / 229.0 -> 138.6 / 155.05 / 183.1 / 228.65 us, 128K 148.7 / 175.35 / 211.7 / 294.5
    # -> 149.9 / 174.8 / 212.1 / 294.5.
    index_emit_k: int = 0
    # Also built, checked and timed, not taken, reverted (commit fcaeac6 holds it: Tiles.index_last16): sel2 also
    # counting the keys at its 16-bit prefix by their low 16 bits (a 65536-bin histogram a row) and listing those bits
    # a slice, emit finding the last two digits from them and every earlier slice's counts from a [slices, 16] tile
    # of the lists, sel3 and its hand-off passed. Under the interpreter the same bits as the four stages (ties that
    # overflow the tile included). On an H100 (no H200 could be started), trees alternated
    # (results/indexer21_h100_ab_last16.log, means of two runs, rows 1 / 2 / 4 / 8): 8K 138.95 / 155.65 / 182.5 /
    # 227.4 -> 138.05 / 155.3 / 182.5 / 227.2 us, 128K 149.6 / 174.9 / 212.1 / 293.75 -> 149.0 / 173.25 / 212.7 /
    # 294.9; its check_layer (TP8 bf16 8K / 128K rows 1-8) and check_topk (8K / 128K) pass
    # (results/indexer21_h100_check_layer_last16.log). The stage removed (3.6 us of span at 8K 1 row in the H200
    # traces) came back as at most 0.9 us (not traced: the device was gone before a trace could run). Built again
    # another way, slower: Tiles.index_ties (tiles_index.py).
    # Also built, timed and checked, not taken, reverted (commits b2d3b2e, 27491f7: Tiles.swap_qb): the indexer's q_b
    # stage GEMVs (q_b and wq_b, 96 tasks of 128 KB) with swapped block products (an fp8 wgmma), 1 as swap_ab, 2 with
    # each 32-long k slice summed in f32 (max_num_imprecise_acc 32). The stage alone on an H100
    # (results/indexer22_h100_probe_qb.log): 7.46 us rows first, 6.50 swapped, 6.56 with 2; its GEMVs within 9.5e-8 /
    # 1.6e-4 / 4.0e-5 of an f64 product. The launch, one process, TP8, a decode row a request, rows 1 / 8
    # (results/indexer22_h100_time_specs_swap_qb.log): 8K 138.0 / 227.1 us -> 136.8 / 225.3 (1), 136.3 / 227.7 (2);
    # 128K 148.6 / 294.0 -> 146.6 / 291.4 (1), 147.3 / 295.9 (2). 1's checks fail
    # (results/indexer22_h100_check_*_swap_qb.log): check_layer TP8 8K 4 rows out.rel 0.196 (bound 0.045), o.rel
    # 0.0012-0.016 where rows first gives 4e-5-2.9e-3 (the last16 build,
    # results/indexer21_h100_check_layer_last16.log), topk.missed up tenfold; check_topk 128K with repeated keys misses
    # 0.9995 of the oracle's list (rows first: 0). The same GEMV tasks take 10.0 us of own time in the launch's trace
    # against 7.46 alone, and qkv_a's 7.4 against 8.26 (results/indexer22_h100_trace_8k_swap_qb.log): not explained.
    # Also built and timed, not faster, removed: the select's scan steps (sel1-sel3, emit) one key a lane, so that no
    # step converted layouts through shared memory (commit 3e3902c; sm_90 AOT of the 8-row build's scan loops,
    # results/indexer11_select_sass_cpu.txt: sel1's barriers 4 -> 0, emit's 13 -> 7, sel3's 5 either way). H200, one
    # process, TP8, a decode row a request, rows 1 / 2 / 4 / 8 (results/indexer12_h200_time_specs_unvec.log): 8K 133.0 /
    # 147.5 / 167.7 / 199.8 us -> 134.2 / 147.0 / 167.5 / 198.8, 128K 143.0 / 163.5 / 199.8 / 267.7 -> 143.7 / 164.9 /
    # 199.2 / 267.8; traced at 8K (results/indexer12_h200_trace_unvec.log), each select stage within 0.3 us of before.
    # Built again with emit's dropped-entry check moved out of its step (commit 23acc81; emit's step 402 -> 212
    # instructions, 13 -> 4 barriers): trees alternated against that check alone (f40c531) and the code before
    # (results/indexer16_h200_ab_three_trees.log), rows 1 / 2 / 4 / 8: 8K 133.5 / 147.3 / 166.6 / 199.1 us (before),
    # 134.1 / 147.2 / 166.7 / 198.7 (both), 134.0 / 147.2 / 165.6 / 198.8 (the check alone); 128K 144.7 / 163.2 /
    # 200.3 / 266.6, 142.8 / 162.1 / 198.0 / 262.4, 144.4 / 161.6 / 197.0 / 262.5: the check taken, the layout not.
    # Also timed, not taken: index_scan one width for every slice, one process (results/indexer16_h200_time_specs_scan
    # .log, at 23acc81), rows 1 / 2 / 4 / 8: 512 8K 131.9 / 144.9 / 164.4 / 198.1 us, 128K 143.6 / 160.7 / 194.6 /
    # 261.6; 256 130.1 / 142.6 / 162.4 / 196.3, 140.9 / 160.9 / 196.4 / 272.3; 1024 136.2 / 147.9 / 167.9 / 200.4,
    # 145.2 / 163.2 / 193.0 / 256.9. Then both widths built, slices of 4096 keys or more 1024 a step, shorter ones
    # 256 (commit 8bb3f78, reverted; 255 registers, 100 spill bytes at 8 rows against 14), trees alternated
    # (results/indexer16_h200_ab_scan_long.log): 8K 133.4 / 147.1 / 166.1 / 198.9 -> 134.0 / 147.4 / 166.3 / 199.4,
    # 128K 145.2 / 163.1 / 199.4 / 266.5 -> 144.7 / 163.8 / 202.3 / 259.1: 256's gain at 8K lost in the two-path
    # build, 4 rows at 128K slower.
    # Also built, checked under the interpreter (the same bits; tied caches over several read rounds) and removed: sel2
    # listing each slice's keys at its 16-bit prefix, sel3 passed, and every emit task finding the threshold's last two
    # digits from the row's lists (one hand-off fewer; commit c6e57e3). H200, one process, TP8, a decode row a request,
    # rows 1 / 2 / 4 / 8 (results/indexer11_h200_time_specs_cands.log): 8K 134.5 / 148.5 / 168.2 / 200.4 us -> 140.4 /
    # 152.3 / 172.1 / 203.4, 128K 147.1 / 165.5 / 202.2 / 267.5 -> 151.6 / 171.6 / 204.9 / 273.4. Traced at 8K
    # (results/indexer11_h200_trace_cands.log): sel3's 4.6 us span gone, sel2 0.5-1 us longer, emit 13.3 us against
    # 5.1-5.6 (three passes over the lists, each a round trip to L2 a round of 1024 keys).
    # Also built and timed, not taken, reverted: emit scanning a slice of at least index_emit_scan keys that many a
    # step, a shorter one index_scan a step (commit c2f4ffe: both widths built, chosen a task by its slice). H200, one
    # process, rows 1 / 2 / 4 / 8 (results/indexer13_h200_time_specs_emit_scan.log): defaults 8K 132.9 / 147.1 / 167.1
    # / 199.3 us, 128K 145.0 / 163.1 / 200.8 / 268.0; 1024: 135.0 / 147.7 / 166.5 / 201.1, 145.6 / 164.5 / 197.7 /
    # 264.2; 2048: 134.4 / 148.1 / 167.4 / 201.2, 145.8 / 166.4 / 200.6 / 267.7; 4096: 132.4 / 148.3 / 165.5 / 199.4,
    # 144.3 / 165.1 / 202.3 / 270.0 (at 8K no slice reaches 1024 keys: its changes there are the second path's cost
    # to the build, or one run's noise). 3-4 us at 128K 4 / 8 rows with 1024, 2 us lost at 8K 1 / 8 rows: mixed, and
    # no target reached.
    # index_packed_counts: each select stage finds its digit with fewer block-wide reductions (`stages_select.digit_of`,
    # `found_prefix`, `stages_emit.slice_counts`): the same values, so the same bits. sm_90 AOT: results/packed_counts_sass_cpu.txt.
    # Taken on an H100 A/B in one process (results/indexer25_h100_time_specs_packed.log), rows 1 / 2 / 4 / 8: 8K 137.0
    # / 152.5 / 179.3 / 221.3 us -> 134.5 / 150.4 / 175.6 / 222.1, 128K 147.8 / 170.4 / 208.3 / 287.9 -> 146.6 / 169.9
    # / 205.8 / 286.7.
    index_packed_counts: bool = True
    # index_relist: with sel1's lists (index_compact), sel2 keeps each slice's list only at or above the 16-bit prefix it
    # finds (in place, `stages_select.relist_chunks`), so sel3 and emit scan about KTOP keys a row instead of the 8-bit
    # prefix's. index_relist K: the lists of at least K keys (1: every list); a shorter one is only counted and left as
    # it is for sel3 and emit. 0: off (its runs: tiles_index.py).
    index_relist: int = 0
    # index_floor: sel1 lists and counts only the keys at or above each decode row's floor; -1: by width
    # (INDEX_FLOOR_BY_WIDTH, tiles_index.py, with the runs that chose it)
    index_floor: int = -1
    # index_pair: sel1 also counts digits 1 and 2 as one 16-bit digit (a 65536-bin histogram a row) and sel3 finds both,
    # sel2 passed; needs four digits, index_sel_atomics and no index_relist; -1: by width (INDEX_PAIR_BY_WIDTH, none
    # where it cannot run; tiles_index.py, with the runs that chose it)
    index_pair: int = -1
    # index_keep_scores: the score stage's stores of the scores marked to leave L2 last; -1: by width (tiles_index.py)
    index_keep_scores: int = -1
    # index_row_waits 1: with four digits and no pairs, each task of sel2, sel3, emit and attn waits only for its own
    # row's tasks of the stage before (`sync.wait_row`), not for every program; 2: sel1's tasks also for their
    # request's score tasks (with index_short <= the top-k); -1: by width (tiles_index.py)
    index_row_waits: int = -1
    # (the select's other attempts, built and reverted: tiles_index.py)
    # the dense MLP (dense and tokens kinds): gate_up in bn_mu-column tiles of ks_mu k parts, down in bn_md-column
    # tiles of ks_md parts (96 tasks each at the TP8 shard, as the attention GEMVs' 128-column tiles). Not tuned yet.
    bn_mu: int = 128
    ks_mu: int = 4
    bn_md: int = 128
    ks_md: int = 2
    bn_v: int = 128  # the tail kind: LM-head rows a task (not yet tuned: the kind has not been timed)
    # TP > 1: 64-bit words of each rank's slot a cross-rank sum or gather task reads (`exchange.sum_stage`); 512
    # gives 12 tasks at 1 row of the hidden (6144) and 96 at 8 rows. Not yet tuned (no multi-GPU run).
    bx: int = 512
    ks_i: int = 6
    # ks_w: weights_proj's split-K parts (latent's stage), apart from wk's ks_i. H200, one process, TP8, a decode row a request
    # (results/indexer8_h200_time_specs_ks_w.log), rows 1 / 8: 8K 135.6 / 202.5 us with ks_i's 6, 135.3 / 199.4
    # with 16, 134.8 / 201.3 with 48; 128K 150.4 / 276.6, 146.4 / 275.2, 148.0 / 276.1. 16 taken.
    ks_w: int = 16
    # bn_iq / ks_iq: wq_b's column tile and k parts; 0 = the kind's (KIND_TILES, with bn_b / ks_b: see there)
    bn_iq: int = 0
    ks_iq: int = 0
    # swap_ab: GEMV block products as weight tile @ activations^T (`tiles._block_dot`): on sm_90 a wgmma of
    # the fp8 tiles straight from SMEM instead of an mma.sync of f16-converted tiles. Faster, H200
    # TP8 8K (results/trace_h200_swap_ab.log): 96.9 / 128.5 / 157.9 us at 1 / 4 / 8 rows vs 105.3 / 139.1 /
    # 169.2. Not the default: the fp8 wgmma sums each 32-long k slice at reduced precision (GEMVs within
    # ~1.5e-4 of exact vs ~1e-7), and the requantizations after them turn that into check_layer failures
    # (results/check_layer_h200_swap_ab.log: o 0.022 vs bound 0.016, fp8 cache rows off by one fp8 step,
    # out cosine 0.994 at 8 rows). Converting the tiles to f16 for an exact wgmma was slower than rows first
    # (MoE down 60.4 vs 38.4 us at 8 rows, results/probe_tiles_h200_swap_f16.log).
    swap_ab: bool = False
    # swap_moe: swap_ab for the MoE GEMVs (up and down) only, the NVIDIA default. Their wgmma's reduced-precision
    # sums (each 128-k block still scaled and added in f32, as DeepGEMM's fp8 GEMMs on sm_90) feed only act's
    # and the output's roundings, not the router: H200, TP8 8K (results/trace_h200_swap_moe.log) 98.5 / 158.1
    # us at 1 / 8 rows vs 104.6 / 166.7 rows first, check_layer passing every bound at TP8 rows 1-8, 8K and
    # 128K, bf16 and fp8 KV. Its cost: where attention is exact (o.rel 0), out moves from within 7e-6 of the
    # reference to within 3.1e-3 - 5.4e-3 (max rel; bound 6e-2), cosine still 1.0000. Its build's run:
    # results/final6_h200_* (99.0 / 106.2 / 127.4 / 159.2 us at 1 / 2 / 4 / 8 rows); with down in 2 parts
    # (dn_parts): results/final7_h200_* (99.8 / 106.7 / 125.7 / 154.9 us).
    swap_moe: bool = True
    # Not taken for the indexer's q_b stage (H200, one process each, TP8, a decode row a request, rows 1 / 2 / 4 / 8):
    # wq_b's GEMV swapped alone (an fp8 wgmma; results/indexer11_h200_time_specs_swap_iq.log) 8K 133.4 / 146.8 / 168.4 /
    # 199.3 us -> 133.4 / 147.8 / 166.3 / 199.4, 128K 144.7 / 163.1 / 198.2 / 267.4 -> 144.8 / 163.6 / 197.3 / 265.8;
    # with q_b in the shared kind's 32 KB tasks beside it, slower (results/indexer11_h200_time_specs_swap_iq_qb.log:
    # 8K 134.3 -> 136.4 at 1 row, 128K 270.3 -> 272.4 at 8); the stage's GEMVs 6 or 8 stages deep, no faster
    # (results/indexer11_h200_time_specs_stages_qb.log).
    # preload: qkv_a's and q_b's first weight block loaded before the wait for their inputs (measured when
    # o_proj's was too, before o_proj's last arrivers). H200, TP8 8K
    # (results/time_layers_h200_preload.txt): slower, 117.2 / 122.6 / 152.2 / 186.5 us vs 111.2 / 117.7 / 146.3
    # / 181.9 at 1 / 2 / 4 / 8 rows (255 registers; the stages before the waits slowed); checks pass with it.
    preload: bool = False
    progs_per_sm: int = VARIANTS[DEFAULT_VARIANT]["progs_per_sm"]
    warps: int = 0  # 0: NUM_WARPS // progs_per_sm (the NVIDIA build); else num_warps at one program a CU
    # AMD-only compile options (0 = not passed, the backend's default); never set on NVIDIA builds
    waves_per_eu: int = 0
    kpack: int = 0
    mfma_nonk: int = 0  # matrix_instr_nonkdim

    @property
    def num_warps(self) -> int:
        return (self.warps or NUM_WARPS) // self.progs_per_sm

    def compile_options(self) -> dict:
        """Extra Triton compile options (kernel launch kwargs) beyond num_warps: AMD ones only, and only
        those set, so an NVIDIA build passes exactly what it passed before these fields existed."""
        o = {"waves_per_eu": self.waves_per_eu, "kpack": self.kpack, "matrix_instr_nonkdim": self.mfma_nonk}
        return {k: v for k, v in o.items() if v}

    def for_target(self, target: str) -> "Tiles":
        """These tiles with a target's build defaults (TARGET_TILES; targets not listed: unchanged, so
        sm_90 builds exactly what it built before)."""
        return dataclasses.replace(self, **TARGET_TILES.get(target.split(":")[0], {}))

    def variant(self, name: str) -> "Tiles":
        """These tiles with one of VARIANTS' options."""
        return dataclasses.replace(self, **VARIANTS[name])

    def with_spec(self, spec: str) -> "Tiles":
        """'bn_a=32,ks_a=8' -> these tiles with those fields replaced (benchmark sweeps)."""
        kv = {k.strip(): v.strip() for k, v in (p.split("=") for p in spec.split(",") if p.strip())}
        conv = {k: (bool(int(v)) if isinstance(getattr(self, k), bool) else int(v)) for k, v in kv.items()}
        return dataclasses.replace(self, **conv)

    def for_width(self, width: int) -> "Tiles":
        """nsplit 0 resolved for a width: more splits when few rows leave most programs idle; the indexer's fields
        left to the width resolved from their tables (`tiles_index.index_by_width`)."""
        t = self if self.nsplit else dataclasses.replace(self, nsplit=32 if width <= 4 else 16)
        return index_by_width(t, width)

    def for_geometry(self, geo: Glm53Geometry, tp: int) -> "Tiles":
        """Split counts clamped to divisors of each GEMV's k blocks (tiny test geometries)."""
        s = geo.shard(tp)

        def ks(kb: int, want: int) -> int:
            return max(d for d in range(1, min(kb, want) + 1) if kb % d == 0)

        return dataclasses.replace(
            self, ks_a=ks(geo.hidden // 128, self.ks_a), ks_b=ks(geo.q_lora // 128, self.ks_b),
            ks_i=ks(geo.hidden // 128, self.ks_i), ks_w=ks(geo.hidden // 128, self.ks_w),
            ks_iq=ks(geo.q_lora // 128, self.ks_iq),
            ks_o=ks(s.heads * geo.v_head // 128, self.ks_o), ks_g=ks(geo.hidden // 128, self.ks_g),
            ks_u=ks(geo.hidden // 128, self.ks_u) if self.ks_u else 0, be=min(self.be, pow2(max(16, geo.n_routed))),
            bu=min(self.bu, s.moe_inter), dcw=min(self.dcw, geo.hidden),
            ks_mu=ks(geo.hidden // 128, self.ks_mu), ks_md=ks(max(1, s.dense_inter // 128), self.ks_md))

    def for_kind(self, kind: str) -> "Tiles":
        """The fields left 0 that a kind resolves (KIND_TILES)."""
        if kind not in KIND_TILES:
            raise ValueError(f"launch kind {kind!r} has no tile defaults (KIND_TILES: {sorted(KIND_TILES)})")
        return dataclasses.replace(self, **{k: v for k, v in KIND_TILES[kind].items() if not getattr(self, k)})

    def resolve(self, geo: Glm53Geometry, *, tp: int, width: int, n_programs: int, kind: str = "shared") -> "Tiles":
        """These tiles for one build of `kind`, every 0 resolved: the kind's GEMV tiles, attention splits for the
        width (one split of 128 slots a 128 top-k when the width's split count does not divide the top-k into
        whole blocks), split
        counts for the geometry, MoE down's columns and up's k parts for the grid. ValueError if the
        splits are not a power of two."""
        t = self.for_kind(kind).for_width(width)
        if geo.index_topk % t.nsplit or (geo.index_topk // t.nsplit) % t.att_blk:
            t = dataclasses.replace(t, nsplit=max(1, geo.index_topk // 128))
        if t.nsplit & (t.nsplit - 1):
            raise ValueError(f"nsplit {t.nsplit} is not a power of two")
        if self.progs_per_sm not in (1, 2):
            raise ValueError(f"progs_per_sm {self.progs_per_sm} is not 1 or 2")
        if self.dn_parts < 1:
            raise ValueError(f"dn_parts {self.dn_parts} is not a positive count")
        if t.index_block < 64 or t.index_block & (t.index_block - 1):
            raise ValueError(f"index_block {t.index_block} is not a power of two >= 64 (whole index-K pages)")
        if t.index_scan < 64 or t.index_scan & (t.index_scan - 1) or t.index_scan > 32768:
            raise ValueError(f"index_scan {t.index_scan} is not a power of two from 64 to 32768 (the last digit's "
                             "stage sums a block's hits and keys above in 16 bits each)")
        if self.index_slices < 1:
            raise ValueError(f"index_slices {self.index_slices} is not a positive count")
        if self.index_atomics < 0 or self.index_atomics & (self.index_atomics - 1) or self.index_atomics > 64:
            raise ValueError(f"index_atomics {self.index_atomics} is neither 0 nor a power of two up to 64 (copies)")
        if self.index_pipe < 0 or self.index_pipe == 1 or self.index_pipe > 8:
            raise ValueError(f"index_pipe {self.index_pipe} is neither 0 nor a pipeline depth of 2 to 8")
        if self.index_short and (self.index_short < 64 or self.index_short & (self.index_short - 1)):
            raise ValueError(f"index_short {self.index_short} is neither 0 nor a power of two >= 64")
        if self.index_ahead not in (0, 1, 2):
            raise ValueError(f"index_ahead {self.index_ahead} is not 0, 1 or 2 (the score loop's page ids: in the "
                             "step, a key a step ahead, a page a step ahead)")
        if self.index_page_chunk < 0 or self.index_page_chunk & (self.index_page_chunk - 1):
            raise ValueError(f"index_page_chunk {self.index_page_chunk} is neither 0 nor a power of two (steps a "
                             "chunk of the score loop's page ids)")
        if self.index_emit_k < 0 or self.index_emit_k & (self.index_emit_k - 1) or self.index_emit_k > 64:
            raise ValueError(f"index_emit_k {self.index_emit_k} is neither 0 nor a power of two up to 64 (keys a tile "
                             "row of emit's [256, k] chunks: each count < 2^16 a chunk)")
        if self.index_digits not in (3, 4):
            raise ValueError(f"index_digits {self.index_digits} is neither 3 nor 4 (the radix select's digits)")
        if t.index_compact < 0 or t.index_compact & (t.index_compact - 1) or t.index_compact > 64:
            raise ValueError(f"index_compact {t.index_compact} is neither -1 (by width), 0 nor a power of two up to 64 "
                             "(keys a tile row of sel1's [256, k] listing chunks)")
        if t.index_compact and (t.index_digits != 4 or not t.index_sel_atomics):
            raise ValueError(f"index_compact needs index_digits 4 (is {t.index_digits}) and index_sel_atomics (is "
                             f"{t.index_sel_atomics}): sel1 lists the keys at the 8-bit prefix and counts digit 1 "
                             "by atomics as it lists")
        if self.index_floor not in (-1, 0, 1):
            raise ValueError(f"index_floor {self.index_floor} is not -1 (by width), 0 or 1")
        if self.index_relist < 0:
            raise ValueError(f"index_relist {self.index_relist} is negative (the fewest keys of a list sel2 "
                             "relists; 0: none)")
        if self.index_relist and not (t.index_compact > 0 or self.index_compact < 0):
            raise ValueError("index_relist needs sel1's lists (index_compact > 0, or -1 by width): it keeps part of "
                             "them")
        for name in ("index_pair", "index_keep_scores"):
            if getattr(self, name) not in (-1, 0, 1):
                raise ValueError(f"{name} {getattr(self, name)} is not -1 (by width), 0 or 1")
        if self.index_row_waits not in (-1, 0, 1, 2):
            raise ValueError(f"index_row_waits {self.index_row_waits} is not -1 (by width), 0, 1 or 2 (from score)")
        if self.index_pair > 0 and (self.index_digits != 4 or not self.index_sel_atomics or self.index_relist):
            raise ValueError(f"index_pair needs index_digits 4 (is {self.index_digits}), index_sel_atomics (is "
                             f"{self.index_sel_atomics}) and index_relist 0 (is {self.index_relist}): sel1 counts "
                             "digits 1 and 2 by atomics, and sel2, which would relist, is passed")
        if self.index_digits == 3 and not (0 < self.index_atomics <= 4 and self.index_sel_atomics):
            raise ValueError(f"index_digits 3 needs index_atomics from 1 to 4 (is {self.index_atomics}: each reader "
                             "sums a row's copies of 4096 bins in registers) and index_sel_atomics (is "
                             f"{self.index_sel_atomics}: its 12-bit digits 0 and 1 are counted by atomics)")
        return t.for_geometry(geo, tp).for_programs(geo, n_programs, tp=tp, width=width)

    def for_programs(self, geo: Glm53Geometry, n_programs: int, *, tp: int, width: int) -> "Tiles":
        """dcw 0 resolved for a grid: the fewest 8-aligned columns a task that cover the hidden size in
        one round of (column tile, part of the experts) tasks. ks_u 0 resolved for a grid and width: of
        the divisors <= 8 of the k blocks, the one that leaves the fewest k blocks on the busiest program
        at 1 row (ties: 4, then fewer parts); 4 at more rows (see the field)."""
        t = self
        if not t.dcw:
            tasks = max(1, n_programs // t.dn_parts)
            t = dataclasses.replace(t, dcw=min(geo.hidden, -(-geo.hidden // (8 * tasks)) * 8))
        if not t.ks_u:
            kb = geo.hidden // 128
            parts = [d for d in range(1, 9) if kb % d == 0]
            four = max(d for d in parts if d <= 4)  # 4, or the most parts below it that divide the k blocks
            col_tiles = max_used_experts(geo, width) * -(-geo.shard(tp).moe_inter // t.bu)
            busiest = lambda d: -(-col_tiles * d // n_programs) * (kb // d)  # noqa: E731
            best = min(parts, key=lambda d: (busiest(d), d != four, d)) if width == 1 else four
            t = dataclasses.replace(t, ks_u=best)
        return t


# Per-kind defaults of the fields Tiles leaves 0: qkv_a's k parts, q_b's column tile and k parts. The shared
# kind's are its measured ones (see bn_a). The indexer adds wk's tasks to qkv_a and wq_b's 64 to q_b (160 tasks
# on 132 programs at the shared kind's q_b tiles): q_b in 128-column tiles of 2 parts puts it in one round of
# tasks. H200, TP8 8K, a decode row a request, one process (results/indexer3_h200_time_specs.log): 147.8 / 218.8
# us at 1 / 8 rows against 152.5 / 225.4 (with qkv_a in 4 parts, then weights_proj's tasks in qkv_a too); qkv_a
# in 6 parts with wk in 6 (Tiles.ks_i): results/indexer7_h200_time_specs.log.
# q_b and absorb (read first by attn) moved beside score and sel1, on the programs those leave idle, with wq_b alone in
# q_b's stage in 64 KB tasks (commit 0b689f6, reverted): slower at every point, ab_trees in one run
# (results/indexer11_h200_ab_defer_qb_absorb.log): 8K 132.8-133.0 -> 141.9-142.4 us at 1 row, 199.3-199.5 -> 214.5-214.6
# at 8; 128K 143.9-145.0 -> 150.2-150.9, 267.2-267.8 -> 283.6-283.7 (its checks passed; not traced).
# q_b and wq_b unsplit in 64-column tiles (bn_b 64 / ks_b 1, bn_iq 64 / ks_iq 1: the same 96 tasks of 128 KB as
# 128-column tiles of 2 parts, each over all 16 k blocks), so absorb and the index queries read one part, not two.
# H100, one process, TP8, a decode row a request, rows 1 / 8 (results/indexer22_h100_time_specs_ks1.log): 8K 139.1 /
# 230.0 us -> 136.2 / 227.2, 128K 150.8 / 294.7 -> 148.8 / 294.6 (bn_iq 64 / ks_iq 1 alone 137.6 / 229.2, 150.1 /
# 296.0; both in 128-column tiles 140.1 / 230.9, 153.0 / 298.1); at 8K 1 row absorb's span 7.7 -> 5.9 us, q_b's
# unchanged (results/indexer22_h100_trace_8k_ks1.log). Taken on two more H100 runs, each in one process with the
# order of the two tile sets swapped (results/indexer23_h100_time_indexer.log, new first, with the per-op path;
# indexer23_h100_time_specs_reversed.log, old first): new minus old, mean of the two, -1.0 / -1.65 / -1.6 / -2.45 us
# at 8K rows 1 / 2 / 4 / 8 and -1.6 / -2.8 / -1.2 / -1.25 at 128K (8K 1 row +0.4 with new timed first). Checks of
# these tiles, 0 failures (results/indexer23_h100_check_*): the indexer at TP8 8K / 128K rows 1-8, fp8 KV, TP1 rows
# 1 / 2 / 4; check_topk at 8K / 128K / 300K; the dense kind at TP8 rows 1-8, the tokens kind at TP1 rows 1 / 2 / 4.
# The dense kind, TP8 8K, the same two orders (results/indexer23_h100_time_dense{,_reversed}.log): -0.55 / -1.35 /
# -0.95 us at rows 1 / 2 / 4, -1.9 at 8 rows (old first only). No H200 could be started in that session.
# Tasks of fewer columns than these tiles, balanced over the grid (the fewest that keep q_b's, wq_b's and the index
# keys' tasks in one round: 48 / 49 / 50 columns at 1 / 4 / 8 rows, 96-100 KB a task instead of 128; commit 391c405,
# reverted; bitwise equal), no faster on an H100, one process, the defaults timed first and last
# (results/indexer27_h100_specs_w*.log), rows 1 / 4 / 8: 8K 133.5, 133.3 -> 133.0; 178.3, 178.0 -> 179.0;
# 221.2, 220.9 -> 222.8 us; 128K 144.9, 144.5 -> 145.3; 207.3, 206.6 -> 207.5; 288.0, 288.4 -> 288.6. Not taken.
# The shared and tail kinds do not read bn_iq / ks_iq: they resolve so that every field does.
_SHARED_FRONT = {"ks_a": 6, "bn_b": 64, "ks_b": 4, "bn_iq": 64, "ks_iq": 1}
_INDEXER_FRONT = {"ks_a": 6, "bn_b": 64, "ks_b": 1, "bn_iq": 64, "ks_iq": 1}
KIND_TILES: dict[str, dict] = {
    "shared": _SHARED_FRONT,
    "indexer": _INDEXER_FRONT,
    "tail": _SHARED_FRONT,  # unread by it: the shared kind's
    "dense": _INDEXER_FRONT,  # the indexer's front: its tiles (timed above)
    "tokens": _INDEXER_FRONT,  # (not timed apart)
}

# Per-target build defaults over Tiles(); sm_90 (verified on the H200) is deliberately absent.
# gfx950 (AOT survey, test/kernels/glm53/results/survey_gfx950.txt): the NVIDIA tiles at 8 wave64s
# (2 waves a SIMD: 256 VGPRs) spill ~600 VGPRs; 4 waves (one a SIMD: 512 with AGPRs) alone still
# spill ~250, the rest being w_uv's unrolled NSPLIT=16 split loads in flight; 4 waves + nsplit 8: 0.
# The router's [E, 32] comparison chunks spill 62 VGPRs there; chunks of 8: 8 (AOT, TP8 w1 bf16), and
# 0 with the 128/256-column GEMV tiles that followed (results/survey_aot_cpu.txt).
# Compile-only evidence: no gfx950 device has run these.
# Attention blocks of 64 slots spill 248 VGPRs there (AOT, TP8 w1 / w8); 32: none.
# swap_moe is an sm_90 finding (the wgmma); gfx950 keeps every GEMV rows first. MoE up's k parts resolved
# per width (ks_u 0) are an H200 finding too; gfx950 keeps 4. The indexer's score loop (256-key blocks pipelined
# by Triton, digit 0 in 16 atomic copies) and the select's digits 1 and 2 counted a key at a time are too: gfx950
# keeps 128-key blocks by hand, digit 0 in registers, and the select's block histograms; the scores' cache policy
# (index_keep_scores) too: it keeps none; and the select's row-scoped hand-offs (index_row_waits).
TARGET_TILES: dict[str, dict] = {"gfx950": {"warps": 4, "nsplit": 8, "route_rc": 8, "att_blk": 32, "swap_moe": False,
                                           "dn_parts": 1, "stages_dn": 8, "ks_u": 4, "index_block": 128,
                                           "index_pipe": 0, "index_atomics": 0, "index_sel_atomics": False,
                                           "index_keep_scores": 0, "index_row_waits": 0}}


def target_of(device) -> str:
    """'gfx950'-style arch of a ROCm device, 'sm_NN' of a CUDA device, '' otherwise (cpu, meta)."""
    device = torch.device(device)
    if device.type != "cuda":
        return ""
    props = torch.cuda.get_device_properties(device)
    if torch.version.hip is not None:
        return props.gcnArchName.split(":")[0]
    return f"sm_{props.major}{props.minor}"
