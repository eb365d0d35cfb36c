"""The calls a workload makes most never run the cage's filter program.

Since Linux 5.11, `seccomp(2)` runs a new filter's program once per system call number with only
the number and the architecture known (kernel/seccomp.c, `seccomp_cache_prepare_bitmap` and
`seccomp_is_const_allow`): where it reaches "return ALLOW" without loading an argument, the call
is marked in a bitmap and afterwards allowed WITHOUT running the program. What a filter then
costs such a call is the kernel's entry work for any filter (≈ 40-60 ns here, the same for a
one-instruction filter: `bench/bench_workload.py`, docs/performance.md "Session 9 — the
workload"), whatever the program's length or layout. Only the calls with an argument rule (and
the refused ones) run it.

So the program's layout does not matter for `du -s /usr` (newfstatat, getdents64, fcntl, close:
96 % of its calls; fcntl, since session 11's F_SETLEASE rule, runs the program's first range) nor for a build's read/write/mmap/futex. What would matter is an argument rule
on one of those hot calls: each of them would then run the program. These tests keep that
visible: the kernel's emulation, written out here from kernel/seccomp.c, over every number.
"""

from __future__ import annotations

import struct

import pytest

from sandboy import Policy
from sandboy.confine import seccomp
from sandboy.confine.cage import build
from sandboy.policy.syscalls import X86_64

# kernel/seccomp.c's emulation understands these and nothing else (anything else: "run it")
BPF_LD_W_ABS, BPF_RET_K, BPF_JA = 0x20, 0x06, 0x05
BPF_JEQ_K, BPF_JGE_K, BPF_JGT_K, BPF_JSET_K, BPF_AND_K = 0x15, 0x35, 0x25, 0x45, 0x54
SECCOMP_RET_ALLOW = 0x7FFF0000
OFFSET_NR, OFFSET_ARCH = 0, 4
AUDIT_ARCH_X86_64 = 0xC000003E


def kernel_allows_without_running(program: bytes, nr: int, arch: int = AUDIT_ARCH_X86_64) -> bool:
    """`seccomp_is_const_allow`: the program emulated with only `nr` and `arch` known. True when
    every path it takes reaches "return ALLOW" without loading anything else."""
    insns = [struct.unpack("<HBBI", program[i:i + 8]) for i in range(0, len(program), 8)]
    acc, pc = 0, 0
    while pc < len(insns):
        code, jt, jf, k = insns[pc]
        if code == BPF_LD_W_ABS:
            if k == OFFSET_NR:
                acc = nr
            elif k == OFFSET_ARCH:
                acc = arch
            else:
                return False  # an argument (or the instruction pointer): not constant
        elif code == BPF_RET_K:
            return k == SECCOMP_RET_ALLOW
        elif code == BPF_JA:
            pc += k
        elif code in (BPF_JEQ_K, BPF_JGE_K, BPF_JGT_K, BPF_JSET_K):
            taken = {BPF_JEQ_K: acc == k, BPF_JGE_K: acc >= k, BPF_JGT_K: acc > k, BPF_JSET_K: bool(acc & k)}[code]
            pc += jt if taken else jf
        elif code == BPF_AND_K:
            acc &= k
        else:
            return False
        pc += 1
    return False  # ran off the end (the kernel WARNs)


# What programs spend their system calls on: file system walks (du, find, git status, a
# compiler's include search), reading and writing, memory, threads, processes.
HOT_CALLS = ("read", "write", "pread64", "pwrite64", "readv", "writev", "close", "fstat", "newfstatat", "statx",
             "lstat", "stat", "getdents64", "lseek", "dup", "dup2", "dup3", "pipe2", "access", "faccessat2",
             "readlink", "readlinkat", "mmap", "munmap", "mprotect", "madvise", "brk", "futex", "rt_sigaction",
             "rt_sigprocmask", "rt_sigreturn", "execve", "wait4", "exit_group", "getpid", "gettid", "getrandom",
             "clock_gettime", "clock_nanosleep", "poll", "ppoll", "epoll_wait", "epoll_pwait", "select",
             "sched_yield", "getcwd", "chdir", "fchdir", "unlink", "unlinkat", "rename", "renameat2", "utimensat",
             "fsync", "fdatasync", "copy_file_range", "sendfile", "splice", "recvfrom", "recvmsg", "connect",
             "accept4", "getsockopt", "setsockopt", "close_range", "exit", "kill", "tgkill", "uname")

