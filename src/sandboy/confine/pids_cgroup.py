"""A pids cgroup for `limits.processes` when running as root (`PidsCgroup`); cgroup.py holds
the memory cgroup of a gate step's `limits.memory_mib` and re-exports this module's names.

Why: RLIMIT_NPROC does not bind uid 0 at all (the kernel exempts the root user), so as root a
fork bomb is only stopped by a cgroup's `pids.max`. Ordinary users get RLIMIT_NPROC instead.
The cgroup also lists every process of the run, which makes the final kill exact.

Moving a task into a cgroup is slow (cgroup v1 takes a global rw-semaphore: ≈ 10 ms per move
here), so a runner of many commands (the gate) joins ONE group itself, once, and every run is
forked inside it: `spawn(..., pids_group=group)` then only rewrites `pids.max` (cheap) to
"what is in the group now + the policy's limit". `sandboy run` in exec mode under the namespace
tier makes a leaf per run (`PidsCgroup.for_run`), which the namespace's init joins itself.

Apart from the memory cgroup (≈ 47 kB of byte code) so that a plan cache hit of a policy with
`limits.processes`, run as root, reads only this (session 13).
"""

# No `from __future__ import annotations`: it imports the `__future__` module at run time
# (≈ 0.59 M instructions, ≈ 0.13 ms), and this module is on `sandboy run`'s path for `limits.processes` as root (docs/performance.md,
# session 7). Python >= 3.11 evaluates these annotations as written.

import os

from sandboy.confine._libc import above_stdio

