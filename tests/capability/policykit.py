"""The operator's `sandboy` command line for the capability tests (a unique module name: see
tests/cage/cagekit.py).

`-P`: the command runs in the repository under test, and `python -m` would otherwise put that
working directory first on sys.path, where a repository shipping a `sandboy/` folder would be
imported instead of the package under test.
"""

from __future__ import annotations

import os
import subprocess
import sys

SANDBOY = [sys.executable, "-P", "-m", "sandboy"]


def sandboy_cli(args, cwd, home) -> subprocess.CompletedProcess:
    """`sandboy ARGS` run in CWD by an operator whose home is HOME."""
    env = {**os.environ, "HOME": str(home)}
    return subprocess.run([*SANDBOY, *args], cwd=cwd, capture_output=True, text=True, timeout=120, env=env)
