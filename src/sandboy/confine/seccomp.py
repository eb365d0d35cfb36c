"""A classic-BPF seccomp filter built by hand.

Why not libseccomp: version 2.5.4 (Debian 12, and the PyPI bindings) compares syscall arguments
as 64-bit values while the kernel reads 32, so `socket(0x1_00000002, SOCK_DGRAM, 0)` slipped past
a UDP ban (docs/findings.md). This filter loads only the low word of every argument it inspects.
Loading it costs ≈ 0.3 ms against 1-18 ms for the bindings.

What it decides (every jump is short, so no offset can overflow the 8-bit jump fields). The
first two tests come first; each rule after them is about one call, the first rule for a
number wins, and the rules are laid out in number order, in ranges a call without a rule skips
(`build`):

    arch != x86_64            -> EPERM   (i386 `int 0x80` and every foreign ABI)
    nr >= 0x40000000          -> EPERM   (x32 ABI)
    nr > HIGHEST_KNOWN_NR     -> ENOSYS  (a call of a newer kernel than this list was written for)
    nr == each denied call    -> EPERM   (the denylist; SysV IPC unless `ipc.sysv`)
    clone3, openat2           -> ENOSYS  (arguments live in memory BPF cannot read; libc falls back)
    clone: namespace flags    -> EPERM
    ioctl: TIOCSTI/TIOCLINUX/TIOCSETD, btrfs snapshots made or destroyed -> EPERM
    socket: family/type/proto -> EPERM unless the policy allows it; netlink: NETLINK_ROUTE only
    socketpair SOCK_DGRAM     -> EPERM while unix sockets are refused
    prlimit64 on another pid  -> EPERM
    sendto/sendmsg/sendmmsg with MSG_FASTOPEN -> EPERM while TCP port rules are in force
    chmod/open/mkdir/mknod... mode with S_ISUID or S_ISGID -> EPERM
    setpriority/ioprio_set/sched_set* on anything but the caller itself -> EPERM
    otherwise                 -> ALLOW
"""

# <errno.h> values, which are Linux's ABI like the syscall numbers below; not the errno module,
# which builds its table of ≈ 130 names at every `sandboy run` (≈ 0.07 ms) for these two.
EPERM = 1
ENOSYS = 38

DEFAULT_DENY = (
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd",
    "mount", "umount2", "pivot_root", "chroot",
    "move_mount", "open_tree", "open_tree_attr", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
    "swapon", "swapoff", "reboot", "kexec_load", "kexec_file_load",
    "init_module", "finit_module", "delete_module",
    "bpf", "perf_event_open", "userfaultfd",
    "keyctl", "add_key", "request_key",
    "unshare", "setns",
    "open_by_handle_at", "name_to_handle_at",
    "iopl", "ioperm", "quotactl", "quotactl_fd", "acct",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "personality", "uselib", "lookup_dcookie", "vhangup", "syslog",
    # What Flatpak's filter refuses as well: the LDT (a long CVE history; only 16-bit code, Wine,
    # needs it) and NUMA memory placement (move_pages/migrate_pages act on other processes; the
    # mempolicy calls are kernel attack surface no build needs; libnuma treats EPERM as "no NUMA").
    "modify_ldt", "move_pages", "migrate_pages", "mbind", "set_mempolicy", "get_mempolicy",
    "set_mempolicy_home_node",
    # Native AIO contexts count against ONE machine-wide allowance (fs.aio-max-nr, 65536 here),
    # not per uid nor per namespace: `io_setup(65536, &ctx)` in a cage, of any uid, took it all, and
    # every other process of the machine (root's databases and VMs: MySQL/MariaDB, QEMU aio=native)
    # got EAGAIN from io_setup until the run ended (redcage11). Builds do not use it (glibc's POSIX
    # aio is threads; libuv, tokio, Go, the JVM use epoll); libaio users fall back to threads
    # (InnoDB: "Linux Native AIO disabled"). `seccomp.allow = ["io_setup"]` where one is needed.
    "io_setup",
)

