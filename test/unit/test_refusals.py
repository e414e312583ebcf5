"""Bad GLM-5.3 setups are refused through SGLang's own startup check, each with a reason naming the setting.

Every case runs `monokernel_disable_reasons(cfg=, model_config=, isa=)` from SGLang 0.5.23 on a real
`ServerArgs` (its resolving view) and a real `ModelConfig` read from a config.json written to a temp folder.
"""

from __future__ import annotations

import copy

import pytest
from sglang.srt.arg_groups.overrides import model_config_of, resolving_view
from sglang.srt.kernel_plugins.amd.binding import monokernel_disable_reasons
from sglang.srt.server_args import ServerArgs

import sgl_amd_mono
from sgl_amd_mono.glm53.config import GLM53_PRESET, load_hf_config

DROP = object()  # remove the field from config.json
GOOD_SERVER = dict(tp_size=8, dtype="bfloat16", kv_cache_dtype="bfloat16", page_size=64,
                   attention_backend="dsa", dsa_decode_backend="triton", enable_amd_monokernel=True)
MTP = dict(speculative_algorithm="EAGLE", speculative_num_steps=3, speculative_eagle_topk=1,
           speculative_num_draft_tokens=4)


def _quant(**fields):
    return dict(GLM53_PRESET["quantization_config"], **fields)


