"""`sandboy run`'s compiled plans kept across invocations (exec mode; ADR 0028).

An agent's shell runs `sandboy run --policy P -- cmd` hundreds of times with the same policy, and
each run loaded the policy, imported the compilers (≈ 18 modules) and built the same cage again:
most of the CLI's start-up over the interpreter's own (docs/performance.md). A run that exec mode
may take as it is (no hooks, no supervisor, the namespace tier) writes what it built into an
entry in Sandboy's cache directory, which no cage can reach (ADR 0006); a later run whose inputs
are all the same runs the stored plan instead of building one:

  - the KEY, compared value for value (the file name is only a hash of some of it): the policy
    file's bytes and path, the working directory, every environment variable (as a digest: no
    value of the environment is written, the command's own refer to it by name), the real and
    effective uid/gid and groups, the kernel (uname) and its Landlock ABI, the interpreter, the
    `sandboy` package it runs from, and the shape of fd 0-2 (what `namespaces.plan_stdio`
    decides from);
  - the CODE that built the plan: the identity (device, inode, mode, size, mtime, ctime) of the
    file of every module of Sandboy loaded when it was built, the C executor among them (the
    standard library only by the interpreter in the key);
  - the FILE SYSTEM the rules were decided from: the build's `fingerprint.Fingerprint`, THE check
    `Reuse` trusts for the API's and the gate's kept cages (the inode behind every policy path,
    the entries of every directory split around a deny, the directories a deny glob looked into);
  - the PRESETS' ANSWERS (`include`): every question the presets asked of the machine at the
    policy's load, with its answer (`policy.lookups`), asked again — the rules a load now would
    add are those the plan was built with only where every answer is the same.

What differs from process to process is made again on a hit: the Landlock ruleset (filled from
the stored rules in this process: a rule that cannot be added as before is a miss) and the
address of the seccomp program in the plan's `sock_fprog`. A plan whose start fails is never
explained from the cache: nothing ran, and the caller builds the cage anew and runs that (so a
kernel that refuses the namespaces now, or a command not found, is reported as a build would). Anything unexpected about an entry — not a regular file, not ours, writable by others,
too large, truncated, garbage — is a miss, never an error.

`SANDBOY_PLAN_CACHE=0` turns it off (no entry read or written).
"""

import _imp
import marshal
import os
import sys
from stat import S_ISREG  # (os imports stat: nothing to load)

from sandboy.confine import _libc, env_reads
from sandboy.confine.fingerprint import Fingerprint, _identity, _settled  # (an inode's change signature: the one)
from sandboy.policy.resolve import PLAN_CACHE_ENV, exec_args, plan_cache_enabled, plan_entry_path, plan_may_keep, plans_dir

DISABLE_ENV = PLAN_CACHE_ENV
FORMAT = "sandboy plan cache 6"  # 2: no environment value in an entry; 3: write roots (their git check); 4: presets; 5: {tmp}
# 6: keyed with the environment variables the build read (`env_reads`), not all of them
_ENV_KEYS = (0x53424F59454E5631, 0x53424F59454E5632)  # the environment digest's ("SBOYENV1", "SBOYENV2")
MAX_ENTRY_BYTES = 4 << 20  # a policy with thousands of paths stays well below; larger: a miss
MAX_POLICY_BYTES = 1 << 20  # policy.load's own bound
_S_IFMT, _S_IFCHR, _S_IFIFO, _S_IFSOCK = 0o170000, 0o020000, 0o010000, 0o140000
_PACKAGE = os.path.dirname(os.path.dirname(__file__))  # the `sandboy` package this process runs


enabled = plan_cache_enabled  # (policy.resolve: the CLI asks without importing this module)
directory = plans_dir  # where the entries live (policy.resolve: the CLI asks without importing this module)


