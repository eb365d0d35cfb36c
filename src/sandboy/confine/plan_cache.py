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

from sandboy.cache_places import PLAN_CACHE_ENV, plan_cache_enabled, plan_entry_path, plans_dir
from sandboy.confine import _libc, env_reads
from sandboy.confine._libc import exec_args
from sandboy.confine.fingerprint import Fingerprint, inode_identity  # (an inode's change signature: the one)

DISABLE_ENV = PLAN_CACHE_ENV
FORMAT = "sandboy plan cache 9"  # 2: no environment value in an entry; 3: write roots (their git check); 4: presets; 5: {tmp}
# 6: keyed with the environment variables the build read (`env_reads`), not all of them; 7: the
# policy's `limits.wall_seconds` in the body (the deadline a hit's C wait holds: `CachedPlan.run`);
# 8: its `limits.processes` too (as root, the pids cgroup a hit's run makes: `init_wait.start_and_wait`)
# 9: the policy file's (device, inode) in the key (`_file_identity`: the file the build protected)
_ENV_KEYS = (0x53424F59454E5631, 0x53424F59454E5632)  # the environment digest's ("SBOYENV1", "SBOYENV2")
MAX_ENTRY_BYTES = 4 << 20  # a policy with thousands of paths stays well below; larger: a miss
MAX_POLICY_BYTES = 1 << 20  # policy.load's own bound
_S_IFMT, _S_IFCHR, _S_IFIFO, _S_IFSOCK = 0o170000, 0o020000, 0o010000, 0o140000
_PACKAGE = os.path.dirname(os.path.dirname(__file__))  # the `sandboy` package this process runs


enabled = plan_cache_enabled  # (cache_places: the CLI asks without importing this module)
directory = plans_dir  # where the entries live (cache_places: the CLI asks without importing this module)


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


def _key(policy_arg: str, policy_bytes: bytes, cwd: str, stdio_shape) -> tuple:
    """Every input of the build that is not a file the fingerprint watches (see the module)."""
    from sandboy.confine.ruleset import abi_version

    # (the environment is the entry's own names' digest: `_environment`; what the interpreter
    # made of it at start-up, before `sandboy run` recorded anything, is here: its import path —
    # PYTHONPATH, PYTHONHOME, the user site, which decide the standard library's files; where it
    # imports from first, `sys.path[0]` unless -P, which gets the build's warning where a write
    # root holds it, `own_install.first_import_warning` — its file system encoding, and its
    # flags and user site: `_interpreter_options`)
    return (FORMAT, sys.version, sys.executable, _PACKAGE, policy_arg, os.path.abspath(policy_arg), policy_bytes,
            _file_identity(policy_arg), cwd,
            os.getuid(), os.geteuid(), os.getgid(), os.getegid(), tuple(os.getgroups()), tuple(sys.path),
            sys.getfilesystemencoding(), sys.getfilesystemencodeerrors(), tuple(os.uname()), abi_version(), stdio_shape,
            _interpreter_options())


def _file_identity(path: str):
    """(device, inode) of the policy file, or None: which file the build protected read-only
    where a write root holds it (own_install's "policy file" row, bound by its realpath) — the
    same bytes reached as another file (a symlink on the way retargeted, the file replaced) are
    a miss, whose build protects that one (redcage13)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


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


def _code_unchanged(identities) -> bool:
    served = _served_stats()  # (this process's own modules: as imported, moments ago)
    for path, identity in identities:
        st = served.get(path)
        try:
            if inode_identity(os.stat(path) if st is None else st) != identity:
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
                 mount_table=None, wall_seconds=0, processes=0):
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
        # the policy's deadline (0: none), held by the wait as the build's run held it
        # (`exec_mode._wait_in_namespace`): the policy's bytes are in the key, this is their value
        self._wall_seconds = wall_seconds
        self._processes = processes  # the policy's `limits.processes`: as root, the run's pids cgroup's
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
        ended; a finding fails the run (125) with the build's message. Past the policy's
        `limits.wall_seconds` the init is killed (the whole PID namespace) and the run ends 137,
        as the build's run does."""
        from sandboy.confine import init_wait  # (not exec_mode: the build's decisions, ≈ 14 kB a hit never runs)

        snap = None
        if self._git_scope is not None:
            from sandboy.confine.gitcheck import GitSnapshot, Scope

            snap = GitSnapshot.at_launch(Scope(**self._git_scope), mount_table=self._mount_table)
            if snap is not None and snap.beyond_bound is not None:
                self.close()
                return None  # refused before it starts: the build says so, in its words
        try:
            status, report, _ = init_wait.start_and_wait(argv, self, supervised=snap is not None,
                                                         wall_seconds=self._wall_seconds, processes=self._processes)
        except Exception as exc:
            from sandboy.errors import CageError  # (no pids cgroup could be made: the build refuses, in its words)

            if not (self.start_failed or isinstance(exc, CageError)):
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
                init_wait.say(message)
                from sandboy.exit_codes import EXIT_CAGE

                return EXIT_CAGE
        if status & _libc.DEADLINE_PASSED:
            return 128 + 9  # timed out: SIGKILL, exit 137 (`result.classify`'s TIMED_OUT, as the build's run)
        return init_wait.exit_like(status if reported is None else reported)


