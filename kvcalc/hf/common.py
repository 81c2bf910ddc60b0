"""What every Hugging Face importer shares: reading whole numbers that name their key, the Llama-style decoder,
layer groups from per-layer dicts, windows from `layer_types`, and the registry of importers by model_type."""

from __future__ import annotations

import math
import re
import reprlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kvcalc.errors import SpecError
from kvcalc.spec import layer_ranges

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
# What a key left out of config.json becomes: the config class's default, which transformers fills in, not a
# generic rule (n_kv = n_heads, head_dim = hidden / heads, no window, no bias). Each from the model's
# configuration_<model_type>.py in transformers (commit 008e5743 unless noted).
CONFIG_DEFAULTS: dict[str, tuple[str, dict[str, Any]]] = {
    "qwen2": ("Qwen2Config", {"num_key_value_heads": 32}),
    "qwen3": ("Qwen3Config", {"num_key_value_heads": 32, "head_dim": 128}),
    "qwen3_moe": ("Qwen3MoeConfig", {"num_key_value_heads": 4}),
    "mistral": ("MistralConfig", {"num_key_value_heads": 8, "sliding_window": 4096}),  # MistralConfig.__init__ (001f85b3)
    "mixtral": ("MixtralConfig", {"num_key_value_heads": 8}),
    "gpt_oss": ("GptOssConfig", {"num_key_value_heads": 8, "head_dim": 64, "sliding_window": 128,  # (02b8f42b)
                                 "attention_bias": True}),
    "llama4_text": ("Llama4TextConfig", {"num_key_value_heads": 8, "head_dim": 128, "attention_chunk_size": 8192}),
    "gemma2": ("Gemma2Config", {"num_key_value_heads": 4, "head_dim": 256, "sliding_window": 4096,
                                "tie_word_embeddings": True}),
    # JambaConfig.__init__ (008f5c8c): attention on layers 4, 12, 20, ... and experts on the odd layers by default
    "jamba": ("JambaConfig", {"num_key_value_heads": 8, "attn_layer_period": 8, "attn_layer_offset": 4,
                              "expert_layer_period": 2, "expert_layer_offset": 1}),
    "nemotron_h": ("NemotronHConfig", {"num_key_value_heads": 8}),  # (13923c63)
    "cohere2": ("Cohere2Config", {"sliding_window": 4096}),
    "qwen3_vl": ("Qwen3VLTextConfig", {"num_key_value_heads": 32, "head_dim": 128}),  # (000c33fd)
    "qwen3_vl_moe": ("Qwen3VLMoeTextConfig", {"num_key_value_heads": 16}),
    "minimax_m2": ("MiniMaxM2Config", {"num_key_value_heads": 8, "head_dim": 128}),
    # CwmConfig (transformers 5.25): Code World Model's 8 KV heads of 128, a window of 8,192 on three layers of four
    "cwm": ("CwmConfig", {"num_key_value_heads": 8, "head_dim": 128, "sliding_window": 8192}),
    # GlmConfig and Glm4Config (transformers 5.25): GLM-4-9B's GQA of 2 KV heads, q/k/v biases on
    "glm": ("GlmConfig", {"num_key_value_heads": 2, "head_dim": 128, "attention_bias": True}),
    "glm4": ("Glm4Config", {"num_key_value_heads": 2, "head_dim": 128, "attention_bias": True}),
    # MiniMax's own MiniMaxM1Config (remote code; no transformers class)
    "minimax_m1": ("MiniMaxM1Config", {"num_key_value_heads": 8}),
    # Apple's OpenELMConfig (remote code configuration_openelm.py)
    "openelm": ("OpenELMConfig", {"share_input_output_layers": False}),
    "minicpm3": ("MiniCPM3Config", {"q_lora_rank": 768}),
    # MLA: DeepseekV2Config / DeepseekV3Config (001f85b3) and DeepSeek's remote code agree on these; the V3 router
    # always carries e_score_correction_bias (topk_method noaux_tc, the remote code's default). V2's n_shared_experts
    # is left out: transformers' class says 2, DeepSeek's own code None (no shared expert), which kvcalc follows.
    "deepseek_v2": ("DeepseekV2Config", {"q_lora_rank": 1536, "first_k_dense_replace": 0}),
    "deepseek_v3": ("DeepseekV3Config", {"q_lora_rank": 1536, "first_k_dense_replace": 3, "n_shared_experts": 1,
                                         "topk_method": "noaux_tc"}),
    "kimi_k2": ("DeepseekV3Config", {"q_lora_rank": 1536, "first_k_dense_replace": 3, "n_shared_experts": 1,
                                     "topk_method": "noaux_tc"}),
    "deepseek_v32": ("DeepseekV32Config", {"q_lora_rank": 1536, "first_k_dense_replace": 3, "n_shared_experts": 1,
                                           "topk_method": "noaux_tc", "index_topk": 2048, "index_n_heads": 64,
                                           "index_head_dim": 128}),
    "glm_moe_dsa": ("GlmMoeDsaConfig", {"q_lora_rank": 2048, "first_k_dense_replace": 3, "n_shared_experts": 1,
                                        "topk_method": "noaux_tc", "index_topk": 2048, "index_n_heads": 32,
                                        "index_head_dim": 128}),
}
# Qwen2Config / Qwen3Config: the window's defaults, which matter only when use_sliding_window is true.
QWEN_WINDOW_DEFAULTS = {"sliding_window": 4096, "max_window_layers": 28}
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
    "index_head_dim": "index_head_dim",  # DeepSeek-V3.2's and GLM-5's indexer key
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
    defaulted: tuple[str, ...] = ()  # sizes a config class's defaults gave (defaulted_sizes): the command line warns


