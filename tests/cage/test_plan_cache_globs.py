"""Deny globs in `sandboy run`'s plan cache (ADR 0028, session 12): `deny = ["*.pem"]`, `**/*.pem`.

A glob's matches depend on the entries of the directories its walk looked into. The build records
the identity of each (device, inode, mode, size, mtime, ctime: `deny_globs.GlobWatch`, taken
before the walk looked into it) and a hit stats them again (`Fingerprint._globs_unchanged`): an
entry made, removed or renamed there moves the directory's ctime, so a match that appeared since
is a miss, and the rebuild denies it. Every probe checks from the host side that the newly
matched file's bytes never reach the command; the twins check that changes no glob looked at keep
the hit. Hit or miss is seen as in test_plan_cache.py (a hit imports no compiler).
"""

import os
import shutil
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_plan_cache import Runner, entry_applies, run_a_mutant  # noqa: E402

from sandboy.confine import deny_globs, namespaces  # noqa: E402
from sandboy.confine.fingerprint import TICK_NS  # noqa: E402

pytestmark = pytest.mark.needs_kernel

SECRET = "SECRET-BYTES-glob12"


def settle() -> None:
    """Let the last change age past the clock tick (`fingerprint.TICK_NS`): a directory changed
    within it proves nothing, and the run keeps no entry (test_a_directory_changed_within_the_tick)."""
    time.sleep(3 * TICK_NS / 1e9)


@pytest.fixture
def runner(tmp_path) -> Runner:
    if not namespaces.availability()[0]:
        pytest.skip("the plan cache keeps runs under the namespace tier only")
    runner = Runner(tmp_path)
    (runner.cwd / "ok.txt").write_text("fine\n")
    return runner


def glob_policy(runner: Runner, *patterns: str) -> None:
    denies = ", ".join(f'"{p}"' for p in patterns)
    runner.write_policy(read=f', "{runner.cwd}", "{runner.tmp}/data"', more=f"deny = [{denies}]\n")
    settle()


READ = ("/bin/sh", "-c", 'cat ok.txt; for f in "$@"; do cat "$f"; done', "sh")


def read(runner: Runner, *paths: str):
    return runner.run(*READ, *paths)


def refused(proc, path: str) -> bool:
    """The command could not read `path`: no byte of the secret reached it, and cat said why."""
    return SECRET not in proc.stdout and f"{path}: Permission denied" in proc.err and proc.stdout.startswith("fine")


def test_a_match_made_since_is_a_miss_and_denied(runner):
    """`*.pem` with no match when the plan was kept (so the working directory is split around
    nothing: only the glob's own record can see it), then `x.pem` written on the host."""
    glob_policy(runner, "*.pem")
    assert entry_applies(runner, *READ).hit
    (runner.cwd / "x.pem").write_text(SECRET)
    settle()
    after = read(runner, "x.pem")
    assert not after.hit and refused(after, "x.pem"), after.err
    again = read(runner, "x.pem")  # the rebuild's entry: a hit that denies it too
    assert again.hit and refused(again, "x.pem"), again.err
    assert (runner.cwd / "x.pem").read_text() == SECRET


def test_a_file_renamed_in_is_a_miss_and_denied(runner):
    """A file made elsewhere and renamed into the watched directory (no new inode there)."""
    glob_policy(runner, "*.pem")
    outside = runner.tmp / "outside"
    outside.mkdir()
    (outside / "key").write_text(SECRET)
    settle()
    assert entry_applies(runner, *READ).hit
    os.rename(outside / "key", runner.cwd / "k.pem")
    after = read(runner, "k.pem")
    assert not after.hit and refused(after, "k.pem"), after.err


def test_a_directory_holding_a_match_renamed_in_deep_below_is_a_miss_for_double_star(runner):
    """`**/*.pem`: a directory made outside, holding a match, renamed into an existing directory
    three levels down. Only that directory changes (not the top, not its parents)."""
    deep = runner.cwd / "a" / "b" / "c"
    deep.mkdir(parents=True)
    stage = runner.tmp / "stage" / "newdir"
    stage.mkdir(parents=True)
    (stage / "n.pem").write_text(SECRET)
    glob_policy(runner, "**/*.pem")
    top = [os.stat(p).st_ctime_ns for p in (runner.cwd, runner.cwd / "a", runner.cwd / "a" / "b")]
    assert entry_applies(runner, *READ).hit
    os.rename(stage, deep / "newdir")
    assert [os.stat(p).st_ctime_ns for p in (runner.cwd, runner.cwd / "a", runner.cwd / "a" / "b")] == top
    after = read(runner, "a/b/c/newdir/n.pem")
    assert not after.hit and refused(after, "a/b/c/newdir/n.pem"), after.err


