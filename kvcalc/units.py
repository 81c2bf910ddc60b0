"""Token counts and byte sizes: "128k" -> 131072 and 42949672960 -> "40.0 GiB".

Convention: k = 1024 tokens and M = 1024² tokens, as the field uses them (a "128k context" is 131,072 tokens).
"""

from __future__ import annotations

import re
from decimal import ROUND_HALF_EVEN, Decimal, localcontext
from fractions import Fraction

from kvcalc.lists import first_repeat

TOKEN_SUFFIX = {"": 1, "k": 1024, "m": 1024**2}
# ASCII digits (\d and str.isdigit take other scripts'), grouped by single underscores as Python writes them (32_768)
_CTX = re.compile(r"([0-9](?:_?[0-9])*(?:\.[0-9]+)?)([kKmM]?)")


MAX_TOKENS = 2**40  # the largest context kvcalc accepts (about 10^12 tokens): every figure stays quick to compute
MAX_DECIMALS = 40  # digits after a token count's point ('1.5k'): far past any whole count's, bounded as its digits are


def parse_tokens(text: str) -> int:
    """Parse one token count: '4096', '4k', '128k', '1M', '1.5k' (must come out a whole positive number, at most
    MAX_TOKENS)."""
    match = _CTX.fullmatch(text.strip())
    if not match:
        raise ValueError(f"{text!r} is not a token count (use e.g. 4096, 4k, 128k, 1M; k = 1024)")
    whole, _, decimals = match[1].replace("_", "").partition(".")
    if len(whole.lstrip("0")) > 13:  # 2^40 has 13 digits: bounded before Python's 4,300-digit int conversion limit
        raise ValueError(f"{_cut(text)}: above 2^40 tokens, the largest count kvcalc accepts")
    if len(decimals) > MAX_DECIMALS:
        raise ValueError(f"{_cut(text)}: at most {MAX_DECIMALS} decimal places")
    value = Fraction(match[1].replace("_", "")) * TOKEN_SUFFIX[match[2].lower()]
    if value.denominator != 1:
        raise ValueError(f"{text!r} is not a whole number of tokens")
    if value <= 0:
        raise ValueError(f"{text!r}: must be at least 1 token")
    if value > MAX_TOKENS:
        raise ValueError(f"{text.strip()[:40]!r}: above 2^40 tokens, the largest count kvcalc accepts")
    return int(value)


def _cut(text: str) -> str:
    """A token count as a message quotes it: whole, or its first 40 characters and its length."""
    text = text.strip()
    return repr(text) if len(text) <= 40 else f"{text[:40]!r}... ({len(text):,} characters)"


def parse_token_list(text: str) -> list[int]:
    """Parse a comma list of token counts: '4k,32k,128k' -> [4096, 32768, 131072]."""
    parts = [p for p in text.split(",")]
    if not text.strip() or any(not p.strip() for p in parts):
        raise ValueError(f"{text!r} is not a comma list of token counts (e.g. 4k,32k,128k)")
    values = [parse_tokens(p) for p in parts]
    if (twice := first_repeat(values)) is not None:  # its rows would repeat, or vanish
        raise ValueError(f"{text[:60]!r}: {twice:,} tokens given twice")
    return values


def format_tokens(n: int) -> str:
    """131072 -> '128k', 1048576 -> '1M', 101729 -> '101,729', 0 -> '0' (exact only: never rounds)."""
    for suffix, scale in (("M", 1024**2), ("k", 1024)):
        if n and n % scale == 0:
            return f"{n // scale:,}{suffix}"
    return f"{n:,}"


BINARY = tuple((name, 1024**i) for i, name in enumerate(("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB")))
SI = tuple((name, 1000**i) for i, name in enumerate(("B", "kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB")))
UNIT_SYSTEMS = ("binary", "si", "bytes")


def format_bytes(n: int | Fraction, units: str = "binary") -> str:
    """A byte count in human units: 3 significant digits from KiB up ('40.0 GiB', '67.5 KiB'), exact bytes below.

    units: 'binary' (KiB = 1024 B), 'si' (kB = 1000 B) or 'bytes' (the exact integer with separators, and its unit:
    '141,107,412,992 B', so a column of them reads as bytes, not a count).
    """
    if units == "bytes":
        return f"{int(n):,} B"
    table: tuple[tuple[str, int], ...] = BINARY if units == "binary" else SI
    if abs(Fraction(n)) < table[1][1]:
        return f"{n} B"
    text, name = _in_units(Fraction(n), table)
    return f"{text} {name}"


