"""Import a Hugging Face `config.json` as a kvcalc spec, respecting each model_type's conventions and traps.

Traps handled (see the README): `use_sliding_window: false` disables a window that is present (Qwen2/2.5);
`multi_query: true` means one KV head whatever `num_kv_heads` says (Falcon); Gemma 3 configs nest the text model
under `text_config` and list only non-default keys; newer configs give `layer_types` instead of a pattern;
`head_dim` is used when given (never recomputed from hidden_size / heads); DeepSeek's `q_lora_rank` may be null or 0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kvcalc.errors import SpecError
from kvcalc.spec import ModelSpec, layer_ranges, spec_from_dict

# Gemma3TextConfig.__init__ defaults (transformers configuration_gemma3.py; reference FACTS.md §1.2):
# published 4B/12B/27B `text_config`s list only the keys that differ from these.
GEMMA3_TEXT_DEFAULTS = {
    "vocab_size": 262_208,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "max_position_embeddings": 131_072,
    "sliding_window": 4096,
    "sliding_window_pattern": 6,
    "tie_word_embeddings": True,
    "query_pre_attn_scalar": 256,
}
# Gemma2Config defaults (transformers configuration_gemma2.py).
GEMMA2_DEFAULTS = {"head_dim": 256, "sliding_window": 4096, "tie_word_embeddings": True}
# FalconConfig default when the file has no max_position_embeddings key (Falcon-7B's official file has none).
FALCON_DEFAULT_MAX_POSITIONS = 2048

# Which config key each spec field is read from, for `--explain` (model_types may override).
HF_KEYS = {
    "d_model": "hidden_size",
    "n_layers": "num_hidden_layers",
    "n_heads": "num_attention_heads",
    "n_kv_heads": "num_key_value_heads",
    "head_dim": "head_dim",
    "sliding_window": "sliding_window",
    "kv_lora_rank": "kv_lora_rank",
    "q_lora_rank": "q_lora_rank",
    "qk_nope_head_dim": "qk_nope_head_dim",
    "qk_rope_head_dim": "qk_rope_head_dim",
    "v_head_dim": "v_head_dim",
    "max_context": "max_position_embeddings",
    "vocab_size": "vocab_size",
}
# The `layer_types` entries of the attention kinds imported (transformers' sliding and full attention layers).
LAYER_TYPES = ("sliding_attention", "full_attention")


@dataclass
class Imported:
    """A spec converted from a config, with the config key behind each spec field and notes on choices made."""

    data: dict
    keys: dict[str, str] = field(default_factory=lambda: dict(HF_KEYS))


def _whole(value: Any, key: str, origin: str, minimum: int = 1) -> int:
    """`value` as an int, or a SpecError naming `key`: a bool, a fraction or a string is not a whole number."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # JSON 32.0 is the whole number 32, as pydantic reads it in a YAML spec
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"{origin}: {key}: must be a whole number, got {value!r}")
    if value < minimum:
        raise SpecError(f"{origin}: {key}: must be at least {minimum}, got {value}")
    return value


def _need(cfg: dict, key: str, origin: str, *alts: str) -> int:
    """A required whole-number field (a positive int), read from `key` or the first alternative present."""
    for k in (key, *alts):
        if cfg.get(k) is not None:
            return _whole(cfg[k], k, origin)
    raise SpecError(f"{origin}: {key}: required field is missing from the config")


def _get(cfg: dict, key: str, origin: str, minimum: int = 1) -> int | None:
    """An optional whole-number field: None when absent or null (`minimum` 0 where 0 means 'none')."""
    return None if cfg.get(key) is None else _whole(cfg[key], key, origin, minimum)


def _attention(n_heads: int, n_kv: int, head_dim: int | None, **flags) -> dict:
    """An MHA/GQA/MQA block from head counts (the kind follows n_kv: n_heads -> mha, 1 -> mqa, else gqa)."""
    kind = "mha" if n_kv == n_heads else "mqa" if n_kv == 1 else "gqa"
    att: dict = {"kind": kind, "n_heads": n_heads}
    if kind == "gqa":
        att["n_kv_heads"] = n_kv
    if head_dim is not None:
        att["head_dim"] = head_dim
    att.update({k: v for k, v in flags.items() if v})
    return att


