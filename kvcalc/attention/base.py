"""What every attention kind answers, in one place: the cache a token adds, the tokens a layer holds, the keys each
query sees, the weight matrices, and how the kind is shown. Costs, rows, `--explain` and the NumPy backend ask a
kind these questions; none of them derives a fact of a layer on its own.

Conventions (also in the README):
- Cache counts are elements per token and layer; bytes come later (kvcalc.dtypes).
- A window W: the query at position t (1-based) sees itself and the W-1 keys before it, min(t, W) keys, so a
  layer holds min(ctx, W) tokens (Gemma / Hugging Face convention).
- A chunk C (Llama 4's chunked local attention): the query at position t sees the keys of its own aligned chunk up
  to itself, ((t - 1) mod C) + 1 keys; a layer must hold min(ctx, C) tokens (what is reserved at any position).
- Keys scanned vs attended: a layer scans the keys its window or chunk shows it; a sparse indexer (DeepSeek-V3.2)
  then attends only the top k of them. Without an indexer the two are the same.
- Weights are named by the papers' symbols (W_Q, W_DKV, ...) and grouped into the components that parameter and
  FLOP breakdowns report ('attn/q', 'attn/kv_down', ...).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Annotated, ClassVar, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field


class Strict(BaseModel):
    """Base for every spec model: unknown keys are errors, values are frozen after validation, and nothing is coerced
    (strict: a count refuses true, 32.5 and "32"; a flag refuses "yes")."""

    # defer_build: a validator is built when first used, so a start builds only those of the kinds its specs name
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, defer_build=True)


# Upper bounds where a value is physically absurd, so nothing downstream loops over or allocates a huge range.
MAX_LAYERS = 1_000_000  # the deepest published models have a few hundred; issue #11 asks 10**6 to answer at once
MAX_HEADS = 65_536  # heads, KV heads, SSM groups
MAX_DIM = 2**20  # hidden sizes, head dims, FFN sizes, latent ranks, kernels
MAX_EXPERTS = 65_536  # routed experts per layer: 10,000 is valid and costs nothing to count
MAX_TOKENS = 2**40  # windows, chunks, context, encoder positions, top-k
MAX_VOCAB = 2**24
MAX_PARAMS = 2**50  # a parameter count written into a spec (about 10**15)
MAX_NORMS = 64  # norms in one layer (models have 2 to 6)
LayerCount = Annotated[int, Field(gt=0, le=MAX_LAYERS)]
HeadCount = Annotated[int, Field(gt=0, le=MAX_HEADS)]
Dim = Annotated[int, Field(gt=0, le=MAX_DIM)]
ExpertCount = Annotated[int, Field(gt=0, le=MAX_EXPERTS)]
TokenCount = Annotated[int, Field(gt=0, le=MAX_TOKENS)]
VocabSize = Annotated[int, Field(gt=0, le=MAX_VOCAB)]
ParamCount = Annotated[int, Field(ge=0, le=MAX_PARAMS)]
NormCount = Annotated[int, Field(gt=0, le=MAX_NORMS)]


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


@dataclass(frozen=True)
class Weight:
    """One weight of an attention layer: its paper symbol, the breakdown component it counts in, and its shape.

    role: 'matrix' (multiplies activations: 2 FLOPs per element and token), 'bias' or 'norm' (counted as parameters,
    O(tokens) work left out of FLOPs).
    """

    name: str
    component: str
    shape: tuple[int, ...]
    role: Literal["matrix", "bias", "norm"] = "matrix"

    @property
    def size(self) -> int:
        return prod(self.shape)


# The weights of a layer's own K and V, which a KV-shared layer holds in its checkpoint but never runs: it reads an
# earlier layer's cache (Gemma 3n: vLLM builds q_proj alone there; transformers projects no K/V with a cache)
KV_PROJECTIONS = frozenset({"W_K", "W_V", "b_K", "b_V", "k_norm"})


@dataclass(frozen=True)
class Layer:
    """Where an attention block sits: the model's hidden size, the group's window or chunk, and the block's path."""

    d_model: int
    window: int | None
    path: str  # e.g. "layer_groups[1].attention", for derivations and messages
    chunk: int | None = None  # chunked local attention (Llama 4 attention_chunk_size)
    kv_shared: bool = False  # reads the K/V an earlier layer cached (Gemma 3n, YOCO, CLA): holds none of its own

    @property
    def span(self) -> int | None:
        """The most keys a query can see: its window or chunk (None: the whole context)."""
        return self.window or self.chunk


