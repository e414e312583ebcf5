"""Binds one GLM-5.3 MoE layer's SGLang tensors to the Triton "shared" launch, and builds it per width.

`build_shared(geo, attn_w, moe_w, tp=, width=, kv_dtype=, device=, options=)` checks what the
launch was built for (refusing anything else with a ValueError sentence), describes the launch
as a `LaunchProgram` and runs the static checks, allocates the per-width outputs and scratch,
and returns a `SharedLaunch` whose call runs one step:

  hidden: [R, D] bf16 ; residual: [R, D] bf16 ; cos_sin: [R, rope] f32 ;
  kv_cache: [S, kv_lora + rope] or [S, 1, kv_lora + rope] bf16, or fp8 e4m3fn / uint8 (SGLang's
  fp8 store dtype), written in place at out_loc: [R] int64 (pad rows: slot 0) ;
  topk_slots: [R, index_topk] int32 physical slots, -1 = none.
  Returns {"out", "residual", "o": [R, D] bf16, "ids": [R, top_k + 1] int32, "weights": [R, top_k + 1] f32},
  views of the launch's own static buffers (CUDA-graph safe: no host write between steps).

Weights are read in place (SGLang's layouts, `glm53/layer.py`): w_kc / w_vc through their
strides, experts as [E + 1, ...] with expert E the fused shared one. No copy is made.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import Optional

import torch

from sgl_amd_mono.common import guard, program, trace
from sgl_amd_mono.glm53.config import Glm53Geometry
from sgl_amd_mono.glm53.layer import AttentionWeights, MoeWeights

log = logging.getLogger(__name__)

from sgl_amd_mono.backends.triton.shared_layer import STAGES as STAGE_NAMES  # noqa: E402

WIDTHS = (1, 2, 4, 8)
TPS = (1, 8)
KV_DTYPES = {torch.bfloat16: "bf16", torch.float8_e4m3fn: "fp8_e4m3"}
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
class LaunchOptions:
    """How a launch is built (the subset of SGLang's BuildContext a launch reads)."""

    deadline_s: float = 2.0  # every device wait's bound
    placement: str = "persistent"  # "persistent" (grid = resident programs) or "sequential" (grid 1)
    n_programs: Optional[int] = None  # persistent grid; default: the device's SM count
    skip_arrive: int = -1  # a planted missing arrival at this stage (deadline tests only)
    launch_id: int = 0  # named in error words
    skip_mask: int = 0  # timing variants only: bit s set = stage s runs no tasks (results invalid)
    trace: bool = False  # NVIDIA timing builds only: every program stamps the global timer at each stage


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _refusals(geo: Glm53Geometry, tp: int, width: int, kv_dtype: torch.dtype, attn_w, moe_w) -> list[str]:
    bad = []
    if width not in WIDTHS:
        bad.append(f"width {width} is not one of the built widths {WIDTHS}")
    if tp not in TPS:
        bad.append(f"TP shard tp={tp} is not one of {TPS}")
    if kv_dtype not in KV_DTYPES:
        bad.append(f"kv cache dtype {kv_dtype} is not one of {[str(d) for d in KV_DTYPES]}")
    try:
        s = geo.shard(tp)
    except ValueError as e:
        return bad + [str(e)]
    g = geo
    checks = [
        (g.hidden % 128 == 0, f"hidden {g.hidden} is not a multiple of 128"),
        (g.q_lora & (g.q_lora - 1) == 0 and g.q_lora % 128 == 0, f"q_lora {g.q_lora} is not a power of two >= 128"),
        (g.kv_lora & (g.kv_lora - 1) == 0 and g.kv_lora % 128 == 0, f"kv_lora {g.kv_lora} is not a power of two >= 128"),
        (g.qk_rope & (g.qk_rope - 1) == 0 and g.qk_rope >= 32, f"qk_rope {g.qk_rope} is not a power of two >= 32"),
        (g.qk_nope % 64 == 0, f"qk_nope {g.qk_nope} is not a multiple of 64"),
        (g.v_head % 128 == 0, f"v_head {g.v_head} is not a multiple of 128"),
        ((s.heads * g.v_head) % 128 == 0, f"heads*v_head {s.heads * g.v_head} is not a multiple of 128"),
        (s.moe_inter % 128 == 0, f"moe_inter/tp {s.moe_inter} is not a multiple of 128"),
        (g.index_topk % 32 == 0, f"index_topk {g.index_topk} is not a multiple of 32"),
        (g.n_shared == 1, f"n_shared {g.n_shared} is not 1 (the launch fuses exactly one shared expert)"),
        (g.top_k + 1 <= 16, f"top_k {g.top_k} + 1 exceeds 16"),
    ]
    bad += [msg for good, msg in checks if not good]
    if attn_w is not None:
        if attn_w.w_kc.dtype != torch.bfloat16 or attn_w.w_vc.dtype != torch.bfloat16:
            bad.append(f"w_kc/w_vc dtype {attn_w.w_kc.dtype}/{attn_w.w_vc.dtype} is not bf16 (the CUDA layout)")
        want = {
            "qkv_a": (g.qkv_a_out, g.hidden), "q_b": (s.heads * g.qk_head, g.q_lora),
            "o_proj": (g.hidden, s.heads * g.v_head), "w_kc": (s.heads, g.qk_nope, g.kv_lora),
            "w_vc": (s.heads, g.kv_lora, g.v_head),
        }
        for name, shape in want.items():
            got = tuple(getattr(attn_w, name).shape)
            if got != shape:
                bad.append(f"attention weight {name} has shape {got}, the tp={tp} shard needs {shape}")
    if moe_w is not None:
        want = {
            "gate": (g.n_routed, g.hidden), "w13": (g.n_routed + 1, 2 * s.moe_inter, g.hidden),
            "w2": (g.n_routed + 1, g.hidden, s.moe_inter),
        }
        for name, shape in want.items():
            got = tuple(getattr(moe_w, name).shape)
            if got != shape:
                bad.append(f"moe weight {name} has shape {got}, the tp={tp} shard needs {shape}")
    return bad


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
    # (results/final5_h200_trace.log) vs 8.7 / 8.7 (final4); swapped, 5.4-5.9 vs 6.9-7.2 at 1 / 4 / 8 rows
    # (results/trace_h200_swap_ab.log); the helper alone: results/probe_tiles_h200.log
    bn_a: int = 128
    ks_a: int = 6
    bn_b: int = 64
    ks_b: int = 4
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
    # tasks for 132 programs) but slower at time_layers' 15.8 (105.2 / 105.4 vs 103.1 / 103.2), so 4
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
    # swap_ab: GEMV block products as weight tile @ activations^T (`tiles._block_dot`): on sm_90 a wgmma of
    # the fp8 tiles straight from shared memory instead of an mma.sync of f16-converted tiles. Faster, H200
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
        """nsplit 0 resolved for a width: more splits when few rows leave most programs idle."""
        return self if self.nsplit else dataclasses.replace(self, nsplit=32 if width <= 4 else 16)

    def for_geometry(self, geo: Glm53Geometry, tp: int) -> "Tiles":
        """Split counts clamped to divisors of each GEMV's k blocks (tiny test geometries)."""
        s = geo.shard(tp)

        def ks(kb: int, want: int) -> int:
            return max(d for d in range(1, min(kb, want) + 1) if kb % d == 0)

        return dataclasses.replace(
            self, ks_a=ks(geo.hidden // 128, self.ks_a), ks_b=ks(geo.q_lora // 128, self.ks_b),
            ks_o=ks(s.heads * geo.v_head // 128, self.ks_o), ks_g=ks(geo.hidden // 128, self.ks_g),
            ks_u=ks(geo.hidden // 128, self.ks_u) if self.ks_u else 0, be=min(self.be, _pow2(max(16, geo.n_routed))),
            bu=min(self.bu, s.moe_inter), dcw=min(self.dcw, geo.hidden))

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


# Per-target build defaults over Tiles(); sm_90 (verified on the H200) is deliberately absent.
# gfx950 (AOT survey, test/kernels/glm53/results/survey_gfx950.txt): the NVIDIA tiles at 8 wave64s
# (2 waves a SIMD: 256 VGPRs) spill ~600 VGPRs; 4 waves (one a SIMD: 512 with AGPRs) alone still
# spill ~250, the rest being w_uv's unrolled NSPLIT=16 split loads in flight; 4 waves + nsplit 8: 0.
# The router's [E, 32] comparison chunks spill 62 VGPRs there; chunks of 8: 8 (AOT, TP8 w1 bf16), and
# 0 with the 128/256-column GEMV tiles that followed (results/survey_aot_cpu.txt).
# Compile-only evidence: no gfx950 device has run these.
# Attention blocks of 64 slots spill 248 VGPRs there (AOT, TP8 w1 / w8); 32: none.
# swap_moe is an sm_90 finding (the wgmma); gfx950 keeps every GEMV rows first. MoE up's k parts resolved
# per width (ks_u 0) are an H200 finding too; gfx950 keeps 4.
TARGET_TILES: dict[str, dict] = {"gfx950": {"warps": 4, "nsplit": 8, "route_rc": 8, "att_blk": 32, "swap_moe": False,
                                           "dn_parts": 1, "stages_dn": 8, "ks_u": 4}}


def target_of(device) -> str:
    """'gfx950'-style arch of a ROCm device, 'sm_NN' of a CUDA device, '' otherwise (cpu, meta)."""
    device = torch.device(device)
    if device.type != "cuda":
        return ""
    props = torch.cuda.get_device_properties(device)
    if torch.version.hip is not None:
        return props.gcnArchName.split(":")[0]
    return f"sm_{props.major}{props.minor}"


def describe(geo: Glm53Geometry, *, tp: int, width: int, tiles: Tiles, n_programs: int = 1) -> program.LaunchProgram:
    """The shared launch as stages and tasks (what the kernel's loops run), for the static checks.
    n_programs sizes the per-program scratch (each program's own list of used experts)."""
    s = geo.shard(tp)
    r, h, d = width, s.heads, geo.hidden
    hg = -(-h // 16)
    maxu = max_used_experts(geo, width)
    st = program.Stage
    cdiv = lambda a, b: -(-a // b)  # noqa: E731
    tiles = tiles.for_width(width).for_geometry(geo, tp).for_programs(geo, n_programs, tp=tp, width=width)
    ng_i = s.moe_inter // 128
    stages = [
        st("norm1", r, ("hidden", "residual"), ("res1", "xq1", "xs1")),
        st("qkv_a", cdiv(geo.qkv_a_out, tiles.bn_a) * tiles.ks_a, ("xq1", "xs1"), ("qkv_part",)),
        st("latent", 2 * r, ("qkv_part", "cos_sin", "out_loc"), ("ql", "qlq", "qls", "kv_cache"),
           cache_rows=lambda t: (t - r,) if t >= r else ()),
        st("q_b", cdiv(h * geo.qk_head, tiles.bn_b) * tiles.ks_b, ("qlq", "qls"), ("qb_part",)),
        st("absorb", h * (geo.kv_lora // 128), ("qb_part", "cos_sin"), ("qcat",)),
        st("attn", r * hg * tiles.nsplit, ("qcat", "kv_cache", "topk"), ("pm", "pl", "pacc")),
        st("w_uv", h * (geo.v_head // 128) * (geo.kv_lora // 128), ("pm", "pl", "pacc"), ("vpart", "vq", "vs")),
        st("o_proj", cdiv(d, tiles.bn_o) * tiles.ks_o, ("vq", "vs", "res1"), ("o_part", "o", "res_out")),
        st("norm2", r, ("o", "res1"), ("xn2", "xq2", "xs2")),
        st("gate", cdiv(geo.n_routed, tiles.be) * tiles.ks_g, ("xn2",), ("lg_part",)),
        st("route", r * (_pow2(max(16, geo.n_routed)) // _router_task_experts(geo, tiles)), ("lg_part",), ("ids", "rw")),
        st("up", maxu * (s.moe_inter // tiles.bu) * tiles.ks_u, ("rw", "xq2", "xs2"), ("uniq", "up_part")),
        st("act", maxu * ng_i, ("up_part", "uniq", "rw", "ids"), ("aq", "as", "weights")),
        st("down", cdiv(d, tiles.dcw) * tiles.dn_parts, ("aq", "as", "uniq"),
           ("dn_part", "out")),
    ]
    scratch = _scratch_shapes(geo, tp=tp, width=width, tiles=tiles, n_programs=n_programs)
    nbytes = {k: math.prod(shape) * torch.empty((), dtype=dt).element_size() for k, (shape, dt) in scratch.items()}
    return program.LaunchProgram(
        name=f"shared[tp{tp},w{width}]", stages=stages,
        inputs=("hidden", "residual", "cos_sin", "out_loc", "topk", "kv_cache"), scratch=nbytes, rows=width,
    )


def max_used_experts(geo: Glm53Geometry, width: int) -> int:
    """Used experts a step at most: every routed pick of every row (at most all routed experts) + shared."""
    return min(width * geo.top_k, geo.n_routed) + 1


def _router_task_experts(geo: Glm53Geometry, tiles: Tiles) -> int:
    """Experts one router task ranks (the kernel's RC)."""
    return min(tiles.route_rc, _pow2(max(16, geo.n_routed)))


def _scratch_shapes(geo: Glm53Geometry, *, tp: int, width: int, tiles: Tiles, n_programs: int) -> dict:
    s = geo.shard(tp)
    r, h, d = width, s.heads, geo.hidden
    maxu = max_used_experts(geo, width)
    f32, bf16, i32, fp8 = torch.float32, torch.bfloat16, torch.int32, torch.float8_e4m3fn
    t = tiles.for_width(width).for_geometry(geo, tp).for_programs(geo, n_programs, tp=tp, width=width)
    hv, i = h * geo.v_head, s.moe_inter
    return {
        "res1": ((r, d), bf16), "xq1": ((r, d), fp8), "xs1": ((r, d // 128), f32),
        "qkv_part": ((t.ks_a, r, geo.qkv_a_out), f32), "ql": ((r, geo.q_lora), bf16),
        "qlq": ((r, geo.q_lora), fp8), "qls": ((r, geo.q_lora // 128), f32),
        "qb_part": ((t.ks_b, r, h * geo.qk_head), f32),
        "qcat": ((r, h, geo.kv_cache_dim), bf16), "pm": ((r, t.nsplit, h), f32),
        "pl": ((r, t.nsplit, h), f32), "pacc": ((r, t.nsplit, h, geo.kv_lora), f32),
        "vpart": ((geo.kv_lora // 128, r, hv), f32),
        "vq": ((r, hv), fp8), "vs": ((r, hv // 128), f32), "o_part": ((t.ks_o, r, d), f32),
        "xn2": ((r, d), bf16), "xq2": ((r, d), fp8), "xs2": ((r, d // 128), f32),
        "lg_part": ((t.ks_g, r, geo.n_routed), f32),
        "rw": ((geo.n_routed + 1, 16), f32), "uniq": ((n_programs, maxu + 1), i32),
        "up_part": ((maxu * t.ks_u, r, 2 * i), f32), "aq": ((maxu, r, i), fp8), "as": ((maxu, r, i // 128), f32),
        "dn_part": ((t.dn_parts, r, d), f32),
    }


SCRATCH_LIMIT = 512 * 2**20  # bytes a launch may take for scratch


class SharedLaunch:
    """One built shared launch (one width, one TP shard, one KV dtype); call it once per step."""

    def __init__(self, geo, attn_w, moe_w, *, tp, width, kv_dtype, device, options: LaunchOptions, tiles: Tiles):
        self.geo, self.attn_w, self.moe_w = geo, attn_w, moe_w
        tiles = tiles.for_geometry(geo, tp)
        self.tp, self.width, self.kv_dtype, self.options, self.tiles = tp, width, kv_dtype, options, tiles
        self.device = torch.device(device)
        self.shard = geo.shard(tp)
        self.interpret = self.device.type == "cpu"
        if tiles.progs_per_sm not in (1, 2):
            raise ValueError(f"progs_per_sm {tiles.progs_per_sm} is not 1 or 2")
        if tiles.dn_parts < 1:
            raise ValueError(f"dn_parts {tiles.dn_parts} is not a positive count")
        self.num_warps = tiles.num_warps
        if options.placement == "sequential":
            self.n_programs = 1
        elif options.placement == "persistent":
            if self.device.type == "cuda":
                n_sm = torch.cuda.get_device_properties(self.device).multi_processor_count
                self.n_programs = options.n_programs or n_sm * tiles.progs_per_sm
            elif self.device.type == "meta" and options.n_programs:  # AOT compiles (survey)
                self.n_programs = options.n_programs
            else:
                raise ValueError(f"placement 'persistent' needs a GPU device (or meta with n_programs), got {self.device}")
        else:
            raise ValueError(f"placement {options.placement!r} is not 'persistent' or 'sequential'")
        tiles = self.tiles = tiles.for_programs(geo, self.n_programs, tp=tp, width=width)
        self.program = describe(geo, tp=tp, width=width, tiles=tiles, n_programs=self.n_programs)
        placement = program.place_round_robin(self.program, self.n_programs)
        program.check_all(self.program, placement, SCRATCH_LIMIT)
        self.deadline = guard.Deadline.from_seconds(options.deadline_s)
        self.timer = self.device.type == "cuda" and torch.version.hip is None
        self.bound = self.deadline.timer_ns if self.timer else self.deadline.polls
        mk = lambda shape, dt: torch.zeros(shape, dtype=dt, device=self.device)  # noqa: E731
        self.scratch = {k: mk(shape, dt) for k, (shape, dt) in _scratch_shapes(geo, tp=tp, width=width, tiles=tiles, n_programs=self.n_programs).items()}
        r, d = width, geo.hidden
        self.out = {
            "out": mk((r, d), torch.bfloat16), "residual": mk((r, d), torch.bfloat16), "o": mk((r, d), torch.bfloat16),
            "ids": mk((r, geo.top_k + 1), torch.int32), "weights": mk((r, geo.top_k + 1), torch.float32),
        }
        # sync: [epoch | one arrival counter a stage | the last-arrival counts, in the kernel's order
        # (wuv_cnt, oproj_cnt, dn_cnt): w_uv's a v group, o_proj's and down's a column tile]
        last_arrival = (self.shard.heads * (geo.v_head // 128), -(-d // tiles.bn_o), -(-d // tiles.dcw))
        self.sync = mk((1 + len(self.program.stages) + sum(last_arrival),), torch.int32)
        self.err = guard.new_error_word(self.device)
        self.trace = mk((self.n_programs, 2 * len(self.program.stages)), torch.int64)
        if options.trace and not (self.device.type == "cuda" and torch.version.hip is None):
            raise ValueError("trace builds need an NVIDIA GPU (they read its global timer)")
        self.copies_bytes = 0
        log.info("%s: weights bound in place, copies made: none (%d bytes); scratch %.1f MiB; grid %d",
                 self.program.name, self.copies_bytes, sum(self.program.scratch.values()) / 2**20, self.n_programs)
        self._checked_resident = self.device.type != "cuda"

    def reset_sync(self) -> None:
        """Zero the epoch, counters and error word (after a missed deadline; never needed otherwise)."""
        self.sync.zero_()
        self.err.zero_()

    def trace_table(self) -> list:
        """After a trace build's step: `common.trace.stage_table` of its stamps (per-stage µs)."""
        return trace.stage_table(self.trace.cpu(), self.program.stage_names())

    def check_error(self) -> None:
        guard.check_error(self.err, {self.options.launch_id: self.program.name}, self.program.stage_names())

    def _check_inputs(self, hidden, residual, cos_sin, kv_cache, out_loc, topk_slots) -> torch.Tensor:
        g, r = self.geo, self.width
        want = {"hidden": (hidden, (r, g.hidden), torch.bfloat16), "residual": (residual, (r, g.hidden), torch.bfloat16),
                "cos_sin": (cos_sin, (r, g.qk_rope), torch.float32), "out_loc": (out_loc, (r,), torch.int64),
                "topk_slots": (topk_slots, (r, g.index_topk), torch.int32)}
        bad = [f"{n} is {tuple(t.shape)} {t.dtype}, the launch was built for {s} {dt}"
               for n, (t, s, dt) in want.items() if tuple(t.shape) != s or t.dtype != dt or not t.is_contiguous()]
        kv = kv_cache.view(kv_cache.shape[0], -1) if kv_cache.dim() == 3 else kv_cache
        kv_dt = torch.float8_e4m3fn if kv.dtype == torch.uint8 else kv.dtype
        if kv_dt != self.kv_dtype or kv.shape[-1] != g.kv_cache_dim or kv.stride(-1) != 1:
            bad.append(f"kv_cache is {tuple(kv_cache.shape)} {kv_cache.dtype}, the launch was built for "
                       f"[S, {g.kv_cache_dim}] {self.kv_dtype}")
        if bad:
            raise ValueError("; ".join(bad))
        return kv.view(torch.float8_e4m3fn) if kv.dtype == torch.uint8 else kv

    def kernel_args(self, hidden, residual, cos_sin, kv_cache, out_loc, topk_slots, *, timer=None):
        """(args, constexprs) of `shared_layer_kernel` for one step (also used by AOT compiles; there
        `timer` says the target is NVIDIA, whose global timer bounds the waits)."""
        kv = self._check_inputs(hidden, residual, cos_sin, kv_cache, out_loc, topk_slots)
        g, a, m, sc, t = self.geo, self.attn_w, self.moe_w, self.scratch, self.tiles
        s = self.shard
        args = (
            hidden, residual, cos_sin, out_loc, topk_slots, kv, kv.stride(0),
            a.input_norm, a.qkv_a, a.qkv_a_s, a.q_a_norm, a.kv_a_norm, a.q_b, a.q_b_s,
            a.w_kc, *a.w_kc.stride(), a.w_vc, *a.w_vc.stride(), a.o_proj, a.o_proj_s, a.post_norm,
            m.gate, m.bias, m.w13, m.w13_s, m.w2, m.w2_s,
            self.out["out"], self.out["residual"], self.out["o"], self.out["ids"], self.out["weights"],
            *(sc[k] for k in ("res1", "xq1", "xs1", "qkv_part", "ql", "qlq", "qls", "qb_part", "qcat",
                              "pm", "pl", "pacc", "vpart", "vq", "vs", "o_part", "xn2", "xq2", "xs2", "lg_part",
                              "rw", "uniq", "up_part", "aq", "as", "dn_part")),
            self.sync, self.err, self.trace, self.options.launch_id, self.bound, g.rms_eps, g.softmax_scale, g.routed_scaling,
        )
        maxu = max_used_experts(g, self.width)
        meta = dict(
            R=self.width, D=g.hidden, QL=g.q_lora, KVL=g.kv_lora, ROPE=g.qk_rope, NOPE=g.qk_nope, VH=g.v_head,
            H=s.heads, E=g.n_routed, E_PAD=_pow2(max(16, g.n_routed)), TOPK=g.top_k, KP=_pow2(max(2, g.top_k + 1)),
            I=s.moe_inter, KTOP=g.index_topk, NSPLIT=t.nsplit, MAXU=maxu,
            BN_A=t.bn_a, KS_A=t.ks_a, BN_B=t.bn_b, KS_B=t.ks_b, BN_O=t.bn_o, KS_O=t.ks_o, BE=t.be, KS_G=t.ks_g,
            BU=t.bu, KS_U=t.ks_u, DCW=t.dcw, DCW_P=_pow2(t.dcw), STAGES_DN=t.stages_dn, DN_PARTS=t.dn_parts, STAGES_UP=t.stages_up, ATT_BLK=t.att_blk, UP_MT=_pow2(-(-maxu * (s.moe_inter // t.bu) * t.ks_u // self.n_programs)), NORM_GP=_pow2(g.hidden // 128), WUV_SH=t.wuv_sh, ROUTE_RC=t.route_rc, STAGES=t.stages, SWAP_AB=t.swap_ab, SWAP_MOE=t.swap_ab or t.swap_moe,
            PRELOAD=t.preload,
            NPROG=self.n_programs, TIMER=self.timer if timer is None else timer, SKIP_ARRIVE=self.options.skip_arrive,
            SKIP_MASK=self.options.skip_mask,
            TRACE=self.options.trace,
        )
        return args, meta

    def __call__(self, hidden, residual, cos_sin, kv_cache, out_loc, topk_slots):
        from sgl_amd_mono.backends.triton.shared_layer import shared_layer_kernel

        args, meta = self.kernel_args(hidden, residual, cos_sin, kv_cache, out_loc, topk_slots)
        grid = (self.n_programs,)
        if not self._checked_resident:
            k = shared_layer_kernel.warmup(*args, grid=grid, num_warps=self.num_warps, **self.tiles.compile_options(),
                                           **meta)
            if hasattr(k, "_init_handles"):
                k._init_handles()
            props = torch.cuda.get_device_properties(self.device)
            if torch.version.hip is not None:  # CDNA: k.n_regs is the wave's VGPR count (not run here)
                resident = program.resident_programs_amd(
                    n_cu=props.multi_processor_count, vgprs=k.n_regs, waves_per_program=self.num_warps,
                    lds_bytes=k.metadata.shared, lds_per_cu=program.AMD_LDS_PER_CU[target_of(self.device)])
            else:
                resident = program.resident_programs(
                    n_sm=props.multi_processor_count, regs_per_thread=k.n_regs, num_warps=self.num_warps,
                    shared_bytes=k.metadata.shared)
            program.check_resident(self.program.name, self.n_programs, resident)
            self.resources = {"n_regs": k.n_regs, "n_spills": k.n_spills, "shared": k.metadata.shared,
                              "resident": resident, "grid": self.n_programs, "num_warps": self.num_warps}
            log.info("%s: %s", self.program.name, self.resources)
            self._checked_resident = True
        shared_layer_kernel[grid](*args, num_warps=self.num_warps, **self.tiles.compile_options(), **meta)
        return self.out


def build_shared(geo: Glm53Geometry, attn_w: AttentionWeights, moe_w: MoeWeights, *, tp: int, width: int,
                 kv_dtype: torch.dtype, device, options: LaunchOptions = LaunchOptions(),
                 tiles: Optional[Tiles] = None) -> SharedLaunch:
    """Build the shared launch for one width / TP shard / KV dtype; ValueError names what it was not built for.
    tiles None: Tiles() with the device's target defaults (`Tiles.for_target`)."""
    if tiles is None:
        tiles = Tiles().for_target(target_of(device))
    bad = _refusals(geo, tp, width, kv_dtype, attn_w, moe_w)
    if bad:
        raise ValueError("shared launch refused: " + "; ".join(bad))
    tiles = tiles.for_width(width)
    if geo.index_topk % tiles.nsplit or (geo.index_topk // tiles.nsplit) % tiles.att_blk:
        tiles = dataclasses.replace(tiles, nsplit=max(1, geo.index_topk // 128))
    if tiles.nsplit & (tiles.nsplit - 1):
        raise ValueError(f"shared launch refused: nsplit {tiles.nsplit} is not a power of two")
    return SharedLaunch(geo, attn_w, moe_w, tp=tp, width=width, kv_dtype=kv_dtype, device=device,
                        options=options, tiles=tiles)
