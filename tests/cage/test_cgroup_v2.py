"""cgroup v2, for real, on a host whose controllers are cgroup v1's (session 11).

This host mounts the v1 hierarchies (memory, pids, ... under /sys/fs/cgroup) and the unified
hierarchy beside them at /sys/fs/cgroup/unified, where only `hugetlb` is available: a controller
lives in one hierarchy at a time, and the host's v1 memory and pids hierarchies are in use. So
what `confine/cgroup.py` does on a v2 host with the memory and pids controllers (memory.max,
memory.oom.group, memory.swap.max, memory.peak, pids.max) cannot be run here — docs/adr/0027
"Session 11" lists it. What CAN be run is the rest of the v2 path, against the kernel's own
cgroup2 file system: each scenario runs in a private mount namespace (`unshare --mount
--propagation private`, so nothing is mounted on the host's tree) where cgroup2 is mounted over
/sys/fs/cgroup, hiding v1 — the machine as a v2-only host sees it, its controllers not delegated:
- the code finds no pids or memory controller and makes no group (nothing left behind), and
  `sandboy run` with `limits.processes` as root refuses (125) rather than run without the limit;
- joining, listing and leaving a v2 group go through `cgroup.procs` (v2 has no `tasks`), and the
  memory group's join step (one write of "0" to `cgroup.procs`, `MemoryCgroup.join_step`) moves
  the writer itself — checked in /proc/<pid>/cgroup.
The groups made here are uniquely named directories of the unified hierarchy, removed at the end."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = [pytest.mark.needs_kernel,
              pytest.mark.skipif(os.geteuid() != 0, reason="mounting cgroup2 and making groups needs root")]

SANDBOY = os.path.join(os.path.dirname(sys.executable), "sandboy")

SCENARIO = textwrap.dedent("""
    import json, os, sys
    from sandboy.confine import cgroup

    out = {}
    with open("/sys/fs/cgroup/cgroup.controllers") as fh:
        out["controllers"] = fh.read().split()
    out["v1_visible"] = os.path.exists(cgroup.V1_ROOT)
    out["own_v2"] = cgroup._own_v2_dir()
    before = set(os.listdir(cgroup.V2_ROOT))
    out["pids_group"] = cgroup.PidsCgroup.create(8) is not None
    out["memory_group"] = cgroup.MemoryCgroup.create(64, 8) is not None
    out["memory_available"] = cgroup.MemoryCgroup.available()
    out["left_behind"] = sorted(set(os.listdir(cgroup.V2_ROOT)) - before)

    def v2_line(pid="self"):
        with open(f"/proc/{pid}/cgroup") as fh:
            return next(line.strip() for line in fh if line.startswith("0::"))

    path = os.path.join(cgroup.V2_ROOT, f"sandboy-v2test-{os.getpid()}")
    os.mkdir(path)
    try:
        out["has_tasks"] = os.path.exists(os.path.join(path, "tasks"))
        group = cgroup.PidsCgroup(path)  # its join/pids/leave, on a v2 group
        group.join()
        out["joined"] = v2_line()
        out["members"] = group.pids() == [os.getpid()]
        group.leave()
        out["left"] = v2_line()
        # the memory group's join step: the command writes "0" to an fd of cgroup.procs
        fd = os.open(os.path.join(path, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            os.write(fd, b"0")
            os.write(w, v2_line().encode())
            os._exit(0)
        os.close(w)
        out["child_joined"] = os.read(r, 4096).decode()
        os.waitpid(pid, 0)
        os.close(fd)
        out["after_child"] = cgroup._members(path)
    finally:
        os.rmdir(path)
    out["removed"] = not os.path.exists(path)
    print(json.dumps(out))
""")


def _in_v2_only_view(argv: list, **kw) -> subprocess.CompletedProcess:
    """`argv` in a private mount namespace where cgroup2 is mounted over /sys/fs/cgroup."""
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c",
                           'mount -t cgroup2 none /sys/fs/cgroup && exec "$@"', "sh", *argv],
                          capture_output=True, text=True, timeout=120, **kw)


def _host_mounts() -> str:
    return Path("/proc/self/mountinfo").read_text()


def test_on_a_v2_only_view_the_cgroup_code_uses_cgroup_procs_and_makes_no_group_without_controllers():
    mounts = _host_mounts()
    proc = _in_v2_only_view([sys.executable, "-c", SCENARIO])
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert _host_mounts() == mounts  # nothing mounted on the host's tree
    assert not seen["v1_visible"] and seen["own_v2"] == "/sys/fs/cgroup"
    if "pids" in seen["controllers"] or "memory" in seen["controllers"]:
        pytest.skip("this host's unified hierarchy has the controllers: the v1-host case does not apply")
    # no controller: no group, none left behind (the callers then refuse: next test)
    assert (seen["pids_group"], seen["memory_group"], seen["memory_available"]) == (False, False, False), seen
    assert seen["left_behind"] == [], seen
    # v2 has no `tasks`: joining, listing and leaving go through cgroup.procs, for real
    name = seen["joined"].split("/", 1)[1]
    assert not seen["has_tasks"]
    assert seen["joined"].startswith("0::/sandboy-v2test-") and seen["members"], seen
    assert seen["left"] == "0::/", seen
    assert seen["child_joined"] == f"0::/{name}", seen  # the join step's write moved the writer
    assert seen["after_child"] == [] and seen["removed"], seen


def test_on_a_v2_only_view_a_root_run_with_a_process_limit_refuses(tmp_path):
    """Fail closed: as root RLIMIT_NPROC does not bind, so without a pids group the run is refused
    (125, saying why), not run unlimited. Twin: the same policy without the limit runs."""
    policy = tmp_path / "p.toml"
    policy.write_text('version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc", "/bin"]\n'
                      'exec = ["/usr/bin", "/bin"]\n[limits]\nprocesses = 16\n')
    env = {k: v for k, v in os.environ.items() if k not in ("SANDBOY_PLAN_CACHE",)}
    env["SANDBOY_CACHE_DIR"] = str(tmp_path / "cache")
    proc = _in_v2_only_view([SANDBOY, "run", "--policy", str(policy), "--", "/bin/echo", "ran"], env=env,
                            stdin=subprocess.DEVNULL)
    if "pids" in Path("/sys/fs/cgroup/unified/cgroup.controllers").read_text().split():
        pytest.skip("this host's unified hierarchy has the pids controller")
    assert proc.returncode == 125 and proc.stdout == "", (proc.returncode, proc.stdout, proc.stderr)
    assert "limits.processes" in proc.stderr and "no pids cgroup" in proc.stderr, proc.stderr
    policy.write_text(policy.read_text().replace("[limits]\nprocesses = 16\n", ""))
    twin = _in_v2_only_view([SANDBOY, "run", "--policy", str(policy), "--", "/bin/echo", "ran"], env=env,
                            stdin=subprocess.DEVNULL)
    assert (twin.returncode, twin.stdout) == (0, "ran\n"), twin.stderr
