"""How the command joins its memory cgroup (ADR 0027, "Session 9"): on cgroup v1 its join step
writes "0" to the group's `tasks`, which moves the calling thread only — the kernel then skips the
global cgroup_threadgroup_rwsem, whose first writer after a quiet spell waits a whole RCU grace
period (≈ 10 ms here) — and that is the whole process because the join is the first step of the
command's own process, which has one thread then.

Probe, from the host side while a supervised command runs: every thread of every process of the
run (the command starts three threads and forks a child that starts one) is in the group —
/proc/PID/task/TID/cgroup, not the group's own list — under the namespace tier (where the init, the
supervisor's direct child sharing its memory, is NOT in it) and without it, with both executors
(SANDBOY_NATIVE=0 re-runs the suite). The join's fd is the group's `tasks` on v1 (`cgroup.procs` on
v2, which has no `tasks`). Twin: the same command, not hanging around, exits 0 with its output.
The memory bound itself still holding (a hog killed, a reused group) is test_memory_cgroup.py's
and tests/gate/test_step_memory_*.py's.
"""

import os
import time

import pytest
from forkkit import in_forked_child
from prockit import thread_cgroup

from sandboy.confine.cgroup import MemoryCgroup

ROOT_WITH_CGROUP = MemoryCgroup.available()
pytestmark = pytest.mark.skipif(not ROOT_WITH_CGROUP, reason="needs root and a writable memory cgroup")

POLICY = {"version": 1, "fs": {"read": ["/usr", "/etc", "/proc"], "exec": ["/usr/bin", "/usr/lib", "/bin"]},
          "env": {"pass": ["PATH"]}}
# three threads in the command, a forked child with one more; all wait `wait` s to be looked at
THREADED = ("import os, sys, threading, time\n"
            "def spin(): time.sleep({wait})\n"
            "for _ in range(3): threading.Thread(target=spin, daemon=True).start()\n"
            "if os.fork() == 0:\n"
            "    threading.Thread(target=spin, daemon=True).start(); time.sleep({wait}); os._exit(0)\n"
            "print('READY', flush=True); time.sleep({wait})\n")


def _descendants(root: int) -> list:
    """Host pids below `root` (not itself), from every process's parent in /proc."""
    parents = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as fh:
                    parents[int(name)] = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass  # gone meanwhile
    found, todo = [], [root]
    while todo:
        parent = todo.pop()
        for pid, ppid in parents.items():
            if ppid == parent:
                found.append(pid)
                todo.append(pid)
    return found


def _look_while_running(tier: bool, wait: int = 30) -> dict:
    """In a forked supervisor: start THREADED under a 64 MiB group, wait for its READY, then read
    from the host which memory group each thread of the init, the command and its child is in."""
    def scenario():
        if not tier:
            os.environ["SANDBOY_NAMESPACES"] = "0"
        from sandboy.confine.cage import build
        from sandboy.confine.supervision import Supervision
        from sandboy.policy.model import Policy

        out_r, out_w = os.pipe()
        null = os.open(os.devnull, os.O_RDWR)
        cage = build(Policy.from_mapping(POLICY, "test"))
        run = Supervision(["/usr/bin/python3", "-c", THREADED.format(wait=wait)], cage,
                          stdio=(null, out_w, out_w), memory_mib=64).start()
        os.close(out_w)
        group = run.memory_group
        try:
            join_file = os.path.basename(os.readlink(f"/proc/self/fd/{group.join_fd}"))
            output = b""
            deadline = time.monotonic() + 20
            while b"READY" not in output and time.monotonic() < deadline:
                chunk = os.read(out_r, 4096)
                if not chunk:
                    break
                output += chunk
            threads, init = {}, {}
            if wait:
                time.sleep(0.2)  # the forked child's own thread
                # under the tier the supervisor's child is the init, the command its child;
                # without it the child is the command
                members = _descendants(run.pid) + ([] if cage.tier is not None else [run.pid])
                for member in members:
                    for tid in os.listdir(f"/proc/{member}/task"):
                        threads[f"{member}/{tid}"] = thread_cgroup("memory", member, int(tid))
                if cage.tier is not None:
                    init = {tid: thread_cgroup("memory", run.pid, int(tid))
                            for tid in os.listdir(f"/proc/{run.pid}/task")}
            relative = group.path.split("/sys/fs/cgroup/memory", 1)[-1] if group.version == 1 else None
            if wait == 0:
                while chunk := os.read(out_r, 4096):
                    output += chunk
        finally:
            if wait:
                run.kill()
            result = run.wait()
        return {"tier": cage.tier is not None, "version": group.version,
                "join_file": join_file, "group": relative, "threads": threads,
                "init": init, "output": output.decode(errors="replace"),
                "outcome": result.outcome, "returncode": result.returncode}

    return in_forked_child(scenario)


def _assert_every_thread_in_the_group(got: dict) -> None:
    assert "READY" in got["output"], got
    if got["version"] != 1:
        pytest.skip("cgroup v2: the join goes through cgroup.procs (no tasks file)")
    assert got["join_file"] == "tasks", got
    # the command (1 + 3 threads) and its child (1 + 1): every one in the bounded group
    assert len(got["threads"]) >= 6, got
    outside = {t: g for t, g in got["threads"].items() if g != got["group"]}
    assert not outside, f"threads of the run outside its memory group {got['group']}: {outside}"


def test_under_the_tier_every_thread_of_the_run_is_in_the_group_and_the_init_is_not():
    got = _look_while_running(tier=True)
    if not got["tier"]:
        pytest.skip("the namespace tier is not available here")
    _assert_every_thread_in_the_group(got)
    # the init shares the supervisor's memory (ADR 0021): never a member (ADR 0027)
    assert got["init"] and got["group"] not in got["init"].values(), got
    assert got["outcome"] == "killed", got


def test_without_the_tier_every_thread_of_the_run_is_in_the_group():
    got = _look_while_running(tier=False)
    assert not got["tier"], got
    _assert_every_thread_in_the_group(got)
    assert got["outcome"] == "killed", got


def test_the_same_threaded_command_runs_to_its_end():
    got = _look_while_running(tier=True, wait=0)
    assert "READY" in got["output"], got
    assert got["returncode"] == 0 and got["outcome"] == "exited", got
