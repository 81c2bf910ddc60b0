"""The command line's shared parts: option types declared once, the cost options every cost command takes, error
handling, and argument parsing. Choice lists come from the library (kvcalc.settings, kvcalc.present.render)."""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import os
import sys
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

from kvcalc.dtypes import DTYPES
from kvcalc.errors import KvcalcError, interrupted
from kvcalc.lists import first_repeat
from kvcalc.paths import user_path
from kvcalc.present.render import FORMATS
from kvcalc.settings import ENGINES, LIMITS, MLA_CACHE_LAYOUTS, MLA_SCHEDULES
from kvcalc.units import UNIT_SYSTEMS

if TYPE_CHECKING:
    from fractions import Fraction

    from kvcalc.registry import LoadedModel
    from kvcalc.settings import Settings


def choice(values: tuple[str, ...]) -> dict[str, Any]:
    """Option settings that accept one of `values` (any case), listed in --help: the library's list is the source."""

    def check(value: str | None) -> str | None:
        if value is None or value.lower() in values:
            return None if value is None else value.lower()
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(values)}")

    return {"metavar": "[" + "|".join(values) + "]", "callback": check}


class OnceEachGroup(TyperGroup):
    """The group kvcalc's commands run under: an option given twice is refused before its command runs, since click
    would let the later value silently win (`--batch 2 --batch 3` computed batch 3)."""

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        name, cmd, rest = super().resolve_command(ctx, args)
        if cmd is not None and not isinstance(cmd, TyperGroup):  # a nested group checks its own commands
            unknown = refuse_repeats(cmd, rest)
            if unknown is not None:
                refuse_elsewhere(ctx, name, unknown)
        return name, cmd, rest


def usage_error(message: str) -> Exception:
    """click's UsageError, as typer holds it (BadParameter's base): exit status 2, under the command's usage line."""
    return next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")(message)


def refuse_elsewhere(ctx: Any, name: str | None, option: str) -> None:
    """A usage error for an option this command lacks that other commands take (`show --hardware`), naming them,
    where click would suggest an unrelated option of this one (--bare); other unknown options are click's to refuse."""
    from typer.main import get_command

    from kvcalc.cli import app  # the whole app, built on this error path only

    def takes(command: Any) -> bool:
        return any(option in p.opts or option in p.secondary_opts for p in command.params)

    takers = []
    for cmd_name, command in getattr(get_command(app), "commands", {}).items():
        subcommands = getattr(command, "commands", None)
        takers += [f"{cmd_name} {n}" for n, c in subcommands.items() if takes(c)] if subcommands else \
            ([cmd_name] if takes(command) else [])
    if takers:
        # 'show', 'table dims': the path below the root, whatever the root is called ('kvcalc', 'python -m kvcalc')
        command = " ".join([*ctx.command_path[len(ctx.find_root().command_path):].split(), str(name)])
        raise usage_error(f"{command} takes no {option} ({', '.join(takers)} {'takes' if len(takers) == 1 else 'take'} "
                          f"it; see 'kvcalc {command} --help')")


def refuse_repeats(cmd: Any, args: list[str]) -> str | None:
    """A BadParameter naming the first option `args` give more than once (one that takes several values, such as a
    repeatable --transmla, may repeat, and so may a flag in any of its spellings: -q --quiet; not a flag and its
    opposite); long options with or without '=', short ones clustered (-qf json) or with their value attached (-c4k);
    the value an option takes is never read as an option (--caption --batch, --transmla --); nothing after '--'.
    Returns the first long option `cmd` does not have, if any (click refuses it)."""
    takes: dict[str, tuple[str, bool, bool, bool]] = {}  # option -> name, takes a value, may repeat, a flag's sense
    longest: dict[str, str] = {}
    for p in cmd.params:
        if getattr(p, "param_type_name", "") != "option":
            continue
        repeats = bool(p.multiple or getattr(p, "count", False))
        for opt in p.opts:
            takes[opt] = (p.name, not p.is_flag, repeats, True)
        for opt in p.secondary_opts:
            takes[opt] = (p.name, not p.is_flag, repeats, False)
        longest[p.name] = max(p.opts, key=len)
    seen: dict[str, list[str]] = {}
    unknown: str | None = None
    i = 0
    while i < len(args):
        token, i = args[i], i + 1
        if token == "--":
            break
        if token.startswith("--"):
            opt, eq, _ = token.partition("=")
            if opt in takes:
                seen.setdefault(takes[opt][0], []).append(opt)
                i += 1 if takes[opt][1] and not eq else 0  # its value is the next argument
            elif unknown is None and opt != "--help":
                unknown = opt
        elif token.startswith("-") and len(token) > 1:
            for j in range(1, len(token)):  # -qf json: flags, then at most one option taking a value
                opt = "-" + token[j]
                if opt not in takes:
                    break
                seen.setdefault(takes[opt][0], []).append(opt)
                if takes[opt][1]:
                    i += 1 if j == len(token) - 1 else 0
                    break
    for name, opts in seen.items():
        _, value, repeats, _ = takes[opts[0]]
        senses = {takes[o][3] for o in opts}
        if len(opts) < 2 or repeats or (not value and len(senses) == 1):
            continue
        times = "twice" if len(opts) == 2 else f"{len(opts)} times"
        spelled = f" (as {', '.join(opts[:-1])} and {opts[-1]})" if len(set(opts)) > 1 else ""
        what = "a later value would silently replace the earlier" if value else "the last would silently win"
        raise typer.BadParameter(f"given {times}{spelled}: give it once ({what})", param_hint=f"'{longest[name]}'")
    return unknown


