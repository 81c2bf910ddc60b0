"""Importer of OpenELM (model_type openelm, Apple's remote code): layer-wise scaling, so each layer has its own query
heads, K/V heads and FFN width, and each distinct layer becomes its own layer group.

Rules, from apple/OpenELM-* configuration_openelm.py and modeling_openelm.py:
- OpenELMConfig.__post_init__ recomputes the head counts from qkv_multipliers = [a, b]: m_i = round(linspace(a, b,
  L)[i], 2), query heads = make_divisible(model_dim · m_i, head_dim · num_gqa_groups) / head_dim, K/V heads = query
  heads // num_gqa_groups. The num_query_heads / num_kv_heads lists in the file are overwritten; a file whose lists
  disagree with that rule is refused rather than guessed at.
- OpenELMMultiHeadCausalAttention: fused qkv_proj (no bias) of (q + 2·kv)·head_dim, q_norm and k_norm of head_dim
  when normalize_qk_projections, out_proj without bias. The cache holds kv heads × head_dim for K and for V.
- OpenELMFeedForwardNetwork: intermediate = make_divisible(ffn_multipliers[i] · model_dim, ffn_dim_divisor); with
  ffn_with_glu proj_1 is model_dim × 2·intermediate (gate and up), proj_2 intermediate × model_dim, no biases.
- make_divisible(v, d): max(d, int(v + d/2) // d · d), plus d when that fell below 0.9·v.
- attn_norm and ffn_norm (RMSNorm) per layer, a final norm; share_input_output_layers ties the LM head;
  max_context_length is the trained context (rope_max_length only sizes the rotary table).
"""

from __future__ import annotations

import math

from kvcalc.errors import SpecError
from kvcalc.hf.common import dense_ffn, flag, group_layers, heads_attention, importer, need, show, with_defaults

KEYS = {"d_model": "model_dim", "n_layers": "num_transformer_layers", "n_heads": "qkv_multipliers (per layer)",
        "n_kv_heads": "qkv_multipliers / num_gqa_groups (per layer)", "max_context": "max_context_length"}


def make_divisible(v: float, divisor: int) -> int:
    """OpenELM's make_divisible (min_value = divisor)."""
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


def _linspace(a: float, b: float, n: int) -> list[float]:
    """np.linspace(a, b, n), rounded to 2 places as OpenELMConfig does: round(v, 2) of an np.float64 is NumPy's
    rint(v · 100) / 100 (half to even of the float product), not Python's round of the exact decimal (0.525: 0.52,
    not 0.53)."""
    step = (b - a) / (n - 1) if n > 1 else 0.0
    return [round((b if i == n - 1 and n > 1 else a + i * step) * 100) / 100 for i in range(n)]


def _multiplier(value: object, where: str, origin: str) -> float:
    """One multiplier of qkv_multipliers or ffn_multipliers: a finite positive number (never a boolean), no larger
    than one that keeps the widths it scales below 2^40."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not 0 < value < 2**20:
        raise SpecError(f"{origin}: {where}: must be a positive number below 2^20, got {show(value)}")
    return float(value)


def _per_layer(cfg: dict, key: str, n: int, origin: str) -> list:
    values = cfg.get(key)
    if not isinstance(values, list):
        return [_multiplier(values, key, origin)] * n
    if len(values) == 2 and n != 2 and key != "num_query_heads":
        lo, hi = (_multiplier(v, f"{key}[{i}]", origin) for i, v in enumerate(values))
        return _linspace(lo, hi, n)
    if len(values) != n:
        raise SpecError(f"{origin}: {key}: must be a number, a pair, or one entry per layer ({n})")
    return [_multiplier(v, f"{key}[{i}]", origin) for i, v in enumerate(values)]


@importer("openelm", keys=KEYS)
def _openelm(cfg: dict, origin: str, notes: list[str]) -> dict:
    cfg = with_defaults(cfg, "openelm", notes)
    d, n = need(cfg, "model_dim", origin), need(cfg, "num_transformer_layers", origin)
    head_dim, groups = need(cfg, "head_dim", origin), need(cfg, "num_gqa_groups", origin)
    q_heads = [make_divisible(d * m, head_dim * groups) // head_dim for m in _per_layer(cfg, "qkv_multipliers", n, origin)]
    kv_heads = [q // groups for q in q_heads]
    for key, derived in (("num_query_heads", q_heads), ("num_kv_heads", kv_heads)):
        if cfg.get(key) is not None and list(cfg[key]) != derived:
            raise SpecError(f"{origin}: {key}: {cfg[key]} disagrees with qkv_multipliers and num_gqa_groups, from which "
                            f"OpenELMConfig recomputes {derived}")
    divisor = need(cfg, "ffn_dim_divisor", origin)
    glu = flag(cfg, "ffn_with_glu", origin, True)
    widths = [make_divisible(m * d, divisor) for m in _per_layer(cfg, "ffn_multipliers", n, origin)]
    qk_norm = flag(cfg, "normalize_qk_projections", origin, False)
    layers = [{"attention": heads_attention(q, kv, head_dim, qk_norm=qk_norm), "ffn": dense_ffn(w, gated=glu)}
              for q, kv, w in zip(q_heads, kv_heads, widths)]
    return {
        "family": "openelm",
        "d_model": d,
        "n_layers": n,
        "vocab_size": need(cfg, "vocab_size", origin),
        "tie_embeddings": flag(cfg, "share_input_output_layers", origin, True),
        "max_context": need(cfg, "max_context_length", origin),
        "ffn": dense_ffn(widths[0], gated=glu),
        "layer_groups": group_layers(layers, n),
    }
