"""FLOPs by component for prefill, one decode step, and generation with and without a KV cache.

Conventions (also in the README):
- FLOPs, not MACs: a product of an m×k and a k×n matrix costs 2·m·n·k. Only matrix products are counted;
  norms, softmax, activations, RoPE, residual adds and biases are O(tokens·d) and left out.
- Causal attention: query i (1-based) meets min(i, W) keys, W the layer's window (∞ without one). So a prefill of
  N tokens scores Σ_{i≤N} min(i, W) query–key pairs, about N²/2; `dense_attn` counts the N×N matrix instead, as
  FLOP-counting libraries (and nanoGPT's sizing notebook) do.
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
- Linear (constant-state) layers: their projections are not described by the spec and count 0.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable

from kvcalc.costs.params import ffn_of_layer
from kvcalc.errors import KvcalcError
from kvcalc.spec import MLA, DenseFFN, Linear, ModelSpec, ResolvedGroup

MLA_SCHEDULES = ("naive", "absorbed")


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


@dataclass(frozen=True)
class Work:
    """What one pass does in every layer of a group: query tokens, query–key pairs, keys up-projected (MLA naive)."""

    tokens: int
    pairs: int
    expanded: int


WorkFn = Callable[[int | None], Work]  # window -> work of one layer with that window


def _attention(group: ResolvedGroup, d: int, w: Work, schedule: str) -> dict[str, int]:
    """FLOPs of one attention layer of `group` doing `w`."""
    att, T = group.attention, w.tokens
    if isinstance(att, Linear):
        return {}
    if not isinstance(att, MLA):
        n_h, d_h = att.n_heads, group.head_dim
        n_kv = {"mha": n_h, "mqa": 1}.get(att.kind) or att.n_kv_heads
        return {
            "attn/q": 2 * T * d * n_h * d_h,
            "attn/k": 2 * T * d * n_kv * d_h,
            "attn/v": 2 * T * d * n_kv * d_h,
            "attn/scores": 2 * w.pairs * n_h * d_h,  # QKᵀ: each query head meets its (shared) key head
            "attn/mix": 2 * w.pairs * n_h * d_h,  # AV
            "attn/o": 2 * T * n_h * d_h * d,
        }
    n_h, d_c, d_r = att.n_heads, att.kv_lora_rank, att.qk_rope_head_dim
    nope, d_v = att.qk_nope_head_dim, att.v_head_dim
    out = {}
    if att.q_lora_rank:
        out["attn/q_down"] = 2 * T * d * att.q_lora_rank  # W_DQ
        out["attn/q_up"] = 2 * T * att.q_lora_rank * n_h * (nope + d_r)  # W_UQ, W_QR
    else:
        out["attn/q"] = 2 * T * d * n_h * (nope + d_r)
    out["attn/kv_down"] = 2 * T * d * (d_c + d_r)  # W_DKV and W_KR: the latent c_KV and the RoPE key
    if schedule == "naive":
        out["attn/kv_up"] = 2 * w.expanded * d_c * n_h * (nope + d_v)  # W_UK, W_UV on every key rebuilt
        out["attn/scores"] = 2 * w.pairs * n_h * (nope + d_r)
        out["attn/mix"] = 2 * w.pairs * n_h * d_v
    else:
        out["attn/q_absorb"] = 2 * T * n_h * nope * d_c  # q_nope·W_UK per head: the query in latent space
        out["attn/scores"] = 2 * w.pairs * n_h * (d_c + d_r)  # against c_KV and the shared RoPE key
        out["attn/mix"] = 2 * w.pairs * n_h * d_c  # A·c_KV in latent space
        out["attn/v_up"] = 2 * T * n_h * d_c * d_v  # W_UV folded into the output
    out["attn/o"] = 2 * T * n_h * d_v * d
    return out


def _ffn(spec: ModelSpec, layer: int, tokens: int) -> dict[str, int]:
    ffn, d = ffn_of_layer(spec, layer), spec.d_model
    mats = lambda gated: 3 if gated else 2  # noqa: E731  gate/up/down or up/down
    if isinstance(ffn, DenseFFN):
        return {"ffn/dense": 2 * tokens * mats(ffn.gated) * d * ffn.d_ff}
    shared_ff = ffn.shared_d_ff or ffn.moe_d_ff
    return {
        "ffn/routed": 2 * tokens * ffn.n_experts_per_tok * mats(ffn.gated) * d * ffn.moe_d_ff,  # top-k only
        "ffn/shared": 2 * tokens * ffn.n_shared_experts * mats(ffn.gated) * d * shared_ff,
        "ffn/router": 2 * tokens * d * ffn.n_routed_experts,
    }


def forward(spec: ModelSpec, work: WorkFn, tokens: int, logits: int, schedule: str) -> dict[str, int]:
    """FLOPs by component of a pass whose attention work per layer is `work(window)`."""
    total: Counter = Counter()
    for group in spec.groups:
        layer_attn = _attention(group, spec.d_model, work(group.sliding_window), schedule)
        for _ in group.layers:
            total.update(layer_attn)
    for layer in range(spec.n_layers):
        total.update(_ffn(spec, layer, tokens))
    total["lm_head"] = 2 * logits * spec.d_model * spec.vocab_size
    return {k: v for k, v in total.items() if v}


def resolve_schedule(mla_cache: str, mla_schedule: str | None) -> str:
    """The MLA decode schedule: as asked, else absorbed from a latent cache and naive from an expanded one."""
    if mla_schedule is None:
        return "absorbed" if mla_cache == "latent" else "naive"
    _check(mla_schedule, mla_cache)
    return mla_schedule


def _check(schedule: str, mla_cache: str) -> None:
    if schedule not in MLA_SCHEDULES:
        raise KvcalcError(f"unknown MLA schedule {schedule!r}: choose naive or absorbed")
    if schedule == "absorbed" and mla_cache == "expanded":
        raise KvcalcError("--mla-schedule absorbed attends in the latent space: it needs --mla-cache latent")


def _naive_expands(mla_cache: str, keys: int, new: int) -> int:
    """Keys up-projected by a naive MLA step: all attended keys from a latent cache, only new ones from an expanded one."""
    return keys if mla_cache == "latent" else new


def prefill_work(n: int, window: int | None, dense_attn: bool = False) -> Work:
    """What a prefill of `n` tokens does in one layer with `window`: n queries, causal pairs, n keys up-projected."""
    return Work(n, n * n if dense_attn else keys_seen(n, window), n)


def decode_work(t: int, window: int | None, mla_cache: str = "latent") -> Work:
    """What the decode step at context `t` does in one layer: one query over min(t, W) keys."""
    keys = min(t, window) if window else t
    return Work(1, keys, _naive_expands(mla_cache, keys, 1))


def layer_attention_flops(spec: ModelSpec, group: ResolvedGroup, work: Work, schedule: str) -> dict[str, int]:
    """FLOPs of one attention layer of `group` doing `work` (one sequence), by component."""
    return {k: v for k, v in _attention(group, spec.d_model, work, schedule).items() if v}


def prefill_flops(spec: ModelSpec, n: int, batch: int = 1, dense_attn: bool = False, logits: str = "last") -> dict[str, int]:
    """FLOPs of a prefill of `n` tokens for each of `batch` sequences, by component."""
    out = forward(spec, lambda w: prefill_work(n, w, dense_attn), n, n if logits == "all" else 1, "naive")
    return {k: batch * v for k, v in out.items()}


def decode_flops(spec: ModelSpec, t: int, batch: int = 1, schedule: str = "absorbed", mla_cache: str = "latent") -> dict[str, int]:
    """FLOPs of one decode step at context `t` (the new token at position t) for `batch` sequences."""
    _check(schedule, mla_cache)
    out = forward(spec, lambda w: decode_work(t, w, mla_cache), 1, 1, schedule)
    return {k: batch * v for k, v in out.items()}


def generate_flops(spec: ModelSpec, prompt: int, gen: int, batch: int = 1, cached: bool = True,
                   schedule: str = "absorbed", mla_cache: str = "latent") -> dict[str, int]:
    """FLOPs of generating `gen` tokens after a `prompt`, with a KV cache (decode steps) or without (re-prefills)."""
    _check(schedule, mla_cache)
    last = prompt + gen
    if cached:
        def work(w):
            keys = keys_seen(last, w) - keys_seen(prompt, w)  # Σ_{t=P+1..P+G} min(t, W)
            return Work(gen, keys, _naive_expands(mla_cache, keys, gen))

        out = forward(spec, work, gen, gen, schedule)
    else:
        tokens = tri(last) - tri(prompt)  # each step re-runs all t tokens of its prefix

        def work(w):
            return Work(tokens, keys_seen_sum(last, w) - keys_seen_sum(prompt, w), tokens)

        out = forward(spec, work, tokens, gen, "naive")
    return {k: batch * v for k, v in out.items()}


def attention_part(breakdown: dict[str, int]) -> int:
    """The attention FLOPs that grow with context: scores, mixing and (MLA naive) key/value rebuilding."""
    return sum(v for k, v in breakdown.items() if k in ("attn/scores", "attn/mix", "attn/kv_up"))


def mla_crossover(spec: ModelSpec, mla_cache: str = "latent", limit: int = 1 << 30) -> int | None:
    """The first context t at which the absorbed decode step needs fewer FLOPs than the naive one (None: never by `limit`).

    Both are affine in the keys attended, so the cheaper schedule changes at most once as context grows.
    """
    if not any(isinstance(g.attention, MLA) for g in spec.groups) or mla_cache == "expanded":
        return None
    cheaper = lambda t: sum(decode_flops(spec, t, schedule="absorbed").values()) < sum(  # noqa: E731
        decode_flops(spec, t, schedule="naive", mla_cache=mla_cache).values())
    if cheaper(1):
        return 1
    if not cheaper(limit):
        return None
    lo, hi = 1, limit  # cheaper(lo) is False, cheaper(hi) is True
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if cheaper(mid) else (mid, hi)
    return hi
