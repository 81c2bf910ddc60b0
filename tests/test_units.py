"""Token counts (k = 1024) and byte formatting."""

from __future__ import annotations

import pytest

from kvcalc.units import format_bytes, format_tokens, parse_token_list, parse_tokens


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


@pytest.mark.parametrize("n, text", [(131_072, "128k"), (1_048_576, "1M"), (5000, "5000"), (1536, "1536"), (4096, "4k")])
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
    (42_949_672_960, "bytes", "42,949,672,960"),
    (0, "binary", "0 B"),
])
def test_format_bytes(n, units, text):
    assert format_bytes(n, units) == text
