"""JSON Schemas of the commands' JSON output, generated from the typed results (kvcalc.fields), so scripts and papers
can rely on each key's type. JSON leaves out keys whose value is None, so a key's presence is never required except
for the row's identity; integers are exact (JSON Schema "integer"), whatever their size.

Rows come from result dataclasses whose fields describe themselves; a command that prints a document (show, cost,
run, approx --spectrum) gets an object schema assembled from those classes, the spec's pydantic model and the
figure catalog, with only the parts built by hand in the library (explain's derivation, run's report) written out
here. Schemas of the commands added with #10 item 7 require every key that is always present and say at the top
that integers can exceed 2^53.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from typing import Any

from kvcalc.errors import KvcalcError
from kvcalc.fields import Figure, figures_of

DRAFT = "https://json-schema.org/draft/2020-12/schema"
JSON_TYPE = {"text": "string", "formula": "string", "bool": "boolean", "int": "integer", "bytes": "integer",
             "tokens": "integer", "flops": "integer", "count": "integer", "num": "string", "ratio": "number",
             "seconds": "number", "rate": "number", "float": "number", "bandwidth": "integer", "sig": "number"}
EXACT = ("Integers are exact JSON integers: byte and FLOP counts can exceed 2^53 (9,007,199,254,740,992), beyond what "
         "a double holds exactly, so read them with a parser that keeps big integers (Python's json does; JavaScript's "
         "JSON.parse does not). Keys whose value does not apply are left out.")
INT: dict[str, Any] = {"type": "integer"}
TEXT: dict[str, Any] = {"type": "string"}


def _figure_schema(fig: Figure, optional: bool = False) -> dict[str, Any]:
    """A property's schema from its Figure: the JSON type of its kind, its meaning as the description."""
    if fig.kind == "floats":
        out: dict[str, Any] = {"type": "array", "items": {"type": "number"}, "description": fig.meaning}
    else:
        out = {"type": JSON_TYPE[fig.kind], "description": fig.meaning}
    if optional and "left out" not in fig.meaning:
        out["description"] += " (left out when not applicable)"
    return out


def _optional(cls: type) -> set[str]:
    """Fields of a dataclass whose type admits None: JSON leaves them out when they are None."""
    return {f.name for f in dataclasses.fields(cls) if "None" in str(f.type)}


def _props(classes: tuple[type, ...]) -> dict[str, Any]:
    """One property per raw figure of `classes`, typed by its kind."""
    props: dict[str, Any] = {}
    for cls in classes:
        optional = _optional(cls)
        for fig in figures_of(cls):
            if fig.raw:
                props[fig.key] = _figure_schema(fig, fig.key in optional)
    return props


def _always(cls: type) -> list[str]:
    """The raw figures of `cls` that are never None: always present in its JSON rows."""
    optional = _optional(cls)
    return [f.key for f in figures_of(cls) if f.raw and f.key not in optional]


def _object(props: dict[str, Any], required: typing.Iterable[str], extra: Any = False, **more: Any) -> dict[str, Any]:
    return {"type": "object", **more, "properties": props, "required": list(required), "additionalProperties": extra}


def _row_schema(classes: tuple[type, ...], required: tuple[str, ...]) -> dict[str, Any]:
    """An object schema with one property per raw figure of `classes`, typed by its kind."""
    return _object(_props(classes), required)


def _rows(classes: tuple[type, ...], required: tuple[str, ...], title: str) -> dict[str, Any]:
    return {"$schema": DRAFT, "title": title, "type": "array", "items": _row_schema(classes, required)}


def _document(title: str, body: dict[str, Any], defs: dict[str, Any] | None = None) -> dict[str, Any]:
    """A top-level schema: `body` with its title, the note on exact integers and the shared definitions."""
    return {"$schema": DRAFT, "title": title, "description": EXACT, **body, **({"$defs": defs} if defs else {})}


