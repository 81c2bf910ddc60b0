"""A layer whose attention and constant-state mixer run side by side (Falcon-H1's `FalconH1DecoderLayer`): both read
the same normed input and their outputs are summed. Built from the existing layers (`kvcalc.backend.attention`,
`kvcalc.backend.recurrent`), so each part executes, and counts, exactly what it does alone.

The cache holds both: the attention's tensors under their own names (k, v), and the mixer's state under `mixer/`
(mixer/ssm, mixer/conv); `parts` splits them again for the report, which measures the KV cache and the state apart.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from kvcalc.backend.attention import Cache
from kvcalc.backend.ops import FlopCounter
from kvcalc.spec import ResolvedGroup

MIXER = "mixer/"  # the prefix of the mixer's state arrays in a parallel layer's cache


def mixer_group(group: ResolvedGroup) -> ResolvedGroup:
    """The group's parallel mixer as a group of its own (its kind, where it sits): what builds and plans its layer."""
    if group.parallel is None:
        raise ValueError(f"{group.label}: no parallel mixer")
    return replace(group, attention=group.parallel, layer=group.parallel_layer, sliding_window=None, cross=None,
                   parallel=None)


def parts(cache: Cache) -> tuple[Cache, Cache]:
    """A layer's cache as what its attention holds and what its parallel mixer holds (names without `mixer/`)."""
    own = {n: t for n, t in cache.tensors.items() if not n.startswith(MIXER)}
    mixer = {n[len(MIXER):]: t for n, t in cache.tensors.items() if n.startswith(MIXER)}
    return Cache(own, cache.seen), Cache(mixer, cache.seen)


class ParallelMixer:
    """attention(x) + mixer(x) on the same input x [b, s, m] (the runner's stack has normed it), each with its own
    cache, held together in one Cache (the mixer's arrays named mixer/...)."""

    def __init__(self, attention, mixer):
        self.attention, self.mixer = attention, mixer
        self.dtype = mixer.dtype

    @property
    def on_block(self):
        return self.attention.on_block

    @on_block.setter
    def on_block(self, hook) -> None:
        self.attention.on_block = hook
        self.mixer.on_block = hook

    def prefill_blocks(self, batch: int, s: int) -> int:
        return self.attention.prefill_blocks(batch, s) + self.mixer.prefill_blocks(batch, s)

    def _joined(self, y: np.ndarray, own: Cache, z: np.ndarray, state: Cache) -> tuple[np.ndarray, Cache]:
        return y + z, Cache({**own.tensors, **{MIXER + n: t for n, t in state.tensors.items()}}, own.seen)

    def prefill(self, fc: FlopCounter, x: np.ndarray) -> tuple[np.ndarray, Cache]:
        y, own = self.attention.prefill(fc, x)
        return self._joined(y, own, *self.mixer.prefill(fc, x))

    def decode(self, fc: FlopCounter, x: np.ndarray, cache: Cache, schedule: str = "naive") -> tuple[np.ndarray, Cache]:
        own, state = parts(cache)
        y, own = self.attention.decode(fc, x, own, schedule)
        return self._joined(y, own, *self.mixer.decode(fc, x, state, schedule))


def with_parallel(group: ResolvedGroup, layer, build):
    """The layer itself, or (a group with a parallel mixer) the layer beside its mixer, built by `build(group)`."""
    if group.parallel is None:
        return layer
    return ParallelMixer(layer, build(mixer_group(group)))


def attention_part(layer):
    """The attention layer inside a run's layer: under its cross-attention wrapper and beside its parallel mixer."""
    inner = getattr(layer, "inner", layer)  # WithCross
    return inner.attention if isinstance(inner, ParallelMixer) else inner


def state_part(layer):
    """The constant-state layer inside a run's layer: a parallel layer's mixer (under its cross-attention wrapper, if
    any), or the layer itself."""
    inner = getattr(layer, "inner", layer)  # WithCross
    return inner.mixer if isinstance(inner, ParallelMixer) else layer
