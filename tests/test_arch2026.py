"""#6: the architectures of 2025-26 that need no new layer kind of their own: gpt-oss (alternating 128-token windows,
attention sinks, MoE with biases), DeepSeek-V3.2 (the sparse-attention indexer), Llama 4 (chunked local attention,
NoPE layers, interleaved MoE), keys and values of different sizes, and the bundled specs of current models.

Every expected figure is written out from the config's numbers, with the rule it follows, or is a published figure
with its source."""

from __future__ import annotations

import json

import pytest

from conftest import REFERENCE, run, spec
from kvcalc.attention import GQA, Work
from kvcalc.attention.base import Layer, chunk_keys_seen, chunk_keys_seen_sum
from kvcalc.costs import traffic
from kvcalc.costs.cache import kv_cache
from kvcalc.costs.flops import decode_flops, decode_total, generate_flops, prefill_flops
from kvcalc.costs.params import param_counts
from kvcalc.costs.traffic import decode_bytes
from kvcalc.settings import Settings
from kvcalc.spec import ModelSpec

MODELS_2026 = REFERENCE / "models-2026"
K = 1024


def compare(*args: str) -> list[dict]:
    return json.loads(run("compare", *map(str, args), "-f", "json").stdout)


# ---------------------------------------------------------------- gpt-oss


@pytest.mark.parametrize("ctx", [4 * K, 128 * K])
def test_gpt_oss_20b_cache_alternates_windows(ctx):
    # layer_types: 12 sliding layers (window 128: they hold min(ctx, 128) tokens) and 12 full layers, each caching
    # 2 (K and V) · 8 KV heads · head_dim 64 elements per token, bf16
    want = (12 * ctx + 12 * 128) * 2 * 8 * 64 * 2
    rows = compare(MODELS_2026 / "gpt-oss-20b.json", "gpt-oss-20b", "--ctx", str(ctx))
    assert [r["kv_cache_bytes"] for r in rows] == [want, want]
    if ctx == 128 * K:
        assert want == 3_224_371_200  # the figure #6 states


@pytest.mark.parametrize("name, total, active", [
    # OpenAI, "gpt-oss-120b & gpt-oss-20b Model Card" (arXiv:2508.10925), Table 1: total parameters, and active
    # parameters per token, which count the unembedding but not the embedding table
    ("gpt-oss-20b", 20.91e9, 3.61e9),
    ("gpt-oss-120b", 116.83e9, 5.13e9),
])
def test_gpt_oss_parameters_match_the_model_card(name, total, active):
    s = spec(name)
    p = param_counts(s)
    embedding = s.vocab_size * s.d_model  # kvcalc's active count includes it; the card's does not
    assert abs(p.total / total - 1) < 0.005
    assert abs((p.active - embedding) / active - 1) < 0.005
    # sinks: one logit per head per layer; expert biases 2·d_ff + d per expert; router bias one per expert
    assert p.breakdown["attn/sinks"] == s.n_layers * 64
    d, e = s.d_model, s.ffn.n_routed_experts
    assert p.breakdown["ffn/routed"] == s.n_layers * e * (3 * d * 2880 + 2 * 2880 + d)
    assert p.breakdown["ffn/router"] == s.n_layers * (d * e + e)


# ---------------------------------------------------------------- DeepSeek-V3.2: the indexer


def test_deepseek_v32_cache_holds_the_indexer_keys():
    # 61 layers × (512 latent + 64 RoPE key + 128 indexer key) elements per token, bf16
    for ctx in (4 * K, 128 * K):
        rows = compare(MODELS_2026 / "deepseek-v3.2.json", "deepseek-v3.2", "--ctx", str(ctx))
        assert [r["kv_cache_bytes"] for r in rows] == [61 * (512 + 64 + 128) * ctx * 2] * 2
    assert rows[0]["kv_cache_bytes"] == 11_257_511_936  # at 128k, the figure #6 states


