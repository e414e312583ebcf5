"""GLM-5.3 geometry read once from an HF config: sizes, the IndexShare schedule, TP shards, bytes a layer reads.

Every count the GLM-5.3 code uses comes from a `Glm53Geometry`; nothing else names a model size.
The `GLM53_PRESET` dict is the public GLM-5.3 `config.json` fields the decode path reads
(transcribed, see `../shared/reference/sglang-glm53.md` §1; checked against SGLang's own
schedule function in the tests).
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Mapping

FP8_BLOCK = 128  # block-FP8: weight blocks [128, 128], activation groups of 128
INDEX_K_BYTES = 128 + 4  # one cached index key: 128 fp8 bytes and one fp32 scale
INDEX_PAGE = 64  # tokens a DSA page holds


def _index_share_types(n_layers: int, freq: int, offset: int) -> list[str]:
    """SGLang's freq/offset rule (model_config.dsa_layer_skips_topk) written out as indexer_types."""
    return ["shared" if max(i - offset + 1, 0) % freq else "full" for i in range(n_layers)]


# The GLM-5.3 config.json fields the decode path reads (zai-org/GLM-5.3; EXT values in the reference doc).
GLM53_PRESET: dict[str, Any] = {
    "architectures": ["GlmMoeDsaForCausalLM"],
    "model_type": "glm_moe_dsa",
    "hidden_size": 6144,
    "num_hidden_layers": 78,
    "first_k_dense_replace": 3,
    "moe_layer_freq": 1,
    "intermediate_size": 12288,
    "num_attention_heads": 64,
    "num_key_value_heads": 64,
    "q_lora_rank": 2048,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 192,
    "qk_rope_head_dim": 64,
    "v_head_dim": 256,
    "n_routed_experts": 256,
    "num_experts_per_tok": 8,
    "n_shared_experts": 1,
    "n_group": 1,
    "topk_group": 1,
    "topk_method": "noaux_tc",
    "scoring_func": "sigmoid",
    "norm_topk_prob": True,
    "routed_scaling_factor": 2.5,
    "moe_intermediate_size": 2048,
    "index_n_heads": 32,
    "index_head_dim": 128,
    "index_topk": 2048,
    "index_topk_freq": 4,
    "index_skip_topk_offset": 3,
    "indexer_types": _index_share_types(78, 4, 3),
    "vocab_size": 154880,
    "tie_word_embeddings": False,
    "pad_token_id": 154820,
    "rms_norm_eps": 1e-5,
    "rope_parameters": {"rope_theta": 8e6, "rope_type": "default"},
    "rope_interleave": True,
    "indexer_rope_interleave": True,
    "max_position_embeddings": 1048576,
    "num_nextn_predict_layers": 1,
    "hidden_act": "silu",
    "quantization_config": {
        "quant_method": "fp8",
        "fmt": "e4m3",
        "activation_scheme": "dynamic",
        "weight_block_size": [128, 128],
    },
}

PRESETS = {"glm-5.3": GLM53_PRESET}


def load_hf_config(source: str | Mapping[str, Any]) -> Any:
    """An HF config object from a preset name, a config.json path, a model folder or a dict."""
    from transformers import GlmMoeDsaConfig

    if isinstance(source, Mapping):
        fields = dict(source)
    elif source in PRESETS:
        fields = json.loads(json.dumps(PRESETS[source]))  # a private copy
    else:
        path = os.path.join(source, "config.json") if os.path.isdir(source) else source
        if not os.path.isfile(path):
            raise ValueError(
                f"model config {source!r} is neither a preset ({sorted(PRESETS)}) nor a config.json path"
            )
        with open(path) as f:
            fields = json.load(f)
    cfg = GlmMoeDsaConfig(**{k: v for k, v in fields.items() if k != "model_type"})
    for key, value in fields.items():  # keep fields the HF class does not declare (rope_interleave, ...)
        if not hasattr(cfg, key) or key in ("indexer_types", "architectures"):
            setattr(cfg, key, value)
    return cfg


