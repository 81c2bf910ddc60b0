"""KV cache per layer group and in total, with the derivation of every figure.

Conventions (also in the README):
- Counts are elements until the last step; bytes = ceil(elements · bits / 8), so int4 is half a byte per element.
  With --kv-quant the scales and zero points of the scheme are added (kvcalc.costs.quant); without it they are not
  counted (an fp8 cache with one scale per tensor).
- Bytes are totals for `batch` sequences unless a name ends in `_per_token` or `_per_layer`.
- What one token adds to a layer, and how many tokens a layer holds, are its attention kind's answers
  (kvcalc.attention): a window W holds min(ctx, W) tokens.
- `elements_per_token` is the full-attention rate: every layer holding one more token, windows ignored (a KV-shared
  layer holds none of its own, so adds nothing).
- The KV cache (`bytes`: growing, windowed and chunked layers, indexer keys) and the constant states of linear
  attention and state-space layers (`state_bytes`, stored at the state dtype) are kept apart; `cache_bytes` is
  their sum.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TypedDict

from kvcalc.attention import AttentionKind, Formula, Layer
from kvcalc.costs.paged import (
    GroupPages,
    PoolLayout,
    block_tokens,
    check_encoder_positions,
    check_pages,
    engine_gpu_key,
    engine_groups,
    keeps_every_token,
    layer_pages,
    lookahead,
    lookahead_limit,
    page_bytes,
    pages,
    sglang_buffers,
    span_bytes,
    state_slots,
    stored_layout,
    vllm_layout,
)
from kvcalc.costs.quant import component_bytes, entry_bytes, group_size
from kvcalc.costs.sglang_pages import engine_page
from kvcalc.costs.state import merged_parts, parts_bytes, state_label, state_parts, temporal_parts
from kvcalc.dtypes import bits_to_bytes, dtype_bits, elements_to_bytes
from kvcalc.settings import Settings
from kvcalc.spec import ModelSpec, ResolvedGroup


def per_token_formula(group: ResolvedGroup, layout: str = "latent") -> Formula:
    """Elements one token adds to the cache of one layer of `group` (DeepSeek-V2 Table 1 notation)."""
    return group.attention.cache_formula(group.layer, layout)


@dataclass(frozen=True)
class GroupCache:
    """The cache of one layer group at a given context, per layer and for all its layers."""

    group: ResolvedGroup
    formula: Formula
    tokens_held: int  # per sequence: min(ctx, W) under a window, else ctx
    state_elements_per_layer: int  # constant state (linear layers), per sequence
    elements_per_layer: int  # KV cache, for all `batch` sequences
    elements: int  # KV cache, for all layers of the group and all sequences
    bytes_per_layer: int
    bytes: int
    state_formula: Formula | None = None  # the constant state's derivation, when the layer has one
    state_elements: int = 0  # constant state, all layers of the group and all sequences
    state_bytes: int = 0
    cross_formula: Formula | None = None  # cross-attention K/V per encoder token and layer (encoder–decoder models)
    cross_tokens: int = 0  # encoder positions each layer's cross-attention holds, per sequence
    bytes_per_token_per_layer: int = 0  # what one token adds to one layer, in bytes (token_bytes)
    heads: int = 1  # heads of each cached K/V tensor (per-head scales)
    block_size: int | None = None  # tokens a page under --engine
    pages: int = 0  # pages each layer's self-attention holds per sequence under --engine
    engine_bytes_per_layer: int | None = None  # whole pages of one layer, all sequences (kvcalc.costs.paged)
    engine_state_bytes_per_layer: int | None = None  # one layer's constant states as the engine stores them
    state_parts: tuple[tuple[int, str], ...] = ()  # one layer's constant state, one sequence: (elements, dtype) pairs
    temporal_parts: tuple[tuple[int, str], ...] = ()  # its recurrent component alone (kvcalc.costs.state.temporal_parts)
    state_bytes_per_layer: int = 0  # one layer's constant states, all sequences
    every_token: bool = False  # the engine pages every token of a windowed layer (kvcalc.costs.paged.keeps_every_token)
    padded_page: int | None = None  # vLLM pads this group's attention page to the unified page (kvcalc.costs.paged)
    pad_layers: int = 0  # vLLM's padding slots of this group's attention spec, in layers (PoolLayout.pads); SGLang's
    # buffers of an encoder–decoder model's other layers and Nemotron-NAS's layers without attention (sglang_buffers)
    pad_state_layers: int = 0  # the same for its constant state's spec

    @property
    def n_layers(self) -> int:
        return len(self.group.layers)

    @property
    def engine_bytes(self) -> int | None:
        """The group's cache in the engine's whole pages, all its layers and vLLM's padding slots (--engine)."""
        per_layer = self.engine_bytes_per_layer
        return None if per_layer is None else per_layer * (self.n_layers + self.pad_layers)


