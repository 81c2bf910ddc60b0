"""FLOPs: closed forms per component, published reference counts, growth rates, and MLA decode schedules."""

from __future__ import annotations

import json

import pytest

from conftest import REFERENCE, run, spec
from kvcalc.attention import keys_seen, keys_seen_sum
from kvcalc.costs.flops import attention_part, decode_flops, generate_flops, mla_crossover, prefill_flops
from kvcalc.costs.traffic import decode_bytes, prefill_bytes
from kvcalc.errors import KvcalcError
from kvcalc.settings import Settings
from kvcalc.spec import ModelSpec

D, L, V, FF = 64, 3, 100, 256


def tiny(attention: dict, window: int | None = None, ffn: dict | None = None) -> ModelSpec:
    group = {"layers": "all", "attention": attention}
    if window:
        group["sliding_window"] = window
    return ModelSpec.model_validate({
        "name": "tiny", "family": "test", "d_model": D, "n_layers": L, "vocab_size": V, "max_context": 1 << 20,
        "ffn": ffn or {"kind": "dense", "d_ff": FF}, "layer_groups": [group],
    })


# ---------------------------------------------------------------- pair counts


@pytest.mark.parametrize("window", [None, 1, 2, 5, 16])
def test_pair_counts_against_brute_force(window):
    seen = lambda i: min(i, window) if window else i  # noqa: E731
    for n in range(0, 40):
        assert keys_seen(n, window) == sum(seen(i) for i in range(1, n + 1))
        assert keys_seen_sum(n, window) == sum(keys_seen(t, window) for t in range(1, n + 1))


# ---------------------------------------------------------------- closed forms per attention kind


@pytest.mark.parametrize("kind, n_kv", [("mha", 8), ("gqa", 2), ("mqa", 1)])
def test_prefill_and_decode_closed_forms_mha_gqa_mqa(kind, n_kv):
    att = {"kind": kind, "n_heads": 8, "head_dim": 16}
    if kind == "gqa":
        att["n_kv_heads"] = n_kv
    s, n, t = tiny(att), 10, 7
    pairs = n * (n + 1) // 2  # causal: query i meets i keys
    assert prefill_flops(s, Settings(ctx=n)) == {
        "attn/q": L * 2 * n * D * 8 * 16,
        "attn/k": L * 2 * n * D * n_kv * 16,
        "attn/v": L * 2 * n * D * n_kv * 16,
        "attn/scores": L * 2 * pairs * 8 * 16,
        "attn/mix": L * 2 * pairs * 8 * 16,
        "attn/o": L * 2 * n * 8 * 16 * D,
        "ffn/dense": L * 2 * n * 3 * D * FF,
        "lm_head": 2 * 1 * D * V,  # logits of the last position only
    }
    assert decode_flops(s, Settings(ctx=t)) == {
        "attn/q": L * 2 * D * 8 * 16,
        "attn/k": L * 2 * D * n_kv * 16,
        "attn/v": L * 2 * D * n_kv * 16,
        "attn/scores": L * 2 * t * 8 * 16,  # the token at position t meets t keys
        "attn/mix": L * 2 * t * 8 * 16,
        "attn/o": L * 2 * 8 * 16 * D,
        "ffn/dense": L * 2 * 3 * D * FF,
        "lm_head": 2 * D * V,
    }


MLA_ATT = {"kind": "mla", "n_heads": 4, "kv_lora_rank": 32, "q_lora_rank": 24, "qk_nope_head_dim": 16,
           "qk_rope_head_dim": 8, "v_head_dim": 12}


def test_mla_closed_forms():
    s, n, t = tiny(MLA_ATT), 10, 7
    h, c, r, nope, v, q = 4, 32, 8, 16, 12, 24
    common = lambda T: {  # noqa: E731
        "attn/q_down": L * 2 * T * D * q, "attn/q_up": L * 2 * T * q * h * (nope + r),
        "attn/kv_down": L * 2 * T * D * (c + r), "attn/o": L * 2 * T * h * v * D,
        "ffn/dense": L * 2 * T * 3 * D * FF, "lm_head": 2 * D * V,
    }
    pairs = n * (n + 1) // 2
    # prefill: the prompt's K and V are up-projected once, attention per head
    assert prefill_flops(s, Settings(ctx=n)) == {
        **common(n), "attn/kv_up": L * 2 * n * c * h * (nope + v),
        "attn/scores": L * 2 * pairs * h * (nope + r), "attn/mix": L * 2 * pairs * h * v,
    }
    # naive decode from a latent cache: all t keys rebuilt every step
    assert decode_flops(s, Settings(ctx=t, mla_schedule="naive")) == {
        **common(1), "attn/kv_up": L * 2 * t * c * h * (nope + v),
        "attn/scores": L * 2 * t * h * (nope + r), "attn/mix": L * 2 * t * h * v,
    }
    # naive decode from an expanded cache: only the new token's K and V
    assert decode_flops(s, Settings(ctx=t, mla_schedule="naive", mla_cache="expanded"))["attn/kv_up"] == L * 2 * c * h * (nope + v)
    # absorbed: W_UK folded into the query, W_UV into the output, attention over c_KV and the RoPE key
    assert decode_flops(s, Settings(ctx=t, mla_schedule="absorbed")) == {
        **common(1), "attn/q_absorb": L * 2 * h * nope * c, "attn/scores": L * 2 * t * h * (c + r),
        "attn/mix": L * 2 * t * h * c, "attn/v_up": L * 2 * h * c * v,
    }


