"""A gate step's memory is bounded in a memory cgroup of its own (ADR 0027; red-team finding of
session 7: the built-in ceiling had no memory limit at all, so a hostile step could take all of
the host's RAM and the OOM killer would pick any victim on the host).

Probe: a step that allocates AND touches 256 MiB under a 64 MiB bound is killed as out of memory,
the whole step together (its shell would sleep on after the hog alone was killed);
checked from the host side — the report's numbers are what the gate read from the step's group
(memory.oom_control / memory.events: oom_kill, and the group's peak), and a marked process the
step left running is gone. Twin: a step that uses 16 MiB passes under the same bound. And the
built-in ceiling's default is written: the host reads the bound of the group a live step is in.
Never tested by exhausting the shared machine's memory: the hog is 256 MiB, bounded at 64.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from userkit import as_user

from gatekit import (HOG, SMALL, assert_killed_out_of_memory, by_name, kill_survivors, make_repo,
                     memory_group_of, run_json, start_gate, stop_gate, survivors)

from sandboy.confine.cgroup import MemoryCgroup, memory_default_mib



ROOT_WITH_CGROUP = MemoryCgroup.available()
for_root = pytest.mark.skipif(not ROOT_WITH_CGROUP, reason="needs root and a writable memory cgroup")

@for_root
def test_a_step_over_its_memory_bound_is_killed_and_reported(tmp_path, fake_home):
    marker = f"sandboy-memcap-{os.urandom(4).hex()}"
    repo = make_repo(tmp_path, f"""
        [[step]]
        name = "hog"
        policy = "small"
        run = '''(exec -a {marker} sleep 60) & {HOG}; exec -a {marker} sleep 60'''
        timeout = 40

        [[step]]
        name = "modest"
        policy = "small"
        run = '''{SMALL}'''

        [policy.small]
        version = 1
        limits.memory_mib = 64
    """)
    try:
        proc, report = run_json(repo, tmp_path, "--keep-going", home=fake_home)
        steps = by_name(report)
        hog, modest = steps["hog"], steps["modest"]
        # its peak within the bound: the host's memory was never touched beyond it; the whole step
        # died together, the shell's next command too (cgroup v1: the gate ends the tree at the
        # group's OOM event, maybe before the kernel's kill is counted; v2: memory.oom.group)
        assert_killed_out_of_memory(hog, 64)
        assert hog["enforced"]["memory"]["cgroup_mib"] == 64, hog
        assert "SURVIVED" not in proc.stdout + proc.stderr
        assert not survivors(marker), "a process of the killed step is still running"
        # the twin, under the same bound
        assert modest["status"] == "passed", modest
        assert modest["enforced"]["memory"]["oom_kills"] == 0
        assert proc.returncode == 1
    finally:
        kill_survivors(marker)


@for_root
def test_a_step_out_of_memory_is_a_junit_failure_naming_the_cause(tmp_path, fake_home):
    repo = make_repo(tmp_path, f"""
        [[step]]
        name = "hog"
        run = '''{HOG}'''
        policy = "small"

        [policy.small]
        version = 1
        limits.memory_mib = 64
    """)
    junit = tmp_path / "junit.xml"
    proc, _ = run_json(repo, tmp_path, "--junit", junit, home=fake_home)
    text = junit.read_text()
    assert "<failure" in text and "out of memory" in text, text


@for_root
def test_the_built_in_ceiling_bounds_every_step_by_default(tmp_path, fake_home):
    """The host reads the bound of the group the live step is in (the step reports its own
    /proc/self/cgroup, then waits for the host to have looked)."""
    repo = make_repo(tmp_path, """
        [[step]]
        name = "default"
        run = '''grep memory /proc/self/cgroup > cgroup.txt; for i in $(seq 300); do [ -e go ] && break; sleep 0.1; done'''
    """)
    report_path = tmp_path / "report.json"
    gate = start_gate(repo, "--json", report_path, home=fake_home)
    try:
        group = memory_group_of(repo, "cgroup", gate, seconds=60)
        with open(os.path.join(group, "memory.limit_in_bytes")) as fh:
            limit = int(fh.read())
        assert os.path.basename(group).startswith("sandboy-"), group
        assert limit == memory_default_mib() << 20
        (repo / "go").write_text("")
        out, err = gate.communicate(timeout=60)
        assert gate.returncode == 0, out + err
        assert not os.path.exists(group), "the step's memory group is left behind"
    finally:
        (repo / "go").write_text("")
        stop_gate(gate)


def test_without_a_memory_cgroup_what_degraded_is_said(fake_home):
    """An ordinary user (uid 65534, no cgroup delegation) gets no memory cgroup: the built-in
    ceiling's default is then NOT enforced (an RLIMIT_AS of that size would break JVMs, Go and V8)
    and a value the repository asked for is RLIMIT_AS per process — both said on the step, in the
    report and on the console, never silently."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from userkit import skip_unless_nobody_can_run, world_readable_tmp

    skip_unless_nobody_can_run()
    src = os.path.dirname(os.path.dirname(os.path.abspath(sys.modules["sandboy"].__file__)))
    with world_readable_tmp("sandboy-memcap-") as base:
        repo = make_repo(base, """
            [[step]]
            name = "default"
            run = "true"

            [[step]]
            name = "asked"
            policy = "small"
            run = "true"

            [policy.small]
            version = 1
            limits.memory_mib = 64
        """)
        for path in (base, repo, repo / ".007", repo / ".007" / "gate.toml"):
            os.chown(path, 65534, 65534)
        report = base / "report.json"
        proc = subprocess.run(as_user(["/usr/bin/python3", "-m", "sandboy.gate.cli", str(repo), "--json", str(report)]),
                              capture_output=True, text=True, timeout=120, cwd=base,
                              env={"PATH": "/usr/bin:/bin", "HOME": str(base), "PYTHONPATH": src})
        assert "Traceback" not in proc.stderr, proc.stderr
        if not report.exists():
            pytest.skip(f"uid 65534 cannot run the gate from this source tree: {proc.stderr[-500:]}")
        import json

        steps = by_name(json.loads(report.read_text()))
        default, asked = steps["default"], steps["asked"]
        assert default["status"] == "passed" and asked["status"] == "passed", (default, asked)
        assert "memory" not in default["enforced"] and "memory" not in asked["enforced"]
        assert any("built-in ceiling" in d and "NOT enforced" in d for d in default["degraded"]), default
        assert any("64 MiB enforced per process (RLIMIT_AS" in d for d in asked["degraded"]), asked
        assert "step default: not enforced" in proc.stderr + proc.stdout
