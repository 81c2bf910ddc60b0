"""Gated DeltaNet (kind gated_deltanet) and Qwen3-Next (model_type qwen3_next): cache, constant state, parameters
and FLOPs of Qwen3-Next-80B-A3B written out by hand from its config.json, through the CLI.

The config: tests/data/reference/models-2026/qwen3-next-80b-a3b-instruct.json (a copy of
https://huggingface.co/Qwen/Qwen3-Next-80B-A3B-Instruct/blob/main/config.json; SOURCES.md there). Shapes from
transformers' models/qwen3_next/modeling_qwen3_next.py (class and attribute names in the comments below).
"""

from __future__ import annotations

import json

import pytest

from conftest import REFERENCE, run
from kvcalc.attention import Layer
from kvcalc.attention.deltanet import GatedDeltaNet
from kvcalc.costs.params import param_counts
from kvcalc.errors import KvcalcError
from kvcalc.hf import spec_from_config

CONFIG = REFERENCE / "models-2026" / "qwen3-next-80b-a3b-instruct.json"
BUNDLED = "qwen3-next-80b-a3b"

# The config's numbers
D, VOCAB, LAYERS = 2048, 151_936, 48
N_H, N_KV, D_H = 16, 2, 256  # num_attention_heads, num_key_value_heads, head_dim
H_K, H_V, D_K, D_V, KERNEL = 16, 32, 128, 128, 4  # linear_num_key/value_heads, linear_key/value_head_dim, conv kernel
EXPERTS, TOP_K, MOE_FF, SHARED_FF = 512, 10, 512, 512
FULL = [i for i in range(LAYERS) if (i + 1) % 4 == 0]  # full_attention_interval 4: layers 3, 7, …, 47
N_FULL, N_LINEAR = len(FULL), LAYERS - len(FULL)  # 12 and 36
KEY_DIM, VALUE_DIM = H_K * D_K, H_V * D_V  # Qwen3NextGatedDeltaNet.key_dim 2,048, value_dim 4,096
CONV_DIM = 2 * KEY_DIM + VALUE_DIM  # conv_dim 8,192: q, k and v go through the convolution

# The acceptance figure: each linear layer holds 32 × 128 × 128 recurrent + 3 × 8,192 conv elements.
STATE_PER_LAYER = 524_288 + 24_576
STATE_BF16 = 36 * STATE_PER_LAYER * 2


def compare(model: str, *args: str) -> list[dict]:
    return json.loads(run("compare", model, *args, "-f", "json").stdout)


def config() -> dict:
    return json.loads(CONFIG.read_text())


def test_the_acceptance_figure_is_the_formula():
    assert STATE_PER_LAYER == H_V * D_K * D_V + (KERNEL - 1) * CONV_DIM
    assert (N_FULL, N_LINEAR) == (12, 36)


@pytest.mark.parametrize("model", [str(CONFIG), BUNDLED])
def test_kv_cache_and_state_at_4k_and_128k(model):
    rows = compare(model, "--ctx", "4k,128k")
    assert [r["ctx"] for r in rows] == [4096, 131_072]
    for r in rows:
        kv = N_FULL * N_KV * D_H * 2 * r["ctx"] * 2  # 12 layers × 2 KV heads × 256 × (K and V) × ctx × bf16
        assert r["kv_cache_bytes"] == kv
        assert r["state_bytes"] == STATE_BF16 == 39_518_208  # the same at any context
        assert r["cache_bytes"] == kv + STATE_BF16
    assert rows[0]["kv_cache_bytes"] == 100_663_296 and rows[1]["kv_cache_bytes"] == 3 * 2**30  # 96 MiB, 3 GiB


def test_bundled_spec_equals_the_config():
    skip = {"model"}
    a, b = compare(str(CONFIG), "--ctx", "1,4k,256k"), compare(BUNDLED, "--ctx", "1,4k,256k")
    assert [{k: v for k, v in r.items() if k not in skip} for r in a] == [{k: v for k, v in r.items() if k not in skip} for r in b]


