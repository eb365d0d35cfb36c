"""The namespace tier of Layer 2: THE place that makes user, mount, IPC, PID and network
namespaces (docs/adr/0009-namespace-tier.md).

What it closes that Landlock does not mediate (issue #7): metadata changes outside the write
roots (chmod, chown, utimensat, setxattr get EROFS on a read-only mount), raw devices and other
terminals (a minimal `/dev`), host SysV IPC (an IPC namespace), host processes (a PID namespace
with its own `/proc`), and, when the policy grants no network at all, every host listener and
abstract socket (a network namespace).

How: the confined child is made by clone(2) with CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWIPC |
CLONE_NEWPID (| CLONE_NEWNET); its plan (see `_libc`) first maps the caller's uid and gid to
themselves, then builds the mount tree with raw system calls, becomes the init of the PID
namespace (NR_INIT) and lets its child run the rest of the cage (Landlock, seccomp, ...) and
exec. No helper binary, no Python in the child with the C executor. A user namespace is made
as root too: the mounts of a mount namespace owned by a less privileged user namespace are
locked (a process in it cannot remount them read-write, even with every capability there).

Mount tree, in order (the parent computes every path when the cage is built):
  1. "/" recursively private: nothing done here propagates to the host.
  2. A detached copy (open_tree OPEN_TREE_CLONE) of every write root and of each device node
     the minimal /dev keeps, with the host's mount flags (a write root reached with no symlink
     followed on the way: see `plan_mounts`).
  3. A new proc for the PID namespace on /proc.
  4. Every mount read-only, recursively (mount_setattr).
  5. A tmpfs /dev with the copied device nodes, a private devpts and a private shm, then /dev
     itself read-only.
  6. The write-root copies attached back over their paths (read-write where the host had them
     so), and a fresh tmpfs on the cage's `{tmp}` directory.
  7. A read-only copy over each protected path (`fs.protect` and its defaults), and over each
     denied path inside a write root (its metadata: Landlock does not mediate chmod).
Then the child adds Landlock rules for the new file systems (`plan_landlock_rules`: rules are
tied to inodes, and these are new at every run) and becomes the init.

Egress (Layer 3) adds its steps through `Tier.add_in_netns` and the `plan_*` helpers below.
"""

import os
import time

from sandboy.confine import _libc
from sandboy.confine.hygiene import PENDING_SIGNALS_STEP
from sandboy.errors import CageError
from sandboy.paths import is_within, is_within_any
from sandboy.policy.resolve import PathSet
from sandboy.confine._libc import (
    AT_FDCWD,
    NR_INIT,
    SYS_CLOSE,
    SYS_FCNTL,
    SYS_MKDIRAT,
    SYS_MOUNT,
    SYS_MOUNT_SETATTR,
    SYS_MOVE_MOUNT,
    SYS_OPEN_TREE,
    SYS_OPENAT,
    SYS_OPENAT2,
    SYS_SYMLINKAT,
    SYS_WRITE,
    step_flags,
    u64,
)

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

# the init's own cap of queued signals, as the command's (hygiene.PENDING_SIGNALS: below Landlock
# ABI 6 the command may signal its init, which keeps every signal blocked and so queued)
_INIT_PENDING_SIGNALS = (f"{PENDING_SIGNALS_STEP[0]} (the init)", PENDING_SIGNALS_STEP[1])

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_BIND, MS_REC, MS_PRIVATE = 0x1000, 0x4000, 1 << 18
OPEN_TREE_CLONE, OPEN_TREE_CLOEXEC, AT_RECURSIVE, AT_SYMLINK_NOFOLLOW = 1, 0o2000000, 0x8000, 0x100
MOVE_MOUNT_F_EMPTY_PATH = 0x4
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NODEV = 0x1, 0x4
O_WRONLY, O_CREAT, O_EXCL, O_CLOEXEC = 0o1, 0o100, 0o200, 0o2000000
MOVE_MOUNT_T_EMPTY_PATH = 0x40
RESOLVE_NO_SYMLINKS, O_NOFOLLOW = 0x04, 0o400000

# The minimal /dev (docs/design.md, "Step policy": always applied): these nodes, bound from the host; `tty` only on request.
DEVICES = ("null", "zero", "full", "random", "urandom")
DEV_LINKS = (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
             ("stderr", "/proc/self/fd/2"), ("ptmx", "pts/ptmx"))
# Paths the tier replaces with private ones: a write grant there is not attached from the host.
PRIVATE_TREES = ("/dev", "/proc")
# The PID namespace's /proc shows only processes the command may ptrace-read: its init (pid 1,
# which runs in — or, before ADR 0021, was a copy of — the memory of the process that started
# the run) is outside the command's Landlock domain and vanishes, so /proc/1/cmdline and
# /proc/1/status no longer give away the caller's argv (an API user's `--token=...`) and
# size; the command's own processes stay visible. `gid`: a group nobody holds (the default,
# 0, would exempt a command running as root).
PROC_OPTIONS = b"hidepid=invisible,gid=4294967294\0"

FORCE_OFF_ENV = "SANDBOY_NAMESPACES"  # "0": behave as if the kernel refused namespaces

# What each namespace prevents, for the exact list of what is lost when they are unavailable.
LOST_WITHOUT = {
    "mount": "chmod/chown/utimensat/setxattr on files the uid owns outside the write roots (Landlock "
             "does not mediate metadata; as root that includes every root-owned file), also through a file "
             "handed in on fd 0-2",
    "dev": "raw block devices and other terminals of the same uid under any granted /dev path",
    "ipc": "host SysV IPC segments, queues and semaphores (refused by seccomp unless ipc.sysv = true)",
    "pid": "host processes under a granted /proc (/proc/PID/cmdline of every host process)",
    "net": "host listeners and abstract unix sockets (sockets are still refused by seccomp)",
    # seccomp keeps NETLINK_ROUTE open (glibc's getaddrinfo and getifaddrs ask it), and in the
    # host's network namespace it answers with the host's interfaces, addresses and routes.
    "netinfo": "the host's network interfaces, addresses and routes (NETLINK_ROUTE, as `ip addr` reads them)",
    "tmp": "{tmp} is a per-run host directory (the cage is rebuilt for every run)",
}


def forced_off() -> bool:
    return os.environ.get(FORCE_OFF_ENV, "1") == "0"


