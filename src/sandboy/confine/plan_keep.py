"""What `sandboy run` does to keep the plan it built (ADR 0028): the `Miss` — the inputs of a build
the plan cache may keep, taken before the command runs — and, once the command has run, the
entry made of the cage (`_entry_for`) and written (`store`). A hit never imports this module
(`plan_cache` reads, checks and runs a kept plan): the bundle's "plan pieces" group, which every
build that may be kept reads anyway (`Miss.pieces`), holds it — ≈ 16 kB of code a hit no
longer unmarshals (session 12).
"""

import marshal
import os
import sys
from stat import S_ISREG  # (os imports stat: nothing to load)

from sandboy.confine import _libc, env_reads
from sandboy.confine.fingerprint import ctime_settled, inode_identity
from sandboy.confine.plan_cache import (_PACKAGE, FORMAT, MAX_ENTRY_BYTES, _environment, _key, _served_stats,
                                        _stdio_shape)
from sandboy.policy.resolve import plan_entry_path, plan_may_keep


class Miss:
    """A run the plan cache may keep once its cage is built (`consult`): the inputs of the build
    that are read from files, taken BEFORE the command runs, so that an entry never pairs a plan
    with inputs it was not built from — the policy's bytes (read once: the build parses exactly
    these, `Policy.load(path, raw=miss.policy_bytes)`; read again after the run, an edit made
    while the command ran keyed the new bytes to the old plan, and every later run of the edited
    policy ran the old one: redcage9), fd 0-2's shape, the key, and the identities of the code
    that built it (`built`, before the command runs). The rest of the key is this process's own
    (ids, environment, kernel), the same before and after."""

    __slots__ = ("policy_arg", "cwd", "policy_bytes", "shape", "path", "kept", "key", "code", "lookups", "_pieces")

    def __init__(self, policy_arg: str, cwd: str, policy_bytes: bytes, shape: tuple, path=None):
        self.policy_arg, self.cwd, self.policy_bytes, self.shape = policy_arg, cwd, policy_bytes, shape
        self.path = plan_entry_path(policy_arg, cwd) if path is None else path
        self.kept = False
        self.key = self.code = self.lookups = self._pieces = None

    @property
    def pieces(self):
        """For the build (`cage.build(pieces=)`): the parts earlier runs kept (`plan_pieces.Pieces`,
        a bundle group of its own: made only where a build follows, so a hit reads none of it)."""
        if self._pieces is None:
            from sandboy.confine.plan_pieces import Pieces

            self._pieces = Pieces()
        return self._pieces

    @classmethod
    def first(cls, policy_arg: str, where, policy_bytes: bytes):
        """The `Miss` of a run that found no entry (`sandboy run` asked `policy.resolve`, loaded the
        policy from `policy_bytes` without this module and found it may be kept — `plan_may_keep`,
        not asked again), or None where it may not be kept: fd 0-2 of a shape never kept, a policy
        that is not a regular file. `where`: (the working directory, absolute; the entry's path)
        as the caller found them (None: this process's working directory)."""
        try:
            shape = _stdio_shape()
            if shape is None or not S_ISREG(os.stat(policy_arg).st_mode):
                return None
            cwd, path = where or (os.path.abspath(os.getcwd()), None)
            miss = cls(policy_arg, cwd, policy_bytes, shape, path)
            miss.kept = True
            return miss
        except Exception:  # a cache never fails a run
            return None

    def keeps(self, policy) -> bool:
        """Whether a cage built from `policy` may be kept at all (`policy.resolve.plan_may_keep`), asked before the
        build: a policy never kept costs no fingerprint, no key, no code identities."""
        self.kept = plan_may_keep(policy)
        return self.kept

    def built(self, cage) -> None:
        """Called once `cage` is built, before its command runs: the key (where no entry made
        `consult` compute it) and the identities of the code loaded now, the code that built
        it (an upgrade of Sandboy while the command runs is then a miss for the next run)."""
        if self.key is None:
            self.key = _key(self.policy_arg, self.policy_bytes, self.cwd, self.shape)
        self.code = _code_identities()
        # the machine's answers the policy's presets were resolved from (taken at its load, before
        # the build): None where one could not be recorded (then nothing is kept)
        lookups = sys.modules.get("sandboy.policy.lookups")
        self.lookups = () if lookups is None else lookups.recorded()
        if self._pieces is not None and self._pieces.code:  # a kept program's makers, not imported here
            self.code = tuple(sorted(set(self.code).union(self._pieces.code)))

    def store(self, cage, hooks) -> None:
        """Once the command has run: the entry for `cage` written, where this run may be kept
        (`_entry_for`). A cache never fails a run: anything that goes wrong only costs speed."""
        try:
            pending = _entry_for(cage, self, hooks)
        except Exception:
            pending = None
        if pending is not None:
            store(pending)
        if self._pieces is not None:
            self._pieces.store()