def _group(layers: list[dict], n_layers: int) -> list[dict]:
    """Collapse per-layer {attention, sliding_window, ffn} dicts into layer groups with range selectors."""
    order: list[tuple[str, dict, list[int]]] = []
    for i, layer in enumerate(layers):
        key = repr(sorted(layer.items()))
        for k, _, idx in order:
            if k == key:
                idx.append(i)
                break
        else:
            order.append((key, layer, [i]))
    windowed = any(layer.get("sliding_window") for _, layer, _ in order)
    groups = []
    for _, layer, idx in order:
        # Name groups only where windows tell them apart; other splits (e.g. dense vs MoE FFN) stay unnamed.
        group = {"name": "local" if layer.get("sliding_window") else "global"} if windowed and len(order) > 1 else {}
        group["layers"] = "all" if len(idx) == n_layers else layer_ranges(idx)
        group.update(layer)
        groups.append(group)
    return groups


def _windows(cfg: dict, origin: str, n_layers: int, window: int | None,
             default_sliding: Callable[[int], bool]) -> list[int | None]:
    """Per-layer window: from `layer_types` when the config has it, else the model_type's own rule."""
    if not window:
        return [None] * n_layers
    types = cfg.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != n_layers:
            got = f"{len(types)} entries" if isinstance(types, list) else repr(types)
            raise SpecError(f"{origin}: layer_types: must have one entry per layer (num_hidden_layers {n_layers}), got {got}")
        for i, t in enumerate(types):
            if t not in LAYER_TYPES:
                raise SpecError(f"{origin}: layer_types[{i}]: must be one of {', '.join(LAYER_TYPES)}, got {t!r}")
        return [window if t == "sliding_attention" else None for t in types]
    return [window if default_sliding(i) else None for i in range(n_layers)]


def _dense_ffn(d_ff: int, gated: bool = True, bias: bool = False) -> dict:
    ffn: dict = {"kind": "dense", "d_ff": d_ff}
    if not gated:
        ffn["gated"] = False
    if bias:
        ffn["bias"] = True
    return ffn


def _base(cfg: dict, origin: str, family: str, tie_default: bool) -> dict:
    return {
        "family": family,
        "d_model": _need(cfg, "hidden_size", origin),
        "n_layers": _need(cfg, "num_hidden_layers", origin),
        "vocab_size": _need(cfg, "vocab_size", origin),
        "tie_embeddings": bool(cfg.get("tie_word_embeddings", tie_default)),
        "max_context": _need(cfg, "max_position_embeddings", origin),
    }


def _decoder(cfg: dict, origin: str, family: str, notes: list[str], *, tie_default=False, qkv_bias=False,
             qk_norm=False, norms_per_layer: int = 2, sliding: Callable[[int], bool] = lambda i: True,
             ffn: dict | None = None, layer_ffn: Callable[[int], dict | None] = lambda i: None) -> dict:
    """The common Llama-style decoder: every layer the same attention, windows per `sliding` or `layer_types`."""
    base = _base(cfg, origin, family, tie_default)
    if norms_per_layer != 2:
        base["norms_per_layer"] = norms_per_layer
    n_heads = _need(cfg, "num_attention_heads", origin)
    n_kv = _get(cfg, "num_key_value_heads", origin) or n_heads
    # Llama-style attention_bias puts a bias on q, k, v and o; Qwen2 has q/k/v biases only.
    bias = bool(cfg.get("attention_bias", False))
    att = _attention(n_heads, n_kv, _get(cfg, "head_dim", origin), qkv_bias=qkv_bias or bias, o_bias=bias, qk_norm=qk_norm)
    window = _get(cfg, "sliding_window", origin, minimum=0)  # 0 or null: no window
    if window and window >= base["max_context"]:
        notes.append(f"sliding_window {window} >= max_position_embeddings {base['max_context']}: it never applies, left out")
        window = None
    windows = _windows(cfg, origin, base["n_layers"], window, sliding)
    layers = []
    for i in range(base["n_layers"]):
        layer: dict = {"attention": att}
        if windows[i]:
            layer["sliding_window"] = windows[i]
        if layer_ffn(i) is not None:
            layer["ffn"] = layer_ffn(i)
        layers.append(layer)
    base["ffn"] = ffn if ffn is not None else _dense_ffn(_need(cfg, "intermediate_size", origin), bias=bool(cfg.get("mlp_bias")))
    base["layer_groups"] = _group(layers, base["n_layers"])
    return base


