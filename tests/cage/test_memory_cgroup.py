"""A run's memory bound in a memory cgroup of its own (`Supervision(memory_mib=...)`, what the gate
gives each step; ADR 0027), driven the gate's way: this process supervises. Each scenario runs in
a forked child (a subreaper with no other children; pytest never becomes one).

Probe: a command that allocates AND touches 256 MiB under a 64 MiB bound ends `out_of_memory`,
its group's peak read from the host at most the bound, and the group is gone afterwards (no
process left in it). Twin: 16 MiB under the same bound exits 0 with no OOM kill. The command joins
the group before it runs anything: the group it reports from /proc/self/cgroup is the bounded one.
Under the namespace tier the init (the supervisor's direct child, sharing its memory) is never a
member, only the command it forks (a v2 group OOM kill would otherwise take the supervisor: ADR
0027); without the tier the direct child is the member. A refused join is named by its label.
"""

import os

import pytest
from forkkit import in_forked_child
from prockit import remove_cgroup

from sandboy.confine.cgroup import MemoryCgroup



ROOT_WITH_CGROUP = MemoryCgroup.available()
pytestmark = pytest.mark.skipif(not ROOT_WITH_CGROUP, reason="needs root and a writable memory cgroup")

POLICY = {"version": 1, "fs": {"read": ["/usr", "/etc", "/proc"], "exec": ["/usr/bin", "/usr/lib", "/bin"]},
          "env": {"pass": ["PATH"]}}
HOG = ["/usr/bin/python3", "-c", "import time; b = b'x' * (256 << 20); time.sleep(1); print('SURV' + 'IVED')"]
SMALL = ["/usr/bin/python3", "-c", "b = b'x' * (16 << 20); print(open('/proc/self/cgroup').read())"]


def _supervised(argv, memory_mib, ballast_mib=0) -> dict:
    def scenario():
        from sandboy.confine.cage import build
        from sandboy.confine.supervision import Supervision
        from sandboy.policy.model import Policy

        out_r, out_w = os.pipe()
        null = os.open(os.devnull, os.O_RDWR)
        ballast = b"y" * (ballast_mib << 20)  # the supervisor's own memory, touched
        run = Supervision(argv, build(Policy.from_mapping(POLICY, "test")), stdio=(null, out_w, out_w),
                          memory_mib=memory_mib).start()
        os.close(out_w)
        group_path = run.memory_group.path
        output = b""
        import select

        # what the gate's pump does (runner._pump): end the tree at the group's OOM event
        poller = select.poll()
        poller.register(out_r, select.POLLIN)
        oom_fd = run.memory_group.oom_event_fd
        if oom_fd is not None:
            poller.register(oom_fd, select.POLLIN)
        open_out = True
        while open_out:
            for fd, _ in poller.poll(250):
                if fd == oom_fd:
                    poller.unregister(fd)
                    run.end("out_of_memory")
                elif not (chunk := os.read(out_r, 65536)):
                    open_out = False
                else:
                    output += chunk
        result = run.wait()
        assert len(ballast) == ballast_mib << 20
        return {"outcome": result.outcome, "returncode": result.returncode,
                "error": result.error, "memory": result.enforced.get("memory"),
                "group": group_path, "group_left": os.path.exists(group_path),
                "output": output.decode(errors="replace")}

    return in_forked_child(scenario)


def test_a_run_over_its_memory_bound_ends_out_of_memory():
    got = _supervised(HOG, 64)
    assert got["outcome"] == "out_of_memory", got
    assert "out of memory" in got["error"] and "64 MiB" in got["error"], got
    assert got["memory"]["cgroup_mib"] == 64 and got["memory"]["peak_mib"] <= 64, got
    assert "SURVIVED" not in got["output"]
    assert not got["group_left"], "the run's memory group is left behind"


def test_a_run_within_its_memory_bound_passes_inside_the_bounded_group():
    got = _supervised(SMALL, 64)
    assert (got["outcome"], got["returncode"]) == ("exited", 0), got
    assert got["memory"]["oom_kills"] == 0 and got["memory"]["peak_mib"] >= 16, got
    # the command reported the group it ran in: the bounded one (it joined before it ran)
    assert os.path.basename(got["group"]) in got["output"], got
    assert not got["group_left"]



