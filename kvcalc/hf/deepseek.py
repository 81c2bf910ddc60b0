"""Importer of DeepSeek-V2/V3 (multi-head latent attention, MoE with shared experts and leading dense layers)."""

from __future__ import annotations

from typing import Any

from kvcalc.errors import SpecError
from kvcalc.hf.common import (
    aliased,
    base_fields,
    check_mlp_layer_types,
    dense_ffn,
    flag,
    get,
    group_layers,
    importer,
    need,
    not_null,
    show,
    type_defaults,
    whole,
)

# MoEGate.topk_method in DeepSeek's remote code and DeepseekV2Config / DeepseekV3Config in transformers: greedy
# (DeepSeek-V2-Lite, DeepseekV2Config's default) and group_limited_greedy (DeepSeek-V2) route without a bias;
# noaux_tc (DeepSeek-V3 and its descendants) adds e_score_correction_bias, one per routed expert. "gready" is
# greedy as DeepSeek's own configuration_deepseek.py spells its default (DeepSeek-VL2's MoEGate dispatches on it).
# MoEGate has no branch for any other value, so no model with one runs: refused rather than read as bias-free.
TOPK_METHODS = {"greedy": False, "gready": False, "group_limited_greedy": False, "noaux_tc": True}  # router bias?


def router_bias(cfg: dict, origin: str) -> bool:
    """Whether the router carries e_score_correction_bias, from topk_method (absent: greedy, no bias)."""
    method = cfg.get("topk_method", "greedy")
    if not isinstance(method, str) or method not in TOPK_METHODS:
        raise SpecError(f"{origin}: topk_method: must be one of {', '.join(TOPK_METHODS)}, got {show(method)}")
    return TOPK_METHODS[method]


def indexer_types(cfg: dict, origin: str, n_layers: int) -> list[str]:
    """Each layer's indexer, 'full' (its own) or 'shared' (the previous full layer's top-k, no indexer), as vLLM's
    compute_skip_topk_layers and GlmMoeDsaConfig read them: indexer_types, else index_topk_pattern ('F'/'S'), else
    'full' where max(i − index_skip_topk_offset + 1, 0) % index_topk_freq == 0 (freq 1 by default: every layer)."""
    types = cfg.get("indexer_types")
    if types is None:
        pattern = cfg.get("index_topk_pattern")
        if pattern is not None:
            types = [{"F": "full", "S": "shared"}.get(c, c) for c in pattern] if isinstance(pattern, str) else list(pattern)
        else:
            freq = max(get(cfg, "index_topk_freq", origin) or 1, 1)
            offset = whole(cfg.get("index_skip_topk_offset", 2), "index_skip_topk_offset", origin, minimum=0)  # default 2
            types = ["full" if max(i - offset + 1, 0) % freq == 0 else "shared" for i in range(n_layers)]
    if not isinstance(types, list) or len(types) != n_layers or any(t not in ("full", "shared") for t in types):
        raise SpecError(f"{origin}: indexer_types: must list 'full' or 'shared' for each of {n_layers} layers, got {show(types)}")
    return types


def check_indexer_types(cfg: dict, origin: str, n_layers: int) -> None:
    """Refuse a DSA config whose layers share another's indexer (vLLM builds no indexer, nor its cache, there:
    deepseek_v32/attention.py skip_topk), which kvcalc's MLA cannot state yet."""
    shared = [i for i, t in enumerate(indexer_types(cfg, origin, n_layers)) if t == "shared"]
    if shared:
        raise SpecError(
            f"{origin}: indexer_types: {len(shared)} 'shared' layers reuse another layer's top-k without an indexer of "
            "their own; kvcalc's MLA cannot state that yet (it needs a per-layer flag for a shared indexer)")


