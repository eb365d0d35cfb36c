"""Landlock rules: filesystem rights, TCP ports and scopes, for whatever ABI the kernel has.

Everything is put into ONE ruleset: a second stacked ruleset that does not handle filesystem
access still denies REFER implicitly (docs/findings.md, landrun PR #56).

The ruleset is created and filled in the parent (`build_ruleset`); the child only calls
`landlock_restrict_self` on the inherited fd, so the API pays the path walking once per policy.
The ruleset itself and the kernel's numbers live in `ruleset.py` (a cached `sandboy run` fills one
without this module: ADR 0028); they are reachable from here as before.
"""

import os
import time

from sandboy.policy.resolve import is_glob, is_within_any
from sandboy.confine.ruleset import (  # noqa: F401  (this module's interface, as before the split)
    CREATE_RULESET_VERSION,
    EXECUTE,
    FILE_RIGHTS,
    IOCTL_DEV,
    MAKE_BLOCK,
    MAKE_CHAR,
    MAKE_DIR,
    MAKE_FIFO,
    MAKE_REG,
    MAKE_SOCK,
    MAKE_SYM,
    NET_BIND_TCP,
    NET_CONNECT_TCP,
    READ_DIR,
    READ_FILE,
    REFER,
    REMOVE_DIR,
    REMOVE_FILE,
    RESOLVE_NO_SYMLINKS,
    RULE_NET_PORT,
    RULE_PATH_BENEATH,
    SCOPE_ABSTRACT_UNIX_SOCKET,
    SCOPE_SIGNAL,
    SYS_LANDLOCK_RESTRICT_SELF,
    SYS_OPENAT2,
    TRUNCATE,
    WRITE_FILE,
    Ruleset,
    _add_path_rule,
    _open_rule_path,
    abi_version,
    build_ruleset,
)

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


_O_PATH = 0o10000000
_LIST_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


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


def expand_denies(denies, warn, budget=None, watch=None) -> list[str]:
    """Deny patterns → the real paths that exist now (globs matched at launch, docs/design.md, within
    one `deny_globs.GlobBudget`: a CageError names a pattern that costs too much). `watch`: a
    `deny_globs.GlobWatch` that gets what the globs' matches depend on (a kept cage's fingerprint)."""
    out: list[str] = []
    seen: set[str] = set()
    for pattern in denies:
        if is_glob(pattern):
            # the matcher is loaded by the policies with a deny glob only (≈ 6 kB of code)
            from sandboy.confine.deny_globs import GlobBudget, glob_nofollow

            budget = budget if budget is not None else GlobBudget()
            matches = glob_nofollow(pattern, budget, watch)
            if watch is not None:
                matches = list(matches)
                for match in matches:
                    watch.matched(match)
        else:
            matches = [pattern] if os.path.lexists(pattern) else []
        for match in matches:
            # a dangling symlink (lexists, not exists) is denied where it points, as realpath says
            real = existing_realpath(match) or os.path.realpath(match)
            if real not in seen:  # a set: `in out` made 30,000 matches overrun the 10 s glob budget
                seen.add(real)
                out.append(real)
    return out


