"""The config keys kvcalc reads, and the one check every registered importer gets: a key that kvcalc reads nowhere
but that is a near miss of a key the importer reads and the config lacks is refused, naming both. A misspelled key
must not pass for an absent one: `num_key_value_head` in a Llama config would otherwise give MHA (the class default),
silently. Real configs carry many keys kvcalc has no use for, so only near misses are refused, never unknown keys.

What an importer reads is found in its code rather than listed by hand, so the list cannot fall behind the code:
every key-like string constant in the importer, in the kvcalc.hf functions it calls and in the tuples of names it
uses (transitively). That is a superset of the keys it reads (it also holds spec field names and kinds), which only makes
the vocabulary of keys never refused larger.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import CodeType, FunctionType

from kvcalc.errors import SpecError, printable
from kvcalc.hf.common import IMPORTERS

KEY = re.compile(r"_?[a-z][a-z0-9_]*")  # the shape of a config key (string constants of other shapes are messages)
CUTOFF = 0.85  # difflib's similarity ratio from which a key reads as a misspelling...
MAX_EDITS = 2  # ...when it is also at most two single-character edits away (num_position_embeddings is not max_...)
# The objects inside a config that importers read fields from: a multimodal model's text model, Kimi Linear's KDA
# settings; and per-block mappings (Nemotron-NAS block_configs[i].attention / .ffn).
NESTED = ("text_config", "linear_attn_config")
BLOCKS = ("block_configs", ("attention", "ffn"))
# Keys of published configs that no importer reads, each a near miss of one that is read: known, never a misspelling
# (GLM-5's qk_head_dim, a decoy for MLA, read as a misspelt v_head_dim when that was left out).
UNREAD = frozenset({"qk_head_dim"})


def _strings(code: CodeType) -> Iterator[str]:
    """The string constants of `code` and of the functions defined in it (lambdas, nested defs)."""
    for const in code.co_consts:
        if isinstance(const, str):
            yield const
        elif isinstance(const, (tuple, frozenset)):
            yield from (c for c in const if isinstance(c, str))
        elif isinstance(const, CodeType):
            yield from _strings(const)


def _names(code: CodeType) -> Iterator[str]:
    """The global and attribute names `code` and the functions defined in it use."""
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, CodeType):
            yield from _names(const)


def _names_in(value: object) -> list[str]:
    """The members of a module-level tuple, list or set of names (LINEAR_KEYS: keys read one by one). Dicts are passed
    over: their keys are defaults filled in or bounds (BOUNDS names every counted key of every importer), and a key
    an importer reads from a table of defaults it also reads by name."""
    if isinstance(value, (tuple, list, set, frozenset)):
        return [v for v in value if isinstance(v, str)]
    return []


@functools.cache
def reads(fn: Callable) -> frozenset[str]:
    """Every key-like string in `fn`'s code and in the kvcalc.hf functions and tuples of names it uses, transitively."""
    found: set[str] = set()
    todo, seen = [fn], set()
    while todo:
        f = todo.pop()
        if f in seen or not isinstance(f, FunctionType):
            continue
        seen.add(f)
        found.update(_strings(f.__code__))
        for name in set(_names(f.__code__)):
            value = f.__globals__.get(name)
            if isinstance(value, FunctionType) and value.__module__.startswith("kvcalc.hf"):
                todo.append(value)
            else:
                found.update(_names_in(value))
    return frozenset(k for k in found if KEY.fullmatch(k))


@functools.cache
def vocabulary() -> frozenset[str]:
    """Every key some importer reads, and the standard and harmless keys of a generic import: never refused."""
    from kvcalc.hf import generic

    return frozenset().union(*(reads(fn) for fn in set(IMPORTERS.values())), generic.ALLOWED_KEYS, UNREAD)


def _squash(key: str) -> str:
    """`key` without case, '_' and '-': numKeyValueHeads, num-key-value-heads and num_key_value_heads agree."""
    return key.lower().replace("_", "").replace("-", "")


def _edits(a: str, b: str) -> int:
    """Levenshtein distance of `a` and `b` (insertions, deletions and substitutions of one character)."""
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]


