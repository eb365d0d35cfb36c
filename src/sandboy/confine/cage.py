"""Compile a policy once, in the parent, into a plan the child runs before execve.

A plan is a list of raw system calls (see `_libc`): the child runs it and execs, so with the C
executor no Python runs between fork and exec. Each protection is compiled by its own compiler
(`protections`, ADR 0008); this module orders their steps and keeps what a run needs. Order
(issue #2): stdio -> namespaces (up to the PID namespace's init, which forks: the rest runs in
its child) -> working directory, signals, fds (per run) -> rlimits -> capabilities ->
no_new_privs -> Landlock -> seccomp. The working directory is entered after the mounts (else it
would stay on the read-only copy); seccomp goes last so the calls the earlier steps need are
never filtered.
"""

import os
import sys

from sandboy.confine import _libc, hygiene, landlock, namespaces, protections
from sandboy.errors import CageError
from sandboy.policy.resolve import Context, exec_args, policy_dir, resolve, unfollowable, uses_tmp


class Cage:
    """A policy compiled for this kernel: one `Compiled` per protection (see `protections`),
    the Landlock ruleset fd they share, the plan that applies them, an environment and a report
    of what is enforced and what degraded."""

    def __init__(self, policy, ctx, abi, compiled: dict, ruleset, warnings, protected=(), exec_paths=()):
        self.policy = policy
        self.ctx = ctx
        # fs.exec as resolved for this build (absolute, not symlink-resolved): `exec_roots`
        self._exec_paths = tuple(exec_paths)
        self._exec_roots = None
        self.compiled = compiled
        self.ruleset = ruleset
        self.env = compiled["environment"].outputs["env"]
        self.degraded = [d for c in compiled.values() for d in c.degraded]
        self.warnings = warnings
        # Protected paths (realpaths, existing, inside a write root): what a mount namespace
        # binds read-only; see confine.protected.
        self.protected = tuple(protected)
        # those of them that are installations' code (own_install, path_prefixes): their link
        # scan is best-effort past its bound (loosened.PER_PATH_SCAN), the start-up paths' is not
        self.installed = ()
        landlock_entry = {"abi": abi, **compiled["landlock.fs"].enforced, **compiled["landlock.net"].enforced}
        self.enforced = {"landlock": landlock_entry, "seccomp": compiled["seccomp"].enforced}
        for name in ("namespaces", "hygiene", "environment", "egress"):
            if name in compiled:
                self.enforced.update(compiled[name].enforced)
        # A fingerprint.Fingerprint, set by build() unless the caller runs one command
        # (`reusable=False`) or the policy's deny globs looked into what proves nothing
        # (`deny_globs.GlobWatch`: too many directories, one changed within the clock tick...):
        self.fingerprint = None
        # The hook-manager discoveries the protected paths' resolution just made (build, or a
        # reuse check that resolved anew), for the next launch's git check to take once
        # (`protected.discover_managers`): None once taken.
        self.launch_managers = None
        # The namespace tier where the kernel allows it (namespaces.Tier), else None
        self.tier = compiled["namespaces"].outputs.get("tier")
        self.renew_ruleset = None  # under the tier: makes a fresh copy of the ruleset (started())
        self._mounts_seen = None  # kernel_mounts.generation() when the write roots were last looked below
        self._runs = 0
        self.launched = None  # (ruleset fd, plan) of the last child started: see start_child
        self.launched_stdio_per_run = True  # whether its fd 0-2 took anything of that run's own
        # `{tmp}` at the fixed, shared mount point (`build(fixed_tmp=True)`, under the tier only):
        # (path, its lstat when the build found it empty, the clock before it), else None
        self.tmp_mount_point = None
        # In plan order (`protections.compile_all`). Both Landlock compilers fill ONE ruleset
        # (a second one would deny REFER, see landlock.py): it is applied once, after them both.
        # The ruleset's step is not stored: `plan()` asks the ruleset for it at each launch, so
        # a closed cage can never hand out an fd number it no longer owns (issue 8).
        self._steps, self._steps_after_landlock = [], []
        after = False
        for name, part in compiled.items():
            (self._steps_after_landlock if after else self._steps).extend(part.steps)
            after = after or name == "landlock.net"
        self._keepalive = compiled["seccomp"].outputs["keepalive"]
        # the pure-Python executor then makes no types in the child
        _libc.prepare_buffers(len(compiled["seccomp"].outputs["bpf"]))

    @property
    def cwd(self) -> str:
        return self.ctx.cwd

    @property
    def clone_flags(self) -> int:
        """The namespaces the child is cloned into (0: none, a vfork'd child)."""
        return self.tier.flags if self.tier is not None else 0

    def plan(self, stdio=(None, None, None), in_netns=(), handoff=None) -> list:
        """The child's system calls for one run: stdio, the namespace tier up to becoming the
        PID namespace's init (`in_netns`: this run's steps in its network namespace, see
        `namespaces.Tier.plan`; `handoff`: what the tier does with files handed in on fd 0-2,
        `namespaces.StdioHandoff`, made here without pipes when not given), working directory,
        then the cage."""
        steps = hygiene.plan_redirects(stdio)
        if self.tier is not None:
            handoff = self.tier.plan_stdio(stdio, pipes=False) if handoff is None else handoff
            steps += self.tier.plan(in_netns, handoff) + handoff.command_steps
        steps.append((f"enter {self.cwd}", (_libc.SYS_CHDIR, False, os.fsencode(self.cwd) + b"\0")))
        return (steps + hygiene.plan_signals() + hygiene.plan_cloexec() + self._steps
                + self.ruleset.plan() + self._steps_after_landlock)  # ruleset.plan(): CageError once closed

    @property
    def closed(self) -> bool:
        return self.ruleset.closed

    def check_open(self) -> None:
        """CageError (125) for a closed cage: launchers call this before forking anything."""
        self.ruleset.plan()

    def started(self) -> None:
        """A child was started from this cage. Under the namespace tier each child adds a few
        rules for its own private mounts to the shared ruleset (`namespaces.plan_landlock_rules`);
        every RULESET_RENEW_RUNS runs the ruleset is replaced by a fresh copy under the same fd
        number, so those rules cannot pile up."""
        self._runs += 1
        if self.renew_ruleset is not None and self._runs % namespaces.RULESET_RENEW_RUNS == 0:
            fresh = self.renew_ruleset()
            try:
                os.dup2(fresh.fd, self.ruleset.fd, inheritable=False)
            finally:
                fresh.close()

    def still_valid(self) -> bool:
        """True when a rebuild now would give the same rules (same inodes behind every policy
        path, same entries in every split directory), so this cage may run the command again."""
        if self.fingerprint is None or not self.kernel_mounts_absent():
            return False
        managers: dict = {}
        if not self.fingerprint.unchanged(managers):
            return False
        self.launch_managers = managers or None
        return True

    def kernel_mounts_absent(self) -> bool:
        """No mount of the kernel's own file systems (proc, sysfs, devtmpfs...) has appeared below
        a write root since the build (see `kernel_mounts`; the build refused one there). The
        table is read again only when it may have changed since this cage last looked."""
        roots = self.compiled["landlock.fs"].outputs.get("mount_roots")
        if not roots:
            return True
        from sandboy.confine import kernel_mounts

        now = kernel_mounts.generation()
        if now >= 0 and now == self._mounts_seen:
            return True
        if kernel_mounts.below(roots):
            return False
        self._mounts_seen = now
        return True

    def check_kernel_mounts(self) -> None:
        """CageError (125) where `kernel_mounts_absent` is not so: before a run of a cage the
        caller built and hands to `run` (no fingerprint is looked at then)."""
        if not self.kernel_mounts_absent():
            from sandboy.confine import kernel_mounts

            kernel_mounts.refuse(self.compiled["landlock.fs"].outputs["mount_roots"], self.policy.source)

    def take_launch_managers(self):
        """`launch_managers` for this launch's git check; None afterwards (a later run looks anew)."""
        managers, self.launch_managers = self.launch_managers, None
        return managers

    @property
    def exec_roots(self) -> list:
        """The directories the command may execute from, symlinks resolved: what `explain`
        checks a refused or skipped exec against. From the policy as this build resolved it
        (a PATH-searched `sandboy run` asked this of a fresh resolve of the policy before)."""
        if self._exec_roots is None:
            self._exec_roots = [os.path.realpath(p) for p in self._exec_paths if not p.startswith("{")]
        return self._exec_roots

    def exec_args(self, argv) -> tuple:
        """(candidate paths, argv, envp) as bytes: PATH is searched inside the cage, by the
        child, as execvp(3) would, so a directory the cage refuses is skipped like a miss."""
        return exec_args(argv, self.env)

    def describe_failure(self, index: int, err: int, stdio=(None, None, None), first=(), in_command=()) -> str:
        """Name the plan step a child reported as failed; `first`, `in_command`: (label, step)
        pairs the launcher added to the cage's own plan (see `start_child`)."""
        labels = [label for label, _ in self.child_plan(self.plan(stdio), first, in_command)]
        label = labels[index] if 0 <= index < len(labels) else f"step {index}"
        return f"cannot apply the cage: {label}: {os.strerror(err)}"

    def apply_here(self) -> None:
        """Apply the cage to THIS process (exec mode without the namespace tier, which needs a
        child: see `exec_mode.exec_confined`). Raises CageError naming the failed step."""
        if self.tier is not None:
            raise CageError("the namespace tier cannot be applied to the calling process")
        plan = self.plan()
        try:
            _libc.apply_plan([step for _, step in plan])
        except OSError as exc:
            raise CageError(self.describe_failure(exc.filename, exc.errno)) from None

    def child_plan(self, own: list, first=(), in_command=()) -> list:
        """The (label, step) pairs a child of `start_child` runs, this cage's plan being `own`:
        `first`, then `own`, with `in_command` run by the command's own process before anything
        else it runs: under the namespace tier right after the init forks it (the step after
        NR_INIT), so the init, which shares the caller's memory (ADR 0021), never runs them; without
        the tier (the child is the command) before `first`. The memory cgroup's join goes there:
        on cgroup v2 a group OOM kill reaching the init would kill the caller too (ADR 0027)."""
        if not in_command:
            return [*first, *own]
        if self.tier is None:
            return [*in_command, *first, *own]
        at = next(i for i, (_, step) in enumerate(own) if step[0] == _libc.NR_INIT) + 1
        return [*first, *own[:at], *in_command, *own[at:]]

    def start_child(self, argv, stdio, report_fd: int, first=(), in_command=()) -> int:
        """Fork a child that runs `first` ((label, step) pairs: its session, a supervision
        hook's steps), then this cage's plan, then execs `argv` (see `_libc`); `in_command`:
        steps of the command's own process, never the init's (see `child_plan`). A failed step or
        exec is reported on `report_fd`, and under the namespace tier the child is the new
        namespaces' init and reports the command's wait status there too (result.from_child
        reads it). Returns the child's pid."""
        paths, args, envp = self.exec_args(argv)
        # CageError: a file on fd 0-2 that cannot be handed in safely (namespaces.StdioHandoff)
        handoff = self.tier.plan_stdio(stdio) if self.tier is not None else None
        try:
            own = self.plan(stdio, handoff=handoff)
            plan = [step for _, step in self.child_plan(own, first, in_command)]
            # what the last child ran of this cage's own plan, and the ruleset fd it names: a
            # `sandboy run` plan cache entry is made of it (plan_keep._entry_for, ADR 0028) —
            # never of one whose fd 0-2 needed this run's own (a file reopened or relayed)
            self.launched = (self.ruleset.fd, [step for _, step in own])
            self.launched_stdio_per_run = handoff is not None and handoff.per_run()
            self.started()
            try:
                return _libc.fork_exec(plan, paths, args, envp, report_fd, self.clone_flags)
            except OSError as exc:
                if not self.clone_flags:
                    raise
                namespaces.forget()  # the kernel refuses the namespaces now: the next build probes again
                raise CageError(f"cannot apply the cage: clone into new namespaces: {exc.strerror}") from None
        finally:
            if handoff is not None:
                handoff.close()  # fork_exec returns once the command has exec'd: the child holds its own

    def close(self, deadline=None) -> bool:
        """In the parent, when no more children will be started from this cage. False when its
        `{tmp}` could not be removed entirely (or not before `deadline`, a time.monotonic() value).
        A shared mount point (`tmp_mount_point`) stays: other runs mount their own tmpfs on it."""
        self.ruleset.close()
        egress = self.compiled.get("egress")
        if egress is not None and egress.outputs.get("listener") is not None:
            egress.outputs["listener"].close()  # the fallback's host port goes with the cage
        if self.ctx.tmp and self.tmp_mount_point is None:
            try:
                try:
                    os.rmdir(self.ctx.tmp)  # empty: under the namespace tier a tmpfs covered it in every run
                    return True
                except OSError:
                    pass
                from sandboy.confine.cleanup import remove_tree  # what a run left in it (no tier)

                return remove_tree(self.ctx.tmp, deadline)
            finally:  # (after the removal: what could not go, a later run's sweep takes once unlocked)
                release_tmp(self.ctx.tmp)
        return True

    def report(self) -> dict:
        return {
            "policy": self.policy.source,
            "landlock_abi": self.ruleset.abi,
            "enforced": self.enforced,
            "degraded": self.degraded,
            "warnings": self.warnings,
        }


