"""The BPF program itself, without the kernel: structure, and a differential check of what it
decides (run on a small cBPF interpreter) against the rules written out in plain Python."""

from __future__ import annotations

import errno
import struct

import pytest
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


def run_filter(program: bytes, nr: int, arch: int, args) -> tuple:
    """Interpret the classic-BPF program as the kernel would: (the value it returns, how many
    instructions it ran to get there)."""
    insns = decode(program)
    mem = data(nr, arch, args)
    pc, acc, steps = 0, 0, 0
    while True:
        steps += 1
        code, jt, jf, k = insns[pc]
        if code == seccomp.RET_K:
            return k, steps
        if code == seccomp.LD_W_ABS:
            acc = struct.unpack_from("<I", mem, k)[0]
            pc += 1
        elif code == seccomp.AND_K:
            acc &= k
            pc += 1
        else:
            taken = {seccomp.JEQ_K: acc == k, seccomp.JGE_K: acc >= k, seccomp.JSET_K: bool(acc & k)}[code]
            pc += 1 + (jt if taken else jf)


def execute(program: bytes, nr: int, arch: int, args) -> int:
    return run_filter(program, nr, arch, args)[0]


# The contract written out by hand, independently of the module under test: a test that derived
# these from `seccomp.DEFAULT_DENY` or `seccomp.CLONE_NS_FLAGS` passed when an entry was removed.
X86_64_ARCH = 0xC000003E
DENIED_BY_DEFAULT = frozenset({
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd",
    "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "open_tree_attr", "fsopen",
    "fsconfig", "fsmount", "fspick", "mount_setattr", "swapon", "swapoff", "reboot", "kexec_load",
    "kexec_file_load", "init_module", "finit_module", "delete_module", "bpf", "perf_event_open",
    "userfaultfd", "keyctl", "add_key", "request_key", "unshare", "setns", "open_by_handle_at",
    "name_to_handle_at", "iopl", "ioperm", "quotactl", "quotactl_fd", "acct", "io_uring_setup",
    "io_uring_enter", "io_uring_register", "personality", "uselib", "lookup_dcookie", "vhangup", "syslog",
    "modify_ldt", "move_pages", "migrate_pages", "mbind", "set_mempolicy", "get_mempolicy",
    "set_mempolicy_home_node", "io_setup",
})
SYSV = frozenset({"shmget", "shmat", "shmctl", "shmdt", "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop",
                  "semtimedop", "semctl"})
CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x02000000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
NAMESPACE_BITS = (CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET)
MODE_AT = {"chmod": 1, "fchmod": 1, "fchmodat": 2, "fchmodat2": 2, "open": 2, "openat": 3, "creat": 1,
           "mkdir": 1, "mkdirat": 2, "mknod": 1, "mknodat": 2}
SEND_FLAGS_AT = {"sendto": 3, "sendmsg": 2, "sendmmsg": 3}
MSG_FASTOPEN_BIT = 0x20000000
# name: (which argument and its only allowed value, or None; the target id's argument)
SELF_ONLY_AT = {"setpriority": ((0, 0), 1), "ioprio_set": ((0, 1), 1), "sched_setaffinity": (None, 0),
                "sched_setscheduler": (None, 0), "sched_setparam": (None, 0), "sched_setattr": (None, 0)}


