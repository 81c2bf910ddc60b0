"""#5's acceptance through the CLI: a new attention kind is one class; an unknown kind is one clear line; tables
never lose a column; and the seven output defects found by trying kvcalc as a new user would stay fixed."""

from __future__ import annotations

import csv
import io
import json
from typing import ClassVar, Literal

import pytest
from pydantic import Field, PositiveInt
from typer.testing import CliRunner

from conftest import run
from kvcalc.attention import KINDS, AttentionKind, Formula, Layer, Symbol, Weight, Work, register
from kvcalc.cli import app


def run_at(width: int, *args: str):
    """`kvcalc ARGS` with a terminal `width` columns wide; returns (exit code, stdout, stderr)."""
    res = CliRunner().invoke(app, list(args), env={"COLUMNS": str(width), "TERM": "dumb", "NO_COLOR": "1"})
    assert res.exit_code == 0, res.stdout + res.stderr
    return res.stdout, res.stderr


# ---------------------------------------------------------------- a new attention kind is one class


class KeysOnly(AttentionKind):
    """A made-up kind that caches keys but no values (the test's own; not a real architecture)."""

    kind: Literal["keys_only"]
    n_heads: PositiveInt = Field(description="Query heads.")
    n_kv_heads: PositiveInt = Field(description="Key heads.")
    head_dim: PositiveInt = Field(description="Per-head dim.")
    label: ClassVar[str] = "KO"

    def cache_formula(self, layer: Layer, layout: str) -> Formula:
        k = self.n_kv_heads * self.head_dim  # keys only: no 2 for values
        return Formula("n_kv·d_h", (Symbol("n_kv", self.n_kv_heads, f"{layer.path}.n_kv_heads"),
                                    Symbol("d_h", self.head_dim, f"{layer.path}.head_dim")), k, {"k": k}, "test kind")

    def weights(self, layer: Layer) -> tuple[Weight, ...]:
        d, h, kv, dh = layer.d_model, self.n_heads, self.n_kv_heads, self.head_dim
        return (Weight("W_Q", "attn/q", (d, h * dh)), Weight("W_K", "attn/k", (d, kv * dh)),
                Weight("W_O", "attn/o", (h * dh, d)))

    def flops(self, layer: Layer, work: Work, schedule: str) -> dict[str, int]:
        return {w.component: 2 * work.tokens * w.size for w in self.weights(layer)} | {
            "attn/scores": 2 * work.pairs * self.n_heads * self.head_dim}

    @property
    def query_heads(self) -> int:
        return self.n_heads

    def kv_heads(self, layer: Layer) -> int:
        return self.n_kv_heads


SPEC = """
name: keys-only-demo
family: test
d_model: 64
n_layers: 3
vocab_size: 100
max_context: 4096
ffn: {kind: dense, d_ff: 128}
layer_groups:
  - layers: all
    attention: {kind: keys_only, n_heads: 4, n_kv_heads: 2, head_dim: 16}
"""


@pytest.fixture
def keys_only(tmp_path):
    register(KeysOnly)
    path = tmp_path / "keys-only.yaml"
    path.write_text(SPEC)
    yield path
    KINDS.pop("keys_only")


def test_a_new_kind_works_in_compare_cost_and_show(keys_only):
    row = json.loads(run("compare", keys_only, "--ctx", "1k", "-f", "json").stdout)[0]
    # 3 layers × 1024 tokens × (2 KV heads × 16) elements × 2 bytes (bf16)
    assert row["kv_cache_bytes"] == 3 * 1024 * 2 * 16 * 2
    assert row["n_kv_heads"] == 2 and row["attention"] == "keys_only"
    # weights: embed 100·64 + LM head 100·64 + per layer (64·64 + 64·32 + 64·64 attention, gated FFN 3·64·128, 2·64
    # norms) + the final norm 64
    assert row["params_total"] == 2 * 100 * 64 + 3 * (64 * 64 + 64 * 32 + 64 * 64 + 3 * 64 * 128 + 2 * 64) + 64
    flops = json.loads(run("cost", keys_only, "--ctx", "1k", "-f", "json").stdout)["flops"]
    pairs = 1024 * 1025 // 2  # causal prefill of 1024 tokens
    assert flops["prefill"]["attn/scores"] == 3 * 2 * pairs * 4 * 16
    show = json.loads(run("show", keys_only, "--ctx", "1k", "-f", "json").stdout)
    assert show["groups"][0]["formula"] == "n_kv·d_h" and show["groups"][0]["elements_per_token_per_layer"] == 32
    assert "KO" in run("compare", keys_only, "--ctx", "1k").stdout


