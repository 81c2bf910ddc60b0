"""A layer with a constant-size state given directly in the spec (a stand-in for any linear-attention or state-space
layer whose own kind kvcalc does not model)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from kvcalc.attention.base import Formula, Layer, ParamCount, Symbol
from kvcalc.attention.recurrent import RecurrentState


class Linear(RecurrentState):
    """A constant-state layer: nothing per token, `state_elements` per sequence whatever the context."""

    temporal: ClassVar[str] = "state"  # the state component recurrent_dtype stores
    kind: Literal["linear"]
    state_elements: ParamCount = Field(
        description="Elements of recurrent state per sequence in this layer, independent of context length."
    )

    label: ClassVar[str] = "LINEAR"

    def state_formula(self, layer: Layer) -> Formula:
        s = Symbol("S", self.state_elements, f"{layer.path}.state_elements")
        return Formula("S", (s,), s.value, {"state": s.value}, "a constant state of the size the spec gives")

    def state_shapes(self, layer: Layer, batch: int) -> dict[str, tuple[int, ...]]:
        return {"state": (batch, self.state_elements)}  # a size without structure

    def describe(self, layer: Layer) -> str:
        return f"constant state {self.state_elements:,} elements per sequence"
