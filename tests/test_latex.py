"""#8 item 3: LaTeX that compiles as pasted, from every table command: ASCII only, balanced braces and environments
(checked with pylatexenc's parser), no < > | _ ^ outside math mode, a table environment with caption and label."""

from __future__ import annotations

import re

import pytest
from pylatexenc import latexwalker

from conftest import run, splitting_tp
from kvcalc.present.latex import SHRINK, math_formula, tex
from kvcalc.registry import bundled_names

FORBIDDEN = set("<>|_^")


def check_pasteable(text: str) -> list:
    """Parse `text` strictly and check it; return the parsed nodes. The shrink-to-fit wrapper's dimension test
    (`\\width>\\linewidth`, a comparison, not text) is taken as the group it opens."""
    assert text.isascii(), [ch for ch in text if not ch.isascii()]
    text = text.replace(SHRINK, "{")
    walker = latexwalker.LatexWalker(text, tolerant_parsing=False)
    nodes, _, _ = walker.get_latex_nodes()  # raises on unbalanced braces or environments

    def walk(nodelist, in_math=False):
        for node in nodelist or []:
            if node is None:
                continue
            if node.isNodeType(latexwalker.LatexCharsNode) and not in_math:
                assert not FORBIDDEN & set(node.chars), node.chars
            math = in_math or node.isNodeType(latexwalker.LatexMathNode)
            if node.isNodeType(latexwalker.LatexGroupNode) or node.isNodeType(latexwalker.LatexMathNode) \
                    or node.isNodeType(latexwalker.LatexEnvironmentNode):
                walk(node.nodelist, math)
            if node.isNodeType(latexwalker.LatexMacroNode) and node.nodeargd is not None:
                walk([a for a in node.nodeargd.argnlist if a is not None], math)

    walk(nodes)  # an environment's arguments (the tabular's column spec, with its >{...}) are not text
    return nodes


STACKED = re.compile(r"\\begin\{tabular\}\[b\]\{@\{\}[rl]@\{\}\}(.*?)\\end\{tabular\}")


def flat(out: str) -> str:
    """`out` with each stacked header (a nested tabular of its lines) as one line of text, as a reader sees it."""
    return STACKED.sub(lambda m: m[1].replace(r" \\ ", " "), out)


def environments(nodes) -> list[str]:
    return [n.environmentname for n in nodes if n is not None and n.isNodeType(latexwalker.LatexEnvironmentNode)]


def test_conversion_rules():
    assert tex("a_b & 50% µs ≤ 1 | x") == r"a\_b \& 50\% {\textmu}s \ensuremath{\leq} 1 \textbar{} x"
    assert math_formula("2·n_kv·d_h") == r"$2 \cdot n_{kv} \cdot d_{h}$"
    assert math_formula("d_c + d_R + d_I") == r"$d_{c} + d_{R} + d_{I}$"
    assert math_formula("n_h·(d_nope + d_R) + n_h·d_v") == r"$n_{h} \cdot ( d_{nope} + d_{R} ) + n_{h} \cdot d_{v}$"


def test_compare_wraps_in_a_table_with_caption_and_label():
    out = run("compare", "llama3-70b", "deepseek-v2", "--ctx", "128k", "-f", "latex", "--caption", "KV caches at 128k",
              "--label", "tab:kv").stdout
    nodes = check_pasteable(out)
    assert out.splitlines()[0] == r"% kvcalc table: needs \usepackage{booktabs,array,graphicx}"
    assert environments(nodes) == ["table"]
    # a header of two lines on two lines; a table wider than the line scaled down to it (graphicx), never up
    assert r"& \begin{tabular}[b]{@{}r@{}}KV \\ cache (GiB)\end{tabular} &" in out
    assert r"\resizebox{\ifdim\width>\linewidth\linewidth\else\width\fi}{!}{%" in out.splitlines()
    out = flat(out)
    assert r"\caption{KV caches at 128k}" in out and r"\label{tab:kv}" in out
    assert r"llama3-70b & GQA & 80 & 64 & 8 & 128 & 128k & 320 & 40.0 & $1.00\times$ \\" in out
    assert "KV per token (KiB) & KV cache (GiB)" in out  # every cell's unit the same: it moves to the header
    bare = run("compare", "llama3-70b", "--ctx", "128k", "-f", "latex", "--bare").stdout
    assert environments(check_pasteable(bare)) == ["tabular"] and r"\caption" not in bare and "resizebox" not in bare
    assert bare.splitlines()[0] == r"% kvcalc table: needs \usepackage{booktabs,array}"


