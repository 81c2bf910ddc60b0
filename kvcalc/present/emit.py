"""One way out for every command: a result's tables -> table | markdown | latex | csv | json on stdout, notes on stderr.

The rules for every format live here:
- Human formats (table, markdown, latex) show every table, then the derivation (`--explain`) if asked; warnings go
  to stderr. csv and json carry data flags instead (e.g. `exceeds_max_context`), so a program reading them gets
  clean data even with stderr merged into stdout.
- csv: one table is one csv file; several tables are one csv file whose first column, `table`, names the table a
  row belongs to, under the union of their keys (empty where a table has no such key).
- json: the command's payload (default: the first table's rows with their raw keys).
- A table never loses a column: on a narrow terminal its headers and text wrap, then units lose their space; if it
  still does not fit, it is printed wider than the terminal, with a one-line hint on stderr.
"""

from __future__ import annotations

import io
import os
import re
import sys
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvcalc.present.outfile import whole_file
from kvcalc.present.render import Column, csv_pieces, render, rows_json, to_csv

HUMAN = ("table", "markdown", "latex")
EXTENSIONS = {".tex": "latex", ".md": "markdown", ".csv": "csv", ".json": "json", ".txt": "table"}


@dataclass(frozen=True)
class Destination:
    """Where and how a command's output goes: LaTeX caption, label and `bare` tabular, and a file instead of stdout
    (its extension choosing the format when the format is the default, table)."""

    caption: str | None = None
    label: str | None = None
    bare: bool = False
    output: str | None = None


DESTINATION: ContextVar[Destination | None] = ContextVar("destination", default=None)  # None: stdout, defaults


def to_terminal() -> bool:
    """Whether the command's output goes to a terminal: stdout, not redirected, and no --output file."""
    dest = DESTINATION.get()
    return (dest is None or dest.output is None) and sys.stdout.isatty()


@dataclass
class Table:
    """One table of a result: its name (csv's `table` column), columns, raw rows, title, and the raw keys csv and
    json carry (default: the columns' keys).

    `rows` is a list, or rows still to be computed (a sweep's): csv and json write those as they come; every other
    use collects them first (`collect`)."""

    name: str
    columns: list[Column]
    rows: list[dict] | Iterator[dict]
    title: str | None = None
    raw_keys: list[str] | None = None
    hint: str | None = None  # how to pick fewer columns, when this table is too wide for the terminal

    @property
    def keys(self) -> list[str]:
        return self.raw_keys or [c.key for c in self.columns]

    def collect(self) -> list[dict]:
        """The rows as a list (computing those still to come)."""
        if not isinstance(self.rows, list):
            self.rows = list(self.rows)
        return self.rows


@dataclass
class Output:
    """What a command prints: its tables, the json payload, derivation lines, and warnings."""

    tables: list[Table]
    payload: Any = None
    explain: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    chart: list[str] = field(default_factory=list)  # a terminal bar chart (table and markdown formats)


def stderr_console():
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True, highlight=False)


def warn(message: str) -> None:
    """One line on stderr."""
    stderr_console().print(message, markup=False, emoji=False)


LABEL = re.compile(r"[A-Za-z0-9:._/+-]{1,200}")  # what \label and \ref take as written, in any document


def _check_latex_options(dest: Destination) -> None:
    """--label as a plain key, and a --caption every character of which has a core-LaTeX form (the snippet compiles
    with booktabs and array alone): a typer.BadParameter naming the option otherwise."""
    import typer

    from kvcalc.present.latex import unwritable

    if dest.bare and (dest.caption is not None or dest.label is not None):
        given = "--caption" if dest.caption is not None else "--label"
        raise typer.BadParameter("--bare writes the tabular alone, with no table environment to hold a caption or "
                                 "label: leave one of them out", param_hint=f"'{given}'")
    if dest.label is not None and not LABEL.fullmatch(dest.label):
        raise typer.BadParameter(f"{dest.label[:60]!r}: a label is letters, digits and : . _ - / + (at most 200), "
                                 "which \\label and \\ref take as written", param_hint="'--label'")
    if dest.caption is not None and not dest.caption.strip():
        raise typer.BadParameter("an empty caption: give its text, or leave --caption out for the table's title",
                                 param_hint="'--caption'")
    bad = unwritable(dest.caption or "")
    if bad:
        shown = ", ".join(f"{c} (U+{ord(c):04X})" for c in bad[:5])
        raise typer.BadParameter(f"{shown}: no form in core LaTeX (the snippet needs only booktabs, array and, unless --bare, graphicx); write it "
                                 "another way, e.g. as a LaTeX command in ASCII", param_hint="'--caption'")


