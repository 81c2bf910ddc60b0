"""The spec schema: bundled specs load, layer groups partition the layers, and violations name file, field and rule."""

from __future__ import annotations

import copy

import pytest
import yaml

from conftest import ALL_BUNDLED, spec
from kvcalc.errors import SpecError
from kvcalc.registry import specs_dir
from kvcalc.spec import ModelSpec, load_spec, spec_from_dict

BASE = {
    "name": "toy", "family": "test", "d_model": 64, "n_layers": 6, "vocab_size": 100, "max_context": 4096,
    "ffn": {"kind": "dense", "d_ff": 256},
    "layer_groups": [{"layers": "all", "attention": {"kind": "gqa", "n_heads": 8, "n_kv_heads": 2}}],
}


def with_(**changes) -> dict:
    data = copy.deepcopy(BASE)
    data.update(changes)
    return data


def error_of(data: dict) -> str:
    with pytest.raises(SpecError) as info:
        spec_from_dict(data, "toy.yaml")
    return str(info.value)


# ---------------------------------------------------------------- bundled specs


EXPECTED_BUNDLED = {
    "llama3-8b", "llama3-70b", "llama3.1-405b", "llama3.2-1b", "llama3.2-3b", "gemma3-1b", "gemma3-4b", "gemma3-12b",
    "gemma3-27b", "mistral-7b", "mixtral-8x7b", "qwen2.5-7b", "qwen2.5-72b", "deepseek-v2", "deepseek-v2-lite",
    "deepseek-v3", "gpt2", "falcon-7b",
}


def test_all_required_models_are_bundled():
    assert EXPECTED_BUNDLED <= set(ALL_BUNDLED)


@pytest.mark.slow
@pytest.mark.parametrize("name", ALL_BUNDLED)
def test_bundled_spec_loads_with_source(name):
    s = load_spec(specs_dir() / f"{name}.yaml")
    assert s.name == name
    assert s.source and ("huggingface.co" in s.source or "http" in s.source)
    assert "FACTS.md" not in s.source and "../shared" not in s.source  # a user has neither: public sources only
    assert sum(len(g.layers) for g in s.groups) == s.n_layers
    assert sorted(i for g in s.groups for i in g.layers) == list(range(s.n_layers))


def test_head_dim_is_taken_from_spec_not_recomputed():
    # Gemma 3 27B: head_dim 128 while d_model / n_heads = 5376 / 32 = 168 (FACTS.md §5.2).
    g = spec("gemma3-27b").groups[0]
    assert g.head_dim == 128 and not g.attention.head_dim_derived()
    # Llama 3 70B gives no head_dim: 8192 / 64 = 128.
    g = spec("llama3-70b").groups[0]
    assert g.head_dim == 128 and g.attention.head_dim_derived()


def test_gemma3_layer_pattern():
    groups = {g.label: g.layers for g in spec("gemma3-27b").groups}
    assert groups["global"] == (5, 11, 17, 23, 29, 35, 41, 47, 53, 59)
    assert len(groups["local"]) == 52


# ---------------------------------------------------------------- layer selectors


@pytest.mark.parametrize("groups, expected", [
    ([{"layers": "0-2"}, {"layers": "3-5"}], [(0, 1, 2), (3, 4, 5)]),
    ([{"layers": [0, 2, 4]}, {"layers": "rest"}], [(0, 2, 4), (1, 3, 5)]),
    ([{"layers": "rest"}, {"layers": {"every": 3, "start": 2}}], [(0, 1, 3, 4), (2, 5)]),
    ([{"layers": "0, 1-2 ,5"}, {"layers": "3-4"}], [(0, 1, 2, 5), (3, 4)]),
])
def test_layer_selectors(groups, expected):
    att = {"kind": "mha", "n_heads": 4}
    s = ModelSpec.model_validate(with_(layer_groups=[{**g, "attention": att} for g in groups]))
    assert [g.layers for g in s.groups] == expected


