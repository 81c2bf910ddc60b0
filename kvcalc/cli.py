"""The `kvcalc` command line: each command parses its options, calls the library, and hands a result to `emit`."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Annotated

import typer

from kvcalc.errors import KvcalcError
from kvcalc.lists import first_repeat
from kvcalc.options import (
    BatchOpt,
    ChartOpt,
    ColumnsOpt,
    CostOptions,
    CtxOpt,
    DtypeOpt,
    EncCtxOpt,
    ExplainOpt,
    FormatOpt,
    MlaOpt,
    ModelArg,
    ModelsArg,
    NoWindowsCacheOpt,
    NoWindowsOpt,
    OnceEachGroup,
    OneCtxOpt,
    ScheduleOpt,
    UnitsOpt,
    choice,
    cost_options,
    explain_format,
    guarded,
    load,
    load_named,
    one_ctx,
    output_options,
    parse_ctx,
    path_value,
    range_option,
    reserve_value,
    usage_error,
    version_callback,
    whole_option,
)
from kvcalc.schema import COMMANDS as SCHEMA_COMMANDS
from kvcalc.settings import LIMITS, TOKENS_LIMIT

app = typer.Typer(
    name="kvcalc",
    help="Exact KV-cache memory of transformer attention (MHA, GQA, MQA, MLA, sliding windows). k = 1024 tokens.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    cls=OnceEachGroup,
)


@app.callback()
def _root(
    show_version: Annotated[bool, typer.Option("--version", callback=version_callback, is_eager=True,
                                               help="Print the version and exit.")] = False,
) -> None:
    """Exact KV-cache memory of transformer attention (MHA, GQA, MQA, MLA, sliding windows). k = 1024 tokens."""


@app.command("list")
@guarded
@output_options
def list_models(fmt: FormatOpt = "table", units: UnitsOpt = "binary") -> None:
    """List the bundled models with their attention kind, key dims and bf16 KV bytes per token."""
    from kvcalc.present.emit import emit
    from kvcalc.present.outputs import list_output

    emit(list_output(), fmt, units)


@app.command()
@guarded
@output_options
@cost_options
def compare(
    models: ModelsArg,
    opts: CostOptions,
    ctx: CtxOpt = "128k",
    columns: ColumnsOpt = "kv",
    fmt: FormatOpt = "table",
    units: UnitsOpt = "binary",
    explain: ExplainOpt = False,
    no_windows: NoWindowsOpt = False,
    chart: ChartOpt = None,
) -> None:
    """Compare models side by side: one row per model and context (KV cache by default; --columns for costs)."""
    from kvcalc.present.emit import emit
    from kvcalc.present.outputs import compare_output, with_chart

    ctxs = parse_ctx(ctx)
    explain_format(explain, fmt)
    check_rows(len(models), len(ctxs), fmt, command="compare", hint="'--ctx'")
    loaded = load_named(models, "compare", no_windows)
    out = compare_output(loaded, opts.settings(ctxs[0]), ctxs, columns, explain, opts.hardware_name, fmt, chart,
                         units)
    emit(with_chart(out, chart, fmt, units) if chart is not None else out, fmt, units)


@app.command()
@guarded
@output_options
@cost_options(lists=True)
def sweep(
    models: ModelsArg,
    opts: CostOptions,
    ctx: Annotated[str, typer.Option("--ctx", "-c", help="A range LO..HI (log-spaced: doubling, or --points) or a comma list. k = 1024.")] = "1k..1M",
    points: Annotated[int | None, whole_option("--points", lo=2, help="Log-spaced points in the range (default: every doubling).")] = None,
    columns: Annotated[str | None, typer.Option("--columns", help="Column keys or presets, comma-separated (see compare --help); model and ctx are always shown.")] = None,
    fmt: FormatOpt = "table",
    units: UnitsOpt = "binary",
    chart: ChartOpt = None,
) -> None:
    """How cache, FLOPs and time grow with context: one row per model and context over a log-spaced range, for each
    combination of --batch, --gen, --kv-dtype and --tp (each takes a comma list; batch varies slowest, tp fastest)."""
    from kvcalc.present.emit import emit
    from kvcalc.present.outputs import sweep_output, with_chart
    from kvcalc.units import parse_token_range

    try:
        ctxs = parse_token_range(ctx, points)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=range_option(str(exc))) from None
    grid = opts.each_settings(ctxs[0])
    flags = ["--points" if points is not None else "--ctx"] + [f"--{name.replace('_', '-')}" for name, _ in opts.grid]
    check_rows(len(models), len(ctxs), fmt, len(grid), hint=" / ".join(f"'{f}'" for f in flags))
    loaded = load_named(models, "sweep")
    varied = tuple(name for name, _ in opts.grid)
    out = sweep_output(loaded, grid, ctxs, columns, opts.hardware_name, fmt, chart, varied)
    emit(with_chart(out, chart, fmt, units) if chart is not None else out, fmt, units)


@app.command()
@guarded
@output_options
@cost_options(omit=("gen", "dense_attn", "mla_schedule", "hardware_name"),  # show sizes the cache: no FLOPs or times
              helps={"weights_dtype": "Storage type of the weights (int4: half a byte): the per-GPU weights under --tp/--pp/--dp."})
def show(
    model: ModelArg,
    opts: CostOptions,
    ctx: OneCtxOpt = "128k",
    per_layer: Annotated[bool, typer.Option("--per-layer", help="One row per layer instead of per layer group.")] = False,
    fmt: FormatOpt = "table",
    units: UnitsOpt = "binary",
    explain: ExplainOpt = False,
    no_windows: NoWindowsCacheOpt = False,
) -> None:
    """Show a model's spec, derived dims, and its KV cache per token, per layer group (or layer) and in total."""
    from kvcalc.present.emit import emit
    from kvcalc.present.outputs import show_output

    s = opts.settings(one_ctx(ctx, "show takes one context; use compare for several"))
    explain_format(explain, fmt)
    lm = load(model, no_windows)
    if per_layer:
        check_per_layer_rows(lm.spec.n_layers + (lm.spec.mtp_layers if s.mtp else 0), lm.spec.name, fmt)
    emit(show_output(lm, s, per_layer, explain, units), fmt, units)


