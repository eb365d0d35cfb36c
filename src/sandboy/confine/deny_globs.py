"""Deny patterns (`fs.deny` globs) matched against the tree at launch: `**` and the shell's
wildcards, never following a symlink past the pattern's literal prefix, within a budget of
directory entries and time (a CageError naming the pattern beyond it). `landlock.expand_denies`
loads this module only for a policy that has a deny glob. `GlobWatch`: what the matches depend on
(the directories the walk looked into), for a compiled cage kept for another run (ADR 0028).
"""

import os
import time

from sandboy.confine.fingerprint import ctime_settled, inode_identity  # (stdlib only: an inode's change signature)
from sandboy.confine.kernel_mounts import DIRECTORY_TIMES_TRACKED, file_systems as _file_systems  # (shared with the walk index)
from sandboy.errors import CageError
from sandboy.policy.resolve import is_glob

GLOB_MAX_ENTRIES = 500_000  # directory entries one deny pattern may look at
GLOB_MAX_SECONDS = 10.0     # for all of a cage's deny patterns together


def glob_nofollow(pattern: str, budget=None, watch=None):
    """Paths matching an absolute glob; `**` is zero or more directories. Past the pattern's
    literal prefix, no symlink is ever followed: a symlinked directory matches a component but
    is never entered.

    Why not `glob.glob(recursive=True)`: it follows symlinked directories, and the working copy
    is untrusted: eight links `a…h -> .` and `*/*/*/*/*/*/*/*/*/nothing` walked 8^9 paths (11
    minutes at depth 12; three links under `**` walked 3^40). Even without symlinks a real tree
    can be huge, so the walk is bounded: `budget` (a GlobBudget) raises a CageError naming the
    pattern past GLOB_MAX_ENTRIES entries or its deadline. Iterative: a tree thousands of levels
    deep is walked with a list, not the Python stack. `watch` (a GlobWatch) gets the identity of
    every directory the walk looks into, taken before it looks.
    """
    parts = [p for p in pattern.split("/") if p]
    collapsed: list[str] = []
    for part in parts:  # `**/**` matches what `**` matches; keep the walk linear
        if not (part == "**" and collapsed[-1:] == ["**"]):
            collapsed.append(part)
    first_glob = next((i for i, part in enumerate(collapsed) if is_glob(part)), len(collapsed))
    # The literal prefix is a policy path like any other (symlinks in it followed, as for fs.read).
    prefix = "/" + "/".join(collapsed[:first_glob])
    if watch is not None:
        watch.start(pattern)
        watch.look(prefix, follow=True)  # (before the test below: a prefix made since shows)
    if not os.path.isdir(prefix):
        return
    budget = budget if budget is not None else GlobBudget()
    budget.start(pattern)
    last = len(collapsed) - 1

    def entries(base: str):
        try:
            with os.scandir(base) as it:
                for entry in it:
                    budget.spend()
                    yield entry
        except OSError:
            return

    stack = [(prefix, first_glob)]
    while stack:
        base, i = stack.pop()
        if i > last:
            yield base
            continue
        if watch is not None and base != prefix:
            watch.look(base, follow=False)  # (what it holds decides the matches: see GlobWatch)
        part = collapsed[i]
        if part == "**":
            stack.append((base, i + 1))  # zero directories
            for entry in entries(base):
                if entry.is_dir(follow_symlinks=False):
                    stack.append((entry.path, i))
                elif i == last:  # a trailing `**` matches files too
                    yield entry.path
        elif not is_glob(part):
            path = os.path.join(base, part)
            budget.spend()
            if i == last:
                if os.path.lexists(path):
                    yield path
            elif os.path.isdir(path) and not os.path.islink(path):
                stack.append((path, i + 1))
        else:
            matches = name_matcher(part)
            for entry in entries(base):
                if matches(entry.name):
                    if i == last:
                        yield entry.path
                    elif entry.is_dir(follow_symlinks=False):
                        stack.append((entry.path, i + 1))


def name_matcher(part: str):
    """`fnmatch.fnmatchcase(name, part)` as a function of `name`. A part of `*`, `?` and literal
    characters only (`*.pem`, `id_*`: what deny globs are) is matched here: `fnmatch` imports `re`,
    and with it `enum`, `functools` and `collections` (≈ 4-6 ms of every build of a policy with a
    deny glob, the README example's `*.pem` among them: session 13). A `[...]` set keeps fnmatch's
    own rules (ranges, `!`, a `]` first, a `[` never closed), where an approximation would leave a
    secret undenied."""
    if "[" in part:
        import fnmatch

        return lambda name: fnmatch.fnmatchcase(name, part)
    pieces = part.split("*")
    if len(pieces) == 1:
        return lambda name: _literal_at(name, 0, part) and len(name) == len(part)
    head, *middle, tail = pieces
    least = len(head) + len(tail) + sum(map(len, middle))

    def matches(name: str) -> bool:
        # `head`, then each middle piece at its leftmost place after the last (the leftmost is
        # never wrong: a later place leaves less room for the rest), then `tail` at the very end
        if len(name) < least or not _literal_at(name, 0, head) or not _literal_at(name, len(name) - len(tail), tail):
            return False
        at, end = len(head), len(name) - len(tail)
        for piece in middle:
            at = _find(name, piece, at, end)
            if at < 0:
                return False
            at += len(piece)
        return True

    return matches


def _literal_at(name: str, at: int, piece: str) -> bool:
    """Whether `piece` (`?`: any one character) is in `name` at `at`, whole."""
    if "?" not in piece:
        return name.startswith(piece, at)
    if at < 0 or at + len(piece) > len(name):
        return False
    return all(p == "?" or p == c for p, c in zip(piece, name[at:at + len(piece)]))


