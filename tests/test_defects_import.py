"""`kvcalc import` and `kvcalc list` through the CLI: config fields that are not whole numbers, `layer_types` of the
wrong length, an invalid `--name`, and the natural order of bundled names."""

from __future__ import annotations

import json

import pytest

from conftest import run

# Llama-3-8B's shape (its config.json), cut to the keys the importer reads.
LLAMA = {
    "model_type": "llama",
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 128256,
    "max_position_embeddings": 8192,
}
# DeepSeek-V2-Lite's MLA and MoE dimensions (its config.json).
DEEPSEEK = {
    "model_type": "deepseek_v2",
    "hidden_size": 2048,
    "num_hidden_layers": 27,
    "num_attention_heads": 16,
    "kv_lora_rank": 512,
    "q_lora_rank": None,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "n_routed_experts": 64,
    "n_shared_experts": 2,
    "num_experts_per_tok": 6,
    "moe_intermediate_size": 1408,
    "first_k_dense_replace": 1,
    "intermediate_size": 10944,
    "vocab_size": 102400,
    "max_position_embeddings": 163840,
}


def write(tmp_path, cfg: dict):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path


def error(res) -> str:
    """The one error line on stderr, with any wrapping undone."""
    assert res.exit_code == 1, str(res)
    return " ".join(res.stderr.split())


@pytest.mark.parametrize(
    "base, key, value, message",
    [
        (LLAMA, "num_hidden_layers", 32.5, "num_hidden_layers: must be a whole number, got 32.5"),
        (LLAMA, "hidden_size", "4096", "hidden_size: must be a whole number, got '4096'"),
        (LLAMA, "num_key_value_heads", True, "num_key_value_heads: must be a whole number, got true"),
        (LLAMA, "head_dim", 0, "head_dim: must be at least 1, got 0"),
        (LLAMA, "intermediate_size", -14336, "intermediate_size: must be at least 1, got -14336"),
        (LLAMA, "sliding_window", [4096], "sliding_window: must be a whole number, got [4096]"),
        (DEEPSEEK, "kv_lora_rank", 512.5, "kv_lora_rank: must be a whole number, got 512.5"),
        (DEEPSEEK, "q_lora_rank", "1536", "q_lora_rank: must be a whole number, got '1536'"),
        (DEEPSEEK, "first_k_dense_replace", 1.5, "first_k_dense_replace: must be a whole number, got 1.5"),
        (DEEPSEEK, "n_routed_experts", False, "n_routed_experts: must be a whole number, got false"),
    ],
)
def test_a_field_that_is_not_a_whole_number_is_named(tmp_path, base, key, value, message):
    path = write(tmp_path, {**base, key: value})
    assert error(run("import", path, ok=False)) == f"error: {path}: {message}"


def test_a_whole_float_is_read_as_an_int(tmp_path):
    # JSON 32.0 is the whole number 32, read exactly (a YAML spec, loaded strictly, must write 32).
    res = run("import", write(tmp_path, {**LLAMA, "num_hidden_layers": 32.0}))
    assert "n_layers: 32\n" in res.stdout


def test_layer_types_of_the_wrong_length(tmp_path):
    cfg = {**LLAMA, "sliding_window": 4096, "layer_types": ["sliding_attention", "full_attention"] * 2}
    path = write(tmp_path, cfg)
    assert error(run("import", path, ok=False)) == (
        f"error: {path}: layer_types: must have one entry per layer (num_hidden_layers 32), got 4 entries"
    )


def test_layer_types_with_an_unknown_entry(tmp_path):
    cfg = {**LLAMA, "num_hidden_layers": 2, "sliding_window": 4096, "layer_types": ["sliding_attention", "full"]}
    path = write(tmp_path, cfg)
    assert error(run("import", path, ok=False)) == (
        f"error: {path}: layer_types[1]: must be one of sliding_attention, full_attention, got 'full'"
    )


def test_an_invalid_name_is_refused_with_a_suggestion(tmp_path):
    out = tmp_path / "out.yaml"
    res = run("import", write(tmp_path, LLAMA), "--name", "A & B", "-o", out, ok=False)
    assert error(res) == (
        "error: --name 'A & B': a spec name starts with a letter or digit, has only letters, digits, "
        "'.', '_' and '-', and at most 128 characters; try --name 'A-B'"
    )
    assert not out.exists()
    res = run("import", write(tmp_path, LLAMA), "--name", "x" * 129, "-o", out, ok=False)  # a LaTeX review: no bound
    assert error(res) == (f"error: --name '{'x' * 129}': a spec name starts with a letter or digit, has only letters, "
                          f"digits, '.', '_' and '-', and at most 128 characters; try --name '{'x' * 128}'")


def test_a_valid_name_loads_back(tmp_path):
    out = tmp_path / "out.yaml"
    run("import", write(tmp_path, LLAMA), "--name", "A-B", "-o", out)
    shown = json.loads(run("show", out, "-f", "json").stdout)
    assert shown["model"] == "A-B"
    assert shown["spec"]["n_layers"] == 32


@pytest.mark.slow
def test_list_sorts_names_naturally():
    names = [row["model"] for row in json.loads(run("list", "-f", "json").stdout)]
    # Digit runs compare as numbers: 1b < 4b < 12b < 27b, 8b < 70b, and llama3 before llama3.1 before llama3.2.
    assert [n for n in names if n.startswith("gemma3-")] == ["gemma3-1b", "gemma3-4b", "gemma3-12b", "gemma3-27b"]
    assert [n for n in names if n.startswith("llama3")] == [
        "llama3-8b", "llama3-70b", "llama3.1-8b", "llama3.1-70b", "llama3.1-405b", "llama3.2-1b", "llama3.2-3b"
    ]
    assert [n for n in names if n.startswith("qwen2.5-")] == ["qwen2.5-7b", "qwen2.5-72b"]
    assert names.index("deepseek-v2") < names.index("deepseek-v2-lite") < names.index("deepseek-v3")