# Upper bounds on a config's whole numbers, far above any published model and low enough that no loop over a
# range they set (layers, experts) can run long: layers 10,000 (a spec allows 10**6, but an importer reads and
# writes per-layer lists such as layer_types, one entry a layer); heads 65,536 (2**16); widths, head and FFN sizes,
# ranks 2**20; experts 65,536; context lengths, windows and every other count 2**40.
MAX_LAYERS = 10_000
MAX_HEADS = 2**16
MAX_WIDTH = 2**20
MAX_EXPERTS = 2**16
MAX_COUNT = 2**40
BOUNDS: dict[str, tuple[int, str]] = {
    **dict.fromkeys(("num_hidden_layers", "n_layer", "n_layers", "num_layers", "encoder_layers", "decoder_layers",
                     "num_decoder_layers", "num_transformer_layers", "num_nextn_predict_layers",
                     "mtp_num_hidden_layers", "num_kv_shared_layers"), (MAX_LAYERS, "layers")),
    **dict.fromkeys(("num_attention_heads", "num_key_value_heads", "n_head", "num_heads", "num_kv_heads",
                     "encoder_attention_heads", "decoder_attention_heads", "num_global_key_value_heads",
                     "index_n_heads", "mamba_num_heads", "num_query_heads", "n_heads_in_group", "num_gqa_groups",
                     "n_groups", "mamba_n_groups"), (MAX_HEADS, "heads")),
    **dict.fromkeys(("hidden_size", "n_embd", "n_embed", "d_model", "model_dim", "head_dim", "global_head_dim",
                     "attention_head_dim", "d_kv", "v_head_dim", "qk_nope_head_dim", "qk_rope_head_dim",
                     "index_head_dim", "mamba_head_dim", "kv_lora_rank", "q_lora_rank", "laurel_rank",
                     "intermediate_size", "moe_intermediate_size", "shared_intermediate_size",
                     "shared_expert_intermediate_size", "moe_shared_expert_intermediate_size", "intermediate_size_mlp",
                     "ffn_hidden_size", "n_inner", "d_ff", "encoder_ffn_dim", "decoder_ffn_dim",
                     "hidden_size_per_layer_input", "ssm_state_size", "mamba_d_state", "mamba_dt_rank",
                     "num_mel_bins"), (MAX_WIDTH, "a width")),
    **dict.fromkeys(("num_local_experts", "num_experts", "n_routed_experts", "n_shared_experts",
                     "num_shared_experts", "num_experts_per_tok", "num_experts_per_token", "experts_per_token",
                     "top_k_experts"), (MAX_EXPERTS, "experts")),
    **dict.fromkeys(("max_position_embeddings", "n_positions", "max_source_positions", "max_target_positions",
                     "model_max_length", "max_context_length", "sliding_window", "attention_chunk_size", "index_topk"),
                    (MAX_COUNT, "tokens")),
}
MESSAGE_WIDTH = 80  # characters of a config value that a message shows


