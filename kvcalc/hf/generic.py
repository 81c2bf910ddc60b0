"""Any other model_type, safely: a config whose model_type kvcalc does not know is imported as a plain Llama-style
decoder only when every key it holds is a standard one. Keys of mechanisms kvcalc does not model (latent ranks,
linear attention, SSM state, indexers, hybrid patterns, KV sharing, experts, ...) and keys it does not know are
refused by name: a wrong number is worse than none."""

from __future__ import annotations

import re
from collections.abc import Callable

from kvcalc.errors import SpecError
from kvcalc.hf.common import IMPORTERS, LAYER_TYPES, decoder, flag, get, show

# The keys a plain decoder is built from (kvcalc.hf.common.decoder reads these and nothing else; `check` hidden_act).
DECODER_KEYS = frozenset({
    "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size",
    "sliding_window", "layer_types", "use_sliding_window", "max_window_layers", "vocab_size", "max_position_embeddings",
    "attention_bias", "mlp_bias", "tie_word_embeddings", "rms_norm_eps", "layer_norm_eps", "hidden_act",
})
# The activations of Llama's gated FFN (transformers' ACT2FN: both are SiLU), the FFN a plain decoder is built with.
# Another activation may come with another FFN: Jais 2's relu2 and Apertus' xielu have no gate (up and down only: the
# gated count would add a third of the FFN), as Arcee's relu2 (its importer), so those configs are refused, not guessed.
GATED_ACTIVATIONS = frozenset({"silu", "swish"})
# Keys that change neither the cache, the parameters nor the FLOPs kvcalc counts: bookkeeping, token ids, RoPE
# (rotary angles, and how many dims rotate, do not change what is cached), dropout, init, and the storage format of
# the weights (a --weights-dtype choice).
HARMLESS_KEYS = frozenset({
    "architectures", "model_type", "auto_map", "transformers_version", "torch_dtype", "dtype", "_name_or_path",
    "bos_token_id", "eos_token_id", "pad_token_id", "use_cache", "output_attentions", "output_hidden_states",
    "rope_theta", "rope_scaling", "rope_parameters", "partial_rotary_factor", "initializer_range",
    "attention_dropout", "pretraining_tp", "quantization_config",
    # PretrainedConfig's bookkeeping, which a config saved whole (to_dict, not to_diff_dict) carries too
    "return_dict", "id2label", "label2id", "problem_type",
})
# Base-config keys harmless at their PretrainedConfig values only (a whole dump writes them): feed-forward chunking off
# and no encoder; any other value is refused by its mechanism (chunked attention, encoder/cross-attention).
NEUTRAL_VALUES: dict[str, tuple] = {"chunk_size_feed_forward": (0, None), "is_encoder_decoder": (False, None)}
ALLOWED_KEYS = DECODER_KEYS | HARMLESS_KEYS
# A plain decoder cannot be built without these. The others take the rules the warning states: num_key_value_heads
# and head_dim Llama's (n_heads, d / n_heads: a config saved by transformers always writes these keys, which are no
# PretrainedConfig keys, so one without them predates them or was written by hand), tie_word_embeddings
# PretrainedConfig's true before transformers 5 (the one value of it that to_diff_dict left out: 5.x writes it always),
# the biases false.
REQUIRED_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size",
                 "max_position_embeddings")

# Key-name patterns of mechanisms kvcalc does not model for a model_type it does not know, first match wins.
# Experts are here too: kvcalc models MoE, but which layers are sparse, whether intermediate_size is per expert and
# how many shared experts there are differ from one model_type to the next, so guessing would misstate parameters.
MECHANISMS: tuple[tuple[str, str], ...] = (
    (r"lora|latent", "latent attention"),
    (r"linear_", "linear attention"),
    (r"mamba|ssm|state_size|d_state|conv|time_step", "state-space/convolution layers"),
    # the first pattern a key matches names it, so the narrower come first: kv_shared_layer_index is KV sharing, not
    # an indexer; index_topk an indexer, not experts; num_local_experts experts, not a local/global pattern
    (r"kv_shar|shared_kv|kv_reuse|shared_layer", "KV sharing"),
    (r"index", "attention indexer"),
    (r"expert|moe|router|routed|top_?k|sparse_step|mlp_only", "experts/MoE"),
    (r"attn_type|attention_type|block_type|layer_type", "attention-type lists"),
    (r"hybrid|pattern|interval|period|attn_layer|global|local", "hybrid layer patterns"),
    (r"chunk", "chunked attention"),
    (r"nextn|mtp", "multi-token prediction layers"),
    (r"cross_att|encoder|decoder_start", "encoder/cross-attention"),
    (r"window|sink", "other attention-window rules"),
    (r"vision|audio|speech|image|text_config", "other modalities"),
)


def is_generic(cfg: dict) -> bool:
    """True when `cfg` names a model_type no importer knows, so it is imported (or refused) as a plain decoder."""
    model_type = cfg.get("model_type")
    return isinstance(model_type, str) and model_type not in IMPORTERS


def mechanism(key: str) -> str | None:
    """The unmodelled mechanism a config key's name points to, or None."""
    return next((label for pattern, label in MECHANISMS if re.search(pattern, key.lower())), None)


def _refuse(cfg: dict, origin: str, reason: str) -> SpecError:
    return SpecError(f"{origin}: model_type: {show(cfg.get('model_type'))} is not supported; supported model_types: "
                     f"{', '.join(sorted(IMPORTERS))}; {reason}")


def _neutral(key: str, value: object) -> bool:
    """Whether `key` holds its PretrainedConfig value, one of NEUTRAL_VALUES' (0 and False compared as JSON values:
    false is not 0)."""
    return any(value is v or (type(value) is type(v) and value == v) for v in NEUTRAL_VALUES.get(key, ()))


