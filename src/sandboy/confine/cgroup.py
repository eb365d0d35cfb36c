"""A pids cgroup for `limits.processes` when running as root, and a memory cgroup for a gate
step's `limits.memory_mib` (`MemoryCgroup`, ADR 0027).

Why: RLIMIT_NPROC does not bind uid 0 at all (the kernel exempts the root user), so as root a
fork bomb is only stopped by a cgroup's `pids.max`. Ordinary users get RLIMIT_NPROC instead.
The cgroup also lists every process of the run, which makes the final kill exact.

Moving a task into a cgroup is slow (cgroup v1 takes a global rw-semaphore: ≈ 10 ms per move
here), so a runner of many commands (the gate) joins ONE group itself, once, and every run is
forked inside it: `spawn(..., pids_group=group)` then only rewrites `pids.max` (cheap) to
"what is in the group now + the policy's limit".
"""

# No `from __future__ import annotations`: it imports the `__future__` module at run time
# (≈ 0.59 M instructions, ≈ 0.13 ms), and this module is on `sandboy run`'s path for `limits.processes` as root (docs/performance.md,
# session 7). Python >= 3.11 evaluates these annotations as written.

import os

V1_ROOT = "/sys/fs/cgroup/pids"
V2_ROOT = "/sys/fs/cgroup"


def _own_v2_dir() -> str | None:
    try:
        with open("/proc/self/cgroup") as fh:
            for line in fh:
                if line.startswith("0::"):
                    return V2_ROOT + line[3:].strip().rstrip("/")
    except OSError:
        pass
    return None


def _own_v1_dir(controller: str) -> str | None:
    """This process's group in the cgroup v1 hierarchy of `controller` ("4:memory:/a/b")."""
    try:
        with open("/proc/self/cgroup") as fh:
            for line in fh:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                if controller in controllers.split(","):
                    return os.path.join(V2_ROOT, controller) + path.rstrip("/")
    except (OSError, ValueError):
        pass
    return None


class PidsCgroup:
    def __init__(self, path: str):
        self.path = path
        self._max = None  # the last pids.max written
        self._current_fd = None  # pids.current, kept open: a runner reads it before every command

    @classmethod
    def create(cls, max_pids: int) -> "PidsCgroup | None":
        """A fresh cgroup limited to `max_pids` tasks, or None where none can be made."""
        name = f"sandboy-{os.getpid()}-{os.urandom(4).hex()}"
        candidates = []
        if os.path.isfile(os.path.join(V1_ROOT, "cgroup.procs")):
            candidates.append(os.path.join(V1_ROOT, name))
        v2 = _own_v2_dir()
        if v2 and os.path.isfile(os.path.join(V2_ROOT, "cgroup.controllers")):
            try:
                with open(os.path.join(v2, "cgroup.subtree_control")) as fh:
                    if "pids" in fh.read().split():
                        candidates.append(os.path.join(v2, name))
            except OSError:
                pass
        for path in candidates:
            try:
                os.mkdir(path, 0o755)
            except OSError:
                continue
            try:
                with open(os.path.join(path, "pids.max"), "w") as fh:
                    fh.write(str(max_pids))
                return cls(path)
            except OSError:
                os.rmdir(path)
        return None

    @classmethod
    def create_and_join(cls, max_pids: int) -> "PidsCgroup | None":
        """A fresh group with this process already inside it, or None (nothing left behind)."""
        group = cls.create(max_pids)
        if group is None:
            return None
        try:
            group.join()
        except OSError:
            group.remove()
            return None
        return group

    def join(self, pid: int = 0) -> None:
        with open(os.path.join(self.path, "cgroup.procs"), "w") as fh:
            fh.write(str(pid))

    def current(self) -> int:
        # pread at 0 on the open file: the kernel formats the value afresh on each read. An
        # open, a read and a close through a Python file object took 14-70 us per step.
        if self._current_fd is None:
            self._current_fd = os.open(os.path.join(self.path, "pids.current"), os.O_RDONLY | os.O_CLOEXEC)
        return int(os.pread(self._current_fd, 32, 0))

    def set_max(self, max_pids) -> None:
        """`max_pids`: a number or "max". Skipped when unchanged: a runner sets it per command."""
        if self._max == max_pids:
            return
        with open(os.path.join(self.path, "pids.max"), "w") as fh:
            fh.write(str(max_pids))
        self._max = max_pids

    def leave(self) -> None:
        """Move this process back to the parent cgroup, so the group can be removed."""
        parent = os.path.dirname(self.path)
        with open(os.path.join(parent, "cgroup.procs"), "w") as fh:
            fh.write("0")

    def pids(self) -> list[int]:
        return _members(self.path)

    def remove(self) -> None:
        if self._current_fd is not None:
            os.close(self._current_fd)
            self._current_fd = None
        try:
            os.rmdir(self.path)
        except OSError:
            pass


