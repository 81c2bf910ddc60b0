"""Gemma 3n E2B (gemma3n, decoder under text_config), imported from its real config (tests/data/reference/
configs-gemma3n, SOURCES.md there): the KV cache of its sliding, full and KV-shared layers written out from the
config's numbers, and its parameters derived by hand and checked against Google's published count."""

from __future__ import annotations

import json

import pytest

from conftest import REFERENCE, ConfigFolder, kv_bytes, run
from kvcalc.errors import SpecError
from kvcalc.hf.gemma3n import unmodelled_params

CONFIGS = ConfigFolder("configs-gemma3n")
E2B = "gemma-3n-e2b"
PATH = CONFIGS.folder / f"{E2B}.json"
K = 1024
BF16 = 2  # bytes per cached element (kvcalc's default kv dtype)
CTXS = (4 * K, 128 * K)

# From gemma-3n-e2b.json text_config: hidden_size 2048, 30 layers, 8 heads, 2 KV heads × head_dim 256, window 512;
# layer_types full at 4, 9, 14, 19, 24, 29; num_kv_shared_layers 10, so layers 20-29 read the cache of layer 18
# (sliding) or 19 (full), the last earlier layer of their type (Gemma3nTextAttention.kv_shared_layer_index).
D, L, H, KV, DH, W = 2048, 30, 8, 2, 256, 512
V, V_PLE, P, FF, RANK, ALTUP = 262_400, 262_144, 256, 8192, 64, 4
OWN_SLIDING, OWN_FULL = 16, 4  # layers 0-19: 4 full, 16 sliding; layers 20-29 hold nothing
PER_TOKEN_LAYER = 2 * KV * DH * BF16  # keys and values: 2,048 bytes per token and layer


def held(ctx: int) -> int:
    """Bytes of the cache at ctx: a sliding layer holds min(ctx, W) tokens (a query sees W keys, itself included:
    masking_utils.sliding_window_overlay, kv_idx > q_idx - W), a full layer ctx, a shared layer none."""
    return (OWN_SLIDING * min(ctx, W) + OWN_FULL * ctx) * PER_TOKEN_LAYER


def test_cache_per_token_and_beyond_the_window():
    rows = CONFIGS.compare(E2B)
    # 20 layers cache their own K/V: 20 × 2·2·256 × 2 bytes = 40,960 bytes per token; the 10 shared layers add none
    assert [r["kv_bytes_per_token"] for r in rows] == [(OWN_SLIDING + OWN_FULL) * PER_TOKEN_LAYER] * 2 == [40_960] * 2
    # 4k: 16 × 512 + 4 × 4,096 tokens; 128k (past the trained 32k, computed anyway): 16 × 512 + 4 × 131,072
    assert kv_bytes(rows) == [held(ctx) for ctx in CTXS] == [50_331_648, 1_090_519_040]


def test_compare_at_32k_runs():
    res = run("compare", str(PATH), "--ctx", "32k", "-f", "json")
    row = json.loads(res.stdout)[0]
    assert row["kv_cache_bytes"] == held(32 * K) == 16 * 512 * 2048 + 4 * 32_768 * 2048 == 285_212_672
    assert "gemma-3n-e2b" in run("compare", str(PATH), "--ctx", "32k").stdout


def test_layers_holding_a_cache_and_the_shared_groups():
    s = CONFIGS.imported(CONFIGS.config(E2B))
    own = sorted(i for g in s.groups if not g.layer.kv_shared for i in g.layers)
    shared = {g.label: list(g.layers) for g in s.groups if g.layer.kv_shared}
    assert own == list(range(20))
    assert shared == {"local-shared": [20, 21, 22, 23, 25, 26, 27, 28], "global-shared": [24, 29]}
    assert all(g.sliding_window == W for g in s.groups if g.label.startswith("local"))


def test_text_config_alone_gives_the_same_spec():
    cfg = CONFIGS.config(E2B)
    whole, text = CONFIGS.imported(cfg), CONFIGS.imported(cfg["text_config"])
    assert whole.model_dump(exclude={"notes", "source", "multimodal"}) == \
        text.model_dump(exclude={"notes", "source", "multimodal"})
    # the whole config names its architecture (Gemma3nForConditionalGeneration: the engines load its towers); the
    # text_config alone says nothing, so the family's published checkpoints answer
    assert (whole.multimodal, text.multimodal) == (True, None)


