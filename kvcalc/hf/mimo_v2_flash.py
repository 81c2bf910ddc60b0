"""Importer of MiMo-V2-Flash (model_type mimo_v2_flash): sliding-window and full GQA layers with keys of 192 and
values of 128 per head, attention sinks on the sliding layers, and a DeepSeek-V3-style MoE without shared experts.

Rules, from transformers' models/mimo_v2_flash/modeling_mimo_v2_flash.py (MiMoV2FlashAttention,
MiMoV2FlashSparseMoeBlock, MiMoV2FlashTopkRouter), reading the vendor's config keys:
- hybrid_layer_pattern[i]: 1 = sliding-window attention, 0 = full attention (the SGLang team's MiMo-V2-Flash post:
  five SWA layers, then one global layer). Full layers have num_attention_heads / num_key_value_heads (64 / 4),
  sliding layers swa_num_attention_heads / swa_num_key_value_heads (64 / 8); both have head_dim 192 for q and k and
  v_head_dim 128 for v, so a token costs n_kv·(192 + 128) per layer, not 2·n_kv·192. o_proj takes n_h·v_head_dim.
- q/k/v biases only with attention_bias; o_proj never has one.
- A sliding layer sees the `sliding_window_size` previous tokens and itself: W = sliding_window_size + 1 keys (129
  for the published 128; the reference SGLang code, models/mimo_v2.py, passes sliding_window_size as its window_left
  of previous tokens). Without sliding_window_size, `sliding_window` keys, itself included (masking_utils:
  kv_idx > q_idx − W). transformers' port agrees (5.25: MiMoV2FlashConfig sets sliding_window to sliding_window_size
  + 1, the previous tokens and the query); vLLM 0.34.0's mimo_v2.py passes 128 as its window, which counts the query:
  one key fewer, 128. The config's `attention_chunk_size` (128) is not a chunked-attention switch here.
- add_swa_attention_sink_bias: a learned sink logit per query head on the sliding layers (sinks, num_attention_heads);
  add_full_attention_sink_bias likewise on full layers.
- moe_layer_freq[i]: 1 = MoE (n_routed_experts of moe_intermediate_size, top num_experts_per_tok, no shared expert,
  router weight and e_score_correction_bias), 0 = dense MLP of intermediate_size. MTP layers are not counted.
"""

from __future__ import annotations

from kvcalc.errors import SpecError
from kvcalc.hf.common import (
    aliased,
    base_fields,
    check_layer_list,
    dense_ffn,
    flag,
    group_layers,
    heads_attention,
    importer,
    need,
    show,
    whole,
)

# The keys of each layer kind's attention: n_heads, n_kv_heads, head_dim (q and k), v_head_dim.
FULL_KEYS = ("num_attention_heads", "num_key_value_heads", "head_dim", "v_head_dim")
SWA_KEYS = ("swa_num_attention_heads", "swa_num_key_value_heads", "swa_head_dim", "swa_v_head_dim")


def _pattern(cfg: dict, key: str, origin: str, n: int) -> list[int]:
    values = cfg.get(key)
    if not isinstance(values, list) or len(values) != n or any(v not in (0, 1) for v in values):
        raise SpecError(f"{origin}: {key}: must list 0 or 1 for each of {n} layers, got {show(values)}")
    return values


@importer("mimo_v2_flash", keys={"n_kv_heads": "num_key_value_heads (swa_num_key_value_heads on sliding layers)"})
def _mimo_v2_flash(cfg: dict, origin: str, notes: list[str]) -> dict:
    cfg = aliased(cfg, origin, {"n_routed_experts": "num_local_experts"})  # MiMoV2FlashConfig.attribute_map
    base = base_fields(cfg, origin, "mimo_v2_flash", False)
    n = base["n_layers"]
    bias = flag(cfg, "attention_bias", origin, False)
    v_dim = need(cfg, "v_head_dim", origin)

    def heads(keys: tuple[str, str, str, str], sinks: bool) -> dict:
        heads_key, kv_key, dim_key, v_key = keys
        # MiMoV2FlashAttention: getattr(config, "swa_v_head_dim", v_head_dim), so only an absent key means v_head_dim;
        # a null, 0 or false one is refused (it would otherwise pass for head_dim 192 unnoticed)
        v_head = whole(cfg[v_key], v_key, origin) if v_key in cfg else v_dim
        return heads_attention(need(cfg, heads_key, origin), need(cfg, kv_key, origin), need(cfg, dim_key, origin),
                               qkv_bias=bias, v_head_dim=v_head, sinks=sinks)

    full = heads(FULL_KEYS, flag(cfg, "add_full_attention_sink_bias", origin, False))
    swa = heads(SWA_KEYS, flag(cfg, "add_swa_attention_sink_bias", origin, False))
    if cfg.get("sliding_window_size") is not None:  # previous tokens, the query not counted (SGLang's mimo_v2.py)
        window = whole(cfg["sliding_window_size"], "sliding_window_size", origin, minimum=1) + 1
        notes.append(f"sliding_window_size {window - 1}: a sliding layer sees the {window - 1} previous tokens and itself, "
                     f"{window} keys (the reference SGLang code and transformers' port; vLLM 0.34.0 uses {window - 1})")
    else:
        window = need(cfg, "sliding_window", origin)
    sliding = _pattern(cfg, "hybrid_layer_pattern", origin, n)
    moe_layers = _pattern(cfg, "moe_layer_freq", origin, n)
    # a config re-saved by transformers 5 carries the lists it builds by, which vLLM and SGLang do not read
    check_layer_list(cfg, origin, "layer_types", ["sliding_attention" if x else "full_attention" for x in sliding],
                     ("sliding_attention", "full_attention"), "hybrid_layer_pattern")
    check_layer_list(cfg, origin, "mlp_layer_types", ["sparse" if x else "dense" for x in moe_layers],
                     ("dense", "sparse"), "moe_layer_freq")
    dense = dense_ffn(need(cfg, "intermediate_size", origin))
    layers = []
    for i in range(n):
        layer: dict = {"attention": swa if sliding[i] else full}
        if sliding[i]:
            layer["sliding_window"] = window
        if not moe_layers[i]:
            layer["ffn"] = dense
        layers.append(layer)
    base["ffn"] = {
        "kind": "moe",
        "n_routed_experts": need(cfg, "n_routed_experts", origin),
        "n_experts_per_tok": need(cfg, "num_experts_per_tok", origin),
        "moe_d_ff": need(cfg, "moe_intermediate_size", origin),
        "router_bias": True,  # MiMoV2FlashTopkRouter.e_score_correction_bias
    }
    base["layer_groups"] = group_layers(layers, n)
    return base
