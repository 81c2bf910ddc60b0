"""Input paths an adversarial review found unguarded: a ~user with no account (a traceback), a config of 690,000 keys
(69 s of CPU before its refusal), a multimodal config's errors naming its text_config keys bare, Python's reprs of
JSON values in messages. Each now gets one line naming the file, field and rule, and exit 1."""

from __future__ import annotations

import json

from conftest import REFERENCE, run


def _one_error(res) -> str:
    assert res.exit_code == 1 and "Traceback" not in res.stderr, str(res)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), str(res)
    return lines[0]


def test_a_tilde_user_without_an_account_is_named(tmp_path, monkeypatch):
    # pathlib's expanduser raises RuntimeError for ~nosuchuser; bash passes such a word through unexpanded
    for args in (["show", "~nosuchuser/spec.yaml"], ["cost", "llama3-8b", "--hardware", "~nosuchuser/h.yaml"],
                 ["approx", "--data", "~nosuchuser/x.npz"]):
        line = _one_error(run(*args, ok=False))
        assert "cannot expand ~nosuchuser: no account is named 'nosuchuser'; write the path in full" in line, line
    monkeypatch.setenv("HF_HUB_CACHE", "~nosuchuser/hub")  # a Hub id looks in the caches the variables name
    assert "HF_HUB_CACHE: cannot expand ~nosuchuser" in _one_error(run("show", "org/model", ok=False))
    # the output is written as given (a shell expands an unquoted ~ first): a folder that is not there is said so
    line = _one_error(run("show", "llama3-8b", "-o", "~nosuchuser/x.csv", ok=False))
    assert "~nosuchuser/x.csv: cannot write (No such file or directory)" in line, line


def test_a_quoted_tilde_reads_the_home_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "spec.yaml").write_text((REFERENCE.parent.parent.parent / "model_specs" / "llama3-8b.yaml").read_text())
    rows = json.loads(run("compare", "~/spec.yaml", "--ctx", "4k", "-f", "json").stdout)
    assert rows[0]["kv_cache_bytes"] == 2 * 32 * 8 * 128 * 2 * 4096  # K and V, 32 layers, 8 KV heads of 128, bf16


def test_a_mapping_of_more_keys_than_a_config_has_is_refused(tmp_path):
    keys = {f"k{i}": 1 for i in range(10_000)}  # with model_type: 10,001 keys at the top level
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", **keys}))
    line = _one_error(run("show", str(path), ok=False))
    assert line == (f"error: {path}: the top level has 10,001 keys, above the 10,000 kvcalc reads in one mapping (a "
                    "model's config.json has tens): not a model config")


def _qwen3_vl(**text_changes) -> dict:
    cfg = json.loads((REFERENCE / "configs-extra" / "qwen3-vl-8b-instruct.json").read_text())
    for key, value in text_changes.items():
        if value is ...:
            del cfg["text_config"][key]
        else:
            cfg["text_config"][key] = value
    return cfg


def test_a_multimodal_configs_errors_name_its_text_config_keys(tmp_path):
    path = tmp_path / "config.json"
    # hidden_size missing where the importer reads it, though the top level has one: named under text_config
    path.write_text(json.dumps({**_qwen3_vl(hidden_size=...), "hidden_size": 4096}))
    assert _one_error(run("show", str(path), ok=False)) == \
        f"error: {path}: text_config.hidden_size: required field is missing from the config"
    path.write_text(json.dumps(_qwen3_vl(num_hidden_layers=True)))  # JSON's true, as the file writes it
    assert _one_error(run("show", str(path), ok=False)) == \
        f"error: {path}: text_config.num_hidden_layers: must be a whole number, got true"
    path.write_text(json.dumps(_qwen3_vl(num_attention_heads=0)))
    assert _one_error(run("show", str(path), ok=False)) == \
        f"error: {path}: text_config.num_attention_heads: must be at least 1, got 0"


def test_a_config_cut_to_its_model_type_is_warned_of(tmp_path):
    # Ministral3Config's defaults (transformers configuration_ministral3.py): 34 layers, 8 KV heads of 128; an empty
    # config is that model, as transformers reads it, but no published one omits its sizes: said on stderr
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "ministral3"}')
    rows = json.loads(run("compare", str(path), "--ctx", "4k", "-f", "json").stdout)
    assert rows[0]["kv_cache_bytes"] == 2 * 34 * 8 * 128 * 2 * 4096
    res = run("compare", str(path), "--ctx", "4k")  # a human format's warnings on stderr
    assert (f"warning: {path}: it gives no hidden_size or num_hidden_layers: read as the config class's defaults "
            "(4,096 wide, 34 layers), as transformers would; check it is the whole config") in res.stderr
    path.write_text('{"model_type": "gemma3n_text"}')
    assert "(2,048 wide, 35 layers)" in run("show", str(path)).stderr
    # the published Gemma 3n E2B config gives its sizes: no such warning
    assert "gives no" not in run("show", str(REFERENCE / "configs-gemma3n" / "gemma-3n-e2b.json")).stderr


