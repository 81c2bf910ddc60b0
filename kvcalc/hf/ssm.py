"""Importers of hybrid decoders with state-space layers: Jamba (Mamba-1 and attention, dense and MoE FFNs) and
Nemotron-H (one mixer per block: Mamba-2, attention, MLP or MoE). Each rule names the code it follows."""

from __future__ import annotations

from typing import Any

from kvcalc.errors import SpecError
from kvcalc.hf.common import (
    aliased,
    base_fields,
    dense_ffn,
    flag,
    get,
    group_layers,
    heads_attention,
    importer,
    need,
    show,
    torch_dtype,
    with_defaults,
)

NO_FFN: dict = {"kind": "none"}


def _period(cfg: dict, origin: str, period_key: str, offset_key: str) -> tuple[int, int]:
    period, offset = need(cfg, period_key, origin), get(cfg, offset_key, origin, minimum=0)
    if offset is None:  # left out, JambaConfig's default is filled in; a null names no layer
        raise SpecError(f"{origin}: {offset_key}: must be a whole number below {period_key} ({period}), got null")
    if offset >= period:  # JambaConfig._check_supported_offset
        raise SpecError(f"{origin}: {offset_key}: {offset} must be smaller than {period_key} ({period})")
    return period, offset


@importer("jamba", keys={k: k for k in ("mamba_d_state", "mamba_d_conv", "mamba_expand")})
def _jamba(cfg, origin, notes):
    cfg = with_defaults(aliased(cfg, origin, {"num_experts": "num_local_experts"}), "jamba", notes)  # attribute_map
    base = base_fields(cfg, origin, "jamba", False)
    # JambaAttention: head_dim = hidden_size // num_attention_heads, no biases
    n_heads = need(cfg, "num_attention_heads", origin)
    att = heads_attention(n_heads, get(cfg, "num_key_value_heads", origin) or n_heads, None)
    dt_rank = cfg.get("mamba_dt_rank", "auto")
    mamba: dict[str, Any] = {
        "kind": "mamba",
        "mamba_d_state": need(cfg, "mamba_d_state", origin),
        "mamba_d_conv": need(cfg, "mamba_d_conv", origin),
        "mamba_expand": need(cfg, "mamba_expand", origin),
        # JambaConfig: "auto" means ceil(hidden_size / 16), what the kind computes when the field is absent
        **({} if dt_rank == "auto" else {"mamba_dt_rank": need(cfg, "mamba_dt_rank", origin)}),
        "mamba_conv_bias": flag(cfg, "mamba_conv_bias", origin, True),
        "mamba_proj_bias": flag(cfg, "mamba_proj_bias", origin, False),
        "inner_norms": True,  # JambaMambaMixer always has dt_layernorm, b_layernorm, c_layernorm
    }
    if cfg.get("sliding_window"):
        raise SpecError(f"{origin}: sliding_window: a window on Jamba's attention layers is not supported")
    attn_period, attn_offset = _period(cfg, origin, "attn_layer_period", "attn_layer_offset")
    expert_period, expert_offset = _period(cfg, origin, "expert_layer_period", "expert_layer_offset")
    n_experts = need(cfg, "num_experts", origin)
    moe = {"kind": "moe", "n_routed_experts": n_experts, "n_experts_per_tok": need(cfg, "num_experts_per_tok", origin),
           "moe_d_ff": need(cfg, "intermediate_size", origin)}  # JambaSparseMoeBlock: JambaMLP(config) per expert
    layers = []
    for i in range(base["n_layers"]):
        # JambaConfig.layers_block_type: attention when i % attn_layer_period == attn_layer_offset, else mamba
        layer: dict[str, Any] = {"attention": att if i % attn_period == attn_offset else mamba}
        # JambaConfig.layers_num_experts: num_experts when i % expert_layer_period == expert_layer_offset, else 1;
        # the decoder layers use JambaSparseMoeBlock when that is > 1, else JambaMLP
        if n_experts > 1 and i % expert_period == expert_offset:
            layer["ffn"] = moe
        layers.append(layer)
    # JambaMLP: gate, up and down projections of intermediate_size, no bias
    base["ffn"] = dense_ffn(need(cfg, "intermediate_size", origin))
    base["layer_groups"] = group_layers(layers, base["n_layers"])
    return base


