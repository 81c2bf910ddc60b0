"""#10 item 7: `kvcalc schema COMMAND` is generated from the typed results and validates real output."""

from __future__ import annotations

import json

import pytest

from conftest import run
from kvcalc.registry import bundled_names

jsonschema = pytest.importorskip("jsonschema", reason="optional: jsonschema not installed (pip install '.[test]')")


def schema(command: str) -> dict:
    out = json.loads(run("schema", command).stdout)
    jsonschema.Draft202012Validator.check_schema(out)
    return out


def test_compare_schema_validates_every_bundled_model():
    s = schema("compare")
    names = bundled_names()
    rows = json.loads(run("compare", *names, "--ctx", "4k,128k", "--columns", "all", "--hardware", "h100-80gb",
                          "--tp", "2", "--engine", "vllm", "-f", "json").stdout)
    assert len(rows) == 2 * len(names)
    jsonschema.validate(rows, s)
    assert s["items"]["properties"]["kv_cache_bytes"]["type"] == "integer"
    with pytest.raises(jsonschema.ValidationError):  # a string where an integer belongs is caught
        jsonschema.validate([{**rows[0], "kv_cache_bytes": "42"}], s)
    with pytest.raises(jsonschema.ValidationError):  # and so is a key the schema does not know
        jsonschema.validate([{**rows[0], "surprise": 1}], s)


def test_other_schemas_validate_their_output():
    jsonschema.validate(json.loads(run("sweep", "gpt2", "deepseek-v2", "--ctx", "1k..8k", "-f", "json").stdout),
                        schema("sweep"))
    jsonschema.validate(json.loads(run("list", "-f", "json").stdout), schema("list"))
    jsonschema.validate(json.loads(run("fit", "llama3.1-8b", "--hardware", "h100-80gb", "--ctx", "8k,32k",
                                       "-f", "json").stdout), schema("fit"))
    jsonschema.validate(json.loads(run("table", "models", "-f", "json").stdout), schema("table-models"))
    res = run("schema", "bogus", ok=False)
    assert res.exit_code == 1 and "no schema for 'bogus'" in res.stderr
