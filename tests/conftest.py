"""Shared test helpers: a CLI runner that shows stdout and stderr on failure, and the reference data paths."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvcalc.cli import app
from kvcalc.registry import bundled_names, load_model

ROOT = Path(__file__).resolve().parent.parent
# ../shared/reference beside the repository: verified HF configs and published numbers (FACTS.md).
REFERENCE = ROOT.parent / "shared" / "reference"
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


def reference_or_skip(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"reference data not present: {path}")
    return path


def spec(name: str):
    """A bundled spec by name."""
    return load_model(name).spec


ALL_BUNDLED = bundled_names()
os.environ.setdefault("COLUMNS", "240")
