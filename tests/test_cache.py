"""The KV cache model: published figures, hand-derived closed forms, and invariants."""

from __future__ import annotations

import pytest

from conftest import ALL_BUNDLED, spec
from kvcalc.costs.cache import kv_cache, per_token_formula, without_windows
from kvcalc.dtypes import DTYPE_BITS, elements_to_bytes
from kvcalc.errors import KvcalcError
from kvcalc.settings import Settings
from kvcalc.spec import ModelSpec

K128 = 128 * 1024  # "128k" = 131,072 tokens (k = 1024)


def tiny(attention: dict, n_layers: int = 4, d_model: int = 64, window: int | None = None, **extra) -> ModelSpec:
    """A small hand-written spec with one layer group."""
    group = {"layers": "all", "attention": attention}
    if window:
        group["sliding_window"] = window
    return ModelSpec.model_validate({
        "name": "tiny", "family": "test", "d_model": d_model, "n_layers": n_layers, "vocab_size": 100,
        "max_context": 1 << 20, "ffn": {"kind": "dense", "d_ff": 4 * d_model}, "layer_groups": [group], **extra,
    })


# ---------------------------------------------------------------- the acceptance figures


def test_llama3_70b_at_128k():
    # 2 (K and V) · 80 layers · 8 KV heads · 128 head dim · 2 bytes (bf16) per token; FACTS.md §2.4.
    report = kv_cache(spec("llama3-70b"), Settings(ctx=K128))
    assert report.bytes_per_token == 2 * 80 * 8 * 128 * 2 == 327_680
    assert report.bytes == 327_680 * 131_072 == 42_949_672_960
    assert report.bytes == 40 * 1024**3  # exactly 40.0 GiB


def test_deepseek_v2_latent_at_128k():
    # MLA latent: (d_c + d_R) = 512 + 64 = 576 elements per token and layer, 60 layers, bf16.
    report = kv_cache(spec("deepseek-v2"), Settings(ctx=K128))
    assert report.mla_cache == "latent"
    assert report.bytes_per_token == 60 * 576 * 2 == 69_120
    assert report.bytes == 69_120 * 131_072 == 9_059_696_640


def test_deepseek_v2_table1_mla_equals_4_5_dh_l():
    # DeepSeek-V2 report Table 1: MLA caches (d_c + d_R)·l ≈ 9/2·d_h·l, with d_c = 4·d_h and d_R = d_h/2 (§2.1.4).
    s = spec("deepseek-v2")
    att = s.groups[0].attention
    d_h = att.qk_nope_head_dim  # the paper's per-head dim d_h = 128
    assert att.kv_lora_rank == 4 * d_h and 2 * att.qk_rope_head_dim == d_h
    elements = kv_cache(s, Settings(ctx=1)).elements_per_token
    assert elements == (att.kv_lora_rank + att.qk_rope_head_dim) * s.n_layers == 34_560
    assert 2 * elements == 9 * d_h * s.n_layers  # exactly 4.5·d_h·l
    # "equal to GQA with only 2.25 groups": 2 · 2.25 · d_h · l
    assert 4 * elements == 2 * 9 * d_h * s.n_layers


def test_deepseek_v2_appendix_table9():
    # DeepSeek-V2 report Appendix D.2 Table 9, KV elements per token: large MoE MLA 34.6K, small MoE MLA 15.6K.
    assert round(kv_cache(spec("deepseek-v2"), Settings(ctx=1)).elements_per_token / 1000, 1) == 34.6
    assert round(kv_cache(spec("deepseek-v2-lite"), Settings(ctx=1)).elements_per_token / 1000, 1) == 15.6


def test_gemma3_27b_local_global_hand_computation():
    # Gemma 3 27B: 62 layers, layer i global when (i+1) % 6 == 0 -> 10 global, 52 local with window 1024;
    # GQA 16 KV heads of dim 128 (head_dim 128, not 5376/32 = 168), bf16.
    per_token_layer = 2 * 16 * 128  # elements
    global_bytes = 10 * per_token_layer * 131_072 * 2
    local_bytes = 52 * per_token_layer * min(131_072, 1024) * 2
    report = kv_cache(spec("gemma3-27b"), Settings(ctx=K128))
    assert report.bytes == global_bytes + local_bytes == 11_173_625_856
    by_label = {g.group.label: g for g in report.groups}
    assert by_label["global"].n_layers == 10 and by_label["local"].n_layers == 52
    assert by_label["local"].tokens_held == 1024 and by_label["global"].tokens_held == 131_072

    all_global = kv_cache(without_windows(spec("gemma3-27b")), Settings(ctx=K128))
    assert all_global.bytes == 62 * per_token_layer * 131_072 * 2
    # about six times the windowed cache (no published figure: FACTS.md §2.7 marks the report's values unverified)
    assert 5.5 < all_global.bytes / report.bytes < 6.5