MAX_PER_LAYER_ROWS = 10_000  # rows of `show --per-layer` in csv and json (one a layer, built whole before printing)


def check_per_layer_rows(rows: int, name: str, fmt: str) -> None:
    """`show --per-layer` within its format's bound: a spec allows 10**6 layers, and a table lays out about 1,000
    rows a second (the same bound as a sweep's in table, markdown and latex)."""
    from kvcalc.present.emit import HUMAN, output_format

    human = output_format(fmt) in HUMAN
    limit = MAX_TABLE_ROWS if human else MAX_PER_LAYER_ROWS
    if rows > limit:
        also = f" in {output_format(fmt)} (csv and json: {MAX_PER_LAYER_ROWS:,})" if human else ""
        raise typer.BadParameter(f"{name} has {rows:,} layers: --per-layer prints one row a layer, at most {limit:,}"
                                 f"{also}; without it, show prints one row a layer group",
                                 param_hint="'--per-layer'")


@app.command()
@guarded
@output_options
@cost_options
def cost(
    model: ModelArg,
    opts: CostOptions,
    ctx: Annotated[str, typer.Option("--ctx", "-c", help="Prompt length P in tokens (k = 1024): the prefill, and the context of the decode step.")] = "4k",
    fmt: FormatOpt = "table",
    units: UnitsOpt = "binary",
) -> None:
    """FLOPs by component of prefill, one decode step and the whole generation (cached vs not; MLA naive vs absorbed)."""
    from kvcalc.present.emit import emit
    from kvcalc.present.outputs import cost_output

    s = opts.settings(one_ctx(ctx, "cost takes one prompt length; use sweep for several"))
    emit(cost_output(load(model), s, units), fmt, units)


@app.command()
@guarded
@output_options
@cost_options(omit=("gen", "dense_attn", "mla_schedule"),  # fit sizes memory: no FLOPs
              helps={"hardware_name": "A hardware preset ('kvcalc hardware' lists them) or a YAML file: the GPUs whose memory is filled (required)."})
