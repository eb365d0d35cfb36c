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
from pathlib import Path

SANDBOY = [sys.executable, "-P", "-m", "sandboy"]


def operator_home(tmp_path) -> Path:
    """`tmp_path/home`, the operator's home, holding a file of theirs: `work/notes.txt` = "mine\n"
    (what a hostile policy's write grant must never reach)."""
    home = tmp_path / "home"
    (home / "work").mkdir(parents=True)
    (home / "work/notes.txt").write_text("mine\n")
    return home


def sandboy_cli(args, cwd, home) -> subprocess.CompletedProcess:
    """`sandboy ARGS` run in CWD by an operator whose home is HOME."""
    env = {**os.environ, "HOME": str(home)}
    return subprocess.run([*SANDBOY, *args], cwd=cwd, capture_output=True, text=True, timeout=120, env=env)
