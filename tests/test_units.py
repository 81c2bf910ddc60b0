"""Token counts (k = 1024) and byte formatting."""

from __future__ import annotations

from fractions import Fraction

import pytest

from conftest import run
from kvcalc.units import format_bytes, format_count, format_flops, format_seconds, format_tokens, parse_token_list, parse_tokens


@pytest.mark.parametrize("text, tokens", [
    ("4096", 4096), ("4k", 4096), ("4K", 4096), ("128k", 131_072), ("1M", 1_048_576), ("1m", 1_048_576),
    ("1.5k", 1536), ("0.5M", 524_288), ("32_768", 32_768), (" 8k ", 8192),
])
def test_parse_tokens(text, tokens):
    assert parse_tokens(text) == tokens


@pytest.mark.parametrize("text, message", [
    ("0", "at least 1 token"), ("0k", "at least 1 token"), ("-5", "not a token count"), ("12q", "not a token count"),
    ("", "not a token count"), ("1.0001k", "not a whole number"), ("k", "not a token count"), ("1e6", "not a token count"),
])
def test_parse_tokens_rejects(text, message):
    with pytest.raises(ValueError, match=message):
        parse_tokens(text)


def test_parse_token_list():
    assert parse_token_list("4k,32k,128k") == [4096, 32_768, 131_072]
    assert parse_token_list("1000") == [1000]
    with pytest.raises(ValueError, match="comma list"):
        parse_token_list("4k,,8k")


@pytest.mark.parametrize("n, text", [(131_072, "128k"), (1_048_576, "1M"), (5000, "5,000"), (1536, "1,536"), (4096, "4k"),
                                     (101_729, "101,729"), (2**40, "1,048,576M"),
                                     (0, "0")])  # 0 was "0M" (fit's max_ctx when nothing fits); 101,729 was 101729
def test_format_tokens_is_exact(n, text):
    assert format_tokens(n) == text


@pytest.mark.parametrize("n, units, text", [
    (42_949_672_960, "binary", "40.0 GiB"),
    (9_059_696_640, "binary", "8.44 GiB"),
    (69_120, "binary", "67.5 KiB"),
    (327_680, "binary", "320 KiB"),
    (512, "binary", "512 B"),
    (42_949_672_960, "si", "42.9 GB"),
    (69_120, "si", "69.1 kB"),
    (42_949_672_960, "bytes", "42,949,672,960 B"),
    (0, "binary", "0 B"),
])
def test_format_bytes(n, units, text):
    assert format_bytes(n, units) == text


# Three significant digits, counted after rounding (an audit found '1000M', '1024 MiB', '10.00 KiB' and '-59.76 GiB'):
# a value that rounds up to the next unit is written in it, a carry into the next decade drops a decimal, and the
# sign does not count as a digit. Binary units keep 1000-1023 of a unit as four digits, as they must.
@pytest.mark.parametrize("n, text", [
    (999_885_952, "1.00B"),  # gemma3-1b's parameters (was 1000M)
    (999_499_999, "999M"), (999_500_000, "1.00B"), (9_996, "10.0K"), (99_960, "100K"), (999, "999"), (1000, "1.00K"),
    (70_553_706_496, "70.6B"), (-1_234_567, "-1.23M"),
])
def test_format_count_rounds_into_the_next_unit(n, text):
    assert format_count(n) == text


@pytest.mark.parametrize("n, units, text", [
    (1_073_433_600, "binary", "1.00 GiB"),  # deepseek-v2 at ctx 15,530: 1023.7 MiB (was 1024 MiB)
    (1023 * 2**20, "binary", "1023 MiB"),  # below the carry: four digits, as binary units must
    (10 * 1024 - 2, "binary", "10.0 KiB"),  # 9.998 KiB (was 10.00 KiB)
    (int(99.96 * 2**30), "binary", "100 GiB"),  # (was 100.0 GiB)
    (-64_166_811_402, "binary", "-59.8 GiB"),  # fit's negative headroom (was -59.76 GiB)
    (999_999_999, "si", "1.00 GB"), (1023, "binary", "1023 B"), (1024, "binary", "1.00 KiB"),
    (int(274.5 * 2**20), "binary", "274 MiB"), (int(1.125 * 2**30), "binary", "1.12 GiB"),  # ties to even (README)
])
def test_format_bytes_counts_three_digits_after_rounding(n, units, text):
    assert format_bytes(n, units) == text


