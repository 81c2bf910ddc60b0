"""Figures a fourth mutation review found no test pinned (the code right, a change to it passing), each by hand."""

from __future__ import annotations

import copy
import json

import yaml

from conftest import REFERENCE, ROOT, run
from kvcalc.costs.params import param_counts
from kvcalc.registry import load_path
from kvcalc.settings import Settings
from kvcalc.spec import spec_from_dict


def _json(*args: str):
    return json.loads(run(*args, "-f", "json").stdout)


def test_sglang_pages_a_kivi_cache_as_its_exact_bytes():
    # SGLang's pages are one token (B = 1), so Llama 3.1 8B's int4 g64 cache at 10,000 tokens is the exact cache: per
    # layer K and V 10,000 · 1,024 / 2 each, the keys' scales per channel a group of 64 tokens (1,024 · ⌈10,000/64⌉
    # · 4 bytes), the values' per token a group of 64 channels (10,000 · 16 · 4)
    out = _json("show", "llama3.1-8b", "-c", "10000", "--engine", "sglang", "--kv-dtype", "int4", "--kv-quant", "g64")
    layer = 2 * 10_000 * 1024 // 2 + 1024 * -(-10_000 // 64) * 4 + 10_000 * (1024 // 64) * 4
    assert out["summary"]["engine_kv_bytes"] == out["summary"]["kv_cache_bytes"] == 32 * layer == 368_738_304


