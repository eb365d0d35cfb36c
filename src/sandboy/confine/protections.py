"""One table of protections and one compiler per protection (ADR 0008).

Every protection the cage applies is a row of `PROTECTIONS`: its name, the Landlock ABI it needs
(0: none), the Landlock bits it handles, and what stays open on a kernel without it. A compiler
turns the policy into that protection's part of the cage and returns a `Compiled`: the plan
steps the child runs, its entry in the report's "enforced", and what degraded or warned. The
compilers ask the table, never the ABI number directly, so "what does ABI n give us" is written
once (tests/cage/test_protections.py checks ABI 1-7 without a kernel).

Compilers run in the parent; the child only runs their steps (ADR 0005). Plan order, and why:
namespaces (before capabilities go) -> rlimits, capabilities, no_new_privs -> Landlock -> seccomp
(last, so no earlier step is filtered). The environment has no steps: it is handed to execve.

Adding a protection: a row in `PROTECTIONS`, a `compile_<name>(job) -> Compiled`, and a line
in `compile_all` at its place in the plan order (ADR 0008).
"""

import os

from sandboy.confine import env_reads, hygiene, landlock
from sandboy.errors import CageError, PolicyError
from sandboy.policy.resolve import BuildLookups, expand_value, is_glob, is_within


class Protection:
    """One row of the table. `lost` says what is not prevented on a kernel below `min_abi`."""

    __slots__ = ("name", "min_abi", "fs_rights", "net_rights", "scopes", "lost")

    def __init__(self, name, min_abi=0, fs_rights=0, net_rights=0, scopes=0, lost=""):
        self.name = name
        self.min_abi = min_abi
        self.fs_rights = fs_rights
        self.net_rights = net_rights
        self.scopes = scopes
        self.lost = lost

    def available(self, abi: int) -> bool:
        return abi >= self.min_abi


_FS_ABI1 = (1 << 13) - 1  # EXECUTE .. MAKE_SYM: everything Landlock handled in Linux 5.13

PROTECTIONS = (
    # name                  min ABI
    # user/mount/IPC/PID(/net) namespaces, where the kernel lets this uid make them (namespaces.py)
    Protection("namespaces", 0, lost="see namespaces.LOST_WITHOUT"),
    Protection("hygiene", 0),  # rlimits, capabilities, no_new_privs; signals and fds per run
    Protection("landlock.fs", 1, fs_rights=_FS_ABI1),
    Protection("landlock.fs.refer", 2, fs_rights=landlock.REFER, lost="refer"),
    Protection("landlock.fs.truncate", 3, fs_rights=landlock.TRUNCATE, lost="truncate"),
    Protection("landlock.net.tcp", 4, net_rights=landlock.NET_BIND_TCP | landlock.NET_CONNECT_TCP,
               lost="every TCP port is reachable"),
    Protection("landlock.fs.ioctl_dev", 5, fs_rights=landlock.IOCTL_DEV, lost="ioctl_dev"),
    Protection("landlock.scopes", 6, scopes=landlock.SCOPE_ABSTRACT_UNIX_SOCKET | landlock.SCOPE_SIGNAL,
               lost="abstract-socket and signal scopes"),
    # ABI 7 adds only audit-log flags for landlock_restrict_self, which the cage does not use.
    Protection("seccomp", 0),
    Protection("environment", 0),
    # Layer 3 (`net.domains`): the proxy as the only way out; compiled by sandboy.egress.enforcement
    Protection("egress", 0, lost="a private network namespace (fallback: a Landlock port rule)"),
)
_BY_NAME = {p.name: p for p in PROTECTIONS}


def protection(name: str) -> Protection:
    return _BY_NAME[name]


def fs_rights_for(abi: int) -> int:
    """The filesystem rights a ruleset handles on a kernel with Landlock ABI `abi`."""
    rights = 0
    for row in PROTECTIONS:
        if row.fs_rights and row.available(abi):
            rights |= row.fs_rights
    return rights


class Compiled:
    """One protection compiled: `steps` for the child (label, raw call) in plan order,
    `enforced` (entries for the report's "enforced" table), `degraded` (asked for, not
    enforced on this kernel), `warnings`, and `outputs` the cage itself needs (e.g. the
    environment, the Landlock rules)."""

    __slots__ = ("name", "steps", "enforced", "degraded", "warnings", "outputs")

    def __init__(self, name, steps=(), enforced=None, degraded=(), warnings=(), **outputs):
        self.name = name
        self.steps = list(steps)
        self.enforced = dict(enforced or {})
        self.degraded = list(degraded)
        self.warnings = list(warnings)
        self.outputs = outputs


