"""NumPy building blocks of the reference attention, with every matrix product counted where it runs.

Einsum/axis legend, used in the shape comments throughout the backend:
  b batch, s query position, t key position, m model dim (d_model), h query head, k KV head,
  g query heads per KV head (h = k·g), d head dim (q/k), e value head dim, c latent (kv_lora_rank),
  r RoPE dim (qk_rope_head_dim), q query latent (q_lora_rank).

FLOPs: a product of an m×k and a k×n matrix adds 2·m·n·k, batched over any leading axes; nothing else counts.
"""

from __future__ import annotations

from collections import Counter

import numpy as np


class FlopCounter:
    """Adds up the FLOPs of the products executed, by component ('attn/q', 'attn/scores', ...)."""

    def __init__(self) -> None:
        self.by_component: Counter = Counter()
        self.enabled = True

    def matmul(self, component: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """a @ b (NumPy broadcasting rules), counting 2·m·n·k for every broadcast batch element."""
        out = np.matmul(a, b)
        if self.enabled:
            k = a.shape[-1]
            # out has the batch shape and m×n: its size is batch·m·n, so 2·size·k is 2·m·n·k per batch element
            self.by_component[component] += 2 * out.size * k
        return out

    def total(self) -> int:
        return sum(self.by_component.values())


def rope_tables(positions: np.ndarray, dim: int, theta: float, dtype) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of RoPE at `positions`: [t] -> [t, dim/2] each (Su et al., RoFormer; base `theta`)."""
    inv_freq = 1.0 / theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    angles = np.outer(positions.astype(np.float64), inv_freq)
    return np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotate pairs (x[..., :d/2], x[..., d/2:]) by the position angles: [b, t, ..., d] with cos/sin [t, d/2].

    Elementwise (not a matrix product), so it adds no counted FLOPs.
    """
    half = x.shape[-1] // 2
    shape = (1, cos.shape[0]) + (1,) * (x.ndim - 3) + (half,)
    c, s = cos.reshape(shape), sin.reshape(shape)
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * c - x2 * s, x1 * s + x2 * c], axis=-1)


def rms_norm(x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """RMSNorm without a learned weight (the weight would be all ones at initialisation)."""
    wide = x.astype(np.float32) if x.dtype == np.float16 else x
    out = wide / np.sqrt(np.mean(wide * wide, axis=-1, keepdims=True) + eps)
    return out.astype(x.dtype)


def softmax(scores: np.ndarray) -> np.ndarray:
    """Softmax over the last axis in float32 or wider (float16 scores are upcast); -inf entries get weight 0."""
    wide = scores.astype(np.float32) if scores.dtype == np.float16 else scores
    peak = np.max(wide, axis=-1, keepdims=True)
    e = np.exp(wide - peak)
    return e / np.sum(e, axis=-1, keepdims=True)


def random_weight(rng: np.random.Generator, shape: tuple[int, ...], fan_in: int, dtype) -> np.ndarray:
    """N(0, 1/fan_in) weights, so activations keep unit scale through a product."""
    scale = fan_in ** -0.5
    if dtype == np.float16:
        return (rng.standard_normal(shape, dtype=np.float32) * scale).astype(np.float16)
    return rng.standard_normal(shape, dtype=dtype) * np.asarray(scale, dtype=dtype)
