"""A key that config.json leaves out takes its transformers config class's default, not a generic rule: real configs
from tests/data/reference with one key removed (or use_sliding_window turned on) go through `kvcalc compare`, and the
cache is checked against the figure written out from the class default (each configuration_<model_type>.py; see
kvcalc.hf.common.CONFIG_DEFAULTS). Where the real file's value equals the class default, leaving the key out must
change nothing at all."""

from __future__ import annotations

import json

import pytest

from conftest import REFERENCE, run

K = 1024
CTX = 32 * K
BF16 = 2


def config(path: str) -> dict:
    return json.loads((REFERENCE / path).read_text())


def without(cfg: dict, *keys: str, **changes) -> dict:
    """A copy of `cfg` without `keys`, with `changes`; both go into text_config when the config nests one."""
    out = json.loads(json.dumps(cfg))
    inner = out["text_config"] if isinstance(out.get("text_config"), dict) else out
    for key in keys:
        inner.pop(key)
    inner.update(changes)
    return out


def row(cfg: dict, tmp_path, name: str = "m") -> dict:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(cfg))
    rows = json.loads(run("compare", str(path), "--ctx", "32k", "-f", "json").stdout)
    assert len(rows) == 1
    return rows[0]


def kv_per_token(n_kv: int, head_dim: int, layers: int) -> int:
    """2 (K and V) · n_kv · d_h bytes in bf16, per token, over `layers` layers."""
    return 2 * n_kv * head_dim * BF16 * layers


# ------------------------------------------------------------------ num_key_value_heads left out

@pytest.mark.parametrize(("path", "default", "head_dim", "layers"), [
    ("models/qwen2.5-72b-instruct.json", 32, 128, 80),  # Qwen2Config: num_key_value_heads 32
    ("models/mistral-7b-v0.1.json", 8, 128, 32),  # MistralConfig: 8
    ("models/mixtral-8x7b-v0.1.json", 8, 128, 32),  # MixtralConfig: 8
])
def test_missing_kv_heads_take_the_class_default(tmp_path, path, default, head_dim, layers):
    r = row(without(config(path), "num_key_value_heads"), tmp_path)
    # every layer global at 32k (Mistral's 4096 window caps its layers: checked below)
    window = 4096 if path.startswith("models/mistral") else CTX
    assert r["kv_cache_bytes"] == kv_per_token(default, head_dim, layers) * min(window, CTX)


def test_qwen2_without_kv_heads_is_not_mha(tmp_path):
    # Qwen2.5-72B: 64 query heads; transformers' Qwen2Config gives 32 KV heads, not 64 (MHA):
    # 2 · 32 · 128 · 80 · 2 = 1,310,720 bytes a token
    r = row(without(config("models/qwen2.5-72b-instruct.json"), "num_key_value_heads"), tmp_path)
    assert r["kv_bytes_per_token"] == 1_310_720
    assert r["kv_cache_bytes"] == 1_310_720 * CTX


def test_an_explicit_null_still_means_one_kv_head_per_query_head(tmp_path):
    # Qwen2Config.__post_init__: num_key_value_heads None -> num_attention_heads (64): MHA
    r = row(without(config("models/qwen2.5-72b-instruct.json"), num_key_value_heads=None), tmp_path)
    assert r["kv_bytes_per_token"] == kv_per_token(64, 128, 80)


# ------------------------------------------------------------------ keys whose default equals the real file's value

