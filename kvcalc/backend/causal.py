"""Exact causal (and windowed) attention over prompt or cached keys, every product counted.

Query i meets only its min(i, W) keys, never a masked-out one, so the executed count equals the analytic
Σ min(i, W). A prefill works by query blocks: the keys every query of a block sees form one
rectangle (a single product); the keys that differ between its rows (the diagonal triangle, and the window's
trailing edge) are split into squares, a binary split whose squares of one size are a single batched product
(`block_tiles`). The scores of a block are one band, softmaxed in place; the max shift is skipped when
Cauchy–Schwarz (|q·k| <= |q| |k|) shows every score is small. Chunks of KV heads are independent tasks, which
the prefill threads share (`kvcalc.backend.threads`). Axis letters are those of `kvcalc.backend.ops`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from kvcalc.backend.ops import FlopCounter, check_abort, softmax, softmax_
from kvcalc.backend.threads import run_tasks

SCORE_CHUNK = 8 * 1024**2  # elements of one band of scores (a query block, a chunk of KV heads): 32 MiB in float32
SAFE_EXP = 60.0  # exp(x) for |x| < 60 neither overflows nor underflows a row's sum, in float32 or wider


# ---------------------------------------------------------------- attention over cached or prompt keys


class Tiles(NamedTuple):
    """n equal rectangles of a query block's scores: tile j covers query rows [row0 + j·step, +h) (relative to the
    block's first query) and key positions [key0 + j·step, +w) (absolute). Rows and keys advance together."""

    n: int
    row0: int
    key0: int
    step: int
    h: int
    w: int


def _lower_tiles(n: int, row0: int, key0: int) -> list[Tiles]:
    """The n×n lower triangle with its diagonal (row j meets keys key0 … key0 + j), split in squares.

    Row j meets j + 1 keys, split by the bits of j + 1: for each bit r (1, 2, 4 …) set in j + 1, the r keys
    just below the ones the higher bits took. At scale r these are squares of r rows from r - 1, every 2r rows.
    """
    tiles, r = [], 1
    while r <= n:
        full = (n + 1) // (2 * r)
        if full:
            tiles.append(Tiles(full, row0 + r - 1, key0, 2 * r, r, r))
        start = full * 2 * r  # a last, partial square: its bottom rows are clipped at n
        if start + r - 1 < n:
            tiles.append(Tiles(1, row0 + start + r - 1, key0 + start, 2 * r, n - start - r + 1, r))
        r *= 2
    return tiles


def _upper_tiles(n: int, row0: int, key0: int) -> list[Tiles]:
    """The n×n strict upper triangle (row j meets keys key0 + (j, n)), split in squares as `_lower_tiles`."""
    tiles, r = [], 1
    while r < n:
        full = n // (2 * r)
        if full:
            tiles.append(Tiles(full, row0, key0 + r, 2 * r, r, r))
        start = full * 2 * r  # a last, partial 2r-block: its right keys are clipped at n
        if start + r < n:
            tiles.append(Tiles(1, row0 + start, key0 + start + r, 2 * r, r, n - start - r))
        r *= 2
    return tiles


def block_tiles(s0: int, e: int, window: int | None) -> list[Tiles]:
    """Every query-key pair of the queries [s0, e) (at most W apart, if windowed) exactly once, as tiles.

    The keys [lo, s0) that all the block's queries see form one rectangle; the diagonal triangle [s0, i] and the
    window's trailing edge [i - W + 1, lo) (a rectangle where it is cut at key 0, then a triangle) are split in
    squares. The block must be at most W queries long.
    """
    b = e - s0
    lo = max(0, e - window) if window else 0
    tiles = [Tiles(1, 0, lo, 0, b, s0 - lo)] if s0 > lo else []
    if window and lo:  # row j meets [max(0, s0 + j - W + 1), lo): rows [0, cut) start at key 0
        cut = min(b, max(0, window - s0))
        tiles += [Tiles(1, 0, 0, 0, cut, lo)] if cut else []
        tiles += _upper_tiles(b - cut, cut, lo - (b - cut))
    return tiles + _lower_tiles(b, 0, s0)


