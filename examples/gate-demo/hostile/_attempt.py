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


def operator_home() -> str:
    """Where the operator's secrets are. A gate step's HOME is its own private directory, so look
    where a real attacker would: up from the checkout (repositories live in homes), then the
    passwd entry of the user the step runs as."""
    here = os.getcwd()
    while here != "/":
        here = os.path.dirname(here)
        if os.path.isdir(os.path.join(here, ".ssh")):
            return here
    import pwd

    return pwd.getpwuid(os.getuid()).pw_dir


def key_or_placeholder() -> bytes:
    """What an exfiltrating step sends: the key if it could read it, else a marker."""
    try:
        with open(os.path.join(operator_home(), ".ssh", "id_ed25519"), "rb") as fh:
            return fh.read()
    except OSError:
        return b"(the key was unreadable; sending this instead)\n"
