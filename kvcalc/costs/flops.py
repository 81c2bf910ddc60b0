"""FLOPs by component for prefill, one decode step, and generation with and without a KV cache.

Conventions (also in the README):
- FLOPs, not MACs: a product of an m×k and a k×n matrix costs 2·m·n·k. Only matrix products are counted;
  norms, softmax, activations, RoPE, residual adds and biases are O(tokens·d) and left out.
- Causal attention: the keys each query sees are its layer's attention kind's answer (kvcalc.attention): with a
  window W, query i (1-based) meets min(i, W) keys. So a prefill of N tokens scores Σ_{i≤N} min(i, W) query–key
  pairs, about N²/2; `dense_attn` counts the N×N matrix instead, as FLOP-counting libraries (and nanoGPT's sizing
  notebook) do.
- A decode step at context t processes the token at position t: it attends to min(t, W) keys, itself included.
- Generation of G tokens after a prompt of P: with a cache, the decode steps at contexts P+1 … P+G (O(N²) in
  attention); without one, each step re-runs a prefill of the whole prefix of t = P+1 … P+G tokens (O(N³)).
- The LM head runs for the positions whose logits are needed: the last one in prefill (`logits="all"` for all),
  one per decode step.
- MLA: prefill up-projects the prompt's K and V once and attends per head (every engine does, but for DeepSeek Sparse
  Attention's long prompts, which vLLM and SGLang attend in the latent space: `cost` notes that prefill's total). Decode follows the
  schedule: 'naive' rebuilds per-head K and V from the cache (with a latent cache, every cached token at every
  step, as Hugging Face transformers 5.x; with an expanded cache, only the new token); 'absorbed' folds W_UK into
  the query and W_UV into the output and attends in the latent space (DeepSeek-V2 §2.1.3; vLLM, SGLang).
- MoE: only the routed experts a token activates, the shared experts and the router.
- Constant-state layers (linear attention, SSMs): their kind counts its projections and recurrence.
- Encoder–decoder models: the encoder runs once per input in the prefill (bidirectional attention over enc_ctx
  positions); each decoder layer's cross-attention projects the encoder output's K and V once per input (at every
  step without a cache) and attends every encoder position from each query.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NamedTuple

from kvcalc.attention import AttentionKind, Layer, Work, tri
from kvcalc.costs.params import add_times, ffn_of_layer, ffn_runs
from kvcalc.costs.rates import Direct, LayerRates, rates
from kvcalc.errors import KvcalcError, brief
from kvcalc.settings import Settings
from kvcalc.spec import DenseFFN, ModelSpec, MoEFFN, NoFFN, ResolvedGroup
from kvcalc.units import MAX_TOKENS

WorkFn = Callable[[ResolvedGroup], Work]  # group -> what one of its layers does in the pass


def ffn_flops(ffn: DenseFFN | MoEFFN | NoFFN, d: int, tokens: int) -> dict[str, int]:
    """FLOPs of one FFN block over `tokens` tokens, by component."""
    mats = lambda gated: 3 if gated else 2  # noqa: E731  gate/up/down or up/down
    if isinstance(ffn, NoFFN):
        return {}
    if isinstance(ffn, DenseFFN):
        return {"ffn/dense": 2 * tokens * mats(ffn.gated) * d * ffn.d_ff}
    shared_ff = ffn.shared_d_ff or ffn.moe_d_ff
    return {
        "ffn/routed": 2 * tokens * ffn.n_experts_per_tok * mats(ffn.gated) * d * ffn.moe_d_ff,  # top-k only
        # the shared experts, and (Qwen3-Next) their gate: a d_model × 1 product per token
        "ffn/shared": 2 * tokens * (ffn.n_shared_experts * mats(ffn.gated) * d * shared_ff + (d if ffn.shared_gate else 0)),
        "ffn/router": 2 * tokens * d * ffn.n_routed_experts,
    }


# ---------------------------------------------------------------- per-layer rates, read once per spec (costs.rates)


def group_rates(spec: ModelSpec, group: ResolvedGroup, schedule: str) -> LayerRates:
    """One layer of `group`'s attention (or mixer) FLOPs as rates of its work."""
    return spec.memo(("rates", group.index, schedule), lambda: rates(_of_kind(group.attention, group.layer, schedule)))


def _of_kind(kind: AttentionKind, layer: Layer, schedule: str,
             name: Callable[[str], str | None] | None = None) -> Callable[[Work], dict[str, int]]:
    """A block's FLOPs by component as a function of its work (components renamed by `name`)."""
    if name is None:
        return lambda w: kind.flops(layer, w, schedule)
    renamer = name
    return lambda w: _renamed(kind.flops(layer, w, schedule), renamer)


@dataclass(frozen=True)
class _GroupFlops:
    """A layer group as a pass sees it: its layers, and the rates of one layer's attention, cross-attention (its
    components renamed cross/..., the K and V projections apart) and parallel mixer."""

    group: ResolvedGroup
    n: int
    attention: LayerRates
    cross: LayerRates | None
    cross_kv: int  # weights of the cross-attention's W_K and W_V
    parallel: LayerRates | None


class _PassPlan(NamedTuple):
    """What a pass under a schedule counts whatever its work (once per spec and schedule): the groups that have
    layers, with their rates, every layer's FFN, and the LM head's FLOPs per logit (2·d·V)."""

    groups: tuple[_GroupFlops, ...]
    ffn: LayerRates
    lm_head: int


