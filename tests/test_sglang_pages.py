"""SGLang's page size by backend and GPU (kvcalc.costs.sglang_pages): on compute capability 10.x SGLang 0.5.23 runs
most models with TensorRT-LLM's kernels and pages them by 64 tokens, not its default 1 (arg_groups/overrides.py
_mla_backend_page_constraints), FA4 by 128 (_fa4_page_constraint). Expected backends and pages are SGLang 0.5.23's
own resolution (ServerArgs.resolve_once, run on a fake GPU for 41 models on B200, GB200, B300, RTX 5090 and H100 in
a review of 2026-12-06), each with the lines of SGLang's code that decide it; the fit figures are its own sizing code
(KVCacheConfigurator) run on a fake B200, each written out by hand below."""

from __future__ import annotations

import json

import pytest

from conftest import REFERENCE, run, spec
from kvcalc.costs.cache import kv_cache
from kvcalc.costs.sglang_pages import sglang_backend, sglang_page
from kvcalc.hardware import load_hardware
from kvcalc.settings import Settings

B200, GB200, H100, RTX5090 = (load_hardware(n) for n in ("b200-180gb", "gb200-186gb", "h100-80gb", "rtx-5090"))


def sglang(hw, **kw) -> Settings:
    return Settings(ctx=100, engine="sglang", hardware=hw, **kw)


@pytest.mark.parametrize(("name", "backend", "page"), [
    ("llama3.1-8b", "trtllm_mha", 64),  # get_default_attn_backend: MHA on is_sm100 -> trtllm_mha; page 1 -> 64
    ("qwen3-8b", "trtllm_mha", 64),
    ("gemma3-27b", "trtllm_mha", 64),
    ("gpt-oss-20b", "trtllm_mha", 64),  # model_overrides/gpt_oss.py
    ("llama4-scout", "trtllm_mha", 64),  # model_overrides/llama4.py
    ("gemma4-26b-a4b", "trtllm_mha", 64),  # model_overrides/gemma4.py
    ("nemotron-h-56b", "trtllm_mha", 64),  # model_overrides/nemotron_h.py
    ("glm-4.7", "trtllm_mha", 64),
    ("qwen3-next-80b-a3b", "triton", 1),  # model_overrides/qwen3_5.py, before the extra buffer is settled: no-buffer
    ("deepseek-v3", "trtllm_mla", 64),  # model_overrides/deepseek_v2.py: DeepseekV3ForCausalLM on sm100
    ("kimi-k2", "trtllm_mla", 64),  # a DeepseekV3ForCausalLM too
    ("deepseek-v2", "flashinfer", 1),  # MLA, not V3: get_default_attn_backend's flashinfer keeps page 1
    ("deepseek-v3.2", "dsa", 64),  # DSA: 64 on CUDA whatever the GPU
    ("whisper-large-v3", "flashinfer", 1),  # Whisper: flashinfer for its cross-attention graphs
])
def test_blackwell_pages_by_backend(name, backend, page):
    for hw in (B200, GB200):
        assert (sglang_backend(spec(name), sglang(hw)), sglang_page(spec(name), sglang(hw))) == (backend, page)
    # Hopper, Ampere and the RTX 50 series (compute capability 12.0 is not SGLang's is_sm100): the default 1, but DSA
    for hw in (H100, RTX5090, None):
        assert sglang_page(spec(name), sglang(hw)) == (64 if backend == "dsa" else 1)


@pytest.mark.parametrize(("config", "backend", "page"), [
    ("mimo-v2-flash.json", "fa4", 128),  # model_overrides/mimo_v2.py; _fa4_page_constraint
    ("falcon-h1-34b-base.json", "triton", 1),  # model_overrides/falcon_h1.py
    ("granite-4.0-h-small.json", "flashinfer", 1),  # model_overrides/granitemoehybrid.py (Mamba layers)
    ("kimi-linear-48b-a3b-instruct.json", "flashinfer", 1),  # MLA arch, no DeepSeek-V3 override
    ("minicpm3-4b.json", "flashinfer", 1),
    ("olmo-2-1124-7b.json", "trtllm_mha", 64),  # model_overrides/olmo2.py
    ("gemma-3n-e2b.json", "trtllm_mha", 64),  # the default's: no override names a backend
    ("jamba-v0.1.json", "trtllm_mha", 64),  # no SGLang model file; its arguments resolve as any MHA model's
    ("command-r7b-12-2024.json", "trtllm_mha", 64),
])
def test_blackwell_pages_of_imported_families(config, backend, page):
    from kvcalc.registry import load_model

    path = next(REFERENCE.glob(f"*/{config}"))  # the reference configs' folders (tests/data/reference/*/)
    model = load_model(str(path)).spec
    assert (sglang_backend(model, sglang(B200)), sglang_page(model, sglang(B200))) == (backend, page)
    assert sglang_page(model, sglang(H100)) == 1