# (id, HF config changes, server changes, env, isa, text every matching reason names)
CASES = [
    ("hidden_size", {"hidden_size": 4096}, {}, {}, "gfx950", "config.hidden_size 4096"),
    ("heads", {"num_attention_heads": 128, "num_key_value_heads": 128}, {}, {}, "gfx950", "config.num_attention_heads 128"),
    ("q_lora", {"q_lora_rank": 1536}, {}, {}, "gfx950", "config.q_lora_rank 1536"),
    ("kv_lora", {"kv_lora_rank": 256}, {}, {}, "gfx950", "config.kv_lora_rank 256"),
    ("nope", {"qk_nope_head_dim": 128}, {}, {}, "gfx950", "config.qk_nope_head_dim 128"),
    ("rope_dim", {"qk_rope_head_dim": 32}, {}, {}, "gfx950", "config.qk_rope_head_dim 32"),
    ("v_head", {"v_head_dim": 128}, {}, {}, "gfx950", "config.v_head_dim 128"),
    ("experts", {"n_routed_experts": 384}, {}, {}, "gfx950", "config.n_routed_experts 384"),
    ("top_k", {"num_experts_per_tok": 6}, {}, {}, "gfx950", "config.num_experts_per_tok 6"),
    ("n_shared", {"n_shared_experts": 2}, {}, {}, "gfx950", "config.n_shared_experts 2"),
    ("moe_inter", {"moe_intermediate_size": 1536}, {}, {}, "gfx950", "config.moe_intermediate_size 1536"),
    ("dense_inter", {"intermediate_size": 10944}, {}, {}, "gfx950", "config.intermediate_size 10944"),
    ("n_group", {"n_group": 8}, {}, {}, "gfx950", "config.n_group 8"),
    ("topk_group", {"topk_group": 4}, {}, {}, "gfx950", "config.topk_group 4"),
    ("scoring", {"scoring_func": "softmax"}, {}, {}, "gfx950", "config.scoring_func 'softmax'"),
    ("topk_method", {"topk_method": "greedy"}, {}, {}, "gfx950", "config.topk_method 'greedy'"),
    ("norm_topk", {"norm_topk_prob": False}, {}, {}, "gfx950", "config.norm_topk_prob False"),
    ("index_heads", {"index_n_heads": 64}, {}, {}, "gfx950", "config.index_n_heads 64"),
    ("index_dim", {"index_head_dim": 64}, {}, {}, "gfx950", "config.index_head_dim 64"),
    ("index_topk", {"index_topk": 1024}, {}, {}, "gfx950", "config.index_topk 1024 is not 2048"),
    ("vocab", {"vocab_size": 151552}, {}, {}, "gfx950", "config.vocab_size 151552"),
    ("first_dense", {"first_k_dense_replace": 1}, {}, {}, "gfx950", "config.first_k_dense_replace 1"),
    ("moe_freq", {"moe_layer_freq": 2}, {}, {}, "gfx950", "config.moe_layer_freq 2"),
    ("tied", {"tie_word_embeddings": True}, {}, {}, "gfx950", "config.tie_word_embeddings True"),
    ("act", {"hidden_act": "gelu"}, {}, {}, "gfx950", "config.hidden_act 'gelu'"),
    ("mla_neox", {"rope_interleave": False}, {}, {}, "gfx950", "config.rope_interleave False"),
    ("indexer_neox", {"indexer_rope_interleave": False}, {}, {}, "gfx950", "config.indexer_rope_interleave False"),
    ("indexer_rope_missing", {"indexer_rope_interleave": DROP}, {}, {}, "gfx950", "config.indexer_rope_interleave None"),
    ("yarn", {"rope_parameters": {"rope_type": "yarn", "rope_theta": 8e6, "factor": 4.0,
                                  "original_max_position_embeddings": 65536}}, {}, {}, "gfx950", "rope_type 'yarn'"),
    ("quant_awq", {"quantization_config": _quant(quant_method="awq")}, {}, {}, "gfx950", "config.quantization_config.quant_method 'awq'"),
    ("quant_block", {"quantization_config": _quant(weight_block_size=[64, 64])}, {}, {}, "gfx950", "config.quantization_config.weight_block_size [64, 64]"),
    ("quant_static", {"quantization_config": _quant(activation_scheme="static")}, {}, {}, "gfx950", "config.quantization_config.activation_scheme 'static'"),
    ("quant_none", {"quantization_config": DROP}, {}, {}, "gfx950", "config.quantization_config None"),
    ("share_first", {"indexer_types": ["shared"] + GLM53_PRESET["indexer_types"][1:]}, {}, {}, "gfx950", "config.indexer_types[0] 'shared'"),
    ("pattern_first", {"indexer_types": DROP, "index_topk_pattern": "S" + "F" * 77}, {}, {}, "gfx950", "config.index_topk_pattern[0] 'S'"),
    ("kpool", {"index_kpool": 2}, {}, {}, "gfx950", "config.index_kpool 2"),
    ("init_tokens", {"index_init_tokens": 4}, {}, {}, "gfx950", "config.index_init_tokens 4"),
    ("local_tokens", {"index_local_tokens": 128}, {}, {}, "gfx950", "config.index_local_tokens 128"),
    ("k_norm_rms", {"index_k_norm_type": "rms"}, {}, {}, "gfx950", "config.index_k_norm_type 'rms'"),
    ("mla_nope", {"mla_nope": True}, {}, {}, "gfx950", "config.mla_nope True"),
    ("swiglu_limit", {"swiglu_limit": 7.0}, {}, {}, "gfx950", "config.swiglu_limit 7.0"),
    ("llama4_scaling", {"llama_4_scaling": {"beta": 0.1}}, {}, {}, "gfx950", "config.llama_4_scaling {'beta': 0.1}"),
    ("sink", {"learnable_sink": True}, {}, {}, "gfx950", "config.learnable_sink True"),
    ("hash_layers", {"num_hash_layers": 3}, {}, {}, "gfx950", "config.num_hash_layers 3"),
    ("cli_factor", {"cli_factor": 2}, {}, {}, "gfx950", "config.cli_factor 2"),
    ("lm_head_fp32_cfg", {"enable_lm_head_fp32": True}, {}, {}, "gfx950", "config.enable_lm_head_fp32 True"),
    ("tp16", {}, {"tp_size": 16}, {}, "gfx950", "tp_size 16"),
    ("tp3_cuda", {}, {"tp_size": 3}, {}, "sm_90", "divisible by tp 3"),
    ("fp16", {}, {"dtype": "float16"}, {}, "gfx950", "dtype 'float16'"),
    ("kv_e5m2", {}, {"kv_cache_dtype": "fp8_e5m2"}, {}, "gfx950", "kv_cache_dtype 'fp8_e5m2'"),
    ("page1", {}, {"page_size": 1}, {}, "gfx950", "page_size 1"),
    ("attn_fa3", {}, {"attention_backend": "fa3"}, {}, "gfx950", "decode attention backend 'fa3'"),
    ("decode_attn_triton", {}, {"decode_attention_backend": "triton"}, {}, "gfx950", "decode attention backend 'triton'"),
    ("dsa_q8", {}, {"dsa_decode_backend": "flashmla_sparse_q8"}, {}, "gfx950", "dsa_decode_backend 'flashmla_sparse_q8'"),
    ("fp8_packed", {}, {"kv_cache_dtype": "fp8_e4m3", "dsa_decode_backend": "flashmla_kv"}, {}, "sm_90", "dsa_decode_backend 'flashmla_kv' with kv_cache_dtype 'fp8_e4m3'"),
    ("eagle3", {}, dict(MTP, speculative_algorithm="EAGLE3"), {}, "gfx950", "speculative_algorithm 'EAGLE3'"),
    ("ngram", {}, dict(MTP, speculative_algorithm="NGRAM"), {}, "gfx950", "speculative_algorithm 'NGRAM'"),
    ("tree", {}, dict(MTP, speculative_eagle_topk=4, speculative_num_draft_tokens=8), {}, "gfx950", "speculative_eagle_topk 4"),
    ("draft3", {}, dict(MTP, speculative_num_steps=2, speculative_num_draft_tokens=3), {}, "gfx950", "speculative_num_draft_tokens 3"),
    ("not_chain", {}, dict(MTP, speculative_num_draft_tokens=2), {}, "gfx950", "speculative_num_steps + 1"),
    ("fp32_lm_head", {}, {"enable_fp32_lm_head": True}, {}, "gfx950", "enable_fp32_lm_head"),
    ("dp_lm_head", {}, {"enable_dp_lm_head": True}, {}, "gfx950", "enable_dp_lm_head"),
    ("a2a_lm_head", {}, {"enable_tp_lm_head_all_to_all": True}, {}, "gfx950", "enable_tp_lm_head_all_to_all"),
    ("lm_head_out_fp32_cfg", {"enable_lm_head_output_fp32": True}, {}, {}, "gfx950", "config.enable_lm_head_output_fp32 True"),
    ("dp_attention", {}, {"enable_dp_attention": True, "dp_size": 8}, {}, "gfx950", "DP attention"),
    ("embed_repl", {}, {}, {"SGLANG_ENABLE_EMBED_REPLICATION": "1"}, "gfx950", "SGLANG_ENABLE_EMBED_REPLICATION"),
    ("ragged", {}, MTP, {"SGLANG_RAGGED_VERIFY_MODE": "ragged"}, "gfx950", "SGLANG_RAGGED_VERIFY_MODE"),
    ("ep", {}, {"ep_size": 8}, {}, "gfx950", "expert parallelism"),
    ("pp", {}, {"pp_size": 2}, {}, "gfx950", "pipeline parallelism"),
    ("compile", {}, {"enable_torch_compile": True}, {}, "gfx950", "torch-compiled decode"),
    ("tbo", {}, {"enable_two_batch_overlap": True}, {}, "gfx950", "two-batch"),
    ("deterministic", {}, {"enable_deterministic_inference": True}, {}, "gfx950", "--enable-deterministic-inference"),
    ("watchdog", {}, {"watchdog_timeout": 4}, {}, "gfx950", "--watchdog-timeout"),
    ("isa", {}, {}, {}, "gfx90a", "gfx90a"),
]
GOOD = [
    ("gfx950_tp8", {}, "gfx950"),
    ("gfx950_tp4_mtp", dict(MTP, tp_size=4), "gfx950"),
    ("gfx950_fp8_kv", {"kv_cache_dtype": "fp8_e4m3"}, "gfx950"),
    ("gfx942_aiter", {"dsa_decode_backend": "aiter"}, "gfx942"),
    ("sm90_tp8_fa3", {"dsa_decode_backend": "fa3"}, "sm_90"),
    ("sm90_tp1_mtp", dict(MTP, tp_size=1, dsa_decode_backend="fa3"), "sm_90"),
    ("nsa_alias", {"attention_backend": "nsa"}, "gfx950"),
]


