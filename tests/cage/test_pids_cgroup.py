"""The pids cgroup a runner joins once (confine/cgroup.py): `current()` reads the kernel's count
afresh on every call (through one fd kept open), and `remove()` leaves no fd behind."""

import os
import time

import pytest
from forkkit import in_forked_child

from sandboy.confine.cgroup import PidsCgroup

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="pids cgroups are made as root only")


def _open_fds_under(path: str) -> list:
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith(path):
                found.append(fd)
        except OSError:
            pass
    return found


def test_current_counts_what_is_in_the_group_now_and_remove_closes_its_fd():
    def scenario():
        group = PidsCgroup.create_and_join(64)
        if group is None:
            return {"skip": True}
        counts = [group.current()]
        r, w = os.pipe()
        kids = []
        for _ in range(3):
            pid = os.fork()
            if pid == 0:
                os.close(w)
                os.read(r, 1)  # until the parent closes its end
                os._exit(0)
            kids.append(pid)
        counts.append(group.current())
        os.close(w)
        for pid in kids:
            os.waitpid(pid, 0)
        counts.append(group.current())
        group.set_max(group.current() + 5)
        with open(os.path.join(group.path, "pids.max")) as fh:
            written = fh.read().strip()
        open_before = _open_fds_under(group.path)
        group.leave()
        counts.append(group.current())
        path = group.path
        group.remove()
        return {"counts": counts, "max": written, "open_before": len(open_before),
                "open_after": _open_fds_under(path), "gone": not os.path.exists(path)}

    out = in_forked_child(scenario)
    if out.get("skip"):
        pytest.skip("no pids cgroup can be made here")
    assert out["counts"] == [1, 4, 1, 0], out
    assert out["max"] == "6" and out["open_before"] == 1 and out["open_after"] == [] and out["gone"], out


def test_a_run_leaf_still_holding_a_process_is_emptied_by_end_and_removed():
    """`PidsCgroup.end` (exec mode's per-run leaf, session 13): under the tier nothing is left in
    the leaf once the init is reaped, so the first rmdir takes it; where something still is (here:
    a child that joined through the leaf's own join file and sleeps), it is killed (v2
    `cgroup.kill`, v1 SIGKILL per listed pid) and the leaf removed. Host side: the child's
    status is SIGKILL, the directory is gone, no fd of it stays open."""
    group = PidsCgroup.for_run(8)
    if group is None:
        pytest.skip("no pids cgroup can be made here")
    path = group.path
    pid = os.fork()
    if pid == 0:
        try:
            os.write(group.join_fd, b"0")
            os.execv("/bin/sleep", ["sleep", "60"])
        finally:
            os._exit(1)
    try:
        deadline = time.monotonic() + 10
        while str(pid) not in open(f"{path}/cgroup.procs").read().split() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert group.end() is True
        assert not os.path.exists(path)
        _, status = os.waitpid(pid, 0)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == 9, status
        assert _open_fds_under(path) == []
    finally:
        try:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