def test_moe_counts_active_experts_only():
    moe = {"kind": "moe", "n_routed_experts": 8, "n_experts_per_tok": 2, "moe_d_ff": 32, "n_shared_experts": 1}
    f = decode_flops(tiny({"kind": "mha", "n_heads": 4}, ffn=moe), Settings(ctx=5))
    assert f["ffn/routed"] == L * 2 * 2 * 3 * D * 32
    assert f["ffn/shared"] == L * 2 * 1 * 3 * D * 32
    assert f["ffn/router"] == L * 2 * D * 8


def test_sliding_window_caps_attention():
    s = tiny({"kind": "mqa", "n_heads": 4}, window=8)
    assert decode_flops(s, Settings(ctx=8)) == decode_flops(s, Settings(ctx=1000))
    assert prefill_flops(s, Settings(ctx=20))["attn/scores"] == L * 2 * (36 + 12 * 8) * 4 * 16  # Σ min(i, 8) = 36 + 12·8
    assert prefill_flops(s, Settings(ctx=20, dense_attn=True))["attn/scores"] == L * 2 * 400 * 4 * 16  # N×N, as libraries count


# ---------------------------------------------------------------- consistency of prefill, decode and generation


@pytest.mark.parametrize("window", [None, 4])
def test_generation_is_the_sum_of_its_steps(window):
    s = tiny(MLA_ATT if window is None else {"kind": "gqa", "n_heads": 4, "n_kv_heads": 2}, window=window)
    P, G = 5, 9
    for schedule in (("naive", "absorbed") if window is None else ("absorbed",)):
        steps = [decode_flops(s, Settings(ctx=t, mla_schedule=schedule)) for t in range(P + 1, P + G + 1)]
        summed = {k: sum(step.get(k, 0) for step in steps) for k in steps[0]}
        assert generate_flops(s, Settings(ctx=P, gen=G, mla_schedule=schedule)) == summed
    for dense in (False, True):  # --dense-attn counts each re-run prefill's N×N matrix, as it counts a prefill's
        reruns = [prefill_flops(s, Settings(ctx=t, dense_attn=dense)) for t in range(P + 1, P + G + 1)]
        assert (generate_flops(s, Settings(ctx=P, gen=G, dense_attn=dense), cached=False)
                == {k: sum(r[k] for r in reruns) for k in reruns[0]})
    # a prefill's attention is the sum of the attention of decode steps 1..N
    n = 12
    naive = [decode_flops(s, Settings(ctx=t, mla_schedule="naive")) for t in range(1, n + 1)]
    assert prefill_flops(s, Settings(ctx=n))["attn/scores"] == sum(step["attn/scores"] for step in naive)


