"""What an audit of the output layer found (2026-12-04): the derivation in the table's units, a sweep's bars told apart,
user text printed as written in every format, times rounded as their exact quotient, token counts written as tokens."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

from conftest import ROOT, run
from kvcalc.units import aside_bytes, format_number, format_seconds


def test_compare_explain_writes_sizes_in_the_tables_units():
    # gemma3-27b at 128k, bf16: 253,952 elements a token (hand: 10 global layers·4,096 + 52 windowed·4,096) · 2 bytes
    si = run("compare", "gemma3-27b", "--ctx", "128k", "--explain", "--units", "si").stdout
    assert "= 507,904 bytes (508 kB)" in si and "= 11,173,625,856 bytes (11.2 GB)" in si
    assert "KiB" not in si and "GiB" not in si
    binary = run("compare", "gemma3-27b", "--ctx", "128k", "--explain").stdout
    assert "= 507,904 bytes (496 KiB)" in binary and "(10.4 GiB)" in binary


def test_exact_bytes_are_not_repeated_under_units_bytes():
    out = run("show", "gemma3-27b", "--units", "bytes").stdout
    assert "11,173,625,856 B " in out and "11,173,625,856 B (" not in out
    explained = run("compare", "gemma3-27b", "--ctx", "128k", "--explain", "--units", "bytes").stdout
    assert explained.count("= 507,904 bytes") == 1 and "507,904 bytes (" not in explained
    assert aside_bytes(1 << 30) == " (1.00 GiB)" and aside_bytes(1 << 30, "si") == " (1.07 GB)"
    assert aside_bytes(1 << 30, "bytes") == ""


def test_sweep_chart_names_the_setting_that_varies():
    out = run("sweep", "llama3-70b", "--ctx", "1k", "--batch", "1,2", "--chart", "flops_decode_token").stdout
    chart = out[out.index("(bars linear from zero)"):].splitlines()[1:3]
    assert chart[0].startswith("llama3-70b @ 1k, batch 1 ") and chart[1].startswith("llama3-70b @ 1k, batch 2 ")
    out = run("sweep", "llama3-70b", "--ctx", "1k", "--tp", "1,2", "--kv-dtype", "bf16,fp8",
              "--chart", "kv_cache_bytes_per_gpu").stdout
    bars = out[out.index("(bars linear from zero)"):].splitlines()[1:5]
    # Llama 3 70B at 1k: 1,024 · 327,680 bytes = 320 MiB in bf16, halved by fp8 and by tp 2 (8 KV heads split)
    assert [b.split("  ")[0] for b in bars] == ["llama3-70b @ 1k, kv bf16, 1 GPU", "llama3-70b @ 1k, kv bf16, 2 GPUs",
                                                "llama3-70b @ 1k, kv fp8, 1 GPU", "llama3-70b @ 1k, kv fp8, 2 GPUs"]
    assert [b.split()[-2:] for b in bars] == [["320", "MiB"], ["160", "MiB"], ["160", "MiB"], ["80.0", "MiB"]]
    plain = run("sweep", "gpt2", "--ctx", "1k,2k", "--chart", "kv_cache_bytes").stdout
    assert "gpt2 @ 1k " in plain and "batch" not in plain.split("(bars linear from zero)")[1]


def user_spec(tmp_path: Path, source: str, folder: str = ".") -> Path:
    """gpt2's bundled spec with `source` replaced, written under tmp_path/folder."""
    import yaml

    data = yaml.safe_load((ROOT / "model_specs" / "gpt2.yaml").read_text())
    data["source"] = source
    path = tmp_path / folder / "spec.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.slow
def test_user_text_is_printed_as_written_not_as_rich_markup(tmp_path):
    source = "see [red]HF[/red] and [transformers] docs [/] x :fire: [bold]"
    path = user_spec(tmp_path, source, "[v2]")
    out = run("show", path, "--ctx", "1k").stdout
    assert source in out  # no tag swallowed, no emoji
    title = out.splitlines()[0]
    assert "[v2]" in title, title


def test_a_markdown_cell_is_one_line(tmp_path):
    path = user_spec(tmp_path, "line one\nline two | x\nthree")  # a carriage return is refused (test_hardening_inputs5)
    out = run("show", path, "--ctx", "1k", "-f", "markdown").stdout
    (row,) = [line for line in out.splitlines() if line.startswith("| source |")]
    assert row.startswith(r"| source | line one line two \| x three |")


def test_times_and_plain_quantities_round_as_the_exact_quotient():
    # 1/320 s = 3.125 ms exactly, a tie: to even, 3.12 ms; its float lies just above 1/320
    assert Fraction(float(Fraction(1, 320))) > Fraction(1, 320)
    assert format_seconds(float(Fraction(1, 320))) == format_seconds(Fraction(1, 320)) == "3.12 ms"
    assert format_seconds(float(Fraction(3, 320))) == "9.38 ms"  # 9.375: to even, up
    assert format_number(float(Fraction(2625, 1000))) == "2.62" and format_number(2.635) == "2.64"
    assert format_seconds(0.0123) == "12.3 ms" and format_seconds(0.99996) == "1.00 s"


