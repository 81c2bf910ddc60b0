"""Numerical checks of a run: equalities the papers state, measured as the max error between two computations.

- Cached decoding gives the outputs of recomputing full attention over the whole sequence (with DeepSeek Sparse
  Attention, over the keys the run selected, each selection its top-k up to a near tie).
- DeepSeek Sparse Attention: each of the run's selections is the top-k of the indexer's scores written out densely
  here, apart from the run's scoring and selection code (up to a near tie at the cut).
- MLA's absorbed schedule gives the outputs of the naive one (DeepSeek-V2 §2.1.3).
- GQA with n_kv = n_h is MHA; GQA is MHA with each K/V head shared by its group (checked against a dense,
  explicitly masked reference at small dims).
- RoPE demonstration: with RoPE on the up-projected keys the absorbed shortcut is wrong (a large error); with
  DeepSeek's decoupled RoPE key it stays at round-off.
Errors are relative: max |a - b| / max |b|.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from kvcalc.attention import MLA
from kvcalc.backend.attention import GroupedQueryAttention, LatentAttention
from kvcalc.backend.ops import FlopCounter, product, softmax
from kvcalc.backend.parallel import attention_part
from kvcalc.backend.stack import stack_decode, stack_prefill


@dataclass(frozen=True)
class Check:
    """One numerical check: the error measured, the tolerance, and whether it passed."""

    name: str
    error: float
    tolerance: float
    passed: bool
    detail: str
    must_exceed: bool = False  # the demonstration of a failure: the error must be above the tolerance


def rel_error(a: np.ndarray, b: np.ndarray) -> float:
    a64, b64 = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a64 - b64)) / max(np.max(np.abs(b64)), 1e-300))


def _within(name: str, error: float, tol: float, detail: str) -> Check:
    return Check(name, error, tol, error <= tol, detail)


def _silent() -> FlopCounter:
    fc = FlopCounter()
    fc.enabled = False  # checks are not part of the measured run
    return fc


def run_checks(spec, s, layers, x0, outputs, after_prefill, schedule, tol) -> list[Check]:
    """Cached decode vs full recompute, and (MLA, latent cache) the other decode schedule.

    With DeepSeek Sparse Attention both recomputations take the keys the run chose, in its prefill and its decode
    steps (a near tie at the top-k cut falls either way under rounding), and a check says each choice was the
    recomputation's own top-k up to such a tie."""
    sparse = [a for a in map(attention_part, layers) if isinstance(a, LatentAttention) and a.chosen]
    for a in sparse:
        a.follow, a.chosen, a.ties = a.chosen, None, []
    dense: list[tuple[float, int]] = []  # per indexer layer: the reference's verdict on the run's selections

    def against_reference(layer, x) -> None:  # x: the layer's input at every position, from the recomputation
        att = attention_part(layer)
        if any(att is a for a in sparse):
            dense.append(selection_shortfall(att, x, att.follow))

    try:
        found = _run_checks(s, layers, x0, outputs, after_prefill, schedule, tol, against_reference if sparse else None)
        if sparse:
            gaps = [g for a in sparse for g in a.ties or ()]
            steps = sum(len(a.follow or ()) for a in sparse)
            found.insert(0, _within("indexer top-k: the run's = the recomputation's", max(gaps, default=0.0), tol,
                                    f"{steps:,} queries' selections, {len(gaps):,} of them another set (error: how "
                                    "far its worst key scores below the recomputation's k-th, a near tie)"))
            found.insert(1, _within("indexer top-k = a dense reference's top-k", max((g for g, _ in dense),
                                                                                     default=float("inf")), tol,
                                    f"{sum(n for _, n in dense):,} queries' selections vs Σ_h w·ReLU(q_I·k_I) over "
                                    "each query's visible keys, written out densely (error: how far the selection's "
                                    "sorted scores fall below the reference's k best)"))
    finally:
        for a in sparse:
            a.follow = a.ties = None
    return found


def _run_checks(s, layers, x0, outputs, after_prefill, schedule, tol, before=None) -> list[Check]:
    full = stack_prefill(_silent(), layers, x0, before, keep=False)[0]  # its caches are not kept: memory
    cached = np.concatenate(outputs, axis=1)
    found = [_within("cached decode = full recomputation", rel_error(cached, full[:, s.ctx:]), tol,
                     f"{_plural(s.decode, 'decoded token')} vs a prefill of {s.ctx + s.decode}")]
    if any(isinstance(attention_part(layer), LatentAttention) for layer in layers) and s.mla_cache == "latent":
        other = "naive" if schedule == "absorbed" else "absorbed"
        caches, outs = list(after_prefill), []  # a copy of the list: stack_decode replaces its entries
        for j in range(s.decode):
            out, caches = stack_decode(_silent(), layers, caches, x0[:, s.ctx + j : s.ctx + j + 1], other)
            outs.append(out)
        found.append(_within("MLA absorbed = naive", rel_error(np.concatenate(outs, axis=1), cached), tol,
                             f"{_plural(s.decode, 'step')} from one latent cache"))
    return found


