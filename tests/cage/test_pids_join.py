"""How a process joins (and leaves) a pids cgroup of its own (`PidsCgroup.join`/`leave`: the gate
once per gate, a supervisor for its run; "Session 9" in docs/performance.md): on cgroup v1, when
the process has ONE thread, through the group's `tasks` (a thread moving itself: the kernel skips
its global cgroup rwsem and the RCU grace period its first writer waits), else through
`cgroup.procs`, which moves every thread.

Probe, read from /proc/self/task/*/cgroup (what the kernel says of each thread): a process that
already runs a second thread when it joins has BOTH threads in the group (a `tasks` write would
have moved only the caller, leaving a thread whose forks the limit does not count), and after
`leave` both are out and the group can be removed. Twin: a one-thread process joins, a thread it
starts afterwards is born inside, a fork bomb stops at pids.max, and it leaves.
"""

import os
import threading
import time

import pytest

from forkkit import in_forked_child
from prockit import thread_cgroups

from sandboy.confine.cgroup import PidsCgroup

ROOT = os.geteuid() == 0 and os.path.isfile("/sys/fs/cgroup/pids/cgroup.procs")
pytestmark = pytest.mark.skipif(not ROOT, reason="needs root and the cgroup v1 pids hierarchy")


def _relative(group: PidsCgroup) -> str:
    return group.path[len("/sys/fs/cgroup/pids"):]


def test_a_process_with_two_threads_joins_and_leaves_with_both():
    def scenario():
        release = threading.Event()
        thread = threading.Thread(target=release.wait, daemon=True)
        thread.start()
        group = PidsCgroup.create_and_join(64)
        assert group is not None, "no pids group could be made"
        try:
            inside = thread_cgroups("pids")
            assert len(inside) == 2, inside
            assert set(inside.values()) == {_relative(group)}, (inside, group.path)
            group.leave()
            outside = thread_cgroups("pids")
            assert _relative(group) not in outside.values(), outside
        finally:
            release.set()
            thread.join()
            group.remove()
        assert not os.path.exists(group.path), "the group could not be removed: a thread left in it"

    in_forked_child(scenario)  # a fresh, one-thread process: its failure fails the test


def test_a_one_thread_process_joins_its_threads_are_born_inside_and_the_limit_holds():
    def scenario():
        group = PidsCgroup.create_and_join(8)
        assert group is not None, "no pids group could be made"
        try:
            assert set(thread_cgroups("pids").values()) == {_relative(group)}
            release = threading.Event()
            thread = threading.Thread(target=release.wait, daemon=True)
            thread.start()
            assert set(thread_cgroups("pids").values()) == {_relative(group)}
            release.set()
            thread.join()
            # the limit counts this process's forks: 8 tasks at most, this one included
            children, refused = [], None
            try:
                for _ in range(20):
                    child = os.fork()
                    if child == 0:
                        time.sleep(5)
                        os._exit(0)
                    children.append(child)
            except BlockingIOError as exc:  # fork: EAGAIN at pids.max
                refused = exc
            finally:
                for child in children:
                    os.kill(child, 9)
                    os.waitpid(child, 0)
            assert refused is not None and len(children) == 7, (len(children), refused)
            group.leave()
            assert _relative(group) not in thread_cgroups("pids").values()
        finally:
            group.remove()
        assert not os.path.exists(group.path)

    in_forked_child(scenario)  # a fresh, one-thread process: its failure fails the test
