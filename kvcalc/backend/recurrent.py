"""Reference constant-state layers in NumPy: Gated DeltaNet, Kimi Delta Attention (KDA), Mamba-1, Mamba-2 (SSD),
lightning attention, and the empty mixer. Each runs its recurrence token by token, in prefill as in decoding, so the
FLOPs it executes are the ones its kind counts (`kvcalc.attention.deltanet`, `kda`, `mamba`, `lightning`: the
token-by-token form); `parallel` computes the same outputs in the parallel (quadratic, masked) form, for the
numerical check.

Axis letters are those of `kvcalc.backend.ops`, and: c convolution channel, w conv tap, u value head of Gated
DeltaNet (H_v), v its value dim (d_v), i Mamba's d_inner channel, n state size (N), p Mamba-2's head dim (P),
o Mamba-2's group (G).

The Cache of a constant-state layer holds its state: the recurrent (SSM) state and the convolution's last K − 1
inputs [b, channels, K − 1], as `state_shapes` of the kind names them. Weights are random, scaled so the recurrences
stay bounded: decays in (0, 1), unit-norm keys (Gated DeltaNet, KDA), small Δ (Mamba), as the models initialise them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from kvcalc.backend.ops import FlopCounter, held, random_weight, rms_norm

PROGRESS_TOKENS = 256  # prefill tokens per progress-bar step


def _cache(tensors: dict[str, np.ndarray], seen: int):
    from kvcalc.backend.attention import Cache  # imported here: attention.py lists these layers in LAYERS

    return Cache(tensors, seen)


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1 + np.exp(-x))


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0, x)


def causal_conv(fc: FlopCounter, component: str, x: np.ndarray, state: np.ndarray, w: np.ndarray,
                bias: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Depthwise causal convolution: x [b, s, c] after the state's K − 1 earlier inputs [b, c, K − 1], filters
    w [c, K] -> y [b, s, c] (y_t = Σ_w w[c, w]·x_{t−K+1+w}), and the new state [b, c, K − 1]."""
    s, k = x.shape[1], w.shape[1]
    padded = np.concatenate([state.transpose(0, 2, 1), x], axis=1)  # [b, K − 1 + s, c]
    windows = sliding_window_view(padded, k, axis=1)  # [b, s, c, K]: each output's K inputs
    y = fc.einsum(component, "bscw,cw->bsc", windows, w)  # K multiply-adds per channel and token
    if bias is not None:
        y += bias
    return y, held(padded[:, s:].transpose(0, 2, 1))  # not a view keeping all of `padded` alive


def _segsum(cum: np.ndarray) -> np.ndarray:
    """exp(cum_t − cum_s) for s ≤ t and 0 above the diagonal: [..., L] -> [..., L, L] (the decay from s to t)."""
    diff = cum[..., :, None] - cum[..., None, :]
    causal = np.tril(np.ones(diff.shape[-2:], dtype=bool))
    return np.where(causal, np.exp(np.where(causal, diff, 0.0)), 0.0)


@dataclass(frozen=True)
class StatePlan:
    """What a constant-state layer holds while it runs, in elements (the memory plan): width per token of a
    prefill's activations, scratch arrays a recurrence step makes (state-sized), and what the parallel-form check
    holds per token pair and sequence (its [L, L] masks), at most `cap` elements (0: no cap) when it works a block of
    channels at a time."""

    width: int
    scratch: int
    pairs: int = 0
    cap: int = 0


CHECK_TOKENS = 48  # the parallel form's [L, L] masks: the check runs on at most this many tokens
CHECK_DECODED = 3  # tokens decoded step by step at the end of the check
CHUNK_ELEMENTS = 1 << 22  # Mamba-1's parallel form: [b, L, L, channels, N] elements per block of channels


def state_activations(p: StatePlan, d_model: int, batch: int, tokens: int, itemsize: int) -> int:
    """Bytes a constant-state layer holds beyond its weights and state, the larger of: its part of a prefill of
    `tokens` (the residual stream's 4·d_model and the layer's width per token, and a step's scratch), and its
    numerical check in float64 (both forms' activations over L tokens, the masks, the states)."""
    run = batch * (tokens * (4 * d_model + p.width) + p.scratch) * itemsize
    n = min(tokens, CHECK_TOKENS)
    masks = batch * p.pairs * n * n
    check = 8 * (batch * (n * (2 * d_model + 2 * p.width) + 2 * p.scratch) + (min(masks, p.cap) if p.cap else masks))
    return max(run, check)