def test_state_does_not_grow_with_ctx_and_fp32_doubles_it_only():
    rows = compare(BUNDLED, "--ctx", "1,4k,128k,256k")
    assert {r["state_bytes"] for r in rows} == {STATE_BF16}
    fp32 = compare(BUNDLED, "--ctx", "1,4k,128k,256k", "--state-dtype", "fp32")
    for bf16, wide in zip(rows, fp32):
        assert wide["state_bytes"] == 2 * bf16["state_bytes"]
        assert wide["kv_cache_bytes"] == bf16["kv_cache_bytes"]
        assert wide["cache_bytes"] == bf16["kv_cache_bytes"] + 2 * STATE_BF16


# ---------------------------------------------------------------- parameters, layer by layer

# Full (gated) attention layer, Qwen3NextAttention:
FULL_ATTN = (
    D * N_H * D_H * 2  # q_proj: Linear(d, n_h·d_h·2): the query and the output gate
    + D * N_KV * D_H  # k_proj
    + D * N_KV * D_H  # v_proj
    + N_H * D_H * D  # o_proj
    + 2 * D_H  # q_norm and k_norm over head_dim
)
# Gated DeltaNet layer, Qwen3NextGatedDeltaNet:
GDN = (
    D * (2 * KEY_DIM + 2 * VALUE_DIM)  # in_proj_qkvz: q, k, v and z (the norm's gate)
    + D * 2 * H_V  # in_proj_ba: β and a per value head
    + CONV_DIM * KERNEL  # conv1d: depthwise (groups=conv_dim), bias=False
    + H_V + H_V  # dt_bias and A_log
    + D_V  # norm: Qwen3NextRMSNormGated(head_v_dim)
    + VALUE_DIM * D  # out_proj
)
# MoE block of every layer (decoder_sparse_step 1, mlp_only_layers []), Qwen3NextSparseMoeBlock:
EXPERT = 3 * D * MOE_FF  # gate, up and down projections of one expert
SHARED = 3 * D * SHARED_FF + D  # shared_expert (an MLP of shared_expert_intermediate_size) and shared_expert_gate (d × 1)
ROUTER = D * EXPERTS  # gate: Linear(d, num_experts, bias=False)
NORMS = LAYERS * 2 * D + D  # input_layernorm and post_attention_layernorm per layer, and the final norm
EMBED = VOCAB * D  # embed_tokens, and the untied lm_head again (tie_word_embeddings false)

TOTAL = 2 * EMBED + N_FULL * FULL_ATTN + N_LINEAR * GDN + LAYERS * (EXPERTS * EXPERT + SHARED + ROUTER) + NORMS
ACTIVE = 2 * EMBED + N_FULL * FULL_ATTN + N_LINEAR * GDN + LAYERS * (TOP_K * EXPERT + SHARED + ROUTER) + NORMS


def test_parameter_closed_forms():
    assert (FULL_ATTN, GDN) == (27_263_488, 33_718_464)
    assert (TOTAL, ACTIVE) == (79_674_391_296, 3_874_929_408)


@pytest.mark.slow
@pytest.mark.parametrize("model", [str(CONFIG), BUNDLED])
def test_parameters_total_and_active(model):
    (row,) = compare(model, "--ctx", "4k")
    assert (row["params_total"], row["params_active"]) == (TOTAL, ACTIVE)


def test_parameters_against_the_headline():
    # Model card (https://huggingface.co/Qwen/Qwen3-Next-80B-A3B-Instruct): "80B in total and 3B activated".
    assert abs(TOTAL - 80e9) <= 0.03 * 80e9  # 79.67B: within 0.5%
    # The active 3B cannot be met within 3%: counting both embedding tables (as Qwen's other cards do, e.g.
    # Qwen3-30B-A3B's "3.3B activated") gives 3.87B; without them 3.25B. "A3B" is the name rounded down, and the
    # card gives no finer figure. The multi-token-prediction layer shipped in the checkpoint (mtp.*, which
    # transformers ignores: _keys_to_ignore_on_load_unexpected) is in neither count (only with --mtp, below).
    assert 3.8e9 < ACTIVE < 3.9e9
    assert 3e9 < ACTIVE - 2 * EMBED < 3.3e9