@pytest.mark.slow
@pytest.mark.parametrize(("path", "keys"), [
    ("models/mistral-7b-v0.1.json", ("sliding_window",)),  # MistralConfig: 4096, as Mistral-7B-v0.1
    ("models/mistral-7b-v0.1.json", ("num_key_value_heads",)),  # 8
    ("models/mixtral-8x7b-v0.1.json", ("num_key_value_heads",)),  # 8
    ("models-2026/gpt-oss-20b.json", ("num_key_value_heads", "head_dim", "sliding_window", "attention_bias")),
    ("models-2026/llama-4-scout-17b-16e-instruct.json", ("num_key_value_heads", "head_dim", "attention_chunk_size")),
    ("models-2026/jamba-v0.1.json", ("num_key_value_heads",)),  # JambaConfig: 8
    ("models-2026/nemotron-h-56b-base-8k.json", ("num_key_value_heads",)),  # NemotronHConfig: 8
    ("configs-extra-4/command-r7b-12-2024.json", ("sliding_window",)),  # Cohere2Config: 4096
    # DeepseekV3Config: q_lora_rank 1536, 3 dense layers first, 1 shared expert, the router's bias (noaux_tc)
    ("models/deepseek-v3.json", ("q_lora_rank", "first_k_dense_replace", "n_shared_experts", "topk_method")),
    ("models/deepseek-v2.json", ("q_lora_rank",)),  # DeepseekV2Config: 1536
    # DeepSeek-V3.2: V3's and the indexer's (index_topk 2048, index_n_heads 64, index_head_dim 128)
    ("models-2026/deepseek-v3.2.json", ("q_lora_rank", "first_k_dense_replace", "n_shared_experts", "topk_method",
                                        "index_topk", "index_n_heads", "index_head_dim")),
    # GlmMoeDsaConfig: q_lora_rank 2048, index_n_heads 32
    ("configs-extra/glm-5.json", ("q_lora_rank", "first_k_dense_replace", "n_shared_experts", "topk_method",
                                  "index_topk", "index_n_heads", "index_head_dim")),
    ("configs-extra-6/minicpm3-4b.json", ("q_lora_rank",)),  # MiniCPM3Config: 768
    ("configs-extra/minimax-m2.5.json", ("head_dim", "num_key_value_heads")),  # MiniMaxM2Config: 128, 8
    ("models-2026/minimax-m1.json", ("num_key_value_heads",)),  # MiniMax's MiniMaxM1Config: 8
    ("configs-extra-5/flux2-dev-mistral-small-3.json", ("num_key_value_heads",)),  # text_config: MistralConfig's 8
    ("configs-extra/qwen3-vl-8b-instruct.json", ("head_dim",)),  # Qwen3VLTextConfig: 128
])
def test_leaving_out_a_key_equal_to_its_default_changes_nothing(tmp_path, path, keys):
    real = row(config(path), tmp_path, "real")
    left_out = row(without(config(path), *keys), tmp_path, "left-out")
    assert {k: v for k, v in left_out.items() if k != "model"} == {k: v for k, v in real.items() if k != "model"}


def test_jamba_without_its_layer_offsets_takes_jambaconfigs(tmp_path):
    # a review: the offsets defaulted to 0 (attention on layers 0, 8, 16, 24, 32 of 36: 5 layers, 5.00 GiB at 256k);
    # JambaConfig's are attn_layer_offset 4 and expert_layer_offset 1 (layers_block_type, layers_num_experts)
    from kvcalc.hf import import_config

    real = config("models-2026/jamba-v0.1.json")
    assert (real["attn_layer_offset"], real["expert_layer_offset"]) == (4, 1)
    deeper = without(real, "attn_layer_offset", "expert_layer_offset", num_hidden_layers=36)
    data = import_config(deeper, "t", "m").data
    assert "attn_layer_offset 4, expert_layer_offset 1" in data["notes"]
    groups = {(g["attention"]["kind"], g.get("ffn", {}).get("kind")): g["layers"] for g in data["layer_groups"]}
    assert groups[("gqa", None)] == "4,12,20,28"  # attention layers, each with the dense MLP
    assert groups[("mamba", "moe")] == ",".join(str(i) for i in range(1, 36, 2))  # experts on the odd layers
    # 4 attention layers of 2·8·128 elements at 256k, bf16: 4 GiB (5 GiB with the offsets 0)
    path = tmp_path / "jamba36.json"
    path.write_text(json.dumps(deeper))
    out = json.loads(run("compare", str(path), "--ctx", "256k", "-f", "json").stdout)[0]
    assert out["kv_cache_bytes"] == 4 * 2 * 8 * 128 * BF16 * 256 * K == 4 * 2**30
    # the real 32-layer file, its offsets left out: the same model
    assert row(without(real, "attn_layer_offset", "expert_layer_offset"), tmp_path, "left-out") == \
        row(real, tmp_path, "left-out")
    with_null = {**real, "attn_layer_offset": None}
    path.write_text(json.dumps(with_null))
    res = run("compare", str(path), ok=False)
    assert res.exit_code == 1 and "attn_layer_offset: must be a whole number below attn_layer_period (8), got null" in res.stderr


