"""Mamba-1 (Jamba) and Mamba-2 (Nemotron-H) layers and their importers, through the CLI: KV cache and constant
state from hand computations with the configs' numbers, parameters against the vendors' headlines, FLOP components."""

from __future__ import annotations

import json

import pytest

from conftest import REFERENCE, run

JAMBA = REFERENCE / "models-2026" / "jamba-v0.1.json"
NEMOTRON = REFERENCE / "models-2026" / "nemotron-h-56b-base-8k.json"
BF16 = 2  # bytes per element: compare's default KV and state dtype
CTXS = (4096, 131072)  # --ctx 4k,128k


def config(path) -> dict:
    return json.loads(path.read_text())


def compare(model, *args: str) -> list[dict]:
    return json.loads(run("compare", model, "--ctx", "4k,128k", "-f", "json", *args).stdout)


def cost(model, *args: str) -> dict:
    return json.loads(run("cost", model, "--ctx", "4k", "-f", "json", *args).stdout)["flops"]


def derivation(model) -> dict:
    """The --explain derivation by group kind."""
    out = json.loads(run("show", model, "--ctx", "4k", "--explain", "-f", "json").stdout)["derivation"]
    return {g["kind"]: g for g in out["groups"]}


# ---------------------------------------------------------------- Jamba v0.1 (Mamba-1)

c = config(JAMBA)
# JambaConfig.layers_block_type: layer i is attention when i % attn_layer_period == attn_layer_offset, else Mamba
JAMBA_ATTN = [i for i in range(c["num_hidden_layers"]) if i % c["attn_layer_period"] == c["attn_layer_offset"]]
# JambaConfig.layers_num_experts: MoE when i % expert_layer_period == expert_layer_offset, else a dense MLP
JAMBA_MOE = [i for i in range(c["num_hidden_layers"]) if i % c["expert_layer_period"] == c["expert_layer_offset"]]
JAMBA_D_INNER = c["mamba_expand"] * c["hidden_size"]  # JambaMambaMixer.intermediate_size
# ssm_states [d_inner, d_state] + the convolution's last d_conv − 1 inputs of each of the d_inner channels (vLLM)
JAMBA_STATE = JAMBA_D_INNER * c["mamba_d_state"] + (c["mamba_d_conv"] - 1) * JAMBA_D_INNER


def test_jamba_layer_rules():
    assert JAMBA_ATTN == [4, 12, 20, 28] and len(JAMBA_MOE) == 16  # 1 attention layer in 8, MoE every other layer
    assert JAMBA_STATE == 8192 * 16 + 3 * 8192 == 155_648


def test_jamba_kv_cache_and_state():
    d_h = c["hidden_size"] // c["num_attention_heads"]  # JambaAttention.head_dim
    rows = compare(JAMBA)
    for row, ctx in zip(rows, CTXS):
        # only the attention layers hold K and V: 2·n_kv·d_h per token and layer
        assert row["kv_cache_bytes"] == len(JAMBA_ATTN) * 2 * c["num_key_value_heads"] * d_h * ctx * BF16
        # the 28 Mamba layers each hold one state, whatever the context
        assert row["state_bytes"] == (c["num_hidden_layers"] - len(JAMBA_ATTN)) * JAMBA_STATE * BF16 == 8_716_288
        assert row["cache_bytes"] == row["kv_cache_bytes"] + row["state_bytes"]
    assert rows[0]["state_bytes"] == rows[1]["state_bytes"]
    assert rows[0]["attention"] == "mamba+gqa"


def test_jamba_state_derivation_names_its_fields():
    state = derivation(JAMBA)["mamba"]["state"]
    assert state["components"] == {"ssm": 8192 * 16, "conv": 3 * 8192}
    assert state["formula"] == "E·d·N + (K − 1)·E·d" and "vLLM" in state["reference"]
    assert {s["symbol"]: s["value"] for s in state["symbols"]} == {"E": 2, "d": 4096, "N": 16, "K": 4}
    fields = [s["field"].rpartition(".attention.")[2] for s in state["symbols"]]
    assert fields == ["mamba_expand", "d_model", "mamba_d_state", "mamba_d_conv"]


