"""Defects of the Hugging Face importers found by a fuzz audit: each hostile config gets one message naming the file,
the config key and the rule, and exit 1; the valid spellings keep giving the hand-derived numbers.

1. boolean keys read by truthiness ("false" was true); 2. misspelled keys passing for absent ones; 3. MiMo's
swa_v_head_dim of 0 / false / null passing for head_dim; 4. DeepSeek's topk_method read only as "noaux_tc" or not;
5. a number past a float's range (1e400) described as `inf`."""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import REFERENCE, run
from kvcalc.hf import IMPORTERS, vocabulary

QWEN25_7B = "models/qwen2.5-7b-instruct.json"
FALCON_7B = "models/falcon-7b.json"
LLAMA32_1B = "models/llama-3.2-1b.json"
MIMO = "configs-extra-2/mimo-v2-flash.json"


def reference(name: str) -> dict:
    return json.loads((REFERENCE / name).read_text())


def write(tmp_path, cfg: dict | str) -> str:
    path = tmp_path / "config.json"
    path.write_text(cfg if isinstance(cfg, str) else json.dumps(cfg))
    return str(path)


def refused(tmp_path, cfg: dict | str, message: str) -> None:
    """`kvcalc compare CONFIG` exits 1 with exactly one line on stderr: `error: PATH: MESSAGE`, no traceback."""
    path = write(tmp_path, cfg)
    res = run("compare", path, "--ctx", "2k", ok=False)
    assert res.exit_code == 1, str(res)
    assert res.stderr.strip().splitlines() == [f"error: {path}: {message}"], str(res)


def kv_bytes(tmp_path, cfg: dict, ctx: str) -> int:
    """The KV cache of one sequence of `ctx` tokens (bf16, batch 1), from `kvcalc compare -f json`."""
    return json.loads(run("compare", write(tmp_path, cfg), "--ctx", ctx, "-f", "json").stdout)[0]["kv_cache_bytes"]


def imported(tmp_path, cfg: dict) -> dict:
    """The spec `kvcalc import` writes for `cfg`."""
    return yaml.safe_load(run("import", write(tmp_path, cfg)).stdout)


def without(cfg: dict, key: str) -> dict:
    return {k: v for k, v in cfg.items() if k != key}


# --- 1. boolean keys: JSON true or false only -------------------------------------------------------------------

# Qwen2.5-7B with a window that applies only when use_sliding_window is true: 28 layers, 4 KV heads of 128
# (3584 / 28), bf16. One token of one layer caches K and V: 2 · 4 · 128 · 2 bytes = 2,048 bytes.
QWEN_WINDOWED = {**reference(QWEN25_7B), "sliding_window": 4096, "max_window_layers": 20}
QWEN_FULL_32K = 28 * 32768 * 2048  # every layer holds all 32,768 tokens: 1,879,048,192 bytes
# Qwen2's rule: layers >= max_window_layers slide, so layers 0-19 hold 32,768 tokens and layers 20-27 hold 4,096:
# (20 · 32,768 + 8 · 4,096) · 2,048 = 1,409,286,144 bytes.
QWEN_WINDOW_32K = (20 * 32768 + 8 * 4096) * 2048


@pytest.mark.parametrize("value, expected", [(True, QWEN_WINDOW_32K), (False, QWEN_FULL_32K), (None, QWEN_FULL_32K)])
def test_qwen_use_sliding_window_true_false_and_absent(tmp_path, value, expected):
    cfg = without(QWEN_WINDOWED, "use_sliding_window") if value is None else {**QWEN_WINDOWED, "use_sliding_window": value}
    assert kv_bytes(tmp_path, cfg, "32k") == expected


@pytest.mark.parametrize("value, shown", [("false", "'false'"), ("true", "'true'"), (0, "0"), (1, "1"), ("no", "'no'")])
def test_qwen_use_sliding_window_must_be_a_json_boolean(tmp_path, value, shown):
    refused(tmp_path, {**QWEN_WINDOWED, "use_sliding_window": value},
            f"use_sliding_window: must be true or false, got {shown}")


# Falcon-7B at its 2,048 positions (FalconConfig default), bf16: 32 layers, heads of 4544 / 71 = 64.
# multi_query true: one K/V head, 2 · 32 · 1 · 64 · 2,048 · 2 = 16,777,216 bytes; false: 71 of them, 1,191,182,336.
@pytest.mark.parametrize("value, expected", [(True, 2 * 32 * 64 * 2048 * 2), (None, 2 * 32 * 64 * 2048 * 2),
                                             (False, 2 * 32 * 71 * 64 * 2048 * 2)])
