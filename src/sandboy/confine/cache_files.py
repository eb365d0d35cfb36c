"""Files Sandboy writes into its own cache directory, placed where no other user can choose
(`write_file`; ADR 0028 "Session 11"). A cache that cannot be written only costs speed."""

# Why (kept as comments, not docstrings: a build unmarshals this module's code on every miss).
# The cache directory is $SANDBOY_CACHE_DIR, $XDG_CACHE_HOME/sandboy or ~/.cache/sandboy
# (`cache_places.cache_dir`). A root run with another user's HOME (`sudo -E`, a service started
# with a user's environment) finds it below directories that user owns, and that user may swap any
# name there for a symlink while we write. Written by path, a file went where the swapped link
# pointed: `plan_keep.store` (then `plan_cache.store`) made its directory and wrote the entry in a directory of the other
# user's choosing, and the policy parse cache's and the namespace note's `open(tmp, O_TRUNC)`
# followed a link planted there onto any file root may write (session 11).
#
# Here a file is written only into a directory opened without any symlink on the way (one openat2,
# RESOLVE_NO_SYMLINKS), or else by a walk from `/` that follows no symlink another user could have
# made or swapped (`_trusted_link`); that this euid owns and no one else may write (what every
# reader of the cache asks: `_libc.read_private`); then relative to that directory's fd
# (openat O_EXCL|O_NOFOLLOW, unlinkat, renameat), so that no swap of a name above it moves the
# file once it is open. Missing directories on the way are made (mode 0700) in the same walk.

import os

from sandboy.confine import _libc

_S_IFMT, _S_IFDIR, _S_IFLNK, _S_ISVTX = 0o170000, 0o040000, 0o120000, 0o1000
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MAX_LINKS = 40  # the kernel's own bound on the symlinks one lookup follows
# struct open_how {u64 flags; u64 mode; u64 resolve}: RESOLVE_NO_SYMLINKS (0x04), a path with no
# symlink at all opened in one call (the walk below: one openat per name, ≈ 10 µs each)
_NO_SYMLINKS_HOW = _DIR_FLAGS.to_bytes(8, "little") + bytes(8) + (0x04).to_bytes(8, "little")


def _trusted_link(dir_fd: int, link) -> bool:
    """Whether a symlink `link` (its lstat) found in the directory `dir_fd` was put there by no
    other user: a directory only this euid or root may write, or a sticky one (where only a link's
    owner or the directory's owner may rename or remove it) and a link of this euid's or root's."""
    st = os.fstat(dir_fd)
    mine = (os.geteuid(), 0)
    if st.st_uid in mine and not st.st_mode & 0o022:
        return True
    return bool(st.st_mode & _S_ISVTX) and link.st_uid in mine and st.st_uid in mine


def open_private_dir(path: str):
    """An fd of directory `path` (absolute), made with its missing parents (mode 0700), or None
    where it cannot be had safely: a symlink on the way another user could have placed or swapped,
    the directory not this euid's or writable by others."""
    path = os.path.abspath(path)
    try:  # the usual case, a path of directories only: the kernel refuses any symlink on the way
        fd = _libc.syscall(_libc.SYS_OPENAT2, _libc.AT_FDCWD, os.fsencode(path) + b"\0", _NO_SYMLINKS_HOW,
                           len(_NO_SYMLINKS_HOW))
    except (OSError, ValueError):  # a symlink (ELOOP), a name missing, no openat2: the walk decides
        return _walk(path)
    return _ours(fd)


def _ours(fd: int):
    """`fd`, a directory this euid owns and no one else may write, or None (`fd` closed)."""
    try:
        st = os.fstat(fd)
        if st.st_mode & _S_IFMT == _S_IFDIR and st.st_uid == os.geteuid() and not st.st_mode & 0o022:
            fd, kept = -1, fd
            return kept
        return None
    except OSError:
        return None
    finally:
        if fd >= 0:
            os.close(fd)


def _walk(path: str):
    """`open_private_dir` one name at a time from `/`, making the missing ones and following only
    the symlinks `_trusted_link` allows."""
    parts = [part for part in path.split("/") if part and part != "."]
    try:  # (in a cage whose Landlock rules do not grant "/" itself, EACCES: no cache, not an error)
        fd = os.open("/", _DIR_FLAGS)
    except OSError:
        return None
    links = 0
    try:
        while parts:
            name = parts.pop(0)
            try:
                next_fd = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                try:
                    os.mkdir(name, 0o700, dir_fd=fd)
                except FileExistsError:  # made meanwhile by someone: looked at again below
                    pass
                next_fd = os.open(name, _DIR_FLAGS, dir_fd=fd)  # (a symlink swapped in: ELOOP, no file)
            except OSError:  # ELOOP or ENOTDIR: a symlink (followed only where trusted) or not a directory
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                links += 1
                if st.st_mode & _S_IFMT != _S_IFLNK or links > _MAX_LINKS or not _trusted_link(fd, st):
                    return None
                target = os.readlink(name, dir_fd=fd)
                parts[:0] = [part for part in target.split("/") if part and part != "."]
                if target.startswith("/"):
                    os.close(fd)
                    fd = os.open("/", _DIR_FLAGS)
                continue
            os.close(fd)
            fd = next_fd
        fd, last = -1, fd
        return _ours(last)
    except (OSError, ValueError):  # (ValueError: a NUL in the path)
        return None
    finally:
        if fd >= 0:
            os.close(fd)


def write_file(folder: str, name: str, data: bytes) -> bool:
    """`data` as the file `name` in `folder` (`open_private_dir`), whole: written to a temporary
    file there (O_EXCL, O_NOFOLLOW) and renamed over `name` — a reader finds the old file, the new
    one or none, sealed (`cache_seal.seal`: what `_libc.read_private` checks). True where it was
    written; never without this user's secret (no file could be trusted back)."""
    from sandboy import cache_seal

    data = cache_seal.seal(folder, name, data)
    if data is None:
        return False
    dir_fd = open_private_dir(folder)
    if dir_fd is None:
        return False
    tmp = f"{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        # Not a rename over the old file: ext4 then starts writing the new file's blocks at once
        # (auto_da_alloc, ≈ 0.2 ms); removing it first costs ≈ 0.04 ms. Meanwhile a reader finds
        # none (a miss); a writer racing us renames over ours (whole files either way).
        try:
            os.unlink(name, dir_fd=dir_fd)
        except FileNotFoundError:
            pass
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        return True
    except OSError:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        return False
    finally:
        os.close(dir_fd)
