"""The command line end to end: the headline comparison, every output format, --explain, and every error class."""

from __future__ import annotations

import csv
import io
import json
import shutil

import pytest

from conftest import ALL_BUNDLED, REFERENCE_MODELS, ROOT, run

ROOT_SPECS = ROOT / "model_specs"
FORMATS = ["table", "markdown", "latex", "csv", "json"]


def compare_json(*args: str) -> list[dict]:
    return json.loads(run("compare", *args, "--format", "json").stdout)


# ---------------------------------------------------------------- the headline command


def test_compare_llama3_70b_deepseek_v2_128k():
    rows = compare_json("llama3-70b", "deepseek-v2", "--ctx", "128k")
    llama, ds = rows
    assert llama["model"] == "llama3-70b" and ds["model"] == "deepseek-v2"
    # 2·80·8·128·2 B per token; × 131,072 tokens (FACTS.md §2.4).
    assert llama["kv_bytes_per_token"] == 327_680 and llama["kv_cache_bytes"] == 42_949_672_960
    # (512 + 64)·60·2 B per token, latent MLA (DeepSeek-V2 Table 1).
    assert ds["kv_bytes_per_token"] == 60 * 576 * 2 == 69_120 and ds["kv_cache_bytes"] == 9_059_696_640
    for row in rows:
        assert (row["ctx"], row["batch"], row["kv_dtype"]) == (131_072, 1, "bf16")
    assert ds["mla_cache"] == "latent" and "mla_cache" not in llama
    assert (llama["attention"], ds["attention"]) == ("gqa", "mla")
    assert (llama["n_layers"], ds["n_layers"]) == (80, 60)
    assert ds["ratio"] == pytest.approx(9_059_696_640 / 42_949_672_960)


def test_compare_table_shows_human_units_and_warns_beyond_max_context():
    res = run("compare", "llama3-70b", "deepseek-v2", "--ctx", "128k")
    assert "40.0 GiB" in res.stdout and "8.44 GiB" in res.stdout and "MLA (latent)" in res.stdout
    # Llama 3 70B was trained to 8,192 tokens: a one-line warning on stderr, not an error.
    assert res.stderr.count("\n") == 1
    assert "warning: llama3-70b: ctx 131,072 exceeds its trained maximum of 8,192 tokens" in res.stderr


def test_machine_formats_flag_ctx_beyond_max_instead_of_warning():
    for fmt in ("json", "csv"):
        res = run("compare", "llama3-70b", "deepseek-v2", "--ctx", "128k", "--format", fmt)
        assert res.stderr == ""  # stdout stays parseable even when a caller merges the two streams
    rows = compare_json("llama3-70b", "deepseek-v2", "--ctx", "8k,128k")
    # Llama 3 70B: trained to 8,192 tokens; DeepSeek-V2: 163,840.
    assert [r["exceeds_max_context"] for r in rows] == [False, True, False, False]
    show = json.loads(run("show", "llama3-70b", "--ctx", "9000", "--format", "json").stdout)
    assert show["exceeds_max_context"] is True


def test_compare_ctx_list_gives_one_row_per_model_and_context():
    rows = compare_json("llama3-8b", "mistral-7b", "--ctx", "4k,32k,128k")
    assert [(r["model"], r["ctx"]) for r in rows] == [
        ("llama3-8b", 4096), ("llama3-8b", 32_768), ("llama3-8b", 131_072),
        ("mistral-7b", 4096), ("mistral-7b", 32_768), ("mistral-7b", 131_072),
    ]
    # Mistral's window of 4096 caps its cache; Llama 3 8B has the same per-token rate (32·2·8·128·2 B).
    assert {r["kv_bytes_per_token"] for r in rows} == {131_072}
    assert [r["kv_cache_bytes"] for r in rows if r["model"] == "mistral-7b"] == [512 * 1024**2] * 3
    # ratios are against the first model at the same context
    assert [r["ratio"] for r in rows if r["model"] == "mistral-7b"] == [1.0, 4096 / 32_768, 4096 / 131_072]


def test_compare_batch_dtype_and_mla_layout():
    base = compare_json("deepseek-v2", "--ctx", "4k")[0]
    other = compare_json("deepseek-v2", "--ctx", "4k", "--batch", "8", "--kv-dtype", "fp8", "--mla-cache", "expanded")[0]
    assert other["mla_cache"] == "expanded" and other["kv_dtype"] == "fp8" and other["batch"] == 8
    # expanded: 128·(128+64) + 128·128 = 40,960 elements per layer instead of 576; fp8 is one byte.
    assert other["kv_bytes_per_token"] == 60 * 40_960
    assert other["kv_cache_bytes"] == 8 * 4096 * 60 * 40_960
    assert base["kv_cache_bytes"] == 4096 * 60 * 576 * 2