class _Brief(reprlib.Repr):
    """reprlib with small limits (so a huge or alias-shared value costs little) that never converts a long int to
    decimal (Python refuses past 4,300 digits)."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel, self.maxdict, self.maxlist, self.maxtuple, self.maxset = 3, 6, 8, 8, 8
        self.maxstring = self.maxother = self.maxlong = MESSAGE_WIDTH

    def repr_bool(self, x: bool, level: int) -> str:  # as the JSON file writes it
        return "true" if x else "false"

    def repr_NoneType(self, x: None, level: int) -> str:  # reprlib dispatches on the type's name
        return "null"

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 256:  # about 77 digits: say how long it is rather than print it
            return f"<an integer of about {int(x.bit_length() * 0.30103) + 1:,} digits>"
        return repr(x)


_BRIEF = _Brief()


def show(value: Any) -> str:
    """`value` for a message: its repr cut to about 80 characters, at a cost bounded whatever its size."""
    text = _BRIEF.repr(value)
    return text if len(text) <= MESSAGE_WIDTH else text[: MESSAGE_WIDTH - 3] + "..."


def show_error(exc: BaseException) -> str:
    """An exception's text for a message, cut like `show` (int("...") quotes the whole string it refused)."""
    text = str(exc)
    return text if len(text) <= 2 * MESSAGE_WIDTH else text[: 2 * MESSAGE_WIDTH - 3] + "..."


def bound(key: str) -> tuple[int, str]:
    """The largest value `key` (e.g. `intermediate_size[3]`, `block_configs[0].attention.n_heads_in_group`) may
    take, and what it counts."""
    base = re.sub(r"\[\d+\]", "", key).rsplit(".", 1)[-1]
    return BOUNDS.get(base, (MAX_COUNT, "a count"))


def whole(value: Any, key: str, origin: str, minimum: int = 1) -> int:
    """`value` as an int, or a SpecError naming `key`: a bool, a fraction or a string is not a whole number, and a
    value above `bound(key)` is physically absurd."""
    if isinstance(value, float) and not math.isfinite(value):
        raise SpecError(f"{origin}: {key}: must be a whole number, got {_non_finite(value)}")
    if isinstance(value, float) and value.is_integer():
        text = getattr(value, "text", None)  # a JsonFloat's own digits: 32.000000000000001 reads as 32.0
        from decimal import Decimal

        exact = Decimal(text) if text is not None else Decimal(int(value))
        if exact != int(value) and exact != exact.to_integral_value():
            raise SpecError(f"{origin}: {key}: must be a whole number, got {str(text)[:MESSAGE_WIDTH]} (a fraction that "
                            f"only rounds to {int(value)} as a float)")
        # JSON 32.0 is the whole number 32 (exact; a YAML spec, strict, writes 32); 1e23 the whole 10^23, which its
        # float misses (99,999,999,999,999,991,611,392): the bound below names it
        value = int(exact) if exact == exact.to_integral_value() else int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"{origin}: {key}: must be a whole number, got {show(value)}")
    if value < minimum:
        raise SpecError(f"{origin}: {key}: must be at least {minimum}, got {show(value)}")
    limit, what = bound(key)
    if value > limit:
        raise SpecError(f"{origin}: {key}: must be at most {limit:,} ({what}), got {show(value)}")
    return value


def _non_finite(value: float) -> str:
    """A float that is no number, in words: Python's JSON reads 1e400 (past a float's ~1.8e308) as inf."""
    if math.isnan(value):
        return "NaN (not a number)"
    return f"{show(value)}: too large to represent (a JSON number past about 1.8e308, such as 1e400, reads as inf)"


def need(cfg: dict, key: str, origin: str, *alts: str) -> int:
    """A required whole-number field (a positive int), read from `key` or the first alternative present."""
    for k in (key, *alts):
        if cfg.get(k) is not None:
            return whole(cfg[k], k, origin)
    raise SpecError(f"{origin}: {key}: required field is missing from the config")


