"""Reference attention layers in NumPy: MHA/GQA/MQA with RoPE, causal masks and windows, and DeepSeek's MLA.

Every product goes through a FlopCounter, so the FLOPs a run reports are the ones it executed; the exact causal
attention itself is in `kvcalc.backend.causal`. Axis letters are those of `kvcalc.backend.ops`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvcalc.backend.causal import (
    attend_all,
    attend_heads,
    attend_selected,
    band_scratch,
    blocks,
    causal_attention,
    chunk_bounds,
    chunked_attention,
    head_chunks,
    index_band,
    outputs,
    prefill_tiling,
    query_rows,
    top_keys,
)
from kvcalc.backend.ops import FlopCounter, apply_rope, apply_rope_, held, random_weight, rms_norm, rope_span, softmax, softmax_
from kvcalc.backend.recurrent import build_layer as state_layer
from kvcalc.backend.recurrent import plan_layer as state_plan
from kvcalc.backend.threads import run_tasks

ROPE_THETA = 10_000.0


def _layer_norm(x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """LayerNorm over the last axis without a learned weight or bias (in float32 for float16)."""
    wide = x.astype(np.float32) if x.dtype == np.float16 else x
    centred = wide - np.mean(wide, axis=-1, keepdims=True)
    return (centred / np.sqrt(np.mean(centred * centred, axis=-1, keepdims=True) + eps)).astype(x.dtype)


def _keep(x: np.ndarray, window: int | None) -> np.ndarray:
    """The last W positions of a cache tensor [b, t, ...], holding only its own memory (ops.held), so its nbytes is
    what is held: a slice alone kept the whole prompt's K/V alive at batch 1, where it is contiguous."""
    return held(x[:, -window:] if window and x.shape[1] > window else x)


@dataclass
class Cache:
    """One layer's KV cache: named tensors [b, held, ...] and the number of tokens seen so far."""

    tensors: dict[str, np.ndarray]
    seen: int

    @property
    def nbytes(self) -> int:
        return sum(int(t.nbytes) for t in self.tensors.values())


# ---------------------------------------------------------------- MHA / GQA / MQA


