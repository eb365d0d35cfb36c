"""The git check's walk index (confine/walk_index.py, ADR 0019 "Session 12"): what the last walk
of a write root found in each directory, kept in Sandboy's cache for the next run, whose census
lists a directory again only where its ctime changed.

Called directly, as test_gitcheck.py does: a first run writes the index (the tree older than the
index's margin, as a checkout is), then the attacker's script between a second snapshot and its
verify, run by the host's real shell and git. Each probe plants where an index trusted wrongly —
a stale listing, a leaf's `.git` or `HEAD` taken from it — would hide the plant, and asserts the
finding and, host side, that the operator's git ran the plant before the quarantine and runs
nothing after it. The twins count what the walk lists and looks up (through a counting wrapper
around the walk's own calls, not time), and what makes the index a miss."""

from __future__ import annotations

import json
import marshal
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sandboy.confine import gitcheck, walk_index

from gitkit import GIT_ENV, fsmonitor, scratch_env, sh, whole_second_image

MARGIN_S = walk_index.MARGIN_NS / 1e9 + 0.2


@pytest.fixture(autouse=True)
def _git():
    if not shutil.which("git"):
        pytest.skip("needs git")


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("SANDBOY_CACHE_DIR", str(tmp_path / "cache"))  # (this test's own index)
    monkeypatch.delenv("SANDBOY_PLAN_CACHE", raising=False)
    return scratch_env(tmp_path / "home")


def checkout(root, env, dirs: int = 120):
    """A committed repository shaped like a checkout: directory i lies in directory (i - 1) // 2
    (half of them hold subdirectories, half are leaves), two files each."""
    paths = [root]
    for i in range(1, dirs):
        paths.append(paths[(i - 1) // 2] / f"d{i}")
    for i, path in enumerate(paths):
        path.mkdir(parents=True, exist_ok=True)
        for j in range(2):
            (path / f"f{j}.txt").write_text(f"{i} {j}\n")
    sh("git init -q . && git add -A && git commit -q -m tree", root, env)
    return root


def host_git_status(where, env) -> None:
    subprocess.run(["git", "-c", "safe.directory=*", "-C", str(where), "status"], capture_output=True, env=env,
                   timeout=30)


def run(roots, script, env, exclude=()):
    """One run: the snapshot (a clock tick after whatever the host did before), `script` as the
    command, the check after it."""
    time.sleep(0.02)
    snap = gitcheck.snapshot([str(r) for r in roots], exclude=[str(e) for e in exclude], home=env["HOME"])
    if script:
        sh(script, roots[0], env)
    return snap, snap.verify()


def index_files(tmp_path) -> list:
    folder = tmp_path / "cache" / "walks"
    return sorted(folder.iterdir()) if folder.is_dir() else []


@pytest.fixture
def indexed(tmp_path, env):
    """A checkout whose first run wrote its walk index (every directory older than the margin)."""
    repo = checkout(tmp_path / "repo", env)
    time.sleep(MARGIN_S)
    _snap, findings = run([repo], "", env)
    assert findings == []
    assert len(index_files(tmp_path)) == 1, "the first run kept no walk index"
    return repo


class Counted:
    """What the walk lists (`_Walk._list`, at launch and after the run) and looks up in leaves
    (its `os.access` of `.git` and `HEAD`), counted by wrapping the walk's own calls."""

    def __init__(self, monkeypatch):
        self.listed = {True: [], False: []}  # census -> directories listed
        self.looked_up = []
        real_list, real_access, real_leaf_has = gitcheck._Walk._list, os.access, gitcheck._leaf_has
        # (counted in the Python walk, whose calls can be wrapped: the C walk makes the same
        # decisions — tests/cage/test_gitcheck_native_walk.py)
        monkeypatch.setattr(gitcheck, "_NATIVE_SCAN", [None])

        def _list(walk, directory, *args):
            self.listed[walk.census].append(directory)
            return real_list(walk, directory, *args)

        def access(path, *args, **kwargs):
            if isinstance(path, str) and (path.endswith("/.git") or path.endswith("/HEAD")):
                self.looked_up.append(path)
            return real_access(path, *args, **kwargs)

        def leaf_has(path):  # (a leaf's `.git` and `HEAD`: an lstat since session 14)
            self.looked_up.append(path)
            return real_leaf_has(path)

        monkeypatch.setattr(gitcheck._Walk, "_list", _list)
        monkeypatch.setattr(os, "access", access)
        monkeypatch.setattr(gitcheck, "_leaf_has", leaf_has)

    def reset(self):
        self.listed = {True: [], False: []}
        self.looked_up = []


def non_leaves(root) -> list:
    out = []
    for top, dirs, _files in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".git"]
        if os.lstat(top).st_nlink != 2:
            out.append(top)
    return out


def leaf_dot_git_plant(tmp, marker, target) -> str:
    """The command's script: a git directory in `tmp` (never walked) whose config runs `marker`'s
    fsmonitor, and a `.git` file in the leaf `target` leading to it — found by the leaf's lookup only."""
    return (f"git init -q --bare '{tmp}/evil.git' && printf '{fsmonitor(marker)}' >> '{tmp}/evil.git/config' "
            f"&& git config -f '{tmp}/evil.git/config' core.bare false "
            f"&& git config -f '{tmp}/evil.git/config' core.worktree '{target}' "
            f"&& echo 'gitdir: {tmp}/evil.git' > '{target}/.git'")


def leaf(repo) -> str:
    found = [p for p in non_leaves_and_leaves(repo) if os.lstat(p).st_nlink == 2]
    return found[-1]


def non_leaves_and_leaves(root) -> list:
    out = []
    for top, dirs, _files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != ".git")
        out.append(top)
    return out