def _typed(cls: type, meanings: Callable[[str], str]) -> dict[str, Any]:
    """An object schema of a plain dataclass (no figures), typed by its annotations: keys whose type admits None
    are left out when None, the others required."""
    hints = typing.get_type_hints(cls)
    scalar = {int: "integer", str: "string", bool: "boolean", float: "number"}
    props, required = {}, []
    for f in dataclasses.fields(cls):
        args = typing.get_args(hints[f.name]) or (hints[f.name],)
        props[f.name] = {"type": next(scalar[a] for a in args if a is not type(None)), "description": meanings(f.name)}
        if type(None) not in args:
            required.append(f.name)
    return _object(props, required)


# ---------------------------------------------------------------- compare, sweep and show: the cache and its derivation


def _derivation() -> dict[str, Any]:
    """The derivation `--explain` adds to compare rows and show's document (kvcalc.explain.derivation)."""
    symbols = {"type": "array", "description": "the formula's symbols and the spec field each came from",
               "items": _object({"symbol": TEXT, "value": INT, "field": TEXT,
                                 "config_key": {**TEXT, "description": "the config.json key (imported specs)"}},
                                ("symbol", "value", "field"))}
    formula = {"formula": TEXT, "substituted": {**TEXT, "description": "the formula with the symbols' values"},
               "reference": {**TEXT, "description": "the formula's source"}, "symbols": symbols}
    counts = {"type": "object", "additionalProperties": INT, "description": "elements by named part (k, v, ...)"}
    rule = _object({"rule": {**TEXT, "description": "ctx, min(ctx, W), min(ctx, C) or the kind's own rule"},
                    "W": INT, "C": INT, "field": {**TEXT, "description": "the spec field of W or C"}}, ("rule",))
    state = _object({**formula, "components": counts, "elements": INT, "bytes": INT,
                     "engine_bytes_per_layer": {**INT, "description": "--engine: one layer's states as it stores them"},
                     "padding_layers": {**INT, "description": "vLLM's padding slots of the state's spec, in layers"},
                     "dtypes": {"type": "object", "additionalProperties": TEXT,
                                "description": "the storage dtype of each component, when they differ"}},
                    ("formula", "substituted", "reference", "symbols", "components", "elements", "bytes"))
    cross = _object({**formula, "elements_per_position_per_layer": INT,
                     "encoder_positions": {**INT, "description": "encoder positions cached (enc_ctx)"}},
                    ("formula", "substituted", "reference", "symbols", "elements_per_position_per_layer", "encoder_positions"))
    engine = _object({"block_size": {**INT, "description": "tokens a page"},
                      "pages": {**INT, "description": "pages one sequence holds in one layer"},
                      "rule": {**TEXT, "description": "how the pages are counted (kvcalc.costs.paged)"},
                      "bytes_per_layer": {**INT, "description": "one layer's pages, all sequences"},
                      "bytes": {**INT, "description": "the group's pages, all layers and sequences (and vLLM's padding slots)"},
                      "padding_layers": {**INT, "description": "vLLM's padding slots of the group's spec, in layers"},
                      "padded_page": {**INT, "description": "bytes vLLM pads the group's page to (the unified page)"},
                      "stored_token_bytes": {**INT, "description": "bytes of one token of one layer as the engine stores "
                                             "it, where that differs from the cache's own layout (DeepSeek-V3.2's fp8 "
                                             "indexer key, fp8_ds_mla entries)"},
                      "stored_as": {**TEXT, "description": "how the engine stores each cached tensor of a token"}},
                     ("block_size", "pages", "rule", "bytes_per_layer", "bytes"), description="--engine: the group's pages")
    group = _object({"group": TEXT, "layers": {"type": "array", "items": INT}, "n_layers": INT, "kind": TEXT, **formula,
                     "elements_per_token_per_layer": INT, "components": counts, "tokens_held": INT, "tokens_rule": rule,
                     "state_elements_per_layer": INT, "elements": INT, "bytes": INT, "state": state, "cross": cross,
                     "kv_shared": {"const": True, "description": "the layers reuse another layer's cache"},
                     "engine": engine},
                    ("group", "layers", "n_layers", "kind", "formula", "substituted", "reference", "symbols",
                     "elements_per_token_per_layer", "components", "tokens_held", "tokens_rule", "elements", "bytes"))
    split = _object({"symbol": TEXT, "whole": INT, "per_rank": INT}, ("symbol", "whole", "per_rank"))
    gpu_group = _object({"group": TEXT, "layers_here": {**INT, "description": "the group's layers on the busiest GPU's stage"},
                         "formula": TEXT, "substituted": TEXT,
                         "elements_per_token_per_layer": {**INT, "description": "one tp rank's share"},
                         "split": {"type": "array", "items": split,
                                   "description": "the symbols tensor parallelism changes, whole and on one rank"},
                         "tokens_held": INT, "sequences": {**INT, "description": "sequences whose cache the GPU holds"},
                         "sequences_rule": TEXT, "bytes_per_layer": INT, "bytes": INT, "state_bytes": INT,
                         "padding_layers": {**INT, "description": "vLLM's padding slots of the group's spec here, in layers"},
                         "pages": {**INT, "description": "--engine: pages one layer holds for one sequence"},
                         "block_size": {**INT, "description": "--engine: tokens a page of the group on one rank"}},
                        ("group", "layers_here", "formula", "substituted", "elements_per_token_per_layer", "split",
                         "tokens_held", "sequences", "sequences_rule", "bytes_per_layer", "bytes", "state_bytes"))
    per_gpu = _object({"gpus": INT, "tp": INT, "pp": INT, "dp": INT, "ep": INT,
                       "stage": {**INT, "description": "the busiest GPU's pipeline stage"},
                       "layers": {"type": "array", "items": INT},
                       "mtp_layers": {"type": "array", "items": INT,
                                      "description": "--mtp: the multi-token-prediction layers it holds too"},
                       "groups": {"type": "array", "items": gpu_group},
                       "kv_cache_bytes": INT, "state_bytes": INT, "weights_bytes": INT},
                      ("gpus", "tp", "pp", "dp", "ep", "stage", "layers", "groups", "kv_cache_bytes", "state_bytes",
                       "weights_bytes"), description="--tp/--pp/--dp: what the busiest GPU holds, group by group")
    top = {"model": TEXT, "origin": TEXT, "ctx": INT, "batch": INT, "kv_dtype": TEXT, "bits_per_element": INT,
           "mla_cache": TEXT, "groups": {"type": "array", "items": group}, "elements_per_token": INT,
           "kv_bytes_per_token": INT, "elements": INT, "kv_cache_bytes": INT, "state_dtype": TEXT, "state_elements": INT,
           "state_bytes": INT, "cache_bytes": INT,
           "state_by_dtype": {"type": "object", "additionalProperties": INT,
                              "description": "constant-state elements by storage dtype, when they differ"},
           "kv_quant": {**TEXT, "description": "--kv-quant: the scheme whose scales the bytes include"},
           "payload_bytes_per_token": {**INT, "description": "--kv-quant: kv_bytes_per_token without the scales"},
           "payload_bytes": {**INT, "description": "--kv-quant: kv_cache_bytes without the scales"},
           "engine": {**TEXT, "description": "--engine: the serving engine"},
           "engine_kv_bytes": {**INT, "description": "--engine: the KV cache in its whole pages"},
           "engine_state_bytes": {**INT, "description": "--engine: the constant states as it stores them"},
           "per_gpu": per_gpu}
    return _object(top, ("model", "origin", "ctx", "batch", "kv_dtype", "bits_per_element", "groups", "elements_per_token",
                         "kv_bytes_per_token", "elements", "kv_cache_bytes"),
                   description="--explain: how each layer group's cache follows from the spec's fields")


