"""Behaviour a third mutation review found no test pinned, each by hand: the output gate's and the key bias's widths
when values are narrower than keys, a constant state rounded to bytes once for the batch, and a lookup table read at
most whole however many tokens a step decodes."""

from __future__ import annotations

import json

from conftest import REFERENCE, ROOT, run
from kvcalc.costs.params import param_counts
from kvcalc.costs.traffic import _lookup_rows
from kvcalc.registry import load_path
from kvcalc.settings import Settings
from kvcalc.spec import spec_from_dict


def _gated(**extra) -> dict:
    """A 2-layer GQA model of 8 query heads of keys 192 and values 128 wide, 2 K/V heads, with an output gate."""
    return {"name": "gate-dv", "family": "qwen3_next", "d_model": 1024, "n_layers": 2, "vocab_size": 1000,
            "max_context": 8192, "ffn": {"kind": "dense", "d_ff": 2048},
            "layer_groups": [{"attention": {"kind": "gqa", "n_heads": 8, "n_kv_heads": 2, "head_dim": 192,
                                            "v_head_dim": 128, "output_gate": True, **extra}}]}


def test_the_output_gate_is_as_wide_as_the_attention_output():
    # a layer: W_Q 1,024 · 8·192, W_K 1,024 · 2·192, W_V 1,024 · 2·128, W_O 8·128 · 1,024, and the gate, which
    # multiplies the output elementwise, 1,024 · 8·128 (not 8·192); the gated FFN 3 · 1,024 · 2,048; 2 norms of 1,024;
    # then the untied embedding and head, 2 · 1,000 · 1,024, and the final norm
    layer = 1024 * (1536 + 384 + 256) + 1024 * 1024 + 1024 * 1024 + 3 * 1024 * 2048 + 2 * 1024
    total = 2 * layer + 2 * 1000 * 1024 + 1024
    assert param_counts(spec_from_dict(_gated(), "t")).total == total == 23_286_784


def test_the_key_bias_is_as_wide_as_the_keys():
    # with qkv_bias: b_Q 8·192, b_K 2·192 (keys are d_h wide), b_V 2·128 and the gate's 8·128, a layer
    biases = 1536 + 384 + 256 + 1024
    assert param_counts(spec_from_dict(_gated(qkv_bias=True), "t")).total == 23_286_784 + 2 * biases == 23_293_184


def test_a_constant_state_rounds_to_bytes_once_for_the_batch():
    # one linear-attention layer of 1,001 state elements in int4, 2 sequences: ⌈2 · 1,001 · 4 / 8⌉ = 1,001 bytes, not
    # 2 · ⌈1,001 · 4 / 8⌉ = 1,002
    from kvcalc.costs.cache import kv_cache

    spec = spec_from_dict({
        "name": "lin-odd", "family": "llama", "d_model": 1024, "n_layers": 2, "vocab_size": 1000, "max_context": 65536,
        "ffn": {"kind": "dense", "d_ff": 2048},
        "layer_groups": [{"layers": "0", "attention": {"kind": "linear", "state_elements": 1001}},
                         {"layers": "rest", "attention": {"kind": "gqa", "n_heads": 8, "n_kv_heads": 2}}]}, "t")
    assert kv_cache(spec, Settings(ctx=1024, batch=2, state_dtype="int4")).state_bytes == 1001


def test_a_gpus_states_round_to_bytes_once():
    # a review: one GPU's states rounded each layer's up (16 · ⌈1,000,001 · 4 / 8⌉ = 8,000,016) beside a state_bytes of
    # ⌈16 · 1,000,001 · 4 / 8⌉ = 8,000,008 (README conventions: bytes on totals); at batch 3, ⌈48 · 1,000,001 / 2⌉
    from kvcalc.costs.cache import kv_cache
    from kvcalc.costs.parallel import per_gpu

    spec = spec_from_dict({
        "name": "states-odd", "family": "llama", "d_model": 2048, "n_layers": 16, "vocab_size": 1000,
        "max_context": 131072, "ffn": {"kind": "dense", "d_ff": 4096},
        "layer_groups": [{"layers": "all", "attention": {"kind": "linear", "state_elements": 1_000_001}}]}, "t")
    for batch, expected in ((1, 8_000_008), (3, 24_000_024)):
        s = Settings(ctx=4096, batch=batch, state_dtype="int4")
        assert per_gpu(spec, s).state_bytes == kv_cache(spec, s).state_bytes == expected


