"""Sandboy's TOML files parsed: UTF-8 only, tomllib's slow and crashing inputs refused, every
error a PolicyError naming the file (policies, gate files, capability and adapter files).

Not imported on a policy parse-cache hit (`policy.load.parse_cached`): `tomllib` imports `re`, and
a cached `sandboy run` needs neither (docs/performance.md, session 6).
"""

from sandboy.errors import PolicyError


def parse_toml(raw: bytes, source: str) -> dict:
    import tomllib

    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PolicyError(source, "", f"not UTF-8 (byte {exc.start}); TOML files must be UTF-8") from None
    _refuse_long_dotted_keys(text, source)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(source, "", f"TOML syntax error: {exc}") from None
    except RecursionError:
        raise PolicyError(source, "", "TOML nesting is too deep") from None
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise PolicyError(source, "", f"unusable TOML value: {str(exc)[:200]}") from None


MAX_KEY_PARTS = 256


def _refuse_long_dotted_keys(text: str, source: str) -> None:
    """tomllib's time grows with the square of a dotted key's length: one 40 KB line
    `a.a.a...=1` took 7 s, and the 1 MiB cap allows about an hour, before any step runs.
    Counting dots on the key side of each line is enough to bound it (a false positive needs
    256 dots before an `=`, even inside a string)."""
    for number, line in enumerate(text.splitlines(), 1):
        key = line.split("=", 1)[0]
        if key.count(".") >= MAX_KEY_PARTS:
            raise PolicyError(source, "", f"line {number}: a key of more than {MAX_KEY_PARTS} dotted parts")