# SysV IPC reaches the host's segments, queues and semaphores by key (a well-known key is all it
# takes: `shmget(key, 0, 0)` then `shmat`). Refused unless the policy says `[ipc] sysv = true`.
SYSV_IPC = ("shmget", "shmat", "shmctl", "shmdt", "msgget", "msgsnd", "msgrcv", "msgctl",
            "semget", "semop", "semtimedop", "semctl")

# Calls whose arguments live in memory BPF cannot read: ENOSYS makes libc fall back to the older
# call, whose arguments the filter does check (clone's flags, openat's mode).
ENOSYS_CALLS = ("clone3", "openat2")

# The highest x86_64 system call number this denylist was written against (policy/syscalls.py's
# table; a test keeps them equal). A denylist lets through what it does not name, so on a newer
# kernel every call added since — a new namespace, mount or process interface (open_tree_attr,
# file_setattr came this way) — ran unreviewed (redcage12). Those get ENOSYS, the kernel's own
# answer for a call it lacks: libc then falls back to the older call, as for clone3 and openat2.
HIGHEST_KNOWN_NR = 469

# Where each call keeps the file mode the kernel reads (umode_t). S_ISUID/S_ISGID in it would leave
# a setuid file for the host (as root the cage owns every root-owned file, and `chmod 4755` on a
# copy of bash in a write root gave any local user euid 0). S_ISVTX stays allowed: the sticky bit
# only restricts who may delete entries of a directory, and `mkdir -m 1777` is legitimate.
MODE_ARG = {"chmod": 1, "fchmod": 1, "fchmodat": 2, "fchmodat2": 2, "open": 2, "openat": 3, "creat": 1,
            "mkdir": 1, "mkdirat": 2, "mknod": 1, "mknodat": 2}
S_ISUID, S_ISGID, S_ISVTX = 0o4000, 0o2000, 0o1000
PRIVILEGE_MODE_BITS = S_ISUID | S_ISGID

# Scheduling calls that can act on other processes: name -> (index of the "which" argument and
# the one value allowed there, or None; index of the target id). Only the caller itself (id 0) is
# allowed: seccomp compares with constants, so "the caller's own tree" cannot be expressed, and
# a pid of its own children would have to be known when the filter is built.
PRIO_PROCESS, IOPRIO_WHO_PROCESS = 0, 1
SELF_ONLY = {
    "setpriority": ((0, PRIO_PROCESS), 1),   # PRIO_PGRP / PRIO_USER renice whole groups and users
    "ioprio_set": ((0, IOPRIO_WHO_PROCESS), 1),
    "sched_setaffinity": (None, 0),
    "sched_setscheduler": (None, 0),
    "sched_setparam": (None, 0),
    "sched_setattr": (None, 0),
}

# Netlink protocols a build may open: NETLINK_ROUTE only (glibc's getaddrinfo(AI_ADDRCONFIG),
# getifaddrs and if_nameindex, `ip addr`). NETLINK_SOCK_DIAG (4) lists the host's listeners and
# unix socket paths without any network grant; audit, uevent, netfilter, xfrm, generic... no build
# needs them, and each is more kernel attack surface.
NETLINK_ROUTE, NETLINK_SOCK_DIAG = 0, 4
NETLINK_ALLOWED = (NETLINK_ROUTE,)

