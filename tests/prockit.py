"""What the host sees of the processes a test started, read from /proc: which ones carry the test's
unique name, and which cgroup each thread is in. Host-side, so a probe never trusts what the
confined command says of itself (pids seen inside the cage are its PID namespace's)."""

import os


def named(marker: str, whole: bool = False) -> list:
    """Host pids of the processes a test named `marker` (with `exec -a`, or as argv[0]): their
    command line starts with it — with `whole`, their argv[0] is exactly `marker` (markers counted
    up, "m-1" and "m-10", then never match each other). A shell whose script merely mentions the
    marker is not counted."""
    wanted = marker.encode()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    cmdline = fh.read()
            except OSError:
                continue  # gone meanwhile, or not ours to read
            if (cmdline.split(b"\0", 1)[0] == wanted) if whole else cmdline.startswith(wanted):
                found.append(int(entry))
    return found


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