def fit(
    model: ModelArg,
    opts: CostOptions,
    ctx: Annotated[str | None, typer.Option("--ctx", "-c", help="Context(s) to find the largest batch for (a comma list); without it, the longest context for --batch.")] = None,
    gpus: Annotated[int | None, whole_option("--gpus", lo=1, help="GPUs of the preset (tp · pp · dp; alone it sets --tp).")] = None,
    reserve: Annotated[Fraction | None, typer.Option("--reserve", parser=reserve_value, metavar="FRACTION", help="Fraction of each GPU's memory left unused (default 0.1; with --engine vllm 1 − its gpu_memory_utilization: 0 on NVIDIA and AMD GPUs, where its extensible KV cache keeps a margin of max(1 GiB, 3 on AMD; 0.75 × the activation estimate) free, the larger of the two counted, else 0.08; with --engine sglang 1 − SGLang's default --mem-fraction-static, as it computes it for the GPU and layout).")] = None,
    chunk: Annotated[int | None, whole_option("--prefill-chunk", lo=1, hi=1 << 40, help="Tokens of one prefill chunk, for the activation estimate (your engine's max_num_batched_tokens; default: 2048; with --engine vllm, vllm serve's: 16384 on GPUs of 160 GiB or more, 8192 on those of 70 GiB or more except A100, on a TPU its chip's (v5p 256, v5e 512, v6e 1024); with --engine sglang its chunked_prefill_size, 2048 to 16384 by the GPU's memory, which sets its static fraction: no estimate beside it).")] = None,
    fmt: FormatOpt = "table",
    units: UnitsOpt = "binary",
) -> None:
    """What fits: the longest context for a batch, or the largest batch for each context, on --hardware's GPUs."""
    from kvcalc.present.emit import emit
    from kvcalc.present.outputs import fit_output

    if opts.hardware_name is None:  # a missing option: click's usage error, as a missing MODEL is
        raise usage_error("fit needs --hardware NAME (see 'kvcalc hardware') or a hardware YAML file")
    if gpus is not None and gpus > LIMITS["tp"] and opts.tp == opts.pp == opts.dp == 1:  # alone it becomes --tp
        raise typer.BadParameter(f"{gpus}: at most {LIMITS['tp']:,} alone, as it sets --tp (give --tp, --pp and --dp "
                                 "for a larger layout)", param_hint="'--gpus'")
    ctxs = parse_ctx(ctx) if ctx is not None else None  # '' is refused there, not read as no --ctx
    if ctxs is not None and len(ctxs) > MAX_FIT_CONTEXTS:
        raise typer.BadParameter(f"{len(ctxs):,} contexts: fit solves a batch for each, at most {MAX_FIT_CONTEXTS:,}",
                                 param_hint="'--ctx'")
    emit(fit_output(load(model), opts, ctxs, gpus, reserve, chunk, units), fmt, units)


@app.command("run")
@guarded
@output_options
def run_backend(
    model: ModelArg,
    ctx: Annotated[str, typer.Option("--ctx", "-c", help="Prompt tokens to prefill (k = 1024).")] = "128",
    decode: Annotated[int, whole_option("--decode", "-d", lo=0, hi=TOKENS_LIMIT, help="Decode steps after the prefill.")] = 4,
    batch: BatchOpt = 1,
    layers: Annotated[int | None, whole_option("--layers", "-l", lo=1, help="Layers to run (default: one of each layer group).")] = None,
    dtype: Annotated[str, typer.Option("--dtype", **choice(("float32", "float16", "float64")), help="NumPy dtype of weights, activations and cache.")] = "float32",
    mla_cache: MlaOpt = "latent",
    mla_schedule: ScheduleOpt = None,
    seed: Annotated[int, whole_option("--seed", lo=0, hi=2**63 - 1, help="Seed of the random weights and inputs.")] = 0,
    max_memory: Annotated[str | None, typer.Option("--max-memory", help="Refuse runs predicted to need more (8G, 512M: binary, G = 2**30 bytes, so 512MB is 512 MiB; default: available memory).")] = None,
    rope_demo: Annotated[bool, typer.Option("--rope-demo", help="Add the RoPE demonstration (always on for MLA models).")] = False,
    threads: Annotated[int | None, whole_option("--threads", "-t", lo=1, hi=4096, help="Threads for the prefill's attention, each with a one-thread BLAS (default: every core; at most 4,096).")] = None,
    enc_ctx: EncCtxOpt = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
    fmt: FormatOpt = "table",
) -> None:
    """Run the attention layers for real in NumPy and check the analytic cache and FLOP figures against them."""
    from kvcalc.backend.runner import RunSettings, run
    from kvcalc.present.emit import emit
    from kvcalc.present.outputs import run_output
    from kvcalc.progress import progress_hooks
    from kvcalc.settings import resolve_schedule
    from kvcalc.units import parse_size

    try:
        limit = parse_size(max_memory) if max_memory is not None else None
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--max-memory'") from None
    if limit is not None and limit <= 0:
        raise typer.BadParameter(f"{max_memory!r}: a memory limit must be positive", param_hint="'--max-memory'")
    settings = RunSettings(ctx=one_ctx(ctx, "run takes one prompt length"), decode=decode, batch=batch, layers=layers,
                           dtype=dtype, mla_cache=mla_cache, mla_schedule=mla_schedule, seed=seed, max_memory=limit,
                           rope_demo=rope_demo, threads=threads, enc_ctx=enc_ctx)
    resolve_schedule(mla_cache, mla_schedule)  # a bad combination fails before any allocation
    if dtype == "float16":
        from kvcalc.present.emit import warn

        warn("warning: --dtype float16: NumPy has no float16 BLAS: products run in float64 tiles rounded to float16, "
             "and the run takes about 3x float32's time")
    lm = load(model)
    with progress_hooks(quiet) as progress:
        report = run(lm.spec, settings, progress)
    emit(run_output(report, lm), fmt)
    if not report.ok:
        bad = [f"{r.quantity}: predicted {r.predicted}, measured {r.measured}" for r in report.mismatches]
        bad += [f"{c.name}: error {c.error:.3g} vs tolerance {c.tolerance:g}" for c in report.checks if not c.passed]
        raise KvcalcError("predicted and measured differ:\n  " + "\n  ".join(bad))


