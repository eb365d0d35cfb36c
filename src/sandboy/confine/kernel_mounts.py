"""Mounts of the kernel's own file systems below a write root, which a cage refuses.

Why: Landlock grants a write root with everything beneath it, other mounts included, and the
namespace tier copies a write root with its submounts (read-write where the host has them so).
A chroot or container root filesystem being built often holds the host's `/proc`, `/sys` or
`/dev` (debootstrap, mock, a bind for a build): as root — capabilities dropped, still uid 0 —
the command then wrote the host's sysctls through `<root>/proc/sys` (`kernel.core_pattern`
runs a program as root at the next crash), `<root>/proc/sysrq-trigger`, driver and kernel
settings through `<root>/sys`, cgroup limits, and raw block devices through a bound `/dev`:
writing those needs uid 0 and the file's mode, no capability (session 8 red team). Only a path
strictly below a write root is refused: a grant of such a mount itself (`write = ["/proc"]`,
`/` with the defaults opted out) is the policy's explicit choice, and /dev and /proc are the
namespace tier's own (replaced by private ones; without the tier a grant there is reported in
`degraded`).
"""

import os

from sandboy.confine._libc import above_stdio
from sandboy.paths import is_within

# (`sandboy.errors` is imported where a refusal is raised: a plan-cache hit with a write root asks
# `below` and the git check asks `directory_times_tracked`, and neither loads the exception
# classes for an answer that is almost always "none": ≈ 0.1 ms of a fresh process, session 13)

# File systems whose files are the kernel's own interfaces (settings, devices, cgroups, ...).
KERNEL_FILE_SYSTEMS = frozenset({
    "proc", "sysfs", "cgroup", "cgroup2", "devtmpfs", "devpts", "debugfs", "tracefs", "securityfs",
    "configfs", "bpf", "binfmt_misc", "pstore", "efivarfs", "fusectl", "mqueue", "rpc_pipefs", "nfsd",
    "selinuxfs", "smackfs",
})


MOUNTINFO = "/proc/self/mountinfo"

# File systems whose directories' ctime moves with every entry made, removed or renamed in them,
# as the kernel's VFS does for a local disk or memory file system. Elsewhere it may not: procfs
# lists a new process with /proc's times unchanged (measured), sysfs and cgroupfs are the kernel's
# own, a network or FUSE file system answers from a server or a cache. What is decided from a
# directory's ctime across runs is decided only on these: a deny glob's record
# (`deny_globs.GlobWatch.state`: elsewhere matched at every launch) and the git check's walk index
# (`directory_times_tracked`: elsewhere every directory is listed again).
DIRECTORY_TIMES_TRACKED = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "overlay", "f2fs", "zfs",
                                     "bcachefs"})


