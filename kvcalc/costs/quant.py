"""Quantised KV caches with their real overheads: the scales (and zero points) a scheme stores beside the payload.

Schemes (`--kv-quant`), applied to the cache tensors a kind names in its formula's components:
- `none`: the payload only, at --kv-dtype (fp8 with one scale per tensor: that scale is negligible and not counted).
- `per-token`: one fp32 scale per token for each cached tensor (K, V; MLA's latent, RoPE key, indexer key).
- `per-head`: one fp32 scale per token and head for K and V (one per token for MLA's single-vector entries).
- `g<G>` (e.g. `g64`): KIVI-style group quantisation (Liu et al., 2024) with an fp16 scale and an fp16 zero point per
  group of G: keys per channel, grouped along G tokens (ceil(tokens / G) groups a channel), every other tensor per
  token, grouped along G channels (ceil(channels / G) groups a token).
- `fp8-ds-mla`: vLLM's fp8_ds_mla entry for DeepSeek's MLA (FlashMLA's FP8 KV cache; vLLM 0.34.0
  v1/attention/backend.py MLAAttentionImpl.get_fp8_ds_mla_row_bytes, 656, which MLAAttention.get_kv_cache_spec
  sizes a row by; earlier releases' flashmla_sparse.py: "custom storage format is 656 bytes"): the latent
  as fp8 with one fp32 scale per 128 values, the RoPE key left in bf16 (512 + 4·4 + 64·2 = 656 bytes for
  DeepSeek-V3.2), and the indexer key as fp8 with one fp32 scale per 128 values (vLLM's FP8 indexer cache: 128 + 4).
"""

from __future__ import annotations

import re

from kvcalc.attention import Formula
from kvcalc.dtypes import dtype_bits
from kvcalc.errors import KvcalcError

SCHEMES = ("none", "per-token", "per-head", "g<G>", "fp8-ds-mla")
SCALE = 4  # bytes: an fp32 scale, or an fp16 scale with an fp16 zero point
_GROUP = re.compile(r"\Ag([1-9][0-9]*)\Z")
MAX_GROUP = 2**40  # a group of G tokens or channels, as large as a context


def check_scheme(scheme: str) -> str:
    """The scheme's name, or a KvcalcError listing the schemes."""
    if scheme in SCHEMES and scheme != "g<G>":
        return scheme
    if _GROUP.match(scheme):
        if len(scheme) > 16 or int(scheme[1:]) > MAX_GROUP:
            raise KvcalcError(f"--kv-quant {scheme[:40]}: a group of at most 2^40 (keys group along tokens, values "
                              "along channels)")
        return scheme
    if re.fullmatch(r"g[0-9]+", scheme):  # g0, g064: a group's size is wrong, not the scheme
        raise KvcalcError(f"--kv-quant {scheme[:40]}: a group of G values is written g<G> with G a whole number from 1, "
                          "without leading zeros (g64)")
    raise KvcalcError(f"unknown --kv-quant {scheme!r}: choose one of {', '.join(SCHEMES)} (e.g. g64)")


def group_size(scheme: str) -> int | None:
    """G of a group scheme g<G>; None for the others."""
    match = _GROUP.match(scheme)
    return int(match[1]) if match else None


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def component_bytes(name: str, channels: int, heads: int, tokens: int, kv_dtype: str, scheme: str) -> int:
    """Bytes of one cached tensor (`channels` values a token, `heads` heads) for `tokens` tokens of one sequence."""
    payload = _ceil(tokens * channels * dtype_bits(kv_dtype), 8)
    if scheme == "none":
        return payload
    if scheme == "per-token":
        return payload + tokens * SCALE
    if scheme == "per-head":
        return payload + tokens * (heads if name in ("k", "v") else 1) * SCALE
    if scheme == "fp8-ds-mla":
        if name == "k_rope":
            return tokens * channels * 2  # the RoPE key stays bf16
        if name in ("c_kv", "index_k"):
            return tokens * (channels + _ceil(channels, 128) * SCALE)  # fp8 values, an fp32 scale per 128
        raise KvcalcError(f"--kv-quant fp8-ds-mla is the layout of an MLA latent cache (vLLM's fp8_ds_mla), not of this "
                          f"model's '{name}' tensors: give it for a model whose attention layers are all MLA")
    match = _GROUP.match(scheme)
    if match is None:
        raise KvcalcError(f"unknown --kv-quant {scheme!r}")
    group = int(match[1])
    if name == "k":  # keys per channel: groups along G tokens
        return payload + channels * _ceil(tokens, group) * SCALE
    return payload + tokens * _ceil(channels, group) * SCALE  # per token: groups along G channels


def entry_bytes(formula: Formula, heads: int, tokens: int, kv_dtype: str, scheme: str) -> int:
    """Bytes of one layer's cache entry for `tokens` tokens of one sequence, every tensor of the formula."""
    return sum(component_bytes(name, channels, heads, tokens, kv_dtype, scheme)
               for name, channels in formula.components.items())
