"""Compiled cages kept for another run: THE rule for when a cage may run another command
(`Reuse`, used by `for_run` for the API and by the gate's cage cache). What a build's rules depend
on in the file system, and the check that a rebuild would still give the same, is
`fingerprint.Fingerprint` (shared with `sandboy run`'s plan cache). `sandboy run` never loads this.
"""

import atexit
import os

from sandboy.confine import namespaces
from sandboy.confine.cage import build


class Reuse:
    """Compiled cages kept for reuse, one per key, most recently used last: THE rule for when a
    compiled cage may run another command (used by `for_run` and the gate's `CageCache`).

    A cage is reused only while a rebuild would give the same rules (`Cage.still_valid`: the
    same inode behind every policy path, the same entries in every directory split around a
    deny, every directory a deny glob looked into unchanged — `deny_globs.GlobWatch`; where that
    proves nothing the glob is matched anew at each launch: no fingerprint), and with a
    `{tmp}` only where each run starts with it empty: under the namespace tier every run mounts
    a fresh tmpfs there; without it only a caller that runs one command at a time may ask
    for the host directory to be emptied between runs (`empty_tmp`, the gate)."""

    def __init__(self, limit=None, empty_tmp=False):
        self.cages: dict = {}
        self.limit = limit
        self.empty_tmp = empty_tmp

    def _fresh_tmp(self, cage) -> bool:
        if not cage.ctx.tmp or (cage.tier is not None and cage.tier.tmp_private):
            return True
        if not self.empty_tmp:
            return False
        from sandboy.confine.cleanup import empty_dir

        return empty_dir(cage.ctx.tmp)

    def get(self, key, make) -> tuple:
        """(cage, owned) for `key`: the kept cage if it may run again, else `make()`'s, kept
        when it can be reused. `owned` cages are the caller's to close."""
        cage = self.cages.pop(key, None)
        if cage is not None and not (cage.still_valid() and self._fresh_tmp(cage)):
            cage.close()
            cage = None
        if cage is None:
            cage = make()
            if cage.fingerprint is None or not self._fresh_tmp(cage):
                return cage, True
        self.cages[key] = cage
        while self.limit and len(self.cages) > self.limit:
            self.cages.pop(next(iter(self.cages))).close()
        return cage, False

    def close(self, deadline=None) -> list:
        """Close every kept cage; the `{tmp}` directories left behind (see Cage.close)."""
        left = [cage.ctx.tmp for cage in self.cages.values() if not cage.close(deadline)]
        self.cages.clear()
        return left


_REUSED = Reuse(limit=8)
# The API's kept cages are closed when the process ends: under the namespace tier each holds the
# (empty) host directory behind its `{tmp}`, which nothing else removes — every program calling
# `sandboy.run` / `launch.spawn` with a `{tmp}` policy (the audit pipeline: one per tool) left one
# in $TMPDIR per kept cage. A forked child does not own its parent's cages: it forgets them, so
# its exit cannot remove a directory the parent's next run mounts its tmpfs on.
atexit.register(_REUSED.close)
os.register_at_fork(after_in_child=_REUSED.cages.clear)


def for_run(policy, cwd=None, repo=None, tty=False) -> tuple:
    """(cage, owned) for one run of `policy`: a cage compiled earlier in this process when it
    may run again (see `Reuse`), else a new one. `owned` cages are the caller's to close. This
    is what makes `sandboy.run(argv, policy)` in a loop cost what a prebuilt cage costs
    (docs/performance.md); a policy with `{tmp}` is reused only under the namespace tier (runs
    of the API may overlap, so nothing empties a shared host directory between them)."""
    here = os.path.abspath(cwd or os.getcwd())
    env = os.environ
    key = (policy, here, os.path.abspath(repo or here), tty, tuple(env.get(n) for n in policy.env.pass_),
           env.get(namespaces.FORCE_OFF_ENV),
           env.get("HOME"), env.get("SANDBOY_CACHE_DIR"), env.get("XDG_CACHE_HOME"), os.geteuid())
    return _REUSED.get(key, lambda: build(policy, cwd=cwd, repo=repo, tty=tty))