def flag(cfg: dict, key: str, origin: str, default: bool = False) -> bool:
    """A boolean config key: JSON true or false (absent or null: `default`). Anything else is refused, never read by
    Python's truthiness (bool("false") is true)."""
    value = cfg.get(key)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    raise SpecError(f"{origin}: {key}: must be true or false, got {show(value)}")


TORCH_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}  # a config's dtype names, kvcalc's


def torch_dtype(cfg: dict, key: str, origin: str) -> str | None:
    """A dtype config key (mamba_ssm_dtype, mamba_ssm_cache_dtype) as a kvcalc dtype; None when absent or null."""
    value = cfg.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or value not in TORCH_DTYPES:
        raise SpecError(f"{origin}: {key}: must be one of {', '.join(TORCH_DTYPES)}, got {show(value)}")
    return TORCH_DTYPES[value]


def get(cfg: dict, key: str, origin: str, minimum: int = 1) -> int | None:
    """An optional whole-number field: None when absent or null (`minimum` 0 where 0 means 'none')."""
    return None if cfg.get(key) is None else whole(cfg[key], key, origin, minimum)


def not_null(cfg: dict, key: str, origin: str, minimum: int = 0) -> int:
    """A whole-number field whose config class gives a default (filled when the key is left out, fill_defaults) and
    whose model code reads it as a number: an explicit null is refused, not read as 0 (no engine builds that model:
    vLLM's gemma3n.py multiplies by hidden_size_per_layer_input, DeepSeek's code compares first_k_dense_replace)."""
    if cfg.get(key) is None:
        raise SpecError(f"{origin}: {key}: must be a whole number, got {'null' if key in cfg else 'nothing'} (the "
                        "model's code reads it as one; leave the key out for the config class's default)")
    return whole(cfg[key], key, origin, minimum)


def fill_defaults(cfg: dict, table: dict[str, Any], cls: str, notes: list[str]) -> dict:
    """The config with config class `cls`'s defaults `table` filled in for the keys it leaves out, as transformers
    fills them, named in `notes` with their values; an explicit null is kept (each class reads it its own way)."""
    filled = [k for k in table if k not in cfg]
    if filled:
        notes.append(f"{cls} defaults filled in for: " + ", ".join(f"{k} {_json(table[k])}" for k in filled))
    return {**table, **cfg}


# The sizes no published config leaves out: a config whose class fills them (Gemma 3n's, Ministral 3's tables have
# them) is more likely cut short than a model of the class's defaults, so the command line warns (defaulted_sizes).
SIZE_KEYS = ("hidden_size", "num_hidden_layers")


def defaulted_sizes(notes: list[str]) -> list[str]:
    """The SIZE_KEYS that `notes` (fill_defaults's, '<Class> defaults filled in for: key value, ...') say a config
    class's defaults gave."""
    out = []
    for note in notes:
        if (m := re.match(r"\w+ defaults filled in for: (.*)", note)) is not None:
            out += [k for k in SIZE_KEYS if re.search(rf"(?:^|, ){k}\b", m[1])]
    return list(dict.fromkeys(out))


def with_defaults(cfg: dict, model_type: str, notes: list[str], defaults: dict[str, Any] | None = None) -> dict:
    """`fill_defaults` with the model_type's class and table in CONFIG_DEFAULTS (or `defaults` of that class)."""
    cls, table = CONFIG_DEFAULTS[model_type]
    return fill_defaults(cfg, table if defaults is None else defaults, cls, notes)


def type_defaults(cfg: dict, notes: list[str]) -> dict:
    """`with_defaults` for the config's own model_type (unchanged when CONFIG_DEFAULTS has none for it)."""
    model_type = cfg.get("model_type")
    if not isinstance(model_type, str) or model_type not in CONFIG_DEFAULTS:
        return cfg
    return with_defaults(cfg, model_type, notes)


