"""Importer of Qwen3-Next (model_type qwen3_next): Gated DeltaNet layers with gated full attention every
`full_attention_interval`-th layer, and a high-sparsity MoE with a gated shared expert.

The multi-token-prediction layers (mtp.*, which transformers ignores) are mtp_layers, counted only with --mtp: vLLM's
qwen3_next_mtp.py builds num_nextn_predict_layers of them (1 when absent, as in Qwen3-Next's config), each a
Qwen3NextDecoderLayer of full attention after fc (2·d × d) and the norms pre_fc_norm_hidden, pre_fc_norm_embedding and
norm, sharing the embedding and LM head: kvcalc's MTP layer as DeepSeek-V3's, a copy of the last layer.

Sources (transformers, models/qwen3_next/): configuration_qwen3_next.py (Qwen3NextConfig and its defaults) and
modeling_qwen3_next.py (Qwen3NextDecoderLayer, Qwen3NextAttention, Qwen3NextGatedDeltaNet, Qwen3NextSparseMoeBlock).
"""

from __future__ import annotations

from typing import Any

from kvcalc.errors import SpecError
from kvcalc.hf.common import (
    base_fields,
    dense_ffn,
    flag,
    get,
    group_layers,
    heads_attention,
    importer,
    layer_types,
    need,
    show,
    torch_dtype,
    whole,
)

# Qwen3NextConfig defaults (configuration_qwen3_next.py) of the keys particular to Qwen3-Next, filled in when a config
# leaves them out, as transformers does: head_dim is 256 there, not hidden_size / num_attention_heads (= 128 for the
# 80B model), and a config without num_experts still builds 512 experts. Standard keys (hidden_size, ...) are required.
QWEN3_NEXT_DEFAULTS = {
    "head_dim": 256,
    "num_key_value_heads": 2,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "full_attention_interval": 4,
    "num_experts": 512,
    "num_experts_per_tok": 10,
    "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512,
    "decoder_sparse_step": 1,
}
LINEAR_KEYS = ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
               "linear_conv_kernel_dim")
QWEN3_NEXT_LAYER_TYPES = ("linear_attention", "full_attention")


def _full_layers(cfg: dict, origin: str, n_layers: int) -> list[bool]:
    """Which layers are full attention: `layer_types` when given, else Qwen3NextConfig.__post_init__'s rule,
    layer i is full attention when (i + 1) % full_attention_interval == 0 (every 4th: 3, 7, …, 47)."""
    types = layer_types(cfg, origin, n_layers, QWEN3_NEXT_LAYER_TYPES)
    if types is None:
        interval = need(cfg, "full_attention_interval", origin)
        return [(i + 1) % interval == 0 for i in range(n_layers)]
    return [t == "full_attention" for t in types]


def _sparse_layers(cfg: dict, origin: str, n_layers: int) -> list[bool]:
    """Qwen3NextDecoderLayer: a Qwen3NextSparseMoeBlock when the layer is not in mlp_only_layers, num_experts > 0
    and (i + 1) % decoder_sparse_step == 0; else a dense Qwen3NextMLP of intermediate_size (as Qwen3-MoE)."""
    only = cfg.get("mlp_only_layers") or []
    if not isinstance(only, list):
        raise SpecError(f"{origin}: mlp_only_layers: must be a list of layer indices, got {show(only)}")
    dense = {whole(i, f"mlp_only_layers[{j}]", origin, minimum=0) for j, i in enumerate(only)}
    experts = get(cfg, "num_experts", origin, minimum=0) or 0
    step = get(cfg, "decoder_sparse_step", origin, minimum=1) or 1  # HF: (i + 1) % step, so 0 cannot load
    return [i not in dense and experts > 0 and (i + 1) % step == 0 for i in range(n_layers)]


@importer("qwen3_next", keys={k: k for k in LINEAR_KEYS})
def _qwen3_next(cfg, origin, notes):
    # vLLM qwen3_next_mtp.py: num_nextn_predict_layers MTP layers, 1 when the config leaves it out (Qwen3-Next's does)
    return qwen3_next_fields(cfg, origin, notes, "num_nextn_predict_layers")


