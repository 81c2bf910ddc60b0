"""Rows -> table | markdown | latex | csv | json.

Rows are dicts of raw values (ints stay exact ints). Columns choose and label what a human format shows; human
units appear only in table, markdown and latex output; csv and json carry the raw integers.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii
from operator import itemgetter
from typing import Any, NamedTuple

from kvcalc.fields import Figure
from kvcalc.units import format_bytes, format_count, format_flops, format_number, format_seconds, format_sig, format_tokens

FORMATS = ("table", "markdown", "latex", "csv", "json")


@dataclass(frozen=True)
class Column:
    """One column: the row key it shows, its header, and how to format it.

    kind: one of kvcalc.fields.KINDS ('text', 'num' (text that reads as a number: right-aligned), 'int', 'bool',
    'bytes', 'tokens', 'ratio', 'flops', 'count', 'seconds', 'rate', 'float', 'bandwidth').
    """

    key: str
    header: str
    kind: str = "text"

    @property
    def title(self) -> str:
        """The header on one line (rich tables may break it where the header has a newline)."""
        return self.header.replace("\n", " ")

    @classmethod
    def of(cls, fig: Figure) -> Column:
        """The column that shows a result field."""
        return cls(fig.key, fig.header, fig.kind)

    @property
    def numeric(self) -> bool:
        return self.kind in ("int", "bytes", "tokens", "ratio", "num", "flops", "count", "seconds", "rate", "float", "bandwidth",
                             "sig")


def cell(value: Any, kind: str, units: str = "binary", latex: bool = False, compact: bool = False) -> str:
    """Format one value for a human format; `compact` drops the space before a unit (for narrow terminals)."""
    text = _cell(value, kind, units, latex)
    return text.replace(" ", "") if compact and kind in COMPACTABLE else text


COMPACTABLE = ("bytes", "flops", "seconds", "bandwidth")


def _cell(value: Any, kind: str, units: str, latex: bool) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):  # one spelling in every human format; csv and json write true/false
        return "yes" if value else "no"
    if kind == "bytes":
        return format_bytes(value, units)
    if kind == "tokens":
        return format_tokens(value)
    if kind == "int" and isinstance(value, int):
        return f"{value:,}"
    if kind == "ratio":
        digits = format_sig(value)  # three significant digits: 0.125×, 0.0176×, 1.00×; 9.46e-10× far below 1
        if 100 <= abs(float(digits)) < 10**15:  # read after rounding: 99.96 is 100×; past a float's digits, 1.23e+18×
            digits = f"{value:,.0f}"
        return digits + (r"$\times$" if latex else "×")
    if kind == "flops":
        return format_flops(value) if units != "bytes" else f"{value:,}"
    if kind == "count":
        return format_count(value) if units != "bytes" else f"{value:,}"
    if kind == "seconds":
        return format_seconds(value)
    if kind == "bandwidth":  # vendors quote bandwidth in decimal units
        return format_bytes(value, "si" if units != "bytes" else "bytes") + "/s"
    if kind == "float":  # three significant digits, as every human unit (README)
        return format_number(value)
    if kind == "sig":  # three significant digits (errors, fractions), trailing zeros kept: 0.230, 1.00
        return format_sig(value)
    if kind == "rate":  # tokens/s: three significant digits (0.0412, 7.20, 24.1), whole and grouped from 1,000
        return f"{value:,.0f}" if value >= 999.5 else format_number(value)
    return str(value)


def to_markdown(columns: list[Column], rows: list[dict], units: str) -> str:
    """A GitHub pipe table; numeric columns right-aligned. A cell is one line: `|` escaped, line breaks as spaces."""
    esc = lambda s: " ".join(s.splitlines()).replace("|", r"\|")  # noqa: E731
    lines = ["| " + " | ".join(esc(c.title) for c in columns) + " |"]
    lines.append("|" + "|".join("---:" if c.numeric else ":---" for c in columns) + "|")
    for row in rows:
        lines.append("| " + " | ".join(esc(cell(row.get(c.key), c.kind, units)) for c in columns) + " |")
    return "\n".join(lines)


def to_latex(columns: list[Column], rows: list[dict], units: str, caption: str | None = None,
             label: str | None = None, bare: bool = False) -> str:
    """A booktabs table that compiles as pasted (kvcalc.present.latex states the choices)."""
    from kvcalc.present import latex

    cells = [[cell(row.get(c.key), c.kind, units) for c in columns] for row in rows]
    return latex.to_latex(columns, cells, caption, label, bare)


def to_csv(keys: list[str], rows: list[dict]) -> str:
    """One header row of stable keys, then raw values (exact integers, no units; empty when not applicable)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(keys)
    for row in rows:
        writer.writerow([_csv_value(row.get(k)) for k in keys])
    return buf.getvalue().rstrip("\n")


def csv_pieces(keys: list[str], rows: Iterable[dict]) -> Iterator[str]:
    """to_csv(keys, rows) + "\n" in pieces of a few hundred rows, written as rows are computed."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(keys)
    for i, row in enumerate(rows, 1):
        writer.writerow([_csv_value(row.get(k)) for k in keys])
        if i % 256 == 0:
            yield buf.getvalue()
            buf.seek(0)
            buf.truncate()
    yield buf.getvalue()


def _csv_value(value: Any) -> Any:
    """Raw values as csv writes them: empty when not applicable, booleans as JSON spells them."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def to_json(payload: Any) -> str:
    """Raw values as JSON; keys whose value is None are left out (e.g. mla_cache for non-MLA models)."""
    return json.dumps(_jsonable(payload), indent=2)


