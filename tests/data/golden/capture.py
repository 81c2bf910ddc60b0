"""Capture the JSON that kvcalc printed before the #5 redesign, so tests/test_golden.py can assert it never changes.

Run once, from the repository root, on the commit before a change that must keep every number:
    python tests/data/golden/capture.py
It writes golden.json.gz (gzip of JSON): {command line: parsed JSON output}. Do not regenerate it to make a failing test pass.

2026-12-06: a decode step reads one row of learned positions for the batch, not one a sequence: the 4 'compare gpt2
... --batch 8' lines were updated, leaf by leaf, by the script capture_scale.py describes for that date (only
decode_bytes_read, down by 7 · 768 · 2 bytes, and the figures derived from it changed).
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def command_lines(models: list[str]) -> list[list[str]]:
    """Every command line the golden file covers: each bundled model at 4k and 128k, latent and expanded."""
    out = []
    for m in models:
        for layout in ("latent", "expanded"):
            for ctx in ("4k", "128k"):
                out.append(["compare", m, "--ctx", ctx, "--mla-cache", layout, "--columns", "all", "-f", "json"])
                out.append(["compare", m, "--ctx", ctx, "--mla-cache", layout, "--columns", "all",
                            "--hardware", "h100-80gb", "--batch", "8", "-f", "json"])
                out.append(["compare", m, "--ctx", ctx, "--mla-cache", layout, "--explain", "-f", "json"])
                out.append(["cost", m, "--ctx", ctx, "--mla-cache", layout, "-f", "json"])
                out.append(["cost", m, "--ctx", ctx, "--mla-cache", layout, "--hardware", "h100-80gb", "-f", "json"])
                out.append(["show", m, "--ctx", ctx, "--mla-cache", layout, "-f", "json"])
                out.append(["show", m, "--ctx", ctx, "--mla-cache", layout, "--per-layer", "--explain", "-f", "json"])
            out.append(["sweep", m, "--ctx", "4k,128k", "--mla-cache", layout, "--columns", "all", "-f", "json"])
    out.append(["compare", *models, "--ctx", "4k,128k", "-f", "json"])
    out.append(["list", "-f", "json"])
    out.append(["hardware", "-f", "json"])
    return out


def main() -> None:
    sys.path.insert(0, str(HERE.parents[2]))
    from typer.testing import CliRunner

    from kvcalc.cli import app
    from kvcalc.registry import bundled_names

    runner = CliRunner()
    golden = {}
    for args in command_lines(bundled_names()):
        res = runner.invoke(app, args, env={"COLUMNS": "240"})
        assert res.exit_code == 0, (args, res.stdout, res.stderr)
        golden[" ".join(args)] = json.loads(res.stdout)
    with gzip.GzipFile(HERE / "golden.json.gz", "wb", mtime=0) as f:
        f.write((json.dumps(golden, indent=0) + "\n").encode())
    print(f"{len(golden)} outputs")


if __name__ == "__main__":
    main()
