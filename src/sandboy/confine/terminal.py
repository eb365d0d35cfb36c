"""The caller's terminal never reaches a confined command (issue 7; docs/adr/0011-the-callers-terminal.md).

Every confined command starts a session of its own (setsid): it has no controlling terminal, so
`/dev/tty` cannot be opened, `tcsetpgrp` has nothing to act on, and the caller's job control does
not apply to it. A new session alone is not enough: a terminal fd inherited on 0–2 can still be
read (a process outside the terminal's session is never stopped by SIGTTIN), written and ioctl'd
(termios, TCFLSH) — by a leftover background process too, after Sandboy returned. So where fd 0–2
would be a terminal, the command gets instead:

  stdin            /dev/null
  stdout, stderr   a pipe that the supervisor copies to the terminal while the command runs; one
                   pipe for both when they are the same terminal, so their order is kept

or, with `tty=True` (`sandboy run --tty`), a fresh pseudo-terminal as its controlling terminal,
relayed both ways (the caller's terminal in raw mode, the window size passed on and kept up to
date on SIGWINCH) and hung up when the command ends, as sudo's use_pty does.

This module decides and sets up the session (it is on every `sandboy run`'s path: stdlib `os`
only); the relay that stands between a supervised command and the terminal is `relay.py`, which
only supervised runs and the gate's interactive steps import (docs/performance.md, session 6).
"""

import os

from sandboy.confine._libc import SYS_IOCTL, SYS_SETSID

TIOCSCTTY = 0x540E
# <errno.h> values (Linux's ABI, like the ioctl numbers above): `has_controlling_terminal` runs
# on every `sandboy run`, and the errno module builds a table of ≈ 130 names (≈ 0.07 ms)
EIO = 5
ENXIO = 6


def has_controlling_terminal() -> bool:
    """Does this process have a controlling terminal? Opening /dev/tty answers (ENXIO: none) in
    ≈ 25 µs; the first read of /proc/self/stat, the fallback, took 10–45 ms here under load."""
    try:
        os.close(os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK | os.O_CLOEXEC))
        return True
    except OSError as exc:
        if exc.errno == ENXIO:
            return False
        if exc.errno == EIO:  # hung up, still ours
            return True
    try:  # no /dev/tty here (a container): the session's terminal from /proc
        fd = os.open("/proc/self/stat", os.O_RDONLY | os.O_CLOEXEC)
        try:
            data = os.read(fd, 4096)
        finally:
            os.close(fd)
        return int(data.rsplit(b")", 1)[1].split()[4]) != 0
    except (OSError, ValueError, IndexError):
        return True  # cannot tell: take the side that keeps a relay


def any_terminal(stdio=(None, None, None)) -> bool:
    """Is any of the command's fd 0–2 (None: this process's own) a terminal?"""
    return any(os.isatty(i if fd is None else fd) for i, fd in enumerate(stdio))


def exec_in_place_possible(controlling_terminal=None) -> bool:
    """May this process become the command (exec mode)? Only when nothing of a terminal would
    reach it: no terminal on fd 0–2 (it must be replaced and relayed), no controlling terminal
    (the command would leave the operator's job, so ^C would no longer reach it: a supervisor
    forwards it), and not a process-group leader outside its own session (setsid refuses those).
    `controlling_terminal`: `has_controlling_terminal()` when the caller has asked already."""
    if any_terminal():
        return False
    if has_controlling_terminal() if controlling_terminal is None else controlling_terminal:
        return False
    pid = os.getpid()
    return os.getsid(0) == pid or os.getpgrp() != pid


def describe(tty: bool = False) -> str:
    """What the command would get in place of this process's terminal (for --dry-run)."""
    if tty:
        return "own session; a fresh pseudo-terminal, relayed (--tty)"
    kinds = []
    for fd, instead in ((0, "/dev/null"), (1, "a relayed pipe"), (2, "a relayed pipe")):
        if os.isatty(fd):
            kinds.append(f"fd {fd} -> {instead}")
    return "own session; no terminal" + (f" ({', '.join(kinds)})" if kinds else "")


def enter_own_session() -> None:
    """Exec mode: make this process (the command to be) the leader of a new session."""
    if os.getsid(0) != os.getpid():
        os.setsid()


def session_steps(ctty=None) -> tuple:
    """Plan steps for a forked child: a new session; with `ctty` (a pty slave fd), that
    terminal as its controlling terminal (the child is its session leader, so TIOCSCTTY works)."""
    steps = (("new session", (SYS_SETSID, False)),)
    if ctty is not None:
        steps += (("take the new pseudo-terminal as controlling terminal", (SYS_IOCTL, False, ctty, TIOCSCTTY, 0)),)
    return steps
