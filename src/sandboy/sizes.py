"""Sizes on the command line ("65536", "64K", "64M", "1G"; a trailing "B"/"iB" and any case
allowed): one reading for every subcommand that takes one (gate --max-step-output, audit
--max-input-bytes / --max-output-bytes). Stdlib only: both CLIs import it on every start."""

from __future__ import annotations

import argparse
from collections.abc import Callable  # not typing (≈ 2 ms): the gate's start-up no longer needs it

UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def parse_size(text: str) -> int | None:
    """Bytes, or None when `text` is not a size."""
    t = text.strip().lower().removesuffix("b").removesuffix("i")
    try:
        return int(float(t[:-1]) * UNITS[t[-1]]) if t and t[-1] in UNITS else int(t)
    except (ValueError, OverflowError):
        return None


def _shown(n: int) -> str:
    for suffix, unit in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= unit and n % unit == 0:
            return f"{n // unit}{suffix}"
    return f"{n} byte" + ("s" if n != 1 else "")


def size_type(minimum: int = 1) -> Callable[[str], int]:
    """An argparse `type=` accepting sizes of at least `minimum` bytes."""

    def size(text: str) -> int:
        value = parse_size(text)
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a size: expected a size of at least {_shown(minimum)} (examples: 65536, 64K, 64M, 1G)")
        return value

    return size
