"""Importer of MiniMax-M1 (model_type minimax_m1): lightning (linear) attention in most layers, softmax GQA in the
rest, a Mixtral-style MoE FFN in every layer.

Rules from the vendor's remote code, MiniMax-AI/MiniMax-M1 `modeling_minimax_m1.py` (commit 2abb4f4):
- `MiniMaxM1Model.__init__`: layer i is lightning attention when attn_type_list[i] == 0, softmax attention
  (MiniMaxM1Attention / FlashAttention2) when it is 1;
- softmax layers: q/k/v/o without bias, num_key_value_heads K/V heads of head_dim (config head_dim, else
  hidden_size / num_attention_heads); RoPE over the first rotary_dim dims only, which changes no size;
- lightning layers: MiniMaxM1LightningAttention over num_attention_heads heads of the same head_dim;
- FFN: MiniMaxM1SparseMoeBlock, num_local_experts gated experts of intermediate_size (w1, w2, w3), top
  num_experts_per_tok, a bias-free router; when shared_intermediate_size > 0 a shared MiniMaxM1MLP of
  intermediate_size (not shared_intermediate_size) joins through a sigmoid coefficient Linear(hidden, 1);
- two RMSNorms per layer (input_layernorm, post_attention_layernorm); the alpha/beta residual scales are constants.
"""

from __future__ import annotations

from typing import Any

from kvcalc.errors import SpecError
from kvcalc.hf.common import aliased, base_fields, get, group_layers, heads_attention, importer, need, show, with_defaults

ATTN_TYPES = {0: "lightning", 1: "softmax"}  # MiniMaxM1Model.__init__: attn_type_list[i] == 0 -> lightning


def _attn_types(cfg: dict, origin: str, n_layers: int) -> list[int]:
    types = cfg.get("attn_type_list")
    if not isinstance(types, list) or len(types) != n_layers:
        got = f"{len(types)} entries" if isinstance(types, list) else show(types)
        raise SpecError(f"{origin}: attn_type_list: must have one entry per layer (num_hidden_layers {n_layers}), got {got}")
    for i, t in enumerate(types):
        if isinstance(t, bool) or not isinstance(t, int) or t not in ATTN_TYPES:  # [] or {} are not hashable either
            raise SpecError(f"{origin}: attn_type_list[{i}]: must be 0 (lightning) or 1 (softmax), got {show(t)}")
    return types


@importer("minimax_m1")
def _minimax_m1(cfg, origin, notes):
    cfg = with_defaults(aliased(cfg, origin, {"num_local_experts": "num_experts"}), "minimax_m1", notes)  # MiniMaxConfig
    base = base_fields(cfg, origin, "minimax", False)
    n = base["n_layers"]
    n_heads = need(cfg, "num_attention_heads", origin)
    n_kv = get(cfg, "num_key_value_heads", origin) or n_heads
    head_dim = get(cfg, "head_dim", origin)
    softmax = heads_attention(n_heads, n_kv, head_dim)
    lightning: dict[str, Any] = {"kind": "lightning", "n_heads": n_heads}
    if head_dim is not None:
        lightning["head_dim"] = head_dim
    if cfg.get("rotary_dim") is not None:
        notes.append(f"rotary_dim {show(cfg['rotary_dim'])}: partial RoPE on softmax layers, no effect on sizes")
    if cfg.get("sliding_window"):
        notes.append(f"sliding_window {show(cfg['sliding_window'])} ignored: MiniMax-M1's attention takes no window")
    d_ff = need(cfg, "intermediate_size", origin)
    moe: dict[str, Any] = {
        "kind": "moe",
        "n_routed_experts": need(cfg, "num_local_experts", origin),
        "n_experts_per_tok": need(cfg, "num_experts_per_tok", origin),
        "moe_d_ff": d_ff,  # MiniMaxM1BlockSparseTop2MLP: ffn_dim = intermediate_size, per expert
    }
    if get(cfg, "shared_intermediate_size", origin, minimum=0):
        # MiniMaxM1DecoderLayer: shared_mlp = MiniMaxM1MLP(config), of intermediate_size, mixed in by
        # sigmoid(coefficient(x)), coefficient = Linear(hidden, 1, bias=False)
        moe.update(n_shared_experts=1, shared_d_ff=d_ff, shared_gate=True)
        notes.append("shared_intermediate_size > 0: one shared MLP of intermediate_size (as MiniMaxM1MLP builds it)")
    types = _attn_types(cfg, origin, n)
    layers = [{"attention": lightning if t == 0 else softmax} for t in types]
    base["ffn"] = moe
    groups = group_layers(layers, n)
    base["layer_groups"] = [{"name": "lightning" if g["attention"]["kind"] == "lightning" else "softmax", **g}
                            for g in groups] if len(groups) > 1 else groups
    return base