def path_value(value: str | Path) -> Path:
    """The parser of a file option: its path, an empty one refused (Path('') is '.', the folder here)."""
    if isinstance(value, Path):  # the default
        return value
    if not value.strip():
        raise typer.BadParameter("an empty file name: give a file")
    refuse_folder_form(value)
    return Path(value)


def refuse_folder_form(value: str) -> None:
    """A file name ending in '/' names a folder: refused, since Path('x.csv/') is quietly the file x.csv."""
    if value.endswith(("/", os.sep)):
        raise typer.BadParameter(f"{value!r} ends in '/', which names a folder; give a file name")


def whole(lo: int, hi: int | None = None) -> Callable[[str | int], int]:
    """The parser of a whole-number option: the digits 0-9 alone, from lo to hi. typer's own int reads '1_0' as 10
    and ' 4' as 4; an option with a parser takes its min and max from here (typer shows them, but no longer checks)."""

    def parse(value: str | int) -> int:
        if isinstance(value, int):  # the default
            return value
        if not (value.isascii() and value.isdigit()):
            raise typer.BadParameter(f"{value[:40]!r}: a whole number, written in the digits 0-9 alone")
        if len(value) > 4000:  # past what int() reads (sys.int_info.str_digits_check_threshold)
            raise typer.BadParameter(f"a number of {len(value):,} digits: too large")
        if hi is not None and (len(value.lstrip("0")) > len(str(hi)) or int(value) > hi):
            raise typer.BadParameter(above(value, hi))
        if int(value) < lo:
            raise typer.BadParameter(f"{value}: at least {lo:,}")
        return int(value)

    return parse


def reserve_value(value: str) -> Fraction:
    """The parser of --reserve: a decimal or a ratio in the ASCII digits (Fraction alone also reads '0_1' as 1 and
    other scripts' digits), at least 0 and below 1."""
    import re
    from fractions import Fraction

    if len(value) > 100:  # no fraction below 1 needs more; int() refuses 4,300 digits
        raise typer.BadParameter(f"{value[:24]!r}… ({len(value):,} characters): too long for a fraction (use e.g. 0.1)")
    try:
        if not re.fullmatch(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:/[0-9]+)?", value):
            raise ValueError(value)
        frac = Fraction(value)
    except (ValueError, ZeroDivisionError):
        raise typer.BadParameter(f"{value[:40]!r}: not a fraction (use e.g. 0.1)") from None
    if not 0 <= frac < 1:
        raise typer.BadParameter(f"{value[:40]}: must be at least 0 and below 1")
    return frac


def above(value: str, hi: int) -> str:
    """The message for a whole number above its bound; one of many digits named by its length."""
    if len(value.lstrip("0")) > 20:
        return f"{value[:24]!r}… ({len(value):,} digits): too large (at most {hi:,})"
    return f"{value}: at most {hi:,}"


def whole_option(*decls: str, lo: int, hi: int | None = None, metavar: str = "N", **kwargs: Any) -> Any:
    """A typer.Option of a whole number from lo to hi (see whole)."""
    return typer.Option(*decls, parser=whole(lo, hi), min=lo, max=hi, metavar=metavar, **kwargs)