def jamba_params() -> tuple[int, int]:
    """Jamba v0.1's (total, active) parameters, written out from the config and JambaForCausalLM's modules."""
    d, v, n = c["hidden_size"], c["vocab_size"], c["num_hidden_layers"]
    di, ns, r, k = JAMBA_D_INNER, c["mamba_d_state"], c["mamba_dt_rank"], c["mamba_d_conv"]
    d_h = d // c["num_attention_heads"]
    attn = d * d + 2 * d * c["num_key_value_heads"] * d_h + d * d  # q, k, v, o without biases
    mamba = (d * 2 * di  # in_proj
             + di * k + di  # conv1d weight and bias (mamba_conv_bias)
             + di * (r + 2 * ns)  # x_proj
             + r * di + di  # dt_proj with its bias
             + di * ns + di  # A_log, D
             + di * d  # out_proj
             + r + 2 * ns)  # dt_layernorm, b_layernorm, c_layernorm
    mlp = 3 * d * c["intermediate_size"]  # gate, up, down
    router = d * c["num_experts"]
    n_attn, n_moe = len(JAMBA_ATTN), len(JAMBA_MOE)
    common = 2 * v * d + n_attn * attn + (n - n_attn) * mamba + (2 * n + 1) * d  # embeddings, mixers, norms
    total = common + (n - n_moe) * mlp + n_moe * (c["num_experts"] * mlp + router)
    active = common + (n - n_moe) * mlp + n_moe * (c["num_experts_per_tok"] * mlp + router)
    return total, active


def test_jamba_parameters():
    row = compare(JAMBA)[0]
    total, active = jamba_params()
    assert (row["params_total"], row["params_active"]) == (total, active) == (51_570_323_328, 12_110_311_296)
    # https://huggingface.co/ai21labs/Jamba-v0.1: "12B active parameters and a total of 52B parameters"
    assert abs(total - 52e9) / 52e9 < 0.03 and abs(active - 12e9) / 12e9 < 0.03


def test_jamba_cost_shows_mamba_components():
    decode = cost(JAMBA)["decode_token"]
    n_mamba, di, ns = c["num_hidden_layers"] - len(JAMBA_ATTN), JAMBA_D_INNER, c["mamba_d_state"]
    assert decode["mamba/in_proj"] == n_mamba * 2 * c["hidden_size"] * 2 * di
    assert decode["mamba/conv"] == n_mamba * 2 * c["mamba_d_conv"] * di  # K multiply-adds per channel
    assert decode["mamba/x_proj"] == n_mamba * 2 * di * (c["mamba_dt_rank"] + 2 * ns)
    assert decode["mamba/dt_proj"] == n_mamba * 2 * c["mamba_dt_rank"] * di
    # the recurrence: 8 per state element (Δ·A, exp, Δ·B, ·u, Ā·h, + B̄u, C·h as a multiply-add), + D skip and z gate
    assert decode["mamba/scan"] == n_mamba * (8 * di * ns + 2 * di)
    assert decode["mamba/out_proj"] == n_mamba * 2 * di * c["hidden_size"]
    assert "mamba/scan" in run("cost", JAMBA, "--ctx", "4k").stdout


# ---------------------------------------------------------------- Nemotron-H 56B (Mamba-2)

h = config(NEMOTRON)
PATTERN = h["hybrid_override_pattern"]  # NemotronHConfig: M Mamba-2, * attention, - MLP, E MoE; one block each
NH_D_INNER = h["mamba_num_heads"] * h["mamba_head_dim"]  # NemotronHMamba2Mixer.intermediate_size
NH_CONV_DIM = NH_D_INNER + 2 * h["n_groups"] * h["ssm_state_size"]  # NemotronHMamba2Mixer.conv_dim
# ssm_states [H, P, N] + the convolution's last K − 1 inputs of each of the conv_dim channels (vLLM)
NH_SSM = NH_D_INNER * h["ssm_state_size"]
NH_CONV = (h["conv_kernel"] - 1) * NH_CONV_DIM
NH_STATE = NH_SSM + NH_CONV
# vLLM's NemotronHForCausalLMConfig keeps the SSM state in the config's mamba_ssm_cache_dtype, float32 when absent (as
# here); the conv state follows the KV dtype
NH_STATE_BYTES = NH_SSM * 4 + NH_CONV * BF16


def test_nemotron_pattern():
    assert len(PATTERN) == h["num_hidden_layers"] == 118
    assert (PATTERN.count("M"), PATTERN.count("*"), PATTERN.count("-"), PATTERN.count("E")) == (54, 10, 54, 0)
    assert NH_STATE == 256 * 64 * 256 + 3 * (16384 + 2 * 8 * 256) == 4_255_744


