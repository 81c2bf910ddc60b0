"""A normal (non-editable) wheel install finds its bundled specs and hardware presets from any working directory.

The test builds a wheel from a copy of the source tree, installs it into a fresh venv, and runs the
installed `kvcalc` from an empty folder, so that neither the source tree nor an editable install of
the outer environment can supply the package or its specs. No network: the wheel is built without
build isolation (hatchling comes from the test extras) and installed with `--no-index`.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # builds a wheel and a venv

REPO = Path(__file__).resolve().parent.parent
BUNDLED = sorted(p.stem for p in (REPO / "model_specs").glob("*.yaml"))
RUNTIME_DEPS = ("typer", "rich", "pydantic", "yaml", "numpy")
PIP_ENV = {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1", "PIP_CONFIG_FILE": os.devnull}


def _env() -> dict[str, str]:
    """The outer environment, less anything that could put the source tree on the venv's sys.path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    return {**env, **PIP_ENV, "COLUMNS": "200"}


def sh(args: list[str | Path], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run a command; on a non-zero exit, fail showing its stdout and stderr."""
    proc = subprocess.run([str(a) for a in args], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{args} exited {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    return proc


def _pip_version() -> tuple[int, ...]:
    return tuple(int(x) for x in importlib.metadata.version("pip").split(".")[:2] if x.isdigit())


def _outer_site_dirs() -> list[str]:
    """Where the outer interpreter finds the runtime dependencies: its site dirs and each dependency's parent.

    The source tree is left out even when an editable install put it on sys.path.
    """
    dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    for name in RUNTIME_DEPS:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin, f"runtime dependency {name} is not importable here"
        dirs.append(str(Path(spec.origin).parent.parent))  # package/__init__.py -> the folder holding it
    out = []
    for d in dirs:
        if os.path.isdir(d) and Path(d).resolve() != REPO and d not in out:
            out.append(d)
    return out


def _build_wheel(tmp: Path) -> Path:
    """Copy the sources to tmp and build a wheel there, offline."""
    src = tmp / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("kvcalc", "model_specs", "hardware_specs"):
        shutil.copytree(REPO / name, src / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    dist = tmp / "dist"
    sh([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", dist, src], tmp)
    wheels = list(dist.glob("kvcalc-*.whl"))
    assert len(wheels) == 1, f"expected one kvcalc wheel in {dist}, found {wheels}"
    return wheels[0]


def _make_venv(tmp: Path) -> tuple[Path, Path, list[str]]:
    """A pip-less venv whose .pth adds the outer site dirs as plain directories; returns (python, site-packages, dirs)."""
    venv = tmp / "venv"
    sh([sys.executable, "-m", "venv", "--without-pip", venv], tmp)
    python = venv / "bin" / "python"
    purelib = sh([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], tmp).stdout.strip()
    # A directory line in a .pth is appended to sys.path as is; .pth files inside that directory
    # (such as an editable install's, pointing at the source tree) are not processed.
    outer_dirs = _outer_site_dirs()
    (Path(purelib) / "outer_site.pth").write_text("\n".join(outer_dirs) + "\n", encoding="utf-8")
    return python, Path(purelib), outer_dirs


def _install(wheel: Path, python: Path, purelib: Path, tmp: Path) -> list[Path]:
    """Install the wheel into the venv with the outer pip; return the command that runs its console script.

    --ignore-installed: the outer kvcalc is visible through the .pth and must not count as installed.
    """
    common = ["install", "--no-deps", "--no-index", "--ignore-installed"]
    if _pip_version() >= (22, 3):
        sh([sys.executable, "-m", "pip", "--python", python, *common, wheel], tmp)
        return [python.parent / "kvcalc"]
    # pip < 22.3 has no --python; --target still yields a real installed package with its dist-info,
    # but its script carries the outer interpreter's shebang, so the venv's python runs it.
    sh([sys.executable, "-m", "pip", *common, "--target", purelib, wheel], tmp)
    return [python, purelib / "bin" / "kvcalc"]


def test_wheel_install_finds_bundled_specs(tmp_path):
    wheel = _build_wheel(tmp_path)
    python, purelib, outer_dirs = _make_venv(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    # Before the install, kvcalc is importable at most as a regular package of the outer site dirs:
    # an outer editable install (a .pth naming the source tree, or an import hook) did not leak in.
    probe = "import importlib.util, json, sys; s = importlib.util.find_spec('kvcalc'); print(json.dumps([s and s.origin, sys.path]))"
    origin, path = json.loads(sh([python, "-c", probe], elsewhere).stdout)
    assert str(REPO) not in path, f"the source tree is on the venv's sys.path: {path}"
    assert origin is None or str(Path(origin).parent.parent) in outer_dirs, f"kvcalc leaks in from {origin}"

    kvcalc_script = _install(wheel, python, purelib, tmp_path)

    where = sh([python, "-c", "import kvcalc; print(kvcalc.__file__)"], elsewhere).stdout.strip()
    package = Path(where).resolve().parent
    assert package.is_relative_to(purelib.resolve()), f"kvcalc imported from {package}, not from the venv {purelib}"
    assert not package.is_relative_to(REPO), f"kvcalc imported from the source tree {package}"
    assert (package / "model_specs" / "llama3-70b.yaml").is_file(), f"no bundled specs in the installed package {package}"
    assert (package / "hardware_specs" / "h100-80gb.yaml").is_file(), f"no hardware presets in the installed package {package}"

    assert "llama3-70b" in BUNDLED, f"no bundled specs found in {REPO / 'model_specs'}"
    listed = json.loads(sh([*kvcalc_script, "list", "--format", "json"], elsewhere).stdout)
    assert sorted(row["model"] for row in listed) == BUNDLED

    rows = json.loads(sh([python, "-m", "kvcalc", "compare", "llama3-70b", "--ctx", "8k", "--format", "json"], elsewhere).stdout)
    assert [r["model"] for r in rows] == ["llama3-70b"]
    # Llama 3 70B (config.json): 80 layers, 8 KV heads, head_dim 8192 / 64 = 128.
    # 2: keys and values; 2: bytes per bf16 element; 8k = 8192 tokens.
    assert rows[0]["kv_cache_bytes"] == 2 * 80 * 8 * 128 * 2 * 8192 == 2_684_354_560

    # The bundled hardware presets load from the installed package too. NVIDIA H100 SXM datasheet: 3.35 TB/s.
    probe = "from kvcalc.hardware import load_hardware; print(load_hardware('h100-80gb').memory_bandwidth)"
    assert sh([python, "-c", probe], elsewhere).stdout.strip() == "3350000000000"