@pytest.mark.parametrize("name, share_128k, gib_128k", [
    # FACTS.md §2.7 (derived): Gemma 3 KV at 128K relative to all-global, and absolute GiB in bf16.
    ("gemma3-1b", 0.157, 0.51), ("gemma3-4b", 0.154, 2.61), ("gemma3-12b", 0.173, 8.31), ("gemma3-27b", 0.168, 10.41),
])
def test_gemma3_family_share_of_all_global(name, share_128k, gib_128k):
    s = spec(name)
    windowed, full = kv_cache(s, Settings(ctx=K128)).bytes, kv_cache(without_windows(s), Settings(ctx=K128)).bytes
    assert round(windowed / full, 3) == share_128k
    assert round(windowed / 1024**3, 2) == gib_128k


@pytest.mark.parametrize(("name", "share_8k", "share_32k"), [
    # FACTS.md §2.7 (derived): the same share at 8K and 32K, where the local layers' 1,024 (1B: 512) tokens weigh more
    ("gemma3-1b", 0.207, 0.167), ("gemma3-4b", 0.254, 0.174), ("gemma3-12b", 0.271, 0.193), ("gemma3-27b", 0.266, 0.188),
])
def test_gemma3_family_share_at_8k_and_32k(name, share_8k, share_32k):
    s = spec(name)
    for ctx, share in ((8192, share_8k), (32_768, share_32k)):
        windowed, full = kv_cache(s, Settings(ctx=ctx)).bytes, kv_cache(without_windows(s), Settings(ctx=ctx)).bytes
        assert round(windowed / full, 3) == share


def test_kimi_k2_caches_as_deepseek_v3():
    # FACTS.md §1.1: Kimi-K2-Instruct keeps DeepSeek-V3's MLA (kv_lora_rank 512, qk_rope_head_dim 64, 61 layers), so
    # the bundled spec's cache a token is V3's, 61 · 576 · 2 = 70,272 bytes (Zhao et al. Table 1's V3 figure)
    assert kv_cache(spec("kimi-k2"), Settings(ctx=1)).bytes_per_token == 61 * 576 * 2 == 70_272


@pytest.mark.parametrize("name, bf16_bytes_per_token", [
    # Zhao et al., "Insights into DeepSeek-V3" (ISCA 2025, arXiv:2505.09343) Table 1: KV per token in BF16
    # (70.272 KB, 327.680 KB, 516.096 KB; KB = 1000 B); reproduced in FACTS.md §2.3.
    ("deepseek-v3", 70_272), ("qwen2.5-72b", 327_680), ("llama3.1-405b", 516_096),
])
def test_isca_2025_per_token_figures(name, bf16_bytes_per_token):
    assert kv_cache(spec(name), Settings(ctx=1)).bytes_per_token == bf16_bytes_per_token


def test_mistral_rolling_buffer_stops_at_window():
    # FACTS.md §2.8: 32 · 2 · 8 · 128 · 4096 = 268,435,456 elements = 512 MiB in bf16, flat beyond 4096 tokens.
    s = spec("mistral-7b")
    assert kv_cache(s, Settings(ctx=4096)).bytes == 268_435_456 * 2 == 512 * 1024**2
    assert kv_cache(s, Settings(ctx=32_768)).bytes == kv_cache(s, Settings(ctx=4096)).bytes
    assert kv_cache(s, Settings(ctx=4095)).bytes == 4095 * kv_cache(s, Settings(ctx=1)).bytes


# ---------------------------------------------------------------- formulas per attention kind


