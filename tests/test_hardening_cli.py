"""#10: the command line's edges: output that cannot be written, numbers beyond kvcalc's bounds, options that would
be ignored, and files that must not be overwritten — one message and a non-zero exit each, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT, run


def cli(*args: str, env: dict | None = None, **kwargs) -> subprocess.CompletedProcess:
    """The real entry point in a subprocess (for stdout that is full, closed or ASCII-only)."""
    code = "import sys; from kvcalc.cli import main; sys.argv = ['kvcalc', *sys.argv[1:]]; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, **(env or {})}, timeout=60, **kwargs)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="optional: no /dev/full on this system")
def test_a_full_disk_is_a_message():
    with open("/dev/full", "w") as full:
        res = subprocess.run([sys.executable, "-c", "from kvcalc.cli import main; import sys; sys.argv=['kvcalc','list']; main()"],
                             stdout=full, stderr=subprocess.PIPE, text=True, cwd=ROOT, timeout=60)
    assert res.returncode == 1 and "cannot write the output: No space left on device" in res.stderr
    assert "Traceback" not in res.stderr and "Exception ignored" not in res.stderr


def test_closed_stdout_and_ascii_terminal():
    res = subprocess.run([sys.executable, "-c", "import os; os.close(1); from kvcalc.cli import main; import sys; "
                          "sys.stdout = None; sys.argv=['kvcalc','list']; main()"], capture_output=False,
                         stderr=subprocess.PIPE, text=True, cwd=ROOT, timeout=60)
    assert res.returncode == 1 and "standard output is closed" in res.stderr and "Traceback" not in res.stderr
    res = cli("compare", "llama3-70b", "deepseek-v2", env={"PYTHONIOENCODING": "ascii"})
    assert res.returncode == 1 and "encoding (ascii)" in res.stderr and "Traceback" not in res.stderr
    assert cli("compare", "llama3-70b", "-f", "json", env={"PYTHONIOENCODING": "ascii"}).returncode == 0


@pytest.mark.parametrize("args, message", [
    (["compare", "gpt2", "--batch", "9" * 100], "batch of 100 digits: at most 1,048,576"),
    (["compare", "gpt2", "--ctx", "1e160"], "is not a token count"),
    (["compare", "gpt2", "--ctx", "2000000000000000"], "above 2^40 tokens"),
    (["sweep", "gpt2", "--ctx", "1..1" + "0" * 400], "above 2^40 tokens"),
    (["sweep", "gpt2", "--ctx", "1k,2k", "--points", "5"], "--points spaces a range LO..HI"),
    (["cost", "gpt2", "--gen", "9" * 100], "above 2^40 tokens"),
    (["run", "gpt2", "--seed", "-1"], "--seed"),
    (["run", "gpt2", "--max-memory", "0"], "a memory limit must be positive"),
    (["compare", "gpt2", "--tp", "100000"], "tp 100000: at most 65,536"),
])
def test_numbers_beyond_the_bounds(args, message):
    res = run(*args, ok=False)
    assert res.exit_code in (1, 2) and message in res.stderr and "Traceback" not in res.stderr


def test_import_never_overwrites_without_force(tmp_path):
    config = tmp_path / "config.json"
    config.write_text((ROOT / "tests/data/reference/configs-gemma3n/gemma-3n-e2b.json").read_text(), encoding="utf-8")
    existing = tmp_path / "spec.yaml"
    existing.write_text("keep me\n", encoding="utf-8")
    res = run("import", str(config), "-o", str(existing), ok=False)
    assert res.exit_code == 1 and "the file exists; add --force" in res.stderr
    assert existing.read_text(encoding="utf-8") == "keep me\n"
    res = run("import", str(config), "-o", str(config), "--force", ok=False)
    assert res.exit_code == 1 and "that is the config being imported" in res.stderr
    run("import", str(config), "-o", str(existing), "--force")
    assert existing.read_text(encoding="utf-8").startswith("name: ") and "family: gemma3n" in existing.read_text(encoding="utf-8")


def test_run_names_decode_when_the_decode_steps_outgrow_memory():
    res = run("run", "gpt2", "--ctx", "8", "--decode", "1000000000", ok=False)
    assert res.exit_code == 1 and "--decode" in res.stderr and "not even one layer" not in res.stderr


@pytest.mark.slow  # runs gpt2's layers in float16
def test_run_float16_warns_that_it_is_slow():
    res = run("run", "gpt2", "--ctx", "8", "--decode", "1", "--layers", "1", "--dtype", "float16")
    assert "NumPy has no fast float16 matrix product" in res.stderr
