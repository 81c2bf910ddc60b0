"""Predict the peak memory of a `kvcalc run` before allocating anything, and say what would fit when it is too much.

The prediction adds, in bytes: the weights of the layers run; their KV caches at the end of the run (and one
extra copy of the largest, made while a decode step appends to it); and the prefill activations of the longest
sequence the run attends over (the recompute check's ctx + decode tokens): the residual stream, the projections,
per-head keys and values, and one block of scores, which the query-block size keeps bounded.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from kvcalc.costs.cache import per_token_formula
from kvcalc.errors import KvcalcError
from kvcalc.spec import MLA, ModelSpec, ResolvedGroup
from kvcalc.units import format_bytes

SCORE_BLOCK_BYTES = 64 * 1024**2  # target size of one block of attention scores (float32)


def query_block(n_heads: int, batch: int, keys: int, window: int | None) -> int:
    """Queries per prefill block, so that a block of scores stays near SCORE_BLOCK_BYTES (at least 16, at most 256)."""
    per_query = 4 * n_heads * batch * (min(keys, window) if window else keys)
    block = max(16, min(256, SCORE_BLOCK_BYTES // max(per_query, 1)))
    return min(block, window) if window else block


def _widths(group: ResolvedGroup, d_model: int) -> tuple[int, int, int]:
    """(weights, activation width per token, heads) of one layer, in elements."""
    att = group.attention
    if isinstance(att, MLA):
        h, qk, c, r, e = att.n_heads, att.qk_nope_head_dim + att.qk_rope_head_dim, att.kv_lora_rank, att.qk_rope_head_dim, att.v_head_dim
        q_in = att.q_lora_rank or d_model
        weights = (d_model * att.q_lora_rank if att.q_lora_rank else 0) + q_in * h * qk + d_model * (c + r) \
            + c * h * (att.qk_nope_head_dim + e) * 2 + h * e * d_model  # W_UK/W_UV are held twice (fused and per head)
        width = q_in + 3 * h * qk + c + r + 2 * h * (att.qk_nope_head_dim + e) + 2 * h * e
        return weights, width, h
    h, d = att.n_heads, group.head_dim
    n_kv = {"mha": h, "mqa": 1}.get(att.kind) or att.n_kv_heads
    weights = 2 * d_model * h * d + 2 * d_model * n_kv * d
    width = 3 * h * d + 4 * n_kv * d
    return weights, width, h


@dataclass(frozen=True)
class MemoryPlan:
    """Predicted peak bytes of a run, by part."""

    weights: int
    cache: int
    activations: int

    @property
    def peak(self) -> int:
        return self.weights + self.cache + self.activations


def plan(spec: ModelSpec, layers: list[int], ctx: int, decode: int, batch: int, itemsize: int, mla_cache: str) -> MemoryPlan:
    """Predicted peak memory of running `layers` of `spec` on a prefill of ctx and `decode` steps."""
    by_layer = {i: g for g in spec.groups for i in g.layers}
    total = ctx + decode
    weights = cache = act = largest = 0
    for layer in layers:
        group = by_layer[layer]
        w, width, heads = _widths(group, spec.d_model)
        weights += w * itemsize
        held = min(total, group.sliding_window) if group.sliding_window else total
        layer_cache = per_token_formula(group, mla_cache).elements * held * batch * itemsize
        cache += layer_cache
        largest = max(largest, layer_cache)
        block = query_block(heads, batch, total, group.sliding_window)
        keys = min(total, group.sliding_window) if group.sliding_window else total
        scores = 4 * heads * batch * block * (keys + block) * 4  # rect + row extras, their concatenation, softmax
        act = max(act, batch * total * (4 * spec.d_model + width) * itemsize + scores)
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


def guard(spec: ModelSpec, layer_order: list[int], req: Request, itemsize: int, mla_cache: str, limit: int) -> MemoryPlan:
    """The memory plan of the request, or a KvcalcError saying what would fit under `limit` bytes."""
    cost = lambda r: plan(spec, layer_order[: r.n_layers], r.ctx, r.decode, r.batch, itemsize, mla_cache).peak  # noqa: E731
    need = plan(spec, layer_order[: req.n_layers], req.ctx, req.decode, req.batch, itemsize, mla_cache)
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
