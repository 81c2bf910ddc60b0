"""Importer of Llama 4 (model_type llama4, its text model under text_config, or llama4_text): chunked local
attention on the RoPE layers, full attention on the NoPE layers, and interleaved MoE layers with a shared expert.

Rules, from transformers' models/llama4 (configuration_llama4.py, modeling_llama4.py):
- `no_rope_layers[i]` is 1 where layer i uses RoPE; absent, Llama4TextConfig sets it to
  int((i + 1) % no_rope_layer_interval != 0), no_rope_layer_interval 4: every fourth layer is NoPE.
- RoPE layers attend within chunks of `attention_chunk_size` (Llama4TextModel's chunked causal mask: a query sees
  the keys of its own aligned chunk up to itself); NoPE layers attend the whole context. A chunked layer's cache must
  hold min(ctx, C) tokens (vLLM's chunked local attention reserves a chunk per sequence).
- `moe_layers` absent: every interleave_moe_layer_step-th layer, starting at step − 1, is MoE (Llama4TextConfig).
  Llama4TextMoe: experts of intermediate_size (gate_up_proj and down_proj), a d × E router without bias, and one
  shared expert (Llama4TextMLP of intermediate_size); other layers are a dense Llama4TextMLP of intermediate_size_mlp.
- Llama4TextL2Norm on queries and keys has no weights; two RMSNorms per layer; untied embeddings by default.
"""

from __future__ import annotations

from typing import Any

from kvcalc.errors import SpecError
from kvcalc.hf.common import (
    base_fields,
    dense_ffn,
    flag,
    get,
    group_layers,
    heads_attention,
    importer,
    need,
    show,
    text_part,
    whole,
    with_defaults,
)


def _flags(cfg: dict, key: str, origin: str, n_layers: int, default: list[int]) -> list[int]:
    """A per-layer 0/1 list from the config, or the default (also for an empty list: Llama4TextConfig reads
    `no_rope_layers if no_rope_layers else default`, and published text_configs carry [])."""
    values = cfg.get(key)
    if values is None or values == []:
        return default
    if not isinstance(values, list) or len(values) != n_layers:
        raise SpecError(f"{origin}: {key}: must have one entry per layer (num_hidden_layers {n_layers}), got {show(values)}")
    return [whole(v, f"{key}[{i}]", origin, minimum=0) for i, v in enumerate(values)]


@importer("llama4", "llama4_text", text_config=True)
def _llama4(cfg: dict, origin: str, notes: list[str]) -> dict:
    if (text := text_part(cfg, origin)) is not None:
        cfg = dict(text)
        notes.append("text model read from text_config (vision tower not counted)")
    cfg = with_defaults(cfg, "llama4_text", notes)
    base = base_fields(cfg, origin, "llama4", False)
    n = base["n_layers"]
    interval = get(cfg, "no_rope_layer_interval", origin) or 4
    rope = _flags(cfg, "no_rope_layers", origin, n, [int((i + 1) % interval != 0) for i in range(n)])
    types = cfg.get("layer_types")
    if types is not None:  # newer Llama4TextConfig: derived from no_rope_layers, and what the attention mask reads
        # chunked where RoPE, unless attention_chunk_size is null (Llama4TextConfig.__post_init__: then full everywhere)
        chunked = cfg.get("attention_chunk_size") is not None
        derived = ["chunked_attention" if r and chunked else "full_attention" for r in rope]
        if not isinstance(types, list) or len(types) != n:
            raise SpecError(f"{origin}: layer_types: must have one entry per layer (num_hidden_layers {n}), got {show(types)}")
        for i, (given, want) in enumerate(zip(types, derived)):
            if given != want:
                raise SpecError(f"{origin}: layer_types[{i}]: {show(given)}, but no_rope_layers[{i}] = {rope[i]} makes "
                                f"layer {i} {want!r} with attention_chunk_size {show(cfg.get('attention_chunk_size'))} (Llama4TextConfig "
                                "derives one from the others): give them alike")
    chunk = get(cfg, "attention_chunk_size", origin)
    if chunk and chunk >= base["max_context"]:
        notes.append(f"attention_chunk_size {chunk} >= max_position_embeddings: it never applies, left out")
        chunk = None
    step = get(cfg, "interleave_moe_layer_step", origin) or 1
    moe_layers = cfg.get("moe_layers")
    moe_set = set(range(step - 1, n, step)) if moe_layers is None else {
        whole(v, f"moe_layers[{j}]", origin, minimum=0) for j, v in enumerate(moe_layers)}
    n_heads = need(cfg, "num_attention_heads", origin)
    att = heads_attention(n_heads, get(cfg, "num_key_value_heads", origin) or n_heads, get(cfg, "head_dim", origin),
                          qkv_bias=flag(cfg, "attention_bias", origin), o_bias=flag(cfg, "attention_bias", origin))
    moe: dict[str, Any] = {
        "kind": "moe",
        "n_routed_experts": need(cfg, "num_local_experts", origin),
        "n_experts_per_tok": need(cfg, "num_experts_per_tok", origin),
        "moe_d_ff": need(cfg, "intermediate_size", origin),
        "n_shared_experts": 1,  # Llama4TextMoe.shared_expert
    }
    layers = []
    for i in range(n):
        layer: dict = {"attention": att}
        if chunk and rope[i]:
            layer["attention_chunk_size"] = chunk
        if i not in moe_set:
            layer["ffn"] = dense_ffn(need(cfg, "intermediate_size_mlp", origin))
        layers.append(layer)
    base["ffn"] = moe
    base["layer_groups"] = group_layers(layers, n)
    for g in base["layer_groups"]:  # name groups by their attention, as windows name them elsewhere
        if "name" not in g and len(base["layer_groups"]) > 1:
            g["name"] = ("chunked" if g.get("attention_chunk_size") else "global") + ("" if "ffn" not in g else "-dense")
    return base