def test_a_specs_text_has_no_control_or_format_character(tmp_path):
    # an ESC in source or family reached the terminal raw (a conceal escape could hide the rows after it) and a bare
    # CR split show's csv row; line breaks and tabs stay allowed in source and notes (a YAML literal block)
    base = (REFERENCE.parent.parent.parent / "model_specs" / "llama3-8b.yaml").read_text()
    path = tmp_path / "spec.yaml"
    for key, value in (("source", "\\e[2K\\rkv_cache_bytes 1 B"), ("family", "\\e[31mred"), ("notes", "a\\u200bb"),
                       ("notes", "a\\u202eb")):
        text = "\n".join(line for line in base.splitlines() if not line.startswith(f"{key}:"))
        path.write_text(f'{key}: "{value}"\n{text}\n')
        line = _one_error(run("show", str(path), ok=False))
        assert f"{key}: must be printable text: no control character" in line, line
    text = "\n".join(line for line in base.splitlines() if not line.startswith("notes:"))
    path.write_text(f'notes: "first line\\n\\tsecond, indented"\n{text}\n')
    assert run("show", str(path)).exit_code == 0


def test_a_hardware_files_text_has_no_control_character(tmp_path):
    base = (REFERENCE.parent.parent.parent / "hardware_specs" / "h100-80gb.yaml").read_text()
    path = tmp_path / "hw.yaml"
    path.write_text(base.replace("vendor: NVIDIA", 'vendor: "NVIDIA\\e[8m"', 1))
    line = _one_error(run("cost", "llama3-8b", "--hardware", str(path), ok=False))
    assert "vendor: must be printable text: no control character" in line, line


def test_a_token_count_of_many_digits_is_refused_by_its_rule():
    # Python refuses int() past 4,300 digits with a message about sys.set_int_max_str_digits: the count is bounded first
    long = "1" * 10_000
    for args in (["compare", "llama3-8b", "--ctx", long], ["cost", "llama3-8b", "--gen", long],
                 ["sweep", "llama3-8b", "--ctx", f"1k..{long}"], ["approx", "--n", long]):
        res = run(*args, ok=False)
        assert res.exit_code == 2 and "above 2^40 tokens, the largest count kvcalc accepts" in res.stderr, str(res)
        assert "set_int_max_str_digits" not in res.stderr
    res = run("compare", "llama3-8b", "--ctx", "1." + "0" * 10_000 + "k", ok=False)
    assert res.exit_code == 2 and "at most 40 decimal places" in res.stderr, str(res)
    # leading zeros are no size, and 2^40 itself is accepted
    assert json.loads(run("compare", "llama3-8b", "--ctx", "0" * 30 + "4k", "-f", "json").stdout)[0]["ctx"] == 4096
    assert json.loads(run("compare", "llama3-8b", "--ctx", str(2**40), "-f", "json").stdout)[0]["ctx"] == 2**40


def test_messages_state_the_rule_that_was_broken(tmp_path):
    base = (REFERENCE.parent.parent.parent / "model_specs" / "llama3-8b.yaml").read_text()
    spec = tmp_path / "spec.yaml"
    # 41 digits, unquoted: the loader keeps them as text; the message said 'in quotes it is a string'
    spec.write_text(base.replace("n_layers: 32", "n_layers: " + "1" * 41, 1))
    assert "n_layers: 32" in base
    line = _one_error(run("show", str(spec), ok=False))
    assert "(a number of 41 digits, above any this field allows)" in line and "in quotes" not in line, line
    # UTF-16 text is no binary file
    spec.write_bytes(base.encode("utf-16"))
    assert _one_error(run("show", str(spec), ok=False)).endswith("cannot read: text in UTF-16 or UTF-32; save it as UTF-8")
    config = json.loads((REFERENCE / "models" / "llama-3.2-1b.json").read_text())
    path = tmp_path / "config.json"
    path.write_text("\ufeff" + json.dumps(config), encoding="utf-8")  # Python's advice was 'decode using utf-8-sig'
    assert _one_error(run("show", str(path), ok=False)) == (
        f"error: {path}: starts with a UTF-8 byte-order mark, which JSON does not allow (transformers refuses it too): "
        "save it without one")
    # 1e23 is a whole number, too large: its float (99999999999999991611392) made it 'a fraction'
    path.write_text(json.dumps(config).replace('"hidden_size": 2048', '"hidden_size": 1e23'))
    assert _one_error(run("show", str(path), ok=False)) == \
        f"error: {path}: hidden_size: must be at most 1,048,576 (a width), got 100000000000000000000000"
    # a key with a zero-width space is shown with it escaped, not as the key it imitates
    text = json.dumps(config).replace('"num_hidden_layers"', '"num_hidden_layer\\u200b"')
    path.write_text(text)
    assert _one_error(run("show", str(path), ok=False)).endswith(
        "num_hidden_layer\\u200b: not a key kvcalc reads; did you mean num_hidden_layers?")