@pytest.mark.parametrize("model", [NEMOTRON, "nemotron-h-56b"])
def test_nemotron_kv_cache_and_state(model):
    rows = compare(model)
    for row, ctx in zip(rows, CTXS):
        assert row["n_layers"] == len(PATTERN)  # one layer per block
        # only the '*' blocks hold K and V: 2·n_kv·d_h per token and layer (attention_head_dim 128)
        assert row["kv_cache_bytes"] == PATTERN.count("*") * 2 * h["num_key_value_heads"] * h["attention_head_dim"] * ctx * BF16
        # the 'M' blocks each hold one state, whatever the context: 54 · (256·64·256 · 4 + 3·20,480 · 2)
        assert row["state_bytes"] == PATTERN.count("M") * NH_STATE_BYTES == 54 * (4_194_304 * 4 + 61_440 * 2) == 912_605_184
    assert rows[0]["state_bytes"] == rows[1]["state_bytes"]


@pytest.mark.parametrize("model", [NEMOTRON, "nemotron-h-56b"])
def test_nemotron_state_dtype_flag_stores_every_component_in_it(model):
    # --state-dtype stores the SSM and the conv state alike: fp32 doubles the bf16 state, bf16 halves the SSM part
    for dtype, size in (("fp32", 4), ("bf16", 2)):
        row = compare(model, "--state-dtype", dtype)[0]
        assert row["state_bytes"] == PATTERN.count("M") * NH_STATE * size
        assert row["kv_cache_bytes"] == 10 * 2 * 8 * 128 * 4096 * BF16
    assert compare(model, "--state-dtype", "bf16")[0]["state_bytes"] == 459_620_352


def test_nemotron_ssm_cache_dtype_from_the_config(tmp_path):
    # the config's mamba_ssm_cache_dtype, when given, is what the SSM state is stored in (vLLM reads it); a bad one is
    # refused with the key named
    given = tmp_path / "config.json"
    given.write_text(json.dumps({**h, "mamba_ssm_cache_dtype": "float16"}))
    assert compare(given)[0]["state_bytes"] == PATTERN.count("M") * NH_STATE * BF16
    spec = json.loads(run("show", given, "-f", "json").stdout)["spec"]
    assert "mamba_ssm_cache_dtype float16: the Mamba-2 SSM state is stored in fp16" in spec["notes"]
    # SGLang reads mamba_ssm_dtype (mamba_utils.mamba2_state_dtype), float32 without it: said where the two differ
    sglang = "SGLang keeps this SSM state in fp32 (it reads mamba_ssm_dtype, not mamba_ssm_cache_dtype)"
    assert sglang in spec["notes"]
    given.write_text(json.dumps({**h, "mamba_ssm_cache_dtype": "float16", "mamba_ssm_dtype": "float16"}))
    assert "SGLang" not in json.loads(run("show", given, "-f", "json").stdout)["spec"]["notes"]
    # vLLM runs num_nextn_predict_layers as NemotronHMTPModel (config/speculative.py): not modelled, said so
    given.write_text(json.dumps({**h, "num_nextn_predict_layers": 1, "mtp_hybrid_override_pattern": "*E"}))
    notes = json.loads(run("show", given, "-f", "json").stdout)["spec"]["notes"]
    assert "1 multi-token-prediction layer(s) (mtp_hybrid_override_pattern '*E') are not counted, even with --mtp" in notes
    given.write_text(json.dumps({**h, "mamba_ssm_cache_dtype": "fp8"}))
    res = run("show", given, ok=False)
    assert res.exit_code == 1 and "mamba_ssm_cache_dtype: must be one of float32, bfloat16, float16, got 'fp8'" in res.stderr


def test_nemotron_state_derivation():
    state = derivation(NEMOTRON)["mamba2"]["state"]
    assert state["components"] == {"ssm": 256 * 64 * 256, "conv": 3 * 20480}
    assert state["substituted"] == "256·64·256 + (4 − 1)·(256·64 + 2·8·256)"


