"""`kvcalc run` on layers with a parallel mixer (Falcon-H1: GQA attention and a Mamba-2 mixer on the same normed
input, outputs summed). The report measures the KV cache and the mixer's state apart, each equal to kvcalc's
figures; the FLOPs of both parts; the mixer's and the stack's numerical checks; the memory plan counts the mixer;
a wrong analytic formula for the mixer fails the run."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import REFERENCE, ConfigFolder
from conftest import run as cli
from kvcalc.attention.mamba import Mamba2
from kvcalc.backend.memory import plan
from kvcalc.backend.ops import FlopCounter
from kvcalc.backend.parallel import ParallelMixer, mixer_group, parts, state_part
from kvcalc.backend.runner import RunSettings, build_layer, run
from kvcalc.spec import ModelSpec

CONFIGS = ConfigFolder("configs-extra-6")
F05 = "falcon-h1-0.5b-base"
# Falcon-H1-0.5B shrunk: d 64; 8 query heads, 2 KV heads of 16; Mamba-2 of 4 heads × 16 (d_inner 64), 1 group of
# state 8, conv kernel 4 (the config's), no gated norm (mamba_rms_norm false)
TINY = {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 64, "vocab_size": 100, "head_dim": 16,
        "mamba_d_ssm": 64, "mamba_n_heads": 4, "mamba_d_head": 16, "mamba_d_state": 8}
KV_PER_TOKEN = 2 * 2 * 16  # K and V · 2 KV heads · head_dim 16
CONV_DIM = 64 + 2 * 1 * 8  # d_inner + 2·G·N
STATE = 4 * 16 * 8 + 3 * CONV_DIM  # H·P·N + (K − 1)·conv_dim = 752 elements per sequence and layer


def tiny_spec(**changes):
    return CONFIGS.imported({**CONFIGS.config(F05), **TINY, **changes}, "tiny-falcon-h1")


def tiny_file(tmp_path, **changes) -> str:
    path = tmp_path / "falcon.json"
    path.write_text(json.dumps({**CONFIGS.config(F05), **TINY, **changes}))
    return str(path)


def rows(report) -> dict:
    return {r.quantity: r for r in report.rows}


@pytest.mark.slow
@pytest.mark.parametrize("dtype, itemsize", [("float64", 8), ("float32", 4)])
def test_run_measures_kv_cache_state_and_flops_of_both_parts(dtype, itemsize):
    report = run(tiny_spec(), RunSettings(ctx=16, decode=3, batch=2, dtype=dtype))
    assert [(r.quantity, r.predicted, r.measured) for r in report.mismatches] == []
    assert [c.name for c in report.checks if not c.passed] == []
    got = rows(report)
    # the KV cache: the attention's k and v only, growing by a token a step
    assert got["layer 0 k shape after prefill"].measured == (2, 16, 2, 16)
    assert got["layer 0 v shape at the end"].measured == (2, 19, 2, 16)
    assert got["layer 0 bytes after prefill"].measured == 2 * 16 * KV_PER_TOKEN * itemsize
    assert got["layer 0 bytes after decode step 3"].measured == 2 * 19 * KV_PER_TOKEN * itemsize
    assert got["KV cache, all 2 layers, at ctx 19 (= kvcalc compare)"].measured == 2 * 2 * 19 * KV_PER_TOKEN * itemsize
    # the mixer's state, named apart, the same size at every step
    assert got["layer 0 mixer/ssm shape after prefill"].measured == (2, 4, 16, 8)
    assert got["layer 0 mixer/conv shape at the end"].measured == (2, CONV_DIM, 3)
    for when in ("after prefill", "after decode step 1", "after decode step 3"):
        assert got[f"layer 0 state bytes {when}"].measured == 2 * STATE * itemsize
    total = next(r for q, r in got.items() if q.startswith("constant state, all 2 layers"))
    assert total.measured == 2 * 2 * STATE * itemsize
    # FLOPs of both parts: in_proj 2·d·(d_inner + conv_dim + H) per token, q 2·d·(8·16) per token
    assert got["prefill mamba/in_proj"].measured == 2 * 2 * 16 * 64 * (64 + CONV_DIM + 4)
    assert got["prefill attn/q"].measured == 2 * 2 * 16 * 64 * 8 * 16
    assert got["3 decode steps mamba/in_proj"].measured == 2 * 2 * 3 * 64 * (64 + CONV_DIM + 4)
    names = {c.name for c in report.checks}
    assert {"cached decode = full recomputation", "mamba2: recurrent form = parallel form"} <= names


def test_cli_run_of_a_falcon_h1_config(tmp_path):
    res = cli("run", tiny_file(tmp_path), "--ctx", "16", "--decode", "2", "--layers", "2", "-q", "-f", "json")
    out = json.loads(res.stdout)
    assert out["ok"] and out["layers"] == [0, 1] and "Traceback" not in res.stderr
    assert all(r.get("match") is not False for r in out["rows"])
    sections = {r["quantity"]: r["section"] for r in out["rows"]}
    assert sections["layer 1 k shape at the end"] == "cache" and sections["layer 1 mixer/ssm shape at the end"] == "state"


def test_mla_and_a_window_beside_a_mixer():
    # not Falcon-H1's, but any attention kind may take a parallel mixer: MLA (its absorbed = naive check runs on the
    # wrapped layer) and windowed GQA, each beside Mamba-2
    mamba = {"kind": "mamba2", "mamba_num_heads": 4, "mamba_head_dim": 8, "ssm_state_size": 8, "n_groups": 2,
             "conv_kernel": 4}
    mla = {"kind": "mla", "n_heads": 4, "kv_lora_rank": 16, "q_lora_rank": 12, "qk_nope_head_dim": 8,
           "qk_rope_head_dim": 4, "v_head_dim": 6}
    gqa = {"kind": "gqa", "n_heads": 4, "n_kv_heads": 2, "head_dim": 8}
    groups = [{"layers": [0], "attention": mla, "parallel_mixer": mamba},
              {"layers": [1], "attention": gqa, "sliding_window": 8, "parallel_mixer": mamba}]
    spec = ModelSpec.model_validate({"name": "tiny-parallel", "family": "test", "d_model": 32, "n_layers": 2,
                                     "vocab_size": 50, "max_context": 4096, "ffn": {"kind": "dense", "d_ff": 32},
                                     "layer_groups": groups})
    report = run(spec, RunSettings(ctx=20, decode=3, dtype="float64"))
    assert [(r.quantity, r.predicted, r.measured) for r in report.mismatches] == []
    assert [c.name for c in report.checks if not c.passed] == []
    assert {"MLA absorbed = naive", "mamba2: recurrent form = parallel form"} <= {c.name for c in report.checks}
    got = rows(report)
    assert got["layer 0 c_kv shape at the end"].measured == (1, 23, 16)
    assert got["layer 1 k shape at the end"].measured == (1, 8, 2, 8)  # the window's 8 tokens
    assert got["layer 1 mixer/ssm shape at the end"].measured == (1, 4, 8, 8)


def test_parallel_layer_is_the_sum_of_its_parts():
    # the wrapper runs both parts on the same input: its output is their sum, its cache theirs (the mixer's renamed)
    spec = tiny_spec()
    group = spec.groups[0]
    s = RunSettings(dtype="float64")
    layer = build_layer(group, np.random.default_rng(3), s)
    assert isinstance(layer, ParallelMixer) and state_part(layer) is layer.mixer
    x = np.random.default_rng(4).standard_normal((1, 10, 64))
    y, cache = layer.prefill(FlopCounter(), x[:, :9])
    a, own = layer.attention.prefill(FlopCounter(), x[:, :9])
    m, state = layer.mixer.prefill(FlopCounter(), x[:, :9])
    assert np.array_equal(y, a + m)
    assert sorted(cache.tensors) == ["k", "mixer/conv", "mixer/ssm", "v"]
    assert {n: t.shape for n, t in parts(cache)[1].tensors.items()} == {n: t.shape for n, t in state.tensors.items()}
    fc = FlopCounter()
    y, cache = layer.decode(fc, x[:, 9:], cache)
    a, _ = layer.attention.decode(FlopCounter(), x[:, 9:], own)
    m, _ = layer.mixer.decode(FlopCounter(), x[:, 9:], state)
    assert np.array_equal(y, a + m) and cache.seen == 10 and cache.tensors["k"].shape[1] == 10
    assert {c.split("/")[0] for c in fc.by_component} == {"attn", "mamba"}


def test_memory_plan_counts_the_mixer():
    # beside the attention's plan: the mixer's matrices (in_proj 64 × (d_inner + conv_dim + H), conv1d conv_dim × K,
    # out_proj d_inner × 64), its state three times (after the prefill, at the end, and the decode step's new one
    # beside the old), and a prefill's activations at least the mixer's own beside the attention's output
    spec = tiny_spec()
    data = spec.model_dump(exclude_none=True)
    del data["layer_groups"][0]["parallel_mixer"]
    with_mixer = plan(spec, [0], 16, 3, 2, 8, "latent")
    without = plan(ModelSpec.model_validate(data), [0], 16, 3, 2, 8, "latent")
    assert with_mixer.weights - without.weights == (64 * (64 + CONV_DIM + 4) + CONV_DIM * 4 + 64 * 64) * 8
    assert with_mixer.cache - without.cache == 3 * 2 * STATE * 8
    assert with_mixer.activations >= without.activations
    assert mixer_group(spec.groups[0]).attention.kind == "mamba2"


@pytest.mark.slow
@pytest.mark.parametrize("attr", ["state_formula", "flops"])
def test_wrong_mixer_formula_fails_the_run(tmp_path, monkeypatch, attr):
    from kvcalc.attention import Formula

    real = getattr(Mamba2, attr)
    if attr == "flops":
        wrong = lambda *a: {k: v + 2 for k, v in real(*a).items()}  # noqa: E731
    else:
        def wrong(self, layer):
            f = real(self, layer)
            return Formula(f.expression, f.symbols, f.elements + 1, f.components, f.reference)
    path = tiny_file(tmp_path)
    monkeypatch.setattr(Mamba2, attr, wrong)
    res = cli("run", path, "--ctx", "16", "--decode", "2", "-q", ok=False)
    assert res.exit_code == 1 and "error: predicted and measured differ" in res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.slow  # Falcon-H1's real dims, one layer
@pytest.mark.parametrize("name", [F05, "falcon-h1-34b-base"])
def test_real_dims(name):
    res = cli("run", str(REFERENCE / "configs-extra-6" / f"{name}.json"), "--ctx", "32", "--decode", "2", "--layers", "1",
              "-q", "-f", "json")
    assert json.loads(res.stdout)["ok"]


@pytest.mark.slow
def test_peak_rss_within_plan():
    # the plan stays an upper bound with the mixer's weights, state and activations (test_run_memory's measurement)
    from test_run_memory import LINUX, _peak

    if not LINUX:
        pytest.skip("optional: peak RSS is read from /proc/self/status (Linux)")
    got = _peak(str(REFERENCE / "configs-extra-6" / f"{F05}.json"), ctx=1024, decode=2, layers=1)
    assert got["ok"]
    assert got["hwm"] - got["base"] <= got["plan"], got