def test_titles_name_the_mla_layout_where_no_column_does():
    # a review: `compare deepseek-v2 --columns kv_cache_bytes` printed 600 GiB with --mla-cache expanded and 8.44 GiB
    # without, under one title; the layout (and, beside decode FLOPs, the schedule) now goes in every title
    first = lambda *args: run(*args).stdout.splitlines()[0]  # noqa: E731
    assert first("compare", "deepseek-v2", "--mla-cache", "expanded", "--columns", "kv_cache_bytes") == \
        "Batch 1, kv bf16, weights bf16, MLA expanded cache"
    assert first("compare", "deepseek-v2", "llama3-70b", "--ctx", "4k", "--columns", "cost") == \
        "Batch 1, kv bf16, weights bf16, MLA latent cache, absorbed decode"
    assert first("sweep", "deepseek-v2", "--ctx", "1k..2k", "--mla-cache", "expanded") == \
        "Growth with context, batch 1, kv bf16, weights bf16, MLA expanded cache, naive decode"
    assert first("cost", "deepseek-v2", "--mla-cache", "expanded").endswith(", batch 1, MLA expanded cache")
    assert "kv bf16, MLA latent cache, 10% reserved" in first("fit", "deepseek-v2", "--hardware", "h100-80gb", "--gpus", "8")
    # the default kv table names it in its attention column ('MLA (latent)'); a model without MLA gets no words
    assert first("compare", "deepseek-v2") == "KV cache, bf16, batch 1"
    assert first("compare", "llama3-70b", "--columns", "cost") == "Batch 1, kv bf16, weights bf16"


def test_compare_no_windows_on_gemma3_27b():
    windowed = compare_json("gemma3-27b", "--ctx", "128k")[0]["kv_cache_bytes"]
    full = compare_json("gemma3-27b", "--ctx", "128k", "--no-windows")[0]["kv_cache_bytes"]
    assert windowed == 10 * 4096 * 131_072 * 2 + 52 * 4096 * 1024 * 2
    assert full == 62 * 4096 * 131_072 * 2


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_carries_the_figures(fmt):
    out = run("compare", "llama3-70b", "deepseek-v2", "--ctx", "128k", "--format", fmt).stdout
    if fmt in ("csv", "json"):
        assert "42949672960" in out and "9059696640" in out and "69120" in out
    elif fmt == "latex":  # one unit per column: it moves to the header
        assert r"KV \\ cache (GiB)" in out and r"KV per \\ token (KiB)" in out  # two-line headers
        assert "& 40.0 &" in out and "& 8.44 &" in out and "& 67.5 &" in out
    else:
        assert "40.0 GiB" in out and "8.44 GiB" in out and "67.5 KiB" in out
    if fmt == "latex":
        assert r"\toprule" in out and r"\midrule" in out and r"\bottomrule" in out
    if fmt == "markdown":
        assert out.splitlines()[2].startswith("| Model |")
    if fmt == "csv":
        rows = list(csv.DictReader(io.StringIO(out)))
        assert rows[0]["kv_cache_bytes"] == "42949672960" and rows[1]["mla_cache"] == "latent"


def test_units_si_and_bytes():
    assert "42.9 GB" in run("compare", "llama3-70b", "--ctx", "128k", "--units", "si").stdout
    assert "42,949,672,960" in run("compare", "llama3-70b", "--ctx", "128k", "--units", "bytes").stdout


def test_explain_shows_formula_symbols_values_and_fields():
    out = run("compare", "llama3-70b", "deepseek-v2", "--ctx", "128k", "--explain").stdout
    assert "2·n_kv·d_h = 2·8·128 = 2,048 elements" in out
    assert "n_kv = 8   from layer_groups[0].attention.n_kv_heads" in out
    assert "d_h = 128   from d_model / layer_groups[0].attention.n_heads = 8192/64" in out
    assert "d_c + d_R = 512 + 64 = 576 elements" in out
    assert "d_c = 512   from layer_groups[0].attention.kv_lora_rank" in out
    assert "= 42,949,672,960 bytes (40.0 GiB)" in out and "= 9,059,696,640 bytes" in out


def test_explain_windowed_and_config_origin():
    path = REFERENCE_MODELS / "gemma3-resolved" / "gemma-3-27b-it.json"
    out = run("show", path, "--ctx", "128k", "--explain").stdout
    assert "tokens held: min(ctx, W) = min(131,072, 1,024) = 1,024" in out
    assert "(config.json: num_key_value_heads)" in out and "(config.json: head_dim)" in out


