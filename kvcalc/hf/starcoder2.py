"""Importer of StarCoder2 (model_type starcoder2): GQA with biases everywhere, a sliding window on every layer, a
plain (ungated) GELU MLP and LayerNorms.

Rules, from transformers' models/starcoder2 (configuration_starcoder2.py, modeling_starcoder2.py):
- Starcoder2Attention: q/k/v/o projections with bias=use_bias (Starcoder2Config default True); head_dim from the
  config when given, else hidden_size / num_attention_heads; num_key_value_heads K/V heads, and a config without
  that key gets Starcoder2Config's default 2, not num_attention_heads.
- Every layer passes config.sliding_window to the attention (no layer_types): masking_utils' sliding window keeps
  kv_idx > q_idx - sliding_window, so a query sees `sliding_window` keys, itself included, which is kvcalc's W.
- Starcoder2MLP: c_fc (d × intermediate_size) and c_proj back, both with bias=use_bias, one activation between them
  (gelu_pytorch_tanh): not gated.
- Starcoder2DecoderLayer: two nn.LayerNorm (weight and bias), input_layernorm and post_attention_layernorm; a final
  LayerNorm; tie_word_embeddings defaults to True (Starcoder2Config).
"""

from __future__ import annotations

from kvcalc.hf.common import decoder, dense_ffn, fill_defaults, flag, importer, need

STARCODER2_DEFAULTS = {"num_key_value_heads": 2, "use_bias": True, "tie_word_embeddings": True}  # Starcoder2Config


@importer("starcoder2")
def _starcoder2(cfg: dict, origin: str, notes: list[str]) -> dict:
    cfg = fill_defaults({k: v for k, v in cfg.items() if v is not None}, STARCODER2_DEFAULTS, "Starcoder2Config", notes)
    bias = flag(cfg, "use_bias", origin)
    cfg["attention_bias"] = bias  # use_bias puts a bias on q, k, v and o (Starcoder2Attention)
    ffn = dense_ffn(need(cfg, "intermediate_size", origin), gated=False, bias=bias)
    base = decoder(cfg, origin, "starcoder2", notes, tie_default=True, ffn=ffn)
    base["norm"] = "layernorm"
    return base