# --- the twins: what an unchanged tree costs, and what a change costs -----------------------------

def test_an_unchanged_tree_is_not_listed_again(tmp_path, env, indexed, monkeypatch):
    count = Counted(monkeypatch)
    _snap, findings = run([indexed], "", env)
    assert findings == []
    assert count.listed == {True: [], False: []}, "a directory the index holds unchanged was listed again"
    assert count.looked_up == [], "a leaf the index holds unchanged had its .git and HEAD looked up again"
    # the same with the index turned off: the census lists every directory with subdirectories,
    # the check after the run looks into every leaf (what each run paid before)
    monkeypatch.setenv("SANDBOY_PLAN_CACHE", "0")
    _snap, findings = run([indexed], "", env)
    assert findings == []
    assert sorted(count.listed[True]) == sorted(non_leaves(indexed))
    assert len(count.looked_up) == 2 * (len(non_leaves_and_leaves(indexed)) - len(non_leaves(indexed)))


def test_only_what_changed_is_listed_and_the_index_follows_it(tmp_path, env, indexed, monkeypatch):
    """The host adds a file in one directory and a directory in another between two runs: the
    census lists those two (and walks the new one, a leaf: looked into after the run); the run
    itself writes a file in a third, listed after the run only."""
    changed = indexed / "d1" / "d3"
    (changed / "new.txt").write_text("x")
    (indexed / "d2" / "made").mkdir()
    count = Counted(monkeypatch)
    _snap, findings = run([indexed], "echo y > d1/d4/during.txt", env)
    assert findings == []
    assert sorted(count.listed[True]) == sorted([str(changed), str(indexed / "d2")])
    assert count.listed[False] == [str(indexed / "d1" / "d4")]
    made = indexed / "d2" / "made"
    assert sorted(count.looked_up) == [f"{made}/.git", f"{made}/HEAD"]
    # the next run: the changes of this one are older than the margin by then, and in the index
    time.sleep(MARGIN_S)
    assert run([indexed], "", env)[1] == []
    count.reset()
    assert run([indexed], "", env)[1] == []
    assert (count.listed, count.looked_up) == ({True: [], False: []}, [])


# --- the probes: each plant lies where an index trusted wrongly would hide it ---------------------

def test_a_repository_the_host_made_between_runs_and_the_run_plants_in_is_judged(tmp_path, env, indexed):
    """The operator makes a nested repository between two runs (its directory's ctime changes,
    nothing else in the index does); the second run appends core.fsmonitor to its config, in
    place: no directory changes during the run. A census that took the index's listing of the
    directory by identity alone (not its ctime) never reached the repository, and after the run
    the same stale listing was reused — the plant passed."""
    marker = tmp_path / "PWNED"
    nested = indexed / "d1" / "d3" / "hostrepo"
    sh(f"git init -q '{nested}' && git -C '{nested}' commit -q --allow-empty -m n", indexed, env)
    snap, findings = run([indexed], f"printf '{fsmonitor(marker)}' >> d1/d3/hostrepo/.git/config", env)
    host_git_status(nested, env)
    assert marker.exists(), "the plant does not run (probe broken)"
    marker.unlink()
    assert any(f.path == f"{nested}/.git/config" for f in findings), findings
    moved, failed = gitcheck.quarantine(findings, snap.writable)
    assert moved and not failed
    host_git_status(nested, env)
    assert not marker.exists(), "the operator's git ran the plant after the check"


