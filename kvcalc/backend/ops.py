"""NumPy building blocks of the reference attention, with every matrix product counted where it runs.

Einsum/axis legend, used in the shape comments throughout the backend:
  b batch, s query position, t key position, m model dim (d_model), h query head, k KV head,
  g query heads per KV head (h = k·g), d head dim (q/k), e value head dim, c latent (kv_lora_rank),
  r RoPE dim (qk_rope_head_dim), q query latent (q_lora_rank).

FLOPs: a product of an m×k and a k×n matrix adds 2·m·n·k, batched over any leading axes. Constant-state layers
(kvcalc.backend.recurrent) also count the elementwise work of their recurrences, as their kinds do: `einsum`
counts each term it computes, and `count` records work the caller states (its comment says which).
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from functools import lru_cache

import numpy as np

# FLOPs of one uninterrupted product at most: Ctrl-C (and a stopping thread) is seen between pieces. A float32/64
# BLAS product is not cut in the main thread (pieces of a few hundred rows cost the prefill a quarter of its speed):
# one over 2^31 FLOPs runs in a helper thread that the main thread waits on in short joins, where Ctrl-C lands. In a
# prefill thread a piece is 2^35 FLOPs and at least PIECE_ROWS rows. NumPy has no BLAS for float16 (0.1-0.3 GFLOP/s
# here), so float16 products run on the float64 BLAS in tiles of at most HALF_TILE elements (`_half_product`).
PIECE_FLOPS_BLAS = 1 << 35
PIECE_ROWS = 256
WAIT_FLOPS = 1 << 31
HALF_TILE = 1 << 20  # float64 elements of a float16 product's upcast piece of a or b, or of its sums (8 MiB)
HALF_DEPTH = 1 << 11  # terms a float16 product's tile sums per element (a longer sum adds up several tiles)
HALF_SCRATCH = 4 * HALF_TILE * 8  # bytes a float16 product holds beside its operands: pieces of a and b, two sums
ABORT = threading.Event()  # set when a run is interrupted: prefill threads stop at their next piece


class Aborted(Exception):
    """Raised in a prefill thread whose run was interrupted (ABORT set), so it ends at its next product piece."""



def held(x: np.ndarray) -> np.ndarray:
    """`x` as an array that holds only its own elements: `x` itself where it is contiguous and all of the memory it
    views, else a copy. A contiguous slice of a larger array (a window's last W positions at batch 1, a convolution's
    last K − 1 inputs) would keep the whole parent alive while its nbytes counts only the slice."""
    root = x
    while isinstance(root.base, np.ndarray):
        root = root.base
    if x.flags.c_contiguous and root.nbytes == x.nbytes:
        return x
    return np.array(x, order="C", copy=True)

def product(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """np.matmul(a, b, out=out), interruptible: a large BLAS product in the main thread waited on in a helper thread,
    in a prefill thread in pieces of rows (or, for one row, of columns) of at most PIECE_FLOPS_BLAS each, each element
    the same dot product as in one call; float16 by float64 tiles (`_half_product`)."""
    if a.ndim < 2 or b.ndim < 2:
        return np.matmul(a, b, out=out)
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    batch = 1
    for d in np.broadcast_shapes(a.shape[:-2], b.shape[:-2]):
        batch *= d
    dtype = np.result_type(a, b)
    if dtype == np.float16:
        if out is None:
            out = np.empty(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (m, n), dtype=dtype)
        _half_product(a, b, out)
        return out
    flops = 2 * batch * m * n * k
    if threading.current_thread() is threading.main_thread():
        return _waited(a, b, out) if flops > WAIT_FLOPS else np.matmul(a, b, out=out)
    budget = PIECE_FLOPS_BLAS
    if flops <= budget:
        return np.matmul(a, b, out=out)
    if out is None:
        out = np.empty(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (m, n), dtype=dtype)
    if m > 1:  # pieces of rows: a[..., i:j, :] @ b
        step = max(PIECE_ROWS, budget // (2 * batch * n * k))
        if step >= m:
            return np.matmul(a, b, out=out)
        for i in range(0, m, step):
            check_abort()
            np.matmul(a[..., i : i + step, :], b, out=out[..., i : i + step, :])
    else:  # one row (a decode step): pieces of columns, a @ b[..., :, i:j]
        step = max(1, budget // (2 * batch * k))
        for i in range(0, n, step):
            check_abort()
            np.matmul(a, b[..., :, i : i + step], out=out[..., :, i : i + step])
    return out


def _half_product(a: np.ndarray, b: np.ndarray, out: np.ndarray, scratch: dict | None = None) -> None:
    """out[...] = a @ b for float16 operands, by tiles upcast to float64 on the BLAS: each element is a float64 sum of
    exact products (a float16 product has 22 significant bits) rounded once to float16, so however the product is
    tiled it rounds as one call would (barring a sum within 2^-40 of a float16 rounding boundary), and the run takes
    float32's time instead of NumPy's BLAS-less float16 loop's (100-1000x more). A tile sums at most HALF_DEPTH terms
    per element, and its pieces of a and b and its float64 sums hold at most HALF_TILE elements each, in buffers
    the call reuses; Ctrl-C and a stopping prefill thread are seen between tiles."""
    scratch = {} if scratch is None else scratch
    lead = out.shape[:-2]
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    depth = min(k, HALF_DEPTH)
    batch = math.prod(lead)
    if batch > 1 and batch * depth > HALF_TILE:  # a row of every batch element is over a tile: one index at a time
        for i in range(lead[0]):
            _half_product(_leading(a, len(lead), i), _leading(b, len(lead), i), out[i], scratch)
        return
    a_batch, b_batch = math.prod(a.shape[:-2]), math.prod(b.shape[:-2])
    cols = min(n, max(1, min(HALF_TILE // (b_batch * depth), HALF_TILE // batch)))
    rows = min(m, max(1, min(HALF_TILE // (a_batch * depth), HALF_TILE // (batch * cols))))
    for j in range(0, n, cols):
        for i in range(0, m, rows):
            target = out[..., i : i + rows, j : j + cols]
            total = _wide(scratch, "total", target.shape)
            for t in range(0, k, depth):
                check_abort()
                a_tile, b_tile = a[..., i : i + rows, t : t + depth], b[..., t : t + depth, j : j + cols]
                if t == 0 or depth == k:
                    np.matmul(_upcast(scratch, "a", a_tile), _upcast(scratch, "b", b_tile), out=total)
                else:
                    total += np.matmul(_upcast(scratch, "a", a_tile), _upcast(scratch, "b", b_tile),
                                       out=_wide(scratch, "part", target.shape))
            np.copyto(target, total, casting="same_kind")


def _wide(scratch: dict, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """A float64 array of `shape` in the call's buffer `name` (made, or made larger, on first need)."""
    size = math.prod(shape)
    if scratch.get(name) is None or scratch[name].size < size:
        scratch[name] = np.empty(size, dtype=np.float64)
    return scratch[name][:size].reshape(shape)