def _compare() -> dict[str, Any]:
    from kvcalc.figures import CostFigures
    from kvcalc.rows import CacheFigures, ModelFacts

    out = _rows((ModelFacts, CacheFigures, CostFigures), ("model", "ctx"),
                "kvcalc compare --format json: one object per model and context")
    out["items"]["properties"]["derivation"] = {"$ref": "#/$defs/derivation"}  # with --explain
    return {**out, "$defs": {"derivation": _derivation()}}


def _spec() -> dict[str, Any]:
    """The spec as show prints it (ModelSpec.model_dump without None): the pydantic model's schema, each layer
    group's attention one of the registered kinds."""
    from pydantic.json_schema import GenerateJsonSchema

    from kvcalc import attention
    from kvcalc.spec import ModelSpec

    class SpecSchema(GenerateJsonSchema):
        def function_plain_schema(self, schema: Any) -> Any:
            if schema["function"]["function"] is attention._validate:  # AttentionField: the registry dispatches on kind
                return {"oneOf": [self.generate_inner(cls.__pydantic_core_schema__) for cls in attention.KINDS.values()]}
            return super().function_plain_schema(schema)

    out = ModelSpec.model_json_schema(mode="serialization", schema_generator=SpecSchema)
    for obj in [out, *out.get("$defs", {}).values()]:  # a None is left out, so a nullable field is never required
        nullable = {k for k, p in obj.get("properties", {}).items() if {"type": "null"} in p.get("anyOf", [])}
        if "required" in obj:
            obj["required"] = [k for k in obj["required"] if k not in nullable]
    return out


