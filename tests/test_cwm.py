"""Code World Model (model_type cwm): Llama's decoder without attention biases, CwmConfig's defaults and its window
pattern. The counts equal transformers 5.25's CwmForCausalLM on the same config (built on the meta device:
16,244,992, and 16,255,232 with mlp_bias)."""

from __future__ import annotations

import json

import pytest

from kvcalc.costs.cache import kv_cache
from kvcalc.costs.params import param_totals
from kvcalc.registry import load_model
from kvcalc.settings import Settings

# num_key_value_heads, head_dim and layer_types left to CwmConfig (8, 128; full on layers 0, 4, …)
CFG = {"model_type": "cwm", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 8,
       "num_attention_heads": 16, "vocab_size": 1000, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
       "sliding_window": 64}


@pytest.mark.parametrize("bias", [False, True])
def test_cwm_by_hand(tmp_path, bias):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**CFG, "attention_bias": bias, "mlp_bias": bias}))  # attention_bias: never read
    spec = load_model(str(path)).spec
    d, d_ff, q, kv = 256, 512, 16 * 128, 8 * 128
    layer = 2 * d * q + 2 * d * kv + 3 * d * d_ff + 2 * d + ((2 * d_ff + d) if bias else 0)  # MLP biases only
    total = 2 * 1000 * d + 8 * layer + d  # untied (CwmConfig), a final norm
    assert param_totals(spec)[0] == total == (16_255_232 if bias else 16_244_992)
    # layers 0 and 4 attend everything, the six others a window of 64: K and V of 8 heads of 128 a token
    assert kv_cache(spec, Settings(ctx=1000)).elements == 8 * 2 * 128 * (2 * 1000 + 6 * 64)
