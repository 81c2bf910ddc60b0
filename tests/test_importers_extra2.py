"""Importers of the 2025–2026 model_types: each config in tests/data/reference/configs-extra-2 (SOURCES.md says
where it comes from) goes through `kvcalc compare`, and the cache is checked against a figure written out from the
config's numbers, with the rule it follows; each importer's trap gets its own assertion."""

from __future__ import annotations

import pytest

from conftest import REFERENCE, ConfigFolder, kv_bytes, run, spec
from kvcalc.costs.cache import kv_cache
from kvcalc.costs.params import param_counts
from kvcalc.errors import SpecError
from kvcalc.settings import Settings

EXTRA = REFERENCE / "configs-extra-2"
CONFIGS = ConfigFolder("configs-extra-2")
K = 1024
BF16 = 2  # bytes per cached element (kvcalc's default kv dtype)


compare, config, imported = CONFIGS.compare, CONFIGS.config, CONFIGS.imported


# ---------------------------------------------------------------- glm4_moe (GLM-4.5 / 4.6 / 4.7)


def test_glm47_cache_every_layer_full_gqa():
    # 92 layers of full attention, 8 KV heads of head_dim 128 (partial RoPE rotates half of each head, the cache
    # holds the whole key): 2 (K and V) · 8 · 128 elements per token and layer
    assert kv_bytes(compare("glm-4.7")) == [92 * ctx * 2 * 8 * 128 * BF16 for ctx in (4 * K, 128 * K)]


def test_glm4_moe_bias_on_qkv_but_not_o():
    # Glm4MoeAttention: q/k/v_proj bias=attention_bias, o_proj bias=False (the Llama rule would put one on o too)
    att = imported(config("glm-4.7")).layer_groups[0].attention
    assert (att.qkv_bias, att.o_bias, att.qk_norm, att.qk_norm_width) == (True, False, True, "head")


def test_glm4_moe_dense_layers_shared_expert_and_mtp_layer():
    s = imported(config("glm-4.7"))
    assert (s.ffn.first_k_dense, s.ffn.dense_d_ff, s.ffn.n_shared_experts, s.ffn.router_bias) == (3, 12288, 1, True)
    # num_nextn_predict_layers 1: one MTP layer, counted only with --mtp (as DeepSeek-V3's)
    assert s.mtp_layers == 1 and "counted only with --mtp" in s.notes
    assert imported({k: v for k, v in config("glm-4.7").items() if k != "num_nextn_predict_layers"}).mtp_layers == 0
    # use_qk_norm absent (GLM-4.5-Air): no q/k norms; first_k_dense_replace absent: Glm4MoeConfig's default 1
    air = imported({k: v for k, v in config("glm-4.7").items() if k not in ("use_qk_norm", "first_k_dense_replace")})
    assert (air.layer_groups[0].attention.qk_norm, air.ffn.first_k_dense) == (False, 1)


def _glm47_params() -> tuple[int, int]:
    d, v, n, first_k = 5120, 151552, 92, 3
    n_h, n_kv, d_h = 96, 8, 128
    attn = (d * n_h * d_h + n_h * d_h) + 2 * (d * n_kv * d_h + n_kv * d_h) + n_h * d_h * d  # q, k, v with bias; o without
    attn += 2 * d_h  # q_norm, k_norm over head_dim
    norms = 2 * d
    dense = 3 * d * 12288
    expert = 3 * d * 1536
    router = 160 * d + 160  # gate weight and e_score_correction_bias
    moe_total = 160 * expert + expert + router
    moe_active = 8 * expert + expert + router
    outer = 2 * v * d + d  # untied embedding and lm_head, final norm
    total = outer + n * (attn + norms) + first_k * dense + (n - first_k) * moe_total
    active = outer + n * (attn + norms) + first_k * dense + (n - first_k) * moe_active
    return total, active