def test_an_unknown_kind_is_one_line_naming_file_and_field(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(SPEC.replace("keys_only", "keys_first"))
    res = run("compare", path, ok=False)
    assert res.exit_code == 1 and "Traceback" not in res.stderr + res.stdout
    line = res.stderr.strip()
    assert line.startswith(f"error: {path}: layer_groups[0].attention.kind: unknown attention kind 'keys_first': "
                           "choose one of mha, gqa, mqa, mla, linear") and "\n" not in line


def test_a_kind_without_a_numpy_layer_is_refused_by_run(keys_only):
    res = run("run", keys_only, "--ctx", "8", "--quiet", ok=False)
    assert res.exit_code == 1
    assert "kvcalc run has no NumPy layer for attention kind 'keys_only'" in res.stderr


# ---------------------------------------------------------------- tables that fit


def test_default_compare_fits_100_columns():
    out, err = run_at(100, "compare", "llama3-70b", "deepseek-v2", "--ctx", "128k")
    assert max(len(line) for line in out.splitlines()) <= 100
    assert "note:" not in err
    for text in ("llama3-70b", "deepseek-v2", "40.0", "8.44", "512+64", "192/128", "1.00×", "0.211×"):
        assert text in out


@pytest.mark.slow
@pytest.mark.parametrize("width", [80, 160])
def test_all_columns_are_printed_whole_however_narrow(width):
    from kvcalc.present.columns import CATALOG, HARDWARE_KEYS, PRESETS
    from kvcalc.present.render import cell

    args = ("compare", "llama3-8b", "deepseek-v2", "--ctx", "8k", "--columns", "all")
    out, err = run_at(width, *args)
    raw = json.loads(run(*args, "-f", "json").stdout)
    lines = out.splitlines()
    keys = [k for k in PRESETS["all"] if k not in HARDWARE_KEYS]
    for key in keys:  # every header line of every column is printed whole
        for part in CATALOG[key].header.split("\n"):
            assert any(part in line for line in lines), f"header {part!r} of {key} is missing"
    for row in raw:  # and every figure: numbers never wrap, so each is whole on its row's line
        line = next(line for line in lines if line.split() and line.split()[0] == row["model"])
        for key in keys:
            if CATALOG[key].numeric and row.get(key) is not None:
                text = cell(row[key], CATALOG[key].kind).replace(" ", "")
                assert text in line.replace(" ", ""), f"{row['model']} {key}: {text} not in {line!r}"
    assert "note: this table needs" in err and "pick fewer with --columns" in err


# ---------------------------------------------------------------- the defects #5 lists (8-10: tests/test_defects_import.py)


def csv_rows(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


def test_defect_1_narrow_terminal_keeps_attention_and_mla_columns():
    out, _ = run_at(100, "compare", "llama3-8b", "deepseek-v2", "--ctx", "8k", "--columns", "all")
    assert "Attention" in out and "MLA" in out.replace("\n", " ")
    assert "latent" in out  # the MLA cache column


@pytest.mark.parametrize("command", [("cost", "deepseek-v2", "--ctx", "4k", "--hardware", "h100-80gb"),
                                     ("show", "gemma3-27b", "--ctx", "4k")])
def test_defect_2_multi_table_csv_keeps_every_table(command):
    rows = csv_rows(run(*command, "-f", "csv").stdout)
    tables = {r["table"] for r in rows}
    data = json.loads(run(*command, "-f", "json").stdout)
    summary = {r["key"]: r["value"] for r in rows if r["table"] == "summary"}
    assert set(data["summary"]) <= set(summary)  # every summary figure of the json is in the csv
    if command[0] == "cost":
        assert tables == {"flops", "summary"}
        assert int(summary["params_total"]) == data["summary"]["params_total"]
        assert summary["fits_in_memory"] == "false"  # 236B parameters in bf16 do not fit in 80 GiB
        total = next(r for r in rows if r["table"] == "flops" and r["component"] == "total")
        assert int(total["prefill"]) == data["flops"]["prefill"]["total"]
    else:
        assert tables == {"summary", "groups"}
        groups = [r for r in rows if r["table"] == "groups"]
        assert [int(g["bytes"]) for g in groups] == [g["bytes"] for g in data["groups"]]


def test_defect_3_sweep_columns_keep_model_and_ctx():
    rows = csv_rows(run("sweep", "llama3-8b", "gemma3-1b", "--ctx", "1k,2k", "--columns",
                        "kv_cache_bytes,weights_bytes", "-f", "csv").stdout)
    assert list(rows[0])[:2] == ["model", "ctx"] or {"model", "ctx"} <= set(rows[0])
    assert [(r["model"], r["ctx"]) for r in rows] == [("llama3-8b", "1024"), ("llama3-8b", "2048"),
                                                      ("gemma3-1b", "1024"), ("gemma3-1b", "2048")]
    table = run("sweep", "llama3-8b", "--ctx", "1k", "--columns", "kv_cache_bytes").stdout
    assert "Model" in table and "Ctx" in table and "llama3-8b" in table


def test_defect_4_booleans_read_the_same_in_each_format():
    args = ("compare", "llama3-70b", "--ctx", "128k", "--columns", "exceeds_max_context,fits_in_memory",
            "--hardware", "h100-80gb")
    table = run(*args).stdout
    assert "yes" in table and "no" in table and "True" not in table and "False" not in table
    row = csv_rows(run(*args, "-f", "csv").stdout)[0]
    assert (row["exceeds_max_context"], row["fits_in_memory"]) == ("true", "false")
    js = json.loads(run(*args, "-f", "json").stdout)[0]
    assert (js["exceeds_max_context"], js["fits_in_memory"]) == (True, False)
    assert "| no |" in run("cost", "llama3-70b", "--hardware", "h100-80gb", "-f", "markdown").stdout.replace("  ", " ")
    assert "tie_embeddings | no" in run("show", "llama3-8b", "-f", "markdown").stdout.replace("  ", " ")


def test_defect_5_show_help_offers_one_context():
    help_text = " ".join(run("show", "--help").stdout.split())
    assert "comma list" not in help_text and "Context length in tokens" in help_text
    res = run("show", "llama3-8b", "--ctx", "4k,8k", ok=False)
    assert res.exit_code == 2 and "show takes one context; use compare for several" in res.stderr


def test_defect_6_cost_warning_says_prompt_plus_generated():
    res = run("cost", "llama3-70b", "--ctx", "8k")
    assert ("warning: llama3-70b: the prompt of 8,192 plus 1,024 generated tokens (9,216) exceeds its trained "
            "maximum of 8,192 tokens") in res.stderr
    assert "warning" not in run("cost", "llama3-70b", "--ctx", "7k").stderr  # 7,168 + 1,024 = 8,192: within


def test_defect_7_expanded_mla_shows_its_kv_heads():
    expanded = run("compare", "deepseek-v2", "--ctx", "4k", "--mla-cache", "expanded").stdout
    latent = run("compare", "deepseek-v2", "--ctx", "4k").stdout
    assert "512+64" in latent and "512+64" not in expanded
    row = next(line.split() for line in expanded.splitlines() if line.split()[:1] == ["deepseek-v2"])
    # Model, Attention, Layers 60, Q heads 128, KV heads 128 (every head's K and V), head dims 192/128
    assert row[1:7] == ["MLA", "(expanded)", "60", "128", "128", "192/128"]


# ---------------------------------------------------------------- generated docs and the public API


def test_readme_key_table_is_generated_from_the_result_types():
    from conftest import ROOT
    from kvcalc.present.columns import key_table

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    between = readme.split("<!-- keys:begin -->\n")[1].split("\n<!-- keys:end -->")[0]
    assert between == key_table()


def test_json_keys_keep_their_order_and_only_add():
    from kvcalc.present.columns import JSON_KEYS

    before = ["model", "attention", "n_layers", "n_heads", "n_kv_heads", "head_dim", "kv_lora_rank", "qk_rope_head_dim",
              "sliding_window", "n_window_layers", "max_context", "ctx", "exceeds_max_context", "batch", "kv_dtype",
              "mla_cache", "kv_bytes_per_token", "kv_cache_bytes", "ratio", "gen", "weights_dtype", "params_total",
              "params_active", "weights_bytes", "flops_prefill", "flops_decode_token", "flops_generate_cached",
              "flops_generate_uncached", "decode_bytes_read", "decode_intensity", "mla_schedule",
              "flops_decode_token_naive", "flops_decode_token_absorbed", "mla_crossover", "hardware", "prefill_seconds",
              "decode_seconds_per_token", "tokens_per_second", "decode_bound", "fits_in_memory"]  # the keys of 0.1.0
    assert [k for k in JSON_KEYS if k in before] == before
    assert set(JSON_KEYS) - set(before) == {"family", "d_model", "attention_chunk_size", "state_bytes", "cache_bytes", "enc_ctx",
                                            "gpus", "kv_cache_bytes_per_gpu", "state_bytes_per_gpu", "weights_bytes_per_gpu",
                                            "kv_quant", "engine", "block_size", "engine_kv_bytes", "engine_state_bytes",
                                            "tp_allreduce_bytes", "comm_seconds_per_token", "block_size_per_gpu",
                                            "state_dtype", "tp", "pp", "dp", "ep", "dp_attention", "dense_attn", "mtp",
                                            "no_windows"}
    # the settings keys (a help-text review) came last, after every key before them
    assert JSON_KEYS[-8:] == ["tp", "pp", "dp", "ep", "dp_attention", "dense_attn", "mtp", "no_windows"]


@pytest.mark.slow
def test_public_api_computes_a_table_without_the_cli_or_numpy():
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from kvcalc import Settings, compare_rows, cost_figures, kv_cache, load_model\n"
        "spec = load_model('deepseek-v2').spec\n"
        "s = Settings(ctx=131072)\n"
        "rows, _ = compare_rows([load_model('llama3-70b').spec, spec], [4096, 131072], s)\n"
        "print(kv_cache(spec, s).bytes, cost_figures(spec, s).mla_schedule, len(rows), rows[1]['kv_cache_bytes'])\n"
        "print('numpy' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    # DeepSeek-V2: 60 layers × (512 + 64) elements × 2 bytes × 131072 tokens; Llama 3 70B: 80 · 2 · 8 · 128 · 2 · 131072
    assert out == [str(60 * 576 * 2 * 131072), "absorbed", "4", str(80 * 2 * 8 * 128 * 2 * 131072), "False"]


def test_every_cost_function_the_readme_names_is_in_the_api():
    # an audit: the README's Python API section listed decode_bytes beside kv_cache and prefill_flops, but
    # `from kvcalc import decode_bytes` failed (it lived in kvcalc.costs.traffic alone)
    import re

    import kvcalc
    from conftest import ROOT
    from kvcalc import Settings, decode_bytes, kv_cache, load_model

    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    listed = re.search(r"passed whole to every cost function \(([^)]*)\)", readme)
    assert listed is not None
    names = re.findall(r"`(\w+)`", listed.group(1))
    assert "decode_bytes" in names and len(names) >= 6
    for name in names:
        assert callable(getattr(kvcalc, name)), name
    # a dense model's decode step reads every token its cache holds: Llama 3 70B at 4,096 tokens, 80 layers ·
    # 2 · 8 · 128 · 2 bytes a token
    spec = load_model("llama3-70b").spec
    s = Settings(ctx=4096)
    assert decode_bytes(spec, s)["kv_cache"] == kv_cache(spec, s).bytes == 80 * 2 * 8 * 128 * 2 * 4096


def test_readme_lists_every_bundled_model_and_supported_model_type():
    from conftest import ROOT
    from kvcalc.hf import IMPORTERS
    from kvcalc.registry import bundled_names

    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert "## Bundled models " + ", ".join(bundled_names()) + "." in readme
    assert "Supported `model_type`s: " + ", ".join(sorted(IMPORTERS)) + "." in readme


def test_register_refuses_a_taken_kind_and_what_is_no_kind():
    # an API review: registering a GQA subclass as kind 'gqa' replaced the built-in for every bundled model, silently
    from kvcalc.attention.gqa import GQA
    from kvcalc.errors import KvcalcError

    class MyGQA(GQA):
        kind: Literal["gqa"] = "gqa"  # type: ignore[assignment]

    with pytest.raises(KvcalcError, match="attention kind 'gqa' is registered already \\(kvcalc.attention.gqa.GQA\\)"):
        register(MyGQA)
    assert KINDS["gqa"] is GQA
    assert register(GQA) is GQA  # the same class again: nothing changes
    with pytest.raises(KvcalcError, match="register takes a subclass of kvcalc.attention.AttentionKind, got NoneType"):
        register(None)  # type: ignore[type-var]
