"""The relay between a supervised command and the caller's terminal (docs/adr/0011-the-callers-terminal.md).

Where fd 0–2 of a supervised run are a terminal, the command gets /dev/null for stdin and a pipe
for stdout/stderr, which the supervisor copies to the terminal while the command runs (one pipe
for both when they are the same terminal, so their order is kept); with `tty=True` (`sandboy run
--tty`, the gate's interactive steps) a fresh pseudo-terminal, relayed both ways (the caller's
terminal in raw mode, the window size passed on and kept up to date on SIGWINCH) and hung up when
the command ends, as sudo's use_pty does. What the command's session is, and when a run needs
this at all, is `terminal.py`'s: exec mode never imports this module.

Imports `select`, `termios`, `tty` and `fcntl` only when used.
"""

import os

TIOCGWINSZ = 0x5413
TIOCSWINSZ = 0x5414
DRAIN_LIMIT = 1 << 20  # bytes copied after the command ended (a leftover could write forever)


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