@app.command("hardware")
@guarded
@output_options
def hardware_list(fmt: FormatOpt = "table", units: UnitsOpt = "binary") -> None:
    """List the bundled hardware presets: peak dense bf16 FLOP/s, memory bandwidth and size, interconnect, and (csv and
    json) the source of the figures."""
    from kvcalc.present.emit import emit
    from kvcalc.present.outputs import hardware_output

    emit(hardware_output(), fmt, units)


@app.command("plot")
@guarded
@cost_options(omit=("gen",),  # no metric counts generation
              helps={"hardware_name": "A hardware preset ('kvcalc hardware' lists them) or a YAML file: the decode-time metric, the device memory drawn as a line and where weights + cache exceed it."})
def plot(
    models: ModelsArg,
    opts: CostOptions,
    output: Annotated[Path, typer.Option("--output", "-o", metavar="FILE", parser=path_value, help="The figure: .png, .pdf, .svg or .pgf.")],
    ctx: Annotated[str, typer.Option("--ctx", "-c", help="A range LO..HI (log-spaced: doubling, or --points) or a comma list. k = 1024.")] = "1k..1M",
    points: Annotated[int | None, whole_option("--points", lo=2, help="Log-spaced points in the range (default: every doubling).")] = None,
    metric: Annotated[list[str] | None, typer.Option("--metric", "-m", help="cache (default), state, flops-decode, flops-prefill or decode-time (needs --hardware); repeat for panels side by side.")] = None,
) -> None:
    """Plot cache, state, FLOPs or decode time against context, log-log, one line per model (needs matplotlib)."""
    from kvcalc.present.plot import check_metrics, plot_figure, require_matplotlib, save_figure
    from kvcalc.units import parse_token_range

    require_matplotlib()
    try:
        ctxs = parse_token_range(ctx, points)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=range_option(str(exc))) from None
    s = opts.settings(ctxs[0])
    check_metrics(metric or ["cache"], s)  # before the models: a misspelt metric is the one message
    loaded = load_named(models, "plot", note_names=False, repeats="its line would be drawn twice")  # two of one name: plot_figure refuses (its legend)
    from kvcalc.present.emit import warn
    from kvcalc.present.outputs import plot_warnings

    for line in plot_warnings(loaded, ctxs, s, metric or ["cache"]):
        warn(line)
    fig = plot_figure([(lm.spec.name, lm.spec) for lm in loaded], ctxs, metric or ["cache"], s)
    save_figure(fig, output)
    typer.echo(f"wrote {output}", err=True)


