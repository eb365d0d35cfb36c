"""The pure-Python plan executor (`_libc`'s "python" implementation): CPython's `_ctypes` core
calling libc's syscall(2), used where the C executor (`_native`) is not built, or with
SANDBOY_NATIVE=0 (the test suite runs the probes against both). Same interface and the same
plan semantics as `_native.c`; see `_libc` for what a plan is. Imported by `_libc` only when the
C executor is not there, so a run with it never loads this code.
"""

import errno
import os

import _ctypes
import _signal  # the C module: `signal` imports enum

from sandboy.confine._libc import (
    DEADLINE_PASSED,
    END_GRACE_MS,
    END_RUN_SIGNAL,
    FORWARDED_SIGNALS,
    NR_INIT,
    NR_SAME_FILE,
    SI_USER,
    REPORT_STATUS,
    SIGCHLD,
    SYS_CLONE,
    SYS_RT_SIGACTION,
    _record,
    exit_code_for_exec_error,
    s32,
)


class _CLong(_ctypes._SimpleCData):
    _type_ = "l"


class _CULong(_ctypes._SimpleCData):
    _type_ = "L"


class _CChar(_ctypes._SimpleCData):
    _type_ = "c"


class _Function(_ctypes.CFuncPtr):
    # as ctypes.CDLL(None, use_errno=True) makes it: cdecl, errno saved after the call
    _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
    _restype_ = _CLong


class _Process:
    """The running program's symbols (dlopen(NULL)), which include libc's."""

    _handle = _ctypes.dlopen(None, 0)


class _FunctionHoldingTheGIL(_ctypes.CFuncPtr):
    # as ctypes.pythonapi's functions: called without releasing the GIL
    _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_PYTHONAPI | _ctypes.FUNCFLAG_USE_ERRNO
    _restype_ = _CLong


_syscall = _Function(("syscall", _Process()))
_syscall_holding_the_gil = _FunctionHoldingTheGIL(("syscall", _Process()))
_after_fork_child = _FunctionHoldingTheGIL(("PyOS_AfterFork_Child", _Process()))
_array_types: dict = {}


def _array_type(size: int):
    """A char-array type at least `size` long. Sizes are rounded up to a power of two so a
    few types serve every call; `prepare_buffers` makes them in the parent, because making
    a type costs ≈ 0.1 ms and the child's start-up is what every run waits for."""
    length = 16
    while length < size:
        length *= 2
    kind = _array_types.get(length)
    if kind is None:
        kind = _array_types[length] = type("_Bytes", (_ctypes.Array,), {"_type_": _CChar, "_length_": length})
    return kind


def prepare_buffers(*sizes: int) -> None:
    for size in (16, 32, *sizes):
        _array_type(size)


def _buffer(data: bytes):
    kind = _array_type(len(data))
    return kind.from_buffer_copy(data + bytes(kind._length_ - len(data)))


def pointer_to(data: bytes):
    array = _buffer(data)
    return array, _ctypes.addressof(array)


def syscall(nr: int, *args) -> int:
    """Integers go as 64-bit unsigned longs, bytes as a pointer to a private copy."""
    conv = []
    for arg in args:
        if isinstance(arg, int):
            conv.append(_CULong(arg & 0xFFFFFFFFFFFFFFFF))
        elif isinstance(arg, bytes):
            conv.append(_buffer(arg))
        else:
            conv.append(arg)
    result = _syscall(_CLong(nr), *conv)
    if result < 0:
        err = _ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def _clone(flags: int) -> int:
    """clone(2) without a new stack (fork with `flags`), then CPython's after-fork work in the
    child, as os.fork() does it (os.fork takes no flags). The call holds the GIL throughout:
    released around it, as ctypes does for other calls, another thread of the caller could take
    the GIL or ask for it during the clone, and the child — where that thread does not exist —
    then waits for it for ever (an API program starting runs from four threads hung ≈ 1 run in
    10, its namespace's init blocked on a futex). PyOS_AfterFork_Child gives the child a GIL of
    its own and forgets the threads it does not have."""
    pid = _syscall_holding_the_gil(_CLong(SYS_CLONE), _CULong(flags), _CULong(0), _CULong(0), _CULong(0),
                                   _CULong(0))
    if pid < 0:
        err = _ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    if pid == 0:
        _after_fork_child()
    return pid