class Job:
    """What every compiler may read: the policy (as written and resolved), the run's context,
    the kernel's Landlock ABI, and the environment to take passed variables from."""

    __slots__ = ("policy", "resolved", "ctx", "abi", "environ", "tty", "_protected", "hook_managers", "notes", "pieces",
                 "reusable", "lookups")

    def __init__(self, policy, resolved, ctx, abi, environ, tty=False, pieces=None, reusable=True):
        self.policy = policy
        self.resolved = resolved
        self.ctx = ctx
        self.abi = abi
        self.environ = environ
        self.tty = tty  # the command will get a terminal: /dev/tty in the minimal /dev
        # parts compiled by an earlier `sandboy run` from the same inputs (plan_pieces.Pieces: the
        # seccomp program), or None: every part compiled here (the API, the gate, a run never kept)
        self.pieces = pieces
        # whether the cage may run again (`cage.build(reusable=)`): only then is what its deny
        # globs looked into recorded (`deny_globs.GlobWatch`: a stat a directory, the mount table)
        self.reusable = reusable
        self._protected = None
        # the hook-manager discoveries the protected paths made (protected.discover_managers):
        # the launch warnings and the first run's git check take them instead of looking again
        self.hook_managers: dict = {}
        self.notes: list = []  # launch warnings of the protected paths' resolution (protected_paths)
        # the write roots' realpaths & co., asked once for the whole build (never by a later check)
        self.lookups = BuildLookups()

    def protected_by_origin(self) -> tuple:
        """(from_defaults, from_policy, from_install): realpaths of the protected paths that
        exist now inside a write root (`confine.protected`), the last as (path, kind, write
        root) rows of installations' code — Sandboy's own (`confine.own_install`) and what the
        programs on the operator's PATH load (`confine.path_prefixes`); resolved once per job."""
        if self._protected is None:
            fs = self.resolved.fs
            self._protected = protected_paths(fs.write, fs.protect, fs.protect_defaults, self.work,
                                              self.hook_managers, self.notes, self.lookups)
        return self._protected

    @property
    def work(self) -> tuple:
        """The run's working directory and repository: a PATH directory inside one is project
        work (an activated venv's `bin/`), warned about, not protected (`confine.path_dirs`)."""
        return (self.ctx.cwd, self.ctx.repo)

    @property
    def protected(self) -> tuple:
        """Every protected path (realpaths, each a file or a directory that exists inside a
        write root): what a mount namespace binds read-only."""
        from_defaults, from_policy, from_install = self.protected_by_origin()
        return (*from_defaults, *from_policy, *(path for path, _kind, _root in from_install))

    @property
    def strict(self) -> bool:
        return self.policy.strict


def protected_args(job) -> tuple:
    """The arguments of `protected_paths` for `job` (the write roots, fs.protect, the defaults,
    the run's work directories): what a compiled cage's fingerprint resolves them from again."""
    fs = job.resolved.fs
    return fs.write, fs.protect, fs.protect_defaults, job.work


def protected_paths(write_roots, explicit, defaults: bool, work=(), managers=None, notes=None, lookups=None) -> tuple:
    """(from_defaults, from_policy, from_install): `confine.protected.resolve_protected`, and
    with the defaults the directories of the operator's PATH a write root holds outside `work`
    (the run's working directory and repository: `confine.path_dirs`, ADR 0013 session 7) and
    the installations' code a write root holds — Sandboy's own (`confine.own_install.inside`,
    ADR 0024) and what the programs in those PATH directories load (`confine.path_prefixes`,
    ADR 0013 session 8), both as (path, kind, write root) rows. Only paths inside a write root:
    for a policy without one the answer is empty, and `sandboy run` imports none of these
    modules. `managers`: see resolve_protected (the hook-manager discoveries, for the launch to
    take); `notes`: a list that gets launch warnings of what was left writable as project work;
    `lookups`: the build's `resolve.BuildLookups` (`Job.lookups`), None for a check after a run."""
    if not write_roots:
        return [], [], []
    from sandboy.confine.protected import resolve_protected

    from_defaults, from_policy = resolve_protected(write_roots, explicit, defaults, managers, lookups)
    from_install = []
    if defaults:
        from sandboy.confine.own_install import inside
        from sandboy.confine.path_dirs import held, on_path

        taken = set(from_defaults).union(from_policy)
        path_rows = on_path(write_roots, work, lookups=lookups)[0]
        for row in path_rows:
            for path in held(*row):  # the directory and the symlinks on the way, like a start-up file
                if path not in taken:
                    taken.add(path)
                    from_defaults.append(path)
        from_install = [row for row in inside(write_roots, lookups) if row[0] not in taken]
        if path_rows:
            # what the programs there load: a pyenv version's standard library, an nvm node's
            # lib/node_modules, the user site (`confine.path_prefixes`, ADR 0013 session 8)
            from sandboy.confine.path_prefixes import inside as loaded_by_path

            from_install += [row for row in loaded_by_path(write_roots, path_rows, work, notes=notes)
                             if row[0] not in taken]
    return from_defaults, from_policy, from_install