# NemotronHConfig._pattern_to_list: one character per block; layers_block_type's names (new and legacy) alike
_BLOCKS = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
_BLOCK_NAMES = {"mamba": "mamba", "linear_attention": "mamba", "attention": "attention", "full_attention": "attention",
                "mlp": "mlp", "moe": "moe"}


def _nemotron_blocks(cfg: dict, origin: str) -> list[str]:
    """The block types, from hybrid_override_pattern (the published configs) or layers_block_type (newer ones)."""
    pattern = cfg.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        bad = sorted({c for c in pattern if c not in _BLOCKS})
        if bad:
            raise SpecError(f"{origin}: hybrid_override_pattern: unknown block {show(bad[0])}: use M (Mamba-2), * (attention), "
                            "- (MLP) or E (MoE)")
        return [_BLOCKS[c] for c in pattern]
    types = cfg.get("layers_block_type")
    if isinstance(types, list) and types and all(t in _BLOCK_NAMES for t in types):
        return [_BLOCK_NAMES[t] for t in types]
    raise SpecError(f"{origin}: hybrid_override_pattern: required (a string of M, *, - and E, one per block)")


def _nemotron_moe(cfg: dict, origin: str) -> dict:
    # NemotronHMoE: routed NemotronHExperts (up and down, no gate), one shared NemotronHMLP of
    # moe_shared_expert_intermediate_size, and NemotronHTopkRouter (DeepseekV3TopkRouter: e_score_correction_bias)
    cfg = aliased(cfg, origin, {"n_routed_experts": "num_local_experts"})  # NemotronHConfig.attribute_map
    if flag(cfg, "mlp_bias", origin, False):  # the shared expert is a NemotronHMLP: up/down bias=mlp_bias
        raise SpecError(f"{origin}: mlp_bias: biases on an MoE block's shared expert are not supported (its MLP blocks "
                        "take them)")
    if cfg.get("moe_latent_size") is not None:
        raise SpecError(f"{origin}: moe_latent_size: the latent expert projections (fc1/fc2_latent_proj) are not supported")
    return {"kind": "moe", "n_routed_experts": need(cfg, "n_routed_experts", origin),
            "n_experts_per_tok": need(cfg, "num_experts_per_tok", origin),
            "moe_d_ff": need(cfg, "moe_intermediate_size", origin), "n_shared_experts": 1,
            "shared_d_ff": need(cfg, "moe_shared_expert_intermediate_size", origin), "gated": False, "router_bias": True}


# NemotronHConfig's Mamba-2 keys (the legacy mamba_* names where __post_init__ reads them)
NEMOTRON_MAMBA_KEYS = {"mamba_num_heads": "mamba_num_heads", "mamba_head_dim": "mamba_head_dim",
                       "ssm_state_size": "ssm_state_size", "n_groups": "n_groups (or mamba_n_groups)",
                       "conv_kernel": "conv_kernel (or mamba_d_conv)"}


@importer("nemotron_h", keys={"n_layers": "hybrid_override_pattern (one block per character)",
                             "head_dim": "head_dim / attention_head_dim", **NEMOTRON_MAMBA_KEYS})