def test_explain_does_not_write_a_false_sum_of_rounded_groups(tmp_path):
    # a review: 7 layers of 1,000,001 state elements and 7 of 333 in int4 on a GPU: ⌈7,000,007 / 2⌉ = 3,500,004 and
    # ⌈2,331 / 2⌉ = 1,166 by group, ⌈7,002,338 / 2⌉ = 3,501,169 on the GPU, which --explain wrote
    # '3,500,004 + 1,166 = 3,501,169'
    path = tmp_path / "odd3.yaml"
    path.write_text("name: odd3\nfamily: test\nsource: test\nd_model: 256\nn_layers: 15\nvocab_size: 1000\n"
                    "max_context: 131072\nffn: {kind: dense, d_ff: 512}\nlayer_groups:\n"
                    "- layers: 0-6\n  attention: {kind: linear, state_elements: 1000001}\n"
                    "- layers: 7-13\n  attention: {kind: linear, state_elements: 333}\n"
                    "- layers: rest\n  attention: {kind: gqa, n_heads: 4, n_kv_heads: 2, head_dim: 128}\n")
    out = run("show", str(path), "--state-dtype", "int4", "--tp", "2", "--explain").stdout
    assert ("constant states per GPU: 3,501,169 bytes (the groups' 3,500,004 + 1,166, each rounded up to whole bytes, "
            "the total rounded once)") in out
    assert "3,500,004 + 1,166 = " not in out


def test_a_lookup_table_is_read_at_most_whole():
    # Gemma 3n E2B: the input embedding, 262,400 rows of 2,048, and the per-layer table, 262,144 rows of 30 · 256 =
    # 7,680 values; a decode step of b tokens reads min(rows, b) of each. Past 262,400 tokens both are read whole
    spec = load_path(REFERENCE / "configs-gemma3n" / "gemma-3n-e2b.json").spec
    whole = 262_400 * 2048 + 262_144 * 7680
    assert _lookup_rows(spec, 1, 1) == 2048 + 7680
    assert _lookup_rows(spec, 262_144, 1) == 262_144 * 2048 + 262_144 * 7680
    assert _lookup_rows(spec, 262_400, 1) == _lookup_rows(spec, 524_288, 1) == _lookup_rows(spec, 1 << 20, 1) == whole
    # and a decode step's weights: the same at batch 524,288 as at 262,400, 2 bytes a value more at 262,144 rows fewer
    from kvcalc.costs.traffic import decode_weights

    at = [decode_weights(spec, Settings(ctx=1, batch=b)) for b in (262_144, 262_400, 524_288)]
    assert at[1] == at[2] and at[1] - at[0] == (262_400 - 262_144) * 2048 * 2


def test_learned_positions_are_read_once_for_the_batch():
    # a review: a decode step of b sequences read b rows of GPT-2's wpe, though every sequence of kvcalc's batch is
    # at the same position (one row), and a prefill of b · ctx tokens min(1,024, b · ctx) rows, not min(1,024, ctx).
    # GPT-2: d 768, bf16: at ctx 100 and batch 64, a step reads 64 wte rows and 1 wpe row
    from kvcalc.costs.traffic import decode_weights, prefill_bytes

    gpt2 = load_path(ROOT / "model_specs" / "gpt2.yaml").spec
    one, many = (decode_weights(gpt2, Settings(ctx=100, batch=b)) for b in (1, 64))
    assert many - one == 63 * 768 * 2  # the 63 more wte rows alone
    # a prefill of 8 sequences of 100 tokens: 800 wte rows (at most 50,257), 100 wpe rows
    p1, p8 = (prefill_bytes(gpt2, Settings(ctx=100, batch=b))["weights"] for b in (1, 8))
    assert p8 - p1 == 700 * 768 * 2
    assert _lookup_rows(gpt2, 800, 100) == (800 + 100) * 768


def test_show_says_its_cells_of_a_part_byte_are_rounded(tmp_path):
    # an exactness review: an MLA latent of 255 + 32 = 287 elements in int4 is 143.5 bytes a token and layer; show's
    # cells said 144 B and 143,644 B a layer (⌈1,001 · 143.5⌉) beside a total of 287,287 B (rounded once): now a note
    path = tmp_path / "mla-odd.yaml"
    path.write_text("name: mla-odd\nfamily: deepseek_v3\nd_model: 1024\nn_layers: 2\nvocab_size: 1000\nmax_context: 65536\n"
                    "ffn: {kind: dense, d_ff: 2048}\nlayer_groups:\n  - attention: {kind: mla, n_heads: 8, kv_lora_rank: 255, "
                    "qk_nope_head_dim: 64, qk_rope_head_dim: 32, v_head_dim: 64}\n")
    res = run("show", str(path), "--ctx", "1001", "--kv-dtype", "int4", "-f", "json")
    group = json.loads(res.stdout)["groups"][0]
    assert (group["bytes_per_token_per_layer"], group["bytes_per_layer"], group["bytes"]) == (144, 143_644, 287_287)
    assert -(-2 * 1001 * 287 * 4 // 8) == 287_287 and -(-1001 * 287 * 4 // 8) == 143_644
    assert ("note: mla-odd: in int4 a layer's 287 elements a token take 143.5 bytes: the per token·layer and per-layer "
            "cells are rounded up to whole bytes, each group's total and the model's once") in run(
                "show", str(path), "--ctx", "1001", "--kv-dtype", "int4").stderr
    assert "rounded up" not in run("show", str(path), "--ctx", "1001", "--kv-dtype", "fp8").stderr
    assert "rounded up" not in run("show", "llama3-8b", "--ctx", "4k", "--kv-dtype", "int4").stderr  # 1,024 elements