@pytest.mark.slow
def test_a_hardware_file_whose_time_is_an_exact_tie(tmp_path):
    # gpt2 at ctx 1 reads its weights and cache once a decode step: make the bandwidth 320 times that, so the step
    # is 1/320 s exactly (memory-bound at a very high peak)
    import json

    read = json.loads(run("compare", "gpt2", "--ctx", "1", "--columns", "decode_bytes_read", "-f", "json").stdout)
    nbytes = read[0]["decode_bytes_read"] if isinstance(read, list) else read["rows"][0]["decode_bytes_read"]
    hw = (ROOT / "hardware_specs" / "h100-80gb.yaml").read_text().splitlines()
    hw = [f"memory_bandwidth: {320 * nbytes}" if line.startswith("memory_bandwidth:") else
          "peak_flops_bf16: 1_000_000_000_000_000_000" if line.startswith("peak_flops_bf16:") else line for line in hw]
    path = tmp_path / "hw.yaml"
    path.write_text("\n".join(hw) + "\n")
    out = run("compare", "gpt2", "--ctx", "1", "--hardware", path, "--columns", "model,decode_seconds_per_token").stdout
    assert out.splitlines()[-1].split()[-2:] == ["3.12", "ms"]


def test_token_counts_are_written_as_tokens_in_every_table():
    # Llama 4 Scout's chunk C = 8,192 tokens: 8k, as show writes it and as every token count is written
    out = run("compare", "llama4-scout", "--ctx", "128k", "--columns", "model,attention_chunk_size").stdout
    assert out.splitlines()[-1].split() == ["llama4-scout", "128k", "8k"]
    show = run("show", "llama4-scout", "--ctx", "128k").stdout
    assert " 8k " in show
    paged = run("compare", "llama3-8b", "--ctx", "4k", "--engine", "ideal", "--block-size", "1024",
                "--columns", "model,block_size").stdout
    assert paged.splitlines()[-1].split() == ["llama3-8b", "4k", "1k"]


@pytest.mark.slow
def test_a_plot_of_engine_pages_says_so():
    pytest.importorskip("matplotlib", reason="optional: matplotlib not installed")
    from conftest import spec
    from kvcalc.present.plot import plot_figure
    from kvcalc.settings import Settings

    fig = plot_figure([("llama3-70b", spec("llama3-70b"))], [1024, 8192], ["cache"], Settings(ctx=1, engine="vllm"))
    assert fig.axes[0].get_ylabel() == "KV cache, vllm pages (bytes)"
    fig = plot_figure([("llama3-70b", spec("llama3-70b"))], [1024, 8192], ["cache"], Settings(ctx=1))
    assert fig.axes[0].get_ylabel() == "KV cache (bytes)"


def test_the_busiest_gpu_names_the_mtp_layer_it_holds():
    # DeepSeek-V3 under --mtp: its one MTP layer (index 61) sits on the last pipeline stage with layers 31-60
    import json

    args = ("show", "deepseek-v3", "--ctx", "5000", "--mtp", "--engine", "vllm", "--pp", "2")
    out = run(*args, "--explain").stdout
    assert "the busiest GPU: stage 1, layers 31-60 and the MTP layer 61" in out
    assert "the busiest holds stage 1, layers 31-60 and the MTP layer 61" in out
    per_gpu = json.loads(run(*args, "--explain", "-f", "json").stdout)["derivation"]["per_gpu"]
    assert per_gpu["layers"] == list(range(31, 61)) and per_gpu["mtp_layers"] == [61]
    plain = run("show", "deepseek-v3", "--ctx", "5000", "--pp", "2", "--explain").stdout
    assert "stage 1, layers 31-60" in plain and "MTP" not in plain


def test_per_gpu_lines_under_an_engine_name_the_pages():
    # Qwen3-Next at tp 2 under vLLM: a full-attention layer of one rank holds 1 KV head of 256 dims (512 elements a
    # token); vLLM's hybrid page is 576 tokens, so 4,096 tokens take ceil(4096 / 576) = 8 pages a sequence:
    # 8 · 576 · 512 · 2 bytes · 3 sequences = 14,155,776 bytes a layer
    import json

    args = ("show", "qwen3-next-80b-a3b", "--ctx", "4k", "--batch", "3", "--engine", "vllm", "--tp", "2", "--explain")
    out = run(*args).stdout
    assert "4,096 tokens held in 8 pages of 576 tokens a sequence; 14,155,776 bytes a layer × 12" in out
    (full,) = [g for g in json.loads(run(*args, "-f", "json").stdout)["derivation"]["per_gpu"]["groups"]
               if g["group"] == "full"]
    assert (full["pages"], full["block_size"], full["bytes_per_layer"]) == (8, 576, 8 * 576 * 512 * 2 * 3)
    assert "pages of" not in run("show", "qwen3-next-80b-a3b", "--ctx", "4k", "--tp", "2", "--explain").stdout


