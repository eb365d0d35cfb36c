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

Nothing here is imported on the exec-mode path except `exec_in_place_possible` and
`enter_own_session` (stdlib `os` only); the relay imports `select`, `termios` and `tty` when used.
"""

import os

from sandboy.confine._libc import SYS_IOCTL, SYS_SETSID

TIOCSCTTY = 0x540E
TIOCGWINSZ = 0x5413
TIOCSWINSZ = 0x5414
DRAIN_LIMIT = 1 << 20  # bytes copied after the command ended (a leftover could write forever)
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


def _window_size(fd: int):
    import fcntl

    try:
        return fcntl.ioctl(fd, TIOCGWINSZ, bytes(8))
    except OSError:
        return None


class Relay:
    """What stands between the command and the caller's terminal; made in the supervisor before
    the command starts. `stdio` and `ctty` are what the command gets; `active` says whether
    anything is relayed at all (nothing is when no fd is a terminal and no pty was asked for)."""

    def __init__(self, stdio=(None, None, None), tty: bool = False, tee=None):
        self.caller = [i if fd is None else fd for i, fd in enumerate(stdio)]
        self.stdio = list(stdio)
        self.ctty = None
        self.master = None
        self._child_ends: list[int] = []   # closed here once the command holds them
        self._copies: dict[int, int] = {}  # our read end -> the caller's fd it is copied to
        self._to_master = b""               # typed input not yet taken by the pty
        self._input_open = False
        self._saved_mode = None
        self._tee = tee                     # also given every byte shown (the gate's log)
        if tty:
            self._open_pty()
        else:
            self._replace_terminals()

    @property
    def active(self) -> bool:
        return bool(self._copies) or self.master is not None

    def _replace_terminals(self) -> None:
        pipes: dict = {}
        for i, fd in enumerate(self.caller):
            if not os.isatty(fd):
                continue
            if i == 0:
                null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
                self._child_ends.append(null)
                self.stdio[0] = null
                continue
            terminal = os.fstat(fd).st_rdev
            if terminal not in pipes:
                r, w = os.pipe2(os.O_CLOEXEC)
                os.set_blocking(r, False)
                self._copies[r] = fd
                self._child_ends.append(w)
                pipes[terminal] = w
            self.stdio[i] = pipes[terminal]

    def _open_pty(self) -> None:
        self.master, slave = os.openpty()  # both O_CLOEXEC; the child's plan dup2s the slave
        os.set_blocking(self.master, False)
        self.ctty = slave
        self.stdio = [slave, slave, slave]
        self._child_ends.append(slave)
        self.update_window_size()
        self._copies[self.master] = self.caller[1]
        self._input_open = True
        if os.isatty(self.caller[0]):
            import termios
            import tty

            self._saved_mode = termios.tcgetattr(self.caller[0])
            tty.setraw(self.caller[0], termios.TCSADRAIN)

    def update_window_size(self, *_signal_args) -> None:
        """The caller's window size onto the pty (the kernel then sends SIGWINCH to its
        foreground process group). Also the SIGWINCH handler of the supervisor."""
        if self.master is None:
            return
        for fd in self.caller:
            size = _window_size(fd)
            if size is not None:
                import fcntl

                try:
                    fcntl.ioctl(self.master, TIOCSWINSZ, size)
                except OSError:
                    pass
                return

    def started(self) -> None:
        """The command holds its ends now: drop ours (a pipe then ends when the command's tree
        lets go of it; the pty is ours to hang up)."""
        for fd in self._child_ends:
            os.close(fd)
        self._child_ends = []

    def poll_set(self) -> list:
        """(fd, events) to poll while the command runs, one entry per fd (a second `register`
        of the same fd would replace the first: the pty's output must still be read while typed
        input waits for room, or a command that writes without reading would hang)."""
        import select

        wanted = {fd: select.POLLIN for fd in self._copies}
        if self.master is not None:
            if self._to_master:
                wanted[self.master] = wanted.get(self.master, 0) | select.POLLOUT
            elif self._input_open:
                wanted[self.caller[0]] = wanted.get(self.caller[0], 0) | select.POLLIN
        return list(wanted.items())

    def service(self, fd: int, events: int) -> None:
        """Move what `fd` has ready (called for each fd `poll` reported)."""
        import select

        if fd == self.caller[0] and self.master is not None and self._input_open:
            data = _read(fd)
            if data:
                self._to_master += data
            elif data is not None:  # the caller's input ended: an end-of-file character for the pty
                self._input_open = False
                self._to_master += b"\x04"
        if fd == self.master and events & select.POLLOUT and self._to_master:
            try:
                done = os.write(self.master, self._to_master)
                self._to_master = self._to_master[done:]
            except BlockingIOError:
                pass
            except OSError:
                self._to_master = b""
        if fd in self._copies and events & (select.POLLIN | select.POLLHUP | select.POLLERR):
            self._copy(fd, DRAIN_LIMIT)

    def _copy(self, fd: int, limit: int) -> int:
        """Copy what `fd` has now, up to `limit` bytes; stop copying it at its end."""
        moved = 0
        while moved < limit:
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                return moved
            except OSError:  # EIO: the pty's last slave fd closed
                data = b""
            if not data:
                del self._copies[fd]
                return moved
            _write_all(self._copies[fd], data)
            if self._tee is not None:
                self._tee(data)
            moved += len(data)
        return moved

    def finish(self) -> None:
        """The command has exited: copy what it left in the pipe or pty (bounded: a leftover
        might keep writing), then close our ends — a leftover's next write gets EPIPE, and the
        pty is hung up (its holders get EIO and, in its foreground group, SIGHUP)."""
        for fd in list(self._copies):
            self._copy(fd, DRAIN_LIMIT)
        for fd in (*self._copies, self.master):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._copies = {}
        self.master = None
        self.close()

    def close(self) -> None:
        """Give the caller's terminal its mode back and drop whatever is left (idempotent)."""
        self.started()
        if self._saved_mode is not None:
            restore_mode(self.caller[0], self._saved_mode)
            self._saved_mode = None


def saved_mode(fd: int):
    """The terminal mode of `fd` (to restore after a --tty run), or None when not a terminal."""
    if not os.isatty(fd):
        return None
    import termios

    try:
        return termios.tcgetattr(fd)
    except termios.error:
        return None


def restore_mode(fd: int, mode) -> None:
    import termios

    try:
        termios.tcsetattr(fd, termios.TCSADRAIN, mode)
    except termios.error:
        pass


def _read(fd: int):
    """What `fd` has (b"" at its end), or None when nothing is there after all."""
    try:
        return os.read(fd, 65536)
    except BlockingIOError:
        return None
    except OSError:
        return b""


def _write_all(fd: int, data: bytes) -> None:
    while data:
        try:
            data = data[os.write(fd, data):]
        except BlockingIOError:
            import select

            select.select([], [fd], [], 1.0)
        except OSError:  # the caller's terminal went away: nothing left to show it to
            return
