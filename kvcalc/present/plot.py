"""Figures of a cost against context for a paper: `kvcalc plot` draws them, the library only builds and saves them.

Choices (also in the README):
- One panel per metric, side by side, 3.4 in (a column) wide each; log–log axes; x ticks at powers of two in tokens.
- One line per model, told apart by colour (the Okabe–Ito palette, safe for colour-blind readers) and by line style
  (so the figure survives black-and-white printing).
- An open circle marks the context where a model's smallest sliding window W starts to cap its windowed layers' cache
  (drawn when W lies within the contexts plotted), an open square where an attention chunk C does. With a hardware preset, the cache panel carries a line at the
  device's memory and a cross where the busiest GPU's weights + KV cache + states (kvcalc.costs.parallel.per_gpu, so
  --tp and friends count) first exceed it; when they exceed it at the smallest context already, the cross sits there.
- Values are exact ints (seconds for decode-time) from the cost functions; only the drawing converts them to floats.
  Points at W and at the memory crossing are added to a model's line so the markers sit on it.
- matplotlib is an optional extra, imported only inside these functions, and figures get an Agg canvas of their own
  (no pyplot, no global backend switch).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvcalc.errors import KvcalcError
from kvcalc.lists import first_repeat
from kvcalc.settings import Settings
from kvcalc.spec import ModelSpec
from kvcalc.units import format_bytes, format_tokens

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["FORMATS", "METRICS", "METRIC_INFO", "Metric", "metric_values", "plot_figure", "require_matplotlib",
           "save_figure", "window_start"]

INSTALL_HINT = "kvcalc plot needs matplotlib: pip install 'kvcalc[plot]'"
FORMATS = ("png", "pdf", "svg", "pgf")  # what save_figure writes, chosen by the file's extension

# Okabe & Ito (2008), "Color Universal Design": distinguishable under the common colour-vision deficiencies.
# Yellow last: it is the hardest to see on white.
PALETTE = ("#000000", "#E69F00", "#56B4E9", "#009E73", "#0072B2", "#D55E00", "#CC79A7", "#F0E442")
LINESTYLES: tuple[Any, ...] = ("-", "--", "-.", ":", (0, (5, 1, 1, 1)), (0, (3, 1, 1, 1, 1, 1)), (0, (1, 1)), (0, (8, 2)))
PANEL_WIDTH, PANEL_HEIGHT = 3.4, 2.6  # inches: one panel fits a two-column paper's column
STYLE: dict[Any, Any] = {"font.size": 8, "axes.labelsize": 8, "axes.titlesize": 8, "xtick.labelsize": 7, "ytick.labelsize": 7,
         "legend.fontsize": 7, "lines.linewidth": 1.2, "axes.linewidth": 0.6, "pdf.fonttype": 42, "ps.fonttype": 42,
         "svg.fonttype": "none"}  # fonttype 42 / none: text stays text (editable, searchable) in PDF and SVG


def _per_gpu(s: Settings) -> bool:
    """Whether the cache and state panels show the busiest GPU's figures, as memory_crossing and compare's per-GPU
    columns count them: under a parallel layout, or an engine's pages (on one GPU too)."""
    return s.gpus > 1 or s.engine is not None


def _cache_bytes(spec: ModelSpec, s: Settings) -> int:
    """The KV cache at ctx; the busiest GPU's where _per_gpu (the memory line bounds it), else the exact total."""
    from kvcalc.costs.cache import kv_cache
    from kvcalc.costs.parallel import per_gpu

    return per_gpu(spec, s).kv_cache_bytes if _per_gpu(s) else kv_cache(spec, s).bytes


def _state_bytes(spec: ModelSpec, s: Settings) -> int:
    """The constant states at ctx, as _cache_bytes counts the cache."""
    from kvcalc.costs.cache import kv_cache
    from kvcalc.costs.parallel import per_gpu

    return per_gpu(spec, s).state_bytes if _per_gpu(s) else kv_cache(spec, s).state_bytes


def _decode_flops(spec: ModelSpec, s: Settings) -> int:
    from kvcalc.costs.flops import decode_flops

    return sum(decode_flops(spec, s).values())  # = figures(...).flops_decode_token, without the other figures


def _prefill_flops(spec: ModelSpec, s: Settings) -> int:
    from kvcalc.costs.flops import prefill_flops

    return sum(prefill_flops(spec, s).values())  # = figures(...).flops_prefill


