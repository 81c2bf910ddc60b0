"""The dense GLM-4 importers (model_types glm and glm4): q/k/v biases without o_proj's, four norms a layer in glm4,
GlmConfig's defaults. The counts are transformers 5.25's on the same configs (GlmForCausalLM, Glm4ForCausalLM built
on the meta device: 2,088,192 and 2,089,216), derived here by hand."""

from __future__ import annotations

import json

import pytest

from kvcalc.costs.cache import kv_cache
from kvcalc.costs.params import param_totals
from kvcalc.registry import load_model
from kvcalc.settings import Settings

# keys a GLM-4 config gives; num_key_value_heads, head_dim, attention_bias and tie_word_embeddings left to GlmConfig
SMALL = {"hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 512,
         "vocab_size": 1000, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "hidden_act": "silu",
         "partial_rotary_factor": 0.5}
D, L, N_H, N_KV, D_H, D_FF, V = 256, 2, 4, 2, 128, 512, 1000


def load(tmp_path, model_type: str, **keys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": model_type, **SMALL, **keys}))
    return load_model(str(path)).spec


def attention(bias: bool) -> int:
    """q, k, v (with biases when attention_bias) and o_proj, never with a bias (GlmAttention)."""
    q, kv = N_H * D_H, N_KV * D_H
    return D * q + 2 * D * kv + q * D + ((q + 2 * kv) if bias else 0)


@pytest.mark.parametrize("model_type, norms", [("glm", 2), ("glm4", 4)])
def test_glm_parameters_by_hand(tmp_path, model_type, norms):
    spec = load(tmp_path, model_type)
    per_layer = attention(True) + 3 * D * D_FF + norms * D  # gate_up_proj is gate and up: a gated FFN
    total = 2 * V * D + L * per_layer + D  # untied (GlmConfig), a final norm
    assert param_totals(spec) == (total, total)
    assert total == {"glm": 2_088_192, "glm4": 2_089_216}[model_type]  # transformers 5.25, the same configs
    assert "GlmConfig defaults filled in for: num_key_value_heads 2, head_dim 128, attention_bias true" in spec.notes or \
        "Glm4Config defaults filled in for: num_key_value_heads 2, head_dim 128, attention_bias true" in spec.notes
    # the cache: 2 KV heads of 128, K and V, bf16, each layer
    assert kv_cache(spec, Settings(ctx=1000)).bytes == L * 2 * N_KV * D_H * 1000 * 2


def test_glm4_without_biases(tmp_path):
    spec = load(tmp_path, "glm4", attention_bias=False, num_key_value_heads=4, tie_word_embeddings=True)
    q = N_H * D_H
    per_layer = 4 * D * q + 3 * D * D_FF + 4 * D  # MHA now: q, k, v, o of n_h·d_h, no bias
    assert param_totals(spec)[0] == V * D + L * per_layer + D