def test_falcon_multi_query_true_false_and_absent(tmp_path, value, expected):
    cfg = without(reference(FALCON_7B), "multi_query")
    assert kv_bytes(tmp_path, cfg if value is None else {**cfg, "multi_query": value}, "2k") == expected


# An unknown model_type read as a plain decoder (Llama-3.2-1B's keys): 16 layers, 8 KV heads of 64, so a token of a
# layer is 2 · 8 · 64 · 2 = 2,048 bytes. A window of 4,096 on every layer unless use_sliding_window is false:
# 16 · 4,096 · 2,048 = 134,217,728 bytes; without it 16 · 32,768 · 2,048 = 1,073,741,824.
GENERIC = {**reference(LLAMA32_1B), "model_type": "mydecoder", "sliding_window": 4096}


@pytest.mark.parametrize("value, expected", [(True, 16 * 4096 * 2048), (None, 16 * 4096 * 2048),
                                             (False, 16 * 32768 * 2048)])
def test_generic_use_sliding_window_true_false_and_absent(tmp_path, value, expected):
    cfg = GENERIC if value is None else {**GENERIC, "use_sliding_window": value}
    assert kv_bytes(tmp_path, cfg, "32k") == expected


@pytest.mark.parametrize("value, shown", [("false", "'false'"), (0, "0")])
def test_generic_use_sliding_window_must_be_a_json_boolean(tmp_path, value, shown):
    refused(tmp_path, {**GENERIC, "use_sliding_window": value}, f"use_sliding_window: must be true or false, got {shown}")


def _nested(name: str, outer: str, key: str, value) -> dict:
    cfg = reference(name)
    return {**cfg, outer: {**cfg[outer], key: value}}


def _first_block(name: str, part: str, key: str, value) -> dict:
    cfg = reference(name)
    blocks = [dict(b) for b in cfg["block_configs"]]
    blocks[0] = {**blocks[0], part: {**blocks[0][part], key: value}}
    return {**cfg, "block_configs": blocks}