CTX_HELP = "Context length(s) in tokens: 4096, 4k, 128k, 1M, or a comma list 4k,32k,128k. k = 1024 (128k = 131072)."
ModelsArg = Annotated[list[str], typer.Argument(metavar="MODEL", help="Bundled names, YAML spec paths, or config.json paths.")]
ModelArg = Annotated[str, typer.Argument(metavar="MODEL", help="A bundled name, a YAML spec path, or a config.json path.")]
CtxOpt = Annotated[str, typer.Option("--ctx", "-c", help=CTX_HELP)]
OneCtxOpt = Annotated[str, typer.Option("--ctx", "-c", help="Context length in tokens: 4096, 4k, 128k, 1M. k = 1024 (128k = 131072).")]
BatchOpt = Annotated[int, whole_option("--batch", "-b", lo=1, hi=LIMITS["batch"], help="Sequences held at once.")]
DtypeOpt = Annotated[str, typer.Option("--kv-dtype", **choice(DTYPES), help="Storage type of the cache (int4: half a byte per element).")]
MtpOpt = Annotated[bool, typer.Option("--mtp", help="Count the multi-token-prediction layers (their cache, weights and FLOPs), as speculative decoding runs them; plain decoding does not. A decode step is then vLLM's speculative step: the last token and one draft an MTP layer verified, the MTP layers over the same tokens.")]
EncCtxOpt = Annotated[int | None, typer.Option("--enc-ctx", parser=lambda v: _parse_gen(v), metavar="TOKENS", help="Encoder positions the cross-attention of encoder–decoder models caches and attends (its cache, FLOPs and decode reads; default: the model's source length, e.g. Whisper's 1500).")]
StateDtypeOpt = Annotated[str | None, typer.Option("--state-dtype", **choice(DTYPES), help="Storage type of the constant states of linear-attention and SSM layers, every component (default: the KV dtype; under --engine vllm bf16 when the KV dtype is below 16 bits; under --engine sglang bf16, with Gated DeltaNet, Mamba-2 and KDA recurrent states in fp32; a model may fix its recurrent state's dtype).")]
WeightsDtypeOpt = Annotated[str, typer.Option("--weights-dtype", **choice(DTYPES), help="Storage type of the weights (int4: half a byte).")]
MlaOpt = Annotated[str, typer.Option("--mla-cache", **choice(MLA_CACHE_LAYOUTS), help="MLA cache layout: latent (d_c + d_R, as DeepSeek/vLLM/SGLang) or expanded (per-head K and V).")]
ScheduleOpt = Annotated[str | None, typer.Option("--mla-schedule", **choice(MLA_SCHEDULES), help="MLA decode: absorbed (W_UK/W_UV folded; default with a latent cache) or naive (K/V rebuilt; default with an expanded cache).")]
FormatOpt = Annotated[str, typer.Option("--format", "-f", **choice(FORMATS), help="Output format.")]
UnitsOpt = Annotated[str, typer.Option("--units", **choice(UNIT_SYSTEMS), help="Byte units in table/markdown/latex: binary (KiB, GiB), si (kB, GB), or exact bytes.")]
ExplainOpt = Annotated[bool, typer.Option("--explain", help="Print the derivation of every cache figure: formula, symbols, values, source fields.")]
NoWindowsOpt = Annotated[bool, typer.Option("--no-windows", help="Ignore sliding windows and attention chunks (those layers global): the cache, FLOPs and bytes read without them; a sparse indexer's top-k still applies.")]
NoWindowsCacheOpt = Annotated[bool, typer.Option("--no-windows", help="Ignore sliding windows and attention chunks (those layers global): the cache without them; a sparse indexer's top-k still applies.")]
ChartOpt = Annotated[str | None, typer.Option("--chart", metavar="KEY", callback=lambda key: key.lower() if key else key, help="Draw a bar chart of a numeric column (e.g. kv_cache_bytes) under the table; no plotting library needed.")]
ColumnsOpt = Annotated[str, typer.Option("--columns", help="Columns: presets kv (default), cost, generate, mla, time (needs --hardware), all, and/or column keys, comma-separated; model and ctx are always shown. `kvcalc schema compare` lists every figure key with its meaning; the kv preset's label columns are attention_label, heads_label, kv_label and head_dim_label.")]