@dataclass(frozen=True)
class GroupTerm:
    """What one layer of a group adds to the cache of one sequence, whatever the context (CachePlan): `elements` for
    each token it holds, `fixed` elements at any context (cross-attention), and the bytes and pages they take."""

    attention: AttentionKind
    layer: Layer
    n_layers: int
    formula: Formula
    heads: int
    elements: int  # elements one token adds to one layer
    fixed: int  # one layer's cross-attention elements of the encoder positions
    fixed_bytes: int  # one layer's cross-attention bytes under --kv-quant (entry_bytes), else 0
    block: int | None  # tokens a page under --engine
    page_bytes: int  # bytes of one page of one layer (--engine)
    fixed_paged: int  # one layer's cross-attention pages, in bytes (--engine)
    bits: int  # of one element at kv_dtype
    every_token: bool = False  # the engine pages every token of a windowed layer (keeps_every_token)
    padded: bool = False  # vLLM pads this group's page to the unified page (GroupCache.padded_page)
    pad_layers: int = 0  # vLLM's padding slots counted with this group (GroupCache.pad_layers)
    ahead: int = 0  # slots an engine's step allocates past ctx under --mtp (kvcalc.costs.paged.lookahead)
    ahead_limit: int | None = None  # the tokens those slots stop at (kvcalc.costs.paged.lookahead_limit)

    def pages_at(self, ctx: int, s: Settings) -> int | None:
        """Pages one layer's self-attention holds for one sequence at `ctx` under --engine (the engine's rule,
        kvcalc.costs.paged.layer_pages); None without an engine."""
        if self.block is None:
            return None
        return layer_pages(ctx, self.attention.tokens_held(self.layer, ctx), self.block, self.layer, s.engine,
                           self.every_token, self.ahead, self.ahead_limit)

    def layer_bytes(self, ctx: int, batch: int, s: Settings) -> int:
        """One layer's cache of `batch` sequences at `ctx` (as GroupCache.bytes_per_layer; in the engine's whole pages
        with --engine, as GroupCache.engine_bytes_per_layer)."""
        pages = self.pages_at(ctx, s)
        if pages is not None:
            return batch * (self.pages_bytes(pages, s) + self.fixed_paged)
        return self.exact_bytes(ctx, batch, s)

    def exact_bytes(self, ctx: int, batch: int, s: Settings) -> int:
        """One layer's cache of `batch` sequences at `ctx` as its elements and scales, not an engine's pages."""
        held = self.attention.tokens_held(self.layer, ctx)
        if s.kv_quant == "none":
            return bits_to_bytes(self._elements(held, batch), self.bits)
        return batch * (entry_bytes(self.formula, self.heads, held, s.kv_dtype, s.kv_quant) + self.fixed_bytes)

    def layer_elements(self, ctx: int, batch: int) -> int:
        """Elements of one layer's cache of `batch` sequences at `ctx` (what layer_bytes rounds without an engine's
        pages or a scheme's scales)."""
        return self._elements(self.attention.tokens_held(self.layer, ctx), batch)

    def _elements(self, held: int, batch: int) -> int:
        return batch * (self.elements * held + self.fixed)

    def read_elements(self, ctx: int) -> int:
        """Elements of one layer's cache that one sequence's decode step at `ctx` reads: each tensor over the tokens
        the kind reads of it (AttentionKind.tokens_read), and the cross-attention's whole."""
        att, layer = self.attention, self.layer
        return sum(ch * att.tokens_read(layer, ctx, name) for name, ch in self.formula.components.items()) + self.fixed

    def read_bytes(self, ctx: int, batch: int, s: Settings) -> int:
        """One layer's cache bytes that a decode step at `ctx` reads for `batch` sequences (read_elements, with the
        scheme's scales under --kv-quant, and under --engine each tensor as the engine stores it, stored_layout): by
        token, not by page, since a kernel reads the tokens it attends."""
        if s.kv_quant == "none" and not self.restored(s):
            return bits_to_bytes(batch * self.read_elements(ctx), self.bits)
        att, layer = self.attention, self.layer
        return batch * (self._tensor_bytes(lambda name: att.tokens_read(layer, ctx, name), s) + self.fixed_bytes)

    def written_bytes(self, ctx: int, batch: int, s: Settings) -> int:
        """One layer's cache bytes that a prefill of `ctx` tokens writes for `batch` sequences: exact_bytes, but
        under --engine each tensor as the engine stores it (stored_layout), by token, not by page."""
        if not self.restored(s):
            return self.exact_bytes(ctx, batch, s)
        held = self.attention.tokens_held(self.layer, ctx)
        return batch * (self._tensor_bytes(lambda name: held, s) + self.fixed_bytes)

    def restored(self, s: Settings) -> bool:
        """Whether the settings' engine stores one of the layer's tensors otherwise than at --kv-dtype in --kv-quant's
        layout (DeepSeek-V3.2's indexer key in fp8 with scales; a sparse MLA latent in fp8_ds_mla entries)."""
        return s.engine is not None and any(stored_layout(name, self.attention, s) != (s.kv_dtype, s.kv_quant)
                                            for name in self.formula.components)

    def _tensor_bytes(self, tokens: Callable[[str], int], s: Settings) -> int:
        """Bytes of one layer's cached tensors, `tokens(name)` tokens of each, in the layout the settings store it
        (the engine's where it has one)."""
        return sum(component_bytes(name, ch, self.heads, tokens(name), *stored_layout(name, self.attention, s))
                   for name, ch in self.formula.components.items())

    def pages_bytes(self, n_pages: int, s: Settings) -> int:
        """Bytes of `n_pages` whole pages of one layer and sequence (--engine): n · page_bytes, except under a group
        scheme g<G>, whose key groups run along the tokens the pages span (kvcalc.costs.paged.span_bytes)."""
        if group_size(s.kv_quant) is None or self.padded:
            return n_pages * self.page_bytes
        assert self.block is not None
        return span_bytes(self.formula, self.heads, n_pages, self.block, self.attention, s)


