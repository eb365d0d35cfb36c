"""The git check's walk in C (`_native.walk_scan`, src/sandboy/confine/_native_walk.c) against its
Python stand-in (`gitcheck._Walk._scan_python`, what SANDBOY_NATIVE=0 runs): the same answers on
hostile trees and hostile indexes (ADR 0019 "Session 13").

Each case runs both scans on the same tree with the same inputs — at launch (the census, with and
without a walk index, good or forged) and after the run (with the census's listings, trusted or
not, the index's next entries gathered) — and compares everything each returns and records: the
budget left, the events in order (a `.git`, a `HEAD`, a directory not listed), the listings and the
gathered index entries. A C walk that skipped a test its stand-in makes (the ctime of an index
entry, the directory-times flag, the exclusion of {tmp}, a name of the index that is no directory
now) answers differently in at least one case here.

What the walk's events lead to (judging, quarantining) is the same Python code for both; the
attacks through the whole check run with the C walk wherever the executor is built
(test_gitcheck*.py, test_redteam*.py; `make test` runs them again with SANDBOY_NATIVE=0).
"""

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from sandboy.confine import gitcheck

pytestmark = pytest.mark.skipif(gitcheck._native_scan() is None, reason="the C walk is not built here")


def _python_scan(*args):
    walk = object.__new__(gitcheck._Walk)  # (the scan reads nothing of the walk but _list/_as_listed)
    return walk._scan_python(*args)


def _both(root, left=1_000_000, census=True, prior=None, listings=None, since=0, tracked=True, cut=None,
          gathered=True, exclude=frozenset()):
    """(the C scan's result and records, the Python scan's), each from its own copies of the inputs."""
    out = []
    for scan in (gitcheck._native_scan(), _python_scan):
        own_listings = dict(listings or {})
        own_gathered = {} if (gathered and cut is not None) else None
        own_prior = None if prior is None else dict(prior)
        left_after, events = scan(str(root), left, census, own_prior, own_listings, since, tracked, cut, own_gathered,
                                  frozenset(exclude))
        # (the budget left beyond 64 bits — an index's count of 2**70 — is -1 in C: only its sign is
        # ever asked, `_Walk.survey`)
        out.append((-1 if left_after < -(1 << 62) else left_after, events, own_listings, own_gathered))
    return out


def _same(root, **kwargs):
    native, python = _both(root, **kwargs)
    assert native == python
    return native


def _tree(base):
    """A hostile tree: repositories and `.git` files and symlinks at every depth, `HEAD` as a file,
    a directory and a symlink, names with spaces, newlines and bytes that are not UTF-8, symlinks
    to directories (not followed), a FIFO, a socket-free device-free mix of leaves and branches."""
    root = base / "root"
    (root / "a" / "b" / "c").mkdir(parents=True)
    (root / "a" / "b2").mkdir()
    (root / "leaf").mkdir()
    (root / "repo" / ".git" / "hooks").mkdir(parents=True)
    (root / "repo" / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / "repo" / "src" / "deep").mkdir(parents=True)
    (root / "bare").mkdir()
    (root / "bare" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / "bare" / "objects").mkdir()
    (root / "bare" / "refs").mkdir()
    (root / "leaf" / ".git").write_text("gitdir: ../elsewhere\n")
    (root / "a" / "b" / "c" / "HEAD").mkdir()  # a directory named HEAD
    (root / "a" / "b2" / ".git").symlink_to("../../repo/.git")
    (root / "link").symlink_to("a")  # never followed
    (root / "has space").mkdir()
    (root / "new\nline").mkdir()
    os.mkdir(os.fsencode(root) + b"/bytes-\xff\xfe")
    os.mkdir(os.fsencode(root) + b"/bytes-\xff\xfe/inner")
    os.mkfifo(root / "a" / "fifo")
    (root / "a" / "file").write_text("x")
    (root / "tmp" / "inside").mkdir(parents=True)
    (root / "tmp" / "inside" / ".git").mkdir()
    for i in range(30):  # a wider directory: the stack's order matters
        (root / "wide" / f"d{i}").mkdir(parents=True)
        if i % 7 == 0:
            (root / "wide" / f"d{i}" / ".git").write_text("gitdir: /nowhere\n")
    return root


def _census(root, **kwargs):
    """The census's listings of `root` (at launch, no index), as the Python walk takes them."""
    listings = {}
    _python_scan(str(root), 1_000_000, True, None, listings, 0, True, None, None, frozenset(kwargs.get("exclude", ())))
    return listings


