"""`kvcalc run`'s self-checks can fail (found by an audit): a predicted tensor the run does not hold, or a held one
nothing predicts, is a mismatch; DeepSeek Sparse Attention's selections are checked against the indexer's scores
written out densely, apart from the run's scoring and selection code."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import run as cli
from kvcalc.attention.gqa import Heads
from kvcalc.attention.mamba import Mamba
from kvcalc.backend.attention import LatentAttention
from kvcalc.backend.ops import FlopCounter
from kvcalc.backend.runner import Row, RunSettings, run
from kvcalc.export import spec_yaml
from kvcalc.spec import ModelSpec

GQA_ATT = {"kind": "gqa", "n_heads": 4, "n_kv_heads": 2, "head_dim": 8}
MAMBA_ATT = {"kind": "mamba", "mamba_d_state": 8, "mamba_d_conv": 4, "mamba_expand": 2}
DSA_ATT = {"kind": "mla", "n_heads": 4, "kv_lora_rank": 16, "q_lora_rank": 12, "qk_nope_head_dim": 8,
           "qk_rope_head_dim": 4, "v_head_dim": 6, "index_n_heads": 3, "index_head_dim": 8, "index_topk": 10}
DENSE = "indexer top-k = a dense reference's top-k"
TIE = "indexer top-k: the run's = the recomputation's"


def tiny(*groups: dict, d_model: int = 32) -> ModelSpec:
    """A model of the given layer groups, one layer each (or every layer, for a single group of two)."""
    if len(groups) == 1:
        groups = ({"layers": "all", **groups[0]},)
    else:
        groups = tuple({"layers": [i], **g} for i, g in enumerate(groups))
    return ModelSpec.model_validate({
        "name": "tiny", "family": "test", "d_model": d_model, "n_layers": 2, "vocab_size": 50, "max_context": 4096,
        "ffn": {"kind": "dense", "d_ff": 64}, "layer_groups": list(groups)})


def spec_file(tmp_path, spec: ModelSpec) -> str:
    path = tmp_path / "tiny.yaml"
    path.write_text(spec_yaml(spec))
    return str(path)


def failed(report) -> list[str]:
    return [c.name for c in report.checks if not c.passed]


# ---------------------------------------------------------------- rows with one side missing


def test_a_row_with_one_side_missing_is_a_mismatch_unless_nothing_is_compared():
    assert Row("cache", "layer 0 k shape", (1, 2), (1, 2), "shape").match is True
    assert Row("cache", "layer 0 k_scale shape", (1, 2), None, "shape").match is False
    assert Row("cache", "layer 0 v shape", None, (1, 2), "shape").match is False
    assert Row("time", "prefill wall time", None, 0.5, "seconds", compared=False).match is None


@pytest.mark.slow
def test_a_predicted_tensor_the_run_does_not_hold_fails_the_run(tmp_path, monkeypatch):
    # the audit's missing_tensor.py: cache_shapes predicts a k_scale the run never holds; its rows showed "–", exit 0
    real = Heads.cache_shapes

    def with_scale(self, layer, batch, held, layout):
        return {**real(self, layer, batch, held, layout), "k_scale": (batch, held, self.n_kv, 1)}

    monkeypatch.setattr(Heads, "cache_shapes", with_scale)
    report = run(tiny({"attention": GQA_ATT}), RunSettings(ctx=12, decode=2))
    assert not report.ok
    assert [(r.quantity, r.predicted, r.measured) for r in report.mismatches] == [
        ("layer 0 k_scale shape after prefill", (1, 12, 2, 1), None),
        ("layer 0 k_scale shape at the end", (1, 14, 2, 1), None)]
    res = cli("run", spec_file(tmp_path, tiny({"attention": GQA_ATT})), "--ctx", "12", "--decode", "2", "-q", ok=False)
    assert res.exit_code == 1
    assert "layer 0 k_scale shape after prefill: predicted (1, 12, 2, 1), measured None" in res.stderr


def test_a_held_tensor_nothing_predicts_fails_the_run(monkeypatch):
    # the values dropped from the prediction: the bytes still match (they come from the cache formula), the shapes
    # do not, since the run holds a v nothing predicts
    real = Heads.cache_shapes
    monkeypatch.setattr(Heads, "cache_shapes", lambda self, *a: {n: s for n, s in real(self, *a).items() if n != "v"})
    report = run(tiny({"attention": GQA_ATT}), RunSettings(ctx=12, decode=2))
    assert [(r.quantity, r.predicted, r.measured) for r in report.mismatches] == [
        ("layer 0 v shape after prefill", None, (1, 12, 2, 8)), ("layer 0 v shape at the end", None, (1, 14, 2, 8))]
    assert not report.ok


def test_a_state_tensor_missing_or_unpredicted_fails_the_run(monkeypatch):
    real = Mamba.state_shapes

    def renamed(self, layer, batch):
        shapes = real(self, layer, batch)
        return {"ssm": shapes["ssm"], "conv_state": shapes["conv"]}

    monkeypatch.setattr(Mamba, "state_shapes", renamed)
    report = run(tiny({"attention": MAMBA_ATT}, {"attention": GQA_ATT}, d_model=64), RunSettings(ctx=8, decode=1))
    assert not report.ok
    assert sorted(r.quantity for r in report.mismatches) == [
        "layer 0 conv shape after prefill", "layer 0 conv shape at the end",
        "layer 0 conv_state shape after prefill", "layer 0 conv_state shape at the end"]


@pytest.mark.slow
@pytest.mark.parametrize("first, second, total", [
    ({"attention": GQA_ATT, "sliding_window": 4}, {"attention": GQA_ATT}, "KV cache, all 2 layers"),
    ({"attention": GQA_ATT}, {"attention": MAMBA_ATT}, "constant state, all 2 layers"),
])
def test_timings_and_the_totals_of_a_left_out_group_stay_not_compared(first, second, total):
    # --layers 1 runs the first group only: the whole model's cache (or state) is predicted, not measured
    report = run(tiny(first, second, d_model=64), RunSettings(ctx=8, decode=2, layers=1))
    assert report.ok and report.mismatches == []
    not_compared = [r.quantity for r in report.rows if r.match is None]
    assert [q for q in not_compared if not q.startswith(("prefill ", "decode "))] == [
        next(r.quantity for r in report.rows if r.quantity.startswith(total))]
    assert {r.section for r in report.rows if r.match is None and r.section != "time"} == {"cache" if "KV" in total
                                                                                           else "state"}
    assert len([q for q in not_compared if q.startswith(("prefill ", "decode "))]) == 5  # the timing rows
    full = run(tiny(first, second, d_model=64), RunSettings(ctx=8, decode=2, layers=2))
    assert full.ok and all(r.match for r in full.rows if r.section != "time")


# ---------------------------------------------------------------- DeepSeek Sparse Attention against a dense reference


def dsa(window: int | None = None) -> ModelSpec:
    return tiny({"attention": DSA_ATT, **({"sliding_window": window} if window else {})}, d_model=64)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("window", [None, 16])
def test_the_run_s_selections_are_the_dense_reference_s_top_k(dtype, window):
    report = run(dsa(window), RunSettings(ctx=40, decode=3, batch=2, dtype=dtype, layers=2))
    assert report.ok and failed(report) == []
    check = next(c for c in report.checks if c.name == DENSE)
    # top-k 10 bites for the queries at positions 10..42 of 43, in each of the 2 layers
    assert check.detail.startswith("66 queries' selections vs ") and check.error <= check.tolerance


def test_no_dense_reference_where_the_top_k_never_bites():
    # a window of 8 <= top-k 10: every query attends every key it sees, and there is no selection to check
    report = run(dsa(8), RunSettings(ctx=40, decode=3, dtype="float64"))
    assert report.ok and DENSE not in {c.name for c in report.checks}


@pytest.mark.slow
def test_a_bottom_k_fails_the_dense_reference(tmp_path, monkeypatch):
    # the audit's inverted_topk.py: the k lowest-scored visible keys instead of the k highest. The run and its
    # recomputations share top_keys and the index scoring, so only the dense reference sees it
    import kvcalc.backend.attention as attention

    def bottom_keys(band, a0, k):
        return np.argpartition(np.where(np.isfinite(band), band, np.inf), k - 1, axis=-1)[..., :k] + a0

    monkeypatch.setattr(attention, "top_keys", bottom_keys)
    report = run(dsa(), RunSettings(ctx=40, decode=4, dtype="float32"))
    assert failed(report) == [DENSE] and not report.ok
    assert next(c for c in report.checks if c.name == DENSE).error > 0.1
    res = cli("run", spec_file(tmp_path, dsa()), "--ctx", "40", "--decode", "4", "-q", "-f", "json", ok=False)
    assert res.exit_code == 1 and json.loads(res.stdout)["ok"] is False


def test_a_scoring_error_fails_the_dense_reference(monkeypatch):
    # index keys without their LayerNorm (Indexer.k_norm): the FLOPs, the cache and every self-consistency check
    # still agree, since the run and its recomputations score alike
    monkeypatch.setattr(LatentAttention, "_index_keys", lambda self, fc, x: fc.matmul("attn/index", x, self.wik))
    report = run(dsa(), RunSettings(ctx=40, decode=3, dtype="float64"))
    assert report.mismatches == [] and failed(report) == [DENSE]


def test_selection_shortfall_flags_missing_duplicate_and_near_tie_selections():
    from kvcalc.backend.checks import selection_shortfall

    layer = LatentAttention(32, 4, 16, 12, 8, 4, 6, None, np.random.default_rng(0), np.float64, "latent", 16,
                            index=(2, 4, 6))
    layer.chosen = {}
    x = np.random.default_rng(1).standard_normal((3, 16, 32))
    layer.prefill(FlopCounter(), x)
    chosen = layer.chosen
    assert selection_shortfall(layer, x, chosen) == (0.0, 10)  # positions 6..15
    assert selection_shortfall(layer, x, {t: c for t, c in chosen.items() if t != 9})[0] == float("inf")
    twice = {**chosen, 12: np.concatenate([chosen[12][:, :1], chosen[12][:, :-1]], axis=1)}
    assert selection_shortfall(layer, x, twice)[0] == float("inf")
    future = {**chosen, 12: np.concatenate([chosen[12][:, :-1], np.full((3, 1), 13)], axis=1)}
    assert selection_shortfall(layer, x, future)[0] == float("inf")
    order = {t: c[:, ::-1] for t, c in chosen.items()}  # the same sets in another order
    assert selection_shortfall(layer, x, order) == (0.0, 10)


def test_report_rates_have_three_significant_digits_as_every_rate():
    # an audit: run's GFLOP/s were written with one decimal (7.6, two digits; 0.04 one), unlike tokens/s
    from kvcalc.backend.report import _text

    assert [_text(v, "rate") for v in (7.6, 0.04123, 65.25, 999.4, 1234.5, 123456.0)] == \
        ["7.60", "0.0412", "65.2", "999", "1,234", "123,456"]


def test_mla_with_chunked_attention_is_refused_not_blamed_on_the_prediction(tmp_path):
    # a backend review: LatentAttention has no chunk mask, so run measured the whole context and printed 16 'NO' rows
    # ("predicted and measured differ") for a layout the analytic side models correctly
    from conftest import run

    path = tmp_path / "mla-chunk.yaml"
    path.write_text("name: tiny-mla-chunk\nfamily: deepseek\nd_model: 64\nn_layers: 2\nvocab_size: 100\n"
                    "max_context: 1024\nffn: {kind: dense, d_ff: 128}\nlayer_groups:\n  - attention_chunk_size: 4\n"
                    "    attention: {kind: mla, n_heads: 4, kv_lora_rank: 32, qk_nope_head_dim: 16, qk_rope_head_dim: 8, "
                    "v_head_dim: 16}\n")
    res = run("run", str(path), "--ctx", "9", "--decode", "2", ok=False)
    assert res.exit_code == 1 and ("kvcalc run: tiny-mla-chunk: layer group 'all layers' is MLA with chunked attention "
                                   "(attention_chunk_size 4), which the NumPy backend does not run") in res.stderr


def test_the_dense_check_catches_a_wrong_early_row_of_a_tiled_prefill(monkeypatch):
    # a backend review: doubling the first rows of a long prefill passed every check of a real run. The dense check's
    # tiled case (40 tokens, scores capped, 2 threads) fails on it; the short case alone (23 tokens) would not
    from types import SimpleNamespace

    from kvcalc.backend import causal
    from kvcalc.backend.checks import gqa_equals_mha

    settings = SimpleNamespace(dtype="float64", seed=0)
    assert gqa_equals_mha(settings, 1e-10).passed
    real = causal._attend_block

    def doubled(fc, q, kT, vT, out, s0, *args, **kwargs):
        real(fc, q, kT, vT, out, s0, *args, **kwargs)
        if s0 == 0 and kT.shape[-1] > 30:  # the first query block of a prompt longer than the short case's
            out[..., :4, :] *= 2

    monkeypatch.setattr(causal, "_attend_block", doubled)
    check = gqa_equals_mha(settings, 1e-10)
    assert not check.passed and check.error > 0.1