def test_sglang_swa_pool_holds_four_fifths_of_the_full_pools_tokens():
    # pool_configurator.HybridSWAPoolConfigurator: swa_tokens = int(full_tokens · 0.8). Gemma 4 26B-A4B on an H100 at
    # 1,000 tokens: room ⌊80 GiB · 0.836⌋ − its weights; full_tokens = room / (5 full layers · 4,096 + 0.8 · 25 sliding
    # · 8,192); the sliding pool, 0.8 of it, binds: 92 sequences (115 were the full pool's)
    row = _json("fit", "gemma4-26b-a4b", "--engine", "sglang", "--hardware", "h100-80gb", "-c", "1000")[0]
    room = 80 * 2**30 * 836 // 1000 - row["weights_bytes_per_gpu"]
    full = room * 5 // (5 * (5 * 4096) + 4 * 25 * 8192)  # room / (20,480 + 163,840)
    assert (room, full, full * 4 // 5) == (21_316_733_829, 115_650, 92_520)
    assert row["max_batch"] == 92_520 // 1000 == 92 and row["reserve"] == 0.164


def test_vllm_holds_a_state_page_more_per_speculative_token():
    # vLLM 0.34.0 kv_cache_interface.py: "2 + num_speculative_blocks" state pages resident. Qwen3-Next's page: 576
    # tokens of 2 KV heads · 256 · 2 · 2 bytes (64 · ⌈1,097,728 / (64 · 2,048)⌉ tokens hold a layer's bf16 state,
    # 548,864 elements); 36 state layers hold 2 pages, and under --mtp (k = 1) 3, beside 3 padding slots of the groups
    page = 576 * 2 * 256 * 2 * 2
    assert 64 * -(-548_864 * 2 // (64 * 2048)) == 576 and page == 1_179_648
    plain = _json("show", "qwen3-next-80b-a3b", "-c", "10000", "--engine", "vllm")["summary"]["engine_state_bytes"]
    mtp = _json("show", "qwen3-next-80b-a3b", "-c", "10000", "--engine", "vllm", "--mtp")["summary"]["engine_state_bytes"]
    assert (plain, mtp) == (36 * 2 * page, (36 + 3) * 3 * page) == (84_934_656, 138_018_816)


def test_vllm_pages_a_padded_global_page_of_a_kivi_cache():
    # Gemma 4 26B-A4B in int4 g48 at 100,000 tokens under vLLM: its 5 global layers' pages padded to the unified page
    # of 158,464 bytes hold 1,563 pages each; a padded page is not recomputed as an unpadded span
    out = _json("show", "gemma4-26b-a4b", "-c", "100000", "--engine", "vllm", "--kv-dtype", "int4", "--kv-quant", "g48")
    groups = {g["group"]: g for g in out["groups"]}
    assert (groups["global"]["pages"], groups["global"]["engine_bytes"]) == (1563, 5 * 1563 * 158_464)
    assert out["summary"]["engine_kv_bytes"] == 1_238_396_160 + groups["local"]["engine_bytes"] == 1_303_490_560


def test_per_head_scales_leave_the_indexer_key_one():
    # DeepSeek-V3.2 expanded in int8 per-head: a layer's 128 heads of K (192) and V (128) and the indexer's key (128)
    # in int8, one 4-byte scale per head of K and of V, and one for the indexer key (not 128)
    out = _json("show", "deepseek-v3.2", "-c", "1000", "--kv-dtype", "int8", "--kv-quant", "per-head", "--mla-cache",
                "expanded")
    assert out["summary"]["kv_bytes_per_token"] == 61 * (128 * 192 + 128 * 128 + 128 + 128 * 4 + 128 * 4 + 4) \
        == 2_569_076


def test_a_prefill_reads_no_never_run_kv_projection():
    # Gemma 3n E2B's 10 KV-shared layers keep K/V projections and a k_norm they never run: 10 · (2 · 2,048 · 512 + 256)
    # parameters a prefill does not read
    from kvcalc.costs.traffic import _lookup_tables, _read_once

    spec = load_path(REFERENCE / "configs-gemma3n" / "gemma-3n-e2b.json").spec
    unused = 10 * (2 * 2048 * 512 + 256)
    assert unused == 20_974_080
    assert _read_once(spec, False)[1] == param_counts(spec).total - _lookup_tables(spec) - unused


def test_a_parallel_mixer_reduces_its_own_output():
    # Falcon-H1 0.5B at tp 2: vLLM all-reduces the attention's o_proj and the Mamba-2 mixer's out_proj apart
    # (falcon_h1.py, mamba_mixer2.py: both RowParallelLinear), and the FFN's: (1 embedding + 36 · 2 + 36) · 1,024 · 2
    row = _json("compare", str(REFERENCE / "configs-extra-6" / "falcon-h1-0.5b-base.json"), "--tp", "2", "-c", "4k",
                "--hardware", "h100-80gb", "--columns", "all")[0]
    assert row["tp_allreduce_bytes"] == (1 + 36 * 2 + 36) * 1024 * 2 == 223_232


def test_lightning_head_dim_falls_back_to_d_model_over_heads():
    # MiniMax-M1 without head_dim: d_h = 6,144 / 64 = 96, so each of its 70 lightning layers holds a 64 × 96 × 96 state
    cfg = json.loads((REFERENCE / "models-2026" / "minimax-m1.json").read_text())
    cfg = {k: v for k, v in cfg.items() if k != "head_dim"}
    from kvcalc.hf import import_config

    spec = spec_from_dict(import_config(cfg, "m.json", "m").data, "m.json")
    from kvcalc.costs.cache import kv_cache

    assert kv_cache(spec, Settings(ctx=1024)).state_bytes == 70 * 64 * 96 * 96 * 2 == 82_575_360


def test_a_plain_expert_has_one_bias_of_its_width():
    # gpt-oss-20b's experts made plain (gated: false): each loses one d × f matrix and f of its bias; 24 layers of 32
    # experts, d = f = 2,880
    gated = yaml.safe_load((ROOT / "model_specs" / "gpt-oss-20b.yaml").read_text())
    plain = copy.deepcopy(gated)
    plain["ffn"]["gated"] = False
    assert param_counts(spec_from_dict(gated, "g")).total - param_counts(spec_from_dict(plain, "p")).total \
        == 24 * 32 * (2880 * 2880 + 2880) == 6_372_311_040


def test_a_projection_layers_bias_is_counted():
    # a projection layer (Nemotron-NAS's linear replacement) with bias: d_model more parameters each
    base = {"name": "p", "family": "llama", "d_model": 512, "n_layers": 4, "vocab_size": 100, "max_context": 4096,
            "ffn": {"kind": "dense", "d_ff": 1024},
            "layer_groups": [{"layers": "0-1", "attention": {"kind": "gqa", "n_heads": 8, "n_kv_heads": 2}},
                             {"layers": "rest", "attention": {"kind": "projection"}}]}
    biased = copy.deepcopy(base)
    biased["layer_groups"][1]["attention"]["bias"] = True
    assert param_counts(spec_from_dict(biased, "b")).total - param_counts(spec_from_dict(base, "p")).total == 2 * 512
