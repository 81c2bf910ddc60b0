"""The Python API's inputs (an API review): a derived spec is validated anew, and an argument of the wrong type is
one KvcalcError, never a silently different figure nor Python's own error."""

from __future__ import annotations

from fractions import Fraction

import pytest
from pydantic import ValidationError

from conftest import spec
from kvcalc.costs.cache import kv_cache
from kvcalc.costs.flops import generate_flops, prefill_flops
from kvcalc.costs.params import param_counts
from kvcalc.errors import KvcalcError
from kvcalc.hardware import load_hardware
from kvcalc.settings import Settings


def test_a_spec_copied_with_an_update_is_resolved_from_it():
    # llama3-8b with 64 layers: a layer's K and V, 2 · 8 heads · 128 · 2 bytes = 4,096 B a token; 64 layers at ctx 4,096:
    # 1,073,741,824 B. Parameters: a layer 41,943,040 (attention) + 3 · 4,096 · 14,336 (FFN) + 2 · 4,096 (norms) =
    # 218,112,000; 64 of them, the untied embedding and head 2 · 128,256 · 4,096 and the final norm 4,096. pydantic's
    # copy kept the 32 resolved layers: 536,870,912 B and 8,030,261,248 parameters beside n_layers 64.
    deeper = spec("llama3-8b").model_copy(update={"n_layers": 64})
    assert kv_cache(deeper, Settings(ctx=4096)).bytes == 64 * 4096 * 4096 == 1_073_741_824
    assert param_counts(deeper).total == 64 * 218_112_000 + 2 * 128_256 * 4096 + 4096 == 15_009_845_248
    with pytest.raises(ValidationError, match="n_layers"):
        spec("llama3-8b").model_copy(update={"n_layers": 0})
    plain = spec("llama3-8b").model_copy()  # no update: the same spec, its own memo
    assert kv_cache(plain, Settings(ctx=4096)).bytes == 32 * 4096 * 4096


@pytest.mark.parametrize("settings, message", [
    ({"mtp": "no"}, "mtp must be True or False, got str 'no'"),
    ({"dense_attn": "False"}, "dense_attn must be True or False, got str 'False'"),
    ({"dp_attention": 1}, "dp_attention must be True or False, got int 1"),
    ({"kv_dtype": 8}, "kv_dtype must be a name \\(a str\\), got int 8"),
    ({"kv_quant": None}, "kv_quant must be a name \\(a str\\), got NoneType None"),
    ({"engine": 1}, "engine must be a name \\(a str or None\\), got int 1"),
    ({"hardware": "h100-80gb"}, "hardware must be a kvcalc.hardware.Hardware \\(load_hardware\\(name\\)\\) or None, got str"),
    ({"ctx": 10**5000}, "ctx of about 5,001 digits: at most 1,099,511,627,776"),
    ({"ctx": Fraction(4096)}, "ctx must be a positive whole number of tokens \\(a Python int\\), got fractions.Fraction"),
    ({"engine": "vllm", "block_size": 2**20 + 1}, "block_size 1048577: at most 1,048,576"),
])
def test_settings_of_the_wrong_type_are_one_error(settings, message):
    with pytest.raises(KvcalcError, match=message):
        Settings(**{"ctx": 4096, **settings})


def test_flag_arguments_are_checked():
    # logits other than 'last' or 'all' were read as 'last'; cached="False" and mtp="no" are truthy strings
    llama, s = spec("llama3-8b"), Settings(ctx=4096)
    assert prefill_flops(llama, s, logits="all")["lm_head"] == 4096 * 2 * 4096 * 128_256
    assert prefill_flops(llama, s)["lm_head"] == 2 * 4096 * 128_256
    with pytest.raises(KvcalcError, match="logits must be 'last' .* or 'all', got 'ALL'"):
        prefill_flops(llama, s, logits="ALL")
    with pytest.raises(KvcalcError, match="cached must be True or False, got str 'False'"):
        generate_flops(llama, s, cached="False")  # type: ignore[arg-type]
    with pytest.raises(KvcalcError, match="mtp must be True or False, got str 'no'"):
        param_counts(spec("deepseek-v3"), mtp="no")  # type: ignore[arg-type]
    assert Settings(ctx=1, hardware=load_hardware("h100-80gb"), engine="VLLM").engine == "vllm"


def test_specs_compare_by_their_fields_and_weights_bytes_takes_a_count():
    # equality ignored nothing private: a spec whose figures had been asked differed from a fresh load of itself
    import kvcalc
    from kvcalc.costs.params import weights_bytes
    from kvcalc.registry import load_model

    a, b = load_model("gpt2").spec, load_model("gpt2").spec
    kv_cache(a, Settings(ctx=8))
    assert a == b and a != load_model("llama3-8b").spec
    assert a.model_copy(update={"n_layers": 13}) != b
    assert weights_bytes(3, "int4") == 2  # 12 bits, rounded up to whole bytes
    for bad in (10.5, True, -1):
        with pytest.raises(KvcalcError, match="params must be a count of weights"):
            weights_bytes(bad, "bf16")  # type: ignore[arg-type]
    assert {"load_model", "cost_figures", "Settings"} <= set(dir(kvcalc))  # the lazy exports, listed


def test_cache_reports_compare_by_their_settings_too():
    # a window holds the same bytes at every context past it, and ctx 2 x batch 1 the same as ctx 1 x batch 2:
    # reports at different settings were equal (their settings were left out of ==)
    m = spec("mistral-7b")  # every layer slides over W = 4096
    at_8k, at_16k = kv_cache(m, Settings(ctx=8192)), kv_cache(m, Settings(ctx=16384))
    assert at_8k.bytes == at_16k.bytes == 32 * 2 * 8 * 128 * 4096 * 2  # layers · K,V · n_kv · d_h · W · bf16
    assert at_8k != at_16k and at_8k == kv_cache(m, Settings(ctx=8192))
    two_tokens, two_sequences = kv_cache(m, Settings(ctx=2)), kv_cache(m, Settings(ctx=1, batch=2))
    assert two_tokens.bytes == two_sequences.bytes and two_tokens != two_sequences