class Work(NamedTuple):
    """What one pass does in a layer: query tokens, query–key pairs attended, keys rebuilt from a latent (MLA
    naive), and query–key pairs scanned (by a sparse indexer before its top-k; else equal to `pairs`). A named
    tuple: a sweep makes several a row."""

    tokens: int
    pairs: int
    expanded: int
    scanned: int = -1  # -1: the same as pairs

    @property
    def scanned_pairs(self) -> int:
        return self.pairs if self.scanned < 0 else self.scanned


# ---------------------------------------------------------------- causal pair counts (exact closed forms)


def tri(n: int) -> int:
    """1 + 2 + … + n."""
    return n * (n + 1) // 2


def keys_seen(n: int, window: int | None) -> int:
    """Σ_{i=1..n} min(i, W): query–key pairs of a causal prefill of n tokens (W None: no window)."""
    if window is None or n <= window:
        return tri(n)
    return tri(window) + (n - window) * window


def keys_seen_sum(n: int, window: int | None) -> int:
    """Σ_{t=1..n} keys_seen(t, W): the pairs of n prefills of lengths 1 … n (generation without a cache)."""
    if window is None or n <= window:
        return n * (n + 1) * (n + 2) // 6  # Σ t(t+1)/2
    w = window
    return w * (w + 1) * (w + 2) // 6 + (n - w) * tri(w) + w * tri(n - w)


def chunk_keys_seen(n: int, chunk: int) -> int:
    """Σ_{t=1..n} (((t-1) mod C) + 1): the pairs of a chunked causal prefill of n tokens (q full chunks, then r)."""
    q, r = divmod(n, chunk)
    return q * tri(chunk) + tri(r)


def chunk_keys_seen_sum(n: int, chunk: int) -> int:
    """Σ_{m=1..n} chunk_keys_seen(m, C), in closed form: over full blocks of C prefill lengths, then the last one.

    With m = qC + r (0 <= r < C), chunk_keys_seen(m) = q·T + tri(r), T = tri(C); Σ_{r<C} tri(r) = (C-1)C(C+1)/6.
    """
    t, tet = tri(chunk), (chunk - 1) * chunk * (chunk + 1) // 6
    big_q, big_r = divmod(n, chunk)  # m = 0 … n: big_q full blocks, then r = 0 … big_r of block big_q
    full = chunk * t * big_q * (big_q - 1) // 2 + big_q * tet
    return full + (big_r + 1) * big_q * t + big_r * (big_r + 1) * (big_r + 2) // 6


# ---------------------------------------------------------------- the interface


