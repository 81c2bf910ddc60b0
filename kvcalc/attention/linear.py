"""A layer with a constant-size state instead of a growing KV cache (linear attention, state-space layers)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, NonNegativeInt

from kvcalc.attention.base import AttentionKind, Formula, Layer, Symbol


class Linear(AttentionKind):
    """A constant-state layer: nothing per token, `state_elements` per sequence whatever the context."""

    kind: Literal["linear"]
    state_elements: NonNegativeInt = Field(
        description="Elements of recurrent state per sequence in this layer, independent of context length."
    )

    label: ClassVar[str] = "LINEAR"
    windowed: ClassVar[bool] = False

    def cache_formula(self, layer: Layer, layout: str) -> Formula:
        return Formula("0", (), 0, {}, "constant-state layer: no per-token cache (state counted separately)")

    def state_formula(self, layer: Layer) -> Formula:
        s = Symbol("S", self.state_elements, f"{layer.path}.state_elements")
        return Formula("S", (s,), s.value, {"state": s.value}, "a constant state of the size the spec gives")

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

    def describe(self, layer: Layer) -> str:
        return f"constant state {self.state_elements:,} elements per sequence"
