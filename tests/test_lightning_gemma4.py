"""MiniMax-M1 (lightning attention + softmax GQA, MoE) and Gemma 4 26B A4B (sliding + full GQA of different shapes,
a dense MLP beside an MoE), imported from their real configs and checked through the CLI against closed forms
written from the configs' numbers and against the vendors' published parameter counts."""

from __future__ import annotations

import json

import pytest

from conftest import REFERENCE, run
from kvcalc.attention import KINDS, Layer, Work

MODELS_2026 = REFERENCE / "models-2026"
MINIMAX = MODELS_2026 / "minimax-m1.json"
GEMMA4 = MODELS_2026 / "gemma-4-26b-a4b.json"
BF16 = 2  # bytes per element
CTXS = (4 * 1024, 128 * 1024)


def compare(source, *extra: str) -> list[dict]:
    return json.loads(run("compare", str(source), "--ctx", "4k,128k", "-f", "json", *extra).stdout)


# ---------------------------------------------------------------- MiniMax-M1

# From minimax-m1.json: hidden_size 6144, 80 layers, 64 heads, 8 KV heads, head_dim 128, vocab 200064 (untied),
# 32 experts of intermediate_size 9216, top 2. attn_type_list: 1 (softmax) at layers 7, 15, ..., 79, else 0.
MM_D, MM_H, MM_KV, MM_DH, MM_V = 6144, 64, 8, 128, 200_064
MM_SOFTMAX, MM_LIGHTNING = 10, 70
MM_E, MM_TOPK, MM_DFF = 32, 2, 9216


def test_minimax_layer_split_follows_attn_type_list():
    cfg = json.loads(MINIMAX.read_text())
    # MiniMaxM1Model.__init__: attn_type_list[i] == 0 -> MiniMaxM1LightningAttention, else softmax attention
    assert cfg["attn_type_list"].count(1) == MM_SOFTMAX and cfg["attn_type_list"].count(0) == MM_LIGHTNING
    out = run("show", str(MINIMAX), "-f", "json").stdout
    assert '"lightning"' in out and "0-6,8-14" in out.replace(", ", ",")


@pytest.mark.parametrize("source", [MINIMAX, "minimax-m1"], ids=["config", "bundled"])
def test_minimax_cache_and_state(source):
    rows = compare(source)
    for row, ctx in zip(rows, CTXS, strict=True):
        # Only the softmax layers cache tokens: 2 (K and V) · n_kv · d_h per token, no window (sliding_window null).
        assert row["kv_cache_bytes"] == MM_SOFTMAX * 2 * MM_KV * MM_DH * BF16 * ctx
        # Each lightning layer holds kv = zeros(b, h, d_h, d_h) (MiniMaxM1LightningAttention.inference), whatever
        # the context: 70 · 64·128·128 · 2 bytes = 146,800,640.
        assert row["state_bytes"] == MM_LIGHTNING * MM_H * MM_DH * MM_DH * BF16 == 146_800_640
    assert rows[0]["state_bytes"] == rows[1]["state_bytes"]


def test_minimax_state_dtype_is_its_own():
    # The reference code keeps the lightning state in float32; --state-dtype fp32 doubles it, the KV cache stays.
    bf16, fp32 = compare(MINIMAX)[0], compare(MINIMAX, "--state-dtype", "fp32")[0]
    assert fp32["state_bytes"] == 2 * bf16["state_bytes"] and fp32["kv_cache_bytes"] == bf16["kv_cache_bytes"]


@pytest.mark.parametrize("source", [MINIMAX, "minimax-m1"], ids=["config", "bundled"])
def test_minimax_parameters_exact_and_published(source):
    row = compare(source)[0]
    inner = MM_H * MM_DH
    lightning = MM_D * 3 * inner + MM_D * inner + inner + inner * MM_D  # qkv_proj, output_gate, norm, out_proj
    softmax = 2 * MM_D * inner + 2 * MM_D * MM_KV * MM_DH  # q, o; k, v (no biases)
    expert, router = 3 * MM_D * MM_DFF, MM_D * MM_E  # w1, w2, w3; gate Linear(hidden, 32, bias=False)
    norms = 80 * 2 * MM_D + MM_D  # input_layernorm, post_attention_layernorm; the final norm
    embeddings = 2 * MM_V * MM_D  # embed_tokens and lm_head (tie_word_embeddings false)
    total = MM_LIGHTNING * lightning + MM_SOFTMAX * softmax + 80 * (MM_E * expert + router) + norms + embeddings
    assert row["params_total"] == total == 456_089_655_296
    # Model card (github.com/MiniMax-AI/MiniMax-M1 README): "a total of 456 billion parameters with 45.9 billion
    # parameters activated per token".
    assert abs(row["params_total"] / 456e9 - 1) < 0.03
    active = total - 80 * (MM_E - MM_TOPK) * expert
    assert row["params_active"] == active
    # kvcalc counts both embedding tables as active (DeepSeek's convention); the card's 45.9B leaves them out.
    assert abs((active - embeddings) / 45.9e9 - 1) < 0.03


