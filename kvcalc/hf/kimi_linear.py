"""Importer of Kimi Linear (model_type kimi_linear): Kimi Delta Attention layers with a constant state, MLA layers
with a growing latent cache, and a DeepSeek-V3-style MoE.

Rules, from the vendor's remote code (moonshotai/Kimi-Linear-48B-A3B-Instruct configuration_kimi.py, modeling_kimi.py)
as vLLM 0.34.0 mirrors it (vllm/transformers_utils/configs/kimi_linear.py; the registry maps KimiLinearForCausalLM to
vllm/models/kimi_k3, its state shapes in kimi_k3/nvidia/model.py; the KDA layer
vllm/model_executor/layers/mamba/gdn/kimi_gdn_linear_attn.py, KimiGatedDeltaNetAttention):
- `linear_attn_config.kda_layers` and `full_attn_layers` list layers 1-based: KimiLinearConfig.is_kda_layer(i) is
  (i + 1) in kda_layers. Kimi-Linear-48B: KDA on 20 layers, MLA on 7 (4, 8, …, 24 and the last, 27).
- KDA layers (KimiDeltaAttention): num_heads heads of head_dim for q, k and v alike; the top-level `head_dim` (72)
  and `num_key_value_heads` are decoys for both KDA and MLA.
- MLA layers (KimiMLAAttention): DeepSeek-V2's MLA without query compression (q_lora_rank null: a plain q_proj);
  `mla_use_nope` means no rotary embedding is applied, but kv_a_proj_with_mqa still emits kv_lora_rank +
  qk_rope_head_dim and the cache holds both (the checkpoint's kv_a_proj_with_mqa is [576, 2304]).
- MoE (KimiMoE) when i >= first_k_dense_replace and i % moe_layer_freq == 0: num_experts experts of
  moe_intermediate_size, top num_experts_per_token, num_shared_experts as one MLP of num_shared_experts ×
  moe_intermediate_size, and a router with e_score_correction_bias; other layers a dense MLP of intermediate_size.
- The context is `model_max_length` (the config has no max_position_embeddings).
"""

from __future__ import annotations

from kvcalc.errors import SpecError
from kvcalc.hf.common import (
    aliased,
    check_layer_list,
    check_mlp_layer_types,
    dense_ffn,
    flag,
    get,
    group_layers,
    importer,
    need,
    show,
    whole,
)

KEYS = {"max_context": "model_max_length", "n_heads": "num_attention_heads (MLA); linear_attn_config.num_heads (KDA)",
        "head_dim": "linear_attn_config.head_dim", "conv_kernel": "linear_attn_config.short_conv_kernel_size"}  # KDA's


def _kda_layers(linear: dict, origin: str, n: int) -> list[bool]:
    """Which layers are KDA, from the 1-based lists; each layer must be in exactly one of them."""
    lists = {}
    for key in ("kda_layers", "full_attn_layers"):
        values = linear.get(key)
        if not isinstance(values, list):
            raise SpecError(f"{origin}: linear_attn_config.{key}: must list 1-based layer numbers, got {show(values)}")
        lists[key] = {whole(v, f"linear_attn_config.{key}[{j}]", origin) for j, v in enumerate(values)}
    kda, full = lists["kda_layers"], lists["full_attn_layers"]
    if kda & full or kda | full != set(range(1, n + 1)):
        raise SpecError(f"{origin}: linear_attn_config: kda_layers and full_attn_layers must split layers 1–{n} "
                        "between them (they are 1-based)")
    return [i + 1 in kda for i in range(n)]


# KimiLinearConfig.attribute_map: the standard names of the fields this config names its own way
KIMI_ALIASES = {"model_max_length": "max_position_embeddings", "num_experts": "num_local_experts",
                "num_experts_per_token": "num_experts_per_tok", "num_shared_experts": "n_shared_experts"}


