"""A residual stack of attention layers, x <- x + attention(rms_norm(x)): what a run pushes tokens through."""

from __future__ import annotations

from kvcalc.backend.ops import FlopCounter, rms_norm


def stack_prefill(fc: FlopCounter, layers, x):
    """A prompt x [b, s, m] through every layer; returns the output and each layer's cache."""
    caches = []
    for layer in layers:
        y, cache = layer.prefill(fc, rms_norm(x))
        x = x + y
        caches.append(cache)
    return x, caches


def stack_decode(fc: FlopCounter, layers, caches, x, schedule: str):
    """One token x [b, 1, m] through every layer, each reading and extending its cache."""
    new = []
    for layer, cache in zip(layers, caches):
        y, cache = layer.decode(fc, rms_norm(x), cache, schedule)
        x = x + y
        new.append(cache)
    return x, new
