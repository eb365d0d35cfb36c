"""End every process below the supervising one: find them, SIGKILL them, reap them.

The supervising process (the gate, or a forked supervisor) is a child subreaper
(PR_SET_CHILD_SUBREAPER): orphans of the command — ones that called setsid or double-forked —
are reparented to it, so walking its own descendants finds the whole tree. With
`limits.processes` as root the tree also sits in a pids cgroup, whose members are killed too.
"""

import _signal as signal  # the C module: `signal` imports enum
import os
import time

from sandboy.confine._libc import above_stdio


# What /proc says when the process or task we were about to read has ended meanwhile (ENOENT,
# ESRCH; exception classes, not `errno`: the run path imports no more than it uses): skipped.
# Anything else (EMFILE, ENFILE, ENOMEM, ...) says nothing about the tree: never "no child".
GONE = (FileNotFoundError, ProcessLookupError)

# How often a sweep that could not read the tree looks again while it waits (seconds).
UNREAD_POLL_SECONDS = 0.02


class TreeUnreadable(OSError):
    """The process tree below this one could not be read (this process out of fds, the system
    out of files, ...): which processes live there is unknown — which is not "none"."""


class SpareFd:
    """One file descriptor a supervisor holds from before its run starts, given back for the
    /proc walk when the process (or the system) has none left: a step that exhausted its
    supervisor's fds (through the egress proxy) made the walk find "no child" and the timeout
    kill nothing (session 8). The walk needs one fd at a time. Opening it raises OSError where
    none is left even now (the run could not be supervised anyway)."""

    def __init__(self):
        self.fd = above_stdio(os.open("/", os.O_PATH | os.O_CLOEXEC))

    def release(self) -> bool:
        """Close it so the walk can use its slot; False when there is none to give."""
        if self.fd is None:
            return False
        os.close(self.fd)
        self.fd = None
        return True

    def restore(self) -> None:
        """Hold one again if a slot is free (another thread may have taken it: the next walk
        then fails closed)."""
        if self.fd is None:
            try:
                self.fd = above_stdio(os.open("/", os.O_PATH | os.O_CLOEXEC))
            except OSError:
                pass

    def close(self) -> None:
        self.release()


def _walk() -> set[int]:
    found: set[int] = set()
    todo = [os.getpid()]
    while todo:
        pid = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except GONE:
            if pid == os.getpid():
                raise
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/children", "rb") as fh:
                    kids = [int(x) for x in fh.read().split()]
            except GONE:
                continue
            for kid in kids:
                if kid not in found:
                    found.add(kid)
                    todo.append(kid)
    return found


def descendants(spare: SpareFd | None = None) -> set[int]:
    """Every process below this one, walking /proc/<pid>/task/<tid>/children. A process that
    ends during the walk is skipped; any other failure to read raises TreeUnreadable — after
    one more walk with `spare`'s slot, when the first failed for want of an fd or anything else."""
    try:
        return _walk()
    except OSError as exc:
        first = exc
    if spare is None or not spare.release():
        raise TreeUnreadable(first.errno, f"cannot read the process tree in /proc: {first.strerror}")
    try:
        return _walk()
    except OSError as exc:
        raise TreeUnreadable(exc.errno, f"cannot read the process tree in /proc: {exc.strerror}") from None
    finally:
        spare.restore()


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


def kill_pass(cgroup=None, spare: SpareFd | None = None, leader: int | None = None) -> bool:
    """SIGKILL every descendant found now (and every member of `cgroup` but this process).
    True when the whole tree was seen. When it could not be read (TreeUnreadable), fail closed
    with what is known without /proc: `leader` — the command, a session and process-group
    leader, NOT yet reaped (so neither its pid nor its group id can have been reused) — and its
    process group are killed (under the namespace tier the leader is the namespace's init: its
    death ends every process inside), and False says more may live."""
    seen = True
    try:
        pids = descendants(spare)
    except TreeUnreadable:
        seen, pids = False, set()
        if leader is not None:
            pids.add(leader)
            try:
                os.killpg(leader, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):  # not (yet) its group's leader; none we may signal
                pass
    if cgroup is not None:
        pids.update(cgroup.pids())
    pids.discard(os.getpid())  # a supervisor sits in its own per-run group
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return seen


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


def sweep(cgroup=None, deadline=None, spare: SpareFd | None = None) -> bool:
    """SIGKILL and reap until no descendant is left. Orphans come back to us (subreaper), so
    each round sees the ones the previous round's deaths released. `deadline` (time.monotonic()):
    give up reaping then and return False (everything found has been sent SIGKILL). The end is
    "no child left to wait for" (ECHILD), never "the walk found none": a round that could not
    read the tree (TreeUnreadable) waits a moment and walks again."""
    while True:
        seen = kill_pass(cgroup, spare)
        wait = deadline
        if not seen:
            soon = time.monotonic() + UNREAD_POLL_SECONDS
            wait = soon if deadline is None else min(deadline, soon)
        try:
            if wait_until(-1, wait) is None:
                if deadline is not None and time.monotonic() >= deadline:
                    return False
                continue
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