def test_an_asked_page_sglang_keeps_or_changes():
    llama, v3, qwen = spec("llama3.1-8b"), spec("deepseek-v3"), spec("qwen3-next-80b-a3b")
    # trtllm_mha keeps 16, 32, 64, 128 and turns any other into 64; trtllm_mla keeps 32 and 64
    assert [sglang_page(llama, sglang(B200, block_size=b)) for b in (1, 8, 16, 32, 64, 128, 256)] == \
        [64, 64, 16, 32, 64, 128, 64]
    assert [sglang_page(v3, sglang(B200, block_size=b)) for b in (1, 16, 32, 64, 128)] == [64, 64, 32, 64, 64]
    assert [sglang_page(qwen, sglang(B200, block_size=b)) for b in (16, 64, 128)] == [1, 1, 1]  # qwen3_5.py sets 1
    assert sglang_page(llama, sglang(H100, block_size=8)) == 8  # elsewhere the page asked
    r = run("compare", "llama3.1-8b", "--engine", "sglang", "--hardware", "b200-180gb", "--block-size", "8")
    assert "warning: llama3.1-8b: --block-size 8: SGLang pages it with trtllm_mha on compute capability 10.x, which " \
           "takes another page size as 64 (_mla_backend_page_constraints); its pages are counted at 64 tokens" in r.stderr


def test_sglang_keeps_a_multimodal_checkpoints_embedding_or_feature_cache_out_of_its_budget():
    # mm_runtime_reservation_gb: SGLANG_VLM_CACHE_SIZE_MB (100 MiB) for a multimodal checkpoint; Qwen3-VL on a Hopper of
    # 60 GiB or more: the embedding cache off and the cuda_ipc feature transport on (model_overrides/qwen3_vl.py),
    # SGLANG_MM_FEATURE_CACHE_MB, 1,024 MiB; Mistral 3 (Mistral3ForConditionalGeneration) is one of SGLang's multimodal
    # architectures (model_config.py multimodal_model_archs), a Mistral text checkpoint not
    from kvcalc.costs.engine_memory import sglang_mm_reservation
    from kvcalc.registry import load_model

    vl = load_model(str(next(REFERENCE.glob("*/qwen3-vl-8b-instruct.json")))).spec
    mistral3 = load_model(str(next(REFERENCE.glob("*/flux2-dev-mistral-small-3.json")))).spec
    at = {hw.name: Settings(ctx=1, engine="sglang", hardware=hw) for hw in (H100, B200, load_hardware("h200-141gb"))}
    assert [sglang_mm_reservation(vl, t) for t in at.values()] == [1024 * 2**20, 100 * 2**20, 1024 * 2**20]
    assert [sglang_mm_reservation(m, at["h100-80gb"]) for m in (spec("gemma4-26b-a4b"), spec("whisper-large-v3"),
                                                                 mistral3, spec("mistral-7b"), spec("llama3.1-8b"))] == \
        [100 * 2**20, 100 * 2**20, 100 * 2**20, 0, 0]
    assert mistral3.multimodal is True and spec("mistral-7b").multimodal is None
    r = run("fit", str(next(REFERENCE.glob("*/flux2-dev-mistral-small-3.json"))), "--engine", "vllm", "--hardware",
            "h100-80gb", "--ctx", "4k")
    assert "loads the vision tower of the family's multimodal checkpoints" in r.stderr


def test_dsa_on_amd_gpus_pages_as_sglangs_default_environment_does():
    # model_overrides/deepseek_v2.py: on ROCm page_size 1 unless aiter_can_use_preshuffle_paged_mqa (SGLANG_USE_AITER=1,
    # off by default, and Triton >= 3.5), else 64. SGLang's own sizing of deepseek-v3.2 on 8 MI300X in fp8 weights: a
    # pool of 1,167,646 tokens, 1,167,646 // 1,025 = 1,139 sequences of 1,025 tokens (pages of 64: 1,088 slots each,
    # 1,073 from kvcalc's pool of 1,167,616, which a --block-size 64 still gives for SGLang's ROCm images)
    mi300x = load_hardware("mi300x")
    assert sglang_page(spec("deepseek-v3.2"), sglang(mi300x)) == 1 and sglang_page(spec("deepseek-v3.2"), sglang(H100)) == 64
    assert sglang_page(spec("deepseek-v3.2"), sglang(mi300x, block_size=64)) == 64
    for more, want in (([], (1139, 1)), (["--block-size", "64"], (1073, 64))):
        rows = json.loads(run("fit", "deepseek-v3.2", "--engine", "sglang", "--hardware", "mi300x", "--tp", "8", "--ctx",
                              "1025", "--weights-dtype", "fp8", *more, "-f", "json").stdout)
        rows = rows if isinstance(rows, list) else rows["rows"]
        assert (rows[0]["max_batch"], rows[0]["block_size"]) == want
    assert 1_167_646 // 1_025 == 1139 and 1_167_616 // 1_088 == 1073


