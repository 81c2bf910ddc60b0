"""Importers of the model_types added sixth (Falcon-H1, Granite 4.0 hybrids, MiniCPM3): each config in
tests/data/reference/configs-extra-6 (SOURCES.md says where it comes from, and which fields are class defaults) goes
through `kvcalc compare`, and the cache, state and parameters are checked against figures written out from the
config's numbers, with the rule each follows; each importer's trap gets its own assertion."""

from __future__ import annotations

import pytest

from conftest import ConfigFolder, kv_bytes
from kvcalc.errors import SpecError

CONFIGS = ConfigFolder("configs-extra-6")
K = 1024
BF16 = 2  # bytes per cached element (kvcalc's default kv and state dtype)
CTXS = (4 * K, 128 * K)

compare, config, imported = CONFIGS.compare, CONFIGS.config, CONFIGS.imported


def mamba2_params(d: int, di: int, heads: int, groups: int, state: int, kernel: int, norm: bool) -> int:
    """FalconH1Mixer / BambaMixer weights: in_proj d × (d_inner + conv_dim + H), conv1d conv_dim × K with its bias,
    dt_bias, A_log and D (H each), the gated RMSNorm (d_inner) when present, out_proj d_inner × d; no proj biases."""
    conv_dim = di + 2 * groups * state
    return d * (di + conv_dim + heads) + conv_dim * kernel + conv_dim + 3 * heads + (di if norm else 0) + di * d


# ---------------------------------------------------------------- falcon_h1 (Falcon-H1-0.5B-Base, Falcon-H1-34B-Base)

F05, F34 = "falcon-h1-0.5b-base", "falcon-h1-34b-base"


def test_falcon_h1_every_layer_caches_kv_and_holds_a_mamba2_state():
    # FalconH1DecoderLayer runs attention and Mamba-2 side by side in all 36 layers: 2 (K, V) · 2 KV heads · head_dim 64
    # per token and layer; the Mamba-2 state is H·P·N = 24 · 64 · 128 (ssm_states) plus (K − 1) · conv_dim with
    # conv_dim = mamba_d_ssm + 2·G·N = 1536 + 2·128 (vLLM's conv state), whatever the context
    rows = compare(F05)
    assert kv_bytes(rows) == [36 * 2 * 2 * 64 * ctx * BF16 for ctx in CTXS]
    assert [r["state_bytes"] for r in rows] == [36 * (24 * 64 * 128 + 3 * (1536 + 2 * 128)) * BF16] * 2


def test_falcon_h1_05b_params_written_out():
    # per layer: q 1024 × 8·64, k and v 1024 × 2·64, o; the Mamba-2 mixer (no gated norm: mamba_rms_norm false);
    # LlamaMLP gate, up, down of 2048; input_layernorm and pre_ff_layernorm. Untied embedding and lm_head, final norm.
    d, v = 1024, 32784
    attention = d * 512 + 2 * d * 128 + 512 * d
    mamba = mamba2_params(d, 1536, 24, 1, 128, 4, norm=False)
    layer = attention + mamba + 3 * d * 2048 + 2 * d
    assert compare(F05)[0]["params_total"] == 36 * layer + 2 * v * d + d == 521_411_104
    # the model is published as "0.5B" (a rounded name; the count is 4.3% above it): no 3% check on this one


def test_falcon_h1_34b_cache_params_and_headline():
    # 72 layers, 4 KV heads of 128; Mamba-2: 32 heads × 128 over mamba_d_ssm 4096, 2 groups of state 256 (the gated
    # norm is there: mamba_rms_norm true); MLP 21504; untied vocab 261120 (FalconH1Config default tie false)
    rows = compare(F34)
    assert kv_bytes(rows) == [72 * 2 * 4 * 128 * ctx * BF16 for ctx in CTXS]
    assert [r["state_bytes"] for r in rows] == [72 * (32 * 128 * 256 + 3 * (4096 + 2 * 2 * 256)) * BF16] * 2
    d, v = 5120, 261120
    attention = 2 * d * 20 * 128 + 2 * d * 4 * 128
    layer = attention + mamba2_params(d, 4096, 32, 2, 256, 4, norm=True) + 3 * d * 21504 + 2 * d
    total = 72 * layer + 2 * v * d + d
    assert rows[0]["params_total"] == total == 33_642_516_224
    # TII publishes the model as Falcon-H1-34B (technical report arXiv 2507.22448, abstract: "0.5B, 1.5B, 1.5B-deep,
    # 3B, 7B, and 34B parameters"): 33.64B is 1.1% below
    assert abs(total - 34e9) / 34e9 < 0.03


