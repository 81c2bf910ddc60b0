"""The columns `compare` and `sweep` can show, generated from the result types; named sets of them; `--columns`."""

from __future__ import annotations

from kvcalc.errors import KvcalcError
from kvcalc.fields import Figure, figures_of
from kvcalc.figures import CostFigures
from kvcalc.present.render import Column
from kvcalc.rows import CacheFigures, GroupRow, ListRow, ModelFacts

# Every field of a compare/sweep row, in row order: the architecture, the cache, the cost figures.
FIGURES: dict[str, Figure] = {f.key: f for cls in (ModelFacts, CacheFigures, CostFigures) for f in figures_of(cls)}
CATALOG: dict[str, Column] = {key: Column.of(f) for key, f in FIGURES.items()}
# Keys of the cost figures: a human format that shows none of them does not compute them.
COST_KEYS: frozenset[str] = frozenset(f.key for f in figures_of(CostFigures))
# Keys of compare/sweep csv and json rows: every raw field, in row order (later versions only add keys).
JSON_KEYS: list[str] = [key for key, f in FIGURES.items() if f.raw]
HARDWARE_KEYS = ("hardware", "prefill_seconds", "decode_seconds_per_token", "tokens_per_second", "decode_bound",
                 "fits_in_memory")
# Columns that tell rows apart: always shown, whatever --columns says.
IDENTITY = ("model", "ctx")

PRESETS: dict[str, list[str]] = {
    "kv": ["model", "attention_label", "n_layers", "heads_label", "kv_label", "head_dim_label", "ctx",
           "kv_bytes_per_token", "kv_cache_bytes", "ratio"],
    "cost": ["model", "ctx", "params_total", "params_active", "weights_bytes", "kv_cache_bytes", "flops_prefill",
             "flops_decode_token", "decode_bytes_read"],
    "generate": ["model", "ctx", "gen", "flops_decode_token", "flops_generate_cached", "flops_generate_uncached"],
    "mla": ["model", "ctx", "mla_cache", "kv_cache_bytes", "flops_decode_token_naive", "flops_decode_token_absorbed"],
    "time": ["model", "ctx", "weights_bytes", "kv_cache_bytes", "prefill_seconds", "decode_seconds_per_token",
             "tokens_per_second", "decode_bound", "fits_in_memory"],
}
PRESETS["all"] = list(dict.fromkeys(key for name in ("kv", "cost", "generate", "mla", "time") for key in PRESETS[name]))


def choose(text: str, have_hardware: bool, identity: tuple[str, ...] = IDENTITY) -> list[Column]:
    """Columns for a `--columns` value: preset names and column keys, comma-separated, in order, without repeats.

    The `identity` columns (model, ctx, and whatever setting a command varies) lead every choice, so rows can always
    be told apart. Hardware columns need --hardware; `all` leaves them out without one.
    """
    keys: list[str] = []
    for item in (part.strip().lower() for part in text.split(",")):  # keys and presets are lower case: KV is kv
        if item in PRESETS:
            keys += PRESETS[item]
        elif item in CATALOG:
            keys.append(item)
        else:
            import difflib

            if not item:
                raise KvcalcError(f"--columns {text!r}: column keys separated by commas, none empty")
            close = difflib.get_close_matches(item, [*PRESETS, *CATALOG], n=1, cutoff=0.8)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise KvcalcError(
                f"unknown column {item!r}{hint} (use a preset ({', '.join(PRESETS)}) or a column key "
                f"({', '.join(sorted(CATALOG))}))"
            )
    keys = list(dict.fromkeys(keys))
    for key in identity:  # a missing identity column goes after the identity columns asked for, else first
        if key not in keys:
            at = max((keys.index(k) + 1 for k in identity if k in keys), default=0)
            keys.insert(at, key)
    if not have_hardware:
        asked = [k for k in keys if k in HARDWARE_KEYS and k != "hardware"]
        if asked and text.strip().lower() != "all":
            raise KvcalcError(f"columns {', '.join(asked)} need --hardware NAME (see 'kvcalc hardware')")
        keys = [k for k in keys if k not in HARDWARE_KEYS]
    return [CATALOG[k] for k in keys]


def _columns(cls: type, keys: tuple[str, ...]) -> list[Column]:
    by_key = {f.key: f for f in figures_of(cls)}
    return [Column.of(by_key[k]) for k in keys]


LIST_COLUMNS = _columns(ListRow, ("model", "attention_label", "n_layers", "d_model", "heads_label", "kv_label",
                                  "head_dim_label", "max_context", "kv_bytes_per_token"))
LIST_KEYS = [f.key for f in figures_of(ListRow) if f.raw]
GROUP_COLUMNS = _columns(GroupRow, ("group", "layers", "n_layers", "kind", "sliding_window", "attention_chunk_size", "formula",
                                    "elements_per_token_per_layer", "bytes_per_token_per_layer", "tokens_held",
                                    "cross_tokens_held", "bytes_per_layer", "bytes"))
GROUP_KEYS = [f.key for f in figures_of(GroupRow) if f.raw]
STATE_COLUMN = _columns(GroupRow, ("state_bytes",))[0]  # shown when a group holds a constant state
PAGE_COLUMNS = _columns(GroupRow, ("pages", "engine_bytes"))  # shown with --engine


def key_table() -> str:
    """The README's table of compare/sweep csv and json keys, generated from the result types."""
    lines = ["| Key | Unit | Meaning |", "|---|---|---|"]
    lines += [f"| `{f.key}` | {f.kind} | {f.meaning} |" for f in FIGURES.values() if f.raw]
    return "\n".join(lines)