# ---------------------------------------------------------------- FLOPs


def test_cost_shows_the_gdn_components():
    out = json.loads(run("cost", BUNDLED, "--ctx", "4k", "-f", "json").stdout)["flops"]
    n = 4096
    prefill, decode = out["prefill"], out["decode_token"]
    # 2·tokens·size of each projection, over the 36 linear layers
    assert prefill["attn/qkvz"] == 2 * n * N_LINEAR * D * (2 * KEY_DIM + 2 * VALUE_DIM)
    assert prefill["attn/ba"] == 2 * n * N_LINEAR * D * 2 * H_V
    assert prefill["attn/conv"] == 2 * n * N_LINEAR * KERNEL * CONV_DIM  # depthwise: K multiply-adds per channel
    # per token and value head: decay d_k·d_v, kᵀS 2·d_k·d_v, rank-one write 2·d_k·d_v; readout qᵀS 2·d_k·d_v
    assert prefill["attn/state"] == 5 * n * N_LINEAR * H_V * D_K * D_V
    assert prefill["attn/readout"] == 2 * n * N_LINEAR * H_V * D_K * D_V
    # out_proj of the linear layers and o_proj of the full ones share attn/o
    assert prefill["attn/o"] == 2 * n * (N_LINEAR * VALUE_DIM * D + N_FULL * N_H * D_H * D)
    # q_proj with its gate half: 2·d·2·n_h·d_h per token
    assert prefill["attn/q"] == 2 * n * N_FULL * D * 2 * N_H * D_H
    # a decode step: the recurrent layers cost the same at any context, one token's worth
    for key in ("attn/qkvz", "attn/ba", "attn/conv", "attn/state", "attn/readout"):
        assert decode[key] * n == prefill[key]
    later = json.loads(run("cost", BUNDLED, "--ctx", "128k", "-f", "json").stdout)["flops"]["decode_token"]
    assert later["attn/state"] == decode["attn/state"] and later["attn/scores"] == 32 * decode["attn/scores"]


def test_cost_table_names_them():
    out = run("cost", BUNDLED, "--ctx", "4k").stdout
    for component in ("attn/qkvz", "attn/ba", "attn/conv", "attn/state", "attn/readout"):
        assert component in out


# ---------------------------------------------------------------- the kind


def gdn(**over) -> GatedDeltaNet:
    fields = dict(kind="gated_deltanet", linear_num_key_heads=H_K, linear_num_value_heads=H_V,
                  linear_key_head_dim=D_K, linear_value_head_dim=D_V, linear_conv_kernel_dim=KERNEL)
    return GatedDeltaNet.model_validate({**fields, **over})


def test_state_formula_components_and_symbols():
    layer = Layer(D, None, "layer_groups[1].attention")
    f = gdn().state_formula(layer)
    assert f.components == {"recurrent": 32 * 128 * 128, "conv": 3 * 8192}
    assert f.elements == STATE_PER_LAYER
    assert {s.name: s.source for s in f.symbols}["H_v"] == "layer_groups[1].attention.linear_num_value_heads"
    assert "vLLM" in f.reference and "transformers" in f.reference
    # K ≠ V dims and a different kernel: H_v·d_k·d_v + (K − 1)·(2·H_k·d_k + H_v·d_v)
    g = gdn(linear_num_key_heads=2, linear_num_value_heads=6, linear_key_head_dim=8, linear_value_head_dim=4,
            linear_conv_kernel_dim=3).state_formula(layer)
    assert g.components == {"recurrent": 6 * 8 * 4, "conv": 2 * (2 * 2 * 8 + 6 * 4)}


def test_weights_follow_transformers_shapes():
    shapes = {w.name: (w.shape, w.role) for w in gdn().weights(Layer(D, None, "x"))}
    assert shapes == {
        "W_qkvz": ((D, 12_288), "matrix"),  # in_proj_qkvz: key_dim·2 + value_dim·2
        "W_ba": ((D, 64), "matrix"),  # in_proj_ba: num_v_heads·2
        "conv1d": ((8192, 1, 4), "matrix"),  # Conv1d weight [conv_dim, 1, kernel]
        "dt_bias": ((32,), "bias"),
        "A_log": ((32,), "bias"),
        "norm": ((128,), "norm"),
        "W_O": ((4096, D), "matrix"),
    }