def exact_text_params() -> int:
    """Every parameter of Gemma3nForConditionalGeneration's language model (modeling_gemma3n.py, v4.53.1)."""
    attn = 2 * D * H * DH + 2 * D * KV * DH + 2 * DH  # q, o; k, v (kept by the shared layers too); q_norm, k_norm
    mlp = 3 * D * FF  # gate, up, down
    norms = 4 * D  # input, post-attention, pre- and post-feedforward
    altup = D + ALTUP**2 + ALTUP**3 + D * ALTUP + D  # correct_output_scale, correction, prediction, router, router_norm
    laurel = 2 * D * RANK + D  # linear_left, linear_right, post_laurel_norm
    ple = 2 * D * P + D  # per_layer_input_gate, per_layer_projection, post_per_layer_input_norm
    layer = attn + mlp + norms + altup + laurel + ple
    # embed_tokens (tied to lm_head), final norm, embed_tokens_per_layer, per_layer_model_projection,
    # per_layer_projection_norm, altup_projections and altup_unembed_projections
    model = V * D + D + V_PLE * L * P + D * L * P + P + 2 * (ALTUP - 1) * D * D
    return L * layer + model


def test_parameters_exact_with_the_extra_weights():
    total = exact_text_params()
    assert total == 4_456_156_768
    # The blocks the schema has no type for, counted as extra_weights: the per-layer embeddings and projections,
    # AltUp's projections and coefficients, LAuReL's matrices, each written out from the config.
    extra = {
        "per_layer_embeddings": V_PLE * L * P + D * L * P + P + L * 2 * D * P,
        "altup": 2 * (ALTUP - 1) * D * D + L * (ALTUP**2 + ALTUP**3 + D * ALTUP),
        "laurel": L * 2 * D * RANK,
    }
    assert unmodelled_params(CONFIGS.config(E2B)["text_config"], "t") == extra
    assert sum(extra.values()) == 2_093_730_400
    row = CONFIGS.compare(E2B)[0]
    assert row["params_total"] == total
    assert "2,093,730,400" not in CONFIGS.imported(CONFIGS.config(E2B)).notes
    spec = CONFIGS.imported(CONFIGS.config(E2B))
    assert spec.extra_weights["per_layer_embeddings"].table == V_PLE * L * P  # read by row: L·p values a token
    assert spec.extra_weights["per_layer_embeddings"].row == L * P


def test_parameters_match_the_published_effective_count():
    # Google's "effective" count leaves out the two embedding tables (embed_tokens and embed_tokens_per_layer):
    # google/gemma3n-slicing-configs, row "Config for official E2B Model": 30 layers, 1.91B effective parameters;
    # ai.google.dev/gemma/docs/gemma-3n#parameters: "an effective memory load of just under 2 billion (1.91B)".
    row = CONFIGS.compare(E2B)[0]
    effective = row["params_total"] - V * D - V_PLE * L * P
    assert effective == 1_905_495_648 and round(effective / 1e9, 2) == 1.91


def test_decode_reads_one_row_of_the_per_layer_table():
    from kvcalc.costs.params import param_counts
    from kvcalc.costs.traffic import decode_bytes
    from kvcalc.settings import Settings

    spec = CONFIGS.imported(CONFIGS.config(E2B))
    s = Settings(ctx=4096, batch=2)
    # active weights less the two lookup tables (embed_tokens is tied: read as the LM head), plus one row of each
    # table per sequence: D of embed_tokens and L·P of embed_tokens_per_layer; less the 10 KV-shared layers' own K/V
    # projections and k_norm, which never run (2 · 2,048 · 512 + 256 each)
    read = param_counts(spec).active - V_PLE * L * P + 2 * (D + L * P) - 10 * (2 * 2048 * 512 + 256)
    assert decode_bytes(spec, s)["weights"] == 2 * read


@pytest.mark.parametrize("ctx", [100, 4096, 128 * 1024])
def test_a_decode_step_reads_the_shared_layers_caches_too(ctx):
    """Each of the 10 KV-shared layers holds nothing but reads the cache of layer 18 or 19 (the last earlier one of its
    type): a decode step reads 24 sliding layers' min(ctx, W) tokens and 6 full layers' ctx, 30 layers in all."""
    from kvcalc.costs.cache import kv_cache
    from kvcalc.costs.traffic import decode_bytes
    from kvcalc.settings import Settings

    spec = CONFIGS.imported(CONFIGS.config(E2B))
    s = Settings(ctx=ctx, batch=3)
    assert decode_bytes(spec, s)["kv_cache"] == 3 * (24 * min(ctx, W) + 6 * ctx) * PER_TOKEN_LAYER
    assert kv_cache(spec, s).bytes == 3 * held(ctx)  # 16 + 4 layers hold it