class AppliedSettings(TypedDict):
    """CachePlan.applied: the cache's settings as output keys, None where one does not apply."""

    mla_cache: str | None
    block_size: int | None
    state_dtype: str | None
    enc_ctx: int | None


@dataclass(frozen=True)
class CachePlan:
    """The cache of a model at settings, apart from the context and the batch (kv_cache makes it once per spec and
    settings): each group's rates, and the figures that do not grow with the context."""

    model: str
    kv_dtype: str
    mla_cache: str | None  # None when no layer has a cache layout to choose
    state_dtype: str
    enc_ctx: int
    kv_quant: str
    engine: str | None
    groups: tuple[ResolvedGroup, ...]  # the layer groups (with the MTP layers under --mtp)
    layout: PoolLayout | None  # vLLM's pool of a model whose layers' specs differ (kvcalc.costs.paged.vllm_layout)
    terms: tuple[GroupTerm, ...]
    elements_per_token: int
    bytes_per_token: int
    state_elements: int  # one sequence
    engine_state_bytes: int | None  # one sequence (--engine)
    state_parts: tuple[tuple[int, str], ...]  # the constant states of one sequence by storage dtype: (elements, dtype)
    temporal_parts: tuple[tuple[int, str], ...]  # their recurrent components alone, the same way
    block_size: int | None
    bits: int  # bits of one element at kv_dtype
    plain: bool  # no quantisation scales and no engine pages: bytes are the elements' at kv_dtype
    reads_held: bool = True  # every layer's decode step reads the tokens it holds (AttentionKind.reads_held)
    every_token: bool = False  # the engine pages every token of a windowed layer (kvcalc.costs.paged.keeps_every_token)
    buffers: dict[tuple[int, str], int] | None = None  # SGLang's encoder–decoder buffers (kvcalc.costs.paged.sglang_buffers)
    ahead: int = 0  # slots an engine's step allocates past ctx under --mtp (kvcalc.costs.paged.lookahead)
    ahead_limit: int | None = None  # the tokens those slots stop at (kvcalc.costs.paged.lookahead_limit)
    state_slots: int = 1  # state slots a sequence takes outside vLLM's hybrid pages (kvcalc.costs.paged.state_slots)
    page: int | None = None  # the engine's one page for every layer (kvcalc.costs.sglang_pages.engine_page)

    def applied(self) -> AppliedSettings:
        """The cache's settings that apply to this model, as output keys (fit's rows, cost's json): MLA's layout, the
        engine's page, the states' dtype, the encoder positions; None where one does not apply."""
        return AppliedSettings(mla_cache=self.mla_cache, block_size=self.block_size,
                               state_dtype=self.state_dtype if self.state_elements else None,
                               enc_ctx=self.enc_ctx or None)


