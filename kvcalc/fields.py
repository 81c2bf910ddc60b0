"""Result fields that describe themselves: each carries its table header, its unit kind and its meaning, so the
column catalog, the JSON and CSV keys, and the README's key list are all generated from the result types."""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# How a value is shown in human formats (csv and json always carry the raw value):
# text; num (text that reads as a number, right-aligned); int; bool; bytes; tokens (k = 1024); ratio; flops;
# count (parameters); seconds; rate (per second); float; bandwidth (bytes/s, decimal units); sig (a number to three
# significant digits: errors, fractions); formula (a cache formula: math mode in LaTeX); floats (a list of numbers,
# json only: no column shows it).
KINDS = ("text", "num", "int", "bool", "bytes", "tokens", "ratio", "flops", "count", "seconds", "rate", "float",
         "bandwidth", "formula", "sig", "floats")


@dataclass(frozen=True)
class Figure:
    """What a result field is: its header (a newline where a table may break it), unit kind and meaning.

    raw: the field is data (a csv/json key); False for display labels built for tables only.
    """

    key: str
    header: str
    kind: str
    meaning: str
    raw: bool = True


def figure(header: str, kind: str = "text", meaning: str = "", *, raw: bool = True, default: Any = None) -> Any:
    """A dataclass field with its Figure metadata (the key is filled in from the field's name)."""
    if kind not in KINDS:
        raise ValueError(f"unknown figure kind {kind!r}")
    return dataclasses.field(default=default, metadata={"figure": Figure("", header, kind, meaning, raw)})


def figures_of(cls: type) -> list[Figure]:
    """The Figures of a result dataclass, in field order, keyed by field name."""
    out = []
    for f in dataclasses.fields(cls):
        meta = f.metadata.get("figure")
        if meta is not None:
            out.append(dataclasses.replace(meta, key=f.name))
    return out


def as_row(*results: Any) -> dict[str, Any]:
    """Result dataclasses merged into one row dict (raw values; renderers format them)."""
    row: dict[str, Any] = {}
    for r in results:
        names, values = _getter(type(r))
        row.update(zip(names, values(r)))
    return row


Getter = tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]]
_GETTERS: dict[type, Getter] = {}


def _getter(cls: type) -> Getter:
    """The field names of a result dataclass, and a function of a result that reads them all (made once per class:
    dataclasses.fields() per row took longer than the row's figures)."""
    if cls not in _GETTERS:
        names = tuple(f.name for f in dataclasses.fields(cls))
        get = operator.attrgetter(*names)
        _GETTERS[cls] = names, (get if len(names) > 1 else lambda r: (get(r),))
    return _GETTERS[cls]
