"""Importer of BART (model_type bart: facebook/bart-*, KoBART, distilbart): an encoder over the input and a decoder whose
layers cache their own growing self-attention K/V and the cross-attention K/V of the encoder output, once per input.

Rules, from transformers' models/bart (configuration_bart.py, modeling_bart.py):
- BartAttention: q_proj, k_proj, v_proj and out_proj Linear(d, d, bias=True); heads of d_model / num_heads.
- BartLearnedPositionalEmbedding: Embedding(max_position_embeddings + 2, d) in the encoder and in the decoder ("Bart
  is set up so that if padding_idx is specified then offset the embedding ids by 2"): positions are looked up at
  index position + 2, so each table holds two rows more than the positions it serves.
- BartEncoderLayer: self_attn, fc1/fc2 with biases (GELU, not gated), self_attn_layer_norm and final_layer_norm;
  BartDecoderLayer: self_attn, encoder_attn (cross-attention), fc1/fc2, and three LayerNorms. Each stack has a
  layernorm_embedding (after adding the positions) and no final LayerNorm (`add_final_layer_norm` is not read).
- BartModel.shared: one embedding (vocab × d) for both stacks; lm_head Linear(d, vocab, bias=False) tied to it
  (tie_word_embeddings, default true); final_logits_bias is a registered buffer, not a parameter.
- The encoder's source length: max_position_embeddings, the most positions its table serves (the default
  --enc-ctx); the decoder's context likewise.
"""

from __future__ import annotations

from typing import Any

from kvcalc.hf.common import aliased, dense_ffn, flag, importer, need

KEYS = {"d_model": "d_model", "n_layers": "decoder_layers", "n_heads": "decoder_attention_heads",
        "max_context": "max_position_embeddings"}
# BartLearnedPositionalEmbedding.offset: two rows beyond max_position_embeddings in each position table
POSITION_OFFSET = 2


def _attention(n_heads: int) -> dict:
    return {"kind": "mha", "n_heads": n_heads, "qkv_bias": True, "o_bias": True}


# BartConfig.attribute_map: the standard names of this config's own fields
BART_ALIASES = {"d_model": "hidden_size", "encoder_attention_heads": "num_attention_heads",
                "encoder_layers": "num_hidden_layers"}


@importer("bart", keys=KEYS)
def _bart(cfg: dict, origin: str, notes: list[str]) -> dict:
    cfg = aliased(cfg, origin, BART_ALIASES)
    d = need(cfg, "d_model", origin)
    positions = need(cfg, "max_position_embeddings", origin)
    # the encoder's position table ((positions + 2) × d) and its layernorm_embedding (weight and bias); the decoder's
    # two offset rows too, since kvcalc's decoder table is max_context × d
    extra = (positions + POSITION_OFFSET) * d + 2 * d + POSITION_OFFSET * d
    encoder: dict[str, Any] = {
        "n_layers": need(cfg, "encoder_layers", origin),
        "source_len": positions,
        "attention": _attention(need(cfg, "encoder_attention_heads", origin)),
        "ffn": dense_ffn(need(cfg, "encoder_ffn_dim", origin), gated=False, bias=True),
        "extra_params": extra,
    }
    heads = need(cfg, "decoder_attention_heads", origin)
    notes.append(f"decoder layers cache cross-attention K/V of {positions} encoder positions (--enc-ctx); position "
                 f"tables hold max_position_embeddings + {POSITION_OFFSET} rows (the decoder's 2 extra rows counted "
                 "with the encoder's); the decoder's layernorm_embedding stands as the final norm")
    return {
        "family": "bart",
        "d_model": d,
        "n_layers": need(cfg, "decoder_layers", origin),
        "vocab_size": need(cfg, "vocab_size", origin),
        "tie_embeddings": flag(cfg, "tie_word_embeddings", origin, True),  # PretrainedConfig default: lm_head tied
        "max_context": positions,
        "norm": "layernorm",
        "norms_per_layer": 3,
        "learned_positions": True,
        "ffn": dense_ffn(need(cfg, "decoder_ffn_dim", origin), gated=False, bias=True),
        "layer_groups": [{"layers": "all", "attention": _attention(heads), "cross_attention": _attention(heads)}],
        "encoder": encoder,
    }
