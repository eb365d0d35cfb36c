"""`audit run` finds a phase's program on PATH; a relative PATH entry (`.`, `bin`) named the
directory it was started in — usually the repository under audit (`audit run .`) — so the
repository's own files stood in for the tools, and a FIFO it shipped as `mytool` (mode 0755,
which `shutil.which` accepts) hung the run for ever when Sandboy read its `#!` line (session 7
red team). Now only absolute PATH entries are searched, and the `#!` line is read from a regular
file only, without blocking. Twin: a tool in an absolute PATH directory runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from sandboy.audit import pipeline

EMPTY_SARIF = '{"version":"2.1.0","runs":[]}'


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / ".007").mkdir(parents=True)
    (repo / ".007" / "adapters.toml").write_text(
        'version = 1\n[tools.t]\nadapter = "passthrough"\noutput = { kind = "sarif", from = "stdout" }\n'
        '[[tools.t.phases]]\ninclude = ["system"]\nargv = ["mytool"]\n')
    return repo


def _audit(repo: Path, tmp_path: Path, path: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sandboy", "audit", "run", ".", "--tools=t", "--json",
                           "-o", str(tmp_path / "out.sarif")], cwd=repo, capture_output=True, text=True,
                          timeout=60, env={"PATH": path, "TMPDIR": str(tmp_path),
                                                   **{k: os.environ[k] for k in ("HOME", "PYTHONPATH", "SANDBOY_CACHE_DIR") if k in os.environ}})


def test_a_fifo_the_repository_ships_on_a_relative_path_entry_neither_runs_nor_hangs(tmp_path):
    repo = _repo(tmp_path)
    os.mkfifo(repo / "mytool")
    os.chmod(repo / "mytool", 0o755)
    run = _audit(repo, tmp_path, "/usr/bin:/bin:.")  # timeout=60: it hung for ever
    assert "Traceback" not in run.stderr
    assert "mytool is not installed" in run.stdout + run.stderr


def test_relative_and_empty_path_entries_are_not_searched():
    saved = os.environ.get("PATH")
    try:
        os.environ["PATH"] = "/usr/bin::.:bin:/bin"
        assert pipeline.search_path().split(os.pathsep)[1:] == ["/usr/bin", "/bin"]
    finally:
        os.environ["PATH"] = saved


def test_twin_a_tool_in_an_absolute_path_directory_runs(tmp_path):
    repo = _repo(tmp_path)
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "mytool").write_text(f"#!/bin/sh\necho '{EMPTY_SARIF}'\n")
    (tools / "mytool").chmod(0o755)
    run = _audit(repo, tmp_path, f"/usr/bin:/bin:{tools}")
    assert run.returncode == 0, run.stdout + run.stderr
    assert json.loads((tmp_path / "out.sarif").read_text())["version"] == "2.1.0"


def test_a_fifo_found_as_a_program_is_not_read_into_a_hang(tmp_path):
    """rvsec7: program_dirs reads a found program's `#!` line; a FIFO there (an absolute PATH entry
    into the checkout: an activated venv's bin/) must not block it. In a child process with a
    deadline: a blocking open would never return (no writer comes)."""
    fifo = tmp_path / "bin" / "mytool"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    os.chmod(fifo, 0o755)
    code = f"from sandboy.audit import pipeline; print(pipeline.program_dirs({str(fifo)!r}))"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert run.returncode == 0 and str(fifo.parent) in run.stdout, run.stderr