# --- the compilers ------------------------------------------------------------------------


def compile_namespaces(job, landlock_fs) -> Compiled:
    """The namespace tier (namespaces.py) from the policy's grants (`landlock_fs` outputs):
    no steps here — its steps come first in the child, before the working directory is entered
    (`Cage.plan`). Outputs: `tier` (a namespaces.Tier, or None where the kernel refuses)."""
    from sandboy.confine import namespaces

    degraded: list[str] = []
    tier = namespaces.compile(job.policy, landlock_fs.outputs["grants"], job.ctx.tmp, job.abi, degraded, job.tty,
                              job.protected, landlock_fs.outputs["denied_in_write_roots"])
    enforced = {"namespaces": tier.enforced if tier is not None else namespaces.unavailable_report()}
    return Compiled("namespaces", (), enforced, degraded, tier=tier)


def compile_hygiene(job, drop_caps=None) -> Compiled:
    """rlimits, capabilities and no_new_privs. Signal dispositions and inherited fds are reset
    per run (`Cage.plan`), because stdio is placed first."""
    if drop_caps is None:
        drop_caps = hygiene.has_capabilities()
    limits = job.policy.limits
    steps = hygiene.plan_rlimits(limits)
    if drop_caps:
        steps += hygiene.plan_drop_capabilities()
    steps += hygiene.plan_no_new_privs()
    enforced = {
        # from the plan itself: a step that fails refuses the run (125), so a planned step is applied
        "no_new_privs": any(label == "no_new_privs" for label, _ in steps),
        "inherited_fds": "closed above 2",
        "limits": {k: v for k, v in limits.to_dict().items() if v},
        "capabilities": "dropped" if drop_caps else "none held",
    }
    return Compiled("hygiene", steps, enforced, drop_caps=drop_caps)


def _own_cache_dir() -> str:
    """Sandboy's cache (parsed policies, compiled adapter components) is never reachable from a
    cage, whatever the policy grants: a command that could write it would widen the next run of
    the same policy, or swap the native code wasmtime loads. Made now if missing, so the deny
    has something to bind to; where it cannot be made, the caged command (same uid, fewer
    rights) cannot make it either."""
    from sandboy.cache_places import cache_dir

    wanted = cache_dir()
    path = landlock.existing_realpath(wanted)
    if path is None or not os.path.isdir(path):  # one stat where it exists (makedirs: two, and a failed mkdir)
        path = path or os.path.realpath(wanted)
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
        except OSError:
            pass
    return path


def _names(mask: int, table: dict) -> list[str]:
    """The names in `table` (name -> one bit, in ascending bit order) of the bits set in `mask`."""
    by_bit = {bit: name for name, bit in table.items()} if table is not FS_RIGHT_NAMES else _FS_RIGHT_BY_BIT
    names = []
    while mask:
        bit = mask & -mask  # the lowest bit left: ascending, as the table lists them
        if bit in by_bit:
            names.append(by_bit[bit])
        mask ^= bit
    return names


FS_RIGHT_NAMES = {name.lower(): getattr(landlock, name) for name in (
    "EXECUTE", "WRITE_FILE", "READ_FILE", "READ_DIR", "REMOVE_DIR", "REMOVE_FILE", "MAKE_CHAR",
    "MAKE_DIR", "MAKE_REG", "MAKE_SOCK", "MAKE_FIFO", "MAKE_BLOCK", "MAKE_SYM", "REFER",
    "TRUNCATE", "IOCTL_DEV")}
_FS_RIGHT_BY_BIT = {bit: name for name, bit in FS_RIGHT_NAMES.items()}


def _refuse_unwalkable_write_roots(write_roots, source: str, realpath=os.path.realpath) -> None:
    """A write root of the whole file system is refused before anything runs. The post-run git
    check (ADR 0019) walks every write root for a repository the command may have planted; `/`
    (with /proc, /sys and every mount) is beyond its bound, so the run used to fail closed only
    AFTER the command had run (measured: 2 min 16 s here, then 125 for a `/bin/echo`)."""
    for path in write_roots:
        if realpath(path) == "/":
            from sandboy.confine.gitcheck import WALK_BUDGET

            raise PolicyError(source, "fs.write", f"{path!r} is the whole file system: the post-run git check "
                              "(ADR 0019) walks every write root for repositories a command may plant, and / is "
                              f"beyond its bound ({WALK_BUDGET:,} entries), so the run could only fail after the "
                              "command ran. Grant the project's directory, not the machine — or set "
                              "fs.protect_defaults = false (then no protected paths and no git check)")


