"""Process hygiene, as plan steps for the child: signals, fds, rlimits, capabilities,
no_new_privs. Each function returns `(label, (nr, optional, *args))` entries; `cage.py` puts
them in order and `_libc` runs them (see its docstring for what a plan is)."""

import os

from sandboy.confine._libc import (
    F_DUPFD_CLOEXEC,
    SYS_CAPSET,
    SYS_CLOSE,
    SYS_CLOSE_RANGE,
    SYS_DUP2,
    SYS_FCNTL,
    SYS_PRCTL,
    SYS_PRLIMIT64,
    SYS_RT_SIGACTION,
    SYS_RT_SIGPROCMASK,
    step_flags,
    u32,
    u64,
)

PR_SET_NO_NEW_PRIVS = 38
PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
PR_SET_SECUREBITS = 28
CLOSE_RANGE_CLOEXEC = 1 << 2
# SECBIT_NOROOT, SECBIT_NO_SETUID_FIXUP, SECBIT_KEEP_CAPS_LOCKED, SECBIT_NO_CAP_AMBIENT_RAISE
# and their _LOCKED twins: uid 0 regains nothing at execve, and the child cannot undo it.
SECUREBITS_LOCKED_DOWN = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x40 | 0x80

# Resource numbers of x86_64 Linux; prlimit64 is called directly rather than importing the
# `resource` extension module (a shared-object load on the start-up path).
RLIMIT_CPU, RLIMIT_FSIZE, RLIMIT_CORE, RLIMIT_NPROC, RLIMIT_NOFILE, RLIMIT_AS = 0, 1, 4, 6, 7, 9
RLIMIT_SIGPENDING = 11
# Queued signals (real-time ones, sigqueue, POSIX timers) are counted per uid, and a user
# namespace's count is charged to the host uid's as well: a command queuing signals to itself
# held the host uid's whole RLIMIT_SIGPENDING (96,364 here) while it ran, and the uid's other
# programs — as root, every root process of the machine — got EAGAIN from sigqueue and
# timer_create (session 10). Each run's processes (and the init: below Landlock ABI 6 the command
# may signal it, which blocks everything) may hold this many; a lower limit of the caller's is
# kept where it cannot be raised (optional step: EPERM without CAP_SYS_RESOURCE).
PENDING_SIGNALS = 4096
PENDING_SIGNALS_STEP = ("rlimit sigpending", (SYS_PRLIMIT64, True, 0, RLIMIT_SIGPENDING,
                                              (PENDING_SIGNALS).to_bytes(8, "little") * 2, None))
RLIMITS = {  # policy key -> (resource, multiplier)
    "cpu_seconds": (RLIMIT_CPU, 1),
    "memory_mib": (RLIMIT_AS, 1 << 20),
    "processes": (RLIMIT_NPROC, 1),
    "open_files": (RLIMIT_NOFILE, 1),
    "file_size_mib": (RLIMIT_FSIZE, 1 << 20),
}


# Ignored signal dispositions survive execve. Python ignores SIGPIPE and SIGXFSZ, the supervisor
# SIGINT, and a caller may ignore others (SIGALRM ignored would silence an alarm() watchdog in
# the command), so every signal is put back to SIG_DFL — except SIGHUP, which `nohup` ignores on
# purpose for the whole command line — and none stays blocked. Caught signals need nothing:
# execve resets them (and the C executor resets them before its plan runs).
_NOT_RESET = (1, 9, 19)  # SIGHUP (nohup's choice), SIGKILL and SIGSTOP (cannot be changed)
_SIG_DFL_ACTION = bytes(32)  # struct kernel_sigaction {handler = SIG_DFL, flags, restorer, mask}
_EMPTY_SIGSET = bytes(8)
SIG_SETMASK = 2


_SIGNAL_STEPS: list = []  # the same for every run: made once per process (a gate plans one per step)


def plan_signals() -> list:
    if not _SIGNAL_STEPS:
        # optional: 32 and 33 belong to the C library and may refuse
        _SIGNAL_STEPS.extend((f"reset signal {sig}", (SYS_RT_SIGACTION, True, sig, _SIG_DFL_ACTION, None, 8))
                             for sig in range(1, 65) if sig not in _NOT_RESET)
        _SIGNAL_STEPS.append(("unblock signals", (SYS_RT_SIGPROCMASK, False, SIG_SETMASK, _EMPTY_SIGSET, None, 8)))
    return list(_SIGNAL_STEPS)  # a copy: the caller may change its list