# The numbers the default filter needs, so the full table (policy/syscalls.py, ≈ 0.3 ms to
# import) loads only when a policy names other calls. tests/cage checks these against it.
_COMMON_NRS = {
    "ioctl": 16, "fcntl": 72, "socket": 41, "sendto": 44, "sendmsg": 46, "listen": 50, "socketpair": 53, "clone": 56,
    "ptrace": 101, "syslog": 103, "uselib": 134, "personality": 135, "vhangup": 153,
    "pivot_root": 155, "chroot": 161, "acct": 163, "mount": 165, "umount2": 166, "swapon": 167,
    "swapoff": 168, "reboot": 169, "iopl": 172, "ioperm": 173, "init_module": 175,
    "delete_module": 176, "quotactl": 179, "io_setup": 206, "lookup_dcookie": 212, "kexec_load": 246,
    "add_key": 248, "request_key": 249, "keyctl": 250, "unshare": 272, "perf_event_open": 298,
    "prlimit64": 302, "name_to_handle_at": 303, "open_by_handle_at": 304, "sendmmsg": 307, "setns": 308,
    "process_vm_readv": 310, "process_vm_writev": 311, "finit_module": 313, "kexec_file_load": 320,
    "bpf": 321, "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426,
    "io_uring_register": 427, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
    "fsmount": 432, "fspick": 433, "clone3": 435, "pidfd_getfd": 438, "mount_setattr": 442,
    "quotactl_fd": 443, "open_tree_attr": 467,
    "open": 2, "chmod": 90, "fchmod": 91, "creat": 85, "mkdir": 83, "mknod": 133, "openat": 257,
    "mkdirat": 258, "mknodat": 259, "fchmodat": 268, "fchmodat2": 452, "openat2": 437,
    "shmget": 29, "shmat": 30, "shmctl": 31, "shmdt": 67, "msgget": 68, "msgsnd": 69, "msgrcv": 70,
    "msgctl": 71, "semget": 64, "semop": 65, "semctl": 66, "semtimedop": 220,
    "setpriority": 141, "ioprio_set": 251, "sched_setaffinity": 203, "sched_setscheduler": 144,
    "sched_setparam": 142, "sched_setattr": 314,
    "modify_ldt": 154, "move_pages": 279, "migrate_pages": 256, "mbind": 237, "set_mempolicy": 238,
    "get_mempolicy": 239, "set_mempolicy_home_node": 450,
}


def denied_calls(policy) -> set:
    """The names the filter refuses for `policy`: the default denylist, plus `seccomp.deny`,
    minus `seccomp.allow`, plus SysV IPC unless `ipc.sysv` (which `seccomp.allow` cannot undo:
    the key that says what SysV IPC means is `[ipc]`)."""
    return denied_names(policy.seccomp.deny, policy.seccomp.allow, policy.ipc.sysv)


# Refused whatever `seccomp.allow` says: the kernel's keyring holds the key that seals Sandboy's
# cache (ADR 0030), which a command allowed keyctl reads by its serial (from /proc/keys, even in a
# user namespace of its own) to forge any cache file a later run trusts. `policy.load` refuses
# them in a policy file (exit 2, `load._seccomp`); here they stay denied for a `Policy` built in
# code or changed with `replace()`, which no loader sees (redcage14: `sandboy.run()` of such a
# policy read the key, tier and forced off).
NEVER_ALLOWED = ("add_key", "keyctl", "request_key")


def denied_names(deny, allow, sysv: bool) -> set:
    """`denied_calls` of a policy's `seccomp.deny`, `seccomp.allow` and `ipc.sysv`."""
    names = (set(DEFAULT_DENY) | set(deny)) - (set(allow) - set(NEVER_ALLOWED))
    if not sysv:
        names |= set(SYSV_IPC)
    return names


def syscall_nr(name: str) -> int:
    if name in _COMMON_NRS:
        return _COMMON_NRS[name]
    from sandboy.policy.syscalls import X86_64

    return X86_64[name]


AUDIT_ARCH_X86_64 = 0xC000003E
X32_SYSCALL_BIT = 0x40000000

CLONE_NS_FLAGS = (0x00020000 | 0x02000000 | 0x04000000 | 0x08000000   # NEWNS NEWCGROUP NEWUTS NEWIPC
                  | 0x10000000 | 0x20000000 | 0x40000000)              # NEWUSER NEWPID NEWNET
