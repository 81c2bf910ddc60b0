"""Rows -> table | markdown | latex | csv | json.

Rows are dicts of raw values (ints stay exact ints). Columns choose and label what a human format shows; human
units appear only in table, markdown and latex output; csv and json carry the raw integers.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from typing import Any, Iterable

from kvcalc.units import format_bytes, format_count, format_flops, format_seconds, format_tokens

FORMATS = ("table", "markdown", "latex", "csv", "json")


@dataclass(frozen=True)
class Column:
    """One column: the row key it shows, its header, and how to format it.

    kind: 'text', 'num' (text that reads as a number: right-aligned), 'int', 'bytes', 'tokens', 'ratio', 'flops',
    'count' (parameters), 'seconds', 'rate' (per second), 'float' or 'bandwidth' (bytes/s, decimal units).
    """

    key: str
    header: str
    kind: str = "text"

    @property
    def title(self) -> str:
        """The header on one line (rich tables may break it where the header has a newline)."""
        return self.header.replace("\n", " ")

    @property
    def numeric(self) -> bool:
        return self.kind in ("int", "bytes", "tokens", "ratio", "num", "flops", "count", "seconds", "rate", "float", "bandwidth")


def cell(value: Any, kind: str, units: str = "binary", latex: bool = False) -> str:
    """Format one value for a human format."""
    if value is None:
        return "–"
    if kind == "bytes":
        return format_bytes(value, units)
    if kind == "tokens":
        return format_tokens(value)
    if kind == "int" and isinstance(value, int):
        return f"{value:,}"
    if kind == "ratio":
        return f"{value:.2f}" + (r"$\times$" if latex else "×")
    if kind == "flops":
        return format_flops(value) if units != "bytes" else f"{value:,}"
    if kind == "count":
        return format_count(value) if units != "bytes" else f"{value:,}"
    if kind == "seconds":
        return format_seconds(value)
    if kind == "bandwidth":  # vendors quote bandwidth in decimal units
        return format_bytes(value, "si" if units != "bytes" else "bytes") + "/s"
    if kind == "float":
        return f"{value:,.1f}"
    if kind == "rate":
        return f"{value:,.1f}" if value < 1000 else f"{value:,.0f}"
    return str(value)


_LATEX_SPECIALS = {
    "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
    "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "×": r"$\times$", "–": "--",
}


def latex_escape(text: str) -> str:
    """Escape LaTeX's special characters so any name or unit pastes into a paper."""
    return "".join(_LATEX_SPECIALS.get(ch, ch) for ch in text)


def to_markdown(columns: list[Column], rows: list[dict], units: str) -> str:
    """A GitHub pipe table; numeric columns right-aligned."""
    esc = lambda s: s.replace("|", r"\|")  # noqa: E731
    lines = ["| " + " | ".join(esc(c.title) for c in columns) + " |"]
    lines.append("|" + "|".join("---:" if c.numeric else ":---" for c in columns) + "|")
    for row in rows:
        lines.append("| " + " | ".join(esc(cell(row.get(c.key), c.kind, units)) for c in columns) + " |")
    return "\n".join(lines)


def to_latex(columns: list[Column], rows: list[dict], units: str, caption: str | None = None) -> str:
    """A booktabs tabular (needs \\usepackage{booktabs}); every cell escaped."""
    spec = "".join("r" if c.numeric else "l" for c in columns)
    lines = [rf"\begin{{tabular}}{{{spec}}}", r"\toprule"]
    if caption:
        lines.insert(0, f"% {caption}")
    lines.append(" & ".join(latex_escape(c.title) for c in columns) + r" \\")
    lines.append(r"\midrule")
    for row in rows:
        cells = []
        for c in columns:
            text = cell(row.get(c.key), c.kind, units, latex=True)
            cells.append(text if c.kind == "ratio" and row.get(c.key) is not None else latex_escape(text))
        lines.append(" & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines)


def to_csv(keys: list[str], rows: list[dict]) -> str:
    """One header row of stable keys, then raw values (exact integers, no units; empty when not applicable)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(keys)
    for row in rows:
        writer.writerow(["" if row.get(k) is None else row.get(k) for k in keys])
    return buf.getvalue().rstrip("\n")


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def to_json(payload: Any) -> str:
    """Raw values as JSON; keys whose value is None are left out (e.g. mla_cache for non-MLA models)."""
    return json.dumps(_jsonable(payload), indent=2)


def to_rich(columns: list[Column], rows: list[dict], units: str, title: str | None = None):
    """A rich Table (imported lazily: only the table format needs it)."""
    from rich import box
    from rich.table import Table

    cells = [[cell(row.get(c.key), c.kind, units) for c in columns] for row in rows]
    widths = []
    for i, c in enumerate(columns):
        # Numbers and the first column never break; text columns wrap at spaces; headers keep whole words.
        whole = c.numeric or i == 0
        texts = [r[i] for r in cells]
        words = [w for t in texts for w in (t.split() if not whole else [t])] + c.header.split()
        widths.append(max(len(w) for w in words))
    # The narrowest the table can be without cutting a figure: the CLI widens the page to at least this.
    table = Table(title=title, title_justify="left", header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False,
                  min_width=sum(widths) + 2 * len(columns) + 2)
    for i, c in enumerate(columns):
        table.add_column(c.header, justify="right" if c.numeric else "left", no_wrap=c.numeric or i == 0,
                         min_width=widths[i])
    for row in cells:
        table.add_row(*row)
    return table


def render(columns: list[Column], rows: list[dict], fmt: str, units: str = "binary", title: str | None = None,
           raw_keys: list[str] | None = None, payload: Any = None):
    """Render rows in `fmt`; returns a string, or a rich Table for 'table'.

    csv and json carry `raw_keys` of each row (default: the columns' keys); `payload` overrides what json prints.
    """
    keys = raw_keys or [c.key for c in columns]
    if fmt == "table":
        return to_rich(columns, rows, units, title)
    if fmt == "markdown":
        return (f"**{title}**\n\n" if title else "") + to_markdown(columns, rows, units)
    if fmt == "latex":
        return to_latex(columns, rows, units, caption=title)
    if fmt == "csv":
        return to_csv(keys, rows)
    if fmt == "json":
        return to_json(only(rows, keys) if payload is None else payload)
    raise ValueError(f"unknown format {fmt!r}")


def only(rows: Iterable[dict], keys: Iterable[str]) -> list[dict]:
    """Rows restricted to `keys` (in that order), for a stable JSON schema."""
    keys = list(keys)
    return [{k: row[k] for k in keys if k in row} for row in rows]
