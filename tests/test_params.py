"""Parameter counts: exact counts derived from the configs, quoted official figures, and closed forms."""

from __future__ import annotations

from collections import Counter

import pytest

from conftest import ALL_BUNDLED, spec
from kvcalc.costs.params import attention_params, param_counts, weights_bytes
from kvcalc.errors import KvcalcError
from kvcalc.spec import ModelSpec

# FACTS.md §4 (the reference notes behind tests/data/reference), "Derived from config": exact counts from the HF
# configs, including embeddings, the LM head unless tied, norms and biases. (Total, active) — active only for MoE models.
DERIVED = {
    "llama3-8b": 8_030_261_248,
    "llama3-70b": 70_553_706_496,
    "llama3.1-405b": 405_853_388_800,
    "llama3.2-1b": 1_235_814_400,
    "llama3.2-3b": 3_212_749_824,
    "mistral-7b": 7_241_732_096,
    "mixtral-8x7b": (46_702_792_704, 12_879_925_248),
    "qwen2.5-7b": 7_615_616_512,
    "qwen2.5-72b": 72_706_203_648,
    "deepseek-v2": (235_741_434_880, 21_375_800_320),
    "deepseek-v2-lite": (15_706_484_224, 2_661_150_208),
    "deepseek-v3": (671_026_419_200, 37_552_297_472),  # MTP module excluded
    "gpt2": 124_439_808,  # HF GPT-2 with biases and wpe, tied head
    "falcon-7b": 6_921_720_704,
    "gemma3-1b": 999_885_952,
    "gemma3-4b": 3_880_263_168,
    "gemma3-12b": 11_766_034_176,
    "gemma3-27b": 27_009_346_304,
    # FACTS.md §4 as well (#6's bundled specs)
    "qwen3-8b": 8_190_735_360,
    "qwen3-235b-a22b": (235_093_634_560, 22_190_763_520),
    "kimi-k2": (1_026_408_232_448, 32_861_500_928),
    "llama3.1-8b": 8_030_261_248,
    "llama3.1-70b": 70_553_706_496,
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(DERIVED))
def test_counts_match_facts_derived_exactly(name):
    # every one agrees to the parameter: same conventions (biases, norms, router and its bias, both embeddings)
    expected = DERIVED[name]
    total, active = expected if isinstance(expected, tuple) else (expected, expected)
    report = param_counts(spec(name))
    assert (report.total, report.active) == (total, active)


# Bundled models whose counts are written out from their configs in another test file.
COUNTED_ELSEWHERE = {
    "gpt-oss-20b", "gpt-oss-120b", "llama4-scout", "llama4-maverick", "qwen3-32b",  # tests/test_arch2026.py
    "deepseek-v3.2",  # tests/test_arch2026.py: the same as DeepSeek-V3 plus the indexer
    "qwen3-next-80b-a3b",  # tests/test_deltanet.py
    "nemotron-h-56b",  # tests/test_mamba.py
    "gemma4-26b-a4b", "minimax-m1",  # tests/test_lightning_gemma4.py
    "whisper-large-v3",  # tests/test_encdec.py
    "minimax-m2.5",  # tests/test_importers_extra.py
    "glm-4.7",  # tests/test_importers_extra2.py
}


def test_every_bundled_model_has_a_derived_count():
    assert set(ALL_BUNDLED) <= set(DERIVED) | COUNTED_ELSEWHERE


# Officially quoted figures, each with its source; all within 1% unless explained.
QUOTED = [
    # (model, total, active, source)
    ("llama3-8b", 8.03e9, None, "Llama 3 8B: 8.03B as widely cited (HF model page; FACTS.md §4)"),
    ("llama3-70b", 70.6e9, None, "Llama 3 70B: HF model page 70.6B"),
    ("llama3.1-405b", 405e9, None, "Llama 3.1 405B: model card"),
    ("llama3.2-1b", 1.23e9, None, "Llama 3.2 model card: 1.23B"),
    ("llama3.2-3b", 3.21e9, None, "Llama 3.2 model card: 3.21B"),
    ("mixtral-8x7b", 46.7e9, 13e9, "Mixtral 8x7B: 46.7B total (ollama listing), 13B active (Mixtral paper, FACTS.md §4)"),
    ("deepseek-v3", 671e9, None, "DeepSeek-V3 README: 671B total"),
    ("deepseek-v2", 236e9, None, "DeepSeek-V2 report abstract: 236B total"),
    ("gpt2", 124e6, None, "GPT-2 small: 124M"),
]