F_SETFD, FD_CLOEXEC = 2, 1
# Plan slots holding a redirect's source while fd 0-2 are replaced (`plan_redirects`); free again
# before the namespace tier's steps, which use the same numbers (namespaces.HANDOFF_SLOTS).
REDIRECT_SLOTS = (57, 58, 59)


def plan_redirects(stdio) -> list:
    """The child's steps that put `stdio[t]` (a caller's fd; None: fd t as it is) on fd t, as
    ONE parallel assignment. One dup2 after another replaced a source that is itself one of fd
    0-2 before a later redirect read it: `stdin=1, stdout=0` gave the command the caller's fd 1
    on both. So a source that is also a target is first copied above fd 2 (F_DUPFD_CLOEXEC, into
    a slot), the redirects read the copies, and the copies are closed. Only those sources pay
    the two extra steps; `stdin=f, stdout=g` with f, g >= 3 is one dup2 each, as before."""
    moves = [(target, fd) for target, fd in enumerate(stdio) if fd is not None and fd != target]
    targets = {target for target, _ in moves}
    copies: dict = {}  # source fd -> the slot holding its copy
    steps = []
    for _, fd in moves:
        if fd in targets and fd not in copies:
            copies[fd] = REDIRECT_SLOTS[len(copies)]
            steps.append((f"copy fd {fd} above fd 2 before it is replaced",
                          (SYS_FCNTL, step_flags(save=copies[fd]), fd, F_DUPFD_CLOEXEC, 3)))
    steps += [(f"redirect fd {target}", (SYS_DUP2, False, (copies[fd],) if fd in copies else fd, target))
              for target, fd in moves]
    steps += [(f"close the copy of fd {fd}", (SYS_CLOSE, False, (slot,))) for fd, slot in copies.items()]
    return steps
_CLOSE_RANGE_OK = []


def close_range_cloexec_works() -> bool:
    """Probed once, in the parent, on a range no process has open (so nothing changes)."""
    if not _CLOSE_RANGE_OK:
        from sandboy.confine._libc import syscall

        try:
            syscall(SYS_CLOSE_RANGE, 0x7FFFFFF0, 0x7FFFFFF0, CLOSE_RANGE_CLOEXEC)
            _CLOSE_RANGE_OK.append(True)
        except OSError:
            _CLOSE_RANGE_OK.append(False)
    return _CLOSE_RANGE_OK[0]


def plan_cloexec(use_close_range=None) -> list:
    """Every fd above 2 close-on-exec, so the command inherits only stdin/out/err. CLOEXEC
    rather than close: the Landlock ruleset fd and the error pipe must live until execve.

    Fallback where CLOSE_RANGE_CLOEXEC is missing (before Linux 5.11; Landlock itself needs
    5.13, so only a backported kernel gets here): FD_CLOEXEC on each fd open now. Computed per
    run, right before the fork; fds the launcher opens itself are O_CLOEXEC already."""
    if use_close_range is None:
        use_close_range = close_range_cloexec_works()
    if use_close_range:
        return [("close inherited fds", (SYS_CLOSE_RANGE, False, 3, 0xFFFFFFFF, CLOSE_RANGE_CLOEXEC))]
    fds = sorted(int(name) for name in os.listdir("/proc/self/fd") if int(name) > 2)
    # optional: the listing's own directory fd is gone by the time the child runs
    return [(f"close inherited fd {fd}", (SYS_FCNTL, True, fd, F_SETFD, FD_CLOEXEC)) for fd in fds]


def plan_rlimits(limits) -> list:
    # struct rlimit64 {cur, max}; no core files full of the command's memory
    steps = [("rlimit core", (SYS_PRLIMIT64, False, 0, RLIMIT_CORE, u64(0) + u64(0), None)), PENDING_SIGNALS_STEP]
    for key, (resource, mult) in RLIMITS.items():
        value = getattr(limits, key)
        if value:
            steps.append((f"limits.{key}", (SYS_PRLIMIT64, False, 0, resource, u64(value * mult) * 2, None)))
    return steps


