"""Lists a user gives (contexts, sweep values, models, metrics, kinds): the first value named twice, in one pass."""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import TypeVar

T = TypeVar("T", bound=Hashable)


def first_repeat(items: Iterable[T]) -> T | None:
    """The first item equal to an earlier one, or None: a row or a column given twice would repeat, or vanish."""
    seen: set[T] = set()
    for item in items:
        if item in seen:
            return item
        seen.add(item)
    return None
