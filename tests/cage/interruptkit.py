"""Interrupting a `sandboy run` the way an operator's ^C does, without racing the shell.

Why the probes wait for the command's long step (`signal_once_running`) instead of signalling as
soon as the command printed its line: dash — /bin/sh here — defers a SIGINT that reaches it while
it starts a foreground command, from before its vfork until the child's execve, and the child
drops its copy (dash's handler, still installed in the vforked child, ignores signals there).
The shell then waits for that command and dies of the SIGINT only when it ends. Measured without
Sandboy (`sh -c 'echo planted && sleep 8'` in a session of its own, SIGINT to its group right
after the line: 5-10 % held until `sleep` ended; strace: the SIGINT arrives while dash has every
signal blocked around the vfork, and it raises SIGINT on itself after wait4 returns). Through
`sandboy run`, whose wait passes the signal on a few hundred microseconds later, the same window
was hit in 13/50 runs (session 11, ADR 0011 "Session 11"): the probe raced dash, not the cage.
Once the long step has exec'd, a signal to the group reaches it with its default action.
"""

import signal
import time

from prockit import children


def descendants(pid: int) -> list:
    """The pids below `pid` (children first): only the test's own process tree is read."""
    found = []
    for kid in children(pid):
        found.append(kid)
        found.extend(descendants(kid))
    return found


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def wait_for_step(proc, name: str, timeout: float = 20) -> int:
    """The pid of the process named `name` (its comm: set by its execve) below `proc`, once
    there is one; AssertionError after `timeout` seconds or when `proc` ended first."""
    deadline = time.monotonic() + timeout
    while True:
        for pid in descendants(proc.pid):
            if _comm(pid) == name:
                return pid
        assert proc.poll() is None, f"the run ended (rc {proc.returncode}) before {name!r} ran"
        assert time.monotonic() < deadline, f"no {name!r} below the run after {timeout} s"
        time.sleep(0.002)


def signal_once_running(proc, name: str = "sleep", sig: int = signal.SIGINT) -> None:
    """Send `sig` to `sandboy run` (`proc`, as a terminal's ^C reaches the caller's group) once
    the command's step `name` has exec'd (see the module docstring)."""
    wait_for_step(proc, name)
    proc.send_signal(sig)