def _write_roots_to_watch(grants: dict) -> tuple:
    """The write grants below which no mount of the kernel's own file systems may be
    (`kernel_mounts`); /dev and /proc are the namespace tier's own (see there)."""
    from sandboy.confine.namespaces import PRIVATE_TREES
    from sandboy.policy.resolve import is_within_any

    return tuple(path for path, rights in grants.items()
                 if rights & landlock.WRITE & ~landlock.READ and not is_within_any(path, PRIVATE_TREES))


# What a command that leaves its cgroup (or rewrites its bound) escapes, by the limit that made the
# group: the words of `refuse_a_cgroup_the_command_could_leave`'s refusal.
CGROUP_LIMITS = {
    "limits.processes": ("a pids cgroup (as root RLIMIT_NPROC does not bind)",
                         "move itself out of its group and run unbounded"),
    "limits.memory_mib": ("a memory cgroup (a gate step's bound, ADR 0027)",
                          "move itself out of its group, or raise its group's bound, and use the host's memory"),
}


def refuse_a_cgroup_the_command_could_leave(write_roots, source: str, limit: str = "limits.processes") -> None:
    """CageError (125) where a write root lies ON a cgroup file system while `limit` is enforced
    by a cgroup the command is in: the command could write its pid into an ancestor's
    `cgroup.procs`/`tasks` and run outside it, or write its own group's bound — `limits.processes`
    as root (the run's own leaf in exec mode under the tier, or a supervisor's group alike;
    rvsec13: `echo $$ > .../pids/tasks` left a `processes = 5` run's leaf) and a gate step's
    `limits.memory_mib` in its memory cgroup (gatemem14: `echo $$ > <gate's group>/tasks` left a
    64 MiB step's group; the step's cage is built without `memory_mib`, so the build's check does
    not see it: `Supervision` asks this where it takes the group). `kernel_mounts.refuse` only
    meets a kernel file system mounted strictly BELOW a write root; a grant of one itself (`write
    = ["/sys/fs/cgroup/pids"]`) is otherwise the policy's explicit choice, but here it contradicts
    the limit the same policy asks for: fail closed."""
    from sandboy.confine import kernel_mounts

    devices = {}
    for root in write_roots:
        try:
            devices[root] = os.stat(root).st_dev
        except OSError:
            continue  # (gone since it was resolved: no rule is added for it)
    kinds = kernel_mounts.file_systems(set(devices.values()))
    for root, device in devices.items():
        if kinds.get(device) in ("cgroup", "cgroup2"):
            from sandboy.errors import CageError

            group, escape = CGROUP_LIMITS[limit]
            raise CageError(f"{source}: fs.write: {root} is on the kernel's {kinds[device]} file system while "
                            f"{limit} asks for {group}: the command could {escape}. Grant no write on a cgroup "
                            f"file system, or drop {limit}")


def _denied_with_other_names(denied) -> list:
    """A line for each denied regular file with hard links beyond the names denied: Landlock
    denies a PATH, and the file's other names are other paths — readable and writable wherever a
    grant reaches one (a secret kept as `W/secret.key` and, by `cp -al` or rsnapshot, as
    `W/backup/secret.key`: `cat W/backup/secret.key` printed it, tier or not: redcage10). No
    lookup says where they are, so it is said (`strict` refuses). The policy's literal denies
    only: a glob's matches may be thousands of files."""
    names: dict = {}  # (st_dev, st_ino) -> [denied path, links, names denied]
    for path in denied:
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if st.st_nlink > 1 and not os.path.isdir(path):
            names.setdefault((st.st_dev, st.st_ino), [path, st.st_nlink, 0])[2] += 1
    return [f"fs.deny: {path} has {links - denied} other hard link(s) not denied: Landlock denies a path, so the "
            "file stays readable through them wherever a grant reaches one (remove those links, or deny them too)"
            for path, links, denied in names.values() if links > denied]