def test_lightning_flops_per_token():
    kind = KINDS["lightning"].model_validate({"kind": "lightning", "n_heads": MM_H, "head_dim": MM_DH})
    layer = Layer(d_model=MM_D, window=None, path="layer_groups[0].attention")
    flops = kind.flops(layer, Work(tokens=5, pairs=0, expanded=0), "naive")
    inner = MM_H * MM_DH
    # projections: 2 FLOPs per weight and token; the recurrence kv = λ·kv + kᵀv: 3 per state element (decay,
    # outer product, sum), the readout q·kv: 2 per state element (multiply-add)
    assert flops == {
        "attn/qkv": 2 * 5 * MM_D * 3 * inner, "attn/gate": 2 * 5 * MM_D * inner,
        "attn/state": 3 * 5 * MM_H * MM_DH**2, "attn/readout": 2 * 5 * MM_H * MM_DH**2, "attn/o": 2 * 5 * inner * MM_D,
    }
    assert kind.tokens_held(layer, 131_072) == 0 and kind.cache_formula(layer, "").elements == 0


def test_attn_type_list_errors_name_the_key(tmp_path):
    cfg = json.loads(MINIMAX.read_text())
    cfg["attn_type_list"] = cfg["attn_type_list"][:-1]
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps(cfg))
    res = run("show", str(bad), ok=False)
    assert res.exit_code != 0
    assert "attn_type_list: must have one entry per layer (num_hidden_layers 80), got 79 entries" in res.stderr
    cfg["attn_type_list"] = [2] * 80
    bad.write_text(json.dumps(cfg))
    assert "attn_type_list[0]: must be 0 (lightning) or 1 (softmax), got 2" in run("show", str(bad), ok=False).stderr


# ---------------------------------------------------------------- Gemma 4 26B A4B

# From gemma-4-26b-a4b.json text_config: hidden_size 2816, 30 layers (every 6th full), 16 heads; sliding layers
# 8 KV heads × head_dim 256, window 1024; full layers num_global_key_value_heads 2 × global_head_dim 512
# (attention_k_eq_v true); vocab 262144 (tied); intermediate_size 2112; 128 experts of 704, top 8.
G_D, G_H, G_V, G_W = 2816, 16, 262_144, 1024
G_SLIDING, G_FULL = 25, 5
G_KV_S, G_DH_S, G_KV_F, G_DH_F = 8, 256, 2, 512
G_DFF, G_E, G_TOPK, G_DFF_E = 2112, 128, 8, 704


@pytest.mark.parametrize("source", [GEMMA4, "gemma4-26b-a4b"], ids=["config", "bundled"])
def test_gemma4_cache(source):
    for row, ctx in zip(compare(source), CTXS, strict=True):
        # Sliding layers hold min(ctx, W) tokens: a query sees W keys, itself included (transformers masking_utils
        # sliding_window_overlay: kv_idx > q_idx - W). Full layers hold ctx. Both cache K and V (2·n_kv·d_h):
        # with attention_k_eq_v, V = v_norm(k_proj(x)) and K = RoPE(k_norm(k_proj(x))) are different tensors and
        # Gemma4TextAttention passes both to past_key_values.update.
        sliding = G_SLIDING * 2 * G_KV_S * G_DH_S * BF16 * min(ctx, G_W)
        full = G_FULL * 2 * G_KV_F * G_DH_F * BF16 * ctx
        assert row["kv_cache_bytes"] == sliding + full
        assert row["state_bytes"] == 0
    # "Gemma 4 … full layers 2 KV heads × 512, sliding layers 8 × 256": 4096 vs 2048 elements per token and layer
    assert compare(GEMMA4)[0]["kv_bytes_per_token"] == (G_SLIDING * 4096 + G_FULL * 2048) * BF16