def test_swap_left_unaccounted_on_a_host_with_swap_is_said_as_degraded(tmp_path):
    """Where the kernel does not account swap in memory cgroups (v1 swapaccount=0: no
    memory.memsw.*; v2 cgroup.memory=noswap: no memory.swap.max) a step may spill past its bound
    into swap: said as degraded when the host has swap, not when it has none. This host accounts
    swap (the group's own flag says so, read from the kernel); the unaccounted case is the same
    group with the flag as such a kernel leaves it."""
    from sandboy.confine.cgroup import host_has_swap, swap_degraded

    swaps = tmp_path / "swaps"
    swaps.write_text("Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n")
    assert not host_has_swap(str(swaps))
    swaps.write_text(swaps.read_text() + "/swapfile                               file\t\t1048572\t\t0\t\t-2\n")
    assert host_has_swap(str(swaps))
    assert not host_has_swap(str(tmp_path / "absent"))
    group = MemoryCgroup.create(64)
    try:
        assert group.swap_bounded, "this host's memory cgroups account swap (memory.memsw.limit_in_bytes)"
        assert swap_degraded(group, has_swap=True) is None
        group.swap_bounded = False
        assert swap_degraded(group, has_swap=False) is None
        said = swap_degraded(group, has_swap=True)
        assert "swap is not accounted" in said and "64 MiB" in said, said
    finally:
        group.remove()


def test_a_reused_v2_group_takes_each_runs_own_process_limit(tmp_path):
    """cgroup v2: joining the memory group takes a step out of the gate's pids group, so the group's
    pids.max IS the step's `limits.processes` — and the gate reuses the group (MemoryCgroups). A step
    without a limit after one with `processes = 8` must get "max", not the 8 its predecessor left
    (it failed to fork). This host is cgroup v1, so the v2 group is a directory holding the files
    begin() reads and writes, as the kernel's cgroupfs shows them: what is checked is what begin()
    writes, not the kernel's enforcement of it."""
    for name, text in (("memory.current", "0\n"), ("memory.max", "max\n"), ("memory.peak", "0\n"),
                       ("memory.events", "oom_kill 0\n"), ("pids.max", "max\n")):
        (tmp_path / name).write_text(text)
    group = MemoryCgroup(str(tmp_path), 2, 64)
    group.peak_resettable = False  # (a plain file cannot be reset the kernel's way)
    pids = tmp_path / "pids.max"
    shown = "max"  # what the kernel's pids.max shows: the last value written to it
    try:
        for asked, expected in ((0, "max"), (8, "8"), (8, "8"), (0, "max"), (50, "50"), (0, "max")):
            pids.write_text("")  # what begin() writes this time, if anything
            group.begin(64, asked)
            shown = pids.read_text() or shown
            assert shown == expected, (asked, shown)
    finally:
        for fd in group._fds.values():
            os.close(fd)

def _members_while_running(tier: bool) -> dict:
    """Host side, while a supervised command runs: the group's members, the supervisor's direct
    child (under the tier the PID namespace's init, which shares the supervisor's memory: ADR 0021),
    and each member's parent."""
    def scenario():
        if not tier:
            os.environ["SANDBOY_NAMESPACES"] = "0"
        from sandboy.confine.cage import build
        from sandboy.confine.supervision import Supervision
        from sandboy.policy.model import Policy

        null = os.open(os.devnull, os.O_RDWR)
        cage = build(Policy.from_mapping(POLICY, "test"))
        run = Supervision(["/bin/sleep", "30"], cage, stdio=(null, null, null), memory_mib=64).start()
        try:
            # the C executor returns once the command has exec'd, the Python one (SANDBOY_NATIVE=0)
            # at the fork: wait for the join
            import time

            deadline = time.monotonic() + 10
            while True:
                with open(os.path.join(run.memory_group.path, "cgroup.procs")) as f:
                    members = [int(line) for line in f.read().split()]
                if members or time.monotonic() > deadline:
                    break
                time.sleep(0.01)
            parents = {}
            for member in members:
                with open(f"/proc/{member}/stat") as f:
                    parents[member] = int(f.read().rsplit(")", 1)[1].split()[1])
        finally:
            run.kill()
            result = run.wait()
        return {"tier": cage.tier is not None, "child": run.pid, "members": members,
                "parents": parents, "outcome": result.outcome}

    return in_forked_child(scenario)