def consult(policy_arg: str, cwd_arg=None, where=None) -> tuple:
    """(the stored plan for this run, ready to start, or None; a `plan_keep.Miss` where a cage
    built for this run may be kept, or None). What a run the cache never keeps pays is kept small:
    fd 0-2 are looked at first (a file there: no entry opened, no policy read twice), and the key
    is computed only where an entry exists to compare it with (else once the cage is built:
    `Miss.built`). A hit reads none of the code that keeps a plan (`plan_keep`): its run, should
    its start fail (nothing ran), builds anew and keeps nothing — the entry it found stays.
    `where`: (the working directory, absolute; the entry's path) where the caller has them."""
    try:
        shape = _stdio_shape()
        if shape is None:
            return None, None  # a file or named FIFO on fd 0-2: never kept (see _stdio_shape)
        policy_bytes = _read_policy(policy_arg)
        if policy_bytes is None:
            return None, None  # not a readable regular file: the loader says what is wrong
        cwd, path = where or (os.path.abspath(cwd_arg or os.getcwd()), None)
        if path is None:
            path = plan_entry_path(policy_arg, cwd)
        data = _open_entry(path)
        hit, key = (None, None) if data is None else _applies(data, policy_arg, policy_bytes, cwd, shape)
        if hit is not None:
            return hit, None
        from sandboy.confine.plan_keep import Miss

        miss = Miss(policy_arg, cwd, policy_bytes, shape, path)
        miss.key = key  # (computed for the comparison: the entry this build makes is keyed with it)
        return None, miss
    except Exception:  # a working directory gone, a cache directory we may not read: a miss,
        return None, None  # never an error (the build says what is wrong, if anything)


def _applies(data: bytes, policy_arg: str, policy_bytes: bytes, cwd: str, shape) -> tuple:
    """(the entry `data` made ready to run, or None where it does not apply to this run; this
    run's key, or None where it was not computed)."""
    key = None
    try:
        # the key first, the plan (most of the bytes) unmarshalled only for an entry that applies
        head = marshal.loads(data)
        if head[0] != FORMAT:
            return None, key
        _, kept_key, names, environment, code, fingerprint, lookups, body = head
        key = _key(policy_arg, policy_bytes, cwd, shape)
        if kept_key != key or environment is None or environment != _environment(names):
            return None, key
        if not _code_unchanged(code) or not Fingerprint.from_state(fingerprint).unchanged(resolve=False):
            return None, key
        if lookups and not _presets_unchanged(lookups):
            return None, key
        from sandboy.confine import terminal

        if not terminal.exec_in_place_possible():  # what supervisor_needed asks of this process
            return None, key
        return _ready(*marshal.loads(body)), key
    except Exception:  # an entry of another shape, garbage that unmarshalled: a miss, never an error
        return None, key


def _presets_unchanged(record) -> bool:
    """Whether every question the policy's presets asked of the machine when the plan was built
    (`include`: policy/lookups.py) gets the same answer now — then a load now resolves them to
    the same rules. Asked without the presets, the loader or tomllib."""
    from sandboy.policy.lookups import unchanged

    return unchanged(record)


def _ready(plan, ruleset_at, seccomp_at, bpf, ruleset, clone_flags, env, degraded, warnings, exec_paths, git_scope,
           mount_roots, tmp, wall_seconds, processes):
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
            if inode_identity(os.lstat(tmp[0])) != tmp[1]:
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
    return CachedPlan(plan, clone_flags, env, degraded, warnings, exec_paths, built.fd, keepalive, git_scope, table,
                      wall_seconds, processes)
