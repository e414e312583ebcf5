"""The resolved dimensions of one GLM-5.3 layer launch: geometry at a TP shard, width, tiles and grid.

Field names are the launch's vocabulary (the Triton lowering passes `GEOMETRY` fields as constexprs of
the same names); tables and oracles read every count from here, never from a model size written out.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from sgl_amd_mono.glm53.config import INDEX_PAGE, Glm53Geometry

KV_DTYPES = {torch.bfloat16: "bf16", torch.float8_e4m3fn: "fp8_e4m3"}


def pow2(n: int) -> int:
    """The least power of two >= n (1 for n <= 1)."""
    return 1 << max(0, (n - 1).bit_length())


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def max_used_experts(geo: Glm53Geometry, width: int) -> int:
    """Used experts a step at most: every routed pick of every row (at most all routed experts) + the
    fused expert."""
    return min(width * geo.top_k, geo.n_routed) + 1


INDEX_K_NORM_EPS = 1e-6  # the index key's LayerNorm epsilon (SGLang's k_norm: LayerNorm(eps=1e-6), fp32 params)

# The geometry constexprs a lowering receives, by name.
GEOMETRY = ("R", "D", "QL", "KVL", "ROPE", "NOPE", "VH", "H", "E", "E_PAD", "TOPK", "KP", "I", "KTOP", "NSPLIT",
            "MAXU")


@dataclasses.dataclass(frozen=True)
class LayerDims:
    """One layer launch's sizes. R rows; D hidden; QL / KVL q and kv latent ranks; ROPE / NOPE rope and
    no-rope head dims; VH value head dim; H heads on this rank; E routed experts (E_PAD: a power of two
    >= 16); TOPK routed picks a row (KP: a power of two > TOPK); I expert intermediate on this rank; KTOP
    top-k slots a row attends; NSPLIT attention splits a row; MAXU used experts at most (the fused
    fused expert included)."""

    R: int
    D: int
    QL: int
    KVL: int
    ROPE: int
    NOPE: int
    VH: int
    H: int
    E: int
    E_PAD: int
    TOPK: int
    KP: int
    I: int  # noqa: E741 (the launch's name for the expert intermediate)
    KTOP: int
    NSPLIT: int
    MAXU: int
    tiles: Any  # the lowering's resolved tiles (split-K parts, column tiles, ...)
    n_programs: int  # the grid
    kv_dtype: torch.dtype  # the MLA cache's element type (bf16, or fp8 e4m3fn)
    tp: int
    eps: float
    softmax_scale: float
    routed_scaling: float
    # the DSA indexer (indexer kinds; 0 where a kind runs none)
    IH: int = 0  # index heads
    ID: int = 0  # index head dim (one fp8 group of 128 a head and a key)
    PMAX: int = 0  # 64-token pages a row's page table holds (the longest context a launch reads / 64)
    NSL: int = 0  # slices a row's key scan splits into (a task each; a power of two)
    IBLK: int = 0  # keys a key-scan loop step covers (a multiple of 64)
    k_norm_eps: float = 0.0  # the index key's LayerNorm epsilon
    V: int = 0  # vocab rows of the LM head / the embedding on this rank (the tail and tokens kinds)
    DI: int = 0  # dense MLP intermediate on this rank (the dense and tokens kinds)

    # ---- derived ----
    @property
    def QKV_N(self) -> int:  # fused qkv_a output: q latent | kv latent | k rope
        return self.QL + self.KVL + self.ROPE

    @property
    def QK(self) -> int:  # q head dim before absorption
        return self.NOPE + self.ROPE

    @property
    def KVD(self) -> int:  # one cached latent row: [c_kv | k_pe]
        return self.KVL + self.ROPE

    @property
    def HG(self) -> int:  # groups of 16 heads (one attention task's heads)
        return cdiv(self.H, 16)

    @property
    def HV(self) -> int:  # o_proj's input width on this rank
        return self.H * self.VH

    def geometry(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in GEOMETRY}


def layer_dims(geo: Glm53Geometry, *, tp: int, width: int, tiles: Any, n_programs: int,
               kv_dtype: torch.dtype, options: Any = None) -> LayerDims:
    """The dims of a layer launch; `tiles` must already be resolved for this geometry, width and grid.
    options.max_context (0: the model's max_positions) sizes what an indexer kind reads."""
    s = geo.shard(tp)
    max_context = (getattr(options, "max_context", 0) or geo.max_positions) if options is not None else geo.max_positions
    return LayerDims(
        R=width, D=geo.hidden, QL=geo.q_lora, KVL=geo.kv_lora, ROPE=geo.qk_rope, NOPE=geo.qk_nope, VH=geo.v_head,
        H=s.heads, E=geo.n_routed, E_PAD=pow2(max(16, geo.n_routed)), TOPK=geo.top_k, KP=pow2(max(2, geo.top_k + 1)),
        I=s.moe_inter, KTOP=geo.index_topk, NSPLIT=tiles.nsplit, MAXU=max_used_experts(geo, width), tiles=tiles,
        n_programs=n_programs, kv_dtype=kv_dtype, tp=tp, eps=geo.rms_eps, softmax_scale=geo.softmax_scale,
        routed_scaling=geo.routed_scaling, IH=geo.index_heads, ID=geo.index_dim, PMAX=cdiv(max_context, INDEX_PAGE),
        NSL=index_slices(getattr(tiles, "index_slices", 0), width), IBLK=getattr(tiles, "index_block", 0),
        k_norm_eps=INDEX_K_NORM_EPS, V=s.vocab, DI=s.dense_inter)


def index_slices(aim: int, width: int) -> int:
    """Slices a row's key scan splits into: the largest power of two <= aim / width (at least 1)."""
    n = max(1, aim // max(1, width))
    return 1 << (n.bit_length() - 1)
