"""`sandboy.run(argv, policy)` reuses a compiled cage only when a rebuild would give the same
rules: every change below must show in the next run exactly as with a fresh build."""

from __future__ import annotations

import os

from sandboy import Policy
from sandboy.confine import reuse


def _policy(cage, **fs):
    return Policy.from_mapping(cage.policy(fs=fs), "<test>")


def test_unchanged_policy_and_tree_reuse_the_compiled_cage(cage):
    policy = _policy(cage, read=["data"])
    (cage.work / "data").mkdir()
    first, _ = reuse.for_run(policy, cwd=str(cage.work))
    second, owned = reuse.for_run(policy, cwd=str(cage.work))
    assert second is first and not owned


def test_a_path_that_appears_is_granted_next_run(cage):
    spec = cage.policy(fs={"read": ["later"]})
    assert cage.run("read", "later/f", policy=spec).out == "ENOENT"
    # The setup: with the tree unchanged, runs of this policy share one compiled cage...
    first, _ = reuse.for_run(_policy(cage, read=["later"]), cwd=str(cage.work))
    assert reuse.for_run(_policy(cage, read=["later"]), cwd=str(cage.work))[0] is first
    (cage.work / "later").mkdir()
    (cage.work / "later" / "f").write_text("hello")
    r = cage.run("read", "later/f", policy=spec)
    assert r.out == "ok hello", r
    # ...and the path that appeared made the reuse check compile it anew
    assert reuse.for_run(_policy(cage, read=["later"]), cwd=str(cage.work))[0] is not first


def test_a_repointed_symlink_is_followed_anew(cage):
    """data -> a, run; data -> b: the next run must grant b and no longer a."""
    a, b = cage.work / "a", cage.work / "b"
    for d in (a, b):
        d.mkdir()
        (d / "f").write_text(d.name)
    link = cage.work / "data"
    link.symlink_to(a)
    policy = cage.policy(fs={"read": ["data"]})
    assert cage.run("read", a / "f", policy=policy).out == "ok a"
    assert cage.run("read", b / "f", policy=policy).out == "EACCES"
    link.unlink()
    link.symlink_to(b)
    assert cage.run("read", b / "f", policy=policy).out == "ok b"
    assert cage.run("read", a / "f", policy=policy).out == "EACCES"


def test_new_entries_of_a_split_directory_are_granted_next_run(cage):
    (cage.work / ".env").write_text("SECRET")
    policy = cage.policy(fs={"read": ["."], "deny": [".env"]})
    assert cage.run("read", ".env", policy=policy).out == "EACCES"
    (cage.work / "made-later.txt").write_text("new")
    assert cage.run("read", "made-later.txt", policy=policy).out == "ok new"
    assert cage.run("read", ".env", policy=policy).out == "EACCES"


def test_a_deny_that_appears_is_enforced_next_run(cage):
    policy = cage.policy(fs={"read": ["."], "deny": ["secret.pem"]})
    assert cage.run("read", "README", policy=policy).out == "ENOENT"
    (cage.work / "secret.pem").write_text("KEY")
    assert cage.run("read", "secret.pem", policy=policy).out == "EACCES"


def test_a_glob_deny_is_reused_until_a_directory_it_looked_into_changes(cage):
    """The fingerprint keeps the identity of every directory a deny glob looked into
    (`deny_globs.GlobWatch`): unchanged, the cage is reused; a match made since in a
    subdirectory (only that directory changes) makes it be built anew, and the new file is
    denied. (Until session 12 a glob deny was never reused.)"""
    import time

    from sandboy.confine.fingerprint import TICK_NS

    (cage.work / "sub").mkdir()
    time.sleep(3 * TICK_NS / 1e9)  # (a directory changed within the clock tick proves nothing)
    spec = cage.policy(fs={"read": ["."], "deny": ["**/*.pem"]})
    first, owned = reuse.for_run(_policy(cage, read=["."], deny=["**/*.pem"]), cwd=str(cage.work))
    assert not owned and first.fingerprint is not None
    assert reuse.for_run(_policy(cage, read=["."], deny=["**/*.pem"]), cwd=str(cage.work))[0] is first
    assert cage.run("read", "sub/k.pem", policy=spec).out == "ENOENT"
    (cage.work / "sub" / "k.pem").write_text("KEY")
    assert cage.run("read", "sub/k.pem", policy=spec).out == "EACCES"
    assert reuse.for_run(_policy(cage, read=["."], deny=["**/*.pem"]), cwd=str(cage.work))[0] is not first


def test_a_split_directory_is_listed_again_only_when_its_ctime_moved(tmp_path, monkeypatch):
    """The reuse check (`fingerprint.Fingerprint`) lists a directory split around a deny only when its
    inode or ctime moved (an entry added, removed or renamed moves it; no process sets it back):
    a new entry must still make the cage be built anew."""
    import time

    from sandboy.confine.fingerprint import TICK_NS, Fingerprint

    split = tmp_path / "etc"
    split.mkdir()
    (split / "shadow").write_text("x")
    fingerprint = Fingerprint((), (str(split),), ((), (), True), ([], [], []))
    time.sleep(TICK_NS / 1e9 * 1.5)
    assert fingerprint.unchanged()  # listed again (too recent to trust), ctime kept as settled
    listed = []
    real_listdir = os.listdir
    monkeypatch.setattr(os, "listdir", lambda p: listed.append(p) or real_listdir(p))
    assert fingerprint.unchanged() and listed == []
    (split / "hosts").write_text("x")
    assert not fingerprint.unchanged() and listed == [str(split)]
