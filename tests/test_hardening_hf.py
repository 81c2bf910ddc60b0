"""Hostile Hugging Face configs through the CLI (#13): each gets one message naming the config key and the rule, exit 1,
no traceback, in under a second."""

from __future__ import annotations

import json
import time

import pytest

from conftest import REFERENCE_MODELS, run
from kvcalc.errors import SpecError
from kvcalc.hf import jsonfile
from kvcalc.hf.common import MESSAGE_WIDTH, show

LLAMA = json.loads((REFERENCE_MODELS / "llama-3-8b.json").read_text())
GEMMA3 = json.loads((REFERENCE_MODELS / "gemma-3-1b-it.json").read_text())
MIXTRAL = json.loads((REFERENCE_MODELS / "mixtral-8x7b-v0.1.json").read_text())


def refused(tmp_path, text: str, *expected: str) -> str:
    """Run `kvcalc compare CONFIG --ctx 4k` on `text`; assert exit 1 within a second, each `expected` in stderr and no
    traceback; return stderr."""
    path = tmp_path / "config.json"
    path.write_text(text)
    start = time.process_time()
    res = run("compare", path, "--ctx", "4k", ok=False)
    seconds = time.process_time() - start
    assert res.exit_code == 1, str(res)
    assert "Traceback" not in res.stderr, str(res)
    for part in expected:
        assert part in res.stderr, str(res)
    assert seconds < 1, f"{seconds:.2f} s\n{res}"
    return res.stderr


def config(base: dict, **changes) -> str:
    return json.dumps({**base, **changes})


def test_model_type_must_be_a_string(tmp_path):
    err = refused(tmp_path, '{"model_type": ["llama"]}', "model_type: must be a string naming the architecture",
                  "got ['llama']")
    assert len(err.strip().splitlines()) == 1, err


