"""Attach to another process with ptrace (to read its memory: tokens, keys)."""

import ctypes
import os

from _attempt import attempt, finish

libc = ctypes.CDLL(None, use_errno=True)
PTRACE_TRACEME, PTRACE_ATTACH = 0, 16


def ptrace(request: int, pid: int):
    if libc.ptrace(request, pid, None, None) == -1:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return "attached"


target = os.getppid()
attempt(f"ptrace(PTRACE_ATTACH) the parent shell, pid {target}", lambda: ptrace(PTRACE_ATTACH, target))
attempt("ptrace(PTRACE_TRACEME)", lambda: ptrace(PTRACE_TRACEME, 0))
finish()