def _parse_gen(value: str | int) -> int:
    from kvcalc.units import parse_tokens

    if isinstance(value, int):  # the default
        return value
    try:
        return parse_tokens(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


@dataclass(frozen=True)
class CostOptions:
    """The options of every cost command (compare, sweep, cost), declared once (`cost_options`)."""

    batch: int
    gen: int
    kv_dtype: str
    weights_dtype: str
    mla_cache: str
    mla_schedule: str | None
    dense_attn: bool
    hardware_name: str | None
    state_dtype: str | None = None
    enc_ctx: int | None = None
    mtp: bool = False
    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1
    dp_attention: bool = False
    kv_quant: str = "none"
    engine: str | None = None
    block_size: int | None = None
    grid: tuple[tuple[str, tuple[Any, ...]], ...] = ()  # sweep: the settings given several values, and those values

    def each_settings(self, ctx: int) -> list[Settings]:
        """The Settings at `ctx` for every combination of the grid's values, the last setting varying fastest (one
        Settings without a grid); each checked on creation."""
        import itertools
        from dataclasses import replace

        base = self.settings(ctx)
        names = [name for name, _ in self.grid]
        return [replace(base, **dict(zip(names, combo))) for combo in itertools.product(*(v for _, v in self.grid))]

    def settings(self, ctx: int) -> Settings:
        """The Settings at `ctx`, with the hardware preset or file loaded."""
        from kvcalc.settings import Settings

        hw = None
        if self.hardware_name is not None and not self.hardware_name.strip():
            raise typer.BadParameter("an empty name: give a preset ('kvcalc hardware' lists them) or a YAML file",
                                     param_hint="'--hardware'")
        if self.hardware_name:
            from kvcalc.hardware import load_hardware

            hw = load_hardware(self.hardware_name)
        return Settings(ctx=ctx, batch=self.batch, gen=self.gen, kv_dtype=self.kv_dtype, weights_dtype=self.weights_dtype,
                        mla_cache=self.mla_cache, mla_schedule=self.mla_schedule, dense_attn=self.dense_attn, hardware=hw,
                        state_dtype=self.state_dtype, enc_ctx=self.enc_ctx, mtp=self.mtp, tp=self.tp, pp=self.pp,
                        dp=self.dp, ep=self.ep, dp_attention=self.dp_attention, kv_quant=self.kv_quant,
                        engine=self.engine, block_size=self.block_size)


_COST_PARAMS = [
    ("batch", BatchOpt, 1),
    ("gen", Annotated[int, typer.Option("--gen", "-g", parser=_parse_gen, metavar="TOKENS", help="Tokens generated after the prompt of --ctx (generation FLOPs): 1024, 1k, ...")], 1024),
    ("kv_dtype", DtypeOpt, "bf16"),
    ("kv_quant", Annotated[str, typer.Option("--kv-quant", metavar="[none|per-token|per-head|g<G>|fp8-ds-mla]", help="Quantisation scheme of the cache, whose scales (and zero points) are counted: per-token or per-head fp32 scales, KIVI-style groups of G with fp16 scale and zero (g64), or vLLM's fp8_ds_mla entry (MLA models, --kv-dtype fp8). Needs --kv-dtype fp8, int8 or int4.")], "none"),
    ("engine", Annotated[str | None, typer.Option("--engine", **choice(ENGINES), help="Count the KV cache in a serving engine's whole pages (engine_kv_bytes; per-GPU and fit figures use it): vllm (64 tokens a page, as vLLM 0.34.0; a hybrid model's page follows its state, e.g. Qwen3-Next's 576), sglang (1, as its backend on the GPU needs: 64 for DeepSeek Sparse Attention on NVIDIA GPUs, and on compute capability 10.x 64 under TensorRT-LLM's kernels, 128 under FA4), ideal (exact).")], None),
    ("block_size", Annotated[int | None, whole_option("--block-size", lo=1, hi=1 << 20, help="Tokens a page of --engine (default: the engine's).")], None),
    ("state_dtype", StateDtypeOpt, None),
    ("enc_ctx", EncCtxOpt, None),
    ("mtp", MtpOpt, False),
    ("tp", Annotated[int, whole_option("--tp", lo=1, hi=LIMITS["tp"], help="Tensor-parallel ranks: heads, FFN widths and vocabulary split (K/V heads replicated when fewer than ranks; MLA's latent replicated).")], 1),
    ("pp", Annotated[int, whole_option("--pp", lo=1, hi=LIMITS["pp"], help="Pipeline stages: layers split as vLLM does (as SGLang does under --engine sglang); the busiest stage is reported.")], 1),
    ("dp", Annotated[int, whole_option("--dp", lo=1, hi=LIMITS["dp"], help="Data-parallel replicas, each serving ceil(batch / dp) sequences.")], 1),
    ("ep", Annotated[int, whole_option("--ep", lo=1, hi=LIMITS["ep"], help="Expert-parallel ranks among the layout's tp · dp GPUs (must divide tp · dp): each holds ceil(E / ep) routed experts, whole, or below tp split over tp / ep ranks.")], 1),
    ("dp_attention", Annotated[bool, typer.Option("--dp-attention", help="SGLang's DP attention (MLA models): a replica's tp ranks split its sequences' latent cache, each with the whole attention weights. SGLang's `--tp 8 --dp 8 --enable-dp-attention` (8 GPUs) is --tp 8 --dp-attention here: --dp counts whole replicas (GPUs = tp · pp · dp).")], False),
    ("weights_dtype", WeightsDtypeOpt, "bf16"),
    ("mla_cache", MlaOpt, "latent"),
    ("mla_schedule", ScheduleOpt, None),
    ("dense_attn", Annotated[bool, typer.Option("--dense-attn", help="Count prefill attention as the full N×N matrix (as FLOP-counting libraries do), not causal; the prefills that generation without a cache re-runs too.")], False),
    ("hardware_name", Annotated[str | None, typer.Option("--hardware", help="A hardware preset ('kvcalc hardware' lists them) or a YAML file: adds roofline times (lower bounds).")], None),
]


# The cost options `sweep` takes as comma lists, one row for each combination of their values (`cost_options(lists=True)`).
_LIST_PARAMS = {
    "batch": (Annotated[str, typer.Option("--batch", "-b", metavar="N[,N...]", help="Sequences held at once; a comma list sweeps each (1,8,32).")], "1"),
    "gen": (Annotated[str, typer.Option("--gen", "-g", metavar="TOKENS[,...]", help="Tokens generated after the prompt of --ctx (generation FLOPs): 1024, 1k, ...; a comma list sweeps each.")], "1024"),
    "kv_dtype": (Annotated[str, typer.Option("--kv-dtype", metavar="[" + "|".join(DTYPES) + "][,...]", help="Storage type of the cache (int4: half a byte per element); a comma list sweeps each (bf16,fp8).")], "bf16"),
    "tp": (Annotated[str, typer.Option("--tp", metavar="N[,N...]", help="Tensor-parallel ranks (see compare --help); a comma list sweeps each (1,2,8): rows tell them apart by their gpus.")], "1"),
}


def _parse_list(name: str, text: str) -> tuple[Any, ...]:
    """A comma list of one cost option's values, in order; a usage error naming the option, also for a value given
    twice (its rows would repeat), as --ctx refuses one."""
    flag = f"'--{name.replace('_', '-')}'"
    parts = [part.strip() for part in text.split(",")]
    if not all(parts):
        raise typer.BadParameter(f"{text!r}: values separated by commas, none empty", param_hint=flag)
    values: list[Any] = []
    for part in parts:
        if name == "kv_dtype":
            if part.lower() not in DTYPES:
                raise typer.BadParameter(f"{part!r} is not one of {', '.join(DTYPES)}", param_hint=flag)
            values.append(part.lower())
        elif name == "gen":
            try:
                values.append(_parse_gen(part))
            except typer.BadParameter as exc:
                raise typer.BadParameter(exc.message, param_hint=flag) from None
        elif part.isascii() and part.isdigit() and part.strip("0"):  # as whole() reads a number, bound in settings.LIMITS
            if len(part.lstrip("0")) > len(str(LIMITS[name])) or int(part) > LIMITS[name]:  # no int() of 4,300 digits
                raise typer.BadParameter(above(part, LIMITS[name]), param_hint=flag)
            values.append(int(part))
        else:
            raise typer.BadParameter(f"{part[:40]!r}: a positive whole number", param_hint=flag)
    if (twice := first_repeat(values)) is not None:
        raise typer.BadParameter(f"{text[:60]!r}: {twice:,} given twice" if isinstance(twice, int) else
                                 f"{text[:60]!r}: {twice} given twice", param_hint=flag)
    return tuple(values)


def _with_help(annotation: Any, text: str) -> Any:
    """`annotation` (Annotated[type, typer.Option(...)]) with another help text: what the option does in one command."""
    base, info = typing.get_args(annotation)
    info = copy.copy(info)
    info.help = text
    return Annotated[base, info]


def cost_options(fn: Callable[..., Any] | None = None, *, lists: bool = False, omit: tuple[str, ...] = (),
                 helps: dict[str, str] | None = None) -> Any:
    """Give a command the cost options, received together as its `opts: CostOptions` parameter; with `lists`, the
    options of _LIST_PARAMS take comma lists, and the values of those given more than one are `opts.grid`. `omit`:
    options the command has no use for, not offered (an option it would ignore is an error, not a silent no-op);
    they keep their defaults. `helps`: an option's help where it does something else in this command (fit's
    --hardware: the GPUs it fills, not roofline times)."""
    if fn is None:
        return lambda f: cost_options(f, lists=lists, omit=omit, helps=helps)
    sig = inspect.signature(fn)
    resolved = typing.get_type_hints(fn, include_extras=True)  # typer reads the signature's annotations as objects
    own = [p.replace(annotation=resolved[p.name]) for p in sig.parameters.values() if p.name != "opts"]
    declared = [(name, *_LIST_PARAMS[name]) if lists and name in _LIST_PARAMS else (name, annotation, default)
                for name, annotation, default in _COST_PARAMS if name not in omit]
    declared = [(name, _with_help(annotation, (helps or {})[name]) if name in (helps or {}) else annotation, default)
                for name, annotation, default in declared]
    defaults: dict[str, Any] = {name: default for name, _, default in _COST_PARAMS if name in omit}
    shared = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)
              for name, annotation, default in declared]
    hints = {p.name: p.annotation for p in own}

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        values = {name: defaults[name] if name in defaults else kwargs.pop(name) for name, _, _ in _COST_PARAMS}
        grid: tuple[tuple[str, tuple[Any, ...]], ...] = ()
        for name in _LIST_PARAMS if lists else ():
            parsed = _parse_list(name, values[name])
            values[name] = parsed[0]
            grid += ((name, parsed),) if len(parsed) > 1 else ()
        return fn(*args, opts=CostOptions(**values, grid=grid), **kwargs)

    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own] + shared
    wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {**hints, **{p.name: p.annotation for p in shared}}
    return wrapper


