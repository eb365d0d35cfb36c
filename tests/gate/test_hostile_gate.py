"""A hostile working copy against the gate's preparation of a step (issue 8, item 1).

Deny globs are matched against the working copy at launch. Eight symlinks `a…h -> .` and a
pattern of `*` components made the walk exponential (11 minutes at depth 12), before any step
deadline, and SIGTERM / ^C were not looked at while a cage was built. Checked from the outside:
the gate's wall time, its exit code and its report."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from sandboy.confine import landlock
from sandboy.confine.deny_globs import GlobBudget
from sandboy.errors import CageError

from gatekit import by_name, make_repo, run_json, survivors

# The step policy keeps what a shell needs; the deny patterns are the attack.
POLICY = """
[policy.p]
version = 1
fs.read = ["/usr", "/lib", "/lib64", "/bin", "/etc", "."]
fs.exec = ["/usr/bin", "/bin", "/usr/lib", "/lib", "/lib64"]
fs.deny = [{denies}]
"""


def _gate(denies: list[str], run: str = "echo ran") -> str:
    quoted = ", ".join(json.dumps(d) for d in denies)
    return f"""
        [[step]]
        name = "deny"
        run = "{run}"
        policy = "p"
    """ + POLICY.format(denies=quoted)


def test_globs_never_follow_symlinks(tmp_path, fake_home):
    repo = make_repo(tmp_path, _gate(["{repo}/" + "*/" * 12 + "nothing", "{repo}/**/*.pem"]))
    for name in "abcdefgh":
        os.symlink(".", repo / name)
    (repo / "real").mkdir()
    (repo / "real" / "key.pem").write_text("k")
    started = time.monotonic()
    proc, report = run_json(repo, tmp_path, home=fake_home, timeout=60)
    assert time.monotonic() - started < 10, "the glob walk followed the symlinks"
    step = by_name(report)["deny"]
    assert step["status"] == "passed", proc.stdout + proc.stderr
    # the real file is still denied (matched through its real directory, never through a link)
    assert str(repo / "real" / "key.pem") in step["enforced"]["landlock"]["fs_denied"]


def _big_dir(path, n: int) -> None:
    path.mkdir()
    (path / "f").write_text("")
    for i in range(n):
        os.link(path / "f", path / f"l{i}")


def test_glob_entry_bound_names_the_pattern(tmp_path):
    _big_dir(tmp_path / "big", 3000)
    pattern = f"{tmp_path}/*/*x*"
    with pytest.raises(CageError, match=r"fs\.deny: the glob .*\*/\*x\*.* more than 1,000 directory entries"):
        landlock.expand_denies([pattern], print, GlobBudget(max_entries=1000))
    # the twin: within the bound the same pattern matches
    assert landlock.expand_denies([f"{tmp_path}/big/l1*"], print, GlobBudget(max_entries=5000))


def test_glob_time_bound_names_the_pattern(tmp_path):
    _big_dir(tmp_path / "big", 20_000)
    patterns = [f"{tmp_path}/big/*q{i}*" for i in range(1000)]
    started = time.monotonic()
    with pytest.raises(CageError, match=r"fs\.deny: matching the glob .*\*q\d+\*.* took more than 0\.3 s"):
        landlock.expand_denies(patterns, print, GlobBudget(seconds=0.3))
    assert time.monotonic() - started < 2


@pytest.fixture
def slow_build_repo(tmp_path):
    """A step whose cage takes longer to build than the test waits: many deny globs over a
    directory of 50,000 entries (hard links: cheap to make)."""
    repo = make_repo(tmp_path, _gate([f"{{repo}}/big/*q{i}*" for i in range(400)]))
    _big_dir(repo / "big", 50_000)
    return repo


def _stop_gate(repo, report, home, ready: str, sig, before_signal=None):
    """Run the gate on `repo`, wait for an output line containing `ready`, then send `sig`;
    (the finished process, seconds from the signal to its exit)."""
    proc = subprocess.Popen([sys.executable, "-m", "sandboy.gate.cli", str(repo), "--json", str(report)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, HOME=str(home)))
    try:
        line = proc.stdout.readline()
        while line and ready not in line:
            line = proc.stdout.readline()
        assert line, proc.stderr.read()
        if before_signal:
            before_signal(proc)
        sent = time.monotonic()
        proc.send_signal(sig)
        proc.wait(timeout=30)
        return proc, time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stop_during_cage_build_ends_the_gate_within_a_second(slow_build_repo, tmp_path, fake_home, sig):
    report = tmp_path / "report.json"

    def inside_the_build(proc):
        time.sleep(1.0)  # well inside the build (it takes many seconds)
        assert proc.poll() is None, "the build finished before the signal: the test proves nothing"

    proc, stopped = _stop_gate(slow_build_repo, report, fake_home, "== step 1/1", sig, inside_the_build)
    out = proc.stdout.read()
    # The contract is "within a second"; on a quiet machine it takes ~0.1 s. The margin absorbs a
    # loaded 2-core CI machine and still fails the old behaviour (the build ran on for minutes).
    assert stopped < 2.0, f"the gate took {stopped:.2f} s to stop"
    assert proc.returncode == 130, out
    data = json.loads(report.read_text())
    assert data["status"] == "interrupted" and data["exit_code"] == 130
    assert by_name(data)["deny"]["status"] == "not_run"


def test_stop_does_not_wait_for_the_kernel_to_free_a_huge_tmp(tmp_path, fake_home):
    """A step fills its {tmp} with 300,000 files (under the namespace tier a private tmpfs the
    kernel frees while the killed step exits: 1.8 s here) — SIGTERM ends the gate without waiting for that (within a
    second on a quiet machine), and no process of the step is left running."""
    marker = f"SBX-{os.getpid()}-tmpfill"
    repo = make_repo(tmp_path, f"""
        [[step]]
        name = "fill"
        run = "cd \\"$TMPDIR\\" && mkdir d && cd d && seq 1 300000 | xargs touch && echo ready && exec -a {marker} sleep 300"
    """)
    report = tmp_path / "report.json"
    step = []

    def find_the_step(proc):  # "ready" is printed just before the shell execs the marked sleep
        deadline = time.monotonic() + 10
        while not step and time.monotonic() < deadline:
            step.extend(survivors(marker)) or time.sleep(0.01)
        # and the process that holds the step's namespaces, whose exit frees the tmpfs: the
        # namespace's init, the marked command's parent
        step.append(open(f"/proc/{step[0]}/stat").read().rsplit(")", 1)[1].split()[1])

    proc, stopped = _stop_gate(repo, report, fake_home, "[fill] ready", signal.SIGTERM, before_signal=find_the_step)
    # What the fix changed, seen from the host: the gate returns while the kernel is still tearing
    # the killed step down (freeing its tmpfs: 1.8 s quiet, longer under load, against the gate's
    # 0.5 s grace), so the step's process is still there when the gate has exited. The gate that
    # waited for it returned only once it was reaped.
    assert len(step) == 2, step
    assert os.path.exists(f"/proc/{step[1]}"), "the gate waited for the kernel to free the step's tmpfs"
    # ~0.66 s on a quiet machine; the bound is loose because a fixed one is a timing test (1.88 s
    # at load 10 on 2 cores, the fix in place): the check above is what proves the behaviour.
    assert stopped < 5, f"the gate took {stopped:.2f} s to stop"
    assert proc.returncode == 130
    assert by_name(json.loads(report.read_text()))["fill"]["status"] == "killed"
    deadline = time.monotonic() + 10
    while survivors(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert survivors(marker) == []