def build(policy, cwd=None, repo=None, environ=None, abi=None, tty=False, reusable=True, pieces=None,
          fixed_tmp=False) -> Cage:
    """Compile `policy` for this kernel. Raises PolicyError (exit 2) or CageError (exit 125).
    `tty`: the command will get a terminal (`--tty`), so the minimal /dev keeps /dev/tty.
    `reusable=False`: the caller runs one command with it (`sandboy run`), so no fingerprint is
    taken for `Reuse` (a stat of every policy path and a listing of every split directory).
    `pieces`: parts an earlier `sandboy run` compiled from the same inputs (`plan_pieces.Pieces`).
    `fixed_tmp`: under the namespace tier, `{tmp}` is the fixed mount point `fixed_tmp_dir()`
    (`sandboy run`: its plan names nothing of one run, so the plan cache may keep it, and nothing
    is left to remove after the run, even one killed outright); elsewhere a directory per cage."""
    abi = landlock.abi_version() if abi is None else abi
    if not protections.protection("landlock.fs").available(abi):
        raise CageError("Landlock is not available on this kernel (needs Linux >= 5.13 with "
                        "landlock in the LSM list); refusing to run unconfined. See `sandboy doctor`.")

    tmp = shared = None
    if uses_tmp(policy):
        # (availability() is asked once per process: the tier's compile below takes this answer)
        if fixed_tmp and namespaces.availability()[0]:
            shared = fixed_tmp_dir()
        tmp = make_private_dir() if shared is None else shared[0]
    ctx = Context(cwd=cwd, tmp=tmp, policy_dir=policy_dir(policy, None), repo=repo)
    try:
        cage = _build(policy, ctx, abi, environ, tty, reusable, pieces)
    except BaseException:
        if tmp and shared is None:
            os.rmdir(tmp)  # still empty: nothing has run
            release_tmp(tmp)
        raise
    if shared is not None:
        cage.tmp_mount_point = shared
        if cage.tier is None or not cage.tier.tmp_private:  # (never seen: the tier was available)
            # a shared host directory is private only under a tmpfs of each run's own
            cage.close()
            return build(policy, cwd, repo, environ, abi, tty, reusable, pieces)
    return cage