def test_deepseek_v32_decode_is_cheaper_than_v3_at_long_context_and_shows_the_indexer():
    at = Settings(ctx=128 * K)
    v32, v3 = decode_flops(spec("deepseek-v3.2"), at), decode_flops(spec("deepseek-v3"), at)
    assert sum(v32.values()) < sum(v3.values())
    # absorbed decode at 128k: MLA attends the top 2048 keys, not all 131,072 (per layer: 2·keys·n_h·(d_c + d_R))
    assert v32["attn/scores"] == 61 * 2 * 2048 * 128 * (512 + 64)
    assert v3["attn/scores"] == 61 * 2 * 128 * K * 128 * (512 + 64)
    # the indexer scans every key: 64 heads · (q·k over 128 + the weighted sum over heads)
    assert v32["attn/index_scores"] == 61 * 2 * 128 * K * 64 * (128 + 1)
    # its projections: wq_b (1536 × 64·128), wk (7168 × 128), weights_proj (7168 × 64), per token
    assert v32["attn/index"] == 61 * 2 * (1536 * 64 * 128 + 7168 * 128 + 7168 * 64)
    cost = json.loads(run("cost", "deepseek-v3.2", "--ctx", "128k", "-f", "json").stdout)["flops"]
    assert {"attn/index", "attn/index_scores"} <= set(cost["decode_token_absorbed"])
    # below the top-k, the indexer changes nothing the attention sees
    short = Settings(ctx=2048)
    assert decode_flops(spec("deepseek-v3.2"), short)["attn/scores"] == decode_flops(spec("deepseek-v3"), short)["attn/scores"]


