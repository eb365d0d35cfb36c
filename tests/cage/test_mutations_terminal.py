"""The mutation check for the caller's terminal (confine/terminal.py, relay.py, ADR 0011): the command's own
session, and each of fd 0, 1, 2 replaced where it is a terminal, removed in turn; an attack on
the operator's terminal must then succeed, as seen from the host side.

The operator: a forked child of this test that leads a session of its own with a fresh
pseudo-terminal as its controlling terminal and on its fd 0–2 (as a shell's job has), a line
already typed and waiting, echo on. It calls `sandboy.run` in-process (so a mutant set with
pytest's monkeypatch in this test process is inherited; nothing in production reads a switch)
with an attack that reads the typed line through /dev/tty and through stdin, and turns echo off
through stdout and through stderr. Afterwards, on the host side: the typed line must still be
there for the operator's shell, echo must still be on, and the attack's own output must have
reached the screen (the twin: the relay works).

/dev/tty is granted on purpose (as in test_terminal.py): what refuses it must be the session.
Run with the namespace tier forced off (the fallback): under the tier the cage's /dev has no
`tty` node unless `--tty` asks, so without the new session /dev/tty still cannot be opened — the
session mutant is equivalent there (measured: it survives under the tier, and only it), and the
fd mutants are killed the same way with or without the tier.

Budget: 4 mutants, one cage run each: ≈ 1 s; bounded at 60 s.
"""

from __future__ import annotations

import fcntl
import os
import select
import termios

import pytest
from mutantkit import in_child, mutant, report, run_mutants

from sandboy.confine import relay, terminal

pytestmark = [pytest.mark.needs_kernel, pytest.mark.mutation, pytest.mark.without_namespaces]

BUDGET_SECONDS = 60
PY = "/usr/bin/python3"
TYPED = b"typed by the operator\n"
POLICY = {"version": 1,
          "fs": {"read": ["/usr", "/lib", "/lib64", "/etc", "/dev/tty", "/dev/pts"], "exec": ["/usr/bin", "/bin"]}}

ATTACK = r"""
import os, termios

def attempt(fn):
    try:
        return fn()
    except Exception as exc:  # termios.error is not an OSError
        return "refused"

def read_tty():
    fd = os.open("/dev/tty", os.O_RDONLY | os.O_NONBLOCK)  # the policy grants read
    return "read %r" % os.read(fd, 100)

def read_stdin():
    os.set_blocking(0, False)
    return "read %r" % os.read(0, 100)

def echo_off(fd):
    mode = termios.tcgetattr(fd)
    mode[3] &= ~termios.ECHO
    termios.tcsetattr(fd, termios.TCSANOW, mode)
    return "echo off"

print("attack ran:", attempt(read_tty), attempt(read_stdin), attempt(lambda: echo_off(1)),
      attempt(lambda: echo_off(2)), flush=True)
"""


def _operator() -> dict:
    """In the forked child: become the operator's job, run the attack, report the host side."""
    from sandboy import Policy, run

    os.setsid()
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
    for fd in (0, 1, 2):
        os.dup2(slave, fd)
    os.write(master, TYPED)
    result = run([PY, "-c", ATTACK], Policy.from_mapping(POLICY, "<terminal mutants>"), timeout=20)
    echo = bool(termios.tcgetattr(slave)[3] & termios.ECHO)
    os.set_blocking(slave, False)
    try:
        left = os.read(slave, 100)
    except BlockingIOError:
        left = b""
    screen = b""
    while select.select([master], [], [], 0.05)[0]:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        screen += chunk
    return {"rc": result.returncode, "error": result.error, "echo": echo, "left": left.decode(),
            "screen": screen.decode(errors="replace")}


def _breach(report: dict) -> str | None:
    """What the attack did to the operator's terminal (None: nothing; the expectations by hand)."""
    if report["rc"] != 0 or "attack ran:" not in report["screen"]:
        return f"the attack did not run or its output never reached the screen: {report}"
    if report["left"] != TYPED.decode():
        return f"the typed line was taken from the operator's shell (left: {report['left']!r})"
    if not report["echo"]:
        return "the operator's terminal mode was changed (echo off)"
    return None


def _without_new_session(real):
    return lambda ctty=None: tuple(step for step in real(ctty) if step[0] != "new session")


def _keeping(real, index: int):
    """Relay._replace_terminals that leaves fd `index` the caller's own (None: inherited)."""
    def replace(self):
        real(self)
        self.stdio[index] = None
    return replace


def _mutants():
    replace = relay.Relay._replace_terminals
    return [
        mutant("new session", terminal, "session_steps", _without_new_session(terminal.session_steps)),
        mutant("stdin replaced", relay.Relay, "_replace_terminals", _keeping(replace, 0)),
        mutant("stdout replaced", relay.Relay, "_replace_terminals", _keeping(replace, 1)),
        mutant("stderr replaced", relay.Relay, "_replace_terminals", _keeping(replace, 2)),
    ]


def test_every_terminal_protection_has_an_attack_that_succeeds_without_it():
    if not os.path.exists("/dev/ptmx") or not os.path.exists(PY):
        pytest.skip("needs pseudo-terminals and the system python3")
    # the operator in a forked child, which inherits the mutant; the intact cage is judged first
    outcome = run_mutants(_mutants(), lambda _mutant: _breach(in_child(_operator)), budget_seconds=BUDGET_SECONDS,
                          intact_when=("before",))
    report(outcome, "terminal mutants")