TIOCSTI = 0x5412
TIOCLINUX = 0x541C
# TIOCSETD sets a terminal's line discipline. With the kernel's default `dev.tty.ldisc_autoload = 1`
# (CONFIG_LDISC_AUTOLOAD) an unprivileged process's TIOCSETD on any pty it opens LOADS the
# discipline's module (n_hdlc, n_gsm, slip, slcan, ppp_async...): code with a long CVE history
# (CVE-2017-2636 n_hdlc, n_gsm 2023-24) that no build uses, reachable from the cage's private pty
# just as init_module (denied) would be. pppd, slattach and hciattach need it; a build does not.
TIOCSETD = 0x5423
# A btrfs snapshot copies a whole subvolume, read from an fd of its top directory, into a new
# directory the caller may write: every file below it, a denied one included, is then a file of
# the write root, readable through a new path Landlock grants (redcage14, session 14: `read` of a
# subvolume with `deny` of a file in it, `write` on another directory of the same btrfs —
# `BTRFS_IOC_SNAP_CREATE_V2` into the write root printed the denied file, tier and forced off; the
# kernel lets the subvolume's owner do it, and as root every root-owned one). No build snapshots;
# an empty subvolume (`BTRFS_IOC_SUBVOL_CREATE`), reflinks (FICLONE: an fd of the file itself) stay.
BTRFS_IOC_SNAP_CREATE = 0x50009401     # _IOW(0x94, 1, struct btrfs_ioctl_vol_args)
BTRFS_IOC_SNAP_CREATE_V2 = 0x50009417  # _IOW(0x94, 23, struct btrfs_ioctl_vol_args_v2)
# Its undoing: where btrfs is mounted `user_subvol_rm_allowed`, a subvolume's owner may delete it,
# whole, through an fd of the directory holding it — which Landlock does not see (no rmdir hook is
# called): without the tier, a command granted only READ on that directory deleted a subvolume of
# its uid outside every write root (redcage14; under the tier the mount is read-only: EROFS).
BTRFS_IOC_SNAP_DESTROY = 0x5000940F     # _IOW(0x94, 15, struct btrfs_ioctl_vol_args)
BTRFS_IOC_SNAP_DESTROY_V2 = 0x5000943F  # _IOW(0x94, 63, struct btrfs_ioctl_vol_args_v2)
# fcntl(F_SETLEASE): a read lease needs only an fd opened for reading and the file's ownership (as
# root, capabilities dropped, still the owner of every root-owned file): a command took one on a
# file its policy lets it READ, and every host process's open for writing or truncate of it blocked
# for `fs.lease-break-time` (45 s) — again at each open while the command re-took the lease — and
# the command was told of each (SIGIO): as root `/etc/*`, `/usr/*` under a read grant; as a user its
# own files (`~/.bashrc` under the operator's editor). Builds never take leases (file servers do:
# Samba's kernel oplocks, off by default).
F_SETLEASE = 1024

AF_UNIX, AF_INET, AF_INET6, AF_NETLINK = 1, 2, 10, 16
SOCK_STREAM, SOCK_DGRAM = 1, 2
SOCK_TYPE_MASK = 0xF   # SOCK_NONBLOCK / SOCK_CLOEXEC live above it
IPPROTO_TCP, IPPROTO_UDP = 6, 17
MSG_FASTOPEN = 0x20000000
# Where each send call keeps its `flags` argument (the kernel reads it as unsigned int).
SEND_FLAGS_ARG = {"sendto": 3, "sendmsg": 2, "sendmmsg": 3}

# BPF opcodes
LD_W_ABS = 0x20
JEQ_K = 0x15
JGE_K = 0x35
JSET_K = 0x45
AND_K = 0x54
RET_K = 0x06

RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000

OFF_NR, OFF_ARCH = 0, 4


def _arg_low(i: int) -> int:
    return 16 + 8 * i  # little-endian: the low 32 bits of args[i]


# The instructions every rule body is made of, as `_insn` values, made once at import: a body is
# then a list of these and of a few jumps, not a `_Prog` built op by op (≈ 120 calls a build).
_LD_ARG = tuple(LD_W_ABS | _arg_low(i) << 32 for i in range(6))   # A = low 32 bits of args[i]
_RET_ALLOW = RET_K | RET_ALLOW << 32
_SKIP_NEXT = 1 << 24   # jt = 0, jf = 1: a false test skips the next instruction