@pytest.mark.parametrize(("path", "keys", "note"), [
    ("models-2026/gpt-oss-20b.json", ("head_dim", "attention_bias"),
     "GptOssConfig defaults filled in for: head_dim 64, attention_bias true"),
    # a review: these four filled their defaults with no word in the notes
    ("configs-extra/starcoder2-7b.json", ("num_key_value_heads",), "Starcoder2Config defaults filled in for: num_key_value_heads 2"),
    ("configs-extra-2/glm-4.7.json", ("first_k_dense_replace", "n_shared_experts"),
     "Glm4MoeConfig defaults filled in for: first_k_dense_replace 1, n_shared_experts 1"),
    ("configs-extra-2/qwen3.5-35b-a3b.json", ("num_key_value_heads",), "Qwen3_5MoeTextConfig defaults filled in for: num_key_value_heads 2"),
    ("models/deepseek-v2.json", ("n_shared_experts",), "n_shared_experts absent: no shared expert, as DeepSeek's own code"),
])
def test_the_notes_name_the_defaults_filled_in(path, keys, note):
    from kvcalc.hf import import_config

    assert note in import_config(without(config(path), *keys), "t", "m").data["notes"]
    assert note not in (import_config(config(path), "t", "m").data.get("notes") or "")


# ------------------------------------------------------------------ head_dim left out

def test_gpt_oss_head_dim_default_is_64_not_hidden_over_heads(tmp_path):
    # GptOssConfig head_dim 64 (hidden 2880 / 64 heads would be 45): with 8 KV heads and 24 layers,
    # 2 · 8 · 64 · 24 · 2 = 49,152 bytes a token
    r = row(without(config("models-2026/gpt-oss-20b.json"), "head_dim"), tmp_path)
    assert r["kv_bytes_per_token"] == 49_152


def test_gpt_oss_attention_bias_default_is_true():
    from kvcalc.hf import spec_from_config

    spec = spec_from_config(without(config("models-2026/gpt-oss-20b.json"), "attention_bias"), "t", "m")[0]
    att = spec.layer_groups[0].attention
    assert att.qkv_bias and att.o_bias


# ------------------------------------------------------------------ windows left out

def test_gpt_oss_without_sliding_window_keeps_its_128_token_window(tmp_path):
    # GptOssConfig sliding_window 128 on the even layers: 12 · 128 + 12 · 32768 tokens of 2 · 8 · 64 · 2 = 2,048 bytes
    r = row(without(config("models-2026/gpt-oss-20b.json"), "sliding_window"), tmp_path)
    assert r["kv_cache_bytes"] == (12 * 128 + 12 * CTX) * 2048 == 808_452_096


def test_llama4_without_a_chunk_size_chunks_by_8192(tmp_path):
    # Llama4TextConfig attention_chunk_size 8192 on the 36 RoPE layers, full attention on the 12 NoPE layers,
    # 2 · 8 · 128 · 2 = 4,096 bytes a token and layer: 36 · 8192 · 4096 + 12 · 32768 · 4096
    r = row(without(config("models-2026/llama-4-scout-17b-16e-instruct.json"), "attention_chunk_size"), tmp_path)
    assert r["kv_cache_bytes"] == 36 * 8192 * 4096 + 12 * CTX * 4096 == 2_818_572_288


def test_qwen2_sliding_window_defaults_apply_when_turned_on(tmp_path):
    # use_sliding_window true with sliding_window and max_window_layers left out: Qwen2Config's 4096 and 28, so
    # layers 28..79 slide: 28 · 32768 + 52 · 4096 tokens of 2 · 8 · 128 · 2 = 4,096 bytes
    cfg = without(config("models/qwen2.5-72b-instruct.json"), "sliding_window", "max_window_layers",
                  use_sliding_window=True)
    r = row(cfg, tmp_path)
    assert r["kv_cache_bytes"] == (28 * CTX + 52 * 4096) * 4096 == 4_630_511_616