def _env_names():
    """The names of the variables this run read (bytes, sorted) — every lookup since `sandboy run`
    started its Recording, and the interpreter's locale (read before any of it) — or None where
    it saw the whole environment, or recorded nothing (a caller that started none: keyed with
    all of it)."""
    recording = env_reads.recording()
    if recording is None or recording.everything:
        return None
    return tuple(sorted({os.fsencode(name) for name in (*recording.names, *env_reads.READ_AT_START_UP)}))


def _command_env(cage):
    """The command's environment as an entry keeps it: the names the policy passes (a hit takes
    their values from today's environment, `env_reads.command_env`, as a build does: no value of
    the operator's environment is written) and the values the build gave the rest — what the
    policy sets (placeholders replaced) and adds (`{tmp}`'s TMPDIR: the mount point, a function of
    keyed inputs) — or None where today's passed values and those do not give exactly the
    build's environment, order included (the egress proxy's variables: never kept anyway)."""
    passed = tuple(cage.policy.env.pass_)
    set_names = {name for name, _ in cage.policy.env.set}
    env = cage.env
    set_pairs = tuple((name, value) for name, value in env.items() if name in set_names or name not in passed)
    if list(env_reads.command_env(passed, set_pairs, env_reads.real()).items()) != list(env.items()):
        return None
    return passed, set_pairs


def _code_identities() -> tuple:
    """(file, identity) of every module of Sandboy loaded in this process, the C executor among
    them: the code that built the plan (a hit compares them, so an edit of any of them is a
    miss). The interpreter and its standard library are the key's `sys.version` and
    `sys.executable`. Taken once the cage is built (`Miss.built`); a module the bundle served
    is known by the stat taken when it was imported."""
    served = _served_stats()
    out = []
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if type(path) is str and path.startswith(_PACKAGE + "/"):
            st = served.get(path)
            try:
                out.append((path, inode_identity(os.stat(path) if st is None else st)))
            except OSError:
                continue
    return tuple(sorted(set(out)))


def _entry_for(cage, miss: Miss, hooks):
    """What a later run may take instead of building `cage`, or None where this run may not be
    cached: exec mode under the namespace tier with no hook but the git check (`_git_scope`), a fingerprint (none
    where the deny globs' directories prove nothing: `deny_globs.GlobWatch`), a
    policy `Miss.keeps` (asked before the build), fd 0-2 of a cached shape (`consult`). Asked once
    the command has run (`cage.launched`: the plan its child ran); everything it is keyed on was
    taken before (`Miss`)."""
    if not miss.kept or miss.code is None or miss.lookups is None or cage.tier is None or cage.fingerprint is None:
        return None
    git_scope = _git_scope(cage, hooks)
    if git_scope is False:
        return None
    from sandboy.confine.hygiene import close_range_cloexec_works

    # Where close_range is refused, the plan marks close-on-exec the fds THIS process has open
    # (hygiene.plan_cloexec's fallback): an fd another caller hands in would reach its command
    if not close_range_cloexec_works():
        return None
    # and as the launch found them: fd 0-2 needed nothing of this run's own (a file reopened or
    # relayed by the init: namespaces.StdioHandoff.per_run), only what the shape decides (that
    # launch's own handoff: asking the tier again cost ≈ 0.1 ms)
    if cage.launched is None or cage.launched_stdio_per_run:
        return None
    tmp = _tmp_mount_point(cage)
    if tmp is False:
        return None
    # The protected paths (write roots): resolved again now, after the run — a command that
    # changed what decides them (made a `.bashrc`, `git init`, a hooks path) gets the rebuild's
    # protection next time — and kept only where the stats of what decides them, taken before
    # that resolution, settle it: a hit then checks them without the compilers
    # (`Fingerprint.unchanged(resolve=False)`); the plan's protected set is the build's, equal
    # to what a rebuild finds now
    if cage.fingerprint.protected_args[0] and not (cage.fingerprint.unchanged()
                                                    and cage.fingerprint.protected_settled()):
        return None
    fd, plan = cage.launched  # the plan the run's child ran (the launch made it: not asked again)
    ruleset_at = tuple(i for i, step in enumerate(plan)
                       if step[0] in (_libc.SYS_LANDLOCK_ADD_RULE, _libc.SYS_LANDLOCK_RESTRICT_SELF) and step[2] == fd)
    seccomp_at = [i for i, step in enumerate(plan) if step[0] == _libc.SYS_SECCOMP]
    bpf = cage.compiled["seccomp"].outputs["bpf"]
    # the plan's one pointer: its sock_fprog, at this process's bpf
    if not ruleset_at or len(seccomp_at) != 1 or plan[seccomp_at[0]][4] != _libc.sock_fprog(bpf)[1]:
        return None
    env = _command_env(cage)
    names = _env_names()
    environment = _environment(names)
    if env is None or environment is None:
        return None
    fs, net = cage.compiled["landlock.fs"].outputs, cage.compiled["landlock.net"].outputs
    body = (tuple(plan), ruleset_at, seccomp_at[0], bpf,
            (cage.ruleset.abi, tuple(fs["rules"]), fs["handled_fs"], net["handled_net"], tuple(net["connect_ports"]),
             tuple(net["bind_ports"]), net["scoped"]),
            cage.clone_flags, env, tuple(cage.degraded), tuple(cage.warnings), tuple(cage._exec_paths),
            git_scope, _mount_roots_to_check(fs.get("mount_roots") or (), tmp), tmp, cage.policy.limits.wall_seconds,
            cage.policy.limits.processes)
    lookups = miss.lookups
    if lookups:  # (an `exists` the fingerprint's own stat proves is not asked twice by a hit)
        from sandboy.policy.lookups import without_implied  # (imported: the presets asked through it)

        lookups = without_implied(lookups, cage.fingerprint.present())
    return miss.path, (FORMAT, miss.key, names, environment, miss.code, cage.fingerprint.state(), lookups), body


