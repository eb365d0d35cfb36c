"""The host directory behind a cage's `{tmp}` where no fixed mount point serves it (without the
namespace tier, the gate's and the API's cages): made locked, and swept once its maker is dead.

Why: the process that made the directory removes it when the cage is closed (`Cage.close`). A
`sandboy run` or a gate killed outright (SIGKILL, the OOM killer, a CI runner's timeout) never
does, and the directory stayed in $TMPDIR with whatever the command wrote into it — nothing else
ever removed it (session 14: `SANDBOY_NAMESPACES=0 sandboy run` with `write = ["{tmp}"]`, SIGKILL:
`/tmp/sandboy-<hex>` left).

How a dead maker is told from a live one: the maker holds an exclusive `flock` on the directory
for the cage's life, on a close-on-exec fd (`_HELD`). The kernel drops the lock when the last fd
of that open file description is closed, so when every process that holds it has ended — the
maker and a supervisor it forked, which inherits the fd and runs the command; never the command,
which has no fd above 2. A pid in the name would not do: pids are taken again, and a run in
another PID namespace sharing the directory (a container, a nested cage) has a pid this process
cannot see, so it would look dead while it runs. The lock is a fact about the open directory
itself, the same in every namespace.

What the sweep touches (`sweep`, asked by every `make` in the place it makes its own): only
entries named `PREFIX` + 12 lowercase hex digits — a name no earlier Sandboy made (those were
`sandboy-<hex>` with no lock: never swept, never mistaken for a dead one) — that are
directories, not links (lstat, then opened with O_NOFOLLOW and the same inode checked), of this
euid, mode 0700 exactly, and whose lock it gets. It empties the directory through that fd
(`cleanup`: relative to directory fds, no symlink ever followed, though processes a dead run left
behind may still change it) and removes it while still holding the lock: a maker that opened
the name meanwhile finds its lock taken, or its path gone, and makes another (`_lock`).
"""

import errno
import os

from sandboy.confine._libc import above_stdio

PREFIX = "sandboy-run-"
_HEX = frozenset("0123456789abcdef")
_NAME_LENGTH = len(PREFIX) + 12

SYS_FLOCK = 73
LOCK_EX, LOCK_NB = 2, 4

_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

# path -> the fd holding its lock, while its cage lives (`release` closes it)
_HELD: dict = {}


def make(bases) -> str:
    """A new directory of mode 0700 named `PREFIX` + 48 random bits, locked, in the first of
    `bases` ("" is the working directory) where one can be made; what dead makers left there is
    swept first (PREFIX's names only: the one name shape both sides know, so a cage's `{tmp}` is
    always swept when its maker died). CageError where none can be made."""
    for base in bases:
        try:
            base = os.path.abspath(base or os.getcwd())
        except OSError:
            continue  # the working directory is gone (a relative $TMPDIR with it)
        sweep(base)
        for _ in range(100):  # a name taken already, or swept from under us: another one
            path = os.path.join(base, PREFIX + os.urandom(6).hex())
            try:
                os.mkdir(path, 0o700)
            except FileExistsError:
                continue
            except OSError:
                break  # not usable (missing, read-only, not ours): the next place
            fd = _lock(path)
            if fd is not None:
                _HELD[path] = fd
                return path
    from sandboy.errors import CageError

    raise CageError(f"no usable directory for the cage's {{tmp}} in {list(bases)}")


def release(path: str) -> None:
    """The cage is closed (its directory removed, or left where it could not be): the lock goes,
    so what is left may be swept by a later run."""
    fd = _HELD.pop(path, None)
    if fd is not None:
        os.close(fd)


def _lock(path: str):
    """The fd holding `path`'s lock, or None where a sweep took the directory between our mkdir
    and the lock (it holds the lock until the directory is gone: then the name is no longer the
    inode locked). On a file system that refuses flock the directory is kept unlocked: no sweep can
    lock it there either, so it is never swept (one a killed run left stays, as before)."""
    from sandboy.confine._libc import syscall

    try:
        fd = above_stdio(os.open(path, _OPEN_DIR))
    except OSError:
        return None
    try:
        try:
            syscall(SYS_FLOCK, fd, LOCK_EX | LOCK_NB)
        except OSError as exc:
            if exc.errno == errno.EWOULDBLOCK:
                raise  # a sweep holds it: it is removing the directory
            # a file system without flock (ENOLCK, EOPNOTSUPP...): the directory is used unlocked —
            # a sweep's flock there fails the same way, so it is never swept (nor wrongly taken)
        st, now = os.fstat(fd), os.lstat(path)
        if (st.st_dev, st.st_ino) == (now.st_dev, now.st_ino):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def _ours(name: str) -> bool:
    return len(name) == _NAME_LENGTH and name.startswith(PREFIX) and _HEX.issuperset(name[len(PREFIX):])


def sweep(base: str) -> list:
    """Remove the directories in `base` whose makers are dead (see the module docstring); the
    names removed. Never raises: what cannot be checked or removed stays."""
    try:
        with os.scandir(base) as entries:
            names = [entry.name for entry in entries if _ours(entry.name)]
    except OSError:
        return []
    if not names:
        return []
    removed = []
    try:
        where = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return []
    try:
        for name in names:
            if _sweep_one(where, name):
                removed.append(name)
    finally:
        os.close(where)
    return removed


def _sweep_one(where: int, name: str) -> bool:
    from stat import S_IMODE, S_ISDIR

    from sandboy.confine._libc import syscall

    euid = os.geteuid()
    try:
        st = os.lstat(name, dir_fd=where)
        if not (S_ISDIR(st.st_mode) and st.st_uid == euid and S_IMODE(st.st_mode) == 0o700):
            return False  # a link, a file, another user's, a mode we did not give: not ours
        fd = os.open(name, _OPEN_DIR, dir_fd=where)
    except OSError:
        return False
    try:
        held = os.fstat(fd)
        if (held.st_dev, held.st_ino, held.st_uid, held.st_mode) != (st.st_dev, st.st_ino, st.st_uid, st.st_mode):
            return False  # changed between the look and the open
        try:
            syscall(SYS_FLOCK, fd, LOCK_EX | LOCK_NB)
        except OSError:
            return False  # its maker (or a supervisor it forked) is alive
        from sandboy.confine.cleanup import empty_fd

        empty_fd(fd)
        try:
            os.rmdir(name, dir_fd=where)
        except OSError:
            return False  # (refilled meanwhile by what a dead run left running: a later sweep)
        return True
    finally:
        os.close(fd)