def _json(value: Any) -> str:
    """A default as config.json writes it (true, not True)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def heads_attention(n_heads: int, n_kv: int, head_dim: int | None, **fields) -> dict:
    """An MHA/GQA/MQA block from head counts (the kind follows n_kv: n_heads -> mha, 1 -> mqa, else gqa) and more
    of its fields; a False flag or a None value is left out (the spec's default), any other value kept, even 0 (the
    spec then refuses it, rather than a falsy size passing for the default)."""
    kind = "mha" if n_kv == n_heads else "mqa" if n_kv == 1 else "gqa"
    att: dict = {"kind": kind, "n_heads": n_heads}
    if kind == "gqa":
        att["n_kv_heads"] = n_kv
    if head_dim is not None:
        att["head_dim"] = head_dim
    att.update({k: v for k, v in fields.items() if v is not None and v is not False})
    return att


def group_layers(layers: list[dict], n_layers: int) -> list[dict]:
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


def layer_windows(cfg: dict, origin: str, n_layers: int, window: int | None,
             default_sliding: Callable[[int], bool]) -> list[int | None]:
    """Per-layer window: from `layer_types` when the config has it, else the model_type's own rule."""
    if not window:
        return [None] * n_layers
    types = layer_types(cfg, origin, n_layers, LAYER_TYPES)
    if types is not None:
        return [window if t == "sliding_attention" else None for t in types]
    return [window if default_sliding(i) else None for i in range(n_layers)]


def layer_types(cfg: dict, origin: str, n_layers: int, allowed: tuple[str, ...]) -> list[str] | None:
    """The config's `layer_types`, one of `allowed` per layer, or None when it has none (a SpecError naming the
    entry otherwise)."""
    types = cfg.get("layer_types")
    if types is None:
        return None
    if not isinstance(types, list) or len(types) != n_layers:
        got = f"{len(types)} entries" if isinstance(types, list) else show(types)
        raise SpecError(f"{origin}: layer_types: must have one entry per layer (num_hidden_layers {n_layers}), got {got}")
    for i, t in enumerate(types):
        if t not in allowed:
            raise SpecError(f"{origin}: layer_types[{i}]: must be one of {', '.join(allowed)}, got {show(t)}")
    return types


def dense_ffn(d_ff: int, gated: bool = True, bias: bool = False) -> dict:
    ffn: dict = {"kind": "dense", "d_ff": d_ff}
    if not gated:
        ffn["gated"] = False
    if bias:
        ffn["bias"] = True
    return ffn


def base_fields(cfg: dict, origin: str, family: str, tie_default: bool) -> dict:
    return {
        "family": family,
        "d_model": need(cfg, "hidden_size", origin),
        "n_layers": need(cfg, "num_hidden_layers", origin),
        "vocab_size": need(cfg, "vocab_size", origin),
        "tie_embeddings": flag(cfg, "tie_word_embeddings", origin, tie_default),
        "max_context": need(cfg, "max_position_embeddings", origin),
    }


# The config's bias switches of a Llama-style decoder: attention_bias (q, k, v and o) and mlp_bias (gate, up, down).
BIAS_SWITCHES = ("attention_bias", "mlp_bias")


def bias_switches(cfg: dict, origin: str, family: str, reads: tuple[str, ...], notes: list[str]) -> dict[str, bool]:
    """Which bias switches are on, of those the family's modules read (`reads`, from its transformers modeling file);
    one they do not read is checked to be a boolean, then ignored with a note (a checkpoint has no such bias)."""
    out = {}
    for key in BIAS_SWITCHES:
        on = flag(cfg, key, origin, False)
        if on and key not in reads:
            notes.append(f"{key} true ignored: the {family} modules do not read it (their biases are fixed by the architecture)")
        out[key] = on and key in reads
    return out


