"""Making namespaces unavailable to Sandboy the way a host does (tests/cage/test_no_namespaces.py,
tests/gate/test_gate_without_namespaces.py): the seccomp filters of a container runtime and a
stand-in for Ubuntu's AppArmor user-namespace restriction, loaded by a launcher that then execs
the command. Only the launched process tree is affected; nothing of the host is changed.

The launcher loads any BPF program: tests/cage/cagekit.filter_only runs a command under the
cage's own filter alone with it.
"""

import struct
import sys

# Loads the seccomp filter given in hex as argv[1] on itself, then execs argv[2:].
LAUNCHER = r"""
import ctypes, os, sys
program = bytes.fromhex(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(program, len(program))
class Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
fprog = Fprog(len(program) // 8, ctypes.addressof(buf))
assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
if libc.syscall(317, 1, 0, ctypes.byref(fprog)) != 0:  # seccomp(SECCOMP_SET_MODE_FILTER)
    raise SystemExit("seccomp: " + os.strerror(ctypes.get_errno()))
os.execv(sys.argv[2], sys.argv[2:])
"""

# BPF by hand: ld [4] = arch, ld [0] = nr, ld [16] = low half of args[0] (struct seccomp_data).
LD, JEQ, JSET, RET = 0x20, 0x15, 0x45, 0x06
ALLOW, ERRNO, EPERM, ENOSYS = 0x7FFF0000, 0x00050000, 1, 38
X86_64 = 0xC000003E
# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWTIME (linux/sched.h)
NEW = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000 | 0x80


def _ins(code, k, jt=0, jf=0) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k)


FILTERS = {
    "container": b"".join([
        _ins(LD, 4), _ins(JEQ, X86_64, 0, 7), _ins(LD, 0), _ins(JEQ, 56, 0, 2), _ins(LD, 16),  # clone
        _ins(JSET, NEW, 4, 3), _ins(JEQ, 272, 3, 0), _ins(JEQ, 308, 2, 0), _ins(JEQ, 435, 2, 0),  # unshare setns clone3
        _ins(RET, ALLOW), _ins(RET, ERRNO | EPERM), _ins(RET, ERRNO | ENOSYS)]),
    "apparmor": b"".join([
        _ins(LD, 4), _ins(JEQ, X86_64, 0, 3), _ins(LD, 0), _ins(JEQ, 165, 2, 0), _ins(JEQ, 442, 1, 0),  # mount mount_setattr
        _ins(RET, ALLOW), _ins(RET, ERRNO | EPERM)]),
}


def under_filter(bpf: bytes, argv, python: str = sys.executable) -> list:
    """argv run under the seccomp BPF program `bpf` (no_new_privs set first, as seccomp requires)."""
    return [python, "-c", LAUNCHER, bpf.hex(), *map(str, argv)]


def in_container(way: str, argv, python: str = sys.executable) -> list:
    """argv run under filter `way` ("container" or "apparmor")."""
    return under_filter(FILTERS[way], argv, python)
