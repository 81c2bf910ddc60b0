"""Importer of MiniMax-M2 and M2.5 (model_type minimax_m2): full GQA attention on every layer with a query/key
RMSNorm over the whole projection, and a sigmoid-routed MoE in every layer.

Rules, from transformers' models/minimax_m2 (modular_minimax_m2.py: MiniMaxM2Config, MiniMaxM2Attention,
MiniMaxM2SparseMoeBlock, MiniMaxM2Model):
- MiniMaxM2Attention (FlexOlmoAttention): q/k/v/o without bias, num_key_value_heads K/V heads of head_dim (config);
  q_norm and k_norm are RMSNorms of n_h·d_h and n_kv·d_h over the whole projection (use_qk_norm, qk_norm_type
  per_layer): qk_norm with qk_norm_width "projection", (n_h + n_kv)·d_h weights a layer.
  RoPE over rotary_dim dims only, which changes no size.
- MiniMaxM2Model: "No sliding window opposed to mixtral": every layer attends the whole context.
- MiniMaxM2SparseMoeBlock: num_local_experts Mixtral experts of intermediate_size (per expert, gated), top
  num_experts_per_tok, a bias-free d × E router plus e_score_correction_bias (E values, loaded from the checkpoint:
  counted as kvcalc's router_bias); shared_intermediate_size 0: no shared expert.
- Two RMSNorms per layer and a final one; untied embeddings by default. The MTP modules (use_mtp, num_mtp_modules)
  are not counted.
"""

from __future__ import annotations

from typing import Any

from kvcalc.errors import SpecError
from kvcalc.hf.common import aliased, decoder, flag, get, importer, need, show, with_defaults


@importer("minimax_m2", keys={"n_routed_experts": "num_local_experts", "moe_d_ff": "intermediate_size"})
def _minimax_m2(cfg: dict, origin: str, notes: list[str]) -> dict:
    # MiniMaxM2Config.attribute_map: num_experts is num_local_experts
    cfg = with_defaults(aliased(cfg, origin, {"num_local_experts": "num_experts"}), "minimax_m2", notes)
    if get(cfg, "shared_intermediate_size", origin, minimum=0):
        raise SpecError(f"{origin}: shared_intermediate_size: MiniMaxM2SparseMoeBlock has no shared expert, got "
                        f"{show(cfg['shared_intermediate_size'])}")
    if cfg.get("sliding_window"):
        notes.append(f"sliding_window {show(cfg['sliding_window'])} ignored: MiniMaxM2Model applies no window (vLLM "
                     "would slide every layer by it as a model-wide window, CacheConfig.sliding_window: not counted)")
        cfg["sliding_window"] = None
    # MiniMaxM2Config: use_qk_norm defaults to true
    qk = {"qk_norm": True, "qk_norm_width": "projection"} if flag(cfg, "use_qk_norm", origin, True) else {}
    if flag(cfg, "use_mtp", origin):
        notes.append("multi-token-prediction modules not counted (not used in plain decoding)")
    moe: dict[str, Any] = {
        "kind": "moe",
        "n_routed_experts": need(cfg, "num_local_experts", origin),
        "n_experts_per_tok": need(cfg, "num_experts_per_tok", origin),
        "moe_d_ff": need(cfg, "intermediate_size", origin),  # per expert (MixtralExperts)
        "router_bias": True,  # MiniMaxM2SparseMoeBlock.e_score_correction_bias
    }
    # MiniMaxM2Attention: q/k/v/o bias=False
    return decoder(cfg, origin, "minimax-m2", notes, reads=(), ffn=moe, attention=qk)
