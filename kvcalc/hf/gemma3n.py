"""Importer of Gemma 3n text models (model_type gemma3n with a text_config, or gemma3n_text).

Rules from transformers' `models/gemma3n/modeling_gemma3n.py` and `configuration_gemma3n.py` (v4.53.1, the version
the published configs were saved with; main agrees except where noted):
- `layer_types` says which layers slide; without it Gemma3nTextConfig builds 4 sliding : 1 full, layer i full when
  (i + 1) % 5 == 0 (main; v4.53.1 used i % 5 == 0, but every published config lists `layer_types`);
- a sliding layer sees W = sliding_window keys, itself included (masking_utils.sliding_window_overlay:
  kv_idx > q_idx - W), kvcalc's window convention as is;
- KV sharing: the last num_kv_shared_layers layers (index >= num_hidden_layers - num_kv_shared_layers > 0) read the
  cache of the last earlier layer of their own type (Gemma3nTextAttention.kv_shared_layer_index; main's
  `kv_sharing_roles`): they cache nothing and, with a cache, project no K/V, but their k_proj and v_proj exist in the
  module and the checkpoint, so kvcalc counts them (`kv_shared` groups);
- Gemma3nTextAttention: num_key_value_heads heads of head_dim, q_norm and k_norm over head_dim, v_norm without a
  scale (no parameters); attention_bias on q/k/v/o;
- Gemma3nTextMLP: gated (gate, up, down) of intermediate_size, an int or one per layer; activation sparsity (a
  Gaussian top-k on the gate) changes no size and no matrix product;
- per layer, eight d-sized vectors, counted as norms: the four Gemma 3 norms, AltUp's router_norm and
  correct_output_scale, LAuReL's post_laurel_norm, post_per_layer_input_norm;
- the LM head is tied to embed_tokens (tie_word_embeddings, default true).

Blocks the schema has no type for, counted as the spec's `extra_weights` (in parameters, traffic and per-GPU
weights, and their products in the FLOPs: unmodelled_flops), derived from the config as below:
- per-layer embeddings: embed_tokens_per_layer, vocab_size_per_layer_input × num_hidden_layers ·
  hidden_size_per_layer_input (a lookup table: a token reads one row of L·p); per_layer_model_projection, d × L·p; per_layer_projection_norm, p; in each layer
  per_layer_input_gate and per_layer_projection, d × p each;
- AltUp: altup_projections and altup_unembed_projections, (altup_num_inputs − 1) d × d each; in each layer
  correction_coefs A × A, prediction_coefs A × A², modality_router d × A;
- LAuReL: in each layer linear_left d × laurel_rank and linear_right laurel_rank × d.
The vision and audio towers and their embedders are not counted either.
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
    not_null,
    text_part,
    whole,
)

# Gemma3nTextConfig defaults (transformers configuration_gemma3n.py): the keys a text_config may omit.
GEMMA3N_TEXT_DEFAULTS: dict[str, Any] = {
    "vocab_size": 262_400,
    "vocab_size_per_layer_input": 262_144,
    "hidden_size": 2048,
    "hidden_size_per_layer_input": 256,
    "intermediate_size": 16_384,
    "num_hidden_layers": 35,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "max_position_embeddings": 32_768,
    "sliding_window": 512,
    "altup_num_inputs": 4,
    "num_kv_shared_layers": 15,
    "laurel_rank": 64,
}
GEMMA3N_FULL_EVERY = 5  # Gemma3nTextConfig without layer_types: layer i full when (i + 1) % 5 == 0
GEMMA3N_NORMS = 8  # d-sized vectors per layer: 4 Gemma 3 norms, router_norm, correct_output_scale, post_laurel_norm,
# post_per_layer_input_norm


def _types(cfg: dict, origin: str, n: int) -> list[str]:
    types = layer_types(cfg, origin, n, LAYER_TYPES)
    if types is None:
        types = ["full_attention" if (i + 1) % GEMMA3N_FULL_EVERY == 0 else "sliding_attention" for i in range(n)]
    return types


def _shared(cfg: dict, origin: str, types: list[str]) -> list[bool]:
    """Which layers read an earlier layer's cache: index >= n - num_kv_shared_layers, each with an earlier unshared
    layer of its own type to read (Gemma3nTextAttention.kv_shared_layer_index)."""
    n, k = len(types), not_null(cfg, "num_kv_shared_layers", origin)
    first = n - k
    if k and first <= 0:
        raise SpecError(f"{origin}: num_kv_shared_layers: {k} leaves no layer of the {n} (num_hidden_layers) to hold "
                        "the cache the others would share")
    shared = [k > 0 and i >= first for i in range(n)]
    for i in range(first, n if k else 0):
        if types[i] not in types[:first]:
            raise SpecError(f"{origin}: layer_types[{i}]: {types[i]} layer {i} is KV-shared (num_kv_shared_layers "
                            f"{k}) but no layer before {first} has that type to share its cache")
    return shared


def _d_ff(cfg: dict, origin: str, n: int) -> list[int]:
    sizes = cfg["intermediate_size"]
    if not isinstance(sizes, list):
        return [whole(sizes, "intermediate_size", origin)] * n
    if len(sizes) != n:
        raise SpecError(f"{origin}: intermediate_size: must be one number or one per layer (num_hidden_layers {n}), "
                        f"got {len(sizes)} entries")
    return [whole(s, f"intermediate_size[{i}]", origin) for i, s in enumerate(sizes)]


def unmodelled_flops(cfg: dict, origin: str) -> dict[str, int]:
    """FLOPs of one token through those blocks, by block (Gemma3nTextModel.forward, Gemma3nTextAltUp,
    Gemma3nTextLaurelBlock): 2 a multiply-add. The per-layer inputs: per_layer_model_projection (d → n·p) once, each
    layer's gate (d → p) and projection (p → d); AltUp: altup_projections and altup_unembed_projections ((A − 1) of
    d × d each) once, and in each layer the modality router (d → A) in predict and in correct, the predictions
    (d × A times A × A), prediction_coefs (A → A²) and correction_coefs (A → A); LAuReL: linear_left and linear_right."""
    d, n = need(cfg, "hidden_size", origin), need(cfg, "num_hidden_layers", origin)
    p = not_null(cfg, "hidden_size_per_layer_input", origin)
    a = need(cfg, "altup_num_inputs", origin)
    r = not_null(cfg, "laurel_rank", origin)
    return {
        "per_layer_embeddings": 2 * d * n * p + n * 2 * 2 * d * p,
        "altup": 2 * 2 * (a - 1) * d * d + n * (2 * 2 * d * a + 2 * d * a * a + 2 * a * a * a + 2 * a * a),
        "laurel": n * 2 * 2 * d * r,
    }


def unmodelled_params(cfg: dict, origin: str) -> dict[str, int]:
    """Parameters of Gemma 3n's blocks that no kvcalc spec field expresses, by block (see the module docstring)."""
    d, n = need(cfg, "hidden_size", origin), need(cfg, "num_hidden_layers", origin)
    p = not_null(cfg, "hidden_size_per_layer_input", origin)
    v_p = not_null(cfg, "vocab_size_per_layer_input", origin)
    a = need(cfg, "altup_num_inputs", origin)
    r = not_null(cfg, "laurel_rank", origin)
    return {
        # embed_tokens_per_layer, per_layer_model_projection, per_layer_projection_norm; per layer gate and projection
        "per_layer_embeddings": v_p * n * p + d * n * p + p + n * 2 * d * p,
        # altup_projections and altup_unembed_projections; per layer correction, prediction and router weights
        "altup": 2 * (a - 1) * d * d + n * (a * a + a**3 + d * a),
        "laurel": n * 2 * d * r,  # linear_left and linear_right
    }


