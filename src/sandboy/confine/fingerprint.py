"""What a compiled cage's rules depend on in the file system, and the check that a rebuild would
still give the same (`Fingerprint`): THE notion of "is this compiled cage still what a build now
would give" behind `reuse.Reuse` (the API's and the gate's kept cages) and `plan_cache` (`sandboy
run`'s compiled plans kept across invocations, ADR 0028). Its own module, stdlib only at import, so
a cached `sandboy run` can check a fingerprint without importing the compilers (the protected
paths' resolution, its slow way, imports them when it is needed).
"""

import marshal
import os
import stat
import time


def stat_key(path: str):
    try:
        st = os.stat(path)  # follows symlinks, as the rules do
    except OSError:
        return None
    # (whether a regular file has other hard links: a denied one's are reported degraded, and a
    # link made since must be said again — protections._denied_with_other_names)
    return st.st_dev, st.st_ino, st.st_mode, stat.S_ISREG(st.st_mode) and st.st_nlink > 1


# How long after a change its ctime may still be taken by another change: file timestamps come
# from the kernel's coarse clock (a tick: at most 10 ms), or are cut to whole seconds (ext3, ext4
# with 128-byte inodes). A stat whose ctime is more recent than that, when it is taken, proves
# nothing yet: the check then looks again the long way.
TICK_NS = 50_000_000
SECOND_NS = 1_000_000_000


def ctime_settled(ctime_ns: int, now_ns: int) -> bool:
    """Whether a later change of the inode whose ctime is `ctime_ns` must show in its ctime, seen
    at `now_ns` (see TICK_NS): what lets an unchanged `inode_identity` stand for an unchanged
    inode across runs (the plan cache's entries and pieces, the deny globs' watch, the split
    directories, the protected paths' stats)."""
    margin = 2 * SECOND_NS if ctime_ns % SECOND_NS == 0 else TICK_NS
    return ctime_ns < now_ns - margin


def inode_identity(st) -> tuple:
    """What a change of an inode changes, from its `os.stat_result`: which inode, its type, size
    and times — THE change signature every kept thing is checked by (the code that built a plan,
    `{tmp}`'s mount point, a glob's directories, the pieces of a build). No process can set a
    ctime back (utimensat sets atime and mtime; the clock needs CAP_SYS_TIME), and writing,
    creating, removing or renaming an entry, chmod and link() each update one."""
    return st.st_dev, st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def protected_environment() -> tuple:
    """What the protected paths read from the environment, kept with the stats: PATH (the PATH
    directories: confine.path_dirs), HOME, XDG_CONFIG_HOME and git's GIT_CONFIG_GLOBAL,
    GIT_CONFIG_SYSTEM and GIT_CONFIG_NOSYSTEM (which global and system git configs are read:
    protected.hooks_paths, launch_reads). Another value resolves anew."""
    env = os.environ
    return (env.get("PATH"), env.get("HOME"), env.get("XDG_CONFIG_HOME"), env.get("GIT_CONFIG_GLOBAL"),
            env.get("GIT_CONFIG_SYSTEM"), env.get("GIT_CONFIG_NOSYSTEM"))


def identities(paths, look) -> tuple:
    """`inode_identity` of each of `paths` by `look` (os.stat or os.lstat), None for one that
    cannot be looked at: the protected paths' watch, taken by a build and compared by a check."""
    out = []
    for path in paths:
        try:
            out.append(inode_identity(look(path)))
        except OSError:
            out.append(None)
    return tuple(out)