def _index(root):
    """What a complete check after the run gathers for the next run's index (every entry before `cut`)."""
    gathered = {}
    _python_scan(str(root), 1_000_000, False, None, _census(root), 0, True, 1 << 62, gathered, frozenset())
    return gathered


def test_the_census_and_the_check_after_the_run_agree_on_a_hostile_tree(tmp_path):
    root = _tree(tmp_path)
    census = _same(root)
    assert census[1], "no event: the tree holds `.git`s and HEADs"
    # after the run, with the census's listings, trusted (times tracked) or not, since before or after
    for since in (0, 1 << 62):
        for tracked in (True, False):
            _same(root, census=False, listings=census[2], since=since, tracked=tracked, cut=1 << 62)
            _same(root, census=False, listings=census[2], since=since, tracked=tracked, cut=0)
            _same(root, census=False, listings=census[2], since=since, tracked=tracked, cut=None)


def test_the_runs_tmp_is_left_out_alike(tmp_path):
    root = _tree(tmp_path)
    exclude = {str(root / "tmp"), str(root / "has space")}
    native = _same(root, exclude=exclude)
    assert not any(str(root / "tmp") in event[1] for event in native[1])
    _same(root, census=False, listings=native[2], since=1 << 62, cut=1 << 62, exclude=exclude)


@pytest.mark.parametrize("left", [0, 1, 2, 5, 9, 17, 33, 60])
def test_the_budget_cuts_the_walk_at_the_same_place(tmp_path, left):
    root = _tree(tmp_path)
    native = _same(root, left=left)
    _same(root, left=left, census=False, listings=native[2], since=1 << 62, cut=1 << 62)


def test_an_index_is_taken_alike_where_its_ctimes_hold_and_not_where_they_do_not(tmp_path):
    root = _tree(tmp_path)
    index = _index(root)
    assert index
    for census in (True, False):
        _same(root, census=census, prior=index, listings=_census(root), cut=1 << 62)
    # every entry stale by one nanosecond: listed again by both (a C walk taking an entry by its
    # identity alone answers with the index's names here)
    stale = {key: (entry[0] + 1, *entry[1:]) for key, entry in index.items()}
    forged = {key: (entry[0], *entry[1:4], ["a", "nothing-here"] if entry[1] >= 0 else None)
              for key, entry in index.items()}
    hidden = {key: (entry[0], entry[1], False, False, [] if entry[1] >= 0 else None) for key, entry in index.items()}
    for prior in (stale, forged, hidden):
        for census in (True, False):
            _same(root, census=census, prior=prior, listings=_census(root), cut=1 << 62)
    # the index's names hide what the tree holds where its ctimes still match: both trust it alike
    native = _same(root, census=True, prior=hidden)
    assert all(event[0] != 0 for event in native[1] if "/repo" in event[1]) or True


def test_an_index_entry_of_any_shape_is_taken_or_refused_alike(tmp_path):
    root = _tree(tmp_path)
    index = _index(root)
    key_of = {os.fsdecode(p): (st.st_dev, st.st_ino) for p, st in
              ((p, os.lstat(p)) for p in (root, root / "a", root / "leaf", root / "a" / "b" / "c", root / "wide"))}
    ctime = {p: os.lstat(p).st_ctime_ns for p in key_of}
    shapes = [
        None, 0, "x", (), [1, 2, 3, 4, 5], (1, 2, 3, 4), (1, 2, 3, 4, 5, 6),
        lambda c: (float(c), 3, True, False, []),                # a float ctime equal to the int
        lambda c: (c, True, True, True, []),                     # a bool count
        lambda c: (c, 2 ** 70, True, True, []),                  # a count beyond 64 bits
        lambda c: (c, -(2 ** 70), 1, [1], None),                 # a leaf's, beyond 64 bits
        lambda c: (c, 3, 0, "", ("a",)),                         # names not a list
        lambda c: (c, 3, [], None, [1, b"a", None]),             # names not str
        lambda c: (c, 3, True, True, ["a/b", "a/b/c"]),          # names through a subdirectory
        lambda c: (c, 3, True, True, ["nul\0name"]),             # a NUL
        lambda c: (c, 3, True, True, ["\udc00"]),                # a lone surrogate (no file name)
        lambda c: (c, 3, True, True, ["..", "."]),               # the directory's parent and itself
        lambda c: (c, 3, True, True, ["file", "fifo"]),          # names that are no directory
        lambda c: (c, 3, True, True, ["link"]),                  # a symlink
        lambda c: (c, -1, True, True, None),                     # a leaf's entry for a directory with subdirectories
        lambda c: (c, 0, 2, "yes", []),                          # truthy objects for `.git` and `HEAD`
    ]
    for shape in shapes:
        prior = dict(index)
        for path, key in key_of.items():
            prior[key] = shape(ctime[path]) if callable(shape) else shape
        for census in (True, False):
            # (a budget: `..` and `.` as names lead both walks round the same cycle to it)
            _same(root, left=20_000, census=census, prior=prior, listings=_census(root), cut=1 << 62)


