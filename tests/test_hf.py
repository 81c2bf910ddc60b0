"""Hugging Face config import: every reference config matches its bundled spec, and each model_type's traps hold."""

from __future__ import annotations

import json

import pytest

from conftest import REFERENCE_MODELS, spec
from kvcalc.costs.cache import kv_cache
from kvcalc.errors import SpecError
from kvcalc.export import spec_yaml
from kvcalc.hf import IMPORTERS, spec_from_config
from kvcalc.registry import load_path
from kvcalc.settings import Settings
from kvcalc.spec import load_spec

# Reference config (tests/data/reference/models) -> the bundled spec of the same model.
REFERENCE_TO_BUNDLED = {
    "llama-3-8b.json": "llama3-8b",
    "llama-3-70b.json": "llama3-70b",
    "llama-3.1-405b.json": "llama3.1-405b",
    "llama-3.2-1b.json": "llama3.2-1b",
    "llama-3.2-3b.json": "llama3.2-3b",
    "gemma-3-1b-it.json": "gemma3-1b",
    "gemma-3-4b-it.text_config.json": "gemma3-4b",
    "gemma-3-12b-it.text_config.json": "gemma3-12b",
    "gemma-3-27b-it.text_config.json": "gemma3-27b",
    "gemma3-resolved/gemma-3-1b-it.json": "gemma3-1b",
    "gemma3-resolved/gemma-3-4b-it.json": "gemma3-4b",
    "gemma3-resolved/gemma-3-12b-it.json": "gemma3-12b",
    "gemma3-resolved/gemma-3-27b-it.json": "gemma3-27b",
    "mistral-7b-v0.1.json": "mistral-7b",
    "mixtral-8x7b-v0.1.json": "mixtral-8x7b",
    "qwen2.5-7b-instruct.json": "qwen2.5-7b",
    "qwen2.5-72b-instruct.json": "qwen2.5-72b",
    "deepseek-v2.json": "deepseek-v2",
    "deepseek-v2-lite.json": "deepseek-v2-lite",
    "deepseek-v3.json": "deepseek-v3",
    "gpt2.json": "gpt2",
    "falcon-7b.json": "falcon-7b",
}
CONTEXTS = (1, 511, 512, 1000, 1024, 4096, 32_768, 131_072, 1 << 20)


def cache_numbers(s, mla_cache="latent"):
    reports = [kv_cache(s, Settings(ctx=c, mla_cache=mla_cache)) for c in CONTEXTS]
    return [(r.bytes_per_token, r.bytes) for r in reports]


def test_every_reference_config_is_mapped():
    models = REFERENCE_MODELS
    found = {str(p.relative_to(models)) for p in models.rglob("*.json")}
    assert found == set(REFERENCE_TO_BUNDLED), "a reference config has no bundled counterpart in this test"


@pytest.mark.slow
@pytest.mark.parametrize("ref, bundled", sorted(REFERENCE_TO_BUNDLED.items()))
def test_reference_config_gives_bundled_numbers(ref, bundled):
    path = REFERENCE_MODELS / ref
    imported = load_path(path)
    assert imported.kind == "hf"
    mine = spec(bundled)
    for layout in ("latent", "expanded"):
        assert cache_numbers(imported.spec, layout) == cache_numbers(mine, layout)
    # the architecture fields agree too, not only the totals
    for field in ("d_model", "n_layers", "vocab_size", "tie_embeddings", "max_context", "ffn", "norm", "norms_per_layer",
                  "learned_positions"):
        assert getattr(imported.spec, field) == getattr(mine, field), field
    assert [(g.layers, g.attention, g.sliding_window) for g in sorted(imported.spec.groups, key=lambda g: g.layers)] == \
           [(g.layers, g.attention, g.sliding_window) for g in sorted(mine.groups, key=lambda g: g.layers)]


@pytest.mark.slow
@pytest.mark.parametrize("ref", sorted(REFERENCE_TO_BUNDLED))
def test_import_then_load_round_trips(ref, tmp_path):
    path = REFERENCE_MODELS / ref
    imported = load_path(path).spec
    out = tmp_path / "spec.yaml"
    out.write_text(spec_yaml(imported, "roundtrip"))
    again = load_spec(out)
    assert again.name == "roundtrip"
    assert cache_numbers(again) == cache_numbers(imported)
    assert cache_numbers(again, "expanded") == cache_numbers(imported, "expanded")


