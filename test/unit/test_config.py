"""GLM-5.3 geometry: the IndexShare schedule against SGLang's own function, TP shards, byte floors."""

import pytest

from sgl_amd_mono.glm53.config import GLM53_PRESET, Glm53Geometry, layer_runs_indexer, load_hf_config


@pytest.fixture(scope="module")
def sglang_skips_topk():
    from sglang.srt.configs.model_config import dsa_layer_skips_topk

    return dsa_layer_skips_topk


def _schedule_matches(cfg, skips_topk) -> bool:
    n = cfg.num_hidden_layers
    return [layer_runs_indexer(cfg, i) for i in range(n)] == [not skips_topk(cfg, i) for i in range(n)]


def test_preset_schedule_is_sglangs(sglang_skips_topk):
    cfg = load_hf_config("glm-5.3")
    geo = Glm53Geometry.from_hf(cfg)
    assert _schedule_matches(cfg, sglang_skips_topk)
    assert geo.indexer_layers == (0, 1, 2) + tuple(range(6, 78, 4))
    assert len(geo.indexer_layers) == 21 and geo.runs_indexer.count(False) == 57


@pytest.mark.parametrize("freq,offset", [(4, 3), (2, 1), (3, 2), (1, 1), (5, 4), (4, None)])
def test_freq_offset_schedule_is_sglangs(sglang_skips_topk, freq, offset):
    cfg = load_hf_config(dict(GLM53_PRESET, index_topk_freq=freq))
    cfg.index_skip_topk_offset = offset  # None: SGLang's rule without an offset
    cfg.indexer_types = None  # the freq/offset rule applies only without an explicit list
    assert sum(layer_runs_indexer(cfg, i) for i in range(78)) < 78 or freq == 1
    assert _schedule_matches(cfg, sglang_skips_topk)


@pytest.mark.parametrize(
    "types",
    [
        ["full"] * 78,
        ["full", "shared"] * 39,
        ["full"] * 3 + ["shared"] * 75,
        ["full", "full", "shared"] + ["full", "shared", "shared"] * 25,
    ],
)
def test_indexer_types_schedule_is_sglangs(sglang_skips_topk, types):
    cfg = load_hf_config(dict(GLM53_PRESET, indexer_types=types))
    assert _schedule_matches(cfg, sglang_skips_topk)
    assert Glm53Geometry.from_hf(cfg).runs_indexer == tuple(t == "full" for t in types)


def test_schedule_differs_when_the_rule_differs(sglang_skips_topk):
    """Negative control: a schedule computed with another offset disagrees with SGLang's."""
    cfg = load_hf_config("glm-5.3")
    other = load_hf_config(dict(GLM53_PRESET, indexer_types=None, index_skip_topk_offset=2))
    other.indexer_types = None
    ours = [layer_runs_indexer(other, i) for i in range(78)]
    assert ours != [not sglang_skips_topk(cfg, i) for i in range(78)]


@pytest.mark.parametrize(
    "tp,heads,moe_inter,dense_inter,vocab",
    [(1, 64, 2048, 12288, 154880), (2, 32, 1024, 6144, 77440), (4, 16, 512, 3072, 38720), (8, 8, 256, 1536, 19360)],
)
def test_shards(tp, heads, moe_inter, dense_inter, vocab):
    s = Glm53Geometry.from_hf(load_hf_config("glm-5.3")).shard(tp)
    assert (s.heads, s.moe_inter, s.dense_inter, s.vocab) == (heads, moe_inter, dense_inter, vocab)


def test_shard_refuses_a_tp_that_does_not_divide():
    geo = Glm53Geometry.from_hf(load_hf_config("glm-5.3"))
    with pytest.raises(ValueError, match="num_attention_heads 64 is not divisible by tp 3"):
        geo.shard(3)


@pytest.mark.parametrize(
    "rows,experts,total_mb",
    [(1, 9.0, 84.6), (2, 16.8, 123.5), (4, 31.5, 198.0), (8, 58.4, 334.4)],
)
def test_layer_bytes_tp8(rows, experts, total_mb):
    """The design's byte table (TP8 shard, bf16 KV and W_UK/W_UV, random routing)."""
    geo = Glm53Geometry.from_hf(load_hf_config("glm-5.3"))
    b = geo.layer_bytes(tp=8, rows=rows)
    assert geo.expected_experts(rows) == pytest.approx(experts, abs=0.06)
    assert b["total"] / 1e6 == pytest.approx(total_mb, abs=0.1)
    assert b["attention"] / 1e6 == pytest.approx(36.6, abs=0.1)
    assert b["kv"] == rows * 2048 * 576 * 2


def test_indexer_bytes_grow_with_context():
    geo = Glm53Geometry.from_hf(load_hf_config("glm-5.3"))
    short = geo.layer_bytes(tp=8, rows=1, context=8192, is_indexer=True)["indexer"]
    long = geo.layer_bytes(tp=8, rows=1, context=131072, is_indexer=True)["indexer"]
    assert long - short == (131072 - 8192) * 132


def test_config_sources(tmp_path):
    import json

    path = tmp_path / "config.json"
    path.write_text(json.dumps(GLM53_PRESET))
    assert Glm53Geometry.from_hf(load_hf_config(str(tmp_path))) == Glm53Geometry.from_hf(load_hf_config("glm-5.3"))
    with pytest.raises(ValueError, match="neither a preset"):
        load_hf_config(str(tmp_path / "missing.json"))
