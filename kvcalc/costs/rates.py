"""FLOPs of one layer as an affine function of its work, read once from the layer's kind, so that a pass at any context
costs a few multiplications a layer group instead of a call of the kind's `flops` (which builds its weight table).

Every bundled kind's `flops` is affine in the four counts of a `Work` (tokens, pairs attended, keys expanded, pairs
scanned): each component is a sum of counts times products of dims. `rates` reads the constant and the four
coefficients of every component from the kind itself (its FLOPs at zero work and at each unit count), then checks them
against the kind at two large works; a kind that is not affine there (a registered kind with, say, a chunked scan) is
called directly at every work instead. Either way the figures are the kind's own, exact to the integer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kvcalc.attention import Work

FlopsFn = Callable[[Work], dict[str, int]]  # one layer's FLOPs by component for a work

# Works the rates are checked at: far apart and far from the unit works they are read from.
_CHECKS = (Work(3, 1_000_003, 7, 999_983), Work(2**40 + 1, 2**79 + 5, 2**40 - 3, 2**80 + 11))
_UNITS = (Work(0, 0, 0, 0), Work(1, 0, 0, 0), Work(0, 1, 0, 0), Work(0, 0, 1, 0), Work(0, 0, 0, 1))


def _counts(w: Work) -> tuple[int, int, int, int]:
    return w.tokens, w.pairs, w.expanded, w.scanned_pairs


@dataclass(frozen=True)
class Rates:
    """One layer's FLOPs by component as `const + tokens·a + pairs·b + expanded·c + scanned·d` (its kind's `flops`)."""

    keys: tuple[str, ...]  # components, in the order the kind reports them
    coefficients: tuple[tuple[int, int, int, int, int], ...]  # per component: const, a, b, c, d
    sums: tuple[int, int, int, int, int]  # the same over all components

    def at(self, w: Work) -> dict[str, int]:
        """FLOPs by component of one layer doing `w`."""
        t, p, e, s = _counts(w)
        return {k: c0 + t * a + p * b + e * c + s * d for k, (c0, a, b, c, d) in zip(self.keys, self.coefficients)}

    def total(self, w: Work) -> int:
        """FLOPs of one layer doing `w`, all components."""
        c0, a, b, c, d = self.sums
        tokens, pairs, expanded, scanned = w
        return c0 + tokens * a + pairs * b + expanded * c + (pairs if scanned < 0 else scanned) * d

    def of_tokens(self, tokens: int) -> int:
        """total(Work(tokens, 0, 0)): a layer that sees no keys (a mixer beside the attention, an FFN)."""
        return self.sums[0] + tokens * self.sums[1]


@dataclass(frozen=True)
class Direct:
    """A layer whose kind is not affine in its work: its `flops` called at every work (the same interface as Rates)."""

    flops: FlopsFn

    def at(self, w: Work) -> dict[str, int]:
        return dict(self.flops(w))

    def total(self, w: Work) -> int:
        return sum(self.flops(w).values())

    def of_tokens(self, tokens: int) -> int:
        return self.total(Work(tokens, 0, 0))


LayerRates = Rates | Direct


def of(coefficients: dict[str, tuple[int, int, int, int, int]]) -> Rates:
    """Rates from coefficients by component (const, per token, per pair, per key expanded, per pair scanned)."""
    sums = tuple(sum(c[i] for c in coefficients.values()) for i in range(5))
    return Rates(tuple(coefficients), tuple(coefficients.values()), sums)  # type: ignore[arg-type]


def rates(flops: FlopsFn) -> LayerRates:
    """The rates of a layer whose FLOPs by component for a work are `flops(work)`, checked at two large works."""
    zero, *units = [flops(w) for w in _UNITS]
    keys = tuple(zero)
    if any(tuple(u) != keys for u in units):
        return Direct(flops)  # the components depend on the work
    out = of({k: (zero[k], *(u[k] - zero[k] for u in units)) for k in keys})  # type: ignore[misc]
    for w in _CHECKS:
        seen = flops(w)
        if tuple(seen) != keys or seen != out.at(w):
            return Direct(flops)
    return out
