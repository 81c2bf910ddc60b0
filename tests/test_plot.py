"""The plotting library (kvcalc.present.plot): the figure object is inspected, then written in each format."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from conftest import run
from conftest import spec as bundled
from kvcalc.costs.cache import kv_cache
from kvcalc.costs.flops import decode_flops
from kvcalc.costs.parallel import per_gpu
from kvcalc.errors import KvcalcError
from kvcalc.hardware import load_hardware
from kvcalc.present.plot import (
    METRICS,
    memory_crossing,
    metric_values,
    plot_figure,
    require_matplotlib,
    save_figure,
    window_start,
)
from kvcalc.registry import load_model
from kvcalc.settings import Settings

pytest.importorskip("matplotlib", reason="optional: matplotlib not installed")  # kvcalc.present.plot imports it lazily

MODELS = ("llama3-70b", "gemma3-27b", "deepseek-v2")
CTXS = [1024, 8192, 65536, 1024**2]


@pytest.fixture(scope="module")
def models():
    return [(name, load_model(name).spec) for name in MODELS]


def model_lines(ax) -> dict:
    """The lines of `ax` that carry a model's name, by name."""
    return {line.get_label(): line for line in ax.lines if line.get_label() in MODELS}


def gids(ax, prefix: str) -> set[str]:
    return {a.get_gid() for a in ax.get_children() if (a.get_gid() or "").startswith(prefix)}


def point(line, x: int) -> float:
    xs = list(line.get_xdata())
    return line.get_ydata()[xs.index(float(x))]


@pytest.mark.slow
@pytest.mark.parametrize("metrics", [["cache"], ["cache", "flops-decode"]])
def test_panels_are_log_log_with_one_line_per_model(models, metrics):
    fig = plot_figure(models, CTXS, metrics, Settings(ctx=1))
    assert len(fig.axes) == len(metrics)
    for ax in fig.axes:
        assert (ax.get_xscale(), ax.get_yscale()) == ("log", "log")
        assert sorted(model_lines(ax)) == sorted(MODELS)  # one line per model, none twice
        assert len([line for line in ax.lines if line.get_label() in MODELS]) == len(MODELS)
        assert ax.get_xlabel() == "Context (tokens)"
    assert [ax.get_ylabel() for ax in fig.axes] == [
        {"cache": "KV cache (bytes)", "flops-decode": "Decode FLOPs per step"}[m] for m in metrics]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert set(MODELS) <= set(legend)


@pytest.mark.slow
def test_every_model_has_its_own_line_and_legend_entry():
    # an audit: the ninth model repeated the first's colour and dash (black, solid); two models of one name shared a
    # legend entry and an SVG id; a metric given twice drew two panels with the same ids
    nine = [(n, load_model(n).spec) for n in ("gemma3-27b", "llama4-scout", "qwen3-next-80b-a3b", "whisper-large-v3",
                                                "deepseek-v2", "gpt-oss-20b", "mistral-7b", "nemotron-h-56b", "minimax-m1")]
    ax = plot_figure(nine, CTXS, ["cache"], Settings(ctx=1)).axes[0]
    # colour and dash as drawn (the dash pattern matplotlib resolved from the style, scaled by the line width)
    drawn = {line.get_label(): (line.get_color(), tuple(line._dash_pattern[1] or ())) for line in ax.lines
             if line.get_label() in dict(nine)}
    assert len(drawn) == 9 and len(set(drawn.values())) == 9 and drawn["minimax-m1"][0] == drawn["gemma3-27b"][0]
    spec = load_model("llama3-8b").spec
    with pytest.raises(KvcalcError, match=r"two models are named 'llama3-8b'"):
        plot_figure([("llama3-8b", spec), ("llama3-8b", spec)], CTXS, ["cache"], Settings(ctx=1))
    with pytest.raises(KvcalcError, match=r"--metric cache given twice"):
        plot_figure([("llama3-8b", spec)], CTXS, ["cache", "cache"], Settings(ctx=1))