FIXED_TMP_NAME = "sandboy-tmp-{euid}"


def fixed_tmp_dir():
    """(path, its lstat, the clock before it) of the euid's fixed `{tmp}` mount point, or None where there is
    none to trust (then the caller makes a directory per cage). It sits where `make_private_dir`
    would make one ($TMPDIR, ... /tmp: the first place a directory can be made), named
    `FIXED_TMP_NAME`, and never removed: every run under the namespace tier mounts a tmpfs of
    its own on it, inside its own mount namespace, so concurrent runs share no file and the host
    directory stays empty (removing it would detach the tmpfs of every run using it). Taken only
    where it is a directory (not a link) of the euid's, mode 0700, and EMPTY: the identity
    (`fingerprint.inode_identity`) is taken before the listing, so anything made there since moves its
    times, and a plan cache hit compares it (`plan_cache._ready`). Another user's name there (a
    shared /tmp) only costs the cache: a directory per cage, as before."""
    from stat import S_IMODE, S_ISDIR
    import time

    euid = os.geteuid()
    for base in _tmp_bases():
        try:
            path = os.path.join(os.path.abspath(base or os.getcwd()), FIXED_TMP_NAME.format(euid=euid))
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        except OSError:
            continue  # not usable (missing, read-only, not ours, the working directory gone): the next place
        try:
            now = time.time_ns()
            st = os.lstat(path)
            if not (S_ISDIR(st.st_mode) and st.st_uid == euid and S_IMODE(st.st_mode) == 0o700) or os.listdir(path):
                return None
        except OSError:
            return None
        return path, st, now
    return None