@dataclass(frozen=True)
class Missing:
    """The keys an importer reads that one mapping of the config lacks, indexed for `near_miss`: by squashed form, and
    by length with their letters (a key two edits away is at most two characters longer or shorter and has at most
    four letters the other lacks: cheap tests that spare difflib nearly every key)."""

    squashed: dict[str, str]
    around: dict[int, list[tuple[str, frozenset[str]]]]  # key length -> the keys of that length ± MAX_EDITS

    @classmethod
    def of(cls, wanted: frozenset[str], level: dict) -> Missing:
        missing = sorted(k for k in wanted if k not in level)
        around: dict[int, list[tuple[str, frozenset[str]]]] = {}
        for k in missing:
            for n in range(len(k) - MAX_EDITS, len(k) + MAX_EDITS + 1):
                around.setdefault(n, []).append((k, frozenset(k)))
        return cls({_squash(k): k for k in reversed(missing)}, around)


# The most keys one mapping of a config may have: real ones have tens to a few hundred; the near-miss check compares
# each unknown key with the missing ones (difflib, about 0.1 ms a key at worst), so 10,000 keys stay near a second.
MAX_LEVEL_KEYS = 10_000


def bounded(level: dict, where: str, origin: str) -> None:
    """A SpecError where one mapping of a config (`where`: its path prefix, '' at the top) has more than
    MAX_LEVEL_KEYS keys."""
    if len(level) > MAX_LEVEL_KEYS:
        raise SpecError(f"{origin}: {where.rstrip('.') or 'the top level'} has {len(level):,} keys, above the "
                        f"{MAX_LEVEL_KEYS:,} kvcalc reads in one mapping (a model's config.json has tens): not a "
                        "model config")


def near_miss(key: str, missing: Missing) -> str | None:
    """The missing key that `key` most likely misspells: the same but for case, '_' or '-', or for a plural or
    singular s; else one at most two edits away with a difflib ratio of at least 0.85 (None: no such key)."""
    s = _squash(key)
    for variant in (s, s + "s", s[:-1] if s.endswith("s") else ""):
        if variant in missing.squashed:
            return missing.squashed[variant]
    letters = frozenset(key)
    near = [k for k, its in missing.around.get(len(key), ()) if len(letters ^ its) <= 2 * MAX_EDITS]
    if not near:
        return None
    return next((k for k in difflib.get_close_matches(key, near, n=3, cutoff=CUTOFF) if _edits(key, k) <= MAX_EDITS),
                None)


def _levels(cfg: dict, wanted: frozenset[str]) -> Iterator[tuple[str, dict]]:
    """The mappings of `cfg` an importer reading `wanted` takes fields from, each with its path prefix."""
    yield "", cfg
    for key in NESTED:
        if key in wanted and isinstance(cfg.get(key), dict):
            yield f"{key}.", cfg[key]
    blocks, parts = BLOCKS
    if blocks in wanted and isinstance(cfg.get(blocks), list):
        for i, block in enumerate(cfg[blocks]):
            for part in parts:
                if isinstance(block, dict) and isinstance(block.get(part), dict):
                    yield f"{blocks}[{i}].{part}.", block[part]


def check(cfg: dict, origin: str, fn: Callable) -> None:
    """Raise SpecError on a key of `cfg` that no importer reads but that is a near miss of a key importer `fn` reads
    and `cfg` lacks at that level (a misspelling would otherwise pass for an absent key, silently)."""
    wanted, known = reads(fn), vocabulary()
    for where, level in _levels(cfg, wanted):
        bounded(level, where, origin)  # each unknown key is compared with the missing ones: bounded work
        unknown = [key for key in level if isinstance(key, str) and key not in known]  # YAML keys may be numbers
        if not unknown:
            continue
        missing = Missing.of(wanted, level)
        for key in unknown:
            match = near_miss(key, missing)
            if match:
                raise SpecError(f"{origin}: {where}{printable(key)}: not a key kvcalc reads; did you mean {where}{match}?")