class Tier:
    """The namespace layer of one cage: the clone flags, the steps its first child runs before
    becoming the init, and its report. Built by `compile`; `None` flags mean no tier at all."""

    def __init__(self, flags: int, steps: list, enforced: dict, tmp_private: bool, rules=()):
        self.flags = flags
        self.steps = steps
        self.enforced = enforced
        self.tmp_private = tmp_private
        self.rules = list(rules)  # Landlock rules the child adds once its mounts exist
        self._rule_steps: list = []
        self._in_netns: list = []
        # Steps for the init-to-be of a run that relays a file (`StdioHandoff`): the init, not
        # the command, writes that file, so the command's limits.file_size_mib must bind it too
        self.relay_limits: list = []

    @property
    def labels(self) -> set:
        """Labels of the tier's own steps (a run that fails at one of them says so)."""
        return {label for label, _ in self.plan()}

    def bind_ruleset(self, ruleset_fd: int, handled_fs: int) -> None:
        """Once the cage's ruleset exists: the steps that add `rules` to it in the child."""
        self._rule_steps = plan_landlock_rules(ruleset_fd, self.rules, handled_fs)

    @property
    def ipc(self) -> bool:
        """Is a private IPC namespace in force (SysV IPC then reaches nothing of the host)?"""
        return bool(self.flags & CLONE_NEWIPC)

    @property
    def pid(self) -> bool:
        return bool(self.flags & CLONE_NEWPID)

    @property
    def net(self) -> bool:
        return bool(self.flags & CLONE_NEWNET)

    def add_in_netns(self, steps: list) -> None:
        """For Layer 3: run `steps` ((label, step) pairs) inside the cage's own network
        namespace, before the command starts (the tier then makes one even if the policy grants
        network). See `plan_loopback_up` and `plan_listen_and_send`."""
        self.flags |= CLONE_NEWNET
        self.enforced["net"] = True
        self._in_netns.extend(steps)

    def plan(self, in_netns=(), handoff=None) -> list:
        """The child's steps, in order, up to and including becoming the init: after them the
        plan continues in the init's child, which runs the cage and execs. `in_netns`: more
        steps for this run only (e.g. Layer 3's fd channel, whose number changes per run);
        `handoff`: this run's `StdioHandoff` (the init's part of it)."""
        steps = self.steps
        init = (NR_INIT, 0)
        at = self._handoff_at()
        relaying = []
        if handoff is not None and at is not None:
            steps = steps[:at] + handoff.init_steps + steps[at:]
            init = (NR_INIT, 0, *handoff.init_args)
            if handoff.init_args[3] & RELAY_KINDS:
                relaying = self.relay_limits
        return (steps + self._rule_steps + self._in_netns + list(in_netns) + relaying
                + [_INIT_PENDING_SIGNALS, ("become the PID namespace's init", init)])

    def plan_stdio(self, stdio, pipes: bool = True) -> "StdioHandoff":
        """This run's `StdioHandoff` (see `plan_stdio`). `pipes=False`: for the labels of a
        plan only (no pipe is made)."""
        return plan_stdio(stdio, pipes, self._handoff_at() is None)

    def describe_stdio(self, stdio=(None, None, None)) -> str:
        """What a run would do with `stdio` (None: this process's fd 0-2), for --dry-run."""
        try:
            handoff = plan_stdio(stdio, False, self._handoff_at() is None, refuse=True)
        except CageError as exc:
            return f"refused: {exc}"
        kinds = handoff.init_args[3]
        said = []
        for label, _ in handoff.command_steps:
            if not label.startswith("put "):
                continue
            target = int(label.rsplit(" ", 1)[1])
            if label.startswith("put the cage's /dev/"):
                said.append(f"fd {target}: the cage's own {label.split()[3]}")
            elif label.startswith("put the reopened file"):
                said.append(f"fd {target}: reopened read-only on the cage's tree"
                            + (", offset shared with the caller" if kinds >> 2 * target & CARRY_OFFSET else ""))
            elif label.startswith("put the reopened FIFO"):
                said.append(f"fd {target}: the FIFO reopened for writing on the cage's read-only tree")
            elif label.startswith("put the relay's pipe"):
                said.append(f"fd {target}: a pipe the init copies to the caller's file"
                            + (" (the file fd 0 reads: the command reads what it appends)"
                               if f"fd {target} are the same file" in (self.reads_what_it_appends(stdio) or "")
                               else ""))
        return "; ".join(said) or "as handed in"

    def reads_what_it_appends(self, stdio=(None, None, None)):
        """A warning for `sandboy run` where fd 0 is a file opened for reading and fd 1 or 2
        the same file opened for writing (`cat < f >> f`), else None. The handoff reopens the
        one and relays the other through a pipe, so a program's own guard against reading its
        output (GNU cat: "input file is output file", by fstat(1) against its input) sees a
        pipe and copies until limits.file_size_mib or the disk stops it. Said, not refused: a
        command that reads to the end before it appends (`wc -l < f >> f`) is legitimate, and
        nothing the parent could hand in instead keeps the check working without giving the
        command a writable description of the file (ADR 0011, "Session 9"). Two or three fstat,
        only for a file on fd 0. A file the command opens itself (`cat f >> f`) is not seen."""
        if self._handoff_at() is None:
            return None  # "/" writable: nothing is handed over, the command has the files themselves
        fds = [target if fd is None else fd for target, fd in enumerate(stdio)]
        try:
            read = os.fstat(fds[0])
        except OSError:
            return None
        if read.st_mode & S_IFMT != S_IFREG or read.st_nlink == 0 or _access(fds[0]) not in (O_RDONLY, O_RDWR):
            return None
        for target in (1, 2):
            try:
                written = os.fstat(fds[target])
            except OSError:
                continue
            if (written.st_dev, written.st_ino) == (read.st_dev, read.st_ino) and _access(fds[target]) != O_RDONLY:
                path = _readlink_fd(fds[0]) or "?"
                return (f"fd 0 and fd {target} are the same file ({path}): the command reads what it appends, and under "
                        f"the namespace tier it writes through a pipe, so a program's own check (cat: 'input file is "
                        f"output file') cannot see it; one that reads to the end while appending runs until "
                        f"limits.file_size_mib or the disk stops it")
        return None

    def _handoff_at(self):
        """Where a file handed in on fd 0-2 is reopened (`plan_stdio`): right after every mount
        became read-only, before /dev, the write roots and {tmp} are mounted over anything.
        None when "/" is a write root: nothing is read-only, so nothing needs handing over."""
        return next((i + 1 for i, (label, _) in enumerate(self.steps) if label == READ_ONLY_LABEL), None)


def no_network(net) -> bool:
    """Does the policy grant no network at all (then the cage gets its own network namespace)?"""
    return not (net.unrestricted or net.connect_tcp or net.bind_tcp or net.udp or net.domains or net.private)


# Landlock rules are bound to inodes, and the private /proc, /dev, /dev/shm, /dev/pts and {tmp}
# are new file systems at every run (Landlock's walk skips the host directories they cover). So
# the child adds rules for them to the cage's ruleset once they are mounted, before enforcing it
# (`plan_landlock_rules`): the policy's own rights for paths under /proc, /dev and {tmp}, and the
# tier's fixed ones below. The ruleset object is shared with the parent, which renews it every
# RULESET_RENEW_RUNS runs so these per-run rules cannot pile up (`cage.Cage.started`).
# /dev itself: listing only (its nodes have their own rules, on the host inodes they are bound
# from; READ_FILE here would reach every pty under a /dev/pts bound from the host for --tty).
TIER_RULES = (("/dev", ("READ_DIR",)),
              ("/dev/shm", ("READ_FILE", "READ_DIR", "WRITE_FILE", "MAKE_REG", "REMOVE_FILE", "TRUNCATE")),
              ("/dev/pts", ("READ_FILE", "READ_DIR", "WRITE_FILE", "IOCTL_DEV")))
