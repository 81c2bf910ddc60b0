"""Hostile spec and hardware files (#13 items 1-3): each is refused through the real CLI within a second, with one
message naming the file, the field or key and the rule, and never a traceback."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from conftest import ROOT, run

LLAMA = (ROOT / "model_specs" / "llama3-70b.yaml").read_text()
H100 = (ROOT / "hardware_specs" / "h100-80gb.yaml").read_text()


def refused(*args, code: tuple[int, ...] = (1, 2)) -> str:
    """Run `kvcalc ARGS`, assert it fails fast with a message and no traceback, and return stderr.

    Fast is under a second of this process's CPU time: wall time would also count the other processes of a busy
    machine (CI runs the suite beside other jobs)."""
    start = time.process_time()
    res = run(*map(str, args), ok=False)
    elapsed = time.process_time() - start
    assert res.exit_code in code, str(res)
    assert "Traceback" not in res.stdout + res.stderr, str(res)
    assert res.exception is None or isinstance(res.exception, SystemExit), str(res)
    assert elapsed < 1.0, f"took {elapsed:.2f} s of CPU\n{res}"
    return res.stderr


def spec_file(tmp_path: Path, text: str, name: str = "hostile.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def edited(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


# ---------------------------------------------------------------- 1. duplicate keys


def test_duplicate_key_is_refused_naming_key_and_lines(tmp_path):
    # The example: n_layers: 40 appended to llama3-70b used to give 40 layers.
    path = spec_file(tmp_path, LLAMA + "n_layers: 40\n")
    err = refused("show", path)
    first = LLAMA.splitlines().index("n_layers: 80") + 1
    last = len(LLAMA.splitlines()) + 1
    assert f"{path}: line {last}, column 1: duplicate key 'n_layers' (line {last}; first at line {first})" in err
    assert err.count("\n") == 1


def test_duplicate_key_in_a_nested_mapping(tmp_path):
    err = refused("show", spec_file(tmp_path, edited(LLAMA, "      n_kv_heads: 8\n", "      n_kv_heads: 8\n      n_kv_heads: 64\n")))
    assert "duplicate key 'n_kv_heads'" in err


def test_merge_keys_may_still_be_overridden(tmp_path):
    # `<<` merges are how YAML shares a block; a key written beside a merge overrides it, as YAML defines.
    text = LLAMA + "x: &base {a: 1}\ny:\n  <<: *base\n  a: 2\n"
    err = refused("show", spec_file(tmp_path, text))
    assert "duplicate key" not in err and "x: unknown key" in err


# ---------------------------------------------------------------- 2. YAML 1.1 number readings


@pytest.mark.parametrize("written", ["010", "1:20", "0x2000", "0o17", "1_000", "80.0", "8.0e+1", "true", "'80'"])
def test_yaml_11_numbers_are_not_read_as_other_numbers(tmp_path, written):
    err = refused("show", spec_file(tmp_path, edited(LLAMA, "n_layers: 80", f"n_layers: {written}")))
    shown = {"true": "true", "80.0": "80.0", "8.0e+1": "80.0"}.get(written, repr(written.strip("'")))
    assert f"hostile.yaml: n_layers: expected an integer, got {shown}" in err


@pytest.mark.parametrize(("field", "old", "written", "shown"), [
    ("n_layers", "n_layers: 80", "n_layers: 32.5", "32.5"),
    ("n_layers", "n_layers: 80", 'n_layers: "32"', "'32'"),
    ("d_model", "d_model: 8192", "d_model: 8.192e+3", "8192.0"),
    ("tie_embeddings", "tie_embeddings: false", 'tie_embeddings: "yes"', "'yes'"),
    ("tie_embeddings", "tie_embeddings: false", "tie_embeddings: yes", "'yes'"),
])
def test_no_coercion(tmp_path, field, old, written, shown):
    err = refused("show", spec_file(tmp_path, edited(LLAMA, old, written)))
    wanted = "true or false" if field == "tie_embeddings" else "an integer"
    assert f"hostile.yaml: {field}: expected {wanted}, got {shown}" in err


def test_hardware_keeps_whole_numbers_in_scientific_notation_and_underscores(tmp_path):
    # YAML 1.1 reads 989.4e12 as a string and 3.35e+12 as a float; both are whole numbers, so a hardware file may
    # write them (the bundled presets write 989_400_000_000_000).
    numbers = {"peak_flops_bf16": "989.4e12", "memory_bandwidth": "3.35e+12", "memory_bytes": "80_000_000_000"}
    text = "\n".join(next((f"{k}: {v}" for k, v in numbers.items() if line.startswith(k + ":")), line)
                     for line in H100.splitlines())
    run("compare", "llama3-8b", "--ctx", "4k", "--hardware", spec_file(tmp_path, text, "my-h100.yaml"))


@pytest.mark.parametrize(("written", "message"), [
    ("!!int 0x10", "!!int '0x10': an integer is written in decimal digits (YAML 1.2)"),
    ("!!int 010", "!!int '010': an integer is written in decimal digits (YAML 1.2)"),
    ("!!int 1_000", "!!int '1_000': an integer is written in decimal digits (YAML 1.2)"),
    ("!!bool yes", "!!bool 'yes': a boolean is true or false (YAML 1.2)"),
    ("!!float 1:20", "!!float '1:20': a float is written in decimal (YAML 1.2)"),
    ("1.0e+999999999", "1.0e+999999999 is out of the range of a float (it would read as infinity)"),
    ("!!timestamp 2024-01-01", "tag !!timestamp is not allowed"),
    ("!!binary aGVsbG8=", "tag !!binary is not allowed"),
    ("!!set {a: null}", "tag !!set is not allowed"),
])
def test_explicit_yaml_11_tags_and_out_of_range_floats_are_refused(tmp_path, written, message):
    # an explicit tag does not bring back YAML 1.1's readings; a float literal past 1.8e308 is not silently infinity
    err = refused("show", spec_file(tmp_path, edited(LLAMA, "n_layers: 80", f"n_layers: {written}")))
    assert f"hostile.yaml: n_layers: line 8, column 11: {message}" in err


def test_explicit_decimal_int_tag_and_dates_as_strings(tmp_path):
    # `!!int 80` is plain 80; a date is a string (YAML 1.2 has no timestamps), so a count refuses it as a string
    assert run("show", spec_file(tmp_path, edited(LLAMA, "n_layers: 80", "n_layers: !!int 80")), "-f", "json").exit_code == 0
    err = refused("show", spec_file(tmp_path, edited(LLAMA, "n_layers: 80", "n_layers: 2024-01-01")))
    assert "hostile.yaml: n_layers: expected an integer, got '2024-01-01'" in err
    out = run("show", spec_file(tmp_path, edited(LLAMA, "family: llama3", "family: 2024-01-01")), "-f", "json")
    assert '"family": "2024-01-01"' in out.stdout


# ---------------------------------------------------------------- 3. python tags


def test_python_tag_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "ran"
    text = edited(LLAMA, "family: llama3", f"family: !!python/object/apply:os.system ['touch {marker}']")
    err = refused("show", spec_file(tmp_path, text))
    assert "tag !!python/object/apply:os.system is not allowed" in err and "never runs code" in err
    assert not marker.exists()


# ---------------------------------------------------------------- 4. alias bombs, deep nesting


def test_billion_laughs_is_refused_fast(tmp_path):
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 9):
        lines.append(f"{chr(97 + i)}: &{chr(97 + i)} [" + ",".join([f"*{chr(96 + i)}"] * 9) + "]")
    text = LLAMA + "\n".join(lines) + "\nbomb: *i\n"
    err = refused("show", spec_file(tmp_path, text))
    assert "expands to more than 1,000,000 values" in err


def test_recursive_alias_and_deep_nesting_are_refused(tmp_path):
    assert "an alias refers to the value that contains it" in refused("show", spec_file(tmp_path, LLAMA + "x: &r [*r]\n"))
    deep = LLAMA + "x: " + "[" * 3000 + "]" * 3000 + "\n"
    assert "nested" in refused("show", spec_file(tmp_path, deep, "deep.yaml"))


def test_nesting_is_bounded_at_64_levels_in_both_styles():
    # the root is level 0, as in the alias count: 64 levels are read, the 65th is refused where it opens, in flow
    # style ([ and {) and in block style (indentation) alike; a key or a scalar is a level too (the 64th mapping's key)
    from kvcalc.errors import SpecError
    from kvcalc.yamlfile import parse_yaml

    flow = "x: " + "[" * 64 + "]" * 64 + "\n"
    value = parse_yaml(flow, "f.yaml")
    for _ in range(64):
        assert isinstance(value, (dict, list)) and len(value) == 1
        value = value["x"] if isinstance(value, dict) else value[0]
    assert value == []
    block = "".join(" " * i + "a:\n" for i in range(64)) + " " * 64 + "b: 1\n"
    deep = {"b": 1}
    for _ in range(64):
        deep = {"a": deep}
    assert parse_yaml("".join(" " * i + "a:\n" for i in range(63)) + " " * 63 + "b: 1\n", "f.yaml") == deep["a"]
    cases = {"x: " + "[" * 65 + "]" * 65 + "\n": "line 1, column 68", "x: " + "{a: " * 65 + "}" * 65 + "\n":
             "line 1, column 257", block: "line 65, column 65"}
    for text, where in cases.items():
        with pytest.raises(SpecError) as exc:
            parse_yaml(text, "f.yaml")
        assert str(exc.value) == f"f.yaml: {where}: nested more than 64 levels deep (a spec nests about 6)"


def test_deep_flow_nesting_is_refused_without_scanning_it():
    # PyYAML's scanner visits every open bracket at each token: 3,000 open brackets took a second of CPU before the
    # refusal (quadratic in the depth); refused at the 65th, the time no longer grows with the depth
    from kvcalc.errors import SpecError
    from kvcalc.yamlfile import parse_yaml

    start = time.process_time()
    for _ in range(10):
        with pytest.raises(SpecError, match="nested more than 64 levels deep"):
            parse_yaml("x: " + "[" * 100_000 + "]" * 100_000 + "\n", "f.yaml")
    assert time.process_time() - start < 1.0  # a few ms each; a hundred thousand brackets scanned took minutes


# ---------------------------------------------------------------- 5. what MODEL names


def test_file_over_16_mib_is_refused_before_parsing(tmp_path):
    path = tmp_path / "config.json"
    with open(path, "wb") as f:
        f.truncate(16 * 2**20 + 1)
    assert f"{path}: is 16777217 bytes; a spec or config file may be at most 16 MiB (16777216 bytes)" in refused("show", path)


def test_yaml_over_64_kib_is_refused_before_parsing(tmp_path):
    # PyYAML's parser takes up to about 40 us a byte of a flow list of numbers: 16 MiB of it ran minutes, and a
    # fuzzing audit found 256 KiB (the bound before) took 10 s of CPU
    path = tmp_path / "huge.yaml"
    path.write_text("a: [" + "0," * (2**15) + "0]\n")
    start = time.process_time()
    message = refused("show", path)
    assert time.process_time() - start < 1.0
    assert f"{path}: is {4 + 2 * 2**15 + 3} bytes; a YAML spec or hardware file may be at most 64 KiB (65536 bytes)" in message
    assert "at most 64 KiB" in refused("compare", "llama3-70b", "--hardware", path)


@pytest.mark.slow
def test_the_slowest_yaml_within_the_bound_is_read_in_seconds(tmp_path):
    path = tmp_path / "slow.yaml"
    path.write_text("a: [" + "0," * (2**15 - 4) + "0]\n")
    assert path.stat().st_size <= 64 * 2**10
    start = time.process_time()
    res = run("show", str(path), ok=False)
    assert time.process_time() - start < 20.0  # about 2.5 s on a 2-core machine; 16 MiB of it took minutes
    assert res.exit_code == 1 and "a: unknown key" in res.stderr and "Traceback" not in res.stderr


def test_non_utf8_and_binary_are_named(tmp_path):
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(LLAMA.replace("notes:", "# caf\xe9\nnotes:").encode("latin-1"))
    assert "not UTF-8 text (byte 0xe9" in refused("show", latin)
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\x7fELF\x00\x01")
    assert "a binary file" in refused("show", binary)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="optional: needs os.mkfifo")
@pytest.mark.parametrize("name", ["pipe.yaml", "pipe"])
def test_fifo_is_refused_without_blocking(tmp_path, name):
    fifo = tmp_path / name
    os.mkfifo(fifo)
    assert f"{fifo}: is a FIFO (named pipe), not a regular file" in refused("show", fifo)
    assert "is a FIFO" in refused("compare", "llama3-8b", "--hardware", fifo)


def test_symlink_loop_and_folder(tmp_path):
    loop = tmp_path / "loop.yaml"
    loop.symlink_to(loop)
    assert f"{loop}: a symlink loop" in refused("show", loop)
    assert "is a folder" in refused("show", f"{tmp_path}/")


# ---------------------------------------------------------------- 6. bounds


@pytest.mark.parametrize(("old", "new", "message"), [
    ("n_layers: 80", "n_layers: 1000000000", "n_layers: must be at most 1,000,000, got 1000000000 (line 8)\n"),
    ("n_layers: 80", "n_layers: 1000001", "n_layers: must be at most 1,000,000, got 1000001 (line 8)\n"),
    ("d_model: 8192", "d_model: 1099511627776", "d_model: must be at most 1,048,576"),
    ("vocab_size: 128256", "vocab_size: 100000000", "vocab_size: must be at most 16,777,216"),
    ("max_context: 8192", "max_context: 100000000000000000000", "max_context: must be at most 1,099,511,627,776"),
    ("      n_heads: 64", "      n_heads: 100000", "layer_groups[0].attention.n_heads: must be at most"),
])
def test_absurd_sizes_fail_naming_the_field(tmp_path, old, new, message):
    assert message in refused("show", spec_file(tmp_path, edited(LLAMA, old, new)))


def test_window_of_10_to_the_20_fails_naming_the_field(tmp_path):
    text = edited(LLAMA, "  - layers: all\n", "  - layers: all\n    sliding_window: 100000000000000000000\n")
    assert "layer_groups[0].sliding_window: must be at most 1,099,511,627,776" in refused("show", spec_file(tmp_path, text))


def test_ten_thousand_experts_is_valid_and_fast(tmp_path):
    # The bound is 65,536 experts: a 10,000-expert MoE costs nothing more to count than an 8-expert one.
    text = edited(LLAMA, "ffn:\n  kind: dense\n  d_ff: 28672", "ffn:\n  kind: moe\n  n_routed_experts: 10000\n"
                  "  n_experts_per_tok: 8\n  moe_d_ff: 2048")
    start = time.process_time()
    run("compare", spec_file(tmp_path, text), "--ctx", "4k")
    assert time.process_time() - start < 1.0
    too_many = text.replace("n_routed_experts: 10000", "n_routed_experts: 100000")
    assert "ffn.n_routed_experts: must be at most 65,536" in refused("show", spec_file(tmp_path, too_many))


# ---------------------------------------------------------------- 7. layer selectors


def test_huge_layer_range_fails_at_once_naming_the_bound(tmp_path):
    err = refused("show", spec_file(tmp_path, edited(LLAMA, "layers: all", "layers: 0-3000000")))
    assert "layer_groups[0].layers: '0-3000000': layer 3000000 does not exist (n_layers is 80)" in err
    assert err.count("\n") == 1


def test_duplicated_layer_group_is_one_line(tmp_path):
    err = refused("show", spec_file(tmp_path, LLAMA + LLAMA[LLAMA.index("  - layers: all"):]))
    assert "layer_groups[1].layers: layers 0-79 are already in layer_groups[0]" in err
    assert err.count("\n") == 1


# ---------------------------------------------------------------- 8. hardware numbers


@pytest.mark.parametrize(
    "written", ["1e999999999", "'1e999999999'", "1.0e+999999999", "9" * 5000, "1" * 5000 + "GB", "true"],
    ids=["exponent", "quoted", "float", "5000-digits", "5000-digit-size", "bool"],
)
def test_hardware_huge_numbers_fail_at_once_naming_the_field(tmp_path, written):
    text = "\n".join(f"memory_bytes: {written}" if line.startswith("memory_bytes:") else line for line in H100.splitlines())
    err = refused("compare", "llama3-8b", "--hardware", spec_file(tmp_path, text, "hw.yaml"))
    assert "hw.yaml: memory_bytes: " in err


@pytest.mark.parametrize(("old", "new", "message"), [
    # a fuzzing audit: \d and Decimal read other scripts' digits, and a norm count had no bound
    ("layers: all", 'layers: "\uff10-\uff17\uff19"', "hostile.yaml: layer_groups[0].layers: "),
    ("norms_per_layer: 2", "norms_per_layer: 65", "hostile.yaml: norms_per_layer: must be at most 64"),
])
def test_spec_numbers_are_ascii_and_bounded(tmp_path, old, new, message):
    text = LLAMA if old in LLAMA else LLAMA.replace("layer_groups:", f"{old}\nlayer_groups:", 1)
    assert message in refused("show", spec_file(tmp_path, edited(text, old, new)))


@pytest.mark.parametrize("written", ['"\uff18\uff10GiB"', '"1__0GB"', '"80GB\\n"'])
def test_hardware_sizes_are_ascii_digits_in_single_underscore_groups(tmp_path, written):
    text = "\n".join(f"memory_bytes: {written}" if line.startswith("memory_bytes:") else line for line in H100.splitlines())
    err = refused("compare", "llama3-8b", "--hardware", spec_file(tmp_path, text, "my-h100.yaml"))
    assert "my-h100.yaml: memory_bytes: " in err


def test_a_model_type_is_a_plain_name(tmp_path):
    import json

    for model_type in ("", "ll\u0000ama", "\ud800"):
        path = tmp_path / "config.json"
        path.write_text(json.dumps({"model_type": model_type, "hidden_size": 64}))
        assert f"{path}: model_type: must be a string naming the architecture in letters, digits" in refused("show", path)


def test_a_schema_error_names_the_line_of_its_key(tmp_path):
    # a review: the README says each message names the key's path and line; the YAML reader's refusals did, a field's
    # rule (a count written 010, a misspelled key) named the path alone. The lines of llama3-70b.yaml's keys, counted
    lines = LLAMA.splitlines()
    at = {key: 1 + next(i for i, line in enumerate(lines) if line.strip().startswith(f"{key}:")) for key in ("n_layers", "n_kv_heads")}
    text = edited(edited(LLAMA, "n_layers: 80", "n_layers: 010"), "n_kv_heads: 8", "n_kv_headz: 8")
    err = refused("compare", spec_file(tmp_path, text))
    assert f"n_layers: expected an integer, got '010' (an integer is written in plain decimal digits: no leading zero, " \
        f"underscores, prefixes or exponents) (line {at['n_layers']})" in err
    assert f"layer_groups[0].attention.n_kv_headz: unknown key: did you mean n_kv_heads? (line {at['n_kv_heads']})" in err
    # a hardware file too; a field the file leaves out has no line to name
    err = refused("compare", "llama3-8b", "--hardware", spec_file(tmp_path, edited(H100, "vendor: NVIDIA", "vendor: 7"), "hw.yaml"))
    assert f"vendor: expected a string, got 7 (line {1 + H100.splitlines().index('vendor: NVIDIA')})" in err
    err = refused("compare", spec_file(tmp_path, edited(LLAMA, "d_model: 8192\n", ""), "missing.yaml"))
    assert "d_model: required field is missing\n" in err + "\n" and "d_model: required field is missing (line" not in err


def test_a_key_named_like_its_kind_is_a_key_not_the_kind(tmp_path):
    # a review: pydantic puts an FFN's kind tag in an error's path (ffn.dense.d_ff); a key of that name ('dense:' in
    # a dense FFN) was then taken for the tag: the unknown key lost its name and the missing field took its line
    lines = LLAMA.splitlines()
    ffn_line = 1 + lines.index("ffn:")
    err = refused("compare", spec_file(tmp_path, edited(LLAMA, "  d_ff: 28672\n", "  dense: 28672\n")))
    assert err.splitlines() == [
        f"error: {tmp_path / 'hostile.yaml'}: ffn.d_ff: required field is missing (line {ffn_line})",
        f"{tmp_path / 'hostile.yaml'}: ffn.dense: unknown key (check its spelling; unknown keys are errors) (line {ffn_line + 2})"]
    group = edited(LLAMA, "  - layers: all\n", "  - layers: all\n    ffn:\n      kind: moe\n      moe: 3\n")
    err = refused("compare", spec_file(tmp_path, group, "g.yaml"))
    group_ffn = 1 + group.splitlines().index("    ffn:")
    assert f"layer_groups[0].ffn.moe: unknown key (check its spelling; unknown keys are errors) (line {group_ffn + 2})" in err
    assert f"layer_groups[0].ffn.n_routed_experts: required field is missing (line {group_ffn})" in err
    # a layer selector's form is a tag too: gone from the path, and the line is its key's
    every = edited(LLAMA, "  - layers: all\n", "  - layers:\n      every: 0\n")
    err = refused("compare", spec_file(tmp_path, every, "e.yaml"))
    assert f"layer_groups[0].layers.every: must be greater than 0, got 0 (line {1 + every.splitlines().index('      every: 0')})" in err


@pytest.mark.parametrize(("written", "shown"), [("[]", "a list"), ("{a: 1}", "a mapping"), ("true", "true"), ("3", "3")])
def test_an_attention_kind_that_is_no_name(tmp_path, written, shown):
    # the fuzz suite: `kind: []` beside another error was a TypeError (unhashable list) while the path was walked
    text = edited(edited(LLAMA, "      kind: gqa", f"      kind: {written}"), "  d_ff: 28672\n", "  dense: 28672\n")
    err = refused("compare", spec_file(tmp_path, text))
    line = 1 + text.splitlines().index(f"      kind: {written}")
    assert f"layer_groups[0].attention.kind: a kind is a name, got {shown}: choose one of mha, gqa," in err
    assert f"(line {line})" in err and "ffn.dense: unknown key" in err


def test_the_hints_of_an_unknown_key_or_a_string_count_fit_the_case(tmp_path):
    # a review of the messages above: a quoted count got the rule of underscores and prefixes, 'none' (an attention
    # kind and an FFN kind) named the other family's kinds, and a misspelling was offered a field already given
    quoted = refused("compare", spec_file(tmp_path, edited(LLAMA, "n_layers: 80", 'n_layers: "80"'), "q.yaml"))
    assert "n_layers: expected an integer, got '80' (in quotes it is a string: write the number without them)" in quoted
    assert "(an integer is written" not in refused("compare", spec_file(tmp_path, edited(LLAMA, "n_layers: 80", "n_layers: v4"), "v.yaml"))
    ffn = edited(LLAMA, "ffn:\n  kind: dense\n", "ffn:\n  kind: none\n  n_heads: 3\n")
    err = refused("compare", spec_file(tmp_path, ffn, "f.yaml"))
    assert "ffn.n_heads: not a field of kind" not in err and "ffn.n_heads: unknown key" in err
    twice = edited(LLAMA, "  d_ff: 28672\n", "  d_ff: 28672\n  d_fff: 1\n")
    assert "did you mean d_ff?" not in refused("compare", spec_file(tmp_path, twice, "d.yaml"))


def test_a_group_without_layers_is_told_it_took_them_all(tmp_path):
    # a usability review: a second group whose `layers:` was left out read 'layers 5,11,... are already in
    # layer_groups[0]', not why: the field's default is all of them
    gemma = (ROOT / "model_specs" / "gemma3-27b.yaml").read_text()
    err = refused("show", spec_file(tmp_path, edited(gemma, "    layers: rest\n", "")))
    assert ("layer_groups[1].layers: layers 5,11,17,23,29,35,41,47,53,59 are already in layer_groups[0] (a group "
            "without `layers:` takes all of them; `layers: rest` takes those no other group has)") in err
    first = edited(gemma, "    layers: {every: 6, start: 5}\n", "")  # the earlier group left it out: the same hint
    assert ("layer_groups[1].layers: 'rest' is empty: the other groups already cover every layer (layer_groups[0] has "
            "no `layers:`, so it takes all of them)") in refused("show", spec_file(tmp_path, first, "f.yaml"))
    both = edited(gemma, "    layers: rest\n", "    layers: all\n")  # given: no hint, the rule alone
    assert "are already in layer_groups[0]\n" in refused("show", spec_file(tmp_path, both, "b.yaml")) + "\n"
