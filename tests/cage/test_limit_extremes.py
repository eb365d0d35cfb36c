"""Limits at the edge of what a policy accepts (`policy.load._count`: up to 2**40), session 9
review. A `limits.wall_seconds` of 25 days or more overflowed poll(2)'s int of milliseconds in the
supervisor: `sandboy run` ended in a traceback (exit 1) and the API reported "the sandboy
supervisor died" (125) — for any command, before its deadline mattered. `limits.processes` above
the kernel's PID_MAX_LIMIT was refused by the pids cgroup (EINVAL), which as root read as "no pids
cgroup could be created"."""

from __future__ import annotations

import subprocess
import sys

import sandboy
from sandboy.policy.load import MAX_PROCESSES
from sandboy.policy.model import Policy

BASE = {"version": 1, "fs": {"read": ["/usr", "/lib", "/lib64", "/bin", "/etc"],
                              "exec": ["/usr/bin", "/bin", "/usr/lib", "/lib", "/lib64"]}}
HUGE = 1 << 40  # the most _count accepts: about 34,800 years


def _policy_file(tmp_path, limits: str):
    path = tmp_path / "p.toml"
    path.write_text('version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/bin", "/etc"]\n'
                    'exec = ["/usr/bin", "/bin", "/usr/lib", "/lib", "/lib64"]\n[limits]\n' + limits)
    return path


def _run(policy, *argv):
    return subprocess.run([sys.executable, "-m", "sandboy", "run", "--policy", str(policy), "--", *argv],
                          capture_output=True, text=True, timeout=60)


def test_a_wall_time_of_thousands_of_years_runs_the_command(tmp_path):
    proc = _run(_policy_file(tmp_path, f"wall_seconds = {HUGE}\n"), "/bin/sh", "-c", "echo ran")
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 0 and proc.stdout == "ran\n", proc.stderr
    policy = Policy.from_mapping(BASE | {"limits": {"wall_seconds": HUGE}}, "huge")
    result = sandboy.run(["/bin/true"], policy)  # the API's supervisor process died of the same overflow
    assert (result.outcome, result.returncode) == ("exited", 0), result.error


def test_twin_a_short_wall_time_still_ends_the_command(tmp_path):
    proc = _run(_policy_file(tmp_path, "wall_seconds = 1\n"), "/bin/sleep", "30")
    assert proc.returncode == 128 + 9, proc.stderr


def test_more_processes_than_the_kernel_has_is_a_policy_error_naming_the_key(tmp_path):
    proc = _run(_policy_file(tmp_path, f"processes = {HUGE}\n"), "/bin/true")
    assert proc.returncode == 2, proc.stderr
    assert "p.toml: limits.processes: " in proc.stderr and f"at most {MAX_PROCESSES}" in proc.stderr
    twin = _run(_policy_file(tmp_path, "processes = 64\n"), "/bin/sh", "-c", "echo ran")
    assert twin.returncode == 0 and twin.stdout == "ran\n", twin.stderr
