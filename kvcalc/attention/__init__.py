"""Attention kinds: one module each, and the registry that spec loading dispatches on (`kind:` in a spec).

A kind is registered by decorating its class with `register`; `AttentionField` validates a spec's `attention:`
mapping as the registered class its `kind` names, so errors name only that kind's fields.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from pydantic import PlainValidator, SerializeAsAny, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from kvcalc.attention.base import (
    KV_PROJECTIONS,
    AttentionKind,
    Formula,
    Layer,
    Symbol,
    Weight,
    Work,
    keys_seen,
    keys_seen_sum,
    tri,
)

KINDS: dict[str, type[AttentionKind]] = {}
K = TypeVar("K", bound=type[AttentionKind])


def kind_name(cls: type[AttentionKind]) -> str:
    """The `kind:` tag a class declares as `kind: Literal["..."]`."""
    (name,) = cls.model_fields["kind"].annotation.__args__  # type: ignore[union-attr]
    return name


def kind_label(kind: str) -> str:
    """How tables name an attention kind: its class's label ('GQA', 'GDN'), else the kind in capitals ('MAMBA2')."""
    cls = KINDS.get(kind)
    return (cls.label if cls is not None else "") or kind.upper()


def register(cls: K) -> K:
    """Make an attention kind known to spec loading (a class decorator). A name already taken by another class is
    refused: replacing a built-in kind would change every bundled model that uses it, in silence."""
    from kvcalc.errors import KvcalcError, brief

    if not (isinstance(cls, type) and issubclass(cls, AttentionKind)):
        raise KvcalcError(f"register takes a subclass of kvcalc.attention.AttentionKind, got {brief(cls)}")
    name = kind_name(cls)
    if KINDS.get(name, cls) is not cls:
        raise KvcalcError(f"attention kind {name!r} is registered already ({KINDS[name].__module__}."
                          f"{KINDS[name].__qualname__}): give {cls.__qualname__} a kind of its own")
    KINDS[name] = cls
    return cls


def _error(loc: tuple[str, ...], value: Any, message: str) -> ValidationError:
    detail = InitErrorDetails(type=PydanticCustomError("attention", message), loc=loc, input=value)
    return ValidationError.from_exception_data("attention", [detail])


def _validate(value: Any) -> AttentionKind:
    """The registered kind a spec's `attention:` mapping names, validated with that kind's own fields."""
    if isinstance(value, AttentionKind):
        return value
    if not isinstance(value, dict):
        raise _error((), value, f"must be a mapping with a kind ({', '.join(KINDS)}), not {type(value).__name__}")
    kind = value.get("kind")
    if not isinstance(kind, str) or kind not in KINDS:
        what = "required field is missing" if kind is None else f"unknown attention kind {kind!r}" \
            if isinstance(kind, str) else f"a kind is a name, got {_written(kind)}"
        raise _error(("kind",), kind, f"{what}: choose one of {', '.join(KINDS)}")
    return KINDS[kind].model_validate(value)


def _written(value: object) -> str:
    """A parsed YAML value that is no name, as the file wrote it: a list, a mapping, true, 3."""
    if isinstance(value, (list, dict)):
        return "a list" if isinstance(value, list) else "a mapping"
    return str(value).lower() if isinstance(value, bool) else repr(value)


# A layer group's `attention:` field: any registered kind, dumped with its own fields.
AttentionField = Annotated[SerializeAsAny[AttentionKind], PlainValidator(_validate)]

from kvcalc.attention.deltanet import GatedDeltaNet  # noqa: E402
from kvcalc.attention.gqa import GQA, MHA, MQA, Heads  # noqa: E402  (the bundled kinds register themselves)
from kvcalc.attention.kda import KDA  # noqa: E402
from kvcalc.attention.lightning import Lightning  # noqa: E402
from kvcalc.attention.linear import Linear  # noqa: E402
from kvcalc.attention.mamba import Mamba, Mamba2, NoMixer  # noqa: E402
from kvcalc.attention.mla import MLA, MLA_CACHE_LAYOUTS, MLA_SCHEDULES  # noqa: E402
from kvcalc.attention.projection import Projection  # noqa: E402

for _cls in (MHA, GQA, MQA, MLA, Linear, GatedDeltaNet, Lightning, Mamba, Mamba2, NoMixer, KDA, Projection):
    register(_cls)

__all__ = [
    "KINDS", "KV_PROJECTIONS", "kind_label", "AttentionField", "AttentionKind", "Formula", "GQA", "Heads", "Layer", "Linear", "MHA", "MLA",
    "MLA_CACHE_LAYOUTS", "MLA_SCHEDULES", "MQA", "Symbol", "Weight", "Work", "keys_seen", "keys_seen_sum",
    "register", "tri",
]