def test_value_heads_must_group_over_key_heads():
    with pytest.raises(ValueError, match=r"linear_num_value_heads \(24\) must be divisible by linear_num_key_heads \(16\)"):
        gdn(linear_num_value_heads=24)


def test_no_tokens_held_and_no_keys():
    att, layer = gdn(), Layer(D, None, "x")
    assert att.tokens_held(layer, 131_072) == 0 and att.cache_formula(layer, "latent").elements == 0
    assert att.keys_prefill(layer, 4096) == 0 and att.query_heads is None


def test_explain_shows_the_state_derivation():
    out = run("show", BUNDLED, "--explain").stdout
    assert "H_v·d_k·d_v + (K − 1)·(2·H_k·d_k + H_v·d_v) = 32·128·128 + (4 − 1)·(2·16·128 + 32·128) = 548,864" in out
    assert "36 layers × 548,864" in out


# ---------------------------------------------------------------- the importer's rules


def imported(**over):
    cfg = {**config(), **over}
    return spec_from_config({k: v for k, v in cfg.items() if v is not None}, "cfg.json", "q")


def test_layout_from_full_attention_interval():
    spec, _ = imported()
    by_kind = {g.attention.kind: list(g.layers) for g in spec.groups}
    assert by_kind == {"gqa": FULL, "gated_deltanet": [i for i in range(LAYERS) if i not in FULL]}
    full = next(g for g in spec.groups if g.attention.kind == "gqa").attention
    assert full.output_gate and full.qk_norm and full.head_dim == 256


def test_layer_types_win_over_the_interval():
    types = ["full_attention" if i < 2 else "linear_attention" for i in range(LAYERS)]
    spec, _ = imported(layer_types=types)
    assert [list(g.layers) for g in spec.groups if g.attention.kind == "gqa"] == [[0, 1]]
    with pytest.raises(KvcalcError, match=r"layer_types\[0\]: must be one of linear_attention, full_attention"):
        imported(layer_types=["sliding_attention"] * LAYERS)


def test_dense_layers_from_mlp_only_layers_and_sparse_step():
    # Qwen3NextDecoderLayer: MoE unless in mlp_only_layers or (i + 1) % decoder_sparse_step != 0
    spec, _ = imported(mlp_only_layers=[3], decoder_sparse_step=2)
    dense = sorted(i for gi, g in enumerate(spec.groups) if spec.layer_groups[gi].ffn for i in g.layers)
    assert dense == sorted({3} | {i for i in range(LAYERS) if (i + 1) % 2})
    assert spec.layer_groups[next(gi for gi, g in enumerate(spec.groups) if 3 in g.layers)].ffn.d_ff == 5120


def test_missing_keys_take_qwen3nextconfig_defaults():
    # Qwen3NextConfig: head_dim 256 (not hidden_size / num_attention_heads = 128), linear dims and experts as the
    # 80B model's; so a config that leaves them out imports as the full model
    spec, _ = imported(head_dim=None, linear_num_value_heads=None, num_experts=None)
    assert "defaults filled in for: head_dim, linear_num_value_heads, num_experts" in spec.notes
    rows = {g.attention.kind: g for g in spec.groups}
    assert rows["gqa"].head_dim == 256 and rows["gated_deltanet"].attention.linear_num_value_heads == 32
    assert spec.ffn.n_routed_experts == 512
    (row,) = compare(str(CONFIG), "--ctx", "4k")
    assert param_counts(spec).total == row["params_total"] == TOTAL


def test_missing_kv_heads_take_the_config_default_of_two():
    # an audit: without num_key_value_heads the full-attention layers became MHA (16 K/V heads, 8x the cache);
    # Qwen3NextConfig's default is 2
    spec, _ = imported(num_key_value_heads=None)
    assert "num_key_value_heads" in spec.notes
    assert {g.attention.kind: g for g in spec.groups}["gqa"].attention.n_kv_heads == 2