@importer("deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2")
def _deepseek(cfg, origin, notes):
    # the config classes' attribute_map: DeepseekV2Config's num_experts, V3's (Kimi K2's, V3.2's, GLM-5's)
    # num_local_experts are n_routed_experts; V3's num_mtp_layers is num_nextn_predict_layers
    v2 = cfg.get("model_type") == "deepseek_v2"
    cfg = aliased(cfg, origin, {"n_routed_experts": "num_experts"} if v2 else
                  {"n_routed_experts": "num_local_experts", "num_nextn_predict_layers": "num_mtp_layers"})
    cfg = type_defaults(cfg, notes)  # the class's q_lora_rank, dense layers, shared experts, router, indexer
    if v2 and "n_shared_experts" not in cfg:  # CONFIG_DEFAULTS' note on why
        notes.append("n_shared_experts absent: no shared expert, as DeepSeek's own code reads it (transformers' "
                     "DeepseekV2Config would build 2)")
    base = base_fields(cfg, origin, "deepseek", False)
    att = {
        "kind": "mla",
        "n_heads": need(cfg, "num_attention_heads", origin),
        "kv_lora_rank": need(cfg, "kv_lora_rank", origin),
        "qk_nope_head_dim": need(cfg, "qk_nope_head_dim", origin),
        "qk_rope_head_dim": need(cfg, "qk_rope_head_dim", origin),
        "v_head_dim": need(cfg, "v_head_dim", origin),
    }
    if any(k in cfg for k in ("index_topk", "index_n_heads", "index_head_dim")):
        # DeepSeek-V3.2 (DeepSeek Sparse Attention): the lightning indexer of every layer (inference/model.py Indexer)
        att.update(index_n_heads=need(cfg, "index_n_heads", origin), index_head_dim=need(cfg, "index_head_dim", origin),
                   index_topk=need(cfg, "index_topk", origin))
        check_indexer_types(cfg, origin, need(cfg, "num_hidden_layers", origin))  # IndexCache's shared layers
    if flag(cfg, "attention_bias", origin):  # DeepseekV3Attention: q_a_proj, kv_a_proj_with_mqa and o_proj take this bias
        raise SpecError(f"{origin}: attention_bias: biases on q_a_proj, kv_a_proj_with_mqa and o_proj are not supported")
    q_rank = get(cfg, "q_lora_rank", origin, minimum=0)
    if q_rank:  # null (HF) or 0 (DeepSeek's own format) both mean no query compression
        att["q_lora_rank"] = q_rank
    first_k = not_null(cfg, "first_k_dense_replace", origin)
    moe: dict[str, Any] = {
        "kind": "moe",
        "n_routed_experts": need(cfg, "n_routed_experts", origin),
        "n_experts_per_tok": need(cfg, "num_experts_per_tok", origin),
        "moe_d_ff": need(cfg, "moe_intermediate_size", origin),
        "n_shared_experts": get(cfg, "n_shared_experts", origin, minimum=0) or 0,
        "first_k_dense": first_k,
    }
    if router_bias(cfg, origin):  # DeepSeek-V3: a learned per-expert bias steers routing
        moe["router_bias"] = True
    freq = get(cfg, "moe_layer_freq", origin) or 1  # i % 0 fails in transformers: 0 is refused, absent is 1
    dense_d_ff = need(cfg, "intermediate_size", origin) if first_k or freq != 1 else 0
    if first_k:  # the leading dense layers' width; moe_layer_freq's dense layers name theirs below
        moe["dense_d_ff"] = dense_d_ff
    layers = []
    for i in range(base["n_layers"]):
        layer: dict = {"attention": att}
        # DeepseekV2DecoderLayer: MoE when i >= first_k_dense_replace and i % moe_layer_freq == 0.
        if i >= first_k and i % freq:
            layer["ffn"] = dense_ffn(dense_d_ff)
        layers.append(layer)
    check_mlp_layer_types(cfg, origin, ["dense" if i < first_k or i % freq else "sparse" for i in range(base["n_layers"])])
    mtp = get(cfg, "num_nextn_predict_layers", origin, minimum=0)
    if mtp:  # DeepSeek-V3 §2.2: counted only with --mtp (plain decoding does not run them)
        notes.append(f"{mtp} multi-token-prediction layer(s): counted only with --mtp (plain decoding does not run them)")
    base["ffn"] = moe
    if mtp:
        base["mtp_layers"] = mtp
    base["layer_groups"] = group_layers(layers, base["n_layers"])
    return base


