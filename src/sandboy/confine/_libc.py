"""Raw system calls, and the executor of cage plans.

A cage is compiled (cage.py) into a *plan*: a list of raw system calls `(nr, flags, *args)`,
arguments being ints, `bytes` (passed as a pointer to their contents) or None (NULL). `flags`
is `optional` (a failure is ignored) or an int from `step_flags`, which can also keep the call's
result in a *slot*; an argument `(slot,)` then stands for that result (an fd made by one step and
used by the next: open_tree then move_mount, socket then bind), and `(slot, template, offset)`
for a copy of the bytes `template` with that result written at `offset` as a 32-bit int (an fd
inside a struct). A failed step keeps -1 in its slot. The pseudo-call NR_INIT forks:
the parent becomes the init of a new PID namespace (forwards signals, reaps orphans, reports the
command's wait status on the error pipe as (REPORT_STATUS, status)), the child runs the rest of
the plan; its arguments (fd0, fd1, fd2, kinds) say what the init does with the caller's fd 0-2
(`namespaces.StdioHandoff`: carry a reopened file's offset back, relay a pipe to the caller's
file). The pseudo-call NR_SAME_FILE (fd, st_dev, st_ino) fails with ESTALE unless `fd` is
that file (a path reopened in the child that no longer leads to the file the caller handed in). This module runs plans. Two implementations, one interface:

- `native`: the C extension `sandboy.confine._native` (built by `pip install` when a compiler is
  there). The child runs the plan and execs without executing any Python: ≈ 0.2 ms instead of
  ≈ 1 ms per start (docs/performance.md).
- `python` (`_libc_python.py`, loaded only then): CPython's `_ctypes` core. Not `ctypes`
  itself: its package `__init__` costs ≈ 2.2 ms of start-up for one foreign function, libc's
  `syscall(2)`. Used where the extension is not built, or with SANDBOY_NATIVE=0 (the test suite
  runs the probes against both).

Why no binding library at all: the PyPI Landlock/seccomp bindings spawn subprocesses at import
(docs/findings.md), and libseccomp compares arguments as 64 bits (ADR 0003).
"""

import os

# x86_64 numbers
SYS_RT_SIGACTION = 13
SYS_RT_SIGPROCMASK = 14
SYS_WRITE = 1
SYS_CLOSE = 3
SYS_IOCTL = 16
SYS_DUP2 = 33
SYS_SOCKET = 41
SYS_SENDMSG = 46
SYS_BIND = 49
SYS_LISTEN = 50
SYS_SETSOCKOPT = 54
SYS_CLONE = 56
SYS_FCNTL = 72
SYS_KILL = 62
SYS_CHDIR = 80
SYS_SETSID = 112
SYS_CAPSET = 126
SYS_PRCTL = 157
SYS_MOUNT = 165
SYS_OPENAT = 257
SYS_MKDIRAT = 258
SYS_SYMLINKAT = 266
SYS_PRLIMIT64 = 302
SYS_SECCOMP = 317
SYS_OPEN_TREE = 428
SYS_MOVE_MOUNT = 429
SYS_CLOSE_RANGE = 436
SYS_OPENAT2 = 437
SYS_MOUNT_SETATTR = 442
SYS_LANDLOCK_CREATE_RULESET = 444
SYS_LANDLOCK_ADD_RULE = 445
SYS_LANDLOCK_RESTRICT_SELF = 446


