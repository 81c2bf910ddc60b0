"""#7: quantised caches with their scales, and the whole pages a serving engine allocates. Every figure is written
out by hand from the model's numbers and the rule it follows (kvcalc/costs/quant.py and paged.py give the sources)."""

from __future__ import annotations

import json
import math

import pytest

from conftest import REFERENCE, ROOT, run, spec
from kvcalc.costs.cache import kv_cache
from kvcalc.costs.paged import pages
from kvcalc.costs.parallel import per_gpu
from kvcalc.errors import KvcalcError
from kvcalc.registry import bundled_names
from kvcalc.settings import Settings

K = 1024
LLAMA3_8B = 32 * 2 * 8 * 128  # layers · (K + V) · n_kv · d_h: elements a token adds


def row(*args: str) -> dict:
    return json.loads(run("compare", *args, "-f", "json").stdout)[0]


# ---------------------------------------------------------------- quantised caches


def test_int4_g64_counts_kivi_scales_and_zero_points():
    # llama3-8b, 1000 tokens, int4 in groups of 64, fp16 scale + fp16 zero (4 bytes) a group:
    # K per channel: 1024 channels × ceil(1000 / 64) = 16 groups; V per token: 1000 × 1024 / 64 = 16 groups
    payload = 1000 * 1024 // 2  # half a byte a value, per tensor and layer
    per_layer = (payload + 1024 * 16 * 4) + (payload + 1000 * 16 * 4)
    r = row("llama3-8b", "--ctx", "1000", "--kv-dtype", "int4", "--kv-quant", "g64")
    assert r["kv_quant"] == "g64"
    assert r["kv_cache_bytes"] == 32 * per_layer == 36_913_152
    # per token: a whole group of 64 tokens, rounded up: (64·2048/2 + 1024·4 + 64·16·4) / 64 = 1024 + 64 + 64 per layer
    assert r["kv_bytes_per_token"] == 32 * (1024 + 64 + 64)


def test_per_token_and_per_head_scales():
    ctx = 4096
    plain = row("llama3-8b", "--ctx", "4k", "--kv-dtype", "int8")["kv_cache_bytes"]
    assert plain == LLAMA3_8B * ctx  # one byte a value, no scales (one per tensor is not counted)
    per_token = row("llama3-8b", "--ctx", "4k", "--kv-dtype", "int8", "--kv-quant", "per-token")
    assert per_token["kv_cache_bytes"] == plain + 32 * 2 * ctx * 4  # an fp32 scale for K and for V of each token
    per_head = row("llama3-8b", "--ctx", "4k", "--kv-dtype", "int8", "--kv-quant", "per-head")
    assert per_head["kv_cache_bytes"] == plain + 32 * 2 * 8 * ctx * 4  # one for each of the 8 KV heads
    assert per_head["kv_bytes_per_token"] == 32 * (2048 + 2 * 8 * 4)


def test_mla_latent_scales_are_one_per_vector():
    # deepseek-v2 latent cache (512 + 64), int8 per-head: one scale each for c_KV and k_R (a single vector, no heads)
    r = row("deepseek-v2", "--ctx", "4k", "--kv-dtype", "int8", "--kv-quant", "per-head")
    assert r["kv_cache_bytes"] == 60 * 4096 * (576 + 2 * 4)


def test_fp8_ds_mla_is_656_bytes_for_deepseek_v32():
    # vLLM flashmla_sparse.py: "custom storage format is 656 bytes": 512 fp8 + 4 fp32 scales + 64 bf16;
    # the indexer key: 128 fp8 + one fp32 scale
    r = row("deepseek-v3.2", "--ctx", "1000", "--kv-dtype", "fp8", "--kv-quant", "fp8-ds-mla")
    assert r["kv_bytes_per_token"] == 61 * (656 + 132)
    assert r["kv_cache_bytes"] == 61 * 1000 * 788


