"""Specs and cache reports -> row dicts with stable keys, for the renderers (no I/O, no formatting)."""

from __future__ import annotations

from kvcalc.costs.cache import CacheReport, GroupCache, elements_to_bytes, kv_cache
from kvcalc.spec import GQA, MHA, MLA, MQA, Linear, ModelSpec, ResolvedGroup, layer_ranges
from kvcalc.render import Column


def _uniform(values: list):
    """The one value if all are equal, else None."""
    distinct = list(dict.fromkeys(values))
    return distinct[0] if len(distinct) == 1 else None


def _joined(values: list) -> str:
    return "/".join(str(v) for v in dict.fromkeys(values))


def kv_heads(group: ResolvedGroup) -> int | None:
    """KV heads of an MHA/GQA/MQA group (None for MLA and linear layers)."""
    att = group.attention
    if isinstance(att, MHA):
        return att.n_heads
    if isinstance(att, GQA):
        return att.n_kv_heads
    if isinstance(att, MQA):
        return 1
    return None


def kv_label(group: ResolvedGroup) -> str:
    """What one layer caches per token, in words: '8' KV heads, or '512+64' for MLA's latent + RoPE key."""
    att = group.attention
    if isinstance(att, MLA):
        return f"{att.kv_lora_rank}+{att.qk_rope_head_dim}"
    if isinstance(att, Linear):
        return "state"
    return str(kv_heads(group))


def head_dim_label(group: ResolvedGroup) -> str:
    """d_h, or qk/v head dims for MLA ('192/128')."""
    att = group.attention
    if isinstance(att, MLA):
        return f"{att.qk_nope_head_dim + att.qk_rope_head_dim}/{att.v_head_dim}"
    if isinstance(att, Linear):
        return "–"
    return str(group.head_dim)


def attention_label(spec: ModelSpec, mla_cache: str | None = None) -> str:
    """'GQA', 'MLA (latent)', or 'GQA+SWA 1024×52': a window of 1024 tokens on 52 layers."""
    kinds = "+".join(k.upper() for k in spec.attention_kinds)
    if "MLA" in kinds and mla_cache:
        kinds += f" ({mla_cache})"
    windowed = [g for g in spec.groups if g.sliding_window]
    if not windowed:
        return kinds
    n_win = sum(len(g.layers) for g in windowed)
    return f"{kinds}+SWA {_joined(g.sliding_window for g in windowed)}×{n_win}"


def n_heads_of(spec: ModelSpec) -> str:
    return _joined(g.attention.n_heads for g in spec.groups if hasattr(g.attention, "n_heads"))


def model_facts(spec: ModelSpec) -> dict:
    """The architecture columns shared by `list` and `compare` (raw values plus display labels)."""
    groups = spec.groups
    mla = [g.attention for g in groups if isinstance(g.attention, MLA)]
    windows = [g.sliding_window for g in groups if g.sliding_window]
    return {
        "model": spec.name,
        "family": spec.family,
        "attention": "+".join(spec.attention_kinds),
        "n_layers": spec.n_layers,
        "d_model": spec.d_model,
        "n_heads": _uniform([g.attention.n_heads for g in groups if hasattr(g.attention, "n_heads")]),
        "n_kv_heads": _uniform([kv_heads(g) for g in groups if kv_heads(g) is not None]) if not mla else None,
        "head_dim": _uniform([g.head_dim for g in groups if g.head_dim]) if not mla else None,
        "kv_lora_rank": mla[0].kv_lora_rank if mla else None,
        "qk_rope_head_dim": mla[0].qk_rope_head_dim if mla else None,
        "sliding_window": _uniform(windows) if windows else None,
        "n_window_layers": sum(len(g.layers) for g in groups if g.sliding_window),
        "max_context": spec.max_context,
        "heads_label": n_heads_of(spec),
        "kv_label": _joined(kv_label(g) for g in groups),
        "head_dim_label": _joined(head_dim_label(g) for g in groups),
    }


# The architecture columns that `list` and `compare` share.
ARCH_COLUMNS = [
    Column("heads_label", "Q\nheads", "num"),
    Column("kv_label", "KV heads\nor latent", "num"),
    Column("head_dim_label", "Head\ndim", "num"),
]
LIST_COLUMNS = [
    Column("model", "Model"),
    Column("attention_label", "Attention"),
    Column("n_layers", "Layers", "int"),
    Column("d_model", "d_model", "int"),
    *ARCH_COLUMNS,
    Column("max_context", "Max\nctx", "tokens"),
    Column("kv_bytes_per_token", "KV/token\n(bf16)", "bytes"),
]
LIST_JSON_KEYS = [
    "model", "family", "attention", "n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "kv_lora_rank",
    "qk_rope_head_dim", "sliding_window", "n_window_layers", "max_context", "kv_bytes_per_token",
]


