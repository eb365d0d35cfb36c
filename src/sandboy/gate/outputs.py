"""Where the gate writes its own files (logs, JUnit, JSON, the GitHub step summary).

The gate runs with the operator's rights (often root) and opens these files AFTER steps wrote to
the repository. A file the steps could prepare — a symlink planted at `gate-logs/next.log`, a
FIFO at `gate.xml` — would make the gate itself overwrite any file on the host or block forever.
So: every output must lie outside what the steps can write (the repository and the ceiling's
write roots), and each file is opened without following a final symlink, without blocking, and
only if it is a regular file.
"""

import os
import stat

from sandboy.errors import PolicyError
from sandboy.paths import is_within

_OPEN_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC



def check_outside(outputs: dict, write_roots, source: str = "sandboy gate") -> None:
    """`outputs`: {"--junit": path, ...}. Raise PolicyError for one the steps could reach."""
    roots = [os.path.realpath(r) for r in write_roots if not r.startswith("{")]
    for label, path in outputs.items():
        if not path or path == "-":
            continue
        real = os.path.realpath(path)
        for root in roots:
            if is_within(real, root):
                raise PolicyError(
                    source, label,
                    f"{path} lies inside {root}, which the steps can write: a step could plant a symlink "
                    "or a FIFO there and make the gate overwrite any file or hang; write it outside "
                    "the repository (e.g. ../gate-reports/ or $RUNNER_TEMP)")


def check_writable(files: dict, log_dir=None, source: str = "arguments") -> None:
    """Refuse, before the first step runs, an output the gate could not write at the end:
    `files` {"--junit": path, ...} must each name a regular file (or nothing yet) in an existing
    directory; `log_dir` (--logs) must be a directory or creatable. Without this a gate ran every
    step, said "gate passed", then failed on its report."""
    for label, path in files.items():
        if not path or path == "-":
            continue
        parent = os.path.dirname(os.path.abspath(path))
        if os.path.isdir(path):
            raise PolicyError(source, label, f"{path} is a directory; name a file, e.g. {os.path.join(path, 'gate.out')}")
        if os.path.islink(path) or (os.path.lexists(path) and not os.path.isfile(path)):
            raise PolicyError(source, label, f"{path} exists and is not a regular file; name a new or regular file")
        if not os.path.isdir(parent):
            raise PolicyError(source, label, f"{path}: directory {parent} does not exist; create it first")
        if not os.access(path if os.path.exists(path) else parent, os.W_OK):
            raise PolicyError(source, label, f"{path}: not writable by this user")
    if log_dir:
        if os.path.lexists(log_dir) and not os.path.isdir(log_dir):
            raise PolicyError(source, "--logs", f"{log_dir} exists and is not a directory; --logs names a "
                                                "directory that gets one <step>.log per step")
        existing = os.path.abspath(log_dir)
        while not os.path.isdir(existing):
            if os.path.lexists(existing):
                raise PolicyError(source, "--logs", f"{existing} is not a directory, so {log_dir} cannot be made")
            existing = os.path.dirname(existing)
        if not os.access(existing, os.W_OK):
            raise PolicyError(source, "--logs", f"{log_dir}: {existing} is not writable by this user")


def open_output(path: str, append: bool = False):
    """A binary file object for `path`, refusing symlinks and anything but a regular file."""
    fd = os.open(path, _OPEN_FLAGS | (os.O_APPEND if append else 0), 0o644)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        if not append:
            os.ftruncate(fd, 0)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "ab" if append else "wb")
    except BaseException:
        os.close(fd)
        raise