def _rope_theta(hf_config: Any) -> float:
    params = getattr(hf_config, "rope_parameters", None) or {}
    theta = params.get("rope_theta", getattr(hf_config, "rope_theta", None))
    return float(theta) if theta is not None else 10000.0


def layer_runs_indexer(hf_config: Any, layer_id: int) -> bool:
    """Whether layer `layer_id` runs its own DSA indexer (SGLang: not dsa_layer_skips_topk)."""
    types = getattr(hf_config, "indexer_types", None)
    if types is not None:
        return not (0 <= layer_id < len(types) and types[layer_id] == "shared")
    pattern = getattr(hf_config, "index_topk_pattern", None)
    if pattern is not None:
        return not (layer_id < len(pattern) and pattern[layer_id] == "S")
    freq = getattr(hf_config, "index_topk_freq", 1) or 1
    offset = getattr(hf_config, "index_skip_topk_offset", None)
    if offset is not None:
        return max(layer_id - offset + 1, 0) % freq == 0
    return max(layer_id - 1, 0) % freq == 0


@dataclasses.dataclass(frozen=True)
class Shard:
    """One TP rank's share of a layer."""

    tp: int  # ranks
    heads: int  # attention heads on this rank
    moe_inter: int  # routed / fused expert intermediate columns on this rank
    dense_inter: int  # dense MLP intermediate columns on this rank
    vocab: int  # LM head / embedding rows on this rank