def _tiles(a: np.ndarray, n: int, r0: int, c0: int, dr: int, dc: int, h: int, w: int) -> np.ndarray:
    """View [..., n, h, w] of a [..., R, C]: tile j is a[..., r0 + j·dr : +h, c0 + j·dc : +w] (no copy).

    Writing to the view writes to `a`; the bounds are checked here, since `as_strided` checks none.
    """
    rows, cols = a.shape[-2:]
    if r0 + (n - 1) * dr + h > rows or c0 + (n - 1) * dc + w > cols:
        raise ValueError(f"tiles out of bounds: {n} × [{h}, {w}] from ({r0}, {c0}) step ({dr}, {dc}) in {a.shape}")
    rs, cs = a.strides[-2:]
    return np.lib.stride_tricks.as_strided(a[..., r0:, c0:], a.shape[:-2] + (n, h, w),
                                           a.strides[:-2] + (dr * rs + dc * cs, rs, cs))


def query_rows(q: np.ndarray) -> np.ndarray:
    """q [b, k, g, s, d] -> [b, k, s·g, d]: the g query heads of a KV head as consecutive rows of each position."""
    b, kh, g, s, d = q.shape
    return q.transpose(0, 1, 3, 2, 4).reshape(b, kh, s * g, d)  # free when q is laid out [b, k, s, g, d]


class Tiling(NamedTuple):
    """How a prefill is cut: queries per block, KV heads per chunk, and the widest band of keys a block meets."""

    block: int
    chunk: int
    span: int

    def band(self, batch: int, g: int) -> int:
        """Elements of the largest band of scores, [b, chunk, block·g, span]."""
        return batch * self.chunk * self.block * g * self.span


