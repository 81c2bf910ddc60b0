"""Importer of Qwen3.5 MoE (model_type qwen3_5_moe, and its text model qwen3_5_moe_text): Qwen3-Next's hybrid of Gated
DeltaNet layers and gated full attention, with the text model nested under `text_config`.

Rules, from transformers' models/qwen3_5_moe (modular_qwen3_5_moe.py):
- Qwen3_5MoeConfig (a Qwen3VLConfig): the text model's keys are under `text_config`; tie_word_embeddings is read at
  the top level or in text_config (default False; two that differ are refused, kvcalc.hf.common.text_tie). The vision
  tower (vision_config) is not counted. The MTP layers (mtp_num_hidden_layers; transformers' Qwen3_5MoeForCausalLM
  ignores `^mtp.*`, vLLM's qwen3_5_mtp.py runs them) are mtp_layers, counted only with --mtp, as Qwen3-Next's
  (kvcalc.hf.qwen3_next).
- Qwen3_5MoeTextConfig is Qwen3NextConfig minus intermediate_size, decoder_sparse_step and mlp_only_layers (deleted
  in __init__): Qwen3_5MoeDecoderLayer builds a Qwen3_5MoeSparseMoeBlock in every layer, so an `mlp_only_layers`
  key in the file changes nothing. Defaults differ from Qwen3-Next's: 256 experts, top 8.
- Qwen3_5MoeAttention is Qwen3NextAttention (q_proj emits query and output gate, per-head q/k norms, head_dim 256);
  Qwen3_5MoeGatedDeltaNet splits Qwen3-Next's in_proj_qkvz / in_proj_ba into in_proj_qkv, in_proj_z, in_proj_b,
  in_proj_a of the same total sizes, and keeps the same state (recurrent H_v·d_k·d_v, conv over 2·key_dim +
  value_dim channels). Layer types come from `layer_types` (else every full_attention_interval-th layer).
"""

from __future__ import annotations

from kvcalc.errors import SpecError
from kvcalc.hf.common import fill_defaults, flag, importer, show, text_tie
from kvcalc.hf.qwen3_next import LINEAR_KEYS, qwen3_next_fields

# Qwen3_5MoeTextConfig defaults that differ from Qwen3NextConfig's (the rest are inherited).
QWEN3_5_MOE_DEFAULTS = {"num_experts": 256, "num_experts_per_tok": 8, "num_key_value_heads": 2, "vocab_size": 248320}


@importer("qwen3_5_moe", "qwen3_5_moe_text", keys={k: k for k in LINEAR_KEYS}, text_config=True)
def _qwen3_5_moe(cfg: dict, origin: str, notes: list[str]) -> dict:
    text = cfg.get("text_config", cfg) if cfg.get("model_type") == "qwen3_5_moe" else cfg
    if not isinstance(text, dict):
        raise SpecError(f"{origin}: text_config: must be a mapping of the text model's fields, got {show(text)}")
    text = {k: v for k, v in text.items() if k not in ("mlp_only_layers", "decoder_sparse_step", "intermediate_size")}
    text = {**fill_defaults(text, QWEN3_5_MOE_DEFAULTS, "Qwen3_5MoeTextConfig", notes), "decoder_sparse_step": 1}
    text["tie_word_embeddings"] = flag(text_tie(cfg, text, origin), "tie_word_embeddings", origin, False)
    if "vision_config" in cfg:
        notes.append("vision tower (vision_config) not counted")
    base = qwen3_next_fields(text, origin, notes, "mtp_num_hidden_layers")  # vLLM qwen3_5_mtp.py's count
    base["family"] = "qwen3_5_moe"
    return base