def decoder(cfg: dict, origin: str, family: str, notes: list[str], *, tie_default=False, qkv_bias=False,
             reads: tuple[str, ...] = ("attention_bias",), qk_norm=False, norms_per_layer: int = 2,
             sliding: Callable[[int], bool] = lambda i: True, ffn: dict | None = None,
             layer_ffn: Callable[[int], dict | None] = lambda i: None, attention: dict | None = None) -> dict:
    """The common Llama-style decoder: every layer the same attention (`attention`: more of its fields), windows per
    `sliding` or `layer_types`; `reads`: the bias switches the family's modules take (Llama: both, most: attention_bias
    only, Mistral: none), `qkv_bias`: q/k/v biases whatever the config says (Qwen2)."""
    base = base_fields(cfg, origin, family, tie_default)
    if norms_per_layer != 2:
        base["norms_per_layer"] = norms_per_layer
    n_heads = need(cfg, "num_attention_heads", origin)
    n_kv = get(cfg, "num_key_value_heads", origin) or n_heads
    # Llama-style attention_bias puts a bias on q, k, v and o (LlamaAttention); Qwen2's q/k/v always have one.
    biases = bias_switches(cfg, origin, family, reads, notes)
    bias = biases["attention_bias"]
    flags = {"qkv_bias": qkv_bias or bias, "o_bias": bias, "qk_norm": qk_norm, **(attention or {})}
    att = heads_attention(n_heads, n_kv, get(cfg, "head_dim", origin), **flags)
    window = get(cfg, "sliding_window", origin, minimum=0)  # 0 or null: no window
    if window == 0:
        notes.append("sliding_window 0 read as no window: every layer attends its whole context")
    cls, table = CONFIG_DEFAULTS.get(str(cfg.get("model_type")), ("", {}))
    if "sliding_window" in cfg and cfg["sliding_window"] is None and table.get("sliding_window"):
        # an explicit null where the class's default is a window (Mistral Small 3 over MistralConfig's 4096)
        notes.append(f"sliding_window null read as no window ({cls}'s default, {table['sliding_window']}, does not "
                     "apply): every layer attends its whole context")
    if qkv_bias and cfg.get("attention_bias") is False:  # bias_switches notes only an ignored true
        notes.append(f"attention_bias false ignored: the {family} modules always have q/k/v biases")
    if window and window >= base["max_context"]:
        notes.append(f"sliding_window {window} >= max_position_embeddings {base['max_context']}: it never applies, left out")
        window = None
    windows = layer_windows(cfg, origin, base["n_layers"], window, sliding)
    layers = []
    for i in range(base["n_layers"]):
        layer: dict = {"attention": att}
        if windows[i]:
            layer["sliding_window"] = windows[i]
        if layer_ffn(i) is not None:
            layer["ffn"] = layer_ffn(i)
        layers.append(layer)
    base["ffn"] = ffn if ffn is not None else dense_ffn(need(cfg, "intermediate_size", origin), bias=biases["mlp_bias"])
    base["layer_groups"] = group_layers(layers, base["n_layers"])
    return base




Importer = Callable[[dict, str, list[str]], dict]
IMPORTERS: dict[str, Importer] = {}
KEY_OVERRIDES: dict[str, dict[str, str]] = {}
TEXT_CONFIG_TYPES: set[str] = set()  # model_types whose importer reads the text model from a text_config when given


def importer(*model_types: str, keys: dict[str, str] | None = None,
             text_config: bool = False) -> Callable[[Importer], Importer]:
    """Register a function as the importer of `model_types` (with the config keys its fields come from, for --explain;
    `text_config`: it reads a multimodal config's text_config, so those keys sit under it when one is given)."""

    def register(fn: Importer) -> Importer:
        for t in model_types:
            IMPORTERS[t] = fn
            if keys:
                KEY_OVERRIDES[t] = keys
            if text_config:
                TEXT_CONFIG_TYPES.add(t)
        return fn

    return register


def config_keys(cfg: dict, model_type: str) -> dict[str, str]:
    """The config key behind each spec field (for --explain and show's Source column): the standard names, a
    model_type's own, each a plain key under `text_config.` where the importer read the text model from there; a plain
    key the file leaves out is said to be absent (its value is the config class's default, which the notes name)."""
    keys = {**HF_KEYS, **KEY_OVERRIDES.get(model_type, {})}
    text = cfg.get("text_config")
    nested = model_type in TEXT_CONFIG_TYPES and isinstance(text, dict)
    source = text if nested and isinstance(text, dict) else cfg
    absent = " (absent: the config class's default)"
    keys = {f: k + absent if re.fullmatch(r"[a-z][a-z0-9_]*", k) and k not in source else k for f, k in keys.items()}
    if nested and isinstance(text, dict):
        keys = {f: _under_text(k, text) for f, k in keys.items()}
    return keys


def _under_text(key: str, text: dict) -> str:
    """A key as read from text_config: a plain key under it; in a compound text ('head_dim (full-attention layers:
    global_head_dim)') each word that is a key, one of text_config's or one with an underscore."""
    if re.fullmatch(r"[a-z][a-z0-9_]*( \(absent: the config class's default\))?", key):
        return f"text_config.{key}"
    return re.sub(r"(?<![.\w])[a-z][a-z0-9_]*\b",
                  lambda m: f"text_config.{m[0]}" if m[0] in text or "_" in m[0] else m[0], key)