def _stdio_shape():
    """What the plan depends on of fd 0-2, or None where a run may not be cached: per fd None
    (closed), a character device with its rdev and access mode (`namespaces.plan_stdio` puts the
    cage's own copy of /dev/null & co. there), an anonymous pipe, or a socket (nothing done for
    those). A regular file, a named FIFO, anything else is never cached: the tier reopens or
    relays those per run, for the file they are (`namespaces.StdioHandoff`); nor a terminal,
    which `exec_mode.supervisor_needed` relays under a supervisor: such a run never execs."""
    shape = []
    for fd in (0, 1, 2):
        try:
            st = os.fstat(fd)
        except OSError:
            shape.append(None)
            continue
        kind = st.st_mode & _S_IFMT
        if kind == _S_IFCHR:
            if os.isatty(fd):
                return None  # a terminal: every such run is supervised (relayed), never exec mode
            shape.append((kind, st.st_rdev, _libc.syscall(_libc.SYS_FCNTL, fd, _libc.F_GETFL) & 0o3))
        elif kind == _S_IFSOCK:
            shape.append((kind,))
        elif kind == _S_IFIFO and os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:"):
            shape.append((kind,))
        else:
            return None
    return tuple(shape)


def _environment(names):
    """The environment the build read, as a 128-bit digest of (name, value or None for absent)
    for each of `names` (bytes, sorted: the variables a build recorded, `_env_names`), or of every
    pair where `names` is None (a build that saw the whole environment) — never the values: an
    entry sits on disk, and the environment holds the operator's tokens. Read from os.environ's
    own dict of bytes (not through `sandboy run`'s Recording: these reads are the key's, not the
    build's); None where there is none (a miss, never a guess). Two keyed SipHashes (the .pyc's,
    built in): the invoker is trusted, so collision resistance against them is not the point; a
    change of any value read shows."""
    data = getattr(env_reads.real(), "_data", None)
    if type(data) is not dict:
        return None
    if names is None:
        items = tuple(sorted(data.items()))
    else:
        get = data.get
        items = tuple([(name, get(name)) for name in names])
    blob = marshal.dumps(items, 2)  # version 2: no back-references, the same bytes for the same pairs
    return _imp.source_hash(_ENV_KEYS[0], blob) + _imp.source_hash(_ENV_KEYS[1], blob)


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


def _key(policy_arg: str, policy_bytes: bytes, cwd: str, stdio_shape) -> tuple:
    """Every input of the build that is not a file the fingerprint watches (see the module)."""
    from sandboy.confine.ruleset import abi_version

    # (the environment is the entry's own names' digest: `_environment`; what the interpreter
    # made of it at start-up, before `sandboy run` recorded anything, is here: its import path —
    # PYTHONPATH, PYTHONHOME, the user site, which decide the standard library's files; where it
    # imports from first, `sys.path[0]` unless -P, which gets the build's warning where a write
    # root holds it, `own_install.first_import_warning` — its file system encoding, and its
    # flags and user site: `_interpreter_options`)
    return (FORMAT, sys.version, sys.executable, _PACKAGE, policy_arg, os.path.abspath(policy_arg), policy_bytes, cwd,
            os.getuid(), os.geteuid(), os.getgid(), os.getegid(), tuple(os.getgroups()), tuple(sys.path),
            sys.getfilesystemencoding(), sys.getfilesystemencodeerrors(), tuple(os.uname()), abi_version(), stdio_shape,
            _interpreter_options())


def _interpreter_options() -> tuple:
    """What decides Sandboy's own-installation rows besides the environment and the paths in the
    key (ADR 0024): the interpreter's flags (-s and -I drop the user site, -S the site module, -E
    the PYTHON* variables) and its pycache prefix (-X pycache_prefix, no variable needed). Without
    them a plan kept by `python3 -s -m sandboy`, which had no user site to protect, served a later
    `python3 -m sandboy` whose interpreter runs that site's .pth files: the command planted one in
    the granted home, and the operator's next python3 ran it (redcage12). The user site itself is
    decided by `site` when the interpreter starts (HOME, PYTHONUSERBASE read then, not by the
    build): its answer is the key's, whatever the environment's key holds."""
    site = sys.modules.get("site")  # (imported at start-up unless -S; never imported here)
    return (tuple(sys.flags), getattr(sys, "pycache_prefix", None), getattr(site, "ENABLE_USER_SITE", None),
            getattr(site, "USER_SITE", None))