# Every importer that reads a boolean key refuses a string or a number for it (each was read by truthiness, or
# refused with a message about something else).
@pytest.mark.parametrize("cfg, message", [
    ({**reference(FALCON_7B), "multi_query": "false"}, "multi_query: must be true or false, got 'false'"),
    (_nested("models-2026/gemma-4-26b-a4b.json", "text_config", "enable_moe_block", "false"),
     "text_config.enable_moe_block: must be true or false, got 'false'"),  # the key as the file nests it
    ({**reference("configs-extra/minimax-m2.5.json"), "use_qk_norm": "false"}, "use_qk_norm: must be true or false, got 'false'"),
    ({**reference("configs-extra/minimax-m2.5.json"), "use_mtp": 0}, "use_mtp: must be true or false, got 0"),
    ({**reference("models/deepseek-v3.json"), "attention_bias": "false"}, "attention_bias: must be true or false, got 'false'"),
    ({**reference("configs-extra-6/minicpm3-4b.json"), "attention_bias": "false"},
     "attention_bias: must be true or false, got 'false'"),
    ({**reference("configs-extra/phi-3-mini-4k-instruct.json"), "attention_bias": 1},
     "attention_bias: must be true or false, got 1"),
    ({**reference("models-2026/qwen3-next-80b-a3b-instruct.json"), "use_sliding_window": "false"},
     "use_sliding_window: must be true or false, got 'false'"),
    (_nested("configs-extra/qwen3-vl-8b-instruct.json", "text_config", "use_sliding_window", "false"),
     "text_config.use_sliding_window: must be true or false, got 'false'"),
    ({**reference("configs-gemma3n/gemma-3n-e2b.json"), "tie_word_embeddings": "false"},
     "tie_word_embeddings: must be true or false, got 'false'"),
    ({**reference("configs-extra-2/qwen3.5-35b-a3b.json"), "tie_word_embeddings": "false"},
     "tie_word_embeddings: must be true or false, got 'false'"),
    ({**reference("configs-extra-6/falcon-h1-0.5b-base.json"), "mamba_use_mlp": "true"},
     "mamba_use_mlp: must be true or false, got 'true'"),
    ({**reference("configs-extra-3/llama-3.3-nemotron-super-49b-v1.json"), "mlp_bias": "false"},
     "mlp_bias: must be true or false, got 'false'"),
    (_first_block("configs-extra-3/llama-3.3-nemotron-super-49b-v1.json", "attention", "no_op", "false"),
     "block_configs[0].attention: no_op: must be true or false, got 'false'"),
    (_first_block("configs-extra-3/llama-3.3-nemotron-super-49b-v1.json", "ffn", "replace_with_linear", 0),
     "block_configs[0].ffn: replace_with_linear: must be true or false, got 0"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_a_boolean_key_of_any_importer_is_true_or_false_only(tmp_path, cfg, message):
    refused(tmp_path, cfg, message)


@pytest.mark.parametrize("value, ffn", [(True, "moe"), (False, "dense"), (None, "dense")])
def test_gemma4_enable_moe_block_true_false_and_absent(tmp_path, value, ffn):
    # Gemma4TextConfig.enable_moe_block defaults to false: the dense MLP alone
    cfg = reference("models-2026/gemma-4-26b-a4b.json")
    text = without(cfg["text_config"], "enable_moe_block")
    spec = imported(tmp_path, {**cfg, "text_config": text if value is None else {**text, "enable_moe_block": value}})
    assert spec["ffn"]["kind"] == ffn


@pytest.mark.parametrize("value, norm", [(True, True), (False, None), (None, True)])
def test_minimax_m2_use_qk_norm_true_false_and_absent(tmp_path, value, norm):
    # MiniMaxM2Config.use_qk_norm defaults to true
    cfg = without(reference("configs-extra/minimax-m2.5.json"), "use_qk_norm")
    spec = imported(tmp_path, cfg if value is None else {**cfg, "use_qk_norm": value})
    assert spec["layer_groups"][0]["attention"].get("qk_norm") is norm


# --- 2. a misspelled key is not an absent one ---------------------------------------------------------------------


def renamed(cfg: dict, old: str, new: str) -> dict:
    return {(new if k == old else k): v for k, v in cfg.items()}


@pytest.mark.parametrize("old, new", [
    ("num_key_value_heads", "num_key_value_head"),  # the audit's case: silently MHA (32 KV heads) before
    ("num_key_value_heads", "num_key_values_heads"),  # one letter too many
    ("num_key_value_heads", "num_key_vaule_heads"),  # two letters swapped
    ("num_key_value_heads", "Num_Key_Value_Heads"),  # case
    ("num_key_value_heads", "numkeyvalueheads"),  # underscores
    ("head_dim", "head_dims"),  # plural: head_dim would silently be hidden_size / heads
    ("tie_word_embeddings", "tie_word_embedding"),  # singular: the default (untied for Llama) would apply
])
def test_llama_a_near_miss_of_a_key_it_reads_is_refused(tmp_path, old, new):
    refused(tmp_path, renamed(reference(LLAMA32_1B), old, new),
            f"{new}: not a key kvcalc reads; did you mean {old}?")


def test_a_near_miss_inside_text_config_names_its_path(tmp_path):
    cfg = reference("models-2026/gemma-4-26b-a4b.json")
    cfg = {**cfg, "text_config": renamed(cfg["text_config"], "enable_moe_block", "enable_moe_blocks")}
    refused(tmp_path, cfg, "text_config.enable_moe_blocks: not a key kvcalc reads; did you mean "
                           "text_config.enable_moe_block?")


def test_a_near_miss_of_a_key_filled_by_class_defaults_is_refused(tmp_path):
    # MistralConfig's default window (4096) would otherwise fill in for the misspelled 2048, silently
    cfg = {**without(reference("models/mistral-7b-v0.1.json"), "sliding_window"), "sliding_windows": 2048}
    refused(tmp_path, cfg, "sliding_windows: not a key kvcalc reads; did you mean sliding_window?")
    # a review: GLM-5's own qk_head_dim (a decoy), v_head_dim left out, was called a misspelt v_head_dim
    glm5 = reference("configs-extra/glm-5.json")
    del glm5["v_head_dim"]
    refused(tmp_path, glm5, "v_head_dim: required field is missing from the config")


def test_a_near_miss_in_a_qwen_window_key_is_refused(tmp_path):
    refused(tmp_path, renamed(QWEN_WINDOWED, "use_sliding_window", "use_sliding_windows"),
            "use_sliding_windows: not a key kvcalc reads; did you mean use_sliding_window?")


@pytest.mark.parametrize("extra", [
    {"totally_unknown_moe_experts": 64},  # unknown, but near no key kvcalc reads
    {"num_key_value_head": 8},  # near num_key_value_heads, which the config has: an extra key, not a misspelling
    {"num_position_embeddings": 64},  # difflib ratio 0.87 to max_position_embeddings, but three edits away
    {"layer_norm_epsilon": 1e-5},  # a standard key of other model types
])
def test_keys_that_are_not_near_misses_are_accepted(tmp_path, extra):
    # Llama-3.2-1B: 16 layers, 8 KV heads of 64, 2,048 tokens, bf16: 2 · 16 · 8 · 64 · 2,048 · 2 bytes
    assert kv_bytes(tmp_path, {**reference(LLAMA32_1B), **extra}, "2k") == 2 * 16 * 8 * 64 * 2048 * 2


@pytest.mark.parametrize("path", sorted(p.relative_to(REFERENCE).as_posix() for p in REFERENCE.rglob("*.json")
                                        if "model_type" in json.loads(p.read_text())))
def test_no_reference_config_has_a_near_miss(path):
    cfg = reference(path)
    importer = IMPORTERS.get(cfg["model_type"])
    if importer is not None:
        vocabulary.check(cfg, path, importer)


# --- 3. MiMo-V2-Flash's swa_v_head_dim ------------------------------------------------------------------------


# MiMo-V2-Flash at 4,096 tokens, bf16: 9 full layers (hybrid_layer_pattern 0) of 4 K/V heads and 39 sliding layers of
# 8 over a window of 128 tokens; keys of 192 and values of v_head_dim per head, so a token of a layer caches
# n_kv · (192 + v) elements. Full: 9 · 4 · 320 · 4,096 · 2 = 94,371,840 bytes; sliding with values of 128:
# 39 · 8 · 320 · 128 · 2 = 25,559,040 (with 64: 39 · 8 · 256 · 128 · 2 = 20,447,232).
MIMO_FULL = 9 * 4 * (192 + 128) * 4096 * 2


# 39 sliding layers of 8 KV heads holding 129 tokens (sliding_window_size 128 previous tokens and the query)
@pytest.mark.parametrize("value, sliding", [(128, 39 * 8 * (192 + 128) * 129 * 2), (None, 39 * 8 * (192 + 128) * 129 * 2),
                                            (64, 39 * 8 * (192 + 64) * 129 * 2)])
def test_mimo_swa_v_head_dim_given_or_absent(tmp_path, value, sliding):
    # absent: v_head_dim (MiMoV2FlashAttention: getattr(config, "swa_v_head_dim", v_head_dim))
    cfg = without(reference(MIMO), "swa_v_head_dim")
    assert kv_bytes(tmp_path, cfg if value is None else {**cfg, "swa_v_head_dim": value}, "4k") == MIMO_FULL + sliding


@pytest.mark.parametrize("value, rule", [(0, "must be at least 1, got 0"), (False, "must be a whole number, got false"),
                                         (None, "must be a whole number, got null"),
                                         ("128", "must be a whole number, got '128'"),
                                         (-128, "must be at least 1, got -128")])
def test_mimo_swa_v_head_dim_is_a_positive_whole_number(tmp_path, value, rule):
    refused(tmp_path, {**reference(MIMO), "swa_v_head_dim": value}, f"swa_v_head_dim: {rule}")


def test_gemma3_sliding_window_pattern_zero_is_refused(tmp_path):
    # 0 used to fall through to the default 6 ((i + 1) % 0 cannot be computed: no such model loads)
    refused(tmp_path, {**reference("models/gemma-3-1b-it.json"), "sliding_window_pattern": 0},
            "sliding_window_pattern: must be at least 1, got 0")


# --- 4. DeepSeek's topk_method ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name, value, bias", [
    ("models/deepseek-v2-lite.json", "greedy", None),
    ("models/deepseek-v2.json", "group_limited_greedy", None),
    ("models/deepseek-v3.json", "noaux_tc", True),  # e_score_correction_bias, one per routed expert
    ("models/deepseek-v2-lite.json", "gready", None),  # DeepSeek's configuration_deepseek.py default spelling
    ("models/deepseek-v2-lite.json", ..., None),  # absent: DeepseekV2Config's greedy
    ("models/deepseek-v3.json", ..., True),  # absent: DeepseekV3Config's noaux_tc
])
def test_deepseek_topk_method_sets_the_router_bias(tmp_path, name, value, bias):
    cfg = without(reference(name), "topk_method")
    spec = imported(tmp_path, cfg if value is ... else {**cfg, "topk_method": value})
    assert spec["ffn"].get("router_bias") is bias


@pytest.mark.parametrize("value, shown", [("noaux", "'noaux'"), ("NOAUX_TC", "'NOAUX_TC'"), (None, "null"), (1, "1")])
def test_deepseek_topk_method_of_another_value_is_refused(tmp_path, value, shown):
    # any of these used to drop the router bias silently
    refused(tmp_path, {**reference("models/deepseek-v3.json"), "topk_method": value},
            f"topk_method: must be one of greedy, gready, group_limited_greedy, noaux_tc, got {shown}")


# --- 5. a number past a float's range ----------------------------------------------------------------------------


def test_a_number_too_large_for_a_float_is_named_as_such(tmp_path):
    text = json.dumps(reference(LLAMA32_1B)).replace('"hidden_size": 2048', '"hidden_size": 1e400')
    assert "1e400" in text
    refused(tmp_path, text, "hidden_size: must be a whole number, got inf: too large to represent (a JSON number "
                            "past about 1.8e308, such as 1e400, reads as inf)")


def test_not_a_number_is_named_as_such(tmp_path):
    text = json.dumps(reference(LLAMA32_1B)).replace('"hidden_size": 2048', '"hidden_size": NaN')
    refused(tmp_path, text, "hidden_size: must be a whole number, got NaN (not a number)")


# --- a second fuzz audit ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["models/deepseek-v2.json", "configs-extra-3/kimi-linear-48b-a3b-instruct.json"])
def test_moe_layer_freq_zero_is_refused(tmp_path, name):
    # `or 1` made 0 the same as 1 (235,741,434,880 parameters for DeepSeek-V2, as freq 1); transformers' i % 0 fails
    refused(tmp_path, {**reference(name), "moe_layer_freq": 0}, "moe_layer_freq: must be at least 1, got 0")


@pytest.mark.parametrize("text, ok", [("32.000000000000001", False), ("4096.00000000000001", False), ("32.0", True),
                                      ("3.2e1", True), ("32", True)])
def test_a_fraction_that_rounds_to_a_whole_float_is_refused(tmp_path, text, ok):
    # JSON 32.000000000000001 reads as the float 32.0: only its text says it was not 32
    cfg = json.dumps(reference(LLAMA32_1B)).replace('"num_hidden_layers": 16', f'"num_hidden_layers": {text}')
    assert text in cfg
    if ok:
        assert imported(tmp_path, json.loads(cfg))["n_layers"] == 32
    else:
        refused(tmp_path, cfg, f"num_hidden_layers: must be a whole number, got {text} (a fraction that only rounds "
                               f"to {round(float(text))} as a float)")


def test_sliding_window_zero_is_no_window_and_says_so(tmp_path):
    spec = imported(tmp_path, {**reference("models/mistral-7b-v0.1.json"), "sliding_window": 0})
    assert "sliding_window 0 read as no window" in spec["notes"]
    assert all("sliding_window" not in g for g in spec["layer_groups"])


def test_moe_layer_freq_dense_layers_carry_their_own_width(tmp_path):
    # DeepSeek-V2 with moe_layer_freq 2 and no leading dense layers: layers i % 2 == 1 run the dense MLP of
    # intermediate_size (DeepseekV2DecoderLayer). The importer wrote that width into the MoE block as dense_d_ff
    # too, with first_k_dense 0: a field of no layer, which the spec now refuses, so each dense layer names its own.
    from kvcalc.costs.params import ffn_of_layer, param_totals
    from kvcalc.registry import load_model

    base = reference("models/deepseek-v2.json")
    spec = imported(tmp_path, {**base, "first_k_dense_replace": 0, "moe_layer_freq": 2})
    assert "dense_d_ff" not in spec["ffn"] and not spec["ffn"].get("first_k_dense")
    path = tmp_path / "freq2.yaml"
    path.write_text(yaml.safe_dump(spec))
    freq2 = load_model(str(path)).spec
    ffns = [ffn_of_layer(freq2, i) for i in range(60)]
    assert [i for i, f in enumerate(ffns) if f.kind == "dense"] == list(range(1, 60, 2))
    assert {f.d_ff for f in ffns if f.kind == "dense"} == {12288}
    # against the real config (one leading dense layer, 59 MoE): 29 layers more are dense, 29 fewer MoE
    d = 5120
    moe_layer = 160 * d + (160 + 2) * 3 * d * 1536  # router, routed and shared experts (SwiGLU)
    real = param_totals(load_model(write(tmp_path, base)).spec)[0]
    assert real - param_totals(freq2)[0] == 29 * (moe_layer - 3 * d * 12288)