@pytest.mark.parametrize("source", [GEMMA4, "gemma4-26b-a4b"], ids=["config", "bundled"])
def test_gemma4_parameters_exact_and_published(source):
    row = compare(source)[0]

    def attn(n_kv: int, d_h: int, v_proj: bool) -> int:
        q_o = 2 * G_D * G_H * d_h
        return q_o + G_D * n_kv * d_h * (2 if v_proj else 1) + 2 * d_h  # k (and v) projections; q_norm, k_norm

    ffn = 3 * G_D * G_DFF + G_E * 3 * G_D * G_DFF_E + G_D * G_E + G_E  # dense MLP, experts, router proj, per_expert_scale
    norms = 30 * 8 * G_D + G_D  # 7 RMSNorms per layer and the router's scale; the final norm
    exact = G_V * G_D + G_SLIDING * attn(G_KV_S, G_DH_S, True) + G_FULL * attn(G_KV_F, G_DH_F, False) + 30 * ffn + norms
    assert exact == 25_233_141_760
    # the 5 K=V full layers have no W_V (Gemma4TextAttention: v_proj is None when attention_k_eq_v and not sliding)
    assert row["params_total"] == exact
    assert row["params_active"] == exact - 30 * (G_E - G_TOPK) * 3 * G_D * G_DFF_E == 3_822_530_560
    # Model card (huggingface.co/google/gemma-4-26B-A4B): 25.2B total parameters, 3.8B active.
    assert abs(row["params_total"] / 25.2e9 - 1) < 0.003 and abs(row["params_active"] / 3.8e9 - 1) < 0.01


def test_gemma4_unmodelled_features_are_refused(tmp_path):
    cfg = json.loads(GEMMA4.read_text())
    bad = tmp_path / "config.json"
    for key, value, says in [
        ("hidden_size_per_layer_input", 256, "per-layer embeddings (Gemma 4 E2B/E4B) are not modelled"),
        ("num_kv_shared_layers", 10, "layers that reuse another layer's K/V cache are not modelled"),
    ]:
        bad.write_text(json.dumps({**cfg, "text_config": {**cfg["text_config"], key: value}}))
        res = run("show", str(bad), ok=False)
        assert res.exit_code != 0 and f"{key}: {value}: {says}" in res.stderr


def test_gemma4_text_model_type_and_default_pattern(tmp_path):
    text = {k: v for k, v in json.loads(GEMMA4.read_text())["text_config"].items() if k != "layer_types"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(text))  # model_type gemma4_text, no layer_types: Gemma4TextConfig's 5:1 pattern
    for row, want in zip(compare(path), compare(GEMMA4), strict=True):
        assert row["kv_cache_bytes"] == want["kv_cache_bytes"] and row["params_total"] == want["params_total"]


def test_engines_warn_they_do_not_serve_lightning_attention():
    # vLLM 0.34.0's registry lists MiniMaxM1ForCausalLM (and MiniMaxText01) among the architectures removed after
    # 0.23.0, and SGLang 0.5.23 has no MiniMax-M1 model: the pages are the engine's rules applied, said as such
    for engine in ("vllm", "sglang"):
        err = run("compare", "minimax-m1", "--ctx", "4k", "--engine", engine).stderr
        assert ("warning: minimax-m1: --engine " + engine + ": neither vLLM nor SGLang serves this lightning-attention "
                "model (vLLM dropped MiniMax-M1 after 0.23.0)") in err
    assert "warning" not in run("compare", "minimax-m1", "--ctx", "4k", "--engine", "ideal").stderr
    assert "warning" not in run("compare", "minimax-m2.5", "--ctx", "4k", "--engine", "vllm").stderr


def test_engines_warn_they_have_no_model_file_for_openelm():
    # neither vLLM 0.34.0's registry nor SGLang 0.5.23's models name OpenELM
    path = str(REFERENCE / "configs-extra-4" / "openelm-270m.json")
    for engine in ("vllm", "sglang"):
        err = run("compare", path, "--ctx", "1k", "--engine", engine).stderr
        assert f"warning: openelm-270m: --engine {engine}: neither vLLM nor SGLang has a model file for OpenELM" in err
    assert "warning" not in run("compare", path, "--ctx", "1k").stderr


def test_sglang_warns_it_has_no_model_file_for_falcon_or_jamba():
    # SGLang 0.5.23 has no falcon.py or jamba.py (its Transformers backend may serve them); vLLM has both
    for model, name in (("falcon-7b", "Falcon"), (str(REFERENCE / "models-2026" / "jamba-v0.1.json"), "Jamba")):
        err = run("compare", model, "--ctx", "1k", "--engine", "sglang").stderr
        assert f"--engine sglang: SGLang has no model file for {name} (its Transformers backend may serve it" in err
        assert "warning" not in run("compare", model, "--ctx", "1k", "--engine", "vllm").stderr