@dataclasses.dataclass(frozen=True)
class Glm53Geometry:
    """Every GLM-5.3 size the decode path uses, from one HF config."""

    hidden: int  # model width
    n_layers: int  # transformer layers (the NextN layer not counted)
    first_k_dense: int  # layers 0..first_k_dense-1 are dense
    moe_layer_freq: int
    dense_inter: int  # dense MLP intermediate
    heads: int  # attention heads
    q_lora: int  # q latent rank
    kv_lora: int  # kv latent rank (c_kv width)
    qk_nope: int  # per-head no-rope q/k dims
    qk_rope: int  # per-head rope dims (k_pe width)
    v_head: int  # per-head value dims
    n_routed: int  # routed experts
    top_k: int  # routed experts a token
    n_fused: int  # experts every token uses (HF / SGLang: n_shared_experts), fused as expert ids n_routed..
    routed_scaling: float
    moe_inter: int  # expert intermediate
    index_heads: int
    index_dim: int
    index_topk: int  # keys a row attends on DSA layers
    vocab: int
    rms_eps: float
    rope_theta: float
    max_positions: int
    runs_indexer: tuple[bool, ...]  # per layer: its own indexer (else reuses the previous top-k)

    @classmethod
    def from_hf(cls, hf_config: Any) -> "Glm53Geometry":
        c = hf_config
        n_layers = int(c.num_hidden_layers)
        return cls(
            hidden=int(c.hidden_size),
            n_layers=n_layers,
            first_k_dense=int(c.first_k_dense_replace),
            moe_layer_freq=int(getattr(c, "moe_layer_freq", 1) or 1),
            dense_inter=int(c.intermediate_size),
            heads=int(c.num_attention_heads),
            q_lora=int(c.q_lora_rank),
            kv_lora=int(c.kv_lora_rank),
            qk_nope=int(c.qk_nope_head_dim),
            qk_rope=int(c.qk_rope_head_dim),
            v_head=int(c.v_head_dim),
            n_routed=int(c.n_routed_experts),
            top_k=int(c.num_experts_per_tok),
            n_fused=int(getattr(c, "n_shared_experts", 0) or 0),
            routed_scaling=float(c.routed_scaling_factor),
            moe_inter=int(c.moe_intermediate_size),
            index_heads=int(c.index_n_heads),
            index_dim=int(c.index_head_dim),
            index_topk=int(c.index_topk),
            vocab=int(c.vocab_size),
            rms_eps=float(c.rms_norm_eps),
            rope_theta=_rope_theta(c),
            max_positions=int(c.max_position_embeddings),
            runs_indexer=tuple(layer_runs_indexer(c, i) for i in range(n_layers)),
        )

    # ---- derived sizes ----
    @property
    def qk_head(self) -> int:  # q/k head dim before absorption
        return self.qk_nope + self.qk_rope

    @property
    def kv_cache_dim(self) -> int:  # one cached latent: [c_kv | k_pe]
        return self.kv_lora + self.qk_rope

    @property
    def qkv_a_out(self) -> int:  # fused q_a | kv_a output width
        return self.q_lora + self.kv_lora + self.qk_rope

    @property
    def softmax_scale(self) -> float:  # no yarn mscale: rope_scaling is None
        return self.qk_head**-0.5

    def is_moe_layer(self, layer_id: int) -> bool:
        return layer_id >= self.first_k_dense and layer_id % self.moe_layer_freq == 0

    @property
    def indexer_layers(self) -> tuple[int, ...]:
        return tuple(i for i, full in enumerate(self.runs_indexer) if full)

    def shard(self, tp: int) -> Shard:
        """TP rank shapes; raises ValueError naming each size `tp` does not divide."""
        bad = [
            f"{name} {value} is not divisible by tp {tp}"
            for name, value in (
                ("num_attention_heads", self.heads),
                ("moe_intermediate_size", self.moe_inter),
                ("intermediate_size", self.dense_inter),
                ("vocab_size", self.vocab),
            )
            if value % tp
        ]
        if bad:
            raise ValueError("; ".join(bad))
        return Shard(
            tp=tp,
            heads=self.heads // tp,
            moe_inter=self.moe_inter // tp,
            dense_inter=self.dense_inter // tp,
            vocab=self.vocab // tp,
        )

    # ---- bytes a launch must read (the byte floor) ----
    def expected_experts(self, rows: int) -> float:
        """Distinct experts `rows` random routings touch, plus the shared one."""
        miss = (1.0 - self.top_k / self.n_routed) ** rows
        return self.n_routed * (1.0 - miss) + self.n_fused

    def layer_bytes(
        self,
        *,
        tp: int,
        rows: int,
        kv_bytes: int = 2,
        w_absorb_bytes: int = 2,
        context: int = 0,
        is_indexer: bool = False,
        experts: float | None = None,
    ) -> dict[str, float]:
        """Bytes one rank's MoE layer launch reads at `rows` rows (weights read once, KV per row).

        kv_bytes: bytes a cached latent value (2 bf16, 1 fp8); w_absorb_bytes: W_UK/W_UV element
        bytes (2 on CUDA, 1 on ROCm). `experts` defaults to expected_experts(rows).
        """
        s = self.shard(tp)
        fp8_linear = lambda n, k: n * k + 4 * -(-n // FP8_BLOCK) * -(-k // FP8_BLOCK)  # noqa: E731
        attn = (
            fp8_linear(self.qkv_a_out, self.hidden)
            + fp8_linear(s.heads * self.qk_head, self.q_lora)
            + fp8_linear(self.hidden, s.heads * self.v_head)
            + w_absorb_bytes * s.heads * self.kv_lora * (self.qk_nope + self.v_head)
            + 2 * (2 * self.hidden + self.q_lora + self.kv_lora)  # norms
        )
        gate = 2 * self.n_routed * self.hidden + 4 * self.n_routed
        per_expert = fp8_linear(2 * s.moe_inter, self.hidden) + fp8_linear(self.hidden, s.moe_inter)
        n_exp = self.expected_experts(rows) if experts is None else experts
        keys = min(self.index_topk, context) if context else self.index_topk
        kv = rows * keys * self.kv_cache_dim * kv_bytes
        out = {"attention": attn, "gate": gate, "experts": n_exp * per_expert, "kv": kv}
        if is_indexer:
            out["indexer"] = (
                fp8_linear(self.index_heads * self.index_dim, self.q_lora)
                + fp8_linear(self.index_dim, self.hidden)
                + 2 * self.index_heads * self.hidden
                + context * INDEX_K_BYTES
            )
        out["total"] = sum(out.values())
        return out