def test_glm47_params_written_out_and_near_the_headline():
    total, active = _glm47_params()
    row = compare("glm-4.7")[0]
    assert (row["params_total"], row["params_active"]) == (total, active)
    # GLM-4.5 report (arXiv 2508.06471) and the GLM-4.6/4.7 model cards: 355B total, 32B active; the MTP layer, not
    # counted here, is part of 355B; the 32B leave out the embedding and lm_head (2 · 151552 · 5120 = 1.55B)
    assert abs(total / 355e9 - 1) < 0.03
    assert abs((active - 2 * 151552 * 5120) / 32e9 - 1) < 0.01


def test_bundled_glm47_equals_the_imported_config():
    total, active = _glm47_params()
    counts = param_counts(spec("glm-4.7"))
    assert (counts.total, counts.active) == (total, active)
    assert spec("glm-4.7").mtp_layers == imported(config("glm-4.7")).mtp_layers == 1


def test_glm47_mtp_layer_with_mtp():
    # --mtp: the MTP layer (model.layers.92; vLLM glm4_moe_mtp.py, SGLang glm4_moe_nextn.py) is a decoder layer like
    # the last, an MoE one, with eh_proj (2d × d, no bias), enorm, hnorm and the shared head's norm; it caches as
    # the 92 others do
    d, n_h, n_kv, d_h = 5120, 96, 8, 128
    attn = (d * n_h * d_h + n_h * d_h) + 2 * (d * n_kv * d_h + n_kv * d_h) + n_h * d_h * d + 2 * d_h
    expert = 3 * d * 1536
    moe_total, moe_active = 161 * expert + 160 * d + 160, 9 * expert + 160 * d + 160
    extra = attn + 2 * d + 2 * d * d + 3 * d  # the block (attention, 2 norms) + eh_proj, enorm, hnorm, head norm
    total, active = _glm47_params()
    counts = param_counts(spec("glm-4.7"), mtp=True)
    assert (counts.total, counts.active) == (total + extra + moe_total, active + extra + moe_active)
    assert abs(counts.total / 355e9 - 1) < 0.02  # the published 355B include the MTP layer
    for ctx in (4 * K, 128 * K):
        assert kv_cache(spec("glm-4.7"), Settings(ctx=ctx, mtp=True)).bytes == 93 * ctx * 2 * 8 * 128 * BF16


# ---------------------------------------------------------------- qwen3_5_moe (Qwen3.5)


def test_qwen35_35b_cache_full_layers_and_deltanet_state():
    # text_config.layer_types: every 4th layer full attention (10 of 40), 2 KV heads of head_dim 256:
    # 2 (K and V) · 2 · 256 elements per token in those 10 layers only
    rows = compare("qwen3.5-35b-a3b")
    assert kv_bytes(rows) == [10 * ctx * 2 * 2 * 256 * BF16 for ctx in (4 * K, 128 * K)]
    # 30 Gated DeltaNet layers, each a recurrent state H_v·d_k·d_v in float32 (the config's mamba_ssm_dtype, which
    # vLLM stores it in) and a conv state (K − 1)·(2·H_k·d_k + H_v·d_v) in the KV dtype, whatever the context
    recurrent, conv = 32 * 128 * 128, (4 - 1) * (2 * 16 * 128 + 32 * 128)
    assert [r["state_bytes"] for r in rows] == [30 * (recurrent * 4 + conv * BF16)] * 2 == [64_389_120] * 2
    # --state-dtype stores both in one dtype
    rows = compare("qwen3.5-35b-a3b", "--state-dtype", "bf16")
    assert [r["state_bytes"] for r in rows] == [30 * (recurrent + conv) * BF16] * 2