def check(cfg: dict, origin: str) -> None:
    """Raise SpecError unless `cfg` holds only standard decoder keys (and layer_types only sliding/full layers)."""
    unknown = [k for k in cfg if k not in ALLOWED_KEYS and not _neutral(k, cfg[k])]
    found = [f"{k} ({mechanism(k)})" for k in unknown if mechanism(k)]
    types = cfg.get("layer_types")
    if isinstance(types, list):
        others = sorted({str(t) for t in types if t not in LAYER_TYPES})
        if others:
            found.append(f"layer_types ({', '.join(others)})")
    others = [k for k in unknown if not mechanism(k)]
    if found:
        rest = f"; other keys it does not read: {', '.join(others)}" if others else ""
        raise _refuse(cfg, origin, f"its config has keys of mechanisms kvcalc does not model for an unknown model_type: "
                                   f"{', '.join(found)}{rest}; write the model as a YAML spec (model_specs/*.yaml show "
                                   "every field, MoE and MLA included), or give the model_type of the architecture it "
                                   "follows when its keys mean the same")
    if others:
        raise _refuse(cfg, origin, f"its config has keys kvcalc does not read: {', '.join(others)}; an unknown model_type "
                                   "is imported as a plain decoder only when every key is a standard one")
    missing = [k for k in REQUIRED_KEYS if cfg.get(k) is None]
    if missing:
        raise _refuse(cfg, origin, f"a plain decoder needs the standard keys it lacks: {', '.join(missing)}")
    act = cfg.get("hidden_act", "silu")  # absent: LlamaConfig's default
    if not isinstance(act, str) or act not in GATED_ACTIVATIONS:
        raise _refuse(cfg, origin, f"hidden_act {show(act)}: a plain decoder is built with Llama's gated SiLU FFN (gate, "
                                   "up and down), and another activation may come without the gate (relu2 in Jais 2, "
                                   "xielu in Apertus: up and down only); write the model as a YAML spec "
                                   "(ffn gated: true or false), or give the model_type of the architecture it follows")
    if isinstance(types, list) and "sliding_attention" in types and not cfg.get("sliding_window"):
        raise _refuse(cfg, origin, "layer_types has sliding_attention layers but sliding_window is not set")


def _window_rule(cfg: dict, origin: str) -> tuple[Callable[[int], bool], str | None]:
    """Which layers slide when there is no layer_types, and the assumption in words (None: no window assumed)."""
    window, types = cfg.get("sliding_window"), cfg.get("layer_types")
    # use_sliding_window: Qwen2's switch; absent, a given sliding_window applies (Mistral and most others)
    if not _use_window(cfg, origin) or not window or types is not None:
        return (lambda i: True), None
    limit = cfg.get("max_position_embeddings")
    if isinstance(window, int) and isinstance(limit, int) and window >= limit:
        return (lambda i: True), None  # never applies; the decoder leaves it out with a note
    if cfg.get("max_window_layers") is not None:
        # Qwen2's rule, the only one max_window_layers comes from: layers from max_window_layers on slide.
        first = cfg["max_window_layers"]
        return (lambda i: i >= first), f"sliding_window {window} on layers >= max_window_layers {first}"
    return (lambda i: True), f"sliding_window {window} on every layer (no layer_types)"


def _use_window(cfg: dict, origin: str) -> bool:
    """use_sliding_window read as a JSON boolean (absent or null: true), never by truthiness ("false" is refused)."""
    return flag(cfg, "use_sliding_window", origin, True)


def assumption(cfg: dict, origin: str = "config.json") -> str:
    """The one-line statement of what a generic import assumes (a note in the spec and a warning for the user); `cfg`
    has been imported, so its keys are valid (`origin` names the file should one not be)."""
    parts = ["the same attention in every layer", "a gated FFN of intermediate_size",
             "LayerNorm (layer_norm_eps)" if "layer_norm_eps" in cfg and "rms_norm_eps" not in cfg else "RMSNorm"]
    if cfg.get("num_key_value_heads") is None:
        parts.append("MHA (num_key_value_heads absent: Llama's rule, as many KV heads as query heads)")
    if cfg.get("head_dim") is None:
        parts.append("head_dim hidden_size / num_attention_heads (absent: Llama's rule)")
    if "tie_word_embeddings" not in cfg:
        parts.append("tied embeddings (tie_word_embeddings absent: PretrainedConfig's default before transformers 5, "
                     "the value a saved config left out)")
    window = _window_rule(cfg, origin)[1]
    if window:
        parts.append(window)
    return (f"model_type {show(cfg.get('model_type'))} is not known to kvcalc: imported as a plain Llama-style decoder "
            f"from its standard keys ({', '.join(parts)})")


def plain_decoder(cfg: dict, origin: str, notes: list[str]) -> dict:
    """Spec fields of a config of an unknown model_type, or SpecError naming the keys that forbid a generic import."""
    check(cfg, origin)
    cfg = dict(cfg)
    get(cfg, "max_window_layers", origin, minimum=0)  # a whole number, checked before the window rule uses it
    sliding, _ = _window_rule(cfg, origin)
    notes.append(assumption(cfg, origin))
    if cfg.get("sliding_window") and not _use_window(cfg, origin):
        notes.append(f"use_sliding_window is false: sliding_window {show(cfg['sliding_window'])} does not apply")
        cfg["sliding_window"] = None
    body = decoder(cfg, origin, str(cfg["model_type"]), notes, tie_default=True, sliding=sliding,
                   reads=("attention_bias", "mlp_bias"))  # Llama's rule, as the assumption says
    if "layer_norm_eps" in cfg and "rms_norm_eps" not in cfg:
        body["norm"] = "layernorm"
    return body
