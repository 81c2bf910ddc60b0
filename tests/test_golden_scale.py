"""Every byte kvcalc printed before the #11 speed work is unchanged: the stdout of sweep, cost, show, fit, compare,
list and table models for every bundled model at 4k, 32k, 128k and 1M, batch 1 and 8, both MLA cache layouts, and
the serving settings (tests/data/golden/capture_scale.py made the file from commit 8728da4). A later version that
adds a key or a column regenerates this file on purpose, saying why, from the commit before it."""

from __future__ import annotations

import difflib
import gzip
import json
from pathlib import Path

import pytest

from conftest import run

GOLDEN = json.loads(gzip.decompress((Path(__file__).parent / "data" / "golden" / "golden_scale.json.gz").read_bytes()))


@pytest.mark.slow
@pytest.mark.parametrize("line", sorted(GOLDEN))
def test_output_unchanged_to_the_byte(line):
    old, new = GOLDEN[line], run(*line.split(" ")).stdout
    if new != old:
        diff = difflib.unified_diff(old.splitlines(), new.splitlines(), "before", "now", lineterm="", n=1)
        pytest.fail(f"kvcalc {line}:\n" + "\n".join(list(diff)[:40]))
