"""A pseudo-terminal that plays the operator's, for the terminal probes (tests/cage, tests/gate).

The test holds the master (the terminal emulator's side: what it writes is what the operator
types, what it reads is what the screen shows) and a slave fd (what the operator's shell reads
from). Everything is checked from this, the host, side: bytes on the screen, bytes left for the
operator's shell, the terminal's foreground group, the processes holding it.
"""

from __future__ import annotations

import fcntl
import os
import select
import struct
import subprocess
import termios
import time


class Operator:
    def __init__(self, rows: int = 33, cols: int = 111):
        self.master, self.slave = os.openpty()
        self.path = os.ttyname(self.slave)
        self.resize(rows, cols)
        # No echo: whatever appears on the screen was written by a process, not echoed typing.
        mode = termios.tcgetattr(self.slave)
        mode[3] &= ~termios.ECHO
        termios.tcsetattr(self.slave, termios.TCSANOW, mode)
        self.screen = b""

    def resize(self, rows: int, cols: int) -> None:
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def mode(self):
        return termios.tcgetattr(self.slave)

    def type(self, text: bytes) -> None:
        os.write(self.master, text)

    def start(self, argv, controlling: bool = True, stdio=None, **kw) -> subprocess.Popen:
        """Start `argv` with the terminal on fd 0–2 (or `stdio`). `controlling`: also as its
        controlling terminal, its process group the foreground one — as for a job the
        operator's shell started."""
        fds = stdio or (self.slave, self.slave, self.slave)

        def take_terminal():
            fcntl.ioctl(self.slave, termios.TIOCSCTTY, 0)

        return subprocess.Popen(argv, stdin=fds[0], stdout=fds[1], stderr=fds[2], start_new_session=controlling,
                                preexec_fn=take_terminal if controlling else None, **kw)

    def watch(self, seconds: float, until: bytes | None = None) -> bytes:
        """Read the screen for up to `seconds` (less once `until` has appeared); all of it so far."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not (until and until in self.screen):
            ready, _, _ = select.select([self.master], [], [], max(0.0, min(0.05, deadline - time.monotonic())))
            if ready:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:  # EIO: no slave fd open anywhere
                    break
                self.screen += chunk
        return self.screen

    def left_for_the_shell(self, wait: float = 0.2) -> bytes:
        """What the operator's shell would read now (nothing consumed it meanwhile): every line."""
        got = b""
        while select.select([self.slave], [], [], wait if not got else 0.05)[0]:
            got += os.read(self.slave, 65536)
        return got

    def foreground_group(self) -> int:
        try:
            return os.tcgetpgrp(self.master)
        except OSError:
            return 0

    def holders(self, marker: str) -> list[int]:
        """Live processes with `marker` in their command line that hold this terminal."""
        rdev = os.stat(self.path).st_rdev
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    if marker.encode() not in fh.read():
                        continue
                for fd in os.listdir(f"/proc/{pid}/fd"):
                    st = os.stat(f"/proc/{pid}/fd/{fd}")
                    if st.st_rdev == rdev and (st.st_mode & 0o170000) == 0o020000:
                        found.append(int(pid))
                        break
            except OSError:
                continue
        return found

    def close(self) -> None:
        for fd in (self.master, self.slave):
            try:
                os.close(fd)
            except OSError:
                pass
