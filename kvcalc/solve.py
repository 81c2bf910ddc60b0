"""Integer search shared by `fit` and `run`'s memory guard: never a division, since the cache is not linear in
context once a window, a chunk or a constant state caps some layers."""

from __future__ import annotations

from collections.abc import Callable


def largest_fitting(fits: Callable[[int], bool], upper: int) -> int:
    """The largest x in [1, upper] with fits(x) (fits monotone: true, then false), or 0 when fits(1) is false."""
    if not fits(1):
        return 0
    lo, hi = 1, upper
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo
