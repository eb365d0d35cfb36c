"""A write root of `/` is refused before the command runs (exit 2 naming fs.write and the fix).

The post-run git check (ADR 0019) walks every write root for a repository the command may have
planted. `/` (with /proc, /sys and every mount) is beyond its bounds: `sandboy run` with
`write = ["/"]` ran the command, walked for 2 min 16 s here, then failed the run closed (125)
after the command had done its work. Now the decision is made up front; a whole home or another
huge tree cannot be told by its path, so there the walk's bound stays and its message says what
to do (`gitcheck.GitSnapshot.verify`)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

import sandboy
from sandboy.confine import gitcheck
from sandboy.errors import PolicyError

SANDBOY = os.path.join(os.path.dirname(sys.executable), "sandboy")
EXEC = '["/usr/bin", "/bin", "/usr/lib", "/lib", "/lib64"]'


def _policy(tmp_path, write: str, extra: str = "") -> str:
    path = tmp_path / "p.toml"
    path.write_text(f'version = 1\n[fs]\nread = ["/"]\nexec = {EXEC}\nwrite = {write}\n{extra}')
    return str(path)


def _run(policy: str, marker) -> subprocess.CompletedProcess:
    return subprocess.run([SANDBOY, "run", "--policy", policy, "--", "/bin/sh", "-c", f"echo ran > {marker}"],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("root", ['["/"]', '["/usr/.."]', '["{tmp}", "/"]'])
def test_a_whole_file_system_write_root_is_refused_before_the_command_runs(tmp_path, root) -> None:
    marker = tmp_path / "marker"
    started = time.monotonic()
    done = _run(_policy(tmp_path, root), marker)
    assert done.returncode == 2, done.stderr
    assert time.monotonic() - started < 20  # not a walk of the machine
    assert "p.toml: fs.write: " in done.stderr and "is the whole file system" in done.stderr
    assert "fs.protect_defaults = false" in done.stderr and "Traceback" not in done.stderr
    assert not marker.exists()  # host side: the command never ran


def test_the_api_refuses_it_too(tmp_path) -> None:
    marker = tmp_path / "marker"
    policy = sandboy.Policy.from_mapping({"version": 1, "fs": {"read": ["/"], "exec": ["/usr/bin", "/bin", "/lib", "/usr/lib"],
                                                               "write": ["/"]}})
    with pytest.raises(PolicyError, match="is the whole file system"):
        sandboy.run(["/bin/sh", "-c", f"echo ran > {marker}"], policy)
    assert not marker.exists()


def test_twins_without_the_check_or_with_a_project_directory_the_command_runs(tmp_path) -> None:
    marker = tmp_path / "marker"
    done = _run(_policy(tmp_path, '["/"]', "protect_defaults = false\n"), marker)
    assert done.returncode == 0, done.stderr
    assert marker.read_text() == "ran\n"
    marker.unlink()
    done = _run(_policy(tmp_path, f'["{tmp_path}"]'), marker)
    assert done.returncode == 0, done.stderr
    assert marker.read_text() == "ran\n"


def test_the_walk_bound_says_what_to_do(tmp_path) -> None:
    """A tree too big to walk is found only by walking it: the finding fails the run closed and
    says how to grant less (or go without the check)."""
    for i in range(30):
        (tmp_path / f"d{i}").mkdir()
    snap = gitcheck.snapshot([str(tmp_path)])
    findings = snap.verify(budget=10)
    why = findings[-1].why
    assert findings[-1].path is None and "more than 10 entries" in why and "not checked to the end" in why
    assert "grant a narrower fs.write" in why and "fs.protect_defaults = false" in why