def test_formulas_per_kind_closed_forms():
    mha = tiny({"kind": "mha", "n_heads": 8})  # d_h = 64 / 8 = 8
    gqa = tiny({"kind": "gqa", "n_heads": 8, "n_kv_heads": 2, "head_dim": 16})
    mqa = tiny({"kind": "mqa", "n_heads": 8, "head_dim": 16})
    mla = tiny({"kind": "mla", "n_heads": 4, "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 12})
    assert per_token_formula(mha.groups[0]).elements == 2 * 8 * 8
    assert per_token_formula(gqa.groups[0]).elements == 2 * 2 * 16
    assert per_token_formula(mqa.groups[0]).elements == 2 * 16
    assert per_token_formula(mla.groups[0], "latent").elements == 32 + 8
    expanded = per_token_formula(mla.groups[0], "expanded")
    assert expanded.components == {"k": 4 * (16 + 8), "v": 4 * 12}
    assert expanded.elements == 4 * (16 + 8) + 4 * 12


def test_deepseek_v2_expanded_cache():
    # Expanded: n_h·(qk_nope + qk_rope) for K plus n_h·v_head_dim for V = 128·192 + 128·128 per layer.
    report = kv_cache(spec("deepseek-v2"), Settings(ctx=4096, mla_cache="expanded"))
    assert report.mla_cache == "expanded"
    assert report.elements_per_token == 60 * (128 * 192 + 128 * 128) == 2_457_600
    assert report.bytes == 2_457_600 * 4096 * 2


@pytest.mark.parametrize("n_heads, head_dim", [(8, 16), (32, 128), (71, 64)])
def test_gqa_with_all_kv_heads_equals_mha(n_heads, head_dim):
    mha = tiny({"kind": "mha", "n_heads": n_heads, "head_dim": head_dim})
    gqa = tiny({"kind": "gqa", "n_heads": n_heads, "n_kv_heads": n_heads, "head_dim": head_dim})
    for ctx in (1, 1000, K128):
        assert kv_cache(gqa, Settings(ctx=ctx)).bytes == kv_cache(mha, Settings(ctx=ctx)).bytes


def test_gqa_with_one_kv_head_equals_mqa():
    mqa = tiny({"kind": "mqa", "n_heads": 8, "head_dim": 16})
    gqa = tiny({"kind": "gqa", "n_heads": 8, "n_kv_heads": 1, "head_dim": 16})
    assert kv_cache(gqa, Settings(ctx=777)).bytes == kv_cache(mqa, Settings(ctx=777)).bytes == 4 * 2 * 16 * 777 * 2


def test_mla_latent_independent_of_head_count():
    # FACTS.md §2.8: Kimi K2 (64 heads) caches the same 576·61 elements as DeepSeek-V3 (128 heads).
    a = tiny({"kind": "mla", "n_heads": 64, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128}, n_layers=61)
    b = tiny({"kind": "mla", "n_heads": 128, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128}, n_layers=61)
    assert kv_cache(a, Settings(ctx=1)).elements_per_token == kv_cache(b, Settings(ctx=1)).elements_per_token == 576 * 61


# ---------------------------------------------------------------- windows, batch, dtypes, constant state


@pytest.mark.parametrize("ctx, held", [(1, 1), (99, 99), (100, 100), (101, 100), (10_000, 100)])
def test_window_holds_min_ctx_w(ctx, held):
    s = tiny({"kind": "mqa", "n_heads": 4, "head_dim": 16}, window=100)
    report = kv_cache(s, Settings(ctx=ctx))
    assert report.groups[0].tokens_held == held
    assert report.elements == 4 * 2 * 16 * held


@pytest.mark.slow
@pytest.mark.parametrize("name", ALL_BUNDLED)
def test_cache_linear_in_context_below_any_window(name):
    s = spec(name)
    limit = min([g.layer.span for g in s.groups if g.layer.span] or [1 << 20])  # the smallest window or chunk
    one = kv_cache(s, Settings(ctx=1))
    for ctx in sorted({2, 3, 17, limit // 2, limit}):
        # one more token per layer each step (cross-attention of encoder–decoder models is a constant part)
        assert kv_cache(s, Settings(ctx=ctx)).elements - one.elements == (ctx - 1) * one.elements_per_token
    # and the per-token rate is the sum over layers, windows or not
    assert one.elements_per_token == sum(per_token_formula(g).elements * len(g.layers) for g in s.groups)


@pytest.mark.slow
@pytest.mark.parametrize("name", ALL_BUNDLED)
def test_cache_linear_in_batch_and_monotone_in_ctx(name):
    s = spec(name)
    assert kv_cache(s, Settings(ctx=5000, batch=3)).bytes == 3 * kv_cache(s, Settings(ctx=5000)).bytes
    sizes = [kv_cache(s, Settings(ctx=c)).bytes for c in (1024, 4096, 32_768, K128)]
    assert sizes == sorted(sizes)


def test_dtype_widths():
    s = spec("llama3-8b")

    def at(kv_dtype: str = "bf16") -> int:
        return kv_cache(s, Settings(ctx=1000, kv_dtype=kv_dtype)).bytes

    bf16 = at()
    assert at("fp32") == 2 * bf16
    assert at("fp16") == bf16
    assert at("fp8") == at("int8") == bf16 // 2
    assert at("int4") == bf16 // 4
    assert at("fp64") == 4 * bf16  # what the NumPy backend's float64 run holds
    assert set(DTYPE_BITS) == {"fp64", "fp32", "bf16", "fp16", "fp8", "int8", "int4"}


def test_int4_rounds_up_to_whole_bytes():
    assert elements_to_bytes(3, "int4") == 2  # 1.5 bytes -> 2
    assert elements_to_bytes(4, "int4") == 2
    with pytest.raises(KvcalcError, match="unsupported kv dtype 'fp6'"):
        elements_to_bytes(4, "fp6")


def test_constant_state_layers_do_not_grow():
    # A hybrid: 3 linear-attention layers with a 4096-element state each, 1 GQA layer.
    s = ModelSpec.model_validate({
        "name": "hybrid", "family": "test", "d_model": 64, "n_layers": 4, "vocab_size": 10, "max_context": 1 << 20,
        "ffn": {"kind": "dense", "d_ff": 128},
        "layer_groups": [
            {"layers": "0-2", "attention": {"kind": "linear", "state_elements": 4096}},
            {"layers": "rest", "attention": {"kind": "gqa", "n_heads": 4, "n_kv_heads": 2, "head_dim": 16}},
        ],
    })
    for ctx in (1, 100, 10_000):
        report = kv_cache(s, Settings(ctx=ctx, batch=2))
        assert report.elements == 2 * 1 * 2 * 2 * 16 * ctx  # the KV cache: the GQA layer only (#6)
        assert report.state_elements == 2 * 3 * 4096  # the states, apart: the same at every ctx
        assert report.cache_bytes == 2 * (report.elements + report.state_elements)  # bf16
    assert kv_cache(s, Settings(ctx=1)).elements_per_token == 2 * 2 * 16  # the linear layers add nothing per token
    fp32 = kv_cache(s, Settings(ctx=100, batch=2, state_dtype="fp32"))
    assert (fp32.bytes, fp32.state_bytes) == (2 * 2 * 2 * 2 * 16 * 100, 4 * 2 * 3 * 4096)  # --state-dtype


def test_bad_arguments_raise():
    s = spec("gpt2")
    with pytest.raises(KvcalcError, match="positive"):
        kv_cache(s, Settings(ctx=0))
    with pytest.raises(KvcalcError, match="latent or expanded"):
        kv_cache(s, Settings(ctx=10, mla_cache="compressed"))


def test_non_mla_reports_no_mla_layout():
    assert kv_cache(spec("gpt2"), Settings(ctx=10, mla_cache="expanded")).mla_cache is None
    # GPT-2 MHA: 2 · 12 heads · 64 · 12 layers = 18,432 elements per token (d_h = 768 / 12).
    assert kv_cache(spec("gpt2"), Settings(ctx=1)).elements_per_token == 18_432


def test_local_and_global_layers_with_different_kv_heads_and_head_dims():
    # Hybrids whose window layers differ in shape from their global layers are summed group by group.
    s = ModelSpec.model_validate({
        "name": "mixed", "family": "test", "d_model": 1024, "n_layers": 8, "vocab_size": 10, "max_context": 65_536,
        "ffn": {"kind": "dense", "d_ff": 2048},
        "layer_groups": [
            {"name": "global", "layers": {"every": 4, "start": 3},
             "attention": {"kind": "gqa", "n_heads": 16, "n_kv_heads": 2, "head_dim": 256}},
            {"name": "local", "layers": "rest", "sliding_window": 512,
             "attention": {"kind": "gqa", "n_heads": 16, "n_kv_heads": 8, "head_dim": 64}},
        ],
    })
    ctx = 10_000
    expected = 2 * (2 * 2 * 256 * ctx) + 6 * (2 * 8 * 64 * 512)  # 2 global layers, 6 local layers
    assert kv_cache(s, Settings(ctx=ctx)).elements == expected
    assert kv_cache(s, Settings(ctx=1)).elements_per_token == 2 * (2 * 2 * 256) + 6 * (2 * 8 * 64)


def test_public_api():
    import kvcalc

    assert kvcalc.kv_cache(kvcalc.load_model("llama3-70b").spec, kvcalc.Settings(ctx=K128)).bytes == 42_949_672_960
    with pytest.raises(AttributeError):
        kvcalc.no_such_thing  # noqa: B018
