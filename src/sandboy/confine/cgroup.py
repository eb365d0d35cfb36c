"""A pids cgroup for `limits.processes` when running as root.

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
        try:
            with open(os.path.join(self.path, "cgroup.procs")) as fh:
                return [int(x) for x in fh.read().split()]
        except OSError:
            return []

    def remove(self) -> None:
        if self._current_fd is not None:
            os.close(self._current_fd)
            self._current_fd = None
        try:
            os.rmdir(self.path)
        except OSError:
            pass
