"""Helpers for the gate tests: real gates in temporary repositories, run through the real CLI.

A module of its own (not conftest): `from conftest import` is ambiguous across test folders."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from prockit import named


ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "gate-demo"
FAKE_KEY = "FAKE-KEY-planted-by-the-sandboy-tests"


def make_repo(base: Path, gate: str, files: dict | None = None) -> Path:
    """A repository under `base` with `.007/gate.toml` = `gate` and the given extra files."""
    repo = base / "repo"
    (repo / ".007").mkdir(parents=True, exist_ok=True)
    (repo / ".007" / "gate.toml").write_text(textwrap.dedent(gate))
    for name, text in (files or {}).items():
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return repo


def run_gate(repo, *args, home=None, env=None, timeout=120) -> subprocess.CompletedProcess:
    """`python -m sandboy.gate.cli REPO ARGS` with a controlled environment."""
    environ = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    if home is not None:
        environ["HOME"] = str(home)
    environ.update(env or {})
    return subprocess.run([sys.executable, "-m", "sandboy.gate.cli", str(repo), *map(str, args)],
                          capture_output=True, text=True, env=environ, timeout=timeout)


def run_json(repo, tmp_path: Path, *args, **kw):
    """(completed process, parsed --json report)."""
    report = tmp_path / f"report-{os.urandom(3).hex()}.json"
    proc = run_gate(repo, "--json", report, *args, **kw)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc, json.loads(report.read_text())


def by_name(report: dict) -> dict:
    return {step["name"]: step for step in report["steps"]}


def survivors(marker: str) -> list:
    """Pids of the processes a test named `marker` (with `exec -a`): the name starts their
    command line, so a shell that merely mentions it in a script is not counted."""
    return named(marker)
