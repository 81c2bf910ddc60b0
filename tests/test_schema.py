"""#10 item 7: `kvcalc schema COMMAND` is generated from the typed results and validates real output."""

from __future__ import annotations

import copy
import json

import pytest
import typer.main

from conftest import run
from kvcalc.cli import app
from kvcalc.errors import KvcalcError
from kvcalc.registry import bundled_names
from kvcalc.schema import COMMANDS

jsonschema = pytest.importorskip("jsonschema", reason="optional: jsonschema not installed (pip install '.[test]')")


def schema(command: str) -> dict:
    out = json.loads(run("schema", command).stdout)
    jsonschema.Draft202012Validator.check_schema(out)
    return out


def validate(doc, s: dict) -> None:
    """Raise jsonschema.ValidationError unless `doc` fits `s` (its schema checked once, by `schema`)."""
    jsonschema.Draft202012Validator(s).validate(doc)


def output(*args: str):
    return json.loads(run(*args, "-f", "json").stdout)


def rejects(doc, s: dict) -> bool:
    """Whether the schema refuses `doc` (for the checks that a mutated output fails)."""
    return not jsonschema.Draft202012Validator(s).is_valid(doc)


def json_commands() -> set[str]:
    """Every command of the typer app with a json --format, as `kvcalc schema` names it (group-subcommand)."""
    found = set()

    def walk(cmd, path: tuple[str, ...]) -> None:
        for name, sub in (getattr(cmd, "commands", None) or {}).items():
            walk(sub, path + (name,))
        if any("--format" in p.opts and "json" in (p.metavar or "") for p in getattr(cmd, "params", [])):
            found.add("-".join(path))

    walk(typer.main.get_command(app), ())
    return found


@pytest.mark.slow
def test_every_command_with_json_output_has_a_schema():
    commands = json_commands()
    assert {"list", "compare", "cost", "show", "run", "table-dims"} <= commands  # the walk finds nested commands
    assert commands == set(COMMANDS)  # a new json command without a schema (or a schema of no command) fails here
    assert f"One of: {', '.join(COMMANDS)}." in " ".join(run("schema", "--help").stdout.split())
    for name in commands:
        schema(name)


def splits(name: str, tp: int = 2) -> bool:
    """Whether tp splits the model's heads (falcon-7b's 71 do not split over 2 GPUs: refused, as vLLM does)."""
    from conftest import spec
    from kvcalc.costs.parallel import check_layout
    from kvcalc.settings import Settings

    try:
        check_layout(spec(name), Settings(ctx=1, tp=tp))
    except KvcalcError:
        return False
    return True


@pytest.mark.slow
def test_compare_schema_validates_every_bundled_model():
    s = schema("compare")
    names = [name for name in bundled_names() if splits(name)]
    assert len(names) >= len(bundled_names()) - 1
    rows = output("compare", *names, "--ctx", "4k,128k", "--columns", "all", "--hardware", "h100-80gb", "--tp", "2",
                  "--engine", "vllm")
    assert len(rows) == 2 * len(names)
    validate(rows, s)
    assert s["items"]["properties"]["kv_cache_bytes"]["type"] == "integer"
    with pytest.raises(jsonschema.ValidationError):  # a string where an integer belongs is caught
        validate([{**rows[0], "kv_cache_bytes": "42"}], s)
    with pytest.raises(jsonschema.ValidationError):  # and so is a key the schema does not know
        validate([{**rows[0], "surprise": 1}], s)


@pytest.mark.slow
def test_compare_explain_rows_carry_a_derivation_the_schema_describes():
    s = schema("compare")
    rows = output("compare", *bundled_names(), "--ctx", "4k", "--explain", "--kv-dtype", "fp8")
    validate(rows, s)
    kinds = {k for r in rows for g in r["derivation"]["groups"] for k in g}
    assert {"state", "cross"} <= kinds  # the optional parts (qwen3-next's states, whisper's cross-attention) are there
    bad = copy.deepcopy(rows[0])
    bad["derivation"]["groups"][0]["symbols"][0]["value"] = "8"
    assert rejects([bad], s)
    bad = copy.deepcopy(rows[0])
    bad["derivation"]["groups"][0]["surprise"] = 1
    assert rejects([bad], s)


@pytest.mark.slow
def test_explain_under_engine_and_kv_quant_validates():
    # the derivation's engine pages and --kv-quant payload (c398e64, b860e9e) are in the schema, required where given
    s = schema("compare")
    engine = output("compare", *FEW, "--ctx", "100000", "--explain", "--engine", "vllm", "--tp", "2")
    validate(engine, s)
    assert all("engine_kv_bytes" in r["derivation"] for r in engine)
    assert any("engine_state_bytes" in r["derivation"] for r in engine)  # qwen3-next's states
    quant = output("compare", *FEW, "--ctx", "4k", "--explain", "--kv-dtype", "int4", "--kv-quant", "g64")
    validate(quant, s)
    assert all(r["derivation"]["kv_quant"] == "g64" for r in quant)
    bad = copy.deepcopy(engine[0])
    del bad["derivation"]["groups"][0]["engine"]["pages"]
    assert rejects([bad], s)
    validate(output("show", "qwen3-next-80b-a3b", "--ctx", "1", "--explain", "--kv-dtype", "int4", "--kv-quant", "g64",
                    "--engine", "vllm"), schema("show"))