def expected(nr, arch, args, deny, rules) -> int:
    """The filter's contract (seccomp.py docstring), over what the kernel reads: 32-bit ints."""
    low = [a & 0xFFFFFFFF for a in args]
    if arch != X86_64_ARCH or nr >= 0x40000000:
        return EPERM
    if nr > max(X86_64.values()):  # a call of a kernel newer than the table
        return ENOSYS
    if nr in {X86_64[n] for n in deny}:
        return EPERM
    if nr in (X86_64["clone3"], X86_64["openat2"]):
        return ENOSYS
    if nr == X86_64["clone"] and any(low[0] & bit for bit in NAMESPACE_BITS):
        return EPERM
    if nr == X86_64["ioctl"] and low[1] in (0x5412, 0x541C, 0x5423, 0x50009401, 0x50009417, 0x5000940F, 0x5000943F):  # TIOCSTI, TIOCLINUX, TIOCSETD, btrfs snapshots made/destroyed
        return EPERM
    if nr == X86_64["fcntl"] and low[1] == 1024:  # F_SETLEASE
        return EPERM
    for name, index in SEND_FLAGS_AT.items():
        if nr == X86_64[name] and low[index] & MSG_FASTOPEN_BIT and not rules.tcp_any_protocol:
            return EPERM
    if nr == X86_64["prlimit64"] and low[0] != 0:
        return EPERM  # another process's limits
    if nr == X86_64["socketpair"] and not rules.unix and low[1] & 0xF == 2:  # SOCK_DGRAM
        return EPERM
    for name, index in MODE_AT.items():
        if nr == X86_64[name] and low[index] & 0o6000:  # S_ISUID | S_ISGID; S_ISVTX is fine
            return EPERM
    for name, (which, who) in SELF_ONLY_AT.items():
        if nr == X86_64[name]:
            if which is not None and low[which[0]] != which[1]:
                return EPERM
            return seccomp.RET_ALLOW if low[who] == 0 else EPERM
    if nr == X86_64["socket"]:
        family, kind, proto = low[0], low[1] & 0xF, low[2]
        if family == 16:  # AF_NETLINK: NETLINK_ROUTE only
            return seccomp.RET_ALLOW if proto == 0 else EPERM
        if family == 1:  # AF_UNIX
            return seccomp.RET_ALLOW if rules.unix else EPERM
        if family not in (2, 10) or not rules.inet:  # AF_INET, AF_INET6
            return EPERM
        if rules.tcp_any_protocol and rules.udp:
            return seccomp.RET_ALLOW
        if kind == 1:  # SOCK_STREAM: plain TCP only (MPTCP is 262)
            return seccomp.RET_ALLOW if rules.tcp_any_protocol or proto in (0, 6) else EPERM
        if kind == 2:
            return seccomp.RET_ALLOW if rules.udp else EPERM
        return EPERM
    return seccomp.RET_ALLOW


socket_rules = st.builds(seccomp.SocketRules, st.booleans(), st.booleans(), st.booleans(), st.booleans())


def all_rules():
    return [seccomp.SocketRules(*bits) for bits in
            [(u, i, d, t) for u in (0, 1) for i in (0, 1) for d in (0, 1) for t in (0, 1)]]


def test_structure_every_jump_lands_inside_and_every_path_returns():
    for rules in all_rules():
        for deny in (DENIED_BY_DEFAULT | SYSV, (), tuple(X86_64)):
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


def test_calls_newer_than_the_table_get_enosys():
    """A denylist lets through what it does not name: a call a newer kernel added runs unreviewed.
    Above the table's highest number the filter answers ENOSYS (libc falls back); the highest
    itself (file_setattr, 6.17) is decided by the rules. The module's constant is the table's."""
    assert seccomp.HIGHEST_KNOWN_NR == max(X86_64.values())
    program = seccomp.build((), seccomp.SocketRules(True, True, True, True))
    for nr in (max(X86_64.values()) + 1, 512, 0x3FFFFFFF):
        assert execute(program, nr, seccomp.AUDIT_ARCH_X86_64, [0] * 6) == ENOSYS, nr
    assert execute(program, X86_64["file_setattr"], seccomp.AUDIT_ARCH_X86_64, [0] * 6) == seccomp.RET_ALLOW


def test_foreign_arch_and_x32_refused_before_anything():
    program = seccomp.build((), seccomp.SocketRules(True, True, True, True))
    assert execute(program, X86_64["getpid"], seccomp.AUDIT_ARCH_X86_64, [0] * 6) == seccomp.RET_ALLOW
    assert execute(program, 20, AUDIT_ARCH_I386, [0] * 6) == EPERM
    assert execute(program, 0x40000000 | 39, seccomp.AUDIT_ARCH_X86_64, [0] * 6) == EPERM


interesting_nr = st.sampled_from([X86_64[n] for n in (
    "socket", "clone", "clone3", "openat2", "ioctl", "fcntl", "ptrace", "getpid", "unshare", "mount", "io_uring_setup",
    "sendto", "sendmsg", "sendmmsg", "prlimit64", "socketpair", *MODE_AT, *SELF_ONLY_AT, *SYSV, "getpriority",
    "modify_ldt", "mbind")])
arg = st.one_of(st.integers(0, (1 << 64) - 1), st.sampled_from([
    1, 2, 3, 4, 9, 10, 15, 16, 17, 40, 0x1_00000002, 0x1_0000000A, 1 | 0o4000, 2 | 0o2000000, 5, 0, 6, 17, 132,
    262, 0x1_00000106, 0x20000000, 0x20004000, 0x1_00000040, 0x5412, 0x1_00005412, 0x541C, 0x5423, 0x1_00005423, 0x5413, 1024, 0x1_00000400, 1025, 0x10000000,
    0x40000000, 0x1_00000000, 0o4755, 0o2755, 0o1777, 0o6755, 0o755, 0o100755, 0x1_00000000 | 0o755,
    0x1_00000000 | 0o4755, 0o40000 | 0o2775, *NAMESPACE_BITS]))


