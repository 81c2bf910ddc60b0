"""Importer of Whisper (model_type whisper): an encoder over audio frames and a decoder whose layers each cache
their own growing self-attention K/V and the K/V of the encoder output (cross-attention), once per input.

Rules, from transformers' models/whisper (configuration_whisper.py, modeling_whisper.py):
- WhisperAttention: q_proj, v_proj and out_proj have a bias, k_proj has none; heads of d_model / attention_heads.
- WhisperDecoderLayer: self_attn, encoder_attn (the cross-attention), fc1/fc2 with biases (GELU, not gated), and
  three LayerNorms (self_attn_layer_norm, encoder_attn_layer_norm, final_layer_norm); a final layer_norm.
- WhisperDecoder: embed_tokens (vocab × d) and learned embed_positions (max_target_positions × d); proj_out is tied
  to embed_tokens. The decoder's context is max_target_positions (448).
- WhisperEncoder: conv1 (num_mel_bins → d, kernel 3, bias) and conv2 (d → d, kernel 3, stride 2, bias) turn
  3000 mel frames into max_source_positions (1500) positions, with an embed_positions table of 1500 × d; layers of
  self_attn and fc1/fc2 with two LayerNorms; a final layer_norm. Each decoder layer's cross-attention caches K and V
  of those 1500 positions: the default --enc-ctx.
"""

from __future__ import annotations

from typing import Any

from kvcalc.hf.common import aliased, dense_ffn, flag, importer, need

KEYS = {"d_model": "d_model", "n_layers": "decoder_layers", "n_heads": "decoder_attention_heads",
        "max_context": "max_target_positions"}


def _attention(n_heads: int) -> dict:
    return {"kind": "mha", "n_heads": n_heads, "qkv_bias": True, "o_bias": True, "k_bias": False}


# WhisperConfig.attribute_map: the standard names of this config's own fields
WHISPER_ALIASES = {"d_model": "hidden_size", "encoder_attention_heads": "num_attention_heads",
                   "encoder_layers": "num_hidden_layers"}


@importer("whisper", keys=KEYS)
def _whisper(cfg: dict, origin: str, notes: list[str]) -> dict:
    cfg = aliased(cfg, origin, WHISPER_ALIASES)
    d = need(cfg, "d_model", origin)
    source = need(cfg, "max_source_positions", origin)
    mels = need(cfg, "num_mel_bins", origin)
    # conv1 and conv2 (weights and biases), the encoder's position table and its final LayerNorm (weight and bias)
    front = (mels * d * 3 + d) + (d * d * 3 + d) + source * d + 2 * d
    encoder: dict[str, Any] = {
        "n_layers": need(cfg, "encoder_layers", origin),
        "source_len": source,
        "attention": _attention(need(cfg, "encoder_attention_heads", origin)),
        "ffn": dense_ffn(need(cfg, "encoder_ffn_dim", origin), gated=False, bias=True),
        "extra_params": front,
    }
    heads = need(cfg, "decoder_attention_heads", origin)
    notes.append(f"decoder layers cache cross-attention K/V of {source} encoder positions (--enc-ctx)")
    return {
        "family": "whisper",
        "d_model": d,
        "n_layers": need(cfg, "decoder_layers", origin),
        "vocab_size": need(cfg, "vocab_size", origin),
        "tie_embeddings": flag(cfg, "tie_word_embeddings", origin, True),  # WhisperConfig default: proj_out tied
        "max_context": need(cfg, "max_target_positions", origin),
        "norm": "layernorm",
        "norms_per_layer": 3,
        "learned_positions": True,
        "ffn": dense_ffn(need(cfg, "decoder_ffn_dim", origin), gated=False, bias=True),
        "layer_groups": [{"layers": "all", "attention": _attention(heads), "cross_attention": _attention(heads)}],
        "encoder": encoder,
    }
