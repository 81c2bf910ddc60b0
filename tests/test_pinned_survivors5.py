"""Behaviour a seventh mutation review found unpinned (no fast test failed when it was broken), each by hand or by
an invariant the README states: engine boundaries, chunk pages, admission blocks, MTP heads past one, Qwen3-MoE's
sparse step, and figures only the slow byte snapshot had guarded."""

from __future__ import annotations

import json

import pytest

from conftest import run
from kvcalc.costs.engine_memory import SGLangCapacity, sglang_refusal, sglang_stage_pools, vllm_admission_blocks
from kvcalc.costs.paged import chunk_pages
from kvcalc.costs.parallel import AdmissionGroup
from kvcalc.costs.params import ffn_runs
from kvcalc.figures import cost_breakdowns, figures
from kvcalc.hardware import load_hardware
from kvcalc.registry import load_model
from kvcalc.settings import Settings
from kvcalc.spec import ModelSpec

H100 = load_hardware("h100-80gb")


def _json(*args: str):
    return json.loads(run(*args, "-f", "json").stdout)


def test_vllm_caps_an_a100_at_256_sequences():
    # vllm/engine/arg_utils.py get_batch_defaults: max_num_seqs 1024 on a GPU of 70 GiB or more unless its name has
    # 'a100', where it stays 256 (the H100 binds by memory instead)
    a100 = _json("fit", "llama3.1-8b", "--engine", "vllm", "--hardware", "a100-80gb", "--ctx", "1k")[0]
    h100 = _json("fit", "llama3.1-8b", "--engine", "vllm", "--hardware", "h100-80gb", "--ctx", "1k")[0]
    assert (a100["max_batch"], a100["binding"]) == (256, "max_num_seqs")
    assert h100["binding"] == "memory" and h100["max_batch"] > 256


def test_a_chunk_spans_the_pages_of_its_worst_start():
    # B = 48, C = 8,192: chunks start at multiples of gcd(48, 8,192) = 16 into a page, the worst r = 48 − 16 = 32:
    # (32 + 8,192 − 1) // 48 + 1 = 172 pages (171 if the start were ignored); with vLLM's lag C + 1 tokens, still 172;
    # B = 64 divides C: 128 pages, 129 with the lag
    assert (32 + 8192 - 1) // 48 + 1 == 172
    assert chunk_pages(8192, 48) == chunk_pages(8192, 48, lag=True) == 172
    assert (chunk_pages(8192, 64), chunk_pages(8192, 64, lag=True)) == (128, 129)
    assert chunk_pages(8192, 48, ahead=48) == (32 + 8192 + 48 - 1) // 48 + 1 == 173  # slots ahead spanned too