def _decode_seconds(spec: ModelSpec, s: Settings) -> float:
    from kvcalc.figures import figures

    if s.hardware is None:
        raise KvcalcError(NEEDS_HARDWARE)
    seconds = figures(spec, s).decode_seconds_per_token
    if seconds is None:  # figures sets it whenever s.hardware is set
        raise KvcalcError(NEEDS_HARDWARE)
    return seconds


NEEDS_HARDWARE = "metric decode-time is a roofline time: it needs a hardware preset (--hardware, e.g. h100-80gb)"


@dataclass(frozen=True)
class Metric:
    """A value that can be plotted against context: its axis label (with unit) and how to compute it."""

    name: str
    label: str
    value: Callable[[ModelSpec, Settings], int | float]
    windowed: bool = True  # does a sliding window change it (the window marker is drawn)
    needs_hardware: bool = False


METRIC_INFO: dict[str, Metric] = {m.name: m for m in (
    Metric("cache", "KV cache (bytes)", _cache_bytes),
    Metric("state", "Constant state (bytes)", _state_bytes, windowed=False),
    Metric("flops-decode", "Decode FLOPs per step", _decode_flops),  # a step: a token for every sequence (--mtp: a speculative one)
    Metric("flops-prefill", "Prefill FLOPs", _prefill_flops),
    Metric("decode-time", "Decode time per step (s)", _decode_seconds, needs_hardware=True),
)}
METRICS = tuple(METRIC_INFO)


def _metric(name: str, s: Settings) -> Metric:
    name = name.lower()  # as every other choice: CACHE is cache
    if name not in METRIC_INFO:
        panels = " (one --metric a panel: --metric cache --metric state)" if "," in name else ""
        raise KvcalcError(f"unknown metric {name!r}: choose one of {', '.join(METRICS)}{panels}")
    metric = METRIC_INFO[name]
    if metric.needs_hardware and s.hardware is None:
        raise KvcalcError(NEEDS_HARDWARE)
    return metric


def check_metrics(metrics: list[str], s: Settings) -> list[Metric]:
    """The metrics a figure plots, each known and given once (and those of time with a hardware preset): checked
    before any model is read, so a misspelt --metric is the one message."""
    if (twice := first_repeat(metrics)) is not None:
        raise KvcalcError(f"plot: --metric {twice} given twice (one panel each)")
    return [_metric(m, s) for m in metrics]


def metric_values(spec: ModelSpec, ctxs: Sequence[int], metric: str, s: Settings) -> list[int | float]:
    """The metric at each context (exact ints; seconds for decode-time), the other settings as in `s`."""
    m = _metric(metric, s)
    return [m.value(spec, s.at(ctx)) for ctx in ctxs]


def window_start(spec: ModelSpec) -> int | None:
    """The smallest sliding window or attention chunk of the model's layer groups: from this context on it caps
    their cache (a chunked layer holds min(ctx, C) tokens) and the keys their queries meet."""
    caps = [g.sliding_window for g in spec.groups if g.sliding_window] + [g.layer.chunk for g in spec.groups if g.layer.chunk]
    return min(caps) if caps else None


def _cap_letter(spec: ModelSpec, tokens: int) -> str:
    """'W' where window_start's `tokens` is a sliding window, 'C' where it is only a chunk."""
    return "W" if any(g.sliding_window == tokens for g in spec.groups) else "C"


def memory_crossing(spec: ModelSpec, lo: int, hi: int, s: Settings) -> int | None:
    """The first context in [lo, hi] at which the busiest GPU's weights + KV cache + states exceed the hardware's
    memory, or None when they fit at hi (they grow with context, so a bisection finds it)."""
    from kvcalc.costs.parallel import per_gpu

    if s.hardware is None:
        return None
    memory = s.hardware.memory_bytes

    def over(ctx: int) -> bool:
        g = per_gpu(spec, s.at(ctx))
        return g.weights_bytes + g.kv_cache_bytes + g.state_bytes > memory

    if not over(hi):
        return None
    while lo < hi:  # invariant: over(hi)
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if over(mid) else (mid + 1, hi)
    return hi


