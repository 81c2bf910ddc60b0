"""Gated DeltaNet (Yang, Kautz & Hatamizadeh, "Gated Delta Networks: Improving Mamba2 with Delta Rule", ICLR 2025),
the linear-attention layer of Qwen3-Next: per value head a d_k × d_v state S, updated per token by the gated delta
rule S_t = α_t·S_{t-1} + β_t·k_t·(v_t − α_t·S_{t-1}ᵀk_t)ᵀ and read out as o_t = S_tᵀq_t, after a causal depthwise
convolution over q, k and v.

Shapes and names follow transformers' `Qwen3NextGatedDeltaNet` (models/qwen3_next/modeling_qwen3_next.py):
H_k = linear_num_key_heads, H_v = linear_num_value_heads (H_v / H_k value heads share each q/k head),
d_k = linear_key_head_dim, d_v = linear_value_head_dim, K = linear_conv_kernel_dim;
key_dim = H_k·d_k, value_dim = H_v·d_v, conv_dim = 2·key_dim + value_dim (q, k and v go through the convolution).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from kvcalc.attention.base import Dim, Formula, HeadCount, Layer, Symbol, Weight, Work, matrix_flops, split_rule
from kvcalc.attention.recurrent import RecurrentState, conv_state


class GatedDeltaNet(RecurrentState):
    """A Gated DeltaNet layer: a constant state of H_v·d_k·d_v (recurrent) + (K − 1)·conv_dim (convolution)."""

    kind: Literal["gated_deltanet"]
    linear_num_key_heads: HeadCount = Field(description="Query/key heads H_k (HF linear_num_key_heads).")
    linear_num_value_heads: HeadCount = Field(
        description="Value heads H_v, one d_k × d_v state each (HF linear_num_value_heads); a multiple of H_k."
    )
    linear_key_head_dim: Dim = Field(description="Query/key head dim d_k (HF linear_key_head_dim).")
    linear_value_head_dim: Dim = Field(description="Value head dim d_v (HF linear_value_head_dim).")
    linear_conv_kernel_dim: Dim = Field(
        description="Kernel K of the causal depthwise convolution over q, k, v (HF linear_conv_kernel_dim)."
    )

    label: ClassVar[str] = "GDN"

    @model_validator(mode="after")
    def _value_heads_group(self) -> GatedDeltaNet:
        # fix_query_key_value_ordering splits each key head's slice into H_v / H_k value heads
        if self.linear_num_value_heads % self.linear_num_key_heads:
            raise ValueError(
                f"linear_num_value_heads ({self.linear_num_value_heads}) must be divisible by "
                f"linear_num_key_heads ({self.linear_num_key_heads})"
            )
        return self

    @property
    def key_dim(self) -> int:
        return self.linear_num_key_heads * self.linear_key_head_dim  # Qwen3NextGatedDeltaNet.key_dim

    @property
    def value_dim(self) -> int:
        return self.linear_num_value_heads * self.linear_value_head_dim  # Qwen3NextGatedDeltaNet.value_dim

    @property
    def conv_dim(self) -> int:
        return 2 * self.key_dim + self.value_dim  # Qwen3NextGatedDeltaNet.conv_dim: q, k and v channels

    # -- the state

    def state_formula(self, layer: Layer) -> Formula:
        p = layer.path
        h_k, h_v = Symbol("H_k", self.linear_num_key_heads, f"{p}.linear_num_key_heads"), Symbol(
            "H_v", self.linear_num_value_heads, f"{p}.linear_num_value_heads")
        d_k, d_v = Symbol("d_k", self.linear_key_head_dim, f"{p}.linear_key_head_dim"), Symbol(
            "d_v", self.linear_value_head_dim, f"{p}.linear_value_head_dim")
        k = Symbol("K", self.linear_conv_kernel_dim, f"{p}.linear_conv_kernel_dim")
        # one d_k × d_v matrix per value head: recurrent_state [b, H_v, d_k, d_v] (torch_recurrent_gated_delta_rule;
        # fla chunk_gated_delta_rule's final_state)
        recurrent = h_v.value * d_k.value * d_v.value
        conv = conv_state(k.value, self.conv_dim)  # the last K − 1 inputs of each of the conv_dim channels
        return Formula(
            "H_v·d_k·d_v + (K − 1)·(2·H_k·d_k + H_v·d_v)",
            (h_v, d_k, d_v, k, h_k),
            recurrent + conv,
            {"recurrent": recurrent, "conv": conv},
            "Qwen3NextGatedDeltaNet (transformers modeling_qwen3_next.py): recurrent_state [b, H_v, d_k, d_v]; "
            "conv state (K − 1)·conv_dim, conv_dim = 2·key_dim + value_dim, as vLLM allocates "
            "(transformers' cache keeps all K inputs: K·conv_dim)",
        )

    def state_shapes(self, layer: Layer, batch: int) -> dict[str, tuple[int, ...]]:
        k, d_k, d_v = self.linear_conv_kernel_dim, self.linear_key_head_dim, self.linear_value_head_dim
        return {"recurrent": (batch, self.linear_num_value_heads, d_k, d_v), "conv": (batch, self.conv_dim, k - 1)}

    # -- weights and FLOPs

    def weights(self, layer: Layer) -> tuple[Weight, ...]:
        d, h_v, d_v, k = layer.d_model, self.linear_num_value_heads, self.linear_value_head_dim, self.linear_conv_kernel_dim
        return (
            # in_proj_qkvz: Linear(d, 2·key_dim + 2·value_dim, bias=False): q, k, v and the output gate z
            Weight("W_qkvz", "attn/qkvz", (d, 2 * self.key_dim + 2 * self.value_dim)),
            # in_proj_ba: Linear(d, 2·H_v, bias=False): β (write strength) and a (decay input) per value head
            Weight("W_ba", "attn/ba", (d, 2 * h_v)),
            # conv1d: Conv1d(conv_dim, conv_dim, K, groups=conv_dim, bias=False): depthwise, one K-tap filter per
            # channel; each tap multiplies one input per token, so 2 FLOPs per element and token as for a matrix
            Weight("conv1d", "attn/conv", (self.conv_dim, 1, k)),
            # dt_bias and A_log: nn.Parameter(H_v) each, the decay α = exp(−exp(A_log)·softplus(a + dt_bias))
            Weight("dt_bias", "attn/decay", (h_v,), "bias"),
            Weight("A_log", "attn/decay", (h_v,), "bias"),
            # norm: Qwen3NextRMSNormGated(head_v_dim), one weight of d_v shared by all value heads
            Weight("norm", "attn/norms", (d_v,), "norm"),
            # out_proj: Linear(value_dim, d, bias=False)
            Weight("W_O", "attn/o", (self.value_dim, d)),
        )

    def flops(self, layer: Layer, work: Work, schedule: str) -> dict[str, int]:
        t, h_v = work.tokens, self.linear_num_value_heads
        dk_dv = self.linear_key_head_dim * self.linear_value_head_dim
        proj = matrix_flops(self.weights(layer), t, ("W_qkvz", "W_ba", "W_O"))
        # Per token and value head, the recurrence of torch_recurrent_gated_delta_rule (modeling_qwen3_next.py):
        # S ← α·S (d_k·d_v multiplies), kᵀS (2·d_k·d_v), S ← S + k·δᵀ (2·d_k·d_v): 5·d_k·d_v to update the state;
        # the readout qᵀS: 2·d_k·d_v. The O(d_v) delta δ = β·(v − kᵀS) is left out. fla's chunked kernel computes the
        # same outputs with a different operation count (intra-chunk products); this is the token-by-token one.
        return {
            "attn/qkvz": proj["attn/qkvz"],
            "attn/ba": proj["attn/ba"],
            "attn/conv": 2 * t * self.linear_conv_kernel_dim * self.conv_dim,  # depthwise: K multiply-adds per channel
            "attn/state": 5 * t * h_v * dk_dv,
            "attn/readout": 2 * t * h_v * dk_dv,
            "attn/o": proj["attn/o"],
        }

    # -- facts for rows and labels

    @property
    def query_heads(self) -> None:
        """None: no softmax heads (H_v value heads read the state; `describe` names them), so the model's n_heads
        column keeps its attention layers' n_h."""
        return None

    def tp_rule(self, layer: Layer, tp: int) -> str | None:
        # vLLM 0.34.0 qwen_gdn_linear_attn: divide(num_v_heads, tp_size), and num_k_heads // tp_size key heads a rank
        return (split_rule(self.linear_num_key_heads, "key heads (linear_num_key_heads)", tp, "vLLM's Gated DeltaNet")
                or split_rule(self.linear_num_value_heads, "value heads (linear_num_value_heads)", tp,
                              "vLLM's Gated DeltaNet"))

    def per_rank(self, layer: Layer, tp: int) -> GatedDeltaNet:
        # vLLM's Qwen3NextGatedDeltaNet under TP: key and value heads split (in_proj_qkvz, conv1d, recurrent state)
        return self.model_copy(update={"linear_num_key_heads": -(-self.linear_num_key_heads // tp),
                                       "linear_num_value_heads": -(-self.linear_num_value_heads // tp)})

    def describe(self, layer: Layer) -> str:
        return (
            f"H_k {self.linear_num_key_heads}, H_v {self.linear_num_value_heads}, "
            f"d_k {self.linear_key_head_dim}, d_v {self.linear_value_head_dim}, conv kernel {self.linear_conv_kernel_dim}; "
            f"state {self.state_formula(layer).elements:,} elements per sequence"
        )