def headers(out: str) -> list[str]:
    """The header row of every tabular in a latex output (the row after each \\toprule)."""
    lines = out.splitlines()
    return [lines[i + 1] for i, line in enumerate(lines) if line == r"\toprule"]


@pytest.mark.slow
def test_a_number_is_never_cut_into_a_header_unit():
    # the unit pattern took ",192" of "8,192", "+64" of "512+64" and "/128" of "192/128" for units every cell shared,
    # moved them to the header and left "8", "512" and "192" in the cells (an audit found it)
    out = flat(run("table", "models", "llama3-70b", "-f", "latex").stdout)
    assert "Model & Hidden size & Query heads &" in out and r"llama3-70b & 8\,192 & 64 & 8 & 128 & 80 & GQA" in out
    out = flat(run("compare", "deepseek-v2", "kimi-k2", "--ctx", "128k", "-f", "latex").stdout)
    assert r"deepseek-v2 & MLA (latent) & 60 & 128 & 512+64 & 192/128 & 128k & 67.5 & 8.44 &" in out
    assert "KV heads or latent & Head dim & Ctx & KV per token (KiB) & KV cache (GiB)" in out
    out = flat(run("compare", "llama3-70b", "--ctx", "128k", "--units", "bytes", "-f", "latex").stdout)
    assert r"& 128k & 327\,680 & 42\,949\,672\,960 & $1.00\times$ \\" in out
    # an audit: --units bytes left the byte columns with no unit anywhere; the header carries it, as for KiB
    assert "KV per token (B) & KV cache (B)" in out
    out = flat(run("show", "gemma3-27b", "--per-layer", "-f", "latex").stdout)
    assert r"& 4\,096 &" in out and "(,024)" not in out and "(,096)" not in out
    # window and tokens held are token counts: 1,024 is 1k there, as every token count (an audit)
    assert r"& gqa & 1k & $2 \cdot n_{kv} \cdot d_{h}$ & 4\,096 & 8.00 & 1k &" in out
    for args in (("show", "deepseek-v2"), ("show", "llama4-scout", "--per-layer")):
        assert not any(re.search(r"\([,+/.0-9]", h) for h in headers(flat(run(*args, "-f", "latex").stdout))), args


def test_ratios_in_math_mode_keep_their_digits_together():
    # a comma in math mode is punctuation (1, 008 when typeset): braced; an exponent becomes a power of ten
    from kvcalc.present.latex import numeric_cell
    from kvcalc.present.render import cell

    assert [cell(v, "ratio") for v in (99.96, 99.94, 1008.3, 9.46e-10, 0.0176)] == [
        "100×", "99.9×", "1,008×", "9.46e-10×", "0.0176×"]  # 99.96 was '100.×' (the '#' flag kept the point)
    assert numeric_cell("1,008×") == r"$1{,}008\times$"
    assert numeric_cell("9.46e-10×") == r"$9.46 \cdot 10^{-10}\times$"
    out = run("compare", "mistral-7b", "llama3.1-405b", "--ctx", "1M", "-f", "latex").stdout
    assert r"$1{,}008\times$" in out and r"$1,008\times$" not in out  # 516,096 B × 1M over 32 × 4,096 × 4,096 B (windows of 4,096): 1,008
    # an audit: errors in powers of ten stayed as text (1.23e+03) beside ratios written as powers of ten
    assert [numeric_cell(cell(v, "sig")) for v in (1234.5, 9.46e-10, -2e5, 0.23)] == [
        r"$1.23 \cdot 10^{3}$", r"$9.46 \cdot 10^{-10}$", r"$-2.00 \cdot 10^{5}$", "0.230"]


