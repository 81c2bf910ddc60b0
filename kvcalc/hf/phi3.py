"""Importer of Phi-3 and Phi-3.5 text models (model_type phi3): a fused qkv projection sized by num_key_value_heads,
a fused gate/up projection, and a sliding window on every layer when the config gives one.

Rules, from transformers' models/phi3 (configuration_phi3.py, modeling_phi3.py):
- Phi3Attention: qkv_proj is d × (n_h·d_h + 2·n_kv·d_h) without bias (whatever attention_bias says), split into
  n_h query heads and num_key_value_heads K and V heads (Phi3Config: absent -> num_attention_heads); head_dim from
  the config, else hidden_size / num_attention_heads; o_proj without bias. The fusion changes no count.
- The window: Phi3Attention passes config.sliding_window to the attention on every layer; masking_utils' sliding
  window keeps kv_idx > q_idx - sliding_window, so a query sees `sliding_window` keys, itself included. That is
  kvcalc's W as given: Phi-3-mini-4k's 2047 is 2047 keys (not 2048) on a 4096-token model. Phi-3-mini-128k and
  Phi-3.5-mini give 262144, beyond max_position_embeddings 131072: it never applies and is left out (noted).
- Phi3MLP: gate_up_proj (d × 2·intermediate_size) and down_proj, no bias: a gated FFN of intermediate_size.
- Phi3DecoderLayer: two RMSNorms (input, post-attention); untied embeddings by default (Phi3Config).
"""

from __future__ import annotations

from kvcalc.hf.common import decoder, importer


@importer("phi3")
def _phi3(cfg: dict, origin: str, notes: list[str]) -> dict:
    # Phi3Attention's qkv_proj and o_proj and Phi3MLP's gate_up_proj and down_proj: bias=False
    return decoder(cfg, origin, "phi3", notes, reads=())