# Where tempfile.gettempdir() looks, in its order (the working directory last).
_TMP_ENV = ("TMPDIR", "TEMP", "TMP")
_TMP_DIRS = ("/tmp", "/var/tmp", "/usr/tmp")


def make_private_dir() -> str:
    """A new directory of mode 0700 named `run_tmp.PREFIX` + random (the only names its sweep
    takes), where `tempfile.mkdtemp()` would make it: the first of $TMPDIR, $TEMP, $TMP, /tmp,
    /var/tmp, /usr/tmp and the working directory in which one can be made. Without importing `tempfile` when nothing has yet: it
    brings shutil, random, hashlib and OpenSSL's libcrypto, ≈ 10-15 ms of every `sandboy run`
    of a policy with `{tmp}` (where a program has imported it, e.g. set `tempfile.tempdir`, its
    `gettempdir()` decides the place as before). Made locked, so that one left by a process
    killed outright is swept by a later one (`run_tmp`; `release_tmp` when the cage is closed)."""
    if "tempfile" in sys.modules:
        from sandboy.confine import run_tmp

        return run_tmp.make([sys.modules["tempfile"].gettempdir()])
    return _mkdtemp_without_tempfile()


def release_tmp(path: str) -> None:
    """`make_private_dir`'s lock on `path` is let go (run_tmp.release)."""
    run_tmp = sys.modules.get("sandboy.confine.run_tmp")
    if run_tmp is not None:
        run_tmp.release(path)


