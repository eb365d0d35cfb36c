"""Running tests as an ordinary user (docs/findings.md, "Testing as an ordinary user")."""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import subprocess
import tempfile

import pytest


def skip_unless_nobody_can_run() -> None:
    """Skip the calling test unless it can become uid 65534 (root and setpriv) and that user has a
    system python3 >= 3.11 to start Sandboy with."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root (to become uid 65534) and setpriv")
    check = subprocess.run(["/usr/bin/python3", "-c", "import sys; print(sys.version_info >= (3, 11))"],
                           capture_output=True, text=True)
    if check.stdout.strip() != "True":
        pytest.skip("needs a system python3 >= 3.11 that uid 65534 can run")


@contextlib.contextmanager
def world_readable_tmp(prefix: str = "sandboy-user-"):
    """A fresh directory under /tmp that uid 65534 can reach, removed afterwards. Not below pytest's
    tmp_path: a pytest session makes /tmp/pytest-of-<user> private again when it starts, and other
    sessions start at any time on a shared machine (a test as 65534 then skips or fails at random)."""
    path = tempfile.mkdtemp(prefix=prefix)
    os.chmod(path, 0o755)
    try:
        yield pathlib.Path(path)
    finally:
        shutil.rmtree(path, ignore_errors=True)


NOBODY = 65534


def as_user(argv=(), uid: int = NOBODY) -> list:
    """`argv` run as the ordinary user `uid` (its own gid, no supplementary groups, no inheritable
    capabilities) by a test running as root; with no `argv`, the prefix to put before one."""
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all", *argv]