def require_matplotlib() -> None:
    """Raise KvcalcError saying how to install matplotlib when it is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise KvcalcError(INSTALL_HINT) from exc


def _context_ticks(lo: int, hi: int) -> list[int]:
    """Powers of two within [lo, hi], at most 6 of them (every 2nd or 3rd over wide ranges), ending at the largest."""
    a, b = (lo - 1).bit_length(), hi.bit_length() - 1  # smallest and largest exponent with lo <= 2**e <= hi
    if a > b:  # no power of two inside: the ends
        return sorted({lo, hi})
    step = max(1, -(-(b - a) // 5))
    return [1 << e for e in range(b, a - 1, -step)][::-1]


def _positive(xs: list[int], ys: list[int | float]) -> tuple[list[float], list[float]]:
    pairs = [(float(x), float(y)) for x, y in zip(xs, ys) if y > 0]  # a log axis cannot show 0 (no state, say)
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _panel(ax: Axes, models: list[tuple[str, ModelSpec]], ctxs: list[int], metric: Metric, s: Settings,
           handles: dict[str, Any]) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    lo, hi = ctxs[0], ctxs[-1]
    memory_panel = metric.name == "cache" and s.hardware is not None
    panel = f"@{metric.name}"  # in each id: an SVG's ids are unique across panels
    plotted = 0
    for i, (name, spec) in enumerate(models):
        # colour and dash advance together for 8 models, then the dash one step further each round: a distinct pair
        # for each of 64 models (the ninth was the first's black solid line)
        colour, style = PALETTE[i % len(PALETTE)], LINESTYLES[(i + i // len(PALETTE)) % len(LINESTYLES)]
        window = window_start(spec) if metric.windowed else None
        window = window if window is not None and lo <= window <= hi else None
        crossing = memory_crossing(spec, lo, hi, s) if memory_panel else None
        xs = sorted(set(ctxs) | {c for c in (window, crossing) if c is not None})
        ys = [metric.value(spec, s.at(x)) for x in xs]
        px, py = _positive(xs, ys)
        plotted += len(px)
        # one context alone is a point, which a line without a marker would not draw
        (line,) = ax.plot(px, py, color=colour, linestyle=style, label=name, gid=f"model:{name}{panel}",
                          marker="o" if len(px) == 1 else None)
        handles.setdefault(f"model:{name}", line)
        at = dict(zip(xs, ys))
        if window is not None and at[window] > 0:
            letter = _cap_letter(spec, window)
            shape = "o" if letter == "W" else "s"  # a window's circle, a chunk's square: the legend tells them apart
            ax.plot([window], [float(at[window])], marker=shape, markersize=4, markerfacecolor="white",
                    markeredgecolor=colour, linestyle="none", label="_window", gid=f"window:{name}{panel}", zorder=3)
            ax.annotate(f"{letter}={format_tokens(window)}", (window, float(at[window])), xytext=(3, -9),
                        textcoords="offset points", fontsize=6.5, color=colour, gid=f"window-note:{name}{panel}")
            what = "window" if letter == "W" else "chunk"  # reached: the cache and the keys met stop growing there
            handles.setdefault(what, Line2D([], [], marker=shape, markersize=4, markerfacecolor="white",
                                            markeredgecolor="0.3", linestyle="none", label=f"{what} reached"))
        if crossing is not None and at[crossing] > 0:
            ax.plot([crossing], [float(at[crossing])], marker="X", markersize=5, color=colour, linestyle="none",
                    label="_memory", gid=f"out-of-memory:{name}{panel}", zorder=3)
            handles.setdefault("oom", Line2D([], [], marker="X", markersize=5, color="0.3", linestyle="none",
                                             label="weights + cache exceed memory"))
    if memory_panel and s.hardware is not None:
        per = " per GPU" if s.gpus > 1 else ""
        label = f"{s.hardware.name} memory{per} ({format_bytes(s.hardware.memory_bytes)})"
        handles.setdefault("memory", ax.axhline(float(s.hardware.memory_bytes), color="0.45", linewidth=0.8,
                                                linestyle=(0, (1, 1.5)), label=label, gid=f"memory{panel}"))
    if not plotted:  # e.g. the state of attention-only models  # a log axis needs a positive range to draw
        ax.set_xlim(lo, max(hi, 2 * lo))
        ax.set_ylim(1, 10)
        ax.text(0.5, 0.5, "zero for every model", transform=ax.transAxes, ha="center", va="center", color="0.4")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.xaxis.set_major_locator(FixedLocator([float(t) for t in _context_ticks(lo, hi)]))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: format_tokens(int(round(x)))))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("Context (tokens)")
    per = (" per GPU" if s.gpus > 1 else "") + (f", {s.engine} pages" if s.engine else "")  # what _per_gpu plots
    ax.set_ylabel(metric.label.replace("KV cache", "KV cache" + per).replace("Constant state", "Constant state" + per))
    ax.grid(True, which="major", linewidth=0.4, color="0.85")


def plot_figure(models: list[tuple[str, ModelSpec]], ctxs: list[int], metrics: list[str], s: Settings) -> Figure:
    """A figure of each metric against context, one panel per metric side by side, one line per model.

    Args:
        models: (legend name, spec) pairs, drawn in this order.
        ctxs: contexts in tokens (any order; at least one).
        metrics: names from METRICS.
        s: the other settings (batch, dtypes, hardware, parallel layout); its ctx is ignored.
    """
    require_matplotlib()
    from matplotlib import rc_context
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if not models:
        raise KvcalcError("plot: give at least one model")
    if not metrics:
        raise KvcalcError(f"plot: give at least one metric ({', '.join(METRICS)})")
    if not ctxs:
        raise KvcalcError("plot: give at least one context")
    names = [name for name, _ in models]
    if (twice := first_repeat(names)) is not None:
        raise KvcalcError(f"plot: two models are named {twice!r}, which the legend could not tell apart: give one "
                          "another name (its spec's `name:`)")
    chosen = check_metrics(metrics, s)
    points = sorted(set(ctxs))
    with rc_context(STYLE):
        fig = Figure(figsize=(PANEL_WIDTH * len(chosen), PANEL_HEIGHT), layout="constrained")
        FigureCanvasAgg(fig)
        axes = fig.subplots(1, len(chosen), squeeze=False)[0]
        handles: dict[str, Any] = {}
        for ax, metric in zip(axes, chosen):
            _panel(ax, models, points, metric, s, handles)
        if caption := settings_caption([spec for _, spec in models], s, [m.name for m in chosen]):
            fig.suptitle(caption, wrap=True)  # wrapped at the figure's edges: one panel is a column wide
        # the models in their order, then the markers' meanings
        shown = [h for k, h in handles.items() if k.startswith("model:")] + \
                [h for k, h in handles.items() if not k.startswith("model:")]
        _legend_below(fig, shown)
    return fig


def settings_caption(specs: list[ModelSpec], s: Settings, metrics: list[str]) -> str:
    """The figure's title: the settings its figures depend on that are not the defaults (the batch, the dtypes, a
    quantisation scheme and an engine's pages), and MLA's cache layout and decode schedule where a model has MLA
    layers, as the tables' titles name them; empty where nothing needs saying."""
    from kvcalc.present.outputs import mla_note, serving_note, settings_words, state_words

    parts = [f"batch {s.batch:,}"] if s.batch != 1 else []
    parts += [f"KV cache {s.kv_dtype}"] if s.kv_dtype != "bf16" else []
    # the weights' dtype moves decode time, and with a hardware preset the cache panel's 'exceed memory' marker
    weights = "decode-time" in metrics or s.hardware is not None and "cache" in metrics
    parts += [f"weights {s.weights_dtype}"] if s.weights_dtype != "bf16" and weights else []
    parts += [w.strip() for w in (serving_note(s, specs) + mla_note(specs, s, "flops-decode" in metrics
                                                             or "decode-time" in metrics)).split(", ") if w.strip()]
    parts += [w.strip() for w in state_words(specs, [s]).split(", ") if w.strip()] if "state" in metrics else []
    # dense attention moves the prefill alone; FLOP panels count the whole model, whatever the layout
    return ", ".join(parts + settings_words(specs, [s], "flops-prefill" in metrics,
                                            layout=bool({"cache", "state", "decode-time"} & set(metrics))))


