"""Importers of more model_types: each config in tests/data/reference/configs-extra (SOURCES.md says where it comes
from) goes through `kvcalc compare`, and the cache is checked against a figure written out from the config's numbers,
with the rule it follows; each importer's trap gets its own assertion."""

from __future__ import annotations

import json

import pytest

from conftest import REFERENCE, ConfigFolder, kv_bytes, run

EXTRA = REFERENCE / "configs-extra"
CONFIGS = ConfigFolder("configs-extra")
K = 1024
BF16 = 2  # bytes per cached element (kvcalc's default kv dtype)


compare, config, imported = CONFIGS.compare, CONFIGS.config, CONFIGS.imported


# ---------------------------------------------------------------- starcoder2


def test_starcoder2_7b_cache_window_on_every_layer():
    # 32 layers, each with the 4096-key window (sliding_window, the query included) and 4 KV heads of 4608/36 = 128:
    # 2 (K and V) · 4 · 128 elements per token; past 4k the cache stops growing
    per_token = 2 * 4 * 128 * BF16
    assert kv_bytes(compare("starcoder2-7b")) == [32 * 4096 * per_token, 32 * 4096 * per_token]


def test_starcoder2_biases_plain_gelu_layernorm_and_params():
    s = imported(config("starcoder2-7b"))
    att = s.layer_groups[0].attention
    assert (att.qkv_bias, att.o_bias, s.ffn.gated, s.ffn.bias, s.norm, s.tie_embeddings) == (True, True, False, True, "layernorm", True)
    d, f, n_h, n_kv, d_h, v, n = 4608, 18432, 36, 4, 128, 49152, 32
    layer = (d * n_h * d_h + n_h * d_h) + 2 * (d * n_kv * d_h + n_kv * d_h) + (n_h * d_h * d + d)  # q, k, v, o with bias
    layer += (d * f + f) + (f * d + d)  # c_fc, c_proj with bias: no gate
    layer += 2 * 2 * d  # input and post-attention LayerNorm: weight and bias
    want = v * d + n * layer + 2 * d  # tied embedding, final LayerNorm
    assert compare("starcoder2-7b")[0]["params_total"] == want


def test_starcoder2_missing_kv_heads_gets_the_config_default_2():
    # the trap: Starcoder2Config defaults num_key_value_heads to 2, not to num_attention_heads
    cfg = {k: v for k, v in config("starcoder2-7b").items() if k != "num_key_value_heads"}
    assert imported(cfg).layer_groups[0].attention.n_kv_heads == 2


# ---------------------------------------------------------------- phi3


def test_phi3_mini_4k_window_is_2047_keys_not_2048():
    # sliding_window 2047 on every layer: masking_utils keeps kv_idx > q_idx - 2047, 2047 keys with the query;
    # 32 layers, 32 KV heads (MHA) of 3072/32 = 96
    per_token = 2 * 32 * 96 * BF16
    rows = compare("phi-3-mini-4k-instruct")
    assert kv_bytes(rows) == [32 * 2047 * per_token] * 2
    assert rows[0]["sliding_window"] == 2047


def test_phi35_mini_window_beyond_max_context_is_left_out():
    # sliding_window 262144 >= max_position_embeddings 131072: never applies; every layer holds the whole context
    per_token = 2 * 32 * 96 * BF16
    assert kv_bytes(compare("phi-3.5-mini-instruct")) == [32 * ctx * per_token for ctx in (4 * K, 128 * K)]
    s = imported(config("phi-3.5-mini-instruct"))
    assert s.layer_groups[0].sliding_window is None and "262144" in s.notes


def test_phi3_fused_qkv_has_no_bias_whatever_attention_bias_says():
    cfg = {**config("phi-3-mini-4k-instruct"), "attention_bias": True, "num_key_value_heads": 8}
    att = imported(cfg).layer_groups[0].attention
    # qkv_proj is n_h·d_h + 2·n_kv·d_h wide: num_key_value_heads is honoured, biases are not
    assert (att.n_kv_heads, att.qkv_bias, att.o_bias) == (8, False, False)


# ---------------------------------------------------------------- olmo2 / olmo3