RULESET_RENEW_RUNS = 64
O_PATH, O_DIRECTORY = 0o10000000, 0o200000
# struct open_how {flags, mode, resolve}: the path's own file, no symlink followed on the way to it
NO_SYMLINKS_HOW = u64(O_PATH | O_NOFOLLOW | O_CLOEXEC) + u64(0) + u64(RESOLVE_NO_SYMLINKS)
# Slots (see _libc): 1.. for the mount tree's copies, the top ones for steps that run alone.
PROTECT_SLOT, RULE_SLOT, LOOPBACK_SLOT, LISTENER_SLOT = 60, 61, 62, 63
# A file handed in on fd 0-2 reopened on the cage's tree is kept in its fd's slot until the
# init takes it (NR_INIT's arguments); OFFSET_SLOT carries the caller's offset in. The mount
# tree's copies stay below them all.
HANDOFF_SLOTS = (57, 58, 59)  # also hygiene.REDIRECT_SLOTS, free again by the time these are used
OFFSET_SLOT = 56
COPY_SLOT_LIMIT = OFFSET_SLOT
READ_ONLY_LABEL = "make every mount read-only"
AT_EMPTY_PATH = 0x1000


def compile(policy, grants: dict, tmp, abi: int, degraded: list, tty: bool = False, protected=(), denied=()):
    """The tier for `policy`, or None where the kernel refuses namespaces; then `degraded`
    gets the exact list of what is no longer prevented (compat strict then refuses, 125).
    `grants` (path -> Landlock rights) gains the rights on the private /dev."""
    from sandboy.confine import landlock

    ok, why = availability()
    if not ok:
        degraded.extend(f"namespaces unavailable ({why}): not prevented: {text}"
                        for text in lost_without(policy, grants, tmp, abi))
        return None
    flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWPID
    if no_network(policy.net):
        flags |= CLONE_NEWNET
    roots = write_roots(grants, tmp)
    memory = getattr(getattr(policy, "limits", None), "memory_mib", None)
    exact = openat2_works()
    if roots and not exact:
        degraded.append("namespaces: openat2 is refused here, so each write root is looked up by its path, "
                        "symlinks followed, when a run starts: a directory on the way swapped for a symlink "
                        "since the cage was built (by a process running meanwhile, or between runs of a "
                        "prebuilt cage) attaches the link's target read-write instead")
    steps = (plan_user_map(os.geteuid(), os.getegid()) + plan_user_limits()
             + plan_mounts(roots, tmp, tty, protected, memory, exact, denied))
    rules = []  # (path, rights, required, is_dir)
    for path, names in TIER_RULES:
        if tty and path == "/dev/pts":
            continue  # the host's devpts, bound for the command's terminal: only the policy's rules
        rights = 0
        for name in names:
            rights |= getattr(landlock, name)
        rules.append((path, rights, True, True))
    # nodes bound from the host are the host's inodes: the parent's Landlock rules already cover them
    device_nodes = {f"/dev/{name}" for name in DEVICES + (("tty",) if tty else ())}
    for path, rights in sorted(grants.items()):
        if (path == tmp or is_within_any(path, PRIVATE_TREES)) and path not in device_nodes:
            rules.append((path, rights, path == tmp, os.path.isdir(path)))
    enforced = {
        "user": True,
        "mount": True,
        "writable": roots if "/" not in roots else ["/"],
        "dev": [f"/dev/{name}" for name in DEVICES + (("tty",) if tty else ())]
               + ["/dev/pts (the host's, for --tty)" if tty else "/dev/pts (private)", "/dev/shm (private)"],
        "tmp": "private tmpfs" if tmp else None,
        "read_only_binds": list(protected),
        "denied_read_only": [path for path in denied if not is_within_any(path, protected)],
        "ipc": True,
        "pid": True,
        "net": bool(flags & CLONE_NEWNET),
    }
    tier = Tier(flags, steps, enforced, bool(tmp), rules)
    limits = getattr(policy, "limits", None)
    if getattr(limits, "file_size_mib", None):
        from sandboy.confine import hygiene

        # the relay's writes to the caller's file are bounded as the command's own were (EFBIG:
        # the relay ends, the command's next write fails)
        tier.relay_limits = [(f"{label} (the init's relay)", step) for label, step in hygiene.plan_rlimits(limits)
                             if label == "limits.file_size_mib"]
    return tier


# The minimal /dev's nodes by device number (Documentation/admin-guide/devices.txt: char 1:3...).
_NODES_BY_RDEV = {(1, 3): "null", (1, 5): "zero", (1, 7): "full", (1, 8): "random", (1, 9): "urandom"}
STDIO_SLOT = PROTECT_SLOT  # free again once the mount tree is built
O_ACCMODE, O_RDONLY, O_RDWR = 0o3, 0, 2
O_NOCTTY, O_NONBLOCK = 0o400, 0o4000
S_IFMT, S_IFCHR, S_IFREG, S_IFIFO, S_IFDIR = 0o170000, 0o020000, 0o100000, 0o010000, 0o040000
SEEK_SET, SEEK_CUR = 0, 1
F_SETFL = 4
SYS_LSEEK, SYS_KCMP, KCMP_FILE = 8, 312, 0
# NR_INIT's arguments: (fd 0's, fd 1's, fd 2's descriptor in the init, kinds), 2 bits of
# kinds per fd (_native.c, become_init): what the init does with that fd of the caller's.
CARRY_OFFSET = 1  # when the command ends, the caller's offset := the reopened description's
RELAY = 2         # copy what the command writes into the pipe to the caller's description
RELAY_KINDS = RELAY | RELAY << 2 | RELAY << 4


class StdioHandoff:
    """What one run under the tier does with the caller's fd 0-2 (ADR 0011, "Session 8").

    An fd keeps the mount it was opened on: a file the caller hands in (`< ~/.ssh/id_rsa`,
    `> out.log`) is on the host's read-write mount, which no read-only tree in the cage
    touches, so `fchmod(0, 0o644)`, `fchown`, `fsetxattr`, `futimens` through it (or through a
    dup, or a reopen of /proc/self/fd/0) changed the host's file. So:

    - a file (or FIFO, or directory) opened for reading is reopened by the init-to-be on the cage's tree,
      right after every mount became read-only: the same file (st_dev/st_ino checked after the
      open: a path swapped meanwhile fails the run, never hands another file in), the caller's
      offset carried in, and — for a file — carried back out when the command ends (the init
      keeps the reopened description), so `while read l; do sandboy run head -n1; done < list`
      shares the file as before. fd 0 opened read-write is reopened read-only.
    - a named FIFO opened for writing is reopened too, with the caller's access (opening a FIFO
      writes nothing to the file system): a relay's blocking write to a reader that stalls
      held the init for ever, deaf to the signals that should end the run.
    - a file opened for writing becomes a pipe (one for fds sharing a description:
      `> f 2>&1`); the init copies what comes through it to the caller's description, in order
      (O_APPEND and the caller's offset are the caller's description's own), and drains it after
      the command's tree has ended, before it reports the exit status.
    - a device node of the minimal /dev is replaced by the cage's read-only copy (session 7).
    - a file nobody can reach by a path any more (st_nlink 0: a shell's here-document, an
      O_TMPFILE) is left as it is: its metadata concerns nobody.

    `init_steps` run before NR_INIT (`Tier.plan` puts them after the read-only remount),
    `init_args` are NR_INIT's, `command_steps` run in the command before the cage; `close()`
    closes the parent's pipe ends once the child has started. Refused (CageError, 125): a file
    opened for reading whose path no longer leads to it (renamed, in another mount namespace,
    under /proc): it cannot be reopened, and a relay reading ahead would break the shared offset."""

    def __init__(self):
        self.init_steps: list = []
        self.init_args = (-1, -1, -1, 0)
        self.command_steps: list = []
        self.parent_fds: list = []

    def per_run(self) -> bool:
        """Whether the child does anything for this run's own files (a reopen, a relay): what
        a plan cache entry can never repeat (before `close`, which forgets the parent's fds)."""
        return bool(self.init_steps or self.parent_fds or self.init_args != (-1, -1, -1, 0))

    def close(self) -> None:
        for fd in self.parent_fds:
            os.close(fd)
        self.parent_fds = []


