"""Predict the peak memory of a `kvcalc run` before allocating anything, and say what would fit when it is too much.

The prediction adds, in bytes: the weights of the layers run; their KV caches at the end of the run and after the
prefill (kept for the checks), and one extra copy of the largest, made while a decode step appends to it; and the
largest of the prefill activations of the longest
sequence the run attends over (the recompute check's ctx + decode tokens): the residual stream, the projections,
per-head keys and values, the attention output, and what each prefill thread holds: a band of scores, which the
prefill's tiling keeps bounded (`kvcalc.backend.causal.prefill_tiling`, the executor's own choice), and for MLA's
latent cache the K and V of one chunk of heads. A constant-state layer holds its state (twice, and a copy) instead
of a cache, and its activations: the prefill's per token, a recurrence step's state-sized scratch, and its
parallel-form check (`kvcalc.backend.recurrent.state_activations`). It leaves out the interpreter itself.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from kvcalc.backend.attention import LayerPlan, layer_entry
from kvcalc.backend.causal import SCORE_CHUNK, prefill_tiling
from kvcalc.backend.recurrent import StatePlan, state_activations
from kvcalc.errors import KvcalcError
from kvcalc.solve import largest_fitting
from kvcalc.spec import ModelSpec, ResolvedGroup
from kvcalc.units import format_bytes

QUERY_BLOCK = 256  # queries per prefill block at most: with 256·g rows a head's products run near BLAS's best


def query_block(window: int | None) -> int:
    """Queries per prefill block at most: QUERY_BLOCK, and no more than the window.

    The executor lowers it (and picks how many KV heads to attend together) so that one band of scores stays
    bounded, knowing the grouping of query heads that it takes from the layer; `plan` predicts the same choice.
    """
    return min(QUERY_BLOCK, window) if window else QUERY_BLOCK


def _matrix_elements(group: ResolvedGroup) -> int:
    """Weights one layer holds: its kind's weight matrices (norms and biases are small and left out)."""
    return sum(w.size for w in group.attention.weights(group.layer) if w.role == "matrix")