def _llama(cfg, origin, notes):
    return _decoder(cfg, origin, "llama", notes)


def _mistral(cfg, origin, notes):
    return _decoder(cfg, origin, "mistral", notes)


def _mixtral(cfg, origin, notes):
    moe: dict[str, Any] = {
        "kind": "moe",
        "n_routed_experts": _need(cfg, "num_local_experts", origin),
        "n_experts_per_tok": _need(cfg, "num_experts_per_tok", origin),
        "moe_d_ff": _need(cfg, "intermediate_size", origin),  # Mixtral: intermediate_size is per expert
    }
    return _decoder(cfg, origin, "mixtral", notes, ffn=moe)


def _qwen_window(cfg: dict, origin: str, notes: list[str]) -> Callable[[int], bool]:
    """Qwen2/3: windows only when use_sliding_window is true, and then only on layers >= max_window_layers."""
    if cfg.get("sliding_window") and not cfg.get("use_sliding_window", False):
        notes.append(f"use_sliding_window is false: sliding_window {cfg['sliding_window']} does not apply")
        cfg["sliding_window"] = None
        cfg.pop("layer_types", None)
    first = _get(cfg, "max_window_layers", origin, minimum=0) or 0
    return lambda i: i >= first


def _qwen2(cfg, origin, notes):
    # Qwen2 always has biases on q, k and v (Qwen2Attention: bias=True).
    return _decoder(cfg, origin, "qwen2", notes, qkv_bias=True, sliding=_qwen_window(cfg, origin, notes))


def _qwen3(cfg, origin, notes):
    return _decoder(cfg, origin, "qwen3", notes, qk_norm=True, sliding=_qwen_window(cfg, origin, notes))


def _qwen3_moe(cfg, origin, notes):
    moe: dict[str, Any] = {
        "kind": "moe",
        "n_routed_experts": _need(cfg, "num_experts", origin),
        "n_experts_per_tok": _need(cfg, "num_experts_per_tok", origin),
        "moe_d_ff": _need(cfg, "moe_intermediate_size", origin),
    }
    only = cfg.get("mlp_only_layers") or []
    if not isinstance(only, list):
        raise SpecError(f"{origin}: mlp_only_layers: must be a list of layer indices, got {only!r}")
    dense_layers = {_whole(i, f"mlp_only_layers[{j}]", origin, minimum=0) for j, i in enumerate(only)}
    step = _get(cfg, "decoder_sparse_step", origin, minimum=0) or 1

    # Qwen3MoeDecoderLayer: sparse unless listed in mlp_only_layers or off the decoder_sparse_step grid.
    def layer_ffn(i):
        if i in dense_layers or (i + 1) % step:
            return _dense_ffn(_need(cfg, "intermediate_size", origin))
        return None

    return _decoder(cfg, origin, "qwen3", notes, qk_norm=True, sliding=_qwen_window(cfg, origin, notes), ffn=moe, layer_ffn=layer_ffn)


def _gemma2(cfg, origin, notes):
    cfg = {**GEMMA2_DEFAULTS, **cfg}
    # Gemma2: even layers are local (sliding), odd layers global.
    # Gemma 2/3 layers have four norms: before and after attention, before and after the FFN.
    return _decoder(cfg, origin, "gemma2", notes, tie_default=True, norms_per_layer=4, sliding=lambda i: i % 2 == 0)