def checked_format(fmt: str) -> str:
    """The format `fmt` writes in at the destination (output_format), its LaTeX options refused where they do not
    fit it: what emit checks, and what a command line checks before the command's work (a run, a sweep)."""
    import typer

    dest = DESTINATION.get() or Destination()
    fmt = output_format(fmt)
    if fmt != "latex" and (dest.caption is not None or dest.label is not None or dest.bare):
        given = next(name for name, value in (("--caption", dest.caption), ("--label", dest.label), ("--bare", dest.bare))
                     if value not in (None, False))
        raise typer.BadParameter(f"shapes LaTeX output only; add --format latex (or an --output file ending in .tex) "
                                 f"or leave it out (the output is {fmt})", param_hint=f"'{given}'")
    if fmt == "latex":
        _check_latex_options(dest)
    return fmt


def emit(out: Output, fmt: str, units: str = "binary") -> None:
    """Print `out` in `fmt`, or write it to the destination's file."""
    import typer

    dest = DESTINATION.get() or Destination()
    fmt = checked_format(fmt)
    if fmt in HUMAN:
        for message in out.warnings:
            warn(message)
    if _streamed(out, fmt, dest):
        return
    for t in out.tables:
        t.collect()
    if dest.output:
        text = render_text(out, fmt, units, dest)
        try:
            with whole_file(dest.output) as path:
                path.write_text(text + "\n", encoding="utf-8")
        except OSError as exc:
            from kvcalc.errors import KvcalcError

            raise KvcalcError(f"--output {dest.output}: cannot write ({exc.strerror or exc})") from None
        return
    if fmt == "table":
        for i, t in enumerate(out.tables):
            if i:
                typer.echo("")
            print_table(t, units)
        if out.explain:
            typer.echo("")
            typer.echo(explain_block(out.explain, fmt))
        if out.chart:
            typer.echo("")
            typer.echo("\n".join(out.chart))
        return
    typer.echo(render_text(out, fmt, units, dest))


def output_format(fmt: str) -> str:
    """The format a command writes in: `fmt`, or where it is the default (table) and the output goes to a file, the
    one the file's extension names."""
    dest = DESTINATION.get() or Destination()
    if dest.output and fmt == "table":
        suffix = Path(dest.output).suffix.lower()
        if suffix and suffix not in EXTENSIONS:  # report.xlsx would get a text table in silence
            import typer

            raise typer.BadParameter(f"{dest.output}: {suffix} names no format kvcalc writes ({' '.join(EXTENSIONS)}); "
                                     "give --format to write that file in one", param_hint="'--output'")
        return EXTENSIONS.get(suffix, "table")
    return fmt


def _streamed(out: Output, fmt: str, dest: Destination) -> bool:
    """Write a csv or json table whose rows are still being computed, each piece as it comes (to the destination's
    file, or stdout); False for any other output, which is written whole."""
    import typer

    if fmt not in ("csv", "json") or out.payload is not None or len(out.tables) != 1 or isinstance(out.tables[0].rows, list):
        return False
    t = out.tables[0]
    pieces = rows_json(t.rows, t.keys) if fmt == "json" else csv_pieces(t.keys, t.rows)
    if not dest.output:
        for text in _batched(pieces):
            typer.echo(text, nl=False)
        if fmt == "json":
            typer.echo("")
        return True
    try:
        with whole_file(dest.output) as path, open(path, "w", encoding="utf-8") as f:
            for text in _batched(pieces):
                f.write(text)
            f.write("\n" if fmt == "json" else "")
    except OSError as exc:
        from kvcalc.errors import KvcalcError

        raise KvcalcError(f"--output {dest.output}: cannot write ({exc.strerror or exc})") from None
    return True