@pytest.mark.parametrize("change, message", [
    ({"num_kv_shared_layers": 30}, "num_kv_shared_layers: 30 leaves no layer of the 30"),
    ({"intermediate_size": [8192] * 29}, "intermediate_size: must be one number or one per layer (num_hidden_layers "
                                         "30), got 29 entries"),
    ({"layer_types": ["sliding_attention"] * 29 + ["full_attention"]}, "layer_types[29]: full_attention layer 29 is "
                                                                        "KV-shared"),
])
def test_bad_configs_are_refused_naming_the_key(change, message):
    cfg = CONFIGS.config(E2B)
    with pytest.raises(SpecError) as err:
        CONFIGS.imported({**cfg, "text_config": {**cfg["text_config"], **change}})
    assert message in str(err.value)


def test_per_layer_ffn_sizes_become_groups():
    cfg = CONFIGS.config(E2B)
    sizes = [8192] * 20 + [16_384] * 10  # a MatFormer-style mix
    s = CONFIGS.imported({**cfg, "text_config": {**cfg["text_config"], "intermediate_size": sizes}})
    wide = [g for g in s.layer_groups if g.ffn is not None and g.ffn.d_ff == 16_384]
    assert sum(len(sg.layers) for sg in s.groups if s.layer_groups[sg.index] in wide) == 10


def test_explain_sums_only_the_layers_that_hold_a_cache():
    out = run("show", str(PATH), "--ctx", "32k", "--explain").stdout
    assert "per token (every layer holding one more token): 16×1,024 + 4×1,024 = 20,480 elements" in out


def test_per_gpu_weights_hold_the_extra_weights():
    from kvcalc.costs.parallel import per_gpu
    from kvcalc.settings import Settings

    spec = CONFIGS.imported(CONFIGS.config(E2B))
    # one GPU holds every weight: the exact text-model count, bf16
    assert per_gpu(spec, Settings(ctx=1)).weights_bytes == 2 * exact_text_params()
    # two stages: the extra weights sit on the first (the busiest), with the embedding
    two = per_gpu(spec, Settings(ctx=1, pp=2))
    assert two.stage == 0 and two.weights_bytes > 2 * (V * D + sum(x.params for x in spec.extra_weights.values()))


@pytest.mark.slow
def test_run_measures_the_layers_that_hold_a_cache():
    # kvcalc run built the KV-shared layers 20-29 with K and V of their own (predicted 0 bytes, measured 32,768 at
    # ctx 8; the whole cache 1,228,800 against compare's 819,200): they are not run now, and the whole model's cache
    # at ctx 10 in float32 is the 20 layers that hold one, 20 × 10 × 2·2·256 × 4 bytes
    doc = json.loads(run("run", str(PATH), "--ctx", "8", "--decode", "2", "-q", "-f", "json").stdout)
    assert all(layer < 20 for layer in doc["layers"])
    total = next(r for r in doc["rows"] if r["quantity"].startswith("KV cache, all 30 layers, at ctx 10"))
    assert total["predicted"] == total["measured"] == 20 * 10 * 2 * KV * DH * 4 == 819_200
    assert doc["ok"] and all(r.get("match") is not False for r in doc["rows"]) and all(c["passed"] for c in doc["checks"])


