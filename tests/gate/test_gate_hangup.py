"""The gate ends the running step's tree however it is itself ended: by a hang-up (SIGHUP: the
terminal or SSH session closed, a service manager) and by an exception out of its output loop
(the console, the log, a bug). Without the namespace tier nothing else ends a step's background
process: it outlived the gate both ways (session 9, redinput9). Checked from the host side by pid,
with the tier and forced off."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import termios
import textwrap
import time

import pytest

from gatekit import kill_survivors, make_repo, survivors

TIERS = pytest.mark.parametrize("namespaces", ["1", "0"], ids=["tier", "forced-off"])

STEP = """
    [[step]]
    name = "s"
    run = "(exec -a {marker} sleep 300) & sleep 0.3; echo $! > leftover.pid; echo up; sleep 300"
"""


def _gate_env(home, namespaces) -> dict:
    environ = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    environ.update(HOME=str(home), SANDBOY_NAMESPACES=namespaces)
    return environ


def _wait_for_marker(proc, marker: str) -> int:
    """The host pid of the step's background process, once it runs under its marker name (under
    the tier the step's own `$!` is a pid of its PID namespace)."""
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, "the gate ended before its step started"
        assert time.monotonic() < deadline, "the step did not start"
        found = survivors(marker)
        if found:
            assert len(found) == 1, found
            return int(found[0])
        time.sleep(0.05)


def _alive(pid: int, marker: str) -> bool:
    """Host side: is `pid` still the step's background process (its name, not a reused pid)?"""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().startswith(marker.encode())
    except (FileNotFoundError, ProcessLookupError):
        return False


