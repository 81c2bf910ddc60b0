"""JSON Schemas of the commands' JSON output, generated from the typed results (kvcalc.fields), so scripts and papers
can rely on each key's type. JSON leaves out keys whose value is None, so a key's presence is never required except
for the row's identity; integers are exact (JSON Schema "integer"), whatever their size."""

from __future__ import annotations

import dataclasses
from typing import Any

from kvcalc.errors import KvcalcError
from kvcalc.fields import figures_of

JSON_TYPE = {"text": "string", "formula": "string", "bool": "boolean", "int": "integer", "bytes": "integer",
             "tokens": "integer", "flops": "integer", "count": "integer", "num": "string", "ratio": "number",
             "seconds": "number", "rate": "number", "float": "number", "bandwidth": "integer", "sig": "number"}


def _row_schema(classes: tuple[type, ...], required: tuple[str, ...]) -> dict[str, Any]:
    """An object schema with one property per raw figure of `classes`, typed by its kind."""
    props: dict[str, Any] = {}
    for cls in classes:
        types = {f.name: str(f.type) for f in dataclasses.fields(cls)}
        for fig in figures_of(cls):
            if not fig.raw:
                continue
            kind = JSON_TYPE[fig.kind]
            props[fig.key] = {"type": kind, "description": fig.meaning}
            if "None" in types[fig.key]:
                props[fig.key]["description"] += " (left out when not applicable)"
    return {"type": "object", "properties": props, "required": list(required), "additionalProperties": False}


def _rows(classes: tuple[type, ...], required: tuple[str, ...], title: str) -> dict[str, Any]:
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": title, "type": "array",
            "items": _row_schema(classes, required)}


def schema(command: str) -> dict[str, Any]:
    """The JSON Schema of `kvcalc COMMAND --format json` (compare, sweep, list, fit, table-models)."""
    from kvcalc.figures import CostFigures
    from kvcalc.fit import FitRow
    from kvcalc.rows import CacheFigures, ListRow, ModelFacts
    from kvcalc.tables import ModelsRow

    known = {
        "compare": lambda: _rows((ModelFacts, CacheFigures, CostFigures), ("model", "ctx"),
                                 "kvcalc compare --format json: one object per model and context"),
        "sweep": lambda: _rows((ModelFacts, CacheFigures, CostFigures), ("model", "ctx"),
                               "kvcalc sweep --format json: one object per model and context"),
        "list": lambda: _rows((ListRow,), ("model",), "kvcalc list --format json: one object per bundled model"),
        "fit": lambda: _rows((FitRow,), ("model",), "kvcalc fit --format json: one object per answer"),
        "table-models": lambda: _rows((ModelsRow,), ("model",), "kvcalc table models --format json: one object per model"),
    }
    if command not in known:
        raise KvcalcError(f"no schema for {command!r}: choose one of {', '.join(known)}")
    return known[command]()