def _batched(pieces: Iterator[str], size: int = 1 << 16) -> Iterator[str]:
    """Pieces of text joined into writes of about `size` characters (one write a row would cost a system call each)."""
    buf: list[str] = []
    length = 0
    for piece in pieces:
        buf.append(piece)
        length += len(piece)
        if length >= size:
            yield "".join(buf)
            buf, length = [], 0
    yield "".join(buf)


def render_text(out: Output, fmt: str, units: str, dest: Destination | None = None) -> str:
    """The whole output of a command as text in `fmt` (table: at the page width, every column whole)."""
    dest = dest or Destination()
    for t in out.tables:
        t.collect()
    if fmt == "json":
        if out.payload is None:
            return "".join(rows_json(out.tables[0].collect(), out.tables[0].keys))
        return render([], [], "json", payload=out.payload)
    if fmt == "csv":
        return csv_text(out.tables)
    parts = []
    for i, t in enumerate(out.tables):
        if fmt == "table":
            parts.append(table_text(t, units))
        elif fmt == "latex":
            caption = dest.caption if dest.caption and i == 0 else t.title
            base = dest.label or f"tab:{out.tables[0].name}"  # later tables: -<name>, so no two labels collide
            label = base if i == 0 else f"{base}-{t.name}"
            parts.append(render(t.columns, t.collect(), fmt, units, title=caption, label=label, bare=dest.bare))
        else:
            parts.append(render(t.columns, t.collect(), fmt, units, title=t.title))
    if out.explain:
        parts.append(explain_block(out.explain, fmt))
    if out.chart and fmt in ("table", "markdown"):
        parts.append("\n".join(out.chart) if fmt == "table" else "```text\n" + "\n".join(out.chart) + "\n```")
    return "\n\n".join(parts)


def table_text(t: Table, units: str) -> str:
    """A rich table as plain text, at a width that keeps every column whole."""
    from rich.console import Console

    table, page = fit(t, units, terminal_width())
    buf = io.StringIO()
    Console(file=buf, width=page, no_color=True, highlight=False).print(table)
    return "\n".join(line.rstrip() for line in buf.getvalue().rstrip("\n").splitlines())  # rich pads the title


def csv_text(tables: list[Table]) -> str:
    """One csv file: a table as it is, or several with a leading `table` column under the union of their keys."""
    if len(tables) == 1:
        return to_csv(tables[0].keys, tables[0].collect())
    keys = list(dict.fromkeys(k for t in tables for k in t.keys))
    rows = [{"table": t.name, **{k: r.get(k) for k in t.keys}} for t in tables for r in t.collect()]
    return to_csv(["table"] + keys, rows)


def explain_block(lines: list[str], fmt: str) -> str:
    """Derivation lines as a comment block (latex), a fenced block (markdown) or plain text."""
    if fmt == "latex":
        from kvcalc.present.latex import comment_block

        return comment_block(lines)
    if fmt == "markdown":
        return "```text\n" + "\n".join(lines).rstrip() + "\n```"
    return "\n".join(lines).rstrip()


def terminal_width() -> int:
    """The page width: COLUMNS or the terminal's, else a wide page when piped (so files and logs don't wrap)."""
    from rich.console import Console

    if "COLUMNS" not in os.environ and not sys.stdout.isatty():
        return 200
    return Console().width


def fit(t: Table, units: str, width: int) -> tuple[Any, int]:
    """The rich table for `t` and the page width to print it at: the terminal's if it fits there (headers and text
    wrapping, then compact units), else its own narrowest width, which never cuts a figure."""
    from rich.console import Console
    from rich.measure import Measurement

    from kvcalc.present.render import to_rich

    wide = Console(width=1 << 16)  # measure unconstrained: rich caps a measurement at the page width
    for compact in (False, True):
        table = to_rich(t.columns, t.collect(), units, t.title, compact=compact)
        need = Measurement.get(wide, wide.options, table).minimum
        if need <= width:
            return table, width
    return table, need


def print_table(t: Table, units: str) -> None:
    """Print a table through rich at a width that keeps every column whole."""
    from rich.console import Console

    width = terminal_width()
    table, page = fit(t, units, width)
    if page > width:
        hint = t.hint or "a wider terminal, or --format csv or json for every column"
        warn(f"note: this table needs {page} columns and the terminal has {width}; it is printed wider ({hint})")
    Console(soft_wrap=True, highlight=False, width=page).print(table)