AT_FDCWD = -100 & 0xFFFFFFFFFFFFFFFF
F_GETFL = 3
SIGCHLD = 17
NR_INIT = -1          # pseudo-call: become the PID namespace's init (see the module docstring)
REPORT_STATUS = -2    # error-pipe record of the init: (REPORT_STATUS, the command's wait status)
NR_SAME_FILE = -3     # pseudo-call (fd, st_dev, st_ino): fails with ESTALE unless fd is that file
MAX_SLOTS = 64
# What an init passes on to the command (as tini does); stop signals are not passed.
FORWARDED_SIGNALS = (1, 2, 3, 15, 10, 12, 14, 28, 18)  # HUP INT QUIT TERM USR1 USR2 ALRM WINCH CONT
# The supervision asks a namespace's init to end the run (a timeout, kill()): the init kills the
# command's tree, then drains its relays and carries offsets back before it reports (_native.c).
END_RUN_SIGNAL = 64  # SIGRTMAX: queued with its sender's pid, which must read 0 (outside the namespace)
# Set in `wait_forwarding`'s status where its deadline killed the child (above any real wait
# status, which is 16 bits): exec mode's `limits.wall_seconds` under the tier (session 12).
DEADLINE_PASSED = 1 << 16
END_GRACE_MS = 1000  # then SIGKILL (supervision.END_GRACE_SECONDS; _native.c's own)
SI_USER = 0  # ... and a kill(2)'s si_code: a sigqueue's si_pid is whatever its sender wrote


F_DUPFD_CLOEXEC = 1030  # fcntl.h


def above_stdio(fd: int) -> int:
    """`fd`, moved to 3 or above (close-on-exec) when it took a free fd 0-2: a caller that closed
    its stdio (a daemon, a test harness) got Sandboy's own descriptors there, each the lowest free
    number when made. A child's plan puts the command's stdio on fd 0-2 by dup2, replacing one
    that lives there in the child (the Landlock ruleset: "File descriptor in bad state"; a memory
    group's join fd: the join written into the caller's stdout file, the command outside the
    group), and the next run takes what it finds on fd 0-2 for the caller's stdio (the kept
    mountinfo fd on fd 0: every later run under the tier refused, "under /proc"). Every
    descriptor Sandboy keeps beyond the call that made it goes through here: the ruleset, the
    mountinfo watch, cgroup files and the v1 OOM eventfd, the egress fallback's listener, and a
    run's own pipes and pidfd. F_DUPFD_CLOEXEC as a raw call: `fcntl` is a shared object to load."""
    if fd > 2:
        return fd
    try:
        return syscall(SYS_FCNTL, fd, F_DUPFD_CLOEXEC, 3)
    finally:
        os.close(fd)


def step_flags(optional: bool = False, save: int = 0) -> int:
    """The `flags` of a plan step: bit 0 optional, `save` (1..MAX_SLOTS) the slot that keeps
    the call's result."""
    if not 0 <= save <= MAX_SLOTS:
        raise ValueError(f"slot {save} out of range")
    return int(optional) | save << 8


def u16(value: int) -> bytes:
    return value.to_bytes(2, "little")


def u32(value: int) -> bytes:
    return value.to_bytes(4, "little")


def s32(value: int) -> bytes:
    return value.to_bytes(4, "little", signed=True)


def u64(value: int) -> bytes:
    return value.to_bytes(8, "little")


