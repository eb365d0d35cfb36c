"""The BPF program itself, without the kernel: structure, and a differential check of what it
decides (run on a small cBPF interpreter) against the rules written out in plain Python."""

from __future__ import annotations

import errno
import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from sandboy.confine import seccomp
from sandboy.policy.syscalls import X86_64

AUDIT_ARCH_I386 = 0x40000003
BPF_MAXINSNS = 4096
EPERM = seccomp.errno_ret(errno.EPERM)
ENOSYS = seccomp.errno_ret(errno.ENOSYS)
OPS = {seccomp.LD_W_ABS, seccomp.JEQ_K, seccomp.JGE_K, seccomp.JSET_K, seccomp.AND_K, seccomp.RET_K}
JUMPS = {seccomp.JEQ_K, seccomp.JGE_K, seccomp.JSET_K}


def decode(program: bytes):
    return [struct.unpack("<HBBI", program[i:i + 8]) for i in range(0, len(program), 8)]


def data(nr: int, arch: int, args) -> bytes:
    """struct seccomp_data: nr, arch, instruction_pointer, args[6] (little-endian)."""
    return struct.pack("<iIQ6Q", nr - (1 << 32) if nr >= 1 << 31 else nr, arch, 0,
                       *[a & (1 << 64) - 1 for a in args])


def execute(program: bytes, nr: int, arch: int, args) -> int:
    insns = decode(program)
    mem = data(nr, arch, args)
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == seccomp.RET_K:
            return k
        if code == seccomp.LD_W_ABS:
            acc = struct.unpack_from("<I", mem, k)[0]
            pc += 1
        elif code == seccomp.AND_K:
            acc &= k
            pc += 1
        else:
            taken = {seccomp.JEQ_K: acc == k, seccomp.JGE_K: acc >= k, seccomp.JSET_K: bool(acc & k)}[code]
            pc += 1 + (jt if taken else jf)


def expected(nr, arch, args, deny, rules) -> int:
    """The filter's contract (seccomp.py docstring), over what the kernel reads: 32-bit ints."""
    low = [a & 0xFFFFFFFF for a in args]
    if arch != seccomp.AUDIT_ARCH_X86_64 or nr >= seccomp.X32_SYSCALL_BIT:
        return EPERM
    if nr in {X86_64[n] for n in deny}:
        return EPERM
    if nr == X86_64["clone3"]:
        return ENOSYS
    if nr == X86_64["clone"] and low[0] & seccomp.CLONE_NS_FLAGS:
        return EPERM
    if nr == X86_64["ioctl"] and low[1] in (seccomp.TIOCSTI, seccomp.TIOCLINUX):
        return EPERM
    for name, index in seccomp.SEND_FLAGS_ARG.items():
        if nr == X86_64[name] and low[index] & seccomp.MSG_FASTOPEN and not rules.tcp_any_protocol:
            return EPERM
    if nr == X86_64["prlimit64"] and low[0] != 0:
        return EPERM  # another process's limits
    if nr == X86_64["socketpair"] and not rules.unix and low[1] & seccomp.SOCK_TYPE_MASK == seccomp.SOCK_DGRAM:
        return EPERM
    if nr == X86_64["socket"]:
        family, kind, proto = low[0], low[1] & seccomp.SOCK_TYPE_MASK, low[2]
        if family == seccomp.AF_NETLINK:
            return seccomp.RET_ALLOW
        if family == seccomp.AF_UNIX:
            return seccomp.RET_ALLOW if rules.unix else EPERM
        if family not in (seccomp.AF_INET, seccomp.AF_INET6) or not rules.inet:
            return EPERM
        if rules.tcp_any_protocol and rules.udp:
            return seccomp.RET_ALLOW
        if kind == seccomp.SOCK_STREAM:
            return seccomp.RET_ALLOW if rules.tcp_any_protocol or proto in (0, 6) else EPERM
        if kind == seccomp.SOCK_DGRAM:
            return seccomp.RET_ALLOW if rules.udp else EPERM
        return EPERM
    return seccomp.RET_ALLOW


