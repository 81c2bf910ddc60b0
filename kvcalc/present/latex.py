"""LaTeX that compiles as pasted: a booktabs table in a `table` environment, ASCII only, formulas in math mode.

Choices (also in the README):
- The snippet's first line is a comment naming the packages it needs: booktabs (rules) and array (the
  `>{\\raggedright\\arraybackslash}p{...}` columns of long text).
- Numbers are right-aligned `r` columns, thousands grouped with a thin space (`131\\,072`), so no siunitx is needed.
- Every other character goes through pylatexenc's unicode_to_latex (µ, ×, ≤, –, · and the specials & % $ # _ { } ~ ^
  \\), `|` becomes `\\textbar{}`; `<` and `>` land in math mode. Formulas (`2·n_kv·d_h`) are set in math mode
  (`$2 \\cdot n_{kv} \\cdot d_h$`).
- Units go in the header when every cell of a column has the same one (`KV cache (GiB)`), else stay in the cells;
  token counts (128k) and parameter counts (70.6B) keep theirs.
- Text columns whose cells run past 40 characters become 5 cm paragraph columns.
- `bare` gives the tabular alone; otherwise `\\caption` and `\\label` wrap it (default `tab:<first table's name>`,
  later tables of the output `-<name>` after it: distinct across commands).
"""

from __future__ import annotations

import re
from typing import Any

PACKAGES = r"% kvcalc table: needs \usepackage{booktabs,array}"
LONG_TEXT = 40  # characters: a text column with a longer cell is typeset as a paragraph column
PARAGRAPH = r">{\raggedright\arraybackslash}p{5cm}"
_NAME = re.compile(r"([A-Za-z]+)(?:_([A-Za-z0-9]+))?(')?")
_BEFORE = {"|": r"\textbar{}", "ᵀ": r"\textsuperscript{T}"}  # what pylatexenc leaves as is or cannot convert
_GROUPED = re.compile(r"(?<=\d),(?=\d{3}\b)")
# "40.0 GiB" -> ("40.0", "GiB"): a whole number, one space, a unit; "8,192", "512+64" and "192/128" have none
_UNIT = re.compile(r"^(-?\d[\d,]*(?:\.\d+)?) ([^\d\s]\S*)$")


def tex(text: str) -> str:
    """Any text as ASCII LaTeX (pylatexenc's maintained conversion), safe in text mode."""
    from pylatexenc.latexencode import unicode_to_latex

    parts = re.split("([" + "".join(_BEFORE) + "])", text)
    return "".join(_BEFORE.get(part) or unicode_to_latex(part) for part in parts)


def math_formula(expression: str) -> str:
    """A cache formula such as `2·n_kv·d_h` or `d_c + d_R` in math mode: `$2 \\cdot n_{kv} \\cdot d_h$`."""
    out = []
    for token in re.split(r"(\s+|[·×+()/−-])", expression):
        if not token or token.isspace():
            continue
        if token == "·":
            out.append(r"\cdot")
        elif token == "×":
            out.append(r"\times")
        elif token in ("−", "-"):
            out.append("-")
        elif token in "+()/":
            out.append(token)
        else:
            match = _NAME.fullmatch(token)
            if match and (match[2] or match[3]):
                out.append(match[1] + (f"_{{{match[2]}}}" if match[2] else "") + (match[3] or ""))
            elif token.replace(".", "").isalnum():
                out.append(token)
            else:
                return tex(expression)  # not a formula kvcalc writes: keep it as text
    return "$" + " ".join(out) + "$"


def numeric_cell(text: str) -> str:
    """A formatted number: thin-space thousands groups, units and symbols converted."""
    if text.endswith("×"):  # a ratio, in math mode: its grouping comma braced (1{,}008), an exponent as a power of 10
        number = text[:-1].replace(",", "{,}")
        if "e" in number:
            mantissa, exponent = number.split("e")
            number = f"{mantissa} \\cdot 10^{{{int(exponent)}}}"
        return f"${number}\\times$"
    return _GROUPED.sub(r"\\,", tex(text))


def _common_unit(texts: list[str]) -> str | None:
    """The unit every number of a column carries (None when they differ, or some have none)."""
    units = {m[2] if (m := _UNIT.match(t)) else None for t in texts if t != "–"}
    unit = units.pop() if len(units) == 1 else None
    return unit if unit and unit != "×" else None


def to_latex(columns: list[Any], cells: list[list[str]], caption: str | None, label: str | None,
             bare: bool = False) -> str:
    """A booktabs table from `columns` (with .header, .numeric, .kind) and their formatted `cells`."""
    headers = [" ".join(c.header.split()) for c in columns]
    cells = [list(row) for row in cells]
    for i, c in enumerate(columns):  # a unit every cell shares moves to the header
        movable = c.numeric and c.kind not in ("tokens", "count")  # 128k and 70.6B read as they are
        unit = _common_unit([row[i] for row in cells]) if movable and cells else None
        if unit:
            headers[i] += f" ({unit})"
            for row in cells:
                row[i] = row[i] if row[i] == "–" else row[i][: -len(unit)].rstrip()
    spec = []
    for i, c in enumerate(columns):
        long = any(len(row[i]) > LONG_TEXT for row in cells)
        spec.append("r" if c.numeric else PARAGRAPH if long else "l")
    body = [rf"\begin{{tabular}}{{{''.join(spec)}}}", r"\toprule",
            " & ".join(tex(h) for h in headers) + r" \\", r"\midrule"]
    for row in cells:
        out = []
        for c, text in zip(columns, row):
            if text == "–":
                out.append("--")
            elif c.kind == "formula":
                out.append(math_formula(text))
            elif c.numeric:
                out.append(numeric_cell(text))
            else:
                out.append(tex(text))
        body.append(" & ".join(out) + r" \\")
    body += [r"\bottomrule", r"\end{tabular}"]
    if bare:
        return "\n".join([PACKAGES] + body)
    head = [PACKAGES, r"\begin{table}[htbp]", r"\centering"]
    if caption:
        head.append(rf"\caption{{{tex(caption)}}}")
    if label:
        head.append(rf"\label{{{label}}}")
    return "\n".join(head + body + [r"\end{table}"])


def comment_block(lines: list[str]) -> str:
    """Lines as LaTeX comments, ASCII only."""
    return "\n".join(f"% {tex(line)}" if line else "%" for line in lines).rstrip("%\n")