def _legend_below(fig: Figure, shown: list[Any]) -> None:
    """The figure's legend below its panels, in as many columns (up to 3) as fit its width: long model names in 3
    columns ran past the edges of a one-panel figure and were cut off."""
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    for ncols in range(min(len(shown), 3), 0, -1):
        legend = fig.legend(shown, [h.get_label() for h in shown], loc="outside lower center", ncols=ncols,
                            frameon=False)
        if ncols == 1 or legend.get_window_extent(renderer).width <= fig.bbox.width:
            return
        legend.remove()


def figure_format(path: Path) -> str:
    """The figure format `path`'s extension names, or a KvcalcError (checked before any work is done)."""
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise KvcalcError(f"{path}: cannot tell the figure format from {path.suffix or 'no extension'!r}: "
                          f"use one of {', '.join('.' + f for f in FORMATS)}")
    return fmt


def save_figure(fig: Figure, path: str | Path) -> None:
    """Write `fig` to `path` in the format its extension names (.png, .pdf, .svg or .pgf)."""
    path = Path(path)
    fmt = figure_format(path)
    require_matplotlib()
    from matplotlib import rc_context

    from kvcalc.present.outfile import whole_file

    style = dict(STYLE)
    if fmt == "pgf":  # matplotlib's default, xelatex, may be absent where lualatex or pdflatex is there
        import shutil

        style["pgf.texsystem"] = next((t for t in ("xelatex", "pdflatex", "lualatex") if shutil.which(t)), "xelatex")
    with rc_context(style):
        try:
            with whole_file(path) as partial:  # no empty or partial figure left behind, the earlier one kept
                if fmt == "pgf":  # the pgf backend takes no metadata
                    fig.savefig(partial, format=fmt, dpi="figure")
                else:
                    fig.savefig(partial, format=fmt, dpi=300 if fmt == "png" else "figure", metadata=_metadata(fmt))
        except Exception as exc:
            if fmt != "pgf" and not isinstance(exc, (RuntimeError, OSError)):
                raise
            if fmt == "pgf":  # matplotlib's pgf backend runs LaTeX to measure the text (its LatexError, or not found)
                raise KvcalcError(f"{path}: writing .pgf needs a LaTeX installation (matplotlib runs it to measure "
                                  f"text): {exc}") from exc
            raise KvcalcError(f"{path}: cannot write the figure: {exc}") from exc


