"""The KV cache a decode step reads: the keys its query attends, not the cache held (README, decode traffic).

A chunked layer holds up to C tokens but its query sees those of its own chunk; DeepSeek Sparse Attention scans every
index key and reads the latent of its top-k keys only; a layer that reads what it holds reads its cache whole. The
figures below are written out from the models' config numbers."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import pytest

from kvcalc.costs.cache import cache_plan, kv_cache, read_at
from kvcalc.costs.traffic import decode_bytes
from kvcalc.figures import _parallel_roofline
from kvcalc.hardware import load_hardware
from kvcalc.registry import load_model
from kvcalc.settings import Settings

K = 1024

# llama4-scout (config.json text_config): 48 layers, 8 KV heads × head_dim 128, attention_chunk_size 8192; every 4th
# layer (no_rope_layers 0) attends globally: 12 global, 36 chunked. bf16: 2·8·128·2 = 4,096 bytes a token and layer.
SCOUT_TOKEN, SCOUT_GLOBAL, SCOUT_CHUNKED, CHUNK = 4096, 12, 36, 8192

# deepseek-v3.2 (config.json): 61 layers; the latent kv_lora_rank 512 + qk_rope_head_dim 64 and the indexer key
# index_head_dim 128 cached per token; index_topk 2048.
DS_LAYERS, LATENT, INDEX, TOPK = 61, 512 + 64, 128, 2048


def kv_read(model: str, ctx: int, **settings) -> int:
    return decode_bytes(load_model(model).spec, Settings(ctx=ctx, **settings))["kv_cache"]


def held(model: str, ctx: int, **settings) -> int:
    return kv_cache(load_model(model).spec, Settings(ctx=ctx, **settings)).bytes


def scout_read(ctx: int) -> int:
    """Global layers read all ctx keys; a chunked layer those of its chunk, (ctx − 1) mod C + 1."""
    return (SCOUT_GLOBAL * ctx + SCOUT_CHUNKED * ((ctx - 1) % CHUNK + 1)) * SCOUT_TOKEN


@pytest.mark.slow
@pytest.mark.parametrize("ctx", [1, 4 * K, CHUNK, CHUNK + 1, 20_000, 2 * CHUNK, 128 * K + 5])
def test_chunked_layers_read_their_chunk(ctx):
    assert kv_read("llama4-scout", ctx) == scout_read(ctx)
    if ctx <= CHUNK or ctx % CHUNK == 0:  # a full chunk (or the first): every held token is attended
        assert kv_read("llama4-scout", ctx) == held("llama4-scout", ctx)
    else:
        assert kv_read("llama4-scout", ctx) < held("llama4-scout", ctx)


def test_chunked_read_at_a_chunk_boundary_written_out():
    # at 8,193 the chunked layers start a new chunk: 12 × 8,193 + 36 × 1 tokens, against 48 × 8,192 + 12 held
    assert kv_read("llama4-scout", CHUNK + 1) == (12 * 8193 + 36) * 4096 == 402_849_792
    assert held("llama4-scout", CHUNK + 1) == (12 * 8193 + 36 * 8192) * 4096 == 1_610_661_888


@pytest.mark.slow
@pytest.mark.parametrize("ctx", [1, TOPK, TOPK + 1, 32 * K, 128 * K, K * K])
def test_dsa_reads_every_index_key_and_the_top_k_latents(ctx):
    bf16 = 2
    want = DS_LAYERS * (ctx * INDEX + min(ctx, TOPK) * LATENT) * bf16
    assert kv_read("deepseek-v3.2", ctx) == want
    assert held("deepseek-v3.2", ctx) == DS_LAYERS * ctx * (INDEX + LATENT) * bf16
    assert kv_read("deepseek-v3.2", ctx, batch=8) == 8 * want


def test_dsa_read_at_128k_written_out():
    assert kv_read("deepseek-v3.2", 128 * K) == 61 * (131_072 * 256 + 2048 * 1152) == 2_190_737_408
    assert held("deepseek-v3.2", 128 * K) == 61 * 131_072 * 1408 == 11_257_511_936  # 5.1× what a step reads


def test_dsa_read_under_fp8_ds_mla():
    # FlashMLA's fp8 latent: 512 fp8 values + 4 fp32 scales + 64 bf16 RoPE values = 656 bytes; the indexer key
    # 128 fp8 values + one fp32 scale = 132 bytes (kvcalc.costs.quant)
    ctx = 128 * K
    assert kv_read("deepseek-v3.2", ctx, kv_dtype="fp8", kv_quant="fp8-ds-mla") == 61 * (ctx * 132 + TOPK * 656)
    assert held("deepseek-v3.2", ctx, kv_dtype="fp8", kv_quant="fp8-ds-mla") == 61 * ctx * (132 + 656)


def test_dsa_expanded_layout_reads_top_k_per_head_keys_and_values():
    # expanded: 128 heads × (192 + 128) per token beside the index key
    ctx, per_token = 64 * K, 128 * (192 + 128)
    assert kv_read("deepseek-v3.2", ctx, mla_cache="expanded") == 61 * (ctx * INDEX + TOPK * per_token) * 2


@pytest.mark.slow
@pytest.mark.parametrize("model", ["llama3-70b", "deepseek-v2", "gemma3-27b", "gpt-oss-120b", "qwen3-next-80b-a3b",
                                   "whisper-large-v3", "mistral-7b", "nemotron-h-56b"])
@pytest.mark.parametrize("ctx", [1, 4 * K, 32 * K + 3, K * K])
def test_a_layer_that_reads_what_it_holds_reads_its_cache(model, ctx):
    """Full, windowed, MLA without an indexer, hybrid and encoder–decoder models: the read, counted token by token
    (read_at, not the shortcut decode_bytes takes for them), is the cache held."""
    spec = load_model(model).spec
    for settings in ({}, {"batch": 3}, {"kv_dtype": "int4"}, {"kv_quant": "per-token", "kv_dtype": "fp8"},
                     {"kv_quant": "g32", "kv_dtype": "int4"}):
        s = Settings(ctx=ctx, **settings)
        plan = cache_plan(spec, s)
        assert plan.reads_held
        assert read_at(plan, s) == kv_read(model, ctx, **settings) == held(model, ctx, **settings)


def test_under_tp_each_rank_reads_the_keys_it_attends():
    """The roofline of one tp rank: its share of the weights, and the latent it replicates read for the top-k keys."""
    spec, hw = load_model("deepseek-v3.2").spec, load_hardware("h100-80gb")
    ctx, batch, tp = 128 * K, 8, 8
    s = Settings(ctx=ctx, batch=batch, tp=tp, hardware=hw)
    weights = decode_bytes(spec, replace(s, tp=1))["weights"]
    _, step = _parallel_roofline(spec, s, hw)
    read = step.memory_seconds * hw.memory_bandwidth
    assert read == Fraction(-(-weights // tp) + batch * DS_LAYERS * (ctx * INDEX + TOPK * LATENT) * 2)


def test_under_tp_a_model_that_reads_what_it_holds_keeps_the_cache_held():
    spec, hw = load_model("llama3-70b").spec, load_hardware("h100-80gb")
    s = Settings(ctx=32 * K, batch=4, tp=4, hardware=hw)
    weights = decode_bytes(spec, replace(s, tp=1))["weights"]
    _, step = _parallel_roofline(spec, s, hw)
    # 80 layers × 8 KV heads / 4 ranks × 128 × 2 (K and V) × 2 bytes per token, 4 sequences of 32k
    assert step.memory_seconds * hw.memory_bandwidth == -(-weights // 4) + 4 * 32 * K * 80 * 2 * 128 * 2 * 2


def test_under_tp_with_an_engine_a_rank_reads_by_token_as_one_gpu_does():
    """--engine pages hold whole blocks, but a step reads the tokens it attends: per rank as on one GPU."""
    spec, hw = load_model("llama3-70b").spec, load_hardware("h100-80gb")
    ctx = 32 * K + 5  # not a whole number of 16-token pages
    s = Settings(ctx=ctx, batch=2, tp=2, engine="vllm", hardware=hw)
    weights = decode_bytes(spec, replace(s, tp=1))["weights"]
    _, step = _parallel_roofline(spec, s, hw)
    # 80 layers × 8 KV heads / 2 ranks × 128 × 2 (K and V) × 2 bytes per token, 2 sequences of ctx tokens
    assert step.memory_seconds * hw.memory_bandwidth == -(-weights // 2) + 2 * ctx * 80 * 4 * 128 * 2 * 2
    one = Settings(ctx=ctx, batch=2, engine="vllm")
    assert decode_bytes(spec, one)["kv_cache"] == 2 * ctx * 80 * 8 * 128 * 2 * 2  # and on one GPU, by token too


def test_under_tp_with_an_engine_a_rank_reads_its_states_unpadded():
    """vLLM pads each constant state to a whole unified page; a step reads and writes the state itself, per rank as on
    one GPU. qwen3-next-80b-a3b at tp 2: 12 full layers of 2 KV heads × 256 (one head a rank), 36 Gated DeltaNet
    layers whose H_v 32 and H_k 16 heads split in two (recurrent 16·128·128, conv 3·(2·8·128 + 16·128) a rank)."""
    spec, hw = load_model("qwen3-next-80b-a3b").spec, load_hardware("h100-80gb")
    ctx, batch = 8 * K, 4
    s = Settings(ctx=ctx, batch=batch, tp=2, engine="vllm", hardware=hw)
    weights = decode_bytes(spec, replace(s, tp=1))["weights"]
    _, step = _parallel_roofline(spec, s, hw)
    kv = batch * ctx * 12 * 2 * 256 * 2
    states = 2 * batch * 36 * (16 * 128 * 128 + 3 * (2 * 8 * 128 + 16 * 128)) * 2  # read and written back, bf16
    assert step.memory_seconds * hw.memory_bandwidth == -(-weights // 2) + kv + states
