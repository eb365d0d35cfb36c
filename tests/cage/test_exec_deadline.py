"""`limits.wall_seconds` in exec mode under the namespace tier (session 12): `sandboy run` waits for
the namespace's init in C (`_libc.wait_forwarding`) with the policy's deadline, and kills the init
once it passes — the kernel then kills every process of its PID namespace — instead of paying a
supervisor for it. What a supervised run reported for a timeout is reported the same (137, the
`--status-json` outcome "timed_out", signal 9). Both executors (the C one and SANDBOY_NATIVE=0's
Python stand-in); every process checked gone from the HOST side, by its unique name."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from prockit import named
from supervisedkit import SH, until_up

SANDBOY = os.path.join(os.path.dirname(sys.executable), "sandboy")
EXECUTORS = pytest.mark.parametrize("native", ["1", "0"], ids=["C", "python"])


def _policy(tmp_path, wall: int):
    policy = tmp_path / "p.toml"
    policy.write_text('version = 1\n[fs]\nread = ["/usr", "/etc/ld.so.cache"]\nexec = ["/usr/bin"]\n'
                      f'write = ["{tmp_path}"]\n[limits]\nwall_seconds = {wall}\n')
    return policy


def _start(tmp_path, script: str, native: str, wall: int, *options):
    return subprocess.Popen([SANDBOY, "run", *options, "--policy", str(_policy(tmp_path, wall)), "--", SH, "-c", script],
                            cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ, SANDBOY_NATIVE=native, SANDBOY_PLAN_CACHE="0"),
                            start_new_session=True)


def _finish(cli, seconds: float = 60):
    try:
        out, err = cli.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        cli.kill()
        cli.wait()
        raise AssertionError("the run outlived its deadline") from None
    return cli.returncode, out.decode(), err.decode()


def _marker(tag: str) -> str:
    return f"exec-deadline-{tag}-{os.getpid()}-{time.monotonic_ns()}"


def _gone(marker: str, seconds: float = 5) -> list:
    deadline = time.monotonic() + seconds
    while named(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = named(marker)
    for pid in left:
        os.kill(pid, signal.SIGKILL)  # the test cleans up what the run left
    return left


def test_a_deadline_under_the_tier_runs_in_exec_mode(tmp_path):
    """The decision the probes below rely on: no supervisor for the policy's deadline under the
    tier (--dry-run says what `sandboy run` would do)."""
    proc = subprocess.run([SANDBOY, "run", "--dry-run", "--json", "--policy", str(_policy(tmp_path, 60)), "--", "/usr/bin/true"],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["supervised"] is False
    forced_off = subprocess.run([SANDBOY, "run", "--dry-run", "--json", "--policy", str(_policy(tmp_path, 60)), "--", "/usr/bin/true"],
                                capture_output=True, text=True, stdin=subprocess.DEVNULL, cwd=tmp_path,
                                env=dict(os.environ, SANDBOY_NAMESPACES="0"))
    assert json.loads(forced_off.stdout)["supervised"] is True  # the twin: no PID namespace, a supervisor


@EXECUTORS
def test_a_command_past_its_deadline_is_killed_with_every_process_of_it(tmp_path, native):
    marker = _marker("sleep")
    up = tmp_path / "up"
    status = tmp_path / "status.json"
    # a background process, and a grandchild that left the session, double-forked and ignores
    # every signal it can
    script = (f"(exec -a {marker}-bg /usr/bin/sleep 300) & "
              f"/usr/bin/setsid {SH} -c '( trap \"\" HUP INT TERM QUIT USR1 USR2; exec -a {marker}-away /usr/bin/sleep 300 ) &' ; "
              f"echo > {up}; exec -a {marker}-fg /usr/bin/sleep 300")
    started = time.monotonic()
    cli = _start(tmp_path, script, native, 3, "--status-json", str(status))
    until_up(cli, lambda: up.exists() and len(named(marker)) == 3)
    rc, _, err = _finish(cli)
    took = time.monotonic() - started
    assert rc == 128 + 9, err
    assert _gone(marker) == [], "a process of the timed-out run outlived it"
    assert 2.5 < took < 30, took  # at the deadline, not before
    doc = json.loads(status.read_text())
    assert (doc["outcome"], doc["returncode"], doc["signal"]) == ("timed_out", 137, 9), doc
    assert doc["enforced"]["limits"] == {"wall_seconds": 3}


@EXECUTORS
def test_twin_a_command_done_before_its_deadline_keeps_its_status(tmp_path, native):
    status = tmp_path / "status.json"
    rc, out, err = _finish(_start(tmp_path, "echo ran; exit 3", native, 60, "--status-json", str(status)))
    assert (rc, out) == (3, "ran\n"), err
    assert json.loads(status.read_text())["outcome"] == "exec"


@EXECUTORS
def test_sigterm_to_the_run_still_reaches_the_command(tmp_path, native):
    marker = _marker("term")
    up = tmp_path / "up"
    script = f"trap 'echo got-term > {tmp_path}/term; exit 7' TERM; echo > {up}; exec -a {marker} /usr/bin/sleep 300 & wait"
    cli = _start(tmp_path, script, native, 120)
    until_up(cli, lambda: up.exists() and named(marker))
    cli.send_signal(signal.SIGTERM)
    rc, _, err = _finish(cli)
    assert rc == 7, err
    assert (tmp_path / "term").read_text() == "got-term\n"
    assert _gone(marker) == []