def test_no_experts_means_dense_layers():
    spec, _ = imported(num_experts=0)  # Qwen3NextDecoderLayer: num_experts > 0 is required for a sparse block
    assert spec.ffn.kind == "dense" and spec.ffn.d_ff == 5120 and all(g.ffn is None for g in spec.layer_groups)


def test_per_layer_rows_hold_one_layers_state():
    # --per-layer: each Gated DeltaNet row holds its own layer's state for every sequence (3 × 548,864 × bf16),
    # not its group's 36 layers; the full-attention rows hold no state, and the rows sum to the model's state
    layers = json.loads(run("show", BUNDLED, "--ctx", "8193", "-b", "3", "--per-layer", "-f", "json").stdout)["layers"]
    assert [r["layer"] for r in layers] == list(range(LAYERS))
    for r in layers:
        if r["layer"] in FULL:
            assert r.get("state_bytes") is None
            assert r["bytes"] == N_KV * D_H * 2 * 8193 * 3 * 2  # this layer's K and V, 3 sequences
        else:
            assert r["state_bytes"] == 3 * STATE_PER_LAYER * 2 == 3_293_184
    assert sum(r.get("state_bytes") or 0 for r in layers) == 3 * STATE_BF16


def test_cost_summary_shows_the_state_and_counts_it_in_the_decode_traffic():
    # a decode step reads the active weights but one embedding row (the lm_head whole), the K/V cache and reads and
    # writes back each state: 2 × 39,518,208 bytes beside the cache
    summary = json.loads(run("cost", BUNDLED, "--ctx", "4k", "-f", "json").stdout)["summary"]
    assert summary["state_bytes"] == STATE_BF16
    kv = N_FULL * N_KV * D_H * 2 * 4096 * 2
    assert summary["kv_cache_bytes"] == kv
    assert summary["decode_bytes_read"] == (ACTIVE - EMBED + D) * 2 + kv + 2 * STATE_BF16
    table = run("cost", BUNDLED, "--ctx", "4k", "--hardware", "h100-80gb").stdout
    assert "active weights + KV cache + states read and written back" in table
    assert "weights + KV cache + states vs h100-80gb memory" in table
    # a model without states keeps its rows as they were
    dense = json.loads(run("cost", "llama3-70b", "--ctx", "4k", "-f", "json").stdout)["summary"]
    assert "state_bytes" not in dense


# ---------------------------------------------------------------- the multi-token-prediction layer (--mtp)

# vLLM's Qwen3NextMultiTokenPredictor (model_executor/models/qwen3_next_mtp.py, 0.34.0): num_nextn_predict_layers
# layers, 1 when the config leaves it out (as this one does), each a Qwen3NextDecoderLayer of full attention with its 2
# norms and the MoE block, after fc Linear(2d, d, bias=False) and the RMSNorms pre_fc_norm_hidden, pre_fc_norm_embedding
# and norm; the embedding and LM head are the model's.
MTP = FULL_ATTN + 2 * D + EXPERTS * EXPERT + SHARED + ROUTER + 2 * D * D + 3 * D
MTP_ACTIVE = FULL_ATTN + 2 * D + TOP_K * EXPERT + SHARED + ROUTER + 2 * D * D + 3 * D


def test_mtp_layer_read_from_the_config():
    spec, _ = imported()
    assert spec.mtp_layers == 1
    assert "1 multi-token-prediction layer(s) (num_nextn_predict_layers absent: 1, as vLLM builds): counted only " \
           "with --mtp" in spec.notes
    assert imported(num_nextn_predict_layers=2)[0].mtp_layers == 2
    none, _ = imported(num_nextn_predict_layers=0)
    assert none.mtp_layers == 0 and "multi-token" not in (none.notes or "")