class GroupedQueryAttention:
    """MHA (n_kv = n_h), GQA and MQA (n_kv = 1) with RoPE on queries and keys.

    Options of the Heads kinds that change shapes, FLOPs or numbers: values of another size (value_dim e, so V is
    [b, t, k, e] and W_O [h·e, m]); an output gate (W_G, counted under attn/q: the output times sigmoid(x W_G),
    Qwen3-Next); k_eq_v (no W_V: v is the key projection, normalised, before RoPE; Gemma 4); sinks (one logit per
    query head in every softmax denominator; gpt-oss); and chunked local attention of chunk C (Llama 4: a query at
    position p meets the keys [C·floor(p/C), p]; the cache holds min(seen, C) tokens).
    """

    def __init__(self, d_model: int, n_heads: int, n_kv: int, head_dim: int, window: int | None,
                 rng: np.random.Generator, dtype, block: int = 256, workers: int = 1, *, value_dim: int | None = None,
                 chunk: int | None = None, gate: bool = False, k_eq_v: bool = False, sinks: bool = False):
        self.m, self.h, self.k, self.d, self.window, self.dtype, self.block = d_model, n_heads, n_kv, head_dim, window, dtype, block
        self.e, self.chunk, self.k_eq_v = value_dim or head_dim, chunk, k_eq_v
        if (gate or k_eq_v) and self.e != head_dim:
            raise ValueError("an output gate or k_eq_v needs values of the key's size (v_head_dim = head_dim)")
        self.workers = workers  # threads for the prefill's attention
        self.g = n_heads // n_kv
        self.wq = random_weight(rng, (d_model, n_heads * head_dim), d_model, dtype)
        self.wk = random_weight(rng, (d_model, n_kv * head_dim), d_model, dtype)
        self.wv = None if k_eq_v else random_weight(rng, (d_model, n_kv * self.e), d_model, dtype)
        self.wo = random_weight(rng, (n_heads * self.e, d_model), n_heads * self.e, dtype)
        self.wg = random_weight(rng, (d_model, n_heads * head_dim), d_model, dtype) if gate else None
        # [k, g]: head k·g + j's sink logit (learned in gpt-oss; random here)
        self.sinks = rng.standard_normal((n_kv, self.g)).astype(dtype) if sinks else None

    @property
    def span(self) -> int | None:
        """The most tokens the layer holds: its window or chunk (None: all)."""
        return self.window or self.chunk

    def _qkv(self, fc: FlopCounter, x: np.ndarray, start: int):
        """Projections and RoPE of tokens at positions start…: x [b, s, m] -> q [b, k, g, s, d], k [b, s, k, d],
        v [b, s, k, e], and the output gate [b, s, h·d] (None without one)."""
        b, s, _ = x.shape
        cos, sin = rope_span(start, s, self.d, ROPE_THETA, self.dtype)
        q = apply_rope_(fc.matmul("attn/q", x, self.wq).reshape(b, s, self.h, self.d), cos, sin)
        k = fc.matmul("attn/k", x, self.wk).reshape(b, s, self.k, self.d)
        if self.wv is None:  # k_eq_v: the values are the keys' projection, normalised and not rotated
            v = rms_norm(k)
        else:
            v = fc.matmul("attn/v", x, self.wv).reshape(b, s, self.k, self.e)
        apply_rope_(k, cos, sin)
        gate = None if self.wg is None else fc.matmul("attn/q", x, self.wg)  # q_proj's second half (Qwen3-Next)
        # scaled into the layout [b, k, s, g, d]: a KV head's queries are then consecutive rows for its products
        q = np.multiply(q.reshape(b, s, self.k, self.g, self.d).transpose(0, 2, 1, 3, 4), self.dtype(self.d ** -0.5),
                        order="C")
        return q.transpose(0, 1, 3, 2, 4), k, v, gate

    def _out(self, fc: FlopCounter, o: np.ndarray, gate: np.ndarray | None = None) -> np.ndarray:
        b, _, _, s, _ = o.shape  # [b, k, g, s, e] -> [b, s, h·e] (times the gate) -> [b, s, m]
        o = o.transpose(0, 3, 1, 2, 4).reshape(b, s, self.h * self.e)
        if gate is not None:
            o = o * (1.0 / (1.0 + np.exp(-gate)))  # sigmoid: elementwise, not counted
        return fc.matmul("attn/o", o, self.wo)

    on_block = None  # called after each prefill block, for a progress bar

    def prefill_blocks(self, batch: int, s: int) -> int:
        if self.chunk:
            return sum(blocks(batch, self.k, self.g, c1 - c0, None, self.block) for c0, c1 in chunk_bounds(s, self.chunk))
        return blocks(batch, self.k, self.g, s, self.window, self.block)

    def prefill(self, fc: FlopCounter, x: np.ndarray) -> tuple[np.ndarray, Cache]:
        """Attention over a prompt x [b, s, m]; returns the output and the cache of its last min(s, W or C) tokens."""
        q, k, v, gate = self._qkv(fc, x, 0)
        kT, vT = k.transpose(0, 2, 3, 1), v.transpose(0, 2, 1, 3)
        if self.chunk:
            o = chunked_attention(fc, q, kT, vT, self.chunk, self.block, self.on_block, self.workers, self.sinks)
        else:
            o = causal_attention(fc, q, kT, vT, self.window, self.block, self.on_block, self.workers, self.sinks)
        return self._out(fc, o, gate), Cache({"k": _keep(k, self.span), "v": _keep(v, self.span)}, x.shape[1])

    def decode(self, fc: FlopCounter, x: np.ndarray, cache: Cache, schedule: str = "naive") -> tuple[np.ndarray, Cache]:
        """One new token x [b, 1, m] at position p = cache.seen: append its K/V, attend over the held keys (under a
        chunk, only those since its chunk began: p mod C + 1 of them)."""
        p = cache.seen
        q, k, v, gate = self._qkv(fc, x, p)
        keys = _keep(np.concatenate([cache.tensors["k"], k], axis=1), self.span)
        values = _keep(np.concatenate([cache.tensors["v"], v], axis=1), self.span)
        n = p % self.chunk + 1 if self.chunk else keys.shape[1]  # the keys this query meets: the last n held
        o = attend_all(fc, q, keys[:, -n:].transpose(0, 2, 3, 1), values[:, -n:].transpose(0, 2, 1, 3), self.sinks)
        return self._out(fc, o, gate), Cache({"k": keys, "v": values}, p + 1)


# ---------------------------------------------------------------- DeepSeek's multi-head latent attention


def tie_gap(scores: np.ndarray, own: np.ndarray, taken: np.ndarray, a0: int) -> float:
    """How far the keys `taken` [b, k] reach below the k-th best of `own` [b, k] in score rows [b, keys from a0],
    relative to the row's largest |score|: 0 when they are the same set, small for a near tie at the cut, inf for
    a key the row cannot see."""
    rows = np.arange(scores.shape[0])[:, None]
    kth = scores[rows, own - a0].min(axis=-1).astype(np.float64)
    worst = scores[rows, taken - a0].min(axis=-1).astype(np.float64)
    if not np.all(np.isfinite(worst)):
        return float("inf")
    finite = np.where(np.isfinite(scores), np.abs(scores), 0).max(axis=-1).astype(np.float64)
    return float(np.max(np.maximum(kth - worst, 0) / np.maximum(finite, np.finfo(np.float64).tiny)))