def _pass_plan(spec: ModelSpec, schedule: str) -> _PassPlan:
    return spec.memo(("pass_plan", schedule), lambda: _PassPlan(_plan_groups(spec, schedule), _ffn_rates(spec),
                                                                2 * spec.d_model * spec.vocab_size))


def _plan_groups(spec: ModelSpec, schedule: str) -> tuple[_GroupFlops, ...]:
    out = []
    for g in spec.groups:
        if not g.layers:
            continue
        cross, kv, parallel = None, 0, None
        if g.cross is not None:
            cross = rates(_of_kind(g.cross, g.cross_layer, schedule, _cross_name))
            kv = sum(w.size for w in g.cross.weights(g.cross_layer)
                     if w.component in ("attn/k", "attn/v") and w.role == "matrix")
        if g.parallel is not None:
            parallel = rates(_of_kind(g.parallel, g.parallel_layer, schedule))
        out.append(_GroupFlops(g, len(g.layers), group_rates(spec, g, schedule), cross, kv, parallel))
    return tuple(out)


def _ffn_rates(spec: ModelSpec) -> LayerRates:
    """Every layer's FFN together, and the blocks of extra weights (their `flops` a token, 'extra/<name>'), as rates of
    the tokens (runs of layers × one layer's FLOPs, in layer order)."""

    def every_layer(w: Work) -> dict[str, int]:
        out: dict[str, int] = {}
        for run in ffn_runs(spec):
            add_times(out, ffn_flops(run.ffn, spec.d_model, w.tokens), run.count)
        out.update({f"extra/{name}": w.tokens * x.flops for name, x in spec.extra_weights.items() if x.flops})
        return out

    return rates(every_layer)


def _renamed(values: dict[str, int], name: Callable[[str], str | None]) -> dict[str, int]:
    """`{name(k): v}` for the components `name` keeps (a later one of the same new name stands, as in a dict
    comprehension)."""
    out: dict[str, int] = {}
    for key, value in values.items():
        new = name(key)
        if new is not None:
            out[new] = value
    return out


def _cross_name(key: str) -> str | None:
    """A cross-attention component's name in a breakdown ('attn/q' -> 'cross/q'); its K and V projections are counted
    apart, over the encoder positions."""
    return None if key in ("attn/k", "attn/v") else f"cross/{key.split('/')[1]}"


def _cross_at(g: _GroupFlops, tokens: int, enc: int, cross_kv: int) -> dict[str, int]:
    """_cross from the group's rates."""
    if g.cross is None or not enc:
        return {}
    out = g.cross.at(Work(tokens, tokens * enc, 0))
    out["cross/kv"] = cross_kv * 2 * enc * g.cross_kv  # W_K and W_V over every encoder position
    return out


def _cross(group: ResolvedGroup, tokens: int, enc: int, cross_kv: int, schedule: str) -> dict[str, int]:
    """One layer's cross-attention: `tokens` queries over `enc` encoder positions, whose K and V are projected
    `cross_kv` times (once per input with a cache; at every step without one)."""
    if group.cross is None or not enc:
        return {}
    layer, att = group.cross_layer, group.cross
    f = att.flops(layer, Work(tokens, tokens * enc, 0), schedule)
    out = _renamed(f, _cross_name)
    kv = sum(w.size for w in att.weights(layer) if w.component in ("attn/k", "attn/v") and w.role == "matrix")
    out["cross/kv"] = cross_kv * 2 * enc * kv  # W_K and W_V over every encoder position
    return out


def encoder_flops(spec: ModelSpec, enc: int) -> dict[str, int]:
    """The encoder's pass over `enc` positions (bidirectional: every query meets every key), by component."""
    e = spec.encoder
    if e is None or not enc:
        return {}

    def compute() -> dict[str, int]:
        assert e is not None
        att = e.attention.flops(Layer(spec.d_model, None, "encoder.attention"), Work(enc, enc * enc, enc), "naive")
        return {"encoder/attn": e.n_layers * sum(att.values()),
                "encoder/ffn": e.n_layers * sum(ffn_flops(e.ffn, spec.d_model, enc).values())}

    return dict(spec.memo(("encoder_flops", enc), compute))  # once per spec and encoder length


# ---------------------------------------------------------------- a pass: a sum over layer groups, never over layers


def forward(spec: ModelSpec, work: WorkFn, tokens: int, logits: int, schedule: str, enc: int = 0,
            cross_kv: int = 0, mtp: bool = False, drafts: int = 0) -> dict[str, int]:
    """FLOPs by component of a pass whose attention work per layer of a group is `work(group)`; `enc` encoder
    positions are attended by cross-attention layers, whose K/V are projected `cross_kv` times; `mtp`: the
    multi-token-prediction layers run beside the model (one more block each, over the same tokens), each block's
    draft logits at `drafts` positions (0: at the pass's `logits`).

    Each group adds (its layers) × (one layer's FLOPs): a component's place in the breakdown is where its first
    layer puts it, as if the layers were added one by one."""
    plan = _pass_plan(spec, schedule)
    total: dict[str, int] = {}
    for g in plan.groups:
        w = work(g.group)
        add_times(total, g.attention.at(w), g.n)
        add_times(total, _cross_at(g, tokens, enc, cross_kv), g.n)
        if g.parallel is not None:  # a constant-state mixer beside the attention: the same tokens, no keys
            add_times(total, g.parallel.at(Work(w.tokens, 0, 0)), g.n)
    add_times(total, plan.ffn.at(Work(tokens, 0, 0)), 1)
    if mtp and spec.mtp_layers:
        add_times(total, _mtp_block(spec, work, tokens, schedule), 1)
        total["mtp/head"] = spec.mtp_layers * (drafts or logits) * plan.lm_head  # each block's drafts, the shared head
    total["lm_head"] = logits * plan.lm_head
    return {k: v for k, v in total.items() if v}