def _tmp_bases() -> list:
    # "" stands for the working directory, asked for only when reached: a process whose working
    # directory was removed still gets its {tmp} in $TMPDIR or /tmp, as tempfile's would
    return [os.environ[name] for name in _TMP_ENV if os.environ.get(name)] + [*_TMP_DIRS, ""]


def _mkdtemp_without_tempfile() -> str:
    from sandboy.confine import run_tmp

    return run_tmp.make(_tmp_bases())


def _build(policy, ctx, abi, environ, tty=False, reusable=True, pieces=None) -> Cage:
    if any(p.startswith("{repo}") for p in (*policy.fs.read, *policy.fs.exec, *policy.fs.write)):
        from sandboy.repository_files import check_repository_grants  # only such policies pay for it

        check_repository_grants(policy, ctx.repo)  # `{repo}/x` stays inside the repository
    job = protections.Job(policy, resolve(policy, ctx), ctx, abi, environ, tty, pieces, reusable)
    before = watch_before = None
    if reusable:  # the policy's paths as they were before any rule was decided (Fingerprint's `before`)
        from sandboy.confine.fingerprint_build import protected_watch, stats_before

        before = stats_before(job.resolved.fs)
    try:
        if reusable:  # what decides the protected paths, before they are resolved (`watch_before`);
            # inside the `try`: it resolves the write roots first, as the compile would
            watch_before = protected_watch(protections.protected_args(job), job.lookups)
        compiled = protections.compile_all(job)
    except OSError as exc:  # a path's symlink cannot be read (resolve.unfollowable): name it
        raise unfollowable(exc, policy.source, job.resolved.fs) or exc from None
    warnings = [w for part in compiled.values() for w in part.warnings]
    fs, net = compiled["landlock.fs"].outputs, compiled["landlock.net"].outputs
    try:
        ruleset = landlock.build_ruleset(abi, fs["rules"], fs["handled_fs"], net["handled_net"],
                                         net["connect_ports"], net["bind_ports"], net["scoped"], warnings.append)
    except OSError as exc:
        raise CageError(f"landlock: cannot build the ruleset: {exc.strerror}") from None
    cage = Cage(policy, ctx, abi, compiled, ruleset, warnings, job.protected, job.resolved.fs.exec)
    cage.installed = tuple(path for path, _kind, _root in job.protected_by_origin()[2])
    cage.launch_managers = job.hook_managers or None
    if cage.tier is not None:
        cage.tier.bind_ruleset(ruleset.fd, fs["handled_fs"])
        cage.renew_ruleset = lambda: landlock.build_ruleset(
            abi, fs["rules"], fs["handled_fs"], net["handled_net"], net["connect_ports"], net["bind_ports"],
            net["scoped"], lambda _: None)
    egress = compiled.get("egress")
    # a fallback egress cage holds its own host port: built per run; the namespace mode's is fixed
    if reusable and fs["reusable"] and (egress is None or egress.outputs.get("listener") is None):
        from sandboy.confine.fingerprint import Fingerprint  # only where a cage may run again

        cage.fingerprint = Fingerprint(fs["inputs"], fs["split_dirs"], fs["protected_args"], job.protected_by_origin(),
                                       before, watch_before, fs["globs"])
    return cage


# Reusing compiled cages (`Reuse`, `for_run`: the API and the gate) lives in reuse.py, which
# `sandboy run` never loads (one command per build).
