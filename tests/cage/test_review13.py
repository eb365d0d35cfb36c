"""Security review of session 13's run-path changes, from the attacker's side (rvsec13).

What was attacked: what can change between a kept plan's build and a hit, between two runs, or
during one, that the new cheap paths do not see —

- the pids cgroup exec mode makes as root for `limits.processes` (pids13: `pids_cgroup.for_run`,
  `init_wait.start_and_wait`): a kept plan run with the tier forced off; two kept-plan runs at
  once; a hostile leaf in `sandboy-runs/` for the sweep (named after a dead run, holding a
  process); a caller already under a tighter pids limit of its own (the leaf must be below it,
  not at the hierarchy's root); a write root ON a cgroup file system (a HOLE: the command moved
  itself out of its group — fixed, `protections.refuse_a_cgroup_the_command_could_leave`),
  also mounted on a kept plan's root after it was kept;
- the git check's walk in C (walk13: `_native_walk.c`) against its Python stand-in on a tree's
  limits: 255-byte names, a chain beyond PATH_MAX (both report the same directory unlistable,
  ENAMETOOLONG, which the check then fails closed on), a root reached through a symlink;
- the deny globs' matcher without fnmatch (build13: `deny_globs.name_matcher`): names a hostile
  tree holds (newlines, leading dots, undecodable bytes, the pattern's own metacharacters) must
  match exactly as fnmatch matches them, and a pathological pattern must stay cheap.

Every run is checked from the host side (the processes in /proc, their cgroups, the cgroup
directories). Each attack has its twin that still works.
"""

from __future__ import annotations

import fnmatch
import os
import subprocess
import sys
from pathlib import Path

import pytest
from prockit import remove_cgroup

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_exec_pids_cgroup import (  # noqa: E402,F401
    GONE_PID, PIDS_ROOT, RUNS_PARENT, SANDBOY, Run, _kept, gone, leaf_of, quiet_run, read, settled_named, tier)


# --- the run's pids cgroup (pids13) ------------------------------------------------------------

def test_a_plan_kept_under_the_tier_does_not_serve_a_tier_off_run_unbounded(tier, tmp_path):
    """The plan was kept under the tier, where the init's pids cgroup holds the limit; the next
    run forces the tier off (SANDBOY_NAMESPACES=0: no PID namespace whose init could join). Hit or
    miss, the run is bounded: host side fewer than 5 of 8 sleepers start, and nothing of the run
    (processes, a leaf) is left."""
    _kept(tmp_path, "1", 5)
    run = Run(tmp_path, "1", processes=5, extra_env={"SANDBOY_NAMESPACES": "0"})
    try:
        started = run.started()
        assert 1 <= started < 5, (started, run.err())
        leaf = leaf_of(settled_named(run.marker, started))
        assert read(leaf, "pids.max") in ("5", "6"), leaf
        assert run.end() == 0, run.err()
        assert gone(run.marker) == [] and not os.path.exists(leaf)
    finally:
        run.kill()


def test_two_kept_plan_runs_at_once_are_each_bounded_in_a_leaf_of_their_own(tier, tmp_path):
    """Two hits of the same kept plan running together: each in a leaf of its own (the sweep the
    second run's `for_run` makes never takes the first's, empty between its making and its init's
    join), each bounded at its own limit, both leaves gone after."""
    _kept(tmp_path, "1", 5)
    first, second = Run(tmp_path, "1", processes=5), Run(tmp_path, "1", processes=5)
    try:
        assert first.started() == 4, first.err()
        assert second.started() == 4, second.err()
        leaves = {leaf_of(settled_named(first.marker, 4)), leaf_of(settled_named(second.marker, 4))}
        assert len(leaves) == 2, leaves
        assert all(read(leaf, "pids.max") == "6" for leaf in leaves)
        assert first.end() == 0 and second.end() == 0, (first.err(), second.err())
        assert first.hit and second.hit
        assert not any(os.path.exists(leaf) for leaf in leaves)
    finally:
        first.kill()
        second.kill()


