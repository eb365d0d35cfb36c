"""rvwalk13's review of the git check's walk (`_native_walk.c` and its stand-in
`gitcheck._Walk._scan_python`, ADR 0019 "Session 13") from the attacker's side: a tree the
command wrote, walked in the operator's process.

- Hostile trees AND forged walk indexes (wrong types, counts of 2**70, names with `..` and `/`,
  NULs, lone surrogates, entries of any shape), at launch and after the run: the C walk answers
  as its stand-in (seeded fuzz below; run also under ASan+UBSan by hand: clean).
- A repository at a path near PATH_MAX (4096 bytes with its NUL): the directory can be listed by
  its path, but `.git` and what is below it are spelled longer. From ~4086 bytes the check's
  lookups by whole path failed (ENAMETOOLONG) as "nothing there" and the run passed (git 2.39
  itself gives up from ~4084 bytes; at 4040-4082 it uses the repository). FIXED: deeper than
  `gitcheck.DEEPEST_REPOSITORY` a `.git`/`HEAD` met fails the run, "too deep to check".
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess

import pytest
from gitkit import GIT_ENV
from gitkit import fsmonitor as _fsmonitor

pytestmark = pytest.mark.needs_kernel


@pytest.fixture(params=["C walk", "stand-in"])
def walk(request, monkeypatch):
    from sandboy.confine import gitcheck

    if request.param == "C walk" and gitcheck._native_scan() is None:
        pytest.skip("the C walk is not built here")
    if request.param == "stand-in":
        monkeypatch.setattr(gitcheck, "_NATIVE_SCAN", [None])
        monkeypatch.setenv("SANDBOY_NATIVE", "0")
    return request.param


def _policy(cage):
    return cage.policy(fs={"read": ["/etc", "/proc/self"], "exec": ["/usr/bin", "/bin", "/usr/lib/git-core"],
                           "write": ["."]},
                       env={"pass": [], "set": {"PATH": "/usr/bin:/bin", "HOME": str(cage.work), **GIT_ENV}})


def _steps(work: str, length: int) -> list:
    """Names of nested directories below `work` whose whole path is `length` bytes."""
    left = length - len(work)
    names = []
    while left > 0:
        size = min(200, left - 1)
        if left - (size + 1) == 1:
            size -= 1  # (no last name of 0 bytes)
        names.append("d" * size)
        left -= size + 1
    assert len(work) + sum(len(n) + 1 for n in names) == length
    return names


def _plant_deep(cage, tmp_path, length: int):
    """(the run's result, whether the host's git then ran the planted command) for a repository
    with a `core.fsmonitor` planted at a directory whose path is `length` bytes."""
    work = os.path.realpath(cage.work)
    names = _steps(work, length)
    marker = tmp_path / "PWNED"
    plant = (f"mkdir -p .git/objects .git/refs && printf 'ref: refs/heads/main\\n' > .git/HEAD "
             f"&& printf '{_fsmonitor(marker)}' > .git/config")
    script = "set -e; for n in " + " ".join(names) + "; do mkdir $n; cd $n; done; " + plant + "; echo PLANTED"
    result = cage.run(argv=["/bin/sh", "-c", script], policy=_policy(cage), via="api")
    assert "PLANTED" in result.out, result
    subprocess.run(["/bin/sh", "-c", "for n in " + " ".join(names) + "; do cd $n; done; "
                    "git -c safe.directory='*' status"], cwd=work, env={**os.environ, **GIT_ENV},
                   capture_output=True, timeout=60)
    return result, marker.exists()


@pytest.mark.parametrize("length", [1000, 3584])
def test_a_repository_just_short_of_the_deepest_checked_is_judged(cage, tmp_path, walk, length):
    """The twin: at DEEPEST_REPOSITORY bytes and less the repository is judged (its planted
    config found by name. Host side the operator's git still runs it: the quarantine does not move
    a finding this deep ("NOT moved: File name too long", still 125 — ADR 0019's degraded move;
    open, see docs/threat-model.md's rvwalk13 section)."""
    result, ran = _plant_deep(cage, tmp_path, length)
    assert result.rc == 125 and "core.fsmonitor" in result.err and "too deep" not in result.err, (length, result)
    assert not ran or "NOT moved" in result.err, result


@pytest.mark.parametrize("length", [3586, 4040, 4082, 4086, 4091])
def test_a_repository_deeper_than_the_check_looks_fails_the_run(cage, tmp_path, walk, length):
    """FIXED here (gitcheck.DEEPEST_REPOSITORY): from ~4086 bytes the check's lookups of `.git` by
    whole path failed as "nothing there" and the run passed (rc 0); at 4040-4082 git uses the
    repository and its config could not be moved ("NOT moved"). Now every `.git`/`HEAD` the walk
    meets deeper than DEEPEST_REPOSITORY bytes fails the run, 125, naming it."""
    result, ran = _plant_deep(cage, tmp_path, length)
    assert result.rc == 125 and "too deep to check" in result.err, (length, result)


# --- the C walk vs its stand-in, on random hostile trees and forged indexes --------------------

NAMES = [b".git", b"HEAD", b"a", b"b\nc", b"\xff\xfe", b"x" * 255, b"sp ace", b"..a", b"\xc3\xa9", b"objects", b"commondir"]


def _build(rng, directory: bytes, depth: int) -> None:
    for _ in range(rng.randint(0, 4)):
        name = rng.choice(NAMES) if rng.random() < 0.6 else bytes(rng.choice(b"abc\n\xff.") for _ in range(rng.randint(1, 6)))
        path = os.path.join(directory, name)
        if os.path.lexists(path):
            continue
        r = rng.random()
        if r < 0.5 and depth < 6:
            os.mkdir(path)
            _build(rng, path, depth + 1)
        elif r < 0.7:
            with open(path, "wb") as fh:
                fh.write(b"ref: refs/heads/main\n")
        elif r < 0.85:
            os.symlink(rng.choice([b"..", b"/", b"a", b"nowhere"]), path)
        else:
            os.mkdir(path)


def _junk(rng):
    return rng.choice([None, -1, 0, 1, 2**70, -2**70, True, 1.5, "s", b"b", [], ["a"], ["..", "/etc"], ["\udcff"],
                       ["a\x00b"], [1], (1,), {}])


def _forged(rng, root: str, census: dict) -> dict:
    """A walk index for `root`: entries taken from the census, forged ones at the right ctime
    (counts beyond 64 bits, names leading out of the tree or no names at all), and junk."""
    prior = {}
    for directory, subdirs, _ in os.walk(root):
        st = os.lstat(directory)
        key, ctime, r = (st.st_dev, st.st_ino), st.st_ctime_ns, rng.random()
        if r < 0.2:
            continue
        if r < 0.5 and census.get(key) is not None:
            listed = census[key]
            prior[key] = (ctime, listed[0], listed[1], listed[2], list(listed[3]))
        elif r < 0.75:
            names = [rng.choice([n, "..", "../..", "/", "a/b", n + "x"]) for n in subdirs]
            prior[key] = (rng.choice([ctime, ctime, ctime + 1, float(ctime)]),
                          rng.choice([len(subdirs), -1, 0, 2**70, -2**70, 10**6]),
                          _junk(rng) if rng.random() < 0.3 else rng.random() < 0.5, rng.random() < 0.5,
                          names if rng.random() < 0.8 else _junk(rng))
        else:
            prior[key] = _junk(rng) if rng.random() < 0.5 else tuple(_junk(rng) for _ in range(rng.randint(0, 6)))
    return prior


@pytest.mark.parametrize("seed", range(4))
def test_the_c_walk_answers_as_its_stand_in_on_random_hostile_trees_and_indexes(tmp_path, seed):
    from sandboy.confine import gitcheck

    if gitcheck._native_scan() is None:
        pytest.skip("the C walk is not built here")
    from test_gitcheck_native_walk import _same

    rng = random.Random(seed)
    for round_ in range(15):
        base = tmp_path / str(round_)
        root = base / "root"
        root.mkdir(parents=True)
        _build(rng, bytes(root), 0)
        left = rng.choice([10**6, 3, 10, 0])
        census = _same(str(root), left=left)
        prior = _forged(rng, str(root), census[2])
        _same(str(root), left=left, prior=prior)
        _same(str(root), left=left, census=False, prior=prior, listings=census[2], since=rng.choice([0, 1 << 62]),
              cut=rng.choice([None, 1 << 62]), exclude=frozenset([str(root / "a")]) if rng.random() < 0.3 else ())
        shutil.rmtree(base)