def test_an_integral_float_is_a_whole_number(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(config(LLAMA, num_hidden_layers=32.0))
    rows = json.loads(run("compare", path, "--ctx", "4k", "-f", "json").stdout)
    assert rows[0]["kv_cache_bytes"] == 2 * 32 * 8 * 128 * 4096 * 2  # K and V, 32 layers, 8 KV heads of 128, bf16


@pytest.mark.parametrize("value, shown", [(32.5, "32.5"), (True, "true"), (False, "false"), ("32", "'32'")])
def test_a_count_that_is_not_a_whole_number_is_refused_naming_the_key(tmp_path, value, shown):
    refused(tmp_path, config(LLAMA, num_hidden_layers=value), f"num_hidden_layers: must be a whole number, got {shown}")


@pytest.mark.parametrize("size", [3, 52])
def test_layer_types_of_the_wrong_length(tmp_path, size):
    types = ["sliding_attention"] * (size - 1) + ["full_attention"]  # gemma-3-1b has 26 layers
    refused(tmp_path, config(GEMMA3, layer_types=types),
            f"layer_types: must have one entry per layer (num_hidden_layers 26), got {size} entries")


def test_a_per_layer_list_of_the_wrong_length(tmp_path):
    gemma3n = json.loads((REFERENCE_MODELS.parent / "configs-gemma3n" / "gemma-3n-e2b.json").read_text())
    text = gemma3n["text_config"]
    text["intermediate_size"] = text["intermediate_size"][:5]
    refused(tmp_path, json.dumps(gemma3n), "intermediate_size: must be one number or one per layer (num_hidden_layers "
            "30), got 5 entries")


# kvcalc.registry parses a .json MODEL with json.loads itself; until it calls kvcalc.hf.jsonfile.loads these two
# still end in a traceback (a ValueError, a RecursionError) through the CLI. The tests of jsonfile below pass today.


def test_an_integer_of_5000_digits_through_the_cli(tmp_path):
    refused(tmp_path, '{"model_type": "llama", "num_hidden_layers": ' + "9" * 5000 + "}",
            "num_hidden_layers: an integer of 5,000 digits")


def test_json_nested_1000_deep_through_the_cli(tmp_path):
    refused(tmp_path, '{"model_type": "llama", "x": ' + "[" * 1000 + "]" * 1000 + "}", "JSON nested too deeply")


def jsonfile_error(text: str) -> str:
    with pytest.raises(SpecError) as info:
        jsonfile.loads(text, "c.json")
    return str(info.value)


def test_jsonfile_names_the_key_of_an_over_long_integer():
    assert jsonfile_error('{"a": {"num_hidden_layers": ' + "9" * 5000 + "}}") == (
        "c.json: num_hidden_layers: an integer of 5,000 digits; a config's integers have at most 4,300")
    assert jsonfile_error('{"layer_types": [1, [2, -' + "9" * 4301 + "]]}").startswith(
        "c.json: layer_types[1][1]: an integer of 4,301 digits")
    assert jsonfile.loads('{"n": ' + "9" * 4300 + "}", "c.json")["n"] == int("9" * 4300)


def test_jsonfile_refuses_deep_nesting_duplicates_and_malformed_text():
    assert jsonfile_error('{"x": ' + "[" * 100_000 + "]" * 100_000 + "}") == (
        "c.json: JSON nested too deeply (a config.json nests a few levels)")
    assert jsonfile_error('{"num_hidden_layers": 32, "num_hidden_layers": 40}') == (
        "c.json: num_hidden_layers: written twice in one object (a later value must not silently win)")
    assert jsonfile_error('{"a": 1,}').startswith("c.json: malformed JSON: line 1, column 9")


def test_every_reference_config_parses_as_json_does():
    for path in sorted(REFERENCE_MODELS.parent.rglob("*.json")):
        text = path.read_text()
        assert jsonfile.loads(text, str(path)) == json.loads(text), path


@pytest.mark.slow
def test_a_huge_value_is_shown_briefly(tmp_path):
    err = refused(tmp_path, config(LLAMA, head_dim=[list(range(100))] * 1000), "head_dim: must be a whole number, got [[0, 1")
    assert len(err.split(" got ", 1)[1].strip()) <= MESSAGE_WIDTH, err


def test_show_costs_little_for_an_alias_bomb():
    # What a YAML billion-laughs document loads as: 30 levels of 10 references to the level below (10**30 leaves).
    bomb: list = ["lol"]
    for _ in range(30):
        bomb = [bomb] * 10
    start = time.process_time()
    text = show(bomb)
    assert time.process_time() - start < 0.1
    assert len(text) <= MESSAGE_WIDTH and text.startswith("[[[")
    assert show(10**5000) == "<an integer of about 5,001 digits>"


@pytest.mark.parametrize("base, key, value, rule", [
    (LLAMA, "num_hidden_layers", 10_001, "must be at most 10,000 (layers)"),
    (LLAMA, "num_hidden_layers", 10**30, "must be at most 10,000 (layers)"),
    (LLAMA, "hidden_size", 2**20 + 1, "must be at most 1,048,576 (a width)"),
    (MIXTRAL, "num_local_experts", 65_537, "must be at most 65,536 (experts)"),
    (LLAMA, "max_position_embeddings", 2**40 + 1, "must be at most 1,099,511,627,776 (tokens)"),
    (LLAMA, "sliding_window", 10**20, "must be at most 1,099,511,627,776 (tokens)"),
])
def test_a_physically_absurd_value_is_refused_naming_the_key_and_bound(tmp_path, base, key, value, rule):
    refused(tmp_path, config(base, **{key: value}), f"{key}: {rule}, got")


# ---------------------------------------------------------------- config keys that would change the numbers if honoured


def _variant(tmp_path, name: str, edit) -> str:
    """`kvcalc show` of a models-2026 config changed by `edit` (on its text model): its stderr, asserting exit 1."""
    cfg = json.loads((REFERENCE_MODELS.parent / "models-2026" / name).read_text())
    edit(cfg.get("text_config", cfg))
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    res = run("show", path, ok=False)
    assert res.exit_code == 1 and "Traceback" not in res.stderr, str(res)
    return res.stderr


def test_deepseek_attention_bias_is_refused(tmp_path):
    # DeepseekV3Attention: q_a_proj, kv_a_proj_with_mqa and o_proj take bias=attention_bias; it was read as false
    err = _variant(tmp_path, "deepseek-v3.2.json", lambda c: c.update(attention_bias=True))
    assert "attention_bias: biases on q_a_proj, kv_a_proj_with_mqa and o_proj are not supported" in err


def test_llama4_layer_types_must_agree_with_no_rope_layers(tmp_path):
    # Llama4TextConfig derives layer_types from no_rope_layers (every 4th layer full); the mask reads layer_types
    def edit(c):
        types = ["full_attention" if (i + 1) % 4 == 0 else "chunked_attention" for i in range(48)]
        types[0] = "full_attention"
        c["layer_types"] = types

    err = _variant(tmp_path, "llama-4-scout-17b-16e-instruct.json", edit)
    assert ("layer_types[0]: 'full_attention', but no_rope_layers[0] = 1 makes layer 0 'chunked_attention' with "
            "attention_chunk_size 8192 (Llama4TextConfig derives one from the others): give them alike") in err


def test_llama4_layer_types_all_full_with_a_null_chunk_size(tmp_path):
    # attention_chunk_size null: Llama4TextConfig derives every layer full_attention (transformers 5.25 writes that
    # list on a re-save); it was refused as disagreeing with no_rope_layers. No layer is chunked: 48 layers of
    # 8 KV heads of 128 cache every token
    def edit(c):
        c["text_config"]["attention_chunk_size"] = None
        c["text_config"]["layer_types"] = ["full_attention"] * 48

    path = tmp_path / "m" / "config.json"
    path.parent.mkdir()
    cfg = json.loads((REFERENCE_MODELS.parent / "models-2026" / "llama-4-scout-17b-16e-instruct.json").read_text())
    edit(cfg)
    path.write_text(json.dumps(cfg))
    rows = json.loads(run("compare", str(path), "--ctx", "64k", "-f", "json").stdout)
    assert rows[0]["kv_cache_bytes"] == 48 * 2 * 8 * 128 * 65536 * 2


def test_llama4_layer_types_that_agree_change_nothing(tmp_path):
    cfg = json.loads((REFERENCE_MODELS.parent / "models-2026" / "llama-4-scout-17b-16e-instruct.json").read_text())
    plain, typed = tmp_path / "plain" / "config.json", tmp_path / "typed" / "config.json"
    plain.parent.mkdir()
    typed.parent.mkdir()
    plain.write_text(json.dumps(cfg))
    cfg["text_config"]["layer_types"] = ["full_attention" if (i + 1) % 4 == 0 else "chunked_attention" for i in range(48)]
    typed.write_text(json.dumps(cfg))
    shown = [json.loads(run("show", p, "--ctx", "128k", "-f", "json").stdout) for p in (plain, typed)]
    assert shown[0]["groups"] == shown[1]["groups"]
    same = [{k: v for k, v in doc["summary"].items() if k not in ("name", "source")} for doc in shown]
    assert same[0] == same[1] and same[0]["kv_cache_bytes"] == 7_650_410_496  # 36 chunked layers at 8192, 12 global


def test_llama4_empty_no_rope_layers_means_the_default(tmp_path):
    # an audit: published Llama 4 text_configs carry "no_rope_layers": [], which Llama4TextConfig reads as absent
    # (`no_rope_layers if no_rope_layers else default`, every 4th layer global); kvcalc refused it
    cfg = json.loads((REFERENCE_MODELS.parent / "models-2026" / "llama-4-scout-17b-16e-instruct.json").read_text())
    path = tmp_path / "empty" / "config.json"
    path.parent.mkdir()
    cfg["text_config"]["no_rope_layers"] = []
    path.write_text(json.dumps(cfg))
    doc = json.loads(run("show", path, "--ctx", "128k", "-f", "json").stdout)
    assert doc["summary"]["kv_cache_bytes"] == 7_650_410_496  # 36 chunked layers at 8192, 12 global (as above)


def test_nemotron_h_proj_bias_flags_must_agree(tmp_path):
    # NemotronHMamba2Mixer's in_proj and out_proj read use_bias; a config whose mamba_proj_bias says otherwise is refused
    err = _variant(tmp_path, "nemotron-h-56b-base-8k.json", lambda c: c.update(mamba_proj_bias=True, use_bias=False))
    assert "mamba_proj_bias: true, but use_bias is false (the mixer's in_proj and out_proj read use_bias): give them alike" in err


@pytest.mark.parametrize("key, value, shown", [("tie_word_embeddings", "false", "'false'"), ("attention_bias", 1, "1"),
                                               ("mlp_bias", "no", "'no'")])
def test_a_boolean_key_is_true_or_false_only(tmp_path, key, value, shown):
    # bool("false") is true: the string was read as tied embeddings (and 1 as a bias) in silence
    err = refused(tmp_path, json.dumps({**LLAMA, key: value}), f"{key}: must be true or false, got {shown}")
    assert err.count("\n") == 1


def test_a_null_boolean_key_takes_the_default(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA, "attention_bias": None, "tie_word_embeddings": None}))
    plain = tmp_path / "plain" / "config.json"
    plain.parent.mkdir()
    plain.write_text(json.dumps(LLAMA))
    rows = [json.loads(run("compare", p, "--columns", "all", "-f", "json").stdout)[0] for p in (path, plain)]
    assert rows[0]["params_total"] == rows[1]["params_total"] == 8_030_261_248


@pytest.mark.parametrize("text, expected", [
    # a fuzzing audit: a JSON that is not an object was called "the spec"; a text_config that is not an object was passed
    # over for the outer fields (a message about another key followed); decoder_sparse_step 0, which HF cannot load
    # ((i + 1) % 0), was read as 1; an empty or control-character model_type was imported as a plain decoder
    ("[1, 2]", "config.json: a config.json is a JSON object of fields with a model_type, not an array"),
    ("null", "config.json: a config.json is a JSON object of fields with a model_type, not null"),
    (json.dumps({"model_type": "gemma4", "text_config": None}), "config.json: text_config: must be an object of the text model's fields"),
    (json.dumps({"model_type": "llama4", "text_config": []}), "config.json: text_config: must be an object of the text model's fields"),
    (config(MIXTRAL, model_type="qwen3_moe", decoder_sparse_step=0, moe_intermediate_size=1024, num_experts=8),
     "config.json: decoder_sparse_step: "),
    (config(LLAMA, model_type=""), "config.json: model_type: must be a string naming the architecture in letters"),
])
def test_configs_that_are_not_what_they_claim(tmp_path, text, expected):
    refused(tmp_path, text, expected)