def rows_json(rows: Iterable[dict], keys: list[str]) -> Iterator[str]:
    """to_json(only(rows, keys)) in pieces, a row at a time: the same text, written as rows are computed.

    A row of scalars is laid out as indent=2 lays it out by a %-template made once for each sequence of value types
    (_Layout): the values it shows (those not None: to_json leaves None out) are picked by one itemgetter, its ints
    written by the template's %d (int's own digits, as json writes them), its strings, floats and booleans first
    turned into their JSON text (json's pure-Python indent=2 encoder took longer than the row's figures); a row holding
    a list or a mapping is written by json.dumps itself."""
    keys = list(dict.fromkeys(keys))  # as `only` keeps them
    every = itemgetter(*keys) if len(keys) > 1 else lambda row: tuple([row[k] for k in keys])  # a tuple, always
    layouts: dict[tuple[type, ...], _Layout | None] = {}  # by the values' types
    head = "[\n  "
    for row in rows:
        try:
            values = every(row)
        except KeyError:  # a row without some keys: those are left out, as None values are
            values = tuple(map(row.get, keys))
        types = tuple(map(type, values))
        try:
            layout = layouts[types]
        except KeyError:
            layout = layouts[types] = _layout(keys, types)
        if layout is None:  # json.dumps of the row, indented one level as inside the list
            text = to_json({k: row[k] for k in keys if k in row}).replace("\n", "\n  ")
        else:
            shown = list(layout.shown(values))
            for i, as_text in layout.texts:
                shown[i] = as_text(shown[i])
            text = layout.template % tuple(shown)
        yield head + text
        head = ",\n  "
    yield "[]" if head == "[\n  " else "\n]"


class _Layout(NamedTuple):
    """How a row whose values have given types is written: its %-template (a %d an int shown, a %s another value
    shown), the function that picks the values it shows (not None) in order, and which of those (strings, floats,
    booleans) are turned into their JSON text, by what, before the template is filled."""

    template: str
    shown: Callable[[tuple], tuple]
    texts: tuple[tuple[int, Callable[[Any], str]], ...]


def _float_text(value: float) -> str:
    """A float as json writes it: its repr, or (allow_nan) NaN, Infinity and -Infinity for those JSON has no number for."""
    text = float.__repr__(value)
    return _NOT_FINITE.get(text, text)


_NOT_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


_JSON_TEXT: dict[type, Callable[[Any], str]] = {str: encode_basestring_ascii, float: _float_text,
                                                bool: lambda value: "true" if value else "false"}


def _layout(keys: list[str], types: tuple[type, ...]) -> _Layout | None:
    """The _Layout of a row whose values have `types`, or None when some value is not a scalar."""
    none = type(None)
    if not set(types) <= _SCALARS | {none}:
        return None
    shown = tuple(i for i, t in enumerate(types) if t is not none)
    if not shown:
        return _Layout("{}", lambda values: (), ())
    lines = (f"    {encode_basestring_ascii(keys[i])}: ".replace("%", "%%") + ("%d" if types[i] is int else "%s")
             for i in shown)
    pick = itemgetter(*shown) if len(shown) > 1 else lambda values: (values[shown[0]],)
    texts = tuple((j, _JSON_TEXT[types[i]]) for j, i in enumerate(shown) if types[i] is not int)
    return _Layout("{\n" + ",\n".join(lines) + "\n  }", pick, texts)


_SCALARS = {str, int, float, bool}


def to_rich(columns: list[Column], rows: list[dict], units: str, title: str | None = None, compact: bool = False):
    """A rich Table (imported lazily: only the table format needs it). Numbers and the first column never wrap and
    never shrink below their widest cell; other text and the headers may wrap at spaces, never inside a word. Every
    text is a rich Text, printed as written: a spec's `source: see [red]HF[/red]` or `:fire:` is no markup or emoji."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    cells = [[cell(row.get(c.key), c.kind, units, compact=compact) for c in columns] for row in rows]
    # two spaces between columns (the right padding and the box's blank divider), none at the edges
    table = Table(title=None if title is None else Text(title), title_justify="left", header_style="bold", box=box.SIMPLE_HEAD, show_edge=False,
                  padding=(0, 1, 0, 0), pad_edge=False)
    for i, c in enumerate(columns):
        whole = c.numeric or i == 0
        texts = [r[i] for r in cells]
        words = [t for t in texts] if whole else [w for t in texts for w in t.split()]
        words += c.header.split("\n") if whole else c.header.split()
        table.add_column(Text(c.header), justify="right" if c.numeric else "left", no_wrap=whole,
                         min_width=max(len(w) for w in words))
    for row in cells:
        table.add_row(*map(Text, row))
    return table


def render(columns: list[Column], rows: list[dict], fmt: str, units: str = "binary", title: str | None = None,
           raw_keys: list[str] | None = None, payload: Any = None, compact: bool = False, label: str | None = None,
           bare: bool = False):
    """Render rows in `fmt`; returns a string, or a rich Table for 'table'.

    csv and json carry `raw_keys` of each row (default: the columns' keys); `payload` overrides what json prints.
    """
    keys = raw_keys or [c.key for c in columns]
    if fmt == "table":
        return to_rich(columns, rows, units, title, compact)
    if fmt == "markdown":
        return (f"**{title}**\n\n" if title else "") + to_markdown(columns, rows, units)
    if fmt == "latex":
        return to_latex(columns, rows, units, caption=title, label=label, bare=bare)
    if fmt == "csv":
        return to_csv(keys, rows)
    if fmt == "json":
        return to_json(only(rows, keys) if payload is None else payload)
    raise ValueError(f"unknown format {fmt!r}")


def only(rows: Iterable[dict], keys: Iterable[str]) -> list[dict]:
    """Rows restricted to `keys` (in that order), for a stable JSON schema."""
    keys = list(keys)
    return [{k: row[k] for k in keys if k in row} for row in rows]