class LatentAttention:
    """MLA as DeepSeek-V2 §2.1 defines it: a latent c_KV (d_c) and a decoupled RoPE key k_R (d_R) shared by heads.

    rope="decoupled" is DeepSeek's design. rope="plain" rotates the up-projected keys instead (the RoPE
    demonstration): then W_UK cannot be folded into the query, and the absorbed shortcut is wrong.
    """

    def __init__(self, d_model: int, n_heads: int, kv_lora_rank: int, q_lora_rank: int | None, qk_nope: int,
                 qk_rope: int, v_head_dim: int, window: int | None, rng: np.random.Generator, dtype,
                 mla_cache: str = "latent", block: int = 256, rope: str = "decoupled", workers: int = 1,
                 index: tuple[int, int, int] | None = None):
        self.m, self.h, self.c, self.qc = d_model, n_heads, kv_lora_rank, q_lora_rank
        self.nope, self.r, self.e, self.window, self.dtype = qk_nope, qk_rope, v_head_dim, window, dtype
        self.layout, self.block, self.rope, self.workers = mla_cache, block, rope, workers
        if q_lora_rank:
            self.wdq = random_weight(rng, (d_model, q_lora_rank), d_model, dtype)  # W_DQ
        q_in = q_lora_rank or d_model
        self.wuq = random_weight(rng, (q_in, n_heads * (qk_nope + qk_rope)), q_in, dtype)  # W_UQ and W_QR (or W_Q)
        self.wdkv = random_weight(rng, (d_model, kv_lora_rank + qk_rope), d_model, dtype)  # W_DKV and W_KR
        wukv = random_weight(rng, (kv_lora_rank, n_heads * (qk_nope + v_head_dim)), kv_lora_rank, dtype)  # W_UK, W_UV
        self.wo = random_weight(rng, (n_heads * v_head_dim, d_model), n_heads * v_head_dim, dtype)  # W_O
        per_head = wukv.reshape(kv_lora_rank, n_heads, qk_nope + v_head_dim)  # held per head only (both schedules)
        self.w_uk = np.ascontiguousarray(per_head[:, :, :qk_nope].transpose(1, 2, 0))  # [h, nope, c]
        self.w_uv = np.ascontiguousarray(per_head[:, :, qk_nope:].transpose(1, 0, 2))  # [h, c, e]
        self.scale = self.dtype((qk_nope + qk_rope) ** -0.5)
        self.index = index  # DeepSeek-V3.2's indexer: (H_I heads, d_I, top-k), drawn after MLA's own weights
        if index:
            h_i, d_i, _ = index
            self.wiq = random_weight(rng, (q_in, h_i * d_i), q_in, dtype)  # W_IQ (Indexer.wq_b) reads c_Q
            self.wik = random_weight(rng, (d_model, d_i), d_model, dtype)  # W_IK (Indexer.wk)
            self.wiw = random_weight(rng, (d_model, h_i), d_model, dtype)  # W_IW (Indexer.weights_proj)

    def _index_keys(self, fc: FlopCounter, x: np.ndarray) -> np.ndarray:
        """x [b, s, m] -> the indexer's keys [b, s, d_I], LayerNorm'd (Indexer.k_norm): what its cache holds."""
        return _layer_norm(fc.matmul("attn/index", x, self.wik))

    def _index_queries(self, fc: FlopCounter, q_in: np.ndarray, x: np.ndarray):
        """The indexer's queries q_I [b, s, H_I, d_I] (from c_Q) and head weights w [b, s, H_I] (from x, scaled)."""
        h_i, d_i, _ = self.index or (0, 0, 0)
        b, s, _ = x.shape
        q = fc.matmul("attn/index", q_in, self.wiq).reshape(b, s, h_i, d_i)
        w = fc.matmul("attn/index", x, self.wiw) * self.dtype((h_i * d_i) ** -0.5)
        return q, w

    def _sparse(self, s: int) -> bool:
        """Whether the top-k drops keys in a prefill of s tokens (else every visible key is attended)."""
        if self.index is None:
            return False
        topk = self.index[2]
        return topk < s and not (self.window and self.window <= topk)

    def _index_blocks(self, s: int) -> list[tuple[int, int]]:
        """The query blocks the indexer scores a prompt by (at most `block`, which is at most the window)."""
        return [(s0, min(s, s0 + self.block)) for s0 in range(0, s, self.block)]

    def _q_input(self, fc: FlopCounter, x: np.ndarray) -> np.ndarray:
        """What W_UQ reads: the normalised query latent c_Q [b, s, q] (or x itself when there is no q_lora_rank)."""
        return rms_norm(fc.matmul("attn/q_down", x, self.wdq)) if self.qc else x

    def _queries(self, fc: FlopCounter, q_in: np.ndarray, start: int, heads: slice | None = None,
                 out: np.ndarray | None = None) -> np.ndarray:
        """q_in [b, s, q] -> q [b, s, n, nope + r] of the n heads `heads` (default all): q_nope, then q_rope
        rotated in place. `out`, if given, is a contiguous [b, s, n·(nope + r)] to write them into."""
        heads = heads or slice(0, self.h)
        b, s, _ = q_in.shape
        d = self.nope + self.r
        cols = self.wuq[:, heads.start * d : heads.stop * d]  # a head's columns of W_UQ and W_QR are adjacent
        q = fc.matmul("attn/q_up" if self.qc else "attn/q", q_in, cols, out=out).reshape(b, s, -1, d)
        cos, sin = rope_span(start, s, self.r, ROPE_THETA, self.dtype)
        apply_rope_(q[..., self.nope :], cos, sin)
        return q

    def _latent(self, fc: FlopCounter, x: np.ndarray, start: int):
        """x [b, s, m] -> c_KV [b, s, c] (normalised) and k_R [b, s, r] (rotated): what the latent cache holds."""
        s = x.shape[1]
        down = fc.matmul("attn/kv_down", x, self.wdkv)
        cos, sin = rope_span(start, s, self.r, ROPE_THETA, self.dtype)
        return rms_norm(down[..., : self.c]), apply_rope(down[..., self.c :][:, :, None], cos, sin)[:, :, 0]

    def _expand(self, fc: FlopCounter, c_kv: np.ndarray, k_rope: np.ndarray, start: int):
        """Per-head K [b, t, h, nope + r] and V [b, t, h, e] of every head, rebuilt from the latent (W_UK, W_UV).

        Both are views of arrays laid out per head, [b, h, t, ·], the layout the attention products read best.
        """
        b, t, _ = c_kv.shape
        k = np.empty((b, self.h, t, self.nope + self.r), dtype=c_kv.dtype)
        v = np.empty((b, self.h, t, self.e), dtype=c_kv.dtype)
        self._expand_into(fc, c_kv, k_rope, start, slice(0, self.h), k, v)
        return k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)

    def _expand_into(self, fc: FlopCounter, c_kv: np.ndarray, k_rope: np.ndarray, start: int, heads: slice,
                     k: np.ndarray, v: np.ndarray) -> None:
        """K [b, n, t, nope + r] and V [b, n, t, e] of the n heads `heads`, written into k and v.

        [b, 1, t, c] @ [n, c, nope] and [n, c, e]: the heads' columns of W_UKV, head by head (the same FLOPs as
        one product); the up-projected keys are written next to a copy of the shared k_R, so K needs no
        concatenation.
        """
        fc.matmul("attn/kv_up", c_kv[:, None], self.w_uk[heads].transpose(0, 2, 1), out=k[..., : self.nope])
        fc.matmul("attn/kv_up", c_kv[:, None], self.w_uv[heads], out=v)
        if self.rope == "plain":  # rotate the up-projected keys themselves (what MLA must avoid)
            cos, sin = rope_span(start, c_kv.shape[1], self.nope, ROPE_THETA, self.dtype)
            apply_rope_(k[..., : self.nope].transpose(0, 2, 1, 3), cos, sin)  # as [b, t, n, nope]
        k[..., self.nope :] = k_rope[:, None]  # shared by every head

    def _q_full(self, q: np.ndarray, start: int) -> np.ndarray:
        """Queries q [b, s, h, nope + r] as [b, h, 1, s, nope + r], scaled in place (with plain RoPE the nope part
        is rotated too)."""
        if self.rope == "plain":
            cos, sin = rope_span(start, q.shape[1], self.nope, ROPE_THETA, self.dtype)
            apply_rope_(q[..., : self.nope], cos, sin)
        q *= self.scale
        return q.transpose(0, 2, 1, 3)[:, :, None]

    def _out(self, fc: FlopCounter, o: np.ndarray) -> np.ndarray:
        b, _, _, s, _ = o.shape  # [b, h, 1, s, e] -> [b, s, h·e] -> [b, s, m]
        return fc.matmul("attn/o", o[:, :, 0].transpose(0, 2, 1, 3).reshape(b, s, self.h * self.e), self.wo)

    def _held(self, c_kv, k_rope, k, v, seen: int, index_k: np.ndarray | None = None) -> Cache:
        if self.layout == "latent":  # the normalised latent and the rotated RoPE key (DeepSeek's inference code)
            held = {"c_kv": _keep(c_kv, self.window), "k_rope": _keep(k_rope, self.window)}
        else:
            held = {"k": _keep(k, self.window), "v": _keep(v, self.window)}
        if index_k is not None:  # the indexer's keys, beside the latent (Indexer.k_cache)
            held["index_k"] = _keep(index_k, self.window)
        return Cache(held, seen)

    on_block = None  # called after each prefill block, for a progress bar
    # DeepSeek Sparse Attention's top-k is discontinuous: a near tie at the cut may fall either way under the
    # dtype's rounding, so a run and its recomputation can pick different keys, both right. The run records
    # every query's keys (`chosen`, by query position, prefill and decode); the checks' recomputations take those
    # (`follow`) and record in `ties`, for each that differs from their own, how far below their own k-th best
    # score it reaches.
    chosen: dict[int, np.ndarray] | None = None
    follow: dict[int, np.ndarray] | None = None
    ties: list[float] | None = None

    def _top(self, scores: np.ndarray, a0: int, first: int) -> np.ndarray:
        """The top-k keys (absolute positions [b, n, k]) of score rows [b, n, keys from a0] for the queries at
        positions first, first + 1, ...: the indexer's own, or those in `follow`; recorded in `chosen`."""
        own = top_keys(scores, a0, self.index[2])  # type: ignore[index]
        if self.follow is None and self.chosen is None:
            return own
        sel = own.copy()
        for i in range(sel.shape[1]):
            if self.follow is not None and first + i in self.follow:
                sel[:, i] = self.follow[first + i]
                if self.ties is not None and not np.array_equal(np.sort(own[:, i]), np.sort(sel[:, i])):
                    self.ties.append(tie_gap(scores[:, i], own[:, i], sel[:, i], a0))
            if self.chosen is not None:
                self.chosen[first + i] = sel[:, i].astype(np.int32)
        return sel

    def prefill_blocks(self, batch: int, s: int) -> int:
        index = len(self._index_blocks(s)) if self.index else 0
        if self._sparse(s):
            return blocks(batch, self.h, 1, self.index[2], None, self.block) + index  # type: ignore[index]
        return blocks(batch, self.h, 1, s, self.window, self.block) + index

    def _indexer_prefill(self, fc: FlopCounter, q_in: np.ndarray, x: np.ndarray):
        """The indexer over a prompt: its keys [b, s, d_I], and each query block's band of scores over the keys it
        sees, as (s0, e, band [b, B, keys from a0], a0) (scored, and so counted, whether or not the top-k bites)."""
        index_k = self._index_keys(fc, x)
        q_i, w = self._index_queries(fc, q_in, x)

        def bands():
            for s0, e in self._index_blocks(x.shape[1]):
                band, a0 = index_band(fc, q_i, w, index_k, s0, e, self.window)
                yield s0, e, band, a0
                if self.on_block is not None:
                    self.on_block()

        return index_k, bands()

    def _prefill_sparse(self, fc: FlopCounter, x: np.ndarray) -> tuple[np.ndarray, Cache]:
        """A prompt longer than the top-k (DeepSeek Sparse Attention): the first k queries see at most k keys and
        attend them all (exact causal attention); every later query attends only its top-k keys by the indexer."""
        b, s, _ = x.shape
        topk = self.index[2]  # type: ignore[index]
        q_in = self._q_input(fc, x)
        c_kv, k_rope = self._latent(fc, x, 0)
        k, v = self._expand(fc, c_kv, k_rope, 0)  # every head's K and V, [b, t, h, ·] views of [b, h, t, ·]
        q = self._q_full(self._queries(fc, q_in, 0), 0)  # [b, h, 1, s, nope + r], scaled
        kh, vh = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)  # [b, h, t, ·]
        out5 = np.empty((b, s, self.h, self.e), dtype=self.dtype).transpose(0, 2, 1, 3)[:, :, None]
        out5[..., :topk, :] = causal_attention(fc, q[..., :topk, :], kh[:, :, :topk].transpose(0, 1, 3, 2),
                                               vh[:, :, :topk], None, self.block, self.on_block, self.workers)
        index_k, bands = self._indexer_prefill(fc, q_in, x)
        for s0, e, band, a0 in bands:
            lo = max(s0, topk)
            if lo < e:
                attend_selected(fc, q[:, :, 0, lo:e], kh, vh, self._top(band[:, lo - s0 :], a0, lo), out5[:, :, 0, lo:e])
        return self._out(fc, out5), self._held(c_kv, k_rope, k, v, s, index_k)

    def prefill(self, fc: FlopCounter, x: np.ndarray) -> tuple[np.ndarray, Cache]:
        """The prompt attended per head, with K and V up-projected from the latent (the engines' prefill, but for
        DeepSeek Sparse Attention's long prompts, which they attend in the latent space: README, MLA schedules).

        A chunk of heads at a time, each chunk a task for the prefill threads: its queries, its K and V, then its
        attention, in that thread's buffers. Only the expanded cache keeps every head's K and V.
        """
        b, s, _ = x.shape
        if self._sparse(s):
            return self._prefill_sparse(fc, x)
        q_in = self._q_input(fc, x)
        c_kv, k_rope = self._latent(fc, x, 0)
        out5, out = outputs(b, self.h, 1, s, self.e, self.dtype)
        tiling = prefill_tiling(b, self.h, 1, s, self.window, self.block)
        d = self.nope + self.r
        expanded = self.layout == "expanded"
        if expanded:
            k_all = np.empty((b, self.h, s, d), dtype=self.dtype)
            v_all = np.empty((b, self.h, s, self.e), dtype=self.dtype)

        def buffers():  # a thread's band of scores, and the queries (and K and V) of one chunk of heads
            q = np.empty(b * s * tiling.chunk * d, dtype=self.dtype)
            if expanded:
                return band_scratch(tiling, b, 1, self.dtype), q, None, None
            return (band_scratch(tiling, b, 1, self.dtype), q, np.empty((b, tiling.chunk, s, d), self.dtype),
                    np.empty((b, tiling.chunk, s, self.e), self.dtype))

        def chunk(heads: slice, bufs) -> None:
            band, q_buf, k_buf, v_buf = bufs
            n = heads.stop - heads.start
            q = self._queries(fc, q_in, 0, heads, out=q_buf[: b * s * n * d].reshape(b, s, n * d))
            k, v = (k_all[:, heads], v_all[:, heads]) if expanded else (k_buf[:, :n], v_buf[:, :n])
            self._expand_into(fc, c_kv, k_rope, 0, heads, k, v)
            attend_heads(fc, query_rows(self._q_full(q, 0)), k.transpose(0, 1, 3, 2), v, out[:, heads], self.window,
                         tiling, band, self.on_block)

        run_tasks(chunk, head_chunks(self.h, tiling.chunk), self.workers, buffers)
        index_k = None
        if self.index:  # every visible key scored; the top-k keeps them all at this length
            index_k, bands = self._indexer_prefill(fc, q_in, x)
            for _ in bands:
                pass
        if expanded:
            held = self._held(c_kv, k_rope, k_all.transpose(0, 2, 1, 3), v_all.transpose(0, 2, 1, 3), s, index_k)
        else:
            held = self._held(c_kv, k_rope, None, None, s, index_k)
        return self._out(fc, out5), held

    def _select(self, fc: FlopCounter, q_in: np.ndarray, x: np.ndarray, cache: Cache) -> tuple[np.ndarray, np.ndarray | None]:
        """A decode step's indexer: its keys with the new one [b, t, d_I], and the top-k held positions [b, k] (None
        when it keeps every held key). Every held key is scored (2·H_I·(d_I + 1) each)."""
        index_k = _keep(np.concatenate([cache.tensors["index_k"], self._index_keys(fc, x)], axis=1), self.window)
        q_i, w = self._index_queries(fc, q_in, x)  # [b, 1, H, d], [b, 1, H]
        raw = fc.matmul("attn/index_scores", q_i, index_k.transpose(0, 2, 1)[:, None])  # [b, 1, H, t]
        np.maximum(raw, 0, out=raw)
        scores = fc.matmul("attn/index_scores", w[:, :, None], raw)[:, 0]  # [b, 1, t]
        if index_k.shape[1] <= self.index[2]:  # type: ignore[index]
            return index_k, None
        first = cache.seen + 1 - index_k.shape[1]  # position of the oldest held key
        return index_k, self._top(scores, first, cache.seen)[:, 0] - first

    def decode(self, fc: FlopCounter, x: np.ndarray, cache: Cache, schedule: str = "absorbed") -> tuple[np.ndarray, Cache]:
        """One new token at position cache.seen, with the naive or the absorbed schedule (with an indexer, over the
        top-k held keys only)."""
        t0 = cache.seen
        q_in = self._q_input(fc, x)
        q = self._queries(fc, q_in, t0)
        c_new, kr_new = self._latent(fc, x, t0)
        index_k, sel = self._select(fc, q_in, x, cache) if self.index else (None, None)
        extra = {} if index_k is None else {"index_k": index_k}
        pick = (lambda a: a) if sel is None else (
            lambda a: np.take_along_axis(a, sel.reshape(sel.shape + (1,) * (a.ndim - 2)), axis=1))
        if self.layout == "expanded":  # naive only: up-project the new token, attend over cached per-head K/V
            k_new, v_new = self._expand(fc, c_new, kr_new, t0)
            k = _keep(np.concatenate([cache.tensors["k"], k_new], axis=1), self.window)
            v = _keep(np.concatenate([cache.tensors["v"], v_new], axis=1), self.window)
            o = attend_all(fc, self._q_full(q, t0), pick(k).transpose(0, 2, 3, 1), pick(v).transpose(0, 2, 1, 3))
            return self._out(fc, o), Cache({"k": k, "v": v, **extra}, t0 + 1)
        c_kv = _keep(np.concatenate([cache.tensors["c_kv"], c_new], axis=1), self.window)
        k_rope = _keep(np.concatenate([cache.tensors["k_rope"], kr_new], axis=1), self.window)
        held = Cache({"c_kv": c_kv, "k_rope": k_rope, **extra}, t0 + 1)
        first = t0 + 1 - c_kv.shape[1]  # position of the oldest held token
        c_att, kr_att = pick(c_kv), pick(k_rope)
        if schedule == "naive":  # rebuild per-head K and V of every attended token (HF transformers 5.x)
            k, v = self._expand(fc, c_att, kr_att, first)
            o = attend_all(fc, self._q_full(q, t0), k.transpose(0, 2, 3, 1), v.transpose(0, 2, 1, 3))
            return self._out(fc, o), held
        return self._out(fc, self._absorbed(fc, q[..., : self.nope], q[..., self.nope :], c_att, kr_att, t0)), held

    def _absorbed(self, fc, q_nope, q_rope, c_kv, k_rope, t0):
        """W_UK folded into the query and W_UV into the output; attention over c_KV and k_R (DeepSeek-V2 §2.1.3)."""
        if self.rope == "plain":  # the shortcut ignores the key rotation it cannot fold: wrong on purpose
            cos, sin = rope_span(t0, 1, self.nope, ROPE_THETA, self.dtype)
            q_nope = apply_rope(q_nope, cos, sin)
        q_lat = fc.matmul("attn/q_absorb", q_nope.transpose(0, 2, 1, 3), self.w_uk)  # [b, h, 1, nope] @ [h, nope, c]
        scores = fc.matmul("attn/scores", q_lat * self.scale, c_kv.transpose(0, 2, 1)[:, None])  # [b, h, 1, t]
        scores = scores + fc.matmul("attn/scores", q_rope.transpose(0, 2, 1, 3) * self.scale, k_rope.transpose(0, 2, 1)[:, None])
        p = softmax(scores).astype(self.dtype)
        o_lat = fc.matmul("attn/mix", p, c_kv[:, None])  # [b, h, 1, c]
        return fc.matmul("attn/v_up", o_lat, self.w_uv)[:, :, None]  # [b, h, 1, e] -> [b, h, 1, 1, e]