def _summary(keys: tuple[str, ...], required: tuple[str, ...], own: dict[str, Figure], extra: Any = False) -> dict[str, Any]:
    """A summary table as a JSON object (key -> value), each key typed by show's own figures or the catalog's."""
    from kvcalc.present.columns import FIGURES

    props = {k: _figure_schema(own.get(k) or FIGURES[k], k not in required) for k in keys}
    return _object(props, required, extra)


def _show() -> dict[str, Any]:
    from kvcalc.present.columns import FIGURES
    from kvcalc.present.summary import SHOW_FIGURES, SHOW_SUMMARY, SHOW_SUMMARY_REQUIRED
    from kvcalc.rows import GroupRow

    spec = _spec()
    defs = {"derivation": _derivation(), "group_row": _object(_props((GroupRow,)), _always(GroupRow)), **spec.pop("$defs")}
    defs["ModelSpec"] = spec
    group_line = {**TEXT, "pattern": r"^\S+ on \d+ layer\(s\) \[",
                  "description": "one line per layer group, keyed by the group's name: its kind, layers and dims"}
    props = {"model": _figure_schema(FIGURES["model"]),
             "origin": {**TEXT, "description": "where the spec came from: a bundled spec, a YAML file or a config.json"},
             "exceeds_max_context": _figure_schema(FIGURES["exceeds_max_context"]),
             "spec": {"$ref": "#/$defs/ModelSpec"},
             "summary": _summary(SHOW_SUMMARY, SHOW_SUMMARY_REQUIRED, SHOW_FIGURES, group_line),
             "groups": {"type": "array", "items": {"$ref": "#/$defs/group_row"}, "description": "the cache by layer group"},
             "layers": {"type": "array", "items": {"$ref": "#/$defs/group_row", "if": {"properties": {"layers": {
                            "enum": ["padding", "buffers"]}}}, "else": {"required": ["layer"]}},
                        "description": "--per-layer: the cache by layer, each row with its `layer`; under --engine also "
                        "a row for each group's pages that hold no layer's tokens (vLLM's padding slots, SGLang's "
                        "other buffers: `layers` 'padding' or 'buffers', no `layer`)"},
             "derivation": {"$ref": "#/$defs/derivation"}}
    body = _object(props, ("model", "origin", "exceeds_max_context", "spec", "summary"),
                   oneOf=[{"required": ["groups"]}, {"required": ["layers"]}])
    return _document("kvcalc show --format json: the spec, its summary and its cache by layer group (or layer)", body, defs)


# ---------------------------------------------------------------- cost