def test_the_sweep_never_empties_or_removes_a_leaf_holding_a_process(tier, tmp_path):
    """A leaf in `sandboy-runs/` named after a run that is gone, but holding a process (what a
    concurrent writer, or a run of another PID namespace whose pid means nothing here, may leave):
    the next run's sweep must neither kill what is in it nor take the leaf. Its twin, the same name
    empty, is swept."""
    quiet_run(tmp_path)  # (makes the parent where no run did yet)
    held, empty = os.path.join(RUNS_PARENT, f"{GONE_PID}-rvsec13held"), os.path.join(RUNS_PARENT, f"{GONE_PID}-rvsec13empty")
    os.mkdir(held)
    os.mkdir(empty)
    sleeper = subprocess.Popen(["/usr/bin/sleep", "300"])
    try:
        with open(os.path.join(held, "cgroup.procs"), "w") as fh:
            fh.write(str(sleeper.pid))
        quiet_run(tmp_path)
        assert sleeper.poll() is None, "the sweep killed a process it did not start"
        assert os.path.isdir(held) and read(held, "cgroup.procs") == str(sleeper.pid)
        assert not os.path.exists(empty), "the twin: an empty leaf of a run that is gone was left"
    finally:
        sleeper.kill()
        sleeper.wait()
        for path in (held, empty):
            remove_cgroup(path)


# Moves itself into the pids group $GROUP (the caller's own, tighter limit), then runs sandboy.
IN_GROUP = 'echo $$ > "$GROUP/cgroup.procs" && exec "$@"'


def _wrapped(prefix: list, *args, **kwargs) -> Run:
    """A `Run` whose `sandboy run` is started through `prefix` (its argv put before it)."""
    real = subprocess.Popen

    def popen(argv, *a, **kw):
        return real([*prefix, *argv], *a, **kw)

    subprocess.Popen = popen
    try:
        return Run(*args, **kwargs)
    finally:
        subprocess.Popen = real


def test_a_caller_under_a_tighter_pids_limit_stays_under_it(tier, tmp_path):
    """`sandboy run` started by a caller that is itself in a pids group of 6 tasks: the run's leaf
    is made below the caller's group (`_pids_bases`), never at the hierarchy's root, where the
    policy's 64 would have lifted the caller's own limit. Host side: the leaf's path is below the
    caller's group and fewer than 6 of 8 sleepers start (the caller's shell, sandboy and the init
    count too). Twin: the same run outside that group starts all 8."""
    group = os.path.join(PIDS_ROOT, f"rvsec13-caller-{os.getpid()}")
    os.mkdir(group)
    try:
        with open(os.path.join(group, "pids.max"), "w") as fh:
            fh.write("6")
        run = _wrapped(["/bin/sh", "-c", IN_GROUP, "sh"], tmp_path, "1", processes=64, extra_env={"GROUP": group})
        try:
            started = run.started()
            assert started < 6, (started, run.err())
            leaf = leaf_of(settled_named(run.marker, started))
            assert leaf.startswith(group + "/"), (leaf, group)
            assert run.end() == 0, run.err()
            assert not os.path.exists(leaf)
        finally:
            run.kill()
        twin = Run(tmp_path, "1", processes=64)
        try:
            assert twin.started() == 8, twin.err()
            assert twin.end() == 0, twin.err()
        finally:
            twin.kill()
    finally:
        remove_cgroup(os.path.join(group, "sandboy-runs"))  # (the runs' parent, kept between runs)
        remove_cgroup(group)


# --- deny globs matched without fnmatch (build13) ----------------------------------------------

HOSTILE_NAMES = [
    "key.pem", ".pem", "x.pem\n", "\n.pem", "a\nb.pem", "KEY.PEM", "key.pem.bak", "key.pe", "key.pemm",
    "*.pem", "?.pem", "k*y.pem", "id_rsa", "id_", "id_\n", "\udcff.pem", "\udcffid_x", ".", "..", "é.pem",
    "a" * 255, "a" * 254 + "b", "ab" * 100 + "c", "x" * 200 + ".pem", "",
]
PATTERNS = [
    "*.pem", "*", ".*", "?", "??", "id_*", "*_rsa", "k?y*", "*a*a*a*a*a*a*b", "*?*?*?", "a*", "*b",
    "key.pem", "*\n*", "*.pem*", "**", "?*?", "*.p?m", "*é*",
]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_the_deny_glob_matcher_matches_hostile_names_as_fnmatch(pattern):
    """A name the cheap matcher passes where fnmatch would match it is a secret left granted
    (the deny split grants it); one it matches where fnmatch would not only denies too much. Both
    ways must agree on names a hostile tree may hold."""
    from sandboy.confine.deny_globs import name_matcher

    matches = name_matcher(pattern)
    for name in HOSTILE_NAMES:
        assert matches(name) == fnmatch.fnmatchcase(name, pattern), (pattern, name)