def test_a_deleted_match_is_a_miss_and_the_run_works(runner):
    (runner.cwd / "gone.pem").write_text(SECRET)
    glob_policy(runner, "*.pem")
    first = entry_applies(runner, *READ, "gone.pem")
    assert first.hit and refused(first, "gone.pem"), first.err
    (runner.cwd / "gone.pem").unlink()
    settle()
    after = read(runner)
    assert not after.hit and (after.returncode, after.stdout) == (0, "fine\n"), after.err
    again = read(runner)
    assert again.hit and (again.returncode, again.stdout) == (0, "fine\n"), again.err


def symlinked_match(runner: Runner) -> Path:
    """`y.pem -> DATA/link/secret`, `DATA/link -> a`, a secret in `DATA/a` and `DATA/b`; `*.pem` denied."""
    data = runner.tmp / "data"
    for name in ("a", "b"):
        (data / name).mkdir(parents=True)
        (data / name / "secret").write_text(SECRET)
    (data / "link").symlink_to("a")
    (runner.cwd / "y.pem").symlink_to(data / "link" / "secret")
    glob_policy(runner, "*.pem")
    return data


def mutate(runner: Runner, module: str, text: str, replacement: str) -> None:
    """The runs take a copy of the package whose `confine/<module>` has `text` replaced."""
    run_a_mutant(runner, runner.tmp, module, text, replacement)


def test_a_match_that_is_a_symlink_keeps_no_entry_and_its_target_is_denied_anew(runner):
    """`y.pem -> ../data/link/secret` with `data/link -> a`: the glob denies where it points,
    `data/a/secret`. Retargeting `data/link` to `b` changes no directory the glob looked into
    (nor the listing of `data`), and a rebuild then denies `data/b/secret`: such a match keeps
    no entry, so every run is built (a kept plan would let `data/b/secret` be read)."""
    data = symlinked_match(runner)
    for _ in range(2):
        proc = read(runner, str(data / "a" / "secret"))
        assert not proc.hit and refused(proc, str(data / "a" / "secret")), proc.err
    assert runner.entries() == []
    (data / "link").unlink()
    (data / "link").symlink_to("b")
    proc = read(runner, str(data / "b" / "secret"), str(data / "a" / "secret"))
    assert not proc.hit and f"{data}/b/secret: Permission denied" in proc.err, proc.err
    assert proc.stdout == "fine\n" + SECRET  # (data/a/secret: no longer denied, read once)


def test_changes_no_glob_looked_at_keep_the_hit(runner):
    """Twins: `*.pem` lists the working directory only — a file made in a subdirectory, one made
    outside, a file of the working directory rewritten in place keep the hit; `**/*.pem` lists
    every directory below — a change outside and a rewrite in place keep it."""
    sub = runner.cwd / "sub"
    sub.mkdir()
    (runner.tmp / "elsewhere").mkdir()
    glob_policy(runner, "*.pem")
    assert entry_applies(runner, *READ).hit
    (sub / "new.pem").write_text("not matched by *.pem")
    (runner.tmp / "elsewhere" / "x.pem").write_text("x")
    with open(runner.cwd / "ok.txt", "r+") as fh:  # the same inode, the directory untouched
        fh.write("FINE")
    kept = read(runner, "sub/new.pem")
    assert kept.hit and kept.stdout == "FINE\nnot matched by *.pem", kept.err
    glob_policy(runner, "**/*.pem")
    assert entry_applies(runner, *READ).hit
    (runner.tmp / "elsewhere" / "y.pem").write_text("y")
    with open(runner.cwd / "ok.txt", "r+") as fh:
        fh.write("fine")
    kept = read(runner)
    assert kept.hit and kept.stdout == "fine\n", kept.err
    denied = read(runner, "sub/new.pem")
    assert denied.hit and "Permission denied" in denied.err