# ---------------------------------------------------------------- the traps, on configs written here


def imported(cfg: dict, name: str = "t"):
    return spec_from_config(cfg, "config.json", name)[0]


LLAMA = {
    "model_type": "llama", "hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8,
    "num_key_value_heads": 2, "intermediate_size": 1024, "vocab_size": 1000, "max_position_embeddings": 8192,
}


def test_qwen2_use_sliding_window_false_disables_window():
    cfg = {**LLAMA, "model_type": "qwen2", "sliding_window": 4096, "use_sliding_window": False, "max_window_layers": 2}
    s = imported(cfg)
    assert all(g.sliding_window is None for g in s.groups)
    assert "use_sliding_window is false" in s.notes
    assert s.groups[0].attention.qkv_bias  # Qwen2 always has q/k/v biases


def test_qwen2_sliding_window_true_applies_from_max_window_layers():
    cfg = {**LLAMA, "model_type": "qwen2", "sliding_window": 1024, "use_sliding_window": True, "max_window_layers": 2}
    s = imported(cfg)
    windows = {layer: g.sliding_window for g in s.groups for layer in g.layers}
    assert windows == {0: None, 1: None, 2: 1024, 3: 1024}


def test_falcon_multi_query_means_one_kv_head():
    # Re-saved Falcon-7B configs carry num_kv_heads 71, ignored when multi_query is true (FACTS.md §1.3, §5.1).
    cfg = {"model_type": "falcon", "hidden_size": 4544, "num_hidden_layers": 32, "num_attention_heads": 71,
           "num_kv_heads": 71, "multi_query": True, "vocab_size": 65024}
    s = imported(cfg)
    assert s.groups[0].attention.kind == "mqa"
    assert kv_cache(s, Settings(ctx=1)).elements_per_token == 32 * 2 * 64  # d_h = 4544 / 71 = 64
    assert "num_kv_heads 71 ignored" in s.notes


def test_falcon_new_decoder_architecture_uses_num_kv_heads():
    cfg = {"model_type": "falcon", "hidden_size": 8192, "num_hidden_layers": 60, "num_attention_heads": 128,
           "num_kv_heads": 8, "new_decoder_architecture": True, "vocab_size": 65024, "max_position_embeddings": 2048}
    s = imported(cfg)
    assert s.groups[0].attention.kind == "gqa" and s.groups[0].attention.n_kv_heads == 8
    # two LayerNorms (ln_attn, ln_mlp), still one all-reduce a layer (vLLM FalconAttention)
    assert s.parallel_attn is True and s.norms_per_layer == 2


def test_falcon_num_ln_in_parallel_attn_one_is_one_layernorm():
    # an audit: Falcon2-11B (new_decoder_architecture, num_ln_in_parallel_attn 1) has one input_layernorm a layer
    # (FalconDecoderLayer); kvcalc counted two, 60 · 2 · 4096 parameters (weight and bias) too many
    from kvcalc.costs.params import param_counts

    cfg = {"model_type": "falcon", "hidden_size": 4096, "num_hidden_layers": 60, "num_attention_heads": 32,
           "num_kv_heads": 8, "new_decoder_architecture": True, "parallel_attn": True, "vocab_size": 65024,
           "ffn_hidden_size": 16384, "max_position_embeddings": 8192}
    one, two = imported({**cfg, "num_ln_in_parallel_attn": 1}), imported(cfg)  # absent: 2 with the new architecture
    assert (one.norms_per_layer, two.norms_per_layer) == (1, 2)
    assert param_counts(two).total - param_counts(one).total == 60 * 2 * 4096


@pytest.mark.parametrize(("keys", "parallel"), [({}, True), ({"parallel_attn": True}, True), ({"parallel_attn": False}, None),
                                                 ({"parallel_attn": "false"}, "refused")])
