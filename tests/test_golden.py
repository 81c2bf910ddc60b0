"""Every number kvcalc printed before the #5 redesign is unchanged: the JSON of compare, cost, sweep, show, list and
hardware for every bundled model at 4k and 128k, with latent and expanded MLA caches (tests/data/golden/capture.py
made the file from commit 40b96bb). Later versions may add keys; none is renamed, dropped or changed."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from conftest import run
from kvcalc.registry import natural_key

GOLDEN = json.loads(gzip.decompress((Path(__file__).parent / "data" / "golden" / "golden.json.gz").read_bytes()))


def differences(old, new, path: str = "") -> list[str]:
    """Where `new` fails to keep `old`: a changed value or a missing key (keys only in `new` are allowed)."""
    if isinstance(old, dict):
        if not isinstance(new, dict):
            return [f"{path}: was an object, now {type(new).__name__}"]
        out = []
        for key, value in old.items():
            if key not in new:
                out.append(f"{path}.{key}: missing")
            else:
                out += differences(value, new[key], f"{path}.{key}")
        return out
    if isinstance(old, list):
        if not isinstance(new, list) or len(new) != len(old):
            return [f"{path}: was a list of {len(old)}, now {new!r:.80}"]
        return [d for i, (a, b) in enumerate(zip(old, new)) for d in differences(a, b, f"{path}[{i}]")]
    if type(old) is not type(new) or old != new:
        return [f"{path}: was {old!r}, now {new!r}"]
    return []


def test_differences_sees_a_change():
    assert differences({"a": [1, {"b": 2}]}, {"a": [1, {"b": 2}], "c": 3}) == []
    assert differences({"a": [1, {"b": 2}]}, {"a": [1, {"b": 3}]}) == [".a[1].b: was 2, now 3"]
    assert differences({"a": 1}, {"b": 1}) == [".a: missing"]
    assert differences({"a": 1}, {"a": 1.0}) == [".a: was 1, now 1.0"]


@pytest.mark.slow
@pytest.mark.parametrize("line", sorted(GOLDEN))
def test_output_unchanged(line):
    old, new = GOLDEN[line], json.loads(run(*line.split(" ")).stdout)
    if line == "list -f json":  # #5 sorts names naturally (gemma3-1b before gemma3-12b): the same rows, reordered;
        old = sorted(old, key=lambda row: natural_key(row["model"]))  # #6 bundles more models: their rows are new
        new = [row for row in new if row["model"] in {r["model"] for r in old}]
    if line == "hardware -f json":  # #7 adds presets: theirs are new rows
        new = [row for row in new if row["name"] in {r["name"] for r in old}]
    problems = differences(old, new)
    assert not problems, f"kvcalc {line}:\n" + "\n".join(problems[:20])