def _cost() -> dict[str, Any]:
    from kvcalc.present.columns import FIGURES
    from kvcalc.present.outputs import PASS_TITLES
    from kvcalc.present.summary import COST_SUMMARY, COST_SUMMARY_REQUIRED

    count = {**INT, "minimum": 0, "description": "FLOPs of a component (exact; can exceed 2^53)"}
    passes = {name: _object({"total": {**count, "description": "FLOPs of the pass: the sum of its components"}}, ("total",),
                            count, description=f"FLOPs by component: {title.replace(chr(10), ' ')}",
                            propertyNames={"pattern": "^[a-z0-9_]+(/[a-z0-9_]+)?$"})
              for name, title in PASS_TITLES.items()}
    flops = _object(passes, ("prefill", "generate_uncached"),
                    description="FLOPs by component of each pass (MLA: decode and cached generation per schedule)",
                    anyOf=[{"required": ["decode_token", "generate_cached"]},
                           {"required": ["decode_token_naive", "generate_cached_naive"]}])
    from kvcalc.fit import FitRow

    props = {**{k: _figure_schema(FIGURES[k]) for k in ("model", "ctx", "gen", "batch")}, "flops": flops,
             "summary": _summary(COST_SUMMARY, COST_SUMMARY_REQUIRED, {}),
             "exceeds_max_context": {"type": "boolean", "description": "ctx + gen is above the model's trained maximum "
                                     "(computed anyway)"}}
    # the settings the figures assume (kvcalc.present.outputs.cost_settings), described as fit's rows carry them
    fit = _props((FitRow,))
    always = ("kv_dtype", "kv_quant", "weights_dtype", "tp", "pp", "dp", "ep", "dp_attention", "mtp")
    settings = {**{k: fit[k] for k in always},
                "mtp": _figure_schema(FIGURES["mtp"]),  # cost's FLOPs count them too: a decode step speculative
                "dense_attn": {"type": "boolean", "description": "--dense-attn: attention counted as the full N×N matrix"},
                **{k: fit[k] for k in ("mla_cache", "engine", "block_size", "state_dtype", "enc_ctx")},
                "mla_schedule": _figure_schema(FIGURES["mla_schedule"], True),
                "hardware": _figure_schema(FIGURES["hardware"], True)}
    required = [*props, *always, "dense_attn"]
    return _document("kvcalc cost --format json: FLOPs by component of each pass, then parameters, memory, traffic and "
                     "times, and the settings they assume", _object({**props, **settings}, required))


# ---------------------------------------------------------------- run


RUN_VALUES: dict[str, dict[str, Any]] = {  # a report row's kind -> the JSON of its predicted and measured values
    "int": INT, "bytes": INT, "flops": INT, "shape": {"type": "array", "items": INT},
    "seconds": {"type": "number"}, "rate": {"type": "number"},
}
CHECK_MEANINGS = {
    "name": "what is compared", "error": "the relative error measured: max |a - b| / max |b|",
    "tolerance": "the error allowed (or, with must_exceed, the error the demonstration must pass)",
    "passed": "the check passed", "detail": "what the two computations were",
    "must_exceed": "a demonstration of a failure: the error must be above the tolerance",
}


RUN_SETTINGS = {  # what each of RunSettings' fields is, as the run's JSON `settings` carries it
    "ctx": "--ctx: prompt tokens prefilled", "decode": "--decode: decode steps after the prompt",
    "batch": "--batch: sequences", "layers": "--layers: layers run (left out: one of each layer group)",
    "dtype": "--dtype: the NumPy dtype of weights, activations and cache", "mla_cache": "--mla-cache: MLA cache layout",
    "mla_schedule": "--mla-schedule: MLA decode schedule (left out: the layout's default)",
    "seed": "--seed: seed of the random weights and inputs",
    "max_memory": "--max-memory, in bytes (left out: the memory available)",
    "rope_demo": "--rope-demo was given (the demonstration also runs without it for MLA models: see checks)",
    "threads": "--threads: prefill attention threads (left out: every core the process may use)",
    "enc_ctx": "--enc-ctx: encoder positions cross-attention attends (left out: the model's source length)",
}