def test_file_errors_name_the_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    long = "a" * 5000  # past NAME_MAX: the message named no file
    line = _one_error(run("import", str(REFERENCE / "models" / "llama-3.2-1b.json"), "-o", long + ".yaml", ok=False))
    assert line == f"error: {'a' * 60}...{'a' * 15}.yaml: cannot write the output: File name too long", line
    (tmp_path / "loop1").symlink_to("loop2")
    (tmp_path / "loop2").symlink_to("loop1")
    res = run("paper", "-o", "loop1", ok=False)  # mkdir said 'File exists'
    assert res.exit_code == 2 and "loop1 is a symbolic link that leads nowhere (a loop, or a missing target)" in res.stderr
    line = _one_error(run("approx", "--data", "loop1", ok=False))  # 'no such file, nor one of the generated inputs'
    assert line == "error: --data loop1: a symbolic link that leads to no file (a loop, or a missing target)", line


def test_diff_review_mends(tmp_path):
    # a top-level tie_word_embeddings is named bare (text_tie names the level), a rope error read from text_config
    # with its prefix, a path with a format character escaped in the imported source (it was refused as the spec's)
    cfg = json.loads((REFERENCE / "configs-extra" / "qwen3-vl-8b-instruct.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**cfg, "tie_word_embeddings": "x"}))
    assert _one_error(run("show", str(path), ok=False)) == \
        f"error: {path}: tie_word_embeddings: must be true or false, got 'x'"
    text = dict(cfg["text_config"], rope_scaling={"rope_type": "YaRN", "factor": 2.0})
    path.write_text(json.dumps({**cfg, "text_config": text}))
    assert "text_config.rope_scaling: rope_type 'YaRN' is not one vLLM builds" in _one_error(run("show", str(path), ok=False))
    odd = tmp_path / "ll\u200bama.json"
    odd.write_text((REFERENCE / "models" / "llama-3.2-1b.json").read_text())
    source = json.loads(run("show", str(odd), "-f", "json").stdout)["spec"]["source"]
    assert "ll\\u200bama.json" in source
    # a small binary file whose second byte is NUL is no UTF-16 text; UTF-16 ASCII text without a mark is
    blob = tmp_path / "adapter.yaml"
    blob.write_bytes(b"\x80\x00\x00\x00\x00\x00\x00\x00" + b'{"__metadata__": {}}' + b" " * 100)
    assert "a binary file (it has NUL bytes)" in _one_error(run("show", str(blob), ok=False))
    blob.write_bytes("name: x\nfamily: y\n".encode("utf-16-le"))
    assert "text in UTF-16 or UTF-32" in _one_error(run("show", str(blob), ok=False))
    # an unknown model_type's keys are bounded too (600,000 took 18 s in the generic importer)
    path.write_text(json.dumps({"model_type": "foo_bar", **{f"k{i}": 1 for i in range(10_000)}}))
    assert "the top level has 10,001 keys" in _one_error(run("show", str(path), ok=False))
    # a long token count's message says it was cut
    res = run("compare", "llama3-8b", "--ctx", "1" * 5000, ok=False)
    assert "'1111111111111111111111111111111111111111'... (5,000 characters): above 2^40 tokens" in res.stderr
    # cost's layout source names DP attention
    gpus = next(ln for ln in run("cost", "deepseek-v3", "--tp", "8", "--dp-attention", "--batch", "8").stdout.splitlines()
                if ln.startswith("gpus"))
    assert "tp 8 × pp 1 × dp 1, DP attention; the busiest GPU" in gpus


def test_a_file_name_that_is_not_utf8_is_shown_by_its_bytes(tmp_path, monkeypatch):
    import os

    monkeypatch.chdir(tmp_path)
    name = os.fsdecode(b"y\xfe.yaml")  # Python's surrogate escape: 'y\udcfe.yaml'
    assert _one_error(run("show", name, ok=False)) == "error: y\\xfe.yaml: no such file"