def _prefill_threads_bytes(group: ResolvedGroup, p: LayerPlan, tokens: int, batch: int, itemsize: int,
                           workers: int) -> int:
    """What the prefill threads hold, one per chunk of KV heads up to `workers` (`causal.causal_attention`):
    each a band of scores (float16's softmax adds three float32 copies) and a tile's share of p @ v, and what
    the layer builds per chunk of heads (MLA: the chunk's queries, and with its latent cache its K and V)."""
    window = group.sliding_window
    block = query_block(window)  # what the runner passes the layer
    tiling = prefill_tiling(batch, p.kv_heads, p.g, tokens, window, block)
    per_thread = tiling.band(batch, p.g) * (itemsize + (12 if itemsize == 2 else 0))
    per_thread += batch * tiling.chunk * tiling.block * p.g * p.value_dim * itemsize
    per_thread += batch * tiling.chunk * tokens * p.chunk_width * itemsize
    return min(workers, -(-p.kv_heads // tiling.chunk)) * per_thread


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
         workers: int = 1, enc: int = 0) -> MemoryPlan:
    """Predicted peak memory of running `layers` of `spec` on a prefill of ctx and `decode` steps, with up to
    `workers` prefill threads; `enc` encoder positions for cross-attention layers."""
    by_layer = {i: g for g in spec.groups for i in g.layers}
    total = ctx + decode
    weights = cache = act = largest = 0
    for layer in layers:
        group = by_layer[layer]
        att = group.attention
        p = layer_entry(att.kind)[1](att, group.layer, mla_cache)
        weights += _matrix_elements(group) * itemsize
        if isinstance(p, StatePlan):  # a constant-state layer: its state, the same size at every step
            state = batch * att.constant_state(group.layer) * itemsize
            cache += 2 * state  # at the end, and after the prefill (kept for the checks)
            largest = max(largest, state)  # a decode step builds the new state beside the old
            act = max(act, state_activations(p, spec.d_model, batch, total, itemsize))
            continue
        held = att.tokens_held(group.layer, total)
        per_token = att.cache_formula(group.layer, mla_cache).elements * batch * itemsize
        layer_cache = per_token * held
        # the cache at the end, and the one after the prefill, which the run keeps for its checks
        cache += layer_cache + per_token * att.tokens_held(group.layer, ctx)
        largest = max(largest, layer_cache)
        scores = _prefill_threads_bytes(group, p, total, batch, itemsize, workers) + _index_bytes(group, p, total, batch, itemsize)
        if group.cross is not None and enc:  # the encoder positions' K/V (held once), weights, and the scores
            cross, cl = group.cross, group.cross_layer
            weights += sum(w.size for w in cross.weights(cl) if w.role == "matrix") * itemsize
            cache += cross.cache_formula(cl, mla_cache).elements * batch * enc * itemsize
            scores += batch * total * (cross.query_heads or 1) * (2 * enc + 2 * (cross.d_h(cl) or 0)) * itemsize
        # 4 · d_model: the run's input, a layer's input, its norm and its output (the residual stream)
        act = max(act, batch * total * (4 * spec.d_model + p.width) * itemsize + scores,
                  # the run's input and the recompute check's output, beside a naive decode step's K and V
                  batch * total * 2 * spec.d_model * itemsize + batch * held * p.rebuilt * itemsize)
    if enc and any(by_layer[i].cross is not None for i in layers):  # the random encoder output the run attends
        act += batch * enc * spec.d_model * itemsize
    return MemoryPlan(weights=weights, cache=cache + largest, activations=act)


def _index_bytes(group: ResolvedGroup, p: LayerPlan, tokens: int, batch: int, itemsize: int) -> int:
    """The indexer's band of one query block (H_I heads' scores and their sum, over at most `tokens` keys), and on
    the top-k path every head's K and V of the prompt and one group of gathered rows (`causal.attend_selected`)."""
    if not p.index_rows:
        return 0
    out = batch * min(query_block(group.sliding_window), tokens) * p.index_rows * tokens * itemsize
    if p.sparse_above is not None and tokens > p.sparse_above:
        out += batch * tokens * p.sparse_width * itemsize + 2 * max(SCORE_CHUNK, batch * p.gather_row) * itemsize
    return out


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


def guard(spec: ModelSpec, layer_order: list[int], req: Request, itemsize: int, mla_cache: str, limit: int,
          workers: int = 1, enc: int = 0) -> MemoryPlan:
    """The memory plan of the request, or a KvcalcError saying what would fit under `limit` bytes."""
    cost = lambda r: plan(spec, layer_order[: r.n_layers], r.ctx, r.decode, r.batch, itemsize, mla_cache, workers, enc).peak  # noqa: E731
    need = plan(spec, layer_order[: req.n_layers], req.ctx, req.decode, req.batch, itemsize, mla_cache, workers, enc)
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
    decode = largest_fitting(lambda t: cost(replace(req, decode=t)) <= limit, req.decode) if req.decode else 0
    if decode:
        hints.append(f"--decode {decode}")
    fix = f"; each of these alone would fit: {', '.join(hints)}" if hints else ""
    if not hints:  # no single knob is enough: one layer, one sequence, and the longest prompt that then fits
        small = replace(req, n_layers=1, batch=1)
        ctx = largest_fitting(lambda c: cost(replace(small, ctx=c)) <= limit, req.ctx)
        fix = f"; this would fit: --layers 1 --batch 1 --ctx {ctx}" if ctx else "; not even one layer at ctx 1 fits"
        if not ctx and req.decode:  # the decode steps alone outgrow memory: say so, not the layers
            fix = f"; --decode {req.decode:,} alone needs more: the cache grows by one token a step"
    size = lambda n: format_bytes(n)  # noqa: E731
    what = (f"this run needs about {size(need.peak)} (weights {size(need.weights)}, KV cache {size(need.cache)}, "
            f"activations {size(need.activations)}) but {size(limit)} is available")
    raise KvcalcError(f"not running: {what}{fix}")
