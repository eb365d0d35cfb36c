"""One reading of sizes on the command line (sandboy/sizes.py), shared by `gate` and `audit`."""

from __future__ import annotations

import argparse

import pytest

from sandboy.sizes import parse_size, size_type


@pytest.mark.parametrize("text, expected", [
    ("65536", 65536), ("64K", 64 << 10), ("64k", 64 << 10), ("64KiB", 64 << 10), ("64kb", 64 << 10),
    ("1.5M", 3 << 19), ("1G", 1 << 30), (" 2m ", 2 << 20),
    ("lots", None), ("", None), ("M", None), ("1e400k", None), ("nanK", None),
])
def test_parse_size(text: str, expected: int | None) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("minimum, text, ok", [
    (1024, "1K", True), (1024, "1023", False), (1024, "0", False), (1, "1", True), (1, "0", False), (1, "-5", False),
    (1, "-1K", False),
])
def test_size_type_refuses_below_the_minimum_with_examples(minimum: int, text: str, ok: bool) -> None:
    if ok:
        assert size_type(minimum)(text) >= minimum
    else:
        with pytest.raises(argparse.ArgumentTypeError, match=r"is not a size: expected a size of at least .* \(examples: "):
            size_type(minimum)(text)
