"""Process hygiene applied in the child before the cage closes: fds, rlimits, capabilities,
no_new_privs. Each function is one explicit step; `cage.apply` calls them in order."""

import os

from sandboy.confine._libc import SYS_CAPSET, SYS_CLOSE_RANGE, SYS_PRLIMIT64, prctl, syscall, u32, u64

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
RLIMITS = {  # policy key -> (resource, multiplier)
    "cpu_seconds": (RLIMIT_CPU, 1),
    "memory_mib": (RLIMIT_AS, 1 << 20),
    "processes": (RLIMIT_NPROC, 1),
    "open_files": (RLIMIT_NOFILE, 1),
    "file_size_mib": (RLIMIT_FSIZE, 1 << 20),
}


def cloexec_inherited_fds(keep=()) -> None:
    """Mark every fd above 2 close-on-exec, so the command inherits only stdin/out/err.

    CLOEXEC rather than close: the Landlock ruleset fd and the error pipe must survive until
    execve. `keep` names fds to leave inheritable (none in normal use).
    """
    lo = 3
    for fd in sorted(keep) + [None]:
        hi = (fd - 1) if fd is not None else 0xFFFFFFFF
        if hi >= lo:
            try:
                syscall(SYS_CLOSE_RANGE, lo, hi, CLOSE_RANGE_CLOEXEC)
            except OSError:
                _cloexec_fallback(lo, hi)
        if fd is not None:
            lo = fd + 1


def _cloexec_fallback(lo: int, hi: int) -> None:
    # Kernels before 5.11 lack CLOSE_RANGE_CLOEXEC: walk the open fds instead.
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if lo <= fd <= hi:
            try:
                os.set_inheritable(fd, False)
            except OSError:
                pass


def _setrlimit(resource: int, value: int) -> None:
    syscall(SYS_PRLIMIT64, 0, resource, u64(value) + u64(value), None)  # struct rlimit64 {cur, max}


def set_rlimits(limits) -> None:
    _setrlimit(RLIMIT_CORE, 0)  # no core files full of the command's memory
    for key, (resource, mult) in RLIMITS.items():
        value = getattr(limits, key)
        if value:
            _setrlimit(resource, value * mult)


def drop_capabilities() -> None:
    """Empty the bounding, ambient, effective, permitted and inheritable sets."""
    try:
        prctl(PR_SET_SECUREBITS, SECUREBITS_LOCKED_DOWN)
    except OSError:
        pass  # needs CAP_SETPCAP; the empty bounding set below already stops exec regaining caps
    for cap in range(last_cap() + 1):
        try:
            prctl(PR_CAPBSET_DROP, cap)
        except OSError as exc:
            if exc.errno != 22:  # EINVAL: cap unknown to this kernel
                raise
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    # struct __user_cap_header_struct {u32 version; int pid} (_LINUX_CAPABILITY_VERSION_3, self)
    # and two __user_cap_data_struct {u32 effective, permitted, inheritable}, all zero
    syscall(SYS_CAPSET, u32(0x20080522) + u32(0), bytes(24))


_LAST_CAP = []


def last_cap() -> int:
    """Highest capability number of this kernel; read once (the parent reads it in `cage.build`)."""
    if not _LAST_CAP:
        with open("/proc/sys/kernel/cap_last_cap", "rb") as fh:
            _LAST_CAP.append(int(fh.read()))
    return _LAST_CAP[0]


def has_capabilities() -> bool:
    """True when this process holds capabilities it could use or pass on (root, file caps).

    The bounding set is ignored: it is full for ordinary users too, and with no_new_privs
    they cannot gain anything from it."""
    with open("/proc/self/status", "rb") as fh:
        for line in fh:
            if line.startswith((b"CapEff:", b"CapPrm:", b"CapAmb:", b"CapInh:")):
                if int(line.split()[1], 16):
                    return True
    return False


def no_new_privs() -> None:
    prctl(PR_SET_NO_NEW_PRIVS, 1)