def forward_total(spec: ModelSpec, work: WorkFn, tokens: int, logits: int, schedule: str, enc: int = 0,
                  cross_kv: int = 0, mtp: bool = False, drafts: int = 0) -> int:
    """sum(forward(...).values()), without building the breakdown (what a row of compare or sweep needs)."""
    plan = _pass_plan(spec, schedule)
    total = 0
    for g in plan.groups:
        w = work(g.group)
        layer = g.attention.total(w)
        if g.cross is not None:
            layer += sum(_cross_at(g, tokens, enc, cross_kv).values())
        if g.parallel is not None:
            layer += g.parallel.of_tokens(w.tokens)
        total += g.n * layer
    total += plan.ffn.of_tokens(tokens) + logits * plan.lm_head
    if mtp and spec.mtp_layers:
        total += sum(_mtp_block(spec, work, tokens, schedule).values()) + spec.mtp_layers * (drafts or logits) * plan.lm_head
    return total


def _mtp_block(spec: ModelSpec, work: WorkFn, tokens: int, schedule: str) -> dict[str, int]:
    """DeepSeek-V3 §2.2: mtp_layers blocks like the last layer's (its attention and FFN), after M_k (2·d × d) per token;
    each block's draft then goes through the shared output head (eq. 23), which `forward` adds as 'mtp/head'.

    The block's components are summed by their prefix into 'mtp/attn' and 'mtp/ffn' (until 2026-12-01 each took
    the value of the last component with its prefix, attn/o and ffn/router: an undercount)."""
    group = spec.mtp_group()
    assert group is not None
    n = spec.mtp_layers
    block = Counter(group_rates(spec, group, schedule).at(work(group)))
    block.update(ffn_flops(ffn_of_layer(spec, spec.n_layers - 1), spec.d_model, tokens))
    out: dict[str, int] = {}
    for k, v in block.items():  # every component of the block, summed under its prefix
        key = f"mtp/{k.split('/')[0]}"
        out[key] = out.get(key, 0) + n * v
    out["mtp/proj"] = out.get("mtp/proj", 0) + n * 2 * tokens * 2 * spec.d_model * spec.d_model
    return out


def _naive_expands(mla_cache: str, keys: int, new: int) -> int:
    """Keys up-projected by a naive MLA step: all attended keys from a latent cache, only new ones from an expanded one."""
    return keys if mla_cache == "latent" else new


class Keys(NamedTuple):
    """The key counts of one layer of a group up to position n, each its attention kind's answer (kvcalc.attention):
    the keys the query at n attends and scans, the query–key pairs a causal prefill of n attends and scans, and those
    of the n prefills of lengths 1 … n (generation without a cache). Each pass's work is made of them, so a row of a
    sweep asks a group's kind once at ctx and once at ctx + gen for all its passes (row_flops)."""

    at: int
    scan_at: int
    prefill: int
    scan_prefill: int
    prefills: int
    scan_prefills: int


def keys_up_to(group: ResolvedGroup, n: int) -> Keys:
    """The Keys of one layer of `group` up to position `n`."""
    att = group.attention
    return _keys(att, group.layer, n, _attends_what_it_scans(type(att)))


def _keys(att: AttentionKind, layer: Layer, n: int, scans_only: bool) -> Keys:
    """keys_up_to; `scans_only`: the kind keeps the base class's keys_at, keys_prefill and keys_prefills, so it attends
    every key it scans and its scans are asked, once."""
    at, prefill, prefills = att.scan_at(layer, n), att.scan_prefill(layer, n), att.scan_prefills(layer, n)
    if scans_only:
        return _new(Keys, (at, at, prefill, prefill, prefills, prefills))
    return _new(Keys, (att.keys_at(layer, n), at, att.keys_prefill(layer, n), prefill, att.keys_prefills(layer, n),
                       prefills))


# A named tuple made by tuple.__new__ directly, past the Python-level __new__ its class generates (half the time: a
# row of a sweep makes a dozen Keys and Works).
_new = tuple.__new__


def _attends_what_it_scans(kind: type[AttentionKind]) -> bool:
    """Whether `kind` keeps AttentionKind's keys_at, keys_prefill and keys_prefills, which return its scans (read at
    each call: a kind's methods may be replaced)."""
    return (kind.keys_at is _BASE.keys_at and kind.keys_prefill is _BASE.keys_prefill
            and kind.keys_prefills is _BASE.keys_prefills)


_BASE = AttentionKind


def prefill_work(group: ResolvedGroup, n: int, dense_attn: bool = False) -> Work:
    """What a prefill of `n` tokens does in one layer of `group`: n queries, causal pairs, n keys up-projected."""
    return _prefill_of(keys_up_to(group, n), n, dense_attn)


