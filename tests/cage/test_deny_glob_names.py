"""The deny globs' name test without `fnmatch` (session 13, build13): `deny_globs.name_matcher`
answers as `fnmatch.fnmatchcase` for every pattern, and a build of a policy whose globs use only
`*` and `?` imports no `re` (fnmatch's import of it, with enum, functools and collections, was
≈ 4-6 ms of the README example's every build)."""

import fnmatch
import os
import random
import subprocess
import sys

import pytest

from sandboy.confine.deny_globs import glob_nofollow, name_matcher

# the characters that mean something to a pattern, and some that do not
PATTERN_CHARS = "ab.?*-x"
NAME_CHARS = "ab.x?*-\n["


def test_the_name_test_answers_as_fnmatch_for_random_patterns():
    rng = random.Random(13)
    checked = 0
    for _ in range(20_000):
        pattern = "".join(rng.choice(PATTERN_CHARS) for _ in range(rng.randint(0, 8)))
        matches = name_matcher(pattern)
        for _ in range(8):
            name = "".join(rng.choice(NAME_CHARS) for _ in range(rng.randint(0, 10)))
            assert matches(name) == fnmatch.fnmatchcase(name, pattern), (pattern, name)
            checked += 1
    assert checked == 160_000


@pytest.mark.parametrize("pattern, name", [
    ("*.pem", "key.pem"), ("*.pem", ".pem"), ("*.pem", "key.pem.bak"), ("*.pem", "key.PEM"),
    ("id_*", "id_rsa"), ("id_*", "xid_rsa"), ("*", ""), ("*", ".env"), ("?", ""), ("?", "\n"),
    ("a*a", "a"), ("a*a", "aa"), ("*a*a*", "xaxa"), ("*ab*ab", "abab"), ("*ab*ab", "abxab"),
    ("k?y.*", "key.pem"), ("k?y.*", "ky.pem"), ("*?", ""), ("**", "x"), ("*.p?m*", "a.pem.old"),
    # sets: fnmatch's own rules
    ("[.]env", ".env"), ("[!a]*", "abc"), ("[]]x", "]x"), ("[a-c]", "b"), ("[z-a]", "z"), ("[x", "[x"),
])
def test_hand_picked_names_answer_as_fnmatch(pattern, name):
    assert name_matcher(pattern)(name) == fnmatch.fnmatchcase(name, pattern)


def test_a_walk_with_question_marks_and_stars_finds_what_glob_finds(tmp_path):
    import glob

    for rel in ("key.pem", "kay.pem", "ky.pem", "sub/key.pem", "sub/k.pem.old", ".hidden.pem", "notes.txt"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x")
    for pattern in ("k?y.pem", "*.pem", "**/k*.pem*", "*/k?y.*", ".*.p?m", "[k]ey.pem"):
        want = set(glob.glob(os.path.join(tmp_path, pattern), recursive=True, include_hidden=True))
        assert set(glob_nofollow(os.path.join(tmp_path, pattern))) == want, pattern
        assert want, pattern  # (each pattern matches something: a test that can fail)


BUILD = """
import sys
from sandboy.confine import cage
from sandboy.policy.model import Policy
policy = Policy.from_mapping({"version": 1, "fs": {"read": ["."], "deny": [sys.argv[1]]}}, "p.toml")
cage.build(policy, cwd=sys.argv[2], reusable=False).close()
print("re" in sys.modules, "fnmatch" in sys.modules)
"""


@pytest.mark.parametrize("pattern, imports_re", [("*.pem", False), ("k?y*", False), ("[k]ey.pem", True)])
def test_a_build_with_star_and_question_mark_globs_imports_no_re(tmp_path, pattern, imports_re):
    (tmp_path / "key.pem").write_text("x")
    out = subprocess.run([sys.executable, "-c", BUILD, pattern, str(tmp_path)], capture_output=True, text=True,
                         cwd=tmp_path, check=True).stdout.split()
    # the set pattern is the twin: fnmatch (and re) still answer it, so the probe can see an import
    assert out == [str(imports_re), str(imports_re)]


def test_a_split_takes_each_entry_s_type_from_its_listing(tmp_path):
    """`landlock.plan_rules` splits a granted directory around a deny from one listing with the
    entries' types (session 13: no lstat and stat per entry): a symlink gets no rule (its target
    would be granted), a file only the rights a file can hold, a directory all of them."""
    from sandboy.confine import landlock

    (tmp_path / "secret.env").write_text("TOKEN")
    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "dir").mkdir()
    (tmp_path / "outside").mkdir()
    os.symlink(tmp_path / "outside", tmp_path / "dir-link")
    os.symlink(tmp_path / "file.txt", tmp_path / "file-link")
    warnings = []
    rules = dict(landlock.plan_rules({str(tmp_path): landlock.WRITE | landlock.READ}, [str(tmp_path / "secret.env")],
                                     warnings.append))
    assert sorted(rules) == sorted(str(tmp_path / name) for name in ("", "file.txt", "dir", "outside"))
    assert rules[str(tmp_path / "dir")] == landlock.WRITE | landlock.READ
    assert rules[str(tmp_path / "outside")] == landlock.WRITE | landlock.READ
    assert rules[str(tmp_path / "file.txt")] == (landlock.WRITE | landlock.READ) & landlock.FILE_RIGHTS
    assert rules[str(tmp_path / "file.txt")] != rules[str(tmp_path / "dir")]
    assert rules[str(tmp_path)] == landlock.READ_DIR
    assert not warnings