def sock_fprog(program: bytes) -> tuple:
    """(the buffer to keep alive, struct sock_fprog pointing at it) for the seccomp BPF `program`
    in this process: `struct sock_fprog { unsigned short len; /* 6 bytes padding */ struct
    sock_filter *filter; }`, `len` in 8-byte instructions. The one spelling of it: the build
    (`seccomp.plan`), a kept piece made ready (`plan_pieces`) and the plan cache's check of the
    plan's one pointer all compare their bytes."""
    keepalive, address = pointer_to(program)
    return keepalive, u16(len(program) // 8) + bytes(6) + u64(address)


def exit_code_for_exec_error(err: int) -> int:
    import errno

    from sandboy.exit_codes import EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND

    return EXIT_NOT_FOUND if err in (errno.ENOENT, errno.ENOTDIR) else EXIT_NOT_EXECUTABLE


# The executor's arguments (`exec_args`): here, not in `policy.resolve` (which re-exports them), so a
# plan cache hit finds the command without loading the resolver.
# Where a command named without a slash is looked for when PATH is unset (the C executor's and
# `explain`'s search; glibc's execvp(3) default plus /usr/local/bin).
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


def path_candidates(name: str, path_var: str | None) -> list[str]:
    """Where execvp(3) looks for `name`, in order: `name` itself when it holds a slash, else each
    entry of `path_var` (an empty entry is the working directory); `path_var` None means PATH is
    unset: DEFAULT_PATH. THE PATH search: the cage's exec (`Cage.exec_args`), the reasons
    `explain` gives for a refused exec and the presets' program lookup all use it."""
    if "/" in name:
        return [name]
    search = DEFAULT_PATH if path_var is None else path_var
    # os.path.join(d or ".", name)'s strings (name holds no "/"), without its Python per entry:
    # the presets search PATH for several programs at every policy load (session 7)
    return [d + name if d.endswith("/") else f"{d or '.'}/{name}" for d in search.split(":")]


def exec_args(argv, env: dict) -> tuple:
    """(candidate paths, argv, envp) as bytes for the executor (`_libc.fork_exec`/`exec_first`):
    PATH (the command's, from `env`) is searched inside the cage, by the child, as execvp(3)
    would, so a directory the cage refuses is skipped like a miss. `Cage.exec_args` and a cached
    plan's (`plan_cache`) both call this."""
    paths = [os.fsencode(p) for p in path_candidates(os.fsdecode(argv[0]), env.get("PATH"))]
    envp = [os.fsencode(f"{k}={v}") for k, v in env.items()]
    args = [os.fsencode(a) for a in argv]
    if any(b"\0" in item for item in (*paths, *args, *envp)):
        raise ValueError("argv and environment must not contain NUL bytes")
    return paths, args, envp


def prctl(option: int, arg2: int = 0, arg3: int = 0, arg4: int = 0, arg5: int = 0) -> int:
    return syscall(SYS_PRCTL, option, arg2, arg3, arg4, arg5)


def _record(first: int, second: int) -> bytes:
    return first.to_bytes(8, "little", signed=True) + second.to_bytes(8, "little", signed=True)


def read_child_report(data: bytes) -> tuple:
    """(error, status) from what a `fork_exec` child wrote on its error pipe: `error` is the
    (step index or -1 for exec, errno) of a failed start or None; `status` the command's wait
    status as the init of its PID namespace saw it, or None without one (no init, or the
    init was killed)."""
    error = status = None
    for offset in range(0, len(data) - len(data) % 16, 16):
        first = int.from_bytes(data[offset:offset + 8], "little", signed=True)
        second = int.from_bytes(data[offset + 8:offset + 16], "little", signed=True)
        if first == REPORT_STATUS:
            status = second
        elif error is None:
            error = (first, second)
    return error, status


def read_file(path: str) -> bytes:
    """All of a small file (a sysctl, a note in Sandboy's cache), with os-level calls: `open()`
    would build a FileIO and a BufferedReader and make four more system calls (fstat, ioctl,
    lseek twice) for each of the few files `sandboy run` reads while building a cage."""
    return read_all(os.open(path, os.O_RDONLY | os.O_CLOEXEC))


def read_private(path: str, limit: int):
    """The body of a file of Sandboy's cache directory (a plan cache entry or piece, a walk
    index, a parse cache entry, the namespace note), or None: only a regular file this euid owns
    that no one else may write, of at most `limit` bytes besides its seal, reached without a
    symlink, in a directory of ours no one else may write, AND sealed by this user's key for this
    very name (`cache_seal.unseal`: owner and mode alone a checkout's files have) — what every
    reader of the cache asks (its writer: `cache_files.write_file`)."""
    from sandboy import cache_seal

    data = _read_owned(path, limit + cache_seal.TAG_BYTES)
    return None if data is None else cache_seal.unseal(path, data)


def _read_owned(path: str, limit: int):
    try:
        dirfd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(dirfd)
        if st.st_uid != os.geteuid() or st.st_mode & 0o022:
            return None
        fd = os.open(os.path.basename(path), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=dirfd)
    except OSError:
        return None
    finally:
        os.close(dirfd)
    try:
        st = os.fstat(fd)
        if (st.st_mode & 0o170000 != 0o100000 or st.st_uid != os.geteuid() or st.st_mode & 0o022
                or st.st_size > limit):
            return None
        data = os.read(fd, st.st_size + 1)
        return data if len(data) == st.st_size else None
    except OSError:
        return None
    finally:
        os.close(fd)


def status_masks(*names: bytes) -> dict:
    """{name: value} of the hexadecimal masks `names` (b"SigIgn", b"CapEff", ...) in
    /proc/self/status, the kernel's own view of this process's signals and capabilities (what
    Python's `signal` and `os` cannot see: dispositions and capabilities native code set). One
    small read; a name the kernel does not print is left out."""
    data = read_file("/proc/self/status")
    masks = {}
    for name in names:
        start = data.find(b"\n" + name + b":\t")
        if start >= 0:
            start += len(name) + 3
            masks[name] = int(data[start:data.index(b"\n", start)], 16)
    return masks


def read_all(fd: int) -> bytes:
    """Everything written on a `fork_exec` child's error pipe, once every copy of its write end
    is closed (the child exec'd or exited); closes `fd`."""
    chunks = []
    try:
        while True:
            try:
                chunk = os.read(fd, 65536)
            except InterruptedError:
                continue
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def _built_from_its_source(module) -> bool:
    """Whether the C executor was built from the `_native.c` beside it (its size then: setup.py).
    A checkout moved on without `make compile` kept yesterday's executor for today's plans: an
    init built before END_RUN_SIGNAL existed discarded it (a PID namespace's init drops a signal
    it neither blocks nor handles), so every timed-out run waited the whole grace and lost the
    relayed output (session 10). Such a build is not used: the Python executor runs the plans
    (as where none was built), and stderr says so. An installation without the source is what
    it was built from. A same-size edit is not seen (one stat per start-up; no hash of 40 kB)."""
    try:
        size = os.stat(os.path.join(os.path.dirname(module.__file__), "_native.c")).st_size
    except (OSError, TypeError):
        return True
    if size == getattr(module, "SOURCE_SIZE", -1):
        return True
    os.write(2, b"sandboy: warning: the C executor was built from another _native.c than the one beside it "
                b"(run `make compile`); using the Python executor\n")
    return False


_native = None
if os.environ.get("SANDBOY_NATIVE", "1") != "0":
    try:
        from sandboy.confine import _native
    except ImportError:
        _native = None
    else:
        if not _built_from_its_source(_native):
            _native = None

IMPLEMENTATION = "native" if _native is not None else "python"


if _native is not None:
    syscall = _native.syscall
    apply_plan = _native.apply_plan
    exec_first = _native.exec_first
    fork_exec = _native.fork_exec
    wait_forwarding = _native.wait_forwarding
    add_path_rules = _native.add_path_rules  # (ruleset._add_path_rules: the Python loop without it)
    mac = _native.mac            # the cache's seal (ADR 0030: `cache_seal`)
    user_key = _native.user_key

    def pointer_to(data: bytes):
        """(object to keep alive, its address) for structs that point at other buffers."""
        return data, _native.address_of(data)

    def prepare_buffers(*sizes: int) -> None:
        pass
else:
    # The pure-Python executor, in a module of its own: a run with the C executor never loads
    # its code (≈ 12 kB marshalled, ≈ 50 µs of every `sandboy run`'s start-up to unmarshal).
    from sandboy.confine._libc_python import (  # noqa: F401  (this module's interface)
        apply_plan,
        exec_first,
        fork_exec,
        mac,
        pointer_to,
        prepare_buffers,
        syscall,
        user_key,
        wait_forwarding,
    )

    add_path_rules = None