def test_a_dot_git_file_planted_in_an_indexed_leaf_is_found(tmp_path, env, indexed):
    """A `.git` file made in a leaf the index holds (the leaf stays a leaf) leading to a git
    directory in the run's `{tmp}`, which is never walked: only the leaf's own lookup finds it."""
    marker = tmp_path / "PWNED"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    target = leaf(indexed)
    script = leaf_dot_git_plant(tmp, marker, target)
    snap, findings = run([indexed, tmp], script, env, exclude=[tmp])
    assert os.lstat(target).st_nlink == 2
    host_git_status(target, env)
    assert marker.exists(), "the plant does not run (probe broken)"
    marker.unlink()
    assert findings, "a .git file planted in an indexed leaf was not found"
    moved, failed = gitcheck.quarantine(findings, snap.writable)
    assert moved and not failed, (moved, failed)
    host_git_status(target, env)
    assert not marker.exists()


BARE_IN_A_LEAF = {
    # HEAD, `objects` and `refs` as executable files (git's access(X_OK) passes them) and a config:
    # the leaf stays a leaf, and its new names change its ctime
    "made": "git init -q --bare {tmp}/tmpl && cp {tmp}/tmpl/HEAD {leaf}/ && cp {tmp}/tmpl/config {leaf}/config "
            "&& git config -f {leaf}/config core.bare false && git config -f {leaf}/config core.worktree {leaf} "
            "&& printf 'FSM' >> {leaf}/config && : > {leaf}/objects && : > {leaf}/refs "
            "&& chmod +x {leaf}/objects {leaf}/refs",
    # the same layout there before the first run with a HEAD git refuses (not a git directory
    # then): the run rewrites HEAD and the config in place — the leaf's names, and so its ctime,
    # stay what the index holds; HEAD's bytes are read again every run
    "completed in place": "printf 'ref: refs/heads/main\\n' > {leaf}/HEAD && printf 'FSM' >> {leaf}/config",
}


@pytest.mark.parametrize("how", BARE_IN_A_LEAF)
def test_a_bare_layout_in_an_indexed_leaf_is_found(tmp_path, env, how):
    marker = tmp_path / "PWNED"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    repo = checkout(tmp_path / "repo", env)
    target = leaf(repo)
    if how == "completed in place":
        sh(f"git init -q --bare '{tmp}/tmpl' && echo 'not a ref' > '{target}/HEAD' "
           f"&& cp '{tmp}/tmpl/config' '{target}/config' && git config -f '{target}/config' core.bare false "
           f"&& git config -f '{target}/config' core.worktree '{target}' "
           f"&& : > '{target}/objects' && : > '{target}/refs' && chmod +x '{target}/objects' '{target}/refs'", repo, env)
    time.sleep(MARGIN_S)
    assert run([repo], "", env)[1] == []
    script = BARE_IN_A_LEAF[how].format(tmp=tmp, leaf=target).replace("FSM", fsmonitor(marker))
    snap, findings = run([repo], script, env)
    assert os.lstat(target).st_nlink == 2
    host_git_status(target, env)
    assert marker.exists(), "the plant does not run (probe broken)"
    marker.unlink()
    assert findings, f"{how}: a bare layout in an indexed leaf was not found"
    moved, failed = gitcheck.quarantine(findings, snap.writable)
    assert moved and not failed, (moved, failed)
    host_git_status(target, env)
    assert not marker.exists()


def test_a_directory_prepared_in_tmp_and_renamed_in_is_walked_whole(tmp_path, env, indexed):
    """A tree prepared in the run's `{tmp}` (never walked) before the launch — old ctimes all the
    way down but for the renamed directory itself — with a repository two levels inside, renamed
    into an indexed directory: none of it is in the census or the index, all of it is walked."""
    marker = tmp_path / "PWNED"
    tmp = tmp_path / "tmp"
    (tmp / "prep" / "a" / "b").mkdir(parents=True)
    sh(f"git init -q '{tmp}/prep/a/b/r' && printf '{fsmonitor(marker)}' >> '{tmp}/prep/a/b/r/.git/config'", tmp, env)
    time.sleep(0.05)
    snap, findings = run([indexed, tmp], f"mv '{tmp}/prep' d1/d3/prep", env, exclude=[tmp])
    where = indexed / "d1" / "d3" / "prep" / "a" / "b" / "r"
    host_git_status(where, env)
    assert marker.exists(), "the plant does not run (probe broken)"
    marker.unlink()
    assert any(f.path == f"{where}/.git/config" for f in findings), findings
    gitcheck.quarantine(findings, snap.writable)
    host_git_status(where, env)
    assert not marker.exists()


