"""Importers of Qwen3-VL (model_types qwen3_vl, qwen3_vl_moe): the text model under text_config, read with the Qwen3
/ Qwen3-MoE rules; the vision tower is not counted.

Rules, from transformers' models/qwen3_vl and models/qwen3_vl_moe (configuration_*.py, modeling_*.py):
- Qwen3VLConfig nests the decoder in text_config (model_type qwen3_vl_text / qwen3_vl_moe_text); the language
  model is Qwen3VLTextModel, whose layers are Qwen3's: q/k/v/o with bias only when attention_bias, q_norm and k_norm
  RMSNorms of head_dim per head, head_dim from the config, every layer full attention (no sliding window keys).
- Qwen3VLMoeTextSparseMoeBlock: num_experts experts of moe_intermediate_size, top num_experts_per_tok, a bias-free
  router; layers in mlp_only_layers or off the decoder_sparse_step grid are dense of intermediate_size (Qwen3-MoE).
- tie_word_embeddings lives at the top level (Qwen3VLConfig; the 8B file: false, none inside text_config); one in
  text_config is read too (transformers 4.x's place), and two that differ are refused (kvcalc.hf.common.text_tie);
  neither: untied.
- DeepStack feeds visual features into the first layers' hidden states and M-RoPE splits the rotary dims: neither
  changes a size.
"""

from __future__ import annotations

from kvcalc.errors import SpecError
from kvcalc.hf.common import flag, get, importer, show, text_tie, with_defaults
from kvcalc.hf.dense import _qwen3, _qwen3_moe


def _text(cfg: dict, origin: str, notes: list[str]) -> dict:
    """The text config with its class's defaults (Qwen3VLTextConfig, Qwen3VLMoeTextConfig) and no window: neither
    class has one (Qwen3VLMoeTextConfig sets sliding_window None), whatever use_sliding_window says."""
    text = cfg.get("text_config")
    if not isinstance(text, dict):
        raise SpecError(f"{origin}: text_config: required for model_type {show(cfg.get('model_type'))}, got {show(text)}")
    notes.append("text model read from text_config (vision tower not counted)")
    text = text_tie(cfg, text, origin)
    tie = flag(text, "tie_word_embeddings", origin, False)
    if flag(text, "use_sliding_window", origin):
        window = get(text, "sliding_window", origin, minimum=0)  # read (its bounds checked), then left out
        notes.append("use_sliding_window ignored: Qwen3-VL's text model applies no window"
                     + (f" (sliding_window {window} does not apply)" if window else ""))
        text = {**text, "sliding_window": None}
    text = with_defaults(text, cfg["model_type"], notes)
    return {**text, "tie_word_embeddings": tie, "use_sliding_window": False}


@importer("qwen3_vl", text_config=True)
def _qwen3_vl(cfg: dict, origin: str, notes: list[str]) -> dict:
    return {**_qwen3(_text(cfg, origin, notes), origin, notes), "family": "qwen3_vl"}


@importer("qwen3_vl_moe", text_config=True)
def _qwen3_vl_moe(cfg: dict, origin: str, notes: list[str]) -> dict:
    # family qwen3_vl: the engines' Qwen3-VL files place the LM head by rules of their own (kvcalc.costs.engine_files)
    return {**_qwen3_moe(_text(cfg, origin, notes), origin, notes), "family": "qwen3_vl"}
