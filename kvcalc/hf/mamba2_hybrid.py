"""Importers of hybrid decoders with Mamba-2 mixers in transformers' `mamba_*` spelling: Falcon-H1 (attention and
Mamba-2 side by side in every layer) and Granite 4.0 hybrids (granitemoehybrid: one mixer per layer, Mamba-2 or
attention, then a MoE plus a shared MLP). Each rule names the code it follows.

Sources (transformers, models/falcon_h1/ and models/granitemoehybrid/): FalconH1Config and GraniteMoeHybridConfig
(their defaults and __post_init__/validate_architecture), FalconH1DecoderLayer, FalconH1Mixer, FalconH1Attention
(LlamaAttention), FalconH1MLP (LlamaMLP), GraniteMoeHybridDecoderLayer, GraniteMoeHybridMambaLayer (BambaMixer),
GraniteMoeHybridAttention (GraniteMoeSharedAttention), GraniteMoeHybridMoE (GraniteMoeMoE) and GraniteMoeSharedMLP.
"""

from __future__ import annotations

from typing import Any

from kvcalc.errors import SpecError
from kvcalc.hf.common import (
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
)

# FalconH1Config defaults of the Mamba keys, filled in when a config leaves them out, as transformers does. Note
# mamba_d_ssm: absent means 1024, null means mamba_expand · hidden_size (FalconH1Mixer.intermediate_size).
FALCON_H1_DEFAULTS: dict[str, Any] = {
    "mamba_d_ssm": 1024, "mamba_n_heads": 128, "mamba_d_head": "auto", "mamba_n_groups": 1, "mamba_d_state": 256,
    "mamba_d_conv": 4, "mamba_expand": 2, "mamba_conv_bias": True, "mamba_proj_bias": False, "mamba_rms_norm": False,
    "projectors_bias": False, "num_key_value_heads": 8,
}
# GraniteMoeHybridConfig.__init__ defaults of the keys particular to it.
GRANITE_DEFAULTS: dict[str, Any] = {
    "mamba_n_heads": 128, "mamba_n_groups": 1, "mamba_d_state": 256, "mamba_d_head": "auto", "mamba_d_conv": 4,
    "mamba_expand": 2, "mamba_conv_bias": True, "mamba_proj_bias": False, "num_local_experts": 8,
    "num_experts_per_tok": 2, "shared_intermediate_size": 1024, "max_position_embeddings": 2048,
}
GRANITE_LAYER_TYPES = ("mamba", "attention", "linear_attention", "full_attention")
# transformers 5.x names the layer types linear_attention (the Mamba-2 mixer) and full_attention (4.x: mamba, attention)
GRANITE_V5_NAMES = {"linear_attention": "mamba", "full_attention": "attention"}
# the config keys of _mamba2's fields (FalconH1Config and GraniteMoeHybridConfig alike), for --explain
MAMBA2_KEYS = {"mamba_num_heads": "mamba_n_heads", "mamba_head_dim": "mamba_d_head (\"auto\": the mixer's width / mamba_n_heads)",
               "ssm_state_size": "mamba_d_state", "n_groups": "mamba_n_groups", "conv_kernel": "mamba_d_conv"}


def _mamba2(cfg: dict, origin: str, d_inner: int, inner_key: str, *, use_bias: bool, gated_norm: bool) -> dict:
    """The Mamba-2 mixer of both families (FalconH1Mixer, BambaMixer): H = mamba_n_heads heads of P = mamba_d_head
    channels over d_inner; "auto" P is d_inner // H, and H·P must equal d_inner (both configs' validation)."""
    n_heads = need(cfg, "mamba_n_heads", origin)
    head = cfg.get("mamba_d_head")
    head_dim = d_inner // n_heads if head == "auto" else need(cfg, "mamba_d_head", origin)
    if head_dim * n_heads != d_inner:
        got = f"\"auto\" ({d_inner} // {n_heads} = {head_dim})" if head == "auto" else show(head)
        raise SpecError(f"{origin}: mamba_d_head: {got} × mamba_n_heads {n_heads} must equal the mixer's width "
                        f"{d_inner} ({inner_key}), as the model's config checks")
    return {
        "kind": "mamba2",
        "mamba_num_heads": n_heads,
        "mamba_head_dim": head_dim,
        "ssm_state_size": need(cfg, "mamba_d_state", origin),
        "n_groups": need(cfg, "mamba_n_groups", origin),
        "conv_kernel": need(cfg, "mamba_d_conv", origin),
        "use_conv_bias": flag(cfg, "mamba_conv_bias", origin),  # conv1d bias=mamba_conv_bias
        "use_bias": use_bias,
        "gated_norm": gated_norm,
    }