_OUTPUT_PARAMS = [
    ("caption", Annotated[str | None, typer.Option("--caption", help="LaTeX: the table's caption (default: its title); a command of two tables gives it to the first, the second keeps its title.")], None),
    ("label", Annotated[str | None, typer.Option("--label", help="LaTeX: the table's \\label (default: tab:<first table's name>; later tables get -<name>).")], None),
    ("bare", Annotated[bool, typer.Option("--bare", help="LaTeX: the tabular alone, without the table environment.")], False),
    ("output", Annotated[str | None, typer.Option("--output", "-o", metavar="FILE", help="Write to FILE instead of stdout; with the default format the extension chooses it (.tex .md .csv .json .txt; another needs --format).")], None),
]


# The parameters through which a command reads files: its models, --hardware, --data (approx, transmla's models too)
INPUT_PARAMS = ("model", "models", "hardware_name", "data", "transmla")


def refuse_an_input(output: str, kwargs: dict[str, Any]) -> None:
    """A usage error when --output names a file the command reads (`show spec.yaml -o spec.yaml` would replace the
    spec with its own table)."""
    target = Path(output)  # as the output is written: literally (a shell expands an unquoted ~ before kvcalc sees it)
    try:
        if not target.is_file():
            return
    except OSError:  # a name too long to look up: emit says so, naming the file
        return
    from kvcalc.registry import names_bundled

    for name in INPUT_PARAMS:
        value = kwargs.get(name)
        for arg in value if isinstance(value, list) else [value]:
            if not isinstance(arg, str) or name != "hardware_name" and names_bundled(arg):
                continue  # the bundled model, not a file of that name here (load_model; a --hardware file comes first)
            try:
                path = user_path(arg)
                same = path.is_file() and os.path.samefile(path, target)
            except (OSError, KvcalcError):  # a ~user without an account: loading the input says so
                same = False
            if same:
                raise typer.BadParameter(f"{output} is a file this command reads ({arg}); write the output to "
                                         "another file", param_hint="'--output'")


