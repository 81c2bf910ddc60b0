"""Importer of GLM-4.5 / 4.6 / 4.7 (model_type glm4_moe): GQA with q/k/v biases but none on o_proj, per-head q/k
RMSNorm when use_qk_norm, and a DeepSeek-V3 MoE (sigmoid router with e_score_correction_bias, one shared expert)
after first_k_dense_replace dense layers.

Rules, from transformers' models/glm4_moe (modular_glm4_moe.py: Glm4MoeConfig, Glm4MoeAttention, Glm4MoeTopkRouter;
the layers are DeepseekV3DecoderLayer):
- Glm4MoeAttention: q_proj, k_proj, v_proj with bias=attention_bias, o_proj with bias=False (unlike Llama's
  attention_bias, which also puts one on o_proj); head_dim from the config; q_norm and k_norm are
  Glm4MoeRMSNorm(head_dim) when use_qk_norm. Partial RoPE (partial_rotary_factor 0.5) rotates half of each head:
  it changes no size, and the cache holds the whole key, 2·n_kv·head_dim per token. No sliding window.
- DeepseekV3DecoderLayer: a dense Glm4MoeMLP of intermediate_size for layer_idx < first_k_dense_replace (default 1),
  else the MoE: n_routed_experts experts of moe_intermediate_size, top num_experts_per_tok, a shared MLP of
  moe_intermediate_size·n_shared_experts, and the router weight (n_routed_experts × d) with its
  e_score_correction_bias (n_routed_experts, a buffer stored in the checkpoint).
- num_nextn_predict_layers: the MTP layers (model.layers.92 in GLM-4.6; Glm4MoeModel does not build them,
  _keys_to_ignore_on_load_unexpected), a decoder layer with DeepSeek-V3's eh_proj, enorm, hnorm and shared head norm
  (vLLM glm4_moe_mtp.py, SGLang glm4_moe_nextn.py): mtp_layers, counted only with --mtp as DeepSeek-V3's.
"""

from __future__ import annotations

from kvcalc.hf.common import aliased, decoder, fill_defaults, flag, get, importer, need

# Glm4MoeConfig.__init__ defaults of the keys read here when a config leaves them out.
GLM4_MOE_DEFAULTS = {"first_k_dense_replace": 1, "n_shared_experts": 1, "num_key_value_heads": 8}


@importer("glm4_moe")
def _glm4_moe(cfg: dict, origin: str, notes: list[str]) -> dict:
    # Glm4MoeConfig.attribute_map: num_local_experts, num_mtp_layers
    cfg = fill_defaults(aliased(cfg, origin, {"n_routed_experts": "num_local_experts",
                                              "num_nextn_predict_layers": "num_mtp_layers"}),
                        GLM4_MOE_DEFAULTS, "Glm4MoeConfig", notes)
    first_k = get(cfg, "first_k_dense_replace", origin, minimum=0) or 0
    moe = {
        "kind": "moe",
        "n_routed_experts": need(cfg, "n_routed_experts", origin),
        "n_experts_per_tok": need(cfg, "num_experts_per_tok", origin),
        "moe_d_ff": need(cfg, "moe_intermediate_size", origin),
        "n_shared_experts": get(cfg, "n_shared_experts", origin, minimum=0) or 0,
        "router_bias": True,  # Glm4MoeTopkRouter.e_score_correction_bias
        "first_k_dense": first_k,
    }
    if first_k:
        moe["dense_d_ff"] = need(cfg, "intermediate_size", origin)
    mtp = get(cfg, "num_nextn_predict_layers", origin, minimum=0)
    if mtp:  # as DeepSeek-V3's (kvcalc.hf.deepseek): served by speculative decoding, not by plain decoding
        notes.append(f"{mtp} multi-token-prediction layer(s): counted only with --mtp (plain decoding does not run them)")
    # o_bias False overrides decoder()'s Llama rule (attention_bias on q, k, v and o): Glm4MoeAttention.o_proj has none.
    base = decoder(cfg, origin, "glm4_moe", notes, qk_norm=flag(cfg, "use_qk_norm", origin, False), ffn=moe,
                   sliding=lambda i: False, attention={"o_bias": False})
    return {**base, "mtp_layers": mtp} if mtp else base