def test_output_file_takes_its_format_from_the_extension(tmp_path):
    for suffix, marker in ((".tex", r"\begin{table}"), (".md", "| Model |"), (".csv", "kv_cache_bytes"),
                           (".json", '"kv_cache_bytes"'), (".txt", "Model")):
        path = tmp_path / f"kv{suffix}"
        res = run("compare", "llama3-70b", "--ctx", "4k", "--output", str(path))
        assert res.stdout == "" and marker in path.read_text(encoding="utf-8"), suffix
    # an audit: the text table's title line kept rich's padding to the page width
    text = (tmp_path / "kv.txt").read_text(encoding="utf-8")
    assert text.splitlines()[0] == "KV cache, bf16, batch 1" and not any(line.endswith(" ") for line in text.splitlines())
    res = run("compare", "llama3-70b", "--ctx", "4k", "-o", str(tmp_path / "missing" / "x.tex"), ok=False)
    assert res.exit_code == 1 and "--output" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.slow  # every bundled model through every table command
@pytest.mark.parametrize("name", bundled_names())
def test_every_table_command_pastes_for_every_model(name):
    commands = [("compare", name, "--ctx", "4k,128k", "--columns", "all", "--hardware", "h100-80gb", "--explain"),
                ("show", name, "--ctx", "100k", "--explain", "--engine", "vllm"),
                ("cost", name, "--ctx", "8k", "--hardware", "h100-80gb", "--tp", str(splitting_tp(name, 2))),
                ("fit", name, "--hardware", "h100-80gb", "--gpus", str(splitting_tp(name, 8))),
                ("sweep", name, "--ctx", "1k..64k"),
                ("table", "dims", name), ("table", "models", name, "--ctx", "32k")]
    for args in commands:
        out = run(*args, "-f", "latex", "--caption", "Caption & 100%", "--label", "tab:x").stdout
        nodes = check_pasteable(out)
        assert "table" in environments(nodes), args
        assert r"\caption{Caption \& 100\%}" in out and r"\label{tab:x}" in out, args
        assert not any(re.search(r"\([,+/.0-9]", h) for h in headers(out)), args  # no number's tail as a unit: "(,192)"


@pytest.mark.slow
@pytest.mark.parametrize("command", [("list",), ("hardware",)])
def test_listings_paste(command):
    check_pasteable(run(*command, "-f", "latex").stdout)


@pytest.mark.slow
def test_run_pastes():
    check_pasteable(run("run", "gpt2", "--ctx", "8", "--decode", "1", "-f", "latex").stdout)


def test_readme_latex_example_is_what_the_command_prints():
    from conftest import ROOT

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    command = "compare llama3-70b deepseek-v2 gemma3-27b --ctx 32k -f latex"
    assert f"`kvcalc {command}` gives a booktabs table" in text
    block = text.split(f"`kvcalc {command}`", 1)[1].split("```latex\n", 1)[1].split("\n```", 1)[0]
    assert block == run(*command.split()).stdout.rstrip("\n")


@pytest.mark.slow
def test_default_labels_differ_across_commands():
    # two pasted outputs must not define one label twice (list and table models were both tab:models, show and cost
    # both tab:summary): a later table's label is the first's with -<name>
    commands = [("list",), ("table", "models"), ("table", "dims"), ("show", "llama3-8b"), ("cost", "llama3-8b"),
                ("compare", "llama3-8b"), ("fit", "llama3-8b", "--hardware", "h100-80gb"), ("hardware",),
                ("sweep", "llama3-8b"), ("approx", "--n", "64", "--d", "8", "--method", "exact", "--spectrum"),
                ("approx", "--transmla", "llama3-8b")]
    labels = [label for args in commands for label in re.findall(r"\\label\{([^}]*)\}", run(*args, "-f", "latex").stdout)]
    assert len(labels) == len(set(labels)) == 14, labels
    assert labels[:5] == ["tab:list", "tab:models", "tab:dims", "tab:summary", "tab:summary-groups"]