@pytest.mark.parametrize(("config", "lines"), [
    # a review: the state symbols of imported hybrids named no config key, and KDA's d named the top-level head_dim
    ("models-2026/nemotron-h-56b-base-8k.json", ["H = 256   from layer_groups[0].attention.mamba_num_heads  (config.json: mamba_num_heads)",
                                                 "G = 8   from layer_groups[0].attention.n_groups  (config.json: n_groups (or mamba_n_groups))",
                                                 "K = 4   from layer_groups[0].attention.conv_kernel  (config.json: conv_kernel (or mamba_d_conv))"]),
    ("configs-extra-6/falcon-h1-0.5b-base.json", ["N = 128   from layer_groups[0].parallel_mixer.ssm_state_size  (config.json: mamba_d_state)",
                                                  "(config.json: mamba_d_head (\"auto\": the mixer's width / mamba_n_heads))"]),
    ("models-2026/jamba-v0.1.json", ["E = 2   from layer_groups[0].attention.mamba_expand  (config.json: mamba_expand)"]),
    ("configs-extra-3/kimi-linear-48b-a3b-instruct.json", ["d = 128   from layer_groups[0].attention.head_dim  (config.json: linear_attn_config.head_dim)",
                                                           "K = 4   from layer_groups[0].attention.conv_kernel  (config.json: linear_attn_config.short_conv_kernel_size)"]),
    ("models-2026/deepseek-v3.2.json", ["d_I = 128   from layer_groups[0].attention.index_head_dim  (config.json: index_head_dim)"]),
    # a model read from text_config names the keys under it (gemma4, llama4, qwen3_vl, qwen3_5_moe: 'head_dim' before),
    # and Gemma 4's full layers name their own keys
    ("models-2026/gemma-4-26b-a4b.json", [
        "d_h = 512   from layer_groups[1].attention.head_dim  (config.json: text_config.head_dim (full-attention layers: "
        "text_config.global_head_dim))",
        "n_kv = 2   from layer_groups[1].attention.n_kv_heads  (config.json: text_config.num_key_value_heads (full-attention "
        "layers under text_config.attention_k_eq_v: text_config.num_global_key_value_heads))"]),
    ("configs-extra-2/qwen3.5-35b-a3b.json", ["(config.json: text_config.linear_key_head_dim)",
                                              "(config.json: text_config.num_key_value_heads)"]),
    ("models-2026/llama-4-scout-17b-16e-instruct.json", ["(config.json: text_config.head_dim)"]),
    # a text model's own file, which leaves head_dim out: Gemma3TextConfig's 256 (a review: the key was cited as if given)
    ("models/gemma-3-12b-it.text_config.json", ["(config.json: head_dim (absent: the config class's default))"]),
    ("models-2026/gpt-oss-20b.json", ["d_h = 64   from layer_groups[0].attention.head_dim  (config.json: head_dim)"]),
])
def test_explain_names_the_config_key_of_state_and_indexer_symbols(config, lines):
    out = run("show", REFERENCE_MODELS.parent / config, "--explain", "--ctx", "4k").stdout
    assert all(line in out for line in lines), [line for line in lines if line not in out]


def test_a_text_models_own_file_names_its_keys_plain(tmp_path):
    # the same Gemma 4 text model as a gemma4_text file of its own: no text_config to name
    text = json.loads((REFERENCE_MODELS.parent / "models-2026" / "gemma-4-26b-a4b.json").read_text())["text_config"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**text, "model_type": "gemma4_text"}))
    out = run("show", path, "--explain", "--ctx", "4k").stdout
    assert "(config.json: head_dim (full-attention layers: global_head_dim))" in out and "text_config" not in out
    assert "d_model (config.json: hidden_size)" in out


def test_explain_json_carries_the_derivation():
    rows = compare_json("gemma3-27b", "--ctx", "128k", "--explain")
    d = rows[0]["derivation"]
    assert d["kv_cache_bytes"] == rows[0]["kv_cache_bytes"]
    local = next(g for g in d["groups"] if g["group"] == "local")
    assert local["tokens_held"] == 1024 and local["n_layers"] == 52
    assert {s["symbol"]: s["value"] for s in local["symbols"]} == {"n_kv": 16, "d_h": 128}


@pytest.mark.parametrize("fmt", ["markdown", "latex"])
def test_explain_in_paper_formats_stays_pasteable(fmt):
    out = run("compare", "deepseek-v2", "--ctx", "4k", "--explain", "--format", fmt).stdout
    if fmt == "latex":
        after = out.split(r"\end{table}")[1].strip().splitlines()
        assert after and all(line.startswith("%") for line in after)
    else:
        assert "```text" in out