def test_speculative_decoding_and_the_extra_buffer_check_see_what_sglang_sees():
    # under --mtp SGLang picks the backend before it fills in its speculative defaults (top-k still unset): an MHA model
    # with MTP layers gets FlashInfer on a B200 (model_override_base.py get_default_attn_backend), pages of 1; an
    # override family or MLA keeps its own (DeepSeek-V3: trtllm_mla either way)
    glm, v3 = spec("glm-4.7"), spec("deepseek-v3")
    assert (sglang_backend(glm, sglang(B200, mtp=True)), sglang_page(glm, sglang(B200, mtp=True))) == ("flashinfer", 1)
    assert (sglang_backend(v3, sglang(B200, mtp=True)), sglang_page(v3, sglang(B200, mtp=True))) == ("trtllm_mla", 64)
    # validate_mamba_extra_buffer checks the page asked before trtllm_mha changes it: Nemotron-H at 48 does not start
    # (256 % 48), at 16 it does and keeps 16; Qwen3-Next's override has already set 1 on a B200
    r = run("compare", "nemotron-h-56b", "--engine", "sglang", "--hardware", "b200-180gb", "--block-size", "48", ok=False)
    assert r.exit_code == 1 and "--block-size 48 --engine sglang: SGLang 0.5.23 snapshots" in r.stderr
    assert sglang_page(spec("nemotron-h-56b"), sglang(B200, block_size=16)) == 16
    run("compare", "qwen3-next-80b-a3b", "--engine", "sglang", "--hardware", "b200-180gb", "--block-size", "48")


def test_blackwell_pages_in_the_cache_and_fit():
    # llama3.1-8b at ctx 100, batch 10 on a B200: two pages of 64 tokens a sequence and layer, 32 layers of 8 KV heads
    # of 128, K and V in bf16: 10 · 128 · 32 · 8 · 128 · 2 · 2 = 167,772,160 bytes (at SGLang's old page of 1 assumed:
    # 10 · 100 · 131,072 = 131,072,000)
    report = kv_cache(spec("llama3.1-8b"), Settings(ctx=100, batch=10, engine="sglang", hardware=B200))
    assert (report.engine_bytes, report.plan.block_size) == (10 * 128 * 32 * 8 * 128 * 2 * 2, 64) == (167_772_160, 64)
    # SGLang's own sizing on a B200 (its KVCacheConfigurator, run): llama3-70b in fp8 weights, a pool of 281,984 tokens
    # (4,406 pages of 64): 281,984 // 192 = 1,468 sequences of 129 tokens (3 pages each), 281,984 // 1,024 = 275 of
    # 1,000 (16 pages); llama3.1-8b 1,136,704 tokens // 320 = 3,552 of 300; deepseek-v3 on 8 B200s in fp8 weights,
    # 1,106,368 tokens a GPU // 1,024 = 1,080 of 1,000 (kvcalc's pages of 1 said 2,185, 281, 3,789 and 1,106)
    for args, want in ((["llama3-70b", "--weights-dtype", "fp8", "--ctx", "129,1000"], [1468, 275]),
                       (["llama3.1-8b", "--ctx", "300"], [3552]),
                       (["deepseek-v3", "--gpus", "8", "--weights-dtype", "fp8", "--ctx", "1000"], [1080])):
        rows = json.loads(run("fit", *args, "--engine", "sglang", "--hardware", "b200-180gb", "-f", "json").stdout)
        rows = rows if isinstance(rows, list) else rows["rows"]
        assert [r["max_batch"] for r in rows] == want and {r["block_size"] for r in rows} == {64}
    assert 281_984 // 192 == 1468 and 281_984 // 1024 == 275 and 1_136_704 // 320 == 3552 and 1_106_368 // 1024 == 1080


def test_a_plan_on_one_gpu_is_not_reused_on_another():
    # the page depends on the GPU: the memo keys of the cache and stage plans carry its compute capability
    model = spec("llama3.1-8b").model_copy()
    at = [kv_cache(model, Settings(ctx=100, engine="sglang", hardware=hw)).plan.block_size for hw in (H100, B200, H100)]
    assert at == [1, 64, 1]