@settings(max_examples=800, deadline=None)
@given(st.one_of(interesting_nr, st.integers(0, 470), st.integers(0, (1 << 32) - 1)),
       st.sampled_from([seccomp.AUDIT_ARCH_X86_64] * 9 + [AUDIT_ARCH_I386, 0]),
       st.lists(arg, min_size=6, max_size=6), socket_rules,
       st.sets(st.sampled_from(sorted(X86_64)), max_size=5))
def test_filter_decides_as_the_contract_says(nr, arch, args, rules, extra_deny):
    deny = set(seccomp.DEFAULT_DENY) | set(SYSV) | extra_deny
    program = seccomp.build(deny, rules)
    expected_deny = DENIED_BY_DEFAULT | SYSV | extra_deny
    assert execute(program, nr, arch, args) == expected(nr, arch, args, expected_deny, rules)


def test_default_denylist_is_the_written_contract():
    """The module's list against the one written here: an entry removed or added there must be
    a decision made here too (and in docs/threat-model.md, with its probe)."""
    assert set(seccomp.DEFAULT_DENY) == DENIED_BY_DEFAULT
    assert set(seccomp.SYSV_IPC) == SYSV


@pytest.mark.parametrize("bit", NAMESPACE_BITS)
def test_each_namespace_flag_of_clone_is_refused(bit):
    program = seccomp.build(DENIED_BY_DEFAULT, seccomp.SocketRules(False, False, False, False))
    clone = X86_64["clone"]
    assert execute(program, clone, X86_64_ARCH, [bit | 17, 0, 0, 0, 0, 0]) == EPERM
    assert execute(program, clone, X86_64_ARCH, [(1 << 32) | bit, 0, 0, 0, 0, 0]) == EPERM
    assert execute(program, clone, X86_64_ARCH, [(1 << 32) | 17, 0, 0, 0, 0, 0]) == seccomp.RET_ALLOW


@pytest.mark.parametrize("name", sorted(MODE_AT))
def test_setuid_and_setgid_modes_refused_sticky_allowed(name):
    program = seccomp.build(DENIED_BY_DEFAULT, seccomp.SocketRules(False, False, False, False))
    index = MODE_AT[name]

    def call(mode):
        args = [0] * 6
        args[index] = mode
        return execute(program, X86_64[name], X86_64_ARCH, args)

    for mode in (0o4755, 0o2755, 0o6777, 0o104755, 0xFFFF_0000_0000_0000 | 0o4000):
        assert call(mode) == EPERM, oct(mode)
    for mode in (0o755, 0o644, 0o1777, 0o40755, 0x1_0000_0000 | 0o755):
        assert call(mode) == seccomp.RET_ALLOW, oct(mode)


def test_allow_lifts_only_the_named_caller_only_rule():
    program = seccomp.build(DENIED_BY_DEFAULT, seccomp.SocketRules(False, False, False, False),
                            allow_names={"sched_setaffinity"})
    other_pid = [4242, 0, 0, 0, 0, 0]
    assert execute(program, X86_64["sched_setaffinity"], X86_64_ARCH, other_pid) == seccomp.RET_ALLOW
    for name in ("sched_setscheduler", "sched_setparam", "sched_setattr"):
        assert execute(program, X86_64[name], X86_64_ARCH, other_pid) == EPERM, name
    assert execute(program, X86_64["setpriority"], X86_64_ARCH, [0, 4242, 5, 0, 0, 0]) == EPERM


def test_denied_calls_follow_the_policy():
    from sandboy.policy.model import Policy

    def denied(data):
        return seccomp.denied_calls(Policy.from_mapping({"version": 1, **data}, "<t>"))

    assert denied({}) == DENIED_BY_DEFAULT | SYSV
    assert denied({"ipc": {"sysv": True}}) == DENIED_BY_DEFAULT
    assert denied({"seccomp": {"allow": ["ptrace"], "deny": ["chown"]}}) == (DENIED_BY_DEFAULT | SYSV | {"chown"}) - {
        "ptrace"}
    # SysV IPC is the [ipc] key's to allow, not seccomp.allow's
    assert "shmget" in denied({"seccomp": {"allow": ["shmget"]}})


def test_builtin_syscall_numbers_match_the_full_table():
    """seccomp.py keeps the numbers of its default calls inline (start-up cost); they must
    agree with the generated table, or the filter would guard the wrong calls."""
    assert seccomp._COMMON_NRS == {name: X86_64[name] for name in seccomp._COMMON_NRS}
    assert set(seccomp.DEFAULT_DENY) <= set(seccomp._COMMON_NRS)
    for name in (*seccomp.SYSV_IPC, *seccomp.MODE_ARG, *seccomp.SELF_ONLY, *seccomp.ENOSYS_CALLS):
        assert name in seccomp._COMMON_NRS, name