# ---------------------------------------------------------------- what compiles as pasted (an audit compiled 583
# outputs with pdflatex: 31 failed, all on text a user or a spec supplied; and `--` became an en dash)


def test_text_keeps_to_core_latex():
    # characters whose pylatexenc form needs amssymb, amsmath, T1 or no form at all become '?', never raw Unicode
    # (中: 'Unicode character not set up'; ℝ: \mathbb undefined; «: \guillemotleft unavailable in OT1)
    assert tex("x 中 ℝ ∅ ≲ ‑ ⅓ « ✓ 😀") == "x " + " ".join("?" * 9)
    from kvcalc.present.latex import unwritable

    assert unwritable("ℝ a ℝ é ×") == ["ℝ"]  # once each, in order; é and × have core forms
    assert tex("é × · – µ α ≤ ²") == (r"\'e {\texttimes} {\textperiodcentered} {\textendash} {\textmu} "
                                      r"\ensuremath{\alpha} \ensuremath{\leq} {\texttwosuperior}")
    # a line break would end the paragraph inside \caption or a cell; a zero-width space vanishes
    assert tex("line1\n\npara2\tx") == "line1  para2 x" and tex("a\u200bb") == "ab"
    # `--` stays two hyphens: '(= kvcalc compare --state-dtype fp32)' printed an en dash in run's table
    assert tex("--state-dtype a---b") == "-{}-state-dtype a-{}-{}-b"
    # a straight double quote: pylatexenc's '' is a closing quote in OT1's roman; typewriter's character 34 is straight
    assert tex('a "b" c') == r"a \texttt{\char34}b\texttt{\char34} c"


def test_comments_stay_comments_across_line_breaks():
    from kvcalc.present.latex import comment_block

    assert comment_block(["group loc\nal \\oops{", "", "x"]).splitlines() == [
        r"% group loc al {\textbackslash}oops\{", "%", "% x"]


def test_negative_numbers_get_a_minus_sign():
    # fit's headroom when the weights alone pass the budget: llama3-70b on one 24 GiB card
    out = run("fit", "llama3-70b", "--hardware", "rtx-4090", "-f", "latex").stdout
    assert "& $-$110 &" in out and "& -110 &" not in out
    check_pasteable(out)


@pytest.mark.parametrize(("args", "option", "message"), [
    (("--label", "tab:kv_cache%&#"), "--label", "a label is letters, digits and : . _ - / +"),
    (("--label", "a b"), "--label", "a label is letters"),
    (("--label", "tab:α"), "--label", "a label is letters"),
    (("--caption", "x 中文 ℝ"), "--caption", "中 (U+4E2D), 文 (U+6587), ℝ (U+211D): no form in core LaTeX"),
    (("--bare", "--caption", "x"), "--caption", "--bare writes the tabular alone"),
    (("--bare", "--label", "tab:x"), "--label", "--bare writes the tabular alone"),
])
def test_latex_options_that_would_not_compile_are_refused(args, option, message):
    res = run("compare", "llama3-70b", "-f", "latex", *args, ok=False)
    assert res.exit_code == 2 and f"'{option}'" in res.stderr and message in res.stderr and "Traceback" not in res.stderr


def test_a_caption_with_core_characters_is_kept():
    out = run("compare", "llama3-70b", "-f", "latex", "--caption", "KV: 2·n_kv·d_h, é, --tp 8\nat 4k",
              "--label", "tab:kv-cache.1/a+b").stdout
    assert r"\caption{KV: 2{\textperiodcentered}n\_kv{\textperiodcentered}d\_h, \'e, -{}-tp 8 at 4k}" in out
    assert r"\label{tab:kv-cache.1/a+b}" in out
    check_pasteable(out)
    # an underscore is a plain character in a label (LaTeX never typesets it)
    assert r"\label{tab:kv_cache}" in run("compare", "llama3-70b", "-f", "latex", "--label", "tab:kv_cache").stdout


PDFLATEX = __import__("shutil").which("pdflatex")