def _metadata(fmt: str) -> dict[str, Any] | None:
    """Reproducible files: no creation date, kvcalc as the creator."""
    if fmt == "pdf":
        return {"Creator": "kvcalc", "CreationDate": None}
    if fmt == "svg":
        return {"Creator": "kvcalc", "Date": None}
    if fmt == "png":
        return {"Software": "kvcalc"}
    return None


MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


ROUNDING_ERROR = 1e-12  # a relative error at or below this is float64 rounding, not approximation


def pareto_figure(rows: list[dict]) -> Figure:
    """`approx --plot`: measured output error against prefill FLOPs, log–log, one colour per method and one marker
    per input scale; exact attention's FLOPs as a vertical line."""
    require_matplotlib()
    from matplotlib import rc_context
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    exact = [r for r in rows if r["rel_error_output"] == 0]  # exact attention: its FLOPs are the vertical line
    # a method exact but for rounding (a window or top-k as wide as n: 3e-16) is no trade-off: left out, so the error
    # axis keeps to the methods that approximate
    rows = [r for r in rows if r["rel_error_output"] > ROUNDING_ERROR]
    methods = list(dict.fromkeys(f"{r['method']} {r['params']}".strip() for r in rows))
    scales = list(dict.fromkeys(r["scale"] for r in rows))
    with rc_context(STYLE):
        fig = Figure(figsize=(PANEL_WIDTH * 1.3, PANEL_HEIGHT * 1.2), layout="constrained")
        FigureCanvasAgg(fig)
        ax = fig.subplots()
        for r in rows:
            label = f"{r['method']} {r['params']}".strip()
            ax.scatter([r["flops"]], [r["rel_error_output"]], color=PALETTE[methods.index(label) % len(PALETTE)],
                       marker=MARKERS[scales.index(r["scale"]) % len(MARKERS)], s=18, gid=f"point:{label}:{r['scale']}")
        for r in (rows or exact)[:1]:
            ax.axvline(r["flops_exact"], color="0.5", linestyle=(0, (1, 1.5)), linewidth=0.8, gid="exact",
                       label="exact attention")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("Prefill FLOPs (one head)")
        ax.set_ylabel("Relative output error")
        ax.grid(True, which="major", linewidth=0.4, color="0.85")
        handles = [Line2D([], [], color=PALETTE[i % len(PALETTE)], marker="o", linestyle="none", label=m)
                   for i, m in enumerate(methods)]
        handles += [Line2D([], [], color="0.3", marker=MARKERS[i % len(MARKERS)], linestyle="none", label=f"scale {s:g}")
                    for i, s in enumerate(scales)]
        handles.append(Line2D([], [], color="0.5", linestyle=(0, (1, 1.5)), label="exact attention's FLOPs"))
        fig.legend(handles, [str(h.get_label()) for h in handles], loc="outside right center", frameon=False)
    return fig
