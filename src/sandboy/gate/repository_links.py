"""The operator's ceiling must not follow symlinks the repository made.

A ceiling path inside the repository (`exec = ["{repo}/.venv/bin"]`, `write = ["{repo}/build"]`)
or inside one of the ceiling's write roots was resolved like any path — symlinks followed — when
each step was met and when its cage was built. So the repository decided what the operator's
ceiling granted: a committed `.venv/bin -> /root` (or one an earlier step planted) made the
ceiling allow `/root`, and a step (with or without a policy of its own) read what lay there
(session 7 red team; `tests/gate/test_ceiling_through_repository_links.py`).

Here each ceiling grant (fs.read, fs.exec, fs.write) is looked up component by component before
every step; a symlink met INSIDE the repository or a ceiling write root (where the repository's
files and the steps' writes live) is not followed: the grant is dropped for that step and a
narrowing says so. Symlinks elsewhere (the operator's, `/bin -> usr/bin`) are followed as before.
Denies and protected paths are not touched: following a link there only ever narrows.

Only a grant whose lookup reads an entry of a directory inside such a root can change from one
step to the next (`resolve.lookup_changeable`: a step can make, replace or remove names only
there); the others — the built-in ceiling's `{repo}` itself, an entry of the directory above the
repository — are looked up once, when the gate starts, and keep that answer (session 8: ≈ 0.1 ms
a step). The watched ones are looked up again before each step.
"""

from __future__ import annotations

import os
import stat

from sandboy.policy.meet import Narrowing
from sandboy.policy.resolve import TMP_TOKEN, is_within_any, lookup_changeable, unfollowable

_GRANTS = ("read", "exec", "write")
MAX_LINKS = 40  # the kernel's own limit on symlinks followed in one lookup (ELOOP)


def _components(path: str) -> list[str]:
    return [part for part in path.split("/") if part not in ("", ".")]


def _lookup(path: str, roots: tuple) -> tuple[str | None, bool]:
    """(the first symlink met on the way to `path` that lies inside one of `roots`, or None;
    whether the lookup entered one of `roots` at all)."""
    pending = _components(path)[::-1]  # a stack: the next component last
    current, links, entered = "/", 0, is_within_any("/", roots)
    while pending:
        part = pending.pop()
        if part == "..":
            current = os.path.dirname(current)
            continue
        candidate = os.path.join(current, part)
        inside = is_within_any(candidate, roots)
        entered = entered or inside
        try:
            mode = os.lstat(candidate).st_mode
        except OSError:
            return None, entered  # the rest does not exist: nothing more is followed
        if not stat.S_ISLNK(mode):
            current = candidate
            continue
        links += 1
        if inside or links > MAX_LINKS:
            return candidate, True
        target = os.readlink(candidate)
        if target.startswith("/"):
            current = "/"
        pending.extend(_components(target)[::-1])
    return None, entered


class RepositoryLinks:
    """Made once per gate run; `apply()` before each step gives the ceiling for that step."""

    def __init__(self, ceiling, repo: str):
        self.ceiling = ceiling
        try:
            self._watch(ceiling, repo)
        except OSError as exc:  # a grant's symlink cannot be read: name the ceiling's entry
            raise unfollowable(exc, ceiling.source, ceiling.fs) or exc from None

    def _watch(self, ceiling, repo: str) -> None:
        roots = {os.path.realpath(repo)}
        for root in ceiling.fs.write:
            if not root.startswith(TMP_TOKEN):
                roots.update((os.path.normpath(root), os.path.realpath(root)))
        self.roots = tuple(roots)
        # (right, path) of the grants whose lookup a step can change: looked up again at each step
        self.watched = []
        # (right, path, link) of the others that pass through a link inside a root: dropped at
        # every step, looked up once
        self.fixed = []
        for right in _GRANTS:
            for path in getattr(ceiling.fs, right):
                if path.startswith(TMP_TOKEN):
                    continue
                if lookup_changeable(path, self.roots):
                    self.watched.append((right, path))
                else:
                    link, _ = _lookup(path, self.roots)
                    if link is not None:
                        self.fixed.append((right, path, link))

    def apply(self) -> tuple:
        """(the ceiling without the grants that pass through a symlink inside the repository or a
        write root, one Narrowing per grant dropped); the ceiling object itself when none is."""
        dropped: dict = {}
        narrowings = []
        for right, path, link in self._checked_links():
            dropped.setdefault(right, set()).add(path)
            narrowings.append(Narrowing(
                "fs", right, path,
                f"gets no {right} on {path} from the ceiling: its lookup passes through the symlink {link}, "
                "which lies in the repository or a write root (the repository must not choose what the "
                "ceiling grants); not followed"))
        if not dropped:
            return self.ceiling, []
        fs = self.ceiling.fs
        kept = {right: tuple(p for p in getattr(fs, right) if p not in paths) for right, paths in dropped.items()}
        return self.ceiling.replace(fs=fs.replace(**kept)), narrowings

    def _checked_links(self):
        """`_links()`, a grant whose symlink cannot be read named as the ceiling's policy error."""
        try:
            yield from self._links()
        except OSError as exc:
            raise unfollowable(exc, self.ceiling.source, self.ceiling.fs) or exc from None

    def _links(self):
        """(right, path, link) of each grant whose lookup passes through a symlink inside a root now."""
        yield from self.fixed
        for right, path in self.watched:
            link, _ = _lookup(path, self.roots)
            if link is not None:
                yield right, path, link
