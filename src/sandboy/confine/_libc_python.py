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
    FORWARDED_SIGNALS,
    NR_INIT,
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
            if nr == NR_INIT:
                if errpipe < 0:  # only a forked child may become an init
                    raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
                result = _become_init(errpipe)
            else:
                result = syscall(nr, *(_slot_arg(a, slots) if isinstance(a, tuple) else a for a in args))
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


def _become_init(errpipe: int) -> int:
    """As `become_init` in _native.c: returns 0 in the child, never in the init."""
    watched = {*FORWARDED_SIGNALS, SIGCHLD}
    # SIGCHLD to SIG_DFL, as _native.c: ignored, the kernel reaps the command unseen (with a
    # raw rt_sigaction, as there: nothing of Python's own handler table is involved)
    syscall(SYS_RT_SIGACTION, SIGCHLD, bytes(32), 0, 8)
    _signal.pthread_sigmask(_signal.SIG_BLOCK, watched)  # the child unblocks in its plan
    child = _clone(SIGCHLD)
    if child == 0:
        return 0
    os.closerange(0, errpipe)
    os.closerange(errpipe + 1, 1 << 20)
    while True:
        signum = _signal.sigwaitinfo(watched).si_signo
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
                os.write(errpipe, _record(REPORT_STATUS, status))
                os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


def wait_forwarding(pid: int) -> int:
    """As `wait_forwarding` in _native.c."""
    watched = {*FORWARDED_SIGNALS, SIGCHLD}
    old = _signal.pthread_sigmask(_signal.SIG_BLOCK, watched)
    try:
        signum = SIGCHLD
        while True:
            if signum == SIGCHLD:
                got, status = os.waitpid(pid, os.WNOHANG)
                if got == pid:
                    return status
            else:
                try:
                    os.killpg(pid, signum)
                except ProcessLookupError:
                    os.kill(pid, signum)
            signum = _signal.sigwaitinfo(watched).si_signo
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
    pid = _clone(clone_flags | SIGCHLD) if clone_flags else os.fork()
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