@pytest.mark.slow
def test_other_schemas_validate_their_output():
    validate(output("sweep", "gpt2", "deepseek-v2", "--ctx", "1k..8k"), schema("sweep"))
    validate(output("list"), schema("list"))
    validate(output("fit", "llama3.1-8b", "--hardware", "h100-80gb", "--ctx", "8k,32k"), schema("fit"))
    validate(output("table", "models"), schema("table-models"))
    res = run("schema", "bogus", ok=False)
    assert res.exit_code == 1 and "no schema for 'bogus'" in res.stderr and "table-dims" in res.stderr


# One model of each kind in the fast loop (nemotron-h has a layer group named like a summary key); every bundled
# model in the full suite.
FEW = ("llama3-70b", "gemma3-27b", "deepseek-v3.2", "qwen3-next-80b-a3b", "whisper-large-v3", "nemotron-h-56b")
EVERY = pytest.mark.slow


@pytest.mark.slow
@pytest.mark.parametrize(("extra", "names"), [
    (("--ctx", "4k"), FEW),
    pytest.param(("--ctx", "4k"), None, marks=EVERY),
    pytest.param(("--ctx", "128k", "--explain", "--engine", "vllm", "--tp", "2"), None, marks=EVERY)])
def test_show_schema_validates_every_bundled_model(extra, names):
    from kvcalc.present.summary import SHOW_SUMMARY

    s = schema("show")
    for name in [n for n in names or bundled_names() if "--tp" not in extra or splits(n)]:
        doc = output("show", name, *extra)
        validate(doc, s)
        groups = {g["group"] if g["group"] not in SHOW_SUMMARY else f"{g['group']} (layer group)" for g in doc["groups"]}
        assert set(doc["summary"]) - set(SHOW_SUMMARY) == groups, name  # the extra keys are the groups' lines
        assert ("derivation" in doc) == ("--explain" in extra)
        if "--tp" in extra:
            assert doc["summary"]["gpus"] == 2 and "engine_kv_bytes" in doc["summary"]


def test_show_summary_keeps_a_fact_when_a_layer_group_has_its_name():
    summary = output("show", "nemotron-h-56b", "--ctx", "8k")["summary"]  # its groups: mamba2, attention, mlp
    assert summary["attention"] == "MAMBA2+GQA"  # the model's attention, not the group's line written over it
    assert summary["attention (layer group)"].startswith("GQA on 10 layer(s) [7,18,")
    assert "| attention (layer group) | GQA on 10 layer(s)" in run("show", "nemotron-h-56b", "-f", "markdown").stdout


@pytest.mark.slow
def test_show_schema_per_layer_and_mutations():
    s = schema("show")
    doc = output("show", "gemma3-1b", "--per-layer", "--ctx", "8k")
    validate(doc, s)
    assert len(doc["layers"]) == 26 and "groups" not in doc
    assert rejects({**doc, "groups": doc["layers"]}, s)  # groups or layers, never both
    assert rejects({**doc, "layers": [{k: v for k, v in r.items() if k != "layer"} for r in doc["layers"]]}, s)
    assert rejects({**doc, "spec": {**doc["spec"], "surprise": 1}}, s)  # the spec's own keys only
    attention = doc["spec"]["layer_groups"][0]["attention"]
    assert rejects({**doc, "spec": {**doc["spec"], "layer_groups": [{**doc["spec"]["layer_groups"][0],
                                                                     "attention": {**attention, "kv_lora_rank": 512}}]}}, s)
    assert rejects({**doc, "summary": {**doc["summary"], "norm": "rmsnorm"}}, s)  # not a layer group's line
    assert rejects({**doc, "summary": {**doc["summary"], "kv_cache_bytes": 1.5}}, s)
    # an audit: under --engine vLLM's padding slots (SGLang's other buffers) have a row with no layer, which the
    # schema refused; a layer's row still needs its layer
    for args in (("gemma3-1b", "--engine", "vllm"), ("whisper-large-v3", "--engine", "sglang")):
        doc = output("show", *args, "--per-layer", "--ctx", "4k")
        extra = [r for r in doc["layers"] if "layer" not in r]
        assert extra and {r["layers"] for r in extra} <= {"padding", "buffers"}
        validate(doc, s)
        assert rejects({**doc, "layers": [{**r, "layers": "0"} for r in extra]}, s)


@pytest.mark.slow
@pytest.mark.parametrize(("extra", "names"), [
    (("--ctx", "4k"), FEW),
    pytest.param(("--ctx", "4k"), None, marks=EVERY),
    pytest.param(("--ctx", "128k", "--hardware", "h100-80gb", "--tp", "2", "--batch", "8"), None, marks=EVERY)])
