"""Session 13 review of the cage from the attacker's side (redcage13).

What got through, each with its probe here (host side, a legitimate twin in the same run):

- Sandboy's cache trusts a file by its owner and mode alone (`_libc.read_private`, the parse
  cache's `load._cache_get`): a regular file of this euid that no one else may write. A git
  checkout writes exactly such files (the operator's, 0644 in 0755 directories), and so does any
  earlier cage of the same uid granted the directory before it became the cache. With the cache
  in the working copy (`SANDBOY_CACHE_DIR={cwd}/.cache`, the layout the cache-in-a-write-root
  review of session 12 kept working; `XDG_CACHE_HOME` or `HOME` in a CI workspace alike), a
  repository that ships `.cache/policies/<name>.marshal` — the policy's own bytes with another
  table — is run under the table it chose: here write on a directory outside every grant.
  Fixed in session 14 (cachekey14, ADR 0030): every cache file is sealed with a keyed MAC under a
  per-user secret in the kernel's user keyring, which no checkout and no cage can have.

- Exec mode under the tier without a git check started the namespace's init with no death
  signal: `sandboy run` killed outright (SIGKILL: a harness's timeout, `subprocess.kill`) left the
  init and the command running unwaited (ppid 1), past `limits.wall_seconds`, build and plan cache
  hit, both executors, root and uid 65534. Now every exec-mode wait sets PR_SET_PDEATHSIG
  (`init_wait.start_and_wait`), as a checked run and a supervision did.
- A file handed in on stdin is opened again by the init before the command starts, outside
  `limits.wall_seconds`; the open blocked where a concurrent writer of its directory had swapped a
  FIFO in at its path: the run hung for ever. Now opened O_NONBLOCK, the FIFO refused (125).

What held is listed in docs/threat-model.md ("Session 13 review of the cage").
"""

from __future__ import annotations

import _imp
import marshal
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sandboy.policy import load

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: userkit
import userkit  # noqa: E402
from prockit import mentioning  # noqa: E402

pytestmark = pytest.mark.needs_kernel

SANDBOY = os.path.join(os.path.dirname(sys.executable), "sandboy")
# what every policy here grants: the system's programs and libraries, read-only
SYSTEM = 'version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc", "/bin"]\nexec = ["/usr/bin", "/bin"]\n'
POLICY = SYSTEM + 'write = ["{cwd}"]\n'


