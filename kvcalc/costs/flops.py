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
- MLA: prefill up-projects the prompt's K and V once and attends per head (every engine does). Decode follows the
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

from collections import Counter
from collections.abc import Callable

from kvcalc.attention import Layer, Work, tri
from kvcalc.costs.params import ffn_of_layer
from kvcalc.settings import Settings
from kvcalc.spec import DenseFFN, ModelSpec, MoEFFN, NoFFN, ResolvedGroup

WorkFn = Callable[[ResolvedGroup], Work]  # group -> what one of its layers does in the pass


def _ffn(spec: ModelSpec, layer: int, tokens: int) -> dict[str, int]:
    return ffn_flops(ffn_of_layer(spec, layer), spec.d_model, tokens)


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


def _cross(group: ResolvedGroup, tokens: int, enc: int, cross_kv: int, schedule: str) -> dict[str, int]:
    """One layer's cross-attention: `tokens` queries over `enc` encoder positions, whose K and V are projected
    `cross_kv` times (once per input with a cache; at every step without one)."""
    if group.cross is None or not enc:
        return {}
    layer, att = group.cross_layer, group.cross
    f = att.flops(layer, Work(tokens, tokens * enc, 0), schedule)
    out = {f"cross/{k.split('/')[1]}": v for k, v in f.items() if k not in ("attn/k", "attn/v")}
    kv = sum(w.size for w in att.weights(layer) if w.component in ("attn/k", "attn/v") and w.role == "matrix")
    out["cross/kv"] = cross_kv * 2 * enc * kv  # W_K and W_V over every encoder position
    return out


def encoder_flops(spec: ModelSpec, enc: int) -> dict[str, int]:
    """The encoder's pass over `enc` positions (bidirectional: every query meets every key), by component."""
    e = spec.encoder
    if e is None or not enc:
        return {}
    att = e.attention.flops(Layer(spec.d_model, None, "encoder.attention"), Work(enc, enc * enc, enc), "naive")
    return {"encoder/attn": e.n_layers * sum(att.values()),
            "encoder/ffn": e.n_layers * sum(ffn_flops(e.ffn, spec.d_model, enc).values())}


def forward(spec: ModelSpec, work: WorkFn, tokens: int, logits: int, schedule: str, enc: int = 0,
            cross_kv: int = 0, mtp: bool = False) -> dict[str, int]:
    """FLOPs by component of a pass whose attention work per layer of a group is `work(group)`; `enc` encoder
    positions are attended by cross-attention layers, whose K/V are projected `cross_kv` times; `mtp`: the
    multi-token-prediction layers run beside the model (one more block each, over the same tokens)."""
    total: Counter = Counter()
    for group in spec.groups:
        layer_attn = Counter(group.attention.flops(group.layer, work(group), schedule))
        layer_attn.update(_cross(group, tokens, enc, cross_kv, schedule))
        if group.parallel is not None:  # a constant-state mixer beside the attention: the same tokens, no keys
            layer_attn.update(group.parallel.flops(group.parallel_layer, Work(work(group).tokens, 0, 0), schedule))
        for _ in group.layers:
            total.update(layer_attn)
    for layer in range(spec.n_layers):
        total.update(_ffn(spec, layer, tokens))
    mtp_group = spec.mtp_group() if mtp else None
    if mtp_group is not None:  # DeepSeek-V3 §2.2: a block like the last layer's, after M_k (2·d × d) per token
        n, last = spec.mtp_layers, spec.n_layers - 1
        block = Counter(mtp_group.attention.flops(mtp_group.layer, work(mtp_group), schedule))
        block.update(_ffn(spec, last, tokens))
        total.update({f"mtp/{k.split('/')[0]}": n * v for k, v in block.items()})
        total["mtp/proj"] += n * 2 * tokens * 2 * spec.d_model * spec.d_model
    total["lm_head"] = 2 * logits * spec.d_model * spec.vocab_size
    return {k: v for k, v in total.items() if v}


def _naive_expands(mla_cache: str, keys: int, new: int) -> int:
    """Keys up-projected by a naive MLA step: all attended keys from a latent cache, only new ones from an expanded one."""
    return keys if mla_cache == "latent" else new


def prefill_work(group: ResolvedGroup, n: int, dense_attn: bool = False) -> Work:
    """What a prefill of `n` tokens does in one layer of `group`: n queries, causal pairs, n keys up-projected."""
    att, layer = group.attention, group.layer
    if dense_attn:  # the N×N matrix, as FLOP-counting libraries count it
        return Work(n, n * n, n, n * n)
    return Work(n, att.keys_prefill(layer, n), n, att.scan_prefill(layer, n))