class SocketRules:
    """What `socket()` may create. `inet` False refuses AF_INET/AF_INET6 altogether."""

    __slots__ = ("unix", "inet", "udp", "tcp_any_protocol")

    def __init__(self, unix: bool, inet: bool, udp: bool, tcp_any_protocol: bool):
        self.unix = unix
        self.inet = inet
        self.udp = udp
        # False: only protocol 0/IPPROTO_TCP on SOCK_STREAM, because MPTCP (262) and SCTP
        # reach the network outside Landlock's TCP port rules (docs/findings.md).
        self.tcp_any_protocol = tcp_any_protocol


def _insn(code: int, k: int = 0, jt: int = 0, jf: int = 0) -> int:
    """One `struct sock_filter` { u16 code; u8 jt; u8 jf; u32 k; } as its 64-bit little-endian
    value: packing the program is then one to_bytes per instruction."""
    if not (0 <= jt < 256 and 0 <= jf < 256):
        raise ValueError(f"BPF jump out of range: {jt}, {jf}")
    return code | jt << 16 | jf << 24 | (k & 0xFFFFFFFF) << 32


class _Prog:
    """A list of instructions (see `_insn`) being built."""

    def __init__(self):
        self.insns: list[int] = []

    def op(self, code: int, k: int = 0, jt: int = 0, jf: int = 0) -> None:
        if not (0 <= jt < 256 and 0 <= jf < 256):
            raise ValueError(f"BPF jump out of range: {jt}, {jf}")
        self.insns.append(code | jt << 16 | jf << 24 | (k & 0xFFFFFFFF) << 32)  # as _insn, without a call

    def bytes(self) -> bytes:
        return b"".join([insn.to_bytes(8, "little") for insn in self.insns])


def errno_ret(err: int) -> int:
    return RET_ERRNO | (err & 0xFFFF)


def native_arch_only(bpf: bytes) -> bool:
    """Does the program start by refusing every architecture but x86_64 and the x32 numbers?
    Read from the program itself, so the status report says what the filter does, not what it
    was meant to do: its first six instructions, each compared on the fields that decide
    (`_ARCH_CHECK`), all at once as one 48-byte number."""
    return len(bpf) >= 48 and int.from_bytes(bpf[:48], "little") & _ARCH_CHECK_MASK == _ARCH_CHECK_VALUE


_CODE, _JT, _K = 0xFFFF, 0xFF << 16, 0xFFFFFFFF << 32
_ERRNO_ACTION = 0xFFFF0000 << 32  # RET_ERRNO whatever the errno
# (mask, value) per instruction: A = arch; if A == x86_64 skip one (jt = 1); return ERRNO;
# A = nr; if A >= x32 bit (else skip one); return ERRNO
_ARCH_CHECK = (
    (_CODE | _K, LD_W_ABS | OFF_ARCH << 32),
    (_CODE | _JT | _K, JEQ_K | 1 << 16 | AUDIT_ARCH_X86_64 << 32),
    (_CODE | _ERRNO_ACTION, RET_K | RET_ERRNO << 32),
    (_CODE | _K, LD_W_ABS | OFF_NR << 32),
    (_CODE | _K, JGE_K | X32_SYSCALL_BIT << 32),
    (_CODE | _ERRNO_ACTION, RET_K | RET_ERRNO << 32),
)
_ARCH_CHECK_MASK = sum(mask << 64 * i for i, (mask, _) in enumerate(_ARCH_CHECK))
_ARCH_CHECK_VALUE = sum(value << 64 * i for i, (_, value) in enumerate(_ARCH_CHECK))


# Rules tested per range of numbers (see `build`): at most this many per range.
RULES_PER_RANGE = 8


