"""Cold-start wall time of `kvcalc compare llama3-70b deepseek-v2 --ctx 128k` against bare dependency imports.

Run by hand, not by CI:

    python benchmarks/cold_start.py [--runs 10]

Each run is a fresh process of this interpreter, started from an empty temporary folder (so the installed
package is measured, not a source tree in the working directory). The runs of the commands are interleaved
so that a change in machine load hits them alike; one untimed run of each warms the OS file cache first.
The overhead is kvcalc's median minus the median of `python -c "import typer, rich, pydantic, yaml"`:
what kvcalc costs on top of the libraries it cannot start without.

Bytecode: an installed wheel's modules are compiled when pip installs them, but an editable install under
PYTHONDONTWRITEBYTECODE=1 recompiles kvcalc's source on every start (about 60 ms on a 2-core machine) while the
libraries' bytecode is already there. So by default every process runs with bytecode writing on, into a private
PYTHONPYCACHEPREFIX folder that the warm-up fills (for both lines alike: the libraries' bytecode is read from there
too); --inherit-bytecode keeps the caller's environment instead.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time

KVCALC_ARGS = ["compare", "llama3-70b", "deepseek-v2", "--ctx", "128k"]
BARE_IMPORTS = "import typer, rich, pydantic, yaml"
# A typer app of one command, run as kvcalc is, with the command's body to fill in.
TYPER_APP = """
import typer, rich, pydantic, yaml
app = typer.Typer(add_completion=False)
@app.callback()
def root() -> None:
    pass
@app.command()
def compare(models: list[str], ctx: str = "4k") -> None:
{body}
app()
"""
# The app printing its arguments: what running any typer command costs on top of the imports (typer parses through
# its parameter adapters, typer._adapters, which import pydantic.main). Shown for reference; the target stays against
# the bare imports.
TYPER_FLOOR = TYPER_APP.format(body="    print(models, ctx)")
# The app doing the least of what the design card asks of a kvcalc command: a YAML text parsed, a pydantic model
# (frozen, unknown keys forbidden) validated from it, and a rich table of one exact integer per model printed. The
# floor of any command line built on typer, pydantic, PyYAML and rich; shown for reference, as the line above.
CARD_FLOOR = TYPER_APP.format(body="""\
    from pydantic import BaseModel, ConfigDict
    from rich.console import Console
    from rich.table import Table
    class Spec(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        name: str
        n_layers: int
        n_kv_heads: int
        head_dim: int
    table = Table(title="KV cache")
    table.add_column("model")
    table.add_column("bytes", justify="right")
    for m in models:
        s = Spec(**yaml.safe_load(f"{{name: {m}, n_layers: 80, n_kv_heads: 8, head_dim: 128}}"))
        table.add_row(s.name, f"{2 * s.n_layers * s.n_kv_heads * s.head_dim * 2 * 131072:,}")
    Console().print(table)""")

def commands() -> dict[str, list[str]]:
    """The commands to time, by label: bare imports, a one-command typer app, that app with a YAML text, a pydantic
    model and a rich table, `python -m kvcalc`, and the console script if found."""
    cmds = {
        "bare imports": [sys.executable, "-c", BARE_IMPORTS],
        "a one-command typer app": [sys.executable, "-c", TYPER_FLOOR, *KVCALC_ARGS],
        "+ yaml, a pydantic model, a rich table": [sys.executable, "-c", CARD_FLOOR, *KVCALC_ARGS],
        "python -m kvcalc": [sys.executable, "-m", "kvcalc", *KVCALC_ARGS],
    }
    # This interpreter's own scripts folder first: a PATH entry may be another environment's, or a shim.
    search = os.pathsep.join([sysconfig.get_path("scripts"), os.environ.get("PATH", "")])
    script = shutil.which("kvcalc", path=search)
    if script:
        cmds["kvcalc (console script)"] = [script, *KVCALC_ARGS]
    return cmds


def child_env(pycache: str | None) -> dict[str, str]:
    """The environment of every timed process: bytecode written to and read from `pycache`, unless None."""
    env = dict(os.environ)
    if pycache is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = pycache
    return env


def time_once(cmd: list[str], cwd: str, env: dict[str, str]) -> float:
    """Wall time of one run in milliseconds; a failing command stops the benchmark."""
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = (time.perf_counter() - start) * 1000
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr}")
    return elapsed


def import_times(cwd: str, env: dict[str, str], top: int) -> list[tuple[int, int, str]]:
    """The `top` modules with the largest cumulative import time in one kvcalc run: (cumulative us, self us, name)."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "kvcalc", *KVCALC_ARGS],
        cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=True,
    )
    rows = []
    for line in proc.stderr.splitlines():
        # "import time:   self [us] | cumulative | imported package"; the header line has no numbers.
        if not line.startswith("import time:"):
            continue
        self_us, cumulative, name = (part.strip() for part in line[len("import time:"):].split("|"))
        if self_us.isdigit():
            rows.append((int(cumulative), int(self_us), name.strip()))
    return sorted(rows, reverse=True)[:top]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="timed runs of each command (default 10)")
    parser.add_argument("--top", type=int, default=10, help="modules to list from -X importtime (default 10)")
    parser.add_argument("--inherit-bytecode", action="store_true",
                        help="keep this environment's bytecode settings (PYTHONDONTWRITEBYTECODE) instead of a private cache")
    args = parser.parse_args()

    cmds = commands()
    times: dict[str, list[float]] = {label: [] for label in cmds}
    with tempfile.TemporaryDirectory() as cwd, tempfile.TemporaryDirectory() as pycache:
        env = child_env(None if args.inherit_bytecode else pycache)
        for cmd in cmds.values():
            time_once(cmd, cwd, env)  # warm-up, untimed (and it compiles the bytecode)
        for _ in range(args.runs):
            for label, cmd in cmds.items():
                times[label].append(time_once(cmd, cwd, env))
        top = import_times(cwd, env, args.top)

    bytecode = ("inherited (PYTHONDONTWRITEBYTECODE=" + os.environ.get("PYTHONDONTWRITEBYTECODE", "") + ")"
                if args.inherit_bytecode else "compiled once into a private PYTHONPYCACHEPREFIX")
    print(f"python {sys.version.split()[0]} ({sys.executable}), {args.runs} runs each, wall time in ms")
    print(f"bytecode: {bytecode}")
    print(f"kvcalc {' '.join(KVCALC_ARGS)}")
    print()
    width = max(len(label) for label in cmds)
    print(f"{'command':<{width}}  {'min':>7}  {'median':>7}  {'max':>7}  {'overhead':>8}  {'ratio':>5}")
    bare = statistics.median(times["bare imports"])
    for label, ms in times.items():
        median = statistics.median(ms)
        overhead, ratio = ("", "") if label == "bare imports" else (f"{median - bare:+8.1f}", f"{median / bare:5.2f}")
        print(f"{label:<{width}}  {min(ms):7.1f}  {median:7.1f}  {max(ms):7.1f}  {overhead:>8}  {ratio:>5}")
    print("target: kvcalc's median at most 1.30 x the bare imports' median")
    script = cmds.get("kvcalc (console script)")
    print(f"console script: {script[0]}" if script else "(no kvcalc console script on PATH)")
    print()
    print(f"python -X importtime -m kvcalc {' '.join(KVCALC_ARGS)}: top {args.top} by cumulative time, ms")
    print(f"{'cumulative':>10}  {'self':>7}  module")
    for cumulative, self_us, name in top:
        print(f"{cumulative / 1000:10.1f}  {self_us / 1000:7.1f}  {name}")


if __name__ == "__main__":
    main()