NO_PIDS_CGROUP = ("limits.processes: running as root, RLIMIT_NPROC does not bind uid 0 and no pids "
                  "cgroup could be created; refusing to run without the limit (run it where "
                  "/sys/fs/cgroup is writable — not inside another cage — or with a policy or gate "
                  "ceiling without limits.processes)")

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
        self.join_fd = None  # `for_run`: its join file, open for writing (`join_step`)
        self._current_fd = None  # pids.current, kept open: a runner reads it before every command

    @classmethod
    def create(cls, max_pids: int) -> "PidsCgroup | None":
        """A fresh cgroup limited to `max_pids` tasks, or None where none can be made. Groups
        of this shape that a supervisor or gate killed outright left (empty, named after a pid
        that is gone) are swept first: nothing else removes them, and a test machine gathered
        fifty in a day."""
        name = f"sandboy-{os.getpid()}-{os.urandom(4).hex()}"
        for path in _pids_bases():
            _sweep(path, "sandboy-")
            group = cls._made(os.path.join(path, name), max_pids)
            if group is not None:
                return group
        return None

    @classmethod
    def _made(cls, path: str, max_pids: int) -> "PidsCgroup | None":
        """The group made at `path` with its limit written, or None (nothing left behind)."""
        try:
            os.mkdir(path, 0o755)
        except OSError:
            return None
        try:
            fd = os.open(f"{path}/pids.max", os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(fd, str(max_pids).encode())
            finally:
                os.close(fd)
            group = cls(path)
            group._max = max_pids
            return group
        except OSError:
            os.rmdir(path)
            return None

    @classmethod
    def for_run(cls, max_pids: int) -> "PidsCgroup | None":
        """A leaf for ONE run of exec mode under the namespace tier (`init_wait.start_and_wait`):
        made in a parent `RUNS_PARENT` kept between runs (made by the first), limited to
        `max_pids`, its join file open (`join_step`: the namespace's init moves itself in before
        it runs anything else) — or None where none can be made. Ended by `end`.

        A leaf per run and no move of this process: the per-run cost is a mkdir, one write, an
        open, the init's join and the rmdir (docs/performance.md, "Session 13 — pids13"). The
        parent also holds what a run killed outright left (its owner's pid in the name): swept
        here once that pid is gone and the leaf is empty."""
        name = f"{os.getpid()}-{os.urandom(4).hex()}"
        for base in _pids_bases():
            parent = f"{base}/{RUNS_PARENT}"
            try:
                os.mkdir(parent, 0o755)
                if _join_file(base) == "cgroup.procs":
                    _write(f"{parent}/cgroup.subtree_control", "+pids")  # v2: leaves get the controller
            except FileExistsError:
                _sweep(parent)
            except OSError:
                continue
            group = cls._made(f"{parent}/{name}", max_pids)
            if group is None:
                continue
            try:
                group.join_fd = above_stdio(os.open(f"{group.path}/{_join_file(base)}", os.O_WRONLY | os.O_CLOEXEC))
            except OSError:
                group.remove()
                continue
            return group
        return None

    def join_step(self) -> tuple:
        """The plan step that moves the calling process into this group (`for_run`): a write of
        "0" to its join file, opened here — a step of the namespace's init before anything of the command, so nothing
        of the run is ever outside it: every process the init forks is born inside."""
        from sandboy.confine._libc import SYS_WRITE

        return ("join the pids cgroup", (SYS_WRITE, False, self.join_fd, b"0", 1))

    def end(self, seconds: float = 1.0) -> bool:
        """After the run: kill what is left in the group (cgroup v2's `cgroup.kill`; v1, each of
        its pids by SIGKILL), then remove it. Under the tier nothing is left once the init is
        reaped (the kernel ends the PID namespace with it): the first rmdir takes it. Whether the
        group is gone (it stays where something in it would not die within `seconds`)."""
        self._close()
        deadline = None
        while True:
            try:
                os.rmdir(self.path)
                return True
            except FileNotFoundError:
                return True
            except OSError as exc:
                import errno
                import time

                if exc.errno != errno.EBUSY:
                    return False
                now = time.monotonic()
                if deadline is None:
                    deadline = now + seconds
                elif now > deadline:
                    return False
                _kill_members(self.path)
                time.sleep(0.002)

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
        if pid == 0:
            _move_self(self.path)
            return
        with open(os.path.join(self.path, "cgroup.procs"), "w") as fh:
            fh.write(str(pid))

    def current(self) -> int:
        # pread at 0 on the open file: the kernel formats the value afresh on each read. An
        # open, a read and a close through a Python file object took 14-70 us per step.
        if self._current_fd is None:
            self._current_fd = above_stdio(os.open(os.path.join(self.path, "pids.current"), os.O_RDONLY | os.O_CLOEXEC))
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
        _move_self(os.path.dirname(self.path))

    def pids(self) -> list[int]:
        return _members(self.path)

    def leave_and_remove(self) -> None:
        """The end of a group this process joined (the gate's, a supervisor's own): leave it, then
        remove it. A leave that failed leaves this process inside, and the removal then fails as
        quietly as any other (`remove`): the group stays, nothing raises at the end of a run."""
        try:
            self.leave()
        except OSError:
            pass
        self.remove()

    def remove(self) -> None:
        self._close()
        try:
            os.rmdir(self.path)
        except OSError:
            pass

    def _close(self) -> None:
        """The group's files this process keeps open (pids.current, the join file) closed."""
        for fd in (self._current_fd, self.join_fd):
            if fd is not None:
                os.close(fd)
        self._current_fd = self.join_fd = None


RUNS_PARENT = "sandboy-runs"  # where exec mode's per-run leaves are made (PidsCgroup.for_run)


def _pids_bases() -> list:
    """The cgroup directories a pids group of this process may be made in: its own group of the
    v1 pids hierarchy (not the hierarchy's root: a group there would be outside whatever limit
    the caller itself is under), and its own v2 group where that hands the pids controller down.
    (On `sandboy run`'s path as root: one read of /proc/self/cgroup, v2's only where it is mounted.)"""
    v1 = _own_v1_dir("pids")
    bases = [v1] if v1 and os.path.isfile(f"{v1}/pids.max" if v1 != V1_ROOT else f"{v1}/cgroup.procs") else []
    if os.path.isfile(f"{V2_ROOT}/cgroup.controllers"):
        v2 = _own_v2_dir()
        try:
            with open(f"{v2}/cgroup.subtree_control") as fh:
                if v2 and "pids" in fh.read().split():
                    bases.append(v2)
        except (OSError, TypeError):
            pass
    return bases


def _join_file(base: str) -> str:
    """cgroup v1: `tasks`, which moves the calling thread without the kernel's global
    cgroup_threadgroup_rwsem (see `MemoryCgroup._join_file`; the init joining has one thread);
    v2 has only `cgroup.procs`."""
    return "tasks" if base == V1_ROOT or base.startswith(V1_ROOT + "/") else "cgroup.procs"


def _kill_members(group: str) -> None:
    """SIGKILL to everything in `group`: at once through v2's `cgroup.kill` (Linux >= 5.14), else
    to each pid it lists (v1)."""
    try:
        _write(os.path.join(group, "cgroup.kill"), 1)
        return
    except OSError:
        pass
    for pid in _members(group):
        try:
            os.kill(pid, 9)
        except OSError:
            pass


def _sweep(parent: str, prefix: str = "") -> None:
    """Remove the groups in `parent` that a run killed outright left behind: empty, and named
    `prefix` + the pid of a `sandboy` process that is gone. A group of a live run is never
    touched (it may be empty between its making and its init's join), nor one still holding
    processes or groups (rmdir refuses). (The parent's own files are named by the kernel —
    cgroup.procs, tasks, pids.max, ... — and never start with a digit after the prefix; nor
    does `sandboy-runs`: a left group's name does.)"""
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        if not name.startswith(prefix):
            continue
        owner = name[len(prefix):].partition("-")[0]
        if not owner.isdigit():
            continue
        try:
            os.kill(int(owner), 0)
            continue  # its run is alive (or the pid was taken again: left for a later sweep)
        except ProcessLookupError:
            pass
        except OSError:
            continue
        try:
            os.rmdir(f"{parent}/{name}")
        except OSError:
            pass


def _move_self(group: str) -> None:
    """Move this process into `group` (a cgroup directory). Through cgroup v1's `tasks` where
    this process has one thread: a thread moving itself is moved without the kernel's global
    cgroup_threadgroup_rwsem, whose first writer after a quiet spell waits a whole RCU grace
    period (≈ 10 ms of wall clock here; docs/performance.md, "Session 9"), and with one thread
    the thread is the process. One thread is a fact no other thread can change meanwhile: there is
    none to start one. Otherwise (threads, or v2, which has no `tasks`) through `cgroup.procs`,
    the whole thread group at once."""
    tasks = os.path.join(group, "tasks")
    name = tasks if os.path.isfile(tasks) and len(os.listdir("/proc/self/task")) == 1 else os.path.join(group, "cgroup.procs")
    with open(name, "w") as fh:
        fh.write("0")


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
