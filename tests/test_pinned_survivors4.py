"""Behaviour a sixth mutation review (of fit, solve, parallel, paged, engine_memory, hardware, units and the
importers) found unpinned, each by hand."""

from __future__ import annotations

import json

from conftest import ROOT, run


def _fit(*args: str) -> dict:
    return json.loads(run("fit", *args, "-f", "json").stdout)[0]


def test_a_fit_of_exactly_one_sequence():
    # llama3.1-8b on an RTX 4090 at 32k: 15.0 GiB of bf16 weights, the 2,048-token chunk's activations and 4 GiB of
    # cache a sequence (32 layers · 2 · 8 · 128 · 2 bytes · 32,768) leave room for one sequence, not two
    row = _fit("llama3.1-8b", "--hardware", "rtx-4090", "--ctx", "32k")
    assert (row["max_batch"], row["binding"]) == (1, "memory")
    assert row["kv_cache_bytes"] == 32 * 2 * 8 * 128 * 2 * 32_768 == 4 * 2**30


def test_gpt2_per_gpu_weights_count_layernorm_biases_and_whole_row_parallel_biases():
    # GPT-2 (124,439,808 parameters, FACTS.md; LayerNorms of weight and bias, 2 · 768 each): at tp 1 a GPU holds them
    # all; at tp 2 a rank holds half the heads (q, k, v 768 × 384 with biases, o 384 × 768 with its whole bias), half
    # the FFN (768 × 1,536 and 1,536 × 768, the up bias split and the down bias whole), ceil(50,257 / 2) = 25,129
    # embedding rows (tied: no head), the 1,024 × 768 position table, and every norm
    assert _fit("gpt2", "--hardware", "h100-80gb", "--batch", "1")["weights_bytes_per_gpu"] == 124_439_808 * 2
    attn = 3 * 768 * 384 + 3 * 384 + 384 * 768 + 768
    ffn = 2 * 768 * 1536 + 1536 + 768
    rank = 25_129 * 768 + 1024 * 768 + 12 * (attn + ffn + 2 * 2 * 768) + 2 * 768
    assert _fit("gpt2", "--hardware", "h100-80gb", "--tp", "2", "--batch", "1")["weights_bytes_per_gpu"] == 2 * rank \
        == 125_283_840


def test_expert_parallelism_gives_the_busiest_rank_the_remainder():
    # Qwen3-235B-A22B's 128 experts over ep 3: the busiest rank holds ceil(128 / 3) = 43 (vLLM determine_expert_map
    # gives the remainder to the first ranks), 11 more than ep 4's 32: 94 layers of 3 · 4,096 · 1,536 fp8 weights each
    a = _fit("qwen3-235b-a22b", "--hardware", "h200-141gb", "--dp", "3", "--ep", "3", "--weights-dtype", "fp8",
             "--batch", "1")["weights_bytes_per_gpu"]
    b = _fit("qwen3-235b-a22b", "--hardware", "h200-141gb", "--dp", "4", "--ep", "4", "--weights-dtype", "fp8",
             "--batch", "1")["weights_bytes_per_gpu"]
    assert a - b == (43 - 32) * 94 * 3 * 4096 * 1536 and a == 84_287_434_240


def test_the_activation_estimate_counts_a_dense_mlp_beside_the_experts():
    # Gemma 4 26B-A4B at tp 8: a chunk of 2,048 tokens, each 4 · d (d = 2,816) plus twice the FFN width a rank runs:
    # its 8 active experts of 704 and the 2,112-wide dense MLP beside them, split over 8 (968): bf16
    row = _fit("gemma4-26b-a4b", "--hardware", "h200-141gb", "--gpus", "8", "--batch", "1")
    assert row["activation_bytes"] == 2048 * (4 * 2816 + 2 * -(-(8 * 704 + 2112) // 8)) * 2 == 54_067_200


def test_sweep_points_round_to_the_nearest_token():
    # --points 5 over 1k..1M: 1,024 · 1,024^(k/4), rounded: 5,792.6 -> 5,793 and 185,363.8 -> 185,364
    rows = run("sweep", "llama3-8b", "--ctx", "1k..1M", "--points", "5", "-f", "json").stdout
    assert [r["ctx"] for r in json.loads(rows)] == [1024, 5793, 32_768, 185_364, 1_048_576]


def test_a_hardware_figure_in_peta(tmp_path):
    # a bandwidth written 0.00335PB/s is 3.35 TB/s (P = 10^15): llama3-8b's decode step at 4k stays memory-bound, at
    # the preset's own time
    path = tmp_path / "p.yaml"
    path.write_text((ROOT / "hardware_specs" / "h100-80gb.yaml").read_text().replace("name: h100-80gb", "name: peta")
                    .replace("memory_bandwidth: 3_350_000_000_000", "memory_bandwidth: 0.00335PB/s"))
    mine = json.loads(run("cost", "llama3-8b", "--ctx", "4k", "--hardware", str(path), "-f", "json").stdout)["summary"]
    preset = json.loads(run("cost", "llama3-8b", "--ctx", "4k", "--hardware", "h100-80gb", "-f", "json").stdout)["summary"]
    assert mine["decode_seconds_per_token"] == preset["decode_seconds_per_token"]


def test_vllm_refuses_a_tp_that_does_not_split_a_dense_ffn():
    # a mutation review: Llama 3.2 3B's FFN of 8,192 over tp 24 was sized (8,192 / 24 rounded up), but vLLM's
    # MergedColumnParallelLinear asserts each output size divides by tp: it does not load
    res = run("fit", "llama3.2-3b", "--hardware", "h100-80gb", "--tp", "24", "--engine", "vllm", "--batch", "1", ok=False)
    assert res.exit_code == 1
    assert "vLLM splits llama3.2-3b's FFN of width 8,192 evenly over 24 ranks, and 24 does not divide it" in res.stderr
    # without an engine kvcalc's plain layout sizes it, each rank ceil(8,192 / 24) = 342 wide; tp 8 loads under vLLM
    assert _fit("llama3.2-3b", "--hardware", "h100-80gb", "--tp", "24", "--batch", "1")["gpus"] == 24
    assert _fit("llama3.2-3b", "--hardware", "h100-80gb", "--tp", "8", "--engine", "vllm", "--batch", "1")["gpus"] == 8
