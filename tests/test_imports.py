"""The analytic commands never import NumPy: only the execution backend needs it, and it costs start-up time.

Each case runs the typer app in-process in a fresh interpreter, so that nothing imported by pytest or by
another test can hide or cause the import.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import REFERENCE_MODELS

REFERENCE_CONFIG = REFERENCE_MODELS / "llama-3-70b.json"

PROBE = """
import sys
from typer.testing import CliRunner
from kvcalc.cli import app

result = CliRunner().invoke(app, sys.argv[1:])
if result.exit_code != 0:
    sys.exit(f"exit {result.exit_code}\\n{result.output}\\n{result.exception!r}")
print("numpy" in sys.modules)
"""

@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["list"], id="list"),
        pytest.param(["list", "--format", "json"], id="list-json", marks=pytest.mark.slow),
        pytest.param(["show", "llama3-70b"], id="show", marks=pytest.mark.slow),
        pytest.param(["show", "deepseek-v2", "--format", "json", "--explain"], id="show-json-explain"),
        pytest.param(["compare", "llama3-70b", "deepseek-v2", "--ctx", "128k", "--format", "json"], id="compare-json", marks=pytest.mark.slow),
        pytest.param(["compare", "llama3-70b", "deepseek-v2", "--ctx", "128k"], id="compare-table"),
        pytest.param(["import", str(REFERENCE_CONFIG)], id="import", marks=pytest.mark.slow),
        pytest.param(["cost", "deepseek-v2", "--hardware", "h100-80gb", "--format", "json"], id="cost"),
        pytest.param(["sweep", "llama3-8b", "--ctx", "1k..8k"], id="sweep", marks=pytest.mark.slow),
        pytest.param(["compare", "gemma3-27b", "--columns", "all", "--hardware", "mi300x"], id="compare-all", marks=pytest.mark.slow),
        pytest.param(["hardware"], id="hardware", marks=pytest.mark.slow),
    ],
)
def test_analytic_commands_do_not_import_numpy(args, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *args], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, f"kvcalc {' '.join(args)} failed\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    assert proc.stdout.splitlines()[-1] == "False", f"kvcalc {' '.join(args)} imported numpy\n{proc.stdout}"


FIRST = {
    "nothing": "",
    "the function": "from kvcalc import cost_figures\n",
    "a cost": "from kvcalc import Settings, kv_cache, load_model\nkv_cache(load_model('gpt2').spec, Settings(ctx=8))\n",
}


@pytest.mark.slow
@pytest.mark.parametrize("first", FIRST, ids=list(FIRST))
def test_kvcalc_figures_is_the_module_whatever_was_imported_first(first):
    # #11: `figures` was once also a lazily exported function, so what `from kvcalc import figures` gave depended on
    # whether the module kvcalc.figures had been imported yet; the function is `cost_figures`
    code = (FIRST[first] + "import types, kvcalc\nfrom kvcalc import figures, cost_figures\n"
            "import kvcalc.figures as module\n"
            "assert isinstance(figures, types.ModuleType) and figures is module is kvcalc.figures, figures\n"
            "assert cost_figures is module.figures\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


COLD_PROBE = """
import sys
sys.argv = ["kvcalc", *sys.argv[1:]]
from kvcalc.cli import main
try:
    main()
except SystemExit as exc:
    assert not exc.code, exc.code
import pydantic.plugin._loader as plugins
print(plugins._plugins is None, "kvcalc.hf" in sys.modules)
"""


@pytest.mark.slow
def test_compare_of_bundled_models_skips_what_it_does_not_need(tmp_path):
    # #11 item 4 (cold start): a bundled spec is no HF config, so the importers (kvcalc.hf) stay unimported; the
    # console entry point spares pydantic's scan of every installed distribution for plugins (importlib.metadata)
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    proc = subprocess.run([sys.executable, "-c", COLD_PROBE, "compare", "llama3-70b", "deepseek-v2", "--ctx", "128k"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "True False", proc.stdout


HELP_PROBE = """
import sys
from typer.testing import CliRunner
from kvcalc.cli import app, app_for

result = CliRunner().invoke(app_for(sys.argv[1:]), sys.argv[1:])
if result.exit_code != 0:
    sys.exit(f"exit {result.exit_code}\\n{result.output}\\n{result.exception!r}")
print(sorted(m for m in ("pydantic.main", "kvcalc.attention", "kvcalc.spec", "rich.console") if m in sys.modules))
"""


@pytest.mark.slow
@pytest.mark.parametrize("args, loaded", [
    (["--help"], "[]"),
    (["--version"], "[]"),
    (["compare", "--help"], "['pydantic.main']"),  # typer's own parameter adapters import it for any command
], ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_help_and_version_load_no_model_classes(args, loaded, tmp_path):
    # The command line's choice lists (dtypes, MLA layouts and schedules, engines) live in kvcalc.settings, which
    # imports no attention kind: help and --version need neither the spec and kind classes (with pydantic's BaseModel,
    # about 0.1 s of a start) nor rich's console (typer's help is plain text: rich_markup_mode None)
    proc = subprocess.run([sys.executable, "-c", HELP_PROBE, *args], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == loaded, proc.stdout
