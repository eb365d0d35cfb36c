"""The `python` preset and the working directory's `.venv`, which may come with an untrusted
checkout (an agent's `sandboy run --policy .sandboy/agent.toml` from a cloned repository's root).

Its `pyvenv.cfg` `home` and its `bin/python3` symlink became grants as written: `home = /bin`
made all of `/` readable, `bin/python3 -> /host/secret` made `/host` readable. Now the project
venv adds only paths inside itself or inside what the preset already reads (the interpreters on
PATH, $VIRTUAL_ENV's, Sandboy's own). Probes run the real CLI and read a host file; twins run a
real venv made from Sandboy's own base interpreter and from /usr/bin/python3."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SANDBOY = os.path.join(os.path.dirname(sys.executable), "sandboy")
POLICY = 'version = 1\ninclude = ["system", "python"]\n[fs]\nread = ["."]\n'


def _run(cwd: Path, *command: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    return subprocess.run([SANDBOY, "run", "--policy", "agent.toml", "--", *command], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    host = tmp_path / "host"
    (host / "bin").mkdir(parents=True)
    (host / "secret").write_text("HOST-SECRET\n")
    repo = tmp_path / "checkout"
    (repo / ".venv" / "bin").mkdir(parents=True)
    (repo / "agent.toml").write_text(POLICY)
    return repo


@pytest.mark.parametrize("plant", ["home = /bin", "home = {host}/bin", "link {host}/secret", "venv link {host}"])
def test_a_checkouts_venv_cannot_widen_the_cage(checkout: Path, plant: str) -> None:
    host = checkout.parent / "host"
    how, _, what = plant.partition(" ")
    if how == "home":
        (checkout / ".venv" / "pyvenv.cfg").write_text(plant.format(host=host) + "\n")
    elif how == "link":
        (checkout / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
        os.symlink(what.format(host=host), checkout / ".venv" / "bin" / "python3")
    else:  # the whole .venv a link out of the working directory
        (host / "pyvenv.cfg").write_text(f"home = {host}/bin\n")
        for f in (checkout / ".venv" / "bin", checkout / ".venv"):
            f.rmdir()
        os.symlink(host, checkout / ".venv")
    done = _run(checkout, "/bin/cat", str(host / "secret"))
    assert "HOST-SECRET" not in done.stdout and done.returncode != 0, done.stdout + done.stderr
    assert "Permission denied" in done.stderr


@pytest.mark.parametrize("base", [sys.base_prefix + "/bin/python3", "/usr/bin/python3"])
def test_twin_a_real_project_venv_still_runs(checkout: Path, base: str) -> None:
    if not os.path.exists(base):
        pytest.skip(f"no {base} here")
    os.rmdir(checkout / ".venv" / "bin")
    os.rmdir(checkout / ".venv")
    subprocess.run([base, "-m", "venv", "--without-pip", str(checkout / ".venv")], check=True, timeout=120)
    done = _run(checkout, ".venv/bin/python", "-c", "import json, ssl, sys; print('ok', sys.prefix)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok ") and done.stdout.strip().endswith(".venv")