def aside_bytes(n: int, units: str = "binary") -> str:
    """' (40.0 GiB)': the human size written beside an exact byte count; nothing where it would repeat the count
    (units 'bytes', or a count below one KiB or kB: '0 B', not '0 B (0 B)')."""
    if units == "bytes":
        return ""
    text = format_bytes(n, units)
    return "" if text.replace(",", "") == f"{n} B" else f" ({text})"


def _three_digits(value: Fraction) -> str:
    """3 significant digits of the exact value, rounded half to even, the decimals set by the magnitude after rounding
    (9.996 -> '10.0', not '10.00'; 1.835 -> '1.84', where a float holds 1.83499...; 0.8971 -> '0.897', 0.0123 ->
    '0.0123', 0.09996 -> '0.100'). Past 9,999 (beyond the largest unit) the whole number, grouped: '12,345'."""
    digits = 2
    magnitude = abs(value)
    while 0 < magnitude < Fraction(1, 10 ** (digits - 2)):  # below 1: one more decimal per decade down
        digits += 1
    while digits > 0:
        scaled = round(value * 10**digits)  # Fraction rounds half to even, exactly
        if abs(scaled) < 1000:
            whole, part = divmod(abs(scaled), 10**digits)
            return f"{'-' if scaled < 0 else ''}{whole}.{part:0{digits}d}"
        digits -= 1
    whole = round(value)
    return f"{whole:,}" if abs(whole) >= 10_000 else str(whole)


def _in_units(n: float | Fraction, steps: tuple[tuple[str, Fraction | int], ...]) -> tuple[str, str]:
    """n in the largest of `steps` (ascending (name, scale) pairs) that it reaches, with 3 significant digits, and that
    step's name; a value that rounds up to the next step is written in it ('1.00 GiB', not '1024 MiB')."""
    exact = Fraction(n)
    i = 0
    while i + 1 < len(steps) and abs(exact) >= steps[i + 1][1]:
        i += 1
    text = _three_digits(exact / steps[i][1])
    if i + 1 < len(steps) and abs(Fraction(text.replace(",", ""))) * steps[i][1] >= steps[i + 1][1]:
        i += 1
        text = _three_digits(exact / steps[i][1])
    return text, steps[i][0]


FLOP_PREFIXES = tuple((name, 1000**i) for i, name in enumerate(("", "k", "M", "G", "T", "P", "E", "Z", "Y")))
COUNT_SUFFIXES = (("", 1), ("K", 10**3), ("M", 10**6), ("B", 10**9), ("T", 10**12))
SECONDS = (("ns", Fraction(1, 10**9)), ("µs", Fraction(1, 10**6)), ("ms", Fraction(1, 10**3)), ("s", 1))


def format_flops(n: int) -> str:
    """FLOPs with SI prefixes, 3 significant digits: 291648307200 -> '292 GFLOP'; exact below 1000."""
    if abs(n) < 1000:
        return f"{n} FLOP"
    text, prefix = _in_units(n, FLOP_PREFIXES)
    return f"{text} {prefix}FLOP"


def format_count(n: int) -> str:
    """A parameter count as the field writes it: 70553706496 -> '70.6B', 124439808 -> '124M', 999885952 -> '1.00B'."""
    if abs(n) < 1000:
        return str(n)
    text, suffix = _in_units(n, COUNT_SUFFIXES)
    return f"{text}{suffix}"


def _decimal(x: float | Fraction) -> Fraction:
    """The value to round: a Fraction or int as it is; a float (a time, a rate: floats in json) as its shortest decimal,
    its repr, so a quotient computed exactly and then made a float rounds as the exact value does (1/320 s is the
    float 0.003125, whose binary value lies above the tie: 3.12 ms, not 3.13)."""
    return Fraction(repr(x)) if isinstance(x, float) else Fraction(x)


def format_number(x: float | Fraction) -> str:
    """A plain quantity (FLOP per byte), 3 significant digits as the units have them: 2.6195 -> '2.62', 500.0 -> '500'."""
    return _three_digits(_decimal(x))