def test_under_the_tier_the_command_is_in_the_group_and_the_init_is_not():
    # On cgroup v2 a group OOM kill also kills every process sharing the victim's memory: were the
    # init a member, it would take the supervisor (the gate) with it (ADR 0027).
    got = _members_while_running(tier=True)
    if not got["tier"]:
        pytest.skip("the namespace tier is not available here")
    assert got["members"], got
    assert got["child"] not in got["members"], f"the init (the supervisor's child) is in the group: {got}"
    assert {got["parents"][str(m)] for m in got["members"]} == {got["child"]}, got  # the init's child: the command
    assert got["outcome"] == "killed", got


def test_without_the_tier_the_supervisors_child_is_the_member():
    got = _members_while_running(tier=False)
    assert not got["tier"], got
    assert got["members"] == [got["child"]], got
    assert got["outcome"] == "killed", got


def test_a_refused_join_is_named_by_its_label(tmp_path):
    # the join's place in the plan differs with the tier (Cage.child_plan): the failed step's index
    # must still name it, not a neighbour
    from sandboy.confine import _libc
    from sandboy.confine.cage import build
    from sandboy.confine.result import from_child
    from sandboy.policy.model import Policy

    cage = build(Policy.from_mapping(POLICY, "test"))
    read_only = os.open(tmp_path / "f", os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC)  # a write to it: EBADF
    join = (("join the memory cgroup", (_libc.SYS_WRITE, False, read_only, b"0", 1)),)
    first = (("die with the supervisor", (_libc.SYS_PRCTL, False, 1, 9)),)
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    try:
        pid = cage.start_child(["/bin/true"], (None, None, None), err_w, first, in_command=join)
    finally:
        os.close(err_w)
        os.close(read_only)
    _, status = os.waitpid(pid, 0)
    result = from_child(status, _libc.read_all(err_r), ["/bin/true"], cage, first=first, in_command=join)
    cage.close()
    assert result.outcome == "cage_error", result
    assert "join the memory cgroup: Bad file descriptor" in result.error, result


def test_a_group_left_by_a_gate_killed_outright_is_swept_by_the_next(tmp_path):
    """A gate's memory group sits in this process's own memory group, `sandboy-<pid>-<hex>`: a
    gate killed by SIGKILL cannot remove it, and nothing else did (six gathered in one group of the
    test machine). The next group made removes an empty one named after a pid that is gone — never
    one of a live process, nor one still holding a process (host side: the directories)."""
    import subprocess

    from sandboy.confine.pids_cgroup import _own_v1_dir

    base = _own_v1_dir("memory")
    gone = 4194305  # above PID_MAX_LIMIT: never a live pid
    dead, live, busy = (os.path.join(base, f"sandboy-{pid}-gatemem14{tag}")
                        for pid, tag in ((gone, ""), (os.getpid(), ""), (gone, "busy")))
    for path in (dead, live, busy):
        os.mkdir(path)
    holder = subprocess.Popen(["sleep", "60"])
    group = None
    try:
        with open(os.path.join(busy, "tasks"), "w") as tasks:
            tasks.write(str(holder.pid))
        group = MemoryCgroup.create(64)
        assert group is not None and os.path.dirname(group.path) == base
        assert not os.path.exists(dead), "an empty group of a gate that is gone was left"
        assert os.path.isdir(live), "a group named after a live process was removed"
        assert os.path.isdir(busy), "a group still holding a process was removed"
    finally:
        if group is not None:
            group.remove()
        holder.kill()
        holder.wait()
        for path in (dead, live, busy):
            remove_cgroup(path)
