"""Importer of Gemma 4 text models (model_type gemma4 with a text_config, or gemma4_text).

Rules from transformers' `models/gemma4/modeling_gemma4.py` and `configuration_gemma4.py`:
- `layer_types` says which layers slide; without it Gemma4TextConfig builds 5 sliding : 1 full (layer i full when
  (i + 1) % 6 == 0), and it forces the last layer to full_attention;
- a sliding layer sees W = sliding_window keys, itself included (masking_utils.sliding_window_overlay:
  kv_idx > q_idx - W), kvcalc's window convention as is;
- Gemma4TextAttention: sliding layers have num_key_value_heads K/V heads of head_dim; full layers have head_dim
  global_head_dim, and num_global_key_value_heads K/V heads when attention_k_eq_v is set (else num_key_value_heads);
  q_norm and k_norm (with scale) over the head dim, v_norm without scale (no parameters);
- attention_k_eq_v (full layers only): no v_proj, V = v_norm(k_proj(x)) while K = RoPE(k_norm(k_proj(x))): two
  different tensors, and `past_key_values.update(key_states, value_states)` caches both, 2·n_kv·d_h per token;
- Gemma4TextDecoderLayer: the four Gemma 3 norms; with enable_moe_block, the dense MLP (intermediate_size) runs
  beside a routed MoE (num_experts experts of moe_intermediate_size, top top_k_experts) and adds three norms
  (post_feedforward_layernorm_1/_2, pre_feedforward_layernorm_2); Gemma4TextRouter = a scale-less RMSNorm times a
  learned `scale` of hidden_size (one norm's weight), proj Linear(hidden, num_experts) and per_expert_scale
  (num_experts); `layer_scalar` is a buffer, not a parameter.
"""

from __future__ import annotations

from typing import Any

from kvcalc.errors import SpecError
from kvcalc.hf.common import (
    LAYER_TYPES,
    base_fields,
    dense_ffn,
    fill_defaults,
    flag,
    get,
    group_layers,
    heads_attention,
    importer,
    layer_types,
    need,
    show,
    text_part,
    whole,
)

# Gemma4TextConfig defaults (transformers configuration_gemma4.py): the keys a text_config may omit.
GEMMA4_TEXT_DEFAULTS: dict[str, Any] = {
    "vocab_size": 262_144,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "global_head_dim": 512,  # popped from kwargs with default 512 in Gemma4TextConfig.__post_init__
    "max_position_embeddings": 131_072,
    "sliding_window": 512,
    "tie_word_embeddings": True,
    "attention_k_eq_v": False,
    "num_kv_shared_layers": 0,
    "enable_moe_block": False,
    "hidden_size_per_layer_input": 256,
}
GEMMA4_FULL_EVERY = 6  # Gemma4TextConfig: sliding_window_pattern 6 when layer_types is absent (5:1)


def _layer_types(cfg: dict, origin: str, n: int, notes: list[str]) -> list[str]:
    types = layer_types(cfg, origin, n, LAYER_TYPES)
    if types is None:
        types = ["full_attention" if (i + 1) % GEMMA4_FULL_EVERY == 0 else "sliding_attention" for i in range(n)]
    if types[-1] != "full_attention":  # Gemma4TextConfig.__post_init__ forces it, with a warning
        notes.append("the last layer made full_attention, as Gemma4TextConfig forces it")
        types = [*types[:-1], "full_attention"]
    return types


def _refuse_unmodelled(cfg: dict, origin: str) -> None:
    """Per-layer embeddings and KV-shared layers change sizes in ways no kvcalc field expresses yet; transformers
    5.25's per_layer_config form is read by `_per_layer_config` first."""
    if get(cfg, "hidden_size_per_layer_input", origin, minimum=0):
        raise SpecError(f"{origin}: hidden_size_per_layer_input: {show(cfg['hidden_size_per_layer_input'])}: per-layer "
                        "embeddings (Gemma 4 E2B/E4B) are not modelled; kvcalc imports Gemma 4 configs with 0")
    if get(cfg, "num_kv_shared_layers", origin, minimum=0):
        raise SpecError(f"{origin}: num_kv_shared_layers: {show(cfg['num_kv_shared_layers'])}: layers that reuse another "
                        "layer's K/V cache are not modelled; kvcalc imports Gemma 4 configs with 0")
    if cfg.get("use_bidirectional_attention") == "all":
        raise SpecError(f"{origin}: use_bidirectional_attention: 'all' makes a bidirectional encoder, not a causal "
                        "decoder with a KV cache")