def test_vllm_admission_blocks_of_a_chunk_and_of_cross_attention():
    # kv_cache_interface.py: ChunkedLocalAttentionSpec cdiv(min(C + in_flight, L), B), no page more (a window's has
    # one); CrossAttentionSpec cdiv(encoder tokens, B)
    assert vllm_admission_blocks([AdmissionGroup("chunk", 48, 8192)], 100_000, 2048) == -(-(8192 + 2048) // 48) == 214
    assert vllm_admission_blocks([AdmissionGroup("chunk", 48, 8192)], 9000, 2048) == -(-9000 // 48) == 188
    assert vllm_admission_blocks([AdmissionGroup("cross", 48)], 448, 0, encoder=1500) == 32  # 1,500 / 48 = 31.25
    assert vllm_admission_blocks([AdmissionGroup("window", 48, 4096)], 100_000, 2048) == -(-(4095 + 2048) // 48) + 1


def test_sglang_refuses_an_swa_pool_of_its_window_and_a_page():
    # pool_configurator.validate_swa_pool_size: refused while sliding_window_size + page_size >= swa_tokens; gpt-oss-20b
    # under SGLang: window 128 read as 127 (its window − 1), page 1: 128 tokens refused, 129 serve
    spec = load_model("gpt-oss-20b").spec
    (_, pools, _), *_ = sglang_stage_pools(spec, Settings(ctx=1, engine="sglang", hardware=H100), 70 * 2**30, 2**30)
    assert (pools.swa_floor, pools.block) == (127 + 1, 1)
    assert sglang_refusal(pools, SGLangCapacity(None, 160, 128)) == "swa"
    assert sglang_refusal(pools, SGLangCapacity(None, 160, 129)) is None


def test_fits_in_memory_counts_the_states():
    # README: weights + KV cache + states of the busiest GPU within its whole memory; Qwen3-Next in fp8 on an H200 at
    # batch 1,150: weights and cache fit, the states tip it over
    row = _json("compare", "qwen3-next-80b-a3b", "--weights-dtype", "fp8", "--hardware", "h200-141gb", "--batch",
                "1150", "--ctx", "1k")[0]
    memory = load_hardware("h200-141gb").memory_bytes
    held = row["weights_bytes_per_gpu"] + row["kv_cache_bytes_per_gpu"]
    assert held <= memory < held + row["state_bytes_per_gpu"] and row["fits_in_memory"] is False


def test_each_mtp_layer_runs_the_shared_head():
    # DeepSeek-V3 eq. 23: every MTP module sends its draft through the shared output head; with 3 MTP layers compare's
    # totals equal cost's breakdown, which counts 3 heads
    v3 = load_model("deepseek-v3").spec
    spec = ModelSpec.model_validate({**v3.model_dump(exclude_none=True), "mtp_layers": 3})
    s = Settings(ctx=4096, mtp=True)
    f, passes = figures(spec, s), cost_breakdowns(spec, s)
    assert f.flops_prefill == sum(passes["prefill"].values())
    assert f.flops_decode_token == sum(passes["decode_token_absorbed"].values())
    assert f.flops_generate_cached == sum(passes["generate_cached_absorbed"].values())
    assert f.flops_generate_uncached == sum(passes["generate_uncached"].values())
    one = figures(ModelSpec.model_validate({**v3.model_dump(exclude_none=True), "mtp_layers": 1}), s)
    head = 2 * 7168 * 129_280  # one decode token through one more head: 2 · d · vocab
    assert f.flops_decode_token - one.flops_decode_token > 2 * head


def test_qwen3_moe_sparse_step_places_its_experts(tmp_path):
    # vLLM qwen3_moe.py (and transformers): layer i is MoE when (i + 1) % decoder_sparse_step == 0: of 5 layers at
    # step 2, layers 1 and 3
    cfg = {"model_type": "qwen3_moe", "hidden_size": 256, "num_hidden_layers": 5, "num_attention_heads": 4,
           "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 1000, "intermediate_size": 512,
           "moe_intermediate_size": 128, "num_experts": 8, "num_experts_per_tok": 2, "max_position_embeddings": 4096,
           "decoder_sparse_step": 2, "mlp_only_layers": [], "tie_word_embeddings": False}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    runs = ffn_runs(load_model(str(path)).spec)
    moe = [i for run in runs if getattr(run.ffn, "n_routed_experts", 0) for i in run.layers[run.lo:run.hi]]
    assert sorted(moe) == [1, 3]


def test_fit_activations_round_a_split_width_up():
    # fit's activation estimate: 2,048 tokens · (4 · d + 2 · ceil(d_ff / tp)) · 2 bytes; llama4-scout at tp 40:
    # ceil(16,384 / 40) = 410
    row = _json("fit", "llama4-scout", "--tp", "40", "--hardware", "h100-80gb", "--batch", "1")[0]
    assert row["activation_bytes"] == 2048 * (4 * 5120 + 2 * 410) * 2 == 87_244_800


def test_dsa_cached_generation_counts_the_index_scores_of_every_step():
    # deepseek-v3.2 at 8k, 1,024 generated: step j scores 8,192 + j keys in each of 64 index heads (2 · 129 FLOPs a
    # key and head, as its decode step at 8,192 keys counts), 61 layers
    flops = _json("cost", "deepseek-v3.2", "--ctx", "8k")["flops"]
    per_key = flops["decode_token_absorbed"]["attn/index_scores"] // 8192
    assert per_key == 2 * 64 * 129 * 61
    assert flops["generate_cached_absorbed"]["attn/index_scores"] == sum(range(8193, 9217)) * per_key


def test_tokens_per_second_is_the_batch_over_the_step():
    summary = _json("cost", "llama3.1-8b", "--batch", "8", "--hardware", "h100-80gb")["summary"]
    # both floats of exact quotients: equal to the last bits of a double
    assert summary["tokens_per_second"] == pytest.approx(8 / summary["decode_seconds_per_token"], rel=1e-15)


def test_a_decode_step_reads_the_cross_attention_cache():
    # whisper-large-v3: each of 32 layers' cross-attention holds the encoder positions (5,120 bytes a position): a
    # step reads them, batch 4 · (1,500 − 100) positions more
    read = [_json("compare", "whisper-large-v3", "--ctx", "448", "--batch", "4", *extra)[0]["decode_bytes_read"]
            for extra in ((), ("--enc-ctx", "100"))]
    assert read[0] - read[1] == 4 * (1500 - 100) * 32 * 5120


def test_lightning_heads_split_over_tp():
    summary = _json("cost", "minimax-m1", "--tp", "8", "--ctx", "32k")["summary"]
    assert summary["state_bytes_per_gpu"] * 8 == summary["state_bytes"]  # 64 heads, 8 a rank


def test_data_parallel_replicas_prefill_their_share():
    # dp 2 replicas of tp 4 at batch 16: each prefills ceil(16 / 2) = 8 sequences, as one replica at batch 8 does
    args = ("cost", "llama3.1-70b", "--tp", "4", "--ctx", "8k", "--hardware", "h100-80gb")
    two = _json(*args, "--dp", "2", "--batch", "16")["summary"]["prefill_seconds"]
    assert two == _json(*args, "--batch", "8")["summary"]["prefill_seconds"]


def test_sglang_pools_whisper_in_96_layer_buffers():
    # SGLang (configs/model_config.py): num_attention_layers = encoder_layers + 2 · decoder_layers = 32 + 64, each
    # buffer holding the 448 decoder tokens and 1,500 encoder positions, 5,120 bytes a token
    summary = _json("cost", "whisper-large-v3", "--engine", "sglang", "--ctx", "448")["summary"]
    assert summary["engine_kv_bytes"] == 96 * (448 + 1500) * 5120 == 957_480_960


def test_a_compute_bound_decode_step_splits_its_flops_over_tp():
    # llama3.1-70b at batch 2,048: compute-bound; at tp 4 each rank computes a quarter of the step's FLOPs at the
    # H100's 989.4 TFLOP/s
    row = _json("compare", "llama3.1-70b", "--batch", "2048", "--ctx", "1k", "--tp", "4", "--hardware", "h100-80gb")[0]
    assert row["decode_bound"] == "compute"
    assert row["decode_seconds_per_token"] == pytest.approx(row["flops_decode_token"] / (4 * 989_400_000_000_000),
                                                            rel=1e-12)


def test_vllm_groups_by_the_fewest_layers_at_exactly_three_to_two():
    # kv_cache_planning.py _get_kv_cache_groups_uniform_page_size: groups of the most layers a spec has only while
    # max < 1.5 · min (strict): gpt-oss-20b rebuilt with 18 window layers and 12 full ones (18 = 1.5 · 12) groups by
    # 12, its window layers dealt into 2 groups of 9 (3 padding slots each, of window pages); at 17 and 13 by 17
    from kvcalc.costs.paged import vllm_layout

    data = load_model("gpt-oss-20b").spec.model_dump(exclude_none=True)
    shapes = {}
    for local in (18, 17):
        data["n_layers"] = 30
        data["layer_groups"][0]["layers"] = ",".join(map(str, range(local)))
        data["layer_groups"][1]["layers"] = ",".join(map(str, range(local, 30)))
        layout = vllm_layout(ModelSpec.model_validate(data).groups, Settings(ctx=32_768, engine="vllm"))
        shapes[local] = sorted((spec, len(layers)) for spec, layers in layout.groups)
    assert shapes == {18: [(0, 9), (0, 9), (1, 12)], 17: [(0, 17), (1, 13)]}


def test_vllm_unifies_gemma4_pages_by_the_larger():
    # gemma4-26b-a4b under vLLM (block 64): a window layer's page 64 · 8,192 bytes, a full layer's 64 · 4,096; the
    # pages unify to the larger, so a full layer's holds 128 tokens (unify_kv_cache_spec_page_size); at 32k its 5 full
    # layers hold 32,768 / 128 pages and its 25 window layers 1,024 / 64 + 1 (a window may start inside a page)
    row = _json("compare", "gemma4-26b-a4b", "--engine", "vllm", "--ctx", "32k")[0]
    assert row["block_size"] == 64 * 8192 // 4096 == 128
    assert row["engine_kv_bytes"] == 5 * (32_768 // 128) * 128 * 4096 + 25 * (1024 // 64 + 1) * 64 * 8192 == 893_911_040


def test_cross_attention_scales_split_with_their_heads():
    # whisper-large-v3 in int8 with per-token scales at tp 2: a rank holds 10 of the 20 heads of 64 for K and V
    # (1,280 bytes a token and layer) and their two fp32 scales (8 bytes), for the 448 tokens and the 1,500 encoder
    # positions cross-attention caches, in 32 layers
    row = _json("compare", "whisper-large-v3", "--kv-dtype", "int8", "--kv-quant", "per-token", "--tp", "2",
                "--ctx", "448")[0]
    assert row["kv_cache_bytes_per_gpu"] == 32 * (448 + 1500) * (2 * 10 * 64 + 8) == 80_288_768
    assert row["kv_cache_bytes"] == 32 * (448 + 1500) * (2 * 20 * 64 + 8)


def test_a_prefill_writes_its_states_once():
    # Qwen3-Next: a prompt's linear-attention states are written once, at its end (the decode step reads and writes
    # them back: twice there)
    from kvcalc.costs.cache import kv_cache
    from kvcalc.costs.traffic import decode_bytes, prefill_bytes

    spec, s = load_model("qwen3-next-80b-a3b").spec, Settings(ctx=4096)
    cache = kv_cache(spec, s)
    assert prefill_bytes(spec, s, cache)["state"] == cache.state_bytes > 0
    assert decode_bytes(spec, s, cache)["state"] == 2 * cache.state_bytes
