"""Importers of Mistral 3 (model_type mistral3: Mistral Small 3.1/3.2, Devstral Small 2, Ministral 3 with vision)
and of its text model Ministral 3 (model_type ministral3): the decoder read with the Mistral rules; the Pixtral
vision tower and the multimodal projector are not counted.

Rules, from transformers' models/mistral3 and models/ministral3 (configuration_*.py, modeling_*.py):
- Mistral3Config nests the decoder in text_config, built with AutoConfig from its model_type: `mistral` (Mistral
  Small 3.1/3.2) or `ministral3` (Ministral 3, Devstral 2). Mistral3Model's language_model is that text model;
  Mistral3ForConditionalGeneration adds lm_head Linear(text hidden_size, vocab_size, bias=False).
- MistralAttention: q/k/v/o without biases, head_dim = config.head_dim or hidden_size // num_attention_heads, every
  layer on the same `sliding_window` (null: full attention). Ministral3Attention is MistralAttention with a query
  temperature (llama_4_scaling_beta) applied before the cache: it changes no size.
- Ministral3Config defaults differ from MistralConfig's: head_dim 128 (used as is when the key is absent, not
  hidden_size // num_attention_heads), vocab 131072, max_position_embeddings 262144, 8 K/V heads; both untie the
  LM head by default (tie_word_embeddings false, at either level: kvcalc.hf.common.text_tie).
"""

from __future__ import annotations

from typing import Any

from kvcalc.errors import SpecError
from kvcalc.hf.common import decoder, importer, show, text_tie, with_defaults

# Ministral3Config field defaults (configuration_ministral3.py): the keys a text config may omit.
MINISTRAL3_DEFAULTS: dict[str, Any] = {
    "vocab_size": 131_072,
    "hidden_size": 4096,
    "intermediate_size": 14_336,
    "num_hidden_layers": 34,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "max_position_embeddings": 262_144,
    "tie_word_embeddings": False,
}
TEXT_MODEL_TYPES = ("mistral", "ministral3")


def _ministral3_text(cfg: dict, notes: list[str]) -> dict:
    filled = [k for k, v in MINISTRAL3_DEFAULTS.items() if cfg.get(k) is None]
    if filled:
        notes.append("Ministral3Config defaults filled in for: " + ", ".join(filled))
    return {**cfg, **{k: MINISTRAL3_DEFAULTS[k] for k in filled}}


@importer("ministral3")
def _ministral3(cfg: dict, origin: str, notes: list[str]) -> dict:
    return decoder(_ministral3_text(cfg, notes), origin, "ministral3", notes, reads=())  # no biases (Ministral3)


@importer("mistral3", text_config=True)
def _mistral3(cfg: dict, origin: str, notes: list[str]) -> dict:
    text = cfg.get("text_config")
    if not isinstance(text, dict):
        raise SpecError(f"{origin}: text_config: required for model_type 'mistral3', got {show(text)}")
    kind = text.get("model_type", "mistral")  # Mistral3Config: text_config without a model_type is a MistralConfig
    if kind not in TEXT_MODEL_TYPES:
        raise SpecError(f"{origin}: text_config.model_type: {show(kind)} is not supported under mistral3 "
                        f"(use {' or '.join(TEXT_MODEL_TYPES)})")
    notes.append("text model read from text_config (Pixtral vision tower and projector not counted)")
    text = text_tie(cfg, text, origin)
    if kind == "ministral3":
        return decoder(_ministral3_text(text, notes), origin, "ministral3", notes, reads=())
    return decoder(with_defaults(text, "mistral", notes), origin, "mistral", notes, reads=())
