"""The few libc entry points the cage needs, via ctypes (no binding library: FINDINGS.md shows
the PyPI bindings spawn subprocesses at import and cost ≈ 170 ms)."""

from __future__ import annotations

import ctypes
import os

_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_prctl = _libc.prctl
_prctl.restype = ctypes.c_int
_prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)

# x86_64 numbers of the calls Python's os module does not wrap
SYS_CAPSET = 126
SYS_SECCOMP = 317
SYS_LANDLOCK_CREATE_RULESET = 444
SYS_LANDLOCK_ADD_RULE = 445
SYS_LANDLOCK_RESTRICT_SELF = 446
SYS_CLOSE_RANGE = 436


def _check(result: int) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def syscall(nr: int, *args) -> int:
    """Raw syscall; integer arguments are passed as 64-bit `unsigned long`."""
    conv = [ctypes.c_ulong(a) if isinstance(a, int) else a for a in args]
    return _check(_syscall(ctypes.c_long(nr), *conv))


def prctl(option: int, arg2: int = 0, arg3: int = 0, arg4: int = 0, arg5: int = 0) -> int:
    return _check(_prctl(option, arg2, arg3, arg4, arg5))
