"""The NumPy backend: measured cache bytes and FLOPs equal the analytic ones exactly, and the papers' equalities hold."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest

from conftest import run as cli
from conftest import spec
from kvcalc.attention import GQA, MHA, keys_seen
from kvcalc.backend.attention import GroupedQueryAttention
from kvcalc.backend.causal import SCORE_CHUNK, _tiles, block_tiles, prefill_tiling
from kvcalc.backend.checks import dense_reference, rel_error
from kvcalc.backend.memory import query_block
from kvcalc.backend.ops import ROPE_PIECE, FlopCounter, apply_rope_, rope_span, softmax, softmax_
from kvcalc.backend.runner import RunSettings, run
from kvcalc.spec import ModelSpec

ATTENTION = {
    "mha": {"kind": "mha", "n_heads": 4, "head_dim": 8},
    "gqa": {"kind": "gqa", "n_heads": 6, "n_kv_heads": 2, "head_dim": 8},
    "mqa": {"kind": "mqa", "n_heads": 4, "head_dim": 16},
    "mla": {"kind": "mla", "n_heads": 4, "kv_lora_rank": 16, "q_lora_rank": 12, "qk_nope_head_dim": 8,
            "qk_rope_head_dim": 4, "v_head_dim": 6},
    "mla-lite": {"kind": "mla", "n_heads": 3, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4,
                 "v_head_dim": 10},
}


def tiny(attention: dict, window: int | None = None, n_layers: int = 2) -> ModelSpec:
    groups = [{"layers": "all", "attention": attention}]
    if window:  # a local layer and a global layer
        groups = [{"name": "local", "layers": [0], "attention": attention, "sliding_window": window},
                  {"name": "global", "layers": "rest", "attention": attention}]
    return ModelSpec.model_validate({
        "name": "tiny", "family": "test", "d_model": 32, "n_layers": n_layers, "vocab_size": 50, "max_context": 4096,
        "ffn": {"kind": "dense", "d_ff": 64}, "layer_groups": groups,
    })


def assert_all_match(report):
    mismatches = [(r.quantity, r.predicted, r.measured) for r in report.mismatches]
    assert not mismatches
    assert [c.name for c in report.checks if not c.passed] == []
    assert report.ok
    compared = [r for r in report.rows if r.match is not None]
    assert len(compared) > 10 and all(r.match for r in compared)


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(ATTENTION))
@pytest.mark.parametrize("window", [None, 5])
def test_every_kind_at_tiny_dims(kind, window):
    s = tiny(ATTENTION[kind], window)
    report = run(s, RunSettings(ctx=13, decode=4, batch=2, dtype="float64", layers=2))
    assert_all_match(report)
    names = {c.name for c in report.checks}
    assert "cached decode = full recomputation" in names
    if kind.startswith("mla"):
        assert "MLA absorbed = naive" in names


@pytest.mark.slow
@pytest.mark.parametrize("mla_cache, schedule", [("latent", "naive"), ("latent", "absorbed"), ("expanded", "naive")])
def test_mla_layouts_and_schedules(mla_cache, schedule):
    report = run(tiny(ATTENTION["mla"]), RunSettings(ctx=9, decode=3, dtype="float64", mla_cache=mla_cache, mla_schedule=schedule))
    assert_all_match(report)
    names = {r.quantity.split()[2] for r in report.rows if "shape" in r.quantity}
    assert names == ({"c_kv", "k_rope"} if mla_cache == "latent" else {"k", "v"})


@pytest.mark.slow  # real model dimensions
@pytest.mark.parametrize("name, ctx", [("deepseek-v2", 24), ("llama3-70b", 24), ("gemma3-27b", 24)])
def test_real_per_layer_dims(name, ctx):
    report = run(spec(name), RunSettings(ctx=ctx, decode=2, layers=1))
    assert_all_match(report)


@pytest.mark.slow
def test_window_is_exercised_at_real_gemma_dims():
    # gemma3-1b: window 512; ctx 520 > W, so the local layer holds 512 tokens and attends to at most 512 keys
    report = run(spec("gemma3-1b"), RunSettings(ctx=520, decode=2))
    assert_all_match(report)
    shapes = {r.quantity: r.measured for r in report.rows if r.kind == "shape"}
    assert shapes["layer 0 k shape at the end"] == (1, 512, 1, 256)  # layer 0 is local
    assert shapes["layer 5 k shape at the end"] == (1, 522, 1, 256)  # layer 5 is global


@pytest.mark.slow  # real model dimensions
def test_total_equals_compare(tmp_path):
    out = json.loads(cli("run", "deepseek-v2", "--ctx", "20", "--decode", "3", "--format", "json").stdout)
    total = next(r for r in out["rows"] if "= kvcalc compare" in r["quantity"])
    compare = json.loads(cli("compare", "deepseek-v2", "--ctx", "23", "--kv-dtype", "fp32", "--format", "json").stdout)[0]
    assert total["measured"] == total["predicted"] == compare["kv_cache_bytes"] == 60 * 576 * 23 * 4
    assert out["ok"] is True


@pytest.mark.slow  # real model dimensions
def test_checks_papers_equalities():
    report = run(spec("deepseek-v2"), RunSettings(ctx=16, decode=3, layers=1))
    checks = {c.name: c for c in report.checks}
    assert checks["cached decode = full recomputation"].error < 1e-4
    assert checks["MLA absorbed = naive"].error < 1e-4
    assert checks["RoPE demo: decoupled RoPE keeps absorbed = naive"].error < 1e-4
    assert checks["RoPE demo: RoPE on up-projected keys breaks absorption"].error > 1e-2  # large, not round-off
    assert checks["blocked GQA/MQA equals dense attention"].error < 1e-4


def test_exact_causal_flops_and_dense_reference():
    # The blocked executor does exactly Σ min(i, W) query-key pairs and agrees with the dense masked formula.
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 37, 32))
    for window, block in ((None, 8), (6, 4), (11, 64)):
        layer = GroupedQueryAttention(32, 4, 2, 8, window, np.random.default_rng(1), np.float64, block=block)
        fc = FlopCounter()
        got, _ = layer.prefill(fc, x)
        assert fc.by_component["attn/scores"] == 2 * 2 * keys_seen(37, window) * 4 * 8
        assert rel_error(got, dense_reference(x, layer)) < 1e-12


@pytest.mark.slow
@pytest.mark.parametrize("window", [None, 1, 3, 5, 8, 16])
def test_block_tiles_cover_every_pair_once(window):
    # Every query-key pair of a causal (windowed) prefill lies in exactly one tile, and no masked pair in any.
    for s in range(1, 34):
        for block in (1, 2, 3, 5, 8, 13, 64):
            block = min(block, window) if window else block
            count = np.zeros((s, s), dtype=int)
            for s0 in range(0, s, block):
                e = min(s, s0 + block)
                for t in block_tiles(s0, e, window):
                    for j in range(t.n):
                        row, key = s0 + t.row0 + j * t.step, t.key0 + j * t.step
                        assert row + t.h <= e and key >= 0
                        count[row : row + t.h, key : key + t.w] += 1
            i, k = np.indices((s, s))
            allowed = (k <= i) & ((i - k < window) if window else True)
            assert (count == allowed).all(), (s, block, window)


def test_large_scores_take_the_shifted_softmax():
    # Scores far beyond exp's range need the max shift; the blocked result still equals the dense one.
    rng = np.random.default_rng(4)
    x = 30 * rng.standard_normal((1, 29, 32))
    for window in (None, 7):
        layer = GroupedQueryAttention(32, 4, 2, 8, window, np.random.default_rng(2), np.float64, block=8)
        got, _ = layer.prefill(FlopCounter(), x)
        want = dense_reference(x, layer)
        assert np.isfinite(got).all()
        assert rel_error(got, want) < 1e-12


def test_tile_views_check_their_bounds():
    with pytest.raises(ValueError, match="tiles out of bounds"):
        _tiles(np.zeros((4, 6)), 2, 0, 0, 2, 3, 2, 4)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_softmax_in_place_with_and_without_the_shift(dtype):
    rng = np.random.default_rng(5)
    scores = rng.standard_normal((3, 4, 9)).astype(dtype)
    scores[..., 5:] = -np.inf  # masked pairs
    want = softmax(scores)
    for shift in (True, False):
        p = scores.copy()
        sums = softmax_(p, shift)
        got = p if sums is None else p / sums  # float16 comes back normalised
        assert np.allclose(got, want, rtol=1e-3 if dtype == np.float16 else 1e-6, atol=1e-3 if dtype == np.float16 else 0)
        assert (got[..., 5:] == 0).all()


@pytest.mark.parametrize("name", ["deepseek-v2", "llama3-70b", "gemma3-1b"])
def test_prefill_tiling_bounds_the_band(name):
    # The memory plan and the executor share this tiling: a band near SCORE_CHUNK elements, blocks of 16 to 256.
    model = spec(name)
    group = model.groups[0]
    att = group.attention
    n_kv = att.n_heads if att.kind in ("mha", "mla") else 1 if att.kind == "mqa" else att.n_kv_heads
    g = att.n_heads // n_kv
    window = group.sliding_window
    tiling = prefill_tiling(1, n_kv, g, 4097, window, query_block(window))
    assert tiling.band(1, g) <= SCORE_CHUNK * 1.01
    assert 16 <= tiling.block <= 256


def test_float16_run_within_its_tolerance():
    report = run(tiny(ATTENTION["gqa"]), RunSettings(ctx=10, decode=2, dtype="float16"))
    assert_all_match(report)


# ---------------------------------------------------------------- through the CLI


@pytest.mark.slow
def test_cli_run_table_and_exit_code():
    res = cli("run", "gpt2", "--ctx", "16", "--decode", "2")
    assert "Predicted" in res.stdout and "Measured" in res.stdout and "cached decode = full recomputation" in res.stdout
    assert " NO " not in res.stdout


@pytest.mark.slow
def test_wrong_prediction_fails_the_run(monkeypatch):
    # Break the analytic cache formula (GPT-2 is MHA; the formula lives on its attention kind): the run must notice
    # and exit non-zero, showing the mismatch.
    from kvcalc.attention import Formula

    real = MHA.cache_formula

    def off_by_one(self, layer, layout):
        f = real(self, layer, layout)
        return Formula(f.expression, f.symbols, f.elements + 1, f.components, f.reference)

    monkeypatch.setattr(MHA, "cache_formula", off_by_one)
    res = cli("run", "gpt2", "--ctx", "8", "--decode", "1", ok=False)
    assert res.exit_code == 1
    assert "error: predicted and measured differ" in res.stderr and "bytes after prefill" in res.stderr
    assert "NO" in res.stdout and "Traceback" not in res.stderr


@pytest.mark.slow
def test_wrong_flop_formula_fails_the_run(monkeypatch):
    # Llama 3.2 1B is GQA; its FLOP formula lives on its attention kind.
    real = GQA.flops
    monkeypatch.setattr(GQA, "flops", lambda *a: {k: v + (k == "attn/scores") for k, v in real(*a).items()})
    res = cli("run", "llama3.2-1b", "--ctx", "8", "--decode", "1", ok=False)
    assert res.exit_code == 1 and "attn/scores" in res.stderr


def test_memory_guard_refuses_impossible_run():
    res = cli("run", "llama3-70b", "--layers", "80", "--ctx", "1M", ok=False)
    assert res.exit_code == 1 and "Traceback" not in res.stderr
    assert "error: not running: this run needs about" in res.stderr
    assert "this would fit: --layers 1 --batch 1 --ctx" in res.stderr or "would fit" in res.stderr


def test_max_memory_option():
    res = cli("run", "gpt2", "--ctx", "1M", "--max-memory", "1G", ok=False)
    assert res.exit_code == 1 and "is available under --max-memory 1.00 GiB less the" in res.stderr and "--ctx" in res.stderr
    res = cli("run", "gpt2", "--max-memory", "lots", ok=False)
    assert res.exit_code == 2 and "is not a size" in res.stderr


def test_run_argument_errors():
    res = cli("run", "deepseek-v2", "--mla-cache", "expanded", "--mla-schedule", "absorbed", ok=False)
    assert res.exit_code == 1 and "needs --mla-cache latent" in res.stderr
    res = cli("run", "gpt2", "--layers", "13", ok=False)
    assert res.exit_code == 1 and "has only 12 attention layers" in res.stderr


@pytest.mark.slow  # real model dimensions
@pytest.mark.parametrize("fmt", ["markdown", "latex", "csv", "json"])
def test_run_formats(fmt):
    out = cli("run", "mistral-7b", "--ctx", "8", "--decode", "1", "--format", fmt).stdout
    assert "attn/scores" in out.replace(r"\_", "_")


@pytest.mark.slow  # a real prefill of several blocks
def test_progress_hooks_count_prefill_blocks_and_decode_steps():
    class Recorder:
        def __init__(self):
            self.tasks = {}

        def start(self, name, total):
            self.tasks[name] = [total, 0]

        def advance(self, name):
            self.tasks[name][1] += 1

    hooks = Recorder()
    report = run(spec("gemma3-1b"), RunSettings(ctx=600, decode=3), hooks)
    assert report.ok
    assert hooks.tasks["decode"] == [3, 3]
    total, done = hooks.tasks["prefill"]
    assert total == done and total >= 2  # every prefill block of both layers reported, no more


def test_rope_in_place_by_pieces_is_the_rotation():
    """apply_rope_ rotates by pieces of positions (ROPE_PIECE elements): every position, in every piece and across the
    pieces' seams, gets (x1·cos − x2·sin, x2·cos + x1·sin) at its own angle, the same numbers as one whole-array pass."""
    rng = np.random.default_rng(7)
    t, heads, d = 3 * ROPE_PIECE // (4 * 16) + 5, 4, 16  # positions of 64 elements: pieces of ROPE_PIECE / 64
    x = rng.standard_normal((2, t, heads, d)).astype(np.float32)
    cos, sin = rope_span(3, t, d, 10_000.0, np.float32)
    angles = np.outer(np.arange(3, 3 + t), 1.0 / 10_000.0 ** (np.arange(0, d, 2) / d))  # RoFormer's θ_i
    assert np.allclose(cos, np.cos(angles), atol=1e-6) and np.allclose(sin, np.sin(angles), atol=1e-6)
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    c, s = cos[None, :, None], sin[None, :, None]
    want = np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)
    assert t * heads * d > 2 * ROPE_PIECE  # at least three pieces
    assert np.array_equal(apply_rope_(x.copy(), cos, sin), want)
    assert not cos.flags.writeable and rope_span(3, t, d, 10_000.0, np.float32)[0] is cos  # one table, kept