@pytest.mark.parametrize("name, n_layers, n_kv, d_h", [
    ("olmo-2-1124-7b", 32, 32, 4096 // 32),  # MHA
    ("olmo-2-0325-32b", 64, 8, 5120 // 40),  # GQA
])
def test_olmo2_cache_full_attention(name, n_layers, n_kv, d_h):
    assert kv_bytes(compare(name)) == [n_layers * ctx * 2 * n_kv * d_h * BF16 for ctx in (4 * K, 128 * K)]


def test_olmo2_has_no_window_whatever_sliding_window_says():
    # a review: a sliding_window key put a window on every layer; Olmo2Config has none and Olmo2Model builds only
    # the causal mask (SGLang's olmo2.py windows only the layers a layer_types list names sliding)
    s = imported({**config("olmo-2-1124-7b"), "sliding_window": 1024})
    assert [g.sliding_window for g in s.layer_groups] == [None]
    assert "sliding_window 1024 ignored: OLMo 2's attention has no window" in s.notes


def test_olmo2_whole_projection_qk_norm_counts_the_whole_projection():
    s = imported(config("olmo-2-0325-32b"))
    att = s.layer_groups[0].attention
    assert att.qk_norm and att.qk_norm_width == "projection"
    from kvcalc.costs.params import param_counts
    # q_norm of n_h·d_h = 40·128 and k_norm of n_kv·d_h = 8·128 weights, in each of 64 layers
    assert param_counts(s).breakdown["attn/norms"] == 64 * (40 + 8) * 128


def test_olmo3_layer_types_and_default_pattern(tmp_path):
    # No public OLMo 3 config was found to copy: this is the OLMo 2 7B file with OLMo 3's keys set in the test
    # (model_type, a 65,536-token context so that the 4096 window applies).
    base = {**config("olmo-2-1124-7b"), "model_type": "olmo3", "max_position_embeddings": 65536, "sliding_window": 4096}
    # absent layer_types: Olmo3Config makes layer i full when (i + 1) % 4 == 0, sliding otherwise
    full = [g.layers for g in imported(base).layer_groups if g.sliding_window is None]
    assert full == ["3,7,11,15,19,23,27,31"]
    # given layer_types win: here 16 sliding layers hold 4096 keys (the query included), 16 full layers hold ctx
    types = ["full_attention" if i % 2 else "sliding_attention" for i in range(32)]
    path = tmp_path / "olmo3.json"
    path.write_text(json.dumps({**base, "layer_types": types}))
    rows = json.loads(run("compare", path, "--ctx", "4k,128k", "-f", "json").stdout)
    per_token = 2 * 32 * 128 * BF16
    assert kv_bytes(rows) == [32 * 4096 * per_token, (16 * 4096 + 16 * 128 * K) * per_token]


# ---------------------------------------------------------------- glm_moe_dsa (GLM-5)


def test_glm5_cache_latent_rope_key_and_indexer_key():
    # MLA on all 78 layers: the latent kv_lora_rank 512 + the RoPE key qk_rope_head_dim 64, plus the indexer's key
    # index_head_dim 128 (every layer "full": no index_topk_freq); head_dim 64 and num_key_value_heads 64 are decoys
    per_token = (512 + 64 + 128) * BF16
    assert kv_bytes(compare("glm-5")) == [78 * ctx * per_token for ctx in (4 * K, 128 * K)]


def test_glm5_parameters_written_out_from_the_config():
    d, v, n, h = 6144, 154880, 78, 64
    q_lora, kv_lora, nope, rope, d_v = 2048, 512, 192, 64, 256
    attn = d * q_lora + q_lora + q_lora * h * (nope + rope)  # q_a_proj, q_a_layernorm, q_b_proj
    attn += d * (kv_lora + rope) + kv_lora + kv_lora * h * (nope + d_v)  # kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj
    attn += h * d_v * d  # o_proj
    i_h, i_d = 32, 128
    attn += q_lora * i_h * i_d + d * i_d + 2 * i_d + d * i_h  # indexer wq_b, wk, k_norm (LayerNorm), weights_proj
    dense = 3 * d * 12288  # first_k_dense_replace 3 layers of intermediate_size
    moe = 256 * 3 * d * 2048 + 1 * 3 * d * 2048 + d * 256 + 256  # routed, shared, router, e_score_correction_bias
    want = 2 * v * d + n * (attn + 2 * d) + 3 * dense + (n - 3) * moe + d  # untied; 2 norms a layer; final norm
    got = compare("glm-5")[0]["params_total"]
    assert got == want
    assert abs(got / 744e9 - 1) < 0.03  # zai-org/GLM-5 model card: 744B parameters (40B active)


def test_glm5_shared_indexer_layers_are_refused_naming_the_need(tmp_path):
    # GLM-5.2-style configs: index_topk_freq 4 makes most layers reuse another layer's top-k (no indexer cache)
    path = tmp_path / "glm.json"
    path.write_text(json.dumps({**config("glm-5"), "index_topk_freq": 4, "index_skip_topk_offset": 3}))
    res = run("compare", path, ok=False)
    assert res.exit_code != 0 and "shared" in res.stderr


# ---------------------------------------------------------------- qwen3_vl


def test_qwen3_vl_8b_text_config_cache_and_tie_from_top_level():
    # text_config: 36 layers, 8 KV heads of head_dim 128, full attention everywhere
    assert kv_bytes(compare("qwen3-vl-8b-instruct")) == [36 * ctx * 2 * 8 * 128 * BF16 for ctx in (4 * K, 128 * K)]
    s = imported(config("qwen3-vl-8b-instruct"))
    assert s.tie_embeddings is False and s.layer_groups[0].attention.qk_norm  # top-level key; Qwen3's per-head norm
    flipped = {**config("qwen3-vl-8b-instruct"), "tie_word_embeddings": True}
    assert imported(flipped).tie_embeddings is True  # the top-level key is the one read


def test_qwen3_vl_moe_30b_a3b():
    # 48 layers, 4 KV heads of 128; 128 experts of moe_intermediate_size 768, top 8, on every layer (step 1)
    assert kv_bytes(compare("qwen3-vl-30b-a3b-instruct")) == [48 * ctx * 2 * 4 * 128 * BF16 for ctx in (4 * K, 128 * K)]
    s = imported(config("qwen3-vl-30b-a3b-instruct"))
    assert (s.ffn.n_routed_experts, s.ffn.n_experts_per_tok, s.ffn.moe_d_ff) == (128, 8, 768)


# ---------------------------------------------------------------- minimax_m2


def test_minimax_m25_full_attention_cache():
    # no window on any layer (MiniMaxM2Model: "No sliding window"): 62 layers, 8 KV heads of head_dim 128
    assert kv_bytes(compare("minimax-m2.5")) == [62 * ctx * 2 * 8 * 128 * BF16 for ctx in (4 * K, 128 * K)]


def test_minimax_m25_parameters_written_out():
    d, v, n, h, kv, d_h, e, f = 3072, 200064, 62, 48, 8, 128, 256, 1536
    attn = d * h * d_h + 2 * d * kv * d_h + h * d_h * d  # q, k, v, o: no bias
    attn += (h + kv) * d_h  # q_norm and k_norm over the whole projection
    moe = e * 3 * d * f + d * e + e  # 256 gated experts of intermediate_size, router, e_score_correction_bias
    want = 2 * v * d + n * (attn + moe + 2 * d) + d  # untied embedding and head; 2 norms a layer; final norm
    rows = compare("minimax-m2.5")
    assert rows[0]["params_total"] == want
    assert abs(want / 230e9 - 1) < 0.03  # MiniMaxAI/MiniMax-M2 model card: 230B total parameters, 10B active


def test_minimax_m2_qk_norm_noted_and_window_refused_to_apply():
    s = imported({**config("minimax-m2.5"), "sliding_window": 4096})
    att = s.layer_groups[0].attention
    assert s.layer_groups[0].sliding_window is None and att.qk_norm and att.qk_norm_width == "projection"


@pytest.mark.parametrize("keys", [{"index_topk_freq": 2}, {"index_topk_pattern": "FS" * 30 + "F"},
                                  {"indexer_types": ["full", "shared"] * 30 + ["full"]}])
def test_deepseek_v32_shared_indexer_layers_are_refused_as_glm5s(keys, tmp_path):
    # a review: vLLM's deepseek_v32 attention builds no indexer, nor its cache, on the layers that
    # compute_skip_topk_layers names (indexer_types, index_topk_pattern, or index_topk_freq with
    # index_skip_topk_offset 2: layers 2, 4, ..., 60 of 61 at freq 2); the importer counted an indexer on every layer
    # (85,888 bytes a token in bf16, where 78,208 = 61 · 1,152 + 31 · 256 is held). Refused, as GLM-5's are
    path = tmp_path / "dsv32.json"
    path.write_text(json.dumps({**json.loads((REFERENCE / "models-2026" / "deepseek-v3.2.json").read_text()), **keys}))
    res = run("compare", path, ok=False)
    assert res.exit_code == 1 and "'shared' layers reuse another layer's top-k without an indexer" in res.stderr
    # every layer full (freq 1, the default) imports as before
    path.write_text(json.dumps({**json.loads((REFERENCE / "models-2026" / "deepseek-v3.2.json").read_text()),
                                "index_topk_freq": 1}))
    assert run("compare", path).exit_code == 0
