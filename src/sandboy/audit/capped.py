"""Bounded reads of input files (reports to convert, SARIF to validate).

A module of its own so that `audit validate` reads its files without importing the conversion
pipeline (and with it wasmtime, ~100 ms).
"""

from __future__ import annotations

import sys
from pathlib import Path

from sandboy.audit.errors import InputTooLarge, UsageError


def read_capped(path: Path, cap: int, what: str = "input") -> bytes:
    """One bounded read: never more than cap+1 bytes, whatever the file claims to be."""
    if str(path) == "-":
        data = sys.stdin.buffer.read(cap + 1)
    else:
        try:
            with open(path, "rb") as fh:
                data = fh.read(cap + 1)
        except FileNotFoundError:
            raise UsageError(f"{path}: no such file (check the {what} path)") from None
        except IsADirectoryError:
            raise UsageError(f"{path}: is a directory; pass the report file itself") from None
        except OSError as exc:
            raise UsageError(f"{path}: cannot read {what}: {exc.strerror}") from None
    if len(data) > cap:
        raise InputTooLarge(
            f"{path}: larger than the {cap:,}-byte input cap; if it is expected to be that big, "
            "raise --max-input-bytes (inputs are capped in total, across all files)"
        )
    return data