def _prefill_of(k: Keys, n: int, dense_attn: bool) -> Work:
    """prefill_work from the group's Keys up to n."""
    if dense_attn:  # the N×N matrix, as FLOP-counting libraries count it: no causal mask, window or chunk
        return _new(Work, (n, n * n, n, n * n))
    return _new(Work, (n, k.prefill, n, k.scan_prefill))


def decode_work(group: ResolvedGroup, t: int, mla_cache: str = "latent") -> Work:
    """What the decode step at context `t` does in one layer of `group`: one query over the keys it sees."""
    return _decode_of(keys_up_to(group, t), mla_cache)


def _decode_of(k: Keys, mla_cache: str) -> Work:
    """decode_work from the group's Keys up to t."""
    return _new(Work, (1, k.at, _naive_expands(mla_cache, k.at, 1), k.scan_at))


def _cached_of(prompt: Keys, last: Keys, gen: int, mla_cache: str) -> Work:
    """What the `gen` decode steps after a prompt do in one layer, from its Keys up to the prompt and up to the last
    step: Σ_{t=P+1..P+G} keys_at(t) = keys_prefill(P+G) − keys_prefill(P), and the same for the keys scanned."""
    keys = last.prefill - prompt.prefill
    return _new(Work, (gen, keys, _naive_expands(mla_cache, keys, gen), last.scan_prefill - prompt.scan_prefill))


def _rerun_tokens(prompt: int, last: int) -> int:
    """Queries of the prefills of lengths P+1 … P+G: each step re-runs all t tokens of its prefix."""
    return tri(last) - tri(prompt)


def _rerun_of(prompt: Keys, last: Keys, tokens: int, dense: int | None = None) -> Work:
    """What the prefills of lengths P+1 … P+G (generation without a cache) do in one layer, from its Keys up to P and
    P+G: `tokens` queries and keys up-projected, keys_prefills(P+G) − keys_prefills(P) pairs; `dense` (--dense-attn:
    each prefill's N×N matrix, as _prefill_of) the pairs Σ m² of those prefills instead."""
    if dense is not None:
        return _new(Work, (tokens, dense, tokens, dense))
    return _new(Work, (tokens, last.prefills - prompt.prefills, tokens, last.scan_prefills - prompt.scan_prefills))


def _squares(n: int) -> int:
    """1² + 2² + … + n²."""
    return n * (n + 1) * (2 * n + 1) // 6


def _rerun_dense(prompt: int, last: int, dense_attn: bool) -> int | None:
    """Σ_{m=P+1..P+G} m², the N×N pairs of the prefills generation without a cache re-runs, under --dense-attn."""
    return _squares(last) - _squares(prompt) if dense_attn else None


def layer_attention_flops(group: ResolvedGroup, work: Work, schedule: str) -> dict[str, int]:
    """FLOPs of one attention layer of `group` doing `work` (one sequence), by component."""
    return {k: v for k, v in group.attention.flops(group.layer, work, schedule).items() if v}


def _enc(spec: ModelSpec, s: Settings) -> int:
    return s.encoder_tokens(spec.encoder.source_len if spec.encoder else None)


class Pass(NamedTuple):
    """What `forward` needs of a pass: a layer's work in each group, query tokens, logits, the MLA schedule, encoder
    positions attended, times the cross-attention K/V are projected, whether the MTP layers run, and the positions of
    each MTP layer's draft logits (0: the pass's logits).

    Every layer of a pass runs its `tokens` queries: `work(g).tokens == tokens` in each group (`total` counts on it)."""

    work: WorkFn
    tokens: int
    logits: int
    schedule: str
    enc: int = 0
    cross_kv: int = 0
    mtp: bool = False
    drafts: int = 0

    def breakdown(self, spec: ModelSpec) -> dict[str, int]:
        return forward(spec, self.work, self.tokens, self.logits, self.schedule, self.enc, self.cross_kv, self.mtp,
                       self.drafts)

    def total(self, spec: ModelSpec) -> int:
        """forward_total of the pass, from its coefficients (_Coefficients) where the model has them."""
        k = _pass_coefficients(spec, self)
        if k is None:
            return forward_total(spec, self.work, self.tokens, self.logits, self.schedule, self.enc, self.cross_kv,
                                 self.mtp, self.drafts)
        return k.placed(range(len(k.keyed))).total(self.tokens, self.logits, [self.work(group) for group, *_ in k.keyed])


class _Coefficients(NamedTuple):
    """A pass's forward_total as `const + per_token·tokens + per_logit·logits + Σ (pairs·p + expanded·e + scanned·s)`
    over the groups whose layers attend keys (`keyed`: the group and its three coefficients, for all its layers),
    given its schedule, encoder positions, cross-attention K/V projections and MTP (not its context).

    Read from forward_total itself at unit works, once per spec and those four: the total is affine in the tokens,
    the logits and each group's work wherever every rate in it is a Rates (kvcalc.costs.rates)."""

    const: int
    per_token: int
    per_logit: int
    keyed: tuple[tuple[ResolvedGroup, int, int, int], ...]

    def placed(self, slots: Iterable[int]) -> _Placed:
        """These coefficients with the i-th keyed group's work read from the i-th of `slots`."""
        keyed = tuple((slot, p, e, s) for slot, (_, p, e, s) in zip(slots, self.keyed))
        return _Placed(self.const, self.per_token, self.per_logit, keyed)


