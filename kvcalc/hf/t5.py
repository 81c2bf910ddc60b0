"""Importer of T5 (model_type t5: T5 1.0, T5 v1.1, Flan-T5): an encoder over the input and a decoder whose layers
cache their own growing self-attention K/V and the cross-attention K/V of the encoder output, once per input.

Rules, from transformers' models/t5 (configuration_t5.py, modeling_t5.py):
- T5Attention: q, k, v, o without biases; heads of d_kv (`head_dim`), so inner_dim = num_heads · d_kv need not be
  d_model (T5 v1.1 small: 6 × 64 = 384 against 512).
- Relative position bias: the first block of the encoder and the first block of the decoder each hold
  relative_attention_bias, an Embedding(relative_attention_num_buckets, num_heads); the other blocks and the
  cross-attention reuse or have none. Both tables are counted in the encoder's extra_params (the decoder's too,
  since a decoder layer group has no field for it); the note says so.
- T5LayerFF: DenseGatedActDense (wi_0, wi_1, wo; no bias) when feed_forward_proj is "gated-*", else DenseReluDense
  (wi, wo). T5LayerNorm is an RMSNorm (weight only): 2 per encoder block, 3 per decoder block, and one
  final_layer_norm per stack (the encoder's counted in extra_params, the decoder's as the model's final norm).
- One shared embedding (vocab × d) for encoder and decoder; lm_head tied per tie_word_embeddings (default true;
  T5 v1.1 and Flan-T5 untie it), or per scale_decoder_outputs in a file transformers 5.x re-saved (it keeps the
  original switch there and writes tie_word_embeddings true). num_decoder_layers defaults to num_layers.
- No position table and no fixed source length: relative positions work at any length. --enc-ctx defaults to 512,
  the length T5 was pre-trained at (n_positions 512 in the original configs); the decoder's context likewise.
"""

from __future__ import annotations

from typing import Any

from kvcalc.errors import SpecError
from kvcalc.hf.common import aliased, dense_ffn, flag, get, importer, need, show

# T5's pre-training input length (the original configs' n_positions): the default --enc-ctx and decoder context.
T5_DEFAULT_LENGTH = 512
KEYS = {"d_model": "d_model", "n_layers": "num_decoder_layers (default num_layers)", "n_heads": "num_heads",
        "head_dim": "d_kv", "max_context": f"n_positions (default {T5_DEFAULT_LENGTH})"}


def _ffn(cfg: dict, origin: str) -> dict:
    proj = cfg.get("feed_forward_proj", "relu")
    parts = proj.split("-") if isinstance(proj, str) else []
    if not parts or len(parts) > 2 or (len(parts) == 2 and parts[0] != "gated"):
        raise SpecError(f"{origin}: feed_forward_proj: {show(proj)} is not `ACT` or `gated-ACT` (T5Config)")
    return dense_ffn(need(cfg, "d_ff", origin), gated=parts[0] == "gated")


# T5Config.attribute_map: the standard names of this config's own fields
T5_ALIASES = {"d_model": "hidden_size", "num_heads": "num_attention_heads",
              "num_layers": "num_hidden_layers", "d_kv": "head_dim"}


def _tie(cfg: dict, origin: str, notes: list[str]) -> bool:
    """Whether lm_head is the shared embedding: tie_word_embeddings (default true; T5 v1.1 and Flan-T5: false). A file
    re-saved by transformers 5.x carries the original switch as scale_decoder_outputs (T5Config.__post_init__: the
    file's tie_word_embeddings is not false) and writes tie_word_embeddings true whatever it was: that one is read."""
    tie = flag(cfg, "tie_word_embeddings", origin, True)
    if cfg.get("scale_decoder_outputs") is None:
        return tie
    scaled = flag(cfg, "scale_decoder_outputs", origin)
    if scaled != tie:
        notes.append(f"scale_decoder_outputs {str(scaled).lower()} (a transformers 5 re-save of tie_word_embeddings "
                     f"{str(scaled).lower()}): lm_head {'tied to' if scaled else 'apart from'} the shared embedding")
    return scaled


@importer("t5", keys=KEYS)
def _t5(cfg: dict, origin: str, notes: list[str]) -> dict:
    cfg = aliased(cfg, origin, T5_ALIASES)
    d, heads, d_kv = need(cfg, "d_model", origin), need(cfg, "num_heads", origin), need(cfg, "d_kv", origin)
    enc_layers = need(cfg, "num_layers", origin)
    dec_layers = get(cfg, "num_decoder_layers", origin) or enc_layers
    length = get(cfg, "n_positions", origin) or T5_DEFAULT_LENGTH
    att = {"kind": "mha", "n_heads": heads, "head_dim": d_kv}
    bias_table = need(cfg, "relative_attention_num_buckets", origin) * heads
    ffn = _ffn(cfg, origin)
    encoder: dict[str, Any] = {
        "n_layers": enc_layers,
        "source_len": length,
        "attention": att,
        "ffn": ffn,
        # both relative_attention_bias tables (encoder block 0, decoder block 0) and the encoder's final_layer_norm
        "extra_params": 2 * bias_table + d,
    }
    notes.append(f"no fixed source length: --enc-ctx defaults to {length} (T5's pre-training length); "
                 f"the decoder's relative_attention_bias ({bias_table} weights) is counted with the encoder's")
    return {
        "family": "t5",
        "d_model": d,
        "n_layers": dec_layers,
        "vocab_size": need(cfg, "vocab_size", origin),
        "tie_embeddings": _tie(cfg, origin, notes),
        "max_context": length,
        "norms_per_layer": 3,
        "ffn": ffn,
        "layer_groups": [{"layers": "all", "attention": att, "cross_attention": att}],
        "encoder": encoder,
    }