@pytest.mark.slow
def test_run_warns_past_the_trained_maximum_and_when_the_whole_cache_is_not_measured(tmp_path):
    # found by an audit: run said nothing where compare warns, and left the whole-model check '–' without a word.
    # A tiny model of two groups (max_context 16): ctx 16 + 1 decode step passes it; --layers 1 runs one group only
    text = """\
name: two-groups
family: test
max_context: 16
d_model: 32
n_layers: 2
vocab_size: 64
ffn: {kind: dense, d_ff: 64}
layer_groups:
  - layers: [0]
    attention: {kind: mha, n_heads: 2, head_dim: 16}
  - layers: [1]
    sliding_window: 4
    attention: {kind: mha, n_heads: 2, head_dim: 16}
"""
    path = tmp_path / "two.yaml"
    path.write_text(text)
    res = cli("run", str(path), "--ctx", "16", "--decode", "1", "-q")
    assert "warning: two-groups: ctx 16 + 1 decode step (17) exceeds its trained maximum of 16 tokens" in res.stderr
    assert "ctx 16 + 1 decode step, batch 1" in res.stdout and "decode steps" not in res.stdout
    assert "predicted, not measured" not in res.stderr
    res = cli("run", str(path), "--ctx", "8", "--decode", "1", "--layers", "1", "-q")
    assert "leave a layer group out, so the whole model's cache is predicted, not measured" in res.stderr
    assert "trained maximum" not in res.stderr
    # csv and json carry the flag instead of the warning (README: --ctx), true only past the maximum
    for ctx, over in (("16", True), ("8", False)):
        res = cli("run", str(path), "--ctx", ctx, "--decode", "1", "-q", "-f", "json")
        assert json.loads(res.stdout)["exceeds_max_context"] is over and res.stderr == ""
        res = cli("run", str(path), "--ctx", ctx, "--decode", "1", "-q", "-f", "csv")
        rows = list(csv.DictReader(io.StringIO(res.stdout)))
        assert {r["exceeds_max_context"] for r in rows if r["table"] == "results"} == {str(over).lower()}