def _nemotron_h(cfg, origin, notes):
    blocks = _nemotron_blocks(cfg, origin)
    if cfg.get("num_hidden_layers") not in (None, len(blocks)):
        # NemotronHConfig.num_hidden_layers: the count comes from the pattern (a mismatch is only warned about)
        notes.append(f"num_hidden_layers {show(cfg['num_hidden_layers'])} differs from the pattern's {len(blocks)} blocks: "
                     "the pattern is used")
    cfg = {**with_defaults(cfg, "nemotron_h", notes), "num_hidden_layers": len(blocks)}
    base = base_fields(cfg, origin, "nemotron_h", False)
    mtp = get(cfg, "num_nextn_predict_layers", origin, minimum=0)
    if mtp:  # vLLM 0.34.0 runs them as NemotronHMTPModel, blocks of mtp_hybrid_override_pattern: not modelled here
        notes.append(f"{mtp} multi-token-prediction layer(s) (mtp_hybrid_override_pattern "
                     f"{show(cfg.get('mtp_hybrid_override_pattern'))}) are not counted, even with --mtp")
    # NemotronHBlock: one RMSNorm, then its one mixer, then the residual add: a block is a layer with one norm,
    # and either a mixer (Mamba-2 or attention) and no FFN, or no mixer and an FFN (MLP or MoE)
    base["norms_per_layer"] = 1
    if cfg.get("sliding_window"):
        raise SpecError(f"{origin}: sliding_window: a window on Nemotron-H's attention blocks is not supported")
    kinds: dict[str, dict] = {}
    use_bias = flag(cfg, "use_bias", origin, False)  # NemotronHMamba2Mixer: in_proj/out_proj bias=config.use_bias
    if "mamba_proj_bias" in cfg and flag(cfg, "mamba_proj_bias", origin) != use_bias:
        word = {True: "true", False: "false"}
        raise SpecError(f"{origin}: mamba_proj_bias: {word[not use_bias]}, but use_bias is {word[use_bias]} "
                        "(the mixer's in_proj and out_proj read use_bias): give them alike")
    if "mamba" in blocks:
        kinds["mamba"] = {  # NemotronHMamba2Mixer; NemotronHConfig.__post_init__ reads the legacy mamba_* names too
            "kind": "mamba2",
            "mamba_num_heads": need(cfg, "mamba_num_heads", origin),
            "mamba_head_dim": need(cfg, "mamba_head_dim", origin),
            "ssm_state_size": need(cfg, "ssm_state_size", origin),
            "n_groups": need(cfg, "n_groups", origin, "mamba_n_groups"),
            "conv_kernel": need(cfg, "conv_kernel", origin, "mamba_d_conv"),
            "use_conv_bias": flag(cfg, "use_conv_bias", origin, flag(cfg, "mamba_conv_bias", origin, True)),
            "use_bias": use_bias,
            # vLLM's NemotronHForCausalLMConfig: the SSM state is kept in the config's mamba_ssm_cache_dtype, float32
            # when absent (DEFAULT_MAMBA_SSM_CACHE_DTYPE; transformers' NemotronHConfig has the same default)
            "recurrent_dtype": torch_dtype(cfg, "mamba_ssm_cache_dtype", origin) or "fp32",
        }
        given = cfg.get("mamba_ssm_cache_dtype")
        notes.append(f"mamba_ssm_cache_dtype {given or 'absent (float32, the default)'}: the Mamba-2 SSM state is stored "
                     f"in {kinds['mamba']['recurrent_dtype']}, as vLLM does, the conv state in the KV dtype; --state-dtype "
                     "stores both in one dtype")
        # SGLang 0.5.23 never reads that key: srt/configs/mamba_utils.py mamba2_state_dtype takes SGLANG_MAMBA_SSM_DTYPE,
        # else the config's mamba_ssm_dtype, else float32
        sglang = torch_dtype(cfg, "mamba_ssm_dtype", origin) or "fp32"
        if sglang != kinds["mamba"]["recurrent_dtype"]:
            notes.append(f"SGLang keeps this SSM state in {sglang} (it reads mamba_ssm_dtype, not mamba_ssm_cache_dtype): "
                         f"kvcalc counts {kinds['mamba']['recurrent_dtype']} under every engine")
    if "attention" in blocks:
        # NemotronHAttention (JambaAttention with config.head_dim; the published remote code's attention_head_dim)
        n_heads = need(cfg, "num_attention_heads", origin)
        # neither key: NemotronHConfig's head_dim default, 128
        head_dim = get(cfg, "head_dim", origin) or get(cfg, "attention_head_dim", origin) or 128
        # q/k/v/o bias=False whatever attention_bias says (transformers 5.25 NemotronHAttention, vLLM 0.34.0 likewise)
        if flag(cfg, "attention_bias", origin, False):
            notes.append("attention_bias true ignored: Nemotron-H's attention projections have no bias")
        kinds["attention"] = heads_attention(n_heads, get(cfg, "num_key_value_heads", origin) or n_heads, head_dim)
    layers: list[dict] = []
    for block in blocks:
        if block in ("mamba", "attention"):
            layers.append({"attention": kinds[block]})  # the model's ffn: none
        elif block == "mlp":
            # NemotronHMLP: up and down projections (relu2, no gate) of intermediate_size, bias=mlp_bias
            layers.append({"attention": {"kind": "none"},
                           "ffn": dense_ffn(need(cfg, "intermediate_size", origin), gated=False, bias=flag(cfg, "mlp_bias", origin))})
        else:
            layers.append({"attention": {"kind": "none"}, "ffn": _nemotron_moe(cfg, origin)})
    base["ffn"] = NO_FFN
    base["layer_groups"] = group_layers(layers, base["n_layers"])
    return base