# ---------------------------------------------------------------- cross-attention (encoder–decoder models)


class CrossAttention:
    """Decoder queries over a fixed encoder output (Whisper): K/V of every encoder position, projected once per input
    (cross/kv) and cached; each query meets every encoder position (no mask, no RoPE)."""

    def __init__(self, d_model: int, n_heads: int, n_kv: int, head_dim: int, value_dim: int, rng: np.random.Generator,
                 dtype):
        self.h, self.k, self.d, self.e, self.dtype = n_heads, n_kv, head_dim, value_dim, dtype
        self.g = n_heads // n_kv
        self.wq = random_weight(rng, (d_model, n_heads * head_dim), d_model, dtype)
        self.wk = random_weight(rng, (d_model, n_kv * head_dim), d_model, dtype)
        self.wv = random_weight(rng, (d_model, n_kv * value_dim), d_model, dtype)
        self.wo = random_weight(rng, (n_heads * value_dim, d_model), n_heads * value_dim, dtype)

    def kv(self, fc: FlopCounter, enc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The encoder output [b, n, m] -> K [b, n, k, d] and V [b, n, k, e]: what the cross cache holds."""
        b, n, _ = enc.shape
        return (fc.matmul("cross/kv", enc, self.wk).reshape(b, n, self.k, self.d),
                fc.matmul("cross/kv", enc, self.wv).reshape(b, n, self.k, self.e))

    def attend(self, fc: FlopCounter, x: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
        """x [b, s, m] over the cached encoder K/V: [b, s, m] (s·n pairs per head)."""
        b, s, _ = x.shape
        q = fc.matmul("cross/q", x, self.wq).reshape(b, s, self.k, self.g, self.d).transpose(0, 2, 3, 1, 4)
        scores = fc.matmul("cross/scores", q * self.dtype(self.d ** -0.5), k.transpose(0, 2, 3, 1)[:, :, None])
        sums = softmax_(scores)  # in place: softmax(scores).astype() held three score-sized arrays (memory's plan: 2)
        o = fc.matmul("cross/mix", scores, v.transpose(0, 2, 1, 3)[:, :, None])
        if sums is not None:
            o /= sums
        return fc.matmul("cross/o", o.transpose(0, 3, 1, 2, 4).reshape(b, s, self.h * self.e), self.wo)


class WithCross:
    """A decoder layer: its self-attention, then cross-attention over the encoder output `memory` [b, n, m] (set
    by the runner), on the normalised sum of the layer's input and its self-attention output. The cache holds both:
    the self-attention tensors, and cross/k, cross/v of the n encoder positions."""

    def __init__(self, inner, cross: CrossAttention):
        self.inner, self.cross = inner, cross
        self.memory: np.ndarray | None = None

    @property
    def on_block(self):
        return self.inner.on_block

    @on_block.setter
    def on_block(self, hook) -> None:
        self.inner.on_block = hook

    def prefill_blocks(self, batch: int, s: int) -> int:
        return self.inner.prefill_blocks(batch, s)

    def _with_cross(self, fc: FlopCounter, x: np.ndarray, y: np.ndarray, own: Cache, k, v) -> tuple[np.ndarray, Cache]:
        y = y + self.cross.attend(fc, rms_norm(x + y), k, v)
        return y, Cache({**own.tensors, "cross/k": k, "cross/v": v}, own.seen)

    def prefill(self, fc: FlopCounter, x: np.ndarray) -> tuple[np.ndarray, Cache]:
        if self.memory is None:
            raise ValueError("a cross-attention layer needs the encoder output (memory) before its prefill")
        y, own = self.inner.prefill(fc, x)
        return self._with_cross(fc, x, y, own, *self.cross.kv(fc, self.memory))

    def decode(self, fc: FlopCounter, x: np.ndarray, cache: Cache, schedule: str = "naive") -> tuple[np.ndarray, Cache]:
        own = {n: t for n, t in cache.tensors.items() if not n.startswith("cross/")}
        y, new = self.inner.decode(fc, x, Cache(own, cache.seen), schedule)
        return self._with_cross(fc, x, y, new, cache.tensors["cross/k"], cache.tensors["cross/v"])


def with_cross(group, layer, rng, dtype):
    """The layer itself, or (a group with cross-attention) the layer followed by its cross-attention block."""
    att = group.cross
    if att is None:
        return layer
    from kvcalc.attention.gqa import Heads
    from kvcalc.errors import KvcalcError

    if not isinstance(att, Heads) or att.output_gate or att.k_eq_v or att.sinks:
        raise KvcalcError("kvcalc run: cross-attention runs as plain MHA/GQA/MQA (no output gate, k_eq_v or sinks)")
    cl = group.cross_layer
    return WithCross(layer, CrossAttention(cl.d_model, att.n_heads, att.kv_heads(cl), att.d_h(cl), att.d_v(cl), rng,
                                           dtype))


# ---------------------------------------------------------------- one NumPy layer per attention kind


@dataclass(frozen=True)
class LayerPlan:
    """What a layer holds while it runs, per token, beyond its weights and cache (for the memory plan, in elements).

    width: activations per token of a prefill; kv_heads, g: the heads attended apart and the query heads per one;
    value_dim: a row of p @ v; chunk_width: per token and head, what a prefill thread builds for its chunk of heads;
    rebuilt: per held token, what the naive decode schedule rebuilds (MLA: every head's K and V).
    index_rows: per query and visible key, the indexer's scores of one query block (H_I heads and their sum);
    sparse_above: a prompt longer than this takes the top-k path, which holds sparse_width per token (every head's
    K and V) and gathers gather_row elements per query (its k keys' K and V for every head).
    """

    width: int
    kv_heads: int
    g: int
    value_dim: int
    chunk_width: int = 0
    rebuilt: int = 0
    index_rows: int = 0
    sparse_above: int | None = None
    sparse_width: int = 0
    gather_row: int = 0


def _gqa_layer(group, rng, dtype, layout: str, block: int, rope: str, workers: int) -> GroupedQueryAttention:
    att, layer = group.attention, group.layer
    return GroupedQueryAttention(layer.d_model, att.n_heads, att.kv_heads(layer), att.d_h(layer), layer.window, rng,
                                 dtype, block, workers, value_dim=att.d_v(layer), chunk=layer.chunk,
                                 gate=att.output_gate, k_eq_v=att.k_eq_v, sinks=att.sinks)


def _gqa_plan(att, layer, layout: str) -> LayerPlan:
    h, n_kv, d, e = att.n_heads, att.kv_heads(layer), att.d_h(layer), att.d_v(layer)
    # q (and, briefly, its regrouped copy), the attention output and its [s, h·e] copy; K and V with RoPE's copy;
    # the output gate and the gated output
    return LayerPlan(width=2 * h * d + 2 * h * e + 2 * n_kv * (d + e) + (h * d + h * e if att.output_gate else 0),
                     kv_heads=n_kv, g=h // n_kv, value_dim=e)


def _mla_layer(group, rng, dtype, layout: str, block: int, rope: str, workers: int) -> LatentAttention:
    att, layer = group.attention, group.layer
    index = (att.index_n_heads, att.index_head_dim, att.index_topk) if att.indexed else None
    return LatentAttention(layer.d_model, att.n_heads, att.kv_lora_rank, att.q_lora_rank, att.qk_nope_head_dim,
                           att.qk_rope_head_dim, att.v_head_dim, layer.window, rng, dtype, layout, block, rope, workers,
                           index)


def _mla_plan(att, layer, layout: str) -> LayerPlan:
    h, qk, c, r, e = att.n_heads, att.qk_head_dim, att.kv_lora_rank, att.qk_rope_head_dim, att.v_head_dim
    # the attention output per head (e), c_Q, and the latent and k_R with copies; every head's K and V only for the
    # expanded cache (queries, and else K and V, a chunk of heads at a time, inside the prefill threads)
    width = h * e + (att.q_lora_rank or layer.d_model) + 2 * (c + r) + (h * (qk + e) if layout == "expanded" else 0)
    if not att.indexed:
        return LayerPlan(width=width, kv_heads=h, g=1, value_dim=e,
                         chunk_width=qk + (qk + e if layout == "latent" else 0), rebuilt=h * (qk + e))
    h_i, d_i, k = att.index_n_heads, att.index_head_dim, att.index_topk
    # the indexer: its keys (with LayerNorm's copies), queries and head weights per token
    return LayerPlan(width=width + 3 * d_i + h_i * d_i + h_i, kv_heads=h, g=1, value_dim=e,
                     chunk_width=qk + (qk + e if layout == "latent" else 0), rebuilt=h * (qk + e), index_rows=h_i + 1,
                     sparse_above=None if layer.window and layer.window <= k else k, sparse_width=h * (qk + e + qk),
                     gather_row=h * k * (qk + e))


# attention kind -> (build the layer, plan its memory); a new kind adds its layer here to be run by `kvcalc run`
LAYERS = {
    "mha": (_gqa_layer, _gqa_plan),
    "gqa": (_gqa_layer, _gqa_plan),
    "mqa": (_gqa_layer, _gqa_plan),
    "mla": (_mla_layer, _mla_plan),
    # constant-state layers (kvcalc.backend.recurrent): their state is measured instead of a KV cache
    "gated_deltanet": (state_layer, state_plan),
    "kda": (state_layer, state_plan),
    "mamba": (state_layer, state_plan),
    "mamba2": (state_layer, state_plan),
    "lightning": (state_layer, state_plan),
    "none": (state_layer, state_plan),
}
NOT_RUN = ("linear", "projection")  # a state of a size without structure; a projection that holds nothing


def layer_entry(kind: str):
    """The builder and planner of a kind's NumPy layer, or a KvcalcError for a kind the backend cannot run."""
    from kvcalc.errors import KvcalcError

    if kind not in LAYERS:
        raise KvcalcError(f"kvcalc run has no NumPy layer for attention kind {kind!r} (it runs {', '.join(LAYERS)})")
    return LAYERS[kind]
