"""The gate keeps ONE memory cgroup for its steps (ADR 0027, session 8: a group made and removed per
step cost ≈ 0.3 ms of the gate and more of the kernel's), and each step still starts at zero.

Probe: in one gate, a 64 MiB-bounded step touching 256 MiB is killed as out of memory, leaving a
marked process behind it; the NEXT step runs in the same group (read from the host) and, looked at
from the host while it waits: none of the first step's processes is in the group, the group's bound
is 64 MiB on top of what it holds (the killed step's 64 MiB are not counted against it), its peak
was reset. It passes, its report says no OOM kill and a small peak (the group's own counter had
reached 64 MiB in the first step). A second hog in the same group is killed again — the OOM event
still fires in a reused group — and the step after it passes with 16 MiB touched: OOM reported on
the right steps only, no marked process left. And a step that leaves pages charged to the group
(a file written into the repository, in the page cache) does not shrink the next step's bound.
"""

from __future__ import annotations

import json
import os

import pytest

from gatekit import (HOG, SMALL, assert_killed_out_of_memory, by_name, kill_survivors, make_repo, memory_group_of,
                     start_gate, stop_gate, survivors)

from sandboy.confine.cgroup import MemoryCgroup

pytestmark = pytest.mark.skipif(not MemoryCgroup.available(), reason="needs root and a writable memory cgroup")

# the step says which memory group it is in, then waits until the host has looked
WAIT = ("grep memory /proc/self/cgroup > {name}.txt; "
        "for i in $(seq 600); do [ -e go-{name} ] && break; sleep 0.1; done")


def _read(group: str, name: str) -> int:
    with open(os.path.join(group, name)) as fh:
        return int(fh.read())


def test_the_step_after_an_oom_kill_starts_at_zero_in_the_same_group(tmp_path, fake_home):
    marker = f"sandboy-memreuse-{os.urandom(4).hex()}"
    repo = make_repo(tmp_path, f"""
        [[step]]
        name = "hog"
        policy = "small"
        run = '''grep memory /proc/self/cgroup > hog.txt; (exec -a {marker} sleep 60) & {HOG}; exec -a {marker} sleep 60'''
        timeout = 40

        [[step]]
        name = "next"
        policy = "small"
        run = '''{WAIT.format(name="next")}'''

        [[step]]
        name = "hog-again"
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
    report = tmp_path / "report.json"
    gate = start_gate(repo, "--keep-going", "--json", report, home=fake_home)
    try:
        group = memory_group_of(repo, "next", gate)
        hog_group = memory_group_of(repo, "hog", gate)
        assert group == hog_group, "the gate made a fresh group: this probe is about the reused one"
        # nothing of the killed step is in the group the next step runs in
        for pid in open(os.path.join(group, "cgroup.procs")).read().split():
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                assert marker.encode() not in fh.read(), f"process {pid} of the killed step is in the next one's group"
        limit, usage = _read(group, "memory.limit_in_bytes"), _read(group, "memory.usage_in_bytes")
        # the bound is 64 MiB on top of what the group held when the step began (at most 8 MiB
        # of residue: cgroup.RESIDUE_MAX), so the step has (almost all of) its 64 MiB free
        assert 64 << 20 <= limit <= (64 + 8) << 20, limit
        assert limit - usage >= (64 - 4) << 20, (limit, usage)
        assert _read(group, "memory.memsw.limit_in_bytes") == limit  # swap still bounded with it
        # its peak was reset when it began: the hog's 64 MiB are not in it
        assert _read(group, "memory.max_usage_in_bytes") - (limit - (64 << 20)) < 8 << 20
        (repo / "go-next").write_text("")
        out, err = gate.communicate(timeout=120)
    finally:
        (repo / "go-next").write_text("")
        stop_gate(gate)
        kill_survivors(marker)
    steps = by_name(json.loads(report.read_text()))
    for name in ("hog", "hog-again"):
        assert_killed_out_of_memory(steps[name], 64)
    for name in ("next", "modest"):
        assert steps[name]["status"] == "passed", steps[name]
        assert steps[name]["enforced"]["memory"]["oom_kills"] == 0, steps[name]
    assert steps["next"]["enforced"]["memory"]["peak_mib"] < 8, steps["next"]
    assert 16 <= steps["modest"]["enforced"]["memory"]["peak_mib"] < 64, steps["modest"]
    assert "SURVIVED" not in out + err
    assert not survivors(marker), "a process of a killed step is still running"
    assert not os.path.exists(group), "the gate's memory group is left behind"


def test_what_a_step_leaves_charged_does_not_shrink_the_next_steps_bound(tmp_path, fake_home):
    """The 5 MiB file the first step writes into the repository stays in the page cache, charged to
    the group (this host has GiBs free: nothing reclaims it meanwhile), yet the next step may still
    use its whole 64 MiB: its bound is 64 MiB on top of it."""
    repo = make_repo(tmp_path, f"""
        [[step]]
        name = "writer"
        policy = "small"
        run = '''grep memory /proc/self/cgroup > writer.txt; head -c $((5 << 20)) /dev/urandom > ballast'''

        [[step]]
        name = "next"
        policy = "small"
        run = '''{WAIT.format(name="next")}'''

        [policy.small]
        version = 1
        limits.memory_mib = 64
    """)
    report = tmp_path / "report.json"
    gate = start_gate(repo, "--keep-going", "--json", report, home=fake_home)
    try:
        group = memory_group_of(repo, "next", gate)
        writer = memory_group_of(repo, "writer", gate)
        assert group == writer, "the gate made a fresh group: this probe is about the reused one"
        limit, usage = _read(group, "memory.limit_in_bytes"), _read(group, "memory.usage_in_bytes")
        assert usage >= 5 << 20, usage  # the file is still charged here
        assert limit >= (64 + 5) << 20 and limit - usage >= (64 - 4) << 20, (limit, usage)
        (repo / "go-next").write_text("")
        gate.communicate(timeout=120)
    finally:
        (repo / "go-next").write_text("")
        stop_gate(gate)
    steps = by_name(json.loads(report.read_text()))
    assert steps["writer"]["status"] == steps["next"]["status"] == "passed", steps
    assert steps["writer"]["enforced"]["memory"]["peak_mib"] >= 5, steps["writer"]
    assert steps["next"]["enforced"]["memory"]["peak_mib"] < 5, steps["next"]
