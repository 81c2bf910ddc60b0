"""Decode and prefill traffic under --engine: every weight a pass reads at the width the engine keeps it
(kvcalc.costs.engine_files.engine_read_extra_bits), MXFP4's block scales of the experts it reaches, each figure derived
by hand from the model's config."""

from __future__ import annotations

import json

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
        # a prefill runs the MHA path through kv_b_proj: no copies; its 4,096 tokens look up 4,096 rows
        assert prefill_bytes(m, Settings(**at, engine=engine))["weights"] - prefill_bytes(m, Settings(**at))["weights"] \
            == 58 * (7168 * 256 + 256) + 129_280 * 7168 + 4096 * 7168
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