# ---------------------------------------------------------------- DeepSeek Sparse Attention's selection, densely
# Written apart from kvcalc.backend.attention and causal (no index_band, no top_keys, no FlopCounter: not counted),
# so that an error in the run's scoring or selection cannot hide behind the same code in its check.


def _plain_norm(a: np.ndarray, centred: bool) -> np.ndarray:
    """LayerNorm (centred) or RMSNorm over the last axis, without learned weights, eps 1e-6."""
    if centred:
        a = a - a.mean(axis=-1, keepdims=True)
    return a / np.sqrt((a * a).mean(axis=-1, keepdims=True) + 1e-6)


def reference_index_scores(att: LatentAttention, x: np.ndarray, keys: np.ndarray, t0: int, t1: int,
                           wide) -> tuple[np.ndarray, int]:
    """DeepSeek-V3.2's index scores of the queries t in [t0, t1), densely: I[t, s] = Σ_h w[t, h]·ReLU(q_I[t, h]·k_I[s])
    over the keys s in [a0, t1), -inf where s > t or t - s >= W (the layer's window).

    x [b, T, m] is the layer's input, keys [b, T, d_I] the reference's k_I; returns [b, n, t1 - a0] and a0."""
    h_i, d_i, _ = att.index  # type: ignore[misc]
    a0 = max(0, t0 - att.window + 1) if att.window else 0
    xq = x[:, t0:t1].astype(wide)
    b, n, _ = xq.shape
    c_q = _plain_norm(xq @ att.wdq.astype(wide), centred=False) if att.qc else xq  # q_I reads c_Q (Indexer.wq_b)
    q = (c_q @ att.wiq.astype(wide)).reshape(b, n * h_i, d_i)  # [b, n·H, d_I]
    w = (xq @ att.wiw.astype(wide)) * (h_i * d_i) ** -0.5  # [b, n, H] (Indexer.weights_proj, scaled)
    relu = np.maximum(q @ keys[:, a0:t1].transpose(0, 2, 1), 0).reshape(b, n, h_i, t1 - a0)  # ReLU(q_I·k_I)
    scores = (w[:, :, None, :] @ relu)[:, :, 0]  # Σ_h w·ReLU: [b, n, keys]
    t, s = np.arange(t0, t1)[:, None], np.arange(a0, t1)[None, :]
    hidden = s > t
    if att.window:
        hidden |= (t - s) >= att.window
    return np.where(hidden, -np.inf, scores), a0


def _shortfall(scores: np.ndarray, taken: np.ndarray, k: int) -> float:
    """How far the scores of the keys `taken` [b, n, k] (indices into the rows of scores [b, n, keys]), sorted, fall
    below the k best of their row, sorted: the worst over ranks, relative to the row's largest |score|. 0 for the top-k
    set; small for a near tie at the cut; inf for a hidden or out-of-row key, or a key taken twice."""
    if np.any(taken < 0) or np.any(taken >= scores.shape[-1]):
        return float("inf")
    ordered = np.sort(taken, axis=-1)
    if np.any(ordered[..., 1:] == ordered[..., :-1]):
        return float("inf")
    got = np.sort(np.take_along_axis(scores, taken, axis=-1), axis=-1)  # ascending
    if not np.all(np.isfinite(got)):
        return float("inf")
    best = np.sort(scores, axis=-1)[..., -k:]  # the row's k best, ascending
    scale = np.where(np.isfinite(scores), np.abs(scores), 0).max(axis=-1, keepdims=True)
    return float(np.max((best - got) / np.maximum(scale, np.finfo(np.float64).tiny)))