@pytest.fixture(scope="module", autouse=True)
def registered():
    sgl_amd_mono.register()


def sglang_reasons(tmp_path, *, hf: dict, server: dict, isa: str) -> list[str]:
    fields = copy.deepcopy(GLM53_PRESET)
    for key, value in hf.items():
        if value is DROP:
            fields.pop(key, None)
        else:
            fields[key] = value
    load_hf_config(fields).save_pretrained(tmp_path)
    server_args = ServerArgs(model_path=str(tmp_path), **dict(GOOD_SERVER, **server))
    _, reasons = monokernel_disable_reasons(
        cfg=resolving_view(server_args), model_config=model_config_of(server_args), isa=isa
    )
    return reasons


def test_enough_distinct_refusals():
    assert len({case[0] for case in CASES}) == len(CASES) >= 40


@pytest.mark.parametrize("name,hf,server,env,isa,names", CASES, ids=[c[0] for c in CASES])
def test_bad_setup_is_refused_naming_the_setting(tmp_path, monkeypatch, name, hf, server, env, isa, names):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    reasons = sglang_reasons(tmp_path, hf=hf, server=server, isa=isa)
    assert any(names in reason for reason in reasons), reasons
    assert all(isinstance(r, str) and r for r in reasons)


@pytest.mark.parametrize("name,server,isa", GOOD, ids=[g[0] for g in GOOD])
def test_good_setup_has_no_reason(tmp_path, name, server, isa):
    assert sglang_reasons(tmp_path, hf={}, server=server, isa=isa) == []