def aliased(cfg: dict, origin: str, aliases: dict[str, str]) -> dict:
    """`cfg` with each key of `aliases` taken from its alias when only the alias is given (a config class's
    attribute_map, e.g. GPT2Config's hidden_size for n_embd, sets the one through the other); both given must agree."""
    out = dict(cfg)
    for key, alias in aliases.items():
        if out.get(alias) is None:
            continue
        # every aliased field is a count; 0 passes here (no MTP layer, no shared expert) and the reader checks the rest
        out[alias] = whole(out[alias], alias, origin, minimum=0)
        if out.get(key) is None:
            out[key] = out[alias]
        elif whole(out[key], key, origin, minimum=0) != out[alias]:
            raise SpecError(f"{origin}: {alias}: {show(out[alias])}, but {key} is {show(out[key])} (two names of one "
                            "field): give them alike or only one")
    return out


def text_tie(cfg: dict, text: dict, origin: str) -> dict:
    """`text` (a multimodal config's text_config) with the tie_word_embeddings the file gives: transformers 4.x reads
    text_config's, 5.x the top level's, so the one given is meant; both must agree; neither: the text class default."""
    top, inner = cfg.get("tie_word_embeddings"), text.get("tie_word_embeddings")
    if top is not None and not isinstance(top, bool):
        raise SpecError(f"{origin}: tie_word_embeddings: must be true or false, got {show(top)}")
    if inner is not None and not isinstance(inner, bool):
        raise SpecError(f"{origin}: text_config.tie_word_embeddings: must be true or false, got {show(inner)}")
    if top is not None and inner is not None and top != inner:
        word = {True: "true", False: "false"}
        raise SpecError(f"{origin}: tie_word_embeddings: {word[top]} at the top level but {word[inner]} in text_config "
                        "(transformers 4.x reads text_config's, 5.x the top level's; a transformers 5 re-save writes each level's "
                        "class default where the file had none): give the model's own value at one level")
    value = inner if inner is not None else top
    return {**text, "tie_word_embeddings": value} if value is not None else dict(text)


def text_part(cfg: dict, origin: str) -> dict | None:
    """The text model's fields under a multimodal config's text_config, with its tie_word_embeddings (`text_tie`; None:
    the config is the text model's own); a text_config that is not an object is refused, not passed over."""
    if "text_config" not in cfg:
        return None
    text = cfg["text_config"]
    if not isinstance(text, dict):
        raise SpecError(f"{origin}: text_config: must be an object of the text model's fields, got {show(text)}")
    return text_tie(cfg, text, origin)


def check_layer_list(cfg: dict, origin: str, key: str, want: list[str], choices: tuple[str, str], source: str) -> None:
    """A per-layer list `key` that a config re-saved by transformers 5 carries (layer_types, mlp_layer_types:
    transformers 5.25 builds each layer by it where it is given) must equal `want`, the kinds the keys named in
    `source` give, which the vendor's code and vLLM read: a file where they differ is refused, not read one way."""
    kinds = cfg.get(key)
    if kinds is None:
        return
    if not isinstance(kinds, list) or len(kinds) != len(want):
        raise SpecError(f"{origin}: {key}: must list {choices[0]!r} or {choices[1]!r} for each of the {len(want)} "
                        f"layers, got {show(kinds)}")
    for i, (given, kind) in enumerate(zip(kinds, want)):
        if given != kind:
            verb = "make" if " and " in source else "makes"
            raise SpecError(f"{origin}: {key}[{i}]: {show(given)}, but {source} {verb} layer {i} {kind!r}: give them "
                            "alike")


def check_mlp_layer_types(cfg: dict, origin: str, plan: list[str]) -> None:
    """A given mlp_layer_types (DeepseekV32Config, GlmMoeDsaConfig, KimiLinearConfig: derived from
    first_k_dense_replace when absent) must match the plan from first_k_dense_replace and moe_layer_freq."""
    check_layer_list(cfg, origin, "mlp_layer_types", plan, ("dense", "sparse"),
                     f"first_k_dense_replace {show(cfg.get('first_k_dense_replace'))} and moe_layer_freq "
                     f"{show(cfg.get('moe_layer_freq'))}")