def _upcast(scratch: dict, name: str, x: np.ndarray) -> np.ndarray:
    """x in float64, copied into the call's buffer `name` (no fresh pages for each tile)."""
    wide = _wide(scratch, name, x.shape)
    np.copyto(wide, x)
    return wide


def _leading(x: np.ndarray, axes: int, i: int) -> np.ndarray:
    """x's slice at index i of the first of `axes` broadcast batch axes (x itself where it has no such axis, x[0]
    where it broadcasts along it)."""
    if x.ndim - 2 < axes:
        return x
    return x[0] if x.shape[0] == 1 else x[i]


def _waited(a: np.ndarray, b: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """np.matmul in a daemon thread, the caller waiting in 50 ms joins: a Ctrl-C interrupts the wait at once (the
    product, abandoned, ends with the process)."""
    box: dict[str, object] = {}

    def work() -> None:
        try:
            box["out"] = np.matmul(a, b, out=out)
        except BaseException as exc:  # a MemoryError, say: raised again in the caller
            box["error"] = exc

    t = threading.Thread(target=work, name="kvcalc-product", daemon=True)
    t.start()
    while t.is_alive():
        t.join(0.05)
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["out"]  # type: ignore[return-value]


def check_abort() -> None:
    """In a prefill thread of an interrupted run (ABORT set): raise Aborted, so the thread ends now."""
    if ABORT.is_set() and threading.current_thread() is not threading.main_thread():
        raise Aborted("the run was interrupted")


class FlopCounter:
    """Adds up the FLOPs of the products executed, by component ('attn/q', 'attn/scores', ...)."""

    def __init__(self) -> None:
        self.by_component: Counter = Counter()
        self.enabled = True
        self._lock = threading.Lock()  # prefill threads count into one counter: no update may be lost

    def matmul(self, component: str, a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """a @ b (NumPy broadcasting rules), counting 2·m·n·k for every broadcast batch element.

        `out`, when given, receives the product in place (it may be a strided view into a larger buffer).
        """
        if a.ndim > 1 and b.ndim > 1 and a.shape[-1] == b.shape[-2] == 1:  # an outer product: the same numbers
            out = np.multiply(a, b, out=out)  # without a BLAS call per batch element (dearer than the product here)
        else:
            out = product(a, b, out=out)
        if self.enabled:
            k = a.shape[-1]
            # out has the batch shape and m×n: its size is batch·m·n, so 2·size·k is 2·m·n·k per batch element
            with self._lock:
                self.by_component[component] += 2 * out.size * k
        return out

    def einsum(self, component: str, subscripts: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """np.einsum of two operands ('bsck,ck->bsc'), counting each term of the result it computes: 2 FLOPs (a
        multiply-add) per term when an index is summed over, 1 (a multiply) when none is (an elementwise product)."""
        out = np.einsum(subscripts, a, b)
        inputs, output = subscripts.replace(" ", "").split("->")
        extent: dict[str, int] = {}
        for letters, operand in zip(inputs.split(","), (a, b)):
            for letter, n in zip(letters, operand.shape):
                extent[letter] = max(extent.get(letter, 1), n)  # a broadcast axis of 1 takes the other's extent
        terms = 1
        for n in extent.values():
            terms *= n
        self.count(component, 2 * terms if set(extent) - set(output) else terms)
        return out

    def count(self, component: str, flops: int) -> None:
        """Record `flops` of elementwise work the caller executes outside a product (an exp, an add)."""
        if self.enabled:
            with self._lock:
                self.by_component[component] += int(flops)

    def total(self) -> int:
        return sum(self.by_component.values())


def rope_tables(positions: np.ndarray, dim: int, theta: float, dtype) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of RoPE at `positions`: [t] -> [t, dim/2] each (Su et al., RoFormer; base `theta`)."""
    inv_freq = 1.0 / theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    angles = np.outer(positions.astype(np.float64), inv_freq)
    return np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)


@lru_cache(maxsize=2)  # a layer asks for at most two spans at a time (MLA's plain-RoPE demonstration: r and nope)
def rope_span(start: int, count: int, dim: int, theta: float, dtype) -> tuple[np.ndarray, np.ndarray]:
    """`rope_tables` of the positions start … start + count − 1, read-only and kept for the next calls: a prefill asks
    for the same tables once per chunk of heads and every layer again (their float64 angles cost more than the
    rotation itself). Two spans at most are kept, so a long context's tables do not outlive the next decode steps."""
    cos, sin = rope_tables(np.arange(start, start + count), dim, theta, dtype)
    cos.setflags(write=False)
    sin.setflags(write=False)
    return cos, sin


def _rope_view(x: np.ndarray, cos: np.ndarray, sin: np.ndarray):
    """The halves of x [b, t, ..., d] and cos/sin [t, d/2] shaped to broadcast against them."""
    half = x.shape[-1] // 2
    shape = (1, cos.shape[0]) + (1,) * (x.ndim - 3) + (half,)
    return x[..., :half], x[..., half:], cos.reshape(shape), sin.reshape(shape)


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotate pairs (x[..., :d/2], x[..., d/2:]) by the position angles: [b, t, ..., d] with cos/sin [t, d/2].

    Elementwise (not a matrix product), so it adds no counted FLOPs.
    """
    return apply_rope_(x.astype(np.result_type(x, cos), copy=True), cos, sin)


ROPE_PIECE = 1 << 16  # elements of x rotated at a time: the temporaries stay in cache (256 KiB in float32)


def apply_rope_(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """`apply_rope` in place (x must have cos's dtype): no new array of x's size, the same numbers.

    By pieces of positions of about ROPE_PIECE elements: whole-array temporaries (two halves of x) would be fresh
    pages each time, which made a 4096-token query's rotation of llama3-70b take 0.1–0.4 s instead of 0.05 s.
    """
    step = max(1, ROPE_PIECE * cos.shape[0] // max(1, x.size))
    for t0 in range(0, x.shape[1], step):
        x1, x2, c, s = _rope_view(x[:, t0 : t0 + step], cos[t0 : t0 + step], sin[t0 : t0 + step])
        x1_sin = x1 * s  # x1 before it is overwritten
        x1 *= c
        x1 -= x2 * s  # x1·cos − x2·sin
        x2 *= c
        x2 += x1_sin  # x2·cos + x1·sin
    return x


def rms_norm(x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """RMSNorm without a learned weight (the weight would be all ones at initialisation)."""
    wide = x.astype(np.float32) if x.dtype == np.float16 else x
    out = wide / np.sqrt(np.mean(wide * wide, axis=-1, keepdims=True) + eps)
    return out.astype(x.dtype, copy=False)


def softmax(scores: np.ndarray) -> np.ndarray:
    """Softmax over the last axis in float32 or wider (float16 scores are upcast); -inf entries get weight 0."""
    wide = scores.astype(np.float32) if scores.dtype == np.float16 else scores
    peak = np.max(wide, axis=-1, keepdims=True)
    e = np.exp(wide - peak)
    return e / np.sum(e, axis=-1, keepdims=True)


def softmax_(scores: np.ndarray, shift: bool = True) -> np.ndarray | None:
    """Softmax over the last axis in place, the division left to the caller: returns the row sums to divide by.

    float32/64: scores become exp(s - row max), and the caller divides the (much smaller) product p @ v by the
    sums. The shift only keeps exp in range, so a caller that knows every |score| is small may skip it (shift
    False): exp(s) then neither overflows nor loses a row, and the ratios are the same up to round-off.
    float16 (whose sum of unnormalised products could overflow): normalised here in float32; returns None.
    """
    if scores.dtype == np.float16:
        scores[...] = softmax(scores)
        return None
    if shift:
        scores -= np.max(scores, axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    return np.sum(scores, axis=-1, keepdims=True)


WEIGHT_PIECE = 1 << 18  # float16 weights are drawn in float32 pieces of 1 MiB: no full-size float32 copy


def random_weight(rng: np.random.Generator, shape: tuple[int, ...], fan_in: int, dtype) -> np.ndarray:
    """N(0, 1/fan_in) weights, so activations keep unit scale through a product. Built in place (float16 drawn
    in float32 pieces), so building a weight holds no second copy of it: the memory plan counts one."""
    scale = fan_in ** -0.5
    if dtype != np.float16:
        w = rng.standard_normal(shape, dtype=dtype)
        w *= np.asarray(scale, dtype=dtype)
        return w
    out = np.empty(shape, dtype=np.float16)
    flat = out.reshape(-1)
    for i in range(0, flat.size, WEIGHT_PIECE):
        piece = rng.standard_normal(min(WEIGHT_PIECE, flat.size - i), dtype=np.float32)
        piece *= np.float32(scale)
        flat[i : i + piece.size] = piece
    return out