def plan_drop_capabilities() -> list:
    """Empty the bounding, ambient, effective, permitted and inheritable sets."""
    # Optional: needs CAP_SETPCAP; the empty bounding set below already stops exec regaining caps
    steps = [("securebits", (SYS_PRCTL, True, PR_SET_SECUREBITS, SECUREBITS_LOCKED_DOWN))]
    # Optional: EINVAL for a capability this kernel does not know (last_cap is read in the parent)
    steps += [(f"drop capability {cap}", (SYS_PRCTL, True, PR_CAPBSET_DROP, cap)) for cap in range(last_cap() + 1)]
    steps.append(("clear ambient capabilities", (SYS_PRCTL, False, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)))
    # struct __user_cap_header_struct {u32 version = _LINUX_CAPABILITY_VERSION_3; int pid = self}
    # and two __user_cap_data_struct {u32 effective, permitted, inheritable}, all zero
    steps.append(("capset", (SYS_CAPSET, False, u32(0x20080522) + u32(0), bytes(24))))
    return steps


def plan_no_new_privs() -> list:
    return [("no_new_privs", (SYS_PRCTL, False, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))]


_LAST_CAP = []


PR_CAPBSET_READ = 23


def last_cap() -> int:
    """Highest capability number of this kernel; found once (the parent asks in `cage.build`).

    Asked of prctl(PR_CAPBSET_READ), which answers EINVAL exactly for the numbers above
    CAP_LAST_CAP — what /proc/sys/kernel/cap_last_cap prints: two calls on this kernel (the
    search, `search_last_cap`, starts at the usual answer), a /proc/sys file 30-40 µs on this
    machine. The file where prctl is refused."""
    if not _LAST_CAP:
        _LAST_CAP.append(_last_cap_by_prctl())
    return _LAST_CAP[0]


def _last_cap_by_prctl() -> int:
    from sandboy.confine._libc import read_file, syscall

    def known(cap: int) -> bool:
        try:
            syscall(SYS_PRCTL, PR_CAPBSET_READ, cap)
            return True
        except OSError:
            return False

    last = search_last_cap(known)
    # -1: prctl itself refused (a filter): the kernel's own file
    return last if last >= 0 else int(read_file("/proc/sys/kernel/cap_last_cap"))


# CAP_CHECKPOINT_RESTORE, the last capability since Linux 5.9: every kernel with Landlock (5.13)
# has it, and up to 6.18 at least it is the last one, so two questions usually answer.
_USUAL_LAST_CAP = 40


def search_last_cap(known) -> int:
    """The highest capability number `known(cap)` accepts (it accepts exactly 0..last), or -1
    when it accepts none. Asks about the usual last one and the next first (a failed prctl costs
    an exception: ≈ 2 µs a question here), then searches 0..63 by halves."""
    if known(_USUAL_LAST_CAP):
        if not known(_USUAL_LAST_CAP + 1):
            return _USUAL_LAST_CAP
        low, high = _USUAL_LAST_CAP + 1, 64
    elif known(0):
        low, high = 0, _USUAL_LAST_CAP
    else:
        return -1
    while high - low > 1:  # known(low), and nothing at or above `high` (capabilities are < 64)
        mid = (low + high) // 2
        if known(mid):
            low = mid
        else:
            high = mid
    return low


def has_capabilities() -> bool:
    """True when this process holds capabilities it could use or pass on (root, file caps).

    The bounding set is ignored: it is full for ordinary users too, and with no_new_privs
    they cannot gain anything from it."""
    from sandboy.confine._libc import status_masks

    return any(status_masks(b"CapEff", b"CapPrm", b"CapAmb", b"CapInh").values())


def hold_free_stdio() -> list:
    """/dev/null on each of fd 0-2 this process has closed; the fds it opened (the API closes
    them once the run has started; the CLI keeps them: it becomes the command or its supervisor).
    Every descriptor a run makes (the ruleset, the error and report pipes, the supervisor's)
    would otherwise take the lowest free number, a fd 0-2,
    where the child's plan redirects the command's stdio by dup2 and replaces it: a ruleset
    gone ("File descriptor in bad state"), the child's report written into the caller's file.
    So a command whose caller had no fd 0-2 gets /dev/null there, as a daemon's does. None
    free is the common case: three fstat calls."""
    held = []
    for target in range(3):
        try:
            os.fstat(target)
            continue
        except OSError:
            pass
        try:
            fd = os.open("/dev/null", os.O_RDWR)
        except OSError as exc:
            for opened in held:
                os.close(opened)
            from sandboy.errors import CageError

            raise CageError(f"fd {target} is closed and /dev/null cannot take its place: {exc.strerror}; "
                            "open fd 0-2 before running a command") from None
        held.append(fd)
    return held
