"""A third hardening review of the importers: an explicit null where the model's code needs a number, booleans and
non-numbers in OpenELM's per-layer multipliers, and unhashable MiniMax layer types, each refused with the key named."""

from __future__ import annotations

import copy
import json
import re

import pytest

from conftest import REFERENCE
from kvcalc.errors import SpecError
from kvcalc.hf import import_config


def _config(path: str) -> dict:
    return json.loads((REFERENCE / path).read_text())


@pytest.mark.parametrize("key", ["hidden_size_per_layer_input", "laurel_rank", "num_kv_shared_layers",
                                 "vocab_size_per_layer_input"])
def test_gemma3n_refuses_a_null_its_code_multiplies(key):
    # vLLM's gemma3n.py multiplies by hidden_size_per_layer_input, transformers builds nn.Linear(d, it): a null was read
    # as 0, dropping 2,060,452,096 parameters of E2B's per-layer table without a word. Left out, the class default
    cfg = _config("configs-gemma3n/gemma-3n-e2b.json")
    nulled = copy.deepcopy(cfg)
    nulled["text_config"][key] = None
    with pytest.raises(SpecError, match=f"g.json: text_config.{key}: must be a whole number, got null"):
        import_config(nulled, "g.json", "g")
    left_out = copy.deepcopy(cfg)
    del left_out["text_config"][key]
    assert "defaults filled in for" in import_config(left_out, "g.json", "g").data["notes"]


def test_deepseek_refuses_a_null_first_k_dense_replace():
    # DeepSeek's code compares layer_idx >= first_k_dense_replace: null was read as 0 (every layer MoE); left out,
    # DeepseekV2Config's 0, named
    cfg = _config("models/deepseek-v2.json")
    with pytest.raises(SpecError, match="first_k_dense_replace: must be a whole number, got null"):
        import_config({**cfg, "first_k_dense_replace": None}, "d.json", "d")
    left_out = {k: v for k, v in cfg.items() if k != "first_k_dense_replace"}
    assert "first_k_dense_replace 0" in import_config(left_out, "d.json", "d").data["notes"]


@pytest.mark.parametrize(("key", "value", "where", "shown"), [
    ("ffn_multipliers", [True] * 16, "ffn_multipliers[0]", "true"),  # read as 1.0: d_ff 1,280
    ("ffn_multipliers", ["a"] * 16, "ffn_multipliers[0]", "'a'"),  # a TypeError's text, no key named
    ("ffn_multipliers", [float("nan")] * 16, "ffn_multipliers[0]", "nan"),
    ("qkv_multipliers", [1e308, 1e308], "qkv_multipliers[0]", "1e+308"),  # infinity to an int
    ("qkv_multipliers", [0.5, True], "qkv_multipliers[1]", "true"),
    ("ffn_multipliers", [-1.0] * 16, "ffn_multipliers[0]", "-1.0"),
])
def test_openelm_multipliers_are_positive_numbers(key, value, where, shown):
    cfg = {**_config("configs-extra-4/openelm-270m.json"), key: value}
    with pytest.raises(SpecError, match=f"^o.json: {re.escape(where)}: must be a positive number below 2\\^20, got "
                                        f"{re.escape(shown)}$"):
        import_config(cfg, "o.json", "o")


@pytest.mark.parametrize("entry", [[], {}])
def test_minimax_layer_types_that_are_not_numbers_are_named(entry):
    # [] and {} raised a TypeError (unhashable) before the message naming attn_type_list[0] was built
    cfg = copy.deepcopy(_config("models-2026/minimax-m1.json"))
    cfg["attn_type_list"][0] = entry
    with pytest.raises(SpecError, match=r"attn_type_list\[0\]: must be 0 \(lightning\) or 1 \(softmax\), got"):
        import_config(cfg, "m.json", "m")


@pytest.mark.parametrize("command", [["compare"], ["sweep", "--ctx", "1k,2k"], ["table", "models"]])
def test_a_model_given_twice_is_refused_and_two_of_one_name_noted(tmp_path, command):
    # a hardening review: the same model given twice repeated its rows, and a spec file of Gemma 3 1B named llama3-8b
    # printed a second llama3-8b row without a word (plot and table dims refuse both: a legend, a column)
    from conftest import ROOT, run

    res = run(*command, "llama3-8b", "llama3-8b", ok=False)
    assert res.exit_code == 1 and "llama3-8b is given twice: its rows would repeat" in res.stderr
    res = run(*command, "llama3-8b", "LLAMA3-8B", ok=False)  # names are read in any case (a help-text review)
    assert res.exit_code == 1 and "llama3-8b is given twice (as LLAMA3-8B): its rows would repeat" in res.stderr
    clash = tmp_path / "clash.yaml"
    clash.write_text((ROOT / "model_specs" / "gemma3-1b.yaml").read_text().replace("name: gemma3-1b", "name: llama3-8b"))
    res = run(*command, str(clash), "llama3-8b")
    assert f"note: {clash} and llama3-8b are both named 'llama3-8b': their rows come in the order given" in res.stderr
    assert "both named" not in run(*command, "llama3-8b", "gemma3-1b").stderr