def test_qwen2_max_window_layers_given_window_left_out(tmp_path):
    # max_window_layers 70 from the file, sliding_window 4096 by default: 70 · 32768 + 10 · 4096 tokens
    cfg = without(config("models/qwen2.5-72b-instruct.json"), "sliding_window", use_sliding_window=True)
    assert row(cfg, tmp_path)["kv_cache_bytes"] == (70 * CTX + 10 * 4096) * 4096 == 9_563_013_120


# Qwen3 configs from the published files' numbers (FACTS.md §1.1: Qwen3-8B d 4096, L 36, h 32, kv 8, hd 128,
# I 12288, V 151936, ctx 40960; Qwen3-30B-A3B d 2048, L 48, h 32, kv 4, hd 128, 128 experts, top-8, moe_I 768).
QWEN3_8B = {"model_type": "qwen3", "hidden_size": 4096, "num_hidden_layers": 36, "num_attention_heads": 32,
            "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 12288, "vocab_size": 151936,
            "max_position_embeddings": 40960, "tie_word_embeddings": False, "use_sliding_window": False,
            "sliding_window": None, "max_window_layers": 36}
QWEN3_30B_A3B = {"model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 32,
                 "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144, "vocab_size": 151936,
                 "max_position_embeddings": 40960, "tie_word_embeddings": False, "use_sliding_window": False,
                 "sliding_window": None, "max_window_layers": 48, "num_experts": 128, "num_experts_per_tok": 8,
                 "moe_intermediate_size": 768, "decoder_sparse_step": 1, "mlp_only_layers": []}


def test_qwen3_head_dim_default_is_128(tmp_path):
    # Qwen3Config head_dim 128, whatever hidden / heads is (5120 / 64 = 80 for Qwen3-32B's shape):
    # 2 · 8 · 128 · 64 · 2 = 262,144 bytes a token
    cfg = without(QWEN3_8B, "head_dim", hidden_size=5120, num_attention_heads=64, num_hidden_layers=64)
    assert row(cfg, tmp_path)["kv_bytes_per_token"] == 262_144


def test_qwen3_moe_kv_heads_default_is_4(tmp_path):
    # Qwen3MoeConfig num_key_value_heads 4: 2 · 4 · 128 · 48 · 2 = 98,304 bytes a token
    assert row(without(QWEN3_30B_A3B, "num_key_value_heads"), tmp_path)["kv_bytes_per_token"] == 98_304


def test_qwen3_moe_sliding_window_covers_every_layer(tmp_path):
    # Qwen3MoeAttention reads config.sliding_window on every layer (no max_window_layers rule):
    # 48 layers · 4096 tokens · 2 · 4 · 128 · 2 = 402,653,184 bytes at 32k
    cfg = without(QWEN3_30B_A3B, use_sliding_window=True, sliding_window=4096)
    assert row(cfg, tmp_path)["kv_cache_bytes"] == 48 * 4096 * 2048 == 402_653_184
    # left out: the class default 4096, the same cache
    cfg = without(QWEN3_30B_A3B, "sliding_window", use_sliding_window=True)
    assert row(cfg, tmp_path)["kv_cache_bytes"] == 402_653_184


def test_qwen_windows_stay_off_without_use_sliding_window(tmp_path):
    # use_sliding_window false (the real files): no layer slides, whatever max_window_layers says
    assert row(QWEN3_30B_A3B, tmp_path)["kv_cache_bytes"] == 48 * CTX * 2048
    assert row(without(QWEN3_8B, "sliding_window", "max_window_layers"), tmp_path)["kv_cache_bytes"] == 36 * CTX * 4096


def test_nemotron_h_head_dim_default_when_neither_key_is_given():
    from kvcalc.hf import spec_from_config

    spec = spec_from_config(without(config("models-2026/nemotron-h-56b-base-8k.json"), "attention_head_dim"), "t", "m")[0]
    heads = {g.attention.head_dim for g in spec.layer_groups if getattr(g.attention, "kind", None) == "gqa"}
    assert heads == {128}  # NemotronHConfig head_dim 128


