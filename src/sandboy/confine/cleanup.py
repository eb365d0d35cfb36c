"""Remove what a confined command left in its private `{tmp}`, whatever it made there.

Why not `shutil.rmtree`: it recurses once per directory level, and on Python 3.11 a tree 1,200
levels deep raises RecursionError — not an OSError, so `ignore_errors=True` does not catch it —
which crashed the gate and leaked the directory. This walks with an explicit stack, works
relative to directory fds (paths of any depth, no symlink is ever followed), and makes
directories writable as it goes (a step may chmod 000 them). Called once every process of the
run is dead — except by run_tmp's sweep of a dead maker's directory, where a process that run
left behind may still be changing it: nothing here follows a link it could put in a name's place.
"""

import os
import time

_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def empty_dir(path: str, deadline: float | None = None) -> bool:
    """Remove everything inside `path` (kept, mode 0700). False if something could not go, or
    if `deadline` (a time.monotonic() value) passed first: the gate, stopped by ^C, must not
    spend seconds unlinking what a step left in its {tmp}.

    `path` is opened once, not followed if a symlink, and the chmod goes to that inode: chmod by
    path followed a `path` swapped for a symlink meanwhile (a second run whose write root holds
    it), and as root made the directory it pointed at 0700 (session 10)."""
    try:
        where = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        os.chmod(f"/proc/self/fd/{where}", 0o700)  # (a step may have made it 0000: O_PATH needs no access)
        top = os.open(".", _OPEN_DIR, dir_fd=where)
    except OSError:
        return False
    finally:
        os.close(where)
    try:
        return _empty(top, deadline)
    finally:
        os.close(top)


def empty_fd(top: int, deadline: float | None = None) -> bool:
    """`empty_dir` of a directory already open (`top`, kept open: the caller's), which the caller
    has checked is the directory it means (run_tmp's sweep holds its lock through it)."""
    return _empty(top, deadline)


def remove_tree(path: str, deadline: float | None = None) -> bool:
    """Remove `path` and everything beneath it. False if something could not go (or `deadline`
    passed first: `path` is then left, partly emptied)."""
    if not os.path.lexists(path):
        return True
    ok = empty_dir(path, deadline) if os.path.isdir(path) and not os.path.islink(path) else True
    if not ok and deadline is not None and time.monotonic() > deadline:
        return False
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            os.rmdir(path)
        else:
            os.unlink(path)
    except OSError:
        return False
    return ok


_MAX_DEPTH = 32  # open directory fds held at once; deeper subtrees are moved up first


def _empty(top: int, deadline: float | None = None) -> bool:
    """Depth-first with an explicit stack of [dir fd, its name, subdirectories left to do].

    A subtree deeper than _MAX_DEPTH is renamed into the top directory and emptied from there
    later, so neither the stack nor the number of open fds grows with the tree's depth."""
    ok = True
    moved = 0
    stack = [[top, "", None]]
    while stack:
        frame = stack[-1]
        fd = frame[0]
        if frame[2] is None:
            frame[2] = []
            try:
                with os.scandir(fd) as entries:
                    for n, entry in enumerate(entries):
                        if deadline is not None and n % 256 == 255 and time.monotonic() > deadline:
                            _close_all(stack)
                            return False
                        if entry.is_dir(follow_symlinks=False):
                            frame[2].append(entry.name)
                            continue
                        try:
                            os.unlink(entry.name, dir_fd=fd)
                        except OSError:
                            ok = False
            except OSError:
                ok = False
        if frame[2]:
            name = frame[2].pop()
            if len(stack) >= _MAX_DEPTH:
                moved += 1
                flat = f".sandboy-flattened-{moved}"
                try:
                    os.rename(name, flat, src_dir_fd=fd, dst_dir_fd=top)
                    stack[0][2].append(flat)
                except OSError:
                    ok = False
                continue
            try:
                child = _open_unlocked(name, fd)
            except OSError:
                ok = False
                continue
            stack.append([child, name, None])
            continue
        stack.pop()
        if stack:  # the top directory is kept and its fd belongs to the caller
            os.close(fd)
            try:
                os.rmdir(frame[1], dir_fd=stack[-1][0])
            except OSError:
                ok = False
    return ok


def _open_unlocked(name: str, parent: int) -> int:
    """The subdirectory `name` of `parent`, made 0700 first (a step may have locked it) and opened
    for reading. Never through a symlink: the chmod goes to the inode an O_PATH|O_NOFOLLOW open
    found (`chmod(name, dir_fd=...)` follows a `name` swapped for a symlink since the listing —
    what a dead run's leftover process may do while run_tmp's sweep empties it — and as root made
    the directory it pointed at 0700), and the open is relative to that same inode."""
    where = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
    try:
        os.chmod(f"/proc/self/fd/{where}", 0o700)
        return os.open(".", _OPEN_DIR, dir_fd=where)
    finally:
        os.close(where)


def _close_all(stack) -> None:
    """Close the fds of an abandoned walk (the top one belongs to the caller)."""
    for frame in stack[1:]:
        os.close(frame[0])
