"""End every process below the supervising one: find them, SIGKILL them, reap them.

The supervising process (the gate, or a forked supervisor) is a child subreaper
(PR_SET_CHILD_SUBREAPER): orphans of the command — ones that called setsid or double-forked —
are reparented to it, so walking its own descendants finds the whole tree. With
`limits.processes` as root the tree also sits in a pids cgroup, whose members are killed too.
"""

import _signal as signal  # the C module: `signal` imports enum
import os
import time


def descendants() -> set[int]:
    """Every process below this one, walking /proc/<pid>/task/<tid>/children."""
    found: set[int] = set()
    todo = [os.getpid()]
    while todo:
        pid = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/children", "rb") as fh:
                    kids = [int(x) for x in fh.read().split()]
            except OSError:
                continue
            for kid in kids:
                if kid not in found:
                    found.add(kid)
                    todo.append(kid)
    return found


SIGCHLD_IGNORED = ("this process ignores SIGCHLD (SIG_IGN, perhaps inherited: an ignored signal survives "
                   "exec), so the kernel reaps its children itself and their exit status is lost")


def children_reaped_unseen():
    """Why the kernel would reap this process's children itself, their exit status lost to any
    waitpid (pidfds too: waitid(P_PIDFD) then fails with ECHILD as well: ADR 0020, Session 6), or
    None. Read from /proc/self/status (≈ 12 µs), the kernel's own view: Python's
    `signal.getsignal` does not see a disposition native code set. SA_NOCLDWAIT (which only native
    code can set: exec clears it) does the same and is not visible there; the waits catch it
    (`Supervision.exited`)."""
    from sandboy.confine._libc import status_masks

    ignored = status_masks(b"SigIgn").get(b"SigIgn", 0)
    return SIGCHLD_IGNORED if ignored >> (signal.SIGCHLD - 1) & 1 else None


def kill_pass(cgroup=None) -> None:
    """SIGKILL every descendant found now (and every member of `cgroup` but this process)."""
    pids = descendants()
    if cgroup is not None:
        pids.update(cgroup.pids())
    pids.discard(os.getpid())  # a supervisor sits in its own per-run group
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def wait_until(pid: int, deadline=None):
    """waitpid(pid) (-1: any child): the wait status of the process reaped, blocking or — with a
    `deadline` (time.monotonic()) — polling until then; None when the deadline came first.
    ChildProcessError as waitpid raises it."""
    if deadline is None:
        return os.waitpid(pid, 0)[1]
    while True:
        reaped, status = os.waitpid(pid, os.WNOHANG)
        if reaped:
            return status
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.005)


def sweep(cgroup=None, deadline=None) -> bool:
    """SIGKILL and reap until no descendant is left. Orphans come back to us (subreaper), so
    each round sees the ones the previous round's deaths released. `deadline` (time.monotonic()):
    give up reaping then and return False (everything found has been sent SIGKILL)."""
    while True:
        kill_pass(cgroup)
        try:
            if wait_until(-1, deadline) is None:
                return False
            # Reap the whole batch before walking /proc again: one walk per reaped child made the
            # sweep quadratic (2,000 processes took 26 s past a 3 s timeout).
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            if cgroup is None or not set(cgroup.pids()) - {os.getpid()}:
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(0.001)