def _find(name: str, piece: str, start: int, end: int) -> int:
    """The first place at or after `start` where `piece` (`?`: any one character) lies whole in
    `name[:end]`, or -1."""
    if "?" not in piece:
        return name.find(piece, start, end)
    for at in range(start, end - len(piece) + 1):
        if _literal_at(name, at, piece):
            return at
    return -1


class GlobBudget:
    """How much work matching deny globs may take: GLOB_MAX_ENTRIES entries per pattern, and one
    deadline for all of them (a cage's build). Exceeding either is a CageError naming the pattern:
    the cage cannot be built as the policy asks, so nothing runs (exit 125)."""

    def __init__(self, max_entries: int = GLOB_MAX_ENTRIES, seconds: float = GLOB_MAX_SECONDS):
        self._clock = time.monotonic
        self.max_entries = max_entries
        self.seconds = seconds
        self.deadline = self._clock() + seconds
        self.pattern = ""
        self.entries = 0

    def start(self, pattern: str) -> None:
        self.pattern, self.entries = pattern, 0

    def spend(self) -> None:
        self.entries += 1
        if self.entries > self.max_entries:
            raise CageError(f"fs.deny: the glob {self.pattern!r} looks at more than {self.max_entries:,} "
                            "directory entries (symlinks are never followed); narrow the pattern")
        if self.entries % 1024 == 0 and self._clock() > self.deadline:
            raise CageError(f"fs.deny: matching the glob {self.pattern!r} took more than {self.seconds:g} s "
                            "(all deny globs of a step share that time); narrow the pattern")


# Directories a kept cage's deny globs may depend on (GlobWatch): beyond it the cage is built at
# every launch, as before. Each costs a hit a stat and its comparison (≈ 4 µs of CPU on this
# loaded machine, against ≈ 35 µs of a build's walk), a miss ≈ 85 bytes more of the entry to read
# and write; 10,000 keep an entry below 1 MB (MAX_ENTRY_BYTES: 4 MiB) and a hit's check near 40 ms
# against a miss's ≈ 0.4 s (docs/performance.md, "Session 12 — deny globs in the plan cache").
GLOB_WATCH_MAX_DIRS = 10_000


class GlobWatch:
    """What the matches of a cage's deny globs depend on, so a compiled cage with glob denies can
    be kept (the plan cache's entries, `Reuse`): the identity (`fingerprint.inode_identity`: device,
    inode, mode, size, mtime, ctime) of every directory `glob_nofollow` looked into — listed, or
    a name looked up in it — taken BEFORE it looked. A match appears, goes or changes type only
    by an entry made, removed or renamed in such a directory, or by a directory swapped for
    another at its path: each moves that directory's ctime or inode (no process sets a ctime
    back), so equal identities at a later check prove the walk would find the same paths.

    `state()` is that proof as plain values, or None where it proves nothing — and the cage then
    keeps no fingerprint (built at every launch, as before): more than `max_dirs` directories, a
    directory that cannot be stat'ed (the literal prefix may be missing: that is a state too), an
    identity too recent to show a later change (`fingerprint.TICK_NS`), a match that is a symlink
    (denied where it points: a path outside every directory watched), a directory on a file system
    whose directory times are not known to follow its entries (DIRECTORY_TIMES_TRACKED)."""

    __slots__ = ("dirs", "patterns", "max_dirs", "usable", "since")

    def __init__(self, max_dirs: int = GLOB_WATCH_MAX_DIRS):
        # the clock before any stat: an identity is settled if no change after its stat can give
        # the same ctime (`fingerprint.ctime_settled`), asked at a time no later than the stat
        self.since = time.time_ns()
        self.dirs: dict = {}  # path -> (follow symlinks, identity or None)
        self.patterns: list = []
        self.max_dirs = max_dirs
        self.usable = True

    def start(self, pattern: str) -> None:
        self.patterns.append(pattern)

    def look(self, path: str, follow: bool) -> None:
        """`path` is about to be looked into (its first look only: the identity must precede every
        look). `follow`: the literal prefix, whose symlinks the walk follows (as for fs.read)."""
        if not self.usable or path in self.dirs:
            return
        if len(self.dirs) >= self.max_dirs:
            self.usable = False
            self.dirs.clear()  # (nothing more to keep)
            return
        try:
            self.dirs[path] = (follow, inode_identity(os.stat(path) if follow else os.lstat(path)))
        except (FileNotFoundError, NotADirectoryError):
            if not follow:
                self.usable = False  # listed a moment ago, gone now: nothing settled to keep
            self.dirs[path] = (follow, None)  # a missing prefix: matches nothing until it is made
        except OSError:
            self.usable = False

    def matched(self, path: str) -> None:
        """A match the caller denies: one that is a symlink makes the watch prove nothing."""
        if self.usable and os.path.islink(path):
            self.usable = False

    def state(self, globs) -> tuple:
        """((path, follow, identity), ...) for `fingerprint.Fingerprint(globs=)`, or None (see the
        class). `globs`: the deny patterns that are globs; each must have been walked with this
        watch (else what it matched is not in it)."""
        if not self.usable or sorted(self.patterns) != sorted(globs):
            return None
        if not all(ident is None or ctime_settled(ident[5], self.since) for _, ident in self.dirs.values()):
            return None
        devices = {ident[0] for _, ident in self.dirs.values() if ident is not None}
        if devices:
            kinds = _file_systems(devices)
            if any(kinds.get(device) not in DIRECTORY_TIMES_TRACKED for device in devices):
                return None
        return tuple((path, follow, ident) for path, (follow, ident) in self.dirs.items())