@app.command("paper")
@guarded
def paper(
    models: Annotated[list[str] | None, typer.Argument(metavar="[MODEL]...", help="Models (default: llama3-70b gemma3-27b deepseek-v2).")] = None,
    output_dir: Annotated[str, typer.Option("--output", "-o", metavar="DIR", help="The folder to write (created if missing).")] = "kvcalc-paper",
    ctx: Annotated[str, typer.Option("--ctx", "-c", help="Context of the models table in tokens: 4096, 4k, 128k, 1M; k = 1024. The figures always run 1k..1M.")] = "128k",
    kv_dtype: DtypeOpt = "bf16",
) -> None:
    """Write a paper bundle: the dims and models tables (tex, md, csv), the standard figures and a README with the
    command and kvcalc version that made them."""
    import shlex

    from kvcalc.present.outfile import whole_file
    from kvcalc.present.outputs import PAPER_FIGURE_CTX, PAPER_README_HEAD, paper_figure_notes, paper_readme, paper_tables
    from kvcalc.settings import Settings
    from kvcalc.tables import DEFAULT_MODELS

    if not output_dir.strip():  # Path('') is '.': the bundle would land among whatever is here
        raise typer.BadParameter("an empty folder name: give a folder, or leave --output out for kvcalc-paper",
                                 param_hint="'--output'")
    output = Path(output_dir)
    if output.is_symlink() and not output.exists():  # mkdir would say 'File exists'
        raise typer.BadParameter(f"{output_dir} is a symbolic link that leads nowhere (a loop, or a missing target)",
                                 param_hint="'--output'")
    if output.exists() and not output.is_dir():  # before the tables are computed
        raise typer.BadParameter(f"{output_dir} is a file, not a folder", param_hint="'--output'")
    readme = output / "README.md"
    if readme.is_file() and not readme.read_text(encoding="utf-8", errors="replace").startswith(PAPER_README_HEAD):
        raise typer.BadParameter(f"{output_dir} holds a README.md that no kvcalc paper bundle wrote, which the bundle's "
                                 "own would replace; give a new folder (a bundle's folder is rewritten in place)",
                                 param_hint="'--output'")
    names = list(models or DEFAULT_MODELS)
    s = Settings(ctx=one_ctx(ctx, "paper takes one context"), kv_dtype=kv_dtype)
    loaded = [load(m) for m in names]
    specs = [lm.spec.name for lm in loaded]
    if (twice := first_repeat(specs)) is not None:  # before anything is written
        raise KvcalcError(f"paper: two models are named {twice!r}, which its tables and figures could not tell apart: "
                          "give one another name (its spec's `name:`)")
    files, warnings = paper_tables(loaded, s)
    if warnings:
        from kvcalc.present.emit import warn

        for line in warnings:
            warn(line)
    try:
        output.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            with whole_file(output / name) as path:
                path.write_text(text + "\n", encoding="utf-8")
    except OSError as exc:
        raise KvcalcError(f"--output {output}: cannot write ({exc.strerror or exc})") from None
    figures = []
    try:
        from kvcalc.present.plot import plot_figure, require_matplotlib, save_figure
        require_matplotlib()
        from kvcalc.present.emit import warn

        for line in paper_figure_notes([lm.spec for lm in loaded]):
            warn(line)
        lo, hi = PAPER_FIGURE_CTX
        span = [lo << i for i in range((hi // lo).bit_length())]  # every doubling
        for metric in ("cache", "flops-decode"):
            for ext in ("pdf", "png"):
                fig = plot_figure([(lm.spec.name, lm.spec) for lm in loaded], span, [metric], s)
                save_figure(fig, output / f"{metric}.{ext}")
                figures.append(f"{metric}.{ext}")
    except KvcalcError as exc:
        from kvcalc.present.emit import warn

        warn(f"figures skipped: {exc}")
    command = shlex.join(["kvcalc", "paper", *names, "-o", str(output), "--ctx", ctx, "--kv-dtype", kv_dtype])
    from importlib.metadata import PackageNotFoundError, version

    try:
        ver = version("kvcalc")
    except PackageNotFoundError:
        ver = "(not installed)"
    listed = {**files, **{f: "" for f in figures}}
    with whole_file(output / "README.md") as path:
        path.write_text(paper_readme(listed, command, ver, kv_dtype), encoding="utf-8")
    typer.echo(f"wrote {len(listed) + 1} files to {output}", err=True)


@app.command("approx")
@guarded
@output_options
def approx(
    ctx: typer.Context,
    method: Annotated[str, typer.Option("--method", "-m", help="Methods with parameters, comma-separated; parameters key=value, '/'-separated: exact, window:w=256, topk:k=64, lsh:c=64/r=2, linformer:k=256, linformer-svd:k=256, nystrom:m=64/T=6, performer:r=256, cosformer.")] = "performer:r=256,nystrom:m=64,linformer:k=256,topk:k=64",
    n: Annotated[str, typer.Option("--n", help="Sequence length (k = 1024).")] = "1024",
    d: Annotated[int, whole_option("--d", lo=1, hi=16384, help="Query/key head dim.")] = 64,
    d_v: Annotated[int | None, whole_option("--dv", lo=1, hi=16384, help="Value head dim (default: --d).")] = None,
    scale: Annotated[str, typer.Option("--scale", help="Input scales (multiply Q and K), comma-separated: small is flat attention, large is spiky.")] = "0.25,0.5,1,2",
    data: Annotated[str, typer.Option("--data", help="gaussian, clustered, spiky, or an .npz with q [n, d], k [n, d], v [n, d_v] of one head.")] = "gaussian",
    seeds: Annotated[int, whole_option("--seeds", lo=1, hi=1000, help="Random inputs (and projections) to average the errors over.")] = 3,
    causal: Annotated[bool, typer.Option("--causal", help="Measure causal (decoder) attention (window needs it); methods without a causal form (lsh, linformer, linformer-svd, nystrom) are refused.")] = False,
    spectrum: Annotated[bool, typer.Option("--spectrum", help="Also the singular values of the attention matrix and of QKᵀ: the rank for 90%, 99% and 99.9% of the energy.")] = False,
    plot_file: Annotated[Path | None, typer.Option("--plot", metavar="FILE", parser=path_value, help="Also a Pareto plot of error against FLOPs (.png .pdf .svg .pgf; needs matplotlib).")] = None,
    transmla: Annotated[list[str] | None, typer.Option("--transmla", metavar="MODEL", help="Instead: the cache saving of converting a GQA model to TransMLA's 512 + 64 latent (repeatable; the cache at --n tokens).")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar (shown on a terminal once the runs take a second).")] = False,
    fmt: FormatOpt = "table",
    units: UnitsOpt = "binary",
) -> None:
    """Approximate attention (Linformer, Nyström, Performer, cosFormer, LSH, windows, top-k): cost against exact,
    decode state and measured error, over input scales."""
    from kvcalc.approx.evaluate import DATA, evaluate, is_npz, parse_methods, spectrum_rows
    from kvcalc.present.emit import emit
    from kvcalc.present.outputs import approx_output

    def written(flags: dict[str, str]) -> list[str]:
        """The flags among `flags` (parameter name: flag) written on the command line, whatever their value."""
        return [flag for name, flag in flags.items()
                if getattr(ctx.get_parameter_source(name), "name", "DEFAULT") != "DEFAULT"]

    length = one_ctx(n, "approx takes one --n", "--n")
    if transmla:
        from kvcalc.present.outputs import transmla_output

        given = written({"method": "--method", "d": "--d", "d_v": "--dv", "scale": "--scale", "data": "--data",
                         "seeds": "--seeds", "causal": "--causal", "spectrum": "--spectrum", "plot_file": "--plot",
                         "quiet": "--quiet"})
        if given:  # the options of a measurement, which --transmla does not make
            raise typer.BadParameter(f"--transmla gives a model's cache saving, not a measurement: leave out "
                                     f"{', '.join(given)}", param_hint="'--transmla'")

        emit(transmla_output(load_named(transmla, "approx --transmla"), length), fmt, units)
        return
    from kvcalc.paths import user_path

    if data not in DATA and is_npz(user_path(data)):  # its arrays give n, d and d_v (another
        given = written({"n": "--n", "d": "--d", "d_v": "--dv"})  # --data is named by the loader: no such file, ...
        if given:
            raise typer.BadParameter(f"{data}: an .npz's arrays q [n, d], k [n, d], v [n, d_v] give the sizes: leave "
                                     f"out {', '.join(given)}", param_hint="'--data'")
    try:  # ASCII decimals (float also reads '1_0' and other scripts' digits)
        scales = [float(x) if x.isascii() and "_" not in x else float("nan") for x in scale.split(",")]
        if any(x != x for x in scales):
            raise ValueError(scale)
    except ValueError:
        raise typer.BadParameter(f"{scale!r}: numbers, comma-separated (e.g. 0.25,1,4)", param_hint="'--scale'") from None
    if any(not 0 < x < 1e6 for x in scales):
        raise typer.BadParameter(f"{scale!r}: each scale must be a positive number below 1e6", param_hint="'--scale'")
    if len(set(scales)) < len(scales):  # as duplicate methods are refused: the rows would repeat
        raise typer.BadParameter(f"{scale!r}: a scale is given twice", param_hint="'--scale'")
    if plot_file is not None:  # before the measurement, which may take seconds
        from kvcalc.present.plot import figure_format, require_matplotlib

        figure_format(plot_file)
        require_matplotlib()
    from kvcalc.progress import progress_hooks

    with progress_hooks(quiet) as progress:
        rows = evaluate(parse_methods(method), length, d, d_v or d, scales, data, seeds, causal, progress, spectrum)
        spec_rows = spectrum_rows(length, d, scales, data, 0, causal, progress) if spectrum else None
    if plot_file is not None:
        from kvcalc.present.plot import pareto_figure, save_figure

        save_figure(pareto_figure(rows), plot_file)
    emit(approx_output(rows, length, d, data, causal, spec_rows), fmt, units)


@app.command("schema")
@guarded
def schema_command(
    command: Annotated[str, typer.Argument(metavar="COMMAND", help=f"One of: {', '.join(SCHEMA_COMMANDS)}.")],
) -> None:
    """Print the JSON Schema of a command's --format json output (generated from the typed results; table
    subcommands are named table-dims and table-models)."""
    import json

    from kvcalc.schema import schema

    typer.echo(json.dumps(schema(command), indent=2))


MAX_SWEEP_ROWS = 100_000  # rows of a sweep in csv and json, written as they are computed (models × contexts)
MAX_TABLE_ROWS = 2_000  # rows of a sweep in table, markdown and latex, which lay the whole table out first


def check_rows(n_models: int, n_ctxs: int, fmt: str, n_settings: int = 1, command: str = "a sweep",
                     hint: str = "'--points'") -> None:
    """A sweep's (or `command`'s) rows within its format's bound."""
    from kvcalc.present.emit import HUMAN, output_format

    rows, human = n_models * n_ctxs * n_settings, output_format(fmt) in HUMAN
    limit = MAX_TABLE_ROWS if human else MAX_SWEEP_ROWS
    if rows > limit:
        streamed = ", written as they are computed" if command == "a sweep" else ""
        also = f" in {output_format(fmt)} (csv and json: {MAX_SWEEP_ROWS:,}{streamed})" if human else ""
        settings = f" × {n_settings:,} settings" if n_settings > 1 else ""
        raise typer.BadParameter(f"{n_models} model(s) × {n_ctxs:,} contexts{settings} = {rows:,} rows: {command} makes "
                                 f"at most {limit:,}{also}", param_hint=hint)


MAX_FIT_CONTEXTS = 2_000  # fit solves a batch for each context (a bisection each): 20,000 took 90 s

table_app = typer.Typer(cls=OnceEachGroup, help="The papers' reference tables: dimensions by attention kind, and models side by side.",
                        no_args_is_help=True)
app.add_typer(table_app, name="table")


@table_app.command("dims")
@guarded
@output_options
def table_dims(
    models: Annotated[list[str] | None, typer.Argument(metavar="[MODEL]...", help="Models whose numbers to add (bundled names, YAML or config.json paths).")] = None,
    kinds: Annotated[str | None, typer.Option("--kinds", help="Attention kinds, comma-separated: mha, gqa, mqa, mla (default: all four; with models, those they have).")] = None,
    fmt: FormatOpt = "table",
) -> None:
    """Weight shapes (with MLA's absorbed products), cache per token and decode FLOPs of each attention kind (its cells
    are shapes and element counts: no byte units)."""
    from kvcalc.present.emit import emit, warn
    from kvcalc.present.outputs import dims_output
    from kvcalc.tables import KINDS, kinds_missing

    asked = kinds is not None
    kinds = ",".join(KINDS) if kinds is None else kinds
    listed = [k.strip().lower() for k in kinds.split(",")]
    chosen = tuple(dict.fromkeys(listed))
    unknown = [k for k in chosen if k not in KINDS]
    if "" in chosen:
        raise typer.BadParameter(f"{kinds!r}: kinds separated by commas, none empty", param_hint="'--kinds'")
    if len(chosen) < len(listed):  # as every list option refuses a repeat
        twice = first_repeat(listed)
        raise typer.BadParameter(f"{kinds[:60]!r}: {twice} given twice", param_hint="'--kinds'")
    if unknown or not chosen:
        raise typer.BadParameter(f"{', '.join(unknown) or kinds!r}: choose from {', '.join(KINDS)}", param_hint="'--kinds'")
    loaded = [load(m) for m in models or []]
    specs = [lm.spec for lm in loaded]
    missing = kinds_missing(specs, chosen)
    if missing:  # a kind no model given has would be an empty section: said, not silently dropped
        names = ", ".join(s.name for s in specs)
        found = sorted({g.attention.kind for s in specs for g in s.groups if g.attention.kind in KINDS})
        what = f"{names} {'has' if len(specs) == 1 else 'have'} no {', '.join(k.upper() for k in missing)} layers"
        there = f"kinds there: {', '.join(found) or 'none of ' + ', '.join(KINDS)}"
        if len(missing) == len(chosen):
            raise KvcalcError(f"--kinds {kinds}: {what} ({there})" if asked else
                              f"table dims lists MHA, GQA, MQA and MLA layers: {what} ({there})")
        if asked:  # by default the kinds the models have are the table; a kind asked for and absent is said
            warn(f"note: --kinds: {what}; left out")
    emit(dims_output(loaded, chosen), fmt, "binary")  # shapes and counts: no byte units to choose


@table_app.command("models")
@guarded
@output_options
def table_models(
    models: Annotated[list[str] | None, typer.Argument(metavar="[MODEL]...", help="Models (default: llama3-70b gemma3-27b deepseek-v2).")] = None,
    ctx: OneCtxOpt = "128k",
    kv_dtype: DtypeOpt = "bf16",
    fmt: FormatOpt = "table",
    units: UnitsOpt = "binary",
) -> None:
    """Hidden size, heads, KV heads or latent, head dim, layers, parameters and cache of models side by side."""
    from kvcalc.present.emit import emit
    from kvcalc.present.outputs import models_output
    from kvcalc.settings import Settings
    from kvcalc.tables import DEFAULT_MODELS

    s = Settings(ctx=one_ctx(ctx, "table models takes one context"), kv_dtype=kv_dtype)
    emit(models_output(load_named(models or DEFAULT_MODELS, "table models"), s), fmt, units)


@app.command("import")
@guarded
def import_config(
    config: Annotated[Path, typer.Argument(metavar="CONFIG", parser=path_value, help="A Hugging Face config.json.")],
    output: Annotated[Path | None, typer.Option("--output", "-o", metavar="FILE", parser=path_value, help="Write the YAML spec here instead of stdout.")] = None,
    name: Annotated[str | None, typer.Option("--name", help="Name of the spec (default: the config's folder or file name).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite --output if it exists (never the config itself).")] = False,
) -> None:
    """Convert a Hugging Face config.json into an equivalent kvcalc YAML spec."""
    from kvcalc.present.outputs import import_spec

    if force and (output is None or str(output) == "-"):  # as LaTeX options off LaTeX output: refused, not ignored
        raise typer.BadParameter("overwrites --output's file; the spec goes to stdout without one", param_hint="'--force'")
    import_spec(config, output, name, force)


def app_for(argv: list[str]) -> typer.Typer:
    """The app to run for these arguments: for `kvcalc COMMAND ...`, a copy holding only COMMAND (typer builds the
    click parameters of every registered command before parsing, about 12 ms for all of them against 2 for one, at
    every start); otherwise (no command yet, an option first, a name that is no command) the whole app. The copy
    keeps the root callback and settings, so usage lines, help and errors read the same."""
    import copy

    from typer.main import get_command_name

    name = argv[0] if argv else ""
    commands = [c for c in app.registered_commands
                if (c.name or get_command_name(getattr(c.callback, "__name__", ""))) == name]
    groups = [g for g in app.registered_groups if g.name == name]
    if not commands and not groups:
        return app
    only = copy.copy(app)  # a shallow copy: the same info, callback and settings; its own lists below
    only.registered_commands, only.registered_groups = commands, groups
    return only


def main() -> None:
    """Console-script entry point."""
    import os
    import sys

    # Pydantic scans every installed distribution's entry points for its plugins (importlib.metadata: about 10 ms)
    # when it builds its first validator; the spec models are kvcalc's own, so the command line skips the scan
    # unless the user has set the variable.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    if sys.stdout is None:  # started with stdout closed (kvcalc list >&-)
        if sys.stderr is not None:
            sys.stderr.write("error: standard output is closed: nothing to write to\n")
        raise SystemExit(1)
    from kvcalc.errors import interrupted
    from kvcalc.options import LEAVE_AT_ONCE

    LEAVE_AT_ONCE.append(True)  # a process of its own: a Ctrl-C after NumPy ran ends it at once (options.guarded)
    try:
        app_for(sys.argv[1:])()
    except (KeyboardInterrupt, Exception) as exc:  # Ctrl-C outside a command's own guard (typer parses, imports)
        if not interrupted(exc):
            raise
        sys.stderr.write("interrupted\n")
        raise SystemExit(130) from None
    except SystemExit as exc:  # typer exits 130 without a word for a Ctrl-C while it parses: say it
        from kvcalc.options import INTERRUPTED

        if exc.code == 130 and not INTERRUPTED:
            sys.stderr.write("interrupted\n")
        raise