GROUPS = ("name: g\nfamily: test\nd_model: 256\nn_layers: 2\nvocab_size: 100\nmax_context: 4096\n"
          "ffn: {kind: dense, d_ff: 512}\nlayer_groups:\n"
          "  - {layers: [0], name: '%s', attention: {kind: gqa, n_heads: 4, n_kv_heads: 1}, sliding_window: 64}\n"
          "  - {layers: [1], name: '%s', attention: {kind: gqa, n_heads: 4, n_kv_heads: 1}}\n")


def test_a_first_cell_that_opens_with_a_bracket_or_star_is_braced(tmp_path):
    # an audit: a group named '[local]' after \\ or \midrule was read as their optional argument (pdflatex: Missing
    # number), and '*local' lost its star to \\*
    path = tmp_path / "g.yaml"
    path.write_text(GROUPS % ("[local]", "*global"))
    out = run("show", str(path), "-f", "latex").stdout
    assert "\n{}[local] & " in out and "\n{}*global & " in out
    check_pasteable(out)
    if PDFLATEX:
        _compile(tmp_path, out)


def test_a_straight_double_quote_in_a_name_compiles_straight(tmp_path):
    # a review: a group named 'a"b' printed a closing quote (pylatexenc writes '' for a straight double quote)
    path = tmp_path / "g.yaml"
    path.write_text(GROUPS % ('say "hi"', "it''s"))  # YAML's single-quoted scalar: '' is one quote
    out = run("show", str(path), "-f", "latex").stdout
    assert r"say \texttt{\char34}hi\texttt{\char34} & " in out and "it's & " in out and "''" not in out
    check_pasteable(out)
    if PDFLATEX:
        _compile(tmp_path, out)


def test_names_a_latex_review_broke_compile_and_read_as_written(tmp_path):
    # a LaTeX review: ' [x]' (a space, then a bracket) was read as \\'s optional argument (Missing number); ɛ was
    # pylatexenc's {\varepsilon}, math only (Missing $ inserted); '!`', '?`', "''" and '``' printed TeX's ligatures
    # (¡, ¿, curly quotes); a table dims label with an underscore or a digit lost it to math mode or to plain text
    path = tmp_path / "g.yaml"
    path.write_text(GROUPS % (" [x] ɛ-local!`", "a_b ``2''''"))  # YAML single-quoted: '' is one quote
    out = run("show", str(path), "-f", "latex").stdout
    assert "\n{} [x] \\ensuremath{{\\varepsilon}}-local!{}` & " in out
    assert "a\\_b `{}`2'{}' & " in out and "\\ensuremath" in out
    check_pasteable(out)
    dims = run("table", "dims", str(path), "-f", "latex").stdout
    assert "(a\\_b `{}`2'{}')" in dims
    if PDFLATEX:
        _compile(tmp_path, out)
        _compile(tmp_path, dims)


def test_a_time_in_a_power_of_ten_is_set_in_math():
    from kvcalc.present.latex import numeric_cell

    assert numeric_cell("1.68e+21 s") == "$1.68 \\cdot 10^{21}$ s" and numeric_cell("9.46e-10") == "$9.46 \\cdot 10^{-10}$"


def _compile(folder, out: str) -> str:
    """pdflatex on `out` in the document its first line asks for; the log, after asserting a clean run."""
    import subprocess

    packages = out.splitlines()[0]
    assert packages.startswith("% kvcalc table: needs ")
    doc = "\\documentclass{article}\n" + packages.split("needs ", 1)[1] + "\n\\begin{document}\n" + out + \
          "\n\\end{document}\n"
    (folder / "t.tex").write_text(doc, encoding="ascii")
    done = subprocess.run([PDFLATEX, "-interaction=nonstopmode", "-halt-on-error", "t.tex"], cwd=folder,
                          capture_output=True, text=True, timeout=120)
    log = (folder / "t.log").read_text(errors="replace")
    assert done.returncode == 0 and "Missing character" not in log, log[-2000:]
    return log


