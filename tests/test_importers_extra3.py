"""Importers of the model_types added third: each config in tests/data/reference/configs-extra-3 (SOURCES.md says
where it comes from) goes through `kvcalc compare`, and the cache and state are checked against figures written out
from the config's numbers, with the rule each follows; each importer's trap gets its own assertion."""

from __future__ import annotations

import pytest

from conftest import REFERENCE, ConfigFolder
from kvcalc.errors import SpecError

EXTRA = REFERENCE / "configs-extra-3"
CONFIGS = ConfigFolder("configs-extra-3")
K = 1024
BF16 = 2  # bytes per cached element (kvcalc's default kv dtype)


compare, config, imported = CONFIGS.compare, CONFIGS.config, CONFIGS.imported


# ---------------------------------------------------------------- kimi_linear (Kimi Linear: KDA + MLA)

KIMI = "kimi-linear-48b-a3b-instruct"


def test_every_reference_config_names_its_groups_apart():
    # a review of --explain: Kimi Linear had two groups named 'kda' (layer 0's dense FFN split it from the other KDA
    # layers), MiMo-V2-Flash two 'global', and Nemotron-NAS names held commas ('attention, d_ff 28672'), so a per-GPU
    # line or a heading could not be told apart; a group with an FFN of its own now takes the FFN's kind
    import json

    from kvcalc.hf import spec_from_config

    assert [g.name for g in imported(config(KIMI)).layer_groups] == ["kda-dense", "kda", "mla"]
    seen = 0
    for path in sorted(REFERENCE.rglob("*.json")):
        cfg = json.loads(path.read_text())
        if not isinstance(cfg, dict) or "model_type" not in cfg:
            continue
        try:
            spec = spec_from_config(cfg, str(path), "m")[0]
        except SpecError:  # the configs kept to be refused
            continue
        names = [g.name for g in spec.layer_groups if g.name]
        assert len(names) == len(set(names)) and not any("," in n for n in names), (path.name, names)
        seen += 1
    assert seen >= 56


def test_kimi_linear_cache_is_the_mla_layers_latent_only():
    # full_attn_layers [4, 8, 12, 16, 20, 24, 27]: 7 MLA layers cache kv_lora_rank 512 + qk_rope_head_dim 64 per token
    # (DeepSeek-V2 latent + decoupled key; mla_use_nope skips the rotation, not the cached key); KDA layers cache nothing
    rows = compare(KIMI)
    assert [r["kv_cache_bytes"] for r in rows] == [7 * ctx * (512 + 64) * BF16 for ctx in (4 * K, 128 * K)]


def test_kimi_linear_kda_state_recurrent_plus_three_short_convolutions():
    # 20 KDA layers, each 32 heads × 128 × 128 (recurrent_state) + conv_state_q/k/v of (4 − 1) × 32·128 each, as vLLM's
    # kda_state_shape allocates (transformers-style caches keep all 4 inputs); the same at any context. vLLM's
    # kda_state_dtype keeps the recurrent state in float32 and the conv states in the cache dtype
    recurrent, conv = 32 * 128 * 128, 3 * (4 - 1) * 32 * 128
    assert [r["state_bytes"] for r in compare(KIMI)] == [20 * (recurrent * 4 + conv * BF16)] * 2 == [43_417_600] * 2
    assert [r["state_bytes"] for r in compare(KIMI, "--state-dtype", "bf16")] == [20 * (recurrent + conv) * BF16] * 2


def test_kimi_linear_layer_lists_are_one_based():
    # is_kda_layer(i) = (i + 1) in kda_layers: the 0-based MLA layers are 3, 7, …, 23 and 26 (the last one)
    mla = sorted(i for g in imported(config(KIMI)).groups if g.attention.kind == "mla" for i in g.layers)
    assert mla == [3, 7, 11, 15, 19, 23, 26]
    bad = config(KIMI)
    bad["linear_attn_config"] = {**bad["linear_attn_config"], "full_attn_layers": [3, 7, 11, 15, 19, 23, 26]}
    with pytest.raises(SpecError, match="1-based"):
        imported(bad)