socket_rules = st.builds(seccomp.SocketRules, st.booleans(), st.booleans(), st.booleans(), st.booleans())


def all_rules():
    return [seccomp.SocketRules(*bits) for bits in
            [(u, i, d, t) for u in (0, 1) for i in (0, 1) for d in (0, 1) for t in (0, 1)]]


def test_structure_every_jump_lands_inside_and_every_path_returns():
    for rules in all_rules():
        for deny in (seccomp.DEFAULT_DENY, (), tuple(X86_64)):
            insns = decode(seccomp.build(deny, rules))
            assert 0 < len(insns) <= BPF_MAXINSNS
            assert insns[-1][0] == seccomp.RET_K
            for pc, (code, jt, jf, k) in enumerate(insns):
                assert code in OPS, (pc, code)
                if code in JUMPS:
                    assert pc + 1 + max(jt, jf) < len(insns), pc
                elif code != seccomp.RET_K:
                    assert jt == jf == 0
                if code == seccomp.LD_W_ABS:
                    assert k % 4 == 0 and k < 64  # inside struct seccomp_data
                if code == seccomp.RET_K:
                    assert k in (seccomp.RET_ALLOW, EPERM, ENOSYS)


def test_foreign_arch_and_x32_refused_before_anything():
    program = seccomp.build((), seccomp.SocketRules(True, True, True, True))
    assert execute(program, X86_64["getpid"], seccomp.AUDIT_ARCH_X86_64, [0] * 6) == seccomp.RET_ALLOW
    assert execute(program, 20, AUDIT_ARCH_I386, [0] * 6) == EPERM
    assert execute(program, 0x40000000 | 39, seccomp.AUDIT_ARCH_X86_64, [0] * 6) == EPERM


interesting_nr = st.sampled_from([X86_64[n] for n in ("socket", "clone", "clone3", "ioctl", "ptrace", "getpid",
                                                       "unshare", "mount", "io_uring_setup", "sendto",
                                                       "sendmsg", "sendmmsg", "prlimit64", "socketpair")])
arg = st.one_of(st.integers(0, (1 << 64) - 1), st.sampled_from([
    1, 2, 10, 16, 17, 40, 0x1_00000002, 0x1_0000000A, 1 | 0o4000, 2 | 0o2000000, 3, 5, 0, 6, 17, 132, 262,
    0x1_00000106, 0x20000000, 0x20004000, 0x1_00000040, 0x5412, 0x1_00005412, 0x541C, 0x5413, 0x10000000, 0x40000000, 0x1_00000000]))


@settings(max_examples=800, deadline=None)
@given(st.one_of(interesting_nr, st.integers(0, 470), st.integers(0, (1 << 32) - 1)),
       st.sampled_from([seccomp.AUDIT_ARCH_X86_64] * 9 + [AUDIT_ARCH_I386, 0]),
       st.lists(arg, min_size=6, max_size=6), socket_rules,
       st.sets(st.sampled_from(sorted(X86_64)), max_size=5))
def test_filter_decides_as_the_contract_says(nr, arch, args, rules, extra_deny):
    deny = (set(seccomp.DEFAULT_DENY) | extra_deny)
    program = seccomp.build(deny, rules)
    assert execute(program, nr, arch, args) == expected(nr, arch, args, deny, rules)


def test_builtin_syscall_numbers_match_the_full_table():
    """seccomp.py keeps the numbers of its default calls inline (start-up cost); they must
    agree with the generated table, or the filter would guard the wrong calls."""
    assert seccomp._COMMON_NRS == {name: X86_64[name] for name in seccomp._COMMON_NRS}
    assert set(seccomp.DEFAULT_DENY) <= set(seccomp._COMMON_NRS)
