"""Renderers: every format carries the same rows; LaTeX is booktabs and escaped; csv/json keep exact integers and are
written row by row as a sweep computes them."""

from __future__ import annotations

import csv
import io
import json
import math

import pytest

from kvcalc.present.emit import Output, Table, emit
from kvcalc.present.latex import tex
from kvcalc.present.render import Column, cell, csv_pieces, only, render, rows_json, to_csv, to_json

COLUMNS = [Column("model", "Model"), Column("n", "Layers", "int"), Column("b", "KV\ncache", "bytes"), Column("r", "vs first", "ratio")]
ROWS = [
    {"model": "a_b%c&d", "n": 80, "b": 42_949_672_960, "r": 1.0, "extra": "x"},
    {"model": "m|x", "n": 60, "b": 9_059_696_640, "r": 0.2109375, "extra": None},
]


def test_markdown_pipe_table():
    text = render(COLUMNS, ROWS, "markdown")
    lines = text.splitlines()
    assert lines[0] == "| Model | Layers | KV cache | vs first |"
    assert lines[1] == "|:---|---:|---:|---:|"
    assert lines[2] == "| a_b%c&d | 80 | 40.0 GiB | 1.00× |"
    assert lines[3] == r"| m\|x | 60 | 8.44 GiB | 0.211× |"


def test_latex_booktabs_and_escaping():
    text = render(COLUMNS, ROWS, "latex", title="KV 100% & more", label="tab:kv")
    lines = text.splitlines()
    assert lines[0] == r"% kvcalc table: needs \usepackage{booktabs,array,graphicx}"  # a comment: the packages it needs
    assert lines[1:5] == [r"\begin{table}[htbp]", r"\centering", r"\caption{KV 100\% \& more}", r"\label{tab:kv}"]
    assert r"\begin{tabular}{lrrr}" in lines
    assert [line for line in lines if line in (r"\toprule", r"\midrule", r"\bottomrule")] == [r"\toprule", r"\midrule", r"\bottomrule"]
    assert r"a\_b\%c\&d & 80 & 40.0 & $1.00\times$ \\" in lines  # one unit in the column: GiB in its header
    assert r"m\textbar{}x & 60 & 8.44 & $0.211\times$ \\" in lines
    mixed = render(COLUMNS, [{**ROWS[0], "b": 1024}, ROWS[1]], "latex")
    assert r"& 1.00 KiB &" in mixed and r"& 8.44 GiB &" in mixed  # units differ: they stay in the cells
    assert lines[-2:] == [r"\end{tabular}}", r"\end{table}"]  # the shrink-to-fit \resizebox's group closed


def test_latex_escape_all_specials():
    assert tex(r"_%&#${}~^\ ") == r"\_\%\&\#\$\{\}{\textasciitilde}{\textasciicircum}{\textbackslash} "


def test_csv_raw_integers():
    text = render(COLUMNS, ROWS, "csv", raw_keys=["model", "b", "extra"])
    rows = list(csv.reader(io.StringIO(text)))
    assert rows == [["model", "b", "extra"], ["a_b%c&d", "42949672960", "x"], ["m|x", "9059696640", ""]]


def test_json_raw_integers_and_none_left_out():
    data = json.loads(render(COLUMNS, ROWS, "json", raw_keys=["model", "b", "extra"]))
    assert data == [{"model": "a_b%c&d", "b": 42_949_672_960, "extra": "x"}, {"model": "m|x", "b": 9_059_696_640}]
    assert isinstance(data[0]["b"], int)


def test_rich_table_has_every_cell():
    from rich.console import Console

    console = Console(width=200, record=True, file=io.StringIO())
    console.print(render(COLUMNS, ROWS, "table", units="si"))
    out = console.export_text()
    for text in ("a_b%c&d", "42.9 GB", "9.06 GB", "0.211×", "KV"):
        assert text in out


# ---------------------------------------------------------------- rows written as they are computed (#11)

