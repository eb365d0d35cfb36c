"""Landlock rules: filesystem rights, TCP ports and scopes, for whatever ABI the kernel has.

Everything is put into ONE ruleset: a second stacked ruleset that does not handle filesystem
access still denies REFER implicitly (docs/findings.md, landrun PR #56).

The ruleset is created and filled in the parent (`build_ruleset`); the child only calls
`landlock_restrict_self` on the inherited fd, so the API pays the path walking once per policy.
"""

import os
import stat

from sandboy.errors import CageError
from sandboy.policy.resolve import is_glob, is_within_any
from sandboy.confine._libc import (
    AT_FDCWD,
    SYS_LANDLOCK_ADD_RULE,
    SYS_LANDLOCK_CREATE_RULESET,
    SYS_LANDLOCK_RESTRICT_SELF,
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

READ = READ_FILE | READ_DIR
EXEC = READ | EXECUTE
# No MAKE_CHAR/MAKE_BLOCK: creating device nodes is never something a step needs.
WRITE = (READ | WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_DIR | MAKE_REG | MAKE_SOCK
         | MAKE_FIFO | MAKE_SYM | REFER | TRUNCATE | IOCTL_DEV)

READ_ONLY = READ | EXECUTE  # what a protected path keeps of the grant that covers it
RIGHT_NAMES = {"read": READ, "exec": EXEC, "write": WRITE}

# Devices every program expects; granting them opens nothing secret.
DEVICE_GRANTS = (
    ("/dev/null", READ_FILE | WRITE_FILE | TRUNCATE),
    ("/dev/zero", READ_FILE),
    ("/dev/full", READ_FILE | WRITE_FILE),
    ("/dev/random", READ_FILE),
    ("/dev/urandom", READ_FILE),
)
ELF_INTERPRETERS = ("/lib64/ld-linux-x86-64.so.2",)


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


_O_PATH = 0o10000000


def existing_realpath(path: str):
    """`os.path.realpath(path)` if `path` exists (`os.path.exists`: symlinks followed), else
    None — the same answers, asked of the kernel: one open(O_PATH) and a readlink of its
    /proc/self/fd entry instead of posixpath's lstat and readlink of every component in Python
    (≈ 5 system calls and 10-30 µs per grant path, `/lib64/ld-linux-x86-64.so.2` 13 calls).

    Wherever the kernel's answer could differ from realpath's, realpath itself answers:
    paths under /proc (magic links such as /proc/self/fd/N or /proc/PID/root are followed by the
    kernel, read as text by realpath), a name the kernel gives that is not an absolute path
    (a pipe, an anonymous inode) or ends in " (deleted)", and any error (a missing path, no /proc
    mounted, no fd left): then `os.path.exists` and `os.path.realpath` decide, as before."""
    if not path.startswith("/proc/"):
        try:
            fd = os.open(path, _O_PATH | os.O_CLOEXEC)
        except (OSError, ValueError):
            fd = -1
        if fd >= 0:
            try:
                real = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                real = ""
            finally:
                os.close(fd)
            if real.startswith("/") and not real.endswith(" (deleted)"):
                return real
    return os.path.realpath(path) if os.path.exists(path) else None


def expand_denies(denies, warn, budget=None) -> list[str]:
    """Deny patterns → the real paths that exist now (globs matched at launch, docs/design.md, within
    one `deny_globs.GlobBudget`: a CageError names a pattern that costs too much)."""
    out: list[str] = []
    seen: set[str] = set()
    for pattern in denies:
        if is_glob(pattern):
            # the matcher is loaded by the policies with a deny glob only (≈ 6 kB of code)
            from sandboy.confine.deny_globs import GlobBudget, glob_nofollow

            budget = budget if budget is not None else GlobBudget()
            matches = glob_nofollow(pattern, budget)
        else:
            matches = [pattern] if os.path.lexists(pattern) else []
        for match in matches:
            # a dangling symlink (lexists, not exists) is denied where it points, as realpath says
            real = existing_realpath(match) or os.path.realpath(match)
            if real not in seen:  # a set: `in out` made 30,000 matches overrun the 10 s glob budget
                seen.add(real)
                out.append(real)
    return out


def plan_rules(grants: dict[str, int], denies: list[str], warn, split_dirs=None, protects=()) -> list[tuple[str, int]]:
    """Split grants around denied and protected paths.

    Landlock can only grant, so a deny inside a granted directory becomes grants for each
    sibling on the way down to it; only directories that contain a denied path are split.
    A grant at or under a denied path is dropped (deny wins). A protected path is split out
    the same way and then granted only the read part (READ_FILE, READ_DIR, EXECUTE) of what
    covered it; a grant at or under it is cut to that too. `split_dirs`, if given, receives
    the directories that were split (their listing decided the rules).
    """
    rules: dict[str, int] = {}

    def add(path: str, rights: int) -> None:
        # directory-only rights on a file are EINVAL (no stat where there are none: the devices)
        if rights & ~FILE_RIGHTS and not os.path.isdir(path):
            rights &= FILE_RIGHTS
        rules[path] = rules.get(path, 0) | rights

    def beneath(path: str, roots) -> dict[str, list[str]]:
        """The `roots` strictly beneath `path`, by the entry of `path` each lies under (under ""
        a root not normalized, "/a/" or "/a//b": every entry is checked against those)."""
        prefix = path.rstrip("/") + "/"
        by_entry: dict[str, list[str]] = {}
        for root in roots:
            if root != path and root.startswith(prefix):
                by_entry.setdefault(root[len(prefix):].split("/", 1)[0], []).append(root)
        return by_entry

    def split(path: str, rights: int, denies_here, protects_here) -> None:
        # `denies_here`, `protects_here`: every deny and protected path at, above or beneath
        # `path` — all of them at a grant; below it only those beneath the entry, so each entry
        # of a split directory is not checked against every deny (a repository's directory of
        # 30,000 files and a step policy denying 300 of them took 39 s before the step ran)
        if is_within_any(path, denies_here):
            return
        if is_within_any(path, protects_here):
            add(path, rights & READ_ONLY)
            return
        denies_below, protects_below = beneath(path, denies_here), beneath(path, protects_here)
        # A grant that can only read needs no split around a protected path (nothing to take away)
        if not denies_below and not (rights & ~READ_ONLY and protects_below):
            add(path, rights)
            return
        try:
            entries = os.listdir(path)
        except OSError as exc:
            warn(f"fs: cannot list {path} to split it around a deny ({exc.strerror}); not granted")
            return
        if split_dirs is not None:
            split_dirs.append(path)
        # READ_DIR on the split directory keeps it listable, as docs/design.md allows; nothing
        # beneath it is reachable except through the per-entry grants below.
        add(path, rights & READ_DIR)
        for name in entries:
            child = os.path.join(path, name)
            # A symlink needs no rule: following it is checked against its target's own rules.
            # Granting it would open (and so grant) the target: a working copy holding
            # `evil -> /` next to a denied file turned "write ." into "write /".
            if not os.path.islink(child):
                split(child, rights, [*denies_below.get(name, ()), *denies_below.get("", ())],
                      [*protects_below.get(name, ()), *protects_below.get("", ())])

    # no protected path (a policy without write roots): nothing near any grant, no walk for it
    near_denies, near_protects = _near(grants, denies), (_near(grants, protects) if protects else {})
    for path, rights in grants.items():
        denies_here = near_denies.get(path, denies)
        if is_within_any(path, denies_here):
            warn(f"fs: {path} lies inside a denied path; not granted")
            continue
        split(path, rights, denies_here, near_protects.get(path, protects))
    return sorted(rules.items())


def _not_normalized(path: str) -> bool:
    # "" too: `is_within` holds every absolute path within it, and no parent of a path is ""
    return not path or path.endswith("/") or "//" in path


def _near(paths, roots) -> dict[str, list[str]]:
    """For each of `paths` written normally: the `roots` at, above or beneath it (`is_within`
    either way), found by walking each one's parent directories once, not each path against
    every root — a step policy's 15,000 grants and 15,000 denies were 225 million checks. A
    root not written normally ("/", "/a/", "/a//b") goes to every path, where `is_within`
    decides as before; a path not written normally is left out (its caller checks all roots)."""
    near = {path: [] for path in paths if not _not_normalized(path)}
    exact = set()
    for root in roots:
        if _not_normalized(root):
            for found in near.values():
                found.append(root)
            continue
        exact.add(root)
        i = root.find("/", 1)  # the root at or beneath a path: the path is one of its parents
        while i > 0:
            if root[:i] in near:
                near[root[:i]].append(root)
            i = root.find("/", i + 1)
        if root in near:
            near[root].append(root)
    if exact:  # a root above a path: one of the path's parents
        for path, found in near.items():
            i = path.find("/", 1)
            while i > 0:
                if path[:i] in exact:
                    found.append(path[:i])
                i = path.find("/", i + 1)
    return near


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
    fd = syscall(SYS_LANDLOCK_CREATE_RULESET, attr, size, 0)
    try:
        for path, rights in rules:
            _add_path_rule(fd, path, rights & handled_fs, warn)
        for ports, right in ((connect_ports, NET_CONNECT_TCP), (bind_ports, NET_BIND_TCP)):
            for port in ports:
                syscall(SYS_LANDLOCK_ADD_RULE, fd, RULE_NET_PORT, u64(right) + u64(port), 0)
    except BaseException:
        os.close(fd)
        raise
    return Ruleset(fd, abi)


SYS_OPENAT2 = 437
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