def _gemma3(cfg, origin, notes):
    if isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg["text_config"]}
        notes.append("text model read from text_config (vision tower not counted)")
    filled = [k for k in GEMMA3_TEXT_DEFAULTS if k not in cfg]
    if filled:
        notes.append("Gemma3TextConfig defaults filled in for: " + ", ".join(filled))
    cfg = {**GEMMA3_TEXT_DEFAULTS, **cfg}
    pattern = _get(cfg, "sliding_window_pattern", origin, 0) or _get(cfg, "_sliding_window_pattern", origin, 0) or 6
    # Gemma 3: layer i is global when (i + 1) % pattern == 0, local (sliding) otherwise (FACTS.md §1.2).
    return _decoder(cfg, origin, "gemma3", notes, tie_default=True, qk_norm=True, norms_per_layer=4,
                    sliding=lambda i: (i + 1) % pattern != 0)


def _deepseek(cfg, origin, notes):
    base = _base(cfg, origin, "deepseek", False)
    att = {
        "kind": "mla",
        "n_heads": _need(cfg, "num_attention_heads", origin),
        "kv_lora_rank": _need(cfg, "kv_lora_rank", origin),
        "qk_nope_head_dim": _need(cfg, "qk_nope_head_dim", origin),
        "qk_rope_head_dim": _need(cfg, "qk_rope_head_dim", origin),
        "v_head_dim": _need(cfg, "v_head_dim", origin),
    }
    q_rank = _get(cfg, "q_lora_rank", origin, minimum=0)
    if q_rank:  # null (HF) or 0 (DeepSeek's own format) both mean no query compression
        att["q_lora_rank"] = q_rank
    first_k = _get(cfg, "first_k_dense_replace", origin, minimum=0) or 0
    moe: dict[str, Any] = {
        "kind": "moe",
        "n_routed_experts": _need(cfg, "n_routed_experts", origin),
        "n_experts_per_tok": _need(cfg, "num_experts_per_tok", origin),
        "moe_d_ff": _need(cfg, "moe_intermediate_size", origin),
        "n_shared_experts": _get(cfg, "n_shared_experts", origin, minimum=0) or 0,
        "first_k_dense": first_k,
    }
    if cfg.get("topk_method") == "noaux_tc":  # DeepSeek-V3: a learned per-expert bias steers routing
        moe["router_bias"] = True
    freq = _get(cfg, "moe_layer_freq", origin, minimum=0) or 1
    if first_k or freq != 1:
        moe["dense_d_ff"] = _need(cfg, "intermediate_size", origin)
    layers = []
    for i in range(base["n_layers"]):
        layer: dict = {"attention": att}
        # DeepseekV2DecoderLayer: MoE when i >= first_k_dense_replace and i % moe_layer_freq == 0.
        if i >= first_k and i % freq:
            layer["ffn"] = _dense_ffn(moe["dense_d_ff"])
        layers.append(layer)
    if _get(cfg, "num_nextn_predict_layers", origin, minimum=0):
        notes.append(f"{cfg['num_nextn_predict_layers']} multi-token-prediction layer(s) not counted (not used in plain decoding)")
    base["ffn"] = moe
    base["layer_groups"] = _group(layers, base["n_layers"])
    return base


def _falcon(cfg, origin, notes):
    cfg = dict(cfg)
    cfg.setdefault("hidden_size", _get(cfg, "n_embed", origin))
    cfg.setdefault("num_hidden_layers", _get(cfg, "n_layer", origin))
    cfg.setdefault("num_attention_heads", _get(cfg, "n_head", origin))
    if cfg.get("max_position_embeddings") is None:
        cfg["max_position_embeddings"] = FALCON_DEFAULT_MAX_POSITIONS
        notes.append(f"no max_position_embeddings in the config: FalconConfig default {FALCON_DEFAULT_MAX_POSITIONS} used")
    base = _base(cfg, origin, "falcon", True)
    base["norm"] = "layernorm"
    if cfg.get("parallel_attn", True) and not cfg.get("new_decoder_architecture"):
        base["norms_per_layer"] = 1  # one LayerNorm feeds both the attention and the FFN
    n_heads = _need(cfg, "num_attention_heads", origin)
    if cfg.get("new_decoder_architecture"):
        n_kv = _get(cfg, "num_kv_heads", origin) or n_heads
    elif cfg.get("multi_query", True):
        # multi_query: true means one shared K/V head, whatever num_kv_heads says (FACTS.md §5.1).
        n_kv = 1
        if cfg.get("num_kv_heads") not in (None, 1):
            notes.append(f"multi_query is true: one KV head (num_kv_heads {cfg['num_kv_heads']} ignored)")
    else:
        n_kv = n_heads
    d = base["d_model"]
    base["ffn"] = _dense_ffn(_get(cfg, "ffn_hidden_size", origin) or 4 * d, gated=False, bias=bool(cfg.get("bias")))
    bias = bool(cfg.get("bias"))
    base["layer_groups"] = [{"layers": "all", "attention": _attention(n_heads, n_kv, _get(cfg, "head_dim", origin), qkv_bias=bias, o_bias=bias)}]
    return base