def test_a_byte_count_below_one_unit_is_not_repeated():
    # '0 B (0 B)' where a layout holds no states: the human size is left out where it would repeat the count
    assert aside_bytes(0) == aside_bytes(1023) == aside_bytes(999, "si") == ""
    assert aside_bytes(1024) == " (1.00 KiB)" and aside_bytes(1000, "si") == " (1.00 kB)"
    line = next(x for x in run("show", "llama3-8b", "--ctx", "4k", "--tp", "2").stdout.splitlines()
                if x.startswith("state_bytes_per_gpu"))
    assert line.split()[1:4] == ["0", "B", "its"]


def test_a_state_column_names_the_states_dtypes_where_they_are_not_the_caches():
    # a consistency review: a title said 'kv bf16' above a State column of Nemotron-H's fp32 SSM states (Mamba-2's
    # mamba_ssm_cache_dtype, float32) beside bf16 convolution states: 54 · (4,194,304 · 4 + 61,440 · 2) bytes
    out = run("compare", "nemotron-h-56b", "--ctx", "8k", "--columns", "kv,state_bytes", "--units", "bytes").stdout
    assert out.splitlines()[0] == "Batch 1, kv bf16, weights bf16, states fp32+bf16"
    assert f"{54 * (4_194_304 * 4 + 61_440 * 2):,}" in out
    # beside a model whose states are in the KV dtype (Qwen3-Next without an engine) the words name the model
    both = run("compare", "nemotron-h-56b", "qwen3-next-80b-a3b", "--ctx", "8k", "--columns", "model,state_bytes").stdout
    assert both.splitlines()[0] == "Batch 1, kv bf16, weights bf16, states nemotron-h-56b fp32+bf16"
    # states in the KV dtype (Qwen3-Next without an engine) get no words; none without a state column
    assert "states" not in run("compare", "qwen3-next-80b-a3b", "--ctx", "8k", "--columns", "kv,state_bytes").stdout.splitlines()[0]
    assert "states" not in run("compare", "nemotron-h-56b", "--ctx", "8k").stdout.splitlines()[0]
    # under vLLM an 8-bit cache leaves the states in the model's bf16: a sweep over both dtypes says so once
    sweep = run("sweep", "qwen3-next-80b-a3b", "--ctx", "1k..8k", "--points", "2", "--columns", "model,ctx,state_bytes",
                "--kv-dtype", "bf16,fp8", "--engine", "vllm").stdout
    assert sweep.splitlines()[0] == "Growth with context, batch 1, kv {bf16, fp8}, weights bf16, vllm pages, states bf16"


def test_generation_columns_past_the_maximum_are_warned_of_as_cost_warns():
    # a consistency review: cost warned that llama3-70b's 8,192-token prompt plus 1,024 generated tokens pass its
    # trained maximum of 8,192; compare and sweep printed the same generation FLOPs in silence
    said = "warning: llama3-70b: the prompt of 8,192 plus 1,024 generated tokens (9,216) exceeds its trained maximum"
    assert said in run("cost", "llama3-70b", "--ctx", "8k").stderr
    assert said in run("compare", "llama3-70b", "--ctx", "8k", "--columns", "generate").stderr
    assert said in run("sweep", "llama3-70b", "--ctx", "1k..8k", "--points", "2", "--columns", "all").stderr
    # no generation column, or a prompt within the maximum: nothing said
    assert "generated" not in run("compare", "llama3-70b", "--ctx", "8k").stderr
    assert "warning" not in run("compare", "llama3-70b", "--ctx", "7k", "--columns", "generate").stderr


def test_show_and_fit_name_the_states_dtypes_too():
    # a review: the README says a table with a state column names the states' dtypes; show's group table and fit's
    # (whose 'KV + states per GPU' column holds them) said only 'bf16'
    show = run("show", "nemotron-h-56b", "--ctx", "8k").stdout
    assert "KV cache by layer group at ctx 8,192, batch 1, bf16, states fp32+bf16" in show
    assert "states" not in next(line for line in run("show", "qwen3-next-80b-a3b", "--ctx", "8k").stdout.splitlines()
                                if line.startswith("KV cache by layer group"))
    fit = run("fit", "nemotron-h-56b", "--hardware", "h100-80gb", "--tp", "2", "--ctx", "8k").stdout.splitlines()[0]
    assert fit == "nemotron-h-56b on 2× h100-80gb (tp 2, pp 1, dp 1), weights bf16, kv bf16, states fp32+bf16, 10% reserved"
