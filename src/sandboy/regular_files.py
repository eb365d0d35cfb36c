"""Reading a file that another party controls: a regular file only, never blocking, bounded.

A path the repository ships or a caged command could write (a gate's policy file, a `.pth` or
METADATA in a `.venv` pre-commit's hook runs, a program found on PATH) may be a FIFO — opening
it for reading waits for a writer that never comes, and the reader hangs — a device (open(2)
alone acts on some: a tty can become the controlling terminal, /dev/watchdog arms), a directory,
a symlink, or larger than anything the reader should hold. `read_regular` is the one read of
such a file: a stat first (nothing but a regular file is opened), then opened O_NONBLOCK and
O_NOCTTY, the last symlink followed only when the caller asks, the fstat of what was opened
deciding again, and at most `limit` bytes read — refused beyond, or cut there for a `head`.
Each caller keeps its own words for what it refuses.
"""

from __future__ import annotations

import errno
import os
import stat

from sandboy.policy.load import read_fd_bounded, read_fd_head


class NotRegularFile(OSError):
    """The path is there but is not a regular file (a FIFO, a device, a directory, a socket)."""


def read_regular(path: str, limit: int, *, follow_link: bool = False, head: bool = False) -> bytes | None:
    """The bytes of the regular file `path`: all of it, or None when it holds more than `limit`
    bytes (never cut); with `head`, its first `limit` bytes whatever its size.

    Raises FileNotFoundError when nothing is there, NotRegularFile for anything but a regular
    file, OSError(ELOOP) for a last symlink when not `follow_link` (the error O_NOFOLLOW gives),
    and OSError for the rest (a read error included)."""
    st = os.stat(path) if follow_link else os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
    if not stat.S_ISREG(st.st_mode):
        raise NotRegularFile(errno.EINVAL, "not a regular file", path)
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY | (0 if follow_link else os.O_NOFOLLOW)
    fd = os.open(path, flags)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped since the stat: what was opened decides
            raise NotRegularFile(errno.EINVAL, "not a regular file", path)
        if not head:
            return read_fd_bounded(fd, limit)
        return read_fd_head(fd, limit)
    finally:
        os.close(fd)