class _Placed(NamedTuple):
    """A pass's _Coefficients with each keyed group's named by the place of its work in a list (its slot)."""

    const: int
    per_token: int
    per_logit: int
    keyed: tuple[tuple[int, int, int, int], ...]  # slot; pairs, expanded and scanned coefficients

    def total(self, tokens: int, logits: int, works: list[Work]) -> int:
        """The pass's total at `tokens` and `logits`, `works[slot]` being what a layer of the group in that slot does."""
        total = self.const + self.per_token * tokens + self.per_logit * logits
        for slot, pairs, expanded, scanned in self.keyed:
            _, p, e, sc = works[slot]
            total += pairs * p + expanded * e + scanned * (p if sc < 0 else sc)
        return total


def _pass_coefficients(spec: ModelSpec, p: Pass) -> _Coefficients | None:
    """_coefficients of the pass, once per spec and what they depend on."""
    return spec.memo(("pass_coefficients", p.schedule, p.enc, p.cross_kv, p.mtp, p.drafts), _coefficients, spec, p)


_UNIT_WORKS = (Work(1, 0, 0, 0), Work(0, 1, 0, 0), Work(0, 0, 1, 0), Work(0, 0, 0, 1))


def _coefficients(spec: ModelSpec, p: Pass) -> _Coefficients | None:
    """The pass's coefficients (None where some layer's FLOPs are not affine in its work: forward_total is called)."""
    plan = _pass_plan(spec, p.schedule)
    mtp = spec.mtp_group() if p.mtp else None
    layer_rates = [plan.ffn] + [r for g in plan.groups for r in (g.attention, g.cross, g.parallel) if r is not None]
    layer_rates += [group_rates(spec, mtp, p.schedule)] if mtp is not None else []
    if any(isinstance(r, Direct) for r in layer_rates):
        return None
    zero = Work(0, 0, 0, 0)

    def probe(tokens: int = 0, logits: int = 0, first: int = -1, unit: Work = zero) -> int:
        """forward_total with `unit` the work of the group whose first layer is `first`, none elsewhere."""
        return forward_total(spec, lambda g: unit if g.layers[0] == first else zero, tokens, logits, p.schedule, p.enc,
                             p.cross_kv, p.mtp, p.drafts)

    const = probe()
    per_token, per_logit = probe(tokens=1) - const, probe(logits=1) - const
    keyed = []
    for group in [g.group for g in plan.groups] + ([mtp] if mtp is not None else []):
        tokens, pairs, expanded, scanned = (probe(first=group.layers[0], unit=u) - const for u in _UNIT_WORKS)
        per_token += tokens  # the group's queries are the pass's tokens
        if pairs or expanded or scanned:
            keyed.append((group, pairs, expanded, scanned))
    return _Coefficients(const, per_token, per_logit, tuple(keyed))


def _prefill(spec: ModelSpec, s: Settings, logits: str = "last", schedule: str = "naive") -> Pass:
    if logits not in ("last", "all"):  # any other word was read as "last"
        raise KvcalcError(f"logits must be 'last' (the last position's, as generation needs) or 'all', got {logits!r:.40}")
    n = s.ctx
    return Pass(lambda g: prefill_work(g, n, s.dense_attn), n, n if logits == "all" else 1, schedule, _enc(spec, s),
                cross_kv=1, mtp=s.mtp)


def _decode(spec: ModelSpec, s: Settings) -> Pass:
    ctx, m = s.ctx, step_tokens(spec, s)
    if m > 1:  # a speculative step
        return Pass(lambda g: _verify_of(keys_up_to(g, ctx - 1), keys_up_to(g, ctx), keys_up_to(g, ctx + m - 1), m,
                                         s.mla_cache), m, m, s.schedule, _enc(spec, s), mtp=True, drafts=1)
    return Pass(lambda g: decode_work(g, s.ctx, s.mla_cache), 1, 1, s.schedule, _enc(spec, s), mtp=s.mtp)


def step_tokens(spec: ModelSpec, s: Settings) -> int:
    """Tokens a decode step runs a sequence: one, or under --mtp a speculative step's, the last one and k = mtp_layers
    drafts (vLLM's num_speculative_tokens for a model whose config gives its MTP layers).

    vLLM 0.34.0 verifies all 1 + k in one forward of the model (v1/core/sched/scheduler.py: num_tokens_with_spec),
    logits at each, and its drafter's first pass runs the MTP layer over the same 1 + k positions
    (v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py: "num_speculative_steps + 1 tokens"), a draft logit
    a sequence; with k > 1 modules its MultiModuleMTPSpeculator runs every module so (multi_module_mtp/speculator.py
    _generate_drafts), as kvcalc counts them."""
    return 1 + spec.mtp_layers if s.mtp else 1


def _verify_of(before: Keys, first: Keys, last: Keys, m: int, mla_cache: str) -> Work:
    """What a step verifying `m` tokens at positions ctx … ctx + m − 1 does in one layer, from its Keys up to ctx − 1
    (`before`), ctx (`first`) and ctx + m − 1 (`last`): each query's pairs and scans as its own decode step would,
    Σ keys_at = keys_prefill(last) − keys_prefill(before) (and the scans alike).

    One pass rebuilds each key it attends once (naive MLA from a latent cache, as a prefill does): the union of the
    queries' keys. Each query's keys run from where the first's start (windows and chunks start no earlier later on)
    to itself, so the union is keys_at(ctx) + m − 1; where a query attends a selection of what it scans (DSA's top-k,
    whose union the selections decide), each query's own are counted, at most every key the pass sees (scan_at(ctx)
    + m − 1)."""
    pairs, scans = last.prefill - before.prefill, last.scan_prefill - before.scan_prefill
    union = first.at + m - 1 if last.at == last.scan_at else min(pairs, first.scan_at + m - 1)
    return _new(Work, (m, pairs, union if mla_cache == "latent" else m, scans))


