"""Helpers for the gate tests: real gates in temporary repositories, run through the real CLI.

A module of its own (not conftest): `from conftest import` is ambiguous across test folders."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
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


def kill_survivors(marker: str) -> list:
    """The processes still named `marker` (`survivors`), killed: the test cleans up what a gate
    left, then asserts on the list."""
    alive = survivors(marker)
    for pid in alive:
        os.kill(int(pid), 9)
    return alive


def start_gate(repo, *args, home) -> subprocess.Popen:
    """`python -m sandboy.gate.cli REPO ARGS` in the background (HOME = `home`), its output piped:
    for a probe that looks at a step from the host while it runs. End it with `stop_gate`."""
    return subprocess.Popen([sys.executable, "-m", "sandboy.gate.cli", str(repo), *map(str, args)],
                            env={**os.environ, "HOME": str(home)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def stop_gate(gate: subprocess.Popen) -> None:
    """Kill a background gate that is still running (a probe that failed half-way)."""
    if gate.poll() is None:
        gate.kill()
        gate.wait()


# Memory-hog steps (ADR 0027). The pages are touched: b"x" * n writes n bytes (a bytearray(n) would
# be calloc'd, never touched). Never tested by exhausting the shared machine: a hog is 256 MiB,
# bounded at 64.
HOG = "python3 -c 'import time; b = b\"x\" * (256 << 20); time.sleep(1); print(\"SURV\" + \"IVED\", len(b))'"
SMALL = "python3 -c 'b = b\"x\" * (16 << 20); print(\"USED\", len(b) >> 20)'"


def threaded_hog(mib: int) -> str:
    """A command touching `mib` MiB from a thread that is not its process's first."""
    return ("python3 -c 'import threading, time; kept = []; "
            f"t = threading.Thread(target=lambda: kept.append(b\"x\" * ({mib} << 20))); t.start(); t.join(); "
            "time.sleep(0.5); print(\"USED\", len(kept[0]) >> 20)'")


def assert_killed_out_of_memory(step: dict, mib: int) -> None:
    """A step's report entry: killed as out of memory at its `mib` MiB bound, its peak (read by
    the gate from its group) within the bound, the whole step dead together (its shell did not
    sleep on after the hog alone was killed)."""
    assert step["status"] == "killed", step
    assert "out of memory" in step["error"] and f"{mib} MiB" in step["error"], step
    assert step["enforced"]["memory"]["peak_mib"] <= mib, step
    assert step["duration"] < 30, step


def memory_group_of(repo: Path, name: str, gate: subprocess.Popen, seconds: float = 90) -> str:
    """The memory cgroup (/sys/fs/cgroup/memory/...) a running step is in, from the file `NAME.txt`
    its `grep memory /proc/self/cgroup > NAME.txt` wrote; fails if the gate ends first."""
    deadline = time.monotonic() + seconds
    path = repo / f"{name}.txt"
    while not path.exists() or not path.read_text().strip():
        assert time.monotonic() < deadline and gate.poll() is None, gate.communicate()
        time.sleep(0.05)
    return "/sys/fs/cgroup/memory" + path.read_text().strip().split(":", 2)[2]