def _unescape(field: str) -> str:
    """A mountinfo path field: spaces, tabs, newlines and backslashes are written as \\ooo."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1:i + 4].isdigit() and len(field[i + 1:i + 4]) == 3:
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def points_below(roots, mountinfo: str = MOUNTINFO, table=None) -> list:
    """The mount points strictly below one of `roots` (realpaths), whatever their file system
    (the git check asks each whether its timestamps are whole seconds). `table`: the mount table's
    text as `read_table` gave it moments ago in this run (a plan-cache hit reads it once for both
    questions), else read now. OSError where the table cannot be read."""
    roots = [r for r in roots if r != "/"]
    if not roots:
        return []
    text = read_table(mountinfo) if table is None else table
    if not _may_hold_points_below(roots, text):
        return []
    found = []
    for line in text.splitlines():
        fields = line.split(" ")
        if len(fields) > 4:
            point = _unescape(fields[4])
            if any(point != root and is_within(point, root) for root in roots):
                found.append(point)
    return found


def read_table(mountinfo: str = MOUNTINFO) -> str:
    """The mount table as this process sees it (`/proc/self/mountinfo`'s text). OSError where it
    cannot be read. Read once per question, or once for both where a run asks them together
    (`below`, `points_below`: ≈ 0.1 ms a read in a fresh process)."""
    fd = os.open(mountinfo, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return b"".join(iter(lambda: os.read(fd, 65536), b"")).decode("utf-8", "surrogateescape")
    finally:
        os.close(fd)


def file_systems(devices, table=None) -> dict:
    """{st_dev: file system type} for `devices`, from this process's mount table (`table`: its
    text as `read_table` gave it moments ago, else read now; a device it does not list — a btrfs
    subvolume not mounted itself — is absent). {} where it cannot be read."""
    if table is None:
        try:
            table = read_table()
        except OSError:
            return {}
    found = {}
    for device in devices:
        # the lines whose third field is this device's "major:minor" (a mount point or root field
        # holding the same text is told apart by the field's place): one search of the text per
        # device, not a parse of every line (≈ 70 µs of a write-root run with 40 mounts, session 13)
        needle = f" {os.major(device)}:{os.minor(device)} "
        at = table.find(needle)
        while at >= 0:
            start, end = table.rfind("\n", 0, at) + 1, table.find("\n", at)
            fields = (table[start:] if end < 0 else table[start:end]).split(" ")
            try:
                if fields[2] == needle[1:-1]:
                    found[device] = fields[fields.index("-", 6) + 1]  # (the last line's, as before)
            except (ValueError, IndexError):
                pass
            at = table.find(needle, at + 1)
    return found


def directory_times_tracked(roots, table: str) -> bool:
    """Whether every file system a walk of `roots` (realpaths) meets is one of
    DIRECTORY_TIMES_TRACKED: the one each root lies on (by its st_dev) and each mounted below one.
    False where a root cannot be stat'ed. On a FUSE or network write root whose server keeps a
    directory's times when an entry is made in it, a listing kept by ctime would hide a `.git`
    planted there (rvsec12)."""
    try:
        devices = {os.stat(root).st_dev for root in roots}
    except OSError:
        return False
    kinds = file_systems(devices, table)
    if any(kinds.get(device) not in DIRECTORY_TIMES_TRACKED for device in devices):
        return False
    return not _mounted_below(roots, table, lambda kind: kind not in DIRECTORY_TIMES_TRACKED)


def _may_hold_points_below(roots, table: str) -> bool:
    """False where `table` surely holds no mount point strictly below one of `roots`: the usual
    answer, at once — a mount point follows a space, and is written as it is unless it holds a
    character mountinfo escapes (a root holding one, or `/`, is looked for line by line)."""
    return not all(not r.endswith("/") and not any(c in r for c in " \t\n\\") and f" {r}/" not in table
                   for r in roots)


def _mounted_below(roots, table: str, wanted) -> list:
    """[(mount point, file system type)] of the mounts in `table` strictly below one of `roots`
    whose type `wanted(type)` accepts."""
    if not _may_hold_points_below(roots, table):
        return []
    found = []
    for line in table.splitlines():
        fields = line.split(" ")
        try:
            fstype = fields[fields.index("-", 6) + 1]
        except (ValueError, IndexError):
            continue
        if wanted(fstype):
            point = _unescape(fields[4])
            if any(point != root and is_within(point, root) for root in roots):
                found.append((point, fstype))
    return found


def below(roots, mountinfo: str = MOUNTINFO, table=None) -> list:
    """[(mount point, file system type)] of kernel file systems mounted strictly below one of
    `roots` (realpaths), as this process sees its mount table. `table`: its text as `read_table`
    gave it moments ago (else read now). CageError where the table cannot be read."""
    roots = [r for r in roots if r != "/"]
    if not roots:
        return []
    if table is None:
        try:
            table = read_table(mountinfo)
        except OSError as exc:
            from sandboy.errors import CageError

            # fail closed: an unread table would pass every mount below the roots (rvsec8)
            raise CageError(f"cannot read {mountinfo} to look for the kernel's file systems below the write roots "
                            f"({exc.strerror}); refusing rather than running unchecked") from None
    return _mounted_below(roots, table, KERNEL_FILE_SYSTEMS.__contains__)


def refuse(roots, source: str) -> None:
    """CageError (125) naming the first kernel file system mounted below one of `roots`. Asked
    when a cage is built, before a reused one runs again (`Cage.still_valid`) and before each
    run of a cage the caller built (`launch.spawn`): the tier copies a write root with the
    submounts it has when a run starts, so one mounted since the build (mock mounts a chroot's
    /proc between its steps) must be met there too."""
    found = below(roots)
    if found:
        from sandboy.errors import CageError

        point, fstype = found[0]
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise CageError(f"{source}: fs.write: {point} is a mount of the kernel's {fstype} file system inside a "
                        f"write root{more}: a command there could change the host's kernel settings or devices "
                        "(as root: sysctls, sysrq-trigger, raw disks). Grant the directories beside it instead, "
                        "or unmount it before the run")


# Whether the mount table may have changed, without reading it: poll(2) on an open mountinfo
# says POLLPRI once for each change of the mount namespace since the file's last look (the
# kernel's `mounts_poll`). One fd per process; `generation()` counts what it reported, so every
# cage compares against the count it last checked at (≈ 1 µs against ≈ 75 µs for a read of
# mountinfo per reuse of a cage). The fd watches the mount namespace the process had when it was
# opened: a caller that enters another one (unshare, setns: a chroot builder) is watched anew
# there — the old fd saw nothing of the new namespace's mounts, and a proc mounted below a
# prebuilt cage's write root in it was copied into the next run (redcage9).
_WATCH = [-1, 0, -1]  # [the fd or -1, the generation (only ever grows), the mount namespace's inode]


def _mount_namespace() -> int:
    try:
        return os.stat("/proc/self/ns/mnt").st_ino
    except OSError:
        return -1


def generation() -> int:
    """A number that changes whenever the mount table may have changed since it was last asked;
    -1 where it cannot be watched (callers then look every time: Cage.kernel_mounts_absent)."""
    import select

    namespace = _mount_namespace()
    if namespace < 0:
        return -1
    if _WATCH[0] >= 0 and namespace != _WATCH[2]:
        os.close(_WATCH[0])  # another mount namespace: watched anew, and every cage looks again
        _WATCH[0] = -1
    if _WATCH[0] < 0:
        try:
            fd = above_stdio(os.open("/proc/self/mountinfo", os.O_RDONLY | os.O_CLOEXEC))
        except OSError:
            return -1
        _WATCH[0], _WATCH[2] = fd, namespace
        _WATCH[1] += 1  # a new watch knows nothing of the changes before it
    poller = select.poll()
    poller.register(_WATCH[0], select.POLLPRI)
    if poller.poll(0):
        _WATCH[1] += 1
    return _WATCH[1]


def _forget_after_fork() -> None:
    # (the fd is the parent's open file: its change state is shared; the child takes a new one)
    _WATCH[0] = -1
    _WATCH[1] += 1


os.register_at_fork(after_in_child=_forget_after_fork)