def test_falcon_h1_multipliers_are_not_weights():
    # embedding/lm_head/key/attention_in/out/ssm_in/out multipliers, mlp_multipliers and ssm_multipliers scale
    # activations (FalconH1Model, FalconH1DecoderLayer, the mup_vector buffer): changing them changes no count
    base = compare(F05)[0]
    cfg = {**config(F05), "embedding_multiplier": 1.0, "ssm_multipliers": [1.0] * 5, "key_multiplier": 3.0}
    s = imported(cfg)
    from kvcalc.costs.params import param_counts

    assert param_counts(s).total == base["params_total"]


def test_falcon_h1_mamba_d_ssm_not_expand_times_hidden():
    # FalconH1Mixer.intermediate_size is mamba_d_ssm (1536), not mamba_expand · hidden_size (2048); a null mamba_d_ssm
    # falls back to expand · hidden, and an absent one to FalconH1Config's default 1024, which 24 heads × 64 then fail
    mixer = imported(config(F05)).groups[0].parallel
    assert (mixer.kind, mixer.d_inner, mixer.mamba_num_heads, mixer.mamba_head_dim) == ("mamba2", 1536, 24, 64)
    null = imported({**config(F05), "mamba_d_ssm": None, "mamba_d_head": "auto", "mamba_n_heads": 32}).groups[0].parallel
    assert (null.d_inner, null.mamba_head_dim) == (2048, 2048 // 32)
    absent = {k: v for k, v in config(F05).items() if k != "mamba_d_ssm"}
    with pytest.raises(SpecError, match=r"mamba_d_head: 64 × mamba_n_heads 24 must equal the mixer's width 1024 \(mamba_d_ssm\)"):
        imported(absent)


def test_falcon_h1_mamba_d_head_auto():
    # mamba_d_head "auto": mamba_d_ssm // mamba_n_heads (FalconH1Config.__post_init__)
    mixer = imported({**config(F05), "mamba_d_head": "auto"}).groups[0].parallel
    assert mixer.mamba_head_dim == 1536 // 24 == 64


def test_falcon_h1_head_dim_is_read_not_hidden_over_heads():
    # LlamaAttention: config.head_dim (64) when given; 1024 / 8 = 128 only without it
    assert imported(config(F05)).groups[0].head_dim == 64
    bare = {k: v for k, v in config(F05).items() if k != "head_dim"}
    assert imported(bare).groups[0].head_dim == 128


def test_falcon_h1_rms_norm_and_biases():
    from kvcalc.costs.params import param_counts

    base = param_counts(imported(config(F05))).total
    # mamba_rms_norm true adds FalconH1RMSNormGated's weight of mamba_d_ssm in each layer
    assert param_counts(imported({**config(F05), "mamba_rms_norm": True})).total == base + 36 * 1536
    # in_proj takes mamba_proj_bias, out_proj projectors_bias: both true adds (d_inner + conv_dim + H) + d a layer
    both = {**config(F05), "mamba_proj_bias": True, "projectors_bias": True}
    assert param_counts(imported(both)).total == base + 36 * ((1536 + 1792 + 24) + 1024)
    with pytest.raises(SpecError, match="mamba_proj_bias .* and projectors_bias"):
        imported({**config(F05), "projectors_bias": True})


def test_falcon_h1_tied_embeddings_and_refused_layouts():
    from kvcalc.costs.params import param_counts

    untied = param_counts(imported(config(F05))).total
    assert param_counts(imported({**config(F05), "tie_word_embeddings": True})).total == untied - 32784 * 1024
    with pytest.raises(SpecError, match="attn_layer_indices"):
        imported({**config(F05), "attn_layer_indices": [0, 2]})
    with pytest.raises(SpecError, match="mamba_use_mlp"):
        imported({**config(F05), "mamba_use_mlp": False})


# ---------------------------------------------------------------- granitemoehybrid (Granite-4.0-H-Small, 3B vision)

SMALL, VISION = "granite-4.0-h-small", "granite-4.0-3b-vision.text_config"


def test_granite_h_small_cache_and_state():
    # layer_types: 4 attention layers cache 2 · 8 KV heads · (4096 / 32 = 128) per token; the 36 Mamba-2 layers each
    # hold H·P·N = 128 · 64 · 128 (mamba_d_head "auto" = 2 · 4096 / 128) plus (K − 1) · (8192 + 2·1·128)
    rows = compare(SMALL)
    assert kv_bytes(rows) == [4 * 2 * 8 * 128 * ctx * BF16 for ctx in CTXS]
    assert [r["state_bytes"] for r in rows] == [36 * (128 * 64 * 128 + 3 * (8192 + 2 * 128)) * BF16] * 2


def test_granite_h_small_params_written_out_and_headline():
    # every layer: its mixer, 2 RMSNorms, 72 gated experts of 768 (input_linear d × 2·768, output_linear), the
    # router d × 72, and the shared MLP of 1536 (gated); tied embedding; final norm
    d, v = 4096, 100352
    attention = 2 * d * d + 2 * d * 8 * 128
    mamba = mamba2_params(d, 8192, 128, 1, 128, 4, norm=True)  # BambaRMSNormGated always exists
    expert, shared, router = 3 * d * 768, 3 * d * 1536, d * 72
    ffn = 72 * expert + shared + router
    total = 4 * attention + 36 * mamba + 40 * (ffn + 2 * d) + v * d + d
    row = compare(SMALL)[0]
    assert row["params_total"] == total == 32_207_337_984
    assert row["params_active"] == total - 62 * 40 * expert  # 10 of 72 experts active
    # IBM: "Granite-4.0-H-Small (32B total / ~9B active)" (granite-4.0-h-small model card): 0.6% and 2.2% off
    assert abs(total - 32e9) / 32e9 < 0.03 and abs(row["params_active"] - 9e9) / 9e9 < 0.03


def test_granite_layer_types_place_the_mixers_and_default_to_mamba():
    s = imported(config(SMALL))
    kinds = {g.attention.kind: g.layers for g in s.groups}
    assert kinds == {"mamba2": tuple(range(36)), "gqa": tuple(range(36, 40))}
    # GraniteMoeHybridConfig.layers_block_type: all mamba when layer_types is absent
    bare = imported({k: v for k, v in config(SMALL).items() if k != "layer_types"})
    assert {g.attention.kind for g in bare.groups} == {"mamba2"}
    with pytest.raises(SpecError, match=r"layer_types\[0\]: must be one of mamba, attention"):
        imported({**config(SMALL), "layer_types": ["hybrid"] * 40})


def test_granite_zero_experts_is_a_dense_shared_mlp():
    # granite-4.0-3b-vision's text model: num_local_experts 0, so no MoE ("Allow non-MoE (dense)"): each layer's FFN
    # is the shared MLP alone, gated, of shared_intermediate_size 8192 (not intermediate_size); 40 attention layers
    # of 8 KV heads × 2560 / 40 = 64; position_embedding_type "rope" (or "nope") changes no cache
    s = imported(config(VISION))
    assert (s.ffn.kind, s.ffn.d_ff, s.ffn.gated) == ("dense", 8192, True)
    rows = compare(VISION)
    assert kv_bytes(rows) == [40 * 2 * 8 * 64 * ctx * BF16 for ctx in CTXS]
    assert [r["state_bytes"] for r in rows] == [0, 0]
    d, v = 2560, 100353
    layer = 2 * d * d + 2 * d * 8 * 64 + 3 * d * 8192 + 2 * d
    assert rows[0]["params_total"] == 40 * layer + v * d + d  # tied
    nope = compare_config({**config(VISION), "position_embedding_type": "nope"})
    assert nope == kv_bytes(rows)


def compare_config(cfg: dict) -> list[int]:
    from kvcalc.costs.cache import kv_cache
    from kvcalc.settings import Settings

    s = imported(cfg)
    return [kv_cache(s, Settings(ctx=ctx)).bytes for ctx in CTXS]


def test_granite_mamba_heads_must_fill_the_width_and_head_dim_decoy():
    with pytest.raises(SpecError, match="mamba_d_head: 40 × mamba_n_heads 100 must equal"):
        imported({**config(VISION), "mamba_n_heads": 100, "layer_types": ["mamba"] * 40})
    with pytest.raises(SpecError, match="head_dim: GraniteMoeHybridAttention uses hidden_size // num_attention_heads"):
        imported({**config(VISION), "head_dim": 128})
    assert "GraniteMoeHybridConfig defaults filled in for: " in imported(config(SMALL)).notes


# ---------------------------------------------------------------- minicpm3 (MiniCPM3-4B)

MINICPM3 = "minicpm3-4b"


def test_minicpm3_caches_the_latent_and_rope_key():
    # MLA (DeepSeek-V2 §2.1): per token and layer the latent kv_lora_rank 256 plus the shared RoPE key 32, not
    # 2 · 40 heads × 96; num_key_value_heads 40 sizes nothing
    assert kv_bytes(compare(MINICPM3)) == [62 * (256 + 32) * ctx * BF16 for ctx in CTXS]


def test_minicpm3_params_written_out_and_headline():
    # q_a 2560 × 768, q_a_layernorm, q_b 768 × 40·(64 + 32), kv_a 2560 × (256 + 32), kv_a_layernorm,
    # kv_b 256 × 40·(64 + 64), o 40·64 × 2560; gated MLP of 6400; 2 norms a layer; tied embedding; final norm
    d, h, v = 2560, 40, 73448
    attention = d * 768 + 768 + 768 * h * 96 + d * 288 + 256 + 256 * h * 128 + h * 64 * d
    layer = attention + 3 * d * 6400 + 2 * d
    total = 62 * layer + v * d + d
    assert compare(MINICPM3)[0]["params_total"] == total == 4_073_875_968
    # OpenBMB publishes it as MiniCPM3-4B (the model's name): 4.07B is 1.8% above
    assert abs(total - 4e9) / 4e9 < 0.03


def test_minicpm3_v_head_dim_from_qk_nope_when_absent():
    # openbmb's MiniCPM3Config: v_head_dim = qk_nope_head_dim when absent (64, as hidden_size // heads here)
    assert imported(config(MINICPM3)).groups[0].attention.v_head_dim == 64
    given = imported({**config(MINICPM3), "v_head_dim": 96})
    assert given.groups[0].attention.v_head_dim == 96
    # where qk_nope_head_dim and hidden_size // heads differ, the two definitions disagree: refused
    with pytest.raises(SpecError, match="v_head_dim: absent, and the model's definitions disagree"):
        imported({**config(MINICPM3), "qk_nope_head_dim": 128})


def test_minicpm3_scales_are_multipliers_and_tie_defaults_true():
    from kvcalc.costs.params import param_counts

    base = param_counts(imported(config(MINICPM3))).total
    other = {**config(MINICPM3), "scale_emb": 1, "scale_depth": 1, "dim_model_base": 2560}
    assert param_counts(imported(other)).total == base
    # MiniCPM3Config: tie_word_embeddings defaults to true; false adds an lm_head of vocab × d
    absent = {k: v for k, v in config(MINICPM3).items() if k != "tie_word_embeddings"}
    assert imported(absent).tie_embeddings is True
    assert param_counts(imported({**config(MINICPM3), "tie_word_embeddings": False})).total == base + 73448 * 2560
    with pytest.raises(SpecError, match="attention_bias"):
        imported({**config(MINICPM3), "attention_bias": True})


# ---------------------------------------------------------------- kvcalc run on small configs of each type


def small_granite(tmp_path) -> str:
    import json

    cfg = {"model_type": "granitemoehybrid", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 2, "intermediate_size": 32, "shared_intermediate_size": 48, "num_local_experts": 4,
           "num_experts_per_tok": 2, "vocab_size": 100, "max_position_embeddings": 4096,
           "layer_types": ["mamba", "attention"], "mamba_n_heads": 8, "mamba_d_state": 8, "mamba_n_groups": 2}
    path = tmp_path / "granite.json"
    path.write_text(json.dumps(cfg))
    return str(path)


def small_minicpm3(tmp_path) -> str:
    import json

    cfg = {"model_type": "minicpm3", "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
           "q_lora_rank": 24, "kv_lora_rank": 16, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
           "intermediate_size": 96, "vocab_size": 100, "max_position_embeddings": 4096}
    path = tmp_path / "minicpm3.json"
    path.write_text(json.dumps(cfg))
    return str(path)


def small_falcon_h1(tmp_path) -> str:
    import json

    cfg = {**config(F05), "num_hidden_layers": 1, "hidden_size": 64, "intermediate_size": 64, "vocab_size": 100,
           "head_dim": 16, "mamba_d_ssm": 64, "mamba_n_heads": 4, "mamba_d_head": 16, "mamba_d_state": 8}
    path = tmp_path / "falcon.json"
    path.write_text(json.dumps(cfg))
    return str(path)


@pytest.mark.slow
@pytest.mark.parametrize("make, check", [(small_granite, "mamba2: recurrent form = parallel form"),
                                         (small_minicpm3, "MLA absorbed = naive"),
                                         (small_falcon_h1, "mamba2: recurrent form = parallel form")])
def test_run_matches_every_row(tmp_path, make, check):
    import json

    from conftest import run as cli

    out = json.loads(cli("run", make(tmp_path), "--ctx", "24", "--decode", "2", "-q", "-f", "json").stdout)
    assert out["ok"] and all(r.get("match") is not False for r in out["rows"])
    assert check in {c["name"] for c in out["checks"]}


def test_run_mamba2_without_its_gated_norm():
    # the backend's Mamba-2 layer leaves out the gated RMSNorm when the kind has none (Falcon-H1 mamba_rms_norm false)
    from kvcalc.backend.runner import RunSettings, run
    from kvcalc.spec import ModelSpec

    mamba = {"kind": "mamba2", "mamba_num_heads": 4, "mamba_head_dim": 8, "ssm_state_size": 8, "n_groups": 2,
             "conv_kernel": 4, "gated_norm": False}
    s = ModelSpec.model_validate({"name": "tiny-mamba2-no-norm", "family": "test", "d_model": 32, "n_layers": 1,
                                  "vocab_size": 50, "max_context": 4096, "ffn": {"kind": "dense", "d_ff": 32},
                                  "layer_groups": [{"layers": "all", "attention": mamba}]})
    report = run(s, RunSettings(ctx=24, decode=2))
    assert report.mismatches == [] and all(c.passed for c in report.checks)


def test_run_falcon_h1_parallel_mixer(tmp_path):
    # every Falcon-H1 layer runs GQA and Mamba-2 on the same input: the run measures both the KV cache (k, v) and the
    # mixer's state (mixer/ssm, mixer/conv), each equal to kvcalc's figures, and runs both parts' checks
    import json

    from conftest import run as cli

    out = json.loads(cli("run", small_falcon_h1(tmp_path), "--ctx", "16", "--decode", "2", "-q", "-f", "json").stdout)
    assert out["ok"] and all(r.get("match") is not False for r in out["rows"])
    rows = {r["quantity"]: r for r in out["rows"]}
    assert rows["layer 0 k shape at the end"]["measured"] == [1, 18, 2, 16]
    assert rows["layer 0 mixer/ssm shape at the end"]["measured"] == [1, 4, 16, 8]  # H × P × N
    assert rows["layer 0 bytes after prefill"]["measured"] == 2 * 2 * 16 * 16 * 4  # K, V · 2 heads · 16 · 16 tokens, fp32
    assert rows["layer 0 state bytes after prefill"]["measured"] == (4 * 16 * 8 + 3 * (64 + 2 * 8)) * 4
    checks = {c["name"] for c in out["checks"]}
    assert {"cached decode = full recomputation", "mamba2: recurrent form = parallel form"} <= checks
