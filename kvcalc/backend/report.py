"""A run's report as rows for the renderers, and as one JSON-ready payload (no I/O)."""

from __future__ import annotations

from dataclasses import asdict

from kvcalc.present.render import Column, cell
from kvcalc.units import format_seconds

RESULT_COLUMNS = [
    Column("section", "Section"),
    Column("quantity", "Quantity"),
    Column("predicted_text", "Predicted", "num"),
    Column("measured_text", "Measured", "num"),
    Column("match_text", "Match"),
]
CHECK_COLUMNS = [
    Column("name", "Check"),
    Column("error_text", "Max rel. error", "num"),
    Column("tolerance_text", "Tolerance", "num"),
    Column("result", "Result"),
    Column("detail", "Compared"),
]
CHECK_KEYS = ["name", "error", "tolerance", "must_exceed", "passed", "detail"]


def _text(value, kind: str) -> str:
    if value is None:
        return "–"
    if kind == "shape":
        return "×".join(str(n) for n in value)
    if kind == "seconds":
        return format_seconds(value)
    if kind == "rate":  # GFLOP/s as every rate is shown: three significant digits, whole and grouped from 1,000
        return cell(value, "rate")
    return f"{value:,}"


def result_rows(report) -> list[dict]:
    """One row per compared quantity: raw predicted/measured (for csv) and their text (for tables)."""
    rows = []
    for r in report.rows:
        match = {True: "yes", False: "NO", None: "–"}[r.match]
        rows.append({"section": r.section, "quantity": r.quantity, "predicted": _raw(r.predicted), "measured": _raw(r.measured),
                     "match": r.match, "predicted_text": _text(r.predicted, r.kind), "measured_text": _text(r.measured, r.kind),
                     "match_text": match, "exceeds_max_context": report.exceeds_max_context})
    return rows


def check_rows(report) -> list[dict]:
    return [{**asdict(c), "error_text": f"{c.error:.2e}", "tolerance_text": ("> " if c.must_exceed else "≤ ") + f"{c.tolerance:g}",
             "result": ("pass" if c.passed else "FAIL")} for c in report.checks]


def _raw(value):
    return list(value) if isinstance(value, tuple) else value


def report_payload(report) -> dict:
    """Everything, raw: settings, layers run, comparison rows, checks, the memory plan, and the verdict."""
    return {
        "model": report.model,
        "settings": asdict(report.settings),
        "layers": report.layers,
        "ok": report.ok,
        "predicted_peak_bytes": report.predicted_peak_bytes,
        "exceeds_max_context": report.exceeds_max_context,
        "rows": [{"section": r.section, "quantity": r.quantity, "predicted": _raw(r.predicted), "measured": _raw(r.measured),
                  "match": r.match, "kind": r.kind} for r in report.rows],
        "checks": [asdict(c) for c in report.checks],
    }
