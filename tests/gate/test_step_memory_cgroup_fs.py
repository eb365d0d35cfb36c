"""A gate step's memory cgroup beside a write root ON a cgroup file system (session 14, gatemem14).

HOLE found here (fixed: `Supervision._refuse_a_memory_group_the_command_could_leave`, 125): an
operator ceiling granting write on the memory hierarchy (`write = [..., "/sys/fs/cgroup/memory"]`)
and a step with `limits.memory_mib` as root. The step's cage is built WITHOUT `memory_mib` (the
memory cgroup bounds it, so no RLIMIT_AS: gate/runner.py's memory plan), so the build's refusal of a
cgroup-fs write root for `limits.processes` (rvsec13) never saw it: the step wrote its pid into its
parent group's `tasks` (`echo $$ > .../tasks`: "moved", its /proc/self/cgroup the gate's group) and
was no longer bounded — it could as well have raised its own group's `memory.memsw.limit_in_bytes`
and `memory.limit_in_bytes`. Now refused where the group is taken: 125 naming the write root and
`limits.memory_mib`, the command never run (host side: the file it writes first is absent).

Twin: the same ceiling without the cgroup grant runs the step in its group — read from the host
while it runs: the step's process is a member of a `sandboy-` group, the gate is not, and the
group's bound is the step's 64 MiB (above what the group held when the step began, ADR 0027 s8).

The probe moves the step into the gate's own memory group at most (its parent), never the
hierarchy's root, and the step's command is `sh` doing nothing else.
"""

from __future__ import annotations

import os

import pytest

from gatekit import by_name, kill_survivors, make_repo, memory_group_of, run_json, start_gate, stop_gate, survivors

from sandboy.confine.cgroup import RESIDUE_MAX, MemoryCgroup

for_root = pytest.mark.skipif(not MemoryCgroup.available(), reason="needs root and a writable memory cgroup")

MEMORY_ROOT = "/sys/fs/cgroup/memory"

CEILING = """version = 1
[fs]
read = ["/usr", "/lib", "/lib64", "/bin", "/etc", "/proc", "{{repo}}"{extra_read}]
exec = ["/usr/bin", "/bin", "/usr/lib", "/lib", "/lib64"]
write = ["{{repo}}", "{{tmp}}"{extra_write}]
[limits]
memory_mib = 64
"""

# The step leaves its memory group for its parent (the gate's own group): what an unbounded step
# would do before allocating. It writes `ran.txt` first, so the host can tell it never ran.
LEAVE = ('echo ran > ran.txt; g=$(grep memory /proc/self/cgroup | cut -d: -f3); '
         'echo $$ > "' + MEMORY_ROOT + '$(dirname "$g")/tasks" && echo moved; grep memory /proc/self/cgroup')


def _ceiling_and_repo(tmp_path, grant_cgroup_fs: bool, name: str, run: str):
    """(the operator's ceiling, a repository whose one step `name` runs `run` under a 64 MiB
    memory bound), both granting write on the memory hierarchy where `grant_cgroup_fs`."""
    extra = f', "{MEMORY_ROOT}"' if grant_cgroup_fs else ""
    ceiling = tmp_path / "ceiling.toml"
    ceiling.write_text(CEILING.format(extra_read=extra, extra_write=extra))
    repo = make_repo(tmp_path, f"""
        [[step]]
        name = "{name}"
        policy = "p"
        run = '''{run}'''

        [policy.p]
        version = 1
        fs.read = ["/usr", "/lib", "/lib64", "/bin", "/etc", "/proc", "."{extra}]
        fs.exec = ["/usr/bin", "/bin", "/usr/lib", "/lib", "/lib64"]
        fs.write = ["."{extra}]
        limits.memory_mib = 64
    """)
    return ceiling, repo


@for_root
@pytest.mark.parametrize("tier", ["1", "0"], ids=["tier", "no tier"])
def test_a_step_granted_a_cgroup_file_system_cannot_leave_its_memory_group(tmp_path, fake_home, tier):
    ceiling, repo = _ceiling_and_repo(tmp_path, True, "leave", LEAVE)
    proc, report = run_json(repo, tmp_path, "--ceiling", ceiling, home=fake_home,
                            env={"SANDBOY_NAMESPACES": tier})
    step = by_name(report)["leave"]
    assert "moved" not in proc.stdout + proc.stderr, "the step left its memory cgroup"
    assert not (repo / "ran.txt").exists(), "the step's command ran"  # (host side)
    assert step["status"] == "cage_error" and proc.returncode == 125, (proc.returncode, step)
    assert MEMORY_ROOT in step["error"] and "limits.memory_mib" in step["error"], step["error"]


@for_root
def test_twin_a_step_without_the_grant_runs_bounded_in_its_group(tmp_path, fake_home):
    marker = f"sandboy-memfs-{os.urandom(4).hex()}"
    stay = (f"(exec -a {marker} sleep 60) & grep memory /proc/self/cgroup > cgroup.txt; "
            "for i in $(seq 300); do [ -e go ] && break; sleep 0.1; done; kill %1")
    ceiling, repo = _ceiling_and_repo(tmp_path, False, "stay", stay)
    report_path = tmp_path / "report.json"
    gate = start_gate(repo, "--json", report_path, "--ceiling", ceiling, home=fake_home)
    try:
        group = memory_group_of(repo, "cgroup", gate, seconds=60)
        assert os.path.basename(group).startswith("sandboy-"), group
        with open(os.path.join(group, "tasks")) as fh:
            members = fh.read().split()
        sleeper = survivors(marker)
        assert len(sleeper) == 1 and str(sleeper[0]) in members, (sleeper, members)
        assert str(gate.pid) not in members
        with open(os.path.join(group, "memory.limit_in_bytes")) as fh:
            limit = int(fh.read())
        assert 64 << 20 <= limit <= (64 << 20) + RESIDUE_MAX, limit
        (repo / "go").write_text("")
        out, err = gate.communicate(timeout=60)
        assert gate.returncode == 0, out + err
    finally:
        (repo / "go").write_text("")
        stop_gate(gate)
        assert not kill_survivors(marker)
