"""Importers of dense and MoE decoders with MHA/GQA/MQA attention: Llama, Mistral, Mixtral, Qwen2/3, Gemma 2/3,
Falcon, GPT-2. Each function's comments give the rule it implements and its source."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kvcalc.errors import SpecError
from kvcalc.hf.common import (
    FALCON_DEFAULT_MAX_POSITIONS,
    GEMMA3_TEXT_DEFAULTS,
    QWEN_WINDOW_DEFAULTS,
    aliased,
    base_fields,
    decoder,
    dense_ffn,
    fill_defaults,
    flag,
    get,
    heads_attention,
    importer,
    need,
    show,
    text_part,
    whole,
    with_defaults,
)


@importer("llama")
def _llama(cfg, origin, notes):
    # LlamaConfig has no sliding_window: transformers' Llama slides only where layer_types names sliding layers. vLLM
    # 0.34.0 reads such a key as a model-wide window (arg_utils: CacheConfig.sliding_window where layer_types is
    # None; Attention takes it for a layer given none), so it would slide every layer: noted, not counted
    window = get(cfg, "sliding_window", origin, minimum=0)  # read (its bounds checked) even where it does not apply
    if window and not cfg.get("layer_types"):
        notes.append(f"sliding_window {window} without layer_types does not apply to a Llama model: every layer "
                     "attends its whole context (transformers), as counted; vLLM would slide every layer by it "
                     "(its model-wide CacheConfig.sliding_window), which is not counted")
        cfg = {**cfg, "sliding_window": None}
    # LlamaAttention: q/k/v/o bias=attention_bias; LlamaMLP: gate/up/down bias=mlp_bias
    return decoder(cfg, origin, "llama", notes, reads=("attention_bias", "mlp_bias"))


@importer("arcee")
def _arcee(cfg, origin, notes):
    # ArceeForCausalLM (AFM-4.5B; transformers models/arcee, 5.25): LlamaAttention with q/k/v/o bias=attention_bias;
    # ArceeMLP is up_proj and down_proj (bias=mlp_bias) around its activation (relu2 by default): no gate, whatever
    # hidden_act names. vLLM 0.34.0 runs it through its Transformers backend: the same modules.
    ffn = dense_ffn(need(cfg, "intermediate_size", origin), gated=False, bias=flag(cfg, "mlp_bias", origin, False))
    return decoder(cfg, origin, "arcee", notes, reads=("attention_bias", "mlp_bias"), ffn=ffn)


@importer("cwm")
def _cwm(cfg, origin, notes):
    # CwmForCausalLM (Code World Model; transformers models/cwm, 5.25; vLLM 0.34.0 through its Transformers backend):
    # Llama's decoder with q/k/v/o never biased and MLPs biased by mlp_bias; without layer_types, CwmConfig slides
    # every layer but each fourth (i % 4 == 0: full), over sliding_window keys, the query included (masking_utils)
    cfg = with_defaults(cfg, "cwm", notes)
    return decoder(cfg, origin, "cwm", notes, reads=("mlp_bias",), sliding=lambda i: i % 4 != 0)


@importer("mistral")
def _mistral(cfg, origin, notes):
    cfg = with_defaults(cfg, "mistral", notes)
    # MistralAttention and MistralMLP: bias=False on every projection, whatever the config says
    return decoder(cfg, origin, "mistral", notes, reads=())


@importer("mixtral")
def _mixtral(cfg, origin, notes):
    cfg = with_defaults(aliased(cfg, origin, {"num_local_experts": "num_experts"}), "mixtral", notes)  # attribute_map
    moe: dict[str, Any] = {
        "kind": "moe",
        "n_routed_experts": need(cfg, "num_local_experts", origin),
        "n_experts_per_tok": need(cfg, "num_experts_per_tok", origin),
        "moe_d_ff": need(cfg, "intermediate_size", origin),  # Mixtral: intermediate_size is per expert
    }
    # MixtralAttention: q/k/v/o bias=False (MixtralConfig has no attention_bias)
    return decoder(cfg, origin, "mixtral", notes, reads=(), ffn=moe)


def _qwen(cfg: dict, model_type: str, origin: str, notes: list[str]) -> tuple[dict, Callable[[int], bool]]:
    """Qwen2/3 and Qwen3-MoE: the config with its class defaults, and which layers slide. Windows only when
    use_sliding_window is true (Qwen2Config.__post_init__: sliding_window = None otherwise); then Qwen2/3 slide layers
    >= max_window_layers (their layer_types default; sliding_window 4096 and max_window_layers 28 when left out) and
    Qwen3-MoE every layer (Qwen3MoeAttention reads config.sliding_window whatever the layer; Qwen3MoeConfig has no
    max_window_layers)."""
    cfg = with_defaults(cfg, model_type, notes)
    if not flag(cfg, "use_sliding_window", origin, False):
        if cfg.get("sliding_window"):
            notes.append(f"use_sliding_window is false: sliding_window {show(cfg['sliding_window'])} does not apply")
        cfg["sliding_window"] = None
        cfg.pop("layer_types", None)
        return cfg, lambda i: True
    if model_type == "qwen3_moe":
        cfg = with_defaults(cfg, model_type, notes, {"sliding_window": QWEN_WINDOW_DEFAULTS["sliding_window"]})
        for key in ("max_window_layers", "layer_types"):
            if key in cfg:
                notes.append(f"{key} ignored: Qwen3-MoE's attention slides on every layer")
                cfg.pop(key)
        return cfg, lambda i: True
    cfg = with_defaults(cfg, model_type, notes, QWEN_WINDOW_DEFAULTS)
    first = get(cfg, "max_window_layers", origin, minimum=0) or 0
    return cfg, lambda i: i >= first


@importer("qwen2")
def _qwen2(cfg, origin, notes):
    # Qwen2Attention: q/k/v bias=True and o_proj bias=False, whatever attention_bias says; Qwen2MLP: no bias
    cfg, sliding = _qwen(cfg, "qwen2", origin, notes)
    return decoder(cfg, origin, "qwen2", notes, qkv_bias=True, reads=(), sliding=sliding)


@importer("qwen3")
def _qwen3(cfg, origin, notes):
    cfg, sliding = _qwen(cfg, "qwen3", origin, notes)
    return decoder(cfg, origin, "qwen3", notes, qk_norm=True, sliding=sliding)


@importer("qwen3_moe")
def _qwen3_moe(cfg, origin, notes):
    # transformers 5.x's Qwen3MoeConfig (and Qwen3-VL-MoE's text config) store num_experts as num_local_experts
    cfg = aliased(cfg, origin, {"num_experts": "num_local_experts"})
    cfg, sliding = _qwen(cfg, "qwen3_moe", origin, notes)
    moe: dict[str, Any] = {
        "kind": "moe",
        "n_routed_experts": need(cfg, "num_experts", origin),
        "n_experts_per_tok": need(cfg, "num_experts_per_tok", origin),
        "moe_d_ff": need(cfg, "moe_intermediate_size", origin),
    }
    only = cfg.get("mlp_only_layers") or []
    if not isinstance(only, list):
        raise SpecError(f"{origin}: mlp_only_layers: must be a list of layer indices, got {show(only)}")
    dense_layers = {whole(i, f"mlp_only_layers[{j}]", origin, minimum=0) for j, i in enumerate(only)}
    step = get(cfg, "decoder_sparse_step", origin, minimum=1) or 1  # HF: (i + 1) % step, so 0 cannot load

    # Qwen3MoeDecoderLayer: sparse unless listed in mlp_only_layers or off the decoder_sparse_step grid.
    def layer_ffn(i):
        if i in dense_layers or (i + 1) % step:
            return dense_ffn(need(cfg, "intermediate_size", origin))
        return None

    return decoder(cfg, origin, "qwen3", notes, qk_norm=True, sliding=sliding, ffn=moe, layer_ffn=layer_ffn)


def _causal(cfg: dict, origin: str) -> None:
    """Refuse a Gemma 2/3 config with use_bidirectional_attention true (EmbeddingGemma): its attention is not causal
    (Gemma2Attention/Gemma3Attention: is_causal = not use_bidirectional_attention), an encoder with no KV cache."""
    if flag(cfg, "use_bidirectional_attention", origin, False):
        raise SpecError(f"{origin}: use_bidirectional_attention: true makes a bidirectional encoder (an embedding model "
                        "such as EmbeddingGemma), not a causal decoder with a KV cache")


@importer("gemma2")
def _gemma2(cfg, origin, notes):
    _causal(cfg, origin)
    cfg = with_defaults(cfg, "gemma2", notes)
    # Gemma2: even layers are local (sliding), odd layers global.
    # Gemma 2/3 layers have four norms: before and after attention, before and after the FFN.
    return decoder(cfg, origin, "gemma2", notes, tie_default=True, norms_per_layer=4, sliding=lambda i: i % 2 == 0)


@importer("gemma3", "gemma3_text", text_config=True)
def _gemma3(cfg, origin, notes):
    if (text := text_part(cfg, origin)) is not None:
        cfg = {**text}
        notes.append("text model read from text_config (vision tower not counted)")
    _causal(cfg, origin)
    if "sliding_window" in cfg and cfg["sliding_window"] is None:  # as common.decoder notes it for Mistral's
        notes.append(f"sliding_window null read as no window (Gemma3TextConfig's default, "
                     f"{GEMMA3_TEXT_DEFAULTS['sliding_window']}, does not apply): every layer attends its whole context")
    cfg = fill_defaults(cfg, GEMMA3_TEXT_DEFAULTS, "Gemma3TextConfig", notes)
    # null: the other spelling, then Gemma3TextConfig's 6; 0 is refused (no layer would be global: (i + 1) % 0 fails)
    pattern = get(cfg, "sliding_window_pattern", origin) or get(cfg, "_sliding_window_pattern", origin) or 6
    # Gemma 3: layer i is global when (i + 1) % pattern == 0, local (sliding) otherwise (FACTS.md §1.2).
    return decoder(cfg, origin, "gemma3", notes, tie_default=True, qk_norm=True, norms_per_layer=4,
                    sliding=lambda i: (i + 1) % pattern != 0)


@importer("falcon", keys={"n_kv_heads": "multi_query / num_kv_heads"})
def _falcon(cfg, origin, notes):
    # FalconConfig reads the legacy n_embed (over hidden_size); n_layer and n_head are the RefinedWeb names
    cfg = aliased(cfg, origin, {"hidden_size": "n_embed", "num_hidden_layers": "n_layer", "num_attention_heads": "n_head"})
    if cfg.get("max_position_embeddings") is None:
        cfg["max_position_embeddings"] = FALCON_DEFAULT_MAX_POSITIONS
        notes.append(f"no max_position_embeddings in the config: FalconConfig default {FALCON_DEFAULT_MAX_POSITIONS} used")
    if cfg.get("head_dim") is not None:  # FalconAttention: head_dim = hidden_size // num_heads, always (the config's
        # head_dim is a read-only property of those two; vLLM's falcon.py alike)
        notes.append(f"head_dim {show(cfg['head_dim'])} ignored: Falcon's heads are hidden_size / num_attention_heads wide")
        cfg["head_dim"] = None
    base = base_fields(cfg, origin, "falcon", True)
    base["norm"] = "layernorm"
    parallel, new_arch = flag(cfg, "parallel_attn", origin, True), flag(cfg, "new_decoder_architecture", origin)
    # FalconDecoderLayer: num_ln_in_parallel_attn defaults to 2 (ln_attn, ln_mlp) with the new architecture; a
    # parallel layer with any other count has one input_layernorm feeding both (Falcon-7B; Falcon2-11B sets 1)
    n_ln = get(cfg, "num_ln_in_parallel_attn", origin) or (2 if new_arch else None)
    if parallel and n_ln != 2:
        base["norms_per_layer"] = 1  # one LayerNorm feeds both the attention and the FFN
    if parallel or new_arch:
        base["parallel_attn"] = True  # attention and FFN outputs summed, then one all-reduce (vLLM FalconAttention)
    n_heads = need(cfg, "num_attention_heads", origin)
    if new_arch:
        n_kv = get(cfg, "num_kv_heads", origin) or n_heads
    elif flag(cfg, "multi_query", origin, True):  # FalconConfig default: true
        # multi_query: true means one shared K/V head, whatever num_kv_heads says (FACTS.md §5.1).
        n_kv = 1
        if cfg.get("num_kv_heads") not in (None, 1):
            notes.append(f"multi_query is true: one KV head (num_kv_heads {show(cfg['num_kv_heads'])} ignored)")
    else:
        n_kv = n_heads
    d = base["d_model"]
    base["ffn"] = dense_ffn(get(cfg, "ffn_hidden_size", origin) or 4 * d, gated=False, bias=flag(cfg, "bias", origin))
    bias = flag(cfg, "bias", origin)
    base["layer_groups"] = [{"layers": "all", "attention": heads_attention(n_heads, n_kv, get(cfg, "head_dim", origin), qkv_bias=bias, o_bias=bias)}]
    return base


GPT2_ALIASES = {"n_embd": "hidden_size", "n_layer": "num_hidden_layers", "n_head": "num_attention_heads",
                "n_positions": "max_position_embeddings"}  # GPT2Config.attribute_map


@importer("gpt2", keys={"d_model": "n_embd", "n_layers": "n_layer", "n_heads": "n_head", "max_context": "n_positions"})
def _gpt2(cfg, origin, notes):
    cfg = aliased(cfg, origin, GPT2_ALIASES)
    base: dict[str, Any] = {
        "family": "gpt2",
        "d_model": need(cfg, "n_embd", origin),
        "n_layers": need(cfg, "n_layer", origin),
        "vocab_size": need(cfg, "vocab_size", origin),
        "tie_embeddings": flag(cfg, "tie_word_embeddings", origin, True),
        "max_context": need(cfg, "n_positions", origin),
        "norm": "layernorm",
        "learned_positions": True,
    }
    n_heads = need(cfg, "n_head", origin)
    base["ffn"] = dense_ffn(get(cfg, "n_inner", origin) or 4 * base["d_model"], gated=False, bias=True)
    base["layer_groups"] = [{"layers": "all", "attention": heads_attention(n_heads, n_heads, None, qkv_bias=True, o_bias=True)}]
    return base


