"""A residual stack of attention layers, x <- x + attention(rms_norm(x)): what a run pushes tokens through."""

from __future__ import annotations

from kvcalc.backend.ops import FlopCounter, rms_norm


def stack_prefill(fc: FlopCounter, layers, x, before=None):
    """A prompt x [b, s, m] through every layer; returns the output and each layer's cache. `before(layer, its
    input)`, if given, sees each layer's normed input before the layer runs (the checks' references read it)."""
    caches = []
    for layer in layers:
        normed = rms_norm(x)
        if before is not None:
            before(layer, normed)
        y, cache = layer.prefill(fc, normed)
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
