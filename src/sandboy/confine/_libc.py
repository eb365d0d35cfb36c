"""Raw system calls for the cage, on CPython's `_ctypes` core.

Why not a binding library: the PyPI Landlock/seccomp bindings spawn subprocesses at import and
cost ≈ 170 ms (FINDINGS.md). Why not even `ctypes`: its package `__init__` costs ≈ 2.2 ms of
start-up, a fifth of the interpreter's own, while the cage needs exactly one foreign function,
libc's `syscall(2)`. Its C core `_ctypes` (≈ 0.2 ms) is enough: a function pointer type, an
unsigned-long type for arguments and a byte-array type for the structs the kernel reads.
Structs are packed by hand (little-endian x86_64), so `struct` is not needed either.
"""

import _ctypes
import os

# x86_64 numbers
SYS_PRCTL = 157
SYS_CAPSET = 126
SYS_PRLIMIT64 = 302
SYS_SECCOMP = 317
SYS_CLOSE_RANGE = 436
SYS_LANDLOCK_CREATE_RULESET = 444
SYS_LANDLOCK_ADD_RULE = 445
SYS_LANDLOCK_RESTRICT_SELF = 446


class _CLong(_ctypes._SimpleCData):
    _type_ = "l"


class _CULong(_ctypes._SimpleCData):
    _type_ = "L"


class _CChar(_ctypes._SimpleCData):
    _type_ = "c"


class _Function(_ctypes.CFuncPtr):
    # as ctypes.CDLL(None, use_errno=True) would make it: cdecl, errno saved after the call
    _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
    _restype_ = _CLong


class _Process:
    """The running program's symbols (dlopen(NULL)), which include libc's."""

    _handle = _ctypes.dlopen(None, 0)


_syscall = _Function(("syscall", _Process()))
_array_types: dict = {}


def _array_type(size: int):
    """A char-array type at least `size` long. Sizes are rounded up to a power of two so a few
    types serve every call; `prepare_buffers` makes them in the parent, because creating a
    type costs ≈ 0.1 ms and the child's start-up is what every run waits for."""
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


class Buffer:
    """Bytes copied into C memory the kernel may read or write; `.address` for structs that
    point at other structs (seccomp's sock_fprog)."""

    __slots__ = ("_array",)

    def __init__(self, data: bytes):
        kind = _array_type(len(data))
        self._array = kind.from_buffer_copy(data + bytes(kind._length_ - len(data)))

    @property
    def address(self) -> int:
        return _ctypes.addressof(self._array)

    def bytes(self) -> bytes:
        return bytes(memoryview(self._array))


def u16(value: int) -> bytes:
    return value.to_bytes(2, "little")


def u32(value: int) -> bytes:
    return value.to_bytes(4, "little")


def s32(value: int) -> bytes:
    return value.to_bytes(4, "little", signed=True)


def u64(value: int) -> bytes:
    return value.to_bytes(8, "little")


def syscall(nr: int, *args) -> int:
    """Raw syscall. Integers are passed as 64-bit unsigned longs, `bytes` as a pointer to a
    private copy (a `Buffer` as a pointer to itself), None as NULL. Raises OSError."""
    conv = []
    for arg in args:
        if isinstance(arg, int):
            conv.append(_CULong(arg & 0xFFFFFFFFFFFFFFFF))
        elif isinstance(arg, bytes):
            conv.append(Buffer(arg)._array)
        elif isinstance(arg, Buffer):
            conv.append(arg._array)
        else:
            conv.append(arg)
    result = _syscall(_CLong(nr), *conv)
    if result < 0:
        err = _ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def prctl(option: int, arg2: int = 0, arg3: int = 0, arg4: int = 0, arg5: int = 0) -> int:
    return syscall(SYS_PRCTL, option, arg2, arg3, arg4, arg5)