def kimi_resaved() -> dict:
    """The config as transformers 5.25 re-saves it (KimiLinearConfig(**config).save_pretrained): linear_attn_config
    kept, and beside it the keys transformers reads, written from it: layer_types from the 1-based lists,
    mlp_layer_types from first_k_dense_replace (1: layer 0 dense), the flat linear_* fields."""
    cfg = config(KIMI)
    linear = cfg["linear_attn_config"]
    cfg["layer_types"] = ["full_attention" if i + 1 in linear["full_attn_layers"] else "linear_attention"
                          for i in range(27)]
    cfg["mlp_layer_types"] = ["dense"] + ["sparse"] * 26
    cfg.update(linear_num_heads=32, linear_head_dim=128, linear_conv_kernel_dim=4)
    return cfg


def test_kimi_linear_resaved_by_transformers_reads_as_the_checkpoints_config():
    resaved = kimi_resaved()
    assert resaved["layer_types"][3] == "full_attention" and resaved["layer_types"].count("full_attention") == 7
    assert imported(resaved).model_dump(exclude={"name", "source"}) == imported(config(KIMI)).model_dump(
        exclude={"name", "source"})


def test_kimi_linear_layer_types_or_mlp_types_unlike_the_lists_are_refused():
    # transformers 5.25 builds each layer by layer_types and mlp_layer_types where a config has them; vLLM (and the
    # vendor's code) by linear_attn_config's lists, first_k_dense_replace and moe_layer_freq: a file where they
    # differ is read two ways by the engines, and refused
    bad = kimi_resaved()
    bad["layer_types"][4] = "full_attention"  # layer 5 (1-based) is in kda_layers
    with pytest.raises(SpecError, match=r"layer_types\[4\]: 'full_attention', but linear_attn_config's kda_layers"):
        imported(bad)
    bad = kimi_resaved()
    bad["layer_types"] = bad["layer_types"][:-1]
    with pytest.raises(SpecError, match="layer_types: must list 'linear_attention' or 'full_attention' for each of the 27"):
        imported(bad)
    bad = kimi_resaved()
    bad["mlp_layer_types"][1] = "dense"
    with pytest.raises(SpecError, match=r"mlp_layer_types\[1\]: 'dense', but first_k_dense_replace 1 and moe_layer_freq 1 "
                                        "make layer 1 'sparse'"):
        imported(bad)


def test_kimi_linear_flat_keys_alone_are_refused_as_vllm_reads_them_otherwise():
    # without linear_attn_config vLLM 0.34.0's KimiLinearConfig.is_kda_layer is False for every layer (all MLA),
    # while transformers builds KDA layers from layer_types: the message says why the mapping is needed
    flat = kimi_resaved()
    del flat["linear_attn_config"]
    with pytest.raises(SpecError, match="linear_attn_config: required mapping is missing from the config "
                                        r"\(layer_types, linear_num_heads, linear_head_dim alone are transformers 5's"):
        imported(flat)


def test_kimi_linear_top_level_head_dim_is_a_decoy():
    # head_dim 72 (= 2304 / 32) is neither the KDA head (linear_attn_config.head_dim 128) nor an MLA dim
    att = {g.attention.kind: g.attention for g in imported(config(KIMI)).groups}
    assert (att["kda"].head_dim, att["mla"].qk_nope_head_dim, att["mla"].q_lora_rank) == (128, 128, None)