def apply_plan(plan, errpipe: int = -1) -> None:
    slots = {}
    for index, (nr, flags, *args) in enumerate(plan):
        try:
            args = [_slot_arg(a, slots) if isinstance(a, tuple) else a for a in args]
            if nr == NR_INIT:
                # only a forked child, pid 1 of a new PID namespace (_end_run's kill(-1) must
                # never reach the host's processes), may become an init
                if errpipe < 0 or os.getpid() != 1:
                    raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
                result = _become_init(errpipe, args)
            elif nr == NR_SAME_FILE:
                found = os.fstat(args[0])
                if (found.st_dev, found.st_ino) != (args[1], args[2]):
                    raise OSError(errno.ESTALE, os.strerror(errno.ESTALE))
                result = 0
            else:
                result = syscall(nr, *args)
        except OSError as exc:
            if flags >> 8:
                slots[flags >> 8] = -1
            if not flags & 1:
                raise OSError(exc.errno, exc.strerror, index) from None
            continue
        if flags >> 8:
            slots[flags >> 8] = result


def _slot_arg(arg: tuple, slots: dict):
    if len(arg) == 1:
        return slots[arg[0]]
    slot, template, offset = arg
    return template[:offset] + s32(slots[slot]) + template[offset + 4:]


CARRY_OFFSET, RELAY = 1, 2  # NR_INIT's kinds, as namespaces.StdioHandoff and _native.c
DRAIN_LIMIT = 16 << 20
SYS_SIGNALFD4 = 289
WALL = 0x40000000  # __WALL: os has no name for it


def _become_init(errpipe: int, args=()) -> int:
    """As `become_init` in _native.c: returns 0 in the child, never in the init. `args`:
    NR_INIT's (fd0, fd1, fd2, kinds), what the init does with the caller's fd 0-2."""
    fds = list(args[:3]) if len(args) >= 4 else [-1, -1, -1]
    kinds = [(args[3] >> 2 * k) & 3 if len(args) >= 4 else 0 for k in range(3)]
    watched = {*FORWARDED_SIGNALS, SIGCHLD, END_RUN_SIGNAL}
    # SIGCHLD to SIG_DFL, as _native.c: ignored, the kernel reaps the command unseen (with a
    # raw rt_sigaction, as there: nothing of Python's own handler table is involved)
    syscall(SYS_RT_SIGACTION, SIGCHLD, bytes(32), 0, 8)
    _signal.pthread_sigmask(_signal.SIG_BLOCK, watched)  # the child unblocks in its plan
    signals = -1
    if RELAY in kinds:  # the pipes and the signals waited for at once (see _native.c)
        import select  # before the command starts: a failure is this step's

        mask = sum(1 << (sig - 1) for sig in watched)
        signals = syscall(SYS_SIGNALFD4, -1, mask.to_bytes(8, "little"), 8, os.O_CLOEXEC)
    child = _clone(SIGCHLD)
    if child == 0:
        return 0
    keep = {errpipe, signals} | {k for k in range(3) if kinds[k]} | {fds[k] for k in range(3) if kinds[k]}
    keep.discard(-1)
    low = 0
    for fd in sorted(keep):
        if fd > low:  # os.closerange(n, n) closes everything from n on (close_range(n, n - 1))
            os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 20)
    while True:
        if signals >= 0:
            poller = select.poll()
            poller.register(signals, select.POLLIN)
            for k in range(3):
                if kinds[k] == RELAY and fds[k] >= 0:
                    poller.register(fds[k], select.POLLIN)
            ready = dict(poller.poll())
            for k in range(3):
                if kinds[k] == RELAY and ready.get(fds[k]):
                    _relay_once(fds, k)
            if not ready.get(signals, 0) & select.POLLIN:
                continue
            info = os.read(signals, 128)  # struct signalfd_siginfo: signo, errno, code, pid, ...
            signum, code = int.from_bytes(info[:4], "little"), int.from_bytes(info[8:12], "little", signed=True)
            sender = int.from_bytes(info[12:16], "little")
        else:
            info = _signal.sigwaitinfo(watched)
            signum, sender, code = info.si_signo, info.si_pid, info.si_code
        if signum == END_RUN_SIGNAL:
            if sender == 0 and code == SI_USER:  # a kill(2) from outside the namespace (see _native.c)
                try:
                    os.kill(-1, 9)  # the tree; SIGCHLD then ends the run as usual
                except OSError:
                    pass
            continue
        if signum != SIGCHLD:
            try:  # only to a command that left the init's process group (see _native.c)
                if os.getpgid(child) != os.getpgid(0):
                    os.kill(child, signum)
            except ProcessLookupError:
                pass
            continue
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if not pid:
                break
            if pid == child:
                _end_run(fds, kinds, errpipe, status)


