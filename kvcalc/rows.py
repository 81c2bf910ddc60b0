"""Specs and cache reports -> typed rows with stable keys, for the renderers (no I/O, no formatting).

Every fact of a layer comes from its attention kind (kvcalc.attention); these rows only gather and label them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Any

from kvcalc.attention import kind_label
from kvcalc.costs.cache import CacheReport, GroupCache, cache_at, cache_plan, kv_cache
from kvcalc.costs.parallel import check_layout
from kvcalc.fields import as_row, figure
from kvcalc.figures import BLANK, context_figures, fixed_figures, row_plan
from kvcalc.settings import Settings
from kvcalc.spec import ModelSpec, layer_text


def _uniform(values: list) -> Any:
    """The one value if all are equal, else None."""
    distinct = list(dict.fromkeys(values))
    return distinct[0] if len(distinct) == 1 else None


def _joined(values: Any) -> str:
    return "/".join(str(v) for v in dict.fromkeys(values))


def attention_label(spec: ModelSpec, layout: str | None = None) -> str:
    """'GQA', 'MLA (latent)', 'GQA+SWA 1024×52' (a window of 1024 tokens on 52 layers), 'GQA+chunk 8192×36'."""
    mixers = [m for g in spec.groups for m in (g.attention, g.parallel) if m is not None and m.mixer]
    kinds = "+".join(dict.fromkeys(kind_label(m.kind) for m in mixers))
    if layout and spec.has_layouts():
        kinds += f" ({layout})"
    windowed = [g for g in spec.groups if g.sliding_window]
    chunked = [g for g in spec.groups if g.layer.chunk]
    if windowed:
        kinds += f"+SWA {_joined(g.sliding_window for g in windowed)}×{sum(len(g.layers) for g in windowed)}"
    if chunked:
        kinds += f"+chunk {_joined(g.layer.chunk for g in chunked)}×{sum(len(g.layers) for g in chunked)}"
    return kinds


@dataclass(frozen=True)
class ModelFacts:
    """The architecture of a model, as `list` and `compare` show it (None where layer groups differ)."""

    model: str = figure("Model", "text", "the model's name")
    family: str = figure("Family", "text", "model family")
    attention: str = figure("Attention\nkinds", "text", "attention kinds of its layers, joined by +")
    n_layers: int = figure("Layers", "int", "transformer layers")
    d_model: int = figure("d_model", "int", "hidden size")
    n_heads: int | None = figure("Q\nheads", "int", "query heads, when every layer has the same")
    n_kv_heads: int | None = figure("KV\nheads", "int", "K/V heads (MHA/GQA/MQA), when every layer has the same")
    head_dim: int | None = figure("Head\ndim", "int", "d_h (MHA/GQA/MQA), when every layer has the same")
    kv_lora_rank: int | None = figure("d_c", "int", "MLA latent dim")
    qk_rope_head_dim: int | None = figure("d_R", "int", "MLA decoupled RoPE key dim")
    sliding_window: int | None = figure("Window", "tokens", "sliding window W, when every windowed layer has the same")
    n_window_layers: int = figure("Window\nlayers", "int", "layers with a sliding window")
    max_context: int = figure("Max\nctx", "tokens", "trained maximum context")
    attention_chunk_size: int | None = figure("Chunk", "tokens", "chunk C of chunked local attention, when every chunked layer has the same")
    attention_label: str = figure("Attention", "text", raw=False)
    heads_label: str = figure("Q\nheads", "num", raw=False)
    kv_label: str = figure("KV heads\nor latent", "num", raw=False)
    head_dim_label: str = figure("Head\ndim", "num", raw=False)


def model_facts(spec: ModelSpec, layout: str | None = None) -> ModelFacts:
    """The architecture facts of `spec`, each asked of its layers' attention kinds; `layout` labels MLA's cache."""
    groups = spec.groups
    kv = [g.attention.kv_heads(g.layer) for g in groups]
    dims = [g.attention.d_h(g.layer) for g in groups]
    extra: dict[str, int] = {}
    for g in reversed(groups):  # the first group that reports a kind-specific dim wins
        extra.update(g.attention.facts())
    windows = [g.sliding_window for g in groups if g.sliding_window]
    heads = [g.attention.query_heads for g in groups if g.attention.query_heads is not None]
    return ModelFacts(
        model=spec.name,
        family=spec.family,
        attention="+".join(spec.attention_kinds),
        n_layers=spec.n_layers,
        d_model=spec.d_model,
        n_heads=_uniform(heads),
        n_kv_heads=_uniform([k for k in kv if k is not None]),
        head_dim=_uniform([d for d in dims if d is not None]),
        kv_lora_rank=extra.get("kv_lora_rank"),
        qk_rope_head_dim=extra.get("qk_rope_head_dim"),
        sliding_window=_uniform(windows) if windows else None,
        n_window_layers=sum(len(g.layers) for g in groups if g.sliding_window),
        max_context=spec.max_context,
        attention_chunk_size=_uniform([g.layer.chunk for g in groups if g.layer.chunk]),
        attention_label=attention_label(spec, layout),
        heads_label=_joined(heads) or "–",  # no softmax heads (a pure SSM stack): the dash of every missing figure
        kv_label=_joined(g.attention.kv_label(g.layer, layout) for g in groups if g.attention.mixer),
        head_dim_label=_joined(g.attention.head_dim_label(g.layer) for g in groups if g.attention.mixer),
    )


@dataclass(frozen=True)
class ListRow(ModelFacts):
    """One row of `list`: the architecture and the bf16 cache one token adds."""

    kv_bytes_per_token: int = figure("KV/token\n(bf16)", "bytes", "KV cache bytes one token adds over all layers, bf16")


def list_rows(specs: list[ModelSpec]) -> list[dict]:
    """One row per model: attention kind, key dims, and bf16 KV bytes per token."""
    rows = []
    for spec in specs:
        facts = as_row(model_facts(spec))
        facts["attention_label"] = attention_label(spec)
        rows.append(as_row(ListRow(**facts, kv_bytes_per_token=kv_cache(spec, Settings(ctx=1)).bytes_per_token)))
    return rows


@dataclass(frozen=True)
class CacheFigures:
    """The KV cache of a model at one setting, as `compare` reports it."""

    ctx: int = figure("Ctx", "tokens", "tokens held per sequence (k = 1024)")
    exceeds_max_context: bool = figure("Over\nmax ctx", "bool", "ctx is above the trained maximum (computed anyway)")
    batch: int = figure("Batch", "int", "sequences held at once")
    kv_dtype: str = figure("KV\ndtype", "text", "storage type of the cache")
    mla_cache: str | None = figure("MLA\ncache", "text", "MLA cache layout: latent or expanded (MLA models)")
    kv_bytes_per_token: int = figure("KV per\ntoken", "bytes", "cache bytes one token adds over all layers (one sequence)")
    kv_cache_bytes: int = figure("KV\ncache", "bytes", "cache bytes at ctx for the batch, windows applied")
    ratio: float | None = figure("vs\nfirst", "ratio", "kv_cache_bytes over the first model's at the same ctx")
    enc_ctx: int | None = figure("Encoder\nctx", "tokens", "encoder positions cross-attention caches (encoder–decoder models)")
    state_bytes: int = figure("State", "bytes", "constant states of linear-attention and SSM layers, for the batch")
    state_dtype: str | None = figure("State\ndtype", "text", "storage types of the constant states, joined by + where "
                                     "they differ (models with states)")
    cache_bytes: int = figure("Cache +\nstate", "bytes", "kv_cache_bytes + state_bytes")
    kv_quant: str = figure("KV\nquant", "text", "quantisation scheme whose scales the cache stores (none: payload only)")
    engine: str | None = figure("Engine", "text", "serving engine whose paged cache engine_kv_bytes counts (--engine)")
    block_size: int | None = figure("Page\ntokens", "tokens", "tokens a page of that engine holds")
    engine_kv_bytes: int | None = figure("Engine\nKV cache", "bytes", "the KV cache in the engine's whole pages, all sequences")
    engine_state_bytes: int | None = figure("Engine\nstate", "bytes",
                                            "constant states as the engine stores them (vLLM: padded pages, two a state in a hybrid), all sequences")


CACHE_KEYS = tuple(f.name for f in fields(CacheFigures))


def cache_figures(spec: ModelSpec, report: CacheReport, first_bytes: int | None) -> CacheFigures:
    """The cache columns of a compare row; `first_bytes` is the first model's cache at this ctx (for the ratio)."""
    return CacheFigures(**_cache_values(spec, report, first_bytes))


