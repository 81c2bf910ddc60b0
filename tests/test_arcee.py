"""Arcee (model_type arcee, AFM-4.5B): Llama's attention, an FFN of up and down projections with no gate. The counts
equal transformers 5.25's ArceeForCausalLM on the same config (built on the meta device: 1,430,784 and 1,433,856)."""

from __future__ import annotations

import json

import pytest

from kvcalc.costs.params import param_totals
from kvcalc.registry import load_model

CFG = {"model_type": "arcee", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
       "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 512, "vocab_size": 1000,
       "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "hidden_act": "relu2", "tie_word_embeddings": False}


@pytest.mark.parametrize("bias", [False, True])
def test_arcee_ffn_has_no_gate(tmp_path, bias):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**CFG, "attention_bias": bias, "mlp_bias": bias}))
    lm = load_model(str(path))
    d, d_ff, q, kv = 256, 512, 4 * 64, 2 * 64
    attention = 2 * d * q + 2 * d * kv + (2 * q + 2 * kv if bias else 0)  # q, o; k, v; their biases (q, k, v, o)
    ffn = 2 * d * d_ff + (d_ff + d if bias else 0)  # up_proj and down_proj (ArceeMLP), no gate_proj
    total = 2 * 1000 * d + 2 * (attention + ffn + 2 * d) + d  # untied embeddings and head; two norms a layer; final norm
    assert param_totals(lm.spec)[0] == total == (1_433_856 if bias else 1_430_784)
    assert not lm.spec.ffn.gated and lm.warnings == ()