def _members(group: str) -> list[int]:
    """The pids in a cgroup (its `cgroup.procs`), or none when it is gone."""
    try:
        with open(os.path.join(group, "cgroup.procs")) as fh:
            return [int(x) for x in fh.read().split()]
    except OSError:
        return []


def _write(path: str, value) -> None:
    with open(path, "w") as fh:
        fh.write(str(value))


def _read_count(path: str, key: str) -> int:
    """The value of `key` in a flat-keyed cgroup file ("oom_kill 3"), 0 when absent."""
    try:
        with open(path) as fh:
            for line in fh:
                name, _, value = line.partition(" ")
                if name == key:
                    return int(value)
    except (OSError, ValueError):
        pass
    return 0


class MemoryCgroup:
    """One run's memory bound (ADR 0027): a fresh group whose processes together — their pages,
    the page cache and tmpfs files they write — may use at most `mib` MiB, none of it in swap.

    The command joins it itself, as the first step of its plan (`join_step`: a write of "0" to
    the group's cgroup.procs through an fd opened here), so nothing of it ever runs outside the
    bound and the supervising process never counts in it. Over the bound, on cgroup v1 the group's
    tasks wait (the OOM killer is disabled for it: `memory.oom_control`) and the supervisor, which
    MUST watch `oom_event_fd` (v1's eventfd notification, `cgroup.event_control`), ends the tree
    itself; cgroup v2 kills the whole group together (`memory.oom.group`).
    `oom_kills()` says afterwards whether the bound was hit.
    """

    def __init__(self, path: str, version: int, mib: int):
        self.path, self.version, self.mib = path, version, mib
        self.swap_bounded = False
        self.procs_fd = None      # cgroup.procs, open for writing: the child's join step writes to it
        self.oom_event_fd = None  # v1: an eventfd the kernel signals at each OOM of the group

    @classmethod
    def create(cls, mib: int, pids_max: int = 0) -> "MemoryCgroup | None":
        """A fresh group bounded to `mib` MiB, or None where none can be made (not root, no
        memory controller, not delegated). Nothing is left behind on failure.

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
            try:
                os.mkdir(path, 0o755)
            except OSError:
                continue
            group = cls(path, version, mib)
            try:
                if version == 2 and pids_max:
                    if "pids" not in v2_controllers:
                        raise OSError("no pids controller beside the memory one")
                    _write(os.path.join(path, "pids.max"), pids_max)
                group._bound()
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

    def _bound(self) -> None:
        limit = self.mib << 20
        if self.version == 2:
            _write(os.path.join(self.path, "memory.max"), limit)
            try:
                _write(os.path.join(self.path, "memory.swap.max"), 0)
                self.swap_bounded = True
            except FileNotFoundError:  # no swap accounting: a host with swap may then spill the
                # group into it; reported as swap "not accounted" (enforced.memory)
                pass
            _write(os.path.join(self.path, "memory.oom.group"), 1)
        else:
            _write(os.path.join(self.path, "memory.limit_in_bytes"), limit)
            # memory+swap: the same number, so nothing of the group may be swapped out
            try:
                _write(os.path.join(self.path, "memory.memsw.limit_in_bytes"), limit)
                self.swap_bounded = True
            except FileNotFoundError:  # no swap accounting (swapaccount=0)
                pass
            self.oom_event_fd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
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
        self.procs_fd = os.open(os.path.join(self.path, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)

    def join_step(self) -> tuple:
        """The child's plan step that moves it into the group (before anything else it runs)."""
        from sandboy.confine._libc import SYS_WRITE

        return ("join the memory cgroup", (SYS_WRITE, False, self.procs_fd, b"0", 1))

    def oom_kills(self) -> int:
        """How many processes of the group the OOM killer ended (its bound was reached)."""
        if self.version == 2:
            return _read_count(os.path.join(self.path, "memory.events"), "oom_kill")
        return _read_count(os.path.join(self.path, "memory.oom_control"), "oom_kill")

    def peak_bytes(self) -> int:
        name = "memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"
        try:
            with open(os.path.join(self.path, name)) as fh:
                return int(fh.read())
        except (OSError, ValueError):
            return 0

    def pids(self) -> list[int]:
        return _members(self.path)

    def remove(self) -> None:
        for fd in (self.procs_fd, self.oom_event_fd):
            if fd is not None:
                os.close(fd)
        self.procs_fd = self.oom_event_fd = None
        try:
            os.rmdir(self.path)
        except OSError:
            pass


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
