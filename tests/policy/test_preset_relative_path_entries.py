"""The presets' program lookup (`python`, `node`, `git`) and a relative PATH entry (session 7).

An empty PATH entry (a trailing `:`, as `PATH=$PATH:$EXTRA` with EXTRA unset leaves) or `.` is
the working directory — for an agent's `sandboy run --policy .sandboy/agent.toml`, an untrusted
checkout. Its own `python3 -> ANY/bin/tool` (any executable on the host) was taken for an
interpreter, and the `python` preset granted read on ANY, the program's installation prefix:
the probe read a host file there. Now only absolute PATH entries are looked at. The probe runs
the real CLI and reads a host file; the twin runs the real python3 through the preset."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SANDBOY = os.path.join(os.path.dirname(sys.executable), "sandboy")
POLICY = 'version = 1\ninclude = ["system", "python"]\n[fs]\nread = ["."]\n'


def _run(cwd: Path, path: str, *command: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["PATH"] = path
    return subprocess.run([SANDBOY, "run", "--policy", "agent.toml", "--", *command], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("path", ["/usr/bin:/bin:", "/usr/bin:/bin:.", ":/usr/bin:/bin"])
def test_a_checkouts_own_python3_on_a_relative_path_entry_grants_nothing(tmp_path, path):
    host = tmp_path / "host"
    (host / "bin").mkdir(parents=True)
    (host / "secret").write_text("HOST-SECRET\n")
    (host / "bin" / "tool").write_text("#!/bin/sh\necho tool\n")
    (host / "bin" / "tool").chmod(0o755)
    repo = tmp_path / "checkout"
    repo.mkdir()
    (repo / "agent.toml").write_text(POLICY)
    (repo / "python3").symlink_to(host / "bin" / "tool")  # shipped with the checkout
    run = _run(repo, path, "/bin/cat", str(host / "secret"))
    assert "HOST-SECRET" not in run.stdout  # host side: the file stayed unread
    assert run.returncode != 0


def test_twin_the_real_python3_on_an_absolute_entry_still_runs(tmp_path):
    (tmp_path / "agent.toml").write_text(POLICY)
    run = _run(tmp_path, "/usr/bin:/bin:", "python3", "-c", "print('py ok')")
    assert run.returncode == 0 and run.stdout == "py ok\n", run.stderr