@pytest.mark.parametrize("over, why", [
    # kvcalc's MTP layer copies the last layer; vLLM's is full attention with the FFN Qwen3NextDecoderLayer picks at
    # layer index 0 ("mtp.layers.0"): where those differ it is left out, said in the notes
    ({"layer_types": ["full_attention" if i % 4 == 0 else "linear_attention" for i in range(LAYERS)]}, "Gated DeltaNet"),
    ({"decoder_sparse_step": 2}, "MoE"),  # layer 47 MoE ((47 + 1) % 2 == 0), the MTP layer dense ((0 + 1) % 2)
    ({"mlp_only_layers": [0]}, "MoE"),
])
def test_mtp_layer_left_out_where_the_last_layer_is_not_its_copy(over, why):
    spec, _ = imported(**over)
    assert spec.mtp_layers == 0
    assert f"1 multi-token-prediction layer(s) (num_nextn_predict_layers absent: 1, as vLLM builds) not counted: " \
           f"kvcalc's copies the last layer, which is {why} here" in spec.notes


def test_mtp_layer_counted_only_with_mtp():
    plain, mtp = compare(BUNDLED, "--ctx", "4k,128k"), compare(BUNDLED, "--ctx", "4k,128k", "--mtp")
    for p, m in zip(plain, mtp):
        # a 13th full-attention layer: 13 × 2 KV heads × 256 × (K and V) × ctx × bf16; the states unchanged
        assert p["kv_cache_bytes"] == N_FULL * N_KV * D_H * 2 * p["ctx"] * 2
        assert m["kv_cache_bytes"] == (N_FULL + 1) * N_KV * D_H * 2 * p["ctx"] * 2
        assert m["state_bytes"] == p["state_bytes"] == STATE_BF16
        assert (p["params_total"], p["params_active"]) == (TOTAL, ACTIVE)
        assert (m["params_total"] - TOTAL, m["params_active"] - ACTIVE) == (MTP, MTP_ACTIVE) == (1_650_471_424, 71_315_968)


