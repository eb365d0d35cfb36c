"""A gate step's memory bound holds for memory its THREADS and its children's threads touch
(ADR 0027, "Session 9": on cgroup v1 the command joins its group by moving its one thread through
the group's `tasks`, which skips the kernel's global cgroup rwsem; every thread and process it makes
afterwards is born in the group).

Probe: in one gate (one reused group), a step whose command touches 256 MiB in a second thread
under a 64 MiB bound is killed as out of memory, its peak read by the gate at most the bound; a
step whose shell's child does the same in a thread of its own likewise; no marked process of
either is left. Twin: the same threaded shape touching 16 MiB passes, with no OOM kill, after them
in the same gate. Never tested by exhausting the shared machine: 256 MiB bounded at 64.
"""

from __future__ import annotations

import os

import pytest

from gatekit import assert_killed_out_of_memory, by_name, kill_survivors, make_repo, run_json, survivors, threaded_hog

from sandboy.confine.cgroup import MemoryCgroup

ROOT_WITH_CGROUP = MemoryCgroup.available()
pytestmark = pytest.mark.skipif(not ROOT_WITH_CGROUP, reason="needs root and a writable memory cgroup")


def test_memory_touched_by_threads_is_bounded_and_a_modest_threaded_step_passes(tmp_path, fake_home):
    marker = f"sandboy-memthreads-{os.urandom(4).hex()}"
    repo = make_repo(tmp_path, f"""
        [[step]]
        name = "thread-hog"
        policy = "small"
        run = '''exec {threaded_hog(256)}'''
        timeout = 40

        [[step]]
        name = "child-thread-hog"
        policy = "small"
        run = '''(exec -a {marker} sleep 60) & {threaded_hog(256)}; exec -a {marker} sleep 60'''
        timeout = 40

        [[step]]
        name = "modest"
        policy = "small"
        run = '''{threaded_hog(16)}'''

        [policy.small]
        version = 1
        limits.memory_mib = 64
    """)
    try:
        proc, report = run_json(repo, tmp_path, "--keep-going", home=fake_home)
        steps = by_name(report)
        for name in ("thread-hog", "child-thread-hog"):
            assert_killed_out_of_memory(steps[name], 64)
        assert "USED 256" not in proc.stdout + proc.stderr
        assert not survivors(marker), "a process of a killed step is still running"
        modest = steps["modest"]
        assert modest["status"] == "passed", modest
        assert modest["enforced"]["memory"]["oom_kills"] == 0, modest
        assert modest["enforced"]["memory"]["peak_mib"] >= 16, modest  # the thread's pages were counted
    finally:
        kill_survivors(marker)