def test_plotted_values_are_the_exact_figures(models):
    fig = plot_figure(models, CTXS, ["cache", "flops-decode"], Settings(ctx=1))
    cache, flops = (model_lines(ax) for ax in fig.axes)
    for name, spec in models:
        for ctx in (8192, 1024**2):
            assert point(cache[name], ctx) == float(kv_cache(spec, Settings(ctx=ctx)).bytes)
            assert point(flops[name], ctx) == float(sum(decode_flops(spec, Settings(ctx=ctx)).values()))
    # hand check, Llama 3 70B: 80 layers · 2 (K and V) · 8 KV heads · 128 dims · 2 bytes = 320 KiB per token
    assert point(cache["llama3-70b"], 8192) == 8192 * 80 * 2 * 8 * 128 * 2


def test_window_marker_only_for_windowed_models(models):
    assert window_start(dict(models)["gemma3-27b"]) == 1024
    assert window_start(dict(models)["llama3-70b"]) is None
    fig = plot_figure(models, CTXS, ["cache", "flops-decode"], Settings(ctx=1))
    for ax, metric in zip(fig.axes, ["cache", "flops-decode"]):
        assert gids(ax, "window:") == {f"window:gemma3-27b@{metric}"}
        (marker,) = [line for line in ax.lines if line.get_gid() == f"window:gemma3-27b@{metric}"]
        assert list(marker.get_xdata()) == [1024.0]
        assert point(model_lines(ax)["gemma3-27b"], 1024) == marker.get_ydata()[0]  # the marker sits on the line
        assert any(t.get_text() == "W=1k" for t in ax.texts)
    # a window outside the contexts plotted is not marked
    fig = plot_figure(models, [4096, 65536], ["cache"], Settings(ctx=1))
    assert gids(fig.axes[0], "window:") == set()


def test_memory_line_and_crossing_with_hardware(models):
    h100 = load_hardware("h100-80gb")
    s = Settings(ctx=1, hardware=h100)
    fig = plot_figure(models, CTXS, ["cache", "flops-decode"], s)
    cache_ax, flops_ax = fig.axes
    (memory,) = [line for line in cache_ax.lines if line.get_gid() == "memory@cache"]
    assert list(memory.get_ydata()) == [float(h100.memory_bytes)] * 2
    assert "h100-80gb" in memory.get_label() and "80.0 GiB" in memory.get_label()
    assert gids(flops_ax, "memory") == set()  # the memory line belongs to the cache panel only
    # Gemma 3 27B: 54 GB of bf16 weights leave room for the cache up to some context between 1k and 1M
    gemma = dict(models)["gemma3-27b"]
    crossing = memory_crossing(gemma, 1024, 1024**2, s)
    assert crossing is not None and 1024 < crossing < 1024**2

    def total(ctx: int) -> int:
        g = per_gpu(gemma, s.at(ctx))
        return g.weights_bytes + g.kv_cache_bytes + g.state_bytes

    assert total(crossing - 1) <= h100.memory_bytes < total(crossing)  # the first context that does not fit
    (marker,) = [line for line in cache_ax.lines if line.get_gid() == "out-of-memory:gemma3-27b@cache"]
    assert list(marker.get_xdata()) == [float(crossing)]
    # Llama 3 70B's 141 GB of weights exceed 80 GB at every context: marked at the first
    assert memory_crossing(dict(models)["llama3-70b"], 1024, 1024**2, s) == 1024
    assert memory_crossing(gemma, 1024, 1024**2, Settings(ctx=1)) is None  # no hardware, no crossing


def test_svg_ids_are_unique_across_panels(models):
    import io
    import re
    from collections import Counter

    fig = plot_figure(models, CTXS, ["cache", "flops-decode", "state"], Settings(ctx=1, hardware=load_hardware("h100-80gb")))
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    ids = Counter(re.findall(r' id="([^"]+)"', buf.getvalue()))
    assert ids["model:gemma3-27b@cache"] == ids["model:gemma3-27b@flops-decode"] == 1
    assert [i for i, n in ids.items() if n > 1] == []


def test_no_memory_line_without_hardware(models):
    fig = plot_figure(models, CTXS, ["cache"], Settings(ctx=1))
    assert gids(fig.axes[0], "memory") == set() and gids(fig.axes[0], "out-of-memory") == set()