def _relay_once(fds: list, k: int) -> int:
    """As relay_once in _native.c: bytes copied, 0 for an empty pipe, -1 once the relay is over."""
    try:
        data = os.read(fds[k], 65536)
    except BlockingIOError:
        return 0
    except OSError:
        data = b""
    try:
        if data:
            view = memoryview(data)
            while view:
                view = view[os.write(k, view):]
            return len(data)
    except OSError:
        pass
    os.close(fds[k])
    fds[k] = -1
    return -1


def _end_run(fds: list, kinds: list, errpipe: int, status: int) -> None:
    """As end_run in _native.c: end the tree, drain the relays, carry the offsets back, report."""
    if any(kinds):
        try:
            os.kill(-1, 9)
        except OSError:
            pass
        while True:
            try:
                os.waitpid(-1, WALL)
            except ChildProcessError:
                break
        for k in range(3):
            if kinds[k] == RELAY and fds[k] >= 0:
                os.set_blocking(fds[k], False)
                drained = 0
                while drained < DRAIN_LIMIT:
                    copied = _relay_once(fds, k)
                    if copied <= 0:
                        break
                    drained += copied
            elif kinds[k] == CARRY_OFFSET:
                try:
                    os.lseek(k, os.lseek(fds[k], 0, os.SEEK_CUR), os.SEEK_SET)
                except OSError:
                    pass
    os.write(errpipe, _record(REPORT_STATUS, status))
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


MAX_WAIT_SLICE = 1 << 30  # seconds (≈ 34 years) a single sigtimedwait of `wait_forwarding` waits at most


def wait_forwarding(pid: int, seconds: float = 0) -> int:
    """As `wait_forwarding` in _native.c: with `seconds` > 0, the child asked to end the run
    once they have passed (END_RUN_SIGNAL), killed after the grace, its wait status returned
    with DEADLINE_PASSED set."""
    import time

    watched = {*FORWARDED_SIGNALS, SIGCHLD}
    end = time.monotonic() + seconds if seconds > 0 else None
    passed = 0
    old = _signal.pthread_sigmask(_signal.SIG_BLOCK, watched)
    try:
        signum = SIGCHLD
        while True:
            if signum == SIGCHLD:
                got, status = os.waitpid(pid, os.WNOHANG)
                if got == pid:
                    return status | passed
            elif signum is not None:
                try:
                    os.killpg(pid, signum)
                except ProcessLookupError:
                    os.kill(pid, signum)
            if end is None:
                signum = _signal.sigwaitinfo(watched).si_signo
                continue
            left = end - time.monotonic()
            if left < 0 and not passed:  # the deadline: unreaped, its pid is still its own
                passed = DEADLINE_PASSED
                os.kill(pid, END_RUN_SIGNAL)  # the init ends the run as under a supervision
                end += END_GRACE_MS / 1000
                signum = SIGCHLD
                continue
            if left < 0:
                os.kill(pid, _signal.SIGKILL)
                return os.waitpid(pid, 0)[1] | DEADLINE_PASSED
            # (in slices: sigtimedwait's timeout is nanoseconds in 64 bits, ≈ 292 years, and a policy may
            # give thousands of years — an OverflowError here ended the run in a traceback)
            info = _signal.sigtimedwait(watched, min(left, MAX_WAIT_SLICE))
            signum = None if info is None else info.si_signo
    finally:
        _signal.pthread_sigmask(_signal.SIG_SETMASK, old)