def _gone_soon(pid: int, marker: str) -> bool:
    """The gate has exited; give the kernel a moment to finish tearing a killed process down."""
    deadline = time.monotonic() + 5
    while _alive(pid, marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    alive = _alive(pid, marker)
    if alive:
        os.kill(pid, signal.SIGKILL)  # the test cleans up what the gate left
    return not alive and survivors(marker) == []


@TIERS
def test_sighup_to_the_gate_ends_the_running_steps_tree_and_reports_a_stop(tmp_path, fake_home, namespaces):
    # SIGHUP killed the gate by default (only SIGINT/SIGTERM were handled): no reports, and
    # without the tier the step's `sleep 300 &` outlived it
    marker = f"gh-hup-{os.urandom(4).hex()}"
    repo = make_repo(tmp_path, STEP.format(marker=marker))
    report = tmp_path / "report.json"
    proc = subprocess.Popen([sys.executable, "-m", "sandboy.gate.cli", str(repo), "--json", str(report)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_gate_env(fake_home, namespaces), start_new_session=True)
    try:
        pid = _wait_for_marker(proc, marker)
        proc.send_signal(signal.SIGHUP)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert _gone_soon(pid, marker), "the step's background process outlived the gate"
    assert proc.returncode == 130, out + err
    assert "Traceback" not in err, err
    assert "interrupted; the running step's processes were killed" in err
    data = json.loads(report.read_text())
    assert data["status"] == "interrupted" and data["exit_code"] == 130
    assert data["steps"][0]["status"] == "killed"


@TIERS
def test_a_terminal_hang_up_ends_the_running_steps_tree_and_reports_a_stop(tmp_path, fake_home, namespaces):
    # The real thing: the gate runs on a terminal (its controlling terminal, its stderr: the live
    # status line) that hangs up. The kernel sends the session leader SIGHUP, and the status line's
    # next write fails with EIO — which, raised out of the pump, unwound the gate too.
    marker = f"gh-tty-{os.urandom(4).hex()}"
    repo = make_repo(tmp_path, STEP.format(marker=marker))
    report = tmp_path / "report.json"
    master, slave = os.openpty()

    def take_the_terminal():  # after setsid (start_new_session): the pty becomes the gate's terminal
        fcntl.ioctl(2, termios.TIOCSCTTY, 0)

    try:
        proc = subprocess.Popen([sys.executable, "-m", "sandboy.gate.cli", str(repo), "--json", str(report)],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave, text=True,
                                env=_gate_env(fake_home, namespaces), start_new_session=True,
                                preexec_fn=take_the_terminal)
    finally:
        os.close(slave)
    try:
        pid = _wait_for_marker(proc, marker)
        time.sleep(0.6)  # the status line has been drawn at least once
        os.close(master)  # hang up
        master = None
        out, _ = proc.communicate(timeout=30)
    finally:
        if master is not None:
            os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert _gone_soon(pid, marker), "the step's background process outlived the gate"
    assert proc.returncode == 130, out
    data = json.loads(report.read_text())
    assert data["status"] == "interrupted" and data["steps"][0]["status"] == "killed"


BROKEN_CONSOLE = textwrap.dedent("""
    import os, sys
    from sandboy.gate import console

    def tick(self):  # the console breaks once the step's background process runs
        if os.path.exists(sys.argv[2]):
            raise RuntimeError("the console broke (test)")

    console.Console.tick = tick
    from sandboy.gate.cli import main

    sys.exit(main([sys.argv[1]]))
""")


def _run_broken(script: str, repo, home, namespaces) -> tuple:
    """(returncode, stdout, stderr) of `script` (a gate whose console breaks) on `repo`: what it
    prints, the tree it leaves is the test's to look at."""
    proc = subprocess.Popen([sys.executable, "-c", script, str(repo), str(repo / "leftover.pid")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_gate_env(home, namespaces), start_new_session=True)
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out, err


@TIERS
def test_an_exception_out_of_the_output_loop_ends_the_steps_tree_first(tmp_path, fake_home, namespaces):
    # Anything raising in GateRun._pump (here a console method, patched in the gate's own process:
    # no real trigger is left after the status line's EIO was fixed) unwound the gate with the
    # step still running; without the tier its background process outlived the gate.
    marker = f"gh-raise-{os.urandom(4).hex()}"
    repo = make_repo(tmp_path, STEP.format(marker=marker))
    returncode, out, err = _run_broken(BROKEN_CONSOLE, repo, fake_home, namespaces)
    assert (repo / "leftover.pid").exists(), out + err  # the step did start its background process
    pids = kill_survivors(marker)  # the test cleans up what the gate left
    assert pids == [], "the step's background process outlived the gate"
    assert "RuntimeError: the console broke (test)" in err, out + err  # propagated as it was
    assert returncode == 1


BROKEN_CONSOLE_AND_END = BROKEN_CONSOLE.replace("from sandboy.gate.cli import main\n", textwrap.dedent("""\
    from sandboy.confine import supervision

    def end(self, *args, _end=supervision.Supervision.end, **kwargs):
        _end(self, *args, **kwargs)  # the tree IS ended: only the report is at stake
        raise OSError("ending the tree broke (test)")

    supervision.Supervision.end = end
    from sandboy.gate.cli import main
"""))


@TIERS
def test_an_exception_out_of_ending_the_tree_does_not_replace_the_one_being_unwound(tmp_path, fake_home,
                                                                                    namespaces):
    # runner._end_unwound ran run.end() inside the pump's `except`: what end() raised replaced the
    # exception being unwound, so the report named the second failure and lost the cause.
    marker = f"gh-raise2-{os.urandom(4).hex()}"
    repo = make_repo(tmp_path, STEP.format(marker=marker))
    assert "def end" in BROKEN_CONSOLE_AND_END
    returncode, out, err = _run_broken(BROKEN_CONSOLE_AND_END, repo, fake_home, namespaces)
    assert (repo / "leftover.pid").exists(), out + err
    assert kill_survivors(marker) == [], "the step's background process outlived the gate"
    last = err.rstrip().splitlines()
    # the report is the original exception (Python prints the final one last, notes below it) ...
    reported = next(line for line in reversed(last) if line.startswith(("RuntimeError", "OSError")))
    assert reported == "RuntimeError: the console broke (test)", out + err
    # ... and the second is not lost: it is said with it
    assert "ending the tree broke (test)" in err, out + err
    assert returncode == 1


def test_twin_a_gate_started_under_nohup_keeps_running_through_sighup(tmp_path, fake_home):
    # an ignored SIGHUP (nohup) stays ignored: the operator asked the gate to outlive the terminal
    repo = make_repo(tmp_path, """
        [[step]]
        name = "s"
        run = "echo up > up; sleep 2; echo done"
    """)
    proc = subprocess.Popen(["nohup", sys.executable, "-m", "sandboy.gate.cli", str(repo)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_gate_env(fake_home, "1"), start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not (repo / "up").exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        proc.send_signal(signal.SIGHUP)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out + err
    assert "[s] done" in out