def build(deny_names, sockets: SocketRules, allow_names=()) -> bytes:
    """Return the filter program as packed `struct sock_filter` records. `allow_names`
    (`seccomp.allow`) also lifts the caller-only rule of the scheduling calls it names:
    `sched_setaffinity` for OpenMP's thread binding (each thread pins itself by thread id).

    Every rule is about one system call number: a body of instructions that always returns
    (for a denied call, just "return EPERM"). The first rule given for a number wins, in the
    order of the module docstring: the denylist, ENOSYS, then the argument checks. The rules are
    laid out in ascending number order, in ranges of RULES_PER_RANGE:

        if nr >= (last number of the range) + 1: skip the range
        if nr == n1: body1      (each body returns)
        if nr == n2: goto refuse   (a denied call: no body of its own)
        if nr == n3: body3 ...
        return ALLOW            (nr lies in the range and has no rule)
        refuse: return EPERM    (only in a range holding a denied call)

    so a call without a rule passes ≈ 15 tests instead of one per rule (≈ 95). That is what the
    kernel runs for every filtered call, and at `seccomp()` it also runs the program once per
    system call number to find the calls always allowed (`seccomp_cache_prepare`): ≈ 0.1 ms of
    every run's start with one test per rule. The denied calls (≈ 70) share their range's
    "return EPERM" rather than each having one: ≈ 55 instructions fewer for the kernel to check,
    convert and JIT-compile at every `seccomp()` (≈ 250 instead of ≈ 310)."""
    eperm = errno_ret(EPERM)
    ret_eperm = RET_K | eperm << 32
    # number -> the rule's body; None for a denied call (its test jumps to its range's "return
    # EPERM"). The denylist is all in _COMMON_NRS unless a policy's `seccomp.deny` names more.
    try:
        rules: dict = dict.fromkeys(map(_COMMON_NRS.__getitem__, deny_names))
    except KeyError:
        rules = dict.fromkeys(map(syscall_nr, deny_names))
    for name in ENOSYS_CALLS:
        rules.setdefault(syscall_nr(name), [RET_K | errno_ret(ENOSYS) << 32])
    # The argument checks, each a list of (nr, body): each body starts with A = nr and returns.
    checks = _clone_rules(eperm) + _ioctl_rules(eperm) + _fcntl_rules(eperm) + _socket_rules(sockets, eperm)
    if not sockets.unix:
        checks += _socketpair_rules(eperm)
    if not sockets.tcp_any_protocol:
        checks += _fastopen_rules(eperm)
    checks += _prlimit_rules(eperm)
    checks += _mode_rules(deny_names, eperm)
    checks += _self_only_rules(set(deny_names) | set(allow_names), eperm)
    for nr, body in checks:
        rules.setdefault(nr, body)

    ret_allow = _RET_ALLOW
    insns = [
        LD_W_ABS | OFF_ARCH << 32,
        JEQ_K | 1 << 16 | AUDIT_ARCH_X86_64 << 32,  # jt = 1: over the "return EPERM"
        ret_eperm,
        LD_W_ABS | OFF_NR << 32,
        JGE_K | _SKIP_NEXT | X32_SYSCALL_BIT << 32,
        ret_eperm,
        JGE_K | _SKIP_NEXT | (HIGHEST_KNOWN_NR + 1) << 32,
        RET_K | errno_ret(ENOSYS) << 32,
    ]
    numbers = sorted(rules)
    for first in range(0, len(numbers), RULES_PER_RANGE):
        chunk: list[int] = []
        refused = []  # where the tests of denied calls are: they jump to the range's one "return EPERM"
        for nr in numbers[first:first + RULES_PER_RANGE]:
            body = rules[nr]
            if body is None:
                refused.append(len(chunk))
                chunk.append(nr)  # made a jump below, once the distance is known
            else:
                chunk.append(JEQ_K | len(body) << 24 | nr << 32)  # jf: over the body
                chunk += body
        chunk.append(ret_allow)
        if refused:
            last = len(chunk)
            chunk.append(ret_eperm)
            for at in refused:
                chunk[at] = JEQ_K | (last - at - 1) << 16 | chunk[at] << 32  # jt: to "return EPERM"
        # every jump above is shorter than the chunk: _insn refuses a chunk of 256 or more
        insns.append(_insn(JGE_K, nr + 1, len(chunk), 0))
        insns += chunk
    insns.append(ret_allow)  # above every rule's number
    return b"".join([insn.to_bytes(8, "little") for insn in insns])