class _Layer:
    """What every constant-state layer shares: a progress hook and the token-by-token prefill loop."""

    dtype: type
    on_block = None  # called every PROGRESS_TOKENS prefill tokens, for a progress bar

    def prefill_blocks(self, batch: int, s: int) -> int:
        return -(-s // PROGRESS_TOKENS)

    def _tick(self, t: int) -> None:
        if self.on_block is not None and (t + 1) % PROGRESS_TOKENS == 0:
            self.on_block()

    def _zeros(self, shape) -> np.ndarray:
        return np.zeros(shape, dtype=self.dtype)


# ---------------------------------------------------------------- Gated DeltaNet


class GatedDeltaNetLayer(_Layer):
    """Qwen3-Next's Gated DeltaNet (`Qwen3NextGatedDeltaNet`): per value head a d_k × d_v state S,
    S_t = α_t·S_{t−1} + β_t·k_t·(v_t − α_t·S_{t−1}ᵀk_t)ᵀ, o_t = S_tᵀq_t, after a causal conv over q, k and v."""

    def __init__(self, att, layer, rng: np.random.Generator, dtype):
        self.dtype, d_model = dtype, layer.d_model
        self.hk, self.hv = att.linear_num_key_heads, att.linear_num_value_heads
        self.dk, self.dv, self.k = att.linear_key_head_dim, att.linear_value_head_dim, att.linear_conv_kernel_dim
        self.key_dim, self.value_dim, self.conv_dim = att.key_dim, att.value_dim, att.conv_dim
        self.w_qkvz = random_weight(rng, (d_model, 2 * self.key_dim + 2 * self.value_dim), d_model, dtype)
        self.w_ba = random_weight(rng, (d_model, 2 * self.hv), d_model, dtype)
        self.w_conv = random_weight(rng, (self.conv_dim, self.k), self.k, dtype)
        self.a_log = np.log(rng.uniform(1, 16, self.hv)).astype(dtype)  # A ~ U(1, 16), as the model initialises it
        self.dt_bias = np.log(np.expm1(rng.uniform(1e-3, 1e-1, self.hv))).astype(dtype)  # softplus⁻¹ of Δ
        self.w_o = random_weight(rng, (self.value_dim, d_model), self.value_dim, dtype)

    def _inputs(self, fc: FlopCounter, x: np.ndarray, conv: np.ndarray):
        """x [b, s, m] -> q, k [b, s, u, d] (unit norm; q scaled), v [b, s, u, v], β and log α [b, s, u], the gate z
        [b, s, u, v], and the new conv state."""
        b, s, _ = x.shape
        qkvz = fc.matmul("attn/qkvz", x, self.w_qkvz)
        ba = fc.matmul("attn/ba", x, self.w_ba)
        mixed, conv = causal_conv(fc, "attn/conv", qkvz[..., : self.conv_dim], conv, self.w_conv, None)
        mixed = silu(mixed)
        rep = self.hv // self.hk  # value heads per q/k head
        q, k = (np.repeat(mixed[..., i * self.key_dim : (i + 1) * self.key_dim].reshape(b, s, self.hk, self.dk), rep, axis=2)
                for i in (0, 1))
        q = q / np.sqrt(np.sum(q * q, axis=-1, keepdims=True) + 1e-6) * self.dtype(self.dk ** -0.5)  # l2norm, scale
        k = k / np.sqrt(np.sum(k * k, axis=-1, keepdims=True) + 1e-6)
        v = mixed[..., 2 * self.key_dim :].reshape(b, s, self.hv, self.dv)
        z = qkvz[..., self.conv_dim :].reshape(b, s, self.hv, self.dv)
        beta = sigmoid(ba[..., : self.hv])
        log_alpha = -np.exp(self.a_log) * softplus(ba[..., self.hv :] + self.dt_bias)  # g = −A·softplus(a + dt_bias)
        return q, k, v, beta, log_alpha, z, conv

    def _output(self, fc: FlopCounter, o: np.ndarray, z: np.ndarray) -> np.ndarray:
        """o [b, s, u, v] -> RMSNorm per head, gated by silu(z) (Qwen3NextRMSNormGated), then W_O -> [b, s, m]."""
        b, s = o.shape[:2]
        gated = (rms_norm(o.astype(self.dtype)) * silu(z)).reshape(b, s, self.value_dim)
        return fc.matmul("attn/o", gated, self.w_o)

    def _recur(self, fc: FlopCounter, q, k, v, beta, log_alpha, state: np.ndarray):
        """The gated delta rule token by token: state [b, u, d, v] -> outputs [b, s, u, v] and the new state.

        Per token and value head, as the kind counts: α·S (d_k·d_v multiplies), kᵀS (2·d_k·d_v), S + k·δᵀ (an outer
        product accumulated: 2·d_k·d_v), the readout qᵀS (2·d_k·d_v); δ = β·(v − kᵀS) is O(d_v), left out.
        """
        alpha = np.exp(log_alpha).astype(self.dtype)
        out = np.empty(v.shape, dtype=self.dtype)
        for t in range(q.shape[1]):
            state = fc.einsum("attn/state", "budv,bu->budv", state, alpha[:, t])
            ks = fc.matmul("attn/state", k[:, t, :, None, :], state)[:, :, 0]  # [b, u, 1, d] @ [b, u, d, v]
            delta = beta[:, t, :, None] * (v[:, t] - ks)
            state = state + fc.matmul("attn/state", k[:, t, :, :, None], delta[:, :, None, :])  # [b, u, d, v]
            out[:, t] = fc.matmul("attn/readout", q[:, t, :, None, :], state)[:, :, 0]
            self._tick(t)
        return out, state

    def _empty(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        return self._zeros((b, self.hv, self.dk, self.dv)), self._zeros((b, self.conv_dim, self.k - 1))

    def prefill(self, fc: FlopCounter, x: np.ndarray):
        return self._step(fc, x, *self._empty(x.shape[0]), 0)

    def decode(self, fc: FlopCounter, x: np.ndarray, cache, schedule: str = "naive"):
        return self._step(fc, x, cache.tensors["recurrent"], cache.tensors["conv"], cache.seen)

    def _step(self, fc, x, state, conv, seen):
        q, k, v, beta, log_alpha, z, conv = self._inputs(fc, x, conv)
        o, state = self._recur(fc, q, k, v, beta, log_alpha, state)
        return self._output(fc, o, z), _cache({"recurrent": state, "conv": conv}, seen + x.shape[1])

    def parallel(self, x: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The same prefill in parallel form (float64): the delta rule's values u_t solve the lower-triangular system
        (I + diag(β)·A)·U = diag(β)·V, A_ts = Γ_ts·k_tᵀk_s (s < t), Γ_ts = α_{s+1}⋯α_t; then O = (QKᵀ ⊙ Γ)·U and
        S = Σ_s Γ_Ls·k_s·u_sᵀ (the WY form of DeltaNet's chunked kernels, with the whole prompt as one chunk)."""
        fc = _silent()
        q, k, v, beta, log_alpha, z, conv = self._inputs(fc, x, self._empty(x.shape[0])[1])
        q, k, v = (a.astype(np.float64).transpose(0, 2, 1, 3) for a in (q, k, v))  # [b, u, s, ·]
        beta = beta.astype(np.float64).transpose(0, 2, 1)[..., None]  # [b, u, s, 1]
        gamma = _segsum(np.cumsum(log_alpha.astype(np.float64).transpose(0, 2, 1), axis=-1))  # [b, u, s, s]
        a = np.tril(k @ k.transpose(0, 1, 3, 2) * gamma, -1)
        u = np.linalg.solve(np.eye(a.shape[-1]) + beta * a, beta * v)
        o = (q @ k.transpose(0, 1, 3, 2) * gamma) @ u
        state = (gamma[..., -1, :, None] * k).transpose(0, 1, 3, 2) @ u  # [b, u, d, v]
        return self._output(fc, o.transpose(0, 2, 1, 3), z), {"recurrent": state, "conv": conv}


def _gdn_plan(att, layer, layout: str) -> StatePlan:
    proj = 2 * att.key_dim + 2 * att.value_dim + 2 * att.linear_num_value_heads
    # the projections, the conv's output and silu, q and k repeated over value heads (and normalised), o and its norm
    width = proj + 2 * att.conv_dim + 4 * att.linear_num_value_heads * att.linear_key_head_dim + 3 * att.value_dim
    state = att.linear_num_value_heads * att.linear_key_head_dim * att.linear_value_head_dim
    return StatePlan(width=width, scratch=4 * state, pairs=6 * att.linear_num_value_heads)


# ---------------------------------------------------------------- Kimi Delta Attention


class KDALayer(_Layer):
    """Kimi Linear's KDA (vLLM's `KimiDeltaAttention`, fla's `naive_recurrent_kda`): Gated DeltaNet with a decay per
    channel, per head a d × d state S, S_t = (I − β_t·k_t·k_tᵀ)·Diag(α_t)·S_{t−1} + β_t·k_t·v_tᵀ, o_t = S_tᵀq_t,
    after causal convs over q, k and v (one each, with their own state)."""

    def __init__(self, att, layer, rng: np.random.Generator, dtype):
        self.dtype, d_model = dtype, layer.d_model
        self.h, self.d, self.k, self.proj = att.n_heads, att.head_dim, att.conv_kernel, att.proj
        self.w_q, self.w_k, self.w_v = (random_weight(rng, (d_model, self.proj), d_model, dtype) for _ in range(3))
        self.w_fa = random_weight(rng, (d_model, self.d), d_model, dtype)  # f_a_proj, f_b_proj: the decay's input
        self.w_fb = random_weight(rng, (self.d, self.proj), self.d, dtype)
        self.w_b = random_weight(rng, (d_model, self.h), d_model, dtype)  # b_proj: β per head
        self.w_conv = {name: random_weight(rng, (self.proj, self.k), self.k, dtype) for name in ("q", "k", "v")}
        self.a_log = np.log(rng.uniform(1, 16, self.h)).astype(dtype)  # A per head, as fla initialises it
        self.dt_bias = np.log(np.expm1(rng.uniform(1e-3, 1e-1, self.proj))).astype(dtype)  # per channel
        self.w_ga = random_weight(rng, (d_model, self.d), d_model, dtype)  # g_a_proj, g_b_proj: the output gate
        self.w_gb = random_weight(rng, (self.d, self.proj), self.d, dtype)
        self.w_o = random_weight(rng, (self.proj, d_model), self.proj, dtype)

    def _inputs(self, fc: FlopCounter, x: np.ndarray, convs: dict[str, np.ndarray]):
        """x [b, s, m] -> q, k [b, s, h, d] (unit norm; q scaled by d^−½), v [b, s, h, d], β [b, s, h], log α
        [b, s, h, d] (per channel), the gate's input [b, s, h, d], and the new conv states."""
        b, s, _ = x.shape
        new, mixed = {}, {}
        for name, w in (("q", self.w_q), ("k", self.w_k), ("v", self.w_v)):
            y, new[f"conv_{name}"] = causal_conv(fc, "attn/conv", fc.matmul(f"attn/{name}", x, w), convs[f"conv_{name}"],
                                                 self.w_conv[name], None)
            mixed[name] = silu(y).reshape(b, s, self.h, self.d)  # causal_conv1d_fn(..., activation="silu")
        q, k, v = mixed["q"], mixed["k"], mixed["v"]
        q = q / np.sqrt(np.sum(q * q, axis=-1, keepdims=True) + 1e-6) * self.dtype(self.d ** -0.5)  # l2norm in kernel
        k = k / np.sqrt(np.sum(k * k, axis=-1, keepdims=True) + 1e-6)
        beta = sigmoid(fc.matmul("attn/beta", x, self.w_b))
        f = fc.matmul("attn/decay", fc.matmul("attn/decay", x, self.w_fa), self.w_fb) + self.dt_bias
        # fused_kda_gate: g = −exp(A_log)·softplus(f + dt_bias), per channel (A per head)
        log_alpha = -np.exp(self.a_log)[:, None] * softplus(f.reshape(b, s, self.h, self.d))
        gate = fc.matmul("attn/gate", fc.matmul("attn/gate", x, self.w_ga), self.w_gb).reshape(b, s, self.h, self.d)
        return q, k, v, beta, log_alpha, gate, new

    def _output(self, fc: FlopCounter, o: np.ndarray, gate: np.ndarray) -> np.ndarray:
        """o [b, s, h, d] -> RMSNorm per head times sigmoid(gate) (FusedRMSNormGated, activation sigmoid), W_O."""
        b, s = o.shape[:2]
        gated = (rms_norm(o.astype(self.dtype)) * sigmoid(gate)).reshape(b, s, self.proj)
        return fc.matmul("attn/o", gated, self.w_o)

    def _recur(self, fc: FlopCounter, q, k, v, beta, log_alpha, state: np.ndarray):
        """The per-channel gated delta rule token by token: state [b, h, d, e] -> outputs [b, s, h, e], new state.

        Per token and head, as the kind counts: Diag(α)·S (d·d multiplies), kᵀS (2·d·d), S + k·δᵀ (an outer product
        accumulated: 2·d·d), the readout qᵀS (2·d·d); δ = β·(v − kᵀS) is O(d), left out.
        """
        alpha = np.exp(log_alpha).astype(self.dtype)
        out = np.empty(v.shape, dtype=self.dtype)
        for t in range(q.shape[1]):
            state = fc.einsum("attn/state", "bhde,bhd->bhde", state, alpha[:, t])  # each key channel's own decay
            ks = fc.matmul("attn/state", k[:, t, :, None, :], state)[:, :, 0]  # [b, h, 1, d] @ [b, h, d, e]
            delta = beta[:, t, :, None] * (v[:, t] - ks)
            state = state + fc.matmul("attn/state", k[:, t, :, :, None], delta[:, :, None, :])  # [b, h, d, e]
            out[:, t] = fc.matmul("attn/readout", q[:, t, :, None, :], state)[:, :, 0]
            self._tick(t)
        return out, state

    def _empty(self, b: int) -> dict[str, np.ndarray]:
        conv = {f"conv_{name}": self._zeros((b, self.proj, self.k - 1)) for name in ("q", "k", "v")}
        return {"recurrent": self._zeros((b, self.h, self.d, self.d)), **conv}

    def prefill(self, fc: FlopCounter, x: np.ndarray):
        return self._step(fc, x, self._empty(x.shape[0]), 0)

    def decode(self, fc: FlopCounter, x: np.ndarray, cache, schedule: str = "naive"):
        return self._step(fc, x, cache.tensors, cache.seen)

    def _step(self, fc, x, held, seen):
        q, k, v, beta, log_alpha, gate, convs = self._inputs(fc, x, held)
        o, state = self._recur(fc, q, k, v, beta, log_alpha, held["recurrent"])
        return self._output(fc, o, gate), _cache({"recurrent": state, **convs}, seen + x.shape[1])

    def parallel(self, x: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The same prefill in parallel form (float64), Gated DeltaNet's WY/UT system with a decay per channel (fla's
        chunk_kda with the whole prompt as one chunk): with Γ_tsd = α_{s+1,d}⋯α_{t,d} (s ≤ t), the deltas U solve
        (I + diag(β)·A)·U = diag(β)·V, A_ts = Σ_d k_td·Γ_tsd·k_sd (s < t); then O = P·U, P_ts = Σ_d q_td·Γ_tsd·k_sd,
        and S = Σ_s Diag(Γ_Ls)·k_s·u_sᵀ. One head at a time: Γ is [b, L, L, d] per head."""
        fc = _silent()
        q, k, v, beta, log_alpha, gate, convs = self._inputs(fc, x, self._empty(x.shape[0]))
        q, k, v, log_alpha = (a.astype(np.float64).transpose(0, 2, 1, 3) for a in (q, k, v, log_alpha))  # [b, h, s, ·]
        beta = beta.astype(np.float64).transpose(0, 2, 1)[..., None]  # [b, h, s, 1]
        n = q.shape[2]
        causal = np.tril(np.ones((n, n), dtype=bool))[None, :, :, None]  # [1, t, s, 1]
        o, state = np.empty(q.shape), np.empty((q.shape[0], self.h, self.d, self.d))
        for h in range(self.h):
            cum = np.cumsum(log_alpha[:, h], axis=1)  # [b, s, d]
            diff = cum[:, :, None] - cum[:, None, :]  # [b, t, s, d]
            gamma = np.where(causal, np.exp(np.where(causal, diff, 0.0)), 0.0)
            kh, qh = k[:, h], q[:, h]
            a = np.tril(np.einsum("btd,btsd,bsd->bts", kh, gamma, kh), -1)
            u = np.linalg.solve(np.eye(n) + beta[:, h] * a, beta[:, h] * v[:, h])  # [b, s, e]
            o[:, h] = np.einsum("btd,btsd,bsd->bts", qh, gamma, kh) @ u
            state[:, h] = (gamma[:, -1] * kh).transpose(0, 2, 1) @ u  # [b, d, e]
        return self._output(fc, o.transpose(0, 2, 1, 3), gate), {"recurrent": state, **convs}


def _kda_plan(att, layer, layout: str) -> StatePlan:
    p = att.proj
    # held at once, per token: q, k, v convolved and silu'd, and q, k normalised (5·p), one projection and its
    # conv in flight (2·p), β, the decay's two products, its exponent and α (d + 3·p), the gate's two products
    # (d + p), the outputs (p)
    width = 5 * p + 2 * p + att.n_heads + att.head_dim + 3 * p + att.head_dim + p + p
    # the parallel form works one head at a time: the exponent, Γ and its masked copies, [b, L, L, d] each
    return StatePlan(width=width, scratch=4 * att.n_heads * att.head_dim ** 2, pairs=4 * att.head_dim)


# ---------------------------------------------------------------- Mamba-1


class MambaLayer(_Layer):
    """Mamba-1's selective SSM (`JambaMambaMixer`): per channel i an N-state h, h_t = exp(Δ_t·A)·h_{t−1} +
    Δ_t·B_t·u_t, y_t = C_t·h_t + D·u_t, gated by silu(z), after a causal conv over d_inner channels."""

    def __init__(self, att, layer, rng: np.random.Generator, dtype):
        self.dtype, d_model = dtype, layer.d_model
        self.di, self.n, self.r, self.k = att.d_inner(layer), att.mamba_d_state, att.dt_rank(layer), att.mamba_d_conv
        self.inner_norms = att.inner_norms
        self.w_in = random_weight(rng, (d_model, 2 * self.di), d_model, dtype)
        self.b_in = np.zeros(2 * self.di, dtype) if att.mamba_proj_bias else None
        self.w_conv = random_weight(rng, (self.di, self.k), self.k, dtype)
        self.b_conv = np.zeros(self.di, dtype) if att.mamba_conv_bias else None
        self.w_x = random_weight(rng, (self.di, self.r + 2 * self.n), self.di, dtype)
        self.w_dt = random_weight(rng, (self.r, self.di), self.r, dtype)
        self.b_dt = np.log(np.expm1(rng.uniform(1e-3, 1e-1, self.di))).astype(dtype)  # softplus⁻¹ of Δ, as Mamba
        self.a = -np.tile(np.arange(1, self.n + 1, dtype=dtype), (self.di, 1))  # A = −exp(A_log): S4D-real init
        self.d = np.ones(self.di, dtype)
        self.w_out = random_weight(rng, (self.di, d_model), self.di, dtype)
        self.b_out = np.zeros(d_model, dtype) if att.mamba_proj_bias else None

    def _inputs(self, fc: FlopCounter, x: np.ndarray, conv: np.ndarray):
        """x [b, s, m] -> u, Δ [b, s, i], B, C [b, s, n], the gate z [b, s, i], and the new conv state."""
        xz = fc.matmul("mamba/in_proj", x, self.w_in)
        if self.b_in is not None:
            xz += self.b_in
        u, conv = causal_conv(fc, "mamba/conv", xz[..., : self.di], conv, self.w_conv, self.b_conv)
        u = silu(u)
        dbc = fc.matmul("mamba/x_proj", u, self.w_x)
        dt, bb, cc = dbc[..., : self.r], dbc[..., self.r : self.r + self.n], dbc[..., self.r + self.n :]
        if self.inner_norms:  # Jamba's dt_layernorm, b_layernorm, c_layernorm
            dt, bb, cc = rms_norm(dt), rms_norm(bb), rms_norm(cc)
        delta: np.ndarray = softplus(fc.matmul("mamba/dt_proj", dt, self.w_dt) + self.b_dt).astype(self.dtype)
        return u, delta, bb, cc, xz[..., self.di :], conv

    def _output(self, fc: FlopCounter, y: np.ndarray, u: np.ndarray, z: np.ndarray) -> np.ndarray:
        """y [b, s, i] + D·u, gated by silu(z) (d_inner multiplies each, as the kind counts), then out_proj."""
        y = y + fc.einsum("mamba/scan", "bsi,i->bsi", u, self.d)
        y = fc.einsum("mamba/scan", "bsi,bsi->bsi", y.astype(self.dtype), silu(z))
        out = fc.matmul("mamba/out_proj", y, self.w_out)
        return out if self.b_out is None else out + self.b_out

    def _recur(self, fc: FlopCounter, u, delta, bb, cc, h: np.ndarray):
        """The selective scan token by token: h [b, i, n] -> y [b, s, i] and the new h.

        Executed per state element: Δ·A, exp, Δ·B, ·u (discretisation), Ā·h and + B̄u (update), C·h (a multiply-add):
        8 FLOPs, as selective_scan_ref runs them and the kind counts them.
        """
        y = np.empty(u.shape, dtype=self.dtype)
        for t in range(u.shape[1]):
            da = fc.einsum("mamba/scan", "bi,in->bin", delta[:, t], self.a)
            np.exp(da, out=da)
            fc.count("mamba/scan", da.size)  # exp(Δ·A): one per state element
            dbu = fc.einsum("mamba/scan", "bin,bi->bin", fc.einsum("mamba/scan", "bi,bn->bin", delta[:, t], bb[:, t]),
                            u[:, t])
            h = fc.einsum("mamba/scan", "bin,bin->bin", da, h)
            h += dbu
            fc.count("mamba/scan", h.size)  # + B̄u: one add per state element
            y[:, t] = fc.matmul("mamba/scan", h, cc[:, t, :, None])[..., 0]  # [b, i, n] @ [b, n, 1]
            self._tick(t)
        return y, h

    def _empty(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        return self._zeros((b, self.di, self.n)), self._zeros((b, self.di, self.k - 1))

    def prefill(self, fc: FlopCounter, x: np.ndarray):
        return self._step(fc, x, *self._empty(x.shape[0]), 0)

    def decode(self, fc: FlopCounter, x: np.ndarray, cache, schedule: str = "naive"):
        return self._step(fc, x, cache.tensors["ssm"], cache.tensors["conv"], cache.seen)

    def _step(self, fc, x, h, conv, seen):
        u, delta, bb, cc, z, conv = self._inputs(fc, x, conv)
        y, h = self._recur(fc, u, delta, bb, cc, h)
        return self._output(fc, y, u, z), _cache({"ssm": h, "conv": conv}, seen + x.shape[1])

    def parallel(self, x: np.ndarray, chunk_elements: int = CHUNK_ELEMENTS):
        """The same prefill in parallel form (float64): h_t = Σ_{s≤t} exp(A·(c_t − c_s))·Δ_s·B_s·u_s with c the
        cumulative Δ, so y_t = Σ_{s,n} C_t,n·exp(A_n·(c_t − c_s))·Δ_s·u_s·B_s,n; channels a block at a time."""
        fc = _silent()
        u, delta, bb, cc, z, conv = self._inputs(fc, x, self._empty(x.shape[0])[1])
        b, s, di = u.shape
        u64, d64, b64, c64 = (a.astype(np.float64) for a in (u, delta, bb, cc))
        cum = np.cumsum(d64, axis=1)  # [b, s, i]
        du = d64 * u64
        y, h = np.empty((b, s, di)), np.empty((b, di, self.n))
        step = max(1, chunk_elements // (b * s * s * self.n))
        causal = np.tril(np.ones((s, s), dtype=bool))[None, :, :, None, None]
        for i0 in range(0, di, step):
            sl = slice(i0, i0 + step)
            diff = cum[:, :, None, sl] - cum[:, None, :, sl]  # [b, t, s, i]
            decay = np.where(causal, np.exp(np.where(causal, diff[..., None] * self.a[sl], 0.0)), 0.0)  # [b, t, s, i, n]
            terms = decay * (du[:, None, :, sl, None] * b64[:, None, :, None, :])
            y[:, :, sl] = np.einsum("btsin,btn->bti", terms, c64)
            h[:, sl] = terms[:, -1].sum(axis=1)
        return self._output(fc, y, u, z), {"ssm": h, "conv": conv}


def _mamba_plan(att, layer, layout: str) -> StatePlan:
    di, n = att.d_inner(layer), att.mamba_d_state
    # in_proj's x and z, the conv's output and silu, x_proj's output, Δ (and softplus), y, D·u, the gate
    width = 2 * di + 2 * di + att.dt_rank(layer) + 2 * n + 2 * di + 3 * di
    # the parallel form's block: the decay's exponent, its exp, the masked copies, the terms
    return StatePlan(width=width, scratch=6 * di * n, pairs=6 * di * n, cap=6 * CHUNK_ELEMENTS)


# ---------------------------------------------------------------- Mamba-2 (SSD)


class Mamba2Layer(_Layer):
    """Mamba-2's SSD layer (`NemotronHMamba2Mixer`): per head a P × N state with a scalar decay,
    h_t = exp(Δ_t·A)·h_{t−1} + Δ_t·x_t·B_tᵀ, y_t = h_t·C_t + D·x_t, after a causal conv over x, B and C."""

    def __init__(self, att, layer, rng: np.random.Generator, dtype):
        self.dtype, d_model = dtype, layer.d_model
        self.h, self.p, self.n, self.g, self.k = (att.mamba_num_heads, att.mamba_head_dim, att.ssm_state_size,
                                                  att.n_groups, att.conv_kernel)
        self.di, self.cd = att.d_inner, att.conv_dim
        self.w_in = random_weight(rng, (d_model, self.di + self.cd + self.h), d_model, dtype)
        self.b_in = np.zeros(self.di + self.cd + self.h, dtype) if att.use_bias else None
        self.w_conv = random_weight(rng, (self.cd, self.k), self.k, dtype)
        self.b_conv = np.zeros(self.cd, dtype) if att.use_conv_bias else None
        self.dt_bias = np.log(np.expm1(rng.uniform(1e-3, 1e-1, self.h))).astype(dtype)
        self.a = -rng.uniform(1, 16, self.h).astype(dtype)  # A = −exp(A_log), A_log = log U(1, 16)
        self.d = np.ones(self.h, dtype)
        self.w_out = random_weight(rng, (self.di, d_model), self.di, dtype)
        self.b_out = np.zeros(d_model, dtype) if att.use_bias else None
        self.gated_norm = att.gated_norm

    def _inputs(self, fc: FlopCounter, x: np.ndarray, conv: np.ndarray):
        """x [b, s, m] -> x [b, s, h, p], B, C [b, s, h, n] (each head its group's), Δ [b, s, h], z, new conv state."""
        b, s, _ = x.shape
        zxbcdt = fc.matmul("mamba/in_proj", x, self.w_in)
        if self.b_in is not None:
            zxbcdt += self.b_in
        xbc, conv = causal_conv(fc, "mamba/conv", zxbcdt[..., self.di : self.di + self.cd], conv, self.w_conv, self.b_conv)
        xbc = silu(xbc)
        gn = self.g * self.n
        xs = xbc[..., : self.di].reshape(b, s, self.h, self.p)
        bb, cc = (np.repeat(xbc[..., self.di + i * gn : self.di + (i + 1) * gn].reshape(b, s, self.g, self.n),
                            self.h // self.g, axis=2) for i in (0, 1))
        delta: np.ndarray = softplus(zxbcdt[..., self.di + self.cd :] + self.dt_bias).astype(self.dtype)
        return xs, bb, cc, delta, zxbcdt[..., : self.di], conv

    def _output(self, fc: FlopCounter, y: np.ndarray, xs: np.ndarray, z: np.ndarray) -> np.ndarray:
        """y [b, s, h, p] + D·x (H·P multiplies), gated RMSNorm over each group's channels (unless the kind has
        none: Falcon-H1's mamba_rms_norm false), then out_proj."""
        b, s = y.shape[:2]
        y = (y + fc.einsum("mamba/scan", "bshp,h->bshp", xs, self.d)).reshape(b, s, self.di) * silu(z)
        if self.gated_norm:
            y = rms_norm(y.reshape(b, s, self.g, self.di // self.g).astype(self.dtype)).reshape(b, s, self.di)
        out = fc.matmul("mamba/out_proj", y, self.w_out)
        return out if self.b_out is None else out + self.b_out

    def _recur(self, fc: FlopCounter, xs, bb, cc, delta, h: np.ndarray):
        """The SSD recurrence token by token: h [b, h, p, n] -> y [b, s, h, p] and the new h.

        Per state element, as the kind counts: the decay (a multiply), Δx·Bᵀ accumulated (an outer product: a
        multiply-add), the readout h·C (a multiply-add); exp(Δ·A) and Δ·x are O(H·P), left out.
        """
        decay = np.exp(delta * self.a).astype(self.dtype)  # [b, s, h]
        y = np.empty(xs.shape, dtype=self.dtype)
        for t in range(xs.shape[1]):
            h = fc.einsum("mamba/scan", "bhpn,bh->bhpn", h, decay[:, t])
            dx = delta[:, t, :, None] * xs[:, t]  # [b, h, p]
            h = h + fc.matmul("mamba/scan", dx[..., None], bb[:, t, :, None, :])  # [b, h, p, 1] @ [b, h, 1, n]
            y[:, t] = fc.matmul("mamba/scan", h, cc[:, t, :, :, None])[..., 0]  # [b, h, p, n] @ [b, h, n, 1]
            self._tick(t)
        return y, h

    def _empty(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        return self._zeros((b, self.h, self.p, self.n)), self._zeros((b, self.cd, self.k - 1))

    def prefill(self, fc: FlopCounter, x: np.ndarray):
        return self._step(fc, x, *self._empty(x.shape[0]), 0)

    def decode(self, fc: FlopCounter, x: np.ndarray, cache, schedule: str = "naive"):
        return self._step(fc, x, cache.tensors["ssm"], cache.tensors["conv"], cache.seen)

    def _step(self, fc, x, h, conv, seen):
        xs, bb, cc, delta, z, conv = self._inputs(fc, x, conv)
        y, h = self._recur(fc, xs, bb, cc, delta, h)
        return self._output(fc, y, xs, z), _cache({"ssm": h, "conv": conv}, seen + x.shape[1])

    def parallel(self, x: np.ndarray):
        """The same prefill in SSD's quadratic form (float64; Dao & Gu 2024 §3): Y = (L ⊙ C·Bᵀ)·(Δ·X) per head,
        L_ts = exp(Σ_{s<r≤t} Δ_r·A); the final state Σ_s L_Ls·Δ_s·x_s·B_sᵀ."""
        fc = _silent()
        xs, bb, cc, delta, z, conv = self._inputs(fc, x, self._empty(x.shape[0])[1])
        xs, bb, cc = (a.astype(np.float64).transpose(0, 2, 1, 3) for a in (xs, bb, cc))  # [b, h, s, ·]
        dt = delta.astype(np.float64).transpose(0, 2, 1)  # [b, h, s]
        decay = _segsum(np.cumsum(dt * self.a.astype(np.float64)[:, None], axis=-1))  # [b, h, s, s]
        dx = dt[..., None] * xs
        y = (cc @ bb.transpose(0, 1, 3, 2) * decay) @ dx
        h = (decay[..., -1, :, None] * dx).transpose(0, 1, 3, 2) @ bb  # [b, h, p, n]
        return self._output(fc, y.transpose(0, 2, 1, 3), xs.transpose(0, 2, 1, 3).astype(self.dtype), z), \
            {"ssm": h, "conv": conv}


def _mamba2_plan(att, layer, layout: str) -> StatePlan:
    di, cd, h = att.d_inner, att.conv_dim, att.mamba_num_heads
    # in_proj's output, the conv's output and silu, B and C repeated over heads, y, D·x, the gate and its norm
    width = di + cd + h + 2 * cd + 2 * h * att.ssm_state_size + 4 * di
    return StatePlan(width=width, scratch=4 * di * att.ssm_state_size, pairs=4 * h)


# ---------------------------------------------------------------- lightning attention


def alibi_slopes(n: int) -> np.ndarray:
    """MiniMax-M1's per-head decay rates (`_build_slope_tensor`, ALiBi's slopes): a geometric series from
    2^(−8/n); for n not a power of 2, those of the power below, then every other one of twice that."""
    def power_of_2(m: int) -> list[float]:
        start = 2 ** (-(2 ** -(np.log2(m) - 3)))
        return [start * start**i for i in range(m)]

    if np.log2(n).is_integer():
        return np.array(power_of_2(n))
    below = 2 ** int(np.floor(np.log2(n)))
    return np.array(power_of_2(below) + power_of_2(2 * below)[0::2][: n - below])


class LightningLayer(_Layer):
    """MiniMax's lightning attention (`MiniMaxM1LightningAttention`): per head a d_h × d_h state,
    kv_t = λ·kv_{t−1} + k_tᵀv_t, o_t = q_t·kv_t; RMSNorm over h·d_h, a sigmoid output gate, out_proj."""

    def __init__(self, att, layer, rng: np.random.Generator, dtype):
        self.dtype, d_model = dtype, layer.d_model
        self.h, self.d = att.n_heads, att.d_k(layer)
        inner = self.h * self.d
        self.w_qkv = random_weight(rng, (d_model, 3 * inner), d_model, dtype)
        self.w_gate = random_weight(rng, (d_model, inner), d_model, dtype)
        self.w_o = random_weight(rng, (inner, d_model), inner, dtype)
        self.decay = np.exp(-alibi_slopes(self.h)).astype(dtype)  # λ per head

    def _qkv(self, fc: FlopCounter, x: np.ndarray):
        b, s, _ = x.shape
        qkv = silu(fc.matmul("attn/qkv", x, self.w_qkv)).reshape(b, s, self.h, 3 * self.d)
        return qkv[..., : self.d], qkv[..., self.d : 2 * self.d], qkv[..., 2 * self.d :]  # [b, s, h, d] each

    def _output(self, fc: FlopCounter, o: np.ndarray, x: np.ndarray) -> np.ndarray:
        b, s = o.shape[:2]
        o = rms_norm(o.reshape(b, s, self.h * self.d).astype(self.dtype))
        return fc.matmul("attn/o", sigmoid(fc.matmul("attn/gate", x, self.w_gate)) * o, self.w_o)

    def _recur(self, fc: FlopCounter, q, k, v, kv: np.ndarray):
        """The decode loop of MiniMax's `inference`, for every token: kv [b, h, d, e] -> o [b, s, h, e], new kv.

        Per state element, as the kind counts: λ·kv (a multiply), kᵀv accumulated (a multiply-add), q·kv (a
        multiply-add).
        """
        o = np.empty(v.shape, dtype=self.dtype)
        for t in range(q.shape[1]):
            kv = fc.einsum("attn/state", "bhde,h->bhde", kv, self.decay)
            kv = kv + fc.matmul("attn/state", k[:, t, :, :, None], v[:, t, :, None, :])  # [b, h, d, 1] @ [b, h, 1, e]
            o[:, t] = fc.matmul("attn/readout", q[:, t, :, None, :], kv)[:, :, 0]
            self._tick(t)
        return o, kv

    def prefill(self, fc: FlopCounter, x: np.ndarray):
        return self._step(fc, x, self._zeros((x.shape[0], self.h, self.d, self.d)), 0)

    def decode(self, fc: FlopCounter, x: np.ndarray, cache, schedule: str = "naive"):
        return self._step(fc, x, cache.tensors["kv_state"], cache.seen)

    def _step(self, fc, x, kv, seen):
        q, k, v = self._qkv(fc, x)
        o, kv = self._recur(fc, q, k, v, kv)
        return self._output(fc, o, x), _cache({"kv_state": kv}, seen + x.shape[1])

    def parallel(self, x: np.ndarray):
        """The same prefill in linear attention's parallel form (float64): O = (QKᵀ ⊙ D)·V, D_ts = λ^(t−s) (s ≤ t);
        the final state Σ_s λ^(L−s)·k_sᵀv_s."""
        fc = _silent()
        q, k, v = (a.astype(np.float64).transpose(0, 2, 1, 3) for a in self._qkv(fc, x))  # [b, h, s, d]
        s = q.shape[2]
        decay = _segsum(np.log(self.decay.astype(np.float64))[:, None] * np.arange(1, s + 1))[None]  # [1, h, s, s]
        o = (q @ k.transpose(0, 1, 3, 2) * decay) @ v
        kv = (decay[..., -1, :, None] * k).transpose(0, 1, 3, 2) @ v
        return self._output(fc, o.transpose(0, 2, 1, 3), x), {"kv_state": kv}


def _lightning_plan(att, layer, layout: str) -> StatePlan:
    inner = att.n_heads * att.d_k(layer)
    # qkv and its silu, the gate and its sigmoid, o, its norm and the gated product
    return StatePlan(width=6 * inner + 2 * inner + 3 * inner, scratch=4 * att.n_heads * att.d_k(layer) ** 2,
                     pairs=4 * att.n_heads)


# ---------------------------------------------------------------- no mixer


class NoMixerLayer(_Layer):
    """The empty mixer of an MLP-only block (Nemotron-H's '-'): outputs zeros, holds nothing, computes nothing."""

    def __init__(self, att, layer, rng: np.random.Generator, dtype):
        self.dtype = dtype

    def prefill(self, fc: FlopCounter, x: np.ndarray):
        return np.zeros_like(x), _cache({}, x.shape[1])

    def decode(self, fc: FlopCounter, x: np.ndarray, cache, schedule: str = "naive"):
        return np.zeros_like(x), _cache({}, cache.seen + x.shape[1])


# ---------------------------------------------------------------- registry and the numerical check


CLASSES = {"gated_deltanet": GatedDeltaNetLayer, "kda": KDALayer, "mamba": MambaLayer, "mamba2": Mamba2Layer,
           "lightning": LightningLayer, "none": NoMixerLayer}
PLANS = {"gated_deltanet": _gdn_plan, "kda": _kda_plan, "mamba": _mamba_plan, "mamba2": _mamba2_plan,
         "lightning": _lightning_plan, "none": lambda att, layer, layout: StatePlan(0, 0)}


def build_layer(group, rng, dtype, layout: str, block: int, rope: str, workers: int):
    """A constant-state layer of `group` at its real dims (the signature of `kvcalc.backend.attention.LAYERS`)."""
    return CLASSES[group.attention.kind](group.attention, group.layer, rng, dtype)


def plan_layer(att, layer, layout: str) -> StatePlan:
    return PLANS[att.kind](att, layer, layout)


def _silent() -> FlopCounter:
    fc = FlopCounter()
    fc.enabled = False  # checks are not part of the measured run
    return fc


def check_tokens(ctx: int, decode: int) -> int:
    return min(ctx + decode, CHECK_TOKENS)


def recurrent_equals_parallel(layer, x: np.ndarray) -> tuple[float, str]:
    """Prefill all but the last few tokens of x [b, L, m] in the recurrent form and decode those step by step,
    against the parallel form over all L: the max relative error of the outputs and of the final state."""
    from kvcalc.backend.checks import rel_error

    fc = _silent()
    n = x.shape[1]
    last = min(CHECK_DECODED, n - 1)
    y, cache = layer.prefill(fc, x[:, : n - last])
    ys = [y]
    for j in range(n - last, n):
        y, cache = layer.decode(fc, x[:, j : j + 1], cache)
        ys.append(y)
    want, state = layer.parallel(x)
    errors = [rel_error(np.concatenate(ys, axis=1), want)]
    errors += [rel_error(cache.tensors[name], state[name]) for name in state]
    return max(errors), f"prefill {n - last} + {last} decoded tokens vs the parallel form over {n}, and the state"


def state_checks(layers, ids: list[int], by_layer, batch: int, ctx: int, decode: int, seed: int, tol: float) -> list:
    """For each constant-state kind run (its first layer), recurrent = parallel form on a random input of
    min(ctx + decode, CHECK_TOKENS) tokens at the layer's real dims."""
    from kvcalc.backend.checks import Check

    found, seen = [], set()
    for i, layer in zip(ids, layers):
        kind = by_layer[i].attention.kind
        if kind in seen or not hasattr(layer, "parallel"):
            continue
        seen.add(kind)
        rng = np.random.default_rng(seed + i)
        x = rms_norm(rng.standard_normal((batch, check_tokens(ctx, decode), by_layer[i].layer.d_model))).astype(layer.dtype)
        error, detail = recurrent_equals_parallel(layer, x)
        found.append(Check(f"{kind}: recurrent form = parallel form", error, tol, error <= tol, f"layer {i}: {detail}"))
    return found