def nemotron_params() -> int:
    """Nemotron-H-56B's parameters, written out from the config and NemotronHForCausalLM's modules."""
    d, v, nh, k = h["hidden_size"], h["vocab_size"], h["mamba_num_heads"], h["conv_kernel"]
    mamba = (d * (NH_D_INNER + NH_CONV_DIM + nh)  # in_proj: z, x·B·C, Δ
             + NH_CONV_DIM * k + NH_CONV_DIM  # conv1d weight and bias (use_conv_bias)
             + 3 * nh  # dt_bias, A_log, D
             + NH_D_INNER  # the gated RMSNorm
             + NH_D_INNER * d)  # out_proj
    d_h = h["attention_head_dim"]
    attn = 2 * d * h["num_attention_heads"] * d_h + 2 * d * h["num_key_value_heads"] * d_h  # q, o; k, v
    mlp = 2 * d * h["intermediate_size"]  # up, down (relu2, no gate)
    blocks = PATTERN.count("M") * mamba + PATTERN.count("*") * attn + PATTERN.count("-") * mlp
    return 2 * v * d + blocks + (len(PATTERN) + 1) * d  # embeddings, blocks, one norm per block and norm_f


@pytest.mark.parametrize("model", [NEMOTRON, "nemotron-h-56b"])
def test_nemotron_parameters(model):
    row = compare(model)[0]
    assert row["params_total"] == row["params_active"] == nemotron_params() == 56_324_350_464
    # https://huggingface.co/nvidia/Nemotron-H-56B-Base-8K: a 56B-parameter model
    assert abs(row["params_total"] - 56e9) / 56e9 < 0.03


def test_nemotron_cost_shows_mamba_components():
    decode = cost(NEMOTRON)["decode_token"]
    n = PATTERN.count("M")
    assert decode["mamba/in_proj"] == n * 2 * h["hidden_size"] * (NH_D_INNER + NH_CONV_DIM + h["mamba_num_heads"])
    assert decode["mamba/conv"] == n * 2 * h["conv_kernel"] * NH_CONV_DIM
    # the SSD recurrence: 3 per state element to update (decay, Δx·B, add), 2 to read out (C), + the D skip
    assert decode["mamba/scan"] == n * (5 * NH_D_INNER * h["ssm_state_size"] + NH_D_INNER)
    assert decode["mamba/out_proj"] == n * 2 * NH_D_INNER * h["hidden_size"]
    assert decode["ffn/dense"] == PATTERN.count("-") * 2 * 2 * h["hidden_size"] * h["intermediate_size"]
    prefill = cost(NEMOTRON)["prefill"]
    assert prefill["mamba/scan"] == 4096 * decode["mamba/scan"]  # constant work per token, at any context


# ---------------------------------------------------------------- errors


def test_unknown_block_in_pattern(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({**h, "hybrid_override_pattern": "M*-X"}))
    res = run("show", bad, ok=False)
    assert res.exit_code == 1 and "hybrid_override_pattern: unknown block 'X'" in res.stderr


def test_mamba2_heads_must_divide_into_groups(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({**h, "n_groups": 7}))
    res = run("show", bad, ok=False)
    assert res.exit_code == 1 and "mamba_num_heads (256) must be divisible by n_groups (7)" in res.stderr


def test_nemotron_per_layer_rows_hold_one_layers_state():
    # --per-layer: each 'M' row holds its own Mamba-2 state (4,194,304 SSM elements in fp32 and 61,440 conv elements in
    # bf16), not its group's 54 layers
    layers = json.loads(run("show", "nemotron-h-56b", "--ctx", "4k", "--per-layer", "-f", "json").stdout)["layers"]
    assert len(layers) == len(PATTERN)
    for r, block in zip(layers, PATTERN):
        assert r.get("state_bytes") == (NH_STATE_BYTES if block == "M" else None)
    assert NH_STATE_BYTES == 16_900_096


def test_jambas_auto_dt_rank_rounds_up():
    # a mutation review: mamba_dt_rank "auto" is math.ceil(hidden_size / 16) (JambaConfig); the reference config gives
    # 256 and 4,096 divides by 16, so a floor went unseen. At hidden_size 4,104: 257, and Δ's projections (x_proj's
    # R rows, dt_proj's R columns and its bias) grow with it
    from kvcalc.hf import spec_from_config

    cfg = json.loads((REFERENCE / "models-2026" / "jamba-v0.1.json").read_text())
    cfg.update(hidden_size=4104, num_attention_heads=24, num_key_value_heads=8, mamba_dt_rank="auto")
    spec, _ = spec_from_config(cfg, "config.json", "jamba-auto")
    mamba = next(g for g in spec.groups if g.attention.kind == "mamba")
    assert mamba.attention.dt_rank(mamba.layer) == -(-4104 // 16) == 257
    cfg["mamba_dt_rank"] = 257
    given, _ = spec_from_config(cfg, "config.json", "jamba-257")
    from kvcalc.costs.params import param_counts

    assert param_counts(spec).total == param_counts(given).total
