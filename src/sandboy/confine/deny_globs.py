"""Deny patterns (`fs.deny` globs) matched against the tree at launch: `**` and the shell's
wildcards, never following a symlink past the pattern's literal prefix, within a budget of
directory entries and time (a CageError naming the pattern beyond it). `landlock.expand_denies`
loads this module only for a policy that has a deny glob.
"""

import os

from sandboy.errors import CageError
from sandboy.policy.resolve import is_glob

GLOB_MAX_ENTRIES = 500_000  # directory entries one deny pattern may look at
GLOB_MAX_SECONDS = 10.0     # for all of a cage's deny patterns together


def glob_nofollow(pattern: str, budget=None):
    """Paths matching an absolute glob; `**` is zero or more directories. Past the pattern's
    literal prefix, no symlink is ever followed: a symlinked directory matches a component but
    is never entered.

    Why not `glob.glob(recursive=True)`: it follows symlinked directories, and the working copy
    is untrusted: eight links `a…h -> .` and `*/*/*/*/*/*/*/*/*/nothing` walked 8^9 paths (11
    minutes at depth 12; three links under `**` walked 3^40). Even without symlinks a real tree
    can be huge, so the walk is bounded: `budget` (a GlobBudget) raises a CageError naming the
    pattern past GLOB_MAX_ENTRIES entries or its deadline. Iterative: a tree thousands of levels
    deep is walked with a list, not the Python stack.
    """
    import fnmatch

    parts = [p for p in pattern.split("/") if p]
    collapsed: list[str] = []
    for part in parts:  # `**/**` matches what `**` matches; keep the walk linear
        if not (part == "**" and collapsed[-1:] == ["**"]):
            collapsed.append(part)
    first_glob = next((i for i, part in enumerate(collapsed) if is_glob(part)), len(collapsed))
    # The literal prefix is a policy path like any other (symlinks in it followed, as for fs.read).
    prefix = "/" + "/".join(collapsed[:first_glob])
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
            for entry in entries(base):
                if fnmatch.fnmatchcase(entry.name, part):
                    if i == last:
                        yield entry.path
                    elif entry.is_dir(follow_symlinks=False):
                        stack.append((entry.path, i + 1))


class GlobBudget:
    """How much work matching deny globs may take: GLOB_MAX_ENTRIES entries per pattern, and one
    deadline for all of them (a cage's build). Exceeding either is a CageError naming the pattern:
    the cage cannot be built as the policy asks, so nothing runs (exit 125)."""

    def __init__(self, max_entries: int = GLOB_MAX_ENTRIES, seconds: float = GLOB_MAX_SECONDS):
        import time

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