# (`fcntl` was one, and `du -s /usr` makes many; since session 11 it has an argument rule,
# F_SETLEASE: a lease on a file the command may only read stalled every host writer 45 s —
# docs/seccomp.md. Its range is the program's first: a few tests more per call, below this
# machine's noise in a 200,000-call loop under `sandboy run`.)

# The calls the filter has an argument rule for (seccomp.py's docstring): the kernel must run
# the program for each of them.
ARGUMENT_RULES = ("clone", "ioctl", "fcntl", "socket", "prlimit64", "chmod", "fchmod", "fchmodat", "fchmodat2", "open",
                  "openat", "creat", "mkdir", "mkdirat", "mknod", "mknodat", "setpriority", "ioprio_set",
                  "sched_setaffinity", "sched_setscheduler", "sched_setparam", "sched_setattr")

NR_SYSCALLS = max(X86_64.values()) + 1  # the bitmap's size


def _ran(program: bytes) -> set:
    """The names of the calls the kernel runs `program` for."""
    return {name for name, nr in X86_64.items() if nr < NR_SYSCALLS and not kernel_allows_without_running(program, nr)}


def test_the_emulation_tells_an_argument_load_from_a_number_test():
    """The emulation itself, on programs whose answer is known."""
    allow = struct.pack("<HBBI", BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW)
    refuse = struct.pack("<HBBI", BPF_RET_K, 0, 0, 0x00050001)
    load_nr = struct.pack("<HBBI", BPF_LD_W_ABS, 0, 0, OFFSET_NR)
    load_arg = struct.pack("<HBBI", BPF_LD_W_ABS, 0, 0, 16)
    is_39 = struct.pack("<HBBI", BPF_JEQ_K, 0, 1, 39)  # getpid: refuse, else allow
    assert kernel_allows_without_running(allow, 0)
    assert not kernel_allows_without_running(load_arg + allow, 0)
    program = load_nr + is_39 + refuse + allow
    assert not kernel_allows_without_running(program, 39)
    assert kernel_allows_without_running(program, 40)


@pytest.mark.parametrize("rules", [seccomp.SocketRules(*bits) for bits in
                                   [(u, i, d, t) for u in (0, 1) for i in (0, 1) for d in (0, 1) for t in (0, 1)]])
def test_the_hot_calls_never_run_the_program(rules):
    deny = set(seccomp.DEFAULT_DENY) | set(seccomp.SYSV_IPC)
    program = seccomp.build(deny, rules)
    ran = _ran(program)
    assert not ran & set(HOT_CALLS), sorted(ran & set(HOT_CALLS))
    # and the program runs exactly for what it has something to say about: the refused calls,
    # clone3/openat2 (ENOSYS), the argument rules (sendto & co only under TCP port rules,
    # socketpair only while unix sockets are refused)
    expected = deny | set(seccomp.ENOSYS_CALLS) | set(ARGUMENT_RULES)
    if not rules.tcp_any_protocol:
        expected |= {"sendto", "sendmsg", "sendmmsg"}
    if not rules.unix:
        expected.add("socketpair")
    assert ran == expected


def test_the_cage_installs_a_filter_whose_hot_calls_skip_it(tmp_path):
    """The program a default cage compiles (what `sandboy run` installs)."""
    cage = build(Policy.from_mapping({"version": 1, "fs": {"read": ["/usr"], "exec": ["/usr/bin"]}}, "<t>"),
                 cwd=str(tmp_path), reusable=False)
    try:
        program = cage.compiled["seccomp"].outputs["bpf"]
    finally:
        cage.close()
    ran = _ran(program)
    assert not ran & set(HOT_CALLS)
    assert {"openat", "ioctl", "clone", "socket"} <= ran  # argument rules: the program runs
    assert len(ran) < 120  # ≈ 100 of ≈ 370 numbers: the rest never run the program