def decode_work(group: ResolvedGroup, t: int, mla_cache: str = "latent") -> Work:
    """What the decode step at context `t` does in one layer of `group`: one query over the keys it sees."""
    att, layer = group.attention, group.layer
    keys = att.keys_at(layer, t)
    return Work(1, keys, _naive_expands(mla_cache, keys, 1), att.scan_at(layer, t))


def layer_attention_flops(group: ResolvedGroup, work: Work, schedule: str) -> dict[str, int]:
    """FLOPs of one attention layer of `group` doing `work` (one sequence), by component."""
    return {k: v for k, v in group.attention.flops(group.layer, work, schedule).items() if v}


def _enc(spec: ModelSpec, s: Settings) -> int:
    return s.encoder_tokens(spec.encoder.source_len if spec.encoder else None)


def prefill_flops(spec: ModelSpec, s: Settings, logits: str = "last") -> dict[str, int]:
    """FLOPs of a prefill of `s.ctx` tokens for each of `s.batch` sequences, by component (encoder–decoder models:
    the encoder's pass and the cross-attention K/V projections too)."""
    n, enc = s.ctx, _enc(spec, s)
    out = Counter(forward(spec, lambda g: prefill_work(g, n, s.dense_attn), n, n if logits == "all" else 1, "naive",
                          enc, cross_kv=1, mtp=s.mtp))
    out.update(encoder_flops(spec, enc))
    return {k: s.batch * v for k, v in out.items() if v}


def decode_flops(spec: ModelSpec, s: Settings) -> dict[str, int]:
    """FLOPs of one decode step at context `s.ctx` (the new token at position ctx) for `s.batch` sequences."""
    out = forward(spec, lambda g: decode_work(g, s.ctx, s.mla_cache), 1, 1, s.schedule, _enc(spec, s), mtp=s.mtp)
    return {k: s.batch * v for k, v in out.items()}


def generate_flops(spec: ModelSpec, s: Settings, cached: bool = True) -> dict[str, int]:
    """FLOPs of generating `s.gen` tokens after a prompt of `s.ctx`, with a KV cache (decode steps) or without
    (every step re-runs a prefill of its prefix; MLA then up-projects, as a prefill does)."""
    prompt, gen = s.ctx, s.gen
    last = prompt + gen
    if cached:
        def work(g: ResolvedGroup) -> Work:
            att, layer = g.attention, g.layer
            keys = att.keys_prefill(layer, last) - att.keys_prefill(layer, prompt)  # Σ_{t=P+1..P+G} keys_at(t)
            scanned = att.scan_prefill(layer, last) - att.scan_prefill(layer, prompt)
            return Work(gen, keys, _naive_expands(s.mla_cache, keys, gen), scanned)

        out = forward(spec, work, gen, gen, s.schedule, _enc(spec, s), mtp=s.mtp)
    else:
        tokens = tri(last) - tri(prompt)  # each step re-runs all t tokens of its prefix

        def work(g: ResolvedGroup) -> Work:
            att, layer = g.attention, g.layer
            pairs = att.keys_prefills(layer, last) - att.keys_prefills(layer, prompt)
            return Work(tokens, pairs, tokens, att.scan_prefills(layer, last) - att.scan_prefills(layer, prompt))

        out = forward(spec, work, tokens, gen, "naive", _enc(spec, s), cross_kv=gen, mtp=s.mtp)  # no cache: K/V every step
    return {k: s.batch * v for k, v in out.items()}


def attention_part(breakdown: dict[str, int]) -> int:
    """The attention FLOPs that grow with context: scores, mixing and (MLA naive) key/value rebuilding."""
    return sum(v for k, v in breakdown.items() if k in ("attn/scores", "attn/mix", "attn/kv_up"))


def mla_crossover(spec: ModelSpec, s: Settings, limit: int = 1 << 30) -> int | None:
    """The first context t at which the absorbed decode step needs fewer FLOPs than the naive one (None: never by
    `limit`, or no choice of schedule). Both are affine in the keys attended, so the cheaper one changes at most once."""
    if not spec.has_schedules() or s.mla_cache == "expanded":
        return None
    return spec.memo(("mla_crossover", s.mla_cache, limit), lambda: _crossover(spec, s.mla_cache, limit))


def _crossover(spec: ModelSpec, mla_cache: str, limit: int) -> int | None:
    """mla_crossover's search (it depends on the spec and the cache layout only, so a sweep runs it once)."""
    one = Settings(ctx=1, mla_cache=mla_cache)

    def cheaper(t: int) -> bool:
        at = one.at(t)
        return sum(decode_flops(spec, at.with_schedule("absorbed")).values()) < sum(
            decode_flops(spec, at.with_schedule("naive")).values())

    if cheaper(1):
        return 1
    if not cheaper(limit):
        return None
    lo, hi = 1, limit  # cheaper(lo) is False, cheaper(hi) is True
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if cheaper(mid) else (mid, hi)
    return hi