@importer("falcon_h1", keys={"head_dim": "head_dim (else hidden_size / num_attention_heads)", **MAMBA2_KEYS})
def _falcon_h1(cfg, origin, notes):
    cfg = fill_defaults(cfg, FALCON_H1_DEFAULTS, "FalconH1Config", notes)
    # FalconH1Config.layers_block_type is "hybrid" for every layer and the decoder layer builds both mixers; older
    # configs carry attn_layer_indices (null) and mamba_use_mlp (true), which today's code does not read: anything
    # else would describe another layout, refused rather than guessed.
    if cfg.get("attn_layer_indices") is not None:
        raise SpecError(f"{origin}: attn_layer_indices: FalconH1DecoderLayer runs attention in every layer; a list of "
                        f"attention layers ({show(cfg['attn_layer_indices'])}) is not supported")
    if not flag(cfg, "mamba_use_mlp", origin, True):
        raise SpecError(f"{origin}: mamba_use_mlp: FalconH1DecoderLayer always has its MLP; false is not supported")
    if cfg.get("sliding_window"):
        raise SpecError(f"{origin}: sliding_window: FalconH1Attention has no window")
    base = base_fields(cfg, origin, "falcon_h1", False)
    d = base["d_model"]
    # FalconH1Attention (LlamaAttention): head_dim = config.head_dim, else hidden_size // num_attention_heads;
    # q/k/v/o bias=attention_bias; num_key_value_heads null means num_attention_heads (FalconH1Config.__post_init__)
    n_heads = need(cfg, "num_attention_heads", origin)
    bias = flag(cfg, "attention_bias", origin)
    att = heads_attention(n_heads, get(cfg, "num_key_value_heads", origin) or n_heads, get(cfg, "head_dim", origin),
                          qkv_bias=bias, o_bias=bias)
    # FalconH1Mixer: intermediate_size = mamba_d_ssm, or mamba_expand · hidden_size when mamba_d_ssm is null;
    # in_proj bias=mamba_proj_bias but out_proj bias=projectors_bias (kvcalc's mamba2 has one flag for both)
    if cfg.get("mamba_d_ssm") is None:
        d_inner, inner_key = need(cfg, "mamba_expand", origin) * d, "mamba_expand × hidden_size"
    else:
        d_inner, inner_key = need(cfg, "mamba_d_ssm", origin), "mamba_d_ssm"
    in_bias, out_bias = flag(cfg, "mamba_proj_bias", origin), flag(cfg, "projectors_bias", origin)
    if in_bias != out_bias:
        raise SpecError(f"{origin}: mamba_proj_bias ({in_bias}) and projectors_bias ({out_bias}): in_proj and out_proj "
                        "biases that differ are not supported")
    # the gated RMSNorm (FalconH1RMSNormGated, a weight of d_inner) exists only when mamba_rms_norm is true
    mamba = _mamba2(cfg, origin, d_inner, inner_key, use_bias=in_bias, gated_norm=flag(cfg, "mamba_rms_norm", origin))
    # FalconH1DecoderLayer: input_layernorm, then Mamba-2 and attention on the same input, outputs summed (the
    # *_multiplier keys scale activations, not weights); pre_ff_layernorm and FalconH1MLP (LlamaMLP: gate, up and
    # down of intermediate_size, bias=mlp_bias). FalconH1Model: final_layernorm; lm_head as tie_word_embeddings says.
    base["ffn"] = dense_ffn(need(cfg, "intermediate_size", origin), bias=flag(cfg, "mlp_bias", origin))
    base["layer_groups"] = [{"layers": "all", "attention": att, "parallel_mixer": mamba}]
    return base


