"""Importers of the model_types added fifth: each config in tests/data/reference/configs-extra-5 (SOURCES.md says
where it comes from) goes through `kvcalc compare`, and the cache is checked against figures written out from the
config's numbers, with the rule each follows; each importer's trap gets its own assertion."""

from __future__ import annotations

import pytest

from conftest import ConfigFolder, kv_bytes
from kvcalc.errors import SpecError

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


# ---------------------------------------------------------------- mistral3 (FLUX.2-dev's Mistral Small 3 text encoder)

M3 = "flux2-dev-mistral-small-3"


def test_mistral3_cache_from_text_config():
    # text_config: 40 layers, 8 K/V heads of head_dim 128, sliding_window null (full attention on every layer)
    assert kv_bytes(compare(M3)) == [40 * 2 * 8 * 128 * ctx * BF16 for ctx in CTXS]


def test_mistral3_vision_tower_not_counted_and_head_untied():
    # only the Mistral decoder: q 32 × 128, k/v 8 × 128, o, a SwiGLU MLP of 32768, 2 RMSNorms per layer; the
    # embedding and an untied lm_head (MistralConfig default tie_word_embeddings false); the Pixtral tower and
    # projector are left out
    d, v, layer = 5120, 131072, 2 * 5120 * 4096 + 2 * 5120 * 1024 + 3 * 5120 * 32768 + 2 * 5120
    assert compare(M3)[0]["params_total"] == 2 * v * d + 40 * layer + d == 23_572_403_200


def test_ministral3_head_dim_defaults_to_128_not_hidden_over_heads():
    # Ministral3Config: head_dim 128 when absent (MistralConfig would take 5120 / 32 = 160)
    text = {k: v for k, v in config(M3)["text_config"].items() if k != "head_dim"}
    as_ministral = imported({**config(M3), "text_config": {**text, "model_type": "ministral3"}})
    as_mistral = imported({**config(M3), "text_config": text})
    assert ({g.head_dim for g in as_ministral.groups}, {g.head_dim for g in as_mistral.groups}) == ({128}, {160})
    bare = imported({**text, "model_type": "ministral3"})  # a Ministral3ForCausalLM config at the top level
    assert {g.head_dim for g in bare.groups} == {128}


def test_mistral3_refuses_an_unknown_text_model():
    with pytest.raises(SpecError, match="text_config.model_type"):
        imported({**config(M3), "text_config": {**config(M3)["text_config"], "model_type": "llama"}})
