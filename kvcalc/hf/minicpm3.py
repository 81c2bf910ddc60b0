"""Importer of MiniCPM3 (model_type minicpm3): DeepSeek-V2's multi-head latent attention in every layer, a dense gated
FFN, and muP-style multipliers (scale_emb, scale_depth, dim_model_base) that scale activations, not weights.

Sources: the model's own remote code, openbmb/MiniCPM3-4B configuration_minicpm.py (MiniCPM3Config) and
modeling_minicpm.py (MiniCPMAttention with q_a/q_b, kv_a_proj_with_mqa/kv_b, MiniCPMMLP, MiniCPMDecoderLayer), as
transformers' models/minicpm3 (MiniCPM3Attention, MiniCPM3MLP) and vLLM's minicpm3.py (MiniCPM3Attention) also build it.
"""

from __future__ import annotations

from kvcalc.errors import SpecError
from kvcalc.hf.common import base_fields, dense_ffn, flag, get, importer, need, with_defaults


@importer("minicpm3")
def _minicpm3(cfg, origin, notes):
    cfg = with_defaults(cfg, "minicpm3", notes)
    # MiniCPM3Config: tie_word_embeddings defaults to true (remote code and transformers alike)
    base = base_fields(cfg, origin, "minicpm3", True)
    n_heads = need(cfg, "num_attention_heads", origin)
    nope = need(cfg, "qk_nope_head_dim", origin)
    v_head = get(cfg, "v_head_dim", origin)
    if v_head is None:
        # MiniCPM3Config (remote code): v_head_dim = qk_nope_head_dim when absent; transformers' MiniCPM3Config takes
        # hidden_size // num_attention_heads instead. Where the two differ the value is ambiguous: refused.
        other = base["d_model"] // n_heads
        if other != nope:
            raise SpecError(f"{origin}: v_head_dim: absent, and the model's definitions disagree (qk_nope_head_dim "
                            f"{nope} in openbmb's MiniCPM3Config, hidden_size // num_attention_heads {other} in "
                            "transformers'): give v_head_dim")
        v_head = nope
    if flag(cfg, "attention_bias", origin):
        raise SpecError(f"{origin}: attention_bias: biases on q_a_proj, kv_a_proj_with_mqa and o_proj are not supported")
    att: dict = {
        "kind": "mla",
        "n_heads": n_heads,
        "kv_lora_rank": need(cfg, "kv_lora_rank", origin),
        "qk_nope_head_dim": nope,
        "qk_rope_head_dim": need(cfg, "qk_rope_head_dim", origin),
        "v_head_dim": v_head,
    }
    q_rank = get(cfg, "q_lora_rank", origin, minimum=0)
    if q_rank:  # MiniCPMAttention: q_a_proj, q_a_layernorm, q_b_proj; null: one q_proj
        att["q_lora_rank"] = q_rank
    # num_key_value_heads (40 = num_attention_heads in MiniCPM3-4B) and head_dim (qk_nope + qk_rope, set by the config
    # class) size nothing in MLA: the cache is the latent and the RoPE key. scale_emb, scale_depth and dim_model_base
    # multiply activations (embeddings, residual branches, logits).
    # MiniCPMDecoderLayer: input_layernorm, attention, post_attention_layernorm, MiniCPMMLP (gate, up, down of
    # intermediate_size, no bias); MiniCPMModel: norm; lm_head as tie_word_embeddings says.
    base["ffn"] = dense_ffn(need(cfg, "intermediate_size", origin), bias=flag(cfg, "mlp_bias", origin))
    base["layer_groups"] = [{"layers": "all", "attention": att}]
    return base