def test_refuse_arg_bits_refuses_only_its_call_with_a_bit_set():
    """The one shape behind the clone, mode and MSG_FASTOPEN rules (seccomp._arg_bits_rule)."""
    p = seccomp._Prog()
    p.op(seccomp.LD_W_ABS, 0)  # A = nr, as every rule expects
    nr, body = seccomp._arg_bits_rule("sendto", 3, 0x20000000, EPERM)
    p.op(seccomp.JEQ_K, nr, 0, len(body))  # as `build` guards each rule
    p.insns += body
    p.op(seccomp.RET_K, 0x7FFF0001)  # a marker: fell through to the rest of the filter
    program = p.bytes()
    sendto, connect = X86_64["sendto"], X86_64["connect"]
    for flags, verdict in ((0x20000000, EPERM), (0x20000040, EPERM), (0x40, seccomp.RET_ALLOW), (0, seccomp.RET_ALLOW),
                           (0x20000000 << 32, seccomp.RET_ALLOW)):  # only the low 32 bits are the int
        assert execute(program, sendto, X86_64_ARCH, [0, 0, 0, flags, 0, 0]) == verdict, hex(flags)
    assert execute(program, sendto, X86_64_ARCH, [0, 0, 0x20000000, 0, 0x20000000, 0]) == seccomp.RET_ALLOW
    assert execute(program, connect, X86_64_ARCH, [0, 0, 0, 0x20000000, 0, 0]) == 0x7FFF0001


def test_the_filters_errno_values_are_the_kernels():
    """seccomp.py and terminal.py write their errno values as numbers (no errno import on the
    start-up path)."""
    from sandboy.confine import terminal

    assert (seccomp.EPERM, seccomp.ENOSYS) == (errno.EPERM, errno.ENOSYS)
    assert (terminal.EIO, terminal.ENXIO) == (errno.EIO, errno.ENXIO)


def steps_to_decide(program: bytes, nr: int) -> int:
    """How many instructions the program runs for `nr` with zero arguments (x86_64)."""
    return run_filter(program, nr, X86_64_ARCH, [0] * 6)[1]


def test_a_call_without_a_rule_is_decided_in_few_tests():
    """The rules are laid out in number ranges (seccomp.build): a call none of them is about
    skips whole ranges. The kernel runs the program once per system call number when the filter
    is installed (to find the calls it always allows) and at every filtered call, so one test
    per rule (≈ 95) cost ≈ 0.06 ms of every run's start (docs/performance.md)."""
    program = seccomp.build(DENIED_BY_DEFAULT | SYSV, seccomp.SocketRules(False, False, False, False))
    rules = DENIED_BY_DEFAULT | SYSV | {"clone", "clone3", "openat2", "ioctl", "fcntl", "socket", "socketpair", "prlimit64",
                                        *SEND_FLAGS_AT, *MODE_AT, *SELF_ONLY_AT}
    free = [nr for name, nr in X86_64.items() if name not in rules]
    assert len(decode(program)) > 250  # what the bound below is measured against
    assert max(steps_to_decide(program, nr) for nr in free) <= 4 + 2 * seccomp.RULES_PER_RANGE + 8


def test_a_denied_call_costs_one_instruction():
    """A denied call is one test jumping to its range's shared "return EPERM" (seccomp.build):
    the kernel checks, converts and JIT-compiles every instruction at each seccomp(2) (308
    instructions with a return per denied call, 254 shared, docs/performance.md)."""
    rules = seccomp.SocketRules(False, False, False, False)
    base = DENIED_BY_DEFAULT | SYSV
    # calls no other rule is about, spread over several ranges
    extra = {"chown", "fchown", "lchown", "utime", "utimes", "futimesat", "sync", "syncfs", "acct", "mincore"} - base
    grown = len(decode(seccomp.build(base | extra, rules))) - len(decode(seccomp.build(base, rules)))
    ranges_added = 3  # at most: each new range adds its range test, "return ALLOW" and "return EPERM"
    assert len(extra) <= grown <= len(extra) + 3 * ranges_added

    def refusals(deny) -> int:
        return sum(1 for code, _, _, k in decode(seccomp.build(deny, rules)) if code == seccomp.RET_K and k == EPERM)

    assert refusals(base | extra) - refusals(base) <= ranges_added  # not one "return EPERM" per denied call