def list_rows(specs: list[ModelSpec]) -> list[dict]:
    """One row per bundled model: attention kind, key dims, and bf16 KV bytes per token."""
    rows = []
    for spec in specs:
        report = kv_cache(spec, 1)
        rows.append({**model_facts(spec), "attention_label": attention_label(spec), "kv_bytes_per_token": report.bytes_per_token})
    return rows


COMPARE_COLUMNS = [
    Column("model", "Model"),
    Column("attention_label", "Attention"),
    Column("n_layers", "Layers", "int"),
    *ARCH_COLUMNS,
    Column("ctx", "Ctx", "tokens"),
    Column("kv_bytes_per_token", "KV per\ntoken", "bytes"),
    Column("kv_cache_bytes", "KV\ncache", "bytes"),
    Column("ratio", "vs\nfirst", "ratio"),
]
# Stable keys of `compare --format json`; later issues add keys, none is renamed.
COMPARE_JSON_KEYS = [
    "model", "attention", "n_layers", "n_heads", "n_kv_heads", "head_dim", "kv_lora_rank", "qk_rope_head_dim",
    "sliding_window", "n_window_layers", "max_context", "ctx", "exceeds_max_context", "batch", "kv_dtype", "mla_cache",
    "kv_bytes_per_token", "kv_cache_bytes", "ratio",
]


# Stable keys of compare/sweep csv and json: the cache keys, then every cost figure (kvcalc.figures).
JSON_KEYS = COMPARE_JSON_KEYS + [
    "gen", "weights_dtype", "params_total", "params_active", "weights_bytes", "flops_prefill", "flops_decode_token",
    "flops_generate_cached", "flops_generate_uncached", "decode_bytes_read", "decode_intensity", "mla_schedule",
    "flops_decode_token_naive", "flops_decode_token_absorbed", "mla_crossover", "hardware", "prefill_seconds",
    "decode_seconds_per_token", "tokens_per_second", "decode_bound", "fits_in_memory",
]


def compare_row(spec: ModelSpec, report: CacheReport) -> dict:
    """One compare row: architecture facts plus the cache of `report` (ratio filled in by compare_rows)."""
    return {
        **model_facts(spec),
        "attention_label": attention_label(spec, report.mla_cache),
        "ctx": report.ctx,
        "exceeds_max_context": report.ctx > spec.max_context,
        "batch": report.batch,
        "kv_dtype": report.kv_dtype,
        "mla_cache": report.mla_cache,
        "kv_bytes_per_token": report.bytes_per_token,
        "kv_cache_bytes": report.bytes,
    }


def with_ratios(rows: list[dict]) -> list[dict]:
    """Add `ratio`: each row's kv_cache_bytes over the first model's at the same context."""
    first: dict[int, int] = {}
    for row in rows:
        first.setdefault(row["ctx"], row["kv_cache_bytes"])
    return [{**row, "ratio": row["kv_cache_bytes"] / first[row["ctx"]] if first[row["ctx"]] else None} for row in rows]


GROUP_COLUMNS = [
    Column("group", "Group"),
    Column("layers", "Layers"),
    Column("n_layers", "Count", "int"),
    Column("kind", "Kind"),
    Column("sliding_window", "Window", "int"),
    Column("formula", "Per token\nand layer"),
    Column("elements_per_token_per_layer", "Elements", "int"),
    Column("bytes_per_token_per_layer", "Bytes per\ntoken·layer", "bytes"),
    Column("tokens_held", "Tokens\nheld", "int"),
    Column("bytes_per_layer", "Cache per\nlayer", "bytes"),
    Column("bytes", "Cache, all\nits layers", "bytes"),
]


def group_rows(report: CacheReport, per_layer: bool = False) -> list[dict]:
    """Per-group (or, with per_layer, per-layer) cache breakdown rows of a report."""
    rows = []
    for gc in report.groups:
        base = _group_row(gc, report.kv_dtype)
        if not per_layer:
            rows.append(base)
            continue
        for layer in gc.group.layers:
            rows.append({**base, "layer": layer, "layers": str(layer), "n_layers": 1, "bytes": gc.bytes_per_layer,
                         "elements": gc.elements_per_layer})
    if per_layer:
        rows.sort(key=lambda r: r["layer"])
    return rows


def _group_row(gc: GroupCache, kv_dtype: str) -> dict:
    g = gc.group
    return {
        "group": g.label,
        "layers": layer_ranges(list(g.layers)).replace(",", ", "),
        "n_layers": gc.n_layers,
        "kind": g.attention.kind,
        "sliding_window": g.sliding_window,
        "formula": gc.formula.expression,
        "elements_per_token_per_layer": gc.formula.elements,
        "bytes_per_token_per_layer": elements_to_bytes(gc.formula.elements, kv_dtype),
        "state_elements_per_layer": gc.state_elements_per_layer or None,
        "tokens_held": gc.tokens_held,
        "elements_per_layer": gc.elements_per_layer,
        "bytes_per_layer": gc.bytes_per_layer,
        "elements": gc.elements,
        "bytes": gc.bytes,
    }