@pytest.mark.slow
def test_no_scheme_keeps_every_figure():
    # the scheme 'none' is the payload only: bytes = elements at kv_dtype, for every bundled model
    for name in bundled_names():
        for dtype in ("bf16", "int4"):
            r = kv_cache(spec(name), Settings(ctx=3000, kv_dtype=dtype))
            bits = 16 if dtype == "bf16" else 4
            assert r.bytes == -(-r.elements * bits // 8), name


@pytest.mark.parametrize("args, message", [
    (["--kv-quant", "g64"], "--kv-quant g64 stores scales beside quantised values: it needs --kv-dtype fp8, int8, int4"),
    # a review: g0 was an 'unknown' scheme, and fp8-ds-mla on a model without MLA spoke of 'k' tensors
    (["--kv-quant", "g0", "--kv-dtype", "int4"], "--kv-quant g0: a group of G values is written g<G> with G a whole number from 1"),
    (["--kv-quant", "fp8-ds-mla", "--kv-dtype", "int8"], "fp8-ds-mla is an fp8 layout: it needs --kv-dtype fp8"),
    (["--kv-quant", "fp8-ds-mla", "--kv-dtype", "fp8"], "--kv-quant fp8-ds-mla: llama3-8b has no MLA layer"),
    (["--block-size", "16"], "--block-size is the page size of a serving engine: give --engine too"),
])
def test_bad_serving_options_get_one_message(args, message):
    res = run("compare", "llama3-8b", "--ctx", "4k", *args, ok=False)
    assert res.exit_code != 0 and message in res.stderr and "Traceback" not in res.stderr


# ---------------------------------------------------------------- paged caches


def test_pages_cover_the_held_positions():
    assert pages(1000, 1000, 16) == 63  # ceil(1000 / 16)
    assert pages(1024, 1024, 16) == 64
    assert pages(100_000, 1024, 16) == 64  # window ending on a page boundary: 98,976 … 99,999
    assert pages(100_001, 1024, 16) == 65  # one position into the next page: one page more
    assert pages(10, 0, 16) == 0


def test_vllm_rounds_llama_up_to_whole_pages():
    # vLLM 0.34.0's default block of 64 (CacheConfig.DEFAULT_BLOCK_SIZE; FlashAttention keeps any multiple of 16):
    # 1000 tokens in 16 pages = 1024 tokens a layer; its earlier default, 16: 63 pages = 1008
    r = row("llama3-8b", "--ctx", "1000", "--engine", "vllm")
    assert (r["engine"], r["block_size"]) == ("vllm", 64)
    assert r["kv_cache_bytes"] == LLAMA3_8B * 2 * 1000
    assert r["engine_kv_bytes"] == LLAMA3_8B * 2 * 1024
    assert row("llama3-8b", "--ctx", "1000", "--engine", "vllm", "--block-size", "16")["engine_kv_bytes"] == LLAMA3_8B * 2 * 1008
    assert row("llama3-8b", "--ctx", "1000", "--engine", "vllm", "--block-size", "256")["engine_kv_bytes"] == LLAMA3_8B * 2 * 1024


def test_gemma3_sliding_layers_hold_the_window_pages_plus_one():
    # gemma3-27b: 10 global layers, 52 with W = 1024; per token and layer 2 · 16 · 128 · 2 bytes. vLLM reserves a
    # window's ceil(1024 / 16) = 64 pages plus one (SlidingWindowSpec.max_memory_usage_bytes: the window may not start
    # on a page boundary): 1040 tokens; the ideal engine holds the 1024 exactly
    # on a boundary, 65 pages; vLLM's groups of 10 layers give the 52 windowed layers 6 groups, 60 slots (test below)
    entry = 2 * 16 * 128 * 2
    for ctx in (100_000, 100_001):
        r = kv_cache(spec("gemma3-27b"), Settings(ctx=ctx, engine="vllm", block_size=16))
        global_pages = -(-ctx // 16)
        assert r.engine_bytes == entry * 16 * (10 * global_pages + 60 * 65)
        assert [(g.tokens_held, g.pages) for g in r.groups] == [(ctx, global_pages), (1024, 65)]
        assert kv_cache(spec("gemma3-27b"), Settings(ctx=ctx, engine="ideal")).engine_bytes == entry * (10 * ctx + 52 * 1024)
    # below the window a sliding layer is a full one: 1000 tokens in 63 pages
    assert [g.pages for g in kv_cache(spec("gemma3-27b"), Settings(ctx=1000, engine="vllm", block_size=16)).groups] == [63, 63]
    # the window touches 64 pages when it starts on a boundary, 65 when it does not (the ideal engine, pages of 16)
    assert [g.pages for g in kv_cache(spec("gemma3-27b"), Settings(ctx=100_000, engine="ideal", block_size=16)).groups] == [6250, 64]
    assert [g.pages for g in kv_cache(spec("gemma3-27b"), Settings(ctx=100_001, engine="ideal", block_size=16)).groups] == [6251, 65]


def test_sglang_frees_window_tokens_only_in_its_hybrid_swa_models():
    # an audit: SGLang builds its hybrid-SWA pool only for Llama4, GptOss, MiMoV2Flash, Step3p5 and Gemma4
    # (srt/configs/model_config.py is_hybrid_swa_model); Gemma 3's and Mistral's windowed layers keep every token in
    # its one pool, the window applied by the kernel. gemma3-27b at 100,000, batch 3: 62 layers × 100,000 × 8,192 B
    r = row("gemma3-27b", "--ctx", "100000", "--batch", "3", "--engine", "sglang")
    assert (r["engine_kv_bytes"], r["kv_cache_bytes"]) == (62 * 100_000 * 8192 * 3, 25_884_622_848)
    assert [g.pages for g in kv_cache(spec("gemma3-27b"), Settings(ctx=100_000, engine="sglang", block_size=16)).groups] == [6250, 6250]
    assert row("mistral-7b", "--ctx", "32k", "--batch", "4", "--engine", "sglang")["engine_kv_bytes"] == 32 * 4096 * 32768 * 4
    # gpt-oss (hybrid SWA there): its 12 window layers (W = 128) touch 8 pages of 16, or 9 off a boundary
    for ctx, window_pages in ((100_000, 8), (100_001, 9)):
        groups = kv_cache(spec("gpt-oss-20b"), Settings(ctx=ctx, engine="sglang", block_size=16)).groups
        assert sorted(g.pages for g in groups) == [window_pages, -(-ctx // 16)]
    # fit follows: gemma3-27b at batch 8 on one H100 (80 GiB at SGLang's static fraction 0.83, less the weights):
    # 4,252 tokens, not 29,810 as with every window freed ((⌊85,899,345,920 · 0.83⌋ − 54,018,692,608) // (62 · 8,192 · 8))
    out = json.loads(run("fit", "gemma3-27b", "--hardware", "h100-80gb", "--batch", "8", "--engine", "sglang", "-f", "json").stdout)
    assert out[0]["max_ctx"] == 4252 == (85_899_345_920 * 83 // 100 - 54_018_692_608) // (62 * 8192 * 8)


def test_vllm_deepseek_v32_fp8_is_fp8_ds_mla_in_pages_of_64():
    # vLLM forces 64-token pages for FlashMLASparse and stores an fp8 V3.2 cache as fp8_ds_mla (656 B) beside its
    # fp8 indexer cache (132 B): 1000 tokens take 16 pages = 1024 tokens
    r = row("deepseek-v3.2", "--ctx", "1000", "--kv-dtype", "fp8", "--engine", "vllm")
    assert r["block_size"] == 64
    assert r["kv_cache_bytes"] == 61 * 1000 * (512 + 64 + 128)  # the plain fp8 count: one byte a value
    assert r["engine_kv_bytes"] == 61 * 1024 * (656 + 132)
    # in bf16 vLLM keeps the indexer in fp8 still: (512 + 64) · 2 + 132
    assert row("deepseek-v3.2", "--ctx", "1000", "--engine", "vllm")["engine_kv_bytes"] == 61 * 1024 * (576 * 2 + 132)


@pytest.mark.slow
def test_ideal_and_sglang_pages_are_the_exact_cache():
    # SGLang's one-token pages: the exact cache, of every token outside its hybrid-SWA models (windows kept whole)
    from kvcalc.costs.cache import without_windows
    from kvcalc.costs.paged import keeps_every_token

    for name in bundled_names():
        for ctx in (1, 1000, 40_000):
            exact = kv_cache(spec(name), Settings(ctx=ctx))
            assert kv_cache(spec(name), Settings(ctx=ctx, engine="ideal")).engine_bytes == exact.bytes, name
            if any(getattr(g.attention, "indexed", False) for g in spec(name).groups):
                continue  # DeepSeek NSA: SGLang's own pages and indexer layout (the next test)
            whole = kv_cache(without_windows(spec(name)), Settings(ctx=ctx)).bytes
            expected = whole if keeps_every_token(spec(name).family, "sglang") else exact.bytes
            if spec(name).encoder is not None:  # Whisper: 96 layer buffers of its 32 decoder layers' (test_encdec)
                expected = expected * (spec(name).encoder.n_layers + 2 * spec(name).n_layers) // spec(name).n_layers
            assert kv_cache(spec(name), Settings(ctx=ctx, engine="sglang")).engine_bytes == expected, name


def test_sglang_keeps_deepseek_v32_in_pages_of_64_with_an_fp8_indexer():
    # an audit: SGLang sets page_size 64 for DeepSeek NSA (server_args.py) and keeps the indexer key as fp8 with an
    # fp32 scale, 128 + 4 bytes a token (NSATokenToKVPool); kvcalc used one-token pages and a bf16 key. 100,000
    # tokens take 1,563 pages = 100,032 token slots; a token: 576 · 2 (the bf16 latent) + 132, in 61 layers, 3 sequences
    r = row("deepseek-v3.2", "--ctx", "100000", "--batch", "3", "--engine", "sglang")
    assert (r["block_size"], r["engine_kv_bytes"]) == (64, (576 * 2 + 132) * 61 * 100_032 * 3) == (64, 23_504_719_104)


def test_sglang_stores_deepseek_v32_fp8_in_flashmlas_scaled_entry():
    # an audit: SGLang's calculate_mla_kv_cache_dim gives a DSA model's fp8 cache kv_lora_rank + kv_lora_rank / 128 · 4
    # + qk_rope_head_dim · 2 = 512 + 16 + 128 = 656 bytes a token with the backend it picks for fp8 on Hopper
    # (flashmla_kv; overrides.py), as vLLM's fp8_ds_mla; kvcalc kept the raw 576. 100,001 tokens take
    # 1,563 pages of 64; a token 656 + 132 (the indexer key) bytes, in 61 layers
    for engine in ("sglang", "vllm"):
        r = row("deepseek-v3.2", "--ctx", "100001", "--kv-dtype", "fp8", "--engine", engine)
        assert r["engine_kv_bytes"] == 1563 * 64 * (656 + 132) * 61 == 4_808_338_176, engine
    # bf16 stays the raw latent: 576 · 2 + 132
    r = row("deepseek-v3.2", "--ctx", "100001", "--engine", "sglang")
    assert r["engine_kv_bytes"] == 1563 * 64 * (576 * 2 + 132) * 61


@pytest.mark.slow
def test_group_scheme_keys_group_along_the_pages_tokens():
    # KIVI g<G> groups keys per channel along G tokens (Liu et al., 2024): a key group runs along the tokens the pages
    # span, ceil(pages · B / G) of them a channel, not one a page. Until 2026-12-01 every page had its own: with
    # ideal's and SGLang's one-token pages a group a token (llama3-70b int4 g64 at 1000 tokens: 414,720,000 B,
    # more than the plain bf16 cache's 327,680,000, against the exact 92,282,880; vLLM 108,380,160).
    # vLLM, pages of 16: 1000 tokens take 63 pages = 1008 token slots; K: 1024 channels × ceil(1008 / 64) = 16 groups,
    # V: 1008 tokens × 1024 / 64 = 16 groups a token; 4 bytes (fp16 scale + zero) a group, half a byte a value
    payload = 1008 * 1024 // 2
    per_layer = (payload + 1024 * 16 * 4) + (payload + 1008 * 16 * 4)
    r = row("llama3-70b", "--ctx", "1000", "--kv-dtype", "int4", "--kv-quant", "g64", "--engine", "vllm", "--block-size", "16")
    assert r["engine_kv_bytes"] == r["kv_cache_bytes_per_gpu"] == 80 * per_layer == 92_979_200
    # one-token pages hold the exact cache, cross-attention (Whisper: ideal's) and constant states included
    for name in ("llama3-70b", "gemma3-27b", "deepseek-v2", "whisper-large-v3", "qwen3-next-80b-a3b"):
        for scheme in ("g64", "g32"):
            s = Settings(ctx=1000, batch=3, kv_dtype="int4", kv_quant=scheme)
            exact = kv_cache(spec(name), s).bytes
            for engine in ("ideal", "sglang") if name != "whisper-large-v3" else ("ideal",):  # SGLang: 3x (test_encdec)
                paged = Settings(ctx=1000, batch=3, kv_dtype="int4", kv_quant=scheme, engine=engine)
                assert kv_cache(spec(name), paged).engine_bytes == exact, (name, scheme, engine)
                assert per_gpu(spec(name), paged).kv_cache_bytes == exact, (name, scheme, engine)


@pytest.mark.slow
def test_pages_exceed_the_cache_by_less_than_a_page_a_layer():
    for name in bundled_names():
        s = Settings(ctx=12_345, batch=3, engine="vllm")
        r = kv_cache(spec(name), s)
        for g in r.groups:
            if getattr(g.group.attention, "indexed", False):
                continue  # vLLM's indexer cache is fp8 whatever the KV dtype: smaller than the bf16 count
            waste = (g.engine_bytes_per_layer or 0) - g.bytes_per_layer
            page = g.bytes_per_token_per_layer * g.block_size * s.batch
            # at most the last page's gap, plus one page when a window's first position is not on a page boundary
            # (and the cross-attention's last page)
            limit = 1 if g.tokens_held == s.ctx and g.cross_formula is None else 2
            assert 0 <= waste < limit * page or g.bytes_per_layer == 0, name


def test_per_gpu_and_fit_count_pages_with_an_engine():
    s = Settings(ctx=1000, engine="vllm", block_size=16, tp=8)
    # llama3-8b over 8 GPUs: one KV head each, 63 pages of 16
    assert per_gpu(spec("llama3-8b"), s).kv_cache_bytes == 32 * 2 * 128 * 2 * 1008
    exact = json.loads(run("fit", "llama3.1-8b", "--hardware", "h100-80gb", "--batch", "8", "-f", "json").stdout)[0]
    paged = json.loads(run("fit", "llama3.1-8b", "--hardware", "h100-80gb", "--batch", "8", "--engine", "vllm",
                           "--block-size", "1024", "--reserve", "0.1", "-f", "json").stdout)[0]
    assert exact["max_ctx"] < 128 * K  # memory binds, not the trained maximum
    assert paged["max_ctx"] % 1024 == 0 and exact["max_ctx"] - 1024 < paged["max_ctx"] <= exact["max_ctx"]


def test_paged_figures_need_an_engine():
    r = row("llama3-8b", "--ctx", "1000")
    assert (r.get("engine"), r.get("block_size"), r.get("engine_kv_bytes"), r["kv_quant"]) == (None, None, None, "none")
    with pytest.raises(KvcalcError):
        Settings(ctx=10, engine="tgi")


def test_fit_prefill_chunk_defaults_to_vllm_serve():
    from kvcalc.fit import activation_bytes

    def acts(*args: str) -> int:
        out = run("fit", "llama3.1-8b", "--batch", "4", "-f", "json", *args).stdout
        return json.loads(out)[0]["activation_bytes"]

    s = Settings(ctx=1)
    # vllm serve's max_num_batched_tokens: 8192 on an H100 (80 GiB, not an A100), 2048 on an A100 80GB
    assert acts("--hardware", "h100-80gb", "--engine", "vllm") == activation_bytes(spec("llama3.1-8b"), s, 8192)
    assert acts("--hardware", "a100-80gb", "--engine", "vllm") == activation_bytes(spec("llama3.1-8b"), s, 2048)
    assert acts("--hardware", "h100-80gb") == activation_bytes(spec("llama3.1-8b"), s, 2048)
    assert acts("--hardware", "h100-80gb", "--prefill-chunk", "512") == activation_bytes(spec("llama3.1-8b"), s, 512)


def test_vllm_hybrid_pages_unify_attention_and_state():
    # vLLM _align_hybrid_block_size: attention block a = k · ceil(S / (k · A)), every state padded to one page of
    # a · A bytes, k = lcm(max(16, 16), 64) under --block-size 16 (the Gated DeltaNet's checkpoint grid on Hopper).
    # Qwen3-Next: Gated DeltaNet state of one layer S (bf16) against A = 2 · 2 KV heads · 256 · 2 bytes = 2048 a token.
    qwen = spec("qwen3-next-80b-a3b")
    r = kv_cache(qwen, Settings(ctx=1000, engine="vllm", block_size=16))
    state = r.groups[0].state_elements_per_layer * 2
    a = 64 * -(-state // (64 * 2048))
    # users post vLLM's start-up log for Qwen3-Next at tp 1 and block size 16 with k = 16 (a Triton Gated DeltaNet
    # prefill, or a vLLM before the checkpoint grid): "Setting attention block size to 544 tokens ...", "Padding mamba
    # page size by 1.49% ..."; on Hopper's FlashInfer prefill vLLM 0.34.0 pads by 7.46% to 576
    assert 16 * -(-state // (16 * 2048)) == 544 and a == 576
    assert round(100 * (a * 2048 - state) / state, 2) == 7.46
    assert r.engine_bytes == 12 * 2 * a * 2048  # 12 attention layers, 1000 tokens in 2 pages of 576
    # 36 linear layers, two padded pages each (vLLM 0.34.0's prefix caching for hybrids: mamba_cache_mode "align",
    # "only 2 + num_speculative_blocks state blocks are resident")
    assert r.engine_state_bytes == 36 * 2 * a * 2048
    # Nemotron-H 56B: a Mamba-2 state of 256·64·256 SSM elements in fp32 (vLLM's NemotronH default) and 3·20,480
    # conv elements in bf16, against A = 2 · 8 · 128 · 2 = 4096 bytes
    nem = kv_cache(spec("nemotron-h-56b"), Settings(ctx=1000, engine="vllm", block_size=16))
    state = 256 * 64 * 256 * 4 + 3 * 20_480 * 2
    a = 16 * -(-state // (16 * 4096))
    assert a == 4128  # 1000 tokens in one page of each attention layer
    # 54 Mamba-2 layers in vLLM's groups of 10 (the 10 attention layers): 6 groups, 60 state slots of 2 pages
    assert (nem.engine_bytes, nem.engine_state_bytes) == (10 * a * 4096, 60 * 2 * a * 4096) == (169_082_880, 2_028_994_560)
    # SGLang and ideal keep states exact, in pages of their own; SGLang's extra buffer gives each Qwen3-Next
    # sequence 3 slots (kvcalc.costs.paged.state_slots)
    for engine, slots in (("sglang", 3), ("ideal", 1)):
        exact = kv_cache(qwen, Settings(ctx=1000, engine=engine))
        assert (exact.engine_bytes, exact.engine_state_bytes) == (exact.bytes, slots * exact.state_bytes)


def test_vllm_gated_deltanet_hybrid_block_is_on_the_checkpoint_grid():
    # a review: in mamba_cache_mode "align" (vLLM 0.34.0's default for hybrids) _align_hybrid_block_size takes k =
    # lcm(max(16, block size), the layers' prefill checkpoint alignment): 64 for a Qwen Gated DeltaNet layer on the
    # FlashInfer prefill vLLM picks on Hopper (FLASHINFER_GDN_CHECKPOINT_ALIGNMENT), none for Mamba-2. Qwen3-Next:
    # one layer's state 32 · 128 · 128 + 3 · 8,192 = 548,864 bf16 elements = 1,097,728 bytes; A = 2 · 2 · 256 · 2 =
    # 2,048 bytes a token; a block of k · ceil(S / (k · A)) tokens (544 under 16 before: k = 16)
    qwen = spec("qwen3-next-80b-a3b")
    state, a = 548_864 * 2, 2048

    def block(asked: int) -> int:
        k = math.lcm(max(16, asked), 64)
        return max(k * -(-state // (k * a)), asked)

    assert [block(b) for b in (16, 32, 48, 64, 80, 128)] == [576, 576, 576, 576, 640, 640]
    for asked in (16, 32, 48, 80):
        r = kv_cache(qwen, Settings(ctx=8192, engine="vllm", block_size=asked))
        pages = -(-8192 // block(asked))
        assert (r.engine_bytes, r.engine_state_bytes) == (12 * pages * block(asked) * a, 36 * 2 * block(asked) * a)
    assert kv_cache(qwen, Settings(ctx=8192, engine="vllm", block_size=16)).engine_bytes == 212_336_640  # not 544's
    # Mamba-2 declares no checkpoint grid: Nemotron-H's block stays 16 · ceil(S / (16 · A)) = 4,128 under 16
    nem = kv_cache(spec("nemotron-h-56b"), Settings(ctx=1000, engine="vllm", block_size=16))
    assert nem.block_size == 4128


def test_vllm_hybrid_block_under_a_group_scheme_holds_the_state_at_the_page_rate():
    # an audit: under --kv-quant g64 the hybrid block was sized by one token's page, which pays a whole key group's
    # scales (512 + 512 channels · 4 + 32 = 2,592 bytes), so the block came out 448 tokens and every attention page,
    # 448 · 576 bytes, was padded to 448 · 2,592: int4 cost more than bf16. Qwen3-Next, int4 g64, one attention layer
    # and token at a multiple of 64 tokens: payload 2 · 512 / 2 = 512, V scales 512 / 64 · 4 = 32, K scales 512 · 4
    # a channel group of 64 tokens = 32 a token: 576 bytes. Its Gated DeltaNet state in bf16 (vLLM): 32 · 128 · 128 ·
    # 2 + 3 · 8,192 · 2 = 1,097,728 bytes, so the block is the first multiple of 64 with 576 · a >= that: 1,920
    qwen = spec("qwen3-next-80b-a3b")
    state = 32 * 128 * 128 * 2 + 3 * 8192 * 2
    assert state == 1_097_728 and 576 * 1856 < state <= 576 * 1920
    r = kv_cache(qwen, Settings(ctx=4096, engine="vllm", kv_dtype="int4", kv_quant="g64"))
    assert {g.block_size for g in r.groups} == {1920}  # the attention block, and the states' pages beside it
    assert r.engine_bytes == 12 * 3 * 1920 * 576 == 39_813_120  # 4,096 tokens in 3 pages of each of 12 layers
    assert r.engine_state_bytes == 36 * 2 * 1920 * 576  # each state page padded to the attention page
    bf16 = kv_cache(qwen, Settings(ctx=4096, engine="vllm"))
    assert r.engine_bytes < bf16.engine_bytes
    # vLLM's own layouts are linear in the tokens: the block is k · ceil(S / (k · A)) as before (A = 2,048 in bf16)
    assert {g.block_size for g in bf16.groups} == {64 * -(-state // (64 * 2048))} == {576}


@pytest.mark.slow
def test_vllm_groups_pad_every_spec_to_whole_groups(tmp_path):
    # vLLM groups a model whose layers' specs differ (kv_cache_planning._get_kv_cache_groups_uniform_page_size): groups of
    # the fewest layers a spec has (or of the most, when under 1.5 x the fewest), each spec padded to whole groups, and
    # every block of the pool costs a page in each of the group size's tensors (get_kv_cache_config_from_groups).
    # Gemma 3: 10 global + 52 windowed (27b: 60 slots), 5 + 29 (4b: 30), 4 + 22 (1b: 24), 8 + 40 (12b: 40, none)
    def cache(name, **kw):
        return kv_cache(spec(name), Settings(ctx=100_001, engine="vllm", block_size=16, **kw))

    for name, n_kv, d_h, w, full, local, slots in [("gemma3-27b", 16, 128, 1024, 10, 52, 60), ("gemma3-4b", 4, 256, 1024, 5, 29, 30),
                                                    ("gemma3-1b", 1, 256, 512, 4, 22, 24), ("gemma3-12b", 8, 256, 1024, 8, 40, 40)]:
        page = 16 * 2 * n_kv * d_h * 2
        r = cache(name)
        window_pages = -(-w // 16) + 1
        assert r.engine_bytes == page * (full * -(-100_001 // 16) + slots * window_pages), name
        assert [g.pad_layers for g in r.groups] == [0, slots - local], name
        assert r.bytes == 2 * n_kv * d_h * 2 * (full * 100_001 + local * w)  # the exact cache is unchanged
    # a mutation review: the 1.5 rule between the fewest and the most was untested in (1.5, 2): 10 global and 16 local
    # layers (Gemma 3 1B's shapes) group by 10, not 16 (2 · 16 ≥ 3 · 10): 1 group of global layers, 2 of local, 4 slots
    # of padding
    path = tmp_path / "g.yaml"
    text = (ROOT / "model_specs" / "gemma3-1b.yaml").read_text().replace("layers: {every: 6, start: 5}", "layers: 0-9")
    path.write_text(text)
    from kvcalc.registry import load_model

    r = kv_cache(load_model(str(path)).spec, Settings(ctx=100_001, engine="vllm", block_size=16))
    page = 16 * 2 * 1 * 256 * 2
    assert [g.pad_layers for g in r.groups] == [0, 4]
    assert r.engine_bytes == page * (10 * -(-100_001 // 16) + 20 * (-(-512 // 16) + 1))
    # Gemma 4 26B A4B: a full layer's token is 2·2·512·2 = 4,096 bytes, a windowed one's 2·8·256·2 = 8,192; vLLM
    # unifies the pages (unify_kv_cache_spec_page_size) by giving the full layers pages of 32 tokens: 5 + 25, no padding
    r = cache("gemma4-26b-a4b")
    assert [(g.group.label, g.block_size, g.pad_layers) for g in r.groups] == [("global", 32, 0), ("local", 16, 0)]
    assert r.engine_bytes == 5 * -(-100_001 // 32) * 32 * 4096 + 25 * (1024 // 16 + 1) * 16 * 8192
    assert r.engine_bytes - kv_cache(spec("gemma4-26b-a4b"), Settings(ctx=100_001, engine="ideal", block_size=16)).engine_bytes \
        == 5 * (3126 * 32 - 6251 * 16) * 4096 + 25 * (65 - 65) * 16 * 8192 == 327_680
    # Qwen3-Next with its MTP layer (like its last, a full one; the drafter's layers join the pool, as the gpt-oss +
    # EAGLE example of the same function says): 12 + 1 full layers against 36 Gated DeltaNet: groups of 13, 39 slots
    with_mtp = spec("qwen3-next-80b-a3b")
    assert with_mtp.mtp_layers == 1
    q = kv_cache(with_mtp, Settings(ctx=1000, engine="vllm", block_size=16, mtp=True))
    plain = kv_cache(with_mtp, Settings(ctx=1000, engine="vllm", block_size=16))
    # and each state layer holds a page more for the speculated token (MambaSpec.num_speculative_blocks: vLLM's
    # MambaManager allocates 1 + num_speculative_tokens blocks a request)
    assert q.engine_state_bytes == plain.engine_state_bytes // 36 // 2 * 39 * 3 == 39 * 3 * 576 * 2048  # 576: k = 64
    assert q.engine_bytes == plain.engine_bytes // 12 * 13
    # one spec, or one type of attention at one block size, is one group: nothing changes
    for name in ("llama3-70b", "mistral-7b", "deepseek-v3.2", "gpt-oss-120b", "llama4-scout", "whisper-large-v3"):
        r = cache(name) if name != "deepseek-v3.2" else \
            kv_cache(spec(name), Settings(ctx=100_001, engine="vllm", block_size=64))  # its sparse backends: 64 a page
        assert all(g.pad_layers == 0 and g.pad_state_layers == 0 for g in r.groups), name


def test_sglang_keeps_recurrent_states_in_fp32():
    # SGLang's mamba2_state_dtype (srt/configs/mamba_utils.py): the recurrent (SSM) state of the layers it pools
    # through Mamba2CacheParams / KimiLinearCacheParams is float32 unless SGLANG_MAMBA_SSM_DTYPE or the config's
    # mamba_ssm_dtype says otherwise; the conv state bf16 (SGLANG_MAMBA_CONV_DTYPE), whatever the KV dtype.
    # Qwen3-Next's Gated DeltaNet layer: 32 value heads · 128 · 128 = 524,288 recurrent elements and 3 · (2·16·128 +
    # 32·128) = 24,576 conv elements; 36 such layers
    per_layer = 524_288 * 4 + 24_576 * 2
    for kv_dtype in ("bf16", "fp8"):
        r = kv_cache(spec("qwen3-next-80b-a3b"), Settings(ctx=1000, batch=3, engine="sglang", kv_dtype=kv_dtype))
        assert r.state_bytes == 3 * 36 * per_layer == 231_800_832
        assert r.engine_state_bytes == 3 * r.state_bytes  # each sequence in 3 slots (its extra buffer's)
        assert r.state_dtype == "fp32+bf16"
    # without an engine, or with --state-dtype, the default and the flag hold as before
    assert kv_cache(spec("qwen3-next-80b-a3b"), Settings(ctx=1000)).state_bytes == 36 * 548_864 * 2
    assert kv_cache(spec("qwen3-next-80b-a3b"), Settings(ctx=1000, engine="sglang", state_dtype="bf16")).state_bytes \
        == 36 * 548_864 * 2
    # Nemotron-H fixes fp32 itself (its spec's recurrent_dtype); lightning attention (MiniMax-M1) is not in the
    # Mamba pool's fp32 rule: its state at bf16
    nem = kv_cache(spec("nemotron-h-56b"), Settings(ctx=1000, engine="sglang"))
    assert nem.state_bytes == 54 * (256 * 64 * 256 * 4 + 3 * 20_480 * 2)
    assert kv_cache(spec("minimax-m1"), Settings(ctx=1000, engine="sglang")).state_bytes \
        == kv_cache(spec("minimax-m1"), Settings(ctx=1000)).state_bytes


def test_sglang_pages_deepseek_v32_in_64_whatever_block_size_asks():
    # a review: SGLang 0.5.23 on CUDA sets page_size to 64 · index_kpool (1: V3.2's config has none) for a DSA model
    # over any --page-size (arg_groups/model_overrides/deepseek_v2.py, "Setting page size to 64 for DeepSeek DSA");
    # kvcalc took --block-size 16: 13 pages of 16 = 208 slots at ctx 200, not 4 pages of 64 = 256
    for block in (None, "16", "64", "128"):
        r = row("deepseek-v3.2", "--ctx", "200", "--engine", "sglang", *(("--block-size", block) if block else ()))
        assert (r["block_size"], r["engine_kv_bytes"]) == (64, 61 * 256 * (576 * 2 + 132)) == (64, 20_050_944), block
    warned = run("cost", "deepseek-v3.2", "--ctx", "200", "--engine", "sglang", "--block-size", "16").stderr
    assert "--block-size 16: SGLang pages a DeepSeek Sparse Attention model in 64 tokens" in warned
    for block in ("64", None):  # the size it takes anyway, or none asked: nothing to say
        args = ("--block-size", block) if block else ()
        assert "SGLang pages" not in run("cost", "deepseek-v3.2", "--ctx", "200", "--engine", "sglang", *args).stderr
    # other models keep the page asked
    assert row("deepseek-v3", "--ctx", "200", "--engine", "sglang", "--block-size", "16")["block_size"] == 16


def test_titles_give_the_page_an_engine_sets_beside_the_one_asked():
    # a review: titles said 'sglang pages of 16' beside a warning that SGLang pages DeepSeek-V3.2 in 64, and 'vllm
    # pages of 16' where vLLM raises Nemotron-H's to 4,128 tokens (to hold a Mamba-2 state)
    out = run("show", "deepseek-v3.2", "--engine", "sglang", "--block-size", "16", "--ctx", "100k").stdout
    assert "sglang pages of 64 (16 asked)" in out
    out = run("compare", "nemotron-h-56b", "llama3-8b", "--engine", "vllm", "--block-size", "16", "--ctx", "4k").stdout
    assert "vllm pages of 16 (nemotron-h-56b's 4,128)" in out
    out = run("fit", "nemotron-h-56b", "--engine", "vllm", "--block-size", "16", "--hardware", "h100-80gb", "--gpus",
              "2").stdout
    assert "vllm pages of 4,128 (16 asked)" in out
    assert "vllm pages of 32\n" in run("compare", "llama3-8b", "--engine", "vllm", "--block-size", "32", "--ctx", "4k").stdout


def test_sglang_refuses_a_hybrid_page_that_does_not_divide_its_tracking_interval():
    # a review: SGLang 0.5.23's extra-buffer radix cache snapshots a hybrid's states every mamba_track_interval = 256
    # tokens and asserts the page size divides it (mamba_hook.validate_mamba_extra_buffer): it does not start with
    # --page-size 100 or 512 on Qwen3-Next or Nemotron-H; kvcalc counted pages of 100
    for name in ("qwen3-next-80b-a3b", "nemotron-h-56b"):
        for block in (100, 512, 48):
            with pytest.raises(KvcalcError, match=f"--block-size {block} --engine sglang: .* every 256 tokens"):
                kv_cache(spec(name), Settings(ctx=1000, engine="sglang", block_size=block))
        # a divisor of 256 runs: 1,000 tokens in 4 pages of 256 = 1,024 slots a full-attention layer
        r = kv_cache(spec(name), Settings(ctx=1000, engine="sglang", block_size=256))
        assert r.block_size == 256
    # Qwen3-Next's 12 full-attention layers, 2 KV heads of 256 in bf16: 2 · 2 · 256 · 2 = 2,048 bytes a token
    assert kv_cache(spec("qwen3-next-80b-a3b"), Settings(ctx=1000, engine="sglang", block_size=256)).engine_bytes \
        == 12 * 1024 * 2048
    assert run("compare", "nemotron-h-56b", "--engine", "sglang", "--block-size", "100", ok=False).exit_code == 1
    # the per-GPU path asks too (a review: plot's per-GPU cache and states drew 10 pages of 100 a layer), and so it
    # does vLLM's page rule
    with pytest.raises(KvcalcError, match="--block-size 100 --engine sglang: .* every 256 tokens"):
        per_gpu(spec("qwen3-next-80b-a3b"), Settings(ctx=1000, engine="sglang", block_size=100))
    with pytest.raises(KvcalcError, match="--block-size 24 --engine vllm: .* a multiple of 16 tokens"):
        per_gpu(spec("llama3-8b"), Settings(ctx=1000, engine="vllm", block_size=24))
    res = run("plot", "qwen3-next-80b-a3b", "-o", "unused.png", "--engine", "sglang", "--block-size", "100", "--ctx",
              "1k..4k", "-m", "state", ok=False)
    assert res.exit_code == 1 and "every 256 tokens" in res.stderr
    # other engines, and models without states, keep any page
    kv_cache(spec("qwen3-next-80b-a3b"), Settings(ctx=1000, engine="ideal", block_size=100))
    kv_cache(spec("llama3-8b"), Settings(ctx=1000, engine="sglang", block_size=100))


def test_vllm_mla_pages_are_what_a_backend_takes():
    # An MLA layer's token: (512 + 64) bf16 = 1,152 bytes (deepseek-v2: 60 layers)
    def mla(name, block, **kw):
        return kv_cache(spec(name), Settings(ctx=1000, engine="vllm", block_size=block, **kw))

    # vLLM 0.34.0 (an audit): FLASH_ATTN_MLA takes any multiple of 16 for a 16-bit cache, TRITON_MLA for fp8 too
    # (get_supported_kernel_block_sizes: MultipleOf(16)); the sparse backends of DeepSeek-V3.2 multiples of 64
    for block in (16, 32, 128, 192):
        r = mla("deepseek-v2", block)
        assert r.groups[0].block_size == block
        assert r.engine_bytes == 60 * -(-1000 // block) * block * 1152, block
    assert mla("deepseek-v2", 16, kv_dtype="fp8").groups[0].block_size == 16  # TRITON_MLA: an fp8 cache in pages of 16
    assert {g.block_size for g in mla("deepseek-v3.2", 128).groups} == {128}
    # a size no backend takes: vLLM finds no attention backend and does not start (a review: kvcalc used 64 silently,
    # its title saying 'vllm pages of 100')
    for name, block, step in (("deepseek-v2", 100, 16), ("deepseek-v2", 8, 16), ("deepseek-v3.2", 16, 64), ("deepseek-v3.2", 96, 64)):
        with pytest.raises(KvcalcError, match=f"--block-size {block} --engine vllm: .* a multiple of {step} tokens"):
            mla(name, block)
    # other engines and other attention keep the block asked
    assert kv_cache(spec("deepseek-v2"), Settings(ctx=1000, engine="ideal", block_size=16)).groups[0].block_size == 16
    assert kv_cache(spec("llama3-8b"), Settings(ctx=1000, engine="vllm", block_size=32)).groups[0].block_size == 32


def test_explain_derives_vllm_state_slots():
    # Nemotron-H's 54 Mamba-2 states take 6 groups of 10 slots, each a page of 4,128 tokens · 4,096 bytes
    out = run("show", "nemotron-h-56b", "--ctx", "1000", "--engine", "vllm", "--block-size", "16", "--explain").stdout
    page = 4128 * 4096
    assert (f"constant states as vllm stores them (two pages each in a hybrid, with vLLM's prefix caching, one in a"
            f" model of states alone; one more per speculative token under --mtp; padded to the unified page): (54 layers"
            f" + 6 padding slots of vLLM's groups) × {2 * page:,} = {60 * 2 * page:,} bytes") in out
    d = json.loads(run("show", "nemotron-h-56b", "--ctx", "1000", "--engine", "vllm", "--block-size", "16", "--explain", "-f", "json").stdout)
    mamba = next(g for g in d["derivation"]["groups"] if "state" in g)
    assert (mamba["state"]["engine_bytes_per_layer"], mamba["state"]["padding_layers"]) == (2 * page, 6)


def test_vllm_groups_span_pipeline_stages():
    # vLLM groups the whole model and projects the groups on each stage (get_kv_cache_configs): a stage's block costs
    # its largest group's layers there in pages, for every group, whether it has layers there or not. gemma3-27b at
    # pp 2: stage 0 holds layers 0..30: 5 global layers (5, 11, .., 29) and the first 26 windowed ones, dealt round
    # the 6 windowed groups as 5, 5, 4, 4, 4, 4: 5 slots a group, so 5 · (6,251 + 6 · 65) pages of 131,072 bytes
    g = per_gpu(spec("gemma3-27b"), Settings(ctx=100_001, engine="vllm", block_size=16, pp=2))
    assert g.kv_cache_bytes == 5 * (6251 + 6 * 65) * 131_072 == 4_352_245_760


def test_vllm_hybrid_pages_per_rank_and_in_fit():
    # under tp 4 each rank sizes its own page: a rank holds ceil(2 / 4) = 1 of Qwen3-Next's 2 KV heads (A = 1024
    # bytes) and a quarter of each Gated DeltaNet state
    s = Settings(ctx=1000, engine="vllm", block_size=16, tp=4)
    g = per_gpu(spec("qwen3-next-80b-a3b"), s)
    rank = kv_cache(spec("qwen3-next-80b-a3b"), Settings(ctx=1000))
    state = rank.groups[0].state_elements_per_layer * 2 // 4
    a = 64 * -(-state // (64 * 1024))  # k = lcm(16, 64): the Gated DeltaNet's checkpoint grid
    assert a == 320
    assert g.kv_cache_bytes == 12 * -(-1000 // a) * a * 1024 and g.state_bytes == 36 * 2 * a * 1024


@pytest.mark.slow
@pytest.mark.parametrize(("tp", "heads"), [(2, 1), (4, 1), (8, 1)])
def test_the_page_each_rank_allocates_is_shown_under_tp(tp, heads):
    # block_size stays the one-GPU page (engine_kv_bytes uses it); block_size_per_gpu is the page a rank allocates:
    # vLLM's 64 · ceil(S / (64 · A)) (k = lcm(16, 64)) with a 1/tp share of each Gated DeltaNet state S and A = 2 ·
    # heads · 256 · 2 bytes
    rows = json.loads(run("compare", "qwen3-next-80b-a3b", "--ctx", "8193", "--engine", "vllm", "--block-size", "16", "--tp", str(tp),
                          "-f", "json").stdout)
    state = 548_864 * 2 // tp  # bf16: 32 · 128 · 128 recurrent + 3 · 8,192 conv elements a layer
    a = 64 * -(-state // (64 * 2 * heads * 256 * 2))
    assert (rows[0]["block_size"], rows[0]["block_size_per_gpu"]) == (576, a)
    assert a == {2: 576, 4: 320, 8: 192}[tp]
    assert rows[0]["kv_cache_bytes_per_gpu"] == 12 * -(-8193 // a) * a * 2 * heads * 256 * 2
    show = run("show", "qwen3-next-80b-a3b", "--ctx", "8193", "--engine", "vllm", "--block-size", "16", "--tp", str(tp)).stdout
    assert f"its KV cache, whole pages of {a} tokens" in show
    # a dense model's page does not depend on the rank; none without --tp or without --engine
    dense = json.loads(run("compare", "llama3-70b", "--ctx", "8193", "--engine", "vllm", "--block-size", "16", "--tp", str(tp), "-f", "json").stdout)
    assert dense[0]["block_size"] == dense[0]["block_size_per_gpu"] == 16
    for args in (("--engine", "vllm", "--block-size", "16"), ("--tp", str(tp))):
        assert "block_size_per_gpu" not in json.loads(run("compare", "qwen3-next-80b-a3b", *args, "-f", "json").stdout)[0]


@pytest.mark.slow
def test_a_chunked_layer_holds_its_current_aligned_chunk_in_pages():
    # Llama 4 Scout, C = 8192, vLLM pages of B = 16: a chunk starts at a multiple of C, so a chunked layer reserves
    # C / B = 512 pages past the first chunk, whatever ctx, and one page more, for the next chunk's first token while
    # vLLM frees the chunk before one step late (async scheduling: C + 1 tokens, cdiv(C + 1, B) pages): 513; the 12
    # global layers hold ceil(ctx / B). At tp 8 a rank holds 1 of the 8 KV heads: a page
    # is 16 · 2 · 128 · 2 bytes
    page = 16 * 2 * 1 * 128 * 2
    def per_gpu_at(ctx: int, batch: int = 1) -> int:
        chunked = min(-(-ctx // 16), 513)
        return batch * (36 * chunked + 12 * -(-ctx // 16)) * page
    for ctx in (1, 8191, 8192, 8193, 10_001, 10_016, 16_384, 16_385, 131_072):
        row = json.loads(run("compare", "llama4-scout", "--ctx", str(ctx), "--tp", "8", "--engine", "vllm", "--block-size", "16",
                             "-f", "json").stdout)[0]
        assert row["kv_cache_bytes_per_gpu"] == per_gpu_at(ctx)
        assert row["engine_kv_bytes"] == 8 * per_gpu_at(ctx)  # one GPU holds all 8 heads: 8 × the page
    assert per_gpu_at(8_192) == 48 * 512 * page and per_gpu_at(8_193) == (36 * 513 + 12 * 513) * page
    assert per_gpu_at(10_001) == 212_828_160
    # fit: the cache grows with ctx again, so the search finds the true boundary; budget 0.9 × 80 GiB
    out = json.loads(run("fit", "llama4-scout", "--hardware", "h100-80gb", "--tp", "8", "--engine", "vllm", "--block-size", "16",
                         "--reserve", "0.1", "--batch", "16", "-f", "json").stdout)[0]
    budget = 9 * 80 * 2**30 // 10
    fixed = out["weights_bytes_per_gpu"] + out["activation_bytes"]
    # vLLM's 8,192-token chunk; the widest FFN: the top-1 routed expert and the shared one, 8,192 + 8,192, over tp 8
    assert out["activation_bytes"] == 8192 * (4 * 5120 + 2 * (8192 + 8192) // 8) * 2
    best = out["max_ctx"]
    # vLLM's pool holds one block back (BlockPool's null block): a page in each of its 12 tensors (the 36 chunked
    # layers dealt into 3 groups of the 12 global layers' size)
    null = 12 * page
    assert fixed + per_gpu_at(best, 16) + null <= budget < fixed + per_gpu_at(best + 1, 16) + null
    assert best == 483_552 and out["free_bytes_per_gpu"] == budget - fixed - per_gpu_at(best, 16) - null == 710_656


def test_vllm_keeps_states_at_the_model_dtype_under_an_fp8_kv_cache():
    # an audit: vLLM's CacheConfig.mamba_cache_dtype "auto" takes the model's dtype, not the KV cache's, so an fp8
    # cache leaves Qwen3-Next's states at bf16: S = 548,864 · 2 = 1,097,728 bytes a layer, A = 2 · 2 · 256 · 1 = 1,024
    # bytes a token (fp8), block 64 · ceil(S / (64 · A)) = 1,088 tokens (k = lcm(16, 64); it was 576 with fp8 states)
    r = row("qwen3-next-80b-a3b", "--ctx", "100000", "--batch", "3", "--engine", "vllm", "--block-size", "16", "--kv-dtype", "fp8")
    assert r["block_size"] == 64 * -(-1_097_728 // (64 * 1024)) == 1088
    assert r["engine_state_bytes"] == 36 * 3 * 2 * 1088 * 1024 == 240_648_192  # two state pages, each a whole block
    assert r["engine_kv_bytes"] == 12 * 3 * -(-100_000 // 1088) * 1088 * 1024 == 3_689_938_944
    # without an engine, or with --state-dtype, the states follow the settings as before
    assert row("qwen3-next-80b-a3b", "--ctx", "100000", "--batch", "3", "--kv-dtype", "fp8")["state_bytes"] == 36 * 3 * 548_864


def test_vllm_0_34_defaults_pages_of_64_reserve_and_prefill_chunk():
    # vLLM 0.34.0: CacheConfig.DEFAULT_BLOCK_SIZE 64 (16 before), its default memory sizing, and vllm serve's
    # max_num_batched_tokens 16384 on devices of 160 GiB or more (EngineArgs.get_batch_defaults)
    from kvcalc.fit import activation_bytes

    # Qwen3-Next's hybrid page: k = max(16, 64) = 64, a = 64 · ceil(S / (64 · 2,048)): 576 tokens (544 at 16)
    qwen = spec("qwen3-next-80b-a3b")
    r = kv_cache(qwen, Settings(ctx=1000, engine="vllm"))
    state = r.groups[0].state_elements_per_layer * 2
    assert 64 * -(-state // (64 * 2048)) == 576 == r.groups[0].block_size
    # Gemma 4: the full layers' 4,096-byte tokens take pages of 128 to match the windowed layers' 64 of 8,192
    g4 = kv_cache(spec("gemma4-26b-a4b"), Settings(ctx=100_001, engine="vllm"))
    assert [(g.group.label, g.block_size) for g in g4.groups] == [("global", 128), ("local", 64)]
    assert g4.engine_bytes == 5 * -(-100_001 // 128) * 128 * 4096 + 25 * (1024 // 64 + 1) * 64 * 8192
    # fit under --engine vllm on an NVIDIA or AMD GPU: its extensible KV cache at a utilization of 1.0 keeps a margin
    # of max(1 GiB, 3 on ROCm; 0.75 · the transient peak) free (extensible_kv_cache.py measure_kv_cache_bytes);
    # Llama 3.1 8B's activation estimate at 8,192 tokens is 8,192 · (4 · 4,096 + 2 · 14,336) · 2 = 738,197,504
    # bytes, 0.75 of it below 1 GiB
    def reserved(hw: str) -> tuple[int, int]:
        row = json.loads(run("fit", "llama3.1-8b", "--hardware", hw, "--batch", "4", "--engine", "vllm", "-f",
                             "json").stdout)[0]
        return row["reserved_bytes"], row["activation_bytes"]

    assert reserved("h100-80gb") == (2**30, 8192 * (4 * 4096 + 2 * 14336) * 2) == (2**30, 738_197_504)
    assert reserved("mi355x")[0] == 3 * 2**30
    # on a 180 GiB B200 it prefills chunks of 16,384 tokens: 1,476,395,008 bytes, whose 0.75 passes 1 GiB
    b200 = reserved("b200-180gb")
    assert b200[1] == activation_bytes(spec("llama3.1-8b"), Settings(ctx=1), 16384) == 1_476_395_008
    assert b200[0] == 1_476_395_008 * 3 // 4 == 1_107_296_256
    # a TPU keeps vLLM's estimated sizing: it requests ⌈memory · 0.92⌉ and reserves the rest
    assert reserved("tpu-v5p")[0] == 95 * 2**30 - -(-95 * 2**30 * 92 // 100)


def test_show_per_layer_engine_rows_add_up_with_the_padding_slots():
    # an audit: per layer under --engine vllm, the engine column left out vLLM's padding slots and summed below
    # engine_kv_bytes. Gemma 3 1B at 3,000 tokens, batch 3, 1 KiB a token and layer (512 elements in bf16), pages of
    # 64: 4 global layers of 47 pages, 22 local ones of 9 (a window of 512), and 2 padding slots of the local spec
    page = 64 * 1024 * 3
    rows = json.loads(run("show", "gemma3-1b", "--ctx", "3000", "--batch", "3", "--engine", "vllm", "--per-layer",
                          "-f", "json").stdout)["layers"]
    padding = [r for r in rows if "layer" not in r]  # no layer of its own
    assert [(r["layers"], r["n_layers"], r["engine_bytes"], r["bytes"]) for r in padding] == [("padding", 2, 2 * 9 * page, 0)]
    assert sum(r["engine_bytes"] for r in rows) == 4 * 47 * page + (22 + 2) * 9 * page == 79_429_632
    assert sum(r["bytes"] for r in rows) == 4 * 3000 * 1024 * 3 + 22 * 512 * 1024 * 3  # the exact cache, no padding


def test_vllm_warns_of_a_cache_scheme_it_does_not_have():
    # an audit of vLLM 0.34.0's CacheDType (config/cache.py): per-tensor fp8, fp8_ds_mla/nvfp4_ds_mla and
    # {fp8,int8,int4}_per_token_head (the Triton backend, not MLA): kvcalc's per-token and g<G>, and per-head on MLA,
    # were paged in silence
    def err(*args: str) -> str:
        return run("compare", *args, "--ctx", "4k", "--engine", "vllm").stderr
    assert "--engine vllm --kv-quant g64: vLLM 0.34.0 has no such cache (" in err("llama3-8b", "--kv-dtype", "int4", "--kv-quant", "g64")
    assert "--kv-quant per-token: vLLM 0.34.0 has no such cache (" in err("llama3-8b", "--kv-dtype", "fp8", "--kv-quant", "per-token")
    assert "--kv-quant per-head: vLLM 0.34.0 has no such cache on MLA" in err("deepseek-v3", "--kv-dtype", "fp8", "--kv-quant", "per-head")
    assert "warning" not in err("llama3-8b", "--kv-dtype", "int8", "--kv-quant", "per-head")  # int8_per_token_head
    assert "warning" not in err("deepseek-v3.2", "--kv-dtype", "fp8")  # fp8_ds_mla
    assert "warning" not in run("compare", "llama3-8b", "--ctx", "4k", "--kv-dtype", "int4", "--kv-quant", "g64").stderr


def test_mtp_pages_cover_the_slots_a_vllm_step_allocates_ahead():
    # vLLM 0.34.0 under --mtp (k = 1 MTP layer for DeepSeek-V3): a decode step schedules 1 + k tokens, allocates k
    # lookahead slots and, under async scheduling, holds the k drafts in flight: 3k slots past ctx, so a layer holds
    # cdiv(ctx + 3, 64) pages (an audit ran vLLM's AsyncScheduler and block manager: one page more at ctx = 62, 63 and
    # 0 mod 64). A block is one page of each of the 62 layers (61 + the MTP layer): 64 · 576 · 2 bytes each
    block = 62 * 64 * (512 + 64) * 2
    assert block == 4_571_136
    for ctx in (32_700, 32_701, 32_702, 32_704, 32_705, 32_765, 32_766, 32_768, 32_769):
        r = row("deepseek-v3", "--ctx", str(ctx), "--mtp", "--engine", "vllm")
        assert r["engine_kv_bytes"] == -(-(ctx + 3) // 64) * block
    # no --mtp, or no engine: the pages of ctx tokens, and the exact cache untouched
    assert row("deepseek-v3", "--ctx", "32768", "--engine", "vllm")["engine_kv_bytes"] == 512 * 61 * 64 * 576 * 2
    assert row("deepseek-v3", "--ctx", "32768", "--mtp")["kv_cache_bytes"] == 32_768 * 62 * 576 * 2
    # fit: vLLM's pool at 9,600 tokens, cdiv(9,603, 64) = 151 blocks a sequence (152 without the slots ahead), its
    # blocks of 62 layers · 64 tokens · 576 fp8 bytes in the room each GPU has, less the null block
    out = json.loads(run("fit", "deepseek-v3", "--mtp", "--engine", "vllm", "--hardware", "h200-141gb", "--gpus", "8",
                         "--weights-dtype", "fp8", "--kv-dtype", "fp8", "--ctx", "9600", "-f", "json").stdout)[0]
    room = (out["memory_bytes"] - out["reserved_bytes"]) // 8 - out["weights_bytes_per_gpu"] - out["activation_bytes"]
    # 141 GiB less vLLM's margin (1 GiB: 0.75 of the activations is less), the weights and the activations: 27,450
    # blocks, one the null block
    assert room == 141 * 2**30 - 2**30 - out["weights_bytes_per_gpu"] - out["activation_bytes"] == 62_739_421_696
    assert out["max_batch"] == (room // (62 * 64 * 576) - 1) // 151 == 27_449 // 151 == 181
    # the weights beyond kvcalc's all-fp8 figure, by hand: W_UK/W_UV dequantized to bf16 beside kv_b_proj in the 62
    # MLA layers (16 heads a rank · 256 · 512), and a byte more a value for the embedding's and head's shares
    # (129,280 / 8 rows of 7,168), the 59 routers and the MTP eh_proj (2 · 7,168²)
    plain = json.loads(run("fit", "deepseek-v3", "--mtp", "--hardware", "h200-141gb", "--gpus", "8", "--weights-dtype",
                           "fp8", "--kv-dtype", "fp8", "--ctx", "9600", "-f", "json").stdout)[0]
    assert out["weights_bytes_per_gpu"] - plain["weights_bytes_per_gpu"] == 62 * 16 * 256 * 512 * 2 \
        + 2 * (129_280 // 8) * 7168 + 59 * (7168 * 256 + 256) + 2 * 7168**2 == 702_757_632


def test_vllm_stops_the_slots_ahead_at_max_model_len():
    # a review: KVCacheManager.allocate_slots takes min(tokens + lookahead, max_model_len) slots, so within 3 tokens of
    # DeepSeek-V3's 163,840 (its default max_model_len) the slots ahead stop there: 2,560 pages a layer, not 2,561;
    # past it (a context vLLM would not serve, computed anyway) they run on
    block = 62 * 64 * (512 + 64) * 2
    pages = {ctx: row("deepseek-v3", "--ctx", str(ctx), "--mtp", "--engine", "vllm")["engine_kv_bytes"] // block
             for ctx in (163_836, 163_837, 163_838, 163_840, 163_841)}
    assert pages == {163_836: -(-163_839 // 64), 163_837: 2560, 163_838: 2560, 163_840: 2560, 163_841: 2561}
    # vLLM's start-up check counts cdiv(max_model_len, 64) pages, no slots ahead: where fit's longest sequence is
    # P · 64 − 3 tokens, vLLM admits P · 64
    res = run("fit", "deepseek-v3", "--hardware", "h200-141gb", "--tp", "8", "--weights-dtype", "fp8", "--engine",
              "vllm", "--mtp", "--reserve", "0.37", "-f", "json")
    best = json.loads(res.stdout)[0]["max_ctx"]
    assert best == 1704 * 64 - 3 == 109_053
    text = run("fit", "deepseek-v3", "--hardware", "h200-141gb", "--tp", "8", "--weights-dtype", "fp8", "--engine",
               "vllm", "--mtp", "--reserve", "0.37")
    assert "give vLLM --max-model-len 109056 or less" in text.stderr
    # --explain says where the slots stop, and that none are left at max_model_len itself
    for ctx, said in ((163_838, "counting 2 of the 3 slots"), (163_840, "counting 0 of the 3 slots")):
        out = run("show", "deepseek-v3", "--engine", "vllm", "--mtp", "--ctx", str(ctx), "--explain").stdout
        assert f"{said} a --mtp step allocates ahead, which stop at vLLM's max_model_len, 163,840" in out


def test_mtp_pages_cover_the_slots_an_sglang_step_allocates_ahead():
    # an audit of SGLang 0.5.23: with speculative decoding a decode step allocates up to the committed length
    # + 2 · max(steps · topk, draft tokens) slots (mem_cache/allocation_sizing.py; its EAGLE defaults (3, 1, 4) for
    # DeepSeek), so at ctx C (C − 1 committed) a sequence holds C + 7 slots; kvcalc counted C. DeepSeek-V3 in pages of
    # 1: 62 layers (61 + the MTP layer) of 576 bf16 values a token
    assert row("deepseek-v3", "--ctx", "4k", "--mtp", "--engine", "sglang")["engine_kv_bytes"] == 4103 * 62 * 576 * 2
    assert 4103 * 62 * 576 * 2 == 293_052_672
    assert row("deepseek-v3", "--ctx", "4k", "--engine", "sglang")["engine_kv_bytes"] == 4096 * 61 * 576 * 2
    # --mtp on a model without MTP layers runs no speculative decoding: nothing ahead, under either engine
    for engine in ("sglang", "vllm"):
        args = ("llama3-8b", "--ctx", "4k", "--engine", engine)
        assert row(*args, "--mtp")["engine_kv_bytes"] == row(*args)["engine_kv_bytes"] == 32 * 4096 * 2 * 8 * 128 * 2
    # DeepSeek-V3.2 in SGLang's NSA pages of 64: a token takes 1,152 latent bytes and 132 of the indexer's a layer;
    # ctx 4,089 + 7 fills 64 pages, 4,090 + 7 starts the 65th
    page = 64 * 62 * (1152 + 132)
    for ctx, n in ((4089, 64), (4090, 65), (4096, 65)):
        assert row("deepseek-v3.2", "--ctx", str(ctx), "--mtp", "--engine", "sglang")["engine_kv_bytes"] == n * page
    # fit: 8 H200s, fp8 weights, a bf16 cache, batch 8: the pool holds room // (62 · 1,152) tokens, a sequence at ctx
    # C holds C + 7 of them: the longest context is tokens // 8 − 7 (the weights with SGLang's bf16 w_kc and w_vc
    # beside each MLA layer's kv_b_proj, the MTP layer's too: 62 · 16 heads · 256 · 512 · 2 bytes a GPU)
    out = json.loads(run("fit", "deepseek-v3", "--mtp", "--engine", "sglang", "--hardware", "h200-141gb", "--gpus", "8",
                         "--weights-dtype", "fp8", "--batch", "8", "-f", "json").stdout)[0]
    room = (out["memory_bytes"] - out["reserved_bytes"]) // 8 - out["weights_bytes_per_gpu"] - out["activation_bytes"]
    tokens = room // (62 * 1152)
    plain = json.loads(run("fit", "deepseek-v3", "--mtp", "--hardware", "h200-141gb", "--gpus", "8",
                           "--weights-dtype", "fp8", "--batch", "8", "-f", "json").stdout)[0]
    # and a byte more a parameter for what SGLang keeps in bf16 in fp8 weights: the embedding's and LM head's shares
    # (129,280 / 8 rows of 7,168), the routers of the 58 MoE layers and the MTP layer, and its eh_proj (2 · 7,168²)
    bf16_rest = 2 * (129_280 // 8) * 7168 + 59 * (7168 * 256 + 256) + 2 * 7168**2
    assert out["weights_bytes_per_gpu"] - plain["weights_bytes_per_gpu"] == 62 * 16 * 256 * 512 * 2 + bf16_rest
    assert (out["max_ctx"], out["binding"]) == (tokens // 8 - 7, "memory") == (82_686, "memory")  # SGLang's 0.887


def test_sglang_draft_holds_its_own_embedding_on_the_last_stage():
    # an audit of SGLang 0.5.23: under pipeline stages the last stage has no target embedding for the draft to share
    # (speculative/pp_draft_embedding.py), so the draft loads its own VocabParallelEmbedding, split over tp as the
    # target's (whole under DP attention); kvcalc added it for vLLM only. DeepSeek-V3: 129,280 rows (a multiple of
    # 64: no padding) of 7,168 bf16 values. Measured as what --mtp adds to the last stage under the engine beyond what
    # it adds without one (the MTP layer's own weights, the same in both)
    from kvcalc.costs.parallel import stages

    spec_ = spec("deepseek-v3")

    def last(**kw: object) -> int:
        return stages(spec_, Settings(ctx=4096, tp=4, pp=2, **kw))[-1].weights_bytes

    # (and the MTP layer's absorbed w_kc, w_vc, which SGLang keeps beside kv_b_proj in bf16: its heads on the rank,
    # 128 / 4, or all 128 under DP attention, · (128 + 128) · 512)
    for extra, rows, heads in (({}, 129_280 // 4, 32), ({"dp": 2, "dp_attention": True}, 129_280, 128)):
        engine = last(mtp=True, engine="sglang", **extra) - last(engine="sglang", **extra)
        ideal = last(mtp=True, **extra) - last(**extra)
        assert engine - ideal == rows * 7168 * 2 + heads * 256 * 512 * 2
    # the last stage's 31 layers and the MTP layer each with those copies, 32 heads a rank
    assert row("deepseek-v3", "--ctx", "4k", "--tp", "4", "--pp", "2", "--engine", "sglang", "--mtp")[
        "weights_bytes_per_gpu"] == 186_064_379_904 + 32 * 32 * 256 * 512 * 2 == 186_332_815_360


def test_sglang_sizes_every_stage_for_the_draft_layers():
    # SGLang adds the draft's cell to every target worker's cell size (model_executor/pool_configurator.py), though
    # only the last stage runs the draft: a stage before the last holds room // (its layers + 1 MTP layer) tokens.
    # DeepSeek-V3 at tp 4, pp 2 (SGLang's split: 30 and 31 layers), fp8 latent: 576 bytes a token a layer
    from kvcalc.costs.engine_memory import sglang_capacity
    from kvcalc.costs.parallel import sglang_pools, stage_gpu, stages

    spec_ = spec("deepseek-v3")
    room = 40_000_000_000
    for mtp, sized in ((True, (31, 32)), (False, (30, 31))):
        s = Settings(ctx=1, tp=4, pp=2, mtp=mtp, engine="sglang", kv_dtype="fp8")
        plans = stages(spec_, s)
        assert [len(p.layers) for p in plans] == [30, 31]
        tokens = [sglang_capacity(sglang_pools(s, p), room) for p in plans]
        assert [c.tokens for c in tokens if c is not None] == [room // (576 * n) for n in sized]
    # the first stage holds only its own 30 layers' cache all the same, C + 7 slots each; the last its 31 and the MTP layer
    s = Settings(ctx=4096, tp=4, pp=2, mtp=True, engine="sglang", kv_dtype="fp8")
    assert [stage_gpu(s, p).kv_cache_bytes for p in stages(spec_, s)] == [30 * 4103 * 576, 32 * 4103 * 576]


def test_sglang_runs_48_sequences_under_speculative_decoding():
    # an audit of SGLang 0.5.23: with speculative decoding on and --max-running-requests not given, SGLang sets it to 48
    # (arg_groups/speculative_hook.py _handle_eagle_family), split over a replica's attention-DP workers
    # (resolve_max_num_reqs: max(1, 48 // attn_dp_size)); kvcalc kept its ordinary default (2,048 or more)
    def fit(*args: str) -> tuple[int, str]:
        out = json.loads(run("fit", *args, "--engine", "sglang", "--hardware", "h200-141gb", "-f", "json").stdout)[0]
        return out["max_batch"], out["binding"]

    glm = ("glm-4.7", "--gpus", "8", "--ctx", "4k")
    assert fit(*glm, "--mtp") == (48, "max_running_requests")
    plain, binding = fit(*glm)
    assert binding == "memory" and plain > 48  # memory binds without speculative decoding
    v3 = ("deepseek-v3", "--weights-dtype", "fp8", "--ctx", "1k", "--mtp")
    assert fit(*v3, "--tp", "8", "--dp-attention") == (8 * (48 // 8), "max_running_requests")  # 6 a worker
    assert fit(*v3, "--tp", "8", "--dp", "2") == (2 * 48, "max_running_requests")  # 48 a replica
    # --mtp on a model without MTP layers runs no speculative decoding: SGLang's ordinary default
    assert fit("llama3-8b", "--ctx", "128", "--mtp") == fit("llama3-8b", "--ctx", "128")


def test_vllm_keeps_a_token_more_in_cohere2s_sliding_layers():
    # an audit: vLLM's commandr.py passes sliding_window + 1 to its attention ("cohere swa layer sees [pos -
    # sliding_window, pos]"), so Command R7B's 24 sliding layers keep 4,097 tokens, 8 KV heads × 128 each, its 8 full
    # layers every token: at 8k the engine's cache is 24 · 4,097 + 8 · 8,192 tokens' worth (pages of 16)
    path = str(REFERENCE / "configs-extra-4" / "command-r7b-12-2024.json")
    per_token = 2 * 8 * 128 * 2

    def row(ctx: int, *args: str) -> dict:
        return json.loads(run("compare", path, "--ctx", str(ctx), *args, "-f", "json").stdout)[0]

    assert row(8192, "--engine", "vllm")["kv_cache_bytes"] == (24 * 4097 + 8 * 8192) * per_token == 671_186_944
    assert row(8192)["kv_cache_bytes"] == (24 * 4096 + 8 * 8192) * per_token  # the config's window without it
    # vLLM's window rule: min(ceil(ctx / B), ceil(W / B) + 1) pages, now of W = 4,097: of 64 (kvcalc's default block
    # here) 66, not 65; of 16, 258, not 257
    assert row(8192, "--engine", "vllm")["engine_kv_bytes"] == (24 * 66 + 8 * 128) * 64 * per_token == 683_671_552
    assert row(8192, "--engine", "vllm", "--block-size", "16")["engine_kv_bytes"] == (24 * 258 + 8 * 512) * 16 * per_token
    assert row(4096, "--engine", "vllm")["kv_cache_bytes"] == row(4096)["kv_cache_bytes"]  # within the window


def test_vllm_gives_an_mla_hybrid_pages_of_a_multiple_of_128():
    # a mutation review: _align_hybrid_block_size's 128-token floor for an MLA model with states (vLLM 0.34.0
    # platforms/interface.py: kernel_block_alignment_size = max(..., 128) under use_mla) was untested: at bf16 Kimi
    # Linear's block is a multiple of 128 either way. In fp8 its MLA page is 576 bytes a token and a KDA layer's states
    # 32 · 128 · 128 · 4 (fp32) + 3 · 3 · 32 · 128 · 2 (bf16 convs) = 2,170,880 bytes, so the block is
    # 128 · ceil(2,170,880 / (128 · 576)) = 3,840 tokens (64 · 59 = 3,776 without the floor); its 7 MLA layers hold
    # 2 pages at 4k
    path = str(REFERENCE / "configs-extra-3" / "kimi-linear-48b-a3b-instruct.json")
    r = json.loads(run("compare", path, "--engine", "vllm", "--ctx", "4k", "--kv-dtype", "fp8", "-f", "json").stdout)[0]
    assert 128 * -(-2_170_880 // (128 * 576)) == 3840
    assert (r["block_size"], r["engine_kv_bytes"]) == (3840, 7 * 2 * 3840 * 576)


def test_every_family_kvcalc_writes_is_known_and_an_unknown_one_is_warned_of(tmp_path):
    # a usability gap: a hand-written spec's family selects the engines' model-file rules, and a typo ('gemma-3') fell
    # back to the plain layout in silence. Every family the importers write for the reference configs and every bundled
    # spec's is known, and so is every family an engine rule names
    import glob

    from kvcalc.costs import engine_files, paged
    from kvcalc.costs.engine_files import KNOWN_FAMILIES
    from kvcalc.hf import import_config
    from kvcalc.registry import load_model

    written = set()
    for path in glob.glob(str(REFERENCE / "**" / "*.json"), recursive=True):
        cfg = json.loads(open(path).read())
        if isinstance(cfg, dict) and "model_type" in cfg:
            written.add(import_config(cfg, path, "m").data["family"])
    written |= {load_model(name).spec.family for name in bundled_names()}
    rules = {f for module in (engine_files, paged) for name, value in vars(module).items()
             if isinstance(value, frozenset) and name not in ("QUANTIZED_WEIGHTS", "KV_PROJECTIONS", "CONV_WEIGHTS") for f in value}
    assert written <= KNOWN_FAMILIES and rules <= KNOWN_FAMILIES, (written - KNOWN_FAMILIES, rules - KNOWN_FAMILIES)
    path = tmp_path / "g.yaml"
    path.write_text((ROOT / "model_specs" / "gemma3-1b.yaml").read_text().replace("family: gemma3", "family: gemma-3"))
    res = run("compare", str(path), "--engine", "vllm")
    assert "warning: gemma3-1b: family 'gemma-3' is none kvcalc knows (did you mean gemma3?)" in res.stderr
    assert "none kvcalc knows" not in run("compare", str(path)).stderr  # without an engine no rule depends on it


def test_the_engines_platform_comes_from_the_vendor_in_one_place():
    # a help-text review: a hardware file of vendor 'NVIDIA Corporation' got vLLM's TPU-style 0.92 sizing, since the
    # checks compared the vendor with 'nvidia' exactly; and vLLM's TPU chunk defaults were not followed
    from kvcalc.hardware import load_hardware

    base = load_hardware("h100-80gb")
    for vendor, platform in (("NVIDIA", "cuda"), ("NVIDIA Corporation", "cuda"), ("nvidia", "cuda"), ("AMD", "rocm"),
                             ("Advanced Micro Devices, Inc.", "rocm"), ("Google", "tpu"), ("Intel", "other"),
                             ("Apple", "apple"), ("Apple Inc.", "apple"), ("Pineapple", "other"), ("Lambda", "other")):
        assert base.model_copy(update={"vendor": vendor}).platform == platform


@pytest.mark.parametrize(("hw", "chunk"), [("tpu-v5p", 256), ("tpu-v5e", 512), ("tpu-v6e", 1024), ("h100-80gb", 8192),
                                           ("a100-80gb", 2048), ("b200-180gb", 16384)])
def test_vllm_prefill_chunk_by_chip(hw, chunk):
    # vllm serve's max_num_batched_tokens (arg_utils.py get_batch_defaults, OPENAI_API_SERVER): a TPU's chip's
    # ("tpu specific default values": V5P 256, V5E 512, V6E 1024) before the memory tiers'
    from kvcalc.costs.engine_memory import default_prefill_chunk
    from kvcalc.hardware import load_hardware

    assert default_prefill_chunk("vllm", load_hardware(hw)) == chunk


def test_sglang_sizes_every_rank_as_its_heaviest():
    # a SGLang sizing review: SGLang's profile takes the least memory free over all tp·pp ranks after loading
    # (kv_cache_configurator._profile_available_bytes: get_available_gpu_memory over the world group), so every stage's
    # pools divide the budget less the heaviest stage's weights; and _handle_max_mamba_cache charges every rank the
    # largest stage's constant states ("Charge the largest per-stage share"). kvcalc used each stage's own
    from kvcalc.costs.engine_memory import sglang_stage_pools
    from kvcalc.costs.parallel import sglang_pools, stages

    s = Settings(ctx=8192, tp=1, pp=4, engine="sglang")
    nemo = spec("nemotron-h-56b")
    plans = stages(nemo, s)
    pools = sglang_stage_pools(nemo, s, 80 * 2**30, 0)
    heaviest = max(p.weights_bytes for p in plans)
    assert len({p.weights_bytes for p in plans}) > 1  # the stages differ: the embedding, the head, the layer kinds
    assert [room for _, _, room in pools] == [80 * 2**30 - heaviest] * 4
    own = [sglang_pools(s, p).state_per_sequence for p in plans]
    assert len(set(own)) > 1 and [p.state_per_sequence for _, p, _ in pools] == [max(own)] * 4


@pytest.mark.parametrize("hw", ["m4-max", "m2-ultra"])
def test_vllm_on_apple_silicon_is_refused(hw):
    # a help-text review: `fit llama3.2-1b --hardware m4-max --engine vllm` answered batch 1,024 by the 70 GiB GPU
    # tier, but vLLM 0.34.0 on macOS runs its CPU platform (platforms/__init__.py cpu_platform_plugin), whose batch
    # defaults are 128 sequences and 2,048 tokens (arg_utils.py get_batch_defaults) and whose cache is sized from the
    # process's memory (cpu_worker.py determine_available_memory): not modelled, so refused, naming both options
    for command in (["fit", "llama3.2-1b"], ["compare", "llama3.2-1b"], ["cost", "llama3.2-1b", "--ctx", "4k"]):
        res = run(*command, "--hardware", hw, "--engine", "vllm", ok=False)
        assert res.exit_code == 1 and "Traceback" not in res.stderr, str(res)
        assert f"--engine vllm --hardware {hw}: vLLM runs on Apple silicon through its CPU backend" in res.stderr
    assert run("fit", "llama3.2-1b", "--hardware", hw).exit_code == 0  # no engine: the analytic answer stands


def test_sglang_on_apple_silicon_is_refused():
    # SGLang 0.5.23 on MPS sizes from torch.mps.recommended_max_memory() (utils/common.py get_mps_memory_capacity:
    # Metal's working-set limit, below the unified memory: about 107.5 GiB of a 128 GiB Mac, a third-party measurement),
    # which no preset holds: kvcalc's 128 GiB answer was about 25% too many sequences; refused, as vLLM's is
    for command in (["fit", "llama3-8b"], ["compare", "llama3-8b"], ["fit", "gemma3-27b"]):
        res = run(*command, "--hardware", "m4-max", "--engine", "sglang", ok=False)
        assert res.exit_code == 1 and "Traceback" not in res.stderr, str(res)
        assert "--engine sglang --hardware m4-max: SGLang on Apple silicon sizes its pools from Metal's working-set " \
            "limit" in res.stderr
    assert run("fit", "gemma4-26b-a4b", "--hardware", "h100-80gb", "--engine", "sglang").exit_code == 0


def test_vllm_mtp_lookahead_stops_at_the_served_context(tmp_path):
    # vLLM allocates min(tokens + 3k, max_model_len) slots under MTP (KVCacheManager.allocate_slots), its default
    # max_model_len a LongRoPE model's served context, not max_context. DeepSeek-V3 with --mtp: 61 + 1 layers of
    # 512 + 64 bf16 elements (71,424 bytes a token), pages of 64 tokens. Served at 4,096: at ctx 4,094 the step's
    # 3 slots stop at 4,096 (64 pages); without the served context they reach 4,097 (65 pages); past it, all 3 count.
    text = (ROOT / "model_specs" / "deepseek-v3.yaml").read_text()
    assert text.count("\nmax_context: 163840\n") == 1
    path = tmp_path / "served.yaml"
    path.write_text(text.replace("name: deepseek-v3\n", "name: served\n")
                    .replace("\nmax_context: 163840\n", "\nmax_context: 163840\nserved_context: 4096\n"))
    page = 64 * 62 * (512 + 64) * 2
    for model, ctx, pages_held in ((path, 4093, 64), (path, 4094, 64), (path, 4096, 64), (path, 4097, 65),
                                   ("deepseek-v3", 4094, 65), ("deepseek-v3", 4093, 64)):
        out = json.loads(run("show", str(model), "--ctx", str(ctx), "--engine", "vllm", "--mtp", "-f", "json").stdout)
        assert out["summary"]["kv_cache_bytes"] == ctx * 71_424, (model, ctx)
        assert out["summary"]["engine_kv_bytes"] == pages_held * page, (model, ctx)


def test_a_large_rope_table_is_warned_of():
    # a review against engine logs: vLLM and SGLang keep a RoPE cos/sin table on every GPU over all
    # max_position_embeddings positions (get_rope: cos_sin_cache), bf16 under vLLM and fp32 under SGLang on CUDA; not
    # counted. Llama 4 Scout: 10,485,760 positions x 128 x 2 B = 2.50 GiB under vLLM, 5.00 GiB under SGLang;
    # Maverick's 1,048,576: 256 MiB under vLLM (below the 512 MiB warned of), 512 MiB under SGLang
    def rope(*args):
        return [w for w in run(*args, "--ctx", "4k").stderr.splitlines() if "RoPE" in w]

    assert 10_485_760 * 128 * 2 == 5 * 2**29
    (vllm,) = rope("compare", "llama4-scout", "--engine", "vllm")
    assert "over all 10,485,760 positions (max_position_embeddings) at the rotary width, up to 2.50 GiB a GPU (bf16" in vllm
    (sglang,) = rope("compare", "llama4-scout", "--engine", "sglang")
    assert "up to 5.00 GiB a GPU (fp32 under SGLang on CUDA)" in sglang
    assert rope("compare", "llama4-maverick", "--engine", "vllm") == []
    assert "up to 512 MiB a GPU" in rope("compare", "llama4-maverick", "--engine", "sglang")[0]
    assert rope("compare", "llama4-scout") == []  # no engine: nothing engine-held is counted or warned of
    assert rope("compare", "llama3-8b", "--engine", "sglang") == []  # 8,192 x 128 x 4 B = 4 MiB


def test_rope_tables_of_each_head_width_and_only_for_served_models():
    # a second review: Gemma 4 builds a table for its sliding heads (256) and one for its global heads (512), over
    # 262,144 positions: 768 MiB in fp32 under SGLang; vLLM's bf16 384 MiB stays below the warning. MiniMax-M1,
    # which neither engine serves, gets no table warned of
    def rope(*args):
        return [w for w in run(*args, "--ctx", "4k").stderr.splitlines() if "RoPE" in w]

    assert 262_144 * (256 + 512) * 4 == 768 * 2**20
    assert "up to 768 MiB a GPU" in rope("compare", "gemma4-26b-a4b", "--engine", "sglang")[0]
    assert rope("compare", "gemma4-26b-a4b", "--engine", "vllm") == []
    assert rope("compare", "minimax-m1", "--engine", "vllm") == []