@pytest.mark.parametrize("name, total, active, source", QUOTED, ids=[q[0] for q in QUOTED])
def test_within_1_percent_of_quoted(name, total, active, source):
    report = param_counts(spec(name))
    assert abs(report.total - total) / total < 0.01, source
    if active:
        assert abs(report.active - active) / active < 0.01, source


def test_deepseek_v2_active_21b():
    # DeepSeek-V2 abstract: "21B activated". The exact count is 21.38B: the quote is rounded to whole billions
    # (21.38B is within [20.5B, 21.5B)), which puts it 1.8% off the rounded figure; nothing is missing from it.
    active = param_counts(spec("deepseek-v2")).active
    assert 20.5e9 <= active < 21.5e9


def test_deepseek_v3_active_37b():
    # DeepSeek-V3 README: 37B activated; README_WEIGHTS.md: 36.7B "including 0.9B for Embedding and 0.9B for the
    # output Head". A full count (3 dense layers, 58 MoE layers of 8 routed + 1 shared expert, router with its
    # bias, MLA, norms, both embeddings) gives 37.55B, 1.5% above 37B and 0.85B above 36.7B. DeepSeek's
    # "activated" conventions differ between releases (FACTS.md §4), so the quote is matched within ±1B.
    active = param_counts(spec("deepseek-v3")).active
    assert abs(active - 37e9) < 1e9 and abs(active - 36.7e9) < 1e9


def test_deepseek_v2_lite_quoted_figures():
    # DeepSeek-V2 report Appendix B.1: 15.7B total, 2.4B activated. 2.4B matches a count without the input
    # embedding (0.21B, a lookup that does no compute): 2.66B - 0.21B = 2.45B, within 2.5%.
    report = param_counts(spec("deepseek-v2-lite"))
    assert abs(report.total - 15.7e9) / 15.7e9 < 0.01
    without_input_embedding = report.active - report.breakdown["embed"]
    assert abs(without_input_embedding - 2.4e9) / 2.4e9 < 0.025


def test_gemma3_keras_hub_counts():
    # keras-hub gemma3 presets: 1B 999,885,952 (exact match); 4B text 3,880,099,328, which uses vocab 262,144
    # where the HF text_config has 262,208: the difference is exactly 64 · d_model.
    assert param_counts(spec("gemma3-1b")).total == 999_885_952
    assert param_counts(spec("gemma3-4b")).total - 3_880_099_328 == 64 * 2560
    assert param_counts(spec("gemma3-12b")).total - 11_765_788_416 == 64 * 3840


@pytest.mark.slow
@pytest.mark.parametrize("name", ALL_BUNDLED)
def test_breakdowns_add_up(name):
    report = param_counts(spec(name))
    assert report.total == sum(report.breakdown.values())
    assert report.active <= report.total
    if spec(name).ffn.kind == "dense":
        assert report.active == report.total


def tiny(attention: dict, **extra) -> ModelSpec:
    return ModelSpec.model_validate({
        "name": "tiny", "family": "test", "d_model": 64, "n_layers": 2, "vocab_size": 100, "max_context": 4096,
        "ffn": {"kind": "dense", "d_ff": 256}, "layer_groups": [{"layers": "all", "attention": attention}], **extra,
    })