def compile_landlock_fs(job, cache=None, protected_by_mount=False) -> Compiled:
    """Filesystem rules: the policy's grants split around its denies (and, unless a mount
    namespace binds them read-only, its `fs.protect` paths), for this ABI. Outputs: `rules`
    [(path, rights)], `handled_fs`, and what the rules depend on for cage reuse (`inputs`,
    `split_dirs`, `globs`: `deny_globs.GlobWatch.state`, `reusable`)."""
    fs, source = job.resolved.fs, job.policy.source
    warnings: list[str] = []
    degraded: list[str] = []

    if fs.protect_defaults:
        _refuse_unwalkable_write_roots(fs.write, source, job.lookups.realpath)
    grants: dict[str, int] = {}
    for key, rights in landlock.RIGHT_NAMES.items():
        for path in getattr(fs, key):
            real = landlock.existing_realpath(path)
            if real is None:
                if job.strict:
                    raise PolicyError(source, f"fs.{key}", f"{path} does not exist (compat.landlock = \"strict\")")
                warnings.append(f"fs.{key}: {path} does not exist; skipped")
                continue
            grants[real] = grants.get(real, 0) | rights
    mount_roots = _write_roots_to_watch(grants)
    if mount_roots:
        from sandboy.confine import kernel_mounts

        kernel_mounts.refuse(mount_roots, source)
        if job.policy.limits.processes and os.geteuid() == 0:
            refuse_a_cgroup_the_command_could_leave(mount_roots, source)
    for path, rights in landlock.DEVICE_GRANTS:
        if os.path.exists(path):
            grants[path] = grants.get(path, 0) | rights
    if fs.exec:
        # Every dynamically linked program needs EXECUTE on its ELF interpreter (docs/findings.md).
        for interp in landlock.ELF_INTERPRETERS:
            real = landlock.existing_realpath(interp)
            if real is not None:
                grants[real] = grants.get(real, 0) | landlock.EXEC

    cache = _own_cache_dir() if cache is None else cache
    for path, rights in grants.items():
        if rights & landlock.WRITE_FILE and is_within(cache, path) and cache != path:
            warnings.append(f"fs: Sandboy's own cache {cache} lies inside the write grant {path}: it is denied, "
                            f"which splits {os.path.dirname(cache)} (no new entries there); set "
                            "SANDBOY_CACHE_DIR outside the granted tree to avoid this")
    # what the deny globs' matches depend on, for a fingerprint (a cage kept for another run)
    globs = [d for d in fs.deny if is_glob(d)]
    watch = None
    if globs and job.reusable:
        from sandboy.confine.deny_globs import GlobWatch

        watch = GlobWatch()
    denies = landlock.expand_denies((*fs.deny, cache), warnings.append, watch=watch)
    # Landlock refuses every access to a denied path but does not mediate chmod, chown, utimensat
    # or xattrs, and under the tier a write root is a read-write mount: `chmod 0644` of a denied
    # 0600 secret inside a write root (issue 7 item 1 again), `chmod 0777` of Sandboy's own cache
    # in a granted home, opened them to every local user (redcage9). The tier binds these
    # read-only over themselves (`namespaces.plan_mounts`): the literal denies and the cache (a
    # glob's matches may be thousands of files, each a mount: not bound, see threat-model.md).
    literal = {landlock.existing_realpath(d) for d in fs.deny if not is_glob(d)} | {cache}
    degraded += _denied_with_other_names(d for d in denies if d in literal)
    writing = landlock.WRITE & ~landlock.READ
    denied_in_write_roots = [d for d in denies if d in literal and any(
        rights & writing and is_within(d, path) and d != path for path, rights in grants.items())]
    # Sandboy's own cache first: past the bound below, a policy's own list (a repository's step
    # policy, in the gate) must not push it out of the binds
    denied_in_write_roots.sort(key=lambda d: d != cache)
    if len(denied_in_write_roots) > MAX_DENIED_BINDS:
        # each is a mount made in every run (a gate's step policies may list 100,000 paths
        # together: gate.config.MAX_GATE_POLICY_ENTRIES); past the bound, the metadata of the
        # rest is what it is without the tier
        warnings.append(f"fs.deny: {len(denied_in_write_roots)} denied paths inside write roots; the first "
                        f"{MAX_DENIED_BINDS} are read-only in the cage, the metadata of the others (chmod, "
                        "utimensat) stays changeable: deny their directory instead")
        denied_in_write_roots = denied_in_write_roots[:MAX_DENIED_BINDS]
    if fs.protect:
        # a FILE granted for writing, and in no directory granted for writing, cannot be protected
        # (the protected set is what lies inside a directory write root: it stayed writable,
        # rvsec7) — refused, never silently open; inside a directory write root protect wins
        file_roots = {os.path.realpath(w) for w in fs.write if os.path.isfile(w)}
        for path in fs.protect if file_roots else ():
            real = os.path.realpath(path)
            if real in file_roots and not any(is_within(real, os.path.realpath(w)) for w in fs.write
                                              if os.path.isdir(w)):
                raise PolicyError(source, "fs.protect", f"{path} is also granted for writing (fs.write) as a file "
                                  "of its own, which cannot be protected: drop it from fs.write or from fs.protect")
    for path in fs.protect:
        if not os.path.lexists(path):
            if job.strict:
                raise PolicyError(source, "fs.protect", f"{path} does not exist, so a step could create it "
                                  "(compat.landlock = \"strict\")")
            warnings.append(f"fs.protect: {path} does not exist; a step may create it")
    from_defaults, from_policy, from_install = job.protected_by_origin()
    if from_install:
        from sandboy.confine.own_install import WHY, warning

        for row in from_install:
            if row[1] == "policy file":
                continue  # (kept read-only without a word: the policy file is not the command's work)
            if row[1] in WHY:
                warnings.append(warning(*row))
            else:  # what a program on the operator's PATH loads (ADR 0013, session 8)
                from sandboy.confine.path_prefixes import warning as path_warning

                warnings.append(path_warning(*row))
    warnings.extend(job.notes)
    if fs.protect_defaults and fs.write:
        from sandboy.confine.path_dirs import on_path, protect_warning, warn_warning

        protect, warn = on_path(fs.write, job.work, lookups=job.lookups)
        # a PATH directory inside Sandboy's own installation (the quick start's activated
        # `.venv/bin` in this checkout) is read-only like the rest of it (ADR 0024): "it stays
        # writable" would contradict the installation's own warning printed just above
        ours = [path for path, kind, _root in from_install if kind != "policy file"]
        warnings.extend([protect_warning(entry, root) for entry, _real, root in protect]
                        + [warn_warning(entry, root) for entry, real, root in warn
                           if not any(is_within(real, path) for path in ours)])
        # `python -m sandboy` from inside a write root: its sys.path[0] (ADR 0024, session 7)
        from sandboy.confine.own_install import first_import_warning

        warnings.extend(first_import_warning(fs.write, job.lookups))
        # pre-commit's hook running an interpreter a write root holds (ADR 0019, session 7): its
        # start-up code is judged after the run; said here, with the fix, before anything runs.
        # Only where the protected paths' resolution found a stub naming one (the same
        # discoveries, `job.hook_managers`: `launch_warnings` takes them): else the module is
        # not even loaded (a bundle group of its own, ≈ 39 kB of code)
        if any(found[1] for found in job.hook_managers.values()):
            from sandboy.confine.hook_python import launch_warnings

            warnings.extend(launch_warnings(fs.write, job.hook_managers))
    if protected_by_mount:
        protects, protected_by = (), "mount namespace (read-only binds)"
    else:
        # Landlock grants only, so a protected path is split out like a deny, and its parent
        # directories lose new entries. For the defaults that would stop git (index.lock is
        # made in .git itself), so without a mount namespace they are reported, not split;
        # Sandboy's own installation is split like `fs.protect` (ADR 0024: nothing a build
        # makes goes inside it, and a write there is code the host runs next).
        # The policy file `sandboy run` was given (own_install's "policy file" row) is reported
        # as the defaults are: split out, the working directory that usually holds it would take
        # no new entry at all (README's example), and nothing of the build goes wrong if it stays
        protects = (*from_policy, *(path for path, kind, _root in from_install if kind != "policy file"))
        protected_by = "landlock (read-only rules)"
        if from_defaults:
            degraded.append("fs.protect_defaults: without a mount namespace these stay writable: "
                            + ", ".join(from_defaults))
        policy_files = [path for path, kind, _root in from_install if kind == "policy file"]
        if policy_files:
            degraded.append("without a mount namespace the policy file stays writable: the command can rewrite "
                            "the rules of the next run of the same command line (keep it outside the write "
                            "roots): " + ", ".join(policy_files))
    split_dirs: list[str] = []
    # a cage that may be kept: each split directory's stat and names as the rules were decided from
    # them (`fingerprint_build.take` keeps those, taking none of its own)
    listed = {} if job.reusable else None
    rules = landlock.drop_subsumed(landlock.plan_rules(grants, denies, warnings.append, split_dirs, protects, listed))
    # a glob's matches are kept (a fingerprint) only where the directories it looked into prove them
    glob_state = () if not globs else None if watch is None else watch.state(globs)

    handled_fs = fs_rights_for(job.abi)
    for row in PROTECTIONS:
        if row.fs_rights and row.lost and not row.available(job.abi):
            degraded.append(f"landlock: {row.lost} needs ABI {row.min_abi} (kernel has {job.abi}): not restricted")

    names: dict = {}  # rules share a few rights values: each named once
    for _, rights in rules:
        if rights not in names:
            names[rights] = _names(rights & handled_fs, FS_RIGHT_NAMES)
    enforced = {
        "fs_rules": [[path, list(names[rights])] for path, rights in rules],
        "fs_denied": denies,
        "fs_protected": list(job.protected) if protected_by_mount else list(protects),
        "fs_protected_by": protected_by,
    }
    return Compiled(
        "landlock.fs", (), enforced, degraded, warnings,
        rules=rules, handled_fs=handled_fs, grants=grants,
        # the policy's spelling of each path AND the path the build resolved it to: the tier
        # attaches write roots by the resolved path at every run, so a symlink on the way that
        # was retargeted at the same directory moved away (`mv a b; ln -sfn b link`) kept the
        # spelling's inode while `a` — now any directory — was attached read-write (session 8)
        inputs=(*fs.read, *fs.exec, *fs.write, *fs.deny, cache, *landlock.ELF_INTERPRETERS,
                *fs.protect, *grants),
        protected_args=protected_args(job),
        split_dirs=split_dirs if listed is None else [(path, listed.get(path)) for path in split_dirs],
        globs=glob_state, reusable=glob_state is not None, mount_roots=mount_roots,
        denied_in_write_roots=denied_in_write_roots)