def test_layer_text_lists_every_run_up_to_its_bound_then_the_ends():
    from kvcalc.spec import SHOWN_RUNS, layer_ranges, layer_text

    assert layer_text([0, 1, 2, 5, 7, 8]) == layer_ranges([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    assert layer_text([0, 1, 2, 5, 7, 8], ", ") == "0-2, 5, 7-8"
    full = list(range(0, 2 * SHOWN_RUNS, 2))  # SHOWN_RUNS runs of one layer: all listed
    assert layer_text(full) == layer_ranges(full) == ",".join(map(str, full))
    more = [*full, 2 * SHOWN_RUNS, 2 * SHOWN_RUNS + 1]  # one run more (of two layers): the first 8, the last 2
    assert SHOWN_RUNS == 256
    assert layer_text(more) == "0,2,4,6,8,10,12,14,…,510,512-513 (257 runs)"
    assert layer_ranges(more).count(",") == SHOWN_RUNS  # the exact form, which an import writes, stays whole


@pytest.mark.parametrize("groups, message", [
    ([{"layers": "0-2"}], "layers 3-5 belong to no group"),
    ([{"layers": "0-3"}, {"layers": "3-5"}], "layer_groups[1].layers: layer 3 is already in layer_groups[0]"),
    ([{"layers": "0-6"}], "layer 6 does not exist (n_layers is 6)"),
    ([{"layers": "rest"}, {"layers": "rest"}], "only one group may take 'rest'"),
    ([{"layers": "all"}, {"layers": "rest"}], "'rest' is empty"),
    ([{"layers": "first three"}], "layer_groups[0].layers: cannot read 'first three'"),
    ([{"layers": "4-2"}, {"layers": "rest"}], "range '4-2' runs backwards"),
])
def test_layer_selector_errors(groups, message):
    att = {"kind": "mha", "n_heads": 4}
    text = error_of(with_(layer_groups=[{**g, "attention": att} for g in groups]))
    assert message in text
    assert text.startswith("toy.yaml: ")


# ---------------------------------------------------------------- field and cross-field rules


def test_unknown_key_is_an_error_naming_the_field():
    data = with_()
    data["layer_groups"][0]["attention"]["n_kv_head"] = 2  # typo of n_kv_heads
    text = error_of(data)
    assert "toy.yaml: layer_groups[0].attention.n_kv_head: unknown key" in text


def test_unknown_top_level_key():
    assert "toy.yaml: hidden_size: unknown key" in error_of(with_(hidden_size=64))


def test_missing_field():
    data = with_()
    del data["n_layers"]
    assert "toy.yaml: n_layers: required field is missing" in error_of(data)


@pytest.mark.parametrize("field, value", [("n_layers", 0), ("d_model", -4), ("max_context", 0)])
def test_positive_integers(field, value):
    assert f"toy.yaml: {field}: must be greater than 0, got {value}" in error_of(with_(**{field: value}))


def test_n_heads_divisible_by_n_kv_heads():
    data = with_()
    data["layer_groups"][0]["attention"]["n_kv_heads"] = 3
    text = error_of(data)
    assert "layer_groups[0].attention" in text and "n_heads (8) must be divisible by n_kv_heads (3)" in text


def test_head_dim_needed_when_d_model_does_not_divide():
    data = with_(d_model=60)
    text = error_of(data)
    assert "layer_groups[0].attention.head_dim: not given, and d_model (60) is not divisible by n_heads (8)" in text


def test_window_below_max_context():
    data = with_()
    data["layer_groups"][0]["sliding_window"] = 4096
    assert "layer_groups[0].sliding_window: window 4096 must be below max_context (4096)" in error_of(data)


def test_unknown_attention_kind_names_the_choices():
    data = with_()
    data["layer_groups"][0]["attention"]["kind"] = "flash"
    text = error_of(data)
    assert "layer_groups[0].attention.kind: unknown attention kind 'flash': choose one of mha, gqa, mqa, mla, linear" in text


def test_moe_rules():
    moe = {"kind": "moe", "n_routed_experts": 4, "n_experts_per_tok": 8, "moe_d_ff": 32}
    assert "n_experts_per_tok (8) must not exceed n_routed_experts (4)" in error_of(with_(ffn=moe))
    moe = {"kind": "moe", "n_routed_experts": 8, "n_experts_per_tok": 2, "moe_d_ff": 32, "first_k_dense": 1}
    assert "first_k_dense is 1, so dense_d_ff is required" in error_of(with_(ffn=moe))
    moe = {**moe, "dense_d_ff": 64, "first_k_dense": 6}
    assert "ffn.first_k_dense: 6 must be below n_layers (6)" in error_of(with_(ffn=moe))
    moe = {**moe, "first_k_dense": 0}  # a width of no layer: accepted in silence, as if it counted
    assert ("dense_d_ff (64) is the width of the first_k_dense layers, but first_k_dense is 0: give first_k_dense, "
            "or a dense ffn on the layers that have one") in error_of(with_(ffn=moe))


def test_linear_layers_cannot_have_windows():
    data = with_(layer_groups=[{"layers": "all", "attention": {"kind": "linear", "state_elements": 10}, "sliding_window": 8}])
    assert "a 'linear' layer has no KV cache to window" in error_of(data)


def test_spec_is_not_a_mapping():
    assert "toy.yaml: the spec must be a mapping" in error_of(["a", "list"])  # type: ignore[arg-type]


def test_load_spec_reports_yaml_position(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("name: x\nfamily: [unclosed\n")
    with pytest.raises(SpecError, match=r"broken.yaml: malformed YAML: line \d+, column \d+"):
        load_spec(path)


def test_yaml_is_loaded_safely(tmp_path):
    path = tmp_path / "evil.yaml"
    path.write_text("name: !!python/object/apply:os.system ['echo hi']\n")
    with pytest.raises(SpecError, match=r"line 1, column 7: tag !!python/object/apply:os.system is not allowed"):
        load_spec(path)


def test_round_trip_through_yaml_dump(tmp_path):
    s = spec("gemma3-27b")
    path = tmp_path / "copy.yaml"
    path.write_text(yaml.safe_dump(s.model_dump(exclude_none=True)))
    again = load_spec(path)
    assert again.groups[0].layers == s.groups[0].layers and again == s


@pytest.mark.parametrize("layers, message", [
    (0, "layer_groups[0].layers: expected 'all', 'rest', a range string such as '0-4,6', a list of layer indices, or "
        "{every: N, start: S}, got 0"),
    ({"every": 2.0}, "layer_groups[0].layers.every: expected an integer, got 2.0"),
    ({"every": 0}, "layer_groups[0].layers.every: must be greater than 0, got 0"),
    ([0, -1], "layer_groups[0].layers[1]: must be at least 0, got -1"),
])
def test_a_wrong_layers_value_meets_one_rule(layers, message):
    # a fuzz audit: `layers: 0` gave three lines, one per form of the union (layers.str, layers.list[constrained-int],
    # layers.Every), and bounds came in pydantic's words ('Input should be greater than 0')
    data = with_()
    data["layer_groups"][0]["layers"] = layers
    assert error_of(data) == f"toy.yaml: {message}"


@pytest.mark.parametrize("key, shown", [(None, "null"), (1, "1")])
def test_a_key_that_is_not_a_name_is_said_so(key, shown):
    # a fuzz audit: YAML's `~: 3` and `1: 2` read as pydantic's "None: Keys should be strings" and "[1]: ..."
    data = with_()
    data[key] = 3
    assert error_of(data) == f"toy.yaml: a key must be a name (a string), got {shown}"


TINY = {"name": "tiny", "family": "deepseek", "d_model": 256, "n_layers": 4, "vocab_size": 1000, "max_context": 65536,
        "ffn": {"kind": "dense", "d_ff": 512}}


def test_mtp_layers_take_the_last_layers_norms():
    # a spec review: the MTP block took the model's norms_per_layer, not a group's. d = 256, 4 layers of GQA (8 heads
    # of 32, 2 KV heads): 163,840 attention + 3 · 256 · 512 FFN + 4 norms of 256 = 558,080 a layer, + 2 · 256,000
    # embedding and head + 256 final norm = 2,744,576; one MTP layer adds the same attention and FFN, its 4 + 3 norms
    # (enorm, hnorm, the head's) and eh_proj 2 · 256²: 689,920 — whether norms_per_layer is the model's or the group's
    from kvcalc.costs.params import param_counts

    gqa = {"kind": "gqa", "n_heads": 8, "n_kv_heads": 2}
    model = spec_from_dict({**TINY, "mtp_layers": 1, "norms_per_layer": 4, "layer_groups": [{"attention": gqa}]}, "a")
    group = spec_from_dict({**TINY, "mtp_layers": 1, "layer_groups": [{"attention": gqa, "norms_per_layer": 4}]}, "b")
    for s in (model, group):
        assert param_counts(s).total == 4 * 558_080 + 2 * 256_000 + 256 == 2_744_576
        assert param_counts(s, mtp=True).total == 2_744_576 + 163_840 + 393_216 + 7 * 256 + 2 * 256**2 == 3_434_496


@pytest.mark.parametrize("change, message", [
    ({"layer_groups": [{"attention": {"kind": "mha", "n_heads": 4}, "cross_attention": {"kind": "mha", "n_heads": 3}}]},
     "layer_groups\\[0\\].cross_attention.head_dim: not given, and d_model \\(256\\) is not divisible by n_heads \\(3\\)"),
    ({"encoder": {"n_layers": 1, "source_len": 100, "attention": {"kind": "mha", "n_heads": 3},
                  "ffn": {"kind": "dense", "d_ff": 128}}},
     "encoder.attention.head_dim: not given, and d_model \\(256\\) is not divisible by n_heads \\(3\\)"),
    ({"layer_groups": [{"attention": {"kind": "mha", "n_heads": 4},
                        "cross_attention": {"kind": "mamba2", "mamba_num_heads": 8, "mamba_head_dim": 64, "n_groups": 1, "conv_kernel": 4,
                                            "ssm_state_size": 16}}]},
     "layer_groups\\[0\\].cross_attention: must be a kind with a KV cache over the encoder's positions"),
    ({"layer_groups": [{"layers": "0-1", "attention": {"kind": "mamba2", "mamba_num_heads": 8, "mamba_head_dim": 64, "n_groups": 1, "conv_kernel": 4,
                                                        "ssm_state_size": 16}},
                       {"layers": "2-3", "attention": {"kind": "gqa", "n_heads": 8, "n_kv_heads": 2}, "kv_shared": True}]},
     "layer_groups\\[1\\].kv_shared: layer 2 reads the KV cache of an earlier layer, but no layer before it holds one"),
    ({"layer_groups": [{"attention": {"kind": "gqa", "n_heads": 8, "n_kv_heads": 2}, "kv_shared": True}]},
     "layer_groups\\[0\\].kv_shared: layer 0 reads the KV cache of an earlier layer"),
])
def test_every_block_is_checked_at_its_path(change, message):
    # a spec review: cross-attention, the encoder's attention and a parallel mixer skipped their kinds' rules (d_h
    # became floor(64 / 3) = 21), a constant-state cross-attention was accepted with no state counted, and KV-shared
    # layers with no earlier cache read one of zero bytes
    base = {**TINY, "layer_groups": [{"attention": {"kind": "mha", "n_heads": 4}}],
            "encoder": {"n_layers": 1, "source_len": 100, "attention": {"kind": "mha", "n_heads": 4},
                        "ffn": {"kind": "dense", "d_ff": 128}}}
    with pytest.raises(SpecError, match=message):
        spec_from_dict({**base, **change}, "x.yaml")
    spec_from_dict(base, "x.yaml")  # the base itself is valid


@pytest.mark.parametrize("extra, named", [({"shared_gate": True}, "shared_gate describes"),
                                          ({"shared_d_ff": 256}, "shared_d_ff describes"),
                                          ({"shared_gate": True, "shared_d_ff": 256}, "shared_d_ff and shared_gate describe")])
def test_shared_expert_fields_need_shared_experts(extra, named):
    # a spec review: shared_gate with no shared expert added d weights a layer (and their FLOPs) for a gate on
    # nothing, and shared_d_ff changed nothing, both in silence
    moe = {"kind": "moe", "n_routed_experts": 8, "n_experts_per_tok": 2, "moe_d_ff": 128, **extra}
    data = {**TINY, "ffn": moe, "layer_groups": [{"attention": {"kind": "gqa", "n_heads": 8, "n_kv_heads": 2}}]}
    with pytest.raises(SpecError, match=f"ffn: .*{named} shared experts, but n_shared_experts is 0"):
        spec_from_dict(data, "x.yaml")
    spec_from_dict({**data, "ffn": {**moe, "n_shared_experts": 1}}, "x.yaml")  # with one, valid