def exec_first(paths, argv, envp) -> None:
    env = dict(item.split(b"=", 1) for item in envp)
    saved = None
    for path in paths:
        try:
            os.execve(path, argv, env)
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.ESTALE):
                raise
            if saved is None or saved.errno != errno.EACCES:
                saved = exc
    raise saved or OSError(errno.ENOENT, os.strerror(errno.ENOENT))


def fork_exec(plan, paths, argv, envp, errpipe: int, clone_flags: int = 0) -> int:
    # With namespaces, clone(2) itself: os.fork() takes no flags (and Python 3.11 has no
    # os.unshare); `_clone` does in the child what os.fork() would.
    if clone_flags:
        # As _native.c: every signal blocked around the clone, so the init-to-be is born with
        # them blocked. A PID namespace's init discards a signal it neither blocks nor handles, and
        # this parent returns at once (the C one waits for the command's exec): END_RUN_SIGNAL
        # sent by a timeout during the init's start was lost, and the run waited the whole grace
        # (session 10). Blocked, it waits for the init's loop.
        held = _signal.pthread_sigmask(_signal.SIG_BLOCK, _signal.valid_signals())
        try:
            pid = _clone(clone_flags | SIGCHLD)
        except BaseException:
            _signal.pthread_sigmask(_signal.SIG_SETMASK, held)
            raise
        if pid:
            _signal.pthread_sigmask(_signal.SIG_SETMASK, held)
            return pid
    else:
        pid = os.fork()
        if pid:
            return pid
    index, err, code = -1, 0, 125
    try:
        try:
            apply_plan(plan, errpipe)
        except OSError as exc:
            index, err = exc.filename, exc.errno
        else:
            try:
                exec_first(paths, argv, envp)
            except OSError as exc:
                err = exc.errno
                code = exit_code_for_exec_error(err)
        os.write(errpipe, _record(index, err))
    finally:
        os._exit(code)


# --- the cache's seal (ADR 0030): what `_native_mac.c` does, for SANDBOY_NATIVE=0 or no build ---
# (`_blake2` is imported here, on first use: ≈ 0.2 ms, which is why the C executor's extension
# carries its own BLAKE2b; tests/test_cache_seal.py holds the two to the same bytes)

SYS_ADD_KEY, SYS_KEYCTL, SYS_GETRANDOM = 248, 250, 318
_KEY_SPEC_USER_KEYRING, _KEYCTL_SETPERM, _KEYCTL_SEARCH, _KEYCTL_READ = -4, 5, 10, 11


def mac(key: bytes, label: bytes, data) -> bytes:
    """`_native.mac`: keyed BLAKE2b-256 over len(label) (8 bytes, little-endian), label, data."""
    from _blake2 import blake2b

    if not 1 <= len(key) <= 64:
        raise ValueError("mac(): the key must be 1 to 64 bytes")
    state = blake2b(len(label).to_bytes(8, "little"), key=key, digest_size=32)
    state.update(label)
    state.update(data)
    return state.digest()


def user_key(description: bytes, perm: int):
    """`_native.user_key`: the 32-byte "user" key `description` of @u, made when missing; None
    where the keyring cannot be used."""
    try:
        try:
            serial = syscall(SYS_KEYCTL, _KEYCTL_SEARCH, _KEY_SPEC_USER_KEYRING, b"user\0", description + b"\0", 0)
        except OSError as exc:
            if exc.errno != errno.ENOKEY:
                return None
            serial = syscall(SYS_ADD_KEY, b"user\0", description + b"\0", os.urandom(32), 32,
                             _KEY_SPEC_USER_KEYRING)
            syscall(SYS_KEYCTL, _KEYCTL_SETPERM, serial, perm)
        out = _array_type(32)()
        if _syscall(_CLong(SYS_KEYCTL), _CULong(_KEYCTL_READ), _CULong(serial), out, _CULong(32)) != 32:
            return None
        return bytes(out)[:32]
    except OSError:
        return None
