"""Decode and prefill traffic under --engine: every weight a pass reads at the width the engine keeps it
(kvcalc.costs.engine_files.engine_read_extra_bits), MXFP4's block scales of the experts it reaches, each figure derived
by hand from the model's config."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from conftest import REFERENCE, run, spec
from kvcalc.costs.parallel import per_gpu
from kvcalc.costs.traffic import decode_bytes, decode_weights, prefill_bytes
from kvcalc.registry import bundled_names
from kvcalc.settings import Settings

# gpt-oss-120b (config.json): d = 2,880, 36 layers of 64 query and 8 KV heads of 64, 128 experts (top 4) of width
# 2,880, vocabulary 201,088, untied head
GPT_OSS_ATTN = 36 * (2 * 2880 * 64 * 64 + 2 * 2880 * 8 * 64)  # q, o; k, v matrices: 955,514,880
GPT_OSS_ROUTERS = 36 * (2880 * 128 + 128)  # 13,275,648
GPT_OSS_HEAD = 201_088 * 2880  # 579,133,440
GPT_OSS_EXPERT = 3 * 2880 * 2880  # gate, up, down: 24,883,200


def test_gpt_oss_decode_reads_bf16_attention_head_routers_and_expert_scales_under_int4():
    # vLLM's MXFP4 checkpoint: attention, head and routers stay bf16 (16 bits, not 4), and each of the 4 active
    # experts' matrices carries a byte of E8M0 scale a block of 32 (w13_weight_scale, w2_weight_scale)
    m = spec("gpt-oss-120b")
    at = {"ctx": 8192, "weights_dtype": "int4"}
    plain, vllm = (decode_weights(m, Settings(**at, engine=e)) for e in (None, "vllm"))
    widths = (GPT_OSS_ATTN + GPT_OSS_ROUTERS + GPT_OSS_HEAD + 2880) * (16 - 4) // 8  # the embedding row too
    scales = 36 * 4 * GPT_OSS_EXPERT // 32
    assert vllm - plain == widths + scales == 2_433_864_672
    assert decode_weights(m, Settings(**at, engine="sglang")) == vllm  # SGLang's mxfp4.py alike
    # the README's figure: about 5.3 GB a step at 8k (the cost line's decode_bytes_read)
    out = json.loads(run("cost", "gpt-oss-120b", "--ctx", "8k", "--engine", "vllm", "--weights-dtype", "int4",
                         "-f", "json").stdout)["summary"]
    assert out["decode_bytes_read"] == 2_873_134_656 + 2_433_864_672 == 5_306_999_328
    table = run("cost", "gpt-oss-120b", "--ctx", "8k", "--engine", "vllm", "--weights-dtype", "int4").stdout
    assert "one decode step at ctx: active weights as vllm keeps them + KV cache" in table


def test_gpt_oss_prefill_reads_every_experts_scales_once_its_tokens_reach_them():
    # 8,192 tokens · top 4 >= 128 experts: every expert's scales (3,583,180,800 bytes, as the weights on a GPU hold
    # them); the embedding's 8,192 rows looked up in bf16
    m = spec("gpt-oss-120b")
    at = {"ctx": 8192, "weights_dtype": "int4"}
    plain, vllm = (prefill_bytes(m, Settings(**at, engine=e))["weights"] for e in (None, "vllm"))
    widths = (GPT_OSS_ATTN + GPT_OSS_ROUTERS + GPT_OSS_HEAD + 8192 * 2880) * (16 - 4) // 8
    assert vllm - plain == widths + 36 * 128 * GPT_OSS_EXPERT // 32
    assert 36 * 128 * GPT_OSS_EXPERT // 32 == 3_583_180_800
    # one token reaches its 4 experts only: the scales of 4 a layer
    one = {"ctx": 1, "weights_dtype": "int4"}
    plain, vllm = (prefill_bytes(m, Settings(**one, engine=e))["weights"] for e in (None, "vllm"))
    assert vllm - plain == (GPT_OSS_ATTN + GPT_OSS_ROUTERS + GPT_OSS_HEAD + 2880) * 12 // 8 + 36 * 4 * GPT_OSS_EXPERT // 32


def test_deepseek_v3_absorbed_decode_reads_the_bf16_copies_of_an_fp8_kv_b_proj():
    # d = 7,168, 61 layers of 128 heads, qk_nope and v 128 each, kv_lora_rank 512; 58 MoE layers of 256 experts (router
    # bias); vocabulary 129,280, untied. Under fp8 weights both engines keep W_UK and W_UV as bf16 copies, which the
    # absorbed decode reads in place of kv_b_proj; head, routers and the embedding's row stay bf16: a byte more each
    m = spec("deepseek-v3")
    copies = 61 * 2 * 512 * 128 * 128
    rest = 58 * (7168 * 256 + 256) + 129_280 * 7168 + 7168
    at = {"ctx": 4096, "weights_dtype": "fp8"}
    plain = decode_weights(m, Settings(**at))
    for engine in ("vllm", "sglang"):
        assert decode_weights(m, Settings(**at, engine=engine)) - plain == copies + rest == 2_056_541_696
        # the naive schedule reads kv_b_proj itself, in fp8
        naive = Settings(**at, engine=engine, mla_schedule="naive")
        assert decode_weights(m, naive) - decode_weights(m, Settings(**at, mla_schedule="naive")) == rest
        # vLLM's prefill runs the MHA path through kv_b_proj: no copies; SGLang's, in its prefill graph (an 80 GiB
        # Hopper's chunks of 8,192 without --hardware), the absorbed one through them; 4,096 tokens look up 4,096 rows
        copied = copies if engine == "sglang" else 0
        assert prefill_bytes(m, Settings(**at, engine=engine))["weights"] - prefill_bytes(m, Settings(**at))["weights"] \
            == 58 * (7168 * 256 + 256) + 129_280 * 7168 + 4096 * 7168 + copied
    # in bf16 vLLM's W_UK, W_UV are views and SGLang's copies bf16 as the rest: the same bytes read as without an engine
    for engine in ("vllm", "sglang"):
        assert decode_weights(m, Settings(ctx=4096, engine=engine)) == decode_weights(m, Settings(ctx=4096))


def test_under_bf16_weights_an_engine_reads_wider_only_fp32_routers_and_gemma4s_k_as_v_slot():
    # Every bundled model's decode and prefill weights equal the engine-free ones in bf16, but GLM-4.7's and
    # MiniMax-M2.5's routers, which both engines build in fp32 (2 bytes more each: 89 layers of 160 experts of
    # d = 5,120; 62 of 256 of d = 3,072), and Gemma 4's 5 full layers, whose fused qkv_proj holds and reads a V slot
    # loaded with the keys' weights (d = 2,816 by 2 KV heads of 512)
    extra = {"glm-4.7": 89 * (5120 * 160 + 160) * 2, "minimax-m2.5": 62 * (3072 * 256 + 256) * 2,
             "gemma4-26b-a4b": 5 * 2816 * 2 * 512 * 2}
    for name in bundled_names():
        m = spec(name)
        for engine in ("vllm", "sglang"):
            at = Settings(ctx=4096, batch=2, engine=engine)
            assert decode_weights(m, at) - decode_weights(m, Settings(ctx=4096, batch=2)) == extra.get(name, 0), name
            assert prefill_bytes(m, at)["weights"] - prefill_bytes(m, Settings(ctx=4096, batch=2))["weights"] \
                == extra.get(name, 0), name


def test_sglang_reads_falcon_h1s_head_in_fp32():
    # falcon_h1.py: lm_head.float(): a decode step reads 261,120 × 5,120 head weights at 4 bytes, not 2
    from kvcalc.hf import spec_from_config

    f = spec_from_config(json.loads((REFERENCE / "configs-extra-6" / "falcon-h1-34b-base.json").read_text()),
                         "config.json", "m")[0]
    assert decode_weights(f, Settings(ctx=1, engine="sglang")) - decode_weights(f, Settings(ctx=1)) == 261_120 * 5120 * 2
    assert decode_weights(f, Settings(ctx=1, engine="vllm")) == decode_weights(f, Settings(ctx=1))


def test_engines_keep_falcon_h1s_parallel_mixer_convolution_unquantized():
    # Falcon-H1's Mamba-2 beside each layer's attention (MambaMixer2 in both engines) builds conv1d with no
    # quant_config: conv_dim = d_ssm + 2 · n_groups · d_state = 4,096 + 2 · 2 · 256 = 5,120 channels of K = 4, in bf16
    # under fp8 weights, 72 layers: a byte more each, on the GPU and in a decode step
    from kvcalc.hf import spec_from_config

    f = spec_from_config(json.loads((REFERENCE / "configs-extra-6" / "falcon-h1-34b-base.json").read_text()),
                         "config.json", "m")[0]
    conv = 72 * 5120 * 4
    fp8 = Settings(ctx=1, weights_dtype="fp8")
    head_and_embedding = 2 * 261_120 * 5120  # bf16: a byte more than fp8 each
    vllm = Settings(ctx=1, weights_dtype="fp8", engine="vllm")
    assert per_gpu(f, vllm).weights_bytes - per_gpu(f, fp8).weights_bytes == head_and_embedding + conv
    assert decode_weights(f, vllm) - decode_weights(f, fp8) == 261_120 * 5120 + 5120 + conv  # head, one row, conv


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_decode_bytes_carry_the_engine_widths_into_the_step_time(engine):
    # the roofline reads decode_bytes' weights, the engine's widths included
    m = spec("deepseek-v3")
    at = Settings(ctx=4096, weights_dtype="fp8", engine=engine)
    assert decode_bytes(m, at)["weights"] == decode_weights(m, at)
    one = json.loads(run("cost", "deepseek-v3", "--ctx", "4k", "--weights-dtype", "fp8", "--engine", engine,
                         "--hardware", "h100-80gb", "-f", "json").stdout)["summary"]
    free = json.loads(run("cost", "deepseek-v3", "--ctx", "4k", "--weights-dtype", "fp8",
                          "--hardware", "h100-80gb", "-f", "json").stdout)["summary"]
    assert one["decode_bytes_read"] - free["decode_bytes_read"] == 2_056_541_696
    assert one["decode_seconds_per_token"] > free["decode_seconds_per_token"]


def test_a_decode_step_reads_the_scales_of_the_experts_whose_weights_it_counts():
    # decode traffic counts each token's top-k experts (a lower bound at batch > 1), so their scales alone: at batch 8
    # the weights read grow by the 7 more embedding rows (bf16) only, not by 28 more experts' scales a layer
    m = spec("gpt-oss-120b")
    at = {"ctx": 8192, "weights_dtype": "int4", "engine": "vllm"}
    assert decode_weights(m, Settings(**at, batch=8)) - decode_weights(m, Settings(**at)) == 7 * 2880 * 2


def test_sglang_reads_the_absorbed_copies_in_a_prefill_its_graphs_capture():
    # SGLang's breakable prefill CUDA graph (the CUDA default at pp 1) captures forwards of up to min(8,192,
    # chunked_prefill_size) tokens of an MLA model and pins the absorbed method there (attention_backend_handler.py):
    # on an H100 deepseek-v3's fp8 prefill of 4,096 tokens reads the bf16 copies of W_UK, W_UV, 61 · 2 · 512 · 128²,
    # a byte more each than kv_b_proj's fp8; not on a B200 (a DeepseekV3ForCausalLM's default trtllm_mla backend
    # turns the prefill graphs off there), an MI300X (no prefill graphs off CUDA), nor under pp 2 (graphs off)
    from kvcalc.hardware import load_hardware

    m = spec("deepseek-v3")
    copies = 61 * 2 * 512 * 128 * 128

    def weights(engine: str, hw: str, **more) -> int:
        return prefill_bytes(m, Settings(ctx=4096, weights_dtype="fp8", engine=engine, hardware=load_hardware(hw),
                                         **more))["weights"]

    assert weights("sglang", "h100-80gb") - weights("vllm", "h100-80gb") == copies == 1_023_410_176
    for hw in ("b200-180gb", "mi300x"):
        assert weights("sglang", hw) == weights("vllm", hw), hw
    assert weights("sglang", "h100-80gb", pp=2) == weights("vllm", "h100-80gb", pp=2)
    # without a GPU named, an 80 GiB Hopper's defaults: the copies
    plain = Settings(ctx=4096, weights_dtype="fp8")
    assert prefill_bytes(m, replace(plain, engine="sglang"))["weights"] \
        - prefill_bytes(m, replace(plain, engine="vllm"))["weights"] == copies
    # --dense-attn, a way of counting FLOPs, leaves the bytes an engine moves alone
    assert prefill_bytes(m, replace(plain, engine="sglang", dense_attn=True))["weights"] \
        == prefill_bytes(m, replace(plain, engine="sglang"))["weights"]


def test_deepseek_sparse_attention_prefills_past_top_k_read_the_copies_in_both_engines():
    # vLLM attends a DSA prefill absorbed once the prompt passes top-k 2,048 (its dense MHA prefill needs seq_len <=
    # top-k; its masked MHA is Blackwell's alone); SGLang at any length at pp 1. deepseek-v3.2 in fp8: 61 layers' copies
    m = spec("deepseek-v3.2")
    copies = 61 * 2 * 512 * 128 * 128

    def weights(ctx: int, engine: str | None) -> int:
        return prefill_bytes(m, Settings(ctx=ctx, weights_dtype="fp8", engine=engine))["weights"]

    base = {ctx: weights(ctx, "vllm") for ctx in (2048, 4096)}
    wk = 61 * 7168 * 128  # the indexer's wk, which SGLang quantizes (DeepSeek's RoPE is not interleaved), vLLM not
    assert weights(2048, "sglang") - base[2048] == copies - wk  # within top-k: SGLang absorbed, vLLM per head
    assert weights(4096, "sglang") - base[4096] == -wk  # past it: both read the copies
    # against the engine-free figure at 4k: the copies, the head, 4,096 embedding rows and the routers in bf16, and
    # the indexer's wk and weights_proj (7,168 · 128 + 7,168 · 64, fused with no quantization by vLLM) a layer
    rest = 58 * (7168 * 256 + 256) + 129_280 * 7168 + 4096 * 7168 + 61 * (7168 * 128 + 7168 * 64)
    assert base[4096] - weights(4096, None) == copies + rest


def test_sglang_runs_a_kv_shared_layers_whole_qkv_proj():
    # SGLang's Gemma 3n (and Gemma 4) files run the fused qkv_proj in every layer and drop a KV-shared layer's K and V
    # after (gemma3n_causal.py forward); vLLM builds q_proj alone there. Gemma 3n E2B: 10 KV-shared layers of
    # d = 2,048 by 2 KV heads of 256, K and V: 10 · 2 · 2,048 · 512 weights more a step, in bf16
    from kvcalc.hf import spec_from_config

    m = spec_from_config(json.loads((REFERENCE / "configs-gemma3n" / "gemma-3n-e2b.json").read_text()),
                         "config.json", "m")[0]
    free, vllm, sglang = (decode_weights(m, Settings(ctx=4096, engine=e)) for e in (None, "vllm", "sglang"))
    assert vllm == free and sglang - free == 10 * 2 * 2048 * 512 * 2 == 41_943_040
    free, sglang = (prefill_bytes(m, Settings(ctx=4096, engine=e))["weights"] for e in (None, "sglang"))
    assert sglang - free == 41_943_040


def test_sglangs_minicpm3_keeps_its_absorbed_copies_in_kv_b_projs_stead_and_dtype():
    # minicpm3.py (SGLang) splits kv_b_proj's weight into w_kc and w_vc after loading and deletes kv_b_proj: the same
    # bytes in the same dtype (fp8 stays fp8, for bmm_fp8), so under fp8 weights a GPU holds only the bf16 embedding
    # more (tied: 73,448 rows padded to 73,472, 2 bytes each, against kvcalc's 73,448 in fp8), and its prefill, which
    # SGLang always attends absorbed, reads the copies at kv_b_proj's width
    from kvcalc.hf import spec_from_config

    m = spec_from_config(json.loads((REFERENCE / "configs-extra-6" / "minicpm3-4b.json").read_text()),
                         "config.json", "m")[0]
    assert (m.vocab_size, m.d_model, m.tie_embeddings) == (73_448, 2560, True)
    fp8 = Settings(ctx=1, weights_dtype="fp8")
    assert per_gpu(m, replace(fp8, engine="sglang")).weights_bytes - per_gpu(m, fp8).weights_bytes \
        == 73_472 * 2560 * 2 - 73_448 * 2560
    at = Settings(ctx=4096, weights_dtype="fp8")
    # the head (the tied table, read whole) and 4,096 rows looked up, a byte more each in bf16: nothing for the copies
    assert prefill_bytes(m, replace(at, engine="sglang"))["weights"] - prefill_bytes(m, at)["weights"] \
        == 73_448 * 2560 + 4096 * 2560


def test_dsa_traffic_reads_and_writes_the_index_keys_and_fp8_latents_as_the_engines_store_them():
    # Both engines keep DeepSeek-V3.2's indexer key in fp8 with an fp32 scale a 128 values (132 bytes a token and
    # layer, vLLM DeepseekV32IndexerCache; SGLang index_k_with_scale_buffer) whatever --kv-dtype, and an fp8 latent in
    # FlashMLA's 656-byte fp8_ds_mla entry; a decode step scores every index key and reads the top-k 2,048 latents
    # (1,152 bytes in bf16: 512 + 64 values). 61 layers at 128k, one sequence
    m = spec("deepseek-v3.2")
    n, k = 131_072, 2048
    expect = {("bf16", None): 61 * (n * 256 + k * 1152), ("bf16", "engine"): 61 * (n * 132 + k * 1152),
              ("fp8", None): 61 * (n * 128 + k * 576), ("fp8", "engine"): 61 * (n * 132 + k * 656)}
    for (kv, which), read in expect.items():
        for engine in ((None,) if which is None else ("vllm", "sglang")):
            assert decode_bytes(m, Settings(ctx=n, kv_dtype=kv, engine=engine))["kv_cache"] == read, (kv, engine)
    assert expect[("bf16", "engine")] == 1_199_308_800 and expect[("fp8", "engine")] == 1_137_344_512
    # a prefill writes every token's index key and latent: 61 · 131,072 · (132 + 1,152) in bf16, (132 + 656) in fp8
    for kv, token in (("bf16", 132 + 1152), ("fp8", 132 + 656)):
        assert prefill_bytes(m, Settings(ctx=n, kv_dtype=kv, engine="vllm"))["kv_cache"] == 61 * n * token
    # the step time a user sees (a review): batch 32 on an H200, 4.8 TB/s, memory-bound
    out = json.loads(run("cost", "deepseek-v3.2", "--ctx", "128k", "--batch", "32", "--engine", "vllm",
                         "--hardware", "h200-141gb", "-f", "json").stdout)["summary"]
    weights = decode_weights(m, Settings(ctx=n, batch=32, engine="vllm"))
    assert out["decode_bytes_read"] == weights + 32 * expect[("bf16", "engine")] == 113_332_626_944
    assert out["decode_seconds_per_token"] == pytest.approx(113_332_626_944 / 4.8e12, rel=1e-12)


def test_a_prefill_partly_absorbed_reads_kv_b_proj_and_the_copies():
    # DeepSeek-V2 on a B200 under SGLang at 24k: the first forward of 16,384 tokens per head (kv_b_proj, fp8), the
    # last of 8,192 absorbed (the bf16 copies): both read, the copies' 60 · 2 · 512 · 128² parameters at 2 bytes each
    # beside kv_b_proj's; a 4k prompt, all absorbed, reads the copies in kv_b_proj's stead (a byte more each)
    from kvcalc.hardware import load_hardware

    m = spec("deepseek-v2")
    b200 = load_hardware("b200-180gb")
    copies = 60 * 2 * 512 * 128 * 128

    def weights(ctx: int, engine: str) -> int:
        return prefill_bytes(m, Settings(ctx=ctx, weights_dtype="fp8", engine=engine, hardware=b200))["weights"]

    assert weights(24_576, "sglang") - weights(24_576, "vllm") == 2 * copies
    assert weights(4096, "sglang") - weights(4096, "vllm") == copies
    assert weights(32_768, "sglang") == weights(32_768, "vllm")  # two eager forwards of 16,384: per head