def _generate(spec: ModelSpec, s: Settings, cached: bool) -> Pass:
    prompt, gen = s.ctx, s.gen
    last = prompt + gen
    if cached:
        return Pass(lambda g: _cached_of(keys_up_to(g, prompt), keys_up_to(g, last), gen, s.mla_cache), gen, gen,
                    s.schedule, _enc(spec, s), mtp=s.mtp)
    tokens, dense = _rerun_tokens(prompt, last), _rerun_dense(prompt, last, s.dense_attn)
    return Pass(lambda g: _rerun_of(keys_up_to(g, prompt), keys_up_to(g, last), tokens, dense), tokens, gen, "naive",
                _enc(spec, s), cross_kv=gen, mtp=s.mtp)  # no cache: K/V every step


def prefill_flops(spec: ModelSpec, s: Settings, logits: str = "last") -> dict[str, int]:
    """FLOPs of a prefill of `s.ctx` tokens for each of `s.batch` sequences, by component (encoder–decoder models:
    the encoder's pass and the cross-attention K/V projections too); `logits`: the LM head at the last position
    ('last', as generation needs) or at all ctx ('all', as training does)."""
    p = _prefill(spec, s, logits)
    out = Counter(p.breakdown(spec))
    out.update(encoder_flops(spec, p.enc))
    return {k: s.batch * v for k, v in out.items() if v}


def decode_flops(spec: ModelSpec, s: Settings) -> dict[str, int]:
    """FLOPs of one decode step at context `s.ctx` (the new token at position ctx) for `s.batch` sequences; under
    --mtp of a model with MTP layers a speculative step (step_tokens: 1 + k tokens at positions ctx … ctx + k)."""
    return {k: s.batch * v for k, v in _decode(spec, s).breakdown(spec).items()}


def generate_flops(spec: ModelSpec, s: Settings, cached: bool = True) -> dict[str, int]:
    """FLOPs of generating `s.gen` tokens after a prompt of `s.ctx`, with a KV cache (decode steps) or without
    (every step re-runs a prefill of its prefix; MLA then up-projects, as a prefill does)."""
    if type(cached) is not bool:  # cached="False" is truthy: it gave the cached figure
        raise KvcalcError(f"cached must be True or False, got {brief(cached)}")
    return {k: s.batch * v for k, v in _generate(spec, s, cached).breakdown(spec).items()}


def prefill_total(spec: ModelSpec, s: Settings, logits: str = "last", schedule: str = "naive") -> int:
    """sum(prefill_flops(spec, s, logits).values()), without the breakdown; `schedule` 'absorbed': with MLA's layers
    attending in the latent space, as the engines run some MLA prefills (prefill_form.absorbed_ranges, README)."""
    p = _prefill(spec, s, logits, schedule)
    encoder = sum(encoder_flops(spec, p.enc).values()) if p.enc else 0
    return s.batch * (p.total(spec) + encoder)


def decode_total(spec: ModelSpec, s: Settings) -> int:
    """sum(decode_flops(spec, s).values()), without the breakdown."""
    return s.batch * _decode(spec, s).total(spec)


def generate_total(spec: ModelSpec, s: Settings, cached: bool = True) -> int:
    """sum(generate_flops(spec, s, cached).values()), without the breakdown."""
    return s.batch * _generate(spec, s, cached).total(spec)


class RowFlops(NamedTuple):
    """The FLOPs of a row of compare or sweep, for the batch: prefill_total, decode_total, generate_total with and
    without a cache, and (models with decode schedules) decode_total under each schedule cost_breakdowns reports."""

    prefill: int
    decode: int
    generate_cached: int
    generate_uncached: int
    decode_by_schedule: dict[str, int]


class RowPasses(NamedTuple):
    """A row's passes apart from their context (row_flops): the groups some pass attends keys in (their slots), each
    pass's coefficients placed by those slots, and the encoder's FLOPs of one prefill."""

    slots: tuple[tuple[AttentionKind, Layer, bool], ...]  # each keyed group's kind and layer, and whether it attends what it scans
    prefill: _Placed
    decode: tuple[tuple[str, _Placed], ...]  # the schedule in effect first
    cached: _Placed
    uncached: _Placed
    encoder: int
    schedules: bool  # whether the model has decode schedules (spec.has_schedules)


def row_flops(spec: ModelSpec, s: Settings) -> RowFlops:
    """prefill_total, decode_total (under each schedule) and generate_total cached and uncached at `s`, the same
    integers, with each keyed group's kind asked once at ctx and once at ctx + gen for all of them (Keys), and the
    passes' coefficients read once per spec and settings apart from the context (row_passes)."""
    return row_flops_with(spec, s, row_passes(spec, s))


