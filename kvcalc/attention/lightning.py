"""Lightning attention (MiniMax-Text-01 / MiniMax-M1): linear attention with a per-head exponential decay, run in
blocks for prefill and as a recurrence for decoding. No per-token cache; each layer carries one state per sequence.

Source: MiniMax-AI/MiniMax-M1 `modeling_minimax_m1.py`, `MiniMaxM1LightningAttention` (commit 2abb4f4):
- qkv = silu(qkv_proj(x)), split per head into q, k, v of head_dim each (num_attention_heads heads);
- the state is `kv = torch.zeros(b, h, d, e).to(torch.float32)` with d = e = head_dim, updated per token as
  kv = exp(-slope_h)·kv + kᵀv and read out as q·kv (the decode loop of `inference`); there is no short convolution.
  The reference keeps it in fp32; kvcalc stores it at --state-dtype (default the KV dtype: vLLM keeps a linear
  attention state in the model dtype, MambaStateDtypeCalculator.linear_attention_state_dtype);
- the output is RMSNorm'd over h·d_h (`self.norm`), gated by sigmoid(output_gate(x)) and projected by out_proj;
- the per-head decay slopes are computed (`_build_slope_tensor`), not learned: no parameters.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from kvcalc.attention.base import Dim, Formula, HeadCount, Layer, Symbol, Weight, Work, matrix_flops, split_rule
from kvcalc.attention.recurrent import RecurrentState

REFERENCE = "MiniMaxM1LightningAttention (MiniMax-AI/MiniMax-M1 modeling_minimax_m1.py): kv state [h, d_h, d_h]"


class Lightning(RecurrentState):
    """Lightning attention: a decayed linear-attention state of n_h·d_h·d_h per sequence, nothing per token."""

    temporal: ClassVar[str] = "kv_state"  # the state component recurrent_dtype stores
    kind: Literal["lightning"]
    n_heads: HeadCount = Field(description="Heads n_h (HF num_attention_heads; lightning layers have no K/V grouping).")
    head_dim: Dim | None = Field(
        None, description="Per-head dim d_h of q, k and v (HF head_dim); when absent, d_model / n_heads."
    )

    label: ClassVar[str] = "LIGHTNING"

    def d_k(self, layer: Layer) -> int:
        """The per-head dim: head_dim, else d_model / n_heads (MiniMaxM1LightningAttention's getattr fallback)."""
        return self.head_dim if self.head_dim is not None else layer.d_model // self.n_heads

    def state_formula(self, layer: Layer) -> Formula:
        n_h, d_h = self.n_heads, self.d_k(layer)
        d_source = f"{layer.path}.head_dim" if self.head_dim is not None else f"d_model / {layer.path}.n_heads"
        symbols = (Symbol("n_h", n_h, f"{layer.path}.n_heads"), Symbol("d_h", d_h, d_source))
        kv = n_h * d_h * d_h  # torch.zeros(b, h, d, e), d = e = head_dim: one d_h × d_h matrix per head
        return Formula("n_h·d_h·d_h", symbols, kv, {"kv_state": kv}, f"{REFERENCE}; no short convolution")

    def cache_shapes(self, layer: Layer, batch: int, held: int, layout: str) -> dict[str, tuple[int, ...]]:
        d_h = self.d_k(layer)
        return {"kv_state": (batch, self.n_heads, d_h, d_h)}

    def state_shapes(self, layer: Layer, batch: int) -> dict[str, tuple[int, ...]]:
        d_h = self.d_k(layer)
        return {"kv_state": (batch, self.n_heads, d_h, d_h)}

    def weights(self, layer: Layer) -> tuple[Weight, ...]:
        d, inner = layer.d_model, self.n_heads * self.d_k(layer)
        return (
            Weight("qkv_proj", "attn/qkv", (d, 3 * inner)),  # nn.Linear(hidden, 3·h·d_h, bias=False)
            Weight("output_gate", "attn/gate", (d, inner)),  # nn.Linear(hidden, h·d_h, bias=False)
            Weight("norm", "attn/norms", (inner,), "norm"),  # MiniMaxM1RMSNorm(h·d_h)
            Weight("out_proj", "attn/o", (inner, d)),  # nn.Linear(h·d_h, hidden, bias=False)
        )

    def flops(self, layer: Layer, work: Work, schedule: str) -> dict[str, int]:
        """Projections 2·tokens·size; per token and head the recurrence of the decode loop in
        MiniMaxM1LightningAttention.inference: kv = λ·kv + kᵀv is 3·d_h² (the decay multiply, the outer-product
        multiply and the add per state element), the readout q·kv 2·d_h² (d_h² multiply-adds). Counted in this
        recurrent form for every token, prefill included (the blockwise prefill kernel adds intra-block products
        not counted here); silu, the sigmoid gate and the norm are elementwise and left out, as elsewhere."""
        n_h, d_h = self.n_heads, self.d_k(layer)
        proj = matrix_flops(self.weights(layer), work.tokens, ("qkv_proj", "output_gate", "out_proj"))
        return {
            "attn/qkv": proj["attn/qkv"],
            "attn/gate": proj["attn/gate"],
            "attn/state": 3 * work.tokens * n_h * d_h * d_h,  # decay λ·kv, kᵀv, and their sum, per state element
            "attn/readout": 2 * work.tokens * n_h * d_h * d_h,  # q·kv: d_h² multiply-adds per head
            "attn/o": proj["attn/o"],
        }

    def head_dim_label(self, layer: Layer) -> str:
        return str(self.d_k(layer))

    def tp_rule(self, layer: Layer, tp: int) -> str | None:
        # vLLM 0.34.0 MiniMaxText01LinearAttention: num_heads // tp_size heads a rank, qkv_proj a ColumnParallelLinear
        return split_rule(self.n_heads, "linear-attention heads", tp, "vLLM's MiniMaxText01LinearAttention")

    def per_rank(self, layer: Layer, tp: int) -> Lightning:
        # heads split across tensor-parallel ranks, each with its d_h × d_h state
        return self.model_copy(update={"n_heads": -(-self.n_heads // tp), "head_dim": self.d_k(layer)})

    def describe(self, layer: Layer) -> str:
        n_h, d_h = self.n_heads, self.d_k(layer)
        return (f"lightning attention: n_h {n_h}, d_h {d_h}, state n_h·d_h·d_h = {n_h * d_h * d_h:,} elements per "
                "sequence, nothing per token")

    def problems(self, layer: Layer) -> list[str]:
        if self.head_dim is None and layer.d_model % self.n_heads:
            return [f"{layer.path}.head_dim: not given, and d_model ({layer.d_model}) is not divisible by n_heads "
                    f"({self.n_heads}); give head_dim explicitly"]
        return []