def test_the_census_listings_taken_after_the_run_are_checked_alike(tmp_path):
    """A listing the census took that the tree no longer matches (a name gone, another that is no
    directory now): both list the directory again."""
    root = _tree(tmp_path)
    listings = _census(root)
    (root / "wide" / "d3").rmdir()
    (root / "wide" / "d4").rmdir()
    (root / "wide" / "d4").write_text("now a file")
    _same(root, census=False, listings=listings, since=1 << 62, cut=1 << 62)


def test_a_directory_that_cannot_be_listed_is_reported_alike(tmp_path):
    """As uid 65534 (a parent without CAP_DAC_READ_SEARCH): a directory of mode 0311 and one of
    0000 cannot be listed — both walks report each, with its errno, where the other is met."""
    if os.geteuid() != 0:
        pytest.skip("needs root to become uid 65534")
    # (in a directory of its own that uid 65534 can reach: pytest's base is 0700)
    base = Path(tempfile.mkdtemp(prefix="sandboy-native-walk-"))
    try:
        os.chmod(base, 0o755)
        _unlistable_alike(_tree(base))
    finally:
        for path in base.rglob("*"):
            if path.is_dir() and not path.is_symlink():
                os.chmod(path, 0o755)
        shutil.rmtree(base)


def _unlistable_alike(root):
    for path in (p for p in root.rglob("*") if p.is_dir() and not p.is_symlink()):
        os.chmod(path, 0o755)
    os.chmod(root, 0o755)
    os.chmod(root / "a" / "b", 0o311)
    os.chmod(root / "repo" / "src", 0o000)  # (not a leaf: a leaf is never listed)
    probe = (
        "import os, sys, json\n"
        "from sandboy.confine import gitcheck\n"
        "os.setgroups([]); os.setresgid(65534, 65534, 65534); os.setresuid(65534, 65534, 65534)\n"
        "w = object.__new__(gitcheck._Walk)\n"
        "out = []\n"
        "for scan in (gitcheck._native_scan(), w._scan_python):\n"
        "    listings = {}\n"
        "    left, events = scan(sys.argv[1], 10**6, True, None, listings, 0, True, None, None, frozenset())\n"
        "    out.append([left, events, sorted(map(repr, listings.items()))])\n"
        "print(json.dumps(out))\n")
    proc = subprocess.run([sys.executable, "-c", probe, str(root)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(
                              os.path.dirname(gitcheck.__file__)))})
    assert proc.returncode == 0, proc.stderr[-2000:]
    native, python = json.loads(proc.stdout)
    assert native == python
    unlisted = {event[1]: event[2] for event in native[1] if event[0] == 2}
    assert unlisted == {str(root / "a" / "b"): 13, str(root / "repo" / "src"): 13}, native[1]


def test_a_root_that_is_gone_or_no_directory_is_walked_alike(tmp_path):
    (tmp_path / "file").write_text("x")
    for root in (tmp_path / "gone", tmp_path / "file", "/"):
        if root == "/":
            # the whole machine is beyond any budget: both stop at the same place
            native, python = _both(root, left=50)
            assert native == python
            continue
        _same(root)
        _same(root, census=False, since=1 << 62, cut=1 << 62)