@pytest.mark.slow
def test_every_metric_draws(models):
    s = Settings(ctx=1, hardware=load_hardware("h100-80gb"))
    fig = plot_figure(models, [1024, 4096], list(METRICS), s)
    assert [ax.get_ylabel() for ax in fig.axes] == ["KV cache (bytes)", "Constant state (bytes)", "Decode FLOPs per step",
                                                     "Prefill FLOPs", "Decode time per step (s)"]
    assert all(ax.get_yscale() == "log" for ax in fig.axes)


def test_decode_time_needs_hardware(models):
    with pytest.raises(KvcalcError, match=r"decode-time .* needs a hardware preset \(--hardware"):
        plot_figure(models, CTXS, ["cache", "decode-time"], Settings(ctx=1))


def test_unknown_metric(models):
    with pytest.raises(KvcalcError, match="unknown metric 'bogus': choose one of cache, state, flops-decode"):
        plot_figure(models, CTXS, ["bogus"], Settings(ctx=1))


@pytest.mark.slow
@pytest.mark.parametrize(("ext", "magic"), [(".png", b"\x89PNG"), pytest.param(".pdf", b"%PDF", marks=pytest.mark.slow),
                                            pytest.param(".svg", None, marks=pytest.mark.slow)])
def test_save_formats(models, tmp_path, ext, magic):
    fig = plot_figure(models, CTXS, ["cache", "flops-decode"], Settings(ctx=1, hardware=load_hardware("h100-80gb")))
    path = tmp_path / f"fig{ext}"
    save_figure(fig, path)
    data = path.read_bytes()
    assert len(data) > 1000
    if magic is not None:
        assert data.startswith(magic)
    else:
        text = data.decode()
        assert text.lstrip().startswith(("<svg", "<?xml")) and "<svg" in text
        assert "llama3-70b" in text  # svg.fonttype none: the legend stays text


def test_unknown_extension(models, tmp_path):
    fig = plot_figure(models, [1024], ["cache"], Settings(ctx=1))
    with pytest.raises(KvcalcError, match=r"fig\.jpg: .*'\.jpg'.*use one of \.png, \.pdf, \.svg, \.pgf"):
        save_figure(fig, tmp_path / "fig.jpg")
    assert not (tmp_path / "fig.jpg").exists()


@pytest.mark.slow
def test_pgf_takes_the_latex_there_is_and_leaves_no_file_without_one(models, tmp_path, monkeypatch):
    # an audit: .pgf asked for xelatex alone (pdflatex and lualatex installed: "'xelatex' not found"), and with a
    # LaTeX found matplotlib's pgf backend refused the metadata argument (a traceback, an empty file left)
    import shutil

    fig = plot_figure(models, [1024, 4096], ["cache"], Settings(ctx=1))
    if any(shutil.which(t) for t in ("xelatex", "pdflatex")):
        save_figure(fig, tmp_path / "fig.pgf")
        text = (tmp_path / "fig.pgf").read_text()
        assert text.startswith("%% Creator: Matplotlib, PGF backend") and "\\begin{pgfpicture}" in text
    monkeypatch.setattr(shutil, "which", lambda name: None)  # no LaTeX: matplotlib's default, xelatex, is not found
    with pytest.raises(KvcalcError, match=r"none\.pgf: writing \.pgf needs a LaTeX installation"):
        save_figure(fig, tmp_path / "none.pgf")
    assert not (tmp_path / "none.pgf").exists()


def test_a_chunk_is_marked_apart_from_a_window(models):
    # a usability review: 'window reached' and 'chunk reached' had the same open circle
    fig = plot_figure([("mistral-7b", bundled("mistral-7b")), ("llama4-scout", bundled("llama4-scout"))],
                      [1024, 4096, 16384], ["cache"], Settings(ctx=1))
    marks = {line.get_gid(): line.get_marker() for ax in fig.axes for line in ax.lines if line.get_gid()}
    assert marks["window:mistral-7b@cache"] == "o" and marks["window:llama4-scout@cache"] == "s"