def _gpt2(cfg, origin, notes):
    base: dict[str, Any] = {
        "family": "gpt2",
        "d_model": _need(cfg, "n_embd", origin),
        "n_layers": _need(cfg, "n_layer", origin),
        "vocab_size": _need(cfg, "vocab_size", origin),
        "tie_embeddings": bool(cfg.get("tie_word_embeddings", True)),
        "max_context": _need(cfg, "n_positions", origin),
        "norm": "layernorm",
        "learned_positions": True,
    }
    n_heads = _need(cfg, "n_head", origin)
    base["ffn"] = _dense_ffn(_get(cfg, "n_inner", origin) or 4 * base["d_model"], gated=False, bias=True)
    base["layer_groups"] = [{"layers": "all", "attention": _attention(n_heads, n_heads, None, qkv_bias=True, o_bias=True)}]
    return base


IMPORTERS: dict[str, Callable[[dict, str, list[str]], dict]] = {
    "llama": _llama,
    "mistral": _mistral,
    "mixtral": _mixtral,
    "qwen2": _qwen2,
    "qwen3": _qwen3,
    "qwen3_moe": _qwen3_moe,
    "gemma2": _gemma2,
    "gemma3": _gemma3,
    "gemma3_text": _gemma3,
    "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek,
    "falcon": _falcon,
    "gpt2": _gpt2,
}
KEY_OVERRIDES = {
    "gpt2": {"d_model": "n_embd", "n_layers": "n_layer", "n_heads": "n_head", "max_context": "n_positions"},
    "falcon": {"n_kv_heads": "multi_query / num_kv_heads"},
}


def is_hf_config(data: object) -> bool:
    """True for a mapping that looks like a Hugging Face config (it names a model_type)."""
    return isinstance(data, dict) and "model_type" in data and "layer_groups" not in data


def import_config(cfg: dict, origin: str, name: str) -> Imported:
    """Convert a parsed HF config into spec fields (not yet validated), or raise SpecError naming `origin`."""
    model_type = cfg.get("model_type")
    if model_type not in IMPORTERS:
        raise SpecError(
            f"{origin}: model_type: {model_type!r} is not supported; supported model_types: {', '.join(sorted(IMPORTERS))}"
        )
    notes: list[str] = []
    try:
        body = IMPORTERS[model_type](dict(cfg), origin, notes)
    except (TypeError, ValueError) as exc:  # a field of the wrong type, e.g. a string where a number belongs
        raise SpecError(f"{origin}: a field has the wrong type for model_type {model_type!r}: {exc}") from None
    data = {"name": name, "family": body.pop("family"), "source": f"Hugging Face config.json ({origin}, model_type {model_type})"}
    if notes:
        data["notes"] = "; ".join(notes)
    data.update(body)
    keys = {**HF_KEYS, **KEY_OVERRIDES.get(model_type, {})}
    return Imported(data=data, keys=keys)


def spec_from_config(cfg: dict, origin: str, name: str) -> tuple[ModelSpec, Imported]:
    """Import and validate an HF config as a ModelSpec."""
    imported = import_config(cfg, origin, name)
    return spec_from_dict(imported.data, origin), imported
