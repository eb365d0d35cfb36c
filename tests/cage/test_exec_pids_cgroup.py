"""`limits.processes` as root in exec mode under the namespace tier (session 13): no supervisor —
the run gets a pids cgroup of its own (`pids_cgroup.PidsCgroup.for_run`), which the namespace's
init joins as its first step, and exec mode's wait removes it once the init is reaped. Both
executors (SANDBOY_NATIVE=0: the Python stand-in).

Host side: the run's marked processes counted from /proc, the cgroup they are in read there
(its `pids.max`, `pids.peak` while the run is up), and the leaf looked for after the run — which
ended normally, by its deadline, by a SIGTERM to `sandboy run`, or after a double fork that left
a process behind. A kept plan (a hit) is limited the same way; a twin with room for all works; and
where no cgroup can be made (the cgroup file system read-only) the run is refused, 125, the
command never run — a kept plan's too."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest
from prockit import named, remove_cgroup, thread_cgroup

pytestmark = pytest.mark.needs_kernel

SANDBOY = os.path.join(os.path.dirname(sys.executable), "sandboy")
PYTHON = "/usr/bin/python3"
PIDS_ROOT = "/sys/fs/cgroup/pids"
RUNS_PARENT = os.path.join(PIDS_ROOT, "sandboy-runs")  # where exec mode makes each run's leaf
GONE_PID = 4194305  # above PID_MAX_LIMIT: a pid no process has (one that exited may be taken again at once)

# Forks up to N sleepers named MARKER (argv[0]) — `escape`: each behind a double fork and setsid —,
# says how many it started, then waits for the host's DONE file and exits (`exit`: at once).
SLEEPERS = r"""
import os, sys, time
marker, n, how, done = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
if how == "leave":  # before its first fork: out of its group, into the hierarchy's root
    for name in ("/sys/fs/cgroup/pids/tasks", "/sys/fs/cgroup/pids/cgroup.procs"):
        try:
            with open(name, "w") as fh:
                fh.write("0")
            print("left through", name, flush=True)
        except OSError as exc:
            print("refused", name, exc.strerror, flush=True)
started = 0
for _ in range(n):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        if how == "escape":
            os.setsid()
            if os.fork():
                os._exit(0)
        os.execv("/usr/bin/sleep", [marker, "300"])
    started += 1
    if how == "escape":
        os.waitpid(pid, 0)
print("started", started, flush=True)
if how != "exit":  # (`escape` too: the host reads the leaf before the command exits)
    for _ in range(3000):
        if os.path.exists(done):
            break
        time.sleep(0.01)