# Denied paths inside write roots bound read-only per run (namespaces.plan_mounts' `denied`):
# four steps and a mount each, in every run.
MAX_DENIED_BINDS = 64


def tcp_ports_handled(net, abi: int) -> bool:
    """True when Landlock checks every TCP bind/connect against the policy's port lists."""
    return _tcp_ports_handled(net.unrestricted, abi)


def _tcp_ports_handled(unrestricted: bool, abi: int) -> bool:
    return not unrestricted and protection("landlock.net.tcp").available(abi)


def compile_landlock_net(job) -> Compiled:
    """TCP port rules and the abstract-socket/signal scopes. Outputs: `handled_net`,
    `connect_ports`, `bind_ports`, `scoped`."""
    net, abi = job.resolved.net, job.abi
    degraded: list[str] = []
    warnings: list[str] = []
    tcp = protection("landlock.net.tcp")
    handled_net = 0
    connect_ports, bind_ports = net.connect_tcp, net.bind_tcp
    if tcp_ports_handled(net, abi):
        handled_net = tcp.net_rights
    elif not net.unrestricted and (connect_ports or bind_ports):
        degraded.append(f"net: TCP port rules need Landlock ABI {tcp.min_abi} (kernel has {abi}): {tcp.lost}")
        connect_ports = bind_ports = ()
    scopes = protection("landlock.scopes")
    scoped = scopes.scopes if scopes.available(abi) else 0
    if not scoped:
        warnings.append(f"landlock: {scopes.lost} need ABI {scopes.min_abi} (kernel has {abi})")
    enforced = {
        "tcp_connect": list(connect_ports) if handled_net else "any",
        "tcp_bind": list(bind_ports) if handled_net else "any",
        "scopes": _names(scoped, {"abstract_unix_socket": 1, "signal": 2}),
    }
    return Compiled("landlock.net", (), enforced, degraded, warnings, handled_net=handled_net,
                    connect_ports=connect_ports, bind_ports=bind_ports, scoped=scoped)