def _mode_rules(deny_names, eperm: int) -> list:
    """No setuid/setgid bit in any mode a call sets or creates with. Refused whatever the other
    flags say (open without O_CREAT ignores its mode, and libc then passes 0)."""
    return [_arg_bits_rule(name, index, PRIVILEGE_MODE_BITS, eperm) for name, index in MODE_ARG.items()
            if name not in deny_names]


def _self_only_rules(skip_names, eperm: int) -> list:
    """Scheduling calls on the caller only. As an ordinary user, setpriority, sched_setaffinity,
    sched_setscheduler(SCHED_IDLE) and ioprio_set on another process of the same uid succeeded,
    and setpriority(PRIO_USER, 0) reniced the operator's login shell; Landlock (ABI 7) scopes
    none of them. The kernel reads `which` and the id as 32-bit ints."""
    out = []
    ret_eperm = RET_K | eperm << 32
    # A == 0 (the caller itself): allowed; any other target: refused
    self_only = [JEQ_K | _SKIP_NEXT, _RET_ALLOW, ret_eperm]
    for name, (which, who) in SELF_ONLY.items():
        if name in skip_names:  # denied outright, or allowed for any target by the policy
            continue
        if which is None:
            body = [_LD_ARG[who], *self_only]
        else:
            index, value = which  # `which` must be that value: else refused
            body = [_LD_ARG[index], _insn(JEQ_K, value, 1, 0), ret_eperm, _LD_ARG[who], *self_only]
        out.append((syscall_nr(name), body))
    return out


def _prlimit_rules(eperm: int) -> list:
    """prlimit64 on another process: Landlock (ABI 7) does not scope it, so a command could set
    its supervisor's RLIMIT_NOFILE to 0 (the supervisor then cannot find the tree to kill) or
    lower the limits of any host process of the same user. Only pid 0 (itself) is allowed, which
    is what setrlimit/getrlimit use. The kernel reads the pid as a 32-bit pid_t."""
    body = [_LD_ARG[0], JEQ_K | _SKIP_NEXT, _RET_ALLOW, RET_K | eperm << 32]  # pid 0 or refused
    return [(syscall_nr("prlimit64"), body)]


def _socketpair_rules(eperm: int) -> list:
    """With unix sockets refused, socketpair() stays allowed (subprocess pipes, asyncio), but
    not as SOCK_DGRAM: an unbound datagram socket can sendto() or connect() any pathname
    socket (/dev/log, journald, a daemon's control socket), which Landlock (ABI 7) does not
    check. A connected stream or seqpacket pair cannot be pointed anywhere else."""
    body = [_LD_ARG[1], AND_K | SOCK_TYPE_MASK << 32, JEQ_K | _SKIP_NEXT | SOCK_DGRAM << 32,
            RET_K | eperm << 32, _RET_ALLOW]
    return [(syscall_nr("socketpair"), body)]


def _arg_bits_rule(name: str, index: int, bits: int, eperm: int) -> tuple:
    """(nr of `name`, a body returning `eperm` when any of `bits` is set in the low 32 bits of
    argument `index`, else allowing the call: no later rule sees it)."""
    test = JSET_K | _SKIP_NEXT | (bits & 0xFFFFFFFF) << 32  # _insn(JSET_K, bits, 0, 1): no bit set skips the return
    return syscall_nr(name), [_LD_ARG[index], test, RET_K | eperm << 32, _RET_ALLOW]


def _clone_rules(eperm: int) -> list:
    return [_arg_bits_rule("clone", 0, CLONE_NS_FLAGS, eperm)]