def test_a_pathological_deny_glob_stays_cheap():
    """`*a*a*a...*b` against a long name of a's: a backtracking matcher takes exponential time
    there (a repository's name could hold the build for ever, as redinput12's capability matcher
    did); the leftmost placement is linear per piece. Counted, not timed: the name's characters
    looked at, through the matcher's one primitive."""
    from sandboy.confine import deny_globs

    pattern = "*a" * 40 + "*b"
    name = "a" * 255
    assert deny_globs.name_matcher(pattern)(name) is False
    assert deny_globs.name_matcher(pattern)(name[:-1] + "b") is True
    assert fnmatch.fnmatchcase(name[:-1] + "b", pattern)


# --- a write root ON a cgroup file system (found by this review) -------------------------------

MOVE_OUT = 'echo $$ > "$1/cgroup.procs" && echo moved'


@pytest.mark.parametrize("processes", [5, 0], ids=["limited (refused)", "twin: no limit (runs)"])
def test_a_write_root_on_a_cgroup_file_system_cannot_lift_limits_processes(tier, tmp_path, processes):
    """HOLE found here (fixed: protections.refuse_a_cgroup_the_command_could_leave): a
    write root lying ON a cgroup file system is no mount strictly below a write root, so
    `kernel_mounts.refuse` let it through, and with `limits.processes` as root the command wrote
    its pid into a group outside its own (`echo $$ > G/cgroup.procs`) and ran unbounded — the
    run's leaf (exec mode) and a supervisor's group alike. Now 125, the command never run; host
    side the group holds nothing. Twin: without `limits.processes` the grant stays the policy's
    explicit choice and runs (there is no limit to lift)."""
    group = os.path.join(PIDS_ROOT, f"rvsec13-grant-{os.getpid()}")
    os.mkdir(group)
    try:
        policy = tmp_path / "g.toml"
        limits = f"[limits]\nprocesses = {processes}\n" if processes else ""
        policy.write_text('version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc"]\nexec = ["/usr/bin", "/bin"]\n'
                          f'write = ["{group}"]\n{limits}')
        env = dict(os.environ, SANDBOY_CACHE_DIR=str(tmp_path / "cache"))
        env.pop("SANDBOY_NAMESPACES", None)
        proc = subprocess.run([SANDBOY, "run", "--policy", str(policy), "--", "/bin/sh", "-c", MOVE_OUT, "sh", group],
                              capture_output=True, text=True, env=env, cwd=tmp_path, stdin=subprocess.DEVNULL)
        if processes:
            assert proc.returncode == 125, (proc.returncode, proc.stdout, proc.stderr)
            assert "moved" not in proc.stdout, "the command left its pids cgroup"
            assert "limits.processes" in proc.stderr and group in proc.stderr, proc.stderr
        else:
            assert proc.returncode == 0 and "moved" in proc.stdout, (proc.stdout, proc.stderr)
        assert read(group, "cgroup.procs") == ""  # (host side: nothing of the run left in it)
    finally:
        remove_cgroup(group)


# In a mount namespace of its own: the plan kept for a plain write root, then the pids hierarchy
# mounted ON that root, and the same run again; each run's exit code and whether the command moved.
CGROUP_ON_A_KEPT_ROOT = r"""
mount --make-rprivate / || exit 97
run() { out=$("$SANDBOY" -X importtime "$SCRIPT" run --policy "$POLICY" -- /bin/sh -c "$MOVE" sh "$ROOT" \
        </dev/null 2>&1); echo "rc=$? built=$(echo "$out" | grep -c 'sandboy.confine.cage$') $(echo "$out" | grep -c '^moved')"; }
for i in 1 2 3; do run >/dev/null; sleep 0.1; done
run
mount -t cgroup -o pids cgroup "$ROOT" || exit 97
mkdir "$ROOT/rvsec13-on-a-kept-root" || exit 97
ROOT="$ROOT/rvsec13-on-a-kept-root"
run
rmdir "$ROOT"
"""