def _mount_roots_to_check(mount_roots, tmp) -> tuple:
    """The write roots below which a hit looks for the kernel's own file systems in the mount
    table (`plan_cache._ready`, as `Cage.still_valid` asks before a reuse): all the build's but
    `{tmp}`'s fixed mount point, which the hit proves has nothing below it already. The build
    took it empty (`cage.fixed_tmp_dir`), its settled identity is checked by every hit (one
    lstat: `_tmp_mount_point`), and nothing can be mounted below an empty directory until an
    entry is made in it, which moves its mtime and ctime; a mount ON it changes the inode lstat
    sees. (And the cage covers it with a tmpfs of its own.) A `write = ["{tmp}"]` hit then reads
    neither the mount table nor the git check's code (≈ 1.3 M instructions to unmarshal: session 13)."""
    return tuple(root for root in mount_roots if tmp is None or root != tmp[0])


def _tmp_mount_point(cage):
    """What a hit checks of the run's `{tmp}`: None (the policy has none), (path, identity) of
    the fixed mount point every run of the tier covers with a tmpfs of its own
    (`cage.fixed_tmp_dir`), or False where the plan names a directory of this run's own (made
    per cage: without the tier, or where the fixed one was not ours to take) — never kept — or
    where the mount point changed since the build found it empty, or changed too recently for
    its times to show a later change (`fingerprint.ctime_settled`: the first run, which made it,
    keeps no entry; the next does)."""
    if not cage.ctx.tmp:
        return None
    shared = cage.tmp_mount_point
    if shared is None or cage.tier is None or not cage.tier.tmp_private:
        return False
    path, st, clock = shared
    try:
        identity = inode_identity(os.lstat(path))
    except OSError:
        return False
    return (path, identity) if identity == inode_identity(st) and ctime_settled(st.st_ctime_ns, clock) else False


def _git_scope(cage, hooks):
    """The arguments of the post-run git check's Scope for a hit (`gitcheck_hook.scope_args`: what the
    build's own check was made from), or None (no check), or False where this run's hooks are not
    only the git check `exec_mode.hooks_for` made for it (the only hook a hit runs). Its protected
    paths are the build's, which the fingerprint proves a rebuild's."""
    if not hooks:
        # the build's run had none, so a hit runs none: `hooks_for` makes no check for a policy
        # writing only to `{tmp}` (kept since session 12: its Scope, asked here, walked `{tmp}`'s
        # mount point on every hit, ≈ 1 ms of the git check's imports and walk for nothing)
        return None
    policy = cage.policy
    if not ((policy.fs.protect_defaults or policy.fs.protect) and policy.fs.write):  # `hooks_for`'s rule
        return False
    from sandboy.confine.gitcheck_hook import GitCheck, scope_args  # (imported already: `hooks_for` asked it)

    if any(type(hook) is not GitCheck or hook.record is not None for hook in hooks):
        return False
    args = scope_args(cage)
    # (not expected: PATH directories are judged only without the tier, and the walk leaves out
    # only the tier's private `{tmp}`: here the fixed mount point, `_tmp_mount_point`)
    if args is not None and (args["path_dirs"] or any(path != cage.ctx.tmp for path in args["exclude"])):
        return False
    return args


def store(pending) -> None:
    """Write `_entry_for`'s entry (atomically: a reader sees the old entry, the new one or none),
    relative to its directory opened where no other user chooses it (`cache_files.write_file`: a
    root run below another user's home wrote through a swapped symlink, session 11). A cache that
    cannot be written only costs speed."""
    path, head, body = pending
    try:  # (FORMAT, key, names, environment, code, fingerprint, lookups, the rest marshalled apart: `_applies`)
        data = marshal.dumps((*head, marshal.dumps(body)))
    except ValueError:  # a value marshal cannot write (nothing on the cached path has one)
        return
    if len(data) > MAX_ENTRY_BYTES:
        return
    from sandboy.confine.cache_files import write_file  # (the "plan pieces" group: a build read it)

    folder, name = os.path.split(path)
    write_file(folder, name, data)