def test_a_glob_walking_more_directories_than_the_bound_keeps_no_entry(runner):
    """Beyond `GLOB_WATCH_MAX_DIRS` directories a `**` keeps no entry (each would cost a hit a
    stat): every run is built, and denies what it matches. Twin: one directory fewer is kept."""
    tree = runner.cwd / "tree"
    tree.mkdir()
    # the walk looks into the working directory, `tree` and every directory made here
    for i in range(deny_globs.GLOB_WATCH_MAX_DIRS - 2):
        (tree / f"d{i}").mkdir()
    (tree / "d7" / "k.pem").write_text(SECRET)
    glob_policy(runner, "**/*.pem")
    kept = entry_applies(runner, *READ, "tree/d7/k.pem")
    assert kept.hit and refused(kept, "tree/d7/k.pem"), kept.err
    shutil.rmtree(runner.cache / "plans")
    (tree / "one-more").mkdir()
    settle()
    for _ in range(2):
        proc = read(runner, "tree/d7/k.pem")
        assert not proc.hit and refused(proc, "tree/d7/k.pem"), proc.err
    assert runner.entries() == []


def test_a_glob_on_a_file_system_whose_directory_times_prove_nothing_keeps_no_entry(runner):
    """A glob that looks into procfs (new processes leave /proc's times as they were) keeps no
    entry; its twin on a tmpfs (/dev/shm) is kept."""
    runner.write_policy(read=f', "{runner.cwd}"', more='deny = ["/proc/sys/kernel/no-such-*"]\n')
    for _ in range(2):
        assert not runner.run(*READ).hit
    assert runner.entries() == []
    shm = Path("/dev/shm")
    if not shm.is_dir() or deny_globs._file_systems({shm.stat().st_dev}).get(shm.stat().st_dev) != "tmpfs":
        pytest.skip("no tmpfs at /dev/shm for the twin")
    own = shm / f"glob12-{os.getpid()}-{runner.tmp.name}"
    own.mkdir()
    try:
        runner.write_policy(read=f', "{runner.cwd}"', more=f'deny = ["{own}/*.pem"]\n')
        settle()
        assert entry_applies(runner, *READ).hit
    finally:
        shutil.rmtree(own)


def test_the_glob_check_of_a_hit_has_a_probe_that_fails_without_it(runner):
    """The hit's glob check taken out of a copy of the package: the probe of
    test_a_match_made_since_is_a_miss_and_denied then reads the new match from the kept plan."""
    mutate(runner, "fingerprint.py", "self._split_unchanged() and self._globs_unchanged()", "self._split_unchanged()")
    glob_policy(runner, "*.pem")
    assert entry_applies(runner, *READ).hit
    (runner.cwd / "x.pem").write_text(SECRET)
    after = read(runner, "x.pem")
    assert after.hit and SECRET in after.stdout  # the kept plan granted the new match


def test_the_symlink_rule_has_a_probe_that_fails_without_it(runner):
    """`GlobWatch.matched` taken out of a copy: the symlinked match's plan is kept, and after the
    retarget the hit lets `data/b/secret` be read (the probe above refuses it)."""
    mutate(runner, "deny_globs.py", "if self.usable and os.path.islink(path):", "if False:")
    data = symlinked_match(runner)
    assert entry_applies(runner, *READ).hit
    (data / "link").unlink()
    (data / "link").symlink_to("b")
    after = read(runner, str(data / "b" / "secret"))
    assert after.hit and SECRET in after.stdout


def test_the_readme_example_deny_keeps_its_entry(runner):
    """The README's `deny = [".env", "*.pem"]` (without its `include` and `{tmp}`, other helpers'
    inputs) in a directory holding neither: kept, and a `.env` made since is a miss and denied."""
    runner.write_policy(read=f', "{runner.cwd}"', more='write = ["."]\ndeny = [".env", "*.pem"]\n')
    settle()
    assert entry_applies(runner, *READ).hit
    (runner.cwd / ".env").write_text(SECRET)
    (runner.cwd / "a.pem").write_text(SECRET)
    settle()
    after = read(runner, ".env", "a.pem")
    assert not after.hit and refused(after, ".env") and refused(after, "a.pem"), after.err