@pytest.mark.slow
@pytest.mark.parametrize("ctx", [1, 16, 512, 513, 4 * K])
@pytest.mark.parametrize("engine", ["vllm", "sglang", "ideal"])
def test_engine_pages_count_none_for_the_shared_layers(ctx, engine):
    # found by an audit: vLLM's window rule, min(ceil(ctx / B), ceil(W / B) + 1), gave each KV-shared sliding layer a
    # page (262,144 bytes too many at every ctx). A shared layer holds nothing: 0 pages under every engine. By hand:
    # vLLM pages of B = 16 tokens, 16 × 2,048 = 32,768 bytes; a sliding layer holds min(ceil(ctx/16), 512/16 + 1)
    # pages, a full layer ceil(ctx/16); SGLang and ideal (B = 1) hold exactly the cache
    pages16 = ("--block-size", "16") if engine == "vllm" else ()  # vLLM's earlier default, as derived here
    row = json.loads(run("compare", str(PATH), "--ctx", str(ctx), "--engine", engine, *pages16, "-f", "json").stdout)[0]
    if engine == "vllm":
        full, sliding = -(-ctx // 16), min(-(-ctx // 16), W // 16 + 1)
        want = (OWN_SLIDING * sliding + OWN_FULL * full) * 16 * PER_TOKEN_LAYER
    elif engine == "sglang":  # Gemma 3n is not one of SGLang's hybrid-SWA models: every layer keeps every token, and
        # its one pool has a buffer for each of the 30 layers, the 10 shared ones included (an audit: layer_num =
        # num_hidden_layers; gemma3n_causal.py only skips writing to theirs)
        want = (OWN_SLIDING + OWN_FULL + 10) * ctx * PER_TOKEN_LAYER
    else:
        want = held(ctx)
    assert row["engine_kv_bytes"] == want
    if (engine, ctx) == ("vllm", 4 * K):
        assert want == 50_855_936  # (16 × 33 + 4 × 256) pages × 32,768 bytes
    explain = json.loads(run("show", str(PATH), "--ctx", str(ctx), "--engine", engine, *pages16, "--explain", "-f", "json").stdout)
    groups = {g["group"]: g for g in explain["derivation"]["groups"]}
    # --explain derives pages only for groups that have some: the shared ones are marked kv_shared and have none
    # (SGLang: a buffer each)
    shared_paged = ["local-shared", "global-shared"] if engine == "sglang" else []
    assert [name for name, g in groups.items() if "engine" in g] == ["local", "global", *shared_paged]
    assert groups["local-shared"]["kv_shared"] is groups["global-shared"]["kv_shared"] is True
    assert sum(g["engine"]["bytes"] for g in groups.values() if "engine" in g) == want


def test_sglang_pool_gives_shared_layers_a_buffer_per_gpu():
    # the GPU holds Gemma 3n's 2 KV heads (2 · 2 · 256 · 2 = 2,048 bytes a token and layer) in all 30 of its pool's
    # layer buffers: 1,000 tokens · 30 · 2,048 (20 own layers before the audit)
    row = json.loads(run("compare", str(PATH), "--ctx", "1000", "--engine", "sglang", "-f", "json").stdout)[0]
    assert row["kv_cache_bytes_per_gpu"] == 1000 * 30 * 2048 == 61_440_000
    # at tp 4 each GPU holds the 2 KV heads replicated as one (1,024 bytes a token and layer) in the 30 buffers
    row = json.loads(run("compare", str(PATH), "--ctx", "1000", "--tp", "4", "--engine", "sglang", "-f", "json").stdout)[0]
    assert row["kv_cache_bytes_per_gpu"] == 1000 * 30 * 1024 == 30_720_000


def _weights(tp: int, engine: str | None = None) -> int:
    args = ("--engine", engine) if engine else ()
    return json.loads(run("compare", str(PATH), "--ctx", "1k", "--tp", str(tp), *args, "-f", "json").stdout)[0][
        "weights_bytes_per_gpu"]


def test_engines_hold_the_per_layer_gates_and_altup_routers_whole():
    # an audit of vLLM 0.34.0 (gemma3n.py) and SGLang 0.5.23 (gemma3n_causal.py), without pipeline stages (neither
    # runs Gemma 3n with them): both replicate each layer's per_layer_input_gate and per_layer_projection (d × p each),
    # the per_layer_projection_norm (p) and AltUp's coefficients and router (a² + a³ + d·a a layer); SGLang keeps the
    # per-layer table (an nn.Embedding) whole too, and the token embedding (262,400 rows, unpadded, whole: the tied
    # head); vLLM builds no K or V projection, nor k_norm, in the 10 KV-shared layers. kvcalc without an engine
    # keeps the replicated weights whole too (as it keeps norms; a spec review: it split them by tp) and splits the rest.
    replicated = L * 2 * D * P + P + L * (ALTUP**2 + ALTUP**3 + D * ALTUP)
    table = V_PLE * L * P
    assert replicated == 31_705_696
    for tp in (1, 2, 4):
        kv_heads = -(-KV // tp)  # a rank's K/V heads, at least one
        kv_shared = 10 * (2 * D * kv_heads * DH + DH)  # W_K, W_V and k_norm of each KV-shared layer, on one rank
        assert _weights(tp, "vllm") - _weights(tp) == -BF16 * kv_shared, tp
    assert _weights(1, "vllm") - _weights(1) == -41_948_160
    # SGLang at tp 2: the table whole too, and the token embedding (kvcalc splits V / 2)
    assert _weights(2, "sglang") - _weights(2) == BF16 * (table - table // 2 + (V - V // 2) * D)


def test_a_decode_step_reads_no_kv_projection_of_a_kv_shared_layer():
    # a review: the 10 KV-shared layers' k_proj, v_proj and k_norm (2 · 2,048 · 512 + 256 values each) sit in the
    # checkpoint but never run (they read an earlier layer's cache), yet a decode step counted them as read: 41,948,160
    # bytes too many. The weights read: every active parameter (4,456,156,768), less the per-layer embedding table
    # (30 · 256 rows of 262,144: 2,013,265,920) but the rows a token reads (7,680 and the main embedding's 2,048),
    # less those projections
    from kvcalc.costs.traffic import decode_bytes
    from kvcalc.hf import spec_from_config
    from kvcalc.settings import Settings

    spec, _ = spec_from_config(json.loads((REFERENCE / "configs-gemma3n" / "gemma-3n-e2b.json").read_text()), "c", "m")
    weights = decode_bytes(spec, Settings(ctx=4096))["weights"]
    assert weights == 2 * (4_456_156_768 - 2_013_265_920 + 7_680 + 2_048 - 10 * (2 * 2048 * 512 + 256)) == 4_843_852_992


def test_the_extra_blocks_products_are_in_the_flops():
    # a review: the per-layer inputs', AltUp's and LAuReL's products (163,386,048 FLOPs a token for E2B, d 2,048, 30
    # layers, p 256, A 4, rank 64) were left out: per token, per_layer_model_projection 2·d·30·p and AltUp's
    # (A − 1) projections and unembeddings 2·2·3·d²; per layer, the per-layer gate and projection 2·2·d·p, AltUp's router
    # (run twice) 2·2·d·A, its predictions 2·d·A², prediction and correction coefficients 2·A³ + 2·A², LAuReL 2·2·d·64
    from kvcalc.costs.flops import decode_flops
    from kvcalc.hf import spec_from_config
    from kvcalc.settings import Settings

    spec, _ = spec_from_config(json.loads((REFERENCE / "configs-gemma3n" / "gemma-3n-e2b.json").read_text()), "c", "m")
    d, layers, p, a, r = 2048, 30, 256, 4, 64
    per_token = {"extra/per_layer_embeddings": 2 * d * layers * p + layers * 4 * d * p,
                 "extra/altup": 4 * 3 * d * d + layers * (4 * d * a + 2 * d * a * a + 2 * a**3 + 2 * a * a),
                 "extra/laurel": layers * 4 * d * r}
    assert sum(per_token.values()) == 163_386_048
    step = decode_flops(spec, Settings(ctx=4096, batch=3))
    assert {k: v for k, v in step.items() if k.startswith("extra/")} == {k: 3 * v for k, v in per_token.items()}
    from kvcalc.costs.flops import prefill_flops  # a prefill runs every one of its tokens through them

    prefill = prefill_flops(spec, Settings(ctx=1024))
    assert {k: v for k, v in prefill.items() if k.startswith("extra/")} == {k: 1024 * v for k, v in per_token.items()}


def test_engines_keep_the_per_layer_embedding_table_unquantized():
    # a review: under --weights-dtype fp8 the per-layer embedding table (a VocabParallelEmbedding in vLLM's gemma3n.py,
    # an embedding in SGLang's: never quantized) was priced a byte a value. E2B under vLLM at tp 1: its 4,435,182,688
    # parameters (the KV-shared layers' K/V projections left out) a byte each, and 2 bytes for the main embedding
    # (262,400 × 2,048) and the per-layer table (2,013,265,920)
    out = json.loads(run("fit", str(REFERENCE / "configs-gemma3n" / "gemma-3n-e2b.json"), "--engine", "vllm",
                         "--weights-dtype", "fp8", "--hardware", "rtx-4090", "--ctx", "32k", "-f", "json").stdout)[0]
    assert out["weights_bytes_per_gpu"] == 4_435_182_688 + 262_400 * 2048 + 2_013_265_920 == 6_985_843_808