ODD = [{"model": "x\u00e9\n\"\u2028, y", "n": 10**40, "b": None, "r": 1.5, "t": True, "f": False, "i": math.inf,
        "j": -math.inf, "k": math.nan, "z": 1e300},
       {}, {"b": None}, {"model": [1, {"z": None, "y": [None, 2]}], "n": {"q": 1}}, {"n": 3}, {"model": "a,b", "%s": 5}]
ODD_KEYS = ["model", "n", "b", "r", "t", "f", "i", "j", "k", "z", "n", "%s"]
NUMBERS = [{"model": "", "n": -0.0, "b": 1e-7, "r": 0.1, "t": 1e16, "f": -5, "i": 0, "j": 2**64, "k": -(10**30),
            "z": 123456789.125, "%s": "%d"}, {"model": "\t", "n": -1.5e-300, "b": False, "r": 5e-324}]


@pytest.mark.parametrize("rows", [ODD, [], [{}], ODD[:1], ODD * 300, ROWS, NUMBERS],
                         ids=["odd", "none", "empty", "one", "many", "rows", "numbers"])
def test_rows_written_in_pieces_are_json_and_csv_to_the_byte(rows):
    keys = ODD_KEYS if rows is not ROWS else ["model", "b", "extra"]
    assert "".join(rows_json(iter(rows), keys)) == to_json(only(rows, keys))
    assert "".join(csv_pieces(keys, iter(rows))) == to_csv(keys, rows) + "\n"


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_a_table_still_being_computed_is_written_as_it_comes(fmt, capsys):
    written: list[int] = []

    def rows():
        for i in range(3000):
            if i == 2999:  # the last row: the earlier ones are out already
                written.append(len(capsys.readouterr().out))
            yield {"model": f"m{i}", "n": i, "b": i * 1024, "r": i / 7}

    emit(Output([Table("sweep", COLUMNS, rows())]), fmt)
    whole = render(COLUMNS, [{"model": f"m{i}", "n": i, "b": i * 1024, "r": i / 7} for i in range(3000)], fmt)
    assert written[0] > 0
    assert capsys.readouterr().out == whole[written[0]:] + "\n"


def test_a_long_sweep_shows_a_bar_on_a_terminal_without_touching_stdout(monkeypatch, capsys):
    import sys
    import time

    from kvcalc.progress import progress_rows

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False)
    clock = iter(range(0, 10**6, 1))  # each reading a second later: the bar shows at once
    monkeypatch.setattr(time, "perf_counter", lambda: float(next(clock)))

    def rows():
        for i in range(5000):
            print(i, end=",")  # stdout written while the bar is live stays stdout
            yield {"n": i}

    assert [r["n"] for r in progress_rows(rows(), 5000, to_terminal=False)] == list(range(5000))
    out = capsys.readouterr()
    assert out.out == "".join(f"{i}," for i in range(5000)) and "rows" in out.err


def test_a_sweep_to_a_file_shows_its_bar_even_with_stdout_a_terminal(monkeypatch, tmp_path):
    # a review: `sweep ... -o rows.csv` at a terminal showed no bar, as stdout was a terminal though no row went there
    import sys

    from kvcalc.present.emit import DESTINATION, Destination, to_terminal

    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    assert to_terminal()
    token = DESTINATION.set(Destination(output=str(tmp_path / "rows.csv")))
    try:
        assert not to_terminal()
    finally:
        DESTINATION.reset(token)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False)
    assert not to_terminal()  # redirected: `> rows.csv`


@pytest.mark.parametrize(("value", "text"), [(0.041234, "0.0412"), (7.2, "7.20"), (24.15, "24.2"), (24.25, "24.2"),
                                             (24.151, "24.2"), (999.4, "999"), (999.6, "1,000"), (3128.955, "3,129"),
                                             (125_281.48, "125,281")])
def test_tokens_per_second_keep_three_significant_digits(value, text):
    # an audit: rates printed one decimal below 1,000, so 0.0412 tokens/s showed as 0.0; a tie (24.15, whose float
    # lies just below it) rounds to even as the exact quotient does (README, Conventions)
    assert cell(value, "rate", "binary") == text