def seccomp_inputs(job) -> tuple:
    """Every value `compile_seccomp` reads of its job, in `compile_seccomp_from`'s order: the
    Landlock ABI, `seccomp.deny`, `seccomp.allow`, `ipc.sysv` and the (resolved) network rules the
    socket rules and `listen` follow. The filter is made from these alone (and the code), so a
    program kept by an earlier `sandboy run` (`plan_pieces.Pieces`, ADR 0028 session 10) is keyed
    with them: a value added here is a key's value by construction."""
    policy, net = job.policy, job.resolved.net
    return (job.abi, tuple(policy.seccomp.deny), tuple(policy.seccomp.allow), policy.ipc.sysv,
            net.unix, net.unrestricted, tuple(net.connect_tcp), tuple(net.bind_tcp), net.udp)


def compile_seccomp(job) -> Compiled:
    """The BPF filter: the denylist, socket families, and `listen` where no listener can be
    legitimate. Outputs: `bpf`, `keepalive` (the buffer the filter step points at)."""
    return compile_seccomp_from(*seccomp_inputs(job))


def compile_seccomp_from(abi, deny, allow, sysv, unix, unrestricted, connect_tcp, bind_tcp, udp) -> Compiled:
    """`compile_seccomp` of the values `seccomp_inputs` takes of a job, and nothing else."""
    from sandboy.confine import seccomp  # (a bundle group of its own: a kept program needs none of it)

    degraded: list[str] = []
    # listen() on a TCP socket that was never bound picks an ephemeral port on every address
    # without a bind() call, and Landlock (ABI 7, Linux 6.18) does not check that autobind:
    # `bind_tcp = []` still let a command serve on 0.0.0.0:<ephemeral> (tests/cage/test_net.py).
    # Seccomp cannot tell a bound socket from an unbound one, so `listen` is refused where no
    # listener can be legitimate (no TCP bind port, no AF_UNIX sockets); elsewhere it degrades.
    inet_asked = bool(connect_tcp or bind_tcp or udp)
    listen_autobind = _tcp_ports_handled(unrestricted, abi) and inet_asked
    deny_listen = listen_autobind and not bind_tcp and not unix
    if listen_autobind and not deny_listen:
        degraded.append("net: listen() on a TCP socket never bound takes an ephemeral port that "
                        f"Landlock (ABI {abi}) does not check; it is refused only when bind_tcp is empty "
                        "and unix = false")
    deny_calls = seccomp.denied_names(deny, allow, sysv)
    if deny_listen:
        deny_calls.add("listen")
    sockets = seccomp.SocketRules(
        unix=unix or unrestricted,
        inet=unrestricted or inet_asked,
        udp=udp or unrestricted,
        tcp_any_protocol=unrestricted,
    )
    bpf = seccomp.build(deny_calls, sockets, allow)
    steps, keepalive = seccomp.plan(bpf)
    enforced = {
        "denied_syscalls": sorted(deny_calls),
        "instructions": len(bpf) // 8,
        "native_arch_only": seccomp.native_arch_only(bpf),
        "sysv_ipc": "allowed" if sysv else "refused",
        "sockets": {"unix": sockets.unix, "inet": sockets.inet, "udp": sockets.udp,
                    "mptcp_sctp_raw": sockets.tcp_any_protocol},
    }
    return Compiled("seccomp", steps, enforced, degraded, bpf=bpf, keepalive=keepalive)


