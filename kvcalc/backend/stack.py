"""A residual stack of attention layers, x <- x + attention(rms_norm(x)): what a run pushes tokens through."""

from __future__ import annotations

from kvcalc.backend.ops import FlopCounter, rms_norm


def stack_prefill(fc: FlopCounter, layers, x, before=None, keep: bool = True):
    """A prompt x [b, s, m] through every layer; returns the output and each layer's cache (`keep`; else none: each
    layer's is dropped once the next runs, as a check that wants only the output needs, so that one layer's cache at
    a time is held beside the run's: backend.memory plans so). `before(layer, its input)`, if given, sees each layer's
    normed input before the layer runs (the checks' references read it)."""
    caches = []
    for layer in layers:
        normed = rms_norm(x)
        if before is not None:
            before(layer, normed)
        y, cache = layer.prefill(fc, normed)
        x = x + y
        if keep:
            caches.append(cache)
        del cache
    return x, caches


def stack_decode(fc: FlopCounter, layers, caches: list, x, schedule: str):
    """One token x [b, 1, m] through every layer, each reading and extending its cache: `caches` (a list) is updated
    in place, each layer's new cache replacing its old as soon as it is built, so a step holds one layer's two copies
    at a time, not two whole sets (backend.memory plans so; a caller keeping the caches before the step passes a copy
    of the list). Returns the output and `caches`."""
    for i, layer in enumerate(layers):
        y, caches[i] = layer.decode(fc, rms_norm(x), caches[i], schedule)
        x = x + y
    return x, caches