def test_explain_bytes_lines_add_up_under_kv_quant():
    # with --kv-quant the bytes lines said '42,944 elements × 8/8 bytes = 48,068 bytes': the scheme's scales (and
    # fp8-ds-mla's bf16 RoPE key) were in the result but not in the line; now payload + extra = total, each figure
    # written out: DeepSeek-V3.2 (61 layers, 512 + 64 + 128 indexer = 704 elements), fp8-ds-mla 656 + 132 = 788 bytes
    out = run("compare", "deepseek-v3.2", "--ctx", "128k", "--kv-dtype", "fp8", "--kv-quant", "fp8-ds-mla", "--explain").stdout
    assert ("61×704 = 42,944 elements × 8/8 bytes = 42,944 bytes + 5,124 bytes of fp8-ds-mla's fp32 scales and the RoPE "
            "key kept in bf16 = 48,068 bytes") in out and 61 * 788 == 48_068 and 61 * (788 - 704) == 5_124
    # llama3-8b int4 g64: per layer K 1,024 channels × 4 bytes / 64 tokens + V 1,024/64 groups × 4 bytes = 128 bytes
    out = run("compare", "llama3-8b", "--ctx", "4k", "--kv-dtype", "int4", "--kv-quant", "g64", "--explain").stdout
    assert ("65,536 elements × 4/8 bytes = 32,768 bytes + 4,096 bytes of g64's fp16 scales and zero points, a group "
            "of 64 tokens' share = 36,864 bytes") in out and 32 * 128 == 4_096  # the rate: a short cache pays a whole group
    assert ("268,435,456 elements × 4/8 bytes = 134,217,728 bytes + 16,777,216 bytes of g64's fp16 scales and zero "
            "points = 150,994,944 bytes") in out and 4096 * 4096 == 16_777_216
    # a mutation review: a group that does not divide a token's bytes rounds the rate up (a floor went unseen). g100:
    # 100 tokens of a layer take 100 · 2,048 values · 4 bits = 102,400 bytes, K's scales 1,024 channels · one group ·
    # 4 bytes = 4,096, V's 100 tokens · ceil(1,024 / 100) = 11 groups · 4 bytes = 4,400: 110,896 bytes, 1,109 a token
    # (⌈1,108.96⌉), 35,488 over the 32 layers
    row = json.loads(run("compare", "llama3-8b", "--ctx", "4k", "--kv-dtype", "int4", "--kv-quant", "g100",
                         "-f", "json").stdout)[0]
    assert row["kv_bytes_per_token"] == 32 * -(-(102_400 + 4_096 + 100 * 11 * 4) // 100) == 35_488
    doc = json.loads(run("compare", "llama3-8b", "--ctx", "4k", "--kv-dtype", "int4", "--kv-quant", "per-head",
                         "--explain", "-f", "json").stdout)[0]
    d = doc["derivation"]
    assert d["kv_quant"] == "per-head" and d["payload_bytes"] == 268_435_456 // 2
    assert d["kv_cache_bytes"] - d["payload_bytes"] == 32 * 2 * 8 * 4096 * 4  # an fp32 scale a token, head, K and V
    plain = run("compare", "llama3-8b", "--ctx", "4k", "--kv-dtype", "int4", "--explain").stdout
    assert "65,536 elements × 4/8 bytes = 32,768 bytes (32.0 KiB)" in plain and "scales" not in plain


def test_explain_names_a_layer_without_a_mixer_as_such():
    out = run("compare", "nemotron-h-56b", "--ctx", "1", "--explain").stdout
    assert "tokens held: none (no sequence mixer) = 0" in out and "[no sequence mixer: no cache and no state]" in out
    assert "(54 layers), none (no sequence mixer)" in out and "NONE" not in out  # no kind to name: the rule says so


def test_explain_with_csv_is_refused():
    res = run("compare", "gpt2", "--ctx", "1k", "--explain", "--format", "csv", ok=False)
    assert res.exit_code != 0 and "--explain cannot be combined with --format csv" in res.stderr


# ---------------------------------------------------------------- show, list, import


def test_show_groups_and_per_layer():
    rows = json.loads(run("show", "gemma3-27b", "--ctx", "128k", "--format", "json").stdout)
    assert rows["summary"]["kv_cache_bytes"] == 11_173_625_856
    assert {g["group"]: g["n_layers"] for g in rows["groups"]} == {"global": 10, "local": 52}
    layers = json.loads(run("show", "gemma3-27b", "--per-layer", "--format", "json").stdout)["layers"]
    assert [r["layer"] for r in layers] == list(range(62))
    assert sum(r["bytes"] for r in layers) == 11_173_625_856
    assert "sliding_window" not in layers[5] and layers[4]["sliding_window"] == 1024  # JSON leaves out None
    assert layers[5]["tokens_held"] == 131_072 and layers[4]["tokens_held"] == 1024


@pytest.mark.parametrize("fmt", FORMATS)
def test_show_every_format(fmt):
    out = run("show", "deepseek-v2", "--ctx", "128k", "--format", fmt).stdout
    assert ("9059696640" if fmt in ("csv", "json") else "8.44 GiB") in out


def test_show_table_names_dims_and_sources():
    out = run("show", "gemma3-27b").stdout
    assert "d_h 128 (head_dim)" in out and "window 1,024" in out and "huggingface.co" in out


def test_show_rejects_a_ctx_list():
    res = run("show", "gpt2", "--ctx", "1k,2k", ok=False)
    assert res.exit_code == 2 and "show takes one context" in res.stderr


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FORMATS)
def test_list_every_format(fmt):
    out = run("list", "--format", fmt).stdout
    for name in ALL_BUNDLED:
        assert name.replace("_", r"\_") in out
    if fmt == "json":
        rows = {r["model"]: r for r in json.loads(out)}
        assert rows["llama3-70b"]["kv_bytes_per_token"] == 327_680
        assert rows["deepseek-v2"]["kv_lora_rank"] == 512 and rows["falcon-7b"]["n_kv_heads"] == 1


def test_name_lookup_is_case_insensitive():
    assert compare_json("Llama3-70B", "--ctx", "1k")[0]["model"] == "llama3-70b"


def test_import_writes_equivalent_yaml(tmp_path):
    config = REFERENCE_MODELS / "llama-3-70b.json"
    out = tmp_path / "l70.yaml"
    res = run("import", config, "-o", out, "--name", "l70")
    assert f"wrote {out}" in res.stderr
    assert compare_json(str(out), "--ctx", "128k")[0]["kv_cache_bytes"] == 42_949_672_960
    assert run("import", config).stdout.startswith("name: llama-3-70b\n")


def test_config_json_accepted_wherever_model_is(tmp_path):
    config = REFERENCE_MODELS / "deepseek-v2.json"
    folder = tmp_path / "DeepSeek-V2"
    folder.mkdir()
    shutil.copy(config, folder / "config.json")
    row = compare_json(str(folder / "config.json"), "--ctx", "128k")[0]
    assert row["model"] == "DeepSeek-V2" and row["kv_cache_bytes"] == 9_059_696_640


def test_version():
    assert run("--version").stdout.startswith("kvcalc ")


