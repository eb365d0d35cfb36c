"""The seccomp filter's number-range layout (seccomp.build) decided by the KERNEL, not by the
test interpreter: every system call number of the table and around it, the x32 numbers, numbers
past the last rule, i386 `int 0x80`, and the argument-checked calls with the arguments that must
be refused and those that must pass. A layout bug (a range skipped one number too far, a rule in
a skipped range, a jump off by one) lets a denied call through, so each outcome is compared with
the contract written out by hand in test_seccomp_bpf.expected.

How a call is decided without running it: after sandboy's filter, the child installs a second
filter that answers SECCOMP_RET_TRACE for calls carrying a marker in their sixth argument. The
kernel takes the strictest answer of all filters: sandboy's ERRNO outranks TRACE, and TRACE with
no tracer attached fails the call with ENOSYS without running it. So a probe call returns
sandboy's errno when sandboy refuses it and ENOSYS when sandboy allows it, and never runs."""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import select
import signal
import struct

import pytest

from sandboy.confine import seccomp
from sandboy.policy.syscalls import X86_64

from test_seccomp_bpf import DENIED_BY_DEFAULT, EPERM, ENOSYS, NAMESPACE_BITS, SYSV, X86_64_ARCH, expected

MARKER = 0x5EC0DE42
SECCOMP_RET_TRACE = 0x7FF00000
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_SET_MODE_FILTER = 1
SYS_SECCOMP = 317
ALLOWED = seccomp.RET_ALLOW
# Calls whose own ENOSYS (sandboy's rule) cannot be told from TRACE's: probed without the marker,
# with arguments the kernel refuses (size 0: EINVAL) should the filter let them run.
UNMARKED = {X86_64["clone3"], X86_64["openat2"]}
# No Linux call has these numbers, and on some hosts they never reach seccomp (here: 335 raised
# SIGILL and 336 returned ENXIO under an allow-all filter plus TRACE_MARKED): not observable.
UNOBSERVABLE = {335, 336}
ALLOW_ALL = struct.pack("<HBBI", seccomp.RET_K, 0, 0, seccomp.RET_ALLOW)


def _filter(insns) -> bytes:
    return b"".join(struct.pack("<HBBI", *insn) for insn in insns)


TRACE_MARKED = _filter([
    (seccomp.LD_W_ABS, 0, 0, 16 + 8 * 5),     # low word of args[5]
    (seccomp.JEQ_K, 0, 1, MARKER),
    (seccomp.RET_K, 0, 0, SECCOMP_RET_TRACE),
    (seccomp.RET_K, 0, 0, seccomp.RET_ALLOW),
])


def _arg_vectors():
    """Arguments that reach every branch of the argument rules, and their neighbours."""
    vectors = [[0] * 5]
    for index in range(4):
        for value in (1, 2, 3, 4, 6, 10, 16, 17, 262, 0x5412, 0x541C, 0x5423, 0x5413, 0o4000, 0o2000, 0o1000, 0o6755,
                      MSG_FASTOPEN := 0x20000000, MSG_FASTOPEN | 0x40, 0xFFFFFFFF, 0x1_00000000, *NAMESPACE_BITS):
            vector = [0] * 5
            vector[index] = value
            vectors.append(vector)
    for family in (1, 2, 10, 16, 17, 40):
        for kind in (1, 2, 3, 5, 1 | 0o2000000, 2 | 0o4000):
            for proto in (0, 4, 6, 17, 132, 262):
                vectors.append([family, kind, proto, 0, 0])
    for which in (0, 1, 2):  # setpriority / ioprio_set: `which`, then the target
        for who in (0, 1):
            vectors.append([which, who, 0, 0, 0])
    return vectors


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.syscall.argtypes = [ctypes.c_long] * 7
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    return libc