@pytest.mark.slow
@pytest.mark.skipif(PDFLATEX is None, reason="optional: pdflatex not installed (apt-get install texlive-latex-recommended)")
@pytest.mark.parametrize("args", [
    ("compare", "llama3-70b", "deepseek-v2", "gemma3-27b", "--ctx", "32k"),
    ("compare", "gemma3-27b", "--ctx", "128k", "--explain", "--caption", "é × · – µ α ≤ ² ℝ? no: x --tp"),
    ("fit", "llama3-70b", "--hardware", "rtx-4090"),
    ("show", "nemotron-h-56b", "--explain"),
    ("table", "dims", "llama3-70b", "deepseek-v2"),
    ("run", "minimax-m1", "--ctx", "16", "-d", "1", "-q"),
])
def test_output_compiles_with_pdflatex(tmp_path, args):
    res = run(*args, "-f", "latex", ok=False)
    if "--caption" in args:  # ℝ is refused, the rest kept
        assert res.exit_code == 2 and "ℝ (U+211D)" in res.stderr
        res = run(*[a.replace(" ℝ?", "") for a in args], "-f", "latex")
    log = _compile(tmp_path, res.stdout)
    # an audit: most tables ran past the text width (compare's default by 325 pt, fit's by 626 pt): scaled to it now,
    # and a long address in a paragraph column breaks after a slash
    assert "Overfull \\hbox" not in log, log[-3000:]


def test_breaks_only_in_long_words_and_thousands_grouped_before_a_unit():
    # a compile audit of 710 outputs: table dims split '16,384·t' after its comma (the threshold was measured on the
    # LaTeX, 27 characters for 8 shown), a dotted config key ran out of its column, and list's '10,000k' kept its comma
    from kvcalc.present.latex import _breakable, numeric_cell

    assert _breakable("16,384·t (global)") == "16,384{\\textperiodcentered}t (global)"
    assert _breakable("max_context (config.json: text_config.max_position_embeddings)").endswith(
        "text\\_\\allowbreak{}config.\\allowbreak{}max\\_\\allowbreak{}position\\_\\allowbreak{}embeddings)")
    assert "\\allowbreak{}" not in _breakable("[0.5,1.25]") and "0.\\allowbreak" not in _breakable("[0.5,1.25,3.75,4.5,6.25,7.5]")
    assert numeric_cell("10,000k") == "10\\,000k" and numeric_cell("8,192") == "8\\,192"
    out = run("table", "dims", "gpt-oss-120b", "-f", "latex").stdout
    # a model's formulas in math mode (a tables review: '16,384·min(t, 1,024)' read as three arguments), each layers'
    # name as text; thousands grouped with a thin space
    assert r"$16\,384 \cdot \min ( t , 128 )$ (local); $16\,384 \cdot t$ (global)" in out and "16,\\allowbreak" not in out
    # a chunk's keys: mod as LaTeX's binary operator, and a name of several layer kinds kept as text (a mutation review)
    out = run("table", "dims", "llama4-maverick", "-f", "latex").stdout
    assert r"( ( t - 1 ) \bmod 8\,192 + 1 )$ (chunked-dense, chunked)" in out
    out = run("table", "dims", "deepseek-v2", "-f", "latex").stdout
    assert r"MLA & $W_{UQ} \cdot W_{UK}^{\top}$ & $d_{c}' \times n_{h} \cdot d_{c}$ & " in out
    assert r"& $1\,536 \times 65\,536$ \\" in out and r"& cache per token and layer & $d_{c} + d_{R}$ &" in out
    check_pasteable(out)


def test_a_caption_with_a_decomposed_accent_is_written_not_refused():
    # a mutation review: tex() NFC-normalises (e and a combining acute are é, \'e), but the caption's check did not
    from kvcalc.present.latex import tex, unwritable

    assert unwritable("Cafe\u0301") == [] and tex("Cafe\u0301") == "Caf\\'e"
    out = run("show", "llama3-8b", "-f", "latex", "--caption", "Cafe\u0301").stdout
    assert "\\caption{Caf\\'e}" in out