def test_mtp_fc_split_over_tp_under_vllm():
    # qwen3_next_mtp.py: fc is a ColumnParallelLinear(2d, d, gather_output=True), d / tp of its outputs a rank; the
    # layer splits as every layer does: at tp 8, 16 / 8 query heads, the 2 KV heads one a rank (replicated), each
    # expert's and the shared expert's width 512 / 8; router, shared gate and norms whole
    tp = 8
    layer = (D * 2 * N_H * D_H // tp + 2 * D * D_H + N_H * D_H // tp * D + 2 * D_H
             + EXPERTS * 3 * D * (MOE_FF // tp) + 3 * D * (SHARED_FF // tp) + D + ROUTER + 2 * D)
    args = ("--ctx", "4k", "--tp", str(tp))
    (plain,), (mtp,) = compare(BUNDLED, *args, "--engine", "vllm"), compare(BUNDLED, *args, "--engine", "vllm", "--mtp")
    assert mtp["weights_bytes_per_gpu"] - plain["weights_bytes_per_gpu"] == 2 * (layer + 2 * D * (D // tp) + 3 * D) \
        == 416_048_128
    # without an engine, kvcalc's convention: fc whole on every rank, as DeepSeek's eh_proj (an nn.Linear in vLLM)
    (plain,), (mtp,) = compare(BUNDLED, *args), compare(BUNDLED, *args, "--mtp")
    assert mtp["weights_bytes_per_gpu"] - plain["weights_bytes_per_gpu"] == 2 * (layer + 2 * D * D + 3 * D)


def test_mtp_refused_where_the_engine_runs_it_by_rules_kvcalc_lacks():
    # SGLang 0.5.23 leaves a path-less draft layer out of the pool budget and reserves speculative Mamba states
    r = run("compare", BUNDLED, "--ctx", "4k", "--engine", "sglang", "--mtp", ok=False)
    assert r.exit_code == 1 and "--mtp --engine sglang: SGLang sizes qwen3-next-80b-a3b's MTP drafter" in r.stderr
    assert "Traceback" not in r.stderr
    # vLLM's Qwen3-Next drafter takes its input on the first pipeline rank only (qwen3_next_mtp.py forward)
    r = run("fit", BUNDLED, "--hardware", "h100-80gb", "--tp", "2", "--pp", "2", "--engine", "vllm", "--mtp", ok=False)
    assert r.exit_code == 1 and "--mtp --pp 2 --engine vllm: vLLM's Qwen3-Next drafter reads its input" in r.stderr
    # without --mtp, or with one pipeline stage, both run as before
    run("compare", BUNDLED, "--ctx", "4k", "--engine", "sglang")
    run("compare", BUNDLED, "--ctx", "4k", "--engine", "vllm", "--tp", "2", "--pp", "2")
    run("compare", BUNDLED, "--ctx", "4k", "--engine", "vllm", "--tp", "2", "--mtp")


def test_vllms_gdn_checkpoint_grid_follows_the_gpus_prefill_kernel():
    # vLLM 0.34.0 (qwen_gdn_linear_attn.py _resolve_gdn_prefill_backend) prefills a Gated DeltaNet with FlashInfer on
    # compute capability 9.0 and, at head_k_dim 128 under its CUDA 13 wheels, on the 10.x and 12.x families; only that
    # backend declares the 64-token checkpoint grid that _align_hybrid_block_size rounds the hybrid's block to, and
    # the one prefill-checkpoint block a state group reserves. Elsewhere (Ampere, Ada, ROCm) Triton: no grid.
    # Qwen3-Next at --block-size 16: a layer's state page of S bytes needs k · ceil(S / (k · 2,048)) tokens of a
    # full-attention page (2 KV heads of 256, K and V, bf16: 2,048 bytes a token): 544 with k = 16, 576 with k = 64
    from conftest import spec
    from kvcalc.costs.cache import kv_cache
    from kvcalc.costs.parallel import stages
    from kvcalc.hardware import load_hardware
    from kvcalc.settings import Settings

    m = spec(BUNDLED)
    assert m.groups[0].attention.linear_key_head_dim == 128
    grid = {None: 576, "h100-80gb": 576, "b200-180gb": 576, "rtx-5090": 576, "a100-80gb": 544, "l40s": 544,
            "rtx-4090": 544, "mi300x": 544}
    for name, block in grid.items():
        s = Settings(ctx=8192, engine="vllm", block_size=16, hardware=load_hardware(name) if name else None)
        report = kv_cache(m, s)
        assert report.plan.block_size == block, name
        pages = -(-8192 // block)  # 12 full-attention layers' pages at 8k; 36 state layers' 2 resident pages each
        assert report.engine_bytes == 12 * pages * block * 2048, name
        states = [g for g in stages(m, s)[0].admission if g.kind == "state"]
        # vLLM's 3 state groups (36 layers in groups of the 12 attention layers' size), each reserving 2 blocks and
        # the checkpoint's, where one is kept
        assert [g.span for g in states] == [3 if block == 576 else 2] * 3, name


def test_a_speculative_step_writes_the_recurrent_state_once_a_token():
    # vLLM 0.34.0's Gated DeltaNet verify (gdn_attn.py spec_state_indices; fused_sigmoid_gating stores each token's
    # state in its own slot) reads a sequence's recurrent state once and writes it once for each of the 1 + k tokens:
    # under --mtp (k = 1) the step moves one recurrent state more a layer, 32 value heads · 128 · 128 in bf16, beside
    # the conv state (read and written once) and the shared LM head read again by the drafter (2 · 151,936 · 2,048 B)
    args = ("--ctx", "4k", "--batch", "64", "--hardware", "h100-80gb")
    (plain,), (mtp,) = compare(BUNDLED, *args), compare(BUNDLED, *args, "--mtp")
    weights = 2 * (MTP_ACTIVE + 151_936 * D)  # the MTP layer's active weights and the head's second read, bf16
    kv = (N_FULL + 1) * N_KV * D_H * 2 * 4096 * 2 * 64 - N_FULL * N_KV * D_H * 2 * 4096 * 2 * 64  # its own KV cache
    assert mtp["decode_bytes_read"] - plain["decode_bytes_read"] == weights + kv + 64 * (LAYERS - N_FULL) * 32 * 128 * 128 * 2