def _in_filtered_child(program: bytes, work) -> bytes:
    """The bytes `work()` returns, run in a forked child under `program` then TRACE_MARKED.
    Everything the child needs is set up before the filters; a child that a wrong filter
    leaves unable to write or exit is killed after a minute."""
    libc = _libc()
    buffers = [ctypes.create_string_buffer(p, len(p)) for p in (program, TRACE_MARKED)]
    fprogs = [ctypes.create_string_buffer(struct.pack("<H6xQ", len(p) // 8, ctypes.addressof(b)), 16)
              for p, b in zip((program, TRACE_MARKED), buffers)]
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_end)
            if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
                os._exit(3)
            for fprog in fprogs:
                if libc.syscall(SYS_SECCOMP, SECCOMP_SET_MODE_FILTER, 0, ctypes.addressof(fprog), 0, 0, 0) != 0:
                    os._exit(4)
            data = work()
            while data:
                data = data[os.write(write_end, data):]
            os._exit(0)
        finally:
            os._exit(5)
    os.close(write_end)
    chunks = []
    try:
        while select.select([read_end], [], [], 60)[0]:
            chunk = os.read(read_end, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
        else:
            os.kill(pid, signal.SIGKILL)
    finally:
        os.close(read_end)
        _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) == -signal.SIGSEGV and getattr(work, "may_fault", False):
        pytest.skip("this kernel has no i386 emulation (int 0x80 faults)")
    assert os.waitstatus_to_exitcode(status) == 0, "the probe child died or hung (killed after 60 s)"
    return b"".join(chunks)


def _decide_in_kernel(program: bytes, calls) -> list[int]:
    """Per (nr, args, marked): the errno the call failed with in a child under `program` then
    TRACE_MARKED (0: it succeeded, which only an unmarked call can)."""
    syscall = _libc().syscall
    results = (ctypes.c_int * len(calls))()

    def work():
        for i, (nr, args, marked) in enumerate(calls):
            ctypes.set_errno(0)
            rc = syscall(nr, *args, MARKER if marked else 0)
            results[i] = ctypes.get_errno() if rc == -1 else 0
        return bytes(results)

    raw = _in_filtered_child(program, work)
    assert len(raw) == 4 * len(calls)
    return list(struct.unpack(f"<{len(calls)}i", raw))


def _outcome(ret: int) -> int:
    return {ALLOWED: errno.ENOSYS, EPERM: errno.EPERM, ENOSYS: errno.ENOSYS}[ret]


# What the probe child calls once sandboy's filter is on (the second filter, its memory, its report,
# its exit), and the calls with sandboy's own ENOSYS: never denied by a config below.
PROBE_NEEDS = frozenset({"write", "exit", "exit_group", "brk", "mmap", "munmap", "mremap", "madvise", "futex",
                         "rt_sigprocmask", "rt_sigaction", "rt_sigreturn", "seccomp", "clone3", "openat2"})
CONFIGS = [
    # (extra names denied, names allowed (seccomp.allow: see the test after), ipc.sysv, SocketRules bits)
    (frozenset(), (), False, bits) for bits in
    [(u, i, d, t) for u in (0, 1) for i in (0, 1) for d in (0, 1) for t in (0, 1)]
] + [
    (frozenset(), (), True, (0, 0, 0, 0)),
    # names that move range boundaries: the lowest and highest numbers, neighbours of rules
    (frozenset({"read", "pkey_free", "getpid", "clone", "socket"}), (), False, (0, 1, 0, 0)),
    (frozenset({"mseal", "listmount", "statmount", "lsm_list_modules"}), (), False, (1, 1, 1, 0)),
    (frozenset(name for name in X86_64 if X86_64[name] % 7 == 0 and name not in ("exit", "exit_group", "write")),
     (), False, (0, 0, 0, 0)),
    # nearly every call denied: ranges of denied calls only, all sharing the range's one
    # "return EPERM" (the longest jumps), beside the few the probe child itself needs
    (frozenset(X86_64) - PROBE_NEEDS, (), False, (0, 0, 0, 0)),
    # every other number denied: each range alternates shared-return jumps and bodies
    (frozenset(name for name in X86_64 if X86_64[name] % 2 == 0) - PROBE_NEEDS, (), False, (1, 1, 0, 1)),
]


@pytest.mark.parametrize("extra, allow, sysv, bits", CONFIGS)
def test_the_kernel_decides_every_number_as_the_contract_says(extra, allow, sysv, bits):
    rules = seccomp.SocketRules(*map(bool, bits))
    deny = (set(seccomp.DEFAULT_DENY) | set(extra)) - set(allow) | (set() if sysv else set(SYSV))
    program = seccomp.build(deny, rules, allow)
    expected_deny = (DENIED_BY_DEFAULT | set(extra)) - set(allow) | (set() if sysv else SYSV)
    top = max(X86_64.values())
    numbers = [nr for nr in range(top + 40) if nr not in UNMARKED | UNOBSERVABLE]
    vectors = _arg_vectors()
    calls, wanted = [], []
    argument_checked = {X86_64[n] for n in ("clone", "ioctl", "socket", "socketpair", "prlimit64", "sendto", "sendmsg",
                                             "sendmmsg", "setpriority", "ioprio_set", "sched_setaffinity",
                                             "sched_setscheduler", "sched_setparam", "sched_setattr", "chmod",
                                             "fchmod", "fchmodat", "fchmodat2", "open", "openat", "creat",
                                             "mkdir", "mkdirat", "mknod", "mknodat")}
    for nr in numbers:
        for args in (vectors if nr in argument_checked else vectors[:1] + vectors[-6:]):
            calls.append((nr, args, True))
            wanted.append(_outcome(expected(nr, X86_64_ARCH, args + [MARKER], expected_deny, rules)))
    # x32 numbers, numbers past the last rule and beyond int's sign: refused or allowed as the contract says
    for nr in [*(0x40000000 | n for n in range(0, 560)), 0x3FFFFFFF, 0x7FFFFFFF, 0x80000000, 0xC0000000,
               0xFFFFFFFE, top + 1000, 0x3FFFFFFE, 0x10000]:
        calls.append((nr, [0] * 5, True))
        wanted.append(_outcome(expected(nr, X86_64_ARCH, [0] * 5 + [MARKER], expected_deny, rules)))
    for nr in sorted(UNMARKED):  # sandboy's ENOSYS; allowed, size 0 would fail with EINVAL
        calls.append((nr, [0] * 5, False))
        wanted.append(errno.ENOSYS)
    # the observation itself: with nothing refused, every marked call is stopped by TRACE (ENOSYS)
    assert set(_decide_in_kernel(ALLOW_ALL, [call for call in calls if call[2]])) == {errno.ENOSYS}
    got = _decide_in_kernel(program, calls)
    wrong = [(hex(nr), args, g, w) for (nr, args, _), g, w in zip(calls, got, wanted) if g != w]
    assert not wrong, f"{len(wrong)} of {len(calls)} calls decided against the contract, e.g. {wrong[:10]}"


def test_allow_lifts_the_caller_only_rule_in_the_kernel():
    """seccomp.allow = ["sched_setaffinity"]: any target; the other scheduling calls stay caller-only."""
    deny = set(seccomp.DEFAULT_DENY) | set(SYSV)
    program = seccomp.build(deny, seccomp.SocketRules(False, False, False, False), ("sched_setaffinity",))
    calls = [(X86_64["sched_setaffinity"], [1, 0, 0, 0, 0], True), (X86_64["sched_setaffinity"], [0, 0, 0, 0, 0], True),
             (X86_64["sched_setparam"], [1, 0, 0, 0, 0], True), (X86_64["sched_setparam"], [0, 0, 0, 0, 0], True),
             (X86_64["ptrace"], [0] * 5, True)]
    assert _decide_in_kernel(program, calls) == [errno.ENOSYS, errno.ENOSYS, errno.EPERM, errno.ENOSYS, errno.EPERM]


def _int80_stub():
    """Machine code for `int 0x80` with eax = nr, ebp = the marker (i386's sixth argument), the
    other argument registers 0: `push rbx; push rbp; xor ebx..edi; mov eax, nr; mov ebp, MARKER;
    int 0x80; pop rbp; pop rbx; ret`, nr patched per call."""
    code = bytes.fromhex("5355" "31db31c931d231f631ff" "b8") + bytes(4) + b"\xbd" + struct.pack("<I", MARKER) \
        + bytes.fromhex("cd80" "5d5b" "c3")
    return code, 13  # where nr goes


def test_the_kernel_refuses_every_i386_number():
    """The arch test comes before the ranges: `int 0x80` (the i386 table) is refused whatever the
    number, including the numbers that are allowed calls on x86_64."""
    program = seccomp.build(set(seccomp.DEFAULT_DENY) | set(SYSV), seccomp.SocketRules(True, True, True, True))
    code, at = _int80_stub()
    memory = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    memory.write(code)
    address = ctypes.addressof(ctypes.c_char.from_buffer(memory))
    stub = ctypes.CFUNCTYPE(ctypes.c_int)(address)
    numbers = list(range(0, 470))
    results = (ctypes.c_int * len(numbers))()

    def work():
        for i, nr in enumerate(numbers):
            memory.seek(at)
            memory.write(struct.pack("<I", nr))
            results[i] = stub()
        return bytes(results)

    work.may_fault = True
    got = struct.unpack(f"<{len(numbers)}i", _in_filtered_child(program, work))
    assert [nr for nr, rc in zip(numbers, got) if rc != -errno.EPERM] == []
