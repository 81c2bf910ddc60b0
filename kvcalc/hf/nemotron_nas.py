"""Importer of DeciLM / Llama-Nemotron NAS models (model_type nemotron-nas): a Llama whose every layer has its own
attention and FFN, chosen by neural architecture search and listed in `block_configs`.

Rules, from the vendor's remote code (nvidia/Llama-3_3-Nemotron-Super-49B-v1 modeling_decilm.py) as vLLM mirrors it
(vllm/model_executor/models/nemotron_nas.py: DeciLMDecoderLayer, _ffn_mult_to_intermediate_size):
- block_configs[i].attention: `no_op` = no attention and no input_layernorm (the layer is its FFN only, kind `none`,
  one norm);
  otherwise Llama attention with num_attention_heads query heads and num_attention_heads // n_heads_in_group K/V
  heads of hidden_size / num_attention_heads (the top-level num_key_value_heads is null); `replace_with_linear`: a
  d × d linear in place of attention (kind `projection`, no cache). Windowed or sink attention (window_length,
  num_sink_tokens) is refused.
- block_configs[i].ffn: a SwiGLU MLP of intermediate size round_up(int(2·ffn_mult·hidden_size / 3), 256); `no_op`
  and `replace_with_linear` FFNs are refused. The top-level intermediate_size is null.
- One layer group per distinct block.
"""

from __future__ import annotations

import math

from kvcalc.errors import SpecError
from kvcalc.hf.common import base_fields, dense_ffn, flag, group_layers, heads_attention, importer, need, show


def ffn_size(ffn_mult: float, d: int) -> int:
    """DeciLM's _ffn_mult_to_intermediate_size: int(2·ffn_mult·d / 3) rounded up to a multiple of 256."""
    size = int(2 * ffn_mult * d / 3)
    return size if size % 256 == 0 else size + 256 - size % 256


def _block(block: object, i: int, origin: str, n_heads: int, d: int, notes: list[str]) -> dict:
    if not isinstance(block, dict) or not isinstance(block.get("attention"), dict) or not isinstance(block.get("ffn"), dict):
        raise SpecError(f"{origin}: block_configs[{i}]: must be a mapping with `attention` and `ffn` mappings")
    att, ffn = block["attention"], block["ffn"]
    att_origin, ffn_origin = f"{origin}: block_configs[{i}].attention", f"{origin}: block_configs[{i}].ffn"
    if flag(ffn, "replace_with_linear", ffn_origin):
        raise SpecError(f"{origin}: block_configs[{i}].ffn.replace_with_linear: a d × d linear layer in place of the "
                        "FFN has no FFN kind in kvcalc")
    if att.get("window_length") or att.get("num_sink_tokens"):
        raise SpecError(f"{origin}: block_configs[{i}].attention: windowed or sink attention is not imported")
    if flag(ffn, "no_op", ffn_origin):
        raise SpecError(f"{origin}: block_configs[{i}].ffn.no_op: a layer without an FFN is not imported")
    mult = ffn.get("ffn_mult")
    if isinstance(mult, bool) or not isinstance(mult, (int, float)) or not 0 < mult < math.inf:  # NaN fails too
        raise SpecError(f"{origin}: block_configs[{i}].ffn.ffn_mult: must be a positive number, got {show(mult)}")
    layer: dict = {"ffn": dense_ffn(ffn_size(mult, d))}
    if flag(att, "no_op", att_origin):  # no attention and no input_layernorm: the layer is its FFN and one norm
        layer["attention"] = {"kind": "none"}
        layer["norms_per_layer"] = 1
    elif flag(att, "replace_with_linear", att_origin):  # DeciLMDecoderLayer: self_attn is a d × d linear (linear_attn), no cache
        layer["attention"] = {"kind": "projection"}
    else:
        group = need(att, "n_heads_in_group", att_origin)
        if n_heads % group:
            raise SpecError(f"{origin}: block_configs[{i}].attention.n_heads_in_group: {group} does not divide "
                            f"num_attention_heads ({n_heads})")
        layer["attention"] = heads_attention(n_heads, n_heads // group, None)
    return layer


@importer("nemotron-nas", keys={"n_kv_heads": "num_attention_heads // block_configs[i].attention.n_heads_in_group"})
def _nemotron_nas(cfg: dict, origin: str, notes: list[str]) -> dict:
    base = base_fields(cfg, origin, "nemotron-nas", False)
    n, d = base["n_layers"], base["d_model"]
    n_heads = need(cfg, "num_attention_heads", origin)
    blocks = cfg.get("block_configs")
    if not isinstance(blocks, list) or len(blocks) != n:
        raise SpecError(f"{origin}: block_configs: must have one entry per layer (num_hidden_layers {n})")
    if flag(cfg, "attention_bias", origin) or flag(cfg, "mlp_bias", origin):
        raise SpecError(f"{origin}: attention_bias / mlp_bias: biases are not imported for nemotron-nas")
    layers = [_block(b, i, origin, n_heads, d, notes) for i, b in enumerate(blocks)]
    groups = group_layers(layers, n)
    base["ffn"] = layers[0]["ffn"]  # groups keep their own FFN where it differs from the first layer's
    for g in groups:
        mixer = {"none": "ffn-only", "projection": "linear"}.get(g["attention"]["kind"], "attention")
        g["name"] = f"{mixer} d_ff {g['ffn']['d_ff']}"  # no comma: --explain's headings list a group's facts by commas
        if g["ffn"] == base["ffn"]:
            g.pop("ffn")
    base["layer_groups"] = groups
    return base
