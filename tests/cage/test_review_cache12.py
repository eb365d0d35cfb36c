"""Session 12 review (rvsec12) of what the plan cache keeps since session 12 — `include` presets,
`{tmp}`, deny globs, the environment it read — and of the git check's walk index (ADR 0028, ADR
0019 "Session 12"), from the attacker's side: for each new input, what can change between the
build and a hit (or between two runs) that the check does not see. Every probe is a real `sandboy
run` (or the real walk) on the real kernel, checked from the host side (exit code, what was moved
to the quarantine, the bytes of the cache's own files), each with the twin that shows it measures.
"""

import marshal
import os
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
# (fixtures of theirs, used by name: `env`, `indexed`, `runner` — write = ["{cwd}"]; F811 below is their use)
from test_gitcheck_walk_index import env, host_git_status, indexed, leaf, leaf_dot_git_plant, run  # noqa: E402,F401
from test_plan_cache_write import NESTED_PLANT, make_repository, runner, settle  # noqa: E402,F401

from sandboy.confine import walk_index  # noqa: E402

pytestmark = pytest.mark.needs_kernel


def kept(runs, *argv, **kwargs):
    """Run until the plan is kept and a run takes it; that hit (`runs`: a test_plan_cache.Runner)."""
    for _ in range(4):
        proc = runs.run(*argv, **kwargs)
        assert proc.returncode == 0, proc.err
        if proc.hit:
            return proc
        time.sleep(0.15)  # (past fingerprint.TICK_NS: a root changed within the tick keeps no entry)
    raise AssertionError("never a hit")


# --- the process: `--cwd` through a symlink retargeted after the build ------------------------------

@pytest.mark.parametrize("retarget", [False, True])
def test_a_cwd_symlink_retargeted_after_the_build_gets_the_git_check_where_the_command_writes(
        runner, tmp_path, retarget):  # noqa: F811
    """`--cwd LINK` is the key's cwd as written (abspath, no symlink resolved): the plan kept while
    LINK led to A must not run a command that writes in B (LINK retargeted) with the git check
    walking A — the plant in B would be missed and the operator's git run it. Host side: the run
    fails 125 and B's planted config is moved away. Twin (`retarget` False): the same plant in A."""
    a, b = tmp_path / "A", tmp_path / "B"
    for top in (a, b):
        top.mkdir()
        make_repository(top)
    link = tmp_path / "L"
    link.symlink_to(a)
    settle()
    options = ("--cwd", str(link))
    kept(runner, "/bin/true", options=options)
    where = a
    if retarget:
        link.unlink()
        link.symlink_to(b)
        where = b
    planted = runner.run("/bin/sh", "-c", NESTED_PLANT, options=options)
    assert (where / "sub" / ".git").is_dir(), "the command did not write where LINK leads (probe broken)"
    assert planted.returncode == 125, (planted.hit, planted.err)
    assert not (where / "sub" / ".git" / "config").exists(), "the planted config was left in git's way"


# --- the cache's own files, where the cache directory lies in a write root --------------------------

def test_a_command_cannot_rewrite_the_walk_index_or_a_plan_from_a_write_root_holding_the_cache(runner):  # noqa: F811
    """SANDBOY_CACHE_DIR inside the write root (`{cwd}/.cache`): the walk index (walks/) and the
    plans (plans/) are Sandboy's verdicts on the next run; a command that could rewrite them
    (a forged "no .git here", a plan granting more) would blind the next check. Host side: after
    a hit whose command tried, no file under the cache was removed, moved or holds its bytes."""
    make_repository(runner.cwd)
    (runner.cwd / "src").mkdir()  # (the root beside the cache is split around it: its subdirectories stay writable)
    cache = runner.cwd / ".cache"
    runner.env["SANDBOY_CACHE_DIR"] = str(cache)
    runner.cache = cache
    kept(runner, "/bin/true")
    time.sleep(2.2)  # (the walk index keeps directories older than its margin: walk_index.MARGIN_NS)
    assert runner.run("/bin/true").hit
    before = {p: p.read_bytes() for p in cache.rglob("*") if p.is_file()}
    assert any(p.parent.name == "walks" for p in before), sorted(before)
    assert any(p.parent.name == "plans" for p in before), sorted(before)
    attack = ("for f in .cache/walks/* .cache/plans/*; do printf forged > \"$f\" 2>/dev/null && echo \"wrote $f\"; "
              "done; rm -f .cache/walks/* 2>/dev/null; mv .cache .cache2 2>/dev/null; ln -s /tmp .cache/walks2 "
              "2>/dev/null; printf x > src/work && echo wrote-elsewhere")
    hit = runner.run("/bin/sh", "-c", attack)
    assert hit.returncode == 0, hit.err
    # (twin: the same command writes the rest of the root)
    assert hit.stdout.splitlines() == ["wrote-elsewhere"], hit.stdout
    after = {p: p.read_bytes() for p in cache.rglob("*") if p.is_file()}
    # (the run's own check may rewrite its index after the command: Sandboy's bytes, never the command's)
    assert set(before) <= set(after) and b"forged" not in after.values(), sorted(after)
    assert not (runner.cwd / ".cache2").exists() and not (cache / "walks2").exists()


# --- the walk index: a directory made at an inode the index holds ---------------------------------

def _index_file(tmp_path) -> Path:
    (path,) = sorted((tmp_path / "cache" / "walks").iterdir())
    return path


def test_a_new_leaf_at_an_inode_the_index_holds_is_looked_into(tmp_path, env, indexed):  # noqa: F811
    """The index keys a directory by (st_dev, st_ino) and trusts its `.git`/`HEAD` answer while the
    ctime is the one kept. A directory removed and another made later may get the freed inode
    (ext4 reuses them; when is up to its allocator, so the reuse is written here: the kept entry of
    a leaf — "no .git" — moved to the inode of a new leaf the host made before the launch, as an
    index written before the old leaf went would hold it). The command plants a `.git` file there
    leading into a git directory outside every walked root: only the leaf's own lookup finds it,
    so the kept entry must not be taken for a directory whose ctime is not the kept one."""
    marker = tmp_path / "PWNED"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    old = Path(leaf(indexed))
    fresh = old.parent / "fresh"
    fresh.mkdir()
    path = _index_file(tmp_path)
    from cachekit import unsealed

    form, euid, root, where, offset, checksum, payload = marshal.loads(unsealed(path))
    entries = marshal.loads(payload)
    st_old, st_new = old.lstat(), fresh.lstat()
    kept = entries[(st_old.st_dev, st_old.st_ino)]
    assert kept[1] < 0 and kept[2] is False  # a leaf without `.git`
    entries[(st_new.st_dev, st_new.st_ino)] = kept
    walk_index.save(root, where, entries, {})
    assert walk_index.load(root, where) == entries  # (the index the next run reads)
    _snap, findings = run([indexed, tmp], leaf_dot_git_plant(tmp, marker, fresh), env, exclude=[tmp])
    assert os.lstat(fresh).st_nlink == 2
    host_git_status(fresh, env)
    assert marker.exists(), "the plant does not run (probe broken)"
    marker.unlink()
    assert findings, "a .git in a directory at an indexed leaf's inode was not found"
