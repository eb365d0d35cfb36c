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


def _settled(ctime_ns: int, now_ns: int) -> bool:
    """Whether a later change of the inode must show in its ctime (see TICK_NS)."""
    margin = 2 * SECOND_NS if ctime_ns % SECOND_NS == 0 else TICK_NS
    return ctime_ns < now_ns - margin


def _identity(st) -> tuple:
    """What a change of an inode changes: which inode, its type, size and times. No process can
    set a ctime back (utimensat sets atime and mtime; the clock needs CAP_SYS_TIME), and
    writing, creating, removing or renaming an entry, chmod and link() each update one."""
    return st.st_dev, st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _environment() -> tuple:
    """What the protected paths read from the environment, kept with the stats: PATH (the PATH
    directories: confine.path_dirs), HOME, XDG_CONFIG_HOME and git's GIT_CONFIG_GLOBAL,
    GIT_CONFIG_SYSTEM and GIT_CONFIG_NOSYSTEM (which global and system git configs are read:
    protected.hooks_paths, launch_reads). Another value resolves anew."""
    env = os.environ
    return (env.get("PATH"), env.get("HOME"), env.get("XDG_CONFIG_HOME"), env.get("GIT_CONFIG_GLOBAL"),
            env.get("GIT_CONFIG_SYSTEM"), env.get("GIT_CONFIG_NOSYSTEM"))


def _stats(paths, look) -> tuple:
    out = []
    for path in paths:
        try:
            out.append(_identity(look(path)))
        except OSError:
            out.append(None)
    return tuple(out)


def stats_before(fs) -> dict:
    """{path: stat_key} of a resolved policy's own paths, taken before its rules are decided (see
    `Fingerprint`'s `before`): what a fingerprint then holds for them instead of later stats."""
    return {path: stat_key(path) for path in (*fs.read, *fs.exec, *fs.write, *fs.deny, *fs.protect)}


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
        self.inputs = tuple(dict.fromkeys(inputs))  # (a path named by two keys is looked up once)
        # `before`: {path: stat_key} of the policy's own paths taken BEFORE the rules were decided
        # (`stats_before`). A fingerprint taken after them described a deny file made while the
        # cage was built (absent for `expand_denies`, present now): the rules granted it and every
        # later check said "unchanged" (redcage9). Stats older than every decision make any change
        # since show at the next check.
        self._input_keys = (self._inputs_now() if before is None else
                            tuple(before[p] if p in before else stat_key(p) for p in self.inputs))
        now = time.time_ns()
        self._split = []  # [directory, stat_key, listing, identity settled at `now` or None]
        for directory in split_dirs:
            try:
                st = os.stat(directory)
                listing = tuple(os.listdir(directory))
            except OSError:
                self._split.append([directory, None, (), None])
                continue
            ident = (st.st_dev, st.st_ino, st.st_mode, st.st_ctime_ns)
            self._split.append([directory, ident[:3], listing, ident if _settled(st.st_ctime_ns, now) else None])
        # the directories the deny globs looked into, as they were before each was looked into
        # (`deny_globs.GlobWatch.state`: settled when taken), so a glob's matches need no new walk
        self._globs = tuple(globs)
        self.protected_args = tuple(protected_args)
        self._protected = protected  # protections.protected_paths(*protected_args) as the build found them
        self._watch = self._watched = self._installed = self._env = None
        if watch_before is not None and watch_before[0] == self.protected_args:
            # what decided the build's own resolution, stat'ed BEFORE it (`protected_watch`,
            # taken by `cage.build`): trusted where settled then, so the first check — a plan
            # cache entry's, after the building run — only stats again, as every later one
            self._install = watch_before[1]
            self._trust(watch_before[2])
            return
        write_roots = protected_args[0]
        self._install = None
        if write_roots and protected_args[2]:
            from sandboy.confine import own_install

            self._install = own_install.candidates(write_roots)
        # No stats yet: the first check resolves anew (and takes them, before resolving), so the
        # build itself pays one resolution, and a cage never reused none more.

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
            entry[3] = ident if _settled(st.st_ctime_ns, now) else None
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
                now = _identity(stat_(path) if follow else lstat(path))
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
            if (_environment() == self._env
                    and _stats(looked_up, os.lstat) + _stats(read, os.stat) == self._watched
                    and self._installed_now() == self._installed):
                return True
        if not resolve:
            return False
        from sandboy.confine import protections
        from sandboy.confine.protected import launch_reads

        taken = _watch_now(self.protected_args, self._install)
        if protections.protected_paths(*self.protected_args, managers=managers) != self._protected:
            return False
        self._watch = self._watched = None
        watch = taken[2]
        if watch is None or launch_reads(write_roots, explicit, defaults) == watch:
            self._trust(taken)
        return True

    def _trust(self, taken) -> None:
        """Keep `taken` (`_watch_now`'s, from before a resolution that gave `_protected`) as what
        decides the protected paths, where every stat in it was settled when it was taken (a
        later change of any of them must then show: TICK_NS) and no path looked up is a symlink."""
        now, env, watch, watched, installed = taken
        if (watch is not None
                and all(st is None or (_settled(st[5], now) and not stat.S_ISLNK(st[2]))
                        for st in watched[:len(watch[0])])
                and all(st is None or _settled(st[5], now) for st in watched[len(watch[0]):])):
            self._watch, self._watched, self._installed, self._env = watch, watched, installed, env



