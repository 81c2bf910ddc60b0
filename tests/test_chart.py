"""#8 item 4 (terminal part): `--chart KEY` on compare and sweep draws a bar chart without any plotting library."""

from __future__ import annotations

import pytest

from conftest import run
from kvcalc.present.chart import WIDTH, bar


def test_bars_are_linear_from_zero():
    assert bar(40, 40) == "█" * WIDTH
    assert bar(10, 40) == "█" * 10
    assert bar(1, 64, 8) == "▏"  # one eighth of a character
    assert bar(0, 40) == ""


def test_compare_chart_of_the_cache():
    out = run("compare", "llama3-70b", "deepseek-v2", "--ctx", "32k,128k", "--chart", "kv_cache_bytes").stdout
    lines = out.splitlines()
    start = lines.index("KV cache (bars linear from zero)")
    chart = lines[start + 1:start + 5]
    assert chart[0].startswith("llama3-70b @ 32k") and chart[0].count("█") == 10 and chart[0].endswith("10.0 GiB")
    assert chart[1].count("█") == WIDTH and chart[1].endswith("40.0 GiB")
    # deepseek-v2 at 128k: 8.44 / 40 of the width, 8.4375 characters: eight full and a 4/8 block (▌)
    assert "████████▌ " in chart[3] and chart[3].endswith("8.44 GiB")


def test_sweep_chart_and_refusals():
    out = run("sweep", "gpt2", "--ctx", "1k..4k", "--chart", "flops_prefill").stdout
    assert "gpt2 @ 4k" in out and "Prefill FLOPs (bars linear from zero)" in out
    res = run("compare", "gpt2", "--chart", "model", ok=False)
    assert res.exit_code == 1 and "choose a numeric column key" in res.stderr
    res = run("compare", "gpt2", "--chart", "kv_cache_bytes", "-f", "latex", ok=False)
    assert res.exit_code == 1 and "--chart draws in the table and markdown formats" in res.stderr


@pytest.mark.slow
def test_plot_command_writes_the_figure(tmp_path):
    import pytest

    pytest.importorskip("matplotlib", reason="optional: matplotlib not installed")
    path = tmp_path / "cache.svg"
    res = run("plot", "llama3-70b", "gemma3-27b", "--ctx", "1k..64k", "-m", "cache", "-m", "flops-decode",
              "--hardware", "h100-80gb", "-o", str(path))
    assert f"wrote {path}" in res.stderr
    text = path.read_text(encoding="utf-8")
    assert "<svg" in text and "llama3-70b" in text and "gemma3-27b" in text
    res = run("plot", "gpt2", "-m", "decode-time", "-o", str(tmp_path / "t.png"), ok=False)
    assert res.exit_code == 1 and "needs a hardware preset" in res.stderr and not (tmp_path / "t.png").exists()


@pytest.mark.parametrize("key", ["kv_label", "heads_label", "head_dim_label"])
def test_a_label_column_is_no_chart(key):
    # a review: these right-aligned labels ('8', '512+64') passed as numeric and drew bars of '–'
    res = run("compare", "llama3-8b", "gpt2", "-c", "1k", "--chart", key, ok=False)
    assert res.exit_code == 1 and f"--chart {key!r}: choose a numeric column key (" in res.stderr
    assert key not in res.stderr.split("choose a numeric column key", 1)[1]