def plan_stdio(stdio, pipes: bool = True, everything_writable: bool = False, refuse=None) -> StdioHandoff:
    """The `StdioHandoff` for a child whose fd 0-2 will be `stdio` (None: this process's own).
    `everything_writable`: "/" is a write root, so the command may change any file's metadata
    by path anyway: files are left as they are. `pipes=False`: placeholder fds (labels only).
    `refuse` (default: `pipes`): CageError for a file that cannot be handed in safely."""
    refuse = pipes if refuse is None else refuse
    handoff = StdioHandoff()
    init_fds, kinds = [-1, -1, -1], 0
    relays: list = []  # (caller-side fd, pipe write end) of each relay made so far
    for target in range(3):
        fd = target if stdio[target] is None else stdio[target]
        try:
            st = os.fstat(fd)
        except OSError:
            continue  # nothing there: the command gets nothing there either
        kind = st.st_mode & S_IFMT
        if kind == S_IFCHR:
            handoff.command_steps += _device_steps(target, fd, st)
            continue
        if everything_writable or kind not in (S_IFREG, S_IFIFO, S_IFDIR) or (kind == S_IFREG and st.st_nlink == 0):
            continue  # a socket (no mount), a tty (relayed by a supervisor), nothing to protect
        # fcntl(F_GETFL) as a raw call: the `fcntl` module is a shared object to load (≈ 0.19 ms)
        status = _libc.syscall(_libc.SYS_FCNTL, fd, _libc.F_GETFL)
        access = status & O_ACCMODE
        reading = access == O_RDONLY or (target == 0 and access == O_RDWR)
        if reading and st.st_uid != os.geteuid() and not st.st_mode & 0o022:
            # Another uid's file, writable by its owner only: the cage's user namespace maps the
            # caller's uid alone, so the command has neither the owner's rights nor a capability
            # over it (chmod, chown, ACLs: EPERM; user xattrs and times: no write permission)
            # and the host's mount gives it nothing more. Reopened, it could not be read at all:
            # root handing in another user's private file lost its read override (rvsec8).
            continue
        # the path: to reopen a file read, and to tell a named FIFO from a pipe ("pipe:[N]")
        path = _readlink_fd(fd) if reading or kind == S_IFIFO else ""
        if kind == S_IFIFO and not path.startswith("/"):
            continue  # an anonymous pipe: no file system of anyone's
        # a named FIFO written is reopened too (the open of a FIFO writes nothing to the file
        # system, so the read-only tree allows it): relayed, the init's blocking write to a
        # reader that stalls held it for ever, deaf to the signals that should end the run
        if reading or kind == S_IFIFO:
            slot = HANDOFF_SLOTS[target]
            handoff.init_steps += _reopen_steps(target, path, st, status, slot, refuse,
                                                O_RDONLY if reading else access)
            what = "file" if reading else "FIFO (written)"
            handoff.command_steps += [
                (f"put the reopened {what} on fd {target}", (_libc.SYS_DUP2, 0, (slot,), target)),
                (f"close the spare of fd {target}", (SYS_CLOSE, 0, (slot,))),
            ]
            if kind == S_IFREG:
                init_fds[target] = (slot,)
                kinds |= CARRY_OFFSET << 2 * target
            continue
        shared = next((w for other, w in relays if _same_description(other, fd)), None)
        if shared is None:
            if pipes:
                read_end, shared = map(_libc.above_stdio, os.pipe2(os.O_CLOEXEC))
                handoff.parent_fds += [read_end, shared]
            else:
                read_end, shared = -1, -1
            relays.append((fd, shared))
            init_fds[target] = read_end
            kinds |= RELAY << 2 * target
        handoff.command_steps.append((f"put the relay's pipe on fd {target}", (_libc.SYS_DUP2, 0, shared, target)))
    if refuse and kinds & CARRY_OFFSET and any(_same_description(0 if stdio[0] is None else stdio[0], fd)
                                               for fd, _ in relays):
        # `<> f >&0`: one description read (reopened: an offset of its own) and written (relayed
        # at the caller's offset): the two cannot stay one offset, and the writes would land
        # where the command did not put them
        raise CageError("fd 0 and a later fd are one file opened read-write: the cage reopens what the command "
                        "reads and relays what it writes, which cannot share one offset; hand them in "
                        "separately (`< FILE >> FILE`) or through pipes")
    handoff.init_args = (*init_fds, kinds)
    return handoff


def _reopen_steps(target: int, path: str, st, status: int, slot: int, refuse: bool = True,
                  access: int = O_RDONLY) -> list:
    """The init-to-be's steps that open the file handed in on fd `target` (found at `path`,
    what /proc/self/fd says) again, with `access` (read-only but for a FIFO written), on the
    cage's tree and put the caller's offset on it. CageError where its path no longer leads to it (`refuse=False`, for a plan's labels
    after the run: the steps as they were, whatever the path says now)."""
    found = _path_to(path, st)
    if found is None and not refuse:
        found = path
    path = found
    if path is None:
        raise CageError(f"fd {target} is a file the cage cannot reopen on its read-only tree (its path no "
                        f"longer leads to it, or it is under /proc): its metadata could be changed through "
                        f"the fd; hand it in through a pipe instead (`cat FILE | sandboy run ...`)")
    kind = st.st_mode & S_IFMT
    fifo = kind == S_IFIFO
    # a FIFO with no writer left would block its opening for reading (for writing: ENXIO with
    # no reader left, the run fails): O_NONBLOCK, then the caller's flags back. For every kind,
    # not only a FIFO found here: the path is opened again by the init, before the command
    # starts and so before limits.wall_seconds runs, and a FIFO another run swapped in at that
    # path meanwhile held the open — and the run — for ever (redcage13); opened non-blocking,
    # the check below refuses it (125)
    flags = access | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | (O_DIRECTORY if kind == S_IFDIR else 0)
    steps = [
        (f"reopen fd {target} on the cage's read-only tree", (SYS_OPENAT, step_flags(save=slot), AT_FDCWD,
                                                              _path(path), flags)),
        (f"check that fd {target}'s path still leads to the file handed in", (_libc.NR_SAME_FILE, 0, (slot,),
                                                                              st.st_dev, st.st_ino)),
    ]
    # the caller's flags back (a FIFO's all of them, as before; another kind's O_NONBLOCK alone,
    # what its open carried before: F_SETFL of the caller's O_NOATIME could be refused)
    steps.append((f"give the reopened fd {target} the caller's flags", (SYS_FCNTL, 0, (slot,), F_SETFL,
                                                                       status & ~O_ACCMODE if fifo else status & O_NONBLOCK)))
    if kind == S_IFREG:  # (a directory's position is an opaque cookie: it starts over)
        steps += [
            (f"read the caller's offset on fd {target}", (SYS_LSEEK, step_flags(save=OFFSET_SLOT), target, 0, SEEK_CUR)),
            (f"carry the offset of fd {target} in", (SYS_LSEEK, 0, (slot,), (OFFSET_SLOT,), SEEK_SET)),
        ]
    return steps