def test_deepseek_v32_prefill_attends_top_k_per_query():
    s = spec("deepseek-v3.2")
    n = 4096
    f = prefill_flops(s, Settings(ctx=n))
    attended = 2048 * 2049 // 2 + (n - 2048) * 2048  # Σ_i min(i, 2048)
    assert f["attn/scores"] == 61 * 2 * attended * 128 * (128 + 64)  # prefill is naive: per-head d_qk = 192
    assert f["attn/index_scores"] == 61 * 2 * (n * (n + 1) // 2) * 64 * 129  # every causal pair is scanned


# ---------------------------------------------------------------- Llama 4: chunked attention and NoPE layers


@pytest.mark.parametrize("ctx", [4 * K, 128 * K])
def test_llama4_scout_cache_chunked_and_nope_layers(ctx):
    # 48 layers; every fourth (3, 7, …, 47) is NoPE with full attention: 12 layers hold ctx tokens; the 36 RoPE
    # layers attend within 8192-token chunks and hold min(ctx, 8192); 2 · 8 KV heads · 128 per token, bf16
    want = (12 * ctx + 36 * min(ctx, 8192)) * 2 * 8 * 128 * 2
    rows = compare(MODELS_2026 / "llama-4-scout-17b-16e-instruct.json", "llama4-scout", "--ctx", str(ctx))
    assert [r["kv_cache_bytes"] for r in rows] == [want, want]
    assert rows[0]["attention_chunk_size"] == 8192



def test_no_windows_makes_llama4s_chunked_layers_global():
    # --no-windows: every layer global, the 36 chunked layers too: all 48 hold the context (2 · 8 · 128, bf16)
    for model in ("llama4-scout", str(MODELS_2026 / "llama-4-scout-17b-16e-instruct.json")):
        row = json.loads(run("compare", model, "--ctx", "128k", "--no-windows", "-f", "json").stdout)[0]
        assert row["kv_cache_bytes"] == 48 * 2 * 8 * 128 * 131_072 * 2 == 25_769_803_776
        assert row.get("attention_chunk_size") is None
    # below one chunk nothing changes: a chunk of 8,192 holds a context of 8,192 whole
    at_chunk = [json.loads(run("compare", "llama4-scout", "--ctx", "8k", *flag, "-f", "json").stdout)[0]["kv_cache_bytes"]
                for flag in ((), ("--no-windows",))]
    assert at_chunk == [48 * 2 * 8 * 128 * 8192 * 2] * 2

def test_llama4_scout_parameters_written_out():
    d, layers, vocab, ff, experts = 5120, 48, 202048, 8192, 16
    attention = d * 40 * 128 + 2 * d * 8 * 128 + 40 * 128 * d  # q, k, v, o; the L2 qk-norm has no weights
    moe = experts * 3 * d * ff + 3 * d * ff + d * experts  # 16 routed experts, the shared expert, the router
    per_layer = attention + moe + 2 * d  # and two RMSNorms
    total = layers * per_layer + 2 * vocab * d + d  # untied embedding and LM head, the final norm
    active = layers * (attention + 3 * d * ff * 2 + d * experts + 2 * d) + 2 * vocab * d + d  # top-1 + shared
    p = param_counts(spec("llama4-scout"))
    assert (p.total, p.active) == (total, active)
    # Meta's model card: 109B total (with the vision encoder, which kvcalc does not count), 17B active
    assert abs(p.total / 109e9 - 1) < 0.03 and abs(p.active / 17e9 - 1) < 0.03


def test_llama4_maverick_alternates_dense_and_moe_layers():
    s = spec("llama4-maverick")
    p = param_counts(s)
    assert abs(p.total / 400e9 - 1) < 0.03 and abs(p.active / 17e9 - 1) < 0.03  # Meta: 400B total, 17B active
    d = 5120
    assert p.breakdown["ffn/dense"] == 24 * 3 * d * 16384  # 24 dense layers of intermediate_size_mlp


def test_chunked_key_counts_are_exact_sums():
    for chunk in (1, 3, 8):
        for n in range(0, 30):
            assert chunk_keys_seen(n, chunk) == sum((t - 1) % chunk + 1 for t in range(1, n + 1))
            assert chunk_keys_seen_sum(n, chunk) == sum(chunk_keys_seen(m, chunk) for m in range(1, n + 1))


def toy(**group) -> ModelSpec:
    return ModelSpec.model_validate({
        "name": "toy", "family": "test", "d_model": 64, "n_layers": 2, "vocab_size": 100, "max_context": 4096,
        "ffn": {"kind": "dense", "d_ff": 128},
        "layer_groups": [{"layers": "all", "attention": {"kind": "gqa", "n_heads": 4, "n_kv_heads": 2, "head_dim": 16},
                          **group}],
    })


def test_chunked_flops_count_the_keys_of_each_chunk():
    s = toy(attention_chunk_size=5)
    per_pair = 2 * 2 * 4 * 16  # scores and mix: 2 FLOPs · n_h · d_h each
    for n in (3, 5, 12):
        assert prefill_flops(s, Settings(ctx=n))["attn/scores"] == 2 * 2 * 4 * 16 * chunk_keys_seen(n, 5)
    # the decode step at context t sees ((t - 1) mod C) + 1 keys: position 11 is the first of its chunk
    assert decode_flops(s, Settings(ctx=11))["attn/scores"] + decode_flops(s, Settings(ctx=11))["attn/mix"] == 2 * per_pair * 1
    assert decode_flops(s, Settings(ctx=10))["attn/scores"] == 2 * 2 * 4 * 16 * 5
    cached = generate_flops(s, Settings(ctx=7, gen=6))["attn/scores"]
    assert cached == 2 * 2 * 4 * 16 * sum((t - 1) % 5 + 1 for t in range(8, 14))
    uncached = generate_flops(s, Settings(ctx=7, gen=6), cached=False)["attn/scores"]
    assert uncached == 2 * 2 * 4 * 16 * sum(chunk_keys_seen(m, 5) for m in range(8, 14))
    # the cache reserves a whole chunk, and is linear in ctx below it
    assert [kv_cache(s, Settings(ctx=c)).bytes for c in (1, 4, 5, 9)] == [2 * 64 * c * 2 for c in (1, 4, 5, 5)]


def test_window_and_chunk_exclude_each_other(tmp_path):
    path = tmp_path / "both.yaml"
    path.write_text(json.dumps({
        "name": "both", "family": "test", "d_model": 64, "n_layers": 1, "vocab_size": 100, "max_context": 4096,
        "ffn": {"kind": "dense", "d_ff": 128},
        "layer_groups": [{"attention": {"kind": "mha", "n_heads": 4}, "sliding_window": 8, "attention_chunk_size": 16}],
    }))
    res = run("show", path, ok=False)
    assert res.exit_code == 1
    assert f"{path}: layer_groups[0]: sliding_window and attention_chunk_size exclude each other" in res.stderr


# ---------------------------------------------------------------- keys and values of different sizes


def test_keys_and_values_of_different_sizes():
    # MiMo-V2-Flash's keys are 192 wide and its values 128: n_kv·(d_h + d_v) per token and layer
    att = GQA(kind="gqa", n_heads=8, n_kv_heads=4, head_dim=192, v_head_dim=128)
    layer = Layer(1024, None, "layer_groups[0].attention")
    f = att.cache_formula(layer, "latent")
    assert (f.expression, f.elements, f.components) == ("n_kv·(d_h + d_v)", 4 * (192 + 128), {"k": 768, "v": 512})
    weights = {w.name: w.shape for w in att.weights(layer)}
    assert weights["W_V"] == (1024, 4 * 128) and weights["W_O"] == (8 * 128, 1024)
    flops = att.flops(layer, Work(1, 10, 1), "naive")
    assert flops["attn/mix"] == 2 * 10 * 8 * 128  # A·V: each of 8 heads mixes 10 values of 128
    assert flops["attn/scores"] == 2 * 10 * 8 * 192  # QK^T over the keys' 192 (a mutation review: d_v went unseen)


# ---------------------------------------------------------------- the bundled specs of current models


@pytest.mark.parametrize("config, bundled", [
    ("gpt-oss-20b.json", "gpt-oss-20b"),
    ("deepseek-v3.2.json", "deepseek-v3.2"),
    ("llama-4-scout-17b-16e-instruct.json", "llama4-scout"),
])
def test_bundled_specs_equal_their_configs(config, bundled):
    from kvcalc.registry import load_model

    imported, ours = load_model(str(MODELS_2026 / config)).spec, spec(bundled)
    assert param_counts(imported).breakdown == param_counts(ours).breakdown
    for ctx in (1, 4 * K, 128 * K):
        assert kv_cache(imported, Settings(ctx=ctx)).bytes == kv_cache(ours, Settings(ctx=ctx)).bytes


def test_qwen3_32b_parameters_written_out():
    d, layers, vocab, ff = 5120, 64, 151936, 25600
    attention = d * 64 * 128 + 2 * d * 8 * 128 + 64 * 128 * d + 2 * 128  # q, k, v, o and the q/k norms
    per_layer = attention + 3 * d * ff + 2 * d
    assert param_counts(spec("qwen3-32b")).total == layers * per_layer + 2 * vocab * d + d


def test_bundled_minimax_m25_equals_its_config():
    from kvcalc.registry import load_model

    imported = load_model(str(REFERENCE / "configs-extra" / "minimax-m2.5.json")).spec
    assert param_counts(imported).breakdown == param_counts(spec("minimax-m2.5")).breakdown
    assert kv_cache(imported, Settings(ctx=128 * K)).bytes == kv_cache(spec("minimax-m2.5"), Settings(ctx=128 * K)).bytes


# ---------------------------------------------------------------- multi-token prediction (--mtp)


@pytest.mark.slow
def test_mtp_on_a_model_without_mtp_layers_says_it_adds_nothing():
    # MiniMax-M2.5's checkpoint has MTP modules (use_mtp, num_mtp_modules), which its spec leaves out
    m = "minimax-m2.5"
    for args in (["compare", m, "deepseek-v3"], ["show", m], ["cost", m],
                 ["sweep", m, "--ctx", "4k,8k"], ["fit", m, "--hardware", "h100-80gb", "--tp", "8"]):
        plain, mtp = run(*args), run(*args, "--mtp")  # warnings go with the human formats (stderr)
        warning = f"warning: {m}: --mtp: its spec has no multi-token-prediction layers (mtp_layers), so nothing is added"
        assert warning in mtp.stderr and warning not in plain.stderr and "deepseek-v3: --mtp" not in mtp.stderr, args
        if args[0] != "compare":  # compare's deepseek-v3 row does change; fit's rows and cost say the setting, no more
            asked, plain = (json.loads(run(*args, *extra, "-f", "json").stdout) for extra in (["--mtp"], []))
            if args[0] in ("fit", "sweep"):  # their rows carry the setting
                n = 1 if args[0] == "fit" else 2
                assert [r.pop("mtp") for r in asked] == [True] * n and [r.pop("mtp") for r in plain] == [False] * n
            if args[0] == "cost":
                assert (asked.pop("mtp"), plain.pop("mtp")) == (True, False)
            assert asked == plain, args


def test_mtp_layers_count_only_when_asked():
    s = spec("deepseek-v3")
    plain, mtp = Settings(ctx=128 * K), Settings(ctx=128 * K, mtp=True)
    # one MTP layer (num_nextn_predict_layers 1) caches like the 61 others: 62 × 576 per token, bf16
    assert kv_cache(s, plain).bytes == 61 * 576 * 128 * K * 2
    assert kv_cache(s, mtp).bytes == 62 * 576 * 128 * K * 2
    p, q = param_counts(s), param_counts(s, mtp=True)
    assert p.total == 671_026_419_200  # the main model, as before
    d = 7168
    layer = q.breakdown["mtp/attn"] + q.breakdown["mtp/ffn"]
    assert layer == (p.breakdown["attn/q_down"] + p.breakdown["attn/q_up"] + p.breakdown["attn/kv_down"] + p.breakdown["attn/kv_up"]
                     + p.breakdown["attn/o"] + p.breakdown["attn/norms"]) // 61 + (256 + 1) * 3 * d * 2048 + d * 256 + 256
    assert q.breakdown["mtp/proj"] == 2 * d * d and q.breakdown["mtp/norms"] == 5 * d  # eh_proj; 2 + enorm, hnorm, head norm
    # active per token: the MTP block's MoE runs its top 8 of 256 routed experts and the shared one, like every MoE
    # layer (DeepSeek-V3 inference/model.py MoE; config n_activated_experts 8), not all 256
    attention = q.breakdown["mtp/attn"]
    assert q.active - p.active == attention + (8 + 1) * 3 * d * 2048 + d * 256 + 256 + 2 * d * d + 5 * d == 688_100_608
    assert q.active_breakdown["mtp/ffn"] == (8 + 1) * 3 * d * 2048 + d * 256 + 256
    # DeepSeek-V3 README: "685B total, including 671B of the Main Model weights and 14B of the MTP Module weights";
    # the checkpoint stores the MTP module's own copies of the embedding and the output head, which kvcalc shares
    assert abs((q.total + 2 * 129280 * d) / 685e9 - 1) < 0.001
    # a speculative step (vLLM 0.34.0): the model verifies the last token and the draft, positions ctx and ctx + 1, with
    # logits at both, and the MTP layer runs over the same two positions, its draft's logits at one
    f = decode_flops(s, mtp)
    at, after = decode_flops(s, plain), decode_flops(s, Settings(ctx=128 * K + 1))
    assert {k: v for k, v in f.items() if not k.startswith("mtp/")} == {k: at[k] + after[k] for k in at}
    assert f["mtp/proj"] == 2 * 2 * 2 * d * d and "mtp/proj" not in at  # M_k (2·d × d) over 2 tokens
    assert f["mtp/attn"] == sum(v for k, v in f.items() if k.startswith("attn/")) // 61  # one more layer, both tokens
    # the draft token's logits go through the shared output head (DeepSeek-V3 §2.2, eq. 23): 2·d·V once more a step
    assert f["mtp/head"] == 2 * d * 129_280 and f["lm_head"] == 2 * f["mtp/head"] and "mtp/head" not in at
    # the README's --mtp row: DeepSeek-V3 at 4k, 292.6 GFLOP a step against 142.8 without (a review: kvcalc counted one
    # token through the model and the MTP layer, 147.2, half the step vLLM runs)
    step = decode_total(s, Settings(ctx=4 * K, mtp=True))
    assert (step, decode_total(s, Settings(ctx=4 * K))) == (292_586_749_952, 142_841_085_952)
    assert step == decode_total(s, Settings(ctx=4 * K)) + decode_total(s, Settings(ctx=4 * K + 1)) + sum(
        v for k, v in decode_flops(s, Settings(ctx=4 * K, mtp=True)).items() if k.startswith("mtp/"))
    # naive from the latent cache: the step is one pass, which rebuilds each of the 4,097 keys its queries attend once
    # (the union), in the 61 layers and the MTP layer: 2 · d_c · n_h · (d_nope + d_v) = 2 · 512 · 128 · 256 a key
    naive = decode_flops(s, Settings(ctx=4 * K, mtp=True, mla_schedule="naive"))
    assert naive["attn/kv_up"] == 61 * 4097 * 2 * 512 * 128 * 256 and sum(naive.values()) == 8_711_851_311_104
    # DeepSeek-V3.2's queries each attend a top-k of 2,048 (their union the selections decide): each query's own, but
    # never more than the keys the step sees (a review: at ctx 2,048 the two queries' 4,096 of a cache of 2,049)
    v32, key = spec("deepseek-v3.2"), 2 * 512 * 128 * 256
    for ctx, keys in ((2048, 2049), (2049, 2050), (8192, 2 * 2048), (2047, 2048)):
        dsa = decode_flops(v32, Settings(ctx=ctx, mtp=True, mla_schedule="naive"))
        assert dsa["attn/kv_up"] == 61 * keys * key, ctx
    # the step's all-reduces carry its two tokens a sequence: 123 reductions (embedding, 61 attention, 61 FFN) of
    # 8 sequences · 2 tokens · 7,168 · 2 bytes under --tp 8
    reduce = json.loads(run("cost", "deepseek-v3", "--ctx", "4k", "--tp", "8", "--batch", "8", "--mtp", "-f", "json").stdout)
    assert reduce["summary"]["tp_allreduce_bytes"] == 123 * 8 * 2 * 7168 * 2
    # the step reads the MTP layer's weights (its active parameters, bf16) and the shared head a second time: the
    # drafter's logits go through it after the model's (vLLM's share_target_lm_head)
    more = decode_bytes(s, Settings(ctx=4 * K, mtp=True))["weights"] - decode_bytes(s, Settings(ctx=4 * K))["weights"]
    assert more == 2 * (q.active - p.active) + 2 * 129_280 * d
    # with two MTP layers (a spec of one's own), two drafts: the head read twice more
    two = s.model_copy(update={"mtp_layers": 2})
    more = decode_bytes(two, Settings(ctx=4 * K, mtp=True))["weights"] - decode_bytes(two, Settings(ctx=4 * K))["weights"]
    assert more == 2 * 2 * (q.active - p.active) + 2 * 2 * 129_280 * d
    # under vLLM with fp8 weights the head stays bf16 (ParallelLMHead: unquantized), and the drafter reads that very
    # tensor (a review: the second read was counted at fp8's byte)
    fp8 = Settings(ctx=4 * K, engine="vllm", weights_dtype="fp8")
    once, twice = (traffic._weights_read_bytes(s, fp8, 10**9 + (h - 1) * 129_280 * d, 1, 1, prefill=False, heads=h)
                   for h in (1, 2))
    assert twice - once == 2 * 129_280 * d
    gen = json.loads(run("cost", "deepseek-v3", "--ctx", "4k", "--gen", "10", "--mtp", "-f", "json").stdout)["flops"]
    assert gen["generate_cached_absorbed"]["mtp/head"] == 10 * 2 * d * 129_280  # one draft a generated token
    assert gen["prefill"]["mtp/head"] == 2 * d * 129_280  # the prompt's last position only, as the main head
    out = json.loads(run("compare", "deepseek-v3", "--ctx", "128k", "--mtp", "-f", "json").stdout)[0]
    assert out["kv_cache_bytes"] == 62 * 576 * 128 * K * 2 and out["params_total"] == q.total


def test_deepseek_v32_parameters_written_out():
    # DeepSeek-V3's count (FACTS.md §4, derived from its config) plus, in each of 61 layers, the indexer:
    # wq_b (q_lora_rank 1536 × 64 heads · 128), wk (7168 × 128), weights_proj (7168 × 64), k_norm (LayerNorm of 128)
    indexer = 1536 * 64 * 128 + 7168 * 128 + 7168 * 64 + 2 * 128
    p = param_counts(spec("deepseek-v3.2"))
    assert p.total == 671_026_419_200 + 61 * indexer
    assert p.breakdown["attn/index"] == 61 * indexer
    assert abs(p.total / 671e9 - 1) < 0.03  # DeepSeek-V3.2's model card: 671B parameters (685B with the MTP module)


def test_kv_shared_layers_hold_nothing_and_project_no_kv():
    # Gemma 3n-style: the last 2 of 4 layers read the cache of an earlier layer
    s = ModelSpec.model_validate({
        "name": "share", "family": "test", "d_model": 64, "n_layers": 4, "vocab_size": 100, "max_context": 4096,
        "ffn": {"kind": "dense", "d_ff": 128},
        "layer_groups": [
            {"layers": "0-1", "attention": {"kind": "gqa", "n_heads": 4, "n_kv_heads": 2, "head_dim": 16}},
            {"layers": "2-3", "attention": {"kind": "gqa", "n_heads": 4, "n_kv_heads": 2, "head_dim": 16},
             "kv_shared": True},
        ],
    })
    assert kv_cache(s, Settings(ctx=100)).bytes == 2 * 100 * 2 * 2 * 16 * 2  # only layers 0 and 1 hold K/V
    f = decode_flops(s, Settings(ctx=100))
    assert f["attn/k"] == 2 * 2 * 64 * 2 * 16  # two layers project keys; the shared ones read them
    assert f["attn/scores"] == 4 * 2 * 100 * 4 * 16  # all four layers attend
    assert param_counts(s).breakdown["attn/k"] == 4 * 64 * 2 * 16  # weights as the checkpoint holds them


def test_parallel_mixer_adds_its_state_weights_and_flops(tmp_path):
    # Falcon-H1-style: each layer runs GQA and a Mamba-2 mixer side by side on the same input
    mamba = {"kind": "mamba2", "mamba_num_heads": 4, "mamba_head_dim": 16, "ssm_state_size": 8, "n_groups": 1,
             "conv_kernel": 4}
    layer = {"layers": "all", "attention": {"kind": "gqa", "n_heads": 4, "n_kv_heads": 2, "head_dim": 16}}
    base = {"name": "h1", "family": "test", "d_model": 64, "n_layers": 2, "vocab_size": 100, "max_context": 4096,
            "ffn": {"kind": "dense", "d_ff": 128}}
    plain = ModelSpec.model_validate({**base, "layer_groups": [layer]})
    both = ModelSpec.model_validate({**base, "layer_groups": [{**layer, "parallel_mixer": mamba}]})
    alone = ModelSpec.model_validate({**base, "layer_groups": [{"layers": "all", "attention": mamba}]})
    s = Settings(ctx=100)
    # the KV cache is the attention's; the state is the Mamba-2's: H·P·N + (K − 1)·(H·P + 2·G·N) per layer
    assert kv_cache(both, s).bytes == kv_cache(plain, s).bytes
    assert kv_cache(both, s).state_elements == 2 * (4 * 16 * 8 + 3 * (4 * 16 + 2 * 8)) == kv_cache(alone, s).state_elements
    # weights and FLOPs are the sum of the two mixers'
    p, q, r = (param_counts(m) for m in (plain, both, alone))
    assert q.total == p.total + r.total - param_counts(ModelSpec.model_validate(
        {**base, "layer_groups": [{"layers": "all", "attention": {"kind": "none"}}]})).total
    f = decode_flops(both, s)
    assert f["attn/scores"] == decode_flops(plain, s)["attn/scores"]
    assert f["mamba/in_proj"] == decode_flops(alone, s)["mamba/in_proj"]
    assert "GQA+MAMBA2" in run("compare", _dump(tmp_path, {**base, "layer_groups": [{**layer, "parallel_mixer": mamba}]})).stdout


def _dump(tmp_path, data: dict):
    path = tmp_path / "spec.yaml"
    path.write_text(json.dumps(data))
    return path


def test_parallel_mixer_must_hold_a_constant_state(tmp_path):
    path = _dump(tmp_path, {"name": "bad", "family": "test", "d_model": 64, "n_layers": 1, "vocab_size": 100,
                            "max_context": 4096, "ffn": {"kind": "dense", "d_ff": 128},
                            "layer_groups": [{"attention": {"kind": "mha", "n_heads": 4},
                                              "parallel_mixer": {"kind": "mha", "n_heads": 4}}]})
    res = run("show", path, ok=False)
    assert res.exit_code == 1 and "parallel_mixer: must be a constant-state kind" in res.stderr


def test_explain_names_one_mtp_layer_in_the_singular():
    out = run("show", "deepseek-v3", "--mtp", "--explain").stdout
    assert "  mtp: layer 61 (1 layer), MLA, full attention" in out
    assert "layers 0-60 (61 layers), MLA" in out
