"""What a fuzz audit of every input path found (2026-12-04): each bad input is one message naming the file, field
and rule with a non-zero exit; none is dropped, coerced or reported as something else."""

from __future__ import annotations

import json

import pytest

from conftest import ROOT, run
from kvcalc.errors import SpecError
from kvcalc.hardware import hardware_from_dict
from kvcalc.units import parse_size

H100 = (ROOT / "hardware_specs" / "h100-80gb.yaml").read_text()
TINY = """name: tiny
family: test
d_model: 4096
n_layers: 32
vocab_size: 128256
max_context: 8192
ffn: {kind: dense, d_ff: 14336}
layer_groups:
  - name: global
    layers: GLOBAL
    attention: {kind: gqa, n_heads: 32, n_kv_heads: 8}
  - name: local
    layers: rest
    sliding_window: 1024
    attention: {kind: gqa, n_heads: 32, n_kv_heads: 8}
"""


def refused(*args: str, status: int = 1) -> str:
    """stderr of a run that must fail with `status` and no traceback."""
    res = run(*args, ok=False)
    assert res.exit_code == status, (res.exit_code, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr + res.stdout
    assert res.exception is None or isinstance(res.exception, SystemExit)
    return res.stderr


def test_a_path_the_system_will_not_look_up_is_a_read_error_not_a_write_error():
    long = "x" * 256  # past NAME_MAX (255) on Linux: stat fails with ENAMETOOLONG, not 'no such file'
    err = refused("show", long)
    assert f"{long}: cannot read: File name too long" in err and "cannot write" not in err
    err = refused("compare", "gpt2", "--hardware", long + ".yaml", "--columns", "time")
    assert "cannot read: File name too long" in err and "cannot write" not in err


@pytest.mark.parametrize(("ref", "message"), [
    (b"\xff\xfe", "cannot read: not UTF-8 text (byte 0xff at offset 0)"),
    (b"x" * 300, "not the name of a snapshot folder"),
    (b"../../etc\n", "holds '../../etc', not the name of a snapshot folder"),
])
def test_a_hub_cache_whose_refs_main_is_not_a_snapshot_name(tmp_path, monkeypatch, ref, message):
    repo = tmp_path / "models--org--m1"
    (repo / "refs").mkdir(parents=True)
    (repo / "snapshots" / "abc").mkdir(parents=True)
    (repo / "refs" / "main").write_bytes(ref)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    err = refused("show", "org/m1")
    assert f"{repo / 'refs' / 'main'}: " in err and message in err


def test_a_layer_group_that_selects_no_layer_is_refused(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY.replace("GLOBAL", "{every: 6, start: 50}"))
    err = refused("show", str(path))
    assert "layer_groups[0].layers: selects none of the 32 layers (a group needs one)" in err
    path.write_text(TINY.replace("GLOBAL", "[]"))
    assert "layer_groups[0].layers: selects none of the 32 layers" in refused("show", str(path))
    path.write_text(TINY.replace("GLOBAL", "{every: 6, start: 5}"))  # layers 5, 11, ..., 29: five global layers
    out = json.loads(run("show", str(path), "--ctx", "4k", "-f", "json").stdout)
    assert [g["n_layers"] for g in out["groups"]] == [5, 27]


def test_a_layer_range_of_thousands_of_digits_is_named_briefly(tmp_path):
    path = tmp_path / "tiny.yaml"
    for selector in (f'"0-{"9" * 5000}"', f'"{"9" * 5000}-3"'):
        path.write_text(TINY.replace("GLOBAL", "[0]").replace("layers: rest", f"layers: {selector}"))
        err = refused("show", str(path))
        assert "(5,000 digits) does not exist (n_layers is 32)" in err and len(err) < 600
        assert "sys.set_int_max_str_digits" not in err


def test_an_empty_value_is_refused_not_dropped():
    assert "'' is not a comma list of token counts" in refused("fit", "llama3-8b", "--hardware", "h100-80gb",
                                                             "--ctx", "", status=2)
    assert "--chart ''" in refused("compare", "gpt2", "--chart", "")
    assert "an empty caption" in refused("compare", "gpt2", "-f", "latex", "--caption", " ", status=2)


@pytest.mark.parametrize("text", ["0100", "_85899345920_", "1__0", " 80 ", "8_5__0"])
def test_hardware_numbers_are_written_as_yaml_and_python_write_them(text):
    data = {**_h100(), "memory_bytes": text}
    with pytest.raises(SpecError) as exc:
        hardware_from_dict(data, "hw.yaml")
    assert "hw.yaml: memory_bytes:" in str(exc.value)
    if text == "0100":
        assert "a leading zero" in str(exc.value)


@pytest.mark.parametrize(("text", "value"), [("85_899_345_920", 85_899_345_920), ("85899345920", 85_899_345_920),
                                             ("80GiB", 80 * 2**30), ("80 GB", 80 * 10**9), ("0.5e3", 500)])
def test_hardware_numbers_that_are_read(text, value):
    assert hardware_from_dict({**_h100(), "memory_bytes": text}, "hw.yaml").memory_bytes == value


def _h100() -> dict:
    import yaml

    return yaml.safe_load(H100)


def test_a_size_of_thousands_of_digits_is_named_briefly():
    with pytest.raises(ValueError, match=r"\(5,000 digits\) is not a size a machine has"):
        parse_size("9" * 5000)
    assert parse_size("8G") == 8 * 2**30
    err = refused("run", "gpt2", "--ctx", "8", "--max-memory", "9" * 5000, status=2)
    assert "(5,000 digits)" in err and "set_int_max_str_digits" not in err
    assert "(21 digits): too large" in refused("sweep", "gpt2", "--batch", "1," + "9" * 21, status=2)


def test_threads_have_a_bound():
    assert "at most 4,096" in refused("run", "gpt2", "--ctx", "8", "--threads", "1" + "0" * 29, status=2)


def test_a_mapping_takes_one_merge_key(tmp_path):
    path = tmp_path / "merge.yaml"
    text = TINY.replace("GLOBAL", "[0]").replace("ffn: {kind: dense, d_ff: 14336}", "ffn:\n  <<: {kind: dense}\n  <<: {d_ff: 1024}")
    path.write_text(text)
    err = refused("show", str(path))
    assert "a second merge key '<<' (line 9; first at line 8)" in err
    path.write_text(TINY.replace("GLOBAL", "[0]").replace("ffn: {kind: dense, d_ff: 14336}",
                                                          "ffn:\n  <<: [{kind: dense}, {d_ff: 14336}]"))
    run("show", str(path))  # one merge key of two mappings


def test_output_dash_is_stdout_and_import_writes_no_json(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = run("compare", "gpt2", "--ctx", "1k", "-o", "-").stdout
    assert "gpt2" in out and not (tmp_path / "-").exists()
    config = ROOT / "tests" / "data" / "reference" / "models" / "deepseek-v2-lite.json"
    spec = run("import", str(config), "-o", "-").stdout
    assert spec.startswith("name: deepseek-v2-lite") and not (tmp_path / "-").exists()
    err = refused("import", str(config), "-o", "spec.json")
    assert "--output spec.json: the spec is YAML; name the file .yaml or .yml" in err
    assert not (tmp_path / "spec.json").exists()


def test_choices_are_read_in_any_case(tmp_path):
    assert run("compare", "gpt2", "--ctx", "1k", "--columns", "KV").stdout == run("compare", "gpt2", "--ctx", "1k").stdout
    assert json.loads(run("schema", "LIST").stdout) == json.loads(run("schema", "list").stdout)
    chart = run("compare", "gpt2", "--ctx", "1k", "--chart", "KV_CACHE_BYTES").stdout
    assert "gpt2 @ 1k" in chart and chart.rstrip().endswith("36.0 MiB")  # 12 layers · 2 · 768 · 2 B · 1,024 tokens