def plan_rules(grants: dict[str, int], denies: list[str], warn, split_dirs=None, protects=(),
               listed=None) -> list[tuple[str, int]]:
    """Split grants around denied and protected paths.

    Landlock can only grant, so a deny inside a granted directory becomes grants for each
    sibling on the way down to it; only directories that contain a denied path are split.
    A grant at or under a denied path is dropped (deny wins). A protected path is split out
    the same way and then granted only the read part (READ_FILE, READ_DIR, EXECUTE) of what
    covered it; a grant at or under it is cut to that too. `split_dirs`, if given, receives
    the directories that were split (their listing decided the rules); `listed`, if given, a
    dict that gets for each of them (the clock, its stat, the names listed): the stat of the
    directory listed (one fd), taken just before the listing the rules were decided from — what a
    fingerprint keeps of it (`fingerprint_build.take`), instead of a stat and a listing of its own
    made after the rules, which described entries made meanwhile as decided (session 13).
    """
    rules: dict[str, int] = {}

    def add(path: str, rights: int, is_dir=None) -> None:
        # directory-only rights on a file are EINVAL (no stat where there are none: the devices;
        # `is_dir`: the answer of the listing that found `path`, no stat either)
        if rights & ~FILE_RIGHTS and not (os.path.isdir(path) if is_dir is None else is_dir):
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

    def split(path: str, rights: int, denies_here, protects_here, is_dir=None) -> None:
        # `denies_here`, `protects_here`: every deny and protected path at, above or beneath
        # `path` — all of them at a grant; below it only those beneath the entry, so each entry
        # of a split directory is not checked against every deny (a repository's directory of
        # 30,000 files and a step policy denying 300 of them took 39 s before the step ran)
        if is_within_any(path, denies_here):
            return
        if is_within_any(path, protects_here):
            add(path, rights & READ_ONLY, is_dir)
            return
        denies_below, protects_below = beneath(path, denies_here), beneath(path, protects_here)
        # A grant that can only read needs no split around a protected path (nothing to take away)
        if not denies_below and not (rights & ~READ_ONLY and protects_below):
            add(path, rights, is_dir)
            return
        try:
            fd = os.open(path, _LIST_FLAGS)
            try:
                if listed is not None:
                    now, st = time.time_ns(), os.fstat(fd)
                # the entries with their types (getdents' d_type): no lstat and stat of each entry
                # of a split directory (/etc's ≈ 140 for the `system` preset's secrets: session 13)
                with os.scandir(fd) as listing:
                    entries = [(entry.name, entry.is_symlink(), entry.is_dir(follow_symlinks=False))
                               for entry in listing]
            finally:
                os.close(fd)
        except OSError as exc:
            warn(f"fs: cannot list {path} to split it around a deny ({exc.strerror}); not granted")
            return
        if listed is not None:
            listed[path] = (now, st, tuple(name for name, _, _ in entries))
        if split_dirs is not None:
            split_dirs.append(path)
        # READ_DIR on the split directory keeps it listable, as docs/design.md allows; nothing
        # beneath it is reachable except through the per-entry grants below.
        add(path, rights & READ_DIR, True)
        for name, is_link, child_is_dir in entries:
            # A symlink needs no rule: following it is checked against its target's own rules.
            # Granting it would open (and so grant) the target: a working copy holding
            # `evil -> /` next to a denied file turned "write ." into "write /".
            if not is_link:
                split(os.path.join(path, name), rights, [*denies_below.get(name, ()), *denies_below.get("", ())],
                      [*protects_below.get(name, ()), *protects_below.get("", ())], child_is_dir)

    # no protected path (a policy without write roots): nothing near any grant, no walk for it
    near_denies, near_protects = _near(grants, denies), (_near(grants, protects) if protects else {})
    for path, rights in grants.items():
        denies_here = near_denies.get(path, denies)
        if is_within_any(path, denies_here):
            warn(f"fs: {path} lies inside a denied path; not granted")
            continue
        split(path, rights, denies_here, near_protects.get(path, protects))
    return sorted(rules.items())


def drop_subsumed(rules: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """`rules` (`plan_rules`' answer, sorted by path) without each rule whose rights its ancestors'
    rules give already:
    Landlock grants an access where ANY rule on the way from the file up to the root has it
    (a mount point's covered directory aside: a bind's root is the same inode, so its own rule
    and its ancestors' still apply), so such a rule changes nothing on that way — and dropping a
    rule only ever narrows: the file's inode keeps what its ancestors give wherever it is reached
    through them, and elsewhere (another mount of its directory, the inode renamed away by the
    host) it gets less than its own rule gave, never more. The README example's
    `/usr/lib/.../ld-linux-x86-64.so.2` under `/usr/lib`, a pyenv version under `versions/`, a venv
    read under the write root that holds it: one kernel call less each, per run (session 14).

    Not under /dev or /proc: the namespace tier mounts new file systems there, so a rule on the
    host's /dev does not reach its nodes in the cage (a bound node is reached from the tier's
    tmpfs, whose rules the child adds: `namespaces.plan_landlock_rules`); their own rules stay."""
    from sandboy.confine.namespaces import PRIVATE_TREES

    by_path = dict(rules)
    kept = []
    for path, rights in rules:
        if is_within_any(path, PRIVATE_TREES):
            kept.append((path, rights))
            continue
        above = 0
        for parent in _ancestors(path):
            above |= by_path.get(parent, 0)
            if above & rights == rights:
                break
        if not rights or above & rights != rights:
            kept.append((path, rights))
    return kept


def _ancestors(path: str):
    """The directories above `path`, nearest first, "/" last."""
    i = path.rfind("/")
    while i > 0:
        yield path[:i]
        i = path.rfind("/", 0, i)
    if path != "/":
        yield "/"


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