class Fingerprint:
    """What a compiled cage's rules depend on in the file system (`inputs`: the inode each policy
    path leads to, or that it is missing; `split_dirs`: the entries of each directory split
    around a deny; `globs`: each directory a deny glob looked into, unchanged since; the
    protected paths that exist now: a `.bashrc` made since must be protected), and the check
    that a rebuild would still give the same (`unchanged`).

    The check runs before every reuse (each step of a gate), so it looks only at what shows a
    change: a split directory's inode and ctime (listed again only when they moved), and the
    stats of what decided the protected paths (`protected.launch_reads`) plus the lookups of
    Sandboy's own installation rows a write root may hold (`own_install.candidates`, made once).
    Only when one of those moved, or was too recent to prove anything (TICK_NS), or where no
    short list decides them (`launch_reads` is None: fs.protect entries, a core.hooksPath...),
    are the protected paths resolved anew and compared, as a rebuild would."""

    __slots__ = ("inputs", "_input_keys", "_split", "protected_args", "_protected", "_install", "_installed",
                 "_watch", "_watched", "_env", "_globs")

    def __init__(self, inputs, split_dirs, protected_args, protected, before=None, watch_before=None, globs=()):
        """Taken by a build (`cage.build`, a reusable cage) or a test: see `fingerprint_build.take`,
        where this lives so that a plan cache hit, which only checks one (`from_state`), does not
        read the code that takes one (the run path's bundle reads a module whole: ADR 0023)."""
        from sandboy.confine.fingerprint_build import take

        take(self, inputs, split_dirs, protected_args, protected, before, watch_before, globs)

    def state(self) -> tuple:
        """Everything this fingerprint holds, as plain values (tuples, lists, strings, numbers,
        None) that `marshal` can write: a plan cache entry keeps it (`from_state` makes it again).
        The deny globs' directories (up to `deny_globs.GLOB_WATCH_MAX_DIRS`) as marshalled bytes,
        read by their check only: a miss whose key differs never unmarshals them."""
        return tuple(marshal.dumps(self._globs) if name == "_globs" and type(self._globs) is tuple
                     else getattr(self, name) for name in self.__slots__)

    @classmethod
    def from_state(cls, state: tuple) -> "Fingerprint":
        """The fingerprint `state()` described (in another process). TypeError/ValueError for a
        state of another shape."""
        if type(state) is not tuple or len(state) != len(cls.__slots__):
            raise ValueError("not a fingerprint's state")
        fingerprint = cls.__new__(cls)
        for name, value in zip(cls.__slots__, state):
            setattr(fingerprint, name, value)
        return fingerprint

    def present(self) -> frozenset:
        """The policy paths whose stat (following symlinks) succeeded when this fingerprint was
        taken: each still exists wherever `unchanged()` is True (its stat_key must be the same)."""
        return frozenset(path for path, key in zip(self.inputs, self._input_keys) if key is not None)

    def _inputs_now(self) -> tuple:
        return tuple(stat_key(p) for p in self.inputs)

    def unchanged(self, managers=None, resolve=True) -> bool:
        """True when a rebuild now would give the same rules (see the class). `managers`: a dict
        that gets the hook-manager discoveries where the protected paths were resolved anew
        (`protected.discover_managers`). `resolve=False`: False instead of resolving them anew
        where the stats do not settle it (a plan cache hit, which imports no compiler: the
        miss builds, and its entry takes the stats again)."""
        return (self._inputs_now() == self._input_keys and self._split_unchanged() and self._globs_unchanged()
                and self._protected_unchanged(managers, resolve))

    def protected_settled(self) -> bool:
        """Whether the protected paths are decided by stats alone at the next check (`unchanged`
        has resolved them and found `launch_reads` settled), or there are none to decide (no
        write root): what a plan cache entry needs to be checked without the compilers."""
        return not self.protected_args[0] or self._watch is not None

    def _split_unchanged(self) -> bool:
        now = None
        for entry in self._split:
            directory, key, listing, settled = entry
            try:
                st = os.stat(directory)
            except OSError:
                if key is not None:
                    return False
                continue
            ident = (st.st_dev, st.st_ino, st.st_mode, st.st_ctime_ns)
            if ident == settled:
                continue  # no entry added, removed or renamed there since it was listed
            now = now or time.time_ns()
            try:
                if ident[:3] != key or tuple(os.listdir(directory)) != listing:
                    return False  # (unsorted: an unchanged directory lists in the same order)
            except OSError:
                return False
            entry[3] = ident if ctime_settled(st.st_ctime_ns, now) else None
        return True

    def _globs_unchanged(self) -> bool:
        """Every directory a deny glob looked into is the one it was, with no entry made, removed or
        renamed in it since (`deny_globs.GlobWatch`: one stat each). Any difference — a directory
        that cannot be stat'ed now, made where the glob's prefix was missing — is a change: the
        walk is not made again here (a build does it)."""
        if type(self._globs) is bytes:  # (from an entry: see `state`)
            self._globs = marshal.loads(self._globs)
        stat_, lstat = os.stat, os.lstat
        for path, follow, identity in self._globs:
            try:
                now = inode_identity(stat_(path) if follow else lstat(path))
            except (FileNotFoundError, NotADirectoryError):
                now = None
            except OSError:
                return False
            if now != identity:
                return False
        return True

    def _installed_now(self):
        if self._install is None:
            return None
        if not self._install:  # no row of the installation in a write root (the usual one): no
            return []          # lookup to make, and a plan cache hit imports no own_install
        from sandboy.confine import own_install

        return own_install.present(self._install)

    def _protected_unchanged(self, managers=None, resolve=True) -> bool:
        """The protected paths a rebuild would find are those of the build: by the stats of what
        decided them where they are known and settled, else resolved anew (then the stats are
        taken again, BEFORE the resolution, so a change made meanwhile shows at the next check)."""
        write_roots, explicit, defaults = self.protected_args[:3]
        if not write_roots:
            return True
        if self._watch is not None:
            looked_up, read = self._watch
            if (protected_environment() == self._env
                    and identities(looked_up, os.lstat) + identities(read, os.stat) == self._watched
                    and self._installed_now() == self._installed):
                return True
        if not resolve:
            return False
        from sandboy.confine.fingerprint_build import resolved_unchanged  # (the compilers: a build's)

        return resolved_unchanged(self, managers)
