"""KV cache per attention kind, per layer group and in total, with the derivation of every figure.

Conventions (also in the README):
- Counts are elements until the last step; bytes = ceil(elements · bits / 8), so int4 is half a byte per element.
  Quantisation scales and zero points are not modelled (they depend on the kernel's block size).
- Bytes are totals for `batch` sequences unless a name ends in `_per_token` or `_per_layer`.
- A sliding-window layer with window W holds min(ctx, W) tokens: the newest query attends to itself and the
  W-1 keys before it (Gemma / Hugging Face convention; transformers keeps W-1 between steps and appends one).
- `elements_per_token` is the full-attention rate: every layer holding one more token, windows ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvcalc.errors import KvcalcError
from kvcalc.spec import GQA, MHA, MLA, MQA, Linear, ModelSpec, ResolvedGroup

# Storage width of one cached element, in bits.
KV_DTYPE_BITS = {"fp64": 64, "fp32": 32, "bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "int4": 4}
MLA_CACHE_LAYOUTS = ("latent", "expanded")


def dtype_bits(kv_dtype: str) -> int:
    """Bits per element of a KV dtype name, or a KvcalcError listing the supported ones."""
    try:
        return KV_DTYPE_BITS[kv_dtype.lower()]
    except KeyError:
        raise KvcalcError(f"unsupported kv dtype {kv_dtype!r}: choose one of {', '.join(KV_DTYPE_BITS)}") from None


def elements_to_bytes(elements: int, kv_dtype: str) -> int:
    """Bytes needed to store `elements` values of `kv_dtype`, rounded up to a whole byte."""
    return -(-elements * dtype_bits(kv_dtype) // 8)


@dataclass(frozen=True)
class Symbol:
    """One symbol of a formula: its notation, value, and the spec field it came from."""

    name: str
    value: int
    source: str


@dataclass(frozen=True)
class Formula:
    """Cached elements per token and layer for one attention block, with its derivation."""

    expression: str  # e.g. "2·n_kv·d_h"
    symbols: tuple[Symbol, ...]
    elements: int
    components: dict[str, int]  # named parts, e.g. {"k": 1024, "v": 1024}
    reference: str  # where the formula comes from


def _head_symbols(group: ResolvedGroup) -> tuple[str, Symbol]:
    """The d_h symbol of an MHA/GQA/MQA group, naming where its value came from."""
    att = group.attention
    at = f"layer_groups[{group.index}].attention"
    n, hd = att.n_heads, group.head_dim
    src = f"{at}.head_dim" if not group.head_dim_derived else f"d_model / {at}.n_heads = {n * hd}/{n} (no head_dim given)"
    return at, Symbol("d_h", group.head_dim, src)


def per_token_formula(group: ResolvedGroup, mla_cache: str = "latent") -> Formula:
    """Elements one token adds to the cache of one layer of `group` (DeepSeek-V2 Table 1 notation)."""
    att = group.attention
    if isinstance(att, MHA):
        at, d_h = _head_symbols(group)
        n_h = Symbol("n_h", att.n_heads, f"{at}.n_heads")
        k = v = n_h.value * d_h.value
        return Formula("2·n_h·d_h", (n_h, d_h), k + v, {"k": k, "v": v}, "DeepSeek-V2 Table 1 (MHA); 2: keys and values")
    if isinstance(att, GQA):
        at, d_h = _head_symbols(group)
        n_kv = Symbol("n_kv", att.n_kv_heads, f"{at}.n_kv_heads")
        k = v = n_kv.value * d_h.value
        return Formula("2·n_kv·d_h", (n_kv, d_h), k + v, {"k": k, "v": v}, "DeepSeek-V2 Table 1 (GQA, n_g groups); 2: keys and values")
    if isinstance(att, MQA):
        _, d_h = _head_symbols(group)
        k = v = d_h.value
        return Formula("2·d_h", (d_h,), k + v, {"k": k, "v": v}, "DeepSeek-V2 Table 1 (MQA: one shared K/V head)")
    if isinstance(att, MLA):
        return _mla_formula(group, att, mla_cache)
    if isinstance(att, Linear):
        return Formula("0", (), 0, {}, "constant-state layer: no per-token cache (state counted separately)")
    raise TypeError(f"unknown attention block {type(att).__name__}")  # pragma: no cover - the union is closed


def _mla_formula(group: ResolvedGroup, att: MLA, mla_cache: str) -> Formula:
    at = f"layer_groups[{group.index}].attention"
    if mla_cache == "latent":
        d_c = Symbol("d_c", att.kv_lora_rank, f"{at}.kv_lora_rank")
        d_r = Symbol("d_R", att.qk_rope_head_dim, f"{at}.qk_rope_head_dim")
        return Formula(
            "d_c + d_R",
            (d_c, d_r),
            d_c.value + d_r.value,
            {"c_kv": d_c.value, "k_rope": d_r.value},
            "DeepSeek-V2 §2.1.3 and Table 1: the latent c_KV plus the decoupled RoPE key (what DeepSeek, vLLM, SGLang cache)",
        )
    if mla_cache == "expanded":
        n_h = Symbol("n_h", att.n_heads, f"{at}.n_heads")
        nope = Symbol("d_nope", att.qk_nope_head_dim, f"{at}.qk_nope_head_dim")
        rope = Symbol("d_R", att.qk_rope_head_dim, f"{at}.qk_rope_head_dim")
        d_v = Symbol("d_v", att.v_head_dim, f"{at}.v_head_dim")
        k = n_h.value * (nope.value + rope.value)
        v = n_h.value * d_v.value
        return Formula(
            "n_h·(d_nope + d_R) + n_h·d_v",
            (n_h, nope, rope, d_v),
            k + v,
            {"k": k, "v": v},
            "per-head K and V rebuilt from the latent (DeepSeek reference 'naive' mode; HF transformers 4.x)",
        )
    raise KvcalcError(f"unknown MLA cache layout {mla_cache!r}: choose latent or expanded")


@dataclass(frozen=True)
class GroupCache:
    """The cache of one layer group at a given context, per layer and for all its layers."""

    group: ResolvedGroup
    formula: Formula
    tokens_held: int  # per sequence: min(ctx, W) under a window, else ctx
    state_elements_per_layer: int  # constant state (linear layers), per sequence
    elements_per_layer: int  # for all `batch` sequences
    elements: int  # for all layers of the group and all sequences
    bytes_per_layer: int
    bytes: int

    @property
    def n_layers(self) -> int:
        return len(self.group.layers)


@dataclass(frozen=True)
class CacheReport:
    """The KV cache of a model for (ctx, batch, kv_dtype, mla_cache), summed over layer groups."""

    model: str
    ctx: int
    batch: int
    kv_dtype: str
    mla_cache: str | None  # None when the model has no MLA layer
    groups: tuple[GroupCache, ...]
    elements_per_token: int  # all layers, full-attention rate, one sequence
    bytes_per_token: int
    elements: int
    bytes: int
    notes: tuple[str, ...] = field(default=())


def kv_cache(spec: ModelSpec, ctx: int, batch: int = 1, kv_dtype: str = "bf16", mla_cache: str = "latent") -> CacheReport:
    """Exact KV cache of `spec` holding `ctx` tokens for each of `batch` sequences.

    Returns a CacheReport with elements and bytes per group and in total (bytes for all sequences).
    """
    if ctx < 1 or batch < 1:
        raise KvcalcError(f"ctx and batch must be positive (got ctx={ctx}, batch={batch})")
    if mla_cache not in MLA_CACHE_LAYOUTS:
        raise KvcalcError(f"unknown MLA cache layout {mla_cache!r}: choose latent or expanded")
    dtype_bits(kv_dtype)
    rows = []
    for group in spec.groups:
        formula = per_token_formula(group, mla_cache)
        # Sliding window: the newest query sees itself and W-1 earlier keys, so min(ctx, W) are held.
        held = min(ctx, group.sliding_window) if group.sliding_window else ctx
        state = group.attention.state_elements if isinstance(group.attention, Linear) else 0
        per_layer = batch * (formula.elements * held + state)
        total = per_layer * len(group.layers)
        rows.append(
            GroupCache(
                group=group,
                formula=formula,
                tokens_held=held,
                state_elements_per_layer=state,
                elements_per_layer=per_layer,
                elements=total,
                bytes_per_layer=elements_to_bytes(per_layer, kv_dtype),
                bytes=elements_to_bytes(total, kv_dtype),
            )
        )
    per_token = sum(r.formula.elements * r.n_layers for r in rows)
    elements = sum(r.elements for r in rows)
    has_mla = any(isinstance(g.attention, MLA) for g in spec.groups)
    return CacheReport(
        model=spec.name,
        ctx=ctx,
        batch=batch,
        kv_dtype=kv_dtype.lower(),
        mla_cache=mla_cache if has_mla else None,
        groups=tuple(rows),
        elements_per_token=per_token,
        bytes_per_token=elements_to_bytes(per_token, kv_dtype),
        elements=elements,
        bytes=elements_to_bytes(elements, kv_dtype),
    )


def without_windows(spec: ModelSpec) -> ModelSpec:
    """The same model with every sliding window removed (all layers global), for 'what would it cost' comparisons."""
    data = spec.model_dump(exclude_none=True)
    for group in data["layer_groups"]:
        group.pop("sliding_window", None)
    return ModelSpec.model_validate(data)