# ------------------------------------------------------------------ defaults that differ from the real files' values

def test_deepseek_v32_without_indexer_keys_keeps_its_indexer(tmp_path):
    # DeepseekV32Config's indexer defaults (2048 / 64 / 128): the model stays DeepSeek Sparse Attention, caching the
    # 128-wide indexer key beside the latent: 61 · (576 + 128) · 2 = 85,888 bytes a token (70,272 without it)
    cfg = without(config("models-2026/deepseek-v3.2.json"), "index_topk", "index_n_heads", "index_head_dim")
    assert row(cfg, tmp_path)["kv_bytes_per_token"] == 61 * (576 + 128) * 2 == 85_888


def test_qwen3_vl_moe_text_kv_heads_default_is_16(tmp_path):
    # Qwen3VLMoeTextConfig num_key_value_heads 16 (not Qwen3MoeConfig's 4): 2 · 16 · 128 · 48 · 2 = 393,216
    cfg = without(config("configs-extra/qwen3-vl-30b-a3b-instruct.json"), "num_key_value_heads")
    assert row(cfg, tmp_path)["kv_bytes_per_token"] == 393_216


def test_qwen3_vl_text_has_no_window(tmp_path):
    # neither Qwen3-VL text config has a window (Qwen3VLMoeTextConfig sets sliding_window None): every layer global
    cfg = without(config("configs-extra/qwen3-vl-30b-a3b-instruct.json"), use_sliding_window=True, sliding_window=4096)
    assert row(cfg, tmp_path)["kv_cache_bytes"] == 2 * 4 * 128 * 48 * 2 * CTX


def test_mistral3_text_config_takes_mistrals_window_default(tmp_path):
    # Mistral Small 3's text_config (a MistralConfig) with sliding_window left out, not null: 4096 on all 40 layers of
    # 2 · 8 · 128 · 2 = 4,096 bytes a token
    cfg = without(config("configs-extra-5/flux2-dev-mistral-small-3.json"), "sliding_window")
    assert row(cfg, tmp_path)["kv_cache_bytes"] == 40 * 4096 * 4096 == 671_088_640


def test_openelm_embeddings_untied_by_default(tmp_path):
    # Apple's OpenELMConfig: share_input_output_layers False, so the LM head is a matrix of its own: vocab 32,000 ×
    # model_dim 1,280 = 40,960,000 parameters more
    real = row(config("configs-extra-4/openelm-270m.json"), tmp_path, "real")
    untied = row(without(config("configs-extra-4/openelm-270m.json"), "share_input_output_layers"), tmp_path, "untied")
    assert untied["params_total"] - real["params_total"] == 32_000 * 1_280


@pytest.mark.parametrize(("rope", "context", "noted"), [
    ({"type": "linear", "factor": 4.0}, 4 * 8192, True), ({"rope_type": "dynamic", "factor": 2}, 2 * 8192, True),
    # types whose factor max_position_embeddings already includes (vLLM _get_and_verify_max_len): unchanged
    ({"rope_type": "llama3", "factor": 8.0}, 8192, False), ({"type": "yarn", "factor": 4}, 8192, False),
    ({"rope_type": "default"}, 8192, False),
    ({"rope_type": "default", "factor": 2.0}, 2 * 8192, True),  # vLLM multiplies by a factor beside 'default' too
    ({"type": "linear", "factor": 0.5}, 4096, True),  # vLLM multiplies by any factor, one below 1 too
    # per layer type: vLLM takes the last factor of a stretching type
    ({"full_attention": {"rope_type": "linear", "factor": 2.0}, "sliding_attention": {"rope_type": "linear", "factor": 4.0}},
     4 * 8192, True),
    ({"type": "linear", "factor": 1.0001}, 8192, True),  # 8,192.8 truncated, as vLLM's int(derived_max_model_len)
    ({"type": "linear", "factor": 1.0}, 8192, False),  # a factor of 1 stretches nothing: no note, no Source change
])
def test_a_linear_or_dynamic_rope_scaling_stretches_the_context(tmp_path, rope, context, noted):
    # a gap left open: vLLM multiplies max_model_len by a linear or dynamic RoPE factor (the positions stretched);
    # kvcalc kept max_position_embeddings, so its 'exceeds' warning and fit's context cap were a factor short
    cfg = {**config("models/llama-3-8b.json"), "rope_scaling": rope}
    from kvcalc.hf import import_config

    imported = import_config(cfg, "t", "m")
    data = imported.data
    assert data["max_context"] == context
    assert ("as vLLM derives max_model_len" in (data.get("notes") or "")) == noted
    # show's Source column names the factor beside max_position_embeddings (a hardening review: it named that alone)
    assert imported.keys["max_context"] == "max_position_embeddings" + (" × rope_scaling factor" if noted else "")
    # transformers 5 writes the same under rope_parameters (a mutation review: that key went untried)
    moved = {k: v for k, v in cfg.items() if k != "rope_scaling"} | {"rope_parameters": rope}
    assert import_config(moved, "t", "m").data["max_context"] == context


