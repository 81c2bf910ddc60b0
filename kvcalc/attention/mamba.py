"""Selective state-space layers: Mamba-1 (Gu & Dao 2023; Jamba's mixer) and Mamba-2 (Dao & Gu 2024, SSD;
Nemotron-H's mixer), plus `NoMixer`, the empty mixer of a block that is an MLP only (Nemotron-H's '-' and 'E').

Shapes and names follow the modeling code, cited beside each weight:
- Mamba-1: transformers' `JambaMambaMixer` (models/jamba/modeling_jamba.py). d_inner = mamba_expand·d_model,
  N = mamba_d_state, K = mamba_d_conv, R = mamba_dt_rank. State per sequence: ssm_states [d_inner, N] and the
  convolution's inputs over d_inner channels (`HybridMambaAttentionDynamicCache`).
- Mamba-2: transformers' `NemotronHMamba2Mixer` (models/nemotron_h/modeling_nemotron_h.py, as `Mamba2Mixer`).
  H = mamba_num_heads, P = mamba_head_dim, d_inner = H·P (the mixer's intermediate_size; `expand` is not read),
  N = ssm_state_size, G = n_groups, K = conv_kernel, conv_dim = d_inner + 2·G·N (x, B and C go through the
  convolution). State per sequence: ssm_states [H, P, N] and the convolution's inputs over conv_dim channels.
- The convolution state is the last K − 1 inputs of each channel, as vLLM allocates it
  (`MambaStateShapeCalculator.mamba1_state_shape` / `mamba2_state_shape`, vllm/model_executor/layers/mamba/
  mamba_utils.py); transformers' caches keep the whole kernel, K inputs (conv_states [b, channels, K]).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, PrivateAttr, model_validator

from kvcalc.attention.base import Dim, Formula, HeadCount, Layer, Symbol, Weight, Work, matrix_flops, split_rule
from kvcalc.attention.recurrent import Recurrent, RecurrentState, conv_state

CONV_NOTE = "conv state (K − 1)·channels as vLLM allocates it (transformers' cache keeps all K inputs: K·channels)"


class Mamba(RecurrentState):
    """A Mamba-1 selective SSM layer: a constant state of d_inner·N (SSM) + (K − 1)·d_inner (convolution)."""

    temporal: ClassVar[str] = "ssm"  # the state component recurrent_dtype stores
    kind: Literal["mamba"]
    mamba_d_state: Dim = Field(description="SSM state size N per channel (HF mamba_d_state).")
    mamba_d_conv: Dim = Field(description="Kernel K of the causal depthwise convolution (HF mamba_d_conv).")
    mamba_expand: Dim = Field(description="d_inner = mamba_expand · d_model (HF mamba_expand).")
    mamba_dt_rank: Dim | None = Field(
        None, description="Rank R of the Δ projection (HF mamba_dt_rank); when absent, ceil(d_model / 16) "
        "(JambaConfig's 'auto')."
    )
    mamba_conv_bias: bool = Field(True, description="Bias on the convolution (HF mamba_conv_bias).")
    mamba_proj_bias: bool = Field(False, description="Biases on in_proj and out_proj (HF mamba_proj_bias).")
    inner_norms: bool = Field(
        False, description="RMSNorms on Δ, B and C inside the mixer (Jamba: dt_layernorm, b_layernorm, c_layernorm)."
    )

    label: ClassVar[str] = "MAMBA"
    _ranks: int = PrivateAttr(default=1)  # tensor-parallel ranks sharing d_inner (per_rank); not a spec field

    def d_inner(self, layer: Layer) -> int:
        # JambaMambaMixer.intermediate_size; on one of tp ranks its share (vLLM's MambaMixer shards every d_inner dim)
        return self.mamba_expand * layer.d_model // self._ranks

    def tp_rule(self, layer: Layer, tp: int) -> str | None:
        # vLLM's MambaMixer: in_proj, conv1d, x_proj, dt_proj, A, D, out_proj and the state split along d_inner
        # (mamba1_state_shape: divide(intermediate_size, tp_world_size))
        return split_rule(self.d_inner(layer), "Mamba channels (d_inner)", tp, "vLLM's MambaMixer")

    def per_rank(self, layer: Layer, tp: int) -> Mamba:
        # d_inner split (tp_rule: evenly); Δ's rank R, the state size N and Jamba's inner norms whole on every rank
        rank = self.model_copy()
        rank._ranks = self._ranks * tp
        return rank

    def dt_rank(self, layer: Layer) -> int:
        # JambaConfig: mamba_dt_rank "auto" is math.ceil(hidden_size / 16)
        return self.mamba_dt_rank if self.mamba_dt_rank is not None else -(-layer.d_model // 16)

    def state_formula(self, layer: Layer) -> Formula:
        p = layer.path
        e, d = Symbol("E", self.mamba_expand, f"{p}.mamba_expand"), Symbol("d", layer.d_model, "d_model")
        n, k = Symbol("N", self.mamba_d_state, f"{p}.mamba_d_state"), Symbol("K", self.mamba_d_conv, f"{p}.mamba_d_conv")
        d_inner = self.d_inner(layer)
        ssm = d_inner * self.mamba_d_state  # ssm_states [b, d_inner, N] (HybridMambaAttentionDynamicCache)
        conv = conv_state(self.mamba_d_conv, d_inner)  # the last K − 1 inputs of each of the d_inner channels
        return Formula(
            "E·d·N + (K − 1)·E·d", (e, d, n, k), ssm + conv, {"ssm": ssm, "conv": conv},
            "JambaMambaMixer / HybridMambaAttentionDynamicCache (transformers modeling_jamba.py): ssm_states "
            "[b, d_inner, N], d_inner = mamba_expand·d_model; vLLM mamba1_state_shape: " + CONV_NOTE,
        )

    def state_shapes(self, layer: Layer, batch: int) -> dict[str, tuple[int, ...]]:
        di = self.d_inner(layer)
        return {"ssm": (batch, di, self.mamba_d_state), "conv": (batch, di, self.mamba_d_conv - 1)}

    def weights(self, layer: Layer) -> tuple[Weight, ...]:
        d, di, n, r, k = layer.d_model, self.d_inner(layer), self.mamba_d_state, self.dt_rank(layer), self.mamba_d_conv
        out = [
            Weight("W_in", "mamba/in_proj", (d, 2 * di)),  # in_proj: Linear(d, 2·d_inner): x and the gate z
            # conv1d: Conv1d(d_inner, d_inner, K, groups=d_inner): one K-tap filter per channel; each tap multiplies
            # one input per token, so 2 FLOPs per element and token, as for a matrix
            Weight("conv1d", "mamba/conv", (di, 1, k)),
            Weight("W_x", "mamba/x_proj", (di, r + 2 * n)),  # x_proj: Linear(d_inner, R + 2N, bias=False): Δ, B, C
            Weight("W_dt", "mamba/dt_proj", (r, di)),  # dt_proj: Linear(R, d_inner, bias=True)
            Weight("b_dt", "mamba/dt_proj", (di,), "bias"),
            Weight("A_log", "mamba/ssm", (di, n), "bias"),  # A_log: nn.Parameter [d_inner, N]
            Weight("D", "mamba/ssm", (di,), "bias"),  # D: nn.Parameter [d_inner], the skip connection
            Weight("W_out", "mamba/out_proj", (di, d)),  # out_proj: Linear(d_inner, d)
        ]
        if self.mamba_conv_bias:
            out.append(Weight("b_conv", "mamba/conv", (di,), "bias"))
        if self.mamba_proj_bias:
            out += [Weight("b_in", "mamba/in_proj", (2 * di,), "bias"), Weight("b_out", "mamba/out_proj", (d,), "bias")]
        if self.inner_norms:  # JambaRMSNorm(R), JambaRMSNorm(N) twice
            out += [Weight("dt_norm", "mamba/norms", (r,), "norm"), Weight("B_norm", "mamba/norms", (n,), "norm"),
                    Weight("C_norm", "mamba/norms", (n,), "norm")]
        return tuple(out)

    def flops(self, layer: Layer, work: Work, schedule: str) -> dict[str, int]:
        t, di = work.tokens, self.d_inner(layer)
        proj = matrix_flops(self.weights(layer), t, ("W_in", "conv1d", "W_x", "W_dt", "W_out"))
        return {
            "mamba/in_proj": proj["mamba/in_proj"],
            "mamba/conv": proj["mamba/conv"],  # depthwise: K multiply-adds per channel and token
            "mamba/x_proj": proj["mamba/x_proj"],
            "mamba/dt_proj": proj["mamba/dt_proj"],
            # The selective scan as its recurrence runs it (selective_scan_ref), 8 per state element and token:
            # Δ·A, exp, Δ·B, ·u (discretise), Ā·h, + B̄u (update), C·h (a multiply-add); state-spaces/mamba#110's
            # 9·D·N is a parallel scan's. Plus d_inner each for the D skip and the z gate (VMamba's
            # flops_selective_scan_fn with D and z). Mamba-2 below is counted the same way.
            "mamba/scan": t * (8 * di * self.mamba_d_state + 2 * di),
            "mamba/out_proj": proj["mamba/out_proj"],
        }

    def describe(self, layer: Layer) -> str:
        return (
            f"Mamba-1: d_inner {self.d_inner(layer)} (mamba_expand {self.mamba_expand} · d_model), "
            f"d_state {self.mamba_d_state}, conv kernel {self.mamba_d_conv}, dt_rank {self.dt_rank(layer)}; "
            f"state {self.state_formula(layer).elements:,} elements per sequence"
        )


class Mamba2(RecurrentState):
    """A Mamba-2 (SSD) layer: a constant state of H·P·N (SSM) + (K − 1)·(H·P + 2·G·N) (convolution)."""

    temporal: ClassVar[str] = "ssm"  # the state component recurrent_dtype stores
    kind: Literal["mamba2"]
    mamba_num_heads: HeadCount = Field(description="SSM heads H, one scalar decay each (HF mamba_num_heads).")
    mamba_head_dim: Dim = Field(description="Channels P per head; d_inner = H·P (HF mamba_head_dim).")
    ssm_state_size: Dim = Field(description="State size N (HF ssm_state_size).")
    n_groups: HeadCount = Field(description="Groups G sharing B and C, as GQA's K/V groups (HF n_groups).")
    conv_kernel: Dim = Field(description="Kernel K of the causal depthwise convolution (HF conv_kernel).")
    use_conv_bias: bool = Field(True, description="Bias on the convolution (HF use_conv_bias).")
    use_bias: bool = Field(False, description="Biases on in_proj and out_proj (HF use_bias, as NemotronHMamba2Mixer).")
    gated_norm: bool = Field(
        True, description="The gated RMSNorm over d_inner before out_proj (a weight of d_inner); false for Falcon-H1's "
        "mamba_rms_norm false, where the output is y·silu(z) (FalconH1Mixer)."
    )

    label: ClassVar[str] = "MAMBA2"

    @model_validator(mode="after")
    def _groups_divide(self) -> Mamba2:
        if self.mamba_num_heads % self.n_groups:  # each group's B and C serve H / G heads
            raise ValueError(f"mamba_num_heads ({self.mamba_num_heads}) must be divisible by n_groups ({self.n_groups})")
        return self

    @property
    def d_inner(self) -> int:
        return self.mamba_num_heads * self.mamba_head_dim  # NemotronHMamba2Mixer.intermediate_size

    @property
    def conv_dim(self) -> int:
        return self.d_inner + 2 * self.n_groups * self.ssm_state_size  # NemotronHMamba2Mixer.conv_dim: x, B, C

    def state_formula(self, layer: Layer) -> Formula:
        p = layer.path
        h, hd = Symbol("H", self.mamba_num_heads, f"{p}.mamba_num_heads"), Symbol("P", self.mamba_head_dim, f"{p}.mamba_head_dim")
        n, g = Symbol("N", self.ssm_state_size, f"{p}.ssm_state_size"), Symbol("G", self.n_groups, f"{p}.n_groups")
        k = Symbol("K", self.conv_kernel, f"{p}.conv_kernel")
        ssm = self.d_inner * self.ssm_state_size  # ssm_states [b, H, P, N]
        conv = conv_state(self.conv_kernel, self.conv_dim)  # the last K − 1 inputs of each of the conv_dim channels
        return Formula(
            "H·P·N + (K − 1)·(H·P + 2·G·N)", (h, hd, n, g, k), ssm + conv, {"ssm": ssm, "conv": conv},
            "NemotronHMamba2Mixer (transformers modeling_nemotron_h.py): ssm_states [b, H, P, N]; conv_dim = H·P + 2·G·N; "
            "vLLM mamba2_state_shape: " + CONV_NOTE,
        )

    def state_shapes(self, layer: Layer, batch: int) -> dict[str, tuple[int, ...]]:
        return {"ssm": (batch, self.mamba_num_heads, self.mamba_head_dim, self.ssm_state_size),
                "conv": (batch, self.conv_dim, self.conv_kernel - 1)}

    def weights(self, layer: Layer) -> tuple[Weight, ...]:
        d, h, di, cd, k = layer.d_model, self.mamba_num_heads, self.d_inner, self.conv_dim, self.conv_kernel
        # in_proj: Linear(d, d_inner + conv_dim + H): the gate z, then x, B, C (to the convolution), then Δ per head
        out = [
            Weight("W_in", "mamba/in_proj", (d, di + cd + h)),
            # conv1d: Conv1d(conv_dim, conv_dim, K, groups=conv_dim): depthwise, 2 FLOPs per element and token
            Weight("conv1d", "mamba/conv", (cd, 1, k)),
            Weight("dt_bias", "mamba/ssm", (h,), "bias"),  # dt_bias, A_log, D: nn.Parameter(H) each
            Weight("A_log", "mamba/ssm", (h,), "bias"),
            Weight("D", "mamba/ssm", (h,), "bias"),
            Weight("W_out", "mamba/out_proj", (di, d)),  # out_proj: Linear(d_inner, d)
        ]
        if self.gated_norm:  # Zamba2RMSNormGated(d_inner, group_size=d_inner / G); FalconH1Mixer only if mamba_rms_norm
            out.append(Weight("norm", "mamba/norms", (di,), "norm"))
        if self.use_conv_bias:
            out.append(Weight("b_conv", "mamba/conv", (cd,), "bias"))
        if self.use_bias:
            out += [Weight("b_in", "mamba/in_proj", (di + cd + h,), "bias"), Weight("b_out", "mamba/out_proj", (d,), "bias")]
        return tuple(out)

    def flops(self, layer: Layer, work: Work, schedule: str) -> dict[str, int]:
        t = work.tokens
        proj = matrix_flops(self.weights(layer), t, ("W_in", "conv1d", "W_out"))
        # The SSD recurrence per token (Mamba-2 paper, Dao & Gu 2024, §3: h_t = a_t·h_{t-1} + x_t·B_tᵀ, y_t = h_t·C_t,
        # with a scalar decay a_t per head): per element of each head's P × N state, the decay, the input Δx·B and
        # the add (3), and the readout C (2), so 5·H·P·N; plus H·P for the D skip. This is the token-by-token
        # (decoding) form; the chunked SSD kernels compute the same outputs with extra intra-chunk products.
        return {
            "mamba/in_proj": proj["mamba/in_proj"],
            "mamba/conv": proj["mamba/conv"],  # depthwise: K multiply-adds per channel and token
            "mamba/scan": t * (5 * self.d_inner * self.ssm_state_size + self.d_inner),
            "mamba/out_proj": proj["mamba/out_proj"],
        }

    def tp_rule(self, layer: Layer, tp: int) -> str | None:
        # vLLM 0.34.0 MambaMixer2.__init__ asserts num_heads % tp_size == 0 and (n_groups % tp_size == 0 or
        # n_groups == 1): "If tensor parallel world size does not divide num_groups, then num_groups must equal 1"
        heads = split_rule(self.mamba_num_heads, "SSM heads (mamba_num_heads)", tp, "vLLM's MambaMixer2")
        if heads is None and self.n_groups % tp and self.n_groups != 1:
            return (f"{self.n_groups} groups (n_groups), which {tp} ranks can neither split evenly nor replicate (vLLM's "
                    "MambaMixer2 needs n_groups divisible by the tensor-parallel size, or 1)")
        return heads

    def per_rank(self, layer: Layer, tp: int) -> Mamba2:
        # vLLM's MambaMixer2 under TP: heads split; groups split, or the one group replicated (tp_rule)
        return self.model_copy(update={"mamba_num_heads": -(-self.mamba_num_heads // tp),
                                       "n_groups": -(-self.n_groups // tp)})

    def describe(self, layer: Layer) -> str:
        return (
            f"Mamba-2: H {self.mamba_num_heads} heads × P {self.mamba_head_dim} (d_inner {self.d_inner}), "
            f"d_state {self.ssm_state_size}, n_groups {self.n_groups}, conv kernel {self.conv_kernel}; "
            f"state {self.state_formula(layer).elements:,} elements per sequence"
        )


class NoMixer(Recurrent):
    """No sequence mixer: a block that is an MLP or MoE only (Nemotron-H's '-' and 'E' blocks, `NemotronHBlock` with
    an `NemotronHMLP` or `NemotronHMoE` mixer). It holds no cache and no state, and has no weights or FLOPs; its
    layer's `ffn` is the block."""

    kind: Literal["none"]

    label: ClassVar[str] = "NONE"
    mixer: ClassVar[bool] = False

    def kv_label(self, layer: Layer, layout: str | None) -> str:
        return "–"

    def cache_formula(self, layer: Layer, layout: str) -> Formula:
        return Formula("0", (), 0, {}, "no sequence mixer: no cache and no state")

    def tokens_rule(self, layer: Layer) -> str:
        return "none (no sequence mixer)"

    def describe(self, layer: Layer) -> str:
        return "no sequence mixer: the layer is its FFN only"