@importer("kimi_linear", keys=KEYS)
def _kimi_linear(cfg: dict, origin: str, notes: list[str]) -> dict:
    cfg = aliased(cfg, origin, KIMI_ALIASES)
    n = need(cfg, "num_hidden_layers", origin)
    linear = cfg.get("linear_attn_config")
    if not isinstance(linear, dict):
        flat = [k for k in ("layer_types", "linear_num_heads", "linear_head_dim") if k in cfg]
        raise SpecError(f"{origin}: linear_attn_config: required mapping is missing from the config"
                        + (f" ({', '.join(flat)} alone are transformers 5's own reading; vLLM 0.34.0 reads only "
                           "linear_attn_config and without it builds every layer as MLA: give the checkpoint's "
                           "linear_attn_config)" if flat else ""))
    lin_origin = f"{origin}: linear_attn_config"
    kda = {"kind": "kda", "n_heads": need(linear, "num_heads", lin_origin), "head_dim": need(linear, "head_dim", lin_origin),
           "conv_kernel": need(linear, "short_conv_kernel_size", lin_origin),
           # vLLM MambaStateDtypeCalculator.kda_state_dtype: the conv states in the cache dtype, the recurrent state
           # always in float32
           "recurrent_dtype": "fp32"}
    if get(cfg, "q_lora_rank", origin, minimum=0):
        raise SpecError(f"{origin}: q_lora_rank: KimiMLAAttention has no query compression (asserts q_lora_rank is None)")
    mla = {"kind": "mla", "n_heads": need(cfg, "num_attention_heads", origin),
           "kv_lora_rank": need(cfg, "kv_lora_rank", origin), "qk_nope_head_dim": need(cfg, "qk_nope_head_dim", origin),
           "qk_rope_head_dim": need(cfg, "qk_rope_head_dim", origin), "v_head_dim": need(cfg, "v_head_dim", origin)}
    is_kda = _kda_layers(linear, origin, n)
    check_layer_list(cfg, origin, "layer_types", ["linear_attention" if kda else "full_attention" for kda in is_kda],
                     ("linear_attention", "full_attention"), "linear_attn_config's kda_layers and full_attn_layers "
                     "(1-based)")
    first_k = get(cfg, "first_k_dense_replace", origin, minimum=0) or 0
    freq = get(cfg, "moe_layer_freq", origin) or 1  # i % 0 fails in transformers: 0 is refused, absent is 1
    experts = get(cfg, "num_experts", origin, minimum=0)
    moe_layer = [bool(experts) and i >= first_k and i % freq == 0 for i in range(n)]
    if experts:  # transformers 5.25 picks each layer's MLP by mlp_layer_types where a re-saved config has it
        check_mlp_layer_types(cfg, origin, ["sparse" if moe else "dense" for moe in moe_layer])
    dense = dense_ffn(need(cfg, "intermediate_size", origin))
    layers = [{"attention": kda if is_kda[i] else mla, **({} if moe_layer[i] else {"ffn": dense})} for i in range(n)]
    groups = group_layers(layers, n)
    for g in groups:
        g.setdefault("name", "kda" if g["attention"] is kda else "mla")
    if get(cfg, "num_nextn_predict_layers", origin, minimum=0):
        notes.append("multi-token-prediction layers are not counted")
    base = {
        "family": "kimi_linear",
        "d_model": need(cfg, "hidden_size", origin),
        "n_layers": n,
        "vocab_size": need(cfg, "vocab_size", origin),
        "tie_embeddings": flag(cfg, "tie_word_embeddings", origin, False),  # KimiLinearConfig default
        "max_context": need(cfg, "model_max_length", origin, "max_position_embeddings"),
        "layer_groups": groups,
    }
    if not any(moe_layer):
        base["ffn"] = dense
        for g in groups:
            g.pop("ffn", None)
        return base
    shared = get(cfg, "num_shared_experts", origin, minimum=0) or 0
    moe: dict = {"kind": "moe", "n_routed_experts": need(cfg, "num_experts", origin),
                 "n_experts_per_tok": need(cfg, "num_experts_per_token", origin),
                 "moe_d_ff": need(cfg, "moe_intermediate_size", origin),
                 "router_bias": True}  # KimiMoE: gate.e_score_correction_bias, one per expert
    if shared:  # KimiMoE.shared_experts: one MLP of num_shared_experts × moe_intermediate_size
        moe.update(n_shared_experts=1, shared_d_ff=shared * moe["moe_d_ff"])
    base["ffn"] = moe
    return base
