"""The memory cgroup of a gate step's `limits.memory_mib` (`MemoryCgroup`, ADR 0027), and — from
pids_cgroup.py, re-exported here — the pids cgroup for `limits.processes` when running as root.
"""

import os

from sandboy.confine._libc import above_stdio
from sandboy.confine.pids_cgroup import (  # noqa: F401  (re-exported: the gate's, doctor's, tests' names)
    NO_PIDS_CGROUP,
    V1_ROOT,
    V2_ROOT,
    PidsCgroup,
    _members,
    _own_v1_dir,
    _own_v2_dir,
    _sweep,
    _write,
)


class MemoryCgroup:
    """One run's memory bound (ADR 0027): a group whose processes together — their pages, the
    page cache and tmpfs files they write — may use at most `mib` MiB more than the group held
    when the run began (`begin`), none of it in swap.

    The command joins it itself, as the first step of its plan (`join_step`: a write of "0"
    through an fd opened here — v1's `tasks`, v2's `cgroup.procs`, see `_join_file`), so nothing of
    it ever runs outside the bound and the supervising process never counts in it. Over the bound, on cgroup v1 the group's
    tasks wait (the OOM killer is disabled for it: `memory.oom_control`) and the supervisor, which
    MUST watch `oom_event_fd` (v1's eventfd notification, `cgroup.event_control`), ends the tree
    itself; cgroup v2 kills the whole group together (`memory.oom.group`).
    `oom_kills()` and `peak_bytes()` say afterwards what the run did (counted from `begin`).

    A runner of many commands keeps one group for them all (`MemoryCgroups`, ADR 0027 session
    8): a group made and removed per run cost ≈ 0.3 ms of the runner's time and more of the
    kernel's (the removed group is freed by a kernel worker). `begin` makes each run start at
    zero: the group's bound becomes `mib` on top of what it holds then (cache and kernel objects
    an earlier run left, which the kernel reclaims first when the bound is near; `reusable`
    keeps that residue small), its peak is reset and its OOM counters are read, so `peak_bytes`
    and `oom_kills` are the run's own.
    """

    def __init__(self, path: str, version: int, mib: int):
        self.path, self.version, self.mib = path, version, mib
        self.swap_bounded = False
        self.join_fd = None       # `_join_file`, open for writing: the child's join step writes to it
        self.oom_event_fd = None  # v1: an eventfd the kernel signals at each OOM of the group
        self.baseline = 0         # bytes the group held when the run began (an earlier run's residue)
        self._limit = None        # the bound last written, bytes
        self._pids_max = None     # v2: the pids.max last written
        self._oom_base = 0        # the group's OOM kill count when the run began
        self._fds = {}            # name -> fd of the files read or written at every run
        self.peak_resettable = version == 1  # v2: memory.peak is reset per fd on Linux >= 6.12 only

    @classmethod
    def create(cls, mib: int, pids_max: int = 0) -> "MemoryCgroup | None":
        """A fresh group bounded to `mib` MiB, or None where none can be made (not root, no
        memory controller, not delegated). Nothing is left behind on failure; groups of this
        shape whose maker is gone (empty, named after a pid that is no more) are swept first.

        `pids_max`: the run's `limits.processes`. On cgroup v2 there is one hierarchy, so joining
        this group takes the command out of the gate's pids group: the limit is then written here
        too. (On v1 the pids hierarchy is separate and the gate's group still counts the run.)
        The v2 path is not exercised on the development host (cgroup v1)."""
        name = f"sandboy-{os.getpid()}-{os.urandom(4).hex()}"
        candidates = []
        v1 = _own_v1_dir("memory")
        if v1 and os.path.isfile(os.path.join(v1, "memory.limit_in_bytes")):
            candidates.append((os.path.join(v1, name), 1))
        v2 = _own_v2_dir()
        if v2 and os.path.basename(v2).startswith("sandboy-"):
            v2 = os.path.dirname(v2)  # inside our own pids group (PidsCgroup): beside it, not in it
        v2_controllers = []
        if v2 and os.path.isfile(os.path.join(V2_ROOT, "cgroup.controllers")):
            try:
                with open(os.path.join(v2, "cgroup.subtree_control")) as fh:
                    v2_controllers = fh.read().split()
            except OSError:
                pass
            if "memory" in v2_controllers:
                candidates.append((os.path.join(v2, name), 2))
        for path, version in candidates:
            # what a gate killed outright left there (its group, empty once its step's processes
            # are gone, named after its pid): nothing else removes it (session 14: six in one
            # group of the test machine), as the pids groups (PidsCgroup.create)
            _sweep(os.path.dirname(path), "sandboy-")
            try:
                os.mkdir(path, 0o755)
            except OSError:
                continue
            group = cls(path, version, mib)
            try:
                if version == 2 and pids_max and "pids" not in v2_controllers:
                    raise OSError("no pids controller beside the memory one")
                group._bound()
                group.begin(mib, pids_max)
                return group
            except OSError:
                group.remove()
        return None

    @classmethod
    def available(cls) -> bool:
        """Can a run's memory be bounded in a cgroup here? As root with a writable memory
        controller: probed by a group made and removed at once."""
        group = cls.create(64) if os.geteuid() == 0 else None
        if group is None:
            return False
        group.remove()
        return True

    def _fd(self, name: str, flags=os.O_RDONLY) -> int:
        """An fd kept open on one of the group's files: read with pread, written with pwrite at 0
        (the kernel formats and parses the value afresh each time; an open, a read and a close
        through a Python file object cost 14-70 us)."""
        fd = self._fds.get((name, flags))
        if fd is None:
            fd = self._fds[name, flags] = above_stdio(os.open(os.path.join(self.path, name), flags | os.O_CLOEXEC))
        return fd

    def _read_int(self, name: str) -> int:
        return int(os.pread(self._fd(name), 32, 0))

    def _bound(self) -> None:
        """The settings made once, when the group is made (the bound itself is `begin`'s)."""
        if self.version == 2:
            try:
                _write(os.path.join(self.path, "memory.swap.max"), 0)
                self.swap_bounded = True
            except FileNotFoundError:  # no swap accounting: a host with swap may then spill the
                # group into it; said as degraded (Supervision._end_memory_group, swap_degraded)
                pass
            # The kernel's OOM killer kills the whole group at once (not exercised here: v1 host).
            # ADR 0027 says what that leaves open: the killer's victim choice and mm-sharing kill.
            _write(os.path.join(self.path, "memory.oom.group"), 1)
            try:  # Linux >= 6.12: a write resets the peak seen through this fd (per-fd watermark)
                os.pwrite(self._fd("memory.peak", os.O_RDWR), b"reset", 0)
                self.peak_resettable = True
            except OSError:  # an older kernel: the peak cannot be reset, the group is not reused
                self.peak_resettable = False
        else:
            try:
                # memory+swap: bounded with the memory itself (`_set_limit`), so nothing of the
                # group may be swapped out
                self._fd("memory.memsw.limit_in_bytes", os.O_RDWR)
                self.swap_bounded = True
            except FileNotFoundError:  # no swap accounting (swapaccount=0)
                pass
            self.oom_event_fd = above_stdio(os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK))
            control = os.open(os.path.join(self.path, "memory.oom_control"), os.O_RDONLY | os.O_CLOEXEC)
            try:
                _write(os.path.join(self.path, "cgroup.event_control"), f"{self.oom_event_fd} {control}")
            finally:
                os.close(control)
            # The kernel's OOM killer stays out of it: under the namespace tier the PID namespace's
            # init is in the group and shares the SUPERVISOR's memory (ADR 0021), so its rss is the
            # gate's and it may be the largest victim — and an OOM kill also SIGKILLs every process
            # sharing the victim's mm: the gate itself (seen: the supervisor killed). With the
            # killer disabled the group's tasks wait at the bound and the supervisor, told by the
            # OOM event, ends the tree with ordinary signals.
            _write(os.path.join(self.path, "memory.oom_control"), 1)
        # (above fd 2: the command's join step runs after its stdio was put on fd 0-2)
        self.join_fd = above_stdio(os.open(os.path.join(self.path, self._join_file()), os.O_WRONLY | os.O_CLOEXEC))

    def _join_file(self) -> str:
        """The file the command's join step writes "0" to. cgroup v1: `tasks`, which moves the
        calling THREAD; `cgroup.procs` moves its whole thread group and for that takes the global
        cgroup_threadgroup_rwsem for writing (cgroup_procs_write_start), whose first writer after
        a quiet spell waits a full RCU grace period (rcu_sync_enter): ≈ 10 ms of wall clock here,
        on a step lasting a few — the kernel skips that lock for a thread moving itself, as
        nothing can exec or exit under it. Moving the thread is moving the process: the join is
        the first step of the command's own process (Cage.child_plan), which has one thread
        then (the init's CLONE_VM|CLONE_VFORK child, a vfork'd child without the tier, a fork
        under the Python executor: none is made with CLONE_THREAD, and no step before the join
        starts one), and every thread or process it makes later is born in the group.
        docs/performance.md, "Session 9". cgroup v2 has no `tasks`, and its `cgroup.threads`
        refuses a move to another domain group (the memory controller is not threaded)."""
        return "tasks" if self.version == 1 else "cgroup.procs"

    def begin(self, mib: int, pids_max: int = 0) -> None:
        """Before a run (the group holds no process): the run may use `mib` MiB on top of what
        the group holds now, and its peak and OOM kills are counted from here. OSError where a
        setting cannot be written."""
        self.mib = mib
        if self.oom_event_fd is not None:
            try:  # an OOM of an earlier run: all its events were signalled before its tree was gone
                os.eventfd_read(self.oom_event_fd)
            except BlockingIOError:
                pass
        self.baseline = self.usage_bytes()
        self._set_limit((mib << 20) + self.baseline)
        # v2: the run's own process limit, "max" for a run without one (a reused group still holds
        # the limit of an earlier step that had one: a build step after `processes = 8` failed to fork)
        if self.version == 2 and pids_max != (self._pids_max or 0):
            os.pwrite(self._fd("pids.max", os.O_WRONLY), str(pids_max).encode() if pids_max else b"max", 0)
            self._pids_max = pids_max
        if self.version == 2:
            if self.peak_resettable:
                os.pwrite(self._fd("memory.peak", os.O_RDWR), b"reset", 0)
        else:
            os.pwrite(self._fd("memory.max_usage_in_bytes", os.O_RDWR), b"0", 0)  # to the usage now
        self._oom_base = self._oom_count()

    def _set_limit(self, limit: int) -> None:
        if limit == self._limit:
            return
        if self.version == 2:
            os.pwrite(self._fd("memory.max", os.O_WRONLY), str(limit).encode(), 0)
        else:
            # v1 refuses memory+swap below memory: raise memsw first, lower it last (a fresh
            # group's are both unlimited)
            both = ["memory.limit_in_bytes"] + (["memory.memsw.limit_in_bytes"] if self.swap_bounded else [])
            if self._limit is not None and limit > self._limit:
                both.reverse()
            for name in both:
                os.pwrite(self._fd(name, os.O_RDWR), str(limit).encode(), 0)
        self._limit = limit

    def join_step(self) -> tuple:
        """The plan step that moves the command's process into the group, before anything else it
        runs; under the namespace tier after the init forks it, never in the init (Cage.child_plan)."""
        from sandboy.confine._libc import SYS_WRITE

        return ("join the memory cgroup", (SYS_WRITE, False, self.join_fd, b"0", 1))

    def usage_bytes(self) -> int:
        return self._read_int("memory.current" if self.version == 2 else "memory.usage_in_bytes")

    def _oom_count(self) -> int:
        """The group's OOM kill count since it was made (its `oom_kill` key)."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            text = os.pread(self._fd(name), 256, 0).decode()
        except OSError:
            return 0
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def oom_kills(self) -> int:
        """How many processes of the run the OOM killer ended (its bound was reached)."""
        return self._oom_count() - self._oom_base

    def peak_bytes(self) -> int:
        """The most the run held at once beyond the group's residue when it began."""
        name = "memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"
        flags = os.O_RDWR if self.peak_resettable else os.O_RDONLY  # v2: the fd the reset went through
        try:
            return max(0, int(os.pread(self._fd(name, flags), 32, 0)) - self.baseline)
        except (OSError, ValueError):
            return 0

    def reusable(self) -> bool:
        """After a run whose tree is gone: may the next run begin in this group? Not while any
        process is in it (nothing of a run may reach the next), not where the peak cannot be reset
        (v2 before Linux 6.12), and not when the run left more than a small residue (files its
        processes wrote into the page cache or a tmpfs stay charged here): a fresh group then."""
        if not self.peak_resettable or self.join_fd is None or self.pids():
            return False
        try:
            return self.usage_bytes() <= min(RESIDUE_MAX, (self.mib << 20) // 8)
        except OSError:
            return False

    def pids(self) -> list[int]:
        return _members(self.path)

    def remove(self) -> None:
        for fd in (self.join_fd, self.oom_event_fd, *self._fds.values()):
            if fd is not None:
                os.close(fd)
        self.join_fd = self.oom_event_fd = None
        self._fds = {}
        try:
            os.rmdir(self.path)
        except OSError:
            pass


# What an earlier run may leave charged to a reused group (at most an eighth of its bound, and
# 8 MiB): the next run's bound is set above it, so the next run may use up to that much more than
# its bound — by reclaim of page cache, or by deleting what the earlier run left in a tmpfs it can
# write (tmpfs pages are not reclaimable without swap; rvgate8). A `true` step under
# the namespace tier leaves ≈ 0.36 MiB (kernel objects, cache), so ≈ 20 steps share one group.
RESIDUE_MAX = 8 << 20


class MemoryCgroups:
    """Where a runner of many commands (the gate) gets each run's memory group: the group the
    previous run left reusable (`MemoryCgroup.reusable`), else a fresh one. One at a time."""

    def __init__(self, keep: bool = True):
        self.keep = keep  # False: every run gets a fresh group, removed after it (a one-off run)
        self._kept = None

    def take(self, mib: int, pids_max: int = 0) -> "MemoryCgroup | None":
        """A group bounded for one run (`MemoryCgroup.begin`), or None where none can be made."""
        group, self._kept = self._kept, None
        if group is not None:
            try:
                group.begin(mib, pids_max)
                return group
            except OSError:
                group.remove()
        return MemoryCgroup.create(mib, pids_max)

    def give_back(self, group: MemoryCgroup) -> None:
        """After the run, its tree gone: kept for the next run if it may be, else removed."""
        if self.keep and self._kept is None and group.reusable():
            self._kept = group
        else:
            group.remove()

    def available(self) -> bool:
        """`MemoryCgroup.available()`, keeping the probe's group for the first run."""
        if self._kept is None and os.geteuid() == 0:
            self._kept = MemoryCgroup.create(64)
        return self._kept is not None

    def close(self) -> None:
        if self._kept is not None:
            self._kept.remove()
            self._kept = None


def host_has_swap(swaps: str = "/proc/swaps") -> bool:
    """Is a swap device or file in use on the host (a line below /proc/swaps's header)?"""
    try:
        with open(swaps) as fh:
            return len(fh.read().splitlines()) > 1
    except OSError:
        return False


def swap_degraded(group: "MemoryCgroup", has_swap: bool) -> str | None:
    """What a run's memory bound lacks where the kernel does not account swap in memory cgroups
    (v1 booted with swapaccount=0: no memory.memsw.*; v2 with cgroup.memory=noswap: no
    memory.swap.max) and the host has swap to spill to; None where swap is bounded or there is none."""
    if group.swap_bounded or not has_swap:
        return None
    return (f"limits.memory_mib: swap is not accounted in this host's memory cgroups (swapaccount=0 or "
            f"cgroup.memory=noswap) and the host has swap: the run's processes may spill past their "
            f"{group.mib} MiB into swap (the bound holds for what stays in RAM)")


def memory_default_mib(meminfo: str = "/proc/meminfo") -> int:
    """The built-in ceiling's `limits.memory_mib` (ADR 0027): half of the host's RAM, at most
    MEMORY_DEFAULT_CAP_MIB. Half leaves the host, the gate itself and the other half of a CI box
    room while a step's build still gets what a large JVM or webpack build asks; the cap keeps a
    step on a big machine from taking what it could never need for a test run."""
    total_kib = 0
    try:
        with open(meminfo) as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    total_kib = int(line.split()[1])
                    break
    except (OSError, ValueError, IndexError):
        pass
    if not total_kib:
        return MEMORY_DEFAULT_CAP_MIB
    return max(256, min(MEMORY_DEFAULT_CAP_MIB, total_kib // 1024 // 2))


MEMORY_DEFAULT_CAP_MIB = 16384
