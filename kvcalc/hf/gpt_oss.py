"""Importer of OpenAI's gpt-oss (model_type gpt_oss): alternating sliding-window and full attention with learned
attention sinks, and a mixture of experts whose projections and router have biases.

Rules, from transformers' models/gpt_oss (configuration_gpt_oss.py, modeling_gpt_oss.py):
- `layer_types` names each layer sliding_attention or full_attention (GptOssConfig defaults to alternating, sliding
  first); sliding layers see the last `sliding_window` keys, the query included (masking_utils' sliding window:
  kv_idx > q_idx - sliding_window), which is kvcalc's W.
- GptOssAttention: q/k/v/o projections with bias (attention_bias), head_dim from the config, and `sinks`, one learned
  logit per head (parameters, not cached tokens).
- GptOssMLP: GptOssTopKRouter (a d × E linear with bias), GptOssExperts with gate_up_proj (d × 2·d_ff, bias 2·d_ff)
  and down_proj (d_ff × d, bias d) per expert; num_local_experts experts, experts_per_token of them per token.
- Two RMSNorms per layer (input, post-attention) and a final norm; untied embeddings.
"""

from __future__ import annotations

from typing import Any

from kvcalc.hf.common import aliased, decoder, importer, need, with_defaults


@importer("gpt_oss", keys={"n_routed_experts": "num_local_experts"})
def _gpt_oss(cfg: dict, origin: str, notes: list[str]) -> dict:
    cfg = with_defaults(aliased(cfg, origin, {"num_local_experts": "num_experts"}), "gpt_oss", notes)  # attribute_map
    moe: dict[str, Any] = {
        "kind": "moe",
        "n_routed_experts": need(cfg, "num_local_experts", origin),
        "n_experts_per_tok": need(cfg, "num_experts_per_tok", origin, "experts_per_token"),
        "moe_d_ff": need(cfg, "intermediate_size", origin),  # per expert
        "router_bias": True,  # GptOssTopKRouter.bias
        "expert_bias": True,  # GptOssExperts.gate_up_proj_bias, down_proj_bias
    }
    return decoder(cfg, origin, "gpt-oss", notes, sliding=lambda i: i % 2 == 0, ffn=moe, attention={"sinks": True})
