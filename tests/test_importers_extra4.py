"""Importers of the model_types added fourth: each config in tests/data/reference/configs-extra-4 (SOURCES.md says
where it comes from) goes through `kvcalc compare`, and the cache is checked against figures written out from the
config's numbers, with the rule each follows; each importer's trap gets its own assertion."""

from __future__ import annotations

import pytest

from conftest import REFERENCE, ConfigFolder
from kvcalc.errors import SpecError

EXTRA = REFERENCE / "configs-extra-4"
CONFIGS = ConfigFolder("configs-extra-4")
K = 1024
BF16 = 2  # bytes per cached element (kvcalc's default kv dtype)


compare, config, imported = CONFIGS.compare, CONFIGS.config, CONFIGS.imported


# ---------------------------------------------------------------- cohere2 (Command R7B)

R7B = "command-r7b-12-2024"


def test_cohere2_cache_three_sliding_layers_per_global_one():
    # sliding_window_pattern 4: layer i slides when (i + 1) % 4 != 0, so 24 sliding and 8 global layers; each caches
    # 2 (K, V) × 8 K/V heads × 128 per token; a sliding layer holds min(ctx, 4096) tokens (mask kv > q − W)
    per_token = 2 * 8 * 128 * BF16
    want = [(8 * ctx + 24 * min(ctx, 4096)) * per_token for ctx in (4 * K, 128 * K)]
    assert [r["kv_cache_bytes"] for r in compare(R7B)] == want


def test_cohere2_global_layers_are_every_fourth():
    s = imported(config(R7B))
    full = sorted(i for g in s.groups if g.sliding_window is None for i in g.layers)
    assert full == [3, 7, 11, 15, 19, 23, 27, 31]


def test_cohere2_parallel_block_one_layernorm_without_bias():
    # Cohere2DecoderLayer: residual + attn(norm(x)) + mlp(norm(x)); CohereLayerNorm has a weight and no bias
    s = imported(config(R7B))
    assert (s.norms_per_layer, s.norm) == (1, "rmsnorm")
    d, v, layer = 4096, 256000, 4096 * 32 * 128 * 2 + 4096 * 8 * 128 * 2 + 3 * 4096 * 14336 + 4096
    assert compare(R7B)[0]["params_total"] == v * d + 32 * layer + d  # tied LM head (tie_word_embeddings default)


def test_cohere2_head_dim_is_the_files_else_hidden_over_heads():
    # Cohere2Config sets head_dim = hidden_size // num_attention_heads, but a head_dim in the file is set after it and
    # wins (an audit built the model with transformers 5.25: k_proj 256 wide per head; vLLM's commandr.py reads it)
    cfg = {**config(R7B), "head_dim": 256}
    assert {g.head_dim for g in imported(cfg).groups} == {256}
    assert {g.head_dim for g in imported(config(R7B)).groups} == {128}  # none in the file: 4,096 / 32


# ---------------------------------------------------------------- openelm (OpenELM-270M)

ELM = "openelm-270m"


def test_openelm_cache_sums_per_layer_kv_heads():
    # num_kv_heads per layer: 5 × 3, 7 × 4, 4 × 5 = 63 K/V heads over 16 layers, each 2 (K, V) × 64 per token;
    # max_context_length 2048, so 128k is past the trained context but still computed
    rows = compare(ELM)
    assert [r["kv_cache_bytes"] for r in rows] == [ctx * 2 * 63 * 64 * BF16 for ctx in (4 * K, 128 * K)]


def test_openelm_one_group_per_distinct_layer():
    # ffn_multipliers differ in every layer: make_divisible(m · 1280, 256) gives 16 different FFN widths
    s = imported(config(ELM))
    assert len(s.layer_groups) == 16
    widths = [g.ffn.d_ff for g in s.layer_groups]
    assert widths[:3] == [768, 1024, 1280] and widths[-1] == 5120  # 640 → 768, 934.4 → 1024, 1241.6 → 1280, 5120


