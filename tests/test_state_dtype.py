"""A constant state stored in two dtypes: a model may fix the dtype of its recurrent (SSM) state (the kind's
recurrent_dtype; Qwen3.5's config says mamba_ssm_dtype float32, which vLLM stores that state in), while the conv state
takes the default state dtype; --state-dtype stores both in one dtype (README, Conventions).

Qwen3-Next-80B-A3B (model_specs/qwen3-next-80b-a3b.yaml): 36 Gated DeltaNet layers, each a recurrent state
H_v·d_k·d_v = 32·128·128 and a conv state (K − 1)·(2·H_k·d_k + H_v·d_v) = 3·8,192 elements per sequence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import REFERENCE, run

SPEC = Path(__file__).parents[1] / "model_specs" / "qwen3-next-80b-a3b.yaml"
LINEAR, RECURRENT, CONV = 36, 32 * 128 * 128, 3 * 8192
QWEN35 = REFERENCE / "configs-extra-2" / "qwen3.5-35b-a3b.json"


def spec_with(tmp_path, value: str) -> Path:
    """The bundled Qwen3-Next spec with the linear layers' recurrent_dtype set to `value`."""
    text = SPEC.read_text().replace("      linear_conv_kernel_dim: 4\n",
                                    f"      linear_conv_kernel_dim: 4\n      recurrent_dtype: {value}\n", 1)
    assert "recurrent_dtype" in text
    path = tmp_path / "qwen3-next-fp32-state.yaml"
    path.write_text(text)
    return path


def row(*args: str) -> dict:
    return json.loads(run("compare", *args, "-f", "json").stdout)[0]


@pytest.mark.slow
@pytest.mark.parametrize("batch", [1, 8])
def test_recurrent_state_in_its_own_dtype_beside_the_conv_state(tmp_path, batch):
    path = spec_with(tmp_path, "fp32")
    got = row(str(path), "--ctx", "32k", "--batch", str(batch))
    assert got["state_bytes"] == batch * LINEAR * (RECURRENT * 4 + CONV * 2) == batch * 77_266_944
    # the KV cache is untouched, and --state-dtype stores every component in one dtype
    plain = row("qwen3-next-80b-a3b", "--ctx", "32k", "--batch", str(batch))
    assert got["kv_cache_bytes"] == plain["kv_cache_bytes"]
    assert plain["state_bytes"] == batch * LINEAR * (RECURRENT + CONV) * 2
    for dtype, size in (("bf16", 2), ("fp32", 4), ("fp8", 1)):
        both = row(str(path), "--ctx", "32k", "--batch", str(batch), "--state-dtype", dtype)
        assert both["state_bytes"] == batch * LINEAR * (RECURRENT + CONV) * size


@pytest.mark.slow
def test_a_recurrent_dtype_equal_to_the_default_changes_nothing(tmp_path):
    path = spec_with(tmp_path, "bf16")
    for extra in ((), ("--tp", "4"), ("--engine", "vllm"), ("--kv-dtype", "bf16", "--batch", "3")):
        got = row(str(path), "--ctx", "4k", "--columns", "all", *extra)
        want = row("qwen3-next-80b-a3b", "--ctx", "4k", "--columns", "all", *extra)
        assert {k: v for k, v in got.items() if k not in ("model", "source")} == \
               {k: v for k, v in want.items() if k not in ("model", "source")}


def test_per_gpu_state_splits_each_dtype_by_heads(tmp_path):
    # tp 4: each rank holds 32/4 value heads and 16/4 key heads, so a quarter of each component
    path = spec_with(tmp_path, "fp32")
    got = row(str(path), "--ctx", "4k", "--tp", "4")
    assert got["state_bytes_per_gpu"] == LINEAR * (RECURRENT // 4 * 4 + CONV // 4 * 2)


def test_vllm_state_page_holds_both_dtypes(tmp_path):
    # vLLM pads each layer's state to one unified page; the page must hold the fp32 recurrent and bf16 conv state
    path = spec_with(tmp_path, "fp32")
    got = row(str(path), "--ctx", "4k", "--engine", "vllm", "--columns", "all")
    plain = row("qwen3-next-80b-a3b", "--ctx", "4k", "--engine", "vllm", "--columns", "all")
    per_layer = RECURRENT * 4 + CONV * 2
    assert got["state_bytes"] == LINEAR * per_layer
    # two pages a layer (vLLM 0.34.0's prefix caching for hybrids), each holding the whole fp32 + bf16 state
    assert got["engine_state_bytes"] >= 2 * LINEAR * per_layer > plain["engine_state_bytes"]


def test_explain_lists_each_dtype(tmp_path):
    path = spec_with(tmp_path, "fp32")
    text = run("compare", str(path), "--ctx", "4k", "--explain").stdout
    assert (f"constant states: {LINEAR * RECURRENT:,} elements × 32/8 bytes (fp32: recurrent) + {LINEAR * CONV:,} elements "
            f"× 16/8 bytes (bf16: conv) = {LINEAR * (RECURRENT * 4 + CONV * 2):,} bytes") in text
    data = json.loads(run("compare", str(path), "--ctx", "4k", "--explain", "-f", "json").stdout)[0]["derivation"]
    assert data["state_dtype"] == "fp32+bf16"
    assert data["state_by_dtype"] == {"fp32": LINEAR * RECURRENT, "bf16": LINEAR * CONV}
    one = json.loads(run("compare", "qwen3-next-80b-a3b", "--ctx", "4k", "--explain", "-f", "json").stdout)[0]["derivation"]
    assert one["state_dtype"] == "bf16" and "state_by_dtype" not in one


def test_a_bad_recurrent_dtype_names_the_field(tmp_path):
    res = run("compare", str(spec_with(tmp_path, "float32")), "--ctx", "4k", ok=False)
    assert res.exit_code != 0 and "Traceback" not in res.stderr
    assert "recurrent_dtype" in res.stderr and "fp32" in res.stderr


def test_qwen35_config_stores_its_recurrent_state_in_fp32(tmp_path):
    # qwen3.5-35b-a3b: 30 Gated DeltaNet layers of H_v 32, d_k = d_v 128, H_k 16, K 4; mamba_ssm_dtype float32
    got = row(str(QWEN35), "--ctx", "4k")
    assert got["state_bytes"] == 30 * (32 * 128 * 128 * 4 + 3 * (2 * 16 * 128 + 32 * 128) * 2) == 64_389_120
    cfg = json.loads(QWEN35.read_text())
    cfg["text_config"]["mamba_ssm_dtype"] = "float64x"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(cfg))
    res = run("compare", str(bad), "--ctx", "4k", ok=False)
    assert res.exit_code != 0 and "Traceback" not in res.stderr
    assert "mamba_ssm_dtype: must be one of float32, bfloat16, float16, got 'float64x'" in res.stderr