def _cache_values(spec: ModelSpec, report: CacheReport, first_bytes: int | None) -> dict[str, Any]:
    """cache_figures as a dict (a row of a sweep, without building the CacheFigures on the way)."""
    return {**_cache_fixed(report), **_cache_at(spec, report, first_bytes)}


def _cache_fixed(report: CacheReport) -> dict[str, Any]:
    """The cache values that no context changes (a sweep's row head holds them)."""
    plan, state = report.plan, report.state_bytes
    applied = plan.applied()
    return {
        "batch": report.settings.batch,
        "kv_dtype": plan.kv_dtype,
        "mla_cache": applied["mla_cache"],
        "kv_bytes_per_token": plan.bytes_per_token,
        "enc_ctx": applied["enc_ctx"],
        "state_bytes": state,
        "state_dtype": applied["state_dtype"],
        "kv_quant": plan.kv_quant,
        "engine": plan.engine,
        "block_size": applied["block_size"],
        "engine_state_bytes": report.engine_state_bytes if state else None,
    }


def _cache_at(spec: ModelSpec, report: CacheReport, first_bytes: int | None) -> dict[str, Any]:
    """The cache values of a context: the ctx, the cache at it and its ratio to the first model's."""
    ctx, kv = report.settings.ctx, report.bytes
    return {
        "ctx": ctx,
        "exceeds_max_context": ctx > spec.max_context,
        "kv_cache_bytes": kv,
        "ratio": kv / first_bytes if first_bytes else None,
        "cache_bytes": kv + report.state_bytes,
        "engine_kv_bytes": report.engine_bytes,
    }