def output_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Give a command --caption, --label, --bare and --output: they set where and how `emit` writes, and are checked
    against its --format before the command's work."""
    from kvcalc.present.emit import DESTINATION, Destination, checked_format

    sig = inspect.signature(fn)
    resolved = typing.get_type_hints(fn, include_extras=True)
    own = [p.replace(annotation=resolved.get(p.name, p.annotation)) for p in sig.parameters.values()]
    shared = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)
              for name, annotation, default in _OUTPUT_PARAMS]

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        dest = Destination(**{name: kwargs.pop(name) for name, _, _ in _OUTPUT_PARAMS})
        if dest.output is not None and not dest.output.strip():
            raise typer.BadParameter("an empty file name: give a file, or leave --output out for stdout",
                                     param_hint="'--output'")
        if dest.output is not None:
            try:
                refuse_folder_form(dest.output)
            except typer.BadParameter as exc:
                exc.param_hint = "'--output'"
                raise
        if dest.output == "-":  # the Unix convention: stdout, not a file named '-'
            dest = dataclasses.replace(dest, output=None)
        if dest.output is not None:
            refuse_an_input(dest.output, kwargs)
        token = DESTINATION.set(dest)
        try:
            checked_format(kwargs["fmt"])  # a --label that emit would refuse, refused before a run of minutes
            return fn(*args, **kwargs)
        finally:
            DESTINATION.reset(token)

    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own] + shared
    wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {**{p.name: p.annotation for p in own}, **{p.name: p.annotation for p in shared}}
    return wrapper


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's last flush cannot fail again."""
    import os

    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


