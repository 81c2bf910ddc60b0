"""A spec as YAML text, for `import`: defaults left out, `kind` first in every block."""

from __future__ import annotations

from kvcalc.spec import ModelSpec


def spec_yaml(spec: ModelSpec, name: str | None = None) -> str:
    """The spec as YAML (defaults left out), in field order, ready to save as a bundled or user spec."""
    import yaml

    from kvcalc.registry import check_name

    data = spec.model_dump(exclude_defaults=True, exclude_none=True)
    data = {"name": spec.name if name is None else check_name(name), **{k: v for k, v in data.items() if k != "name"}}
    data["layer_groups"] = [
        {**({"name": g["name"]} if "name" in g else {}), "layers": g.get("layers", "all"), **g} for g in data["layer_groups"]
    ]
    return yaml.safe_dump(_kind_first(data), sort_keys=False, default_flow_style=False, width=100)


def _kind_first(value):
    """Put the discriminator `kind` first in every block, so a spec reads 'kind: gqa' before the dims."""
    if isinstance(value, dict):
        ordered = {"kind": value["kind"]} if "kind" in value else {}
        return {**ordered, **{k: _kind_first(v) for k, v in value.items()}}
    if isinstance(value, list):
        return [_kind_first(v) for v in value]
    return value