# ---------------------------------------------------------------- SGLang's memory beside its pools (the same review)


def test_sglangs_request_table_past_its_headroom_is_warned_of():
    # ReqToTokenPool: (max_running_requests + 1) rows of context_len + 4 int32 slots. Llama 4 Scout's context_len is
    # 10,485,760, and at it SGLang runs 2,048 requests (clamp(tokens / context_len · 512, 2,048, 4,096)): 2,049 ·
    # 10,485,764 · 4 = 85,941,321,744 bytes a GPU (80.0 GiB), past the 14.9 GiB its fraction of 0.894 leaves an H200
    from kvcalc.fit import request_table

    model = spec("llama4-scout")
    s = Settings(ctx=8192, engine="sglang", hardware=load_hardware("h200-141gb"), tp=8)
    from kvcalc.costs.engine_memory import default_prefill_chunk, default_reserve

    chunk = default_prefill_chunk("sglang", s.hardware)
    assert request_table(model, s, s.hardware, default_reserve(model, s, s.hardware, chunk), chunk) == \
        2049 * (10_485_760 + 4) * 4 == 85_941_321_744
    r = run("fit", "llama4-scout", "--engine", "sglang", "--hardware", "h200-141gb", "--gpus", "8", "--ctx", "8k")
    assert "warning: llama4-scout: SGLang's request table (req_to_token: max_running_requests + 1 rows of its " \
           "context_len, 10,485,760 tokens, in int32) takes 80.0 GiB a GPU beside its static pools, more than the " \
           "14.9 GiB its static fraction leaves" in r.stderr
    # Llama 3.1 8B's 131,072: (R + 1) · 131,076 · 4 bytes, about 2 GiB at R = 4,096, within the 10 GiB kept
    assert "request table" not in run("fit", "llama3.1-8b", "--engine", "sglang", "--hardware", "h100-80gb",
                                      "--ctx", "8k").stderr


def test_sglang_keeps_100_mib_of_a_multimodal_budget_and_whisper_has_its_context_len_of_2048():
    # mm_runtime_reservation_gb: SGLANG_VLM_CACHE_SIZE_MB (100) off the KV budget of a multimodal checkpoint. SGLang's
    # own sizing on an H100 at a fraction of 0.836: gemma4-26b-a4b's room 21,211,876,229 bytes, a pool of 115,081
    # full tokens (without the 100 MiB kvcalc said 21,316,733,829 and 115,650); Whisper 139,337 tokens
    from fractions import Fraction

    from kvcalc.costs.engine_memory import (
        SGLANG_VLM_CACHE_BYTES,
        sglang_context_len,
        sglang_pool_sizes,
        sglang_stage_pools,
    )
    from kvcalc.fit import activation_bytes, budget_bytes

    assert SGLANG_VLM_CACHE_BYTES == 104_857_600 and 21_316_733_829 - 21_211_876_229 == 104_857_600
    for name, room, tokens in (("gemma4-26b-a4b", 21_211_876_229, 115_081), ("whisper-large-v3", None, 139_337)):
        model = spec(name)
        s = Settings(ctx=1, engine="sglang", hardware=H100)
        acts = activation_bytes(model, s, 8192)
        [(_, pools, got)] = sglang_stage_pools(model, s, budget_bytes(H100, 1 - Fraction(836, 1000), "sglang", acts), acts)
        assert (room is None or got == room) and sglang_pool_sizes(pools, got).tokens == tokens
    # WhisperConfig names none of get_context_length's keys: SGLang's context_len is 2,048, not the decoder's 448
    # positions, so fit no longer says SGLang serves requests of at most 446 tokens
    assert (sglang_context_len(spec("whisper-large-v3")), sglang_context_len(spec("llama3.1-8b"))) == (2048, 131_072)
    r = run("fit", "whisper-large-v3", "--engine", "sglang", "--hardware", "h100-80gb", "--batch", "64")
    assert "SGLang serves a request of at most" not in r.stderr


def test_a_granite_h_config_without_its_context_names_sglangs_own_default():
    # SGLang reads granitemoehybrid configs with its own GraniteMoeHybridConfig (srt/configs/granitemoehybrid.py), whose
    # max_position_embeddings defaults to 131,072, transformers' to 2,048 (the reference file leaves the key out)
    from kvcalc.registry import load_model

    model = load_model(str(next(REFERENCE.glob("*/granite-4.0-h-small.json")))).spec
    assert model.max_context == 2048 and "SGLang's own class 131072" in model.notes
