"""Raw system calls, and the executor of cage plans.

A cage is compiled (cage.py) into a *plan*: a list of raw system calls `(nr, optional, *args)`,
arguments being ints, `bytes` (passed as a pointer to their contents) or None (NULL). This
module runs plans. Two implementations, one interface:

- `native`: the C extension `sandboy.confine._native` (built by `pip install` when a compiler is
  there). The child runs the plan and execs without executing any Python: ≈ 0.2 ms instead of
  ≈ 1 ms per start (docs/performance.md).
- `python`: CPython's `_ctypes` core. Not `ctypes` itself: its package `__init__` costs ≈ 2.2 ms
  of start-up for one foreign function, libc's `syscall(2)`. Used where the extension is not
  built, or with SANDBOY_NATIVE=0 (the test suite runs the probes against both).

Why no binding library at all: the PyPI Landlock/seccomp bindings spawn subprocesses at import
(≈ 170 ms, FINDINGS.md), and libseccomp compares arguments as 64 bits (ADR 0003).
"""

import os

# x86_64 numbers
SYS_RT_SIGACTION = 13
SYS_RT_SIGPROCMASK = 14
SYS_IOCTL = 16
SYS_DUP2 = 33
SYS_CHDIR = 80
SYS_SETSID = 112
SYS_CAPSET = 126
SYS_PRCTL = 157
SYS_PRLIMIT64 = 302
SYS_SECCOMP = 317
SYS_CLOSE_RANGE = 436
SYS_LANDLOCK_CREATE_RULESET = 444
SYS_LANDLOCK_ADD_RULE = 445
SYS_LANDLOCK_RESTRICT_SELF = 446


def u16(value: int) -> bytes:
    return value.to_bytes(2, "little")


def u32(value: int) -> bytes:
    return value.to_bytes(4, "little")


def s32(value: int) -> bytes:
    return value.to_bytes(4, "little", signed=True)


def u64(value: int) -> bytes:
    return value.to_bytes(8, "little")


def exit_code_for_exec_error(err: int) -> int:
    import errno

    from sandboy.errors import EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND

    return EXIT_NOT_FOUND if err in (errno.ENOENT, errno.ENOTDIR) else EXIT_NOT_EXECUTABLE


_native = None
if os.environ.get("SANDBOY_NATIVE", "1") != "0":
    try:
        from sandboy.confine import _native
    except ImportError:
        _native = None

IMPLEMENTATION = "native" if _native is not None else "python"


if _native is not None:
    syscall = _native.syscall
    apply_plan = _native.apply_plan
    exec_first = _native.exec_first
    fork_exec = _native.fork_exec

    def pointer_to(data: bytes):
        """(object to keep alive, its address) for structs that point at other buffers."""
        return data, _native.address_of(data)

    def prepare_buffers(*sizes: int) -> None:
        pass

else:
    import _ctypes

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

    _syscall = _Function(("syscall", _Process()))
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

    def apply_plan(plan) -> None:
        for index, (nr, optional, *args) in enumerate(plan):
            try:
                syscall(nr, *args)
            except OSError as exc:
                if not optional:
                    raise OSError(exc.errno, exc.strerror, index) from None

    def exec_first(paths, argv, envp) -> None:
        import errno

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

    def fork_exec(plan, paths, argv, envp, errpipe: int) -> int:
        pid = os.fork()
        if pid:
            return pid
        index, err, code = -1, 0, 125
        try:
            try:
                apply_plan(plan)
            except OSError as exc:
                index, err = exc.filename, exc.errno
            else:
                try:
                    exec_first(paths, argv, envp)
                except OSError as exc:
                    err = exc.errno
                    code = exit_code_for_exec_error(err)
            os.write(errpipe, index.to_bytes(8, "little", signed=True) + err.to_bytes(8, "little", signed=True))
        finally:
            os._exit(code)


def prctl(option: int, arg2: int = 0, arg3: int = 0, arg4: int = 0, arg5: int = 0) -> int:
    return syscall(SYS_PRCTL, option, arg2, arg3, arg4, arg5)


def read_child_error(data: bytes):
    """The (step index or -1 for exec, errno) a `fork_exec` child reported, or None."""
    if len(data) != 16:
        return None
    return int.from_bytes(data[:8], "little", signed=True), int.from_bytes(data[8:], "little", signed=True)