def test_closed_forms_per_attention_kind():
    d = 64
    gqa = tiny({"kind": "gqa", "n_heads": 8, "n_kv_heads": 2, "head_dim": 16, "qkv_bias": True, "qk_norm": True})
    assert attention_params(gqa.groups[0]) == {
        "attn/q": d * 8 * 16 + 8 * 16, "attn/k": d * 2 * 16 + 2 * 16, "attn/v": d * 2 * 16 + 2 * 16,
        "attn/o": 8 * 16 * d, "attn/norms": 2 * 16,
    }
    mqa = tiny({"kind": "mqa", "n_heads": 8, "o_bias": True})  # d_h = 64 / 8
    # Counter equality treats a missing key as 0: without qk_norm the 'attn/norms' component is left out
    assert Counter(attention_params(mqa.groups[0])) == Counter({"attn/q": d * 64, "attn/k": d * 8, "attn/v": d * 8,
                                                                "attn/o": 64 * d + d, "attn/norms": 0})
    mla = tiny({"kind": "mla", "n_heads": 4, "kv_lora_rank": 32, "q_lora_rank": 24, "qk_nope_head_dim": 16,
                "qk_rope_head_dim": 8, "v_head_dim": 12})
    assert attention_params(mla.groups[0]) == {
        "attn/q_down": d * 24, "attn/q_up": 24 * 4 * (16 + 8), "attn/norms": 24 + 32,
        "attn/kv_down": d * (32 + 8), "attn/kv_up": 32 * 4 * (16 + 12), "attn/o": 4 * 12 * d,
    }
    lite = tiny({"kind": "mla", "n_heads": 4, "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 12})
    assert attention_params(lite.groups[0])["attn/q"] == d * 4 * 24


def test_whole_model_closed_form():
    s = tiny({"kind": "mha", "n_heads": 4}, norm="layernorm", learned_positions=True, tie_embeddings=True)
    d, L, V, ff = 64, 2, 100, 256
    per_layer = 4 * d * d + 3 * d * ff + 2 * 2 * d  # q,k,v,o; gated FFN; two LayerNorms with bias
    assert param_counts(s).total == V * d + 4096 * d + L * per_layer + 2 * d


def test_moe_total_and_active():
    s = tiny({"kind": "mha", "n_heads": 4}, ffn={"kind": "moe", "n_routed_experts": 8, "n_experts_per_tok": 2,
                                                  "moe_d_ff": 32, "n_shared_experts": 1, "first_k_dense": 1,
                                                  "dense_d_ff": 128, "router_bias": True})
    r = param_counts(s)
    expert = 3 * 64 * 32
    assert r.breakdown["ffn/routed"] == 8 * expert and r.active_breakdown["ffn/routed"] == 2 * expert  # layer 1 only
    assert r.breakdown["ffn/dense"] == 3 * 64 * 128  # layer 0
    assert r.breakdown["ffn/router"] == 64 * 8 + 8
    assert r.total - r.active == 6 * expert


def test_weights_bytes():
    assert weights_bytes(1_000_001, "bf16") == 2_000_002
    assert weights_bytes(1_000_001, "int4") == 500_001  # half a byte, rounded up
    assert weights_bytes(10, "fp8") == weights_bytes(10, "int8") == 10
    assert weights_bytes(10, "fp32") == 40
    with pytest.raises(KvcalcError, match="unsupported weights dtype 'int3'"):
        weights_bytes(10, "int3")


def test_deepseek_v3_mtp_module_against_its_readme():
    # DeepSeek-V3 README_WEIGHTS.md (FACTS.md §4): the MTP module is "11.5B unique parameters" with "2.4B activated
    # (including the shared 0.9B Embedding and 0.9B output Head)". kvcalc counts one more weight, eh_proj, the
    # 2·7,168 × 7,168 input projection of the checkpoint: without it 11.51B and, with the shared embedding and head
    # (2 · 129,280 · 7,168), 2.44B, both the README's to its rounding
    v3 = spec("deepseek-v3")
    plain, mtp = param_counts(v3), param_counts(v3, True)
    added, active = mtp.total - plain.total, mtp.active - plain.active
    assert (added, active) == (11_610_068_224, 688_100_608)
    eh_proj, shared = 2 * 7168 * 7168, 2 * 129_280 * 7168
    assert eh_proj == 102_760_448 and round((added - eh_proj) / 1e9, 1) == 11.5
    assert round((active - eh_proj + shared) / 1e9, 1) == 2.4