def prefill_tiling(batch: int, kv_heads: int, g: int, s: int, window: int | None, block: int) -> Tiling:
    """Blocks of at most `block` queries (fewer, down to 16, if one KV head's band would pass SCORE_CHUNK) and as many
    KV heads at a time as keep a band within SCORE_CHUNK: big products for BLAS, bounded memory."""
    span = lambda n: min(s, window + n - 1) if window else s  # noqa: E731 (keys a block of n queries meets)
    block = min(block, window, s) if window else min(block, s)
    block = min(block, max(16, SCORE_CHUNK // (batch * g * span(block))))
    chunk = max(1, min(kv_heads, SCORE_CHUNK // (batch * g * block * span(block))))
    return Tiling(block, chunk, span(block))


def _norms(x: np.ndarray) -> np.ndarray:
    """Euclidean norms over the last axis, [..., n, d] -> [..., n]: only for the bound on the scores, so a sum of
    squares (einsum's elementwise loop, the fastest here), not a product of the model and not counted."""
    return np.sqrt(np.einsum("...i,...i->...", x, x))


def blocks(b: int, kh: int, g: int, s: int, window: int | None, block: int) -> int:
    """How many (head chunk, query block) steps `causal_attention` takes: what a progress bar counts."""
    block, chunk, _ = prefill_tiling(b, kh, g, s, window, block)
    return -(-kh // chunk) * -(-s // block)


def causal_attention(fc: FlopCounter, q: np.ndarray, kT: np.ndarray, vT: np.ndarray, window: int | None,
                     block: int, on_block=None, workers: int = 1, sinks: np.ndarray | None = None) -> np.ndarray:
    """Exact causal (windowed) attention of the s prompt queries over the same s positions.

    q [b, k, g, s, d] (already scaled), kT [b, k, d, s], vT [b, k, s, e] -> [b, k, g, s, e].
    Chunks of KV heads are independent: up to `workers` threads take them (`kvcalc.backend.threads`).
    `on_block`, if given, is called after each step (progress reporting), from whichever thread took it.
    `sinks` [k, g], if given: one logit per query head that joins every softmax denominator (gpt-oss).
    """
    b, kh, g, s, _ = q.shape
    rows = query_rows(q)
    out5, out = outputs(b, kh, g, s, vT.shape[-1], q.dtype)
    tiling = prefill_tiling(b, kh, g, s, window, block)

    def chunk(heads: slice, scratch: np.ndarray) -> None:
        attend_heads(fc, rows[:, heads], kT[:, heads], vT[:, heads], out[:, heads], window, tiling, scratch, on_block,
                     None if sinks is None else sinks[heads])

    run_tasks(chunk, head_chunks(kh, tiling.chunk), workers, lambda: band_scratch(tiling, b, g, q.dtype))
    return out5


def chunk_bounds(s: int, chunk: int) -> list[tuple[int, int]]:
    """The aligned chunks [c0, c1) of s prompt positions (Llama 4's chunked local attention)."""
    return [(c0, min(s, c0 + chunk)) for c0 in range(0, s, chunk)]


def chunked_attention(fc: FlopCounter, q: np.ndarray, kT: np.ndarray, vT: np.ndarray, chunk: int, block: int,
                      on_block=None, workers: int = 1, sinks: np.ndarray | None = None) -> np.ndarray:
    """Chunked local attention: a query at position p meets the keys [C·floor(p/C), p], so each aligned chunk is a
    causal attention of its own; shapes as `causal_attention`. The pairs are Σ over chunks of tri(chunk length)."""
    b, kh, g, s, _ = q.shape
    out = np.empty((b, kh, g, s, vT.shape[-1]), dtype=q.dtype)
    for c0, c1 in chunk_bounds(s, chunk):
        out[..., c0:c1, :] = causal_attention(fc, q[..., c0:c1, :], kT[..., c0:c1], vT[..., c0:c1, :], None, block,
                                              on_block, workers, sinks)
    return out


def head_chunks(kv_heads: int, chunk: int) -> list[slice]:
    """The KV heads in chunks of `chunk`: the independent tasks of a prefill."""
    return [slice(k0, min(kv_heads, k0 + chunk)) for k0 in range(0, kv_heads, chunk)]


def band_scratch(tiling: Tiling, b: int, g: int, dtype) -> np.ndarray:
    """One band of scores, reused over a thread's blocks: no fresh pages per block."""
    return np.empty(tiling.band(b, g), dtype=dtype)


def attend_heads(fc: FlopCounter, rows: np.ndarray, kT: np.ndarray, vT: np.ndarray, out: np.ndarray,
                 window: int | None, tiling: Tiling, scratch: np.ndarray, on_block=None,
                 sinks: np.ndarray | None = None) -> None:
    """Every query block of a chunk of KV heads: rows [b, k, s·g, d], kT [b, k, d, s], vT [b, k, s, e] into
    out [b, k, s·g, e]. Heads outer, blocks inner: the chunk's keys and values stay in cache over its blocks.
    `sinks` [k, g]: the chunk's sink logits, or None."""
    s = kT.shape[-1]
    g = rows.shape[-2] // s
    q_norm, k_norm = _norms(rows), _norms(kT.swapaxes(-1, -2))  # |q·k| <= |q| |k| (Cauchy–Schwarz)
    for s0 in range(0, s, tiling.block):
        check_abort()  # an interrupted run's threads stop here, between blocks
        e = min(s, s0 + tiling.block)
        a0 = max(0, s0 - window + 1) if window else 0
        bound = np.max(q_norm[:, :, s0 * g : e * g]) * np.max(k_norm[:, :, a0:e])
        sink_rows = None if sinks is None else np.broadcast_to(  # [1, k, B·g, 1]: a row's head is its g index
            sinks[:, None, :], (sinks.shape[0], e - s0, g)).reshape(1, sinks.shape[0], (e - s0) * g, 1)
        _attend_block(fc, rows[:, :, s0 * g : e * g], kT, vT, out[:, :, s0 * g : e * g], s0, e, window, scratch,
                      bound >= SAFE_EXP, sink_rows)
        if on_block is not None:
            on_block()


def outputs(b: int, kh: int, g: int, s: int, e: int, dtype) -> tuple[np.ndarray, np.ndarray]:
    """The output [b, k, g, s, e] and its rows [b, k, s·g, e] (two views of one array).

    With one query per KV head (MHA, MLA) it is laid out [b, s, k, e], which is what the output projection
    reads, so no copy is needed there; with groups, [b, k, s, g, e], so that a head's rows stay one matrix.
    """
    if g == 1:
        out = np.empty((b, s, kh, e), dtype=dtype).transpose(0, 2, 1, 3)
        return out[:, :, None], out
    out = np.empty((b, kh, s, g, e), dtype=dtype)
    return out.transpose(0, 1, 3, 2, 4), out.reshape(b, kh, s * g, e)


def _rows(a: np.ndarray, t: Tiles, g: int) -> np.ndarray:
    """The query rows of tiles t in a block's q [.., B·g, d] or output [.., B·g, e]: [.., n, h·g, d or e]."""
    return _tiles(a, t.n, t.row0 * g, 0, t.step * g, 0, t.h * g, a.shape[-1])


def _band(scores: np.ndarray, t: Tiles, g: int, a0: int) -> np.ndarray:
    """Tiles t in a block's band of scores [.., B·g, keys from a0]: [.., n, h·g, w]."""
    return _tiles(scores, t.n, t.row0 * g, t.key0 - a0, t.step * g, t.step, t.h * g, t.w)


def _attend_block(fc: FlopCounter, q: np.ndarray, kT: np.ndarray, vT: np.ndarray, out: np.ndarray, s0: int, e: int,
                  window: int | None, scratch: np.ndarray, shift: bool, sinks: np.ndarray | None = None) -> None:
    """Queries [s0, e) of some KV heads: q [b, k, B·g, d], kT [b, k, d, s], vT [b, k, s, e] into out [b, k, B·g, e].

    The scores live in one band [b, k, B·g, keys a0 … e) carved from `scratch`: each tile's product is written into
    its place, the pairs no tile covers hold -inf (weight 0, never computed), and the softmax runs in place
    (without the max shift when `shift` is false: every score is known to be small).
    """
    g = q.shape[-2] // (e - s0)
    a0 = max(0, s0 - window + 1) if window else 0  # the first key of the block's first query
    lo = max(0, e - window) if window else 0
    tiles = block_tiles(s0, e, window)
    shape = q.shape[:-1] + (e - a0,)
    scores = scratch[: int(np.prod(shape))].reshape(shape)
    scores[..., : lo - a0] = -np.inf  # the window's trailing edge and the diagonal triangle are partly masked
    scores[..., s0 - a0 :] = -np.inf
    for t in tiles:  # [n, h·g, d] @ [n, d, w] for the n tiles of t at once
        fc.matmul("attn/scores", _rows(q, t, g), _tiles(kT, t.n, 0, t.key0, 0, t.step, kT.shape[-2], t.w),
                  out=_band(scores, t, g, a0))
    sums = softmax_(scores, shift) if sinks is None else softmax_sink_(scores, sinks)
    _mix(fc, scores, vT, out, tiles, g, a0)
    if sums is not None:
        out /= sums


def _mix(fc: FlopCounter, p: np.ndarray, vT: np.ndarray, out: np.ndarray, tiles: list[Tiles], g: int, a0: int) -> None:
    """out [.., B·g, e] <- the sum over tiles of p @ v: each tile adds into its rows."""
    first = tiles[0]
    whole = first.n == 1 and first.h * g == out.shape[-2]  # the shared rectangle: it meets every query of the block
    if whole:  # written straight into the output, which needs no zeroing then
        fc.matmul("attn/mix", _band(p, first, g, a0)[..., 0, :, :], vT[..., first.key0 : first.key0 + first.w, :],
                  out=out)
    else:
        out[...] = 0
    for t in tiles[1:] if whole else tiles:
        _rows(out, t, g)[...] += fc.matmul("attn/mix", _band(p, t, g, a0),
                                           _tiles(vT, t.n, t.key0, 0, t.step, 0, t.w, vT.shape[-1]))


def softmax_sink(scores: np.ndarray, sinks: np.ndarray) -> np.ndarray:
    """Softmax over the last axis whose denominator also holds exp(sink) (sinks broadcast to scores[..., :1]): the
    sink takes weight but gives no value (gpt-oss). In float32 or wider, as `softmax`."""
    wide = scores.astype(np.float32) if scores.dtype == np.float16 else scores
    sink = sinks.astype(wide.dtype)
    peak = np.maximum(np.max(wide, axis=-1, keepdims=True), sink)
    e = np.exp(wide - peak)
    return e / (np.sum(e, axis=-1, keepdims=True) + np.exp(sink - peak))


def softmax_sink_(scores: np.ndarray, sinks: np.ndarray) -> np.ndarray | None:
    """`softmax_sink` in place, the division left to the caller as `softmax_` does (float16: normalised here)."""
    if scores.dtype == np.float16:
        scores[...] = softmax_sink(scores, sinks)
        return None
    sink = sinks.astype(scores.dtype)
    peak = np.maximum(np.max(scores, axis=-1, keepdims=True), sink)
    scores -= peak
    np.exp(scores, out=scores)
    return np.sum(scores, axis=-1, keepdims=True) + np.exp(sink - peak)


def attend_all(fc: FlopCounter, q: np.ndarray, kT: np.ndarray, vT: np.ndarray,
               sinks: np.ndarray | None = None) -> np.ndarray:
    """One new query per sequence over all held keys (a decode step): q [b, k, g, 1, d] -> [b, k, g, 1, e];
    sinks [k, g] or None."""
    scores = fc.matmul("attn/scores", q, kT[:, :, None])
    p = softmax(scores) if sinks is None else softmax_sink(scores, sinks[:, :, None, None])
    return fc.matmul("attn/mix", p.astype(q.dtype), vT[:, :, None])




# ---------------------------------------------------------------- DeepSeek-V3.2's lightning indexer


def index_band(fc: FlopCounter, q: np.ndarray, w: np.ndarray, k: np.ndarray, s0: int, e: int,
               window: int | None) -> tuple[np.ndarray, int]:
    """The indexer's scores of the queries [s0, e) over every key each can see: Σ_h w_h·ReLU(q_h·k).

    q [b, s, H, d], w [b, s, H], k [b, s, d] -> band [b, B, keys a0 … e) (-inf where not visible) and a0. The
    pairs are those of `block_tiles`, each scored once: 2·H·d for the heads' products and 2·H for the weighted sum
    (attn/index_scores), so the count is exactly 2·scanned·H·(d + 1).
    """
    b, _, n_heads, d = q.shape
    a0 = max(0, s0 - window + 1) if window else 0
    rows = q[:, s0:e].reshape(b, 1, (e - s0) * n_heads, d)  # a position's H heads are consecutive rows (g = H)
    kT = k.transpose(0, 2, 1)[:, None]  # [b, 1, d, s]
    weights = w[:, None, s0:e]  # [b, 1, B, H]
    band = np.full((b, 1, e - s0, e - a0), -np.inf, dtype=q.dtype)
    for t in block_tiles(s0, e, window):
        raw = fc.matmul("attn/index_scores", _rows(rows, t, n_heads), _tiles(kT, t.n, 0, t.key0, 0, t.step, d, t.w))
        np.maximum(raw, 0, out=raw)  # ReLU, [b, 1, n, h·H, w]
        raw = raw.reshape(raw.shape[:-2] + (t.h, n_heads, t.w))
        mixed = fc.matmul("attn/index_scores", _rows(weights, t, 1)[..., None, :], raw)  # [b, 1, n, h, 1, w]
        _band(band, t, 1, a0)[...] = mixed[..., 0, :]
    return band[:, 0], a0


def top_keys(band: np.ndarray, a0: int, k: int) -> np.ndarray:
    """The k highest-scored keys of each row of an index band [b, n, keys from a0]: absolute positions [b, n, k]."""
    return np.argpartition(-band, k - 1, axis=-1)[..., :k] + a0


def attend_selected(fc: FlopCounter, q: np.ndarray, k: np.ndarray, v: np.ndarray, sel: np.ndarray,
                    out: np.ndarray) -> None:
    """Each query over its own selected keys: q [b, h, n, d] (scaled), k [b, h, t, d], v [b, h, t, e] and
    sel [b, n, k] (key positions) into out [b, h, n, e]; 2·n·h·k·(d or e) FLOPs, only the pairs selected. Rows in
    groups whose gathered K and V stay within SCORE_CHUNK elements."""
    b, h, n, d = q.shape
    per_row = b * h * sel.shape[-1] * (d + v.shape[-1])
    step = max(1, SCORE_CHUNK // per_row)
    for r0 in range(0, n, step):
        check_abort()
        idx = sel[:, None, r0 : r0 + step, :, None]  # [b, 1, m, k, 1]
        ks = np.take_along_axis(k[:, :, None], idx, axis=3)  # [b, h, m, k, d]
        vs = np.take_along_axis(v[:, :, None], idx, axis=3)
        scores = fc.matmul("attn/scores", q[:, :, r0 : r0 + step, None], ks.swapaxes(-1, -2))  # [b, h, m, 1, k]
        out[:, :, r0 : r0 + step] = fc.matmul("attn/mix", softmax(scores).astype(q.dtype), vs)[..., 0, :]