def compare_rows(specs: list[ModelSpec], ctxs: list[int], s: Settings,
                 costs: bool = True) -> tuple[list[dict], list[CacheReport]]:
    """One row per model and context: architecture, cache and every cost figure; and the cache reports behind them.

    The ratio compares each row's cache with the first model's at the same context. costs=False leaves the cost
    figures out (for a table that shows none of them)."""
    pairs = list(iter_compare_rows(specs, ctxs, s, costs))
    return [row for row, _ in pairs], [report for _, report in pairs]


def iter_compare_rows(specs: list[ModelSpec], ctxs: list[int], s: Settings,
                      costs: bool = True) -> Iterator[tuple[dict, CacheReport]]:
    """compare_rows one row at a time, as each is computed (a sweep writes them as they come)."""
    first: dict[int, int] = {}
    for spec in specs:
        check_layout(spec, s)  # the settings must apply to the model, whether its costs are shown or not
        fixed = fixed_figures(spec, s) if costs else None  # what no context changes, once
        plan = row_plan(spec, s) if costs else None
        cache = cache_plan(spec, s)
        head: dict | None = None  # the row's keys in order, with what no context changes
        for ctx in ctxs:
            at = s.at(ctx)
            report = cache_at(cache, at)
            first.setdefault(ctx, report.bytes)
            if head is None:
                head = dict(spec.memo(("facts_row", report.mla_cache), _facts_row, spec, report.mla_cache))
                head.update(dict.fromkeys(CACHE_KEYS))
                head.update(_cache_fixed(report))
                head.update({**BLANK, **fixed} if fixed is not None else {})
            row = dict(head)
            row.update(_cache_at(spec, report, first[ctx]))
            if fixed is not None:  # the head holds the fixed figures
                row.update(context_figures(spec, at, report, plan))
            yield row, report


def _facts_row(spec: ModelSpec, layout: str | None) -> dict:
    return as_row(model_facts(spec, layout))