def test_openelm_heads_follow_qkv_multipliers_not_the_lists():
    # OpenELMConfig recomputes num_query_heads from qkv_multipliers; a file whose lists disagree is refused
    bad = config(ELM)
    bad["num_kv_heads"] = [4] * 16
    with pytest.raises(SpecError, match="qkv_multipliers"):
        imported(bad)


# ---------------------------------------------------------------- t5 (T5 v1.1 small)

T5 = "t5-v1_1-small"


def test_t5_cache_self_plus_cross_of_512_encoder_positions():
    # 8 decoder layers, 6 heads of d_kv 64: self-attention K/V grow with ctx, cross-attention K/V hold the encoder's
    # output, 512 positions by default (T5's pre-training length; no position table fixes it)
    rows = compare(T5)
    assert [r["kv_cache_bytes"] for r in rows] == [8 * 2 * 6 * 64 * (ctx + 512) * BF16 for ctx in (4 * K, 128 * K)]
    assert rows[0]["enc_ctx"] == 512


def test_t5_head_dim_is_d_kv_not_d_model_over_heads():
    # 512 / 6 is not whole: heads are d_kv = 64 wide, inner dim 384
    assert {g.head_dim for g in imported(config(T5)).groups} == {64}


def test_t5_params_written_out():
    # no biases; gated-gelu FFN (wi_0, wi_1, wo); RMSNorm weights; shared embedding, untied LM head;
    # relative_attention_bias of 32 buckets × 6 heads in block 0 of the encoder and of the decoder
    d, v, inner, ff, buckets = 512, 32128, 6 * 64, 1024, 32
    attn, ffn = 4 * d * inner, 3 * d * ff
    encoder = 8 * (attn + ffn + 2 * d) + d  # + final_layer_norm
    decoder = 8 * (2 * attn + ffn + 3 * d) + d  # self- and cross-attention; + final_layer_norm
    total = 2 * v * d + encoder + decoder + 2 * buckets * 6
    assert compare(T5)[0]["params_total"] == total == 76_961_152  # the checkpoint's published count


def test_t5_relu_ffn_when_not_gated():
    # T5 1.0 (feed_forward_proj relu): DenseReluDense, wi and wo only
    s = imported({**config(T5), "feed_forward_proj": "relu"})
    assert (s.ffn.gated, s.encoder.ffn.gated) == (False, False)


def test_openelm_rounds_its_multipliers_as_numpy_does():
    # an exactness review: OpenELMConfig rounds np.linspace's values with round(v, 2) of an np.float64, NumPy's
    # rint(v · 100) / 100, half to even of the float product. At 101 layers, qkv_multipliers [0.5, 1.0], layer 33's
    # multiplier is 0.5 + 33 · 0.005 = 0.665 (66.5 a hundredth): 0.66, not Python's 0.67 of the exact decimal. Its query
    # heads: make_divisible(1,280 · 0.66 = 844.8, 64 · 4) = 768 (not below 0.9 · 844.8) over head_dim 64: 12, where
    # 0.67 gives 857.6, 768 below 0.9 · 857.6, so 1,024: 16
    import json

    from kvcalc.hf import import_config
    from kvcalc.spec import ModelSpec

    cfg = json.loads((REFERENCE / "configs-extra-4" / "openelm-270m.json").read_text())
    cfg = {k: v for k, v in cfg.items() if k not in ("num_query_heads", "num_kv_heads")}
    cfg |= {"num_transformer_layers": 101, "qkv_multipliers": [0.5, 1.0], "ffn_multipliers": [0.5, 4.0]}
    spec = ModelSpec.model_validate(import_config(cfg, "t", "m").data)
    assert round(0.665 * 100) == 66 and round(0.665, 2) == 0.67  # the two roundings differ here
    heads = {layer: spec.groups[spec._owner[layer]].attention.n_heads for layer in (32, 33, 34)}
    assert heads == {32: 12, 33: 12, 34: 16}  # 0.66 at 32, 0.665 to 0.66 at 33, 0.67 at 34
