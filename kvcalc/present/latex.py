"""LaTeX that compiles as pasted: a booktabs table in a `table` environment, ASCII only, formulas in math mode.

Choices (also in the README):
- The snippet's first line is a comment naming the packages it needs: booktabs (rules) and array (the
  `>{\\raggedright\\arraybackslash}p{...}` columns of long text).
- Numbers are right-aligned `r` columns, thousands grouped with a thin space (`131\\,072`), so no siunitx is needed.
- Every other character goes through pylatexenc's unicode_to_latex (µ, ×, ≤, –, · and the specials & % $ # _ { } ~ ^
  \\), `|` becomes `\\textbar{}` and a straight `"` typewriter's `\\texttt{\\char34}` (pylatexenc's `''` is a closing
  quote); `<` and `>` land in math mode. A character whose form needs another package, or
  that has none, is written `?` (a --caption holding one is refused); line breaks become spaces; `--` is written
  `-{}-` (not TeX's en-dash ligature); a negative number gets a math minus. Formulas (`2·n_kv·d_h`) are set in math mode
  (`$2 \\cdot n_{kv} \\cdot d_h$`).
- Units go in the header when every cell of a column has the same one (`KV cache (GiB)`), else stay in the cells;
  token counts (128k) and parameter counts (70.6B) keep theirs.
- Text columns whose cells run past 40 characters become 5 cm paragraph columns.
- `bare` gives the tabular alone; otherwise `\\caption` and `\\label` wrap it (default `tab:<first table's name>`,
  later tables of the output `-<name>` after it: distinct within an output; two outputs of one command share theirs,
  so give --label to paste both), and a table wider than the line is
  scaled down to it, never up (graphicx's `\\resizebox`, its `\\width` the tabular's natural width).
- A header of several lines (the terminal's `KV\\ncache`) is a nested tabular of those lines, bottom-aligned.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from typing import Any

PACKAGES = r"% kvcalc table: needs \usepackage{booktabs,array}"  # a tabular alone (--bare)
PACKAGES_FITTED = r"% kvcalc table: needs \usepackage{booktabs,array,graphicx}"  # graphicx: \resizebox
# scaled down to the line's width when wider (graphicx's \width is the tabular's natural width), never up
SHRINK = r"\resizebox{\ifdim\width>\linewidth\linewidth\else\width\fi}{!}{%" + "\n"
LONG_TEXT = 40  # characters: a text column with a longer cell is typeset as a paragraph column
PARAGRAPH = r">{\raggedright\arraybackslash}p{5cm}"
_NAME = re.compile(r"([A-Za-z]+)(?:_([A-Za-z0-9]+))?(')?(ᵀ)?")  # d_c', W_UKᵀ
_FUNCTIONS = {"min": r"\min", "max": r"\max", "mod": r"\bmod"}  # core LaTeX's
_THOUSANDS = re.compile(r"\d{1,3}(?:,\d{3})+")  # 8,192: grouped with a thin space in math mode too
# '16,384·t (global)': a model's formula for one group of layers, named after it (table dims)
_LABELLED = re.compile(r"(.*?\S) \((.+)\)")  # a formula has no ' (' of its own: the label is any text after one
# what pylatexenc leaves as is, cannot convert, or converts to another glyph ('"' to '' , a closing quote in OT1's
# roman): a straight double quote is typewriter's character 34, straight in OT1, T1 and lualatex's TU alike
_BEFORE = {"|": r"\textbar{}", '"': r"\texttt{\char34}", "ᵀ": r"\textsuperscript{T}"}
_GROUPED = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")  # 8,192 and 10,000k: three digits and then no digit
# "40.0 GiB" -> ("40.0", "GiB"): a whole number, one space, a unit; "8,192", "512+64" and "192/128" have none
_UNIT = re.compile(r"^(-?\d[\d,]*(?:\.\d+)?) ([^\d\s]\S*)$")
_POWER = re.compile(r"(-?\d\.\d+)e([+-]\d+)")  # '9.46e-10' -> ('9.46', '-10')
_POWER_UNIT = re.compile(_POWER.pattern + r"(?: (\S+))?")  # '1.68e+21 s' -> ('1.68', '+21', 's')


# Macros pylatexenc writes that compile under \documentclass{article} with booktabs and array alone: each checked with
# pdflatex (TeX Live 2022) on a character that needs it; the rest (amssymb's \mathbb, \varnothing, \lesssim; T1's
# \guillemotleft, \k; amsmath's \nobreakdash; \textfrac) make a pasted table fail.
_CORE_MACROS = frozenset("""
AE Delta Downarrow Gamma H IJ L Lambda Leftarrow Leftrightarrow O OE Omega Phi Pi Psi Rightarrow Sigma Theta Uparrow
Updownarrow Upsilon Vert Xi ae aleph alpha angle approx asymp beta bigcap bigcirc bigcup bigtriangledown bigtriangleup
bigvee bigwedge bowtie bullet c cap cdot cdots chi circ cong coprod cup dashv ddots delta diamond doteq ell ensuremath
epsilon equiv eta exists forall frown gamma geq gg hbar hookleftarrow hookrightarrow i ij in infty int kappa l lambda
langle lceil leftharpoondown leftharpoonup leftrightarrow leq lfloor ll mapsto mathbin mid mp mu nabla nearrow neq ni
not notin nu nwarrow o odot oe oint omega ominus oplus oslash otimes parallel partial perp pi pm prec preceq prod
propto psi r rangle rceil rfloor rho rightharpoondown rightharpoonup rightleftharpoons searrow sigma sim simeq smile
sqcap sqcup sqrt sqsubseteq sqsupseteq ss star subset subseteq succ succeq sum supset supseteq swarrow tau
textasciiacute textasciidieresis textasciimacron textasciitilde textasciicircum textbackslash textbar textbigcircle
textbrokenbar textbullet textcelsius textcent textcopyright textcurrency textdagger textdaggerdbl textdegree textdiv
textdownarrow textellipsis textemdash textendash textexclamdown textfractionsolidus textleftarrow textlnot textmu
textonehalf textonequarter textonesuperior textordfeminine textordmasculine textparagraph textperiodcentered
textperthousand textquestiondown textquotedblleft textquotedblright textquoteleft textquoteright textregistered
textrightarrow textsection textsterling textsuperscript textthreequarters textthreesuperior texttimes texttrademark
texttwosuperior textuparrow textyen theta times top triangleleft triangleright u updownarrow uplus upsilon v varepsilon
varphi varsigma vdash vdots vee wedge wp wr xi zeta
""".split())
# those of them that work in text mode (accents, letters, \text... symbols); the rest are math's
_TEXT_MACROS = frozenset(m for m in _CORE_MACROS if m.startswith("text")) | frozenset(
    "AE H IJ L O OE ae c i ij l o oe r ss u v ensuremath".split())
_MACRO = re.compile(r"\\([A-Za-z]+)")
_ASCII_BEFORE = re.compile("([" + re.escape("".join(c for c in _BEFORE if c.isascii())) + "])")
_NON_ASCII = re.compile(r"([^\x00-\x7f])")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # a line break would end a paragraph inside \caption or a cell
UNWRITABLE = "?"  # what a character with no core-LaTeX form becomes


def tex(text: str) -> str:
    """Any text as ASCII LaTeX that compiles with the snippet's packages alone (pylatexenc's conversion where it gives
    core LaTeX, UNWRITABLE where it cannot), safe in text mode: control characters and line breaks become spaces, and
    `--` stays two hyphens (not TeX's en-dash ligature: `--tp` in a cell is an option)."""
    from pylatexenc.latexencode import unicode_to_latex

    out = []
    text = unicodedata.normalize("NFC", text)  # e and a combining acute as é, which has a LaTeX form
    for part in _NON_ASCII.split(_CONTROL.sub(" ", text)):
        if len(part) == 1 and not part.isascii():
            out.append(_character(part))
        elif part:
            out.append("".join(_BEFORE.get(p) or unicode_to_latex(p) for p in _ASCII_BEFORE.split(part) if p))
    # TeX's ligatures of two characters: -- (an en dash), !` and ?` (inverted marks), '' and `` (curly double quotes)
    return re.sub(r"-(?=-)|[!?`'](?=`)|'(?=')", lambda m: m[0] + "{}", "".join(out))


def unwritable(text: str) -> list[str]:
    """The characters of `text` that tex() cannot write in core LaTeX (it writes UNWRITABLE for each)."""
    text = unicodedata.normalize("NFC", text)  # as tex() reads it: e and a combining acute are é
    return [c for c in dict.fromkeys(_NON_ASCII.findall(text)) if _character(c) == UNWRITABLE]


@functools.cache
def _character(c: str) -> str:
    """One non-ASCII character in core LaTeX, or UNWRITABLE; a zero-width or other format character vanishes."""
    from pylatexenc.latexencode import unicode_to_latex

    if c in _BEFORE:
        return _BEFORE[c]
    if unicodedata.category(c) in ("Cf", "Cc", "Zl", "Zp"):
        return " " if unicodedata.category(c) in ("Zl", "Zp") else ""
    out = unicode_to_latex(c, unknown_char_warning=False)
    macros = set(_MACRO.findall(out))
    if not out.isascii() or not macros <= _CORE_MACROS:
        return UNWRITABLE
    if macros - _TEXT_MACROS and "ensuremath" not in macros:  # ɛ is {\varepsilon}: math only, so in \ensuremath
        return rf"\ensuremath{{{out}}}"
    return out


def math_formula(expression: str) -> str:
    """A formula such as `2·n_kv·d_h`, `d_c + d_R`, `W_UQ·W_UKᵀ` or `16,384·min(t, 1,024)` in math mode:
    `$2 \\cdot n_{kv} \\cdot d_{h}$`; thousands grouped with a thin space, min, max and mod as LaTeX's operators. Any
    other text (a word of several letters) is kept as text."""
    out = []
    for token in re.split(r"(\s+|[·×+()/−-]|,(?=\s))", expression):
        if not token or token.isspace():
            continue
        if token == "·":
            out.append(r"\cdot")
        elif token == "×":
            out.append(r"\times")
        elif token in ("−", "-"):
            out.append("-")
        elif token in "+()/,":
            out.append(token)
        elif token in _FUNCTIONS:
            out.append(_FUNCTIONS[token])
        elif _THOUSANDS.fullmatch(token):
            out.append(token.replace(",", r"\,"))
        else:
            match = _NAME.fullmatch(token)
            if match and (match[2] or match[3] or match[4]):
                out.append(match[1] + (f"_{{{match[2]}}}" if match[2] else "") + (match[3] or "")
                           + (r"^{\top}" if match[4] else ""))
            elif token.isdigit() or token.replace(".", "").isdigit() or (token.isalpha() and len(token) == 1):
                out.append(token)
            else:
                return tex(expression)  # not a formula kvcalc writes: keep it as text
    return "$" + " ".join(out) + "$"


def formula_cell(text: str) -> str:
    """A cell of formulas, each maybe named after its layers ('16,384·t (global); 16,384·min(t, 128) (local)'): each
    formula in math mode, each name as text."""
    parts = []
    for part in text.split("; "):
        named = _LABELLED.fullmatch(part)
        parts.append(f"{math_formula(named[1])} ({tex(named[2])})" if named else math_formula(part))
    return "; ".join(parts)


def numeric_cell(text: str) -> str:
    """A formatted number: thin-space thousands groups, units and symbols converted."""
    if text.endswith("×"):  # a ratio, in math mode: its grouping comma braced (1{,}008), an exponent as a power of 10
        number = text[:-1].replace(",", "{,}")
        if "e" in number:
            mantissa, exponent = number.split("e")
            number = f"{mantissa} \\cdot 10^{{{int(exponent)}}}"
        return f"${number}\\times$"
    if power := _POWER_UNIT.fullmatch(text):  # a power of ten (format_sig's 1.23e+03; a time's 1.68e+21 s), as ratios
        unit = f" {tex(power[3])}" if power[3] else ""
        return f"${power[1]} \\cdot 10^{{{int(power[2])}}}${unit}"
    text = _GROUPED.sub(r"\\,", tex(text))
    return f"$-${text[1:]}" if text.startswith("-") else text  # a minus sign, not a hyphen


def _common_unit(texts: list[str]) -> str | None:
    """The unit every number of a column carries (None when they differ, or some have none)."""
    units = {m[2] if (m := _UNIT.match(t)) else None for t in texts if t != "–"}
    unit = units.pop() if len(units) == 1 else None
    return unit if unit and unit != "×" else None


def to_latex(columns: list[Any], cells: list[list[str]], caption: str | None, label: str | None,
             bare: bool = False) -> str:
    """A booktabs table from `columns` (with .header, .numeric, .kind) and their formatted `cells`."""
    headers = ["\n".join(" ".join(line.split()) for line in c.header.splitlines()) for c in columns]
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
            _row([_stacked(h, s[0]) for h, s in zip(headers, spec)]), r"\midrule"]
    for row in cells:
        out = []
        for c, text, align in zip(columns, row, spec):
            if text == "–":
                out.append("--")
            elif c.kind == "formula":
                out.append(formula_cell(text))
            elif c.numeric:
                out.append(numeric_cell(text))
            elif align == PARAGRAPH:
                out.append(_breakable(text))
            else:
                out.append(tex(text))
        body.append(_row(out))
    body += [r"\bottomrule", r"\end{tabular}"]
    if bare:
        return "\n".join([PACKAGES] + body)
    head = [PACKAGES_FITTED, r"\begin{table}[htbp]", r"\centering"]
    if caption:
        head.append(rf"\caption{{{tex(caption)}}}")
    if label:
        head.append(rf"\label{{{label}}}")
    body[0] = SHRINK + body[0]
    body[-1] += "}"
    return "\n".join(head + body + [r"\end{table}"])


