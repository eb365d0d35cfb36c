"""The post-run git check (ADR 0019) around runs: its supervision hook (`GitCheck`), the Scope a
cage's run is checked with (`scope_args`, `_cage_scope`), the refusal of a write root beyond the
walk's bound (`beyond_bound`), and what a gate carries from one step's check to the next launch
(`GitDirs`, `LaunchRecord`).

Apart from `gitcheck` (the snapshot, the walk, the verdict) because a plan-cache hit of a
write-root policy runs the check without any of this: it makes the Scope from the arguments its
entry kept and calls `GitSnapshot.at_launch` and `after_run` itself (`plan_cache.CachedPlan.run`).
In a fresh process each class a module defines costs tens of µs to create and each marshalled
kB ≈ 6 µs to read: what a hit never runs stays out of the group it reads (docs/performance.md,
"Session 11 — the write-root hit"). `gitcheck` still answers for these names (its `__getattr__`).
"""

from sandboy.confine import gitcheck
from sandboy.confine.gitcheck import Scope
from sandboy.policy.resolve import is_within


class GitDirs:
    """Where each git directory in reach of a check was, and the worktree top holding each `.git`
    directory: `paths` (st_dev, st_ino) -> path, as the walk of `roots` (directories) and
    `files` (files granted for writing) found them."""

    __slots__ = ("roots", "files", "paths")

    def __init__(self, roots, files, paths):
        self.roots, self.files, self.paths = tuple(roots), frozenset(files), paths

    def covers(self, path: str) -> bool:
        """Whether the walk of one of `roots` reached everything below `path` (it never enters
        a `.git`: a root there is walked on its own, as split_roots says)."""
        return any(is_within(path, root) and ".git" not in path[len(root):].split("/") for root in self.roots)


class LaunchRecord:
    """Carries `GitDirs` from one run's check to the next run's launch, for runs that follow each
    other with nothing but Sandboy in between (a gate's steps: `GateRun`). `take` empties it, so
    a run whose check does not end (stopped, abandoned) leaves the next one to walk again.

    It also keeps each cage's `Scope` (`scope_for`) where no run can change what the Scope
    resolved: `reach` (set by the gate) holds every directory a run of the gate may write in."""

    __slots__ = ("dirs", "reach", "_scopes", "_per_run")

    def __init__(self, reach=None):
        self.dirs = None
        self.reach = reach  # realpaths (and as written) of every write root of the runs, or None
        import weakref  # (the gate's: not on `sandboy run`'s path)

        # cage -> its Scope, kept only where no run can change it; a cage closed after its step
        # (one that could not be shared) takes its entry with it
        self._scopes = weakref.WeakKeyDictionary()
        # cages one of whose lookups a run could change: their Scope is made for every run, and
        # the lookups are not judged again (a verdict that only ever costs a fresh Scope)
        self._per_run = weakref.WeakSet()

    def scope_for(self, cage):
        """The check's Scope for a run of `cage` (None: no check), made once per cage where no run
        can change any lookup it made — each write root, the run's `{tmp}` and the operator's
        global configs resolve through no directory inside `reach` or the cage's own write roots
        (`resolve.lookup_changeable`; the built-in ceiling's `{repo}` is an entry of the directory
        above the repository) — else made again for every run, as before (session 8: ≈ 0.3 ms a
        step). Under the namespace tier only: without it the Scope also holds the operator's PATH
        directories, which have their own per-look check (path_dirs). A cage the gate rebuilt (its
        reuse fingerprint saw a change) is another cage, with a Scope of its own."""
        scope = self._scopes.get(cage)
        if scope is not None:
            return scope
        scope = _cage_scope(cage)
        if scope is not None and self.reach is not None and cage.tier is not None and cage not in self._per_run:
            from sandboy.policy.resolve import lookup_changeable

            write = cage.compiled["landlock.fs"].outputs["protected_args"][0]
            reach = (*self.reach, *scope.writable)
            if not any(lookup_changeable(path, reach) for path in (*write, *scope.exclude,
                                                                   *gitcheck.global_configs(scope.home))):
                self._scopes[cage] = scope
            else:
                self._per_run.add(cage)
        return scope

    def take(self):
        dirs, self.dirs = self.dirs, None
        return dirs


def beyond_bound(root: str, roots: int) -> str:
    """Why a run is refused at launch: its write roots hold more than the check can walk."""
    where = (f"{root} holds more than {gitcheck.WALK_BUDGET:,} entries" if roots == 1 else
             f"the {roots} write roots hold more than {gitcheck.WALK_BUDGET:,} entries together ({root} reached the bound)")
    return (f"fs.write: {where} to look through for repositories the command could plant; the post-run git "
            "check (ADR 0019) would stop at that bound AFTER the command ran and fail the run, so it is refused "
            "before it starts: grant the project's directory (or a cache or output directory), not a whole home "
            "or tree — or set fs.protect_defaults = false to go without the check and the protected paths")