@pytest.mark.parametrize("x, text", [
    (0.0123, "12.3 ms"), (0.99996, "1.00 s"), (0.0009999999, "1.00 ms"), (0.00099949, "999 µs"), (2.5e-5, "25.0 µs"),
    (12345.0, "12,345 s"), (9.996e-9, "10.0 ns"),
])
def test_format_seconds_rounds_into_the_next_unit(x, text):
    assert format_seconds(x) == text


@pytest.mark.parametrize("n, text", [(999, "999 FLOP"), (999_999, "1.00 MFLOP"), (291_648_307_200, "292 GFLOP"),
                                     (10_500_000_000_000_000, "10.5 PFLOP")])
def test_format_flops(n, text):
    assert format_flops(n) == text


# Found by an audit: the float a value was turned into before rounding broke decimal ties the README rounds to even
# (gaudi3's 1.835 PFLOP/s printed 1.83, tpu-v5p's 2.765 TB/s 2.77), and past the largest unit the whole float was
# printed ('327680 PiB', '3970209208858266624 ZFLOP': its last digits not even the value's).
@pytest.mark.parametrize("n, text", [
    (1_835_000_000_000_000, "1.84 PFLOP"), (1015, "1.02 kFLOP"), (1025, "1.02 kFLOP"), (1035, "1.04 kFLOP"),
    (10**27, "1000 YFLOP"), (12_345 * 10**24, "12,345 YFLOP"), (10**24 - 1, "1.00 YFLOP"),
])
def test_format_flops_rounds_the_exact_value_half_to_even(n, text):
    assert format_flops(n) == text


@pytest.mark.parametrize("n, units, text", [
    (2_765_000_000_000, "si", "2.76 TB"), (2_775_000_000_000, "si", "2.78 TB"),
    (327_680 * 2**50, "binary", "320 EiB"), (2**80, "binary", "1.00 YiB"), (12_345 * 2**80, "binary", "12,345 YiB"),
    (5 * 10**24, "si", "5.00 YB"), (2**53 + 1, "binary", "8.00 PiB"),
])
def test_format_bytes_rounds_the_exact_value_and_has_units_to_yotta(n, units, text):
    assert format_bytes(n, units) == text


@pytest.mark.parametrize("x, text", [(2.6195, "2.62"), (44.0, "44.0"), (500.0, "500"), (153.01618440411966, "153"),
                                     (31.47018315018315, "31.5"), (0.0456, "0.0456"), (1234.5, "1234"), (9.996, "10.0"),
                                     # below 1 the decimals grow with the decades (an audit: whisper's decode
                                     # intensity 0.897 printed 0.90, and 0.001 printed 0.00)
                                     (0.8971, "0.897"), (0.001, "0.00100"), (0.09996, "0.100"), (0.9996, "1.00"),
                                     (Fraction(1, 3), "0.333"), (-0.5, "-0.500"), (0, "0.00")])
def test_format_number_keeps_three_significant_digits(x, text):
    # decode_intensity printed 2.6 in compare's table and 2.62 in cost's summary (an audit); both now follow the
    # README's three significant digits, as the ridge point of `kvcalc hardware` does (500, not 500.0)
    from kvcalc.units import format_number

    assert format_number(x) == text


def test_intensity_reads_the_same_in_compare_and_cost():
    from conftest import run

    row = run("compare", "deepseek-v2", "--ctx", "4k", "--columns", "model,decode_intensity").stdout
    summary = run("cost", "deepseek-v2", "--ctx", "4k").stdout
    shown = summary.split("decode_intensity")[1].split("FLOP/byte")[0].strip()
    assert len(shown.replace(".", "")) == 3 and row.split()[-1] == shown == "2.62"