def test_a_directory_replaced_by_a_symlink(tmp_path, env, indexed):
    """An indexed directory with subdirectories replaced by a symlink — by the host between runs
    (a twin: a symlink is never followed, nothing is found, nothing fails) and by the run, to a
    directory of another write root where it plants a repository (found there, by that root's
    own walk)."""
    other = tmp_path / "other"
    other.mkdir()
    sh("mv d1/d3 d1/d3.real && ln -s d3.real d1/d3", indexed, env)
    _snap, findings = run([indexed, other], "", env)
    assert findings == []
    marker = tmp_path / "PWNED"
    script = (f"git init -q '{other}/r' && printf '{fsmonitor(marker)}' >> '{other}/r/.git/config' "
              f"&& rm -rf d2/d5 && ln -s '{other}/r' d2/d5")
    snap, findings = run([indexed, other], script, env)
    assert any(f.path == f"{other}/r/.git/config" for f in findings), findings
    host_git_status(indexed / "d2" / "d5", env)
    assert marker.exists()
    marker.unlink()
    gitcheck.quarantine(findings, snap.writable)
    host_git_status(indexed / "d2" / "d5", env)
    assert not marker.exists()


def test_a_deep_repository_planted_on_the_second_run_is_found(tmp_path, env, indexed):
    marker = tmp_path / "PWNED"
    deep = indexed / "d1" / "d3" / "d7" / "d15" / "dir"
    snap, findings = run([indexed], f"mkdir -p '{deep}' && git init -q '{deep}' "
                                    f"&& printf '{fsmonitor(marker)}' >> '{deep}/.git/config'", env)
    assert any(f.path == f"{deep}/.git/config" for f in findings), findings
    gitcheck.quarantine(findings, snap.writable)
    host_git_status(deep, env)
    assert not marker.exists()


# --- the index itself: a miss (a full walk), never an error ---------------------------------------

def _full_walk(repo, env, monkeypatch) -> bool:
    count = Counted(monkeypatch)
    _snap, findings = run([repo], "", env)
    assert findings == []
    return sorted(count.listed[True]) == sorted(non_leaves(repo))


def _rewrite(path, change) -> None:
    """The index file at `path` with its header changed by `change` (a tuple -> tuple), the checksum
    kept valid: what only another state of the machine (a stepped clock, another boot) writes."""
    from cachekit import unsealed, write_sealed

    head = list(marshal.loads(unsealed(path)))
    write_sealed(path, marshal.dumps(tuple(change(head))))


def _sealed_as(path, name: str) -> None:
    """The same index sealed for another file name (copied there from another name: a replay)."""
    from cachekit import unsealed
    from sandboy import cache_seal

    path.write_bytes(cache_seal.seal(str(path.parent), name, unsealed(path)))


def _unsealed_copy(path) -> None:
    """The same index without its seal: what a checkout could ship (it cannot seal)."""
    from cachekit import unsealed

    path.write_bytes(unsealed(path))


SPOILED = {
    "without its seal": _unsealed_copy,
    "sealed for another name": lambda p: _sealed_as(p, "0" * 16 + ".walk"),
    "garbage": lambda p: p.write_bytes(b"\x00garbage"),
    "truncated": lambda p: p.write_bytes(p.read_bytes()[:-40]),
    "one byte of the entries changed": lambda p: p.write_bytes(p.read_bytes()[:-30] + bytes([p.read_bytes()[-30] ^ 1])
                                                              + p.read_bytes()[-29:]),
    "writable by others": lambda p: p.chmod(0o666),
    "another boot": lambda p: _rewrite(p, lambda h: h[:3] + [(b"another boot id", h[3][1])] + h[4:]),
    "another mount table": lambda p: _rewrite(p, lambda h: h[:3] + [(h[3][0], "0" * 16)] + h[4:]),
    "the clock stepped back since": lambda p: _rewrite(p, lambda h: h[:4] + [h[4] + 5_000_000_000] + h[5:]),
    "another write root's": lambda p: _rewrite(p, lambda h: h[:2] + [h[2] + "-other"] + h[3:]),
}


