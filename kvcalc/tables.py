"""The reference tables of the attention papers: weight and cache dimensions by attention kind (symbolic, and in
numbers for given models), and the side-by-side of models (hidden size, heads, KV heads or latent, cache per token).

Notation of DeepSeek-V2 §2.1 (Table 1): d hidden size, n_h query heads, n_kv K/V heads, d_h per-head dim, d_c the KV
latent, d_c' the query latent, d_R the decoupled RoPE dim. Cache per token and layer: 2·n_h·d_h (MHA), 2·n_kv·d_h
(GQA), 2·d_h (MQA), d_c + d_R (MLA). Attention FLOPs of one decoded token at context t: q·k and the weighted sum of
v over t keys, 4·n_h·d_h·t; MLA absorbed: 2·n_h·(d_c + d_R)·t + 2·n_h·d_c·t. These take d_v = d_h; beside a model
whose value heads are of another size (v_head_dim; MLA: against qk_nope_head_dim), the rows that depend on it show
the forms with d_v.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvcalc.attention import MLA, Heads
from kvcalc.costs.cache import kv_cache
from kvcalc.costs.params import param_counts
from kvcalc.fields import figure
from kvcalc.rows import attention_label, model_facts
from kvcalc.settings import Settings
from kvcalc.spec import Layer, ModelSpec, ResolvedGroup

KINDS = ("mha", "gqa", "mqa", "mla")
DEFAULT_MODELS = ("llama3-70b", "gemma3-27b", "deepseek-v2")
ROPE_NOTE = ("absorbing W_UK into the query needs q_C·k_Cᵀ = c_Q (W_UQ·W_UKᵀ) c_KVᵀ per head (row vectors, as the "
             "shapes); RoPE on the up-projected key "
             "puts a position-dependent rotation between them, so MLA keeps RoPE on a separate key k_R = RoPE(W_KR h) "
             "(decoupled RoPE, DeepSeek-V2 §2.1.3)")

# (item, symbolic shape or formula, note) for each kind; items are weight names as kvcalc.attention names them
_HEADS_ROWS = {
    "mha": [("W_Q", "d × n_h·d_h"), ("W_K", "d × n_h·d_h"), ("W_V", "d × n_h·d_h"), ("W_O", "n_h·d_h × d")],
    "gqa": [("W_Q", "d × n_h·d_h"), ("W_K", "d × n_kv·d_h"), ("W_V", "d × n_kv·d_h"), ("W_O", "n_h·d_h × d")],
    "mqa": [("W_Q", "d × n_h·d_h"), ("W_K", "d × d_h"), ("W_V", "d × d_h"), ("W_O", "n_h·d_h × d")],
}
_MLA_ROWS = [
    ("W_DQ", "d × d_c'", "query down-projection (eq. 12)"), ("W_UQ", "d_c' × n_h·d_h", "query up-projection (eq. 13)"),
    ("W_QR", "d_c' × n_h·d_R", "RoPE query (eq. 14)"), ("W_Q", "d × n_h·(d_h + d_R)", "without query compression"),
    ("W_DKV", "d × d_c", "KV down-projection (eq. 9)"), ("W_KR", "d × d_R", "decoupled RoPE key (eq. 15)"),
    ("W_UK", "d_c × n_h·d_h", "key up-projection (eq. 10)"), ("W_UV", "d_c × n_h·d_h", "value up-projection (eq. 11)"),
    ("W_O", "n_h·d_h × d", "output"),
    ("W_UQ·W_UKᵀ", "d_c' × n_h·d_c", "absorbed into the query: per head, W_UQ's d_c' × d_h block times W_UK's d_c × d_h "
     "block transposed, d_c' × d_c, the n_h heads side by side (W_Q·W_UKᵀ, d × n_h·d_c, without query compression); "
     + ROPE_NOTE),
    ("W_UV·W_O", "n_h·d_c × d", "absorbed into the output: per head, W_UV's d_c × d_h block times W_O's d_h × d block, "
     "d_c × d, the n_h heads stacked"),
    # DeepSeek Sparse Attention (DeepSeek-V3.2): the lightning indexer's weights, shown beside a model that has one
    ("W_IQ", "d_c' × n_I·d_I", "indexer query (DSA; d × n_I·d_I without query compression)"),
    ("W_IK", "d × d_I", "indexer key (DSA), cached"), ("W_IW", "d × n_I", "indexer head weights (DSA)"),
]
_INDEXER_ITEMS = ("W_IQ", "W_IK", "W_IW")
DECODE_ITEM = "decode FLOPs per token"
# The cache and decode rows beside a model with an indexer: its key d_I is cached, and attention reads t_k = min(t, k)
# keys (k = index_topk) after the indexer scores all t with n_I heads (2·n_I·(d_I + 1) a key: q·k and the head weights)
_INDEXED = {"cache per token and layer": "d_c + d_R + d_I",
            "decode FLOPs per token": "2·n_h·(d_c + d_R)·t_k + 2·n_h·d_c·t_k + 2·n_I·(d_I + 1)·t"}
_INDEXED_NOTE = "a model shown has a DSA indexer: t_k = min(t, k); d_I = 0 and t_k = t without one"
# An encoder–decoder model's decoder layers (Whisper): their cross-attention caches the K/V of each of s encoder
# positions once per input, and a decoded token's query attends all s (README, Conventions: Encoder–decoder)
CROSS_CACHE = "cross-attention cache per encoder position and layer"
CROSS_DECODE = "cross-attention decode FLOPs per token"
_CROSS_NOTES = {CROSS_CACHE: "elements; the decoder's cross-attention, with heads of its own, caches each of s encoder "
                             "positions once per input (--enc-ctx; Whisper: s = 1,500)",
                CROSS_DECODE: "one decoder layer's cross-attention: q·k and the weighted sum of v over all s positions"}
_ONLY_WITH_A_MODEL = (*_INDEXER_ITEMS, CROSS_CACHE, CROSS_DECODE)  # rows listed only beside a model that has them
_GATE_NOTE = "sigmoid output gate, one per query channel (Qwen3-Next: q_proj emits it beside the query)"
CACHE = {"mha": "2·n_h·d_h", "gqa": "2·n_kv·d_h", "mqa": "2·d_h", "mla": "d_c + d_R"}
DECODE_FLOPS = {"mha": "4·n_h·d_h·t", "gqa": "4·n_h·d_h·t", "mqa": "4·n_h·d_h·t",
                "mla": "2·n_h·(d_c + d_R)·t + 2·n_h·d_c·t"}
_DECODE_NOTE = "one layer's attention at context t"
# MLA's decode FLOPs are the absorbed schedule's, the latent cache's default (kvcalc.costs.flops; README: MLA decode)
_DECODE_NOTES = {"mla": _DECODE_NOTE + ", absorbed: scores over the latent and RoPE key, values mixed in the latent"}
# The same rows where a model shown has values of another per-head size than its keys (v_head_dim, d_v ≠ d_h:
# MiMo-V2-Flash, K 192 and V 128): the papers' forms above take d_v = d_h
_KV_DIFFER = {
    "mha": {"W_V": "d × n_h·d_v", "W_O": "n_h·d_v × d", "cache per token and layer": "n_h·(d_h + d_v)"},
    "gqa": {"W_V": "d × n_kv·d_v", "W_O": "n_h·d_v × d", "cache per token and layer": "n_kv·(d_h + d_v)"},
    "mqa": {"W_V": "d × d_v", "W_O": "n_h·d_v × d", "cache per token and layer": "d_h + d_v"},
    "mla": {"W_UV": "d_c × n_h·d_v", "W_O": "n_h·d_v × d"},  # d_h = qk_nope_head_dim, d_v = v_head_dim; cache unchanged
}
# and the notes that name d_h where d_v is meant
_KV_DIFFER_NOTES = {"mla": {"W_UV·W_O": "absorbed into the output: per head, W_UV's d_c × d_v block times W_O's d_v × d "
                                        "block, d_c × d, the n_h heads stacked"}}
_KV_DIFFER_DECODE = "2·n_h·(d_h + d_v)·t"
_KV_DIFFER_NOTE = "d_v ≠ d_h in a model shown"


@dataclass(frozen=True)
class DimsRow:
    """One row of `table dims`: an item of an attention kind, its symbolic form, and its value for each model."""

    kind: str = figure("Kind", "text", "attention kind")
    item: str = figure("Item", "formula", "a weight, an absorbed product, the cache or the decode FLOPs")
    symbolic: str = figure("Shape or formula", "formula", "in the papers' notation")
    note: str = figure("Note", "text", "what it is")


def _kind_groups(spec: ModelSpec, kind: str) -> list[tuple[ResolvedGroup, ...]]:
    """The layer groups of `spec` whose attention is of `kind`, gathered by their dimensions: those of the first
    group, then each other set (Gemma 4's 5 global layers, 2 KV heads of 512, beside its 25 local ones). Groups
    that differ only in their window or chunk share a set (Gemma 3's global and local layers)."""
    out: dict[str, list[ResolvedGroup]] = {}
    for g in spec.groups:
        if g.attention.kind == kind:
            dims = {item: value for item, value in _group_cells(g).items() if item != DECODE_ITEM}
            out.setdefault(repr(dims), []).append(g)
    return [tuple(gs) for gs in out.values()]


def _set_label(groups: tuple[ResolvedGroup, ...]) -> str:
    """A column's name for a set of groups of one kind's dimensions: their labels ('local', 'global')."""
    return ", ".join(g.label for g in groups)


def _shape(shape: tuple[int, ...]) -> str:
    return " × ".join(f"{n:,}" for n in shape)


def _heads_per_key(att: Heads, layer: Layer) -> int:
    """Decode FLOPs a key costs one query of `att`: q·k over d_h and the weighted sum of v over d_v, 2·n_h·(d_h +
    d_v) (= 4·n_h·d_h when d_v = d_h; MiMo-V2-Flash: K 192, V 128)."""
    return 2 * att.n_heads * att.d_h(layer) + 2 * att.n_heads * att.d_v(layer)


def _cross_forms(group: ResolvedGroup) -> dict[str, tuple[str, str]]:
    """Item -> (symbolic form, value) of the cross-attention rows of `group`'s layers; empty without one (or for a
    cross-attention of a kind other than MHA/GQA/MQA, which no model has)."""
    cross, layer = group.cross, group.cross_layer
    if not isinstance(cross, Heads):
        return {}
    same = cross.d_v(layer) == cross.d_h(layer)
    cache = CACHE[cross.kind] if same else _KV_DIFFER[cross.kind]["cache per token and layer"]
    decode = "4·n_h·d_h·s" if same else "2·n_h·(d_h + d_v)·s"
    return {CROSS_CACHE: (cache, f"{cross.cache_formula(layer, 'latent').elements:,}"),
            CROSS_DECODE: (decode, f"{_heads_per_key(cross, layer):,}·s")}


def _group_cells(group: ResolvedGroup) -> dict[str, str]:
    """Item -> the value of that item for the layers of `group`."""
    att, layer = group.attention, group.layer
    out = {w.name: _shape(w.shape) for w in att.weights(layer) if w.role == "matrix"}
    out.update({item: value for item, (_, value) in _cross_forms(group).items()})
    formula = att.cache_formula(layer, "latent")
    out["cache per token and layer"] = f"{formula.elements:,}"
    if isinstance(att, MLA):
        q = att.q_lora_rank or layer.d_model
        c = att.kv_lora_rank
        out["W_UQ·W_UKᵀ"] = _shape((q, att.n_heads * c))
        out["W_UV·W_O"] = _shape((att.n_heads * c, layer.d_model))
        per_key = 2 * att.n_heads * (c + att.qk_rope_head_dim) + 2 * att.n_heads * c
        if att.indexed and att.index_n_heads and att.index_head_dim and att.index_topk:
            scan = 2 * att.index_n_heads * (att.index_head_dim + 1)  # MLA.flops' attn/index_scores, a key
            attended = _keys_form(att.key_cap(layer), None)  # min(t, W, k): the window, then the top-k
            out[DECODE_ITEM] = f"{per_key:,}·{attended} + {scan:,}·{_keys_form(layer.window, None)}"
            return out
    elif isinstance(att, Heads):
        per_key = _heads_per_key(att, layer)
    else:
        return out
    out[DECODE_ITEM] = f"{per_key:,}·{_keys_form(layer.window, layer.chunk)}"
    return out


def _keys_form(cap: int | None, chunk: int | None) -> str:
    """The keys a query at context t attends (AttentionKind.scan_at): t, min(t, W) under a window or top-k W, or
    those of its own chunk of C."""
    if chunk:
        return f"((t − 1) mod {chunk:,} + 1)"
    return f"min(t, {cap:,})" if cap else "t"


def _decode_cell(groups: tuple[ResolvedGroup, ...]) -> str | None:
    """The decode FLOPs of a column's layers of one kind: one form, or each group's, labelled, where their windows
    differ (Gemma 3: '16,384·t (global); 16,384·min(t, 1,024) (local)')."""
    forms: dict[str | None, list[str]] = {}
    for g in groups:
        forms.setdefault(_group_cells(g).get(DECODE_ITEM), []).append(g.label)
    if len(forms) == 1:
        return next(iter(forms))
    return "; ".join(f"{form} ({', '.join(labels)})" for form, labels in forms.items())


def _values_differ(group: ResolvedGroup) -> bool:
    """Whether `group` has values of another per-head size than its keys (MLA: v_head_dim against
    qk_nope_head_dim)."""
    att = group.attention
    if isinstance(att, MLA):
        return att.v_head_dim != att.qk_nope_head_dim
    return isinstance(att, Heads) and att.d_v(group.layer) != att.d_h(group.layer)


@dataclass(frozen=True)
class DimsColumn:
    """A model column of `table dims`: its key (the model's name; a later layer group of other dimensions: the name
    and the group's label), its header, and the layer group it reads for each kind."""

    key: str
    header: str
    groups: dict[str, ResolvedGroup]
    merged: dict[str, tuple[ResolvedGroup, ...]]  # by kind: the groups of those dimensions, windows aside


def dims_columns(specs: list[ModelSpec], kinds: tuple[str, ...]) -> list[DimsColumn]:
    """One column per model, from its first layer group of each kind; then one per later group of a kind whose
    dimensions differ, named by its label ('gemma4-26b-a4b (local)'), the first column's header saying its group."""
    out = []
    for spec in specs:
        by_kind = {k: _kind_groups(spec, k) for k in kinds}
        more = [(k, gs) for k, sets in by_kind.items() for gs in sets[1:]]
        firsts = ", ".join(_set_label(sets[0]) for k, sets in by_kind.items() if len(sets) > 1)
        out.append(DimsColumn(spec.name, f"{spec.name} ({firsts})" if firsts else spec.name,
                              {k: sets[0][0] for k, sets in by_kind.items() if sets},
                              {k: sets[0] for k, sets in by_kind.items() if sets}))
        out += [DimsColumn(f"{spec.name} ({_set_label(gs)})", f"{spec.name} ({_set_label(gs)})", {k: gs[0]}, {k: gs})
                for k, gs in more]
    return out


def kinds_missing(specs: list[ModelSpec], kinds: tuple[str, ...]) -> list[str]:
    """The kinds of `kinds` that no model of `specs` has a layer of (a table of kinds alone: none)."""
    return [k for k in kinds if specs and not any(_kind_groups(s, k) for s in specs)]


def dims_rows(specs: list[ModelSpec], kinds: tuple[str, ...] = KINDS) -> tuple[list[dict[str, str | None]], list[DimsColumn]]:
    """Rows of `table dims` (one per weight, product, cache and FLOPs of each kind) and the model columns.

    With models, only the kinds they use are listed (and `kinds` filters them); each model's column gives its
    numbers where its layers are of that kind."""
    used = [k for k in kinds if not specs or any(_kind_groups(s, k) for s in specs)]
    columns = dims_columns(specs, tuple(used))
    cells = {(c.key, k): {**_group_cells(c.groups[k]), DECODE_ITEM: _decode_cell(c.merged[k])} if k in c.groups
             else {} for c in columns for k in used}
    rows = []
    for kind in used:
        items = [(n, shape, "") for n, shape in _HEADS_ROWS[kind]] if kind in _HEADS_ROWS else list(_MLA_ROWS)
        if kind in _HEADS_ROWS and any("W_G" in cells[(c.key, kind)] for c in columns):
            items.insert(1, ("W_G", "d × n_h·d_h", _GATE_NOTE))  # a model's output gate, beside its query
        items += [("cache per token and layer", CACHE[kind], "elements (DeepSeek-V2 Table 1)"),
                  (DECODE_ITEM, DECODE_FLOPS[kind], _DECODE_NOTES.get(kind, _DECODE_NOTE))]
        if kind in _KV_DIFFER and any(kind in c.groups and _values_differ(c.groups[kind]) for c in columns):
            general = dict(_KV_DIFFER[kind])
            if kind != "mla":  # MLA's absorbed decode reads the latent: no d_v in it
                general[DECODE_ITEM] = _KV_DIFFER_DECODE
            notes = _KV_DIFFER_NOTES.get(kind, {})
            items = [(n, general[n], f"{note}; {_KV_DIFFER_NOTE}" if note else _KV_DIFFER_NOTE) if n in general
                     else (n, shape, f"{notes[n]}; {_KV_DIFFER_NOTE}") if n in notes
                     else (n, shape, note) for n, shape, note in items]
        if kind == "mla" and any("W_IK" in cells[(c.key, kind)] for c in columns):
            items = [(n, _INDEXED[n], _INDEXED_NOTE) if n in _INDEXED else (n, shape, note) for n, shape, note in items]
        cross = [_cross_forms(c.groups[kind]) for c in columns if kind in c.groups]
        items += [(item, "; ".join(dict.fromkeys(f[item][0] for f in cross if f)), _CROSS_NOTES[item])
                  for item in (CROSS_CACHE, CROSS_DECODE)]
        for item, symbolic, note in items:
            if (specs or item in _ONLY_WITH_A_MODEL) and not any(item in cells[(c.key, kind)] for c in columns):
                continue  # e.g. W_Q of an MLA without query compression, when no model given has one
            row: dict[str, str | None] = {"kind": kind.upper(), "item": item, "symbolic": symbolic, "note": note}
            row.update({c.key: cells[(c.key, kind)].get(item) for c in columns})
            rows.append(row)
    return rows, columns


@dataclass(frozen=True)
class ModelsRow:
    """One row of `table models`: the comparison layout of the papers' model table."""

    model: str = figure("Model", "text", "the model's name")
    d_model: int = figure("Hidden\nsize", "int", "d")
    heads_label: str = figure("Query\nheads", "num", "n_h")
    kv_label: str = figure("KV heads\nor latent", "num", "n_kv, or d_c + d_R (MLA)")
    head_dim_label: str = figure("Head\ndim", "num", "d_h")
    n_layers: int = figure("Layers", "int", "layers")
    attention_label: str = figure("Attention", "text", "kind, with windows")
    params_total: int = figure("Params", "count", "all weights")
    params_active: int = figure("Active\nparams", "count", "weights one token uses")
    kv_bytes_per_token: int = figure("KV per\ntoken", "bytes", "cache bytes one token adds over all layers")
    ctx: int = figure("Ctx", "tokens", "context of the next column")
    kv_cache_bytes: int = figure("KV cache\nat ctx", "bytes", "one sequence, windows applied")
    mha_ratio: float | None = figure("Per token\nvs MHA", "ratio", "kv_bytes_per_token over MHA's with the same heads (a per-token ratio: windows and context do not enter it; none for a model with constant-state layers, which MHA has no form of)")
    exceeds_max_context: bool = figure("Over\nmax ctx", "bool", "ctx is above the trained maximum (computed anyway)")


def mha_elements(group: ResolvedGroup) -> int | None:
    """Elements a token adds to one layer of `group` under MHA with the same heads: n_h·(d_h + d_v) (2·n_h·d_h;
    MLA: d_h = qk_nope_head_dim, d_v = v_head_dim, DeepSeek-V2 Table 1's MHA row); None for other kinds."""
    att, layer = group.attention, group.layer
    if isinstance(att, MLA):
        return att.n_heads * (att.qk_nope_head_dim + att.v_head_dim)
    if isinstance(att, Heads):
        return att.n_heads * (att.d_h(layer) + att.d_v(layer))
    return None


def models_rows(specs: list[ModelSpec], s: Settings) -> list[dict]:
    """Rows of `table models` at settings `s` (its ctx, batch 1 unless set, kv dtype)."""
    from kvcalc.dtypes import elements_to_bytes
    from kvcalc.fields import as_row

    rows = []
    for spec in specs:
        facts = model_facts(spec)
        report = kv_cache(spec, s)
        params = param_counts(spec)
        mha = [mha_elements(g) for g in spec.groups if g.attention.mixer]
        ratio = None
        if mha and all(m is not None for m in mha):  # every mixer layer has an MHA counterpart
            mixers = [g for g in spec.groups if g.attention.mixer]
            mha_bytes = elements_to_bytes(sum(m * len(g.layers) for m, g in zip(mha, mixers) if m), s.kv_dtype)
            ratio = report.bytes_per_token / mha_bytes
        rows.append(as_row(ModelsRow(
            model=spec.name, d_model=spec.d_model, heads_label=facts.heads_label, kv_label=facts.kv_label,
            head_dim_label=facts.head_dim_label, n_layers=spec.n_layers, attention_label=attention_label(spec),
            params_total=params.total, params_active=params.active, kv_bytes_per_token=report.bytes_per_token,
            ctx=s.ctx, kv_cache_bytes=report.bytes, mha_ratio=ratio, exceeds_max_context=s.ctx > spec.max_context)))
    return rows