@pytest.mark.parametrize("name", ["llama3-8b", "gemma3-27b", "deepseek-v3.2", "llama4-scout"])
def test_dense_attn_reaches_generation_without_a_cache(name):
    # Σ_{m=P+1..P+G} m² pairs: llama3-8b at P 4096, G 1024 counts 5,723,324,436,971,520 FLOPs more than causally
    s, P, G = spec(name), 4096, 1024
    causal = sum(generate_flops(s, Settings(ctx=P, gen=G), cached=False).values())
    dense = sum(generate_flops(s, Settings(ctx=P, gen=G, dense_attn=True), cached=False).values())
    if name == "llama3-8b":  # 32 layers, 32 heads of 128: scores and mix 2·2·32·128 FLOPs a pair and layer
        pairs = sum(m * m for m in range(P + 1, P + G + 1)) - sum(m * (m + 1) // 2 for m in range(P + 1, P + G + 1))
        assert dense - causal == 32 * 2 * 2 * 32 * 128 * pairs == 5_723_324_436_971_520
    assert dense > causal
    row = compare_row(name, P, G)
    assert row["flops_generate_uncached"] == dense  # the row path (sweep's) agrees with the pass


def compare_row(name: str, ctx: int, gen: int) -> dict:
    from kvcalc.rows import compare_rows

    rows, _ = compare_rows([spec(name)], [ctx], Settings(ctx=ctx, gen=gen, dense_attn=True), True)
    return rows[0]


def test_growth_cached_quadratic_uncached_cubic():
    s = spec("llama3-8b")

    def from_empty(g: int, cached: bool) -> int:
        # Attention FLOPs of generating g tokens after an empty prompt. Settings needs ctx >= 1, so: the step at
        # context 1 (a decode step, or with no cache a prefill of 1 token) plus g - 1 tokens after a prompt of 1.
        first = decode_flops(s, Settings(ctx=1)) if cached else prefill_flops(s, Settings(ctx=1))
        return attention_part(first) + attention_part(generate_flops(s, Settings(ctx=1, gen=g - 1), cached=cached))

    ratios_cached, ratios_uncached = [], []
    for g in (1024, 8192, 65_536):
        ratios_cached.append(from_empty(2 * g, True) / from_empty(g, True))
        ratios_uncached.append(from_empty(2 * g, False) / from_empty(g, False))
    # doubling G multiplies attention FLOPs by 2(2G+1)/(G+1) -> 4 with a cache, and by about 8 without one
    assert all(abs(r - 4) < 4 / 1000 for r in ratios_cached)
    assert all(abs(r - 8) < 8 * 3 / 1000 for r in ratios_uncached)
    assert abs(ratios_cached[-1] - 4) < abs(ratios_cached[0] - 4)
    assert abs(ratios_uncached[-1] - 8) < abs(ratios_uncached[0] - 8)


# ---------------------------------------------------------------- published references


def test_nanogpt_gpt2_forward_flops():
    # karpathy/nanoGPT transformer_sizing.ipynb (bias-free GPT-2 small, 1024 tokens): forward FLOPs 291,648,307,200,
    # attention 8,053,063,680 per layer, MLP 9,663,676,416 per layer, LM head 79,047,426,048. The notebook counts
    # the full N×N attention and logits at every position; biases add no matrix-product FLOPs.
    f = prefill_flops(spec("gpt2"), Settings(ctx=1024, dense_attn=True), logits="all")
    attention = sum(v for k, v in f.items() if k.startswith("attn/"))
    assert attention == 12 * 8_053_063_680
    assert f["ffn/dense"] == 12 * 9_663_676_416
    assert f["lm_head"] == 79_047_426_048
    assert sum(f.values()) == 291_648_307_200


def test_kaplan_forward_flops_per_token_gpt2():
    # Kaplan et al. 2020, Table 1: C_forward ≈ 2N + 2·n_layer·n_ctx·d_attn per token, N = 12·n_layer·d_model²
    # (non-embedding, no biases or norms; de-embedding excluded). Our exact causal count, averaged over a
    # sequence of n_ctx tokens, gives per token 2N + 4·n_layer·d·(n_ctx+1)/2: Kaplan's mask term takes the mean
    # keys per query as n_ctx/2, the exact mean is (n_ctx+1)/2. So the two differ by exactly 2·n_layer·d_model,
    # 1.6e-5 of the total here, and we assert agreement within 0.01%.
    n_layer, d, n_ctx = 12, 768, 1024
    f = prefill_flops(spec("gpt2"), Settings(ctx=n_ctx))
    ours = sum(v for k, v in f.items() if k != "lm_head")  # per sequence
    kaplan_per_token = 2 * (12 * n_layer * d * d) + 2 * n_layer * n_ctx * d
    assert ours == n_ctx * kaplan_per_token + n_ctx * 2 * n_layer * d
    assert abs(ours / n_ctx - kaplan_per_token) / kaplan_per_token < 1e-4


# ---------------------------------------------------------------- MLA schedules on DeepSeek-V2


def ds_v2_decode_closed_form(t: int, schedule: str) -> int:
    """One decode step of DeepSeek-V2 at context t, written out from its dims (DeepSeek-V2 §3.1.2)."""
    d, layers, h, q, c, r, nope, v, V_ = 5120, 60, 128, 1536, 512, 64, 128, 128, 102400
    proj = 2 * (d * q + q * h * (nope + r) + d * (c + r) + h * v * d)  # W_DQ, W_UQ/W_QR, W_DKV/W_KR, W_O
    if schedule == "naive":  # rebuild K and V of all t cached tokens, attend per head
        attn = 2 * t * c * h * (nope + v) + 2 * t * h * (nope + r) + 2 * t * h * v
    else:  # absorbed: q·W_UK, scores over c_KV + k_R, mix in latent space, W_UV on the output
        attn = 2 * h * nope * c + 2 * t * h * (c + r) + 2 * t * h * c + 2 * h * c * v
    expert = 3 * d * 1536
    ffn = 2 * 12288 * d * 3 + 59 * 2 * (6 * expert + 2 * expert + d * 160)  # layer 0 dense, 59 MoE layers
    return layers * (proj + attn) + ffn + 2 * d * V_


@pytest.mark.parametrize("t", [1, 2, 1024, 131_072])
@pytest.mark.parametrize("schedule", ["naive", "absorbed"])
def test_deepseek_v2_decode_closed_forms(t, schedule):
    assert sum(decode_flops(spec("deepseek-v2"), Settings(ctx=t, mla_schedule=schedule)).values()) == ds_v2_decode_closed_form(t, schedule)


def test_deepseek_v2_which_schedule_is_cheaper():
    s = spec("deepseek-v2")
    cost = lambda t, sched, cache="latent": sum(decode_flops(s, Settings(ctx=t, mla_schedule=sched, mla_cache=cache)).values())  # noqa: E731
    # From a latent cache, rebuilding K and V of every cached token (2·c·h·(nope+v) = 33.6M FLOPs per key and
    # layer) dwarfs the absorbed schedule's 2·h·(2c+r) = 278,528: absorbed is cheaper at 1k and at 128k.
    assert cost(1024, "absorbed") < cost(1024, "naive")
    assert cost(131_072, "absorbed") < cost(131_072, "naive")
    # The two cost the same setup to within one key: the cheaper one changes at t = 2.
    assert mla_crossover(s, Settings(ctx=1)) == 2
    assert cost(1, "naive") < cost(1, "absorbed") and cost(2, "absorbed") < cost(2, "naive")
    # From an expanded cache, naive attends per head over cached K/V (2·h·(nope+r+v) = 81,920 per key) and beats the
    # absorbed schedule's per-key work in FLOPs at long context, at 71x the cache.
    assert cost(131_072, "naive", "expanded") < cost(131_072, "absorbed")


def _wide_latent(tmp_path, full: bool):
    """One MLA layer of full attention (or none) beside 2,048 with a window of 1, n_h 1, d_c 2^20, nope = v = 1,
    d_R 2: per key naive spends 2·(d_c·(1 + 1) + 1 + 2 + 1) FLOPs, absorbed 2·(2·d_c + 2), 4 more for naive; absorbed's
    fixed steps (q_absorb, v_up) cost more, so the crossover lies far out, where only the full layer's keys grow."""
    mla = "{kind: mla, n_heads: 1, kv_lora_rank: 1048576, qk_nope_head_dim: 1, qk_rope_head_dim: 2, v_head_dim: 1}"
    groups = (f"- layers: [0]\n  attention: {mla}\n- layers: rest\n  sliding_window: 1\n  attention: {mla}\n" if full
              else f"- layers: all\n  sliding_window: 1\n  attention: {mla}\n")
    path = tmp_path / "wide.yaml"
    path.write_text("name: wide\nfamily: test\nsource: test\nd_model: 64\nn_layers: 2049\nvocab_size: 100\n"
                    f"max_context: 4096\nffn: {{kind: dense, d_ff: 64}}\nlayer_groups:\n{groups}")
    return path


def test_mla_crossover_is_found_up_to_the_largest_context(tmp_path):
    # a review: mla_crossover searched only up to 2^30 although contexts run to 2^40, so a crossover past it read
    # 'naive stays cheaper' beside an absorbed step cheaper in the same output
    from kvcalc.registry import load_model

    wide = load_model(str(_wide_latent(tmp_path, full=True))).spec
    gap = lambda t: sum(decode_flops(wide, Settings(ctx=t, mla_schedule="naive")).values()) \
        - sum(decode_flops(wide, Settings(ctx=t, mla_schedule="absorbed")).values())  # noqa: E731
    t = mla_crossover(wide, Settings(ctx=1))
    # by hand: the gap is 4·t + 2,048 · 4 − 4 · 2,049 · 2^20 (naive's 4 more FLOPs a key in the full layer and in each
    # windowed one's key, absorbed's fixed q_absorb and v_up, 2 · d_c · (nope + v) = 4 · 2^20 more a layer): first
    # positive at t = 2,049 · 2^20 − 2,048 + 1
    assert t == 2049 * 2**20 - 2047 == 2_148_530_177 > 2**31 and gap(t) > 0 >= gap(t - 1)
    out = run("cost", str(_wide_latent(tmp_path, full=True)), "--ctx", str(2**32), "--gen", "1").stdout
    assert "absorbed is cheaper from context 2,148,530,177 on" in out
    # windows of 1 alone: the keys never grow, absorbed is never cheaper
    out = run("cost", str(_wide_latent(tmp_path, full=False)), "--ctx", str(2**32), "--gen", "1").stdout
    assert "absorbed is never cheaper" in out


def test_cost_notes_the_absorbed_prefill_engines_run_for_dsa_prompts():
    # a review: vLLM attends a DeepSeek Sparse Attention prefill in the latent space past its dense MHA of at most
    # top-k tokens and its masked MHA ranges (mla_attention.py _use_sparse_mha); SGLang by default at any length, its
    # prefill CUDA graphs setting use_mha off (dsa_backend.py); the README said every engine attends a prefill per
    # head. DeepSeek-V3.2 at 131,072 tokens, 61 layers, n_h 128, d_c 512, d_R 64, nope 128, v 128, top-k 2,048:
    # p = Σ min(t, 2,048) pairs
    n, k, h, c, r, nope, v = 131_072, 2048, 128, 512, 64, 128, 128
    p = k * (k + 1) // 2 + (n - k) * k
    per_head = 2 * n * c * h * (nope + v) + 2 * p * h * (nope + r) + 2 * p * h * v  # kv_up, scores, mix
    latent = 2 * n * h * nope * c + 2 * p * h * (c + r) + 2 * p * h * c + 2 * n * h * c * v  # q_absorb, scores, mix, v_up
    prefill = json.loads(run("cost", "deepseek-v3.2", "--ctx", "128k", "--gen", "1", "-f", "json").stdout)["flops"][
        "prefill"]
    assert prefill["attn/kv_up"] + prefill["attn/scores"] + prefill["attn/mix"] == 61 * per_head  # the form counted
    absorbed = prefill["total"] + 61 * (latent - per_head)
    assert absorbed == 22_758_498_487_500_800
    res = run("cost", "deepseek-v3.2", "--ctx", "128k", "--gen", "1")  # notes go to stderr in the human formats
    assert ("note: deepseek-v3.2 at 131,072 tokens: vLLM and SGLang attend this DeepSeek Sparse Attention prefill in "
            "the absorbed form, in the latent space") in res.stderr
    assert f"22.8 PFLOP ({absorbed:,} FLOPs), not the per-head form's 19.6 PFLOP counted here" in res.stderr
    assert "vLLM past its dense MHA prefill of at most top-k 2,048 tokens" in res.stderr
    # within top-k vLLM attends per head, as counted, and SGLang in its prefill graph in the latent space (no GPU
    # named: an 80 GiB Hopper's chunks of 8,192, which it captures)
    short = run("cost", "deepseek-v3.2", "--ctx", "2048").stderr
    assert "SGLang attends this DeepSeek Sparse Attention prefill in the absorbed form" in short
    assert "inside its breakable prefill CUDA graph" in short and "assumed without --hardware" in short
    assert short.rstrip().endswith("vLLM attends it per head, as counted")
    # and where the engine attends it per head there, nothing: vLLM, SGLang under pp (its prefill graphs off, an
    # eager per-head prefill on Hopper within top-k), SGLang on an MI355X (no graphs off CUDA; gfx950 has the
    # per-head kernel); an MI300X (gfx942) has no per-head kernel: absorbed
    for more in (["--engine", "vllm"], ["--engine", "sglang", "--pp", "2"], ["--engine", "sglang", "--hardware", "mi355x"]):
        assert "absorbed form" not in run("cost", "deepseek-v3.2", "--ctx", "2048", *more).stderr, more
    assert "absorbed form" in run("cost", "deepseek-v3.2", "--ctx", "2048", "--engine", "sglang").stderr
    mi300x = run("cost", "deepseek-v3.2", "--ctx", "2048", "--engine", "sglang", "--hardware", "mi300x").stderr
    assert "a DSA forward per head while its keys end within top-k 2,048, on a Hopper, Blackwell or MI355X GPU" in mi300x
    assert "SGLang attends this DeepSeek Sparse Attention prefill in the absorbed form" in mi300x
    # without --engine the note asks both engines' rules of the same settings, a layout SGLang would refuse too
    # (--ep past --tp): the command still answers
    layout = run("cost", "deepseek-v3.2", "--ctx", "128k", "--tp", "2", "--dp", "4", "--ep", "8").stderr
    assert "vLLM and SGLang attend this DeepSeek Sparse Attention prefill" in layout
    # compare notes it beside its prefill column, per context; no other MLA model is noted
    shown = run("compare", "deepseek-v3.2", "--ctx", "2k,128k", "--columns", "cost").stderr
    assert "deepseek-v3.2 at 2,048 tokens" in shown and "deepseek-v3.2 at 131,072 tokens" in shown
    assert "absorbed form" not in run("compare", "deepseek-v3.2", "--ctx", "128k").stderr  # no prefill column
    assert "absorbed form" not in run("cost", "deepseek-v3", "--ctx", "128k").stderr


def test_sweep_and_plot_note_the_absorbed_dsa_prefill_once_at_their_longest_context(tmp_path):
    # a sweep or plot of DeepSeek-V3.2's prefill says what cost says, once a model and setting, at the longest context
    # (not once a row); nothing where no prefill figure is shown, nor where every context is attended per head
    # (vLLM within top-k 2,048)
    note = "note: deepseek-v3.2 at 131,072 tokens: vLLM and SGLang attend this DeepSeek Sparse Attention prefill"
    res = run("sweep", "deepseek-v3.2", "--ctx", "1k..128k")
    assert res.stderr.count("absorbed form") == 1 and note in res.stderr
    assert "absorbed form" not in run("sweep", "deepseek-v3.2", "--ctx", "1k..128k", "--columns", "kv").stderr
    assert "absorbed form" not in run("sweep", "deepseek-v3.2", "--ctx", "1k..2k", "--engine", "vllm").stderr
    # a prefill time is the per-head FLOPs at the roofline: compare notes it beside that column too
    timed = run("compare", "deepseek-v3.2", "--ctx", "128k", "--columns", "model,ctx,prefill_seconds",
                "--hardware", "h100-80gb")
    assert note in timed.stderr
    plotted = run("plot", "deepseek-v3.2", "--ctx", "1k..128k", "-m", "flops-prefill", "-o", str(tmp_path / "p.png"))
    assert plotted.stderr.count("absorbed form") == 1 and note in plotted.stderr
    assert "absorbed form" not in run("plot", "deepseek-v3.2", "--ctx", "1k..128k", "-o", str(tmp_path / "c.png")).stderr


def test_cost_notes_sglangs_absorbed_mla_prefill_where_its_graphs_capture_the_chunks():
    # SGLang 0.5.23 captures an MLA model's prefill chunks (up to min(8,192, chunked_prefill_size) tokens) in its
    # breakable CUDA graph, the CUDA default at pp 1, inside which _handle_attention_backend pins the absorbed method.
    # DeepSeek-V3 at 4,096 tokens: 61 layers of n_h 128, d_c 512, d_R 64, nope 128, v 128, p = 4,096 · 4,097 / 2 pairs
    n, h, c, r, nope, v = 4096, 128, 512, 64, 128, 128
    p = n * (n + 1) // 2
    per_head = 2 * n * c * h * (nope + v) + 2 * p * h * (nope + r) + 2 * p * h * v  # kv_up, scores, mix
    latent = 2 * n * h * nope * c + 2 * p * h * (c + r) + 2 * p * h * c + 2 * n * h * c * v  # q_absorb, scores, mix, v_up
    counted = json.loads(run("cost", "deepseek-v3", "--ctx", "4k", "-f", "json").stdout)["flops"]["prefill"]["total"]
    absorbed = counted + 61 * (latent - per_head)
    assert absorbed == 434_998_187_917_312
    words = "SGLang attends this MLA prefill in the absorbed form, in the latent space"
    h100 = run("cost", "deepseek-v3", "--ctx", "4k", "--engine", "sglang", "--hardware", "h100-80gb").stderr
    assert words in h100 and f"435 TFLOP ({absorbed:,} FLOPs), not the per-head form's 334 TFLOP counted here" in h100
    assert "attends one of 2 to 8,192 tokens absorbed inside its breakable prefill CUDA graph" in h100
    unnamed = run("cost", "deepseek-v3", "--ctx", "4k", "--engine", "sglang").stderr  # no GPU: Hopper's, said
    assert words in unnamed and "as on an 80 GiB Hopper GPU, assumed without --hardware" in unnamed
    # per head, as counted: vLLM (forward_mha), no engine, SGLang on a B200 (its default trtllm_mla backend for a
    # DeepseekV3ForCausalLM turns the prefill graphs off), on AMD (no prefill graphs off CUDA), under pp (graphs off),
    # on a B200 past its capture (batch 4 of 4k: forwards of 16,384 tokens, its chunk there, replay eagerly), and from
    # an expanded cache (no latent)
    for model, more in (("deepseek-v3", []), ("deepseek-v3", ["--engine", "vllm"]),
                        ("deepseek-v3", ["--engine", "sglang", "--hardware", "b200-180gb"]),
                        ("deepseek-v3", ["--engine", "sglang", "--hardware", "mi300x"]),
                        ("deepseek-v3", ["--engine", "sglang", "--pp", "2"]),
                        ("deepseek-v2", ["--engine", "sglang", "--hardware", "b200-180gb", "--batch", "4"]),
                        ("deepseek-v3", ["--engine", "sglang", "--mla-cache", "expanded"])):
        assert "absorbed form" not in run("cost", model, "--ctx", "4k", *more).stderr, (model, more)
    # DeepSeek-V2 (a DeepseekV2ForCausalLM, no trtllm_mla default) on a B200: a forward of 4,096 tokens is captured,
    # whatever its chunk of 16,384
    assert "absorbed form" in run("cost", "deepseek-v2", "--ctx", "4k", "--engine", "sglang", "--hardware",
                                  "b200-180gb").stderr


def test_sglang_attends_a_chunked_prefills_later_forwards_absorbed_where_its_rules_say():
    # SGLang decides the form forward by forward (a review): on a B200 (chunks of 16,384) DeepSeek-V2's 24k prompt is
    # a forward of 16,384 tokens, run eagerly per head (flashinfer at a prefix of 0), and one of 8,192 inside the
    # prefill graph, absorbed; on an MI300X at tp 4 (32 heads a rank: Triton, no graphs off CUDA) DeepSeek-V3's second
    # chunk of 16,384 (a prefix > 0) absorbed; on an A100 under pp 2 (graphs off, Triton) DeepSeek-V2's second chunk
    # of 8,192. Absorbed minus per head a layer and pair: 128 heads · 2 · ((512 + 64 + 512) − (128 + 64 + 128))
    pair = 128 * 2 * ((512 + 64 + 512) - (128 + 64 + 128))
    assert pair == 196_608
    pairs = lambda a, b: b * (b + 1) // 2 - a * (a + 1) // 2  # noqa: E731 - causal pairs of queries a+1..b
    for model, layers, ctx, start, more in (
            ("deepseek-v2", 60, 24_576, 16_384, ["--hardware", "b200-180gb"]),
            ("deepseek-v3", 61, 32_768, 16_384, ["--hardware", "mi300x", "--tp", "4"]),
            ("deepseek-v2", 60, 16_384, 8_192, ["--hardware", "a100-80gb", "--pp", "2"])):
        counted = json.loads(run("cost", model, "--ctx", str(ctx), "-f", "json").stdout)["flops"]["prefill"]["total"]
        total = counted + layers * pair * pairs(start, ctx)
        note = run("cost", model, "--ctx", str(ctx), "--engine", "sglang", *more).stderr
        assert f"SGLang attends queries {start + 1:,}-{ctx:,} of each prompt in the absorbed form" in note, model
        assert f"({total:,} FLOPs), not the per-head form's" in note, (model, more)
    # forwards absorbed in the middle (a review): under --dp-attention at pp 2 on H100s (no graphs under pp; the chunk
    # of 8,192 over 8 workers, forwards of 1,024) fa3 attends a forward at a prefix of 1,024 to 8,191 absorbed, per
    # head from 8,192 on; on MI300Xs at tp 4 with --dp-attention (4,096-token forwards) DeepSeek-V3's 32 heads a rank
    # run Triton, absorbed past the first forward, and Kimi K2's 16 run aiter, per head; a forward of one token is
    # not captured (padded past twice its size): a prompt of 1 per head, one of 8,193 absorbed but its last query
    p = lambda n: n * (n + 1) // 2  # noqa: E731
    for model, layers, ctx, lo, hi, more in (
            ("deepseek-v2", 60, 131_072, 1024, 8192, ["--hardware", "h100-80gb", "--tp", "8", "--dp-attention", "--pp", "2"]),
            ("deepseek-v3", 61, 32_768, 4096, 32_768, ["--hardware", "mi300x", "--tp", "4", "--dp-attention"]),
            ("deepseek-v2", 60, 8193, 0, 8192, ["--hardware", "h100-80gb"])):
        counted = json.loads(run("cost", model, "--ctx", str(ctx), "-f", "json").stdout)["flops"]["prefill"]["total"]
        total = counted + layers * pair * (p(hi) - p(lo))
        note = run("cost", model, "--ctx", str(ctx), "--engine", "sglang", *more).stderr
        assert f"SGLang attends queries {lo + 1:,}-{hi:,} of each prompt in the absorbed form" in note, (model, more)
        assert f"({total:,} FLOPs)" in note, (model, more)
    assert 60 * pair * (p(8192) - p(1024)) + 47_550_034_954_158_080 == 47_939_716_665_835_520
    for model, ctx, more in (("kimi-k2", "32k", ["--hardware", "mi300x", "--tp", "4", "--dp-attention"]),
                             ("deepseek-v2", "1", ["--hardware", "h100-80gb"]),
                             ("deepseek-v2", "16k", ["--batch", "2", "--hardware", "b200-180gb"])):
        assert "absorbed form" not in run("cost", model, "--ctx", ctx, "--engine", "sglang", *more).stderr, model
    # Kimi Linear's MLA layers (DeepseekV2AttentionMLA; its prefill graphs off as a KDA hybrid) on an A100: Triton,
    # the second 8,192-token forward absorbed; 7 MLA layers of 32 heads: 7 · 2 · 32 · ((512 + 64 + 512) − (128 + 64 +
    # 128)) a pair
    kimi = str(REFERENCE / "configs-extra-3" / "kimi-linear-48b-a3b-instruct.json")
    counted = json.loads(run("cost", kimi, "--ctx", "16k", "-f", "json").stdout)["flops"]["prefill"]["total"]
    total = counted + 7 * 2 * 32 * 768 * (p(16_384) - p(8192))
    note = run("cost", kimi, "--ctx", "16k", "--engine", "sglang", "--hardware", "a100-80gb").stderr
    assert "attends queries 8,193-16,384 of each prompt in the absorbed form" in note and f"({total:,} FLOPs)" in note
    assert total == 144_514_492_661_760
    # prompts a whole number of chunks long are cut alike, each as one alone: 2 of 16,384 on an A100 under pp 2
    two = run("cost", "deepseek-v2", "--ctx", "16k", "--batch", "2", "--engine", "sglang", "--hardware", "a100-80gb",
              "--pp", "2").stderr
    assert "SGLang attends queries 8,193-16,384 of each prompt in the absorbed form" in two
    # a batch of 3 such prompts on a B200 mixes the forms forward by forward: said, without a total
    mixed = run("cost", "deepseek-v2", "--ctx", "8k", "--batch", "3", "--engine", "sglang", "--hardware", "b200-180gb")
    assert "attends some of this batch's prefill forwards in the absorbed form" in mixed.stderr
    # a --dp replica's forwards are its own sequences': 9 prompts of 1k over 9 replicas, each a forward of 1,024
    # tokens inside the graph on a B200, as one prompt alone
    dp = run("cost", "deepseek-v2", "--ctx", "1k", "--dp", "9", "--batch", "9", "--engine", "sglang", "--hardware",
             "b200-180gb").stderr
    assert "SGLang attends this MLA prefill in the absorbed form" in dp
    # under DP attention SGLang divides its chunk among the attention-DP workers (parallel_hook.py): on B200s at tp 8
    # a worker's forwards are 16,384 / 8 = 2,048 tokens, all captured, so the 24k prompt is attended absorbed whole
    workers = run("cost", "deepseek-v2", "--ctx", "24k", "--engine", "sglang", "--hardware", "b200-180gb", "--tp", "8",
                  "--dp-attention").stderr
    assert "SGLang attends this MLA prefill in the absorbed form" in workers
    # a sweep notes the longest context that has a note, and how many more do: on a B200 the 1k and 4k prompts are
    # captured, the 32k one (two eager forwards of 16,384) per head
    sweep = run("sweep", "deepseek-v2", "--ctx", "1k,4k,32k", "--engine", "sglang", "--hardware", "b200-180gb").stderr
    assert "note: deepseek-v2 at 4,096 tokens: SGLang attends" in sweep and "(so too at 1 more of its 3 contexts)" in sweep


def test_absorbed_needs_a_latent_cache():
    with pytest.raises(KvcalcError, match="needs --mla-cache latent"):
        decode_flops(spec("deepseek-v2"), Settings(ctx=10, mla_schedule="absorbed", mla_cache="expanded"))
    with pytest.raises(KvcalcError, match="naive or absorbed"):
        decode_flops(spec("deepseek-v2"), Settings(ctx=10, mla_schedule="fused"))


def test_batch_scales_flops():
    s = spec("mixtral-8x7b")
    assert decode_flops(s, Settings(ctx=100, batch=4)) == {k: 4 * v for k, v in decode_flops(s, Settings(ctx=100)).items()}


# ---------------------------------------------------------------- memory traffic


def test_decode_bytes_llama3_8b():
    s = spec("llama3-8b")
    b = decode_bytes(s, Settings(ctx=4096))
    # all weights but the input embedding table (one row of 4096 is looked up), bf16
    assert b["weights"] == 2 * (8_030_261_248 - 128_256 * 4096 + 4096)
    assert b["kv_cache"] == 4096 * 131_072  # 128 KiB per token
    assert decode_bytes(s, Settings(ctx=4096, batch=2))["kv_cache"] == 2 * b["kv_cache"]


def test_decode_bytes_moe_reads_active_experts():
    s = spec("mixtral-8x7b")
    assert decode_bytes(s, Settings(ctx=1))["weights"] == 2 * (12_879_925_248 - 32_000 * 4096 + 4096)
    assert prefill_bytes(s, Settings(ctx=1000))["weights"] == 2 * (46_702_792_704 - 32_000 * 4096 + 1000 * 4096)


@pytest.mark.parametrize("ctx, batch", [(1, 1), (2, 1), (3, 1), (4, 1), (1, 4), (1000, 1)])
def test_prefill_reads_only_the_experts_its_tokens_can_reach(ctx, batch):
    # a review: a prefill of T = batch · ctx tokens picks at most T · k of each MoE layer's E experts (top-k routing),
    # so it reads min(E, T · k) of them, not all: Mixtral's 32 layers of 8 experts (3 · 4,096 · 14,336 each), 2 a
    # token. One token's prefill reads what a decode step reads (a lower bound that was 3.6 times the step's)
    s = spec("mixtral-8x7b")
    t = batch * ctx
    expert = 3 * 4096 * 14_336
    read = 46_702_792_704 - 32 * (8 - min(8, 2 * t)) * expert - 32_000 * 4096 + min(32_000, t) * 4096
    assert prefill_bytes(s, Settings(ctx=ctx, batch=batch))["weights"] == 2 * read
    if t == 1:
        assert prefill_bytes(s, Settings(ctx=1))["weights"] == decode_bytes(s, Settings(ctx=1))["weights"]
    # DeepSeek-V3 at 16 tokens: 128 of the 256 experts (3 · 7,168 · 2,048) in each of its 58 MoE layers; with --mtp
    # the MTP layer's MoE the same
    v3 = spec("deepseek-v3")
    tables = 129_280 * 7168  # the untied input embedding, read by lookup
    assert prefill_bytes(v3, Settings(ctx=16))["weights"] \
        == 2 * (671_026_419_200 - 58 * 128 * 3 * 7168 * 2048 - tables + 16 * 7168)
    assert prefill_bytes(v3, Settings(ctx=16, mtp=True))["weights"] - prefill_bytes(v3, Settings(ctx=16))["weights"] \
        == 2 * (11_610_068_224 - 128 * 3 * 7168 * 2048)


@pytest.mark.parametrize("ctx", [1, 512, 513, 1024, 2048])
def test_prefill_reads_each_lookup_table_at_most_whole(ctx):
    # GPT-2 (tied wte of 50,257 × 768, learned wpe of 1,024 × 768; 124,439,808 parameters, FACTS.md): the prefill
    # reads every weight but the wpe once (wte whole as the LM head), then ctx rows of wte and min(ctx, 1,024) of wpe.
    # Until this test, one cap of 1,024 rows for both tables froze the count from ctx 513 on (248,879,616 bytes).
    d, v, n_ctx, total = 768, 50_257, 1024, 124_439_808
    want = 2 * (total - n_ctx * d + min(ctx, v) * d + min(ctx, n_ctx) * d)
    assert prefill_bytes(spec("gpt2"), Settings(ctx=ctx))["weights"] == want
    if ctx == 1024:
        assert want == 250_452_480
    # a tied table without learned positions (gemma3-1b: 262,144 × 1,152, 999,885,952 parameters): the whole table
    # as the LM head, and the rows the prompt looks up; both reads counted, as a decode step's are
    g = spec("gemma3-1b")
    assert g.tie_embeddings and not g.learned_positions
    assert prefill_bytes(g, Settings(ctx=ctx))["weights"] == 2 * (999_885_952 + ctx * 1152)
    assert decode_bytes(g, Settings(ctx=ctx))["weights"] == 2 * (999_885_952 + 1152)


@pytest.mark.parametrize("name", ["deepseek-v3", "deepseek-v3.2"])
def test_mtp_block_is_one_more_last_layer(name):
    # DeepSeek-V3 §2.2: each MTP module is a Transformer block like the model's own (MLA + MoE) after M_k. Every
    # layer of deepseek-v3 has the same attention and its last 58 the same MoE FFN, so the block's attention is the
    # model's attention summed over its 61 layers, divided by 61, and its FFN the MoE layers' FFN divided by 58,
    # in every pass; M_k projects 2·d to d for each token. (Until 2026-12-01 each took only the last component
    # of its prefix: attn/o, ffn/router.)
    model = spec(name)
    assert model.mtp_layers == 1 and model.n_layers == 61
    moe_layers = model.n_layers - model.ffn.first_k_dense
    s = Settings(ctx=4096, mtp=True)
    # a decode step under --mtp is speculative: the last token and its draft, 2 tokens through the model and the block
    for flops, tokens in ((prefill_flops(model, s), 4096), (decode_flops(model, s), 2)):
        attn = sum(v for k, v in flops.items() if k.startswith("attn/"))
        moe = sum(flops.get(k, 0) for k in ("ffn/routed", "ffn/shared", "ffn/router"))
        assert attn % 61 == 0 and flops["mtp/attn"] == attn // 61
        assert moe % moe_layers == 0 and flops["mtp/ffn"] == moe // moe_layers
        assert flops["mtp/proj"] == 2 * tokens * 2 * model.d_model * model.d_model


def test_compares_decode_row_under_the_expanded_mla_cache_by_hand():
    # a mutation review: compare's decode column took the latent cache's work whatever --mla-cache said, and only a
    # golden output saw it. DeepSeek-V2 at 4k with its K/V cached expanded: a decode step projects only the new
    # token's K/V up (kv_up) and attends the 4,096 cached keys and values per head; 60 layers, d 5,120, q rank 1,536,
    # 128 heads of 128 + 64 (keys) and 128 (values); layer 0 dense (d_ff 12,288), 59 MoE layers of 6 routed and 2
    # shared experts of 1,536 among 160; vocabulary 102,400
    L, d, heads, ctx = 60, 5120, 128, 4096
    attention = L * 2 * (d * 1536 + 1536 * heads * 192 + d * (512 + 64) + 512 * heads * (128 + 128)
                         + ctx * heads * 192 + ctx * heads * 128 + heads * 128 * d)
    ffn = 2 * 3 * d * 12288 + 59 * 2 * (6 * 3 * d * 1536 + 2 * 3 * d * 1536 + d * 160)
    row = json.loads(run("compare", "deepseek-v2", "--ctx", "4k", "--mla-cache", "expanded", "--columns", "cost",
                         "-f", "json").stdout)[0]
    assert row["flops_decode_token"] == attention + ffn + 2 * d * 102_400 == 61_834_199_040
    assert row["mla_schedule"] == "naive"  # nothing to absorb: the cache holds K and V themselves


def test_qwen3_nexts_shared_expert_gate_is_one_product_a_token():
    # a mutation review: the shared expert's gate (Qwen3-Next, shared_expert_gate: d_model × 1) was seen only by a
    # golden output: 2·d FLOPs a token beside the shared expert's 3 products
    from kvcalc.costs.flops import ffn_flops
    from kvcalc.spec import MoEFFN

    moe = dict(kind="moe", n_routed_experts=512, n_experts_per_tok=10, moe_d_ff=512, n_shared_experts=1, shared_d_ff=512)
    gated, plain = MoEFFN(**moe, shared_gate=True), MoEFFN(**moe)
    assert ffn_flops(gated, 2048, 7)["ffn/shared"] == 2 * 7 * (3 * 2048 * 512 + 2048)
    assert ffn_flops(gated, 2048, 7)["ffn/shared"] - ffn_flops(plain, 2048, 7)["ffn/shared"] == 2 * 7 * 2048