@pytest.mark.parametrize("how", SPOILED)
def test_an_index_that_cannot_be_trusted_is_a_full_walk(tmp_path, env, indexed, monkeypatch, how):
    [path] = index_files(tmp_path)
    assert not _full_walk(indexed, env, monkeypatch)  # (the index is used as it is)
    SPOILED[how](path)
    assert _full_walk(indexed, env, monkeypatch), f"{how}: the index was used"


def test_an_index_of_another_owner_is_not_read(tmp_path, env, indexed, monkeypatch):
    if os.geteuid() != 0:
        pytest.skip("needs root (a file of another user)")
    [path] = index_files(tmp_path)
    os.chown(path, 65534, 65534)
    assert _full_walk(indexed, env, monkeypatch)


def test_a_mount_below_the_write_root_since_the_index_is_a_full_walk(tmp_path, env, indexed):
    """A file system mounted below the root between two runs (the mount table changed): the
    index's inode numbers and ctimes are another state's. In a mount namespace of its own."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare")
    (indexed / "d2" / "mnt").mkdir()
    time.sleep(MARGIN_S)
    assert run([indexed], "", env)[1] == []  # (the index now holds d2 with mnt)
    probe = ("import os, sys\nfrom sandboy.confine import gitcheck\nlisted = []\nreal = gitcheck._Walk._list\n"
             "gitcheck._NATIVE_SCAN[:] = [None]\n"  # (the Python walk, whose listings can be counted)
             "gitcheck._Walk._list = lambda w, d, *a: (listed.append(d), real(w, d, *a))[1]\n"
             "snap = gitcheck.snapshot([sys.argv[1]], home=sys.argv[2])\nassert snap.verify() == []\n"
             "print(len(listed))\n")
    script = (f"mount --make-rprivate / && mount -t tmpfs none '{indexed}/d2/mnt' && "
              f"PYTHONPATH='{os.path.dirname(os.path.dirname(gitcheck.__file__))}' '{sys.executable}' -c \"$PROBE\" "
              f"'{indexed}' '{env['HOME']}' && '{sys.executable}' -c \"$PROBE\" '{indexed}' '{env['HOME']}'")
    out = subprocess.run(["unshare", "-m", "sh", "-ec", script], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PROBE": probe, "SANDBOY_CACHE_DIR": str(tmp_path / "cache")})
    assert out.returncode == 0, out.stderr[-2000:]
    first, second = [int(n) for n in out.stdout.split()]
    assert first >= len(non_leaves(indexed)), (first, "the index of another mount table was used")
    assert second == 0, (second, "the index written under the new mount table was not used")


def test_no_index_is_kept_past_its_bound_or_where_the_runs_tmp_lies_inside_the_root(tmp_path, env, monkeypatch):
    repo = checkout(tmp_path / "repo", env, dirs=20)
    time.sleep(MARGIN_S)
    monkeypatch.setattr(walk_index, "MAX_DIRS", 10)
    assert run([repo], "", env)[1] == []
    assert index_files(tmp_path) == []
    monkeypatch.setattr(walk_index, "MAX_DIRS", 200_000)
    inside = repo / "d1" / "tmp"
    inside.mkdir()
    time.sleep(MARGIN_S)
    assert run([repo], "", env, exclude=[inside])[1] == []
    assert index_files(tmp_path) == []
    assert run([repo], "", env)[1] == []
    assert len(index_files(tmp_path)) == 1
    [path] = index_files(tmp_path)
    st = os.lstat(path)
    assert (st.st_uid, st.st_mode & 0o777) == (os.geteuid(), 0o600)


# --- each use of the index has a probe that fails without its ctime test ------------------------

DRIVER = r"""
import json, subprocess, sys
from sandboy.confine import gitcheck
spec = json.loads(sys.argv[1])
snap = gitcheck.snapshot(spec["roots"], exclude=spec["exclude"], home=spec["home"])
if spec["script"]:
    subprocess.run(["/bin/sh", "-ec", spec["script"]], cwd=spec["roots"][0], check=True, env=spec["env"])
findings = snap.verify()
found = [f.path for f in findings]
if spec.get("quarantine"):
    gitcheck.quarantine(findings, snap.writable)
