"""Kimi Delta Attention (KDA; Kimi Team, "Kimi Linear: An Expressive, Efficient Attention Architecture", 2025), the
linear-attention layer of Kimi Linear: Gated DeltaNet with a decay per channel instead of per head. Per head a
d × d state S, updated per token by S_t = (I − β_t·k_t·k_tᵀ)·Diag(α_t)·S_{t-1} + β_t·k_t·v_tᵀ and read out as
o_t = S_tᵀq_t, after a causal depthwise convolution over each of q, k and v.

Shapes and names follow vLLM 0.34.0's `KimiGatedDeltaNetAttention` (vllm/model_executor/layers/mamba/gdn/
kimi_gdn_linear_attn.py) and the checkpoint of
moonshotai/Kimi-Linear-48B-A3B-Instruct (its remote code modeling_kimi.py, tensor names self_attn.q_proj, f_a_proj, ...):
H = linear_attn_config.num_heads, d = linear_attn_config.head_dim (keys and values alike), K = short_conv_kernel_size;
projection_size = H·d.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from kvcalc.attention.base import Dim, Formula, HeadCount, Layer, Symbol, Weight, Work, matrix_flops, split_rule
from kvcalc.attention.recurrent import RecurrentState, conv_state


class KDA(RecurrentState):
    """A Kimi Delta Attention layer: a constant state of H·d·d (recurrent) + 3·(K − 1)·H·d (q, k, v convolutions)."""

    kind: Literal["kda"]
    n_heads: HeadCount = Field(description="KDA heads H, one d × d state each (HF linear_attn_config.num_heads).")
    head_dim: Dim = Field(description="Key and value head dim d (HF linear_attn_config.head_dim).")
    conv_kernel: Dim = Field(
        description="Kernel K of the causal depthwise convolutions over q, k and v (HF short_conv_kernel_size)."
    )

    label: ClassVar[str] = "KDA"

    @property
    def proj(self) -> int:
        return self.n_heads * self.head_dim  # KimiDeltaAttention.projection_size

    # -- the state

    def state_formula(self, layer: Layer) -> Formula:
        p = layer.path
        h = Symbol("H", self.n_heads, f"{p}.n_heads")
        d = Symbol("d", self.head_dim, f"{p}.head_dim")
        k = Symbol("K", self.conv_kernel, f"{p}.conv_kernel")
        recurrent = h.value * d.value * d.value  # recurrent_state [b, H, d, d] (kda_state_shape)
        conv = 3 * conv_state(k.value, self.proj)  # 3: conv_state_q, conv_state_k, conv_state_v, K − 1 inputs each
        return Formula(
            "H·d·d + 3·(K − 1)·H·d",
            (h, d, k),
            recurrent + conv,
            {"recurrent": recurrent, "conv": conv},
            "vLLM MambaStateShapeCalculator.kda_state_shape: conv_state_q/k/v (K − 1, H·d) each and recurrent_state "
            "(H, d, d) (transformers-style caches of the remote code keep all K inputs per channel: 3·K·H·d)",
        )

    def state_shapes(self, layer: Layer, batch: int) -> dict[str, tuple[int, ...]]:
        k, h, d = self.conv_kernel, self.n_heads, self.head_dim
        return {"recurrent": (batch, h, d, d), "conv_q": (batch, self.proj, k - 1), "conv_k": (batch, self.proj, k - 1),
                "conv_v": (batch, self.proj, k - 1)}

    # -- weights and FLOPs

    def weights(self, layer: Layer) -> tuple[Weight, ...]:
        d_model, h, d, k, p = layer.d_model, self.n_heads, self.head_dim, self.conv_kernel, self.proj
        return (
            # q_proj, k_proj, v_proj: Linear(d_model, H·d, bias=False) each
            Weight("W_Q", "attn/q", (d_model, p)),
            Weight("W_K", "attn/k", (d_model, p)),
            Weight("W_V", "attn/v", (d_model, p)),
            # f_a_proj Linear(d_model, d), f_b_proj Linear(d, H·d): the low-rank input of the per-channel decay α
            Weight("W_fa", "attn/decay", (d_model, d)),
            Weight("W_fb", "attn/decay", (d, p)),
            # b_proj: Linear(d_model, H): β (write strength) per head
            Weight("W_b", "attn/beta", (d_model, h)),
            # q_conv1d, k_conv1d, v_conv1d: depthwise, one K-tap filter per channel, no bias (checkpoint [H·d, 1, K])
            Weight("conv_q", "attn/conv", (p, 1, k)),
            Weight("conv_k", "attn/conv", (p, 1, k)),
            Weight("conv_v", "attn/conv", (p, 1, k)),
            # dt_bias: Parameter(H·d), the decay's bias per channel; A_log: Parameter(1, 1, H, 1), per head
            Weight("dt_bias", "attn/decay", (p,), "bias"),
            Weight("A_log", "attn/decay", (h,), "bias"),
            # g_a_proj Linear(d_model, d), g_b_proj Linear(d, H·d): the low-rank output gate
            Weight("W_ga", "attn/gate", (d_model, d)),
            Weight("W_gb", "attn/gate", (d, p)),
            # o_norm: FusedRMSNormGated(d), one weight of d shared by all heads
            Weight("o_norm", "attn/norms", (d,), "norm"),
            # o_proj: Linear(H·d, d_model, bias=False)
            Weight("W_O", "attn/o", (p, d_model)),
        )

    def flops(self, layer: Layer, work: Work, schedule: str) -> dict[str, int]:
        t, h, dd = work.tokens, self.n_heads, self.head_dim * self.head_dim
        names = ("W_Q", "W_K", "W_V", "W_fa", "W_fb", "W_b", "W_ga", "W_gb", "W_O")
        proj = matrix_flops(self.weights(layer), t, names)
        # Per token and head, the recurrence of fused_recurrent_kda: S ← Diag(α)·S (d·d multiplies), kᵀS (2·d·d),
        # S ← S + k·δᵀ (2·d·d): 5·d·d to update the state; the readout qᵀS: 2·d·d. The O(d) delta δ = β·(v − kᵀS) is
        # left out; the chunked kernel (chunk_kda) computes the same outputs with a different operation count.
        return {
            "attn/q": proj["attn/q"],
            "attn/k": proj["attn/k"],
            "attn/v": proj["attn/v"],
            "attn/decay": proj["attn/decay"],
            "attn/beta": proj["attn/beta"],
            "attn/gate": proj["attn/gate"],
            "attn/conv": 2 * t * self.conv_kernel * 3 * self.proj,  # 3 depthwise convolutions: K multiply-adds a channel
            "attn/state": 5 * t * h * dd,
            "attn/readout": 2 * t * h * dd,
            "attn/o": proj["attn/o"],
        }

    # -- facts for rows and labels

    @property
    def query_heads(self) -> None:
        """None: no softmax heads, so the model's n_heads column keeps its attention layers' n_h."""
        return None

    def tp_rule(self, layer: Layer, tp: int) -> str | None:
        # vLLM 0.34.0 kimi_gdn_linear_attn: assert self.num_heads % self.tp_size == 0
        return split_rule(self.n_heads, "KDA heads", tp, "vLLM's KimiDeltaAttention")

    def per_rank(self, layer: Layer, tp: int) -> KDA:
        # vLLM's KimiDeltaAttention under TP: heads split (projections, short convolutions, recurrent state)
        return self.model_copy(update={"n_heads": -(-self.n_heads // tp)})

    def describe(self, layer: Layer) -> str:
        return (f"H {self.n_heads}, d {self.head_dim}, conv kernel {self.conv_kernel}; "
                f"state {self.state_formula(layer).elements:,} elements per sequence")