def _access(fd: int) -> int:
    """fd's access mode (O_RDONLY, O_WRONLY, O_RDWR); fcntl(F_GETFL) as a raw call, as above."""
    return _libc.syscall(_libc.SYS_FCNTL, fd, _libc.F_GETFL) & O_ACCMODE


def _readlink_fd(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


def _path_to(path: str, st):
    """`path` if it leads to the file `st` describes now, else None. The child opens it again
    after the mounts and checks it is the same file (a later swap fails the run)."""
    if not path.startswith("/") or is_within(path, "/proc"):  # the cage mounts its own /proc
        return None
    try:
        found = os.stat(path)
    except OSError:
        return None
    return path if (found.st_dev, found.st_ino) == (st.st_dev, st.st_ino) else None


def _same_description(fd_a: int, fd_b: int) -> bool:
    """Are `fd_a` and `fd_b` one open file description (`> f 2>&1`)? kcmp(2); where it is not
    there, only the same fd number counts."""
    if fd_a == fd_b:
        return True
    pid = os.getpid()
    try:
        return _libc.syscall(SYS_KCMP, pid, pid, KCMP_FILE, fd_a, fd_b) == 0
    except OSError:
        return False


def _device_steps(target: int, fd: int, st) -> list:
    """Put the cage's own read-only copy of a device node on fd `target` where the caller
    hands in one of the minimal /dev's nodes (session 7).

    Why: an fd keeps the mount it was opened on. A `/dev/null` opened by the caller (a gate's
    or CI runner's stdin, `sandboy run ... </dev/null`, the relay's stdin) is the host's mount,
    read-write, and metadata calls through it (`fchmod(0, 0)`, `chmod /proc/self/fd/0`,
    `futimens`) ignore the cage's read-only tree: as root the command set the host's /dev/null
    to 000 for every process on the machine. These nodes hold no state, so the cage's own is
    the same device."""
    name = _NODES_BY_RDEV.get((os.major(st.st_rdev), os.minor(st.st_rdev)))
    if name is None:
        return []
    access = _libc.syscall(_libc.SYS_FCNTL, fd, _libc.F_GETFL) & O_ACCMODE
    return [
        (f"open the cage's /dev/{name} for fd {target}", (SYS_OPENAT, step_flags(save=STDIO_SLOT), AT_FDCWD,
                                                          _path(f"/dev/{name}"), access | O_CLOEXEC)),
        (f"put the cage's /dev/{name} on fd {target}", (_libc.SYS_DUP2, 0, (STDIO_SLOT,), target)),
        (f"close the spare /dev/{name}", (SYS_CLOSE, 0, (STDIO_SLOT,))),
    ]


def plan_landlock_rules(ruleset_fd: int, rules, handled_fs: int) -> list:
    """Steps that add a Landlock rule per (path, rights, required, is_dir), opening each path
    in the cage's mount tree. Rules that are not required are skipped where the path is
    missing there (a failed open leaves -1 in the slot, so the rule step fails too)."""
    from sandboy.confine.landlock import FILE_RIGHTS, RULE_PATH_BENEATH
    from sandboy.confine._libc import SYS_LANDLOCK_ADD_RULE, s32

    steps = []
    for path, rights, required, is_dir in rules:
        rights &= handled_fs if is_dir else handled_fs & FILE_RIGHTS
        if not rights:
            continue
        optional = not required
        flags = O_PATH | O_CLOEXEC | (O_DIRECTORY if is_dir else 0)
        attr = u64(rights) + s32(-1)  # struct landlock_path_beneath_attr (packed), fd filled in
        steps += [
            (f"open {path} for its Landlock rule", (SYS_OPENAT, step_flags(optional, RULE_SLOT), AT_FDCWD,
                                                    _path(path), flags)),
            (f"Landlock rule for {path}", (SYS_LANDLOCK_ADD_RULE, step_flags(optional), ruleset_fd,
                                          RULE_PATH_BENEATH, (RULE_SLOT, attr, 8), 0)),
            (f"close {path}", (SYS_CLOSE, step_flags(True), (RULE_SLOT,))),
        ]
    return steps


def lost_without(policy, grants: dict, tmp, abi: int) -> list:
    """What the tier would prevent for this policy and nothing else does."""
    lost = [LOST_WITHOUT["mount"]]
    if any(is_within(path, "/dev") or path == "/" for path in grants
           if path not in {f"/dev/{name}" for name in DEVICES}):
        lost.append(LOST_WITHOUT["dev"])
    if getattr(getattr(policy, "ipc", None), "sysv", False):
        lost.append(LOST_WITHOUT["ipc"])
    if any(is_within("/proc", path) or is_within(path, "/proc") for path in grants):
        lost.append(LOST_WITHOUT["pid"])
    if no_network(policy.net) and policy.net.unix and abi < 6:
        lost.append(LOST_WITHOUT["net"])
    if no_network(policy.net):
        lost.append(LOST_WITHOUT["netinfo"])
    if tmp:
        lost.append(LOST_WITHOUT["tmp"])
    return lost


def unavailable_report() -> dict:
    ok, why = availability()
    return {"available": ok, "reason": why}


def _path(path: str) -> bytes:
    return os.fsencode(path) + b"\0"


def _mount_attr(attr_set: int = 0, attr_clr: int = 0) -> bytes:
    return u64(attr_set) + u64(attr_clr) + u64(0) + u64(0)  # struct mount_attr (size 32)


def plan_user_map(uid: int, gid: int) -> list:
    """Map the caller's uid and gid to themselves in the new user namespace. The child writes
    its own maps (allowed for exactly its own ids once setgroups is denied), so nothing needs
    to wait for the parent."""
    steps = []
    for name, text in (("setgroups", b"deny"), ("uid_map", b"%d %d 1\n" % (uid, uid)),
                       ("gid_map", b"%d %d 1\n" % (gid, gid))):
        path = _path(f"/proc/self/{name}")
        steps += [
            (f"open {name}", (SYS_OPENAT, step_flags(save=1), AT_FDCWD, path, O_WRONLY | O_CLOEXEC)),
            (f"write {name}", (SYS_WRITE, 0, (1,), text, len(text))),
            (f"close {name}", (SYS_CLOSE, 0, (1,))),
        ]
    return steps


# The uid's kernel objects no rlimit bounds, counted per uid and charged to the parent user
# namespace's uid too: a command opening inotify instances until EMFILE held the uid's whole
# `user.max_inotify_instances` (128) while it ran, and every other program of that uid got EMFILE
# (as root: every root process of the machine; redcage11). The cage's user namespace gets bounds
# of its own — a fraction of the kernel's defaults (128 instances and groups; watches and marks
# scale with memory, 192,536 and 205,039 here) — so the command takes at most that much of the
# uid's; the host's own bounds still apply on top. Written through the host's /proc/sys/user,
# which answers for the writer's user namespace, while the init still holds its capabilities
# there (CAP_SYS_RESOURCE in it). Optional steps, like the pending-signals cap: a /proc/sys
# mounted read-only (a container) leaves the kernel's bounds, as without the tier.
USER_LIMITS = {"max_inotify_instances": 16, "max_inotify_watches": 16384,
               "max_fanotify_groups": 16, "max_fanotify_marks": 16384}


def plan_user_limits() -> list:
    """Bound the cage's user namespace's inotify and fanotify objects (`USER_LIMITS`)."""
    steps = []
    for name, value in USER_LIMITS.items():
        text = b"%d\n" % value
        steps += [
            (f"open user.{name}", (SYS_OPENAT, step_flags(True, save=1), AT_FDCWD, _path(f"/proc/sys/user/{name}"),
                                   O_WRONLY | O_CLOEXEC)),
            (f"write user.{name}", (SYS_WRITE, step_flags(True), (1,), text, len(text))),
            (f"close user.{name}", (SYS_CLOSE, step_flags(True), (1,))),
        ]
    return steps


def write_roots(grants: dict, tmp) -> list:
    """The topmost paths with any write right, outside the trees the tier replaces and
    without the private `{tmp}` (mounted fresh instead)."""
    from sandboy.confine import landlock

    writing = landlock.WRITE & ~landlock.READ
    roots = sorted(path for path, rights in grants.items()
                   if rights & writing and path != tmp and not is_within_any(path, PRIVATE_TREES))
    top, kept = [], PathSet()  # sorted: a root's parents come before it
    for path in roots:
        if not kept.covers(path):
            top.append(path)
            kept.add(path)
    return top


# Sizes of what the tier mounts. A tmpfs is RAM: without a size the kernel allows half of the host's memory per
# mount, and its pages count against no rlimit of the command (RLIMIT_AS does not see them), so
# {tmp} plus /dev/shm let one cage fill the whole machine. /dev/shm gets Docker's default; {tmp}
# gets the run's memory limit (`limits.memory_mib`) or, without one, a quarter of the RAM.
SHM_SIZE = b"64m"
# A tmpfs's `size` bounds its data pages only. Every inode (an empty file, a directory, a short
# symlink) costs kernel memory outside it, and tmpfs keeps user xattrs in kernel memory charged to
# its inode space (1 KiB per allowed inode); the default inode count is half the RAM's pages. In
# the 64 MiB /dev/shm a command made 3,085,445 empty files (1.1 GiB of unreclaimable slab) or
# 52,614 xattrs of 60 KB (3.3 GiB) on this 24 GiB host (redcage12). One inode per 4 KiB of size
# keeps the inodes' slab under a fifth of the size and the xattrs under a quarter.
BYTES_PER_INODE = 4096
SHM_OPTIONS = b"size=" + SHM_SIZE + b",nr_inodes=16k"  # 64 MiB / 4 KiB
# The private devpts: without `max` a cage held every pty the kernel hands out beyond the host's
# reserve (kernel.pty.max - kernel.pty.reserve: 3071 here), so no other container or sandbox could
# open one while it ran. A build or test needs a handful.
PTY_MAX = b"64"
TMP_SIZE_DEFAULT = b"25%"


def tmp_options(memory_mib) -> bytes:
    """`size` and `nr_inodes` of the private {tmp} (`nr_inodes` takes no percentage: a quarter of
    the RAM is counted here)."""
    if memory_mib:
        size, inodes = b"%dm" % memory_mib, memory_mib * (1 << 20) // BYTES_PER_INODE
    else:
        size, inodes = TMP_SIZE_DEFAULT, os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 4 // BYTES_PER_INODE
    return b"size=%s,nr_inodes=%d" % (size, max(inodes, 1024))


_OPENAT2: list = []


def openat2_works() -> bool:
    """Can this process (and so the cage's child, before its own filter) call openat2? A
    container's seccomp filter may refuse it (Sandboy's own answers ENOSYS); asked once."""
    if not _OPENAT2:
        try:
            os.close(_libc.syscall(SYS_OPENAT2, AT_FDCWD, b"/\0", NO_SYMLINKS_HOW, len(NO_SYMLINKS_HOW)))
            _OPENAT2.append(True)
        except OSError:
            _OPENAT2.append(False)
    return _OPENAT2[0]


def plan_mounts(roots, tmp=None, tty=False, protected=(), memory_mib=None, exact=True, denied=()) -> list:
    """The mount tree (module docstring). `roots`: write roots (existing, symlink-resolved);
    `protected`: paths inside them bound read-only over themselves (fs.protect and its
    defaults: .git/config, .git/hooks, start-up files), skipped if gone by the time a run starts.
    `denied`: denied paths inside them (Landlock refuses every access, not chmod or utimensat),
    bound read-only over themselves too, without pinning their directories (Landlock's split
    already refuses renaming anything on the way to a denied path).

    `exact` (openat2 works): each write root is copied from, and attached at, the path the build
    resolved with no symlink followed on the way (RESOLVE_NO_SYMLINKS): a root's path is a
    realpath, so a symlink there now was swapped in since the build — between two runs of a
    prebuilt or reused cage, or by a process running meanwhile — and following it attached the
    link's target, any directory, read-write (metadata of every file there then changeable,
    outside every grant: session 8). Such a run is refused (ELOOP, 125) instead."""
    everything_writable = "/" in roots
    devices = DEVICES + (("tty",) if tty else ())
    # Each write root and device is copied into a slot of its own (a /dev/pts with a tty too),
    # all below PROTECT_SLOT: counted before any step is made (step_flags refuses a slot past
    # MAX_SLOTS with a ValueError: 65 write roots were a traceback, not this refusal)
    copies = (0 if everything_writable else len(roots)) + len(devices) + (1 if tty else 0)
    if 1 + copies >= COPY_SLOT_LIMIT:
        raise CageError(f"{len(roots)} write roots: the namespace tier copies at most "
                        f"{COPY_SLOT_LIMIT - 2 - (copies - len(roots))} (merge them into fewer directories)")
    steps = [("make / private", (SYS_MOUNT, 0, None, b"/\0", None, MS_REC | MS_PRIVATE, None))]
    slot = 1
    attach = []
    if not everything_writable:
        for root in roots:
            if exact:
                steps += [
                    (f"open write root {root} (no symlink on the way)",
                     (SYS_OPENAT2, step_flags(save=RULE_SLOT), AT_FDCWD, _path(root), NO_SYMLINKS_HOW,
                      len(NO_SYMLINKS_HOW))),
                    (f"copy write root {root}", (SYS_OPEN_TREE, step_flags(save=slot), (RULE_SLOT,), b"\0",
                                                 OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | AT_EMPTY_PATH)),
                    (f"close write root {root}", (SYS_CLOSE, 0, (RULE_SLOT,))),
                ]
            else:
                steps.append((f"copy write root {root}", (SYS_OPEN_TREE, step_flags(save=slot), AT_FDCWD, _path(root),
                                                          OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE)))
            # a device node in a write root opens nothing either (the same as every other mount)
            steps.append((f"make the copy of write root {root} nodev",
                          (SYS_MOUNT_SETATTR, 0, (slot,), b"\0", AT_EMPTY_PATH | AT_RECURSIVE,
                           _mount_attr(MOUNT_ATTR_NODEV), 32)))
            attach.append((root, slot))
            slot += 1
    dev_slots = []
    if tty:
        # --tty: the command's terminal is a pty of the host's devpts (Sandboy relays it), and
        # ttyname(3) looks for it by name: bind that devpts rather than a private one.
        devices += ("pts",)
    for name in devices:
        steps.append((f"copy /dev/{name}", (SYS_OPEN_TREE, step_flags(save=slot), AT_FDCWD, _path(f"/dev/{name}"),
                                             OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC)))
        dev_slots.append((name, slot))
        slot += 1
    steps.append(("mount /proc", (SYS_MOUNT, 0, b"proc\0", b"/proc\0", b"proc\0",
                                  MS_NOSUID | MS_NODEV | MS_NOEXEC, PROC_OPTIONS)))
    if not everything_writable:
        # nodev too: the only device nodes a cage opens are its minimal /dev's (own mounts, made
        # below); a chroot's bound /dev or the nodes debootstrap made on disk under a read grant
        # were raw disks and other terminals by another path (session 8)
        steps.append((READ_ONLY_LABEL, (SYS_MOUNT_SETATTR, 0, AT_FDCWD, b"/\0", AT_RECURSIVE,
                                        _mount_attr(MOUNT_ATTR_RDONLY | MOUNT_ATTR_NODEV), 32)))
    steps.append(("mount /dev", (SYS_MOUNT, 0, b"tmpfs\0", b"/dev\0", b"tmpfs\0",
                                 MS_NOSUID | MS_NODEV | MS_NOEXEC, b"mode=0755,size=64k\0")))
    for name in ("pts", "shm"):
        steps.append((f"mkdir /dev/{name}", (SYS_MKDIRAT, 0, AT_FDCWD, _path(f"/dev/{name}"), 0o755)))
    for name, from_slot in dev_slots:
        node = _path(f"/dev/{name}")
        # A bound node is the HOST's inode (devtmpfs keeps the host's flags: read-write): as
        # root the command's `chmod 000 /dev/null` or `touch /dev/null` changed the host's
        # /dev/null for every process on the machine (--tty: every pty of the host's devpts).
        # A read-only copy refuses metadata changes (EROFS); reading and writing a device node
        # do not need a writable mount (open(2) takes no write access for special files).
        read_only = (f"make the copy of /dev/{name} read-only", (SYS_MOUNT_SETATTR, 0, (from_slot,), b"\0",
                                                                 AT_EMPTY_PATH, _mount_attr(MOUNT_ATTR_RDONLY), 32))
        if name == "pts":
            steps += [read_only,
                      (f"bind /dev/{name}", (SYS_MOVE_MOUNT, 0, (from_slot,), b"\0", AT_FDCWD, node,
                                              MOVE_MOUNT_F_EMPTY_PATH)),
                      (f"close copy of /dev/{name}", (SYS_CLOSE, 0, (from_slot,)))]
            continue
        steps += [
            (f"create /dev/{name}", (SYS_OPENAT, step_flags(save=slot), AT_FDCWD, node,
                                     O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o666)),
            (f"close /dev/{name}", (SYS_CLOSE, 0, (slot,))),
            read_only,
            (f"bind /dev/{name}", (SYS_MOVE_MOUNT, 0, (from_slot,), b"\0", AT_FDCWD, node, MOVE_MOUNT_F_EMPTY_PATH)),
            (f"close copy of /dev/{name}", (SYS_CLOSE, 0, (from_slot,))),
        ]
    if not tty:
        steps.append(("mount /dev/pts", (SYS_MOUNT, 0, b"devpts\0", b"/dev/pts\0", b"devpts\0",
                                         MS_NOSUID | MS_NOEXEC, b"newinstance,ptmxmode=0666,mode=0620,max=" + PTY_MAX + b"\0")))
    steps.append(("mount /dev/shm", (SYS_MOUNT, 0, b"tmpfs\0", b"/dev/shm\0", b"tmpfs\0",
                                     MS_NOSUID | MS_NODEV | MS_NOEXEC, b"mode=1777," + SHM_OPTIONS + b"\0")))
    for name, target in DEV_LINKS:
        steps.append((f"link /dev/{name}", (SYS_SYMLINKAT, 0, _path(target), AT_FDCWD, _path(f"/dev/{name}"))))
    steps.append(("make /dev read-only", (SYS_MOUNT_SETATTR, 0, AT_FDCWD, b"/dev\0", 0,
                                          _mount_attr(MOUNT_ATTR_RDONLY), 32)))
    for root, from_slot in attach:
        if exact:
            steps += [
                (f"open the mount point {root} (no symlink on the way)",
                 (SYS_OPENAT2, step_flags(save=RULE_SLOT), AT_FDCWD, _path(root), NO_SYMLINKS_HOW,
                  len(NO_SYMLINKS_HOW))),
                (f"attach write root {root}", (SYS_MOVE_MOUNT, 0, (from_slot,), b"\0", (RULE_SLOT,), b"\0",
                                               MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH)),
                (f"close the mount point {root}", (SYS_CLOSE, 0, (RULE_SLOT,))),
            ]
        else:
            steps.append((f"attach write root {root}", (SYS_MOVE_MOUNT, 0, (from_slot,), b"\0", AT_FDCWD, _path(root),
                                                        MOVE_MOUNT_F_EMPTY_PATH)))
        steps.append((f"close copy of {root}", (SYS_CLOSE, 0, (from_slot,))))
    if tmp:
        steps.append((f"mount a private {tmp}", (SYS_MOUNT, 0, b"tmpfs\0", _path(tmp), b"tmpfs\0",
                                                  MS_NOSUID | MS_NODEV, b"mode=0700," + tmp_options(memory_mib) + b"\0")))
    optional = step_flags(True)
    for path in pinned_ancestors(roots, protected):
        # A directory holding a mount point can still be renamed (only the mount point itself
        # is EBUSY): `mv .git .git.old; mkdir .git` would leave the host a fresh .git with a
        # planted config beside the protected one. A read-write copy of each directory between
        # the write root and a protected path, bound over itself, makes it a mount point too.
        steps += [
            (f"copy {path} (holds a protected path)", (SYS_OPEN_TREE, step_flags(True, PROTECT_SLOT), AT_FDCWD,
                                                       _path(path), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE)),
            (f"pin {path} in place", (SYS_MOVE_MOUNT, optional, (PROTECT_SLOT,), b"\0", AT_FDCWD, _path(path),
                                      MOVE_MOUNT_F_EMPTY_PATH)),
            (f"close copy of {path}", (SYS_CLOSE, optional, (PROTECT_SLOT,))),
        ]
    for path in denied:
        if is_within_any(path, protected):
            continue  # read-only already
        steps += [
            (f"copy denied {path}", (SYS_OPEN_TREE, step_flags(True, PROTECT_SLOT), AT_FDCWD, _path(path),
                                     OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | AT_SYMLINK_NOFOLLOW)),
            (f"make the copy of denied {path} read-only", (SYS_MOUNT_SETATTR, optional, (PROTECT_SLOT,), b"\0",
                                                           AT_EMPTY_PATH | AT_RECURSIVE,
                                                           _mount_attr(MOUNT_ATTR_RDONLY), 32)),
            (f"keep denied {path} read-only", (SYS_MOVE_MOUNT, optional, (PROTECT_SLOT,), b"\0", AT_FDCWD,
                                                _path(path), MOVE_MOUNT_F_EMPTY_PATH)),
            (f"close copy of denied {path}", (SYS_CLOSE, optional, (PROTECT_SLOT,))),
        ]
    for path in protected:
        # a read-only copy of the path's own subtree, made while detached, then put over it
        steps += [
            # AT_SYMLINK_NOFOLLOW: a protected symlink (a dotfile link) is bound as itself
            (f"copy protected {path}", (SYS_OPEN_TREE, step_flags(True, PROTECT_SLOT), AT_FDCWD, _path(path),
                                        OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | AT_SYMLINK_NOFOLLOW)),
            (f"make the copy of {path} read-only", (SYS_MOUNT_SETATTR, optional, (PROTECT_SLOT,), b"\0",
                                                    AT_EMPTY_PATH | AT_RECURSIVE, _mount_attr(MOUNT_ATTR_RDONLY), 32)),
            (f"protect {path}", (SYS_MOVE_MOUNT, optional, (PROTECT_SLOT,), b"\0", AT_FDCWD, _path(path),
                                 MOVE_MOUNT_F_EMPTY_PATH)),
            (f"close copy of {path}", (SYS_CLOSE, optional, (PROTECT_SLOT,))),
        ]
    return steps


def pinned_ancestors(roots, protected) -> list:
    """The directories strictly between a write root and each protected path inside it,
    shallowest first: each becomes a mount point so that it cannot be renamed or removed (a
    rename would carry the protected path away and let a new one take its place)."""
    everything_writable = "/" in roots
    pinned: set = set()  # a set: a step policy may protect thousands of paths (`not in list` was quadratic)
    for path in protected:
        root = "/" if everything_writable else next((r for r in roots if is_within(path, r)), None)
        if root is None:
            continue
        parent = os.path.dirname(path)
        chain = []
        while parent != root and is_within(parent, root) and parent != os.path.dirname(parent):
            chain.append(parent)
            parent = os.path.dirname(parent)
        pinned.update(chain)
    return sorted(pinned, key=lambda p: (p.count("/"), p))


# --- availability ---------------------------------------------------------------------------

_AVAILABLE: list = []
ALL = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWPID | CLONE_NEWNET


def availability() -> tuple:
    """(True, "") when this process can make the tier's namespaces and mounts, else (False,
    why). Probed once per process by a real child running the tier's own first steps (user
    map, private /, a new /proc, read-only remount, a tmpfs): a container's seccomp, Ubuntu's
    AppArmor userns restriction (the clone works, the mounts are refused) and
    `user.max_user_namespaces = 0` all show here."""
    if forced_off():
        return False, f"{FORCE_OFF_ENV}=0"
    if _AVAILABLE:
        return _AVAILABLE[0]
    # The note first: a known-good note answers without the sysctls (/proc/sys lookups cost
    # 20-30 µs a file here). A sysctl turned off since the note was written is met like any
    # other refusal that comes later in the same boot (see `_note_path`): that run fails closed.
    reason = None
    if not _known_good():
        from sandboy.confine import namespace_probe  # once per boot and uid: not on a run's path

        reason = namespace_probe.static_refusal()
        if reason is None:
            reason = namespace_probe.probe()
            if reason is None:
                namespace_probe.remember_good()
    _AVAILABLE.append((reason is None, reason or ""))
    return _AVAILABLE[0]


# A positive probe is remembered for this boot and uid in Sandboy's cache directory, so
# `sandboy run` does not pay a probe child at every start (docs/performance.md). Should the
# kernel start refusing later in the same boot (a sysctl changed), the run fails closed (125,
# naming the clone or mount step) and `forget` removes the note, so the next run probes again.
def _note_path():
    from sandboy.cache_places import cache_dir

    # not the name of the notes that held the boot id (namespaces-ok-UID): a Sandboy of before
    # and one of now on the same machine would otherwise each take the other's note as stale
    return os.path.join(cache_dir(), f"namespaces-ok-{os.geteuid()}-kernel")


def _note_text() -> bytes:
    """What a note holds: the kernel's release (another kernel may refuse what this one allows)."""
    return os.uname().release.encode()


def _boot_started_ns() -> int:
    """When this boot began, on the wall clock: a note last written before it is from an
    earlier boot. Two clock readings (vDSO, no system call); the boot id under /proc/sys, read
    before, cost 45-90 µs of every `sandboy run` here (a /proc/sys lookup is slow the first time
    in a process). A wall clock stepped back since the boot can make an earlier boot's note look
    current: it is then met as any later refusal is (one run fails closed, the note is forgotten)."""
    return time.clock_gettime_ns(time.CLOCK_REALTIME) - time.clock_gettime_ns(time.CLOCK_BOOTTIME)


def _known_good() -> bool:
    # only a note sealed by this user's key under its very name (`_libc.read_private`, as the plan
    # cache reads its entries): one another user put in a cache directory of theirs skipped the
    # probe and its static refusals (session 11), and so did one a checkout shipped in a cache
    # kept in the working copy (owner and mode alone: session 14, ADR 0030). Its time is in the
    # sealed body (`note_body`), not the file's mtime, which whoever can touch the file sets.
    from sandboy.confine._libc import read_private

    body = read_private(_note_path(), 512)
    if body is None:
        return False
    release, _, written = body.partition(b"\0")
    return release == _note_text() and written.isdigit() and int(written) > _boot_started_ns()


def note_body() -> bytes:
    """What a note holds: the kernel's release and when it was written (after this boot began)."""
    return _note_text() + b"\0" + str(time.clock_gettime_ns(time.CLOCK_REALTIME)).encode()


def forget() -> None:
    """A tier step failed at run time: probe again next time (see `_note_path`)."""
    try:
        os.unlink(_note_path())
    except OSError:
        pass