def _cage_scope(cage):
    """The check's Scope for one run of `cage`, or None when the policy turned the protected
    defaults off (`fs.protect_defaults = false`) or writes nowhere. The run's `{tmp}` is not
    walked where it is the namespace tier's private tmpfs (gone with the run; the host sees an
    empty mount point). Without the tier it is a host directory that outlives the run while the
    cage is kept (the API's reused cage, a gate's cache): a symlink left in a write root led the
    operator's git into a repository planted there, so it is walked like any write root."""
    args = scope_args(cage)
    return None if args is None else Scope(**args)


def scope_args(cage):
    """The arguments of `_cage_scope`'s Scope, as plain values (a plan cache entry keeps them:
    a hit makes the same Scope, `plan_cache.CachedPlan.run`), or None where there is no check."""
    if not cage.policy.fs.write:
        return None
    if not cage.policy.fs.protect_defaults:
        # no git check, no default set — but the policy's own `fs.protect` entries inside a write
        # root are still "never writable": their other names (a hard link, a symlink inside one
        # into the write root) and loosened modes are judged after the run (session 11: with the
        # defaults off nothing was, and `echo ... >> dotfiles/x` wrote a protected file through
        # its stow link, rc 0)
        if not cage.protected:
            return None
        write = cage.compiled["landlock.fs"].outputs["protected_args"][0]
        return {"write_roots": tuple(write), "exclude": (), "path_dirs": (), "protected": tuple(cage.protected),
                "links_only": True}
    private = cage.tier is not None and cage.tier.tmp_private
    exclude = (cage.ctx.tmp,) if cage.ctx.tmp and private else ()
    write, _protect, _defaults, work = cage.compiled["landlock.fs"].outputs["protected_args"]
    path_dirs = ()
    if cage.tier is None:  # under the tier they are bound read-only; without it, judged after the run
        from sandboy.confine.path_dirs import held, on_path

        # the directories and the symlinks on the way to them (a link replaced or repointed is
        # judged too: `~/bin -> dotfiles/bin`)
        path_dirs = list(dict.fromkeys(path for row in on_path(write, work)[0] for path in held(*row)))
    return {"write_roots": tuple(write), "exclude": tuple(exclude), "path_dirs": tuple(path_dirs),
            "protected": tuple(cage.protected), "installed": tuple(getattr(cage, "installed", ()))}


class GitCheck:
    """The check as a supervision hook (confine/supervision.py), made by `exec_mode.hooks_for`
    for every run the check applies to: the snapshot just before the child starts (everything
    the command changes is after it), the verdict once every process of the run has ended. Not
    a subclass of supervision.Hook: exec mode carries it without importing that module."""

    name = "git check"
    during_run = False  # before and after only: under the namespace tier the init's end will do

    def __init__(self, cage, scope: Scope, record=None):
        self.cage = cage
        self.scope = scope  # looked up once, when the hook is made
        self.record = record  # a LaunchRecord shared by the runs of one gate, or None
        self.snap = None

    @classmethod
    def for_cage(cls, cage, record=None):
        """The hook for one run of `cage`, or None where the check does not apply. `record`: a
        `LaunchRecord` the caller keeps across runs that follow each other with nothing else
        writing their roots in between (a gate's steps): this run's launch walk is then the
        previous check's (session 6: only the first step walks before it starts)."""
        scope = record.scope_for(cage) if record is not None else _cage_scope(cage)
        return cls(cage, scope, record) if scope else None

    def start(self, run) -> tuple:
        # the scope was looked up when the hook was made (for_cage), just before: only the clock,
        # the launch configs and (unless carried) where the git directories are are read now
        carried = self.record.take() if self.record is not None else None
        # (the egress proxy's thread may hold every file descriptor when the check runs: the
        # judgement is loaded at launch then, even where the stats may decide without it)
        self.snap = gitcheck.GitSnapshot.at_launch(self.scope, carried, self.cage.take_launch_managers(),
                                          load_judgement=bool(self.cage.policy.net.egress))
        if self.snap is not None and self.snap.beyond_bound is not None:
            from sandboy.errors import CageError

            (root, cut), self.snap = (self.snap.beyond_bound, self.snap.links_cut), None  # (nothing runs)
            raise CageError(cut or beyond_bound(root, len(self.scope.roots)))
        return ()

    def started(self, run) -> None:
        pass

    def stop(self, run, result) -> None:
        """A run that left code for the host's next git command fails closed (125, outcome
        PLANTED) whatever its own status, saying what was moved where (ADR 0019)."""
        if self.snap is None:
            return
        if run.abandoned:  # the gate was stopped: it fails anyway (130)
            result.error = ((result.error + "; ") if result.error else "") + (
                "the post-run git check was skipped: the stopped step's processes were still being "
                "torn down — check the repository before running git in it (ADR 0019)")
            return
        message = gitcheck.after_run(self.snap)
        if self.record is not None:
            # taken after the quarantine (which moves files, never a git directory): the next
            # step starts from this tree
            self.record.dirs = self.snap.after
        if message:
            from sandboy.confine.result import PLANTED

            result.refuse(message, PLANTED)