def _granite_layers(cfg: dict, origin: str, n_layers: int) -> list[str]:
    """GraniteMoeHybridConfig.layers_block_type: `layer_types` (mamba or attention per layer; transformers 5.x:
    linear_attention or full_attention), all mamba when absent."""
    types = layer_types(cfg, origin, n_layers, GRANITE_LAYER_TYPES)
    return [GRANITE_V5_NAMES.get(t, t) for t in types] if types is not None else ["mamba"] * n_layers


@importer("granitemoehybrid", keys={"head_dim": "hidden_size / num_attention_heads", **MAMBA2_KEYS})
def _granitemoehybrid(cfg, origin, notes):
    if "max_position_embeddings" not in cfg:  # SGLang 0.5.23 reads the file with its own class (srt/configs/granitemoehybrid.py)
        notes.append("max_position_embeddings absent: transformers' GraniteMoeHybridConfig takes 2048 (used here), "
                     "SGLang's own class 131072 (give a spec's max_context to match it)")
    cfg = fill_defaults(cfg, GRANITE_DEFAULTS, "GraniteMoeHybridConfig", notes)
    if cfg.get("position_embedding_type") not in (None, "rope", "nope"):
        raise SpecError(f"{origin}: position_embedding_type: must be null, \"rope\" or \"nope\", got "
                        f"{show(cfg['position_embedding_type'])}")
    if cfg.get("sliding_window"):
        raise SpecError(f"{origin}: sliding_window: GraniteMoeHybridAttention has no window")
    base = base_fields(cfg, origin, "granitemoehybrid", False)
    d, n = base["d_model"], base["n_layers"]
    types = _granite_layers(cfg, origin, n)
    # GraniteMoeHybridAttention (GraniteMoeAttention): head_dim = hidden_size // num_attention_heads; q/k/v/o
    # bias=attention_bias. A head_dim key is not read by every version of that code: one that differs is refused.
    n_heads = need(cfg, "num_attention_heads", origin)
    head_dim = d // n_heads
    if get(cfg, "head_dim", origin) not in (None, head_dim):
        raise SpecError(f"{origin}: head_dim: GraniteMoeHybridAttention uses hidden_size // num_attention_heads "
                        f"({head_dim}); head_dim {cfg['head_dim']} is not supported")
    bias = flag(cfg, "attention_bias", origin)
    att = heads_attention(n_heads, get(cfg, "num_key_value_heads", origin) or n_heads, head_dim, qkv_bias=bias, o_bias=bias)
    # BambaMixer: intermediate = mamba_expand · hidden_size; in_proj and out_proj bias=mamba_proj_bias; its
    # gated RMSNorm (BambaRMSNormGated over d_inner) always exists
    d_inner = need(cfg, "mamba_expand", origin) * d
    mamba = _mamba2(cfg, origin, d_inner, "mamba_expand × hidden_size", use_bias=flag(cfg, "mamba_proj_bias", origin),
                    gated_norm=True)
    base["layer_groups"] = group_layers([{"attention": att if t == "attention" else mamba} for t in types], n)
    for g in base["layer_groups"]:
        g["name"] = g["attention"]["kind"] if g["attention"]["kind"] == "mamba2" else "attention"
    # GraniteMoeHybridDecoderLayer: input_layernorm, the mixer, post_attention_layernorm, then
    # block_sparse_moe(x) + shared_mlp(x); no MoE when num_local_experts is 0 ("Allow non-MoE (dense)"), the
    # shared MLP alone. GraniteMoeSharedMLP: input_linear d × 2·shared_intermediate_size and output_linear, no bias
    # (gated). GraniteMoeMoE: per expert input_linear d × 2·intermediate_size and output_linear (gated, no bias),
    # router GraniteMoeTopKGating Linear(d, num_local_experts, bias=False).
    shared = need(cfg, "shared_intermediate_size", origin)
    experts = get(cfg, "num_local_experts", origin, minimum=0) or 0
    if experts == 0:
        base["ffn"] = dense_ffn(shared)
        return base
    base["ffn"] = {
        "kind": "moe",
        "n_routed_experts": experts,
        "n_experts_per_tok": need(cfg, "num_experts_per_tok", origin),
        "moe_d_ff": need(cfg, "intermediate_size", origin),
        "n_shared_experts": 1,
        "shared_d_ff": shared,
    }
    return base