@importer("gemma3n", "gemma3n_text", text_config=True)
def _gemma3n(cfg, origin, notes):
    if (text := text_part(cfg, origin)) is not None:  # tie_word_embeddings default true, at either level
        cfg = text
        notes.append("text model read from text_config (vision and audio towers and their embedders not counted)")
    cfg = fill_defaults(cfg, GEMMA3N_TEXT_DEFAULTS, "Gemma3nTextConfig", notes)
    base = base_fields(cfg, origin, "gemma3n", True)
    n = base["n_layers"]
    bias = flag(cfg, "attention_bias", origin, False)
    att = heads_attention(need(cfg, "num_attention_heads", origin), need(cfg, "num_key_value_heads", origin),
                          need(cfg, "head_dim", origin), qkv_bias=bias, o_bias=bias, qk_norm=True)
    window = get(cfg, "sliding_window", origin, minimum=0)
    if window and window >= base["max_context"]:
        notes.append(f"sliding_window {window} >= max_position_embeddings {base['max_context']}: it never applies, left out")
        window = None
    types = _types(cfg, origin, n)
    shared = _shared(cfg, origin, types)
    d_ff = _d_ff(cfg, origin, n)
    layers: list[dict] = []
    for i in range(n):
        layer: dict = {"attention": att}
        if types[i] == "sliding_attention" and window:
            layer["sliding_window"] = window
        if shared[i]:
            layer["kv_shared"] = True
        if len(set(d_ff)) > 1:
            layer["ffn"] = dense_ffn(d_ff[i])
        layers.append(layer)
    base["ffn"] = dense_ffn(max(set(d_ff), key=d_ff.count))
    base["norms_per_layer"] = GEMMA3N_NORMS
    groups = group_layers(layers, n)
    for g in groups:
        if g.get("kv_shared"):
            g["name"] = f"{g.get('name', 'layers')}-shared"
    base["layer_groups"] = groups
    extra = unmodelled_params(cfg, origin)
    p = not_null(cfg, "hidden_size_per_layer_input", origin)
    a = need(cfg, "altup_num_inputs", origin)
    table = not_null(cfg, "vocab_size_per_layer_input", origin) * n * p  # embed_tokens_per_layer
    d = need(cfg, "hidden_size", origin)
    # replicated on every tp rank by vLLM (gemma3n.py) and SGLang (gemma3n_causal.py: ReplicatedLinear): each layer's
    # per_layer_input_gate and per_layer_projection and the per_layer_projection_norm; AltUp's correction and
    # prediction coefficients and modality router
    replicated = {"per_layer_embeddings": n * 2 * d * p + p, "altup": n * (a * a + a**3 + d * a)}
    flops = unmodelled_flops(cfg, origin)
    base["extra_weights"] = {
        name: {"params": v, **({"table": table, "row": n * p} if name == "per_layer_embeddings" else {}),
               **({"replicated": replicated[name]} if name in replicated else {}), "flops": flops[name]}
        for name, v in extra.items()}
    notes.append("per-layer embeddings, AltUp and LAuReL counted as extra_weights: "
                 + ", ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in extra.items())
                 + " (FLOPs a token: " + ", ".join(f"{v:,}" for v in flops.values()) + ")")
    return base