"""


@pytest.fixture
def tier():
    from sandboy.confine import namespaces

    if os.geteuid() != 0:
        pytest.skip("as an ordinary user limits.processes is RLIMIT_NPROC, a plan step: no cgroup")
    if not namespaces.availability()[0]:
        pytest.skip("exec mode keeps the pids cgroup itself under the namespace tier only")
    if not os.path.exists(PYTHON):
        pytest.skip(f"the probe runs {PYTHON}")


class Run:
    """One `sandboy run` of SLEEPERS, its stdout a pipe the test reads the count from."""

    def __init__(self, tmp_path, native: str, processes: int, n: int = 8, how: str = "wait", wall: int = 0,
                 env=None, extra_env=None):
        self.tmp = tmp_path
        self.said = []  # what the command said before its count
        self.marker = f"pids13-{os.getpid()}-{time.monotonic_ns()}"
        # (what the cage reads stays as it was from one run to the next, so a plan may be kept:
        # the script written once, the host's DONE files in a directory of their own)
        work, signals = tmp_path / "work", tmp_path / "signals"
        self.done = signals / f"done-{self.marker}"
        script = work / "sleepers.py"
        if not script.exists():
            work.mkdir()
            signals.mkdir()
            script.write_text(SLEEPERS)
        policy = tmp_path / "p.toml"
        limits = f"processes = {processes}\n" + (f"wall_seconds = {wall}\n" if wall else "")
        sys_fs = ', "/sys/fs/cgroup"' if how == "leave" else ""  # (read: what it may see of its groups)
        policy.write_text('version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc", '
                          f'"{work}", "{signals}"{sys_fs}]\nexec = ["/usr/bin", "/bin"]\n[limits]\n{limits}')
        env = {k: v for k, v in (env or os.environ).items() if k not in ("SANDBOY_NAMESPACES", "SANDBOY_PLAN_CACHE")}
        env.update(SANDBOY_NATIVE=native, SANDBOY_CACHE_DIR=str(tmp_path / "cache"), **(extra_env or {}))
        self.cli = subprocess.Popen([sys.executable, "-X", "importtime", SANDBOY, "run", "--policy", str(policy), "--",
                                     PYTHON, "-I", str(script), self.marker, str(n), how, str(self.done)],
                                    cwd=work, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, env=env, start_new_session=True)
        # (stderr a pipe, drained meanwhile: a file on fd 0-2 is a run the plan cache never keeps)
        self._stderr = []
        self._drain = threading.Thread(target=lambda: self._stderr.append(self.cli.stderr.read().decode()), daemon=True)
        self._drain.start()

    def started(self) -> int:
        line = self.cli.stdout.readline().decode()
        while line.startswith(("refused ", "left ")):
            self.said.append(line)
            line = self.cli.stdout.readline().decode()
        assert line.startswith("started "), (line, self.err())
        return int(line.split()[1])

    def end(self, seconds: float = 60) -> int:
        if not self.cli.stdout.closed and self.cli.poll() is None:
            self.done.touch()
        try:
            return self.cli.wait(seconds)
        finally:
            self.cli.stdout.close()

    def _text(self) -> str:
        self._drain.join(30)
        return "".join(self._stderr)

    def err(self) -> str:
        if self.cli.poll() is None:
            return "(running)"
        return "\n".join(line for line in self._text().splitlines() if not line.startswith("import time:"))

    @property
    def hit(self) -> bool:
        text = self._text()
        assert "import time:" in text and "sandboy.cli" in text  # the measurement works
        return "| sandboy.confine.cage\n" not in text

    def kill(self) -> None:
        if self.cli.poll() is None:
            self.cli.kill()
            self.cli.wait()
        for pid in named(self.marker):
            os.kill(pid, signal.SIGKILL)


def quiet_run(tmp_path, **kwargs) -> None:
    """A run with `limits.processes` whose command starts nothing and exits (as root under the
    tier: it makes `sandboy-runs/` where no run did yet, and sweeps the empty leaves of runs that
    are gone; `extra_env` tier off: the supervisor's groups instead)."""
    run = Run(tmp_path, "1", processes=5, n=0, how="exit", **kwargs)
    assert run.started() == 0 and run.end() == 0, run.err()


def leaf_of(pids: list) -> str:
    """The one pids cgroup every pid is in (host side), as a directory below PIDS_ROOT."""
    groups = {thread_cgroup("pids", pid, pid) for pid in pids}
    assert len(groups) == 1, groups
    return PIDS_ROOT + groups.pop()


def read(leaf: str, name: str) -> str:
    with open(os.path.join(leaf, name)) as fh:
        return fh.read().strip()


def settled_named(marker: str, count: int, seconds: float = 20) -> list:
    """The host pids named `marker` once `count` of them are up (a fork returns before the child's
    exec renames it)."""
    deadline = time.monotonic() + seconds
    while len(found := named(marker)) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    return found


def gone(marker: str, seconds: float = 10) -> list:
    deadline = time.monotonic() + seconds
    while named(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    return named(marker)


EXECUTORS = pytest.mark.parametrize("native", ["1", "0"], ids=["C executor", "Python executor"])


@EXECUTORS
def test_the_run_is_refused_at_the_limit_in_a_cgroup_of_its_own_removed_after(tier, tmp_path, native):
    """processes = 5: the command and 4 sleepers (the init is Sandboy's, the group's +1); the 5th
    fork is refused. Every one of them is in one fresh group below sandboy-runs/, pids.max 6,
    pids.peak 6; nothing of it, nor of the group, is left after the run."""
    run = Run(tmp_path, native, processes=5)
    try:
        assert run.started() == 4, run.err()
        pids = settled_named(run.marker, 4)
        assert len(pids) == 4, pids
        leaf = leaf_of(pids)
        assert os.path.dirname(leaf) == RUNS_PARENT, leaf
        assert read(leaf, "pids.max") == "6" and read(leaf, "pids.current") == "6"
        if os.path.exists(os.path.join(leaf, "pids.peak")):  # (Linux >= 6.1)
            assert read(leaf, "pids.peak") == "6"
        assert run.end() == 0, run.err()
        assert gone(run.marker) == []
        assert not os.path.exists(leaf), "the run's pids cgroup outlived it"
        assert len(named(run.marker)) == 0
    finally:
        run.kill()


@EXECUTORS
def test_a_twin_with_room_for_all_runs_them_all(tier, tmp_path, native):
    run = Run(tmp_path, native, processes=64)
    try:
        assert run.started() == 8, run.err()
        pids = settled_named(run.marker, 8)
        leaf = leaf_of(pids)
        assert read(leaf, "pids.max") == "65"
        assert run.end() == 0, run.err()
        assert not os.path.exists(leaf)
    finally:
        run.kill()


@EXECUTORS
@pytest.mark.parametrize("how", ["deadline", "SIGTERM", "double fork"])
def test_the_group_is_removed_however_the_run_ends(tier, tmp_path, native, how):
    """The deadline (wall_seconds, 137), a SIGTERM to `sandboy run` (it ends as the command did),
    a command that left a sleeper behind a double fork and setsid and exited: nothing named is
    left, nor the group."""
    run = Run(tmp_path, native, processes=5, how="escape" if how == "double fork" else "wait",
              wall=4 if how == "deadline" else 0)  # (time to read the leaf first, under load)
    try:
        assert run.started() >= 1, run.err()
        pids = settled_named(run.marker, 1)
        leaf = leaf_of(pids)
        if how == "SIGTERM":
            run.cli.send_signal(signal.SIGTERM)
            assert run.cli.wait(60) == -signal.SIGTERM, run.err()
        elif how == "deadline":
            assert run.cli.wait(60) == 137, run.err()
        else:  # the command exits; its sleeper, double-forked and setsid'd, stays behind it
            assert run.end() == 0, run.err()
        assert gone(run.marker) == []
        assert not os.path.exists(leaf), f"the run's pids cgroup outlived it ({how})"
    finally:
        run.kill()


@EXECUTORS
def test_the_command_cannot_leave_its_group(tier, tmp_path, native):
    """The attacker: root in the cage (no capabilities, but the owner of the cgroup files) writes
    "0" to the pids hierarchy's root `tasks` and `cgroup.procs` before it forks. Refused (its
    group's files are not writable in the cage); host side, its sleepers are still in the run's
    group and still refused at the limit."""
    run = Run(tmp_path, native, processes=5, how="leave")
    try:
        assert run.started() == 4, (run.said, run.err())
        assert [line.split()[0] for line in run.said] == ["refused", "refused"], run.said
        leaf = leaf_of(settled_named(run.marker, 4))
        assert os.path.dirname(leaf) == RUNS_PARENT, leaf
        assert run.end() == 0, run.err()
    finally:
        run.kill()


def _kept(tmp_path, native: str, processes: int, env=None) -> None:
    for _ in range(5):  # (files just written must settle before a plan is kept: the first run or two build)
        run = Run(tmp_path, native, processes=processes, n=0, how="exit", env=env)
        try:
            assert run.started() == 0
            assert run.end() == 0, run.err()
            if run.hit:
                return
        finally:
            run.kill()
    raise AssertionError(f"no hit: {list((tmp_path / 'cache').rglob('*'))}")


def test_a_kept_plan_is_limited_the_same_way(tier, tmp_path):
    """(The C executor's: the plan cache keeps no plan the Python stand-in ran.)"""
    native = "1"
    _kept(tmp_path, native, 5)
    run = Run(tmp_path, native, processes=5)
    try:
        assert run.started() == 4, run.err()
        leaf = leaf_of(settled_named(run.marker, 4))
        assert read(leaf, "pids.max") == "6"
        assert run.end() == 0, run.err()
        assert run.hit, "the run was built, not taken from the plan cache"
        assert not os.path.exists(leaf)
    finally:
        run.kill()


def _read_only_cgroups(argv: list) -> list:
    """`argv` in a mount namespace of its own where the pids hierarchy is mounted read-only (this
    mount only: `remount,bind`): no cgroup can be made there."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1)")
    return ["unshare", "-m", "--propagation", "private", "sh", "-c",
            f'mount -o remount,bind,ro {PIDS_ROOT} && exec "$@"', "sh", *argv]


@pytest.mark.parametrize("kept", [False, True], ids=["built", "kept plan"])
def test_no_cgroup_no_run(tier, tmp_path, kept):
    """Fail closed: where no pids cgroup can be made the run is refused (125, the key named) and
    the command never runs — a kept plan's run too (its start fails before the command: the build
    refuses, in its words)."""
    work = tmp_path / "work"
    work.mkdir()
    mark = work / "ran"
    policy = tmp_path / "q.toml"
    policy.write_text('version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc"]\nexec = ["/usr/bin", "/bin"]\n'
                      f'write = ["{work}"]\n[limits]\nprocesses = 5\n')
    env = dict(os.environ, SANDBOY_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("SANDBOY_NAMESPACES", None)
    if kept:
        env["SANDBOY_NATIVE"] = "1"  # (the plan cache keeps no plan the Python executor ran)
    argv = [SANDBOY, "run", "--policy", str(policy), "--", "/usr/bin/touch", str(mark)]

    def run(argv):
        return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=work, stdin=subprocess.DEVNULL)

    if kept:
        plans = tmp_path / "cache" / "plans"
        time.sleep(0.15)  # (the write root was just made: its stats must be settled for an entry)
        for _ in range(5):  # (a write root's first run keeps none: its mount point settles)
            twin = run(argv)
            assert twin.returncode == 0 and mark.exists(), twin.stderr
            if plans.is_dir() and list(plans.iterdir()):
                break
        assert plans.is_dir() and list(plans.iterdir()), "no plan kept"
        mark.unlink()
    proc = run(_read_only_cgroups(argv))
    assert proc.returncode == 125, proc.stderr
    assert "limits.processes" in proc.stderr and "no pids cgroup" in proc.stderr, proc.stderr
    assert not mark.exists(), "the command ran without its pids cgroup"
    twin = run(argv)  # the same run where cgroups can be made
    assert twin.returncode == 0 and mark.exists(), twin.stderr


def test_a_leaf_left_by_a_run_killed_outright_is_swept_by_the_next(tier, tmp_path):
    """`sandboy run` killed by SIGKILL cannot remove its group: the next run removes an empty leaf
    named after a pid that is gone — never one of a live run (it may be empty between its
    making and its init's join)."""
    quiet_run(tmp_path)  # (makes the parent where no run did yet)
    dead = os.path.join(RUNS_PARENT, f"{GONE_PID}-pids13test")
    live = os.path.join(RUNS_PARENT, f"{os.getpid()}-pids13test")
    os.mkdir(dead)
    os.mkdir(live)
    try:
        quiet_run(tmp_path)
        assert not os.path.exists(dead), "a leaf of a run that is gone was left"
        assert os.path.isdir(live), "a leaf of a live run was removed"
    finally:
        for path in (dead, live):
            if os.path.isdir(path):
                os.rmdir(path)


def test_a_changed_limit_is_a_miss_and_the_new_one_holds(tier, tmp_path):
    """ADR 0028's key: the limit is in the policy's bytes (the key) and its value in the entry's
    body (`CachedPlan._processes`). A plan kept for 5 does not serve 64: a miss, all 8 sleepers
    start in a group of 65; the plan then kept for 64 serves the next run, with the same group."""
    _kept(tmp_path, "1", 5)
    for hit in (False, True):
        run = Run(tmp_path, "1", processes=64)
        try:
            assert run.started() == 8, run.err()
            leaf = leaf_of(settled_named(run.marker, 8))
            assert read(leaf, "pids.max") == "65"
            assert run.end() == 0, run.err()
            assert run.hit is hit, "a plan kept for processes = 5 served processes = 64" if not hit else "no hit"
            assert not os.path.exists(leaf)
        finally:
            run.kill()


def _current(leaf: str):
    """The leaf's pids.current, or None once it is gone (another run as root swept it)."""
    try:
        return read(leaf, "pids.current")
    except FileNotFoundError:
        return None


def _members(leaf: str) -> list:
    try:
        return [int(pid) for pid in read(leaf, "cgroup.procs").split()]
    except FileNotFoundError:
        return []


def _state(pid: int):
    """The process's state letter (Z: a zombie), or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def test_sandboy_run_killed_outright_leaves_an_empty_leaf_the_next_run_removes(tier, tmp_path):
    """SIGKILL to `sandboy run` mid-run: nothing of it can remove the leaf, but its init dies with
    it (PR_SET_PDEATHSIG) and the PID namespace with the init — the leaf is left empty (host
    side: no marked process, `pids.current` 0) — and the next run removes it."""
    run = Run(tmp_path, "1", processes=5)
    try:
        assert run.started() == 4, run.err()
        leaf = leaf_of(settled_named(run.marker, 4))
        run.cli.kill()
        run.cli.wait(60)
        assert gone(run.marker) == [], "the run outlived sandboy run killed outright"
        deadline = time.monotonic() + 10  # (the init, orphaned, is reaped by the host's init)
        while _current(leaf) not in ("0", None) and time.monotonic() < deadline:
            time.sleep(0.02)
        left = _members(leaf)
        # what is left may only be the init's zombie: an orphan is reaped by the host's PID 1,
        # which on some machines (this CI's firecracker init) reaps late — nothing of it runs
        assert all(_state(pid) in ("Z", None) for pid in left), [(pid, _state(pid)) for pid in left]
    finally:
        run.kill()
    if not os.path.exists(leaf) or _members(leaf):
        return  # (swept by another run already; or a zombie not yet reaped holds it: no rmdir can)
    quiet_run(tmp_path)
    assert not os.path.exists(leaf), "the next run left the empty leaf of a run killed outright"


# Each protection taken out of a copy of the package (test_plan_cache.run_a_mutant), and the probe
# above that must then fail, as its own judge: (file, text, replacement, what the probe sees).
MUTANTS = {
    "the init's join": ("init_wait.py", "((group.join_step(),) if group is not None else ())", "()"),
    "the leaf's removal": ("init_wait.py", "            group.end()", "            pass"),
    "a hit's limit": ("plan_cache.py", "processes=self._processes)", "processes=0)"),
}


@pytest.mark.parametrize("mutant", list(MUTANTS))
def test_each_protection_taken_out_fails_its_probe(tier, tmp_path, mutant):
    """The probes above are not vacuous: with the join step gone the sleepers run outside any
    leaf of the run (all 8 start); with the removal gone the leaf outlives the run; with a hit's
    limit gone a kept plan starts all 8."""
    from test_plan_cache import run_a_mutant

    holder = type("Holder", (), {})()
    holder.env = dict(os.environ)
    run_a_mutant(holder, tmp_path, *MUTANTS[mutant])
    if mutant == "a hit's limit":
        _kept(tmp_path, "1", 5, env=holder.env)
    run = Run(tmp_path, "1", processes=5, env=holder.env)
    try:
        started = run.started()
        pids = settled_named(run.marker, started)
        groups = {thread_cgroup("pids", pid, pid) for pid in pids}
        assert run.end() == 0, run.err()
        if mutant == "the leaf's removal":
            (leaf,) = groups
            assert os.path.isdir(PIDS_ROOT + leaf), "the leaf was removed without its removal"
            os.rmdir(PIDS_ROOT + leaf)
        else:
            assert started == 8, f"{mutant} taken out, and still refused at the limit: {started}"
            if mutant == "a hit's limit":
                assert run.hit
    finally:
        run.kill()


@EXECUTORS
def test_with_the_tier_off_a_supervisor_still_bounds_the_run(tier, tmp_path, native):
    """SANDBOY_NAMESPACES=0: no PID namespace whose init could join, so the supervisor's own
    group holds the limit (`supervisor_needed`): still refused at the limit, host side the
    sleepers in a `sandboy-<pid>-...` group of the supervisor's, not in `sandboy-runs/`, and
    nothing of the run left after it."""
    run = Run(tmp_path, native, processes=5, extra_env={"SANDBOY_NAMESPACES": "0"})
    try:
        started = run.started()
        assert 1 <= started < 5, (started, run.err())
        leaf = leaf_of(settled_named(run.marker, started))
        assert os.path.basename(leaf).startswith("sandboy-") and "sandboy-runs" not in leaf, leaf
        assert run.end() == 0, run.err()
        assert gone(run.marker) == [] and not os.path.exists(leaf)
    finally:
        run.kill()


def test_sandboy_run_killed_at_any_point_of_its_start_leaves_nothing_running(tier, tmp_path):
    """SIGKILL to `sandboy run` at random points of its start (its build, the leaf's making, the
    clone, the init's first steps — the death signal, then the pids join — the command's start):
    host side, no process of any of the runs is left (the init dies with `sandboy run` from its
    first step on), nor any of their leaves once a later run has swept the empty ones."""
    import random

    markers = []
    for i in range(15):
        run = Run(tmp_path, "1", processes=5, n=1)
        markers.append(run.marker)
        time.sleep(random.uniform(0.02, 0.15))
        run.cli.kill()
        run.cli.wait(60)
        run.cli.stdout.close()
    left = {marker: gone(marker, 5) for marker in markers}
    from prockit import mentioning

    try:
        assert all(pids == [] for pids in left.values()), left
        assert all(mentioning(marker) == [] for marker in markers), "a run's command outlived sandboy run"
    finally:
        for marker in markers:
            for pid in mentioning(marker):
                os.kill(pid, signal.SIGKILL)
    quiet_run(tmp_path)  # (the sweep)
    # (the runs' leaves are named after their sandboy run's pid, each of which is gone)
    ours = [name for name in os.listdir(RUNS_PARENT)
            if name[:1].isdigit() and not os.path.exists(f"/proc/{name.split('-')[0]}")
            and _current(os.path.join(RUNS_PARENT, name)) not in ("0", None)]
    assert ours == [], ours


def test_a_supervisors_group_left_by_one_killed_outright_is_swept_by_the_next(tmp_path):
    """The supervisor's (and gate's) groups sit in the pids base itself, `sandboy-<pid>-<hex>`:
    a supervisor killed by SIGKILL cannot remove its own, and nothing else did (fifty gathered on
    the test machine in a day). The next supervised run removes an empty one named after a pid
    that is gone — never one of a live process, nor one still holding a process."""
    dead = os.path.join(PIDS_ROOT, f"sandboy-{GONE_PID}-coord13")
    live = os.path.join(PIDS_ROOT, f"sandboy-{os.getpid()}-coord13")
    busy = os.path.join(PIDS_ROOT, f"sandboy-{GONE_PID}-coord13busy")
    for path in (dead, live, busy):
        os.mkdir(path)
    holder = subprocess.Popen(["sleep", "60"])
    try:
        with open(os.path.join(busy, "cgroup.procs"), "w") as procs:
            procs.write(str(holder.pid))
        quiet_run(tmp_path, extra_env={"SANDBOY_NAMESPACES": "0"})  # tier off: the supervisor's group
        assert not os.path.exists(dead), "an empty group of a supervisor that is gone was left"
        assert os.path.isdir(live), "a group named after a live process was removed"
        assert os.path.isdir(busy), "a group still holding a process was removed"
    finally:
        holder.kill()
        holder.wait()
        for path in (dead, live, busy):
            remove_cgroup(path)