def test_a_rope_factor_multiplies_in_floats_as_the_engines_do():
    # an exactness review: vLLM (derived_max_model_len *= scaling_factor; int()) and SGLang (int(factor * val))
    # multiply in floats, where 3,000 × 2.3 is 6,899.999...: 6,899 tokens, not the exact decimal's 6,900
    from kvcalc.hf import import_config

    cfg = {**config("models/llama-3-8b.json"), "max_position_embeddings": 3000,
           "rope_scaling": {"type": "linear", "factor": 2.3}}
    assert 3000 * 2.3 < 6900 and import_config(cfg, "t", "m").data["max_context"] == 6899


def test_longrope_notes_vllms_default_max_model_len():
    # a vLLM sizing review: vLLM 0.34.0 serves a LongRoPE model at original_max_position_embeddings unless given
    # --max-model-len (config/model.py _get_and_verify_max_len); kvcalc keeps max_position_embeddings and says so
    from kvcalc.hf import import_config

    cfg = config("configs-extra/phi-3.5-mini-instruct.json")
    data = import_config(cfg, "t", "m").data
    assert data["max_context"] == 131_072 and ("LongRoPE: vLLM's default max_model_len is original_max_position_"
                                                "embeddings, 4,096 tokens (give it --max-model-len 131072") in data["notes"]
    assert data["served_context"] == 4096  # the spec keeps it: fit under --engine vllm says so
    legacy = {**cfg, "rope_scaling": {**cfg["rope_scaling"], "type": "su"}}  # vLLM reads 'su' as longrope
    assert "LongRoPE" in import_config(legacy, "t", "m").data["notes"]
    same = {**cfg, "original_max_position_embeddings": cfg["max_position_embeddings"]}  # vLLM's default is the maximum
    assert "LongRoPE" not in (import_config(same, "t", "m").data.get("notes") or "")
    assert "served_context" not in import_config(same, "t", "m").data
    short = config("configs-extra/phi-3-mini-4k-instruct.json")  # no LongRoPE: no note
    assert "LongRoPE" not in (import_config(short, "t", "m").data.get("notes") or "")


def test_a_rope_type_that_is_not_a_name_is_refused(tmp_path):
    # the fuzz suite: rope_type [] raised a TypeError (unhashable list) through the rope_scaling check
    cfg = {**config("models/llama-3.1-405b.json")}
    cfg["rope_scaling"] = {**cfg["rope_scaling"], "rope_type": []}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    res = run("compare", str(path), ok=False)
    assert res.exit_code == 1 and "rope_scaling: its rope_type must be a name (linear, yarn, ...), got []" in res.stderr
    cfg["rope_scaling"] = {"type": "linear", "factor": "4"}
    path.write_text(json.dumps(cfg))
    res = run("compare", str(path), ok=False)
    assert res.exit_code == 1 and "rope_scaling: its factor must be a positive number, got '4'" in res.stderr


