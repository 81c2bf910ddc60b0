"""A single d × d projection in place of attention (DeciLM / Llama-Nemotron NAS `replace_with_linear`): the layer
mixes no tokens, so it caches nothing and holds no state; it has one weight matrix and its FLOPs."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from kvcalc.attention.base import Layer, Weight, Work, matrix_flops
from kvcalc.attention.recurrent import Recurrent


class Projection(Recurrent):
    """A linear layer of d_model × d_model where attention would be: no cache, no state, 2·d² FLOPs a token."""

    kind: Literal["projection"]
    bias: bool = Field(False, description="A bias of d_model on the projection.")

    label: ClassVar[str] = "LINEAR-MIXER"
    mixer: ClassVar[bool] = False  # it mixes no tokens: left out of the attention labels

    def tokens_rule(self, layer: Layer) -> str:
        return "none (no attention)"

    def weights(self, layer: Layer) -> tuple[Weight, ...]:
        d = layer.d_model
        w = (Weight("W_P", "attn/o", (d, d)),)  # DeciLM's linear_attn: the attention replaced by one linear
        return w + ((Weight("b_P", "attn/o", (d,), "bias"),) if self.bias else ())

    def flops(self, layer: Layer, work: Work, schedule: str) -> dict[str, int]:
        return matrix_flops(self.weights(layer), work.tokens, ("W_P",))

    def kv_label(self, layer: Layer, layout: str | None) -> str:
        return "–"

    def describe(self, layer: Layer) -> str:
        return f"a {layer.d_model} × {layer.d_model} projection in place of attention (no cache)"
