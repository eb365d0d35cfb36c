"""The plan cache keeps a policy with `limits.wall_seconds` under the namespace tier (session 12):
exec mode's C wait holds the deadline (test_exec_deadline.py), and a hit holds it too — the value
is in the entry (`CachedPlan`), the policy's bytes in the key. Host-side: a hit past its deadline
leaves none of its processes; a changed deadline is a miss, and the new one is what holds."""

from __future__ import annotations

import os
import signal
import time

import pytest
from prockit import named
from test_plan_cache import Runner

pytestmark = pytest.mark.needs_kernel


@pytest.fixture
def runner(tmp_path):
    from sandboy.confine import namespaces

    if not namespaces.availability()[0]:
        pytest.skip("the plan cache keeps runs under the namespace tier only")
    return Runner(tmp_path)


def _kept(runner, wall: int, write: bool):
    more = (f'write = ["{runner.cwd}"]\n' if write else "") + f"[limits]\nwall_seconds = {wall}\n"
    runner.write_policy(more=more)
    for _ in range(3):  # (a write root's first run keeps none: its mount point settles)
        if runner.run("/usr/bin/true").hit:
            return
    raise AssertionError(f"no hit: {runner.entries()}")


@pytest.mark.parametrize("write", [False, True], ids=["read-only", "write root (git check)"])
def test_a_hit_holds_the_deadline_and_kills_every_process(runner, write):
    _kept(runner, 2, write)
    marker = f"plan-deadline-{os.getpid()}-{time.monotonic_ns()}"
    script = (f"(exec -a {marker}-bg /usr/bin/sleep 300) & "
              f"/usr/bin/setsid /usr/bin/bash -c '( trap \"\" HUP INT TERM; exec -a {marker}-away /usr/bin/sleep 300 ) &'; "
              f"exec -a {marker}-fg /usr/bin/sleep 300")
    started = time.monotonic()
    proc = runner.run("/usr/bin/bash", "-c", script)
    took = time.monotonic() - started
    left = named(marker)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert proc.hit, proc.err
    assert proc.returncode == 128 + 9, proc.err
    assert left == [], "a process of the timed-out hit outlived it"
    assert 1.5 < took < 30, took
    twin = runner.run("/usr/bin/bash", "-c", "exit 3")  # done before the deadline: its own status
    assert twin.hit and twin.returncode == 3, twin.err


def test_a_changed_deadline_is_a_miss_and_the_new_one_holds(runner):
    _kept(runner, 1, False)
    runner.write_policy(more="[limits]\nwall_seconds = 6\n")
    proc = runner.run("/usr/bin/sleep", "2")  # past the kept plan's deadline, within the new one
    assert not proc.hit, "a plan kept for wall_seconds = 1 served wall_seconds = 6"
    assert proc.returncode == 0, proc.err
    again = runner.run("/usr/bin/sleep", "2")
    assert again.hit and again.returncode == 0, again.err