def _path_dirs_protected(protected_args) -> bool:
    """Whether directories of the operator's PATH are protected inside the write roots
    (`confine.path_dirs`): no short list of stats decides those (a symlink on the way to one,
    one made again where missing), so such a cage's protected paths are resolved at each
    check, as before. Where none is (the usual gate: a PATH directory in the repository is
    the run's own work), the PATH's text is kept with the stats (`_environment`): another PATH
    resolves anew."""
    if not protected_args[2] or len(protected_args) < 4:
        return False
    from sandboy.confine.path_dirs import on_path

    return bool(on_path(protected_args[0], protected_args[3])[0])


def _watch_now(protected_args, install) -> tuple:
    """(the clock, `_environment()`, `launch_reads`' (looked up, read) or None, their stats, the
    installation rows present) — in that order, each taken before the next: what decides the
    protected paths of `protected_args` now, to be taken BEFORE a resolution whose answer they
    then vouch for (`Fingerprint._trust`)."""
    from sandboy.confine.protected import launch_reads

    write_roots, explicit, defaults = protected_args[:3]
    now = time.time_ns()
    env = _environment()
    watch = None if _path_dirs_protected(protected_args) else launch_reads(write_roots, explicit, defaults)
    watched = None if watch is None else _stats(watch[0], os.lstat) + _stats(watch[1], os.stat)
    installed = None
    if install is not None:
        installed = []
        if install:
            from sandboy.confine import own_install

            installed = own_install.present(install)
    return now, env, watch, watched, installed


def protected_watch(protected_args):
    """What `Fingerprint(..., watch_before=)` takes: `_watch_now` for a cage with write roots,
    called by the build BEFORE it resolves the protected paths (`protections.protected_paths`),
    or None (no write root: nothing to watch). The miss of a plan cache then writes its entry
    after the run from these stats compared again, instead of resolving the protected paths a
    second time (≈ 0.5-1.3 ms: docs/performance.md, "Session 10 — write-root runs")."""
    protected_args = tuple(protected_args)
    if not protected_args[0] or protected_args[1]:
        return None  # no write root; or fs.protect entries, which no short list decides (resolved at every check)
    install = None
    if protected_args[2]:
        from sandboy.confine import own_install

        install = own_install.candidates(protected_args[0])
    return protected_args, install, _watch_now(protected_args, install)