class AttentionKind(Strict):
    """An attention block of a layer group. Subclasses declare `kind: Literal[...]`, their fields, and answer below.

    A new kind is one subclass decorated with `kvcalc.attention.register`; spec loading, costs, `compare`, `cost`
    and `show` then work for it (the NumPy backend needs a layer of its own: `kvcalc.backend.attention.LAYERS`).
    """

    kind: str
    label: ClassVar[str] = ""  # how tables name the kind ("GQA", "MLA"); empty: the kind in capitals
    layouts: ClassVar[tuple[str, ...]] = ()  # cache layouts the block can be stored in (MLA: latent, expanded)
    schedules: ClassVar[tuple[str, ...]] = ()  # decode schedules with different costs (MLA: naive, absorbed)
    windowed: ClassVar[bool] = True  # whether a sliding window applies (a constant-state layer has none)
    mixer: ClassVar[bool] = True  # False for the empty mixer of an FFN-only layer: left out of labels

    # -- the cache

    def cache_formula(self, layer: Layer, layout: str) -> Formula:
        """Elements one token adds to the cache of one layer (`layout` matters only for kinds with `layouts`)."""
        raise NotImplementedError

    def constant_state(self, layer: Layer) -> int:
        """Elements of constant state per sequence and layer, held whatever the context (linear attention, SSMs)."""
        return self.state_formula(layer).elements

    def state_formula(self, layer: Layer) -> Formula:
        """The constant state per sequence and layer with its derivation (the recurrent and convolution states)."""
        return Formula("0", (), 0, {}, "no constant state")

    def state_dtypes(self, layer: Layer) -> dict[str, str]:
        """Components of the constant state that the model stores in a dtype of its own (component -> dtype), used
        unless --state-dtype is given; the others take the default state dtype."""
        return {}

    def cache_heads(self, layer: Layer, layout: str) -> int:
        """Heads of each cached K/V tensor (per-head quantisation scales one per head): 1 for single-vector caches."""
        return 1

    def tokens_held(self, layer: Layer, ctx: int) -> int:
        """Tokens a layer keeps per sequence at context `ctx`: min(ctx, W) under a window, min(ctx, C) under a
        chunk, else ctx."""
        if layer.kv_shared:
            return 0  # its keys and values are an earlier layer's, counted there
        return min(ctx, layer.span) if layer.span else ctx

    def tokens_rule(self, layer: Layer) -> str:
        """How `tokens_held` is reached, for `--explain`: 'min(ctx, W)', 'min(ctx, C)' or 'ctx'."""
        if layer.kv_shared:
            return "none (reads an earlier layer's cache)"
        return "min(ctx, W)" if layer.window else "min(ctx, C)" if layer.chunk else "ctx"

    def sparse_topk(self) -> int | None:
        """The keys a sparse indexer lets each query attend (DeepSeek Sparse Attention's index_topk), None without one."""
        return None

    def reads_held(self, layer: Layer) -> bool:
        """Whether a decode step reads exactly the tokens the layer holds, in every cached tensor: not under a chunk
        (it holds up to C tokens, its query sees those of its own chunk) nor KV-shared (it holds none and reads an
        earlier layer's)."""
        return not (layer.chunk or layer.kv_shared)

    def tokens_read(self, layer: Layer, ctx: int, component: str) -> int:
        """Tokens of the cached tensor `component` that the decode step at context `ctx` reads for one sequence: the
        keys its query sees (scan_at), in its own cache or, KV-shared, in the earlier layer's."""
        return self.scan_at(layer, ctx)

    def cache_shapes(self, layer: Layer, batch: int, held: int, layout: str) -> dict[str, tuple[int, ...]]:
        """Shapes of the tensors a layer's cache holds, by name (what the NumPy backend must measure)."""
        return {}

    def state_shapes(self, layer: Layer, batch: int) -> dict[str, tuple[int, ...]]:
        """Shapes of the arrays a layer's constant state holds, by name (the state's components: its recurrent or
        SSM state, its convolution's last K − 1 inputs [b, channels, K − 1]); what the NumPy backend must measure."""
        return {}

    # -- the keys each query sees (FLOPs)

    def scan_at(self, layer: Layer, t: int) -> int:
        """Keys the query at position t (1-based) can see, itself included: min(t, W), its chunk's, or t."""
        if layer.chunk:
            return (t - 1) % layer.chunk + 1
        return min(t, layer.window) if layer.window else t

    def scan_prefill(self, layer: Layer, n: int) -> int:
        """Σ_{t=1..n} scan_at(t): the query–key pairs a causal prefill of n tokens can see."""
        return chunk_keys_seen(n, layer.chunk) if layer.chunk else keys_seen(n, layer.window)

    def scan_prefills(self, layer: Layer, n: int) -> int:
        """Σ_{m=1..n} scan_prefill(m): those of n prefills of lengths 1 … n (decoding without a cache)."""
        return chunk_keys_seen_sum(n, layer.chunk) if layer.chunk else keys_seen_sum(n, layer.window)

    def keys_at(self, layer: Layer, t: int) -> int:
        """Keys the query at position t attends to: those it can see, unless the kind selects fewer (top-k)."""
        return self.scan_at(layer, t)

    def keys_prefill(self, layer: Layer, n: int) -> int:
        """Σ_{t=1..n} keys_at(t): the query–key pairs a causal prefill of n tokens attends."""
        return self.scan_prefill(layer, n)

    def keys_prefills(self, layer: Layer, n: int) -> int:
        """Σ_{m=1..n} keys_prefill(m): the pairs of n prefills of lengths 1 … n (decoding without a cache)."""
        return self.scan_prefills(layer, n)

    # -- weights and FLOPs

    def weights(self, layer: Layer) -> tuple[Weight, ...]:
        """Every weight of one layer, by paper symbol; parameters, FLOPs and the backend's memory plan use it."""
        return ()

    def flops(self, layer: Layer, work: Work, schedule: str) -> dict[str, int]:
        """FLOPs of one layer doing `work` for one sequence, by component (2 FLOPs per multiply-add)."""
        return {}

    # -- facts for rows and labels

    @property
    def query_heads(self) -> int | None:
        """Query heads n_h, or None for a layer without softmax heads."""
        return None

    def kv_heads(self, layer: Layer) -> int | None:
        """Key/value heads cached per token, for MHA/GQA/MQA; None where the cache is not per-head K and V."""
        return None

    def d_h(self, layer: Layer) -> int | None:
        """The resolved per-head dim d_h of MHA/GQA/MQA; None for other kinds."""
        return None

    def facts(self) -> dict[str, int]:
        """Kind-specific dims that `list` and `compare` report under their own keys (MLA: kv_lora_rank, ...)."""
        return {}

    def kv_label(self, layer: Layer, layout: str | None) -> str:
        """The 'KV heads or latent' cell: what one layer caches per token, in a few characters."""
        heads = self.kv_heads(layer)
        return "–" if heads is None else str(heads)

    def head_dim_label(self, layer: Layer) -> str:
        """The 'Head dim' cell."""
        d_h = self.d_h(layer)
        return "–" if d_h is None else str(d_h)

    def describe(self, layer: Layer) -> str:
        """One line of dims for `show`'s summary."""
        return ", ".join(f"{k} {v}" for k, v in self.model_dump(exclude={"kind"}, exclude_none=True).items())

    def tp_rule(self, layer: Layer, tp: int) -> str | None:
        """Why `tp` tensor-parallel ranks cannot hold this block as vLLM builds it (what it has, 'N query heads, which
        ...'), or None where they can. Softmax heads: query heads divisible by tp (ModelConfig.verify_with_parallel_config),
        K/V heads divisible by tp or dividing it (QKVParallelLinear splits or replicates them)."""
        n, kv = self.query_heads, self.kv_heads(layer)
        if n and n % tp:
            return (f"{n} query heads, which {tp} ranks cannot split evenly (vLLM requires the attention heads divisible "
                    "by the tensor-parallel size, as SGLang's model files do)")
        if kv and kv % tp and tp % kv:
            return (f"{kv} K/V heads, which {tp} ranks can neither split evenly nor replicate evenly (the "
                    "QKVParallelLinear of vLLM and SGLang needs one to divide the other)")
        return None

    def per_rank(self, layer: Layer, tp: int) -> AttentionKind:
        """This block as one of `tp` tensor-parallel ranks holds it: its heads split (rounded up: a K/V head is
        replicated when there are fewer heads than ranks), what is not split replicated. Default: all of it on every
        rank (an upper bound for a kind that does not say)."""
        return self

    def problems(self, layer: Layer) -> list[str]:
        """Rules that need the model's dims (`path: rule` lines); the spec reports them with the rest."""
        return []


def split_rule(count: int, what: str, tp: int, where: str) -> str | None:
    """tp_rule's words for a recurrent block's `count` heads (or channels) that `tp` ranks must split evenly, as
    `where` (the engine's class) requires; None when they do."""
    if count % tp == 0:
        return None
    return f"{count} {what}, which {tp} ranks cannot split evenly ({where} requires them divisible by the tensor-parallel size)"


def matrix_flops(weights: tuple[Weight, ...], tokens: int, names: tuple[str, ...]) -> dict[str, int]:
    """2·tokens·size of each named matrix, summed by component (a token multiplies each of them once)."""
    out: dict[str, int] = {}
    for w in weights:
        if w.name in names:
            out[w.component] = out.get(w.component, 0) + 2 * tokens * w.size
    return out