print(json.dumps({"found": found, "walk": "C" if gitcheck._native_scan() else "python"}))
"""

# mutant -> (source text in gitcheck.py, its replacement, the probe that must then miss its plant)
MUTANTS = {
    "the census's listing by identity alone": (
        "if known is not None and valid(known, st.st_ctime_ns) and known[1] >= 0:",
        "if known is not None and valid(known, known[0]) and known[1] >= 0:", "host repository"),
    "a leaf's names by identity alone": (
        "if known is not None and valid(known, st.st_ctime_ns) and known[1] < 0:",
        "if known is not None and valid(known, known[0]) and known[1] < 0:", "leaf .git file"),
}


def _driven(tree, roots, script, env, tmp_path, exclude=(), walk="python", quarantine=False) -> list:
    time.sleep(0.02)
    spec = {"roots": [str(r) for r in roots], "exclude": [str(e) for e in exclude], "home": env["HOME"],
            "script": script, "env": env, "quarantine": quarantine}
    out = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(spec)], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(tree), "SANDBOY_CACHE_DIR": str(tmp_path / "cache"),
                              "SANDBOY_NATIVE": "1" if walk == "C" else "0"})
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout)
    assert result["walk"] == walk, result  # (the walk meant: the C one where the executor was built)
    return result["found"]


def _native_built() -> bool:
    from sandboy.confine import _libc

    return _libc.IMPLEMENTATION == "native" and gitcheck._native_scan() is not None


# (the walk, the mutant): the mutants are the Python walk's (the C walk's same tests are held to it
# by tests/cage/test_gitcheck_native_walk.py, whose stale-index cases fail without them)
@pytest.mark.parametrize("walk, mutant", [("C", None), ("python", None), *(("python", m) for m in MUTANTS)])
def test_each_use_of_the_index_has_a_probe_that_fails_without_its_ctime_test(tmp_path, env, walk, mutant):
    """The two probes above through a fresh interpreter importing `sandboy` from this checkout (None:
    the plant is found, by the C walk and by its Python stand-in) or from a copy whose use of the
    index skips the ctime test (the plant is missed, and the operator's next `git status` there runs it)."""
    if walk == "C" and not _native_built():
        pytest.skip("the C walk is not built here")
    tree = Path(gitcheck.__file__).resolve().parents[2]
    scenarios = {"host repository", "leaf .git file"} if mutant is None else {MUTANTS[mutant][2]}
    if mutant is not None:
        copy = tmp_path / "tree"
        shutil.copytree(tree / "sandboy", copy / "sandboy", ignore=shutil.ignore_patterns("__pycache__"))
        source = copy / "sandboy" / "confine" / "gitcheck.py"
        text, replacement, _ = MUTANTS[mutant]
        assert source.read_text().count(text) == 1, mutant
        source.write_text(source.read_text().replace(text, replacement))
        tree = copy
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    repo = checkout(tmp_path / "repo", env)
    time.sleep(MARGIN_S)
    assert _driven(tree, [repo, tmp], "", env, tmp_path, [tmp], walk) == []
    marker = tmp_path / "PWNED"
    scripts, caught = [], {}
    if "host repository" in scenarios:
        nested = repo / "d1" / "d3" / "hostrepo"
        sh(f"git init -q '{nested}' && git -C '{nested}' commit -q --allow-empty -m n", repo, env)
        scripts.append(f"printf '{fsmonitor(marker)}' >> d1/d3/hostrepo/.git/config")
        caught["host repository"] = (nested, lambda found: f"{nested}/.git/config" in found)
    if "leaf .git file" in scenarios:
        target = leaf(repo)
        scripts.append(leaf_dot_git_plant(tmp, marker, target))
        caught["leaf .git file"] = (Path(target), lambda found: f"{tmp}/evil.git/config" in found)
    found = _driven(tree, [repo, tmp], " && ".join(scripts), env, tmp_path, [tmp], walk, quarantine=mutant is None)
    for name, (where, seen) in caught.items():
        if mutant is None:
            assert seen(found), (name, found)
            host_git_status(where, env)  # host side: quarantined, the operator's git runs nothing
            assert not marker.exists(), f"{name}: the plant ran after the check"
        else:
            assert not seen(found), f"{mutant}: still caught ({found})"
            host_git_status(where, env)
            assert marker.exists(), f"{mutant}: the plant was not live"
            marker.unlink()


# --- the margin: a change in the same second as the listing, on a whole-second file system -------

SAME_SECOND = r'''
set -e
mount --make-rprivate /
mount -o loop "$IMG" "$DISK"
R="$DISK/root"
mkdir -p "$R/a/b" "$R/a/c" && echo x > "$R/a/b/f" && echo y > "$R/a/c/f"
sleep 1.1
for try in 1 2 3 4; do
  rm -rf "$R/a/hostrepo"
  # at the start of a second: the host changes `a`, a run's check lists it (and keeps it in the
  # index where the margin lets it), the host makes a repository in `a` — `a`'s ctime the same
  # whole second as when it was listed
  "$PYTHON" -c 'import time; time.sleep(1.02 - time.time() % 1)'
  start=$(date +%s)
  touch "$R/a/t$try"
  "$PYTHON" -c "$DRIVER" "$(printf '%s' "$EMPTY" | sed "s|ROOT|$R|")" > /dev/null
  git init -q "$R/a/hostrepo"
  same=$([ "$(date +%s)" = "$start" ] && echo 1 || echo 0)
  sleep 1.1
  # the next run plants core.fsmonitor in that repository's config, in place: `a` unchanged
  found=$("$PYTHON" -c "$DRIVER" "$(printf '%s' "$ATTACK" | sed "s|ROOT|$R|g")")
  rm -f "$MARKER"
  git -c safe.directory='*' -C "$R/a/hostrepo" status > /dev/null 2>&1 || true
  live=$([ -e "$MARKER" ] && echo 1 || echo 0)
  echo "$same $live $found"
done
'''


@pytest.mark.parametrize("margin", ["as it is", "none (mutant)"])
def test_a_change_within_the_second_of_an_indexed_listing_on_a_whole_second_file_system_is_seen(
        tmp_path, env, margin):
    """A loop-mounted ext4 of 128-byte inodes keeps whole seconds: a directory listed by a run's
    check and changed by the host later in the same second keeps the ctime the index holds. The
    index keeps an entry only 2 s before the clock reading taken before its walk: the next run's
    census lists that directory again, finds the repository made there and judges the config the
    run planted in it. With no margin (mutant: MARGIN_NS = 0) the listing of before hid the
    repository and the plant passed while the operator's `git status` ran it."""
    if os.geteuid() != 0 or not shutil.which("mkfs.ext4") or not shutil.which("unshare") \
            or not os.path.exists("/dev/loop-control"):
        pytest.skip("needs root, mkfs.ext4, unshare and loop devices")
    tree = Path(gitcheck.__file__).resolve().parents[2]
    if margin != "as it is":
        copy = tmp_path / "tree"
        shutil.copytree(tree / "sandboy", copy / "sandboy", ignore=shutil.ignore_patterns("__pycache__"))
        source = copy / "sandboy" / "confine" / "walk_index.py"
        assert source.read_text().count("MARGIN_NS = 2_000_000_000\n") == 1
        source.write_text(source.read_text().replace("MARGIN_NS = 2_000_000_000\n", "MARGIN_NS = 0\n"))
        tree = copy
    image = tmp_path / "img"
    whole_second_image(image)
    (tmp_path / "disk").mkdir()
    marker = tmp_path / "PWNED"

    def spec(script):
        return json.dumps({"roots": ["ROOT"], "exclude": [], "home": env["HOME"], "script": script, "env": env})

    out = subprocess.run(
        ["unshare", "-m", "sh", "-ec", SAME_SECOND], capture_output=True, text=True, timeout=300,
        env={**os.environ, **GIT_ENV, "HOME": env["HOME"], "IMG": str(image), "DISK": str(tmp_path / "disk"),
             "PYTHON": sys.executable, "DRIVER": DRIVER, "MARKER": str(marker), "EMPTY": spec(""),
             "ATTACK": spec(f"printf '{fsmonitor(marker)}' >> a/hostrepo/.git/config"),
             "PYTHONPATH": str(tree), "SANDBOY_CACHE_DIR": str(tmp_path / "cache")})
    assert out.returncode == 0, out.stderr[-3000:]
    tries = [line.split(" ", 2) for line in out.stdout.splitlines()]
    valid = [(live == "1", json.loads(found)["found"]) for same, live, found in tries if same == "1"]
    assert valid, f"no try kept the host's change within the listing's second (load?): {tries}"
    caught = [any(path.endswith("/a/hostrepo/.git/config") for path in found) for _live, found in valid]
    assert all(live for live, _found in valid), "the plant does not run (probe broken)"
    if margin == "as it is":
        assert all(caught), tries
    else:
        assert not all(caught), f"the mutant still caught every plant: {tries}"


def _table(lines) -> str:
    """A mountinfo text: (mount point, st_dev, file system type) per line."""
    return "".join(f"{n} 1 {os.major(dev)}:{os.minor(dev)} / {point} rw,relatime shared:1 - {kind} src rw\n"
                   for n, (point, dev, kind) in enumerate(lines, 20))


def test_the_index_applies_only_where_every_file_system_of_the_roots_tracks_directory_times(tmp_path):
    """kernel_mounts.directory_times_tracked, without the kernel's answer: the file system a root
    lies on (by its st_dev) and each one mounted below it must move a directory's ctime with its
    entries (a FUSE or network server may keep it: rvsec12)."""
    from sandboy.confine.kernel_mounts import directory_times_tracked

    root = str(tmp_path)
    dev = os.stat(root).st_dev
    other = os.makedev(250, 7)
    assert directory_times_tracked([root], _table([("/", dev, "ext4")]))
    assert not directory_times_tracked([root], _table([("/", dev, "fuse.sshfs")]))
    assert not directory_times_tracked([root], _table([("/", other, "ext4")]))  # the root's device unlisted
    assert not directory_times_tracked([root], _table([("/", dev, "ext4"), (f"{root}/share", other, "nfs4")]))
    assert directory_times_tracked([root], _table([("/", dev, "ext4"), (f"{root}/scratch", other, "tmpfs")]))
    assert directory_times_tracked([root], _table([("/", dev, "ext4"), ("/srv/share", other, "nfs4")]))  # elsewhere
    assert not directory_times_tracked([root], _table([("/", dev, "ext4"), (f"{root}/a\\040b", other, "9p")]))
    assert not directory_times_tracked([root, str(tmp_path / "gone")], _table([("/", dev, "ext4")]))


@pytest.mark.parametrize("kind", ["ramfs", "tmpfs"])
def test_no_index_is_kept_for_a_root_on_a_file_system_not_known_to_track_directory_times(tmp_path, env, kind):
    """A write root on ramfs (not on DIRECTORY_TIMES_TRACKED, standing in for a FUSE or network
    file system, which this machine cannot mount) keeps no index, and its census's listings are
    not reused after the run: every directory is listed at launch and again after; the twin on
    tmpfs keeps an index and reuses both. In a mount namespace of its own."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare")
    disk = tmp_path / "disk"
    disk.mkdir()
    probe = ("import sys\nfrom sandboy.confine import gitcheck\nlisted = []\nreal = gitcheck._Walk._list\n"
             "gitcheck._NATIVE_SCAN[:] = [None]\n"  # (the Python walk, whose listings can be counted)
             "gitcheck._Walk._list = lambda w, d, *a: (listed.append(d), real(w, d, *a))[1]\n"
             "snap = gitcheck.snapshot([sys.argv[1]], home=sys.argv[2])\nat_launch = len(listed)\n"
             "assert snap.verify() == []\nprint(at_launch, len(listed) - at_launch)\n")
    script = (f"mount --make-rprivate / && mount -t {kind} none '{disk}' && mkdir -p '{disk}/repo/a/b/c' && "
              f"git init -q '{disk}/repo' && sleep {MARGIN_S} && "
              f"for i in 1 2; do PYTHONPATH='{os.path.dirname(os.path.dirname(gitcheck.__file__))}' "
              f"'{sys.executable}' -c \"$PROBE\" '{disk}/repo' '{env['HOME']}'; done")
    out = subprocess.run(["unshare", "-m", "sh", "-ec", script], capture_output=True, text=True, timeout=120,
                         env={**os.environ, **env, "PROBE": probe, "SANDBOY_CACHE_DIR": str(tmp_path / "cache")})
    assert out.returncode == 0, out.stderr[-2000:]
    assert len(index_files(tmp_path)) == (0 if kind == "ramfs" else 1)
    # (listings at launch, after the run) of the second run: on tmpfs the index spares the census
    # and the census's listings spare the walk after the run (session 10); on ramfs neither
    second = [int(n) for n in out.stdout.split()[2:]]
    assert second == ([3, 3] if kind == "ramfs" else [0, 0]), out.stdout