def test_ratios_and_errors_keep_three_significant_digits_rounded_half_to_even():
    # an audit: ratios were written with '#.3g' on the float, so gpt2's exact 0.1125 of llama3-70b's cache showed
    # 0.113 (the float lies just above 9/80) where byte figures round exact ties to even; errors used '.3g', which
    # drops trailing zeros (0.2298 -> '0.23', 1.00423 -> '1', as if exact). Both now read the float as its shortest
    # decimal and round half to even, zeros kept
    from kvcalc.units import format_sig

    assert [format_sig(x) for x in (0.1125, 0.2298, 1.00423, 1.0, 0.125, 0.0176, 1.835, 9.996)] == \
        ["0.112", "0.230", "1.00", "1.00", "0.125", "0.0176", "1.84", "10.0"]
    assert [format_sig(x) for x in (9.46e-10, 2.5e-17, 1234.5, 0.0001234, 0.0, -0.5)] == \
        ["9.46e-10", "2.50e-17", "1.23e+03", "0.000123", "0.00", "-0.500"]
    rows = run("compare", "llama3-70b", "gpt2", "--ctx", "32k").stdout.splitlines()
    assert rows[-1].split()[-1] == "0.112×"  # 1.125 GiB / 10 GiB, a tie, to even as the cache's 1.12 GiB


@pytest.mark.parametrize(("x", "text"), [
    (1.6793361153931786e21, "1.68e+21 s"),  # the float's digits were written out: 1,679,336,115,393,178,600,000 s
    (Fraction(10**15), "1.00e+15 s"), (10**15 - 1, "999,999,999,999,999 s"), (12_345.6, "12,346 s"),
])
def test_a_duration_past_a_floats_digits_is_a_power_of_ten(x, text):
    # an exactness review: a time is a float, whose repr past 17 significant digits pads with zeros
    assert format_seconds(x) == text


def test_a_ratio_past_a_floats_digits_is_a_power_of_ten():
    from kvcalc.present.render import cell

    assert cell(68_718_293_906_637_375.0, "ratio") == "6.87e+16×"  # was 68,718,293,906,637,376×
    assert cell(12_345.0, "ratio") == "12,345×" and cell(99.96, "ratio") == "100×"


def _nearest_geometric(lo: int, hi: int, n: int, i: int) -> int:
    """The whole number nearest lo·(hi/lo)^(i/(n-1)), by integers alone: k is it when (k - 1/2)^(n-1) < X < (k + 1/2)^(n-1)
    with X = lo^(n-1-i)·hi^i; the float estimate only picks which k to check."""
    target = 2 ** (n - 1) * lo ** (n - 1 - i) * hi**i  # X scaled by 2^(n-1), so both bounds are odd integers' powers
    k = round(lo * (hi / lo) ** (i / (n - 1)))
    while (2 * k + 1) ** (n - 1) <= target:
        k += 1
    while (2 * k - 1) ** (n - 1) >= target:
        k -= 1
    return k


def test_points_are_the_geometric_steps_rounded_exactly():
    # --points N over LO..HI: step i is lo·(hi/lo)^(i/(N-1)) rounded to the nearest token, checked by integers alone.
    # Over 1,000..2^40 in 5,000 points, floats (ratio**i, i rounding errors) gave step 4,754 as 396,362,367,278.4955,
    # rounded down, where the step is 396,362,367,278.5005 (its 4,999th power lies between 278.5's and 279.5's)
    from kvcalc.units import parse_token_range

    steps = parse_token_range("1000..1099511627776", 5000)
    assert len(steps) == 5000 and steps[0] == 1000 and steps[-1] == 2**40
    for i in (1, 2, 2500, 4754, 4997, 4998):
        assert steps[i] == _nearest_geometric(1000, 2**40, 5000, i), i
    assert steps[4754] == 396_362_367_279
    # a narrow range of many points: every step, checked, then the repeats dropped
    small = [_nearest_geometric(3, 1000, 40, i) for i in range(39)] + [1000]
    assert parse_token_range("3..1000", 40) == sorted(set(small))
    # an exact power: 1k..1M in 11 points doubles, each step whole
    assert parse_token_range("1k..1M", 11) == [1024 * 2**i for i in range(11)]