def _run() -> dict[str, Any]:
    from kvcalc.backend.checks import Check
    from kvcalc.backend.runner import RunSettings

    value = {"type": ["integer", "number", "array"], "items": INT}
    row_props: dict[str, Any] = {"section": {**TEXT, "description": "what part of the run (cache, flops, time, ...)"},
                                 "quantity": {**TEXT, "description": "what is predicted and measured"}}
    row_props.update(predicted=value, measured=value, kind={"enum": list(RUN_VALUES)},
                     match={"type": "boolean", "description": "predicted equals measured (left out: nothing to compare)"})
    by_kind = [{"if": {"properties": {"kind": {"const": kind}}},
                "then": {"properties": {"predicted": v, "measured": v}}} for kind, v in RUN_VALUES.items()]
    row = _object(row_props, ("section", "quantity", "kind"), allOf=by_kind)
    settings = _typed(RunSettings, RUN_SETTINGS.__getitem__)
    props = {"model": TEXT, "settings": settings,
             "layers": {"type": "array", "items": INT, "description": "the layers run"},
             "ok": {"type": "boolean", "description": "every predicted figure matched and every check passed"},
             "predicted_peak_bytes": {**INT, "description": "the memory the run was predicted to need"},
             "exceeds_max_context": {"type": "boolean", "description": "ctx + decode steps are above the model's "
                                     "trained maximum (run anyway)"},
             "rows": {"type": "array", "items": row, "description": "predicted against measured"},
             "checks": {"type": "array", "items": _typed(Check, CHECK_MEANINGS.__getitem__),
                        "description": "the numerical checks"}}
    return _document("kvcalc run --format json: the run's settings, predicted against measured, and the numerical checks",
                     _object(props, props))


# ---------------------------------------------------------------- the rest: rows of one typed class each


def _flat(title: str, cls: type, extra: Any = False) -> dict[str, Any]:
    return _document(title, {"type": "array", "items": _object(_props((cls,)), _always(cls), extra)})


def _approx() -> dict[str, Any]:
    from kvcalc.approx.analytic import TransmlaRow
    from kvcalc.approx.evaluate import ApproxRow, SpectrumRow

    def rows(cls: type) -> dict[str, Any]:
        return {"type": "array", "items": _object(_props((cls,)), _always(cls))}

    methods = rows(ApproxRow)
    shapes = [{**methods, "title": "one object per method and scale"},
              _object({"methods": methods, "spectrum": rows(SpectrumRow)}, ("methods", "spectrum"),
                      title="--spectrum: the methods, and the singular values of each matrix and scale"),
              {**rows(TransmlaRow), "title": "--transmla: one object per model"}]
    return _document("kvcalc approx --format json: one of three shapes, by the options given", {"anyOf": shapes})


def _dims() -> dict[str, Any]:
    from kvcalc.tables import DimsRow

    model = {**TEXT, "description": "a model's value for the item, keyed by the model's name (models given only); a "
             "later layer group of the kind with other dimensions: 'name (group label)'"}
    return _flat("kvcalc table dims --format json: one object per item of each attention kind", DimsRow, model)


def _hardware() -> dict[str, Any]:
    from kvcalc.hardware import HardwareRow

    return _flat("kvcalc hardware --format json: one object per bundled preset", HardwareRow)


def _list() -> dict[str, Any]:
    from kvcalc.rows import ListRow

    return _rows((ListRow,), ("model",), "kvcalc list --format json: one object per bundled model")


def _sweep() -> dict[str, Any]:
    from kvcalc.figures import CostFigures
    from kvcalc.rows import CacheFigures, ModelFacts

    return _rows((ModelFacts, CacheFigures, CostFigures), ("model", "ctx"),
                 "kvcalc sweep --format json: one object per model and context")


def _fit() -> dict[str, Any]:
    from kvcalc.fit import FitRow

    return _rows((FitRow,), ("model",), "kvcalc fit --format json: one object per answer")


def _table_models() -> dict[str, Any]:
    from kvcalc.tables import ModelsRow

    return _rows((ModelsRow,), ("model",), "kvcalc table models --format json: one object per model")


# Every command with --format json, as `kvcalc schema` names it (a subcommand joined to its group by '-').
SCHEMAS: dict[str, Callable[[], dict[str, Any]]] = {
    "list": _list, "compare": _compare, "sweep": _sweep, "show": _show, "cost": _cost, "fit": _fit, "run": _run,
    "hardware": _hardware, "approx": _approx, "table-dims": _dims, "table-models": _table_models,
}
COMMANDS = tuple(SCHEMAS)


def schema(command: str) -> dict[str, Any]:
    """The JSON Schema of `kvcalc COMMAND --format json` (COMMAND one of COMMANDS, in any case)."""
    command = command.lower()
    if command not in SCHEMAS:
        raise KvcalcError(f"no schema for {command!r}: choose one of {', '.join(COMMANDS)}")
    return SCHEMAS[command]()
