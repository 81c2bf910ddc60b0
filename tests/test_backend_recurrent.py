"""The NumPy backend's constant-state layers: measured state shapes and bytes and executed FLOPs equal kvcalc's
figures exactly, the state stays the same size at every step, and the recurrent form equals the parallel one."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import REFERENCE
from conftest import run as cli
from kvcalc.attention import Formula
from kvcalc.attention.deltanet import GatedDeltaNet
from kvcalc.attention.kda import KDA
from kvcalc.attention.lightning import Lightning
from kvcalc.attention.mamba import Mamba, Mamba2
from kvcalc.backend.ops import FlopCounter
from kvcalc.backend.recurrent import causal_conv
from kvcalc.backend.runner import RunSettings, run
from kvcalc.spec import ModelSpec

ATTENTION = {
    "gated_deltanet": {"kind": "gated_deltanet", "linear_num_key_heads": 2, "linear_num_value_heads": 4,
                       "linear_key_head_dim": 8, "linear_value_head_dim": 6, "linear_conv_kernel_dim": 4},
    "kda": {"kind": "kda", "n_heads": 3, "head_dim": 8, "conv_kernel": 4},
    "mamba": {"kind": "mamba", "mamba_d_state": 8, "mamba_d_conv": 4, "mamba_expand": 2},
    "mamba2": {"kind": "mamba2", "mamba_num_heads": 8, "mamba_head_dim": 8, "ssm_state_size": 16, "n_groups": 2,
               "conv_kernel": 4},
    "lightning": {"kind": "lightning", "n_heads": 4},
    "none": {"kind": "none"},
}
KINDS = {"gated_deltanet": GatedDeltaNet, "kda": KDA, "mamba": Mamba, "mamba2": Mamba2, "lightning": Lightning}
# the state a layer holds per sequence, by hand from the kinds' definitions (d_model 64, batch 1)
STATE_SHAPES = {
    "gated_deltanet": {"recurrent": (1, 4, 8, 6), "conv": (1, 2 * 2 * 8 + 4 * 6, 3)},  # conv_dim = 2·H_k·d_k + H_v·d_v
    "kda": {"recurrent": (1, 3, 8, 8), "conv_q": (1, 24, 3), "conv_k": (1, 24, 3), "conv_v": (1, 24, 3)},  # H·d = 24
    "mamba": {"ssm": (1, 128, 8), "conv": (1, 128, 3)},  # d_inner = 2·64
    "mamba2": {"ssm": (1, 8, 8, 16), "conv": (1, 64 + 2 * 2 * 16, 3)},  # conv_dim = H·P + 2·G·N
    "lightning": {"kv_state": (1, 4, 16, 16)},  # d_h = 64 / 4
}


def tiny_hybrid(attention: dict, kernel: int | None = None) -> dict:
    """A spec of two layers: the constant-state kind, then a GQA layer."""
    return {
        "name": "tiny", "family": "test", "d_model": 64, "n_layers": 2, "vocab_size": 50, "max_context": 4096,
        "ffn": {"kind": "dense", "d_ff": 64},
        "layer_groups": [{"name": "state", "layers": [0], "attention": attention},
                         {"name": "attention", "layers": "rest",
                          "attention": {"kind": "gqa", "n_heads": 4, "n_kv_heads": 2, "head_dim": 16}}],
    }


def write(tmp_path, data: dict) -> str:
    path = tmp_path / "tiny.yaml"
    path.write_text(json.dumps(data))  # JSON is YAML
    return str(path)


def assert_all_match(report):
    assert [(r.quantity, r.predicted, r.measured) for r in report.mismatches] == []
    assert [c.name for c in report.checks if not c.passed] == []
    assert report.ok


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(ATTENTION))
def test_cli_run_every_kind(kind, tmp_path):
    out = json.loads(cli("run", write(tmp_path, tiny_hybrid(ATTENTION[kind])), "--ctx", "40", "--decode", "3", "-q",
                         "-f", "json").stdout)
    assert out["ok"] is True and out["layers"] == [0, 1]
    compared = [r for r in out["rows"] if r.get("match") is not None]
    assert compared and all(r["match"] for r in compared)
    checks = {c["name"]: c for c in out["checks"]}
    assert all(c["passed"] for c in checks.values())
    state = {r["quantity"]: r for r in out["rows"] if r["section"] == "state"}
    if kind == "none":  # nothing held, nothing computed
        assert f"{kind}: recurrent form = parallel form" not in checks
        assert state["layer 0 state bytes after prefill"]["measured"] == 0
        assert not any(r["quantity"].startswith("prefill mamba") for r in out["rows"])
        return
    assert checks[f"{kind}: recurrent form = parallel form"]["error"] < 1e-4
    for name, shape in STATE_SHAPES[kind].items():
        assert state[f"layer 0 {name} shape after prefill"]["measured"] == list(shape)
        assert state[f"layer 0 {name} shape at the end"]["measured"] == list(shape)
    # constant: the same bytes after the prefill and after every decode step, float32
    elements = sum(np.prod(shape) for shape in STATE_SHAPES[kind].values())
    sizes = {state[f"layer 0 state bytes after {when}"]["measured"] for when in
             ("prefill", "decode step 1", "decode step 2", "decode step 3")}
    assert sizes == {4 * elements}
    total = next(r for r in state.values() if r["quantity"].startswith("constant state, all 2 layers"))
    assert total["measured"] == total["predicted"] == 4 * elements  # one stateful layer of the two


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("dtype", ["float64", "float16"])
def test_every_kind_batch_and_dtype(kind, dtype):
    report = run(ModelSpec.model_validate(tiny_hybrid(ATTENTION[kind])), RunSettings(ctx=17, decode=2, batch=2,
                                                                                    dtype=dtype))
    assert_all_match(report)
    assert any(c.name.endswith("recurrent form = parallel form") for c in report.checks)


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_wrong_state_formula_fails_the_run(kind, tmp_path, monkeypatch):
    real = KINDS[kind].state_formula

    def off_by_one(self, layer):
        f = real(self, layer)
        return Formula(f.expression, f.symbols, f.elements + 1, f.components, f.reference)

    monkeypatch.setattr(KINDS[kind], "state_formula", off_by_one)
    res = cli("run", write(tmp_path, tiny_hybrid(ATTENTION[kind])), "--ctx", "40", "--decode", "3", "-q", ok=False)
    assert res.exit_code == 1 and "Traceback" not in res.stderr
    assert "error: predicted and measured differ" in res.stderr and "state bytes after prefill" in res.stderr


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_wrong_flop_formula_fails_the_run(kind, tmp_path, monkeypatch):
    real = KINDS[kind].flops
    scan = "mamba/scan" if kind.startswith("mamba") else "attn/state"
    monkeypatch.setattr(KINDS[kind], "flops", lambda *a: {k: v + (k == scan) for k, v in real(*a).items()})
    res = cli("run", write(tmp_path, tiny_hybrid(ATTENTION[kind])), "--ctx", "40", "--decode", "3", "-q", ok=False)
    assert res.exit_code == 1 and f"prefill {scan}" in res.stderr


def test_conv_state_carries_the_last_inputs():
    # A prompt convolved in two pieces (the second after the first's state) equals it convolved at once.
    rng = np.random.default_rng(0)
    x, w, bias = rng.standard_normal((2, 9, 5)), rng.standard_normal((5, 4)), rng.standard_normal(5)
    fc = FlopCounter()
    whole, state = causal_conv(fc, "conv", x, np.zeros((2, 5, 3)), w, bias)
    assert fc.by_component["conv"] == 2 * 2 * 9 * 5 * 4  # K multiply-adds per channel and token
    head, mid = causal_conv(FlopCounter(), "conv", x[:, :6], np.zeros((2, 5, 3)), w, bias)
    tail, end = causal_conv(FlopCounter(), "conv", x[:, 6:], mid, w, bias)
    assert np.allclose(np.concatenate([head, tail], axis=1), whole) and np.array_equal(end, state)
    assert np.array_equal(state, x[:, -3:].transpose(0, 2, 1))  # the last K − 1 inputs, [b, channels, K − 1]
    # y_t = Σ_w w[c, w]·x_{t−K+1+w}: the first output sees only x_0 (the rest is the zero state)
    assert np.allclose(whole[:, 0], w[:, 3] * x[:, 0] + bias)


def test_linear_is_still_not_run():
    spec = tiny_hybrid({"kind": "linear", "state_elements": 100})
    report = run(ModelSpec.model_validate(spec), RunSettings(ctx=8, decode=1))
    assert report.layers == [1] and report.ok
    total = next(r for r in report.rows if r.quantity.startswith("constant state"))
    assert total.measured is None and total.match is None  # its state was not measured


@pytest.mark.slow  # real model dimensions (a few seconds each)
@pytest.mark.parametrize("name, kind", [("qwen3-next-80b-a3b", "gated_deltanet"), ("nemotron-h-56b", "mamba2")])
def test_real_dims(name, kind):
    out = json.loads(cli("run", name, "--layers", "2", "--ctx", "64", "--decode", "2", "-q", "-f", "json").stdout)
    assert out["ok"] is True
    assert any(c["name"] == f"{kind}: recurrent form = parallel form" and c["passed"] for c in out["checks"])
    total = next(r for r in out["rows"] if r["quantity"].startswith("constant state"))
    compare = json.loads(cli("compare", name, "--ctx", "66", "--kv-dtype", "fp32", "--state-dtype", "fp32", "--format",
                             "json").stdout)[0]
    assert total["measured"] == total["predicted"] == compare["state_bytes"]


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_kda_run_batch_of_two(dtype):
    # Kimi Delta Attention: every state shape, state byte and FLOP row matches, and recurrent = parallel form
    report = run(ModelSpec.model_validate(tiny_hybrid(ATTENTION["kda"])), RunSettings(ctx=40, decode=3, batch=2,
                                                                                      dtype=dtype))
    assert_all_match(report)
    compared = {r.quantity for r in report.rows if r.match is not None}
    assert {"layer 0 conv_v shape at the end", "prefill attn/decay", "3 decode steps attn/state"} <= compared
    check = next(c for c in report.checks if c.name == "kda: recurrent form = parallel form")
    assert check.passed and check.error < (1e-12 if dtype == "float64" else 1e-5)


def test_kda_recurrence_is_the_delta_rule_with_a_decay_per_channel():
    # S_t = (I − β_t·k_t·k_tᵀ)·Diag(α_t)·S_{t−1} + β_t·k_t·v_tᵀ, o_t = S_tᵀq_t (the Kimi Linear paper's form), step by
    # step with explicit matrices, against the layer's recurrence; its FLOPs are the kind's 5·d·d + 2·d·d per head
    from kvcalc.backend.recurrent import KDALayer

    spec = ModelSpec.model_validate(tiny_hybrid(ATTENTION["kda"]))
    group = spec.groups[0]
    layer = KDALayer(group.attention, group.layer, np.random.default_rng(0), np.float64)
    rng = np.random.default_rng(1)
    b, s, h, d = 2, 5, 3, 8
    q, k, v = (rng.standard_normal((b, s, h, d)) for _ in range(3))
    beta, log_alpha = rng.uniform(0, 1, (b, s, h)), -rng.uniform(0, 2, (b, s, h, d))
    fc = FlopCounter()
    out, state = layer._recur(fc, q, k, v, beta, log_alpha, np.zeros((b, h, d, d)))
    want = np.zeros((b, h, d, d))
    for t in range(s):
        for i in range(b):
            for j in range(h):
                kk = k[i, t, j][:, None]
                decayed = np.diag(np.exp(log_alpha[i, t, j])) @ want[i, j]
                want[i, j] = (np.eye(d) - beta[i, t, j] * kk @ kk.T) @ decayed + beta[i, t, j] * kk @ v[i, t, j][None]
                assert np.allclose(out[i, t, j], want[i, j].T @ q[i, t, j])
    assert np.allclose(state, want)
    assert dict(fc.by_component) == {"attn/state": 5 * b * s * h * d * d, "attn/readout": 2 * b * s * h * d * d}


@pytest.mark.slow  # Kimi Linear's real dims: 32 heads of 128, two KDA layers (about 5 s)
def test_kda_real_dims():
    config = REFERENCE / "configs-extra-3" / "kimi-linear-48b-a3b-instruct.json"
    out = json.loads(cli("run", config, "--layers", "2", "--ctx", "64", "--decode", "2", "-q", "-f", "json").stdout)
    assert out["ok"] is True and out["layers"] == [0, 1]  # layers 0-2 are KDA (kda_layers [1, 2, 3, ...], 1-based)
    assert all(r["match"] for r in out["rows"] if r.get("match") is not None)
    assert any(c["name"] == "kda: recurrent form = parallel form" and c["passed"] for c in out["checks"])
    state = {r["quantity"]: r for r in out["rows"] if r["section"] == "state"}
    assert state["layer 0 recurrent shape at the end"]["measured"] == [1, 32, 128, 128]
    assert state["layer 0 conv_q shape at the end"]["measured"] == [1, 32 * 128, 3]
    total = next(r for r in state.values() if r["quantity"].startswith("constant state"))
    compare = json.loads(cli("compare", config, "--ctx", "66", "--kv-dtype", "fp32", "--state-dtype", "fp32",
                             "--format", "json").stdout)[0]
    assert total["measured"] == total["predicted"] == compare["state_bytes"] == 20 * 4 * (32 * 128 * 128 + 9 * 4096)


@pytest.mark.parametrize("attention, label", [({"kind": "linear", "state_elements": 100}, "linear"),
                                              ({"kind": "projection"}, "projection")])
def test_a_spec_with_nothing_to_run_is_refused_by_what_it_holds(attention, label, tmp_path):
    """A spec whose every layer is of a kind the backend does not run is refused naming those kinds (it once said
    'constant-state layers only', wrong for a projection, which holds nothing)."""
    spec = {**tiny_hybrid(attention), "n_layers": 1, "layer_groups": [{"name": "only", "layers": "all",
                                                                        "attention": attention}]}
    result = cli("run", write(tmp_path, spec), "--ctx", "8", ok=False)
    assert result.exit_code == 1 and "Traceback" not in result.stderr, result
    assert f"tiny: no layer the NumPy backend runs ('only' is {label}: it runs neither linear nor projection" in (
        " ".join(result.stderr.split())), result
