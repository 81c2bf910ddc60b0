"""Predict the peak memory of a `kvcalc run` before allocating anything, and say what would fit when it is too much.

The prediction adds, in bytes: the weights of the layers run; their KV caches at the end of the run and after the
prefill (kept for the checks), and one extra copy of the largest, made while a decode step appends to it; and the
largest of the prefill activations of the longest
sequence the run attends over (the recompute check's ctx + decode tokens): the residual stream, the projections,
per-head keys and values, the attention output, and what each prefill thread holds: a band of scores, which the
prefill's tiling keeps bounded (`kvcalc.backend.causal.prefill_tiling`, the executor's own choice), and for MLA's
latent cache the K and V of one chunk of heads. It leaves out the interpreter itself.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from kvcalc.backend.causal import prefill_tiling
from kvcalc.costs.cache import per_token_formula
from kvcalc.errors import KvcalcError
from kvcalc.spec import MLA, ModelSpec, ResolvedGroup
from kvcalc.units import format_bytes

QUERY_BLOCK = 256  # queries per prefill block at most: with 256·g rows a head's products run near BLAS's best


def query_block(window: int | None) -> int:
    """Queries per prefill block at most: QUERY_BLOCK, and no more than the window.

    The executor lowers it (and picks how many KV heads to attend together) so that one band of scores stays
    bounded, knowing the grouping of query heads that it takes from the layer; `plan` predicts the same choice.
    """
    return min(QUERY_BLOCK, window) if window else QUERY_BLOCK


def _widths(group: ResolvedGroup, d_model: int, mla_cache: str) -> tuple[int, int, int, int]:
    """(weights, activation width per token, KV heads, query heads per KV head) of one layer, in elements."""
    att = group.attention
    if isinstance(att, MLA):
        h, qk, c, r, e = att.n_heads, att.qk_nope_head_dim + att.qk_rope_head_dim, att.kv_lora_rank, att.qk_rope_head_dim, att.v_head_dim
        q_in = att.q_lora_rank or d_model
        weights = (d_model * att.q_lora_rank if att.q_lora_rank else 0) + q_in * h * qk + d_model * (c + r) \
            + c * h * (att.qk_nope_head_dim + e) + h * e * d_model  # W_UK/W_UV are held per head only
        # the attention output per head (e), c_Q, and the latent and k_R with copies; every head's K and V only
        # for the expanded cache (queries, and else K and V, a chunk of heads at a time: `_prefill_threads_bytes`)
        width = h * e + q_in + 2 * (c + r) + (h * (qk + e) if mla_cache == "expanded" else 0)
        return weights, width, h, 1
    h, d = att.n_heads, group.head_dim
    n_kv = {"mha": h, "mqa": 1}.get(att.kind) or att.n_kv_heads
    weights = 2 * d_model * h * d + 2 * d_model * n_kv * d
    # q (and, briefly, its regrouped copy), the attention output and its [s, h·d] copy; K and V with RoPE's copy
    width = 3 * h * d + 4 * n_kv * d
    return weights, width, n_kv, h // n_kv


def _value_dim(group: ResolvedGroup) -> int:
    """Value head dim e (the width of a row of p @ v)."""
    att = group.attention
    return att.v_head_dim if isinstance(att, MLA) else group.head_dim


def _prefill_threads_bytes(group: ResolvedGroup, kv_heads: int, g: int, tokens: int, batch: int, itemsize: int,
                           mla_cache: str, workers: int) -> int:
    """What the prefill threads hold, one per chunk of KV heads up to `workers` (`causal.causal_attention`):
    each a band of scores (float16's softmax adds three float32 copies) and a tile's share of p @ v; with MLA
    also the chunk's queries, and with its latent cache the chunk's K and V (`attention.LatentAttention.prefill`)."""
    window = group.sliding_window
    block = query_block(window)  # what the runner passes the layer
    tiling = prefill_tiling(batch, kv_heads, g, tokens, window, block)
    per_thread = tiling.band(batch, g) * (itemsize + (12 if itemsize == 2 else 0))
    per_thread += batch * tiling.chunk * tiling.block * g * _value_dim(group) * itemsize
    att = group.attention
    if isinstance(att, MLA):
        qk = att.qk_nope_head_dim + att.qk_rope_head_dim
        per_thread += batch * tiling.chunk * tokens * (qk + (qk + att.v_head_dim if mla_cache == "latent" else 0)) * itemsize
    return min(workers, -(-kv_heads // tiling.chunk)) * per_thread


def _naive_decode_bytes(group: ResolvedGroup, tokens: int, batch: int, itemsize: int) -> int:
    """MLA's naive decode schedule (run, or the check that absorbed = naive) rebuilds every head's K and V of
    every held token (`attention.LatentAttention.decode`)."""
    att = group.attention
    if not isinstance(att, MLA):
        return 0
    qk = att.qk_nope_head_dim + att.qk_rope_head_dim
    return batch * tokens * att.n_heads * (qk + att.v_head_dim) * itemsize


@dataclass(frozen=True)
class MemoryPlan:
    """Predicted peak bytes of a run, by part."""

    weights: int
    cache: int
    activations: int

    @property
    def peak(self) -> int:
        return self.weights + self.cache + self.activations


def plan(spec: ModelSpec, layers: list[int], ctx: int, decode: int, batch: int, itemsize: int, mla_cache: str,
         workers: int = 1) -> MemoryPlan:
    """Predicted peak memory of running `layers` of `spec` on a prefill of ctx and `decode` steps, with up to
    `workers` prefill threads."""
    by_layer = {i: g for g in spec.groups for i in g.layers}
    total = ctx + decode
    weights = cache = act = largest = 0
    for layer in layers:
        group = by_layer[layer]
        w, width, kv_heads, g = _widths(group, spec.d_model, mla_cache)
        weights += w * itemsize
        held = min(total, group.sliding_window) if group.sliding_window else total
        per_token = per_token_formula(group, mla_cache).elements * batch * itemsize
        layer_cache = per_token * held
        # the cache at the end, and the one after the prefill, which the run keeps for its checks
        cache += layer_cache + per_token * (min(ctx, group.sliding_window) if group.sliding_window else ctx)
        largest = max(largest, layer_cache)
        scores = _prefill_threads_bytes(group, kv_heads, g, total, batch, itemsize, mla_cache, workers)
        # 4 · d_model: the run's input, a layer's input, its norm and its output (the residual stream)
        act = max(act, batch * total * (4 * spec.d_model + width) * itemsize + scores,
                  # the run's input and the recompute check's output, beside a naive decode step's K and V
                  batch * total * 2 * spec.d_model * itemsize + _naive_decode_bytes(group, held, batch, itemsize))
    return MemoryPlan(weights=weights, cache=cache + largest, activations=act)


def available_memory() -> int | None:
    """Bytes the system can still give this process (Linux MemAvailable), or None if unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


@dataclass(frozen=True)
class Request:
    """The size knobs of a run that the guard may shrink."""

    ctx: int
    decode: int
    batch: int
    n_layers: int


def largest_fitting(fits, upper: int) -> int:
    """The largest x in [1, upper] with fits(x) true (fits is monotone decreasing), or 0 if even 1 does not fit."""
    if not fits(1):
        return 0
    lo, hi = 1, upper
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def guard(spec: ModelSpec, layer_order: list[int], req: Request, itemsize: int, mla_cache: str, limit: int,
          workers: int = 1) -> MemoryPlan:
    """The memory plan of the request, or a KvcalcError saying what would fit under `limit` bytes."""
    cost = lambda r: plan(spec, layer_order[: r.n_layers], r.ctx, r.decode, r.batch, itemsize, mla_cache, workers).peak  # noqa: E731
    need = plan(spec, layer_order[: req.n_layers], req.ctx, req.decode, req.batch, itemsize, mla_cache, workers)
    if need.peak <= limit:
        return need
    hints = []
    ctx = largest_fitting(lambda c: cost(replace(req, ctx=c)) <= limit, req.ctx)
    if ctx:
        hints.append(f"--ctx {ctx}")
    batch = largest_fitting(lambda b: cost(replace(req, batch=b)) <= limit, req.batch)
    if batch:
        hints.append(f"--batch {batch}")
    layers = largest_fitting(lambda n: cost(replace(req, n_layers=n)) <= limit, req.n_layers)
    if layers:
        hints.append(f"--layers {layers}")
    fix = f"; each of these alone would fit: {', '.join(hints)}" if hints else ""
    if not hints:  # no single knob is enough: one layer, one sequence, and the longest prompt that then fits
        small = replace(req, n_layers=1, batch=1)
        ctx = largest_fitting(lambda c: cost(replace(small, ctx=c)) <= limit, req.ctx)
        fix = f"; this would fit: --layers 1 --batch 1 --ctx {ctx}" if ctx else "; not even one layer at ctx 1 fits"
    size = lambda n: format_bytes(n)  # noqa: E731
    what = (f"this run needs about {size(need.peak)} (weights {size(need.weights)}, KV cache {size(need.cache)}, "
            f"activations {size(need.activations)}) but {size(limit)} is available")
    raise KvcalcError(f"not running: {what}{fix}")
