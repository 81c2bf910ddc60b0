"""What every constant-state layer shares (linear attention, state-space models): no per-token cache, no softmax
over keys, a state per sequence whose size does not depend on the context. Each such kind subclasses `Recurrent`
and answers `state_formula` (the recurrent state plus the short-convolution state), `weights` and `flops`."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from kvcalc.attention.base import AttentionKind, Formula, Layer

StateDtype = Literal["fp64", "fp32", "bf16", "fp16", "fp8", "int8", "int4"]  # kvcalc.dtypes.DTYPES


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


class RecurrentState(Recurrent):
    """A constant-state layer with a recurrent (SSM) state, which a model may store in a dtype of its own."""

    temporal: ClassVar[str] = "recurrent"  # the state_formula component that recurrent_dtype stores

    recurrent_dtype: StateDtype | None = Field(
        None, description="The dtype the model keeps its recurrent (SSM) state in, when it fixes one: Qwen3.5's "
                          "mamba_ssm_dtype float32, which vLLM stores that state in. Unset: the --state-dtype default. "
                          "The convolution state is not affected.")

    def state_dtypes(self, layer: Layer) -> dict[str, str]:
        return {self.temporal: self.recurrent_dtype} if self.recurrent_dtype else {}


def conv_state(kernel: int, channels: int) -> int:
    """Elements of a causal short convolution's state: the last kernel − 1 inputs of each channel (what vLLM
    allocates; transformers' caches keep the whole kernel, one more input per channel)."""
    return (kernel - 1) * channels