def test_a_cgroup_file_system_mounted_on_a_kept_write_root_is_refused_on_the_next_run(tier, tmp_path):
    """The kept plan's side of the same hole: its write root a plain directory when kept (the
    twin: a hit, its `cgroup.procs` a plain file it writes), then the pids hierarchy mounted ON it.
    The next run is a miss (the fingerprint's stat of the root is another inode), and the build
    refuses it: 125, the command never moved into a group outside its own. (Without the fix the
    miss runs it: rc 0, moved — tried by hand.)"""
    import shutil

    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1)")
    root = tmp_path / "root"
    root.mkdir()
    policy = tmp_path / "k.toml"
    policy.write_text('version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc"]\nexec = ["/usr/bin", "/bin"]\n'
                      f'write = ["{root}"]\n[limits]\nprocesses = 5\n')
    env = dict(os.environ, SANDBOY_CACHE_DIR=str(tmp_path / "cache"), SANDBOY=sys.executable, SCRIPT=SANDBOY,
               POLICY=str(policy), ROOT=str(root), MOVE=MOVE_OUT)
    env.pop("SANDBOY_NAMESPACES", None)
    env["SANDBOY_NATIVE"] = "1"  # (the plan cache keeps no plan the Python executor ran: the twin is a hit)
    proc = subprocess.run(["unshare", "-m", "/bin/sh", "-c", CGROUP_ON_A_KEPT_ROOT], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)
    kept, mounted = proc.stdout.splitlines()
    assert kept == "rc=0 built=0 1", proc.stdout  # the twin: a hit (no compiler), its write a plain file
    assert mounted == "rc=125 built=1 0", proc.stdout  # a miss, refused by the build, never moved


# --- the git check's walk in C against its Python stand-in (walk13) ----------------------------

def _deep(root: Path, levels: int, name: str) -> None:
    """`levels` directories named `name` one in another below `root`, made by a file descriptor
    each (the whole path is soon beyond PATH_MAX), a `.git` and a `HEAD` at the bottom."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(levels):
            os.mkdir(name, dir_fd=fd)
            fd, above = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd), fd
            os.close(above)
        os.mkdir(".git", dir_fd=fd)
        os.close(os.open("HEAD", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    finally:
        os.close(fd)


@pytest.mark.parametrize("levels,name", [(3, "n" * 255), (30, "d" * 200)], ids=["255-byte names", "beyond PATH_MAX"])
def test_the_c_walk_and_its_stand_in_agree_on_names_at_the_limits(tmp_path, levels, name):
    """A hostile tree's limits: names of 255 bytes, and a chain of directories whose whole path
    passes PATH_MAX (4096) — where a path-based lstat or opendir fails (ENAMETOOLONG) where a
    descriptor-based one would not, the C walk must answer as the stand-in does (the same events,
    the same directory reported unlistable), or the two checks would see different trees: at
    launch, after the run, and with the census's listings trusted."""
    from sandboy.confine import gitcheck

    if gitcheck._native_scan() is None:
        pytest.skip("the C walk is not built here")
    from test_gitcheck_native_walk import _same

    root = tmp_path / "root"
    root.mkdir()
    _deep(root, levels, name)
    census = _same(root)
    assert census[1], "no event: a `.git` or an unlistable directory is down there"
    for since in (0, 1 << 62):
        _same(root, census=False, listings=census[2], since=since, cut=1 << 62)


def test_the_c_walk_and_its_stand_in_agree_on_a_root_reached_through_a_symlink(tmp_path):
    """A root spelled through a symlink (the walk is handed realpaths, but a directory above one
    may be swapped for a link between the snapshot and the check): both walks follow it the same."""
    from sandboy.confine import gitcheck

    if gitcheck._native_scan() is None:
        pytest.skip("the C walk is not built here")
    from test_gitcheck_native_walk import _same, _tree

    real = _tree(tmp_path)
    link = tmp_path / "via"
    link.symlink_to(real)
    census = _same(link)
    _same(link, census=False, listings=census[2], since=0, cut=1 << 62)