def test_kimi_linear_params_match_the_checkpoint():
    # the checkpoint's safetensors table (SOURCES.md) sums to 49,122,681,728 parameters; written out:
    d, v, n_kda, n_mla, h, dh = 2304, 163840, 20, 7, 32, 128
    p = h * dh
    kda = 4 * d * p + 2 * (d * dh + dh * p) + d * h + 3 * p * 4 + p + h + dh  # q,k,v,o; f_a/f_b, g_a/g_b; b; convs; dt_bias, A_log, o_norm
    mla = d * h * (128 + 64) + d * (512 + 64) + 512 + 512 * h * (128 + 128) + h * 128 * d  # q, kv_a, kv_a_norm, kv_b, o
    expert = 3 * d * 1024
    moe = 256 * expert + expert + 256 * d + 256  # routed, one shared of 1 × 1024, gate and e_score_correction_bias
    total = 2 * v * d + d + n_kda * kda + n_mla * mla + 27 * 2 * d + 3 * d * 9216 + 26 * moe
    assert compare(KIMI)[0]["params_total"] == total == 49_122_681_728


# ---------------------------------------------------------------- nemotron-nas (Llama-3.3-Nemotron-Super-49B-v1)

NAS = "llama-3.3-nemotron-super-49b-v1"


def test_nemotron_nas_cache_only_in_layers_that_keep_attention():
    # block_configs: 49 of 80 layers have attention (n_heads_in_group 8: 64 / 8 = 8 K/V heads of 8192 / 64 = 128);
    # the 31 attention no_op layers are FFN only and cache nothing: 49 · 2 (K, V) · 8 · 128 per token
    rows = compare(NAS)
    assert [r["kv_cache_bytes"] for r in rows] == [49 * ctx * 2 * 8 * 128 * BF16 for ctx in (4 * K, 128 * K)]


def test_nemotron_nas_kv_heads_per_block_not_top_level():
    # num_key_value_heads is null at the top level: each block's n_heads_in_group sets the group
    att = [g.attention for g in imported(config(NAS)).groups if g.attention.kind != "none"]
    assert {(a.kind, a.n_heads, a.n_kv_heads) for a in att} == {("gqa", 64, 8)}


def test_nemotron_nas_ffn_mult_rounds_up_to_256():
    # _ffn_mult_to_intermediate_size: round_up(int(2 · ffn_mult · 8192 / 3), 256): 5.25 → 28672, 1.0 → 5461 → 5632,
    # 0.5 → 2730 → 2816, 3.28125 → 17920
    s = imported(config(NAS))
    sizes = {(g.ffn or s.ffn).d_ff for g in s.layer_groups}
    assert sizes == {28672, 7168, 5632, 2816, 14336, 17920}


def test_nemotron_nas_replace_with_linear_is_a_projection_and_norms_follow_the_blocks():
    from kvcalc.costs.cache import kv_cache
    from kvcalc.costs.params import param_counts
    from kvcalc.settings import Settings

    cfg = config(NAS)
    base = imported(cfg)
    cfg["block_configs"][1] = {**cfg["block_configs"][1],
                               "attention": {**cfg["block_configs"][1]["attention"], "replace_with_linear": True}}
    s = imported(cfg)
    d = 8192
    # layer 1's attention becomes one d × d linear (DeciLM linear_attn): no cache; its q/k/v/o weights are replaced
    attention = d * 64 * 128 + 2 * d * 8 * 128 + 64 * 128 * d
    assert param_counts(s).total == param_counts(base).total - attention + d * d
    assert kv_cache(s, Settings(ctx=4096)).bytes == kv_cache(base, Settings(ctx=4096)).bytes - 4096 * 2 * 8 * 128 * 2
    # a layer whose attention is no_op has no input_layernorm: one norm, not two
    no_op = sum(1 for b in config(NAS)["block_configs"] if b["attention"].get("no_op"))
    assert param_counts(base).breakdown["norms"] == (80 * 2 - no_op) * d + d
    ffn = cfg["block_configs"][0]["ffn"]
    cfg["block_configs"][0] = {**cfg["block_configs"][0], "ffn": {**ffn, "replace_with_linear": True}}
    with pytest.raises(SpecError, match="ffn.replace_with_linear"):
        imported(cfg)