def test_cost_schema_validates_every_bundled_model(extra, names):
    s = schema("cost")
    for name in [n for n in names or bundled_names() if "--tp" not in extra or splits(n)]:
        validate(output("cost", name, *extra), s)
    doc = output("cost", "deepseek-v2", "--mla-cache", "expanded", *extra)
    validate(doc, s)
    assert set(doc["flops"]) == {"prefill", "decode_token_naive", "generate_cached_naive", "generate_uncached"}
    if "--hardware" in extra:
        assert {"prefill_seconds", "tp_allreduce_bytes", "comm_seconds_per_token"} <= set(doc["summary"])
    assert rejects({**doc, "flops": {**doc["flops"], "decode_token": {"total": 1}}}, s) is False  # a pass it knows
    assert rejects({**doc, "flops": {**doc["flops"], "verify": {"total": 1}}}, s)  # one it does not
    assert rejects({**doc, "flops": {**doc["flops"], "prefill": {"ffn/dense": 1}}}, s)  # a pass without its total
    assert rejects({**doc, "summary": {**doc["summary"], "surprise": 1}}, s)
    assert rejects({k: v for k, v in doc.items() if k != "gen"}, s)


@pytest.mark.slow
def test_run_schema_validates_a_tiny_run():
    s = schema("run")
    doc = output("run", "gemma3-1b", "--ctx", "64", "--decode", "2", "--layers", "1", "-q")
    validate(doc, s)
    assert {r["kind"] for r in doc["rows"]} == {"shape", "bytes", "flops", "int", "seconds", "rate"}
    shape = next(i for i, r in enumerate(doc["rows"]) if r["kind"] == "shape")
    size = next(i for i, r in enumerate(doc["rows"]) if r["kind"] == "bytes")
    rows = copy.deepcopy(doc["rows"])
    rows[shape]["predicted"], rows[size]["predicted"] = rows[size]["predicted"], rows[shape]["predicted"]
    assert rejects({**doc, "rows": rows}, s)  # a shape where bytes belong, and bytes where a shape belongs
    assert rejects({**doc, "settings": {**doc["settings"], "ctx": "64"}}, s)
    assert rejects({**doc, "checks": [{**doc["checks"][0], "error": "small"}]}, s)
    assert rejects({**doc, "checks": [{k: v for k, v in doc["checks"][0].items() if k != "passed"}]}, s)
    # an audit: every setting was described as 'parsed (a size in bytes)', and rows declared a `compared` string
    # the output never has (it has `match`)
    described = s["properties"]["settings"]["properties"]
    assert set(doc["settings"]) <= set(described) and described["ctx"]["description"].startswith("--ctx: prompt tokens")
    assert [k for k, v in described.items() if "bytes" in v["description"]] == ["max_memory"]
    row_keys = set(s["properties"]["rows"]["items"]["properties"])
    assert row_keys == {k for r in doc["rows"] for k in r} | {"match"} and "compared" not in row_keys


@pytest.mark.slow
@pytest.mark.parametrize("args", [("deepseek-v2-lite", "--rope-demo"), ("qwen3-next-80b-a3b",),
                                  ("whisper-large-v3", "--enc-ctx", "16")])
def test_run_schema_validates_mla_state_and_cross_attention_runs(args):
    doc = output("run", args[0], "--ctx", "16", "--decode", "1", "--layers", "1", "-q", *args[1:])
    validate(doc, schema("run"))
    assert doc["ok"]


@pytest.mark.slow
def test_hardware_approx_and_table_dims_schemas_validate_their_output():
    s = schema("hardware")
    rows = output("hardware")
    validate(rows, s)
    assert rejects([{**rows[0], "memory_bytes": "80GB"}], s) and rejects([{**rows[0], "surprise": 1}], s)
    s = schema("approx")
    small = ("--n", "64", "--seeds", "1", "--scale", "1", "--method", "exact,topk:k=8,nystrom:m=8")
    plain, spectrum = output("approx", *small), output("approx", *small, "--spectrum")
    transmla = output("approx", "--transmla", "llama3-8b", "--transmla", "qwen2.5-7b")
    for doc in (plain, spectrum, transmla):
        validate(doc, s)
    assert rejects({**spectrum, "spectrum": [{**spectrum["spectrum"][0], "rank_90": 1.5}]}, s)
    assert rejects([{**plain[0], "flops": "many"}], s) and rejects([{**transmla[0], "surprise": 1}], s)
    s = schema("table-dims")
    validate(output("table", "dims"), s)
    rows = output("table", "dims", "deepseek-v2", "llama3-8b", "gemma3-1b")
    validate(rows, s)
    assert any("deepseek-v2" in r for r in rows) and any("llama3-8b" in r for r in rows)
    assert rejects([{**rows[0], "deepseek-v2": 512}], s)  # a model's value is text ("512 × 5,120")
