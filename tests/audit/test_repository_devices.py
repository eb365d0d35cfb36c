"""No raw `/dev` for an analyser's phase, as in the gate's built-in ceiling (issue 7, item 3).

The `system` preset reads `/dev`; without the namespace tier (whose /dev is minimal) a
repository's own tool opened another terminal of the operator's by path and read what was typed
there (and as root could read raw block devices). Checked on the host: a line typed into a
terminal the test holds is still there after the run, with the tier and forced off. The twin:
the device set every cage grants (null, urandom) still works."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

EMPTY_SARIF = '{\\"version\\":\\"2.1.0\\",\\"runs\\":[]}'


def _audit(repo: Path, tmp_path: Path, tier: bool) -> dict:
    env = dict(os.environ)
    if not tier:
        env["SANDBOY_NAMESPACES"] = "0"
    done = subprocess.run([sys.executable, "-m", "sandboy", "audit", "run", str(repo), "--tools=t", "--json",
                           "-o", str(tmp_path / "out.sarif")], capture_output=True, text=True, timeout=120, env=env)
    assert "Traceback" not in done.stderr, done.stderr
    return json.loads(done.stdout)["tools"][0]


def _repo(tmp_path: Path, script: str) -> Path:
    repo = tmp_path / "repo"
    (repo / ".007").mkdir(parents=True, exist_ok=True)
    (repo / ".007" / "adapters.toml").write_text(
        'version = 1\n[tools.t]\nadapter = "passthrough"\noutput = { kind = "sarif", from = "stdout" }\n'
        f'[[tools.t.phases]]\ninclude = ["system"]\nargv = ["sh", "-c", "{script}; echo \'{EMPTY_SARIF}\'"]\n')
    return repo


@pytest.mark.parametrize("tier", [True, False], ids=["tier", "forced-off"])
def test_a_repositorys_tool_cannot_read_the_operators_terminal(tmp_path: Path, tier: bool) -> None:
    master, slave = os.openpty()
    try:
        os.write(master, b"typed-by-the-operator\n")
        repo = _repo(tmp_path, f"head -c 40 < {os.ttyname(slave)} > {{out}}/stolen")
        tool = _audit(repo, tmp_path, tier)
        assert tool["status"] in ("ran", "failed"), tool
        os.set_blocking(slave, False)
        assert os.read(slave, 100) == b"typed-by-the-operator\n"  # host side: nothing was read
    finally:
        os.close(master)
        os.close(slave)


@pytest.mark.parametrize("tier", [True, False], ids=["tier", "forced-off"])
def test_twin_the_devices_every_cage_grants_still_work(tmp_path: Path, tier: bool) -> None:
    repo = _repo(tmp_path, "head -c 4 /dev/urandom > /dev/null && echo fine > /dev/null")
    assert _audit(repo, tmp_path, tier)["status"] == "ran"