def _per_layer_config(cfg: dict, origin: str, notes: list[str]) -> dict:
    """`cfg` in the published form: transformers 5.25's Gemma4TextConfig saves per_layer_config, {layer index: its
    head_dim and num_key_value_heads}, for the full layers, in place of global_head_dim and
    num_global_key_value_heads (popped in __post_init__; vLLM 0.34.0's gemma4.py reads per_layer_config). Read back
    when it names exactly the full layers, all alike; any other per-layer shape is refused, not guessed."""
    if "per_layer_config" not in cfg:
        return cfg
    per = cfg["per_layer_config"]
    cfg = {k: v for k, v in cfg.items() if k != "per_layer_config"}
    n = need(cfg, "num_hidden_layers", origin)
    full = [i for i, t in enumerate(_layer_types(cfg, origin, n, [])) if t == "full_attention"]
    if not isinstance(per, dict) or not all(isinstance(v, dict) for v in per.values()):
        raise SpecError(f"{origin}: per_layer_config: must map layer indices to their head_dim and num_key_value_heads, "
                        f"got {show(per)}")
    try:
        listed = sorted(int(k) for k in per)
    except ValueError:
        raise SpecError(f"{origin}: per_layer_config: keys must be layer indices, got {show(sorted(per))}") from None
    shapes = {tuple(sorted(v.items())) for v in per.values()}
    keys = {k for v in per.values() for k in v}
    if listed != full or len(shapes) != 1 or not keys <= {"head_dim", "num_key_value_heads"}:
        raise SpecError(f"{origin}: per_layer_config: only one head_dim and num_key_value_heads for exactly the "
                        f"full_attention layers {full} is read, got {show(per)}")
    shape = {k: whole(v, f"per_layer_config's {k}", origin) for k, v in dict(shapes.pop()).items()}
    read = {"global_head_dim": shape.get("head_dim", cfg.get("head_dim", GEMMA4_TEXT_DEFAULTS["head_dim"]))}
    if "num_key_value_heads" in shape:
        if not flag(cfg, "attention_k_eq_v", origin):  # kvcalc's full layers take num_key_value_heads then
            raise SpecError(f"{origin}: per_layer_config: full layers of their own num_key_value_heads without "
                            "attention_k_eq_v are not supported")
        read["num_global_key_value_heads"] = shape["num_key_value_heads"]
    for key, value in read.items():
        if cfg.get(key) is not None and cfg[key] != value:
            raise SpecError(f"{origin}: {key}: {show(cfg[key])}, but per_layer_config gives the full layers {show(value)}: "
                            "give them alike")
        cfg[key] = value
    notes.append("per_layer_config (transformers 5.25's form) read: the full layers' " +
                 ", ".join(f"{k} {v}" for k, v in read.items()))
    return cfg


@importer("gemma4", "gemma4_text", text_config=True,
          keys={"n_kv_heads": "num_key_value_heads (full-attention layers under attention_k_eq_v: num_global_key_value_heads)",
                "head_dim": "head_dim (full-attention layers: global_head_dim)"})
def _gemma4(cfg, origin, notes):
    if (text := text_part(cfg, origin)) is not None:
        cfg = {**text}
        notes.append("text model read from text_config (vision and audio towers not counted)")
    cfg = _per_layer_config(cfg, origin, notes)
    cfg = fill_defaults(cfg, GEMMA4_TEXT_DEFAULTS, "Gemma4TextConfig", notes)
    _refuse_unmodelled(cfg, origin)
    base = base_fields(cfg, origin, "gemma4", True)
    n = base["n_layers"]
    n_heads = need(cfg, "num_attention_heads", origin)
    n_kv = need(cfg, "num_key_value_heads", origin)
    head_dim = need(cfg, "head_dim", origin)
    k_eq_v = flag(cfg, "attention_k_eq_v", origin)
    # Gemma4TextAttention: full layers take num_global_key_value_heads only when attention_k_eq_v is set.
    n_kv_full = (get(cfg, "num_global_key_value_heads", origin) or n_kv) if k_eq_v else n_kv
    bias = flag(cfg, "attention_bias", origin, False)
    sliding = heads_attention(n_heads, n_kv, head_dim, qkv_bias=bias, o_bias=bias, qk_norm=True)
    full = heads_attention(n_heads, n_kv_full, get(cfg, "global_head_dim", origin) or head_dim, qkv_bias=bias,
                           o_bias=bias, qk_norm=True, k_eq_v=k_eq_v)  # no v_proj on full layers, so no W_V counted
    if k_eq_v:
        notes.append("attention_k_eq_v: full layers have no v_proj (V = v_norm(k_proj(x))), so no W_V, but cache K "
                     "and V apart (k_eq_v)")
    window = get(cfg, "sliding_window", origin, minimum=0)
    if window and window >= base["max_context"]:
        notes.append(f"sliding_window {window} >= max_position_embeddings {base['max_context']}: it never applies, left out")
        window = None
    layers: list[dict] = []
    for t in _layer_types(cfg, origin, n, notes):
        layers.append({"attention": sliding, "sliding_window": window} if t == "sliding_attention" and window
                      else {"attention": full if t == "full_attention" else sliding})
    d_ff = need(cfg, "intermediate_size", origin)
    if flag(cfg, "enable_moe_block", origin):
        # The dense MLP always runs beside the routed experts: kvcalc's one shared expert of d_ff.
        base["ffn"] = {
            "kind": "moe",
            "n_routed_experts": need(cfg, "num_experts", origin),
            "n_experts_per_tok": need(cfg, "top_k_experts", origin),
            "moe_d_ff": need(cfg, "moe_intermediate_size", origin),
            "n_shared_experts": 1,
            "shared_d_ff": d_ff,
            "router_bias": True,  # per_expert_scale: num_experts router parameters
        }
        # 4 Gemma 3 norms + post_feedforward_layernorm_1/_2 + pre_feedforward_layernorm_2 + the router's scale
        base["norms_per_layer"] = 8
    else:
        base["ffn"] = dense_ffn(d_ff)
        base["norms_per_layer"] = 4  # input, post-attention, pre- and post-feedforward (Gemma3DecoderLayer)
    base["layer_groups"] = group_layers(layers, n)
    return base