@pytest.mark.parametrize("name", ["a\u0007b\u001b[31mred", "", "a\nb", "   ", "x" * 81,
                                  # a mutation review: a line separator, a bidi override (it shifts the row), a label
                                  # of a zero-width space alone, a C1 control, and the ';' that separates formulas
                                  "a\u2028b", "a\u202eb", "\u200b", "\x90", "glob; al"])
def test_a_group_name_is_printable_text(tmp_path, name):
    # a hardening review: a group name's escape codes reached the terminal ("\u001b[31m" turned the table red), a
    # newline split its row, and "" became 'group 0' without a word
    from conftest import ROOT
    from kvcalc.spec import load_spec

    text = (ROOT / "model_specs" / "gemma3-1b.yaml").read_text().replace("name: local", f"name: {json.dumps(name)}", 1)
    path = tmp_path / "g.yaml"
    path.write_text(text)
    with pytest.raises(SpecError, match=r"layer_groups\[1\]\.name: a group's name is 1 to 80 characters, not all spaces, "
                                        r"with no control, format or separator character and no ';' \(it labels "
                                        r"a row\), got"):
        load_spec(path)


def test_two_groups_of_one_name_are_refused(tmp_path):
    from conftest import ROOT
    from kvcalc.spec import load_spec

    path = tmp_path / "g.yaml"
    path.write_text((ROOT / "model_specs" / "gemma3-1b.yaml").read_text().replace("name: local", "name: global", 1))
    with pytest.raises(SpecError, match=r"layer_groups\[1\]\.name: 'global' labels layer_groups\[0\] too"):
        load_spec(path)
    # a name that is another group's default label ('group 1', a help-text review: two rows labelled 'group 1')
    path.write_text((ROOT / "model_specs" / "gemma3-1b.yaml").read_text().replace("name: global", "name: group 1", 1)
                    .replace("  - name: local", "  -", 1))
    with pytest.raises(SpecError, match=r"layer_groups\[1\]: its default label 'group 1' labels layer_groups\[0\] too"):
        load_spec(path)
    path.write_text((ROOT / "model_specs" / "gemma3-1b.yaml").read_text().replace("name: local", "name: 'é-ü 全'", 1))
    assert [g.label for g in load_spec(path).groups] == ["global", "é-ü 全"]


def test_a_file_given_twice_under_two_paths_is_refused(tmp_path):
    # a review of today's changes: x.yaml and its absolute path, or a link to it, read the same file: refused, not noted
    from conftest import ROOT, run

    spec = tmp_path / "x.yaml"
    spec.write_text((ROOT / "model_specs" / "llama3-8b.yaml").read_text())
    link = tmp_path / "link.yaml"
    link.symlink_to("x.yaml")
    for other in (f"{tmp_path}/./x.yaml", str(link)):
        res = run("compare", str(spec), other, "--ctx", "8k", ok=False)
        assert res.exit_code == 1 and f"compare: {spec} is given twice (as {other}): its rows would repeat" in res.stderr


def test_a_null_gemma3_window_is_noted_and_qwen3_vl_says_one_thing_of_its_window():
    # a README review: a null sliding_window where the config class's default is a window is noted (Mistral's, Gemma
    # 2's); Gemma 3's (Gemma3TextConfig: 4096) was read as no window in silence
    cfg = json.loads((REFERENCE / "models" / "gemma-3-1b-it.json").read_text())
    imported = import_config({**cfg, "sliding_window": None}, "c.json", "m").data
    assert "sliding_window null read as no window (Gemma3TextConfig's default, 4096, does not apply)" in imported["notes"]
    assert all("sliding_window" not in g for g in imported["layer_groups"])
    # Qwen3-VL's text model has no window whatever use_sliding_window says: one note, not 'ignored' then 'is false'
    vl = json.loads(next(REFERENCE.glob("**/qwen3-vl-8b-instruct.json")).read_text())
    vl["text_config"] = {**vl["text_config"], "use_sliding_window": True, "sliding_window": 1024}
    notes = import_config(vl, "c.json", "m").data["notes"]
    assert "use_sliding_window ignored: Qwen3-VL's text model applies no window (sliding_window 1024 does not apply)" \
        in notes and "use_sliding_window is false" not in notes