def test_error_empty_spec(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("")
    assert f"error: {path}: the file is empty" in failing("show", path)


@pytest.mark.slow
def test_python_dash_m_works():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "kvcalc", "compare", "gpt2", "--ctx", "1k", "-f", "json"],
                         capture_output=True, text=True, check=True).stdout
    # GPT-2: 12 layers · 2 · 12 heads · 64 · 2 B = 36,864 B per token.
    assert json.loads(out)[0]["kv_cache_bytes"] == 36_864 * 1024


# ---------------------------------------------------------------- every error class: message, exit code, no traceback


def failing(*args) -> str:
    res = run(*args, ok=False)
    assert res.exit_code != 0, str(res)
    assert "Traceback" not in res.stdout + res.stderr, str(res)
    assert res.exception is None or isinstance(res.exception, SystemExit), str(res)
    return res.stderr


def test_error_unknown_model_suggests_close_names():
    err = failing("compare", "lama3-70b")
    assert "error: unknown model 'lama3-70b'; did you mean llama3-70b" in err
    assert err.count("\n") == 1


def test_error_missing_file():
    assert "error: nosuch/spec.yaml: no such file" in failing("show", "nosuch/spec.yaml")


def test_error_unreadable_file(tmp_path):
    path = tmp_path / "binary.yaml"
    path.write_bytes(b"\xff\xfe\x00\x81")
    assert f"error: {path}: cannot read:" in failing("show", path)
    assert f"error: {tmp_path}/: is a folder, not a spec or config file" in failing("show", f"{tmp_path}/")