def selection_shortfall(att: LatentAttention, x: np.ndarray, chosen: dict[int, np.ndarray]) -> tuple[float, int]:
    """The run's top-k selections of one indexer layer against the dense reference: the worst `_shortfall`, and the
    number of queries compared.

    x [b, T, m] is the layer's input at every position; chosen maps each query position to its keys [b, k]. A query
    whose visible keys outnumber k must have a selection, and no other query may have one (else inf). Computed in
    float32 or wider, a query block at a time within the bytes of the run's own band of index scores."""
    k = att.index[2]  # type: ignore[index]
    b, n_pos, _ = x.shape
    expected = [t for t in range(n_pos) if min(t + 1, att.window or t + 1) > k]
    if set(chosen) != set(expected):
        return float("inf"), len(chosen)
    wide = np.promote_types(x.dtype, np.float32)
    step = max(1, att.block * x.dtype.itemsize // wide.itemsize)
    keys = np.concatenate([_plain_norm(x[:, i : i + step].astype(wide) @ att.wik.astype(wide), centred=True)
                           for i in range(0, n_pos, step)], axis=1)  # k_I: LayerNorm'd (Indexer.k_norm)
    worst = 0.0
    for t0 in range(expected[0] if expected else n_pos, n_pos, step):
        t1 = min(n_pos, t0 + step)
        scores, a0 = reference_index_scores(att, x, keys, t0, t1, wide)
        taken = np.stack([chosen[t] for t in range(t0, t1)], axis=1).astype(np.int64) - a0  # [b, n, k]
        worst = max(worst, _shortfall(scores, taken, k))
    return worst, len(expected)


def _plural(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def dense_mask(s: int, window: int | None, chunk: int | None) -> np.ndarray:
    """[s, s] True where query i must not see key j: the future, beyond the window, or outside i's aligned chunk."""
    i, j = np.arange(s)[:, None], np.arange(s)[None, :]
    mask = j > i
    if window:
        mask |= (i - j) >= window
    if chunk:
        mask |= j < chunk * (i // chunk)
    return mask


def dense_reference(x, layer: GroupedQueryAttention) -> np.ndarray:
    """Plain MHA over the full masked score matrix, K/V heads repeated over their groups: [b, s, m] -> [b, s, m].

    The mask is written out (causal, window, chunk); sinks join the softmax as an extra column of weight only."""
    fc = _silent()
    q, k, v, gate = layer._qkv(fc, x, 0)  # q [b, k, g, s, d] scaled, k [b, s, k, d], v [b, s, k, e]
    b, kh, g, s, d = q.shape
    q = q.reshape(b, kh * g, s, d)
    k = np.repeat(k.transpose(0, 2, 1, 3), g, axis=1)  # [b, h, s, d]
    v = np.repeat(v.transpose(0, 2, 1, 3), g, axis=1)
    scores = np.where(dense_mask(s, layer.window, layer.chunk), -np.inf, product(q, k.transpose(0, 1, 3, 2)))
    if layer.sinks is not None:  # the sink as one more column, dropped after the softmax
        sink = np.broadcast_to(layer.sinks.reshape(1, kh * g, 1, 1), (b, kh * g, s, 1))
        p = softmax(np.concatenate([scores, sink], axis=-1))[..., :-1].astype(q.dtype)
    else:
        p = softmax(scores).astype(q.dtype)
    o = product(p, v).reshape(b, kh, g, s, v.shape[-1])
    return layer._out(fc, o, gate)


@contextmanager
def _score_chunk(elements: int):
    """The prefill's band of scores capped at `elements` for a while (causal.SCORE_CHUNK), so that a small case takes
    the tiling a long prompt takes: KV heads one chunk at a time on worker threads, query blocks cut to 16."""
    from kvcalc.backend import causal

    kept, causal.SCORE_CHUNK = causal.SCORE_CHUNK, elements
    try:
        yield
    finally:
        causal.SCORE_CHUNK = kept


def gqa_equals_mha(s, tol) -> Check:
    """The grouped, blocked code path against dense masked attention at fixed small sizes (not the model's), for
    n_kv = n_h (MHA) and n_kv < n_h (GQA, MQA), with and without a window; then at 40 tokens with the band of scores
    capped (_score_chunk) and 2 threads, the path a long prompt takes (a backend review: only the last decoded rows of
    a real run were compared, which a wrong early row of a long prefill would pass)."""
    dtype = {"float32": np.float32, "float16": np.float16, "float64": np.float64}[s.dtype]
    rng = np.random.default_rng(s.seed)
    x = rng.standard_normal((2, 23, 32)).astype(dtype)
    worst = 0.0
    for n_kv, window in ((4, None), (4, 7), (2, None), (1, 7)):
        layer = GroupedQueryAttention(32, 4, n_kv, 8, window, np.random.default_rng(s.seed + n_kv), dtype, block=5)
        got, _ = layer.prefill(_silent(), x)
        worst = max(worst, rel_error(got, dense_reference(x, layer)))
    x = rng.standard_normal((2, 40, 32)).astype(dtype)
    with _score_chunk(64):  # head chunks of one KV head, query blocks of 16 (of 32): 2 · 3 bands a head
        for n_kv, window in ((4, None), (2, 20), (1, None)):
            layer = GroupedQueryAttention(32, 4, n_kv, 8, window, np.random.default_rng(s.seed + n_kv), dtype, block=32,
                                          workers=2)
            got, _ = layer.prefill(_silent(), x)
            worst = max(worst, rel_error(got, dense_reference(x, layer)))
    return _within("blocked GQA/MQA equals dense attention", worst, tol,
                   "fixed cases: n_kv 4 (MHA), 2, 1 of 4 heads, 23 tokens, and 40 in tiles on 2 threads, vs dense "
                   "masked attention")


def heads_variant_checks(spec, s, tol) -> list[Check]:
    """For each Heads option the model uses, at small dims: the blocked code path equals dense masked attention.

    Chunked attention against an explicit chunk mask; values of another size, the output gate, k_eq_v and sinks
    each against the same dense reference (which writes the sink as an extra softmax column)."""
    from kvcalc.attention.gqa import Heads

    dtype = {"float32": np.float32, "float16": np.float16, "float64": np.float64}[s.dtype]
    x = np.random.default_rng(s.seed).standard_normal((2, 23, 32)).astype(dtype)
    found = []
    seen = set()
    for g in spec.groups:
        att = g.attention
        if not isinstance(att, Heads):
            continue
        variants = {"chunked attention equals dense attention with a chunk mask": dict(chunk=6) if g.layer.chunk else None,
                    "values of their own size (d_v) equal dense attention": dict(value_dim=12) if att.v_head_dim else None,
                    "the output gate equals dense gated attention": dict(gate=True) if att.output_gate else None,
                    "k_eq_v (values from the key projection) equals dense attention": dict(k_eq_v=True) if att.k_eq_v else None,
                    "attention sinks equal dense attention with a sink column": dict(sinks=True) if att.sinks else None}
        for name, options in variants.items():
            if options is None or name in seen:
                continue
            seen.add(name)
            worst = 0.0
            for n_kv, window in ((4, None), (2, 7 if "chunk" not in options else None), (1, None)):
                layer = GroupedQueryAttention(32, 4, n_kv, 8, window, np.random.default_rng(s.seed + n_kv), dtype, block=5,
                                              **options)
                worst = max(worst, rel_error(layer.prefill(_silent(), x)[0], dense_reference(x, layer)))
            found.append(_within(name, worst, tol, "n_kv 4, 2, 1 of 4 heads, 23 tokens, vs dense masked MHA"))
    return found


def _demo_dims(spec):
    """Small MLA dims for the RoPE demonstration, shaped like the model's own MLA when it has one."""
    att = next((g.attention for g in spec.groups if isinstance(g.attention, MLA)), None)
    if att is None:
        return 4, 32, 24, 16, 8, 16
    shrink = lambda n, cap: max(2, min(n, cap))  # noqa: E731
    even = lambda n, cap: shrink(n, cap) // 2 * 2  # noqa: E731 -- rotated dims: RoPE turns pairs of channels
    return shrink(att.n_heads, 4), shrink(att.kv_lora_rank, 64), shrink(att.q_lora_rank or 0, 48) if att.q_lora_rank else None, \
        even(att.qk_nope_head_dim, 16), even(att.qk_rope_head_dim, 8), shrink(att.v_head_dim, 16)


def rope_demo(spec, s, tol) -> list[Check]:
    """Absorbed vs naive MLA decoding with decoupled RoPE (round-off) and with RoPE on the up-projected keys (wrong)."""
    dtype = {"float32": np.float32, "float16": np.float16, "float64": np.float64}[s.dtype]
    h, c, qc, nope, r, e = _demo_dims(spec)
    rng = np.random.default_rng(s.seed)
    x = rng.standard_normal((1, 20, 48)).astype(dtype)
    errors = {}
    for rope in ("decoupled", "plain"):
        layer = LatentAttention(48, h, c, qc, nope, r, e, None, np.random.default_rng(s.seed), dtype, "latent", 8, rope)
        _, cache = layer.prefill(_silent(), x[:, :16])
        outs = {}
        for schedule in ("naive", "absorbed"):
            state, ys = cache, []
            for j in range(16, 20):
                y, state = layer.decode(_silent(), x[:, j : j + 1], state, schedule)
                ys.append(y)
            outs[schedule] = np.concatenate(ys, axis=1)
        errors[rope] = rel_error(outs["absorbed"], outs["naive"])
    dims = f"h {h}, d_c {c}, d_nope {nope}, d_R {r}"
    # "large": 100× the round-off tolerance, but never above 0.1 (float16's 100 × 2e-2 = 2 exceeds any relative
    # error two outputs of this size can have)
    wrong = min(100 * tol, 0.1)
    return [
        _within("RoPE demo: decoupled RoPE keeps absorbed = naive", errors["decoupled"], tol, dims),
        # W_UK cannot be folded past a rotation that depends on the key's position, so the error must be large.
        Check("RoPE demo: RoPE on up-projected keys breaks absorption", errors["plain"], wrong,
              errors["plain"] > wrong, dims, must_exceed=True),
    ]
