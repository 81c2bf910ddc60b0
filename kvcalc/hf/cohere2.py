"""Importer of Cohere 2 (model_type cohere2: Command R7B, Command A): three sliding-window RoPE layers, then one global
layer without positions, each layer's attention and FFN run in parallel on one LayerNorm.

Rules, from transformers' models/cohere2 (modular_cohere2.py):
- Cohere2Config.__post_init__ sets head_dim = hidden_size // num_attention_heads, but a head_dim in the file is set
  after it and wins (configuration_utils sets the file's other keys last; vLLM's commandr.py reads config.head_dim);
  without `layer_types`, layer i slides when (i + 1) % sliding_window_pattern != 0 (default pattern 4), else it is
  a full-attention layer. Cohere2Attention applies RoPE on sliding layers only: the global layers are NoPE, but
  they still cache K and V of every token.
- A sliding layer's mask (create_sliding_window_causal_mask) keeps keys with kv_idx > q_idx − sliding_window: a
  query sees sliding_window keys, itself included, so W = sliding_window.
- Cohere2DecoderLayer: one input_layernorm, then residual + self_attn(x) + mlp(x): one norm per layer.
  Cohere2LayerNorm (CohereLayerNorm) has a weight and no bias: d per norm, as kvcalc counts an RMSNorm.
- q/k/v/o with bias=attention_bias; CohereMLP gate/up/down without bias; tie_word_embeddings defaults to True.
"""

from __future__ import annotations

from kvcalc.hf.common import decoder, get, importer, need, with_defaults


@importer("cohere2", keys={"head_dim": "head_dim, else hidden_size / num_attention_heads",
                           "sliding_window": "sliding_window (layer_types, or sliding_window_pattern)"})
def _cohere2(cfg: dict, origin: str, notes: list[str]) -> dict:
    cfg = with_defaults(cfg, "cohere2", notes)
    heads = need(cfg, "num_attention_heads", origin)
    given = get(cfg, "head_dim", origin)
    head_dim = given if given is not None else need(cfg, "hidden_size", origin) // heads
    pattern = get(cfg, "sliding_window_pattern", origin) or 4
    notes.append("global layers are NoPE (no rotary) but cache K/V of every token; CohereLayerNorm has no bias")
    return decoder({**cfg, "head_dim": head_dim}, origin, "cohere2", notes, tie_default=True, norms_per_layer=1,
                   sliding=lambda i: bool((i + 1) % pattern))
