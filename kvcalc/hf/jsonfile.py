"""Parse a config.json's text so that every hostile document gets a SpecError naming what is wrong, never a
traceback: an integer longer than Python converts (4,300 digits) names its key, nesting deeper than the parser's
recursion allows is refused, and a key written twice in one object is refused (the later value must not silently win).

kvcalc.registry reads a `.json` MODEL through `loads`."""

from __future__ import annotations

import json
from typing import Any

from kvcalc.errors import SpecError

# Python's default int_max_str_digits: int() refuses longer decimal strings with a ValueError.
MAX_DIGITS = 4300


class _LongInt:
    """Stands for an integer literal longer than MAX_DIGITS until the object holding it names its key."""

    def __init__(self, digits: int) -> None:
        self.digits = digits


def _parse_int(text: str) -> int | _LongInt:
    digits = len(text.lstrip("-"))
    return _LongInt(digits) if digits > MAX_DIGITS else int(text)


class JsonFloat(float):
    """A JSON number with a fraction or exponent, keeping its text: 32.000000000000001 reads as the float 32.0, and
    only the text tells that it was not the whole number 32 (`kvcalc.hf.common.whole`)."""

    text: str

    def __new__(cls, text: str) -> JsonFloat:
        value = super().__new__(cls, text)
        value.text = text
        return value


def _long_int_in(value: Any) -> tuple[str, _LongInt] | None:
    """The first over-long integer directly in `value` or in its (nested) lists, with its index path (`[2][0]`);
    objects inside were checked when they were built. Iterative, so deep lists cost no recursion."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, _LongInt):
            return where, item
        if isinstance(item, list):
            stack.extend((f"{where}[{i}]", v) for i, v in reversed(list(enumerate(item))))
    return None


def _object(origin: str) -> Any:
    def build(pairs: list[tuple[str, Any]]) -> dict:
        obj: dict = {}
        for key, value in pairs:
            if key in obj:
                raise SpecError(f"{origin}: {key}: written twice in one object (a later value must not silently win)")
            found = _long_int_in(value)
            if found:
                raise SpecError(f"{origin}: {key}{found[0]}: an integer of {found[1].digits:,} digits; a config's "
                                f"integers have at most {MAX_DIGITS:,}")
            obj[key] = value
        return obj

    return build


def loads(text: str, origin: str) -> Any:
    """The parsed JSON document `text`, or a SpecError starting with `origin` (the file, for messages)."""
    try:
        data = json.loads(text, parse_int=_parse_int, parse_float=JsonFloat, object_pairs_hook=_object(origin))
    except json.JSONDecodeError as exc:
        if text.startswith("\ufeff"):  # Python says "decode using utf-8-sig": the file's fix, in its terms
            raise SpecError(f"{origin}: starts with a UTF-8 byte-order mark, which JSON does not allow (transformers "
                            "refuses it too): save it without one") from None
        raise SpecError(f"{origin}: malformed JSON: line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise SpecError(f"{origin}: JSON nested too deeply (a config.json nests a few levels)") from None
    found = _long_int_in(data)
    if found:
        raise SpecError(f"{origin}: {found[0] or 'the document'}: an integer of {found[1].digits:,} digits; a "
                        f"config's integers have at most {MAX_DIGITS:,}")
    return data