def test_falcon_parallel_attn_is_read_as_a_json_boolean(keys, parallel):
    cfg = {"model_type": "falcon", "hidden_size": 4544, "num_hidden_layers": 32, "num_attention_heads": 71,
           "multi_query": True, "vocab_size": 65024, **keys}
    if parallel == "refused":
        with pytest.raises(SpecError, match="parallel_attn: must be true or false"):
            imported(cfg)
        return
    s = imported(cfg)
    assert s.parallel_attn is parallel and s.norms_per_layer == (1 if parallel else 2)


def test_gemma3_multimodal_config_nests_text_config():
    path = REFERENCE_MODELS / "gemma-3-27b-it.text_config.json"
    text = json.loads(path.read_text())
    cfg = {"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"], "text_config": text,
           "vision_config": {"hidden_size": 1152}}
    s = imported(cfg)
    assert cache_numbers(s) == cache_numbers(spec("gemma3-27b"))
    assert "text_config" in s.notes


def test_gemma3_defaults_filled_for_sparse_text_config():
    # The 4B text_config omits heads, KV heads and head_dim: defaults 8, 4, 256 apply (FACTS.md §1.2).
    path = REFERENCE_MODELS / "gemma-3-4b-it.text_config.json"
    s = imported(json.loads(path.read_text()))
    att = s.groups[0].attention
    assert (att.n_heads, att.n_kv_heads, s.groups[0].head_dim, s.vocab_size) == (8, 4, 256, 262_208)


def test_layer_types_replace_the_pattern():
    # Newer transformers re-saves give an explicit layer_types list instead of sliding_window_pattern.
    types = ["sliding_attention", "full_attention", "sliding_attention", "sliding_attention"]
    cfg = {**LLAMA, "model_type": "gemma3_text", "head_dim": 64, "sliding_window": 512, "layer_types": types}
    s = imported(cfg)
    windows = {layer: g.sliding_window for g in s.groups for layer in g.layers}
    assert windows == {0: 512, 1: None, 2: 512, 3: 512}


def test_gemma2_alternates_local_and_global():
    cfg = {**LLAMA, "model_type": "gemma2", "num_hidden_layers": 6, "sliding_window": 4096}
    s = imported(cfg)
    windows = {layer: g.sliding_window for g in s.groups for layer in g.layers}
    assert windows == {0: 4096, 1: None, 2: 4096, 3: None, 4: 4096, 5: None}
    assert s.groups[0].head_dim == 256  # Gemma2Config default head_dim, not 512 / 8


def test_head_dim_from_config_wins():
    s = imported({**LLAMA, "head_dim": 32})
    assert s.groups[0].head_dim == 32  # not 512 / 8 = 64
    s = imported({**LLAMA, "head_dim": None})
    assert s.groups[0].head_dim == 64


def test_window_not_below_context_is_left_out():
    s = imported({**LLAMA, "model_type": "mistral", "sliding_window": 8192})
    assert s.groups[0].sliding_window is None and "never applies" in s.notes


@pytest.mark.parametrize("q_lora", [None, 0])
def test_deepseek_q_lora_rank_null_or_zero_means_none(q_lora):
    path = REFERENCE_MODELS / "deepseek-v2-lite.json"
    cfg = {**json.loads(path.read_text()), "q_lora_rank": q_lora}
    assert imported(cfg).groups[0].attention.q_lora_rank is None


def test_deepseek_ignores_num_key_value_heads():
    path = REFERENCE_MODELS / "deepseek-v2.json"
    cfg = {**json.loads(path.read_text()), "num_key_value_heads": 1}
    assert kv_cache(imported(cfg), Settings(ctx=1)).elements_per_token == 60 * 576


def test_qwen3_moe_dense_layers():
    cfg = {**LLAMA, "model_type": "qwen3_moe", "head_dim": 128, "num_experts": 16, "num_experts_per_tok": 2,
           "moe_intermediate_size": 128, "mlp_only_layers": [0], "decoder_sparse_step": 1}
    s = imported(cfg)
    ffn_by_layer = {layer: (g.layers, s.layer_groups[g.index].ffn) for g in s.groups for layer in g.layers}
    assert ffn_by_layer[0][1].kind == "dense" and ffn_by_layer[1][1] is None
    assert s.ffn.kind == "moe" and s.ffn.n_routed_experts == 16
    assert s.groups[0].attention.qk_norm