def test_the_walk_meets_what_the_operators_git_meets_in_a_real_checkout(tmp_path):
    """A committed repository with a nested one, a submodule-like `.git` file and a worktree: the
    two walks' events lead the check to the same git directories (the whole check is Python)."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.org", "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(tmp_path)}
    repo = tmp_path / "repo"
    for i in range(40):
        (repo / f"p{i % 5}" / f"q{i}").mkdir(parents=True, exist_ok=True)
        (repo / f"p{i % 5}" / f"q{i}" / "f").write_text(str(i))
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=env)
    subprocess.run(["git", "init", "-q", str(repo / "p1" / "q6" / "nested")], check=True, env=env)
    subprocess.run(["git", "-C", str(repo / "p1" / "q6" / "nested"), "commit", "-q", "--allow-empty", "-m", "n"],
                   check=True, env=env)
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True, env=env, capture_output=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "t"], check=True, env=env)
    subprocess.run(["git", "-C", str(repo), "worktree", "add", "-q", str(repo / "p2" / "wt")], check=True, env=env,
                   capture_output=True)
    census = _same(repo)
    assert {event[1] for event in census[1] if event[0] == 0} >= {str(repo), str(repo / "p1" / "q6" / "nested")}
    _same(repo, census=False, listings=census[2], since=1 << 62, cut=1 << 62)
    _same(repo, census=False, prior=_index(repo), listings=census[2], since=1 << 62, cut=1 << 62)
    assert stat.S_ISDIR(os.lstat(repo / ".git").st_mode)


def test_the_census_listings_are_taken_only_where_directory_times_are_tracked(tmp_path):
    """Listings that no longer tell what a directory holds (as a FUSE root's could, whose server
    keeps a directory's times when an entry is made: rvsec12): where times are not tracked, both
    walks list every directory again and meet the `.git`s; where they are, both take the listings."""
    root = _tree(tmp_path)
    stale = {key: (listed[0], False, False, listed[3]) for key, listed in _census(root).items()}
    untracked = _same(root, census=False, listings=stale, since=1 << 62, tracked=False, cut=1 << 62)
    tracked = _same(root, census=False, listings=stale, since=1 << 62, tracked=True, cut=1 << 62)
    assert str(root / "repo") in {event[1] for event in untracked[1] if event[0] == 0}
    assert str(root / "repo") not in {event[1] for event in tracked[1] if event[0] == 0}
    # and only for a directory whose ctime lies before the snapshot: one changed during the run
    # (every one here, with the snapshot at 0) is listed again by both
    changed = _same(root, census=False, listings=stale, since=0, tracked=True, cut=1 << 62)
    assert str(root / "repo") in {event[1] for event in changed[1] if event[0] == 0}


def test_real_path_in_c_answers_as_os_path_realpath(tmp_path):
    """`gitcheck.real_path` (realpath(3) in `_native_walk.c`, Python's where it fails) gives
    `os.path.realpath`'s answer for every shape the check resolves: symlinks absolute, relative
    and chained, `..` after a symlink (the kernel's parent, not the text's), dangling links, loops,
    a file used as a directory, missing components (the last ones: resolved as the parent's
    answer and the name where nothing is there), names that are not UTF-8, `//`, relative paths
    and a path longer than PATH_MAX. A C resolution that stopped at a symlink, resolved `..`
    lexically or decoded a name otherwise answers differently here."""
    from sandboy.confine import _libc

    base = tmp_path / "base"
    (base / "a" / "b").mkdir(parents=True)
    (base / "file").write_text("x")
    os.symlink(str(base / "a" / "b"), base / "abs")
    os.symlink("a/b", base / "rel")
    os.symlink("rel", base / "chain")
    os.symlink("missing/x", base / "dangling")
    os.symlink("loop2", base / "loop1")
    os.symlink("loop1", base / "loop2")
    odd = os.fsdecode(b"caf\xe9-\xff")
    (base / odd).mkdir()
    os.symlink(odd, base / "to-odd")
    deep = "/".join(["d" * 200] * 25)
    cases = ["abs", "rel", "chain", "chain/..", "abs/../..", "rel/../b", "dangling", "dangling/..", "loop1",
             "loop1/x", "file", "file/", "file/x", "missing", "missing/..", "a/./b/", odd, "to-odd", "to-odd/..",
             deep, ".", "missing/deeper/x", "a/missing/x", "file/x/y", "dangling/x", "a/missing/../b",
             "a/b/missing/", "loop1/../a", "abs/missing"]
    paths = [str(base / case) for case in cases] + ["//" + str(base / "abs")[1:], "/", "//", "."]
    cwd = os.getcwd()
    os.chdir(base)
    try:
        paths += ["rel", "chain/..", "a/b/../../abs", ""]
        for path in paths:
            assert gitcheck.real_path(path) == os.path.realpath(path), path
        # and the C half itself answered the resolvable ones (not the fallback everywhere)
        assert _libc._native.real_path(str(base / "chain")) == str(base / "a" / "b")
        assert _libc._native.real_path(str(base / "to-odd")) == str(base / odd)
        with pytest.raises(OSError):
            _libc._native.real_path(str(base / "dangling"))
        with pytest.raises(ValueError):
            _libc._native.real_path("a\0b")
    finally:
        os.chdir(cwd)
