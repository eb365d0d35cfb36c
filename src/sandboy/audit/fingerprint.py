"""`partialFingerprints.primaryLocationLineHash`, computed the way GitHub code scanning does.

GitHub's upload action (github/codeql-action, src/fingerprints.ts) fingerprints a result by a
rolling hash of the source starting at its primary location's start line: per line, the first
100 characters from the start of that line onward (spaces and tabs skipped, CR / CRLF / LF all
read as LF, then an end-of-file marker 0xFFFF and zeros), polynomial base 37 in 64-bit
wrap-around arithmetic, printed as unsigned hex without leading zeros, plus `:N` where N counts
how many earlier lines had the same hash. Characters are UTF-16 code units (JavaScript strings)
of the file decoded as UTF-8. Matching it matters: alerts keep their identity across uploads
only when our fingerprint equals the one GitHub would compute. This is our own implementation,
checked against the upstream test vectors
(tests/audit/test_merge.py::test_line_hashes_match_githubs_upload_action).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import unquote

from sandboy.audit.sarif import as_array, as_object, member_bytes

BLOCK_SIZE = 100
MOD = 37
MASK = (1 << 64) - 1
FIRST_MOD = pow(MOD, BLOCK_SIZE, 1 << 64)
EOF = 0xFFFF
MAX_SOURCE_BYTES = 32 << 20  # a "source file" larger than this is not hashed (nor by us read)
_SPACE, _TAB, _LF, _CR = 0x20, 0x09, 0x0A, 0x0D


def _code_units(text: str) -> Iterator[int]:
    for ch in text:
        o = ord(ch)
        if o > 0xFFFF:  # a JavaScript string holds a surrogate pair here
            o -= 0x10000
            yield 0xD800 + (o >> 10)
            yield 0xDC00 + (o & 0x3FF)
        else:
            yield o


# How often (in code units) a hash with a deadline looks at the clock: ≈ 20 ms of work here.
DEADLINE_EVERY = 1 << 16


class PastDeadline(Exception):
    """The caller's deadline passed before the hashes were done (`audit run`'s time budget)."""


def line_hashes(text: str, deadline=None) -> list[str]:
    """The `hash:count` of every line of `text`, index 0 = line 1. `deadline` (time.monotonic()):
    PastDeadline once it has passed (a 32 MiB file takes tens of seconds here)."""
    window = [0] * BLOCK_SIZE
    line_at = [-1] * BLOCK_SIZE   # the line that starts at this window slot, or -1
    out: list[str] = []
    counts: dict[str, int] = {}
    state = {"hash": 0, "index": 0}

    def emit() -> None:
        value = format(state["hash"], "x")
        counts[value] = counts.get(value, 0) + 1
        line = line_at[state["index"]]
        while len(out) < line:
            out.append("")
        out[line - 1] = f"{value}:{counts[value]}"
        line_at[state["index"]] = -1

    def update(current: int) -> None:
        i = state["index"]
        begin = window[i]
        window[i] = current
        state["hash"] = (MOD * state["hash"] + current - FIRST_MOD * begin) & MASK
        state["index"] = (i + 1) % BLOCK_SIZE

    line_number = 0
    line_start = True
    prev_cr = False

    def process(current: int) -> None:
        nonlocal line_number, line_start, prev_cr
        if current in (_SPACE, _TAB) or (prev_cr and current == _LF):
            prev_cr = False
            return
        if current == _CR:
            current, prev_cr = _LF, True
        else:
            prev_cr = False
        if line_at[state["index"]] != -1:
            emit()
        if line_start:
            line_start = False
            line_number += 1
            line_at[state["index"]] = line_number
        if current == _LF:
            line_start = True
        update(current)

    if deadline is None:
        for unit in _code_units(text):
            process(unit)
    else:
        import time

        for n, unit in enumerate(_code_units(text)):
            if not n % DEADLINE_EVERY and time.monotonic() >= deadline:
                raise PastDeadline()
            process(unit)
    process(EOF)
    for _ in range(BLOCK_SIZE):
        if line_at[state["index"]] != -1:
            emit()
        update(0)
    return out


def hash_file(path: Path, deadline=None) -> list[str] | None:
    """The line hashes of a source file, or None when it cannot be one: one bounded read (a file
    that turns out larger than MAX_SOURCE_BYTES is not hashed; no size is trusted before the
    read), the last component not followed if it became a symlink since source_path resolved it,
    and nothing but a regular file read (a FIFO planted in the tree must not block the merge)."""
    from sandboy.regular_files import read_regular

    try:
        data = read_regular(str(path), MAX_SOURCE_BYTES)
    except OSError:
        return None
    if data is None:
        return None
    return line_hashes(data.decode("utf-8", "replace"), deadline)


def source_path(location: dict[str, Any], artifacts: list[Any], root: Path) -> Path | None:
    """The file a result's artifactLocation names, inside `root`, as GitHub resolves it."""
    if "uri" not in location and isinstance(location.get("index"), int) and not isinstance(location.get("index"), bool):
        i = location["index"]
        if not 0 <= i < len(artifacts) or not isinstance(artifacts[i], dict) or not isinstance(artifacts[i].get("location"), dict):
            return None
        location = artifacts[i]["location"]
    uri = location.get("uri")
    if not isinstance(uri, str):
        return None
    uri = unquote(uri)
    uri = uri.removeprefix("file://")
    if "://" in uri or "\0" in uri:
        # `%00` decodes to a NUL no file name holds, and os.path raises ValueError on it: a
        # repository tool's result naming `a%00.py` ended `audit run` (and `merge --source-root`)
        # in an internal error, every tool's results lost (redinput12)
        return None
    from sandboy.paths import is_within

    base = os.path.realpath(root)
    full = os.path.realpath(uri if uri.startswith("/") else os.path.join(base, uri))
    if not is_within(full, base):
        return None  # outside the source root (also after following symlinks)
    return Path(full) if os.path.isfile(full) else None


