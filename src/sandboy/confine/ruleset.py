"""The Landlock ruleset: the kernel's numbers (uapi/linux/landlock.h), the ABI probe, and the
ruleset fd made and filled in the parent (`build_ruleset`) that the child enforces on itself
(`Ruleset.plan`). Which rules a policy gets — grants, splits around denies, protected paths — is
`landlock.py`'s, which names all of this too.

A module of its own, stdlib only at import: a `sandboy run` from a cached plan (ADR 0028) fills a
ruleset from the stored rules without importing the rules' compiler.
"""

import os
import stat

from sandboy.confine._libc import (
    AT_FDCWD,
    SYS_LANDLOCK_ADD_RULE,
    SYS_LANDLOCK_CREATE_RULESET,
    SYS_LANDLOCK_RESTRICT_SELF,
    above_stdio,
    s32,
    syscall,
    u64,
)

# Filesystem access rights (uapi/linux/landlock.h). Debian 12's 6.1 headers stop at ABI 2,
# so they are defined here (docs/findings.md).
EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13          # ABI 2
TRUNCATE = 1 << 14       # ABI 3
IOCTL_DEV = 1 << 15      # ABI 5

NET_BIND_TCP = 1 << 0    # ABI 4
NET_CONNECT_TCP = 1 << 1

SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0   # ABI 6
SCOPE_SIGNAL = 1 << 1

RULE_PATH_BENEATH = 1
RULE_NET_PORT = 2
CREATE_RULESET_VERSION = 1 << 0

FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV


# The kernel's structs, packed by hand (x86_64, little-endian):
#   landlock_path_beneath_attr  { u64 allowed_access; s32 parent_fd; } __attribute__((packed))
#   landlock_net_port_attr      { u64 allowed_access; u64 port; }
#   landlock_ruleset_attr       { u64 handled_access_fs; u64 handled_access_net; u64 scoped; }


def abi_version() -> int:
    """0 when Landlock is unavailable (not built, not enabled, or blocked by a filter)."""
    try:
        return syscall(SYS_LANDLOCK_CREATE_RULESET, None, 0, CREATE_RULESET_VERSION)
    except OSError:
        return 0


class Ruleset:
    """An open Landlock ruleset fd, filled in the parent and applied in the child."""

    def __init__(self, fd: int, abi: int):
        self.fd = fd
        self.abi = abi

    @property
    def closed(self) -> bool:
        return self.fd < 0

    def plan(self) -> list:
        """The child's step: enforce the ruleset on itself (inherited fd, closed at exec).

        Made per launch, from this object: once closed, the fd number may already belong to
        another ruleset (a closed cage ran with a wider cage's rules), so a closed ruleset
        refuses to be planned."""
        if self.fd < 0:
            from sandboy.errors import CageError  # (a hit, which plans no ruleset, makes no exception class)

            raise CageError("this cage was closed (its Landlock ruleset fd is released); build a new one")
        return [("landlock_restrict_self", (SYS_LANDLOCK_RESTRICT_SELF, False, self.fd, 0))]

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def build_ruleset(abi: int, rules, handled_fs: int, handled_net: int, connect_ports, bind_ports,
                  scoped: int, warn) -> Ruleset:
    size = 8 if abi < 4 else 16 if abi < 6 else 24  # older kernels reject fields they lack
    attr = (u64(handled_fs) + u64(handled_net) + u64(scoped))[:size]
    fd = above_stdio(syscall(SYS_LANDLOCK_CREATE_RULESET, attr, size, 0))  # never on fd 0-2
    try:
        _add_path_rules(fd, rules, handled_fs, warn)
        for ports, right in ((connect_ports, NET_CONNECT_TCP), (bind_ports, NET_BIND_TCP)):
            for port in ports:
                syscall(SYS_LANDLOCK_ADD_RULE, fd, RULE_NET_PORT, u64(right) + u64(port), 0)
    except BaseException:
        os.close(fd)
        raise
    return Ruleset(fd, abi)


SYS_OPENAT2 = 437
_ENOSYS, _EPERM = 38, 1  # (errno's, x86_64 Linux: what a seccomp filter refusing openat2 answers)
RESOLVE_NO_SYMLINKS = 0x04
# struct open_how {flags, mode, resolve}: the rule path's file itself (a symlink there is opened as
# the link, and refused below), and no symlink followed on the way to it
_RULE_PATH_HOW = u64(os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC) + u64(0) + u64(RESOLVE_NO_SYMLINKS)


def _open_rule_path(path: str) -> int:
    """An O_PATH fd of `path` reached without following any symlink. Every rule path is a
    realpath or an entry found by the deny split, so none of its components is a symlink: one
    that is now was swapped in since the path was checked (a directory above the rule path
    renamed and replaced by a link to /host), and must not lead the rule to its target (ELOOP).
    openat2 where a filter refuses it (Sandboy's own answers ENOSYS): component by component."""
    try:
        return syscall(SYS_OPENAT2, AT_FDCWD, os.fsencode(path) + b"\0", _RULE_PATH_HOW, len(_RULE_PATH_HOW))
    except OSError as exc:
        import errno

        if exc.errno not in (errno.ENOSYS, errno.EPERM):  # openat2 refused by a seccomp filter
            raise
    *parents, last = path.split("/")
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in parents:
            if name:  # O_NOFOLLOW | O_DIRECTORY: a symlink here is ENOTDIR
                fd, above = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd), fd
                os.close(above)
        return os.open(last or ".", os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
    finally:
        os.close(fd)


def _add_path_rules(ruleset_fd: int, rules, handled_fs: int, warn) -> None:
    """Every path rule of `rules` added as `_add_path_rule` adds one: by the C executor's loop
    where it is built (the README example's ≈ 170 rules, one per /etc entry the system preset
    grants, cost a plan cache hit ≈ 0.9 ms of Python calls around ≈ 4 system calls each: session
    13), the rules it could not open or found a symlink at handed back to the same words here."""
    from sandboy.confine._libc import add_path_rules

    if add_path_rules is None:  # the Python executor (SANDBOY_NATIVE=0, no compiler)
        for path, rights in rules:
            _add_path_rule(ruleset_fd, path, rights & handled_fs, warn)
        return
    rules = rules if isinstance(rules, (list, tuple)) else list(rules)
    for index, err in add_path_rules(ruleset_fd, rules, handled_fs, FILE_RIGHTS):
        path, rights = rules[index]
        if err < 0:
            warn(f"fs: {path} became a symlink while the rules were built; not granted")
        elif err in (_ENOSYS, _EPERM):  # openat2 refused by a seccomp filter: the other way
            _add_path_rule(ruleset_fd, path, rights & handled_fs, warn)
        else:
            warn(f"fs: {path}: {os.strerror(err)}; not granted")


def _add_path_rule(ruleset_fd: int, path: str, rights: int, warn) -> None:
    try:
        fd = _open_rule_path(path)
    except OSError as exc:
        warn(f"fs: {path}: {exc.strerror}; not granted")
        return
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISLNK(mode):
            warn(f"fs: {path} became a symlink while the rules were built; not granted")
            return
        if not stat.S_ISDIR(mode):
            rights &= FILE_RIGHTS  # directory-only rights on a file are EINVAL
        if rights:
            syscall(SYS_LANDLOCK_ADD_RULE, ruleset_fd, RULE_PATH_BENEATH, u64(rights) + s32(fd), 0)
    finally:
        os.close(fd)