def row_passes(spec: ModelSpec, s: Settings) -> RowPasses | None:
    """The RowPasses of `spec` at settings `s` (their context not read), once per spec and settings; None where some
    layer is not affine in its work."""
    return spec.memo(("row_passes", s.mla_cache, s.mla_schedule, s.enc_ctx, s.mtp, s.gen), _row_passes, spec, s)


def row_flops_with(spec: ModelSpec, s: Settings, plan: RowPasses | None) -> RowFlops:
    """row_flops from row_passes(spec, s) (a sweep makes them once per model and settings)."""
    if plan is None:  # some layer is not affine in its work: each pass on its own
        return _row_apart(spec, s)
    ctx, gen, batch, cache = s.ctx, s.gen, s.batch, s.mla_cache
    last = ctx + gen
    prompt = [_keys(att, layer, ctx, only) for att, layer, only in plan.slots]
    after = [_keys(att, layer, last, only) for att, layer, only in plan.slots]
    prefill = plan.prefill.total(ctx, 1, [_prefill_of(k, ctx, s.dense_attn) for k in prompt])  # logits: the last
    m = step_tokens(spec, s)  # a speculative step's 1 + k under --mtp (_decode)
    if m == 1:
        steps = [_decode_of(k, cache) for k in prompt]  # one work for every schedule
    else:
        steps = [_verify_of(_keys(att, layer, ctx - 1, only), k, _keys(att, layer, ctx + m - 1, only), m, cache)
                 for k, (att, layer, only) in zip(prompt, plan.slots)]
    decodes = {name: batch * k.total(m, m, steps) for name, k in (plan.decode if plan.schedules else plan.decode[:1])}
    cached = plan.cached.total(gen, gen, [_cached_of(p, a, gen, cache) for p, a in zip(prompt, after)])
    tokens, dense = _rerun_tokens(ctx, last), _rerun_dense(ctx, last, s.dense_attn)
    uncached = plan.uncached.total(tokens, gen, [_rerun_of(p, a, tokens, dense) for p, a in zip(prompt, after)])
    return _new(RowFlops, (batch * (prefill + plan.encoder), decodes[plan.decode[0][0]], batch * cached,
                           batch * uncached, decodes if plan.schedules else {}))


def _row_schedules(spec: ModelSpec, s: Settings) -> list[str]:
    """The schedule in effect, then the others a row reports (MLA: naive, and absorbed with a latent cache)."""
    names = ["naive", "absorbed"] if s.mla_cache == "latent" else ["naive"]
    return [s.schedule] + [name for name in names if name != s.schedule and spec.has_schedules()]


def _row_passes(spec: ModelSpec, s: Settings) -> RowPasses | None:
    """The row's passes as _prefill, _decode and _generate make them, with their coefficients (None where a pass has
    none)."""
    passes = [_prefill(spec, s), *(_decode(spec, s.with_schedule(name)) for name in _row_schedules(spec, s)),
              _generate(spec, s, True), _generate(spec, s, False)]
    coefficients = [_pass_coefficients(spec, p) for p in passes]
    if any(k is None for k in coefficients):
        return None
    groups: dict[int, ResolvedGroup] = {}  # by first layer (the MTP group's follow the model's)
    for k in coefficients:
        assert k is not None
        groups.update({g.layers[0]: g for g, *_ in k.keyed})
    slot = {first: i for i, first in enumerate(groups)}
    placed = [k.placed(slot[g.layers[0]] for g, *_ in k.keyed) for k in coefficients if k is not None]
    encoder = sum(encoder_flops(spec, passes[0].enc).values()) if passes[0].enc else 0
    decode = tuple((p.schedule, k) for p, k in zip(passes[1:-2], placed[1:-2]))
    slots = tuple((g.attention, g.layer, _attends_what_it_scans(type(g.attention))) for g in groups.values())
    return RowPasses(slots, placed[0], decode, placed[-2], placed[-1], encoder, spec.has_schedules())


def _row_apart(spec: ModelSpec, s: Settings) -> RowFlops:
    """row_flops, each total computed on its own."""
    decodes = {name: decode_total(spec, s.with_schedule(name)) for name in _row_schedules(spec, s)}
    return RowFlops(prefill_total(spec, s), decodes[s.schedule], generate_total(spec, s, True),
                    generate_total(spec, s, False), decodes if spec.has_schedules() else {})


def attention_part(breakdown: dict[str, int]) -> int:
    """The attention FLOPs that grow with context: scores, mixing and (MLA naive) key/value rebuilding."""
    return sum(v for k, v in breakdown.items() if k in ("attn/scores", "attn/mix", "attn/kv_up"))


def mla_crossover(spec: ModelSpec, s: Settings, limit: int = MAX_TOKENS) -> int | None:
    """The first context t at which the absorbed decode step needs fewer FLOPs than the naive one (None: never by
    `limit`, the largest context kvcalc takes, or no choice of schedule). Both are affine in the keys attended, so the cheaper one changes at most once,
    unless MLA layers are chunked (crossover_holds)."""
    if not spec.has_schedules() or s.mla_cache == "expanded":
        return None
    return spec.memo(("mla_crossover", s.mla_cache, limit), lambda: _crossover(spec, s.mla_cache, limit))


def crossover_holds(spec: ModelSpec) -> bool:
    """Whether the absorbed step stays cheaper at every context past mla_crossover: yes unless some MLA layer is
    chunked, whose keys fall back to 1 at each chunk start, so naive may be cheaper again for a stretch."""
    return not any(g.layer.chunk and g.attention.schedules for g in spec.groups)


