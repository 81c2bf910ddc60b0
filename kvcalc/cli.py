"""The `kvcalc` command line: each command parses its options, calls the library, and hands rows to a renderer."""

from __future__ import annotations

import functools
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from kvcalc.errors import KvcalcError

app = typer.Typer(
    name="kvcalc",
    help="Exact KV-cache memory of transformer attention (MHA, GQA, MQA, MLA, sliding windows). k = 1024 tokens.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


class Format(str, Enum):
    table = "table"
    markdown = "markdown"
    latex = "latex"
    csv = "csv"
    json = "json"


class Units(str, Enum):
    binary = "binary"
    si = "si"
    bytes = "bytes"


class KvDtype(str, Enum):
    fp64 = "fp64"
    fp32 = "fp32"
    bf16 = "bf16"
    fp16 = "fp16"
    fp8 = "fp8"
    int8 = "int8"
    int4 = "int4"


class MlaCache(str, Enum):
    latent = "latent"
    expanded = "expanded"


def _parse_ctx(value: str) -> list[int]:
    from kvcalc.units import parse_token_list

    try:
        return parse_token_list(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--ctx'") from None


def _parse_one_ctx(value: str, why: str) -> int:
    """One context length; `why` completes the message for a list ("show takes one context; ...")."""
    ctxs = _parse_ctx(value)
    if len(ctxs) != 1:
        raise typer.BadParameter(why, param_hint="'--ctx'")
    return ctxs[0]


CTX_HELP = "Context length(s) in tokens: 4096, 4k, 128k, 1M, or a comma list 4k,32k,128k. k = 1024 (128k = 131072)."
CtxOpt = Annotated[str, typer.Option("--ctx", "-c", help=CTX_HELP)]
BatchOpt = Annotated[int, typer.Option("--batch", "-b", min=1, help="Sequences held at once.")]
DtypeOpt = Annotated[KvDtype, typer.Option("--kv-dtype", help="Storage type of the cache (int4: half a byte per element).")]
MlaOpt = Annotated[MlaCache, typer.Option("--mla-cache", help="MLA cache layout: latent (d_c + d_R, as DeepSeek/vLLM/SGLang) or expanded (per-head K and V).")]
FormatOpt = Annotated[Format, typer.Option("--format", "-f", help="Output format.")]
UnitsOpt = Annotated[Units, typer.Option("--units", help="Byte units in table/markdown/latex: binary (KiB, GiB), si (kB, GB), or exact bytes.")]
ExplainOpt = Annotated[bool, typer.Option("--explain", help="Print the derivation of every cache figure: formula, symbols, values, source fields.")]
NoWindowsOpt = Annotated[bool, typer.Option("--no-windows", help="Ignore sliding windows (every layer global): what the cache would be without them.")]


class Schedule(str, Enum):
    naive = "naive"
    absorbed = "absorbed"


def _parse_gen(value: str | int) -> int:
    from kvcalc.units import parse_tokens

    if isinstance(value, int):  # the default
        return value
    try:
        return parse_tokens(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


GenOpt = Annotated[int, typer.Option("--gen", "-g", parser=_parse_gen, metavar="TOKENS", help="Tokens generated after the prompt of --ctx (generation FLOPs): 1024, 1k, ...")]
WeightsDtypeOpt = Annotated[KvDtype, typer.Option("--weights-dtype", help="Storage type of the weights (int4: half a byte).")]
ScheduleOpt = Annotated[Optional[Schedule], typer.Option("--mla-schedule", help="MLA decode: absorbed (W_UK/W_UV folded; default with a latent cache) or naive (K/V rebuilt; default with an expanded cache).")]
DenseOpt = Annotated[bool, typer.Option("--dense-attn", help="Count prefill attention as the full N×N matrix (as FLOP-counting libraries do), not causal.")]
HardwareOpt = Annotated[Optional[str], typer.Option("--hardware", help="A hardware preset ('kvcalc hardware' lists them) or a YAML file: adds roofline times (lower bounds).")]
ColumnsOpt = Annotated[str, typer.Option("--columns", help="Columns: presets kv (default), cost, generate, mla, time, all, and/or column keys, comma-separated.")]


def _stderr():
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True, highlight=False)


def _stdout(width: int | None = None):
    """Rich console for tables: the terminal's width, or a wide page when piped (so files and logs don't wrap)."""
    import os
    import sys

    from rich.console import Console

    if width is None and not sys.stdout.isatty() and "COLUMNS" not in os.environ:
        width = 200
    return Console(soft_wrap=True, highlight=False, width=width)


def guarded(fn):
    """Turn a KvcalcError into one message on stderr and exit status 1, and Ctrl-C into exit status 130 (the
    shell's convention for SIGINT): never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except KvcalcError as exc:
            _stderr().print(f"error: {exc}", markup=False)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            _stderr().print("interrupted", markup=False)
            raise typer.Exit(130) from None

    return wrapper


def _emit(output) -> None:
    """Print a rendered table: rich objects through rich, strings verbatim (no markup, no wrapping)."""
    if isinstance(output, str):
        typer.echo(output)
        return
    console = _stdout()
    # Never truncate a figure or drop a column to fit a narrow terminal: widen the page to the table's minimum.
    needed = getattr(output, "min_width", None) or 0
    if needed > console.width:
        console = _stdout(width=needed)
    console.print(output)


def _load(model: str, no_windows: bool = False):
    from kvcalc.registry import load_model

    loaded = load_model(model)
    if no_windows:
        from dataclasses import replace

        from kvcalc.costs.cache import without_windows

        loaded = replace(loaded, spec=without_windows(loaded.spec))
    return loaded


def _warn_ctx(spec, ctxs: list[int], fmt: Format) -> None:
    """One line on stderr when ctx passes the trained maximum; csv and json rows carry `exceeds_max_context` instead,
    so that a program reading them (even with stderr merged into stdout) gets clean data."""
    over = [c for c in ctxs if c > spec.max_context]
    if over and fmt not in (Format.csv, Format.json):
        _stderr().print(
            f"warning: {spec.name}: ctx {max(over):,} exceeds its trained maximum of {spec.max_context:,} tokens (max_context); computed anyway",
            markup=False,
        )


def _explain_block(derivations: list[dict], fmt: Format, units: str) -> str:
    from kvcalc.explain import derivation_lines

    lines = [line for d in derivations for line in derivation_lines(d, units) + [""]]
    if fmt == Format.latex:
        return "\n".join(f"% {line}" if line else "%" for line in lines).rstrip("%\n")
    if fmt == Format.markdown:
        return "```text\n" + "\n".join(lines).rstrip() + "\n```"
    return "\n".join(lines).rstrip()


def _check_explain(explain: bool, fmt: Format) -> None:
    if explain and fmt == Format.csv:
        raise typer.BadParameter("--explain cannot be combined with --format csv (use json to get the derivation as data)")


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"kvcalc {version('kvcalc')}")
        except PackageNotFoundError:  # running from a source tree that was never installed
            typer.echo("kvcalc (not installed)")
        raise typer.Exit()


@app.callback()
def _root(
    show_version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")] = False,
) -> None:
    """Exact KV-cache memory of transformer attention (MHA, GQA, MQA, MLA, sliding windows). k = 1024 tokens."""


@app.command("list")
@guarded
def list_models(fmt: FormatOpt = Format.table, units: UnitsOpt = Units.binary) -> None:
    """List the bundled models with their attention kind, key dims and bf16 KV bytes per token."""
    from kvcalc.registry import bundled_names, load_model
    from kvcalc.render import render
    from kvcalc.rows import LIST_COLUMNS, LIST_JSON_KEYS, list_rows

    rows = list_rows([load_model(name).spec for name in bundled_names()])
    _emit(render(LIST_COLUMNS, rows, fmt.value, units.value, title="Bundled models", raw_keys=LIST_JSON_KEYS))


def _settings(ctx: int, batch: int, gen: int, kv_dtype, weights_dtype, mla_cache, mla_schedule, dense_attn, hardware):
    from kvcalc.figures import Settings

    hw = None
    if hardware:
        from kvcalc.hardware import load_hardware

        hw = load_hardware(hardware)
    return Settings(ctx=ctx, batch=batch, gen=gen, kv_dtype=kv_dtype.value, weights_dtype=weights_dtype.value,
                    mla_cache=mla_cache.value, mla_schedule=mla_schedule.value if mla_schedule else None,
                    dense_attn=dense_attn, hardware=hw)


def _table_rows(loaded, ctxs: list[int], base):
    """compare/sweep rows: architecture, cache and every cost figure of each model at each context of `base`."""
    from dataclasses import replace

    from kvcalc.costs.cache import kv_cache
    from kvcalc.figures import figures
    from kvcalc.rows import compare_row, with_ratios

    rows, reports = [], []
    for lm in loaded:
        for c in ctxs:
            report = kv_cache(lm.spec, c, base.batch, base.kv_dtype, base.mla_cache)
            rows.append({**compare_row(lm.spec, report), **figures(lm.spec, replace(base, ctx=c))})
            reports.append((lm, report))
    return with_ratios(rows), reports


@app.command()
@guarded
def compare(
    models: Annotated[list[str], typer.Argument(metavar="MODEL", help="Bundled names, YAML spec paths, or config.json paths.")],
    ctx: CtxOpt = "128k",
    batch: BatchOpt = 1,
    gen: GenOpt = 1024,
    kv_dtype: DtypeOpt = KvDtype.bf16,
    weights_dtype: WeightsDtypeOpt = KvDtype.bf16,
    mla_cache: MlaOpt = MlaCache.latent,
    mla_schedule: ScheduleOpt = None,
    dense_attn: DenseOpt = False,
    hardware: HardwareOpt = None,
    columns: ColumnsOpt = "kv",
    fmt: FormatOpt = Format.table,
    units: UnitsOpt = Units.binary,
    explain: ExplainOpt = False,
    no_windows: NoWindowsOpt = False,
) -> None:
    """Compare models side by side: one row per model and context (KV cache by default; --columns for costs)."""
    from kvcalc.columns import choose
    from kvcalc.explain import derivation
    from kvcalc.render import only, render
    from kvcalc.rows import JSON_KEYS

    ctxs = _parse_ctx(ctx)
    _check_explain(explain, fmt)
    cols = choose(columns, hardware is not None)
    loaded = [_load(m, no_windows) for m in models]
    for lm in loaded:
        _warn_ctx(lm.spec, ctxs, fmt)
    base = _settings(ctxs[0], batch, gen, kv_dtype, weights_dtype, mla_cache, mla_schedule, dense_attn, hardware)
    rows, reports = _table_rows(loaded, ctxs, base)
    derivations = [derivation(report, lm.origin, lm.config_keys) for lm, report in reports]
    title = (f"KV cache, {kv_dtype.value}, batch {batch}" if columns == "kv" else
             f"Batch {batch}, kv {kv_dtype.value}, weights {weights_dtype.value}" + (f", {hardware} (lower bounds)" if hardware else ""))
    title += ", windows ignored" if no_windows else ""
    if fmt == Format.json and explain:
        payload = [{**row, "derivation": d} for row, d in zip(only(rows, JSON_KEYS), derivations)]
        _emit(render(cols, rows, fmt.value, payload=payload))
        return
    _emit(render(cols, rows, fmt.value, units.value, title=title, raw_keys=JSON_KEYS))
    if explain and fmt != Format.json:
        _emit(_explain_block(derivations, fmt, units.value))


@app.command()
@guarded
def sweep(
    models: Annotated[list[str], typer.Argument(metavar="MODEL", help="Bundled names, YAML spec paths, or config.json paths.")],
    ctx: Annotated[str, typer.Option("--ctx", "-c", help="A range LO..HI (log-spaced: doubling, or --points) or a comma list. k = 1024.")] = "1k..1M",
    points: Annotated[Optional[int], typer.Option("--points", min=2, help="Log-spaced points in the range (default: every doubling).")] = None,
    batch: BatchOpt = 1,
    gen: GenOpt = 1024,
    kv_dtype: DtypeOpt = KvDtype.bf16,
    weights_dtype: WeightsDtypeOpt = KvDtype.bf16,
    mla_cache: MlaOpt = MlaCache.latent,
    mla_schedule: ScheduleOpt = None,
    dense_attn: DenseOpt = False,
    hardware: HardwareOpt = None,
    columns: Annotated[Optional[str], typer.Option("--columns", help="Column keys or presets, comma-separated (see compare --help).")] = None,
    fmt: FormatOpt = Format.table,
    units: UnitsOpt = Units.binary,
) -> None:
    """How cache, FLOPs and time grow with context: one row per model and context over a log-spaced range."""
    from kvcalc.columns import choose
    from kvcalc.render import render
    from kvcalc.rows import JSON_KEYS
    from kvcalc.units import parse_token_range

    try:
        ctxs = parse_token_range(ctx, points)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--ctx'") from None
    loaded = [_load(m) for m in models]
    if columns is None:
        from kvcalc.figures import is_mla

        mla = any(is_mla(lm.spec) for lm in loaded)
        columns = "model,ctx,kv_cache_bytes,flops_prefill,flops_decode_token,decode_bytes_read"
        columns += ",flops_decode_token_naive,flops_decode_token_absorbed" if mla else ""
        columns += ",decode_seconds_per_token,tokens_per_second" if hardware else ""
    cols = choose(columns, hardware is not None)
    for lm in loaded:
        _warn_ctx(lm.spec, ctxs, fmt)
    base = _settings(ctxs[0], batch, gen, kv_dtype, weights_dtype, mla_cache, mla_schedule, dense_attn, hardware)
    rows, _ = _table_rows(loaded, ctxs, base)
    title = f"Growth with context, batch {batch}, kv {kv_dtype.value}, weights {weights_dtype.value}"
    title += f", {hardware} (lower bounds)" if hardware else ""
    _emit(render(cols, rows, fmt.value, units.value, title=title, raw_keys=JSON_KEYS))


@app.command()
@guarded
def show(
    model: Annotated[str, typer.Argument(metavar="MODEL", help="A bundled name, a YAML spec path, or a config.json path.")],
    ctx: CtxOpt = "128k",
    batch: BatchOpt = 1,
    kv_dtype: DtypeOpt = KvDtype.bf16,
    mla_cache: MlaOpt = MlaCache.latent,
    per_layer: Annotated[bool, typer.Option("--per-layer", help="One row per layer instead of per layer group.")] = False,
    fmt: FormatOpt = Format.table,
    units: UnitsOpt = Units.binary,
    explain: ExplainOpt = False,
    no_windows: NoWindowsOpt = False,
) -> None:
    """Show a model's spec, derived dims, and its KV cache per token, per layer group (or layer) and in total."""
    from kvcalc.costs.cache import kv_cache
    from kvcalc.explain import derivation
    from kvcalc.render import render
    from kvcalc.rows import GROUP_COLUMNS, group_rows
    from kvcalc.summary import SUMMARY_COLUMNS, summary_rows

    n_ctx = _parse_one_ctx(ctx, "show takes one context; use compare for several")
    _check_explain(explain, fmt)
    lm = _load(model, no_windows)
    _warn_ctx(lm.spec, [n_ctx], fmt)
    report = kv_cache(lm.spec, n_ctx, batch, kv_dtype.value, mla_cache.value)
    breakdown = group_rows(report, per_layer)
    summary = summary_rows(lm, report)
    if fmt == Format.json:
        payload = {"model": lm.spec.name, "origin": lm.origin, "exceeds_max_context": n_ctx > lm.spec.max_context,
                   "spec": lm.spec.model_dump(exclude_none=True),
                   "summary": {r["key"]: r["value"] for r in summary}, "layers" if per_layer else "groups": breakdown}
        if explain:
            payload["derivation"] = derivation(report, lm.origin, lm.config_keys)
        _emit(render(GROUP_COLUMNS, breakdown, "json", payload=payload))
        return
    if fmt != Format.csv:
        _emit(render(SUMMARY_COLUMNS, summary, fmt.value, units.value, title=f"{lm.spec.name} ({lm.origin})"))
        typer.echo("")
    title = f"KV cache by {'layer' if per_layer else 'layer group'} at ctx {n_ctx:,}, batch {batch}, {kv_dtype.value}"
    _emit(render(GROUP_COLUMNS, breakdown, fmt.value, units.value, title=title))
    if explain:
        typer.echo("")
        _emit(_explain_block([derivation(report, lm.origin, lm.config_keys)], fmt, units.value))


PASS_TITLES = {
    "prefill": "Prefill\n(ctx tokens)", "decode_token": "Decode step\n(at ctx)", "generate_cached": "Generate\n(cache)",
    "generate_uncached": "Generate\n(no cache)", "decode_token_naive": "Decode step\nnaive", "decode_token_absorbed":
    "Decode step\nabsorbed", "generate_cached_naive": "Generate (cache)\nnaive", "generate_cached_absorbed":
    "Generate (cache)\nabsorbed",
}


@app.command()
@guarded
def cost(
    model: Annotated[str, typer.Argument(metavar="MODEL", help="A bundled name, a YAML spec path, or a config.json path.")],
    ctx: Annotated[str, typer.Option("--ctx", "-c", help="Prompt length P in tokens (k = 1024): the prefill, and the context of the decode step.")] = "4k",
    gen: GenOpt = 1024,
    batch: BatchOpt = 1,
    kv_dtype: DtypeOpt = KvDtype.bf16,
    weights_dtype: WeightsDtypeOpt = KvDtype.bf16,
    mla_cache: MlaOpt = MlaCache.latent,
    mla_schedule: ScheduleOpt = None,
    dense_attn: DenseOpt = False,
    hardware: HardwareOpt = None,
    fmt: FormatOpt = Format.table,
    units: UnitsOpt = Units.binary,
) -> None:
    """FLOPs by component of prefill, one decode step and the whole generation (cached vs not; MLA naive vs absorbed)."""
    from kvcalc.figures import cost_breakdowns, figures
    from kvcalc.render import Column, render
    from kvcalc.summary import cost_summary_rows, SUMMARY_COLUMNS

    n_ctx = _parse_one_ctx(ctx, "cost takes one prompt length; use sweep for several")
    lm = _load(model)
    _warn_ctx(lm.spec, [n_ctx + gen], fmt)
    s = _settings(n_ctx, batch, gen, kv_dtype, weights_dtype, mla_cache, mla_schedule, dense_attn, hardware)
    passes = cost_breakdowns(lm.spec, s)
    summary = cost_summary_rows(figures(lm.spec, s), units.value)
    components = list(dict.fromkeys(k for p in passes.values() for k in p))
    rows = [{"component": c, **{p: passes[p].get(c, 0) for p in passes}} for c in components]
    rows.append({"component": "total", **{p: sum(passes[p].values()) for p in passes}})
    cols = [Column("component", "Component")] + [Column(p, PASS_TITLES[p], "flops") for p in passes]
    if fmt == Format.json:
        payload = {"model": lm.spec.name, "ctx": s.ctx, "gen": s.gen, "batch": s.batch,
                   "flops": {p: {**b, "total": sum(b.values())} for p, b in passes.items()},
                   "summary": {r["key"]: r["value"] for r in summary}}
        _emit(render(cols, rows, "json", payload=payload))
        return
    title = f"{lm.spec.name}: FLOPs, prompt {s.ctx:,} tokens, {s.gen:,} generated, batch {s.batch}"
    _emit(render(cols, rows, fmt.value, units.value, title=title))
    if fmt != Format.csv:
        typer.echo("")
        _emit(render(SUMMARY_COLUMNS, summary, fmt.value, units.value, title="Memory, traffic and time"))


class NumpyDtype(str, Enum):
    float32 = "float32"
    float16 = "float16"
    float64 = "float64"


def _parse_bytes(value: str | None) -> int | None:
    """'8G' -> 8 GiB; K/M/G/T are binary (1024-based), a plain number is bytes."""
    if value is None:
        return None
    import re

    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*", value, re.IGNORECASE)
    if not match:
        raise typer.BadParameter(f"{value!r} is not a size (use e.g. 8G, 512M, 1073741824)", param_hint="'--max-memory'")
    scale = 1024 ** " KMGT".index(match[2].upper() or " ")
    return int(float(match[1]) * scale)


@app.command("run")
@guarded
def run_backend(
    model: Annotated[str, typer.Argument(metavar="MODEL", help="A bundled name, a YAML spec path, or a config.json path.")],
    ctx: Annotated[str, typer.Option("--ctx", "-c", help="Prompt tokens to prefill (k = 1024).")] = "128",
    decode: Annotated[int, typer.Option("--decode", "-d", min=0, help="Decode steps after the prefill.")] = 4,
    batch: BatchOpt = 1,
    layers: Annotated[Optional[int], typer.Option("--layers", "-l", min=1, help="Layers to run (default: one of each layer group).")] = None,
    dtype: Annotated[NumpyDtype, typer.Option("--dtype", help="NumPy dtype of weights, activations and cache.")] = NumpyDtype.float32,
    mla_cache: MlaOpt = MlaCache.latent,
    mla_schedule: ScheduleOpt = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the random weights and inputs.")] = 0,
    max_memory: Annotated[Optional[str], typer.Option("--max-memory", help="Refuse runs predicted to need more (8G, 512M; default: available memory).")] = None,
    rope_demo: Annotated[bool, typer.Option("--rope-demo", help="Add the RoPE demonstration (always on for MLA models).")] = False,
    threads: Annotated[Optional[int], typer.Option("--threads", "-t", min=1, help="Threads for the prefill's attention, each with a one-thread BLAS (default: every core).")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
    fmt: FormatOpt = Format.table,
) -> None:
    """Run the attention layers for real in NumPy and check the analytic cache and FLOP figures against them."""
    from kvcalc.backend.report import check_rows, report_payload, result_rows, CHECK_COLUMNS, RESULT_COLUMNS
    from kvcalc.backend.runner import RunSettings, run
    from kvcalc.render import render

    n_ctx = _parse_one_ctx(ctx, "run takes one prompt length")
    lm = _load(model)
    settings = RunSettings(ctx=n_ctx, decode=decode, batch=batch, layers=layers, dtype=dtype.value,
                           mla_cache=mla_cache.value, mla_schedule=mla_schedule.value if mla_schedule else None,
                           seed=seed, max_memory=_parse_bytes(max_memory), rope_demo=rope_demo, threads=threads)
    settings.schedule  # a bad combination fails before any allocation
    from kvcalc.progress import progress_hooks

    with progress_hooks(quiet) as progress:
        report = run(lm.spec, settings, progress)
    if fmt == Format.json:
        _emit(render(RESULT_COLUMNS, [], "json", payload=report_payload(report)))
    else:
        title = f"{lm.spec.name}: layers {', '.join(map(str, report.layers))}, ctx {settings.ctx:,} + {decode} decode steps, batch {batch}, {dtype.value}"
        _emit(render(RESULT_COLUMNS, result_rows(report), fmt.value, title=title,
                     raw_keys=["section", "quantity", "predicted", "measured", "match"]))
        if fmt != Format.csv:
            typer.echo("")
            _emit(render(CHECK_COLUMNS, check_rows(report), fmt.value, title="Numerical checks"))
    if not report.ok:
        bad = [f"{r.quantity}: predicted {r.predicted}, measured {r.measured}" for r in report.mismatches]
        bad += [f"{c.name}: error {c.error:.3g} vs tolerance {c.tolerance:g}" for c in report.checks if not c.passed]
        raise KvcalcError("predicted and measured differ:\n  " + "\n  ".join(bad))


@app.command("hardware")
@guarded
def hardware_list(fmt: FormatOpt = Format.table, units: UnitsOpt = Units.binary) -> None:
    """List the bundled hardware presets: peak dense bf16 FLOP/s, memory bandwidth and size, with sources."""
    from kvcalc.hardware import bundled_hardware, hardware_rows, load_hardware
    from kvcalc.render import Column, render

    rows = hardware_rows([load_hardware(name) for name in bundled_hardware()])
    cols = [Column("name", "Name"), Column("vendor", "Vendor"), Column("peak_flops_bf16", "Peak bf16\nper second", "flops"),
            Column("memory_bandwidth", "Memory\nbandwidth", "bandwidth"), Column("memory_bytes", "Memory", "bytes"),
            Column("ridge_flops_per_byte", "Ridge\nFLOP/byte", "float")]
    _emit(render(cols, rows, fmt.value, units.value, title="Hardware presets (vendor peak figures)"))


@app.command("import")
@guarded
def import_config(
    config: Annotated[Path, typer.Argument(metavar="CONFIG", help="A Hugging Face config.json.")],
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write the YAML spec here instead of stdout.")] = None,
    name: Annotated[Optional[str], typer.Option("--name", help="Name of the spec (default: the config's folder or file name).")] = None,
) -> None:
    """Convert a Hugging Face config.json into an equivalent kvcalc YAML spec."""
    from kvcalc.registry import load_path
    from kvcalc.summary import spec_yaml

    lm = load_path(config)
    if lm.kind != "hf":
        raise KvcalcError(f"{config}: model_type: not found; this is not a Hugging Face config.json")
    text = spec_yaml(lm.spec, name)
    if output is None:
        typer.echo(text, nl=False)
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise KvcalcError(f"{output}: cannot write: {exc.strerror or exc}") from None
    _stderr().print(f"wrote {output}", markup=False)


def main() -> None:
    """Console-script entry point."""
    app()