def test_qwen35_text_config_nesting_gate_and_every_layer_moe():
    cfg = config("qwen3.5-35b-a3b")
    s = imported(cfg)
    full = next(g for g in s.layer_groups if g.name == "full").attention
    assert (full.output_gate, full.qk_norm, full.head_dim, s.tie_embeddings) == (True, True, 256, False)
    assert s.ffn.n_routed_experts == 256 and all(g.ffn is None for g in s.layer_groups)
    # Qwen3_5MoeTextConfig deletes mlp_only_layers: listing a layer there still gives it the MoE block
    text = {**cfg["text_config"], "mlp_only_layers": [0], "intermediate_size": 1024}
    assert all(g.ffn is None for g in imported({**cfg, "text_config": text}).layer_groups)
    assert "vision tower" in s.notes and "multi-token-prediction" in s.notes
    # "mamba_ssm_dtype": "float32" is the dtype of the Gated DeltaNet layers' recurrent state; the notes say so
    linear = next(g for g in s.layer_groups if g.name == "linear").attention
    assert linear.recurrent_dtype == "fp32" and "mamba_ssm_dtype float32: the Gated DeltaNet recurrent" in s.notes
    without = imported({**cfg, "text_config": {k: v for k, v in cfg["text_config"].items() if k != "mamba_ssm_dtype"}})
    assert "mamba_ssm_dtype" not in without.notes
    assert next(g for g in without.layer_groups if g.name == "linear").attention.recurrent_dtype is None


def test_qwen35_mtp_layer_from_mtp_num_hidden_layers():
    # vLLM's Qwen3_5MultiTokenPredictor (qwen3_5_mtp.py): mtp_num_hidden_layers layers of full attention and MoE
    # (Qwen3_5DecoderLayer builds the MoE block in every qwen3_5_moe_text layer), as Qwen3-Next's; counted with --mtp
    cfg = config("qwen3.5-35b-a3b")
    s = imported(cfg)
    assert s.mtp_layers == 1 and "(mtp_num_hidden_layers 1): counted only with --mtp" in s.notes
    text = {k: v for k, v in cfg["text_config"].items() if k != "mtp_num_hidden_layers"}
    assert imported({**cfg, "text_config": text}).mtp_layers == 1  # absent: 1, as vLLM builds
    assert imported({**cfg, "text_config": {**text, "mtp_num_hidden_layers": 0}}).mtp_layers == 0
    plain, mtp = compare("qwen3.5-35b-a3b"), compare("qwen3.5-35b-a3b", "--mtp")
    # an 11th full-attention layer: 2 KV heads × 256 × (K and V) a token; the Gated DeltaNet states unchanged
    assert kv_bytes(mtp) == [11 * ctx * 2 * 2 * 256 * BF16 for ctx in (4 * K, 128 * K)]
    assert [r["state_bytes"] for r in mtp] == [r["state_bytes"] for r in plain]
    d, experts, top_k, ff = 2048, 256, 8, 512
    attn = d * 2 * 16 * 256 + 2 * d * 2 * 256 + 16 * 256 * d + 2 * 256  # gated q_proj, k/v, o, q/k norms
    moe = 3 * d * ff + d + d * experts  # shared expert, its gate, the router
    extra = attn + 2 * d + 2 * d * d + 3 * d  # + the layer's 2 norms, fc (2d × d) and 3 norms
    assert mtp[0]["params_total"] - plain[0]["params_total"] == extra + moe + experts * 3 * d * ff
    assert mtp[0]["params_active"] - plain[0]["params_active"] == extra + moe + top_k * 3 * d * ff


def test_qwen35_mtp_under_vllm_pipeline_stages():
    # qwen3_5_mtp.py branches on its inputs, not the rank, so its drafter runs on the last stage (unlike Qwen3-Next's,
    # which kvcalc refuses there): that stage holds the MTP layer and, at pp > 1, the drafter's own embedding
    path = str(EXTRA / "qwen3.5-35b-a3b.json")
    run("compare", path, "--ctx", "4k", "--engine", "vllm", "--pp", "2", "--mtp")
    r = run("compare", path, "--ctx", "4k", "--engine", "sglang", "--mtp", ok=False)
    assert r.exit_code == 1 and "--mtp --engine sglang: SGLang sizes" in r.stderr


