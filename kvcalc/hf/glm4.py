"""Importers of the dense GLM-4 models (model_types glm and glm4: GLM-4-9B-chat-hf, GLM-4-0414): Llama-style
decoders whose o_proj has no bias, GLM-4-0414 with four norms a layer.

Rules, from transformers' models/glm and models/glm4 (configuration_glm.py, modeling_glm.py, modeling_glm4.py, 5.25)
and vLLM 0.34.0's glm4.py:
- GlmAttention / Glm4Attention: q/k/v projections with bias=attention_bias, o_proj bias=False (a Llama-style import
  put a bias on o_proj too). partial_rotary_factor (0.5) changes no size.
- GlmMLP: gate_up_proj (d × 2·intermediate_size) and down_proj, no bias: a gated FFN of intermediate_size.
- GlmDecoderLayer: input_layernorm and post_attention_layernorm; Glm4DecoderLayer adds post_self_attn_layernorm and
  post_mlp_layernorm (vLLM's Glm4DecoderLayer likewise): four RMSNorms a layer. A final norm; lm_head untied.
- GlmConfig and Glm4Config defaults differ from Llama's: num_key_value_heads 2, head_dim 128, attention_bias true,
  tie_word_embeddings false (filled in, with a note, for the keys a config leaves out).
"""

from __future__ import annotations

from kvcalc.hf.common import decoder, importer, with_defaults


@importer("glm")
def _glm(cfg: dict, origin: str, notes: list[str]) -> dict:
    return decoder(with_defaults(cfg, "glm", notes), origin, "glm", notes, attention={"o_bias": False})


@importer("glm4")
def _glm4(cfg: dict, origin: str, notes: list[str]) -> dict:
    return decoder(with_defaults(cfg, "glm4", notes), origin, "glm4", notes, norms_per_layer=4,
                   attention={"o_bias": False})