def _breakable(text: str) -> str:
    """A paragraph cell in LaTeX whose words of 21 characters or more as written (an address, a list of layers
    '[0,2,4,...]', a dotted config key) may break after a slash, a comma, a dot or an underscore: otherwise they run
    out of their column. Measured on the text, not its LaTeX, so a number such as 16,384·t stays whole."""
    def word(w: str) -> str:
        if len(w) < 21:
            return tex(w)
        return r"\allowbreak{}".join(tex(piece) for piece in re.split(r"(?<=[/,_])(?=.)|(?<=\.)(?=\D)", w))  # not in 40.0

    return "".join(word(part) if part and not part.isspace() else tex(part) for part in re.split(r"(\s+)", text))


def _stacked(header: str, align: str) -> str:
    """A header of several lines (the terminal's 'KV\\ncache') as a column of its lines, bottom-aligned with the
    row (a nested tabular: core LaTeX), aligned as its column; one line as it is."""
    lines = [tex(line) for line in header.splitlines()]
    if len(lines) == 1:
        return lines[0]
    inner = "r" if align == "r" else "l"
    return rf"\begin{{tabular}}[b]{{@{{}}{inner}@{{}}}}" + r" \\ ".join(lines) + r"\end{tabular}"


def _row(cells: list[str]) -> str:
    """One row of LaTeX cells. A first cell that opens with '[' or '*' (a user's group name) is braced: after the
    previous row's \\\\ or a booktabs rule, LaTeX would read '[...]' as their optional argument and '*' as \\\\*."""
    first = cells[0] if cells else ""
    if first.lstrip().startswith(("[", "*")):  # \\ and the rules skip spaces looking for them
        cells = ["{}" + first] + cells[1:]
    return " & ".join(cells) + r" \\"


def comment_block(lines: list[str]) -> str:
    """Lines as LaTeX comments, ASCII only."""
    return "\n".join(f"% {tex(line)}" if line else "%" for line in lines).rstrip("%\n")
