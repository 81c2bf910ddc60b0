"""Speed at scale (#11): a 10,000-row sweep against a 10-row one, and the library's KV-cache evaluations per second
against a baseline commit's, measured in one run.

Run by hand, not by CI:

    python benchmarks/sweep_speed.py [--runs 7] [--baseline 8728da4]

- Sweep: `kvcalc sweep MODELS --ctx 32k -f json` (10 rows) and `--ctx 1k..1M --points 1000` (10,000 rows) of the
  same ten bundled models, each a fresh process of this interpreter writing to /dev/null, interleaved; the ratio
  of their median wall times (target: at most 2). The baseline commit refused more than 2,000 rows, so it is timed
  at 10 and 2,000 rows (ten models at 200 points) and its time per row is shown beside this tree's.
- API: `kv_cache(spec, s)` for 20,000 contexts of each of four models (`s.at(ctx)` made beforehand), best of three
  passes, in a fresh process for this tree and for the baseline, alternately, twice; then the same with a
  `Settings(ctx=...)` made inside the loop. The ratio this tree / baseline is the median over the runs (target: at
  least 10 for the first).

The baseline is the commit's tree from `git archive` in a temporary folder; every process runs from an empty
temporary folder with PYTHONPATH set to the tree it measures (each prints where it imported kvcalc from).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = ["llama3-70b", "deepseek-v3", "gemma3-27b", "qwen3-next-80b-a3b", "whisper-large-v3", "llama4-scout",
          "gpt-oss-120b", "nemotron-h-56b", "minimax-m1", "deepseek-v3.2"]
SWEEPS = {"10 rows": ["--ctx", "32k"], "2,000 rows": ["--ctx", "1k..1M", "--points", "200"],
          "10,000 rows": ["--ctx", "1k..1M", "--points", "1000"]}
API_MODELS = ["llama3-70b", "deepseek-v3", "gemma3-27b", "qwen3-next-80b-a3b"]
API_PROBE = """
import json, sys, time
import kvcalc
from kvcalc import Settings, kv_cache, load_model
ctxs = [1024 + 37 * i for i in range(20_000)]
out = {"from": kvcalc.__file__}
for inside in (False, True):
    n = elapsed = 0
    for name in sys.argv[1:]:
        spec = load_model(name).spec
        base = Settings(ctx=ctxs[0])
        made = [base.at(c) for c in ctxs]
        kv_cache(spec, base)
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            if inside:
                for c in ctxs:
                    kv_cache(spec, Settings(ctx=c)).bytes
            else:
                for s in made:
                    kv_cache(spec, s).bytes
            best = min(best, time.perf_counter() - start)
        n, elapsed = n + len(ctxs), elapsed + best
    out["with Settings made in the loop" if inside else "settings made beforehand"] = n / elapsed
print(json.dumps(out))
"""


def extract(commit: str, into: Path) -> Path:
    """The tree of `commit` in `into` (git archive), for PYTHONPATH."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", commit], capture_output=True, check=True)
    tar = into / "baseline.tar"
    tar.write_bytes(archive.stdout)
    with tarfile.open(tar) as t:
        t.extractall(into / "tree", filter="data")
    return into / "tree"


def env_for(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree), "COLUMNS": "200"}


def time_sweep(tree: Path, args: list[str], cwd: str) -> float:
    """Wall seconds of one `python -m kvcalc sweep` to /dev/null; a failing run stops the benchmark."""
    cmd = [sys.executable, "-m", "kvcalc", "sweep", *MODELS, *args, "-f", "json"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env_for(tree), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} (PYTHONPATH={tree}) exited {proc.returncode}:\n{proc.stderr}")
    return elapsed


def api_rates(tree: Path, cwd: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", API_PROBE, *API_MODELS], cwd=cwd, env=env_for(tree),
                          capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)


def describe_machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        names = [line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    load = ", load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()) if hasattr(os, "getloadavg") else ""
    return f"{platform.system()} {platform.release()}, {os.cpu_count()} CPUs ({cpu}){load}"


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="timed runs of each sweep (default 7)")
    parser.add_argument("--baseline", default="8728da4", help="the commit to compare with (default 8728da4, before #11)")
    args = parser.parse_args()

    dirty = " (with uncommitted changes)" if git("status", "--porcelain", "--untracked-files=no") else ""
    print(f"{time.strftime('%Y-%m-%d %H:%M %Z')}; {describe_machine()}")
    print(f"python {sys.version.split()[0]}; this tree: commit {git('rev-parse', '--short', 'HEAD')}{dirty}; "
          f"baseline: {git('rev-parse', '--short', args.baseline)}")
    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory() as cwd:
        trees = {"this tree": ROOT, "baseline": extract(args.baseline, Path(tmp))}
        plan = [(t, label) for t in trees for label in SWEEPS if not (t == "this tree" and label == "2,000 rows")]
        plan = [p for p in plan if not (p[0] == "baseline" and p[1] == "10,000 rows")]  # the baseline refuses it
        times: dict[tuple[str, str], list[float]] = {p: [] for p in plan}
        for t, label in plan:
            time_sweep(trees[t], SWEEPS[label], cwd)  # warm-up, untimed
        for _ in range(args.runs):
            for t, label in plan:
                times[t, label].append(time_sweep(trees[t], SWEEPS[label], cwd))
        rates: dict[str, list[dict]] = {t: [] for t in trees}
        for _ in range(2):
            for t in trees:
                rates[t].append(api_rates(trees[t], cwd))

    print()
    print(f"sweep of {len(MODELS)} models, -f json to /dev/null, wall seconds over {args.runs} interleaved runs")
    print(f"{'tree':<10}  {'rows':>11}  {'min':>6}  {'median':>6}  {'max':>6}")
    for (t, label), s in times.items():
        print(f"{t:<10}  {label:>11}  {min(s):6.2f}  {statistics.median(s):6.2f}  {max(s):6.2f}")
    med = {p: statistics.median(s) for p, s in times.items()}
    ratio = med["this tree", "10,000 rows"] / med["this tree", "10 rows"]
    print(f"this tree: 10,000 rows / 10 rows = {ratio:.2f} (target <= 2){'' if ratio <= 2 else '  MISSED'}")
    per_row = {t: (med[t, big] - med[t, "10 rows"]) / (rows - 10) * 1e6
               for t, big, rows in (("this tree", "10,000 rows", 10_000), ("baseline", "2,000 rows", 2_000))}
    print(f"time per row beyond the first 10: this tree {per_row['this tree']:.0f} us, baseline "
          f"{per_row['baseline']:.0f} us ({per_row['baseline'] / per_row['this tree']:.0f}x)")
    print()
    print(f"kv_cache(spec, s) per second, {', '.join(API_MODELS)}: 20,000 contexts each, best of 3, two runs")
    for kind in ("settings made beforehand", "with Settings made in the loop"):
        ours = [r[kind] for r in rates["this tree"]]
        base = [r[kind] for r in rates["baseline"]]
        gain = statistics.median(a / b for a, b in zip(ours, base))
        target = " (target >= 10)" if kind == "settings made beforehand" else ""
        print(f"  {kind}: this tree {statistics.median(ours):,.0f}/s, baseline {statistics.median(base):,.0f}/s, "
              f"{gain:.1f}x{target}")
    print(f"kvcalc imported from: {rates['this tree'][0]['from']} and {rates['baseline'][0]['from']}")


if __name__ == "__main__":
    main()
