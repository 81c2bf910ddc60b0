"""Importer of GLM-5 (model_type glm_moe_dsa): DeepSeek-V3.2's multi-head latent attention with the DSA lightning
indexer, and a DeepSeek-V3 MoE with a shared expert after leading dense layers.

Rules, from transformers' models/glm_moe_dsa (modular_glm_moe_dsa.py: GlmMoeDsaConfig, GlmMoeDsaAttention,
GlmMoeDsaIndexer), which builds on models/deepseek_v3 and models/deepseek_v32:
- GlmMoeDsaAttention is DeepseekV3Attention: q_a_proj (d × q_lora_rank), q_b_proj, kv_a_proj_with_mqa
  (d × (kv_lora_rank + qk_rope_head_dim)), kv_b_proj, o_proj of n_h·v_head_dim. The config's head_dim (64),
  qk_head_dim and num_key_value_heads (64) are decoys for MLA: the sizes come from kv_lora_rank, qk_nope_head_dim,
  qk_rope_head_dim and v_head_dim. kvcalc's default layout caches the latent and the RoPE key (DeepSeek-V2 §2.1.3,
  what vLLM and SGLang hold); transformers' own eager cache holds the expanded K/V (its comment: "Sparse-attention
  models cache the expanded K/V ... TODO"), which is `--layout expanded`.
- GlmMoeDsaIndexer (DeepseekV32Indexer with interleaved RoPE): wq_b, wk (d × index_head_dim), k_norm and
  weights_proj over index_n_heads heads; its key of index_head_dim is cached per token (update_indexer); each query
  attends index_topk keys.
- indexer_types[i] is "full" (the layer runs its own indexer) or "shared" (no indexer: it reuses the previous full
  layer's top-k). Absent, GlmMoeDsaConfig derives it: "full" where max(i - index_skip_topk_offset + 1, 0) %
  index_topk_freq == 0 (freq default 1: every layer full, GLM-5). Shared layers need a field kvcalc lacks (sparse
  attention without an indexer of their own): such configs are refused, naming it.
- MoE as DeepseekV3MoE: first_k_dense_replace leading dense layers of intermediate_size (mlp_layer_types, when
  given, must agree), then n_routed_experts experts of moe_intermediate_size, top num_experts_per_tok, and
  n_shared_experts shared experts of moe_intermediate_size; the router carries e_score_correction_bias
  (topk_method noaux_tc). num_nextn_predict_layers: mtp_layers, counted only with --mtp (kvcalc.hf.deepseek).
"""

from __future__ import annotations

from kvcalc.hf.common import importer
from kvcalc.hf.deepseek import _deepseek


@importer("glm_moe_dsa")
def _glm_moe_dsa(cfg: dict, origin: str, notes: list[str]) -> dict:
    cfg = dict(cfg)  # GlmMoeDsaConfig's defaults (3 dense layers first, ...): CONFIG_DEFAULTS, filled in by _deepseek
    base = _deepseek(cfg, origin, notes)  # refuses layers that share another's indexer (check_indexer_types)
    base["family"] = "glm"
    return base