@pytest.mark.slow
def test_run_warns_when_a_constant_state_group_is_left_out():
    # an audit: minimax-m1 --layers 1 runs one softmax layer; its 70 lightning layers' state was predicted, not
    # measured, without the warning the cache gets
    res = cli("run", "minimax-m1", "--ctx", "8", "--decode", "1", "--layers", "1", "-q")
    assert ("leave a layer group out, so the whole model's constant state is predicted, not measured"
            in " ".join(res.stderr.split()))
    res = cli("run", "minimax-m1", "--ctx", "8", "--decode", "1", "--layers", "2", "-q")
    assert "predicted, not measured" not in res.stderr


@pytest.mark.slow  # tracemalloc over a 16-layer run: about 3 s
def test_a_windowed_cache_holds_only_its_window_at_batch_1(tmp_path):
    # an audit: at batch 1 the last W positions of a [1, t, ...] cache are a contiguous slice, which
    # np.ascontiguousarray returned as a view: each windowed layer kept its whole prompt's K/V alive (16 layers of
    # W = 4 at ctx 64: 78.3 MiB traced against the plan's 20.3) while nbytes reported the window
    import tracemalloc

    from kvcalc.backend.attention import _keep
    from kvcalc.backend.ops import held
    from kvcalc.backend.recurrent import causal_conv
    from kvcalc.spec import load_spec

    prompt = np.zeros((1, 64, 2, 8))
    kept = _keep(prompt, 4)
    assert kept.base is None and kept.nbytes == 4 * 2 * 8 * 8 and np.shares_memory(kept, prompt) is False
    whole = np.zeros((1, 64, 16)).reshape(1, 64, 2, 8)  # a reshape of all its memory is kept as it is, not copied
    assert held(whole) is whole
    # a convolution of kernel 2 keeps one input: not the padded prompt it slices
    _, state = causal_conv(FlopCounter(), "conv", np.ones((1, 64, 3)), np.zeros((1, 3, 1)), np.ones((3, 2)), None)
    assert state.base is None and state.shape == (1, 3, 1)
    path = tmp_path / "w.yaml"
    path.write_text("name: wide-windows\nfamily: test\nd_model: 8\nn_layers: 16\nvocab_size: 100\nmax_context: 100000\n"
                    "ffn: {kind: dense, d_ff: 16}\nlayer_groups:\n  - layers: all\n    attention: {kind: mha, n_heads: 64, "
                    "head_dim: 64}\n    sliding_window: 4\n")
    tracemalloc.start()
    try:
        report = run(load_spec(path), RunSettings(ctx=64, decode=1, batch=1, layers=16, dtype="float32", threads=1))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert report.ok and peak <= report.predicted_peak_bytes, (peak, report.predicted_peak_bytes)