@dataclass(frozen=True)
class GroupRow:
    """The cache of one layer group (or one layer) at a setting, as `show` breaks it down."""

    group: str = figure("Group", "text", "the group's name")
    layers: str = figure("Layers", "text", "its layers (0-based ranges); 'padding' or 'buffers' for an engine's pages "
                         "that hold no layer's tokens (--per-layer --engine)")
    n_layers: int = figure("Count", "int", "number of layers")
    kind: str = figure("Kind", "text", "attention kind")
    sliding_window: int | None = figure("Window", "tokens", "window W, if any")
    attention_chunk_size: int | None = figure("Chunk", "tokens", "chunk C of chunked local attention, if any")
    formula: str = figure("Per token\nand layer", "formula", "cache elements one token adds to one layer")
    elements_per_token_per_layer: int = figure("Elements", "int", "the formula's value")
    bytes_per_token_per_layer: int = figure("Bytes per\ntoken·layer", "bytes",
                                            "those elements in kv_dtype, with the --kv-quant scheme's scales (a "
                                            "KV-shared layer's too, Gemma 3n's, though it holds none: its tokens "
                                            "held are 0 and it adds nothing to kv_bytes_per_token)")
    state_elements_per_layer: int | None = figure("State", "int", "constant state per sequence and layer")
    tokens_held: int = figure("Tokens\nheld", "tokens", "tokens each layer keeps per sequence: min(ctx, W) under a window")
    cross_tokens_held: int | None = figure("Encoder\npositions", "tokens", "encoder positions each layer's cross-attention "
                                           "keeps per sequence, beside tokens_held (encoder–decoder models: enc_ctx)")
    elements_per_layer: int = figure("Elements\nper layer", "int", "cache elements of one layer, all sequences")
    bytes_per_layer: int = figure("Cache per\nlayer", "bytes", "cache bytes of one layer, all sequences")
    elements: int = figure("Elements,\nall layers", "int", "cache elements of all its layers")
    bytes: int = figure("Cache, all\nits layers", "bytes", "cache bytes of all its layers")
    state_bytes: int | None = figure("State, all\nits layers", "bytes", "constant state of all its layers")
    layer: int | None = figure("Layer", "int", "the layer (per-layer rows)")
    pages: int | None = figure("Pages", "int", "KV-cache pages each layer holds per sequence (--engine; 0 in a layer of "
                               "constant state alone, whose state pages the summary's engine_state_bytes counts)")
    engine_bytes: int | None = figure("Engine, all\nits layers", "bytes", "its KV cache in the engine's whole pages, "
                                      "with vLLM's padding slots of the group's spec (--engine; --per-layer gives them a "
                                      "row of their own; constant states: the summary's engine_state_bytes)")


def _group_row(gc: GroupCache) -> GroupRow:
    g = gc.group
    return GroupRow(
        group=g.label,
        layers=layer_text(g.layers, ", "),
        n_layers=gc.n_layers,
        kind=g.attention.kind,
        sliding_window=g.sliding_window,
        attention_chunk_size=g.layer.chunk,
        formula=gc.formula.expression,
        elements_per_token_per_layer=gc.formula.elements,
        bytes_per_token_per_layer=gc.bytes_per_token_per_layer,
        state_elements_per_layer=gc.state_elements_per_layer or None,
        tokens_held=gc.tokens_held,
        cross_tokens_held=gc.cross_tokens if gc.cross_formula is not None else None,
        elements_per_layer=gc.elements_per_layer,
        bytes_per_layer=gc.bytes_per_layer,
        elements=gc.elements,
        bytes=gc.bytes,
        state_bytes=gc.state_bytes or None,
        pages=gc.pages if gc.engine_bytes_per_layer is not None else None,
        engine_bytes=gc.engine_bytes,  # with vLLM's padding slots of the group's spec (kvcalc.costs.paged.PoolLayout)
    )


def group_rows(report: CacheReport, per_layer: bool = False) -> list[dict]:
    """Per-group (or, with per_layer, per-layer) cache breakdown rows of a report."""
    rows = []
    for gc in report.groups:
        base = _group_row(gc)
        if not per_layer:
            rows.append(as_row(base))
            continue
        for layer in gc.group.layers:
            rows.append({**as_row(base), "layer": layer, "layers": str(layer), "n_layers": 1, "bytes": gc.bytes_per_layer,
                         "elements": gc.elements_per_layer, "engine_bytes": gc.engine_bytes_per_layer,
                         "state_bytes": gc.state_bytes_per_layer or None})
    if per_layer:
        rows.sort(key=lambda r: r["layer"])
        # vLLM's padding slots of a group's spec (PoolLayout.pads), and SGLang's buffers of an encoder–decoder
        # model's other layers (sglang_buffers), hold pages as its layers do but no layer's tokens: a row each, so
        # the engine column adds up to engine_kv_bytes
        extra = "buffers" if report.settings.engine == "sglang" else "padding"
        rows += [{**as_row(_group_row(gc)), "layer": None, "layers": extra, "n_layers": gc.pad_layers, "bytes": 0,
                  "elements": 0, "tokens_held": 0, "elements_per_layer": 0, "bytes_per_layer": 0,
                  "cross_tokens_held": 0 if gc.cross_formula is not None else None,
                  "engine_bytes": gc.pad_layers * gc.engine_bytes_per_layer, "state_bytes": None}
                 for gc in report.groups if gc.pad_layers and gc.engine_bytes_per_layer is not None]
    return rows
