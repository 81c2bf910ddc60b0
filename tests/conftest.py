"""Shared test helpers: a CLI runner that shows stdout and stderr on failure, and the reference data paths.

Skips: a skipped test fails the session unless its reason starts with "optional:", which marks a test that needs
something the environment may lack (an optional extra, a BLAS whose threads can be set), e.g.
`@pytest.mark.skipif(not CAN_SET_BLAS, reason="optional: ...")`. Any other skip hides a test that should run, so
pytest prints which tests skipped without the prefix and exits 1 even if everything else passed. Deselecting
(`-m "not slow"`) is not skipping, and xfail is not affected.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import typer.testing
from typer.testing import CliRunner

from kvcalc.cli import app
from kvcalc.registry import bundled_names, load_model

ROOT = Path(__file__).resolve().parent.parent
# Verified HF configs, copied into the repository; SOURCES.md there says where each comes from.
REFERENCE = ROOT / "tests" / "data" / "reference"
REFERENCE_MODELS = REFERENCE / "models"


class Result:
    """What a CLI call produced; str() shows everything, for assertion messages."""

    def __init__(self, exit_code: int, stdout: str, stderr: str, exception):
        self.exit_code, self.stdout, self.stderr, self.exception = exit_code, stdout, stderr, exception

    def __str__(self) -> str:
        return f"exit {self.exit_code}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}\n--- exception {self.exception!r}"


def run(*args: str, ok: bool = True) -> Result:
    """Invoke `kvcalc ARGS` in-process with a wide terminal; assert success unless ok=False."""
    runner = CliRunner()
    env = {"COLUMNS": "240", "TERM": "dumb", "NO_COLOR": "1"}
    res = runner.invoke(app, [str(a) for a in args], env=env)
    out = Result(res.exit_code, res.stdout, res.stderr, res.exception)
    if ok:
        assert res.exit_code == 0, str(out)
    return out


@pytest.fixture
def cli():
    return run


def spec(name: str):
    """A bundled spec by name."""
    return load_model(name).spec


def splitting_tp(name: str, at_most: int) -> int:
    """The largest tp up to `at_most` that splits the bundled model's heads (kvcalc refuses the others, as vLLM does:
    falcon-7b's 71 heads take only 1)."""
    from kvcalc.costs.parallel import check_layout
    from kvcalc.errors import KvcalcError
    from kvcalc.settings import Settings

    for tp in range(at_most, 0, -1):
        try:
            check_layout(spec(name), Settings(ctx=1, tp=tp))
        except KvcalcError:
            continue
        return tp
    return 1


_BUILT: dict[int, tuple] = {}


def _command_once(typer_app):
    """The click command of a typer app, built once per session: typer's test runner rebuilds every command's
    parameters on each invoke (about 10 ms, for each of the suite's many CLI calls). The command holds no state
    between invocations (click makes a new context each time), so reusing it changes nothing a test sees."""
    built = _BUILT.get(id(typer_app))
    if built is None or built[0] is not typer_app:
        built = _BUILT[id(typer_app)] = (typer_app, _build_command(typer_app))
    return built[1]


_build_command = typer.testing._get_command
typer.testing._get_command = _command_once  # type: ignore[assignment]

ALL_BUNDLED = bundled_names()
os.environ.setdefault("COLUMNS", "240")

ALLOWED_SKIP = "optional:"
_unexplained_skips: list[tuple[str, str]] = []  # (test id, reason)


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return reason.removeprefix("Skipped: ")


def pytest_runtest_logreport(report):
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = _skip_reason(report)
        if not reason.startswith(ALLOWED_SKIP):
            _unexplained_skips.append((report.nodeid, reason))


def pytest_collectreport(report):
    pytest_runtest_logreport(report)  # a whole module skipped at import


def pytest_sessionfinish(session, exitstatus):
    if _unexplained_skips and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    if _unexplained_skips:
        title = f"skipped without the {ALLOWED_SKIP!r} reason prefix (this fails the session)"
        terminalreporter.section(title, red=True)
        for nodeid, reason in _unexplained_skips:
            terminalreporter.line(f"{nodeid}: {reason}")


class ConfigFolder:
    """The reference configs of one folder under tests/data/reference: `compare` rows of a config at 4k and 128k,
    the parsed file, and a config imported as a spec (the importer tests share these)."""

    def __init__(self, folder: str):
        self.folder = REFERENCE / folder

    def compare(self, name: str, *extra: str) -> list[dict]:
        """`kvcalc compare <config> --ctx 4k,128k -f json`: one row per context."""
        import json

        return json.loads(run("compare", self.folder / f"{name}.json", "--ctx", "4k,128k", *extra, "-f", "json").stdout)

    def config(self, name: str) -> dict:
        import json

        return json.loads((self.folder / f"{name}.json").read_text())

    @staticmethod
    def imported(cfg: dict, name: str = "m"):
        from kvcalc.hf import spec_from_config

        return spec_from_config(cfg, "test", name)[0]


def kv_bytes(rows: list[dict]) -> list[int]:
    """The kv_cache_bytes of compare rows."""
    return [r["kv_cache_bytes"] for r in rows]