def test_error_malformed_yaml(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nfamily: [unclosed\n")
    assert f"error: {path}: malformed YAML: line 3, column 1" in failing("show", path)


def test_error_malformed_json(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama",')
    assert f"error: {path}: malformed JSON: line 1, column 24" in failing("compare", path)


def test_error_json_without_model_type(tmp_path):
    path = tmp_path / "x.json"
    path.write_text('{"hidden_size": 4096}')
    assert "model_type: not found" in failing("show", path)


def test_error_schema_violation(tmp_path):
    path = tmp_path / "v.yaml"
    path.write_text((ROOT_SPECS / "llama3-8b.yaml").read_text().replace("n_kv_heads: 8", "n_kv_heads: 5"))
    err = failing("show", path)
    assert f"error: {path}: layer_groups[0].attention: n_heads (32) must be divisible by n_kv_heads (5)" in err


def test_error_unknown_key(tmp_path):
    path = tmp_path / "typo.yaml"
    path.write_text((ROOT_SPECS / "gpt2.yaml").read_text().replace("vocab_size:", "vocab_sise:"))
    err = failing("show", path)
    # one line, with the field it misspells (a review: it was two, the second 'vocab_size: required field is missing')
    assert f"{path}: vocab_sise: unknown key: did you mean vocab_size? (line " in err and "vocab_size: required" not in err
    # a field of another attention kind is named as such, not as a misspelling of a field this kind has
    path.write_text((ROOT_SPECS / "gpt2.yaml").read_text().replace("      n_heads: 12\n", "      n_heads: 12\n      n_kv_heads: 4\n"))
    assert "layer_groups[0].attention.n_kv_heads: not a field of kind mha (a field of gqa)" in failing("show", path)


@pytest.mark.parametrize("ctx, message", [
    ("12q", "'12q' is not a token count"), ("0", "at least 1 token"), ("-4k", "not a token count"),
    ("4k,,8k", "comma list"), ("1.3k", "not a whole number"),
])
def test_error_bad_ctx(ctx, message):
    err = failing("compare", "gpt2", "--ctx", ctx)
    assert "Invalid value for '--ctx'" in err and message in err


def test_error_unsupported_dtype():
    err = failing("compare", "gpt2", "--kv-dtype", "fp6")
    assert "--kv-dtype" in err and "'fp6' is not one of" in err


def test_error_unsupported_model_type(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "bert", "hidden_size": 768}))
    err = failing("import", path)
    from kvcalc.hf import IMPORTERS

    assert f"error: {path}: model_type: 'bert' is not supported; supported model_types: {', '.join(sorted(IMPORTERS))}" in err


def test_error_import_of_a_yaml_spec():
    assert "not a Hugging Face config.json" in failing("import", ROOT_SPECS / "gpt2.yaml")


def test_error_import_output_unwritable(tmp_path):
    config = REFERENCE_MODELS / "gpt2.json"
    assert "cannot write" in failing("import", config, "-o", tmp_path / "no" / "such" / "dir.yaml")



# ---------------------------------------------------------------- start-up: only the command asked for is built


@pytest.mark.slow
@pytest.mark.parametrize("args", [
    ["compare", "llama3-70b", "deepseek-v2", "--ctx", "128k"],
    ["compare", "--help"],
    ["compare", "llama3-70b", "--bogus"],
    ["table", "models", "--ctx", "4k"],
    ["table"],
    ["sweep"],
    ["--help"],
    ["bogus"],
    [],
    ["--version"],
])
def test_the_one_command_app_answers_as_the_whole_app(args):
    # main() runs app_for(argv): for a known command a copy of the app with that command alone (typer builds every
    # registered command's parameters before parsing); the output, errors and exit codes must be the whole app's
    from typer.testing import CliRunner

    from kvcalc.cli import app, app_for

    env = {"COLUMNS": "240", "TERM": "dumb", "NO_COLOR": "1"}
    one, whole = (CliRunner().invoke(a, args, env=env) for a in (app_for(args), app))
    assert (one.exit_code, one.stdout, one.stderr) == (whole.exit_code, whole.stdout, whole.stderr)


def _command_lines() -> list[list[str]]:
    """Every command's name (table's two as `table dims` and `table models`), for the checks below."""
    from typer.main import get_command

    from kvcalc.cli import app

    group = get_command(app)
    names = []
    for name, command in sorted(group.commands.items()):  # type: ignore[attr-defined]
        subs = sorted(getattr(command, "commands", {}))
        names += [[name, sub] for sub in subs] if subs else [[name]]
    return names


@pytest.mark.slow
@pytest.mark.parametrize("command", _command_lines(), ids=" ".join)
def test_every_command_answers_help_and_a_bad_option_as_the_whole_app(command):
    from typer.testing import CliRunner

    from kvcalc.cli import app, app_for

    env = {"COLUMNS": "240", "TERM": "dumb", "NO_COLOR": "1"}
    for args in ([*command, "--help"], [*command, "--no-such-option"]):
        one, whole = (CliRunner().invoke(a, args, env=env) for a in (app_for(args), app))
        assert (one.exit_code, one.stdout, one.stderr) == (whole.exit_code, whole.stdout, whole.stderr), args


def test_app_for_keeps_only_the_named_command():
    from typer.main import get_command

    from kvcalc.cli import app, app_for

    assert sorted(get_command(app_for(["fit", "x"])).commands) == ["fit"]
    assert sorted(get_command(app_for(["table", "dims"])).commands) == ["table"]
    assert app_for(["--help"]) is app and app_for(["no-such-command"]) is app and app_for([]) is app
    assert len(get_command(app).commands) == 14  # 13 commands and the table group, untouched by the copies


def test_explain_says_what_a_review_found_unclear_or_untrue():
    # an audit of 11,508 derivation statements found one untrue: a KV-shared layer of Gemma 3n with a window said
    # 'min(ctx, W) = min(100, 512) = 0' (it holds none: it reads an earlier layer's cache)
    gemma3n = str(ROOT / "tests/data/reference/configs-gemma3n/gemma-3n-e2b.json")
    out = run("compare", gemma3n, "--ctx", "100", "--explain").stdout
    assert "tokens held: none (reads an earlier layer's cache) = 0" in out and "min(100, 512) = 0" not in out
    shared = [g for g in json.loads(run("compare", gemma3n, "--ctx", "100", "--explain", "-f", "json").stdout)[0]
              ["derivation"]["groups"] if g.get("kv_shared")]
    assert shared and all("W" not in g["tokens_rule"] and g["tokens_held"] == 0 for g in shared)
    # vLLM's DeepSeek-V3.2 pages hold its indexer key in fp8 with a scale: the page bytes are derived from that entry
    row = json.loads(run("compare", "deepseek-v3.2", "--ctx", "64", "--engine", "vllm", "--explain", "-f", "json").stdout)[0]
    e = row["derivation"]["groups"][0]["engine"]
    assert e["stored_token_bytes"] == (512 + 64) * 2 + 128 + 4 == 1284  # bf16 latent and RoPE key; fp8 key, fp32 scale
    assert e["pages"] * e["block_size"] * e["stored_token_bytes"] == e["bytes_per_layer"] == 82_176
    out = run("compare", "deepseek-v3.2", "--ctx", "64", "--engine", "vllm", "--kv-dtype", "fp8", "--explain").stdout
    assert ("a token of a layer as vllm stores it: c_kv 512 in fp8 with an fp32 scale a 128 = 528; k_rope 64 in bf16 = "
            "128; index_k 128 in fp8 with an fp32 scale a 128 = 132: 788 bytes) = 50,432 bytes a layer") in out
    # a --block-size vLLM raises for a hybrid model is said, not only applied
    res = run("compare", "qwen3-next-80b-a3b", "--ctx", "4k", "--engine", "vllm", "--block-size", "16")
    assert "warning: qwen3-next-80b-a3b: --block-size 16: vLLM raises a hybrid model's attention pages to 576 tokens" in res.stderr
    assert json.loads(run("compare", "qwen3-next-80b-a3b", "--ctx", "4k", "--engine", "vllm", "--block-size", "16",
                          "-f", "json").stdout)[0]["block_size"] == 576
    assert "raises" not in run("compare", "qwen3-next-80b-a3b", "--ctx", "4k", "--engine", "vllm", "--block-size", "1024").stderr
    # a constant-state group per GPU says its states, not '0 = 0 = 0 elements (the same on each of 2 tp ranks)'
    out = run("compare", "qwen3-next-80b-a3b", "--ctx", "4k", "--tp", "2", "--explain").stdout
    assert "linear: 36 of its layers here; no per-token cache; constant states 19,759,104 bytes (18.8 MiB)" in out
    assert "0 = 0 = 0 elements (the same" not in out and 2 * 19_759_104 == 36 * 548_864 * 2  # half of bf16 states
    assert "KV cache per GPU: 50,331,648 bytes" in out  # the state group's 0 no longer in the sum
    # counts agree in number; layer kinds are named as list names them
    for name in ALL_BUNDLED:
        text = run("compare", name, "--ctx", "1", "--explain", "--mtp").stdout  # --mtp: DeepSeek-V3's one MTP layer
        assert not any(f" 1 {noun}s" in text for noun in ("layer", "page", "token", "padding slot")), name
        assert "GATED_DELTANET" not in text and "NONE," not in text, name


def test_explain_derives_the_engine_pages():
    # --engine's bytes were never derived (an audit): each group's pages, the rule that counts them and their bytes.
    # Gemma 3 27B at 100,000 tokens, vLLM pages of 16: 10 global layers touch 100,000 / 16 = 6,250 pages, the 52
    # 1,024-token windows ceil(1,024 / 16) + 1 = 65; a token of a layer is 2·16·128·2 = 8,192 bytes
    out = run("compare", "gemma3-27b", "--ctx", "100000", "--engine", "vllm", "--block-size", "16", "--explain").stdout
    assert (f"vllm pages: 6,250 of 16 tokens a layer and sequence (the pages its held tokens touch: (ctx − 1) // B − "
            f"(ctx − held) // B + 1) = {6250 * 16 * 8192:,} bytes a layer for the batch; × 10 layers = "
            f"{10 * 6250 * 16 * 8192:,}") in out
    # vLLM's groups of 10 layers hold the 52 windowed ones in 6 groups: 8 padding slots (kvcalc.costs.paged.PoolLayout)
    assert (f"vllm pages: 65 of 16 tokens a layer and sequence (vLLM's window rule: min(ceil(ctx / B), ceil(W / B) + 1))"
            f" = {65 * 16 * 8192:,} bytes a layer for the batch; × (52 layers + 8 padding slots of vLLM's groups) ="
            f" {60 * 65 * 16 * 8192:,}") in out
    total = 10 * 6250 * 16 * 8192 + 60 * 65 * 16 * 8192
    assert f"KV cache in vllm's whole pages: 8,192,000,000 + 511,180,800 = {total:,} bytes" in out
    row = json.loads(run("compare", "gemma3-27b", "--ctx", "100000", "--engine", "vllm", "--block-size", "16", "--explain", "-f", "json").stdout)[0]
    assert row["engine_kv_bytes"] == row["derivation"]["engine_kv_bytes"] == total
    # Llama 4 Scout at 10,001 tokens: a chunked layer past its first chunk reserves a whole chunk, 8,192 / 16 pages,
    # and under vLLM the page of the next chunk's first token (the chunk before is freed one step late)
    out = run("compare", "llama4-scout", "--ctx", "10001", "--engine", "vllm", "--block-size", "16", "--explain").stdout
    assert ("vllm pages: 513 of 16 tokens a layer and sequence (a whole chunk and the next token, as vLLM frees a "
            "chunk's pages one step late: (B − gcd(B, C) + C) // B + 1)") in out
    out = run("compare", "llama4-scout", "--ctx", "10001", "--engine", "sglang", "--block-size", "16", "--explain").stdout
    assert "sglang pages: 512 of 16 tokens a layer and sequence (a whole chunk: (B − gcd(B, C) + C − 1) // B + 1)" in out


def test_a_model_without_softmax_heads_shows_a_dash_for_them(tmp_path):
    # an audit: a pure Mamba-2 stack left the Q heads cell blank, where every other missing figure shows a dash
    path = tmp_path / "m.yaml"
    path.write_text("name: pure-mamba\nfamily: test\nd_model: 1024\nn_layers: 4\nvocab_size: 1000\nmax_context: 8192\n"
                    "ffn: {kind: none}\nlayer_groups:\n  - layers: all\n    attention: {kind: mamba2, mamba_num_heads: 32, "
                    "mamba_head_dim: 64, ssm_state_size: 128, n_groups: 1, conv_kernel: 4}\n")
    row = run("compare", str(path), "--ctx", "4k", "-f", "markdown").stdout.splitlines()[4]
    assert row.startswith("| pure-mamba | MAMBA2 | 4 | – | state | – | 4k | 0 B | 0 B |"), row


def test_show_gives_the_short_form_of_max_context_only_where_it_differs():
    # an audit: Whisper's 448 was written '448 (448)'
    def line(model: str) -> str:
        return next(x for x in run("show", model, "--ctx", "1k").stdout.splitlines() if x.startswith("max_context"))

    assert line("whisper-large-v3").split()[:2] == ["max_context", "448"] and "(" not in line("whisper-large-v3")
    assert line("llama3-70b").split()[:3] == ["max_context", "8,192", "(8k)"]


def test_each_commands_help_says_what_its_options_do_there():
    # a review of every --help against behaviour: fit's --hardware is the GPUs it fills (required), not roofline times;
    # plot has no --gen (no metric counts generation); show's --no-windows changes the cache alone (no FLOPs there)
    def help_of(*command: str) -> str:
        return " ".join(run(*command, "--help").stdout.split())  # wrapped lines joined

    assert "the GPUs whose memory is filled (required)" in help_of("fit")
    assert "adds roofline times" in help_of("compare") and "adds roofline times" not in help_of("fit")
    assert "--gen" not in help_of("plot") and run("plot", "gpt2", "-o", "x.png", "--gen", "5", ok=False).exit_code == 2
    assert "the cache without them" in help_of("show") and "FLOPs and bytes read without them" in help_of("compare")
    assert "per-GPU weights under --tp/--pp/--dp" in help_of("show")
    assert "under --engine sglang bf16, with Gated DeltaNet" in help_of("compare")  # --state-dtype's engine defaults


def test_a_sweeps_preset_under_a_layout_or_engine_shows_its_gpus_and_pages_as_compares_does():
    # a review: the README's --columns row promises it for compare and sweep; sweep added nothing. gpt2 at tp 2: 12
    # layers · 12 heads / 2 · 64 · 2 (K and V) · 2 bytes = 36 KiB a token a GPU, 18 MiB at 1k (compare's figure)
    def header(*args: str) -> str:
        return " ".join(run(*args).stdout.splitlines()[1:3])

    for command in (("sweep", "gpt2", "-c", "1k", "--tp", "2"), ("compare", "gpt2", "-c", "1k", "--tp", "2")):
        out = run(*command).stdout
        assert "GPUs" in header(*command) and "18.0 MiB" in out, command
    assert "Engine" in header("sweep", "llama3-8b", "-c", "1k", "--engine", "vllm")
    assert run("sweep", "llama3-8b", "-c", "1k", "--engine", "vllm").stdout.splitlines()[0].endswith(", vllm pages")
    # column keys named are shown alone, as in compare
    assert "GPUs" not in header("sweep", "gpt2", "-c", "1k", "--tp", "2", "--columns", "kv_cache_bytes")


def test_an_output_file_of_any_name_takes_the_format_given(tmp_path):
    # a review: compare and sweep refused `-f csv -o out.xyz` ('give --format'), the title's MLA words having asked
    # for the default format's extension rule; the other table commands wrote it
    for command in (("compare", "deepseek-v2"), ("sweep", "deepseek-v2", "-c", "1k")):
        out = tmp_path / "out.xyz"
        run(*command, "-f", "csv", "-o", str(out))
        assert out.read_text().startswith("model,"), command


def test_a_hybrids_fit_says_its_states_are_in_the_per_gpu_cache():
    # a review: fit's 'KV cache per GPU' held the states too (its json key says so), beside a 'KV cache' of the KV
    # alone: one of two GPUs seemed to hold more than the whole cache
    def header(*args: str) -> str:
        return run(*args, "-f", "markdown").stdout.splitlines()[2]  # the title, a blank line, the header row

    assert "KV + states per GPU" in header("fit", "nemotron-h-56b", "--hardware", "h100-80gb", "--tp", "2", "--ctx", "4k")
    assert "KV cache per GPU" in header("fit", "llama3-8b", "--hardware", "h100-80gb", "--ctx", "4k")


def test_small_things_a_usability_review_found():
    # show's pages of one token, fit's title under DP attention, import -o /dev/null, table dims' hybrid layers, and a
    # constant-state group's '0 = 0 = 0 elements'
    assert "sglang: whole pages of 1 token a layer and sequence" in run("show", "llama3-8b", "--ctx", "1k", "--engine", "sglang").stdout
    title = run("fit", "deepseek-v3", "--hardware", "h200-141gb", "--gpus", "8", "--engine", "sglang", "--dp-attention",
                "--weights-dtype", "fp8", "--ctx", "32k").stdout.splitlines()[0]
    assert "(tp 8, pp 1, dp 1, DP attention)" in title
    res = run("import", str(ROOT / "tests/data/reference/models/llama-3-8b.json"), "-o", "/dev/null")
    assert res.exit_code == 0 and "the file exists" not in res.stderr  # a device is no file to keep
    err = run("table", "dims", "nemotron-h-56b", "qwen3-next-80b-a3b").stderr
    assert "note: nemotron-h-56b: its MAMBA2 layers are not in this table" in err
    assert "note: qwen3-next-80b-a3b: its GDN layers are not in this table" in err
    out = run("show", "qwen3-next-80b-a3b", "--explain").stdout
    assert "per token and layer: 0 elements   [constant-state layer" in out and "0 = 0 = 0" not in out


def test_explain_names_the_state_components_each_dtype_stores():
    # a review: a state kept in two dtypes said '226,492,416 elements × 32/8 bytes (fp32) + 3,317,760 elements ×
    # 16/8 bytes (bf16)' without saying which part is which. Nemotron-H: 54 Mamba-2 layers, an fp32 SSM state of
    # 256 heads · 64 · 256 = 4,194,304 and a conv state of (4 − 1) · (16,384 + 2 · 8 · 256) = 61,440 in the KV dtype
    out = run("show", "nemotron-h-56b", "--ctx", "4k", "--explain").stdout
    assert (f"constant states: {54 * 4_194_304:,} elements × 32/8 bytes (fp32: ssm) + {54 * 61_440:,} elements × 16/8 "
            f"bytes (bf16: conv) = {54 * (4_194_304 * 4 + 61_440 * 2):,} bytes") in out
    doc = json.loads(run("show", "nemotron-h-56b", "--ctx", "4k", "--explain", "-f", "json").stdout)
    mamba = next(g for g in doc["derivation"]["groups"] if g["kind"] == "mamba2")
    assert mamba["state"]["dtypes"] == {"ssm": "fp32", "conv": "bf16"}
    # one dtype for every part (--state-dtype): nothing to name
    out = run("show", "nemotron-h-56b", "--ctx", "4k", "--explain", "--state-dtype", "fp32").stdout
    assert f"constant states: {54 * (4_194_304 + 61_440):,} elements × 32/8 bytes (fp32) = " in out