def _ioctl_rules(eperm: int) -> list:
    refused = (TIOCSTI, TIOCLINUX, TIOCSETD, BTRFS_IOC_SNAP_CREATE, BTRFS_IOC_SNAP_CREATE_V2, BTRFS_IOC_SNAP_DESTROY,
               BTRFS_IOC_SNAP_DESTROY_V2)
    # one test per command: a match jumps to the "return EPERM" after the last test, the last
    # test's miss over it
    tests = [_insn(JEQ_K, cmd, len(refused) - 1 - i, 0) for i, cmd in enumerate(refused[:-1])]
    tests.append(_insn(JEQ_K, refused[-1], 0, 1))
    body = [_LD_ARG[1], *tests, RET_K | eperm << 32, _RET_ALLOW]
    return [(syscall_nr("ioctl"), body)]


def _fcntl_rules(eperm: int) -> list:
    return [(syscall_nr("fcntl"), [_LD_ARG[1], _insn(JEQ_K, F_SETLEASE, 0, 1), RET_K | eperm << 32, _RET_ALLOW])]


def _fastopen_rules(eperm: int) -> list:
    """TCP Fast Open connects inside sendto()/sendmsg() without calling connect(), and Landlock
    (ABI 7, Linux 6.18) does not check that path: `sendto(fd, buf, n, MSG_FASTOPEN, addr)` reached
    a port the ruleset denied, data included (tests/cage/test_net.py). TCP_FASTOPEN_CONNECT is
    not affected: it goes through connect(), which Landlock checks."""
    return [_arg_bits_rule(name, index, MSG_FASTOPEN, eperm) for name, index in SEND_FLAGS_ARG.items()]


def _socket_rules(rules: SocketRules, eperm: int) -> list:
    allow, deny = _RET_ALLOW, RET_K | eperm << 32
    # the protocol decides for netlink (see NETLINK_ALLOWED): A = protocol; one of them: allow
    netlink = [_LD_ARG[2]]
    for i, proto in enumerate(NETLINK_ALLOWED):
        netlink.append(_insn(JEQ_K, proto, len(NETLINK_ALLOWED) - i, 0))
    netlink += [deny, allow]
    if not rules.inet:
        inet = [deny]
    elif rules.tcp_any_protocol and rules.udp:
        inet = [allow]
    else:
        # SOCK_STREAM: the protocol decides (0 or IPPROTO_TCP unless any protocol is allowed)
        if rules.tcp_any_protocol:
            stream = [_LD_ARG[2], allow]
        else:
            stream = [_LD_ARG[2], _insn(JEQ_K, 0, 1, 0), _insn(JEQ_K, IPPROTO_TCP, 0, 1), allow, deny]
        inet = [_LD_ARG[1], AND_K | SOCK_TYPE_MASK << 32, _insn(JEQ_K, SOCK_STREAM, 0, len(stream)), *stream,
                _insn(JEQ_K, SOCK_DGRAM, 0, 1), allow if rules.udp else deny,
                deny]  # SOCK_RAW, SOCK_SEQPACKET (SCTP), SOCK_PACKET, ...
    body = [_LD_ARG[0],  # A = family
            _insn(JEQ_K, AF_NETLINK, 0, len(netlink)), *netlink,  # always returns; A still holds the family
            _insn(JEQ_K, AF_UNIX, 0, 1), allow if rules.unix else deny,
            _insn(JEQ_K, AF_INET, 1, 0), _insn(JEQ_K, AF_INET6, 0, len(inet)), *inet,  # always returns
            deny]  # any other family: AF_PACKET, AF_VSOCK, AF_BLUETOOTH, ...
    return [(syscall_nr("socket"), body)]


def plan(program: bytes):
    """(steps, keepalive): the child's step installing the filter, and the buffer its
    sock_fprog points at, which must stay alive as long as the plan."""
    from sandboy.confine._libc import SYS_SECCOMP, sock_fprog

    keepalive, fprog = sock_fprog(program)
    SECCOMP_SET_MODE_FILTER = 1
    SECCOMP_FILTER_FLAG_TSYNC = 1  # every thread, so no thread escapes the filter
    return [("seccomp", (SYS_SECCOMP, False, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, fprog))], keepalive