def _crossover(spec: ModelSpec, mla_cache: str, limit: int) -> int | None:
    """mla_crossover in closed form (it depends on the spec and the cache layout only, so a sweep finds it once).

    The gap naive − absorbed of a decode step at t is a sum over layer groups of rates times the keys a layer attends
    and scans at t, each min(t, cap) (its window, the indexer's top-k): so it is affine between the caps, and
    first_positive solves it. Chunked attention, whose keys rise and fall, is solved by _chunked_crossover."""
    one = Settings(ctx=1, mla_cache=mla_cache)

    def gap(t: int) -> int:  # positive where the absorbed step is cheaper
        at = one.at(t)
        return decode_total(spec, at.with_schedule("naive")) - decode_total(spec, at.with_schedule("absorbed"))

    chunks = sorted({g.layer.chunk for g in spec.groups if g.layer.chunk and g.attention.schedules})
    if chunks:
        return _chunked_crossover(spec, gap, chunks, mla_cache, limit)
    caps = {f(g.layer, limit) for g in spec.groups for f in (g.attention.keys_at, g.attention.scan_at)}
    return first_positive(gap, caps, limit)


MAX_CHUNK_ENDS = 1 << 17  # chunk ends _chunked_crossover may check (only MLA chunked at several sizes comes near)


def _chunked_crossover(spec: ModelSpec, gap: Callable[[int], int], chunks: list[int], mla_cache: str,
                       limit: int) -> int | None:
    """mla_crossover where MLA layers are chunked: their keys fall back to 1 at each chunk start, so the gap rises and
    falls, and neither first_positive nor a binary search applies.

    Every key attended costs the naive step more than the absorbed one (MLA.flops: 2·n_h·(d_c·(d_nope + d_v) + d_nope
    + d_R + d_v) against 2·n_h·(2·d_c + d_R), a difference of 2·n_h·(d_c·(d_nope + d_v − 2) + d_nope + d_v) > 0 as
    every dim is >= 1), so the gap grows with the keys of each layer. The same model with each chunk C made a window
    C attends min(t, C) keys, never fewer: its gap, solved in closed form, bounds ours from above and equals it at
    every multiple of L = lcm of the chunks. So the first t lies between that bound's first t0 and the next multiple
    of L; between chunk starts the gap only rises, so each stretch there is checked at its end and searched."""
    t0 = _crossover(_chunks_as_windows(spec), mla_cache, limit)
    if t0 is None:
        return None
    period = math.lcm(*chunks)
    bound = min(limit, -(-t0 // period) * period)
    resets = [c for c in chunks if c > 1]  # a chunk of 1 always attends one key: its starts break no rise
    if sum((bound - t0) // c + 1 for c in resets) > MAX_CHUNK_ENDS:
        raise KvcalcError(f"{spec.name}: mla_crossover: MLA layers chunked at {', '.join(f'{c:,}' for c in chunks)} "
                          f"tokens repeat only every {period:,}: the crossover is not computed")
    ends = sorted({e for c in resets for e in range(-(-t0 // c) * c, bound + 1, c)} | {bound})
    start = t0
    for end in ends:
        if gap(end) > 0:
            lo, hi = start - 1, end  # gap(lo) <= 0 < gap(hi): lo is below t0, or the end of a stretch checked
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (lo, mid) if gap(mid) > 0 else (mid, hi)
            return hi
        start = end + 1
    return None


def _chunks_as_windows(spec: ModelSpec) -> ModelSpec:
    """The same model with each attention chunk C made a sliding window C: a query then sees min(t, C) keys, never
    fewer than under the chunk, and as many at every multiple of C."""
    data = spec.model_dump(exclude_none=True)
    for group in data["layer_groups"]:
        if "attention_chunk_size" in group:
            group["sliding_window"] = group.pop("attention_chunk_size")
    return ModelSpec.model_validate(data)


def first_positive(gap: Callable[[int], int], caps: set[int], limit: int) -> int | None:
    """The first t in 1 … limit where `gap` is positive (None: none), for a gap that is affine between the `caps`.

    From its values at 1, the caps and `limit`, the t is solved on its segment, then checked against the gap itself
    at t and t − 1; where that does not hold, or the gap falls somewhere (so the first t is not what a binary search
    finds), the answer is the binary search's."""
    points = sorted({1, limit} | {c for c in caps if 1 < c < limit})
    values = [gap(t) for t in points]
    if any(b < a for a, b in zip(values, values[1:])):
        return _search(gap, limit)
    if values[0] > 0:
        return 1
    if values[-1] <= 0:
        return None
    i = next(i for i, v in enumerate(values) if v > 0)
    (a, b), (va, vb) = points[i - 1:i + 1], values[i - 1:i + 1]
    t = a + (-va * (b - a)) // (vb - va) + 1  # the first t with va + (t − a)·(vb − va)/(b − a) > 0
    return t if gap(t) > 0 >= gap(t - 1) else _search(gap, limit)


def _search(gap: Callable[[int], int], limit: int) -> int | None:
    """The binary search for a t in 1 … limit where gap turns positive (the first one when gap never falls)."""
    if gap(1) > 0:
        return 1
    if gap(limit) <= 0:
        return None
    lo, hi = 1, limit  # gap(lo) <= 0 < gap(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if gap(mid) > 0 else (mid, hi)
    return hi
