"""Importers of the model_types added fifth: each config in tests/data/reference/configs-extra-5 (SOURCES.md says
where it comes from) goes through `kvcalc compare`, and the cache is checked against figures written out from the
config's numbers, with the rule each follows; each importer's trap gets its own assertion."""

from __future__ import annotations

from conftest import ConfigFolder, kv_bytes

CONFIGS = ConfigFolder("configs-extra-5")
K = 1024
BF16 = 2  # bytes per cached element (kvcalc's default kv dtype)
CTXS = (4 * K, 128 * K)

compare, config, imported = CONFIGS.compare, CONFIGS.config, CONFIGS.imported


# ---------------------------------------------------------------- bart (KoBART summary v3)

KOBART = "kobart-summary-v3"


def test_bart_cache_self_plus_cross_of_max_positions():
    # 6 decoder layers, 16 heads of 768 / 16 = 48: self-attention K/V grow with ctx; cross-attention K/V hold the
    # encoder's output, max_position_embeddings = 1026 positions by default (the most the encoder's table serves)
    rows = compare(KOBART)
    assert kv_bytes(rows) == [6 * 2 * 16 * 48 * (ctx + 1026) * BF16 for ctx in CTXS]
    assert rows[0]["enc_ctx"] == 1026


def test_bart_position_tables_have_two_offset_rows():
    # BartLearnedPositionalEmbedding: Embedding(max_position_embeddings + 2, d) in the encoder and in the decoder;
    # q/k/v/out_proj and fc1/fc2 with biases; 2 LayerNorms per encoder layer, 3 per decoder layer, one
    # layernorm_embedding per stack and no final LayerNorm; one shared embedding tied to lm_head
    d, v, ff, pos = 768, 30000, 3072, 1026 + 2
    attn, ffn, ln = 4 * (d * d + d), 2 * d * ff + ff + d, 2 * d
    encoder = 6 * (attn + ffn + 2 * ln) + pos * d + ln
    decoder = 6 * (2 * attn + ffn + 3 * ln) + pos * d + ln
    assert compare(KOBART)[0]["params_total"] == v * d + encoder + decoder == 123_859_968


def test_bart_untied_head_adds_a_matrix():
    # tie_word_embeddings false: lm_head is its own vocab × d matrix (no bias: final_logits_bias is a buffer)
    tied = imported(config(KOBART))
    untied = imported({**config(KOBART), "tie_word_embeddings": False})
    assert (tied.tie_embeddings, untied.tie_embeddings) == (True, False)


def test_bart_encoder_heads_read_apart():
    s = imported({**config(KOBART), "encoder_attention_heads": 12})
    assert (s.encoder.attention.n_heads, s.groups[0].attention.n_heads) == (12, 16)