def compile_environment(job) -> Compiled:
    """The command's environment: passed names, then set values, then TMPDIR for `{tmp}`.
    Output: `env`."""
    policy = job.policy
    # the passed variables are the command's, not inputs of the build: read past `sandboy run`'s
    # env_reads.Recording (a plan cache hit passes today's values: `command_env`)
    source_env = env_reads.real() if job.environ is None else job.environ
    set_pairs = ((name, expand_value(value, job.ctx)) for name, value in policy.env.set)
    env = env_reads.command_env(policy.env.pass_, set_pairs, source_env)
    if job.ctx.tmp and "TMPDIR" not in env:
        # The private {tmp} is granted, so say where it is: tempfile, mktemp and pytest read
        # TMPDIR and would otherwise try /tmp, which a policy rarely grants.
        env["TMPDIR"] = job.ctx.tmp
    return Compiled("environment", (), {"env": sorted(env)}, env=env)


def _seccomp_part(job) -> Compiled:
    """The seccomp filter kept by an earlier `sandboy run` from the same `seccomp_inputs` (a
    miss then imports no BPF assembler: `seccomp` is a bundle group of its own), else compiled
    here and handed to the pieces to keep."""
    if job.pieces is None:
        return compile_seccomp(job)
    inputs = seccomp_inputs(job)
    kept = job.pieces.seccomp(inputs)
    if kept is not None:
        return kept
    compiled = compile_seccomp_from(*inputs)
    job.pieces.seccomp_built(inputs, compiled)
    return compiled


def compile_all(job) -> dict:
    """Every compiler, in plan order: {name: Compiled}. Under `compat.landlock = "strict"` a
    missing path is a PolicyError and anything degraded a CageError naming all of it."""
    out = {}
    egress = None
    if job.resolved.net.egress:
        from sandboy.egress.enforcement import compile_egress, merge_env

        # Layer 3 rewrites the network rules the later compilers see (TCP connect only to the
        # proxy's port) and adds the proxy's variables to the environment.
        egress = compile_egress(job)
        job.resolved = job.resolved.replace(net=egress.outputs["net"])
    # The namespace tier needs the Landlock grants (its write roots, its per-run rules), so
    # Landlock is compiled first; plan order is kept below.
    from sandboy.confine.namespaces import availability

    # Where the tier will be in force it binds the protected paths read-only (then Landlock
    # need not split them out, which would stop git making .git/index.lock).
    landlock_fs = compile_landlock_fs(job, protected_by_mount=availability()[0])
    namespaces = compile_namespaces(job, landlock_fs)
    # In a user namespace the child holds every capability there until it drops them (then
    # /proc/self/status need not be read: ≈ 0.06 ms of every run under the tier).
    drop_caps = namespaces.outputs["tier"] is not None or hygiene.has_capabilities()
    for compiled in (namespaces, compile_hygiene(job, drop_caps), landlock_fs,
                     compile_landlock_net(job), _seccomp_part(job), compile_environment(job)):
        out[compiled.name] = compiled
    if egress is not None:
        from sandboy.egress.enforcement import attach_to_tier

        attach_to_tier(egress, namespaces.outputs["tier"])
        env = out["environment"].outputs
        env["env"] = merge_env(env["env"], egress.outputs["env"])
        out["environment"].enforced["env"] = sorted(env["env"])
        out["egress"] = egress
    degraded = [d for part in out.values() for d in part.degraded]
    if degraded and job.strict and egress is not None and egress.outputs.get("listener") is not None:
        egress.outputs["listener"].close()
    if degraded and job.strict:
        raise CageError(f"{job.policy.source}: compat.landlock = \"strict\" and this kernel cannot enforce: "
                        + "; ".join(degraded))
    return out
