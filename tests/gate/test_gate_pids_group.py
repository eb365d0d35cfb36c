"""As root with `limits.processes`, the gate joins ONE pids cgroup for all its steps and leaves it
at its end (runner.CageCache.pids_group; "Session 9" in docs/performance.md: the join and the leave
go through cgroup v1's `tasks` when the gate has one thread, which spares the kernel's global
cgroup rwsem and its RCU grace period).

Probe, from the host side while a step runs: every thread of the gate process and the step's
process are in the same pids group (/proc/PID/task/TID/cgroup), a group of the gate's own; after
the gate the group is gone (the leave moved every thread out, or its removal would have failed).
Twin: the step passes.
"""

from __future__ import annotations

import os
import time

import pytest

from gatekit import kill_survivors, make_repo, start_gate, stop_gate, survivors
from prockit import thread_cgroups

ROOT = os.geteuid() == 0 and os.path.isfile("/sys/fs/cgroup/pids/cgroup.procs")
pytestmark = pytest.mark.skipif(not ROOT, reason="needs root and the cgroup v1 pids hierarchy")


def test_the_gate_and_its_step_share_one_pids_group_that_is_gone_afterwards(tmp_path, fake_home):
    marker = f"sandboy-pidsgroup-{os.urandom(4).hex()}"
    repo = make_repo(tmp_path, f"""
        [[step]]
        name = "waits"
        run = '''(exec -a {marker} sleep 30) & while [ ! -e go ]; do sleep 0.05; done; kill $!; true'''
        timeout = 60
    """)
    gate = start_gate(repo, home=fake_home)
    try:
        deadline = time.monotonic() + 60
        while not survivors(marker):
            assert time.monotonic() < deadline and gate.poll() is None, gate.communicate()
            time.sleep(0.05)
        step = int(survivors(marker)[0])
        step_groups = set(thread_cgroups("pids", step).values())
        gate_groups = set(thread_cgroups("pids", gate.pid).values())
        assert len(step_groups) == 1 and step_groups == gate_groups, (step_groups, gate_groups)
        group = "/sys/fs/cgroup/pids" + step_groups.pop()
        assert os.path.basename(group).startswith(f"sandboy-{gate.pid}-"), group
        (repo / "go").write_text("")
        out, err = gate.communicate(timeout=60)
        assert gate.returncode == 0, out + err
        assert not os.path.exists(group), "the gate's pids group is left behind"
    finally:
        (repo / "go").write_text("")
        stop_gate(gate)
        kill_survivors(marker)
