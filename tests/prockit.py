"""What the host sees of the processes a test started, read from /proc: which ones carry the test's
unique name, and which cgroup each thread is in. Host-side, so a probe never trusts what the
confined command says of itself (pids seen inside the cage are its PID namespace's)."""

import os
import time


def remove_cgroup(path: str) -> None:
    """rmdir of a cgroup a test made (or none there), once the kernel has let go of what was in it
    (a process killed a moment ago may still be listed): tried for up to 4 s."""
    for _ in range(200):
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)


def _scan(matches) -> list:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    cmdline = fh.read()
            except OSError:
                continue  # gone meanwhile, or not ours to read
            if matches(cmdline):
                found.append(int(entry))
    return found


def named(marker: str) -> list:
    """Host pids of the processes a test named `marker` (with `exec -a`, or as argv[0]): their
    command line starts with it, so a shell whose script merely mentions it is not counted."""
    wanted = marker.encode()
    return _scan(lambda cmdline: cmdline.startswith(wanted))


def named_exactly(marker: str) -> list:
    """Host pids whose argv[0] is `marker` itself: for markers counted up ("m-1" is not "m-10")."""
    wanted = marker.encode()
    return _scan(lambda cmdline: cmdline.split(b"\0", 1)[0] == wanted)


def mentioning(marker: str) -> list:
    """Host pids whose command line holds `marker` anywhere (an argument of a script, say)."""
    wanted = marker.encode()
    return _scan(lambda cmdline: wanted in cmdline)


def thread_cgroups(controller: str, pid="self") -> dict:
    """{tid: path} — the `controller` hierarchy's cgroup of every thread of process `pid`, as
    /proc/PID/task/TID/cgroup gives it (relative to the hierarchy's root, e.g. /sandboy-12-3);
    a thread in no group of that controller is left out."""
    groups = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        path = thread_cgroup(controller, pid, int(tid))
        if path is not None:
            groups[int(tid)] = path
    return groups


def thread_cgroup(controller: str, pid, tid: int):
    """The `controller` hierarchy's cgroup of thread `tid` of process `pid`, or None."""
    with open(f"/proc/{pid}/task/{tid}/cgroup") as fh:
        for line in fh:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if controller in controllers.split(","):
                return path
    return None


def children(pid: int) -> list:
    """The pids of `pid`'s children, every thread's, from /proc/PID/task/TID/children (host side;
    none once it is gone): only the test's own process tree is read."""
    kids: list = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return kids
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as fh:
                kids += [int(kid) for kid in fh.read().split()]
        except OSError:
            continue
    return kids
