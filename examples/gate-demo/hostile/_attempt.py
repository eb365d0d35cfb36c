"""Shared by the hostile scripts: try one thing, print what happened and the kernel's answer.

A hostile script exits 1 when every attempt was refused (the step FAILS: the attack failed) and
0 when any attempt got through (the step PASSES: that would be a breach).
"""

import errno
import os
import sys

escaped = []


def attempt(what: str, action) -> None:
    try:
        detail = action()
    except OSError as exc:
        name = errno.errorcode.get(exc.errno or 0) or type(exc).__name__
        print(f"REFUSED: {what}: {name} ({exc.strerror or exc})", flush=True)
        return
    escaped.append(what)
    print(f"ESCAPED: {what}: {detail}", flush=True)


def finish() -> None:
    if escaped:
        print(f"BREACH: {len(escaped)} attempt(s) got through", flush=True)
        sys.exit(0)
    sys.exit(1)


def key_or_placeholder() -> bytes:
    """What an exfiltrating step sends: the key if it could read it, else a marker."""
    try:
        with open(os.path.join(os.environ.get("HOME", "/root"), ".ssh", "id_ed25519"), "rb") as fh:
            return fh.read()
    except OSError:
        return b"(the key was unreadable; sending this instead)\n"