def add_fingerprints(doc: dict[str, Any], root: Path, deadline=None) -> tuple[int, int]:
    """Set primaryLocationLineHash on every result that lacks one and whose primary location has a
    start line in a file under `root`. Existing values are kept. Returns how many were added and
    the bytes they add to the compact output (`sarif.member_bytes`: merge's size bound allows them).
    `deadline` (time.monotonic()): PastDeadline once it has passed, some results then hashed and
    others not (the caller drops the document)."""
    wanted: dict[Path, list[tuple[dict[str, Any], int]]] = {}
    for run in as_array(doc.get("runs")):
        if not isinstance(run, dict):
            continue
        artifacts = as_array(run.get("artifacts"))
        for n, result in enumerate(as_array(run.get("results"))):
            if deadline is not None and not n % 256:  # (each result's path is resolved: a stat or more)
                import time

                if time.monotonic() >= deadline:
                    raise PastDeadline()
            if not isinstance(result, dict):
                continue
            if as_object(result.get("partialFingerprints")).get("primaryLocationLineHash"):
                continue
            primary = as_object((as_array(result.get("locations")) or [{}])[0])
            physical = as_object(primary.get("physicalLocation"))
            where = physical.get("artifactLocation")
            line = as_object(physical.get("region")).get("startLine")
            if not isinstance(where, dict) or not isinstance(line, int) or isinstance(line, bool) or line < 1:
                continue
            path = source_path(where, artifacts, root)
            if path is not None:
                wanted.setdefault(path, []).append((result, line))
    added = added_bytes = 0
    for path, items in wanted.items():
        hashes = hash_file(path, deadline)
        if hashes is None:
            continue
        for result, line in items:
            value = hashes[line - 1] if line <= len(hashes) else None
            if value:
                fps = result.get("partialFingerprints")
                if isinstance(fps, dict):
                    added_bytes += member_bytes("primaryLocationLineHash", value)
                else:
                    added_bytes += member_bytes("partialFingerprints", {"primaryLocationLineHash": value})
                    fps = result["partialFingerprints"] = {}
                fps["primaryLocationLineHash"] = value
                added += 1
    return added, added_bytes