@dataclass(frozen=True)
class CacheReport:
    """The KV cache of a model at settings (ctx, batch, kv_dtype, mla_cache), summed over layer groups.

    The totals are computed at once; the breakdown by group (`groups`) when it is first read."""

    plan: CachePlan = field(repr=False)
    settings: Settings = field(repr=False)  # compared too: reports at two contexts may hold the same bytes (a window)
    elements: int  # the KV cache
    bytes: int
    engine_bytes: int | None = None  # the KV cache in the engine's whole pages (--engine)

    ctx = property(lambda self: self.settings.ctx)
    batch = property(lambda self: self.settings.batch)
    model = property(lambda self: self.plan.model)
    kv_dtype = property(lambda self: self.plan.kv_dtype)
    mla_cache = property(lambda self: self.plan.mla_cache)  # None when no layer has a cache layout to choose
    elements_per_token = property(lambda self: self.plan.elements_per_token)  # all layers, full-attention rate, one sequence
    bytes_per_token = property(lambda self: self.plan.bytes_per_token)
    state_dtype = property(lambda self: self.plan.state_dtype)
    enc_ctx = property(lambda self: self.plan.enc_ctx)  # encoder positions the cross-attention holds (0: no encoder)
    kv_quant = property(lambda self: self.plan.kv_quant)
    engine = property(lambda self: self.plan.engine)
    block_size = property(lambda self: self.plan.block_size)  # the engine's page size in tokens (the largest)
    notes: tuple[str, ...] = ()

    @property
    def state_elements(self) -> int:
        """The constant states, all sequences."""
        return self.settings.batch * self.plan.state_elements

    @property
    def state_bytes(self) -> int:
        return parts_bytes(self.plan.state_parts, self.settings.batch)

    @property
    def engine_state_bytes(self) -> int | None:
        """The constant states as the engine stores them (--engine)."""
        per_sequence = self.plan.engine_state_bytes
        return None if per_sequence is None else self.settings.batch * per_sequence

    @classmethod
    def at(cls, plan: CachePlan, settings: Settings, elements: int, bytes_: int,
           engine_bytes: int | None = None) -> CacheReport:
        """CacheReport(plan, settings, elements, bytes_, engine_bytes), its fields set as the frozen dataclass's own
        __init__ sets them, in one step (kv_cache makes one a call; field by field took longer than the figures)."""
        report = object.__new__(cls)
        report.__dict__.update(plan=plan, settings=settings, elements=elements, bytes=bytes_, engine_bytes=engine_bytes,
                               notes=())
        return report

    @cached_property
    def groups(self) -> tuple[GroupCache, ...]:
        """The cache of each layer group."""
        return tuple(group_cache(g, self.settings, self.plan.enc_ctx, self.plan.every_token, self.plan.layout, i,
                                 self.plan.buffers, self.plan.ahead, self.plan.state_slots, self.plan.ahead_limit,
                                 self.plan.page)
                     for i, g in enumerate(self.plan.groups))

    @property
    def cache_bytes(self) -> int:
        """KV cache and constant states together."""
        return self.bytes + self.state_bytes