def _env(**more) -> dict:
    """This process's environment without the caller's SANDBOY_ settings, and `more`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SANDBOY_")}
    env.update(more)
    return env


def _project(tmp_path: Path, policy: str) -> tuple:
    """(`project` holding `p.toml` with `policy`, `outside`: a directory no grant names)."""
    project, outside = tmp_path / "project", tmp_path / "outside"
    project.mkdir()
    outside.mkdir()
    (project / "p.toml").write_text(policy)
    return project, outside


def _shipped_parse_cache_entry(cache: Path, policy: Path, outside: Path) -> Path:
    """What a repository puts in its `.cache/policies/`: the policy file's exact bytes with a table
    of its own (every name and format below is in Sandboy's public source)."""
    raw = policy.read_bytes()
    table = {"version": 1, "fs": {"read": ["/usr", "/lib", "/lib64", "/etc", "/bin"], "exec": ["/usr/bin", "/bin"],
                                  "write": ["{cwd}", str(outside)]}}
    name = _imp.source_hash(load._CACHE_FORMAT, os.fsencode(str(policy))).hex() + ".marshal"
    entry = cache / "policies" / name
    entry.parent.mkdir(parents=True)
    entry.write_bytes(marshal.dumps((load._CACHE_FORMAT, raw, table)))
    return entry


def _run(project: Path, outside: Path, name: str, tier: str) -> subprocess.CompletedProcess:
    env = _env(SANDBOY_CACHE_DIR=str(project / ".cache"), SANDBOY_NAMESPACES=tier)
    return subprocess.run([SANDBOY, "run", "--policy", str(project / "p.toml"), "--", "/bin/sh", "-c",
                           f"echo planted > {outside}/{name}"], cwd=project, env=env, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("tier", ["1", "0"])
def test_twin_a_cache_in_the_working_copy_keeps_the_policy(tmp_path, tier):
    project, outside = _project(tmp_path, POLICY)
    first = _run(project, outside, "first", tier)
    second = _run(project, outside, "second", tier)  # (the parse cache's own entry read back)
    assert first.returncode != 0 and second.returncode != 0, (first.stderr, second.stderr)
    assert sorted(os.listdir(outside)) == []


@pytest.mark.parametrize("tier", ["1", "0"])
def test_a_parse_cache_entry_the_checkout_ships_does_not_widen_the_policy(tmp_path, tier):
    project, outside = _project(tmp_path, POLICY)
    _shipped_parse_cache_entry(project / ".cache", project / "p.toml", outside)
    proc = _run(project, outside, "shipped", tier)
    assert not (outside / "shipped").exists(), "the checkout's cache file chose the policy: " + proc.stderr
    assert proc.returncode != 0, proc.stderr


# --- exec mode's waiting parent killed: the init must not outlive it --------------------------

def _started_then_killed(argv: list, cwd: Path, env: dict, marker: str, kill: bool = True) -> tuple:
    """Start `argv` (a `sandboy run` whose command prints "started" first) and, with `kill`, SIGKILL
    it once the line came (what a harness's timeout does). Returns (its exit status, the host pids
    left carrying `marker` 4 s later, past the deadline)."""
    import signal

    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"started\n", proc.stderr.read()
        if kill:
            os.kill(proc.pid, signal.SIGKILL)
        status = proc.wait(timeout=30)
        time.sleep(4)
        return status, mentioning(marker)
    finally:
        for pid in mentioning(marker):  # (tidy what a failing probe left)
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        proc.stdout.close()
        proc.stderr.close()


def _start_then_kill_sandboy(tmp_path: Path, marker: str, env_more: dict, kill: bool):
    """`sandboy run` of a read-only policy with `limits.wall_seconds = 2` (exec mode, the tier, no
    git check: the unsupervised wait), its command printing a line then sleeping 30 s (0.2 s when
    not killed); see `_started_then_killed`."""
    env = _env(SANDBOY_CACHE_DIR=str(tmp_path / "cache"), HOME=str(tmp_path), **env_more)
    argv = [SANDBOY, "run", "--policy", str(tmp_path / "p.toml"), "--", "/bin/sh", "-c",
            f"echo started; sleep 30; : {marker}" if kill else f"echo started; sleep 0.2; : {marker}"]
    return _started_then_killed(argv, tmp_path, env, marker, kill)


def _deadline_policy(tmp_path: Path) -> None:
    (tmp_path / "p.toml").write_text(SYSTEM + "[limits]\nwall_seconds = 2\n")


RUNS = [pytest.param({}, 1, id="C executor, build"), pytest.param({}, 2, id="C executor, plan cache hit"),
        pytest.param({"SANDBOY_NATIVE": "0"}, 1, id="Python executor")]


@pytest.mark.parametrize("env_more, nth", RUNS)
def test_killing_sandboy_run_ends_its_cage_not_just_the_waiter(tmp_path, env_more, nth):
    """Under the tier, exec mode's `sandboy run` waits for the namespace's init (it holds the
    deadline there). Killed with SIGKILL, the init and the command ran on unwaited (ppid 1), past
    `limits.wall_seconds`, while the caller saw its pid gone: the init now dies with it
    (PR_SET_PDEATHSIG), as a supervised run's child does."""
    from sandboy.confine import namespaces

    if not namespaces.availability()[0]:
        pytest.skip("no namespace tier here")
    _deadline_policy(tmp_path)
    marker = f"redcage13-{os.urandom(6).hex()}"
    for _ in range(nth - 1):  # (the plan kept by a first run: the second is a hit)
        assert _start_then_kill_sandboy(tmp_path, marker, env_more, kill=False)[0] == 0
        assert list((tmp_path / "cache" / "plans").iterdir()), "no plan kept: the next run is no hit"
    status, left = _start_then_kill_sandboy(tmp_path, marker, env_more, kill=True)
    assert status == -9
    assert left == [], f"the cage outlived sandboy run past its deadline: pids {left}"


def test_twin_an_unkilled_run_still_ends_as_its_command(tmp_path):
    from sandboy.confine import namespaces

    if not namespaces.availability()[0]:
        pytest.skip("no namespace tier here")
    _deadline_policy(tmp_path)
    marker = f"redcage13-{os.urandom(6).hex()}"
    assert _start_then_kill_sandboy(tmp_path, marker, {}, kill=False) == (0, [])


def test_as_an_ordinary_user_killing_sandboy_run_ends_its_cage(tmp_path):
    from sandboy.confine import namespaces

    if not namespaces.availability()[0]:
        pytest.skip("no namespace tier here")
    userkit.skip_unless_nobody_can_run()
    import sandboy

    with userkit.world_readable_tmp("redcage13-") as where:
        _deadline_policy(where)
        marker = f"redcage13-{os.urandom(6).hex()}"
        src = os.path.dirname(os.path.dirname(os.path.abspath(sandboy.__file__)))
        # (as uid 65534: the system python3 running this tree's sandboy, as userkit's callers do)
        status, left = _start_then_kill_sandboy_as_user(where, marker, {"PYTHONPATH": src, "PATH": "/usr/bin:/bin"})
    assert status == -9
    assert left == [], f"the cage outlived sandboy run: pids {left}"


def _start_then_kill_sandboy_as_user(where: Path, marker: str, env: dict):
    env = dict(env, SANDBOY_CACHE_DIR=str(where / "cache"), HOME=str(where))
    argv = userkit.as_user(["/usr/bin/python3", "-m", "sandboy", "run", "--policy", str(where / "p.toml"), "--",
                            "/bin/sh", "-c", f"echo started; sleep 30; : {marker}"])
    return _started_then_killed(argv, where, env, marker)  # (setpriv execs: the pid is sandboy's own)


# --- a file handed in on stdin: the init's reopen must never block --------------------------

def test_the_reopen_of_a_file_handed_in_never_blocks(tmp_path):
    """Kernel-free: the init opens the path of a file handed in on fd 0-2 again (under the tier),
    before the command starts — outside `limits.wall_seconds`. Opened blocking, a FIFO another
    run swapped in at that path meanwhile held the open, and the run, for ever: every kind is
    opened O_NONBLOCK (the check after it refuses a FIFO), the caller's O_NONBLOCK put back."""
    from sandboy.confine import _libc, namespaces

    data = tmp_path / "in.txt"
    data.write_text("hello\n")
    for status in (os.O_RDONLY, os.O_RDONLY | os.O_NONBLOCK):
        steps = namespaces._reopen_steps(0, str(data), os.stat(data), status, 3)
        (_label, (nr, _flags, _dirfd, _path, open_flags)) = steps[0]
        assert nr == _libc.SYS_OPENAT and open_flags & os.O_NONBLOCK, steps[0]
        restore = [args for label, args in steps if "caller's flags" in label]
        assert restore and restore[0][-1] == status & os.O_NONBLOCK, steps


def test_a_fifo_swapped_in_for_the_file_on_stdin_cannot_hold_the_run(tmp_path):
    """Host side: a concurrent writer of the directory of the operator's stdin file swaps a FIFO
    in and out every 0.3 ms while `sandboy run -- cat < in.txt` runs 30 times with
    `wall_seconds = 2`: each run ends within 6 s — 0 with the file's bytes, or 125 where the swap
    met the reopen. Before: 2 of 30 hung (the init blocked opening the FIFO for reading)."""
    import threading

    from sandboy.confine import namespaces

    if not namespaces.availability()[0]:
        pytest.skip("no namespace tier here (without it fd 0 is passed on as it is)")
    data = tmp_path / "data"
    data.mkdir()
    (data / "in.txt").write_text("hello\n")
    os.mkfifo(data / "f")
    _deadline_policy(tmp_path)
    env = _env(SANDBOY_CACHE_DIR=str(tmp_path / "cache"))
    argv = [SANDBOY, "run", "--policy", str(tmp_path / "p.toml"), "--", "/bin/cat"]
    with open(data / "in.txt", "rb") as stdin:
        twin = subprocess.run(argv, stdin=stdin, capture_output=True, env=env, timeout=60)
        assert (twin.returncode, twin.stdout) == (0, b"hello\n"), twin.stderr

    stop = threading.Event()

    def swap() -> None:
        while not stop.is_set():
            os.rename(data / "in.txt", data / "real")
            os.rename(data / "f", data / "in.txt")
            time.sleep(0.0003)
            os.rename(data / "in.txt", data / "f")
            os.rename(data / "real", data / "in.txt")
            time.sleep(0.0003)

    outcomes = []
    with open(data / "in.txt", "rb") as stdin:
        swapper = threading.Thread(target=swap)
        swapper.start()
        try:
            for _ in range(30):
                stdin.seek(0)
                try:
                    proc = subprocess.run(argv, stdin=stdin, capture_output=True, env=env, timeout=6)
                    outcomes.append((proc.returncode, proc.stdout, proc.stderr.decode()[-200:]))
                except subprocess.TimeoutExpired:
                    outcomes.append(("hung", b"", ""))
        finally:
            stop.set()
            swapper.join()
    assert all(rc != "hung" for rc, _, _ in outcomes), outcomes
    assert all((rc, out) == (0, b"hello\n") or rc == 125 for rc, out, _ in outcomes), outcomes


# --- the policy file in a write root: the next run's rules ----------------------------------

WIDEN = "sed -i 's|^write = .*|write = [\".\", \"{outside}\"]|' p.toml; echo edited=$?"


def _policy_in_the_project(tmp_path: Path) -> tuple:
    project, outside = _project(tmp_path, SYSTEM + 'write = ["."]\n')
    return project, outside, _env(SANDBOY_CACHE_DIR=str(tmp_path / "cache"))


def _run_in(project: Path, env: dict, script: str) -> subprocess.CompletedProcess:
    return subprocess.run([SANDBOY, "run", "--policy", "p.toml", "--", "/bin/sh", "-c", script], cwd=project, env=env,
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60)


@pytest.mark.parametrize("runs", [1, 3], ids=["build", "plan cache hit"])
def test_the_command_cannot_rewrite_the_policy_of_its_next_run(tmp_path, runs):
    """`sandboy run --policy p.toml` with p.toml in the project and `write = ["."]` — the README's
    own layout: the command widened p.toml (`write` on a directory outside), and the next run of
    the same command line wrote there. Now the policy file is read-only in the cage (a row of
    Sandboy's own installation: bound read-only under the tier), built or kept; host side: its
    bytes, and nothing outside."""
    from sandboy.confine import namespaces

    if not namespaces.availability()[0]:
        pytest.skip("no namespace tier here (without it: degraded, see the forced-off test)")
    project, outside, env = _policy_in_the_project(tmp_path)
    before = (project / "p.toml").read_bytes()
    for _ in range(runs - 1):  # (the plan kept by earlier runs: the last is a hit)
        assert _run_in(project, env, "true").returncode == 0
    widen = _run_in(project, env, WIDEN.format(outside=outside) + "; echo work > built.txt")
    assert "edited=0" not in widen.stdout, widen
    assert (project / "p.toml").read_bytes() == before
    assert (project / "built.txt").read_text() == "work\n"  # twin: the rest of the project is the command's
    after = _run_in(project, env, f"echo planted > {outside}/x")
    assert after.returncode != 0 and os.listdir(outside) == [], after


def test_without_the_tier_a_writable_policy_file_is_said(tmp_path):
    """Forced off, Landlock could only split the working directory around the file (no new entry
    in it at all): the policy file stays writable and the run says so (`degraded:`)."""
    project, _outside, env = _policy_in_the_project(tmp_path)
    env["SANDBOY_NAMESPACES"] = "0"
    proc = _run_in(project, env, "echo work > new.txt")
    assert proc.returncode == 0 and (project / "new.txt").exists(), proc.stderr
    assert "the policy file stays writable" in proc.stderr and str(project / "p.toml") in proc.stderr


def test_twin_a_policy_outside_the_write_roots_costs_nothing(tmp_path):
    project, _outside, env = _policy_in_the_project(tmp_path)
    (tmp_path / "p.toml").write_bytes((project / "p.toml").read_bytes())
    proc = subprocess.run([SANDBOY, "run", "--policy", str(tmp_path / "p.toml"), "--", "/bin/sh", "-c",
                           "echo work > new.txt"], cwd=project, env=dict(env, SANDBOY_NAMESPACES="0"),
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60)
    assert proc.returncode == 0 and "policy file" not in proc.stderr, proc.stderr


def test_a_policy_reached_through_a_retargeted_link_is_protected_where_it_now_is(tmp_path):
    """`--policy links/cfg/p.toml` with `links/cfg -> project/a` (the link outside the write root,
    the files inside it), `a/p.toml` and `b/p.toml` holding the same bytes: the kept plan protected
    `a/p.toml` (its realpath). `cfg` retargeted to `b` by the operator: the key's path and bytes
    are the same, and no watched directory changed, but the file is another (its identity is in
    the key): a miss, whose build protects `b/p.toml` — which a hit of the old plan left writable,
    for the command to widen the next run's rules."""
    from sandboy.confine import namespaces

    if not namespaces.availability()[0]:
        pytest.skip("no namespace tier here")
    project, outside, env = _policy_in_the_project(tmp_path)
    for name in ("a", "b"):
        (project / name).mkdir()
        (project / name / "p.toml").write_bytes((project / "p.toml").read_bytes())
    links = tmp_path / "links"
    links.mkdir()
    os.symlink(project / "a", links / "cfg")
    policy = str(links / "cfg" / "p.toml")
    argv = [sys.executable, "-X", "importtime", SANDBOY, "run", "--policy", policy, "--", "/bin/sh", "-c"]

    def run(script: str):
        proc = subprocess.run(argv + [script], cwd=project, env=env, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=60)
        return proc, "| sandboy.confine.cage\n" not in proc.stderr

    run("true")
    time.sleep(1.1)  # (the build's stats settled: the next runs are hits)
    run("true")
    assert run("true")[1]  # kept: the next run is a hit
    os.unlink(links / "cfg")
    os.symlink(project / "b", links / "cfg")
    before = (project / "b" / "p.toml").read_bytes()
    widen, hit = run("sed -i 's|^write = .*|write = [\".\", \"%s\"]|' b/p.toml; echo edited=$?" % outside)
    assert not hit and "edited=0" not in widen.stdout, widen.stderr[-500:]
    assert (project / "b" / "p.toml").read_bytes() == before