def test_a_fingerprint_keeps_the_listing_the_split_was_decided_from(tmp_path):
    """`plan_rules(listed=)` hands each split directory's stat and names, taken as the rules were
    decided, to the fingerprint (`fingerprint_build.take`), which takes none of its own: an entry
    made after the listing and before the fingerprint is then a change at the next check. A
    fingerprint that listed again after the rules described it as decided, and every later check
    said "unchanged" for rules that never granted it (the twin below: a path-only split list)."""
    from sandboy.confine import landlock
    from sandboy.confine.fingerprint import Fingerprint

    (tmp_path / "secret.env").write_text("TOKEN")
    (tmp_path / "old.txt").write_text("x")
    split_dirs, listed = [], {}
    rules = dict(landlock.plan_rules({str(tmp_path): landlock.READ}, [str(tmp_path / "secret.env")], print,
                                     split_dirs, (), listed))
    assert split_dirs == [str(tmp_path)] and set(listed[str(tmp_path)][2]) == {"secret.env", "old.txt"}
    (tmp_path / "new.txt").write_text("made while the cage was built")
    assert str(tmp_path / "new.txt") not in rules
    kept = Fingerprint((), [(path, listed[path]) for path in split_dirs], ((), (), False), ([], [], []))
    assert not kept.unchanged()
    # the twin: the directory as it is now (a listing after the rules) finds nothing to say
    relisted = Fingerprint((), split_dirs, ((), (), False), ([], [], []))
    assert relisted.unchanged()
    # and without a change since, the kept listing is unchanged
    again = {}
    landlock.plan_rules({str(tmp_path): landlock.READ}, [str(tmp_path / "secret.env")], print, [], (), again)
    assert Fingerprint((), [(str(tmp_path), again[str(tmp_path)])], ((), (), False), ([], [], [])).unchanged()


def test_a_kept_build_s_fingerprint_lists_no_split_directory_again(tmp_path, monkeypatch):
    """The build hands its listings on (`protections.compile_landlock_fs` -> `cage.build`): a cage
    that may be kept lists each split directory once, for its rules."""
    from sandboy.confine import cage
    from sandboy.policy.model import Policy

    (tmp_path / "secret.env").write_text("TOKEN")
    (tmp_path / "old.txt").write_text("x")
    policy = Policy.from_mapping({"version": 1, "fs": {"read": [str(tmp_path)], "deny": [str(tmp_path / "secret.env")]}})
    listed_again = []
    real_listdir = os.listdir
    monkeypatch.setattr(os, "listdir", lambda p=".": listed_again.append(str(p)) or real_listdir(p))
    built = cage.build(policy, cwd=str(tmp_path), reusable=True)
    try:
        assert built.fingerprint is not None
        assert str(tmp_path) not in listed_again
        (tmp_path / "new.txt").write_text("x")
        assert not built.fingerprint.unchanged()
    finally:
        built.close()