def test_a_figure_that_fails_midway_leaves_the_earlier_file(models, tmp_path, monkeypatch):
    # a review: a write that failed after the figure file was opened left an empty or partial file over the earlier
    # figure (only a new file was removed); figures are written whole as every --output is (kvcalc.present.outfile)
    from matplotlib.figure import Figure

    fig = plot_figure(models, [1024, 4096], ["cache"], Settings(ctx=1))
    path = tmp_path / "fig.svg"
    path.write_text("earlier")
    real = Figure.savefig

    def failing(self, fname, **kwargs):
        real(self, fname, **kwargs)  # the whole figure written to the partial file, then the disk is full
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", failing)
    with pytest.raises(KvcalcError, match=r"fig\.svg: cannot write the figure: .*No space left on device"):
        save_figure(fig, path)
    assert path.read_text() == "earlier" and sorted(p.name for p in tmp_path.iterdir()) == ["fig.svg"]
    monkeypatch.setattr(Figure, "savefig", real)
    save_figure(fig, path)
    assert "<svg" in path.read_text() and sorted(p.name for p in tmp_path.iterdir()) == ["fig.svg"]


@pytest.mark.slow
def test_import_kvcalc_does_not_import_matplotlib():
    code = "import sys, kvcalc, kvcalc.present.plot; assert 'matplotlib' not in sys.modules, 'imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_missing_matplotlib_says_how_to_install(monkeypatch, models):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` raise ImportError
    for call in (require_matplotlib, lambda: plot_figure(models, [1024], ["cache"], Settings(ctx=1))):
        with pytest.raises(KvcalcError, match=r"^kvcalc plot needs matplotlib: pip install 'kvcalc\[plot\]'$"):
            call()


@pytest.mark.slow
def test_the_legend_fits_the_figure():
    # an audit: a one-panel figure's legend in 3 columns ran past both edges with a long model name
    # (qwen3-next-80b-a3b), cutting it and the first column's line swatches off; it now takes the most columns that fit
    long = [(name, load_model(name).spec) for name in ("llama3-70b", "deepseek-v2", "gemma3-27b", "qwen3-next-80b-a3b")]
    for metrics in (["cache"], ["cache", "flops-decode"]):
        fig = plot_figure(long, CTXS, metrics, Settings(ctx=1))
        fig.canvas.draw()
        (legend,) = fig.legends
        box = legend.get_window_extent(fig.canvas.get_renderer())
        assert 0 <= box.x0 and box.x1 <= fig.bbox.width
        assert "qwen3-next-80b-a3b" in [t.get_text() for t in legend.get_texts()]
    # the default three models' legend (with the window marker's entry) was cut off too in one panel; it fits now,
    # models first, then what the markers mean
    models3 = [(n, load_model(n).spec) for n in MODELS]
    for metrics in (["cache"], ["cache", "flops-decode"]):
        fig = plot_figure(models3, CTXS, metrics, Settings(ctx=1))
        fig.canvas.draw()
        box = fig.legends[0].get_window_extent(fig.canvas.get_renderer())
        assert 0 <= box.x0 and box.x1 <= fig.bbox.width
        assert [t.get_text() for t in fig.legends[0].get_texts()] == [*MODELS, "window reached"]
    # a chunk (Llama 4's C = 8,192) is marked as a window is: the cache stops growing there
    scout = [("llama4-scout", load_model("llama4-scout").spec)]
    fig = plot_figure(scout, CTXS, ["cache"], Settings(ctx=1))
    assert [t.get_text() for t in fig.axes[0].texts] == ["C=8k"] and fig.legends[0].get_texts()[-1].get_text() == "chunk reached"


