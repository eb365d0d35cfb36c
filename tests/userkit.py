"""Running tests as an ordinary user (docs/findings.md, "Testing as an ordinary user")."""

from __future__ import annotations

import os
import shutil
import subprocess

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