@pytest.mark.parametrize(("rope", "message"), [
    # a misspelt or other-cased type multiplied max_context by its factor (vLLM does, then refuses the type): 163,840
    # × 40 turned the over-length warnings off
    ({"type": "YaRN", "factor": 40}, "rope_scaling: rope_type 'YaRN' is not one vLLM builds ("),
    ({"rope_type": "llama-3", "factor": 8.0}, "rope_scaling: rope_type 'llama-3' is not one vLLM builds ("),
    ("yarn", "rope_scaling: must be a mapping (rope_type, factor, ...), got 'yarn'"),
    ({"full_attention": {"rope_type": "linear", "factor": 2.0}, "x": 5},
     "rope_scaling: must be one RoPE mapping, or one mapping per layer type, got a mix"),
    # a factor that takes the context out of range: named, not max_position_embeddings
    ({"type": "linear", "factor": 1e-300}, "rope_scaling: factor 1e-300 stretches max_position_embeddings 8,192 to 0 "
                                           "tokens, outside 1..2^40"),
    ({"type": "linear", "factor": 1e300}, "rope_scaling: factor 1e+300 stretches max_position_embeddings 8,192 to "),
])
def test_a_rope_scaling_kvcalc_cannot_read_is_refused(rope, message):
    from kvcalc.errors import SpecError
    from kvcalc.hf import import_config

    cfg = {**config("models/llama-3-8b.json"), "rope_scaling": rope}
    with pytest.raises(SpecError) as err:
        import_config(cfg, "t.json", "m")
    assert str(err.value).startswith("t.json: " + message)


def test_served_context_is_noted_under_vllm_and_bounded(tmp_path):
    from conftest import ROOT
    from kvcalc.errors import SpecError
    from kvcalc.spec import load_spec

    res = run("fit", str(REFERENCE / "configs-extra" / "phi-3.5-mini-instruct.json"), "--hardware", "rtx-4090", "--engine",
              "vllm", "--ctx", "8k")
    assert ("note: phi-3.5-mini-instruct: vLLM serves it at 4,096 tokens by default (LongRoPE: "
            "original_max_position_embeddings); contexts past that need its --max-model-len (up to max_context, 131,072)"
            ) in res.stderr
    path = tmp_path / "s.yaml"
    path.write_text((ROOT / "model_specs" / "llama3-8b.yaml").read_text().replace("max_context: 8192",
                                                                                  "max_context: 8192\nserved_context: 9000"))
    with pytest.raises(SpecError, match="served_context: 9,000 is above max_context"):
        load_spec(path)


def test_rope_spellings_vllm_renames_are_read_as_its_own():
    # a mutation review: vLLM reads 'telechat3-yarn' as yarn and 'mrope' as default (patch_rope_parameters), so both
    # import; a LongRoPE original_max_position_embeddings of 4096.0 is vLLM's int() 4,096, true is refused
    from kvcalc.errors import SpecError
    from kvcalc.hf import import_config

    base = config("models/llama-3-8b.json")
    assert import_config({**base, "rope_scaling": {"rope_type": "telechat3-yarn", "factor": 4.0}}, "t", "m").data[
        "max_context"] == 8192  # a YaRN factor is in max_position_embeddings already
    assert import_config({**base, "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}}, "t", "m").data[
        "max_context"] == 8192
    phi = config("configs-extra/phi-3.5-mini-instruct.json")
    assert import_config({**phi, "original_max_position_embeddings": 4096.0}, "t", "m").data["served_context"] == 4096
    with pytest.raises(SpecError, match="original_max_position_embeddings: must be a whole number"):
        import_config({**phi, "original_max_position_embeddings": True}, "t", "m")
    # and a stretch to 2^40 exactly is the largest context kvcalc takes; one token past is refused
    big = {**base, "max_position_embeddings": 2**20, "rope_scaling": {"type": "linear", "factor": float(2**20)}}
    assert import_config(big, "t", "m").data["max_context"] == 2**40
    with pytest.raises(SpecError, match="outside 1..2\\^40"):
        import_config({**big, "max_position_embeddings": 2**20 + 1}, "t", "m")
