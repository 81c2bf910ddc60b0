"""What every constant-state layer shares (linear attention, state-space models): no per-token cache, no softmax
over keys, a state per sequence whose size does not depend on the context. Each such kind subclasses `Recurrent`
and answers `state_formula` (the recurrent state plus the short-convolution state), `weights` and `flops`."""

from __future__ import annotations

from typing import ClassVar

from kvcalc.attention.base import AttentionKind, Formula, Layer


class Recurrent(AttentionKind):
    """A layer that carries a constant state instead of a KV cache."""

    windowed: ClassVar[bool] = False

    def cache_formula(self, layer: Layer, layout: str) -> Formula:
        return Formula("0", (), 0, {}, "constant-state layer: no per-token cache (state counted separately)")

    def tokens_held(self, layer: Layer, ctx: int) -> int:
        return 0  # nothing per token: the state is the same size at any context

    def tokens_rule(self, layer: Layer) -> str:
        return "none (constant state)"

    def scan_at(self, layer: Layer, t: int) -> int:
        return 0  # no softmax over keys

    def scan_prefill(self, layer: Layer, n: int) -> int:
        return 0

    def scan_prefills(self, layer: Layer, n: int) -> int:
        return 0

    def kv_label(self, layer: Layer, layout: str | None) -> str:
        return "state"


def conv_state(kernel: int, channels: int) -> int:
    """Elements of a causal short convolution's state: the last kernel − 1 inputs of each channel (what vLLM
    allocates; transformers' caches keep the whole kernel, one more input per channel)."""
    return (kernel - 1) * channels