def _read_policy(policy_arg: str):
    """The policy file's bytes, or None (a miss: the loader then says what is wrong). A regular
    file only, opened non-blocking: a FIFO put where the policy was hung the run (rvcache8), and
    opening a device may act on it; stat first, then the opened file checked again."""
    try:
        if not S_ISREG(os.stat(policy_arg).st_mode):
            return None
        fd = os.open(policy_arg, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not S_ISREG(st.st_mode) or st.st_size > MAX_POLICY_BYTES:
            return None
        # its size + 1: a short read of a regular file is its end (a read of the bound itself
        # made a 1 MiB buffer: ≈ 14 µs); a file that grew since the fstat is a miss
        data = os.read(fd, st.st_size + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data if len(data) <= st.st_size else None


def _served_stats() -> dict:
    """{file: its os.stat when the module was imported} of the modules the run-path bundle served
    this process (`sandboy.BundleFinder.stats`): the identity of the very code that runs, with no
    stat more (≈ 20 files: ≈ 0.1 ms of a miss, ≈ 10 of them on a hit)."""
    from sandboy import bundle_finder

    finder = bundle_finder()
    return {} if finder is None else finder.stats


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
                out.append((path, _identity(os.stat(path) if st is None else st)))
            except OSError:
                continue
    return tuple(sorted(set(out)))


def _code_unchanged(identities) -> bool:
    served = _served_stats()  # (this process's own modules: as imported, moments ago)
    for path, identity in identities:
        st = served.get(path)
        try:
            if _identity(os.stat(path) if st is None else st) != identity:
                return False
        except OSError:
            return False
    return True


def _open_entry(path: str):
    """The entry's bytes, or None: only a regular file we own, that no one else may write, of a
    bounded size, reached without a symlink, in a directory of ours no one else may write
    (`_libc.read_private`, the cache's one reader)."""
    return _libc.read_private(path, MAX_ENTRY_BYTES)


class CachedPlan:
    """A stored plan made ready to run in this process (`consult`): what exec mode needs of a Cage
    (`start_child`, `close`, and for the notes `degraded`, `warnings`, `env`, `exec_roots`)."""

    def __init__(self, plan, clone_flags, env, degraded, warnings, exec_paths, ruleset_fd, keepalive, git_scope=None,
                 mount_table=None):
        self.plan = plan
        self.clone_flags = clone_flags
        self.env = env
        self.degraded = degraded
        self.warnings = warnings
        self._exec_paths = exec_paths
        self._ruleset_fd = ruleset_fd
        self._keepalive = keepalive  # the seccomp program the plan's sock_fprog points at
        # the post-run git check's Scope, as the build's (`gitcheck_hook.scope_args`: the write roots
        # it walks, the protected paths whose modes it puts back if loosened — ADR 0019); None:
        # the policy brings no check
        self._git_scope = git_scope
        # the mount table as `_ready` read it for the kernel mounts below the write roots: the
        # snapshot's question (file systems mounted below them) is answered from the same read
        self._mount_table = mount_table
        self.start_failed = False

    @property
    def exec_roots(self) -> list:
        """As `Cage.exec_roots` (for `explain.skipped`)."""
        return [os.path.realpath(p) for p in self._exec_paths if not p.startswith("{")]

    def start_child(self, argv, stdio, report_fd: int, first=()) -> int:
        """As `Cage.start_child` for exec mode (stdio: this process's own)."""
        try:
            paths, args, envp = exec_args(argv, self.env)
            return _libc.fork_exec([step for _, step in first] + self.plan, paths, args, envp, report_fd,
                                   self.clone_flags)
        except Exception:
            # nothing started (the kernel refuses the namespaces now, an argument the executor
            # refuses, a plan it cannot read): the build runs instead and says why, if anything
            self.start_failed = True
            raise

    def close(self) -> None:
        if self._ruleset_fd >= 0:
            os.close(self._ruleset_fd)
            self._ruleset_fd = -1

    def run(self, argv):
        """Exec mode with this plan: the command's exit code (or this process ends by its signal),
        or None where the start failed before the command ran (the caller builds anew). With
        write roots, the post-run git check around it as the build's run has it (`GitCheck`
        under `exec_mode._supervise_in_namespace`): the snapshot just before the child starts,
        the verdict once the namespace's init — and with it every process of the run — has
        ended; a finding fails the run (125) with the build's message."""
        from sandboy.confine import exec_mode

        snap = None
        if self._git_scope is not None:
            from sandboy.confine.gitcheck import GitSnapshot, Scope

            snap = GitSnapshot.at_launch(Scope(**self._git_scope), mount_table=self._mount_table)
            if snap is not None and snap.beyond_bound is not None:
                self.close()
                return None  # refused before it starts: the build says so, in its words
        try:
            status, report, _ = exec_mode.start_and_wait(argv, self, supervised=snap is not None)
        except Exception:
            if not self.start_failed:
                raise
            return None
        finally:
            self.close()
        failed, reported = _libc.read_child_report(report)
        if failed is not None:
            return None  # (nothing ran: nothing to check)
        if snap is not None:
            from sandboy.confine.gitcheck import after_run

            try:
                message = after_run(snap)
            except Exception as exc:  # a check that could not run did not pass (HookChain.stop)
                message = f"git check: {exc}"
            if message:
                exec_mode._say(message)
                from sandboy.errors import EXIT_CAGE

                return EXIT_CAGE
        return exec_mode.exit_like(status if reported is None else reported)


def consult(policy_arg: str, cwd_arg=None, where=None) -> tuple:
    """(the stored plan for this run, ready to start, or None; a `Miss` where a cage built for this
    run may be kept, or None). What a run the cache never keeps pays is kept small: fd 0-2 are
    looked at first (a file there: no entry opened, no policy read twice), and the key is computed
    only where an entry exists to compare it with (else once the cage is built: `Miss.built`).
    `where`: (the working directory, absolute; the entry's path) where the caller has them."""
    try:
        shape = _stdio_shape()
        if shape is None:
            return None, None  # a file or named FIFO on fd 0-2: never kept (see _stdio_shape)
        policy_bytes = _read_policy(policy_arg)
        if policy_bytes is None:
            return None, None  # not a readable regular file: the loader says what is wrong
        cwd, path = where or (os.path.abspath(cwd_arg or os.getcwd()), None)
        miss = Miss(policy_arg, cwd, policy_bytes, shape, path)
        data = _open_entry(miss.path)
        return (None if data is None else _applies(data, miss)), miss
    except Exception:  # a working directory gone, a cache directory we may not read: a miss,
        return None, None  # never an error (the build says what is wrong, if anything)


def _applies(data: bytes, miss: "Miss"):
    """The entry `data` made ready to run, or None where it does not apply to this run."""
    try:
        # the key first, the plan (most of the bytes) unmarshalled only for an entry that applies
        head = marshal.loads(data)
        if head[0] != FORMAT:
            return None
        _, key, names, environment, code, fingerprint, lookups, body = head
        miss.key = _key(miss.policy_arg, miss.policy_bytes, miss.cwd, miss.shape)
        if key != miss.key or environment is None or environment != _environment(names):
            return None
        if not _code_unchanged(code) or not Fingerprint.from_state(fingerprint).unchanged(resolve=False):
            return None
        if lookups and not _presets_unchanged(lookups):
            return None
        from sandboy.confine import terminal

        if not terminal.exec_in_place_possible():  # what supervisor_needed asks of this process
            return None
        return _ready(*marshal.loads(body))
    except Exception:  # an entry of another shape, garbage that unmarshalled: a miss, never an error
        return None


def _presets_unchanged(record) -> bool:
    """Whether every question the policy's presets asked of the machine when the plan was built
    (`include`: policy/lookups.py) gets the same answer now — then a load now resolves them to
    the same rules. Asked without the presets, the loader or tomllib."""
    from sandboy.policy.lookups import unchanged

    return unchanged(record)


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


def _ready(plan, ruleset_at, seccomp_at, bpf, ruleset, clone_flags, env, degraded, warnings, exec_paths, git_scope,
           mount_roots, tmp):
    """The stored plan with this process's values: a ruleset filled from the stored rules (its fd
    where the plan names the ruleset) and the seccomp program's address in its sock_fprog. None
    where a kernel file system is mounted below a write root now (`kernel_mounts`: the tier copies
    a write root with its submounts; the build refuses such a root, 125, and says why — so the
    miss does: mock mounts a chroot's /proc between its steps, redcage9), as `Cage.still_valid`
    asks before a reuse. None too where `{tmp}`'s fixed mount point is not the directory the
    build found empty (`tmp`: its path and identity; `cage.fixed_tmp_dir`): removed, replaced, a
    link now, written to — one lstat; the rebuild takes it again, or a directory per run."""
    if tmp is not None:
        try:
            if _identity(os.lstat(tmp[0])) != tmp[1]:
                return None
        except OSError:
            return None
    table = None
    if mount_roots:
        from sandboy.confine.kernel_mounts import below, read_table

        table = read_table()  # (OSError where it cannot be read: a miss, and the build refuses)
        if below(mount_roots, table=table):
            return None
    from sandboy.confine.ruleset import build_ruleset

    abi, rules, handled_fs, handled_net, connect_ports, bind_ports, scoped = ruleset
    differs = []  # a rule the build added that cannot be added now: the rebuild differs
    built = build_ruleset(abi, rules, handled_fs, handled_net, connect_ports, bind_ports, scoped, differs.append)
    if differs:
        built.close()
        return None
    plan = list(plan)
    for i in ruleset_at:
        step = plan[i]
        plan[i] = (*step[:2], built.fd, *step[3:])
    keepalive, fprog = _libc.sock_fprog(bpf)
    step = plan[seccomp_at]
    plan[seccomp_at] = (*step[:4], fprog, *step[5:])
    passed, set_pairs = env
    env = env_reads.command_env(passed, set_pairs, env_reads.real())  # today's values of the passed variables
    return CachedPlan(plan, clone_flags, env, degraded, warnings, exec_paths, built.fd, keepalive, git_scope, table)


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
            git_scope, tuple(fs.get("mount_roots") or ()), tmp)
    lookups = miss.lookups
    if lookups:  # (an `exists` the fingerprint's own stat proves is not asked twice by a hit)
        from sandboy.policy.lookups import without_implied  # (imported: the presets asked through it)

        lookups = without_implied(lookups, cage.fingerprint.present())
    return miss.path, (FORMAT, miss.key, names, environment, miss.code, cage.fingerprint.state(), lookups), body


def _tmp_mount_point(cage):
    """What a hit checks of the run's `{tmp}`: None (the policy has none), (path, identity) of
    the fixed mount point every run of the tier covers with a tmpfs of its own
    (`cage.fixed_tmp_dir`), or False where the plan names a directory of this run's own (made
    per cage: without the tier, or where the fixed one was not ours to take) — never kept — or
    where the mount point changed since the build found it empty, or changed too recently for
    its times to show a later change (`fingerprint._settled`: the first run, which made it,
    keeps no entry; the next does)."""
    if not cage.ctx.tmp:
        return None
    shared = cage.tmp_mount_point
    if shared is None or cage.tier is None or not cage.tier.tmp_private:
        return False
    path, st, clock = shared
    try:
        identity = _identity(os.lstat(path))
    except OSError:
        return False
    return (path, identity) if identity == _identity(st) and _settled(st.st_ctime_ns, clock) else False


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