def qwen3_next_fields(cfg: dict, origin: str, notes: list[str], mtp_key: str) -> dict:
    """The spec fields of a Qwen3-Next text model (Qwen3.5 MoE's too), its multi-token-prediction layers read from
    `mtp_key` (1 when absent, as vLLM's MTP model files build: getattr(config, mtp_key, 1))."""
    filled = [k for k in QWEN3_NEXT_DEFAULTS if k not in cfg and not (k == "full_attention_interval" and "layer_types" in cfg)]
    if filled:
        notes.append("Qwen3NextConfig defaults filled in for: " + ", ".join(filled))
    cfg = {**QWEN3_NEXT_DEFAULTS, **cfg}
    if cfg.get("sliding_window") or flag(cfg, "use_sliding_window", origin):
        notes.append("sliding_window does not apply: Qwen3NextAttention has no window")
    ssm_dtype = torch_dtype(cfg, "mamba_ssm_dtype", origin)  # Qwen3.5 (absent in Qwen3-Next)
    if ssm_dtype:
        notes.append(f"mamba_ssm_dtype {cfg['mamba_ssm_dtype']}: the Gated DeltaNet recurrent state is stored in "
                     f"{ssm_dtype}, as vLLM does (mamba_ssm_cache_dtype), the conv state in the KV dtype; --state-dtype "
                     "stores both in one dtype")
    base = base_fields(cfg, origin, "qwen3_next", False)
    n = base["n_layers"]
    bias = flag(cfg, "attention_bias", origin, False)  # Qwen3MoeAttention: bias=attention_bias on q, k, v and o
    # Qwen3NextAttention: q_proj is d × 2·n_h·d_h (query and output gate), q_norm/k_norm over d_h (Qwen3MoeAttention);
    # partial RoPE (partial_rotary_factor) changes no size.
    n_heads = need(cfg, "num_attention_heads", origin)
    n_kv = get(cfg, "num_key_value_heads", origin) or n_heads
    full = heads_attention(n_heads, n_kv, need(cfg, "head_dim", origin), qkv_bias=bias, o_bias=bias, qk_norm=True,
                           output_gate=True)
    linear: dict[str, Any] = {"kind": "gated_deltanet", **{k: need(cfg, k, origin) for k in LINEAR_KEYS}}
    if ssm_dtype:
        linear["recurrent_dtype"] = ssm_dtype
    fulls, sparse = _full_layers(cfg, origin, n), _sparse_layers(cfg, origin, n)
    dense = dense_ffn(need(cfg, "intermediate_size", origin)) if not all(sparse) else None
    layers = [{"attention": full if fulls[i] else linear, **({} if sparse[i] else {"ffn": dense})} for i in range(n)]
    groups = group_layers(layers, n)
    mtp = get(cfg, mtp_key, origin, minimum=0)
    if mtp != 0:
        given = f"{mtp_key} {mtp}" if mtp is not None else f"{mtp_key} absent: 1, as vLLM builds"
        base.update(_mtp_layers(cfg, origin, notes, mtp or 1, given, fulls[-1], sparse[-1]))
    for g in groups:  # name the two mixers; each layer has the 2 default norms (input_ and post_attention_layernorm)
        g.setdefault("name", "full" if g["attention"] is full else "linear")
    base["layer_groups"] = groups
    if not any(sparse):  # every layer dense: the model's FFN, no overrides
        base["ffn"] = dense
        for g in groups:
            g.pop("ffn")
        return base
    # Qwen3NextSparseMoeBlock (= Qwen2MoeSparseMoeBlock): router gate Linear(d, num_experts, bias=False), the routed
    # experts, one shared_expert MLP of shared_expert_intermediate_size and shared_expert_gate Linear(d, 1, bias=False).
    base["ffn"] = {
        "kind": "moe",
        "n_routed_experts": need(cfg, "num_experts", origin),
        "n_experts_per_tok": need(cfg, "num_experts_per_tok", origin),
        "moe_d_ff": need(cfg, "moe_intermediate_size", origin),
        "n_shared_experts": 1,
        "shared_d_ff": need(cfg, "shared_expert_intermediate_size", origin),
        "shared_gate": True,
    }
    return base


def _mtp_layers(cfg: dict, origin: str, notes: list[str], mtp: int, given: str, last_full: bool,
                last_sparse: bool) -> dict:
    """{"mtp_layers": mtp} when kvcalc's MTP layer, a copy of the last layer, is the one vLLM builds: a
    Qwen3NextDecoderLayer of full attention (qwen3_next_mtp.py, qwen3_5_mtp.py: layer_type="full_attention") whose FFN
    is chosen at layer index 0 (extract_layer_index of "mtp.layers.0"); else nothing, said in the notes."""
    mtp_sparse = _sparse_layers(cfg, origin, 1)[0]
    if not last_full or mtp_sparse != last_sparse:
        why = "Gated DeltaNet" if not last_full else "MoE" if last_sparse else "dense"
        notes.append(f"{mtp} multi-token-prediction layer(s) ({given}) not counted: kvcalc's copies the last layer, "
                     f"which is {why} here, unlike the MTP layer's full attention with the FFN of layer 0")
        return {}
    notes.append(f"{mtp} multi-token-prediction layer(s) ({given}): counted only with --mtp (plain decoding does not "
                 "run them)")
    return {"mtp_layers": mtp}