# ---------------------------------------------------------------- mimo_v2_flash (MiMo-V2-Flash)


def test_mimo_v2_flash_cache_keys_192_values_128_window_129():
    # hybrid_layer_pattern: 9 full layers (0 = full: 0, 5, 11, …, 47) of 4 KV heads, 39 sliding layers of 8 KV heads
    # holding min(ctx, 129) tokens (sliding_window_size 128 previous tokens and the query: the reference SGLang code's
    # window_left); each KV head caches a key of 192 and a value of 128
    full, swa = 4 * (192 + 128), 8 * (192 + 128)
    want = [9 * ctx * full * BF16 + 39 * min(ctx, 129) * swa * BF16 for ctx in (4 * K, 128 * K)]
    assert kv_bytes(compare("mimo-v2-flash")) == want


def test_mimo_v2_flash_window_without_sliding_window_size_is_sliding_window():
    # no sliding_window_size: the file's sliding_window keys, the query included (kvcalc's window convention as is)
    cfg = {k: v for k, v in config("mimo-v2-flash").items() if k != "sliding_window_size"}
    assert {g.sliding_window for g in imported(cfg).layer_groups} == {None, 128}
    assert {g.sliding_window for g in imported(config("mimo-v2-flash")).layer_groups} == {None, 129}


def test_mimo_v2_flash_resaved_by_transformers_reads_as_the_checkpoints_config():
    # MiMoV2FlashConfig(**config).save_pretrained (transformers 5.25) keeps the vendor's keys and writes the lists it
    # builds by: layer_types (full where hybrid_layer_pattern is 0), mlp_layer_types (dense where moe_layer_freq is 0)
    # and sliding_window = sliding_window_size + 1; the engines read the vendor's keys, so a list unlike them is refused
    cfg = config("mimo-v2-flash")
    resaved = {**cfg, "sliding_window": 129,
               "layer_types": ["sliding_attention" if x else "full_attention" for x in cfg["hybrid_layer_pattern"]],
               "mlp_layer_types": ["sparse" if x else "dense" for x in cfg["moe_layer_freq"]]}
    assert resaved["layer_types"][:6] == ["full_attention"] + ["sliding_attention"] * 4 + ["full_attention"]
    assert imported(resaved).model_dump(exclude={"name", "source"}) == imported(cfg).model_dump(exclude={"name", "source"})
    bad = {**resaved, "layer_types": ["full_attention"] * 48}
    with pytest.raises(SpecError, match=r"layer_types\[1\]: 'full_attention', but hybrid_layer_pattern makes layer 1 "
                                        "'sliding_attention': give them alike"):
        imported(bad)
    bad = {**resaved, "mlp_layer_types": ["dense"] * 48}
    with pytest.raises(SpecError, match=r"mlp_layer_types\[1\]: 'dense', but moe_layer_freq makes layer 1 'sparse'"):
        imported(bad)


def test_mimo_v2_flash_heads_sinks_and_ffn_per_type():
    s = imported(config("mimo-v2-flash"))
    by = {g.name: g for g in s.layer_groups}
    assert (by["local"].attention.n_kv_heads, by["local"].attention.sinks, by["local"].sliding_window) == (8, True, 129)
    assert (by["global"].attention.n_kv_heads, by["global"].attention.sinks) == (4, False)
    # moe_layer_freq[0] = 0: layer 0 has the dense MLP of intermediate_size; MoE has no shared expert
    assert s.layer_groups[0].layers == "0" and s.layer_groups[0].ffn.d_ff == 16384
    assert (s.ffn.n_shared_experts, s.ffn.router_bias) == (0, True)


def test_mimo_v2_flash_params_near_the_headline():
    # SGLang team's MiMo-V2-Flash post (lm-sys blog, 2025-12-15): 309B total, 15B activated; within 3%
    row = compare("mimo-v2-flash")[0]
    assert abs(row["params_total"] / 309e9 - 1) < 0.03 and abs(row["params_active"] / 15e9 - 1) < 0.04