def token_bytes(formula: Formula, heads: int, s: Settings) -> int:
    """Bytes one token adds to one layer's cache: the formula's elements at kv_dtype, plus the scheme's per-token
    scales; under a group scheme g<G> the rate of a whole group of G tokens, bytes(G tokens) / G rounded up."""
    if s.kv_quant == "none":
        return elements_to_bytes(formula.elements, s.kv_dtype)
    g = group_size(s.kv_quant) or 1
    return -(-entry_bytes(formula, heads, g, s.kv_dtype, s.kv_quant) // g)


def group_cache(group: ResolvedGroup, s: Settings, enc_tokens: int = 0, every_token: bool = False,
                layout: PoolLayout | None = None, index: int = 0, pads: dict[tuple[int, str], int] | None = None,
                ahead: int = 0, slots: int = 1, limit: int | None = None, page: int | None = None) -> GroupCache:
    """The cache of one layer group of a model at settings `s`; `enc_tokens`: encoder positions its cross-attention
    holds (encoder–decoder models); `every_token`: the engine pages every token of a windowed layer; `layout`: vLLM's
    pool of a model whose layers' specs differ, this group its `index`-th, with the padding slots `pads` (None: the
    whole model's; kvcalc.costs.paged); `ahead`: slots an engine's step allocates past ctx (kvcalc.costs.paged.lookahead);
    `slots`: state slots a sequence takes where no layout pages its states (kvcalc.costs.paged.state_slots); `limit`:
    the tokens `ahead` stops at (kvcalc.costs.paged.lookahead_limit); `page`: the engine's one page for every layer
    (kvcalc.costs.sglang_pages.engine_page), None where each layer's is its own."""
    att, layer = group.attention, group.layer
    formula = att.cache_formula(layer, s.mla_cache)
    held = att.tokens_held(layer, s.ctx)
    state = att.state_formula(layer)
    if group.parallel is not None:  # Falcon-H1: the parallel Mamba-2's state is the layer's (its attention has none)
        state = group.parallel.state_formula(group.parallel_layer)
    cross = group.cross.cache_formula(group.cross_layer, s.mla_cache) if group.cross is not None else None
    # the self-attention cache grows with ctx; cross-attention holds K/V of every encoder position, once per input
    per_layer = s.batch * (formula.elements * held + (cross.elements * enc_tokens if cross else 0))
    total = per_layer * len(group.layers)
    state_total = s.batch * state.elements * len(group.layers)
    parts = state_parts(group, s)
    heads = att.cache_heads(layer, s.mla_cache)
    if s.kv_quant == "none":
        layer_bytes, bytes_ = elements_to_bytes(per_layer, s.kv_dtype), elements_to_bytes(total, s.kv_dtype)
    else:  # each sequence's tensors carry their own scales (kvcalc.costs.quant)
        cross_heads = group.cross.cache_heads(group.cross_layer, s.mla_cache) if group.cross is not None else 1
        one = entry_bytes(formula, heads, held, s.kv_dtype, s.kv_quant)
        one += entry_bytes(cross, cross_heads, enc_tokens, s.kv_dtype, s.kv_quant) if cross else 0
        layer_bytes = s.batch * one
        bytes_ = layer_bytes * len(group.layers)
    block = n_pages = paged = engine_state = None
    own = layout.pages[index] if layout is not None else GroupPages()
    pad = pad_state = 0
    if layout is not None:
        pads = layout.pads() if pads is None else pads
    if pads:  # vLLM's padding slots (PoolLayout.pads), or SGLang's encoder–decoder buffers (sglang_buffers)
        pad, pad_state = pads.get((index, "kv"), 0), pads.get((index, "state"), 0)
    if s.engine is not None:  # the engine's whole pages (kvcalc.costs.paged)
        block = own.block or page or block_tokens(att, s)
        n_pages = layer_pages(s.ctx, held, block, layer, s.engine, every_token, ahead, limit)
        paged = (n_pages * own.padded_page if own.padded_page is not None
                 else span_bytes(formula, heads, n_pages, block, att, s))
        if cross is not None and group.cross is not None:
            cross_heads = group.cross.cache_heads(group.cross_layer, s.mla_cache)
            paged += span_bytes(cross, cross_heads, pages(enc_tokens, enc_tokens, block), block, group.cross, s)
        paged *= s.batch
        state_one = own.state_page if own.state_page is not None else parts_bytes(parts, 1)
        held_states = own.state_pages if layout is not None else slots  # vLLM: padded pages a state; SGLang: its slots
        engine_state = s.batch * state_one * held_states if state.elements else 0
    return GroupCache(group, formula, held, state.elements, per_layer, total, layer_bytes, bytes_,
                      state if state.elements else None, state_total, parts_bytes(parts, s.batch * len(group.layers)),
                      cross, enc_tokens if cross else 0, token_bytes(formula, heads, s), heads, block, n_pages or 0,
                      paged, engine_state, parts, temporal_parts(group, s), parts_bytes(parts, s.batch), every_token,
                      own.padded_page, pad, pad_state)


def kv_cache(spec: ModelSpec, s: Settings) -> CacheReport:
    """Exact KV cache of `spec` holding `s.ctx` tokens for each of `s.batch` sequences (bytes for all of them)."""
    return cache_at(cache_plan(spec, s), s)


def cache_plan(spec: ModelSpec, s: Settings) -> CachePlan:
    """The CachePlan of `spec` at settings `s` (their context and batch not read), once per spec and settings."""
    return spec.memo(("cache_plan", s.kv_dtype, s.mla_cache, s.kv_quant, s.engine, s.block_size, s.state_dtype, s.enc_ctx,
                      s.mtp, state_slots(spec.family, s), engine_gpu_key(s)), _plan, spec, s)


def cache_at(plan: CachePlan, s: Settings) -> CacheReport:
    """kv_cache from the model's cache_plan at settings `s` (a sweep makes the plan once per model and settings)."""
    ctx = s.ctx
    if plan.plain:  # the elements at kv_dtype, rounded once at the end
        elements = s.batch * sum([t.n_layers * (t.elements * t.attention.tokens_held(t.layer, ctx) + t.fixed)
                                  for t in plan.terms])
        return CacheReport.at(plan, s, elements, bits_to_bytes(elements, plan.bits))
    held = [t.attention.tokens_held(t.layer, ctx) for t in plan.terms]
    elements = s.batch * sum(t.n_layers * (t.elements * h + t.fixed) for t, h in zip(plan.terms, held))
    if plan.kv_quant == "none":
        bytes_ = elements_to_bytes(elements, plan.kv_dtype)
    else:  # each sequence's tensors carry their own scales (kvcalc.costs.quant)
        bytes_ = s.batch * sum(t.n_layers * (entry_bytes(t.formula, t.heads, h, s.kv_dtype, s.kv_quant) + t.fixed_bytes)
                               for t, h in zip(plan.terms, held))
    engine_bytes = None
    if plan.engine is not None:  # the engine's whole pages (kvcalc.costs.paged)
        engine_bytes = s.batch * sum(  # vLLM's padding slots hold pages as the layers of their spec do (PoolLayout.pads)
            (t.n_layers + t.pad_layers)
            * (t.pages_bytes(layer_pages(ctx, h, t.block, t.layer, plan.engine, t.every_token, t.ahead, t.ahead_limit), s)
               + t.fixed_paged)
            for t, h in zip(plan.terms, held) if t.block is not None)
    return CacheReport.at(plan, s, elements, bytes_, engine_bytes)


def read_at(plan: CachePlan, s: Settings) -> int:
    """Bytes of KV cache that a decode step at `s.ctx` reads, all layers and sequences: each layer's tokens read
    (GroupTerm.read_elements / read_bytes), so a chunked layer reads its chunk's keys and DSA the top-k latents beside
    every index key, under --engine each tensor as the engine stores it (README: decode traffic). Where every layer
    reads what it holds (plan.reads_held) and the engine stores nothing otherwise, this is cache_at's bytes without
    pages, which a caller holding them may use instead."""
    if plan.kv_quant == "none" and not any(t.restored(s) for t in plan.terms):
        # the elements at kv_dtype, rounded once at the end (as cache_at)
        return bits_to_bytes(s.batch * sum(t.n_layers * t.read_elements(s.ctx) for t in plan.terms), plan.bits)
    return sum(t.n_layers * t.read_bytes(s.ctx, s.batch, s) for t in plan.terms)


def written_at(plan: CachePlan, s: Settings, exact: int) -> int:
    """Bytes of KV cache that a prefill of `s.ctx` tokens writes, all layers and sequences: `exact`, the cache's own
    bytes (cache_at's without pages), unless the settings' engine stores a tensor otherwise (GroupTerm.restored):
    then each layer's tensors as it stores them, by token (GroupTerm.written_bytes)."""
    if not any(t.restored(s) for t in plan.terms):
        return exact
    return sum(t.n_layers * t.written_bytes(s.ctx, s.batch, s) for t in plan.terms)


def _plan(spec: ModelSpec, s: Settings) -> CachePlan:
    source = spec.encoder.source_len if spec.encoder else None
    check_encoder_positions(spec.family, source, s.enc_ctx, s.engine)
    enc = s.encoder_tokens(source)
    groups = engine_groups(spec, s)
    mtp = spec.mtp_group() if s.mtp else None
    if mtp is not None:  # --mtp: the multi-token-prediction layers keep a cache like the last layer's
        groups = groups + (mtp,)
    layout = vllm_layout(groups, s, spec.mtp_layers if s.mtp else 0)
    ahead, limit = lookahead(spec.mtp_layers, s), lookahead_limit(spec, s)
    one = replace(s, ctx=1, batch=1)
    every = keeps_every_token(spec.family, s.engine)
    slots = state_slots(spec.family, s)
    extra = sglang_buffers(groups, s, spec.encoder.n_layers if spec.encoder else 0, family=spec.family) \
        if layout is None else None
    page = engine_page(spec, s)
    rows = tuple(group_cache(g, one, enc, every, layout, i, extra, ahead, slots, limit, page)  # one sequence: what does
                 for i, g in enumerate(groups))  # not grow with ctx
    check_pages(spec, s, [r.group.attention for r in rows if r.formula.elements])
    terms = tuple(group_term(r, s, enc, ahead, limit) for r in rows)
    # a KV-shared layer (Gemma 3n) adds nothing per token: it reads the cache of the layer it shares
    growing = [r for r in rows if not r.group.layer.kv_shared]
    per_token = sum(r.formula.elements * r.n_layers for r in growing)
    plain = s.kv_quant == "none"
    blocks = [r.block_size for r in rows if r.block_size is not None]
    states = merged_parts((n * r.n_layers, dtype) for r in rows for n, dtype in r.state_parts)  # one sequence, all layers
    return CachePlan(
        model=spec.name,
        kv_dtype=s.kv_dtype,
        mla_cache=s.mla_cache if spec.has_layouts() else None,
        state_dtype=state_label(states, s.state_storage),
        enc_ctx=enc,
        kv_quant=s.kv_quant,
        engine=s.engine,
        groups=groups,
        layout=layout,
        terms=terms,
        elements_per_token=per_token,
        bytes_per_token=(elements_to_bytes(per_token, s.kv_dtype) if plain
                         else sum(r.bytes_per_token_per_layer * r.n_layers for r in growing)),
        state_elements=sum(r.state_elements for r in rows),
        state_parts=states,
        temporal_parts=merged_parts((n * r.n_layers, dtype) for r in rows for n, dtype in r.temporal_parts),
        engine_state_bytes=(sum((r.engine_state_bytes_per_layer or 0) * (r.n_layers + r.pad_state_layers) for r in rows)
                            if s.engine else None),
        block_size=max(blocks) if blocks else None,
        bits=dtype_bits(s.kv_dtype),
        plain=plain and s.engine is None,
        reads_held=all(t.attention.reads_held(t.layer) for t in terms),
        every_token=every,
        buffers=extra or None,
        ahead=ahead,
        ahead_limit=limit,
        state_slots=slots,
        page=page,
    )


def group_term(r: GroupCache, s: Settings, enc: int, ahead: int = 0, limit: int | None = None) -> GroupTerm:
    """A group's GroupTerm, from its cache at ctx 1 for one sequence (`r`) at settings `s`; `ahead`: slots an engine's step
    allocates past ctx (kvcalc.costs.paged.lookahead), up to `limit` tokens (lookahead_limit)."""
    g, n = r.group, r.n_layers
    cross = r.cross_formula
    fixed_bytes = fixed_paged = page = 0
    if cross is not None and g.cross is not None:
        cross_heads = g.cross.cache_heads(g.cross_layer, s.mla_cache)
        if s.kv_quant != "none":
            fixed_bytes = entry_bytes(cross, cross_heads, enc, s.kv_dtype, s.kv_quant)
        if r.block_size is not None:
            fixed_paged = span_bytes(cross, cross_heads, pages(enc, enc, r.block_size), r.block_size, g.cross, s)
    if r.block_size is not None:
        page = r.padded_page or page_bytes(r.formula, r.heads, r.block_size, g.attention, s)
    return GroupTerm(g.attention, g.layer, n, r.formula, r.heads, r.formula.elements, cross.elements * enc if cross else 0,
                     fixed_bytes, r.block_size, page, fixed_paged, dtype_bits(s.kv_dtype), r.every_token,
                     r.padded_page is not None, r.pad_layers, ahead, limit)


def without_windows(spec: ModelSpec) -> ModelSpec:
    """The same model with every sliding window and attention chunk removed (all layers global), for 'what would it
    cost' comparisons: a chunked layer (Llama 4's attention_chunk_size) is as local as a windowed one."""
    data = spec.model_dump(exclude_none=True)
    for group in data["layer_groups"]:
        group.pop("sliding_window", None)
        group.pop("attention_chunk_size", None)
    return ModelSpec.model_validate(data)