def format_sig(value: float) -> str:
    """Three significant digits of a float (a ratio, an error), read as the shortest decimal that is that float (its
    repr: 0.1125 is 9/80), rounded half to even as every unit is, trailing zeros kept: 0.112, 1.00, 0.230; in powers
    of ten below 10⁻⁴ and from 10³ up, as '#.3g' writes them (9.46e-10, 1.23e+03)."""
    d = Decimal(repr(float(value)))
    if not d.is_finite():
        return str(value)
    if d == 0:
        return "0.00"
    q = d.quantize(Decimal(1).scaleb(d.adjusted() - 2), rounding=ROUND_HALF_EVEN)
    if q.adjusted() > d.adjusted():  # rounded up a decade: 9.996 -> 10.0
        q = q.quantize(Decimal(1).scaleb(q.adjusted() - 2), rounding=ROUND_HALF_EVEN)
    x = q.adjusted()
    if -4 <= x < 3:
        return f"{q:.{max(2 - x, 0)}f}"
    return f"{q.scaleb(-x):.2f}e{x:+03d}"


def format_seconds(x: float | Fraction) -> str:
    """A duration, 3 significant digits: 0.0123 -> '12.3 ms', 0.99996 -> '1.00 s'; from 10¹⁵ s, past a float's
    digits, in a power of ten ('1.68e+21 s', not the float's 1,679,336,115,393,178,600,000)."""
    exact = _decimal(x)
    if abs(exact) >= 10**15:
        return f"{format_sig(float(exact))} s"
    text, unit = _in_units(exact, SECONDS)
    return f"{text} {unit}"


def parse_token_range(text: str, points: int | None = None) -> list[int]:
    """'1k..1M' -> log-spaced contexts from 1k to 1M (doubling, or `points` geometric steps); else a comma list."""
    if ".." not in text:
        if points is not None:
            raise ValueError(f"--points spaces a range LO..HI; {text!r} is a list (drop --points or give a range)")
        return parse_token_list(text)
    lo_text, _, hi_text = text.partition("..")
    if not lo_text.strip() or not hi_text.strip():
        raise ValueError(f"{text!r}: a range needs both ends, LO..HI (1k..1M)")
    lo, hi = parse_tokens(lo_text), parse_tokens(hi_text)
    if hi < lo:
        raise ValueError(f"{text!r}: the range runs backwards")
    if points is None:
        out, x = [], lo
        while x < hi:
            out.append(x)
            x *= 2
        return out + [hi]
    if points < 2:
        raise ValueError("--points must be at least 2")
    if points > 100_000:
        raise ValueError(f"--points {points:,}: at most 100,000 contexts a sweep")
    return sorted(set(geometric_steps(lo, hi, points)))


def geometric_steps(lo: int, hi: int, points: int) -> list[int]:
    """lo·(hi/lo)^(i/(points-1)) for i = 0..points-1, each rounded to the nearest whole token, in 50-digit decimals:
    floats drift a token off the rounding past about 10^8 tokens (a float's ratio**i carries i rounding errors).
    No step is ever a tie: its (points-1)-th power is the integer lo^(points-1-i)·hi^i, so a rational step is whole."""
    with localcontext() as decimals:
        decimals.prec = 50  # a step below 2^40 keeps 37 decimals after the point; 10^5 products lose under 10^-40
        ratio = ((Decimal(hi) / Decimal(lo)).ln() / (points - 1)).exp()
        steps, x = [], Decimal(lo)
        for _ in range(points - 1):
            steps.append(int(x.to_integral_value(ROUND_HALF_EVEN)))
            x *= ratio
    return steps + [hi]


def parse_size(text: str) -> int:
    """A memory size: '8G' -> 8 GiB; K/M/G/T are binary (1024-based), an optional B or iB; a plain number is bytes."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGTkmgt]?)(?:[iI]?B)?\s*", text)  # a lower-case b: bits
    if not match:
        bits = " (a lower-case b is bits: write 512M or 512MiB)" if text.rstrip().endswith("b") else ""
        raise ValueError(f"{text[:40]!r} is not a size (use e.g. 8G, 512M, 1073741824){bits}")
    if len(match[1]) > 40:  # past any memory (and past Python's 4,300-digit limit on reading an int)
        raise ValueError(f"{text[:20]!r}… ({len(match[1]):,} digits) is not a size a machine has (use e.g. 8G, 512M)")
    scale = 1024 ** " KMGT".index(match[2].upper() or " ")
    size = Fraction(match[1]) * scale
    if size.denominator != 1:  # 1.5B, 0.5: never truncated to a size that was not asked
        raise ValueError(f"{text!r} is not a whole number of bytes")
    return int(size)
