"""Making namespaces unavailable to Sandboy the way a host does (tests/cage/test_no_namespaces.py,
tests/gate/test_gate_without_namespaces.py): the seccomp filters of a container runtime and a
stand-in for Ubuntu's AppArmor user-namespace restriction, loaded by a launcher that then execs
the command. Only the launched process tree is affected; nothing of the host is changed.
"""

import sys

# Loads a seccomp filter on itself, then execs argv[2:]. argv[1] picks the filter.
# BPF by hand: ld [4] = arch, ld [0] = nr, ld [16] = low half of args[0] (struct seccomp_data).
LAUNCHER = r"""
import ctypes, os, struct, sys
LD, JEQ, JSET, RET = 0x20, 0x15, 0x45, 0x06
ALLOW, ERRNO, EPERM, ENOSYS = 0x7FFF0000, 0x00050000, 1, 38
X86_64 = 0xC000003E
# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWTIME (linux/sched.h)
NEW = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000 | 0x80

def ins(code, k, jt=0, jf=0):
    return struct.pack("<HBBI", code, jt, jf, k)

if sys.argv[1] == "container":
    prog = [ins(LD, 4), ins(JEQ, X86_64, 0, 7), ins(LD, 0), ins(JEQ, 56, 0, 2), ins(LD, 16),  # clone
            ins(JSET, NEW, 4, 3), ins(JEQ, 272, 3, 0), ins(JEQ, 308, 2, 0), ins(JEQ, 435, 2, 0),  # unshare setns clone3
            ins(RET, ALLOW), ins(RET, ERRNO | EPERM), ins(RET, ERRNO | ENOSYS)]
elif sys.argv[1] == "apparmor":
    prog = [ins(LD, 4), ins(JEQ, X86_64, 0, 3), ins(LD, 0), ins(JEQ, 165, 2, 0), ins(JEQ, 442, 1, 0),  # mount mount_setattr
            ins(RET, ALLOW), ins(RET, ERRNO | EPERM)]
else:
    raise SystemExit("unknown filter " + sys.argv[1])
program = b"".join(prog)
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


def in_container(way: str, argv, python: str = sys.executable) -> list:
    """argv run under filter `way` ("container" or "apparmor")."""
    return [python, "-c", LAUNCHER, way, *argv]