def test_engine_pages_on_one_gpu_as_memory_crossing_counts_them():
    # an audit: on one GPU under --engine the cache line was the exact total while memory_crossing counted vLLM's
    # pages, so the out-of-memory mark sat where the line still fit. llama3-70b at 31,361 tokens: 490 pages of 64
    # tokens, 80 layers · 2 · 8 heads · 128 · 2 bytes a token
    s = Settings(ctx=1, engine="vllm", hardware=load_hardware("h200-141gb"))
    got = metric_values(bundled("llama3-70b"), [31_361], "cache", s)[0]
    assert got == -(-31_361 // 64) * 64 * 80 * 2 * 8 * 128 * 2 == 10_297_016_320
    row = json.loads(run("compare", "llama3-70b", "--ctx", "31361", "--engine", "vllm", "--hardware", "h200-141gb",
                         "-f", "json").stdout)[0]
    assert got == row["kv_cache_bytes_per_gpu"]
    # without an engine, on one GPU: the exact total
    assert metric_values(bundled("llama3-70b"), [31_361], "cache", Settings(ctx=1))[0] == 31_361 * 80 * 2 * 8 * 128 * 2
    # a hybrid's states in its engine's pages, as compare's per-GPU column holds them with the cache
    q = bundled("qwen3-next-80b-a3b")
    state = metric_values(q, [1024], "state", Settings(ctx=1, engine="vllm"))[0]
    cache = metric_values(q, [1024], "cache", Settings(ctx=1, engine="vllm"))[0]
    qrow = json.loads(run("compare", "qwen3-next-80b-a3b", "--ctx", "1k", "--engine", "vllm", "-f", "json").stdout)[0]
    assert (cache, state) == (qrow["kv_cache_bytes_per_gpu"], qrow["state_bytes_per_gpu"]) == (28_311_552, 84_934_656)
    assert state != qrow["state_bytes"]  # the exact states, 39,518,208, are what the line showed


def test_one_context_is_a_visible_point_and_a_context_past_the_maximum_is_warned_of(models, tmp_path):
    # a review: --ctx 4k drew a one-point line without a marker (an empty frame), and a figure to 1M of Llama 3 70B
    # (8,192 tokens) said nothing, where every table command warns
    fig = plot_figure(models[:1], [4096], ["cache"], Settings(ctx=4096))
    (line,) = model_lines(fig.axes[0]).values()
    assert line.get_marker() == "o" and point(line, 4096) == kv_cache(models[0][1], Settings(ctx=4096)).bytes
    fig = plot_figure(models[:1], CTXS, ["cache"], Settings(ctx=1024))
    assert model_lines(fig.axes[0])["llama3-70b"].get_marker() in ("None", None, "")
    res = run("plot", "llama3-70b", "-o", str(tmp_path / "f.svg"))
    assert "warning: llama3-70b: ctx 1,048,576 exceeds its trained maximum of 8,192 tokens" in res.stderr
    assert "exceeds" not in run("plot", "llama3-70b", "--ctx", "1k..8k", "-o", str(tmp_path / "g.svg")).stderr


@pytest.mark.slow
def test_a_figure_names_the_settings_its_values_depend_on(models):
    # a review: at batch 8 the decode panels plot a step of all 8 sequences (flops_decode_token, sweep's 'FLOPs/step':
    # llama3-70b at 4k, 8 times batch 1's attention-free part plus each sequence's attention) under a label 'per
    # token', and no figure named its batch, dtypes or MLA layout. The labels say 'per step', and the title names
    # the settings that differ from the defaults, with MLA's layout and schedule as the tables' titles do
    s = Settings(ctx=1, batch=8, kv_dtype="fp8")
    fig = plot_figure(models, [4096], ["cache", "flops-decode"], s)
    assert [ax.get_ylabel() for ax in fig.axes] == ["KV cache (bytes)", "Decode FLOPs per step"]
    assert fig._suptitle.get_text() == "batch 8, KV cache fp8, MLA latent cache, absorbed decode"
    one = Settings(ctx=4096)
    (line,) = [ln for ln in fig.axes[1].lines if ln.get_label() == "llama3-70b"]
    assert line.get_ydata()[0] == sum(decode_flops(models[0][1], replace(one, batch=8, kv_dtype="fp8")).values())
    # a figure of models without MLA layers at the defaults has no title
    assert plot_figure(models[:1], [4096], ["cache"], one)._suptitle is None


@pytest.mark.slow
def test_a_long_caption_wraps_within_one_panel():
    # a review: one panel's caption ("MLA latent cache, naive decode, MTP layers counted, ...") ran past both edges
    fig = plot_figure([("deepseek-v3.2", bundled("deepseek-v3.2"))], CTXS, ["flops-decode"],
                      Settings(ctx=1, mtp=True, mla_schedule="naive"))
    renderer = fig.canvas.get_renderer()
    fig.draw(renderer)
    title, page = fig._suptitle.get_window_extent(renderer), fig.bbox
    assert "decode steps speculative" in fig._suptitle.get_text()
    assert page.x0 <= title.x0 and title.x1 <= page.x1, (title, page)