def test_mixtral_intermediate_size_is_per_expert():
    path = REFERENCE_MODELS / "mixtral-8x7b-v0.1.json"
    s = imported(json.loads(path.read_text()))
    assert (s.ffn.kind, s.ffn.moe_d_ff, s.ffn.n_routed_experts, s.ffn.n_experts_per_tok) == ("moe", 14336, 8, 2)


def test_unsupported_model_type_lists_supported():
    with pytest.raises(SpecError) as info:
        imported({**LLAMA, "model_type": "bert", "type_vocab_size": 2})  # a key a plain decoder does not read
    text = str(info.value)
    assert text.startswith("config.json: model_type: 'bert' is not supported")
    for model_type in ("llama", "gemma3_text", "deepseek_v3", "falcon", "gpt2", "qwen3_moe"):
        assert model_type in text
    assert len(IMPORTERS) >= 13


def test_missing_required_config_field():
    cfg = dict(LLAMA)
    del cfg["hidden_size"]
    with pytest.raises(SpecError, match="config.json: hidden_size: required field is missing"):
        imported(cfg)


def test_wrong_type_in_config_is_a_clear_error():
    with pytest.raises(SpecError, match="config.json: "):
        imported({**LLAMA, "num_key_value_heads": "eight"})


def test_a_llama_config_slides_only_where_layer_types_says():
    # an audit: a Llama config with a sliding_window key and no layer_types was imported with every layer windowed;
    # LlamaConfig has no such field, and vLLM 0.34.0's LlamaAttention slides only a 'sliding_attention' layer
    cfg = {"model_type": "llama", "hidden_size": 512, "num_hidden_layers": 6, "num_attention_heads": 8,
           "num_key_value_heads": 2, "intermediate_size": 1024, "vocab_size": 1000, "max_position_embeddings": 131072,
           "sliding_window": 1024}
    model, imported = spec_from_config(cfg, "config.json", "stray")
    # 6 layers · 2 (K, V) · 2 KV heads · 64 dims · 2 bytes, every layer over all 65,536 tokens
    assert kv_cache(model, Settings(ctx=65536)).bytes == 6 * 2 * 2 * 64 * 2 * 65536 == 201_326_592
    assert "sliding_window 1024 without layer_types does not apply to a Llama model" in imported.data["notes"]
    typed = {**cfg, "layer_types": ["sliding_attention", "full_attention"] * 3}
    model = spec_from_config(typed, "config.json", "typed")[0]  # layer_types: its sliding layers hold 1,024
    assert kv_cache(model, Settings(ctx=65536)).bytes == 3 * 512 * 65536 + 3 * 512 * 1024


def test_head_dim_keys_read_as_each_model_class_reads_them():
    # an audit against transformers 5.25 and vLLM 0.34: Cohere2's file head_dim wins over Cohere2Config's own
    # hidden / heads (kvcalc ignored it), Falcon's attention is always hidden / heads wide (kvcalc read head_dim), and a
    # Gemma 4 config in transformers 5.25's per_layer_config form lost its global head dim (read now; one that names
    # other layers than the full ones is refused: tests/test_hf_modules.py)
    base = {"hidden_size": 512, "num_attention_heads": 8, "vocab_size": 1000, "max_position_embeddings": 131072,
            "intermediate_size": 1024}
    cohere = imported({**base, "model_type": "cohere2", "num_hidden_layers": 8, "num_key_value_heads": 2,
                       "head_dim": 128})
    assert kv_cache(cohere, Settings(ctx=1)).bytes == 8 * 2 * 2 * 128 * 2  # 8 layers · (K, V) · 2 heads · 128 · bf16
    falcon = imported({**base, "model_type": "falcon", "num_hidden_layers": 4, "head_dim": 128})
    assert kv_cache(falcon, Settings(ctx=1)).bytes == 4 * 2 * 1 * 64 * 2  # multi_query: one head of 512 / 8 = 64
    with pytest.raises(SpecError, match=r"per_layer_config: only one head_dim and num_key_value_heads for exactly the "
                                        r"full_attention layers \[5\] is read, got \{\}"):
        imported({**base, "model_type": "gemma4_text", "num_hidden_layers": 6, "per_layer_config": {}})