INTERRUPTED: list[bool] = []  # `interrupted` printed (by guarded); typer turns a Ctrl-C in its own parsing into a silent 130
# Set by the command line's entry point (kvcalc.cli.main), not by an in-process caller: after a Ctrl-C in a command
# that ran NumPy (`run`, `approx`), the process ends at once (_leave_now), since the interpreter's exit can hang for
# good in OpenBLAS's shutdown (gotoblas_quit joins a worker thread left waiting when a product was interrupted or
# abandoned: kvcalc.backend.ops._waited), or crash there
LEAVE_AT_ONCE: list[bool] = []


def guarded(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn a KvcalcError into one message on stderr and exit status 1, and Ctrl-C into exit status 130 (the
    shell's convention for SIGINT): never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from kvcalc.present.emit import warn

        try:
            result = fn(*args, **kwargs)
            sys.stdout.flush()  # a full disk or a closed pipe shows here, not at exit
            return result
        except (KeyboardInterrupt, Exception) as exc:  # Exception: one raised for a Ctrl-C (errors.interrupted)
            if interrupted(exc):
                warn("interrupted")
                INTERRUPTED.append(True)
                if LEAVE_AT_ONCE and "numpy" in sys.modules:  # the backend ran: see LEAVE_AT_ONCE
                    _leave_now(130)
                raise typer.Exit(130) from None
            code = _exit_status(exc, warn)
            if code is None:
                raise
            raise typer.Exit(code) from None

    return wrapper


def _leave_now(code: int) -> None:
    """End the process with `code` without the interpreter's exit (its atexit and library shutdown hooks): what is
    written is flushed first; an output file was already removed as the interrupt passed its block."""
    import os

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os._exit(code)


def _undecoded_bytes(text: str) -> str:
    """`text` with the bytes of a file name that are not UTF-8 shown as \\xfe, not as the surrogates Python decodes
    them to ('\\udcfe'); any other lone surrogate escaped as it is."""
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate no undecodable byte made
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _exit_status(exc: BaseException, warn: Callable[[str], None]) -> int | None:
    """The exit status for an error the user can cause, its message written; None for any other (a bug: a traceback)."""
    if isinstance(exc, KvcalcError):
        warn(f"error: {_undecoded_bytes(str(exc))}")
        return 1
    if isinstance(exc, BrokenPipeError):  # the reader went away (kvcalc list | head): stop quietly, as Unix tools do
        _silence_stdout()
        return 1
    if isinstance(exc, UnicodeEncodeError):
        _silence_stdout()
        warn(f"error: the output's encoding ({exc.encoding}) cannot write {exc.object[exc.start:exc.end]!r}: set "
             "PYTHONIOENCODING=utf-8, or use --format csv or json")
        return 1
    if isinstance(exc, OSError):
        _silence_stdout()
        name = os.fsdecode(exc.filename) if isinstance(exc.filename, (str, bytes)) else ""
        shown = f"{name[:60]}...{name[-20:]}" if len(name) > 80 else name  # a 5,000-character name, cut short
        warn(f"error: {shown + ': ' if shown else ''}cannot write the output: {exc.strerror or exc}")
        return 1
    return None


def parse_ctx(value: str, option: str = "--ctx") -> list[int]:
    """A comma list of context lengths, or a usage error naming `option`."""
    from kvcalc.units import parse_token_list

    try:
        return parse_token_list(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=f"'{option}'") from None


def range_option(message: str) -> str:
    """The option a context range's error is about: --points when it names it, else --ctx."""
    return "'--points'" if message.startswith("--points") else "'--ctx'"


def one_ctx(value: str, why: str, option: str = "--ctx") -> int:
    """One context length; `why` completes the message for a list ("show takes one context; ...")."""
    if not value.strip():  # the list parser's message would suggest a list to a command of one context
        raise typer.BadParameter("an empty value: give a token count (4096, 4k, 128k, 1M; k = 1024)", param_hint=f"'{option}'")
    ctxs = parse_ctx(value, option)
    if len(ctxs) != 1:
        raise typer.BadParameter(why, param_hint=f"'{option}'")
    return ctxs[0]


def explain_format(explain: bool, fmt: str) -> None:
    """--explain prints text beside a table, or data inside json: csv has room for neither."""
    if explain and fmt == "csv":
        raise typer.BadParameter("--explain cannot be combined with --format csv (use json to get the derivation as data)")


def load(model: str, no_windows: bool = False) -> LoadedModel:
    """A model by name or path, with its windows removed when asked."""
    from kvcalc.registry import load_model

    loaded = load_model(model)
    if no_windows:
        from dataclasses import replace

        from kvcalc.costs.cache import without_windows

        spec = without_windows(loaded.spec)
        same = spec.model_dump() == loaded.spec.model_dump()  # no window or chunk to take out: say so, not in silence
        lacks = (f"warning: {spec.name}: --no-windows: it has no sliding windows or attention chunks, so the option "
                 "changes nothing",) if same else ()
        loaded = replace(loaded, spec=spec, windows_removed=not same, warnings=loaded.warnings + lacks)
    return loaded


def load_named(models: Sequence[str], command: str, no_windows: bool = False, note_names: bool = True,
               repeats: str = "its rows would repeat") -> list[LoadedModel]:
    """The models of a command that shows a row or column per model, each loaded (load): one model given twice, in
    any spelling that reads the same file (a bundled name in another case, ./spec.yaml and spec.yaml), is refused (its
    rows would repeat); two given apart that share a name (a config beside the bundled spec it matches) are said on
    stderr (`note_names`), since the name column alone cannot tell their rows apart."""
    from kvcalc.errors import KvcalcError
    from kvcalc.lists import first_repeat
    from kvcalc.present.emit import warn

    loaded = [load(m, no_windows) for m in models]
    origins = [_read_from(m, lm) for m, lm in zip(models, loaded)]
    if (twice := first_repeat(origins)) is not None:
        first, second = [m for m, origin in zip(models, origins) if origin == twice][:2]
        again = "" if first == second else f" (as {second})"
        raise KvcalcError(f"{command}: {first} is given twice{again}: {repeats}")
    if note_names and (name := first_repeat([lm.spec.name for lm in loaded])) is not None:
        first, second = [m for m, lm in zip(models, loaded) if lm.spec.name == name][:2]
        warn(f"note: {first} and {second} are both named {name!r}: their rows come in the order given")
    return loaded


def _read_from(arg: str, lm: LoadedModel) -> str:
    """What MODEL `arg` read, as one string for any spelling of it: a file's real path (./x.yaml, an absolute path and
    a link to it alike), else the origin load_model gives (a bundled name in any case, a Hub id)."""
    import os

    from kvcalc.registry import names_bundled

    path = user_path(arg)
    return os.path.realpath(path) if not names_bundled(arg) and os.path.isfile(path) else lm.origin


def version_callback(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"kvcalc {version('kvcalc')}")
        except PackageNotFoundError:  # running from a source tree that was never installed
            typer.echo("kvcalc (not installed)")
        raise typer.Exit()
