"""`deny_globs.GlobWatch`'s decisions, without the cage (ADR 0028, session 12): which directories a
deny glob's walk records (those it looked into, each before it looked), and where the record
proves nothing so that no cage with the glob is kept (too many directories, one gone during the
walk, a symlinked match, a glob not walked with the watch). Then `Fingerprint`'s check of such a
record. The end-to-end probes (a match made since is denied, from the host side) are in
test_plan_cache_globs.py; these run on any machine (no Landlock needed), in a temp directory on a
file system that tracks directory times (DIRECTORY_TIMES_TRACKED: else skipped).
"""

import os
import subprocess
import time

import pytest

from sandboy.confine import deny_globs
from sandboy.confine.fingerprint import TICK_NS, Fingerprint, inode_identity


def settle() -> None:
    """Let the last change age past the clock tick: an identity taken within it proves nothing."""
    time.sleep(3 * TICK_NS / 1e9)


@pytest.fixture
def tracked(tmp_path):
    """tmp_path, on a file system the watch trusts (else the test is skipped)."""
    device = tmp_path.stat().st_dev
    kind = deny_globs._file_systems({device}).get(device)
    if kind not in deny_globs.DIRECTORY_TIMES_TRACKED:
        pytest.skip(f"the temp directory's file system ({kind}) keeps no glob record")
    return tmp_path


@pytest.fixture
def tree(tracked):
    """tracked/{keys/a.pem, keys/sub/, other/b.txt}, settled."""
    tmp_path = tracked
    (tmp_path / "keys" / "sub").mkdir(parents=True)
    (tmp_path / "keys" / "a.pem").write_text("")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "b.txt").write_text("")
    settle()
    return tmp_path


def watching(globs) -> Fingerprint:
    """A fingerprint of no policy path and no protected path: only the globs' record to check."""
    return Fingerprint((), (), ((), (), False), ([], [], []), globs=globs)


def walk(pattern: str, watch: deny_globs.GlobWatch) -> list:
    matches = list(deny_globs.glob_nofollow(pattern, watch=watch))
    for match in matches:
        watch.matched(match)
    return matches


def test_the_directories_looked_into_are_recorded_and_no_others(tree):
    """`keys*/*.pem` lists the prefix and looks into `keys` only (`other` does not match `keys*`);
    `**/*.pem` looks into every directory. The prefix's symlinks are followed (as for fs.read),
    the others' not."""
    watch = deny_globs.GlobWatch()
    pattern = f"{tree}/keys*/*.pem"
    assert walk(pattern, watch) == [f"{tree}/keys/a.pem"]
    state = watch.state([pattern])
    assert state == ((str(tree), True, inode_identity(os.stat(tree))),
                     (f"{tree}/keys", False, inode_identity(os.lstat(tree / "keys"))))
    everywhere = deny_globs.GlobWatch()
    pattern = f"{tree}/**/*.pem"
    walk(pattern, everywhere)
    assert sorted(path for path, _, _ in everywhere.state([pattern])) == sorted(
        str(p) for p in (tree, tree / "keys", tree / "keys" / "sub", tree / "other"))


def test_a_missing_prefix_is_a_state_until_it_is_made(tree):
    """A glob under a directory that does not exist matches nothing, and that is kept (the prefix
    recorded as missing); the prefix made since is a change."""
    watch = deny_globs.GlobWatch()
    pattern = f"{tree}/later/*.pem"
    assert walk(pattern, watch) == []
    state = watch.state([pattern])
    assert state == ((f"{tree}/later", True, None),)
    fingerprint = watching(state)
    assert fingerprint.unchanged()
    (tree / "later").mkdir()
    assert not fingerprint.unchanged()


def test_an_entry_made_removed_or_renamed_in_a_watched_directory_is_a_change(tree):
    """What the record is for: each change of a watched directory's entries shows; a file
    rewritten in place (no entry changed) and a change in a directory not looked into do not."""
    pattern = f"{tree}/keys*/*.pem"
    watch = deny_globs.GlobWatch()
    walk(pattern, watch)
    fingerprint = watching(watch.state([pattern]))
    (tree / "keys" / "a.pem").write_text("rewritten")
    (tree / "other" / "c.pem").write_text("")  # `other` is not `keys*`: never looked into
    assert fingerprint.unchanged()
    for change in (lambda: (tree / "keys" / "x.pem").write_text(""),
                   lambda: (tree / "keys" / "x.pem").unlink(),
                   lambda: (tree / "other" / "b.txt").rename(tree / "keys" / "b.pem")):
        settle()  # (a change within the clock tick of the identity could leave its ctime as it was)
        change()
        assert not fingerprint.unchanged()
        fingerprint = watching(tuple(
            (path, follow, inode_identity(os.stat(path) if follow else os.lstat(path)))
            for path, follow, _ in fingerprint._globs))  # (the change taken in: the next one must show too)


def test_more_directories_than_the_bound_prove_nothing(tree):
    """`max_dirs` directories are kept; one more and the record is dropped (the cage is then
    matched at every launch)."""
    pattern = f"{tree}/**/*.pem"  # looks into 4 directories
    at_bound, past_bound = deny_globs.GlobWatch(max_dirs=4), deny_globs.GlobWatch(max_dirs=3)
    walk(pattern, at_bound)
    walk(pattern, past_bound)
    assert len(at_bound.state([pattern])) == 4
    assert past_bound.state([pattern]) is None and past_bound.dirs == {}


def test_a_directory_gone_during_the_walk_or_a_symlinked_match_proves_nothing(tree):
    """A directory listed a moment ago that cannot be stat'ed (removed between the listing and the
    look: nothing settled to keep), and a match that is a symlink (denied where it points, which
    no watched directory covers): no record. A regular match is kept (the twin)."""
    pattern = f"{tree}/keys*/*.pem"
    gone = deny_globs.GlobWatch()
    gone.start(pattern)
    gone.look(str(tree), follow=True)
    gone.look(f"{tree}/keys-removed", follow=False)
    assert gone.state([pattern]) is None
    (tree / "keys" / "link.pem").symlink_to(tree / "other" / "b.txt")
    settle()
    linked = deny_globs.GlobWatch()
    assert f"{tree}/keys/link.pem" in walk(pattern, linked)
    assert linked.state([pattern]) is None
    (tree / "keys" / "link.pem").unlink()
    settle()
    plain = deny_globs.GlobWatch()
    walk(pattern, plain)
    assert plain.state([pattern]) is not None


def test_a_glob_not_walked_with_the_watch_proves_nothing(tree):
    """`state(globs)` answers for the globs it is given: one of them not walked with this watch
    (its directories are not in the record) gives None."""
    pattern, other = f"{tree}/keys*/*.pem", f"{tree}/other/*.pem"
    watch = deny_globs.GlobWatch()
    walk(pattern, watch)
    assert watch.state([pattern]) is not None
    assert watch.state([pattern, other]) is None
    assert watch.state([other]) is None


def test_procfs_lists_a_new_process_with_its_times_unchanged_so_a_glob_there_proves_nothing():
    """Why DIRECTORY_TIMES_TRACKED: /proc's identity stays the same while a process started since
    appears in its listing. A glob that looks into /proc gives no record (matched at every
    launch); the same glob is recorded where the allowlist is taken out (its mutant)."""
    settle()
    before = os.stat("/proc")
    later = subprocess.Popen(["sleep", "60"])
    try:
        assert str(later.pid) in os.listdir("/proc") and os.stat("/proc").st_ctime_ns == before.st_ctime_ns
    finally:
        later.kill()
        later.wait()
    pattern = "/proc/no-such-*"
    watch = deny_globs.GlobWatch()
    assert list(deny_globs.glob_nofollow(pattern, watch=watch)) == []
    assert watch.state([pattern]) is None
    allowed = deny_globs.DIRECTORY_TIMES_TRACKED
    try:
        deny_globs.DIRECTORY_TIMES_TRACKED = allowed | {"proc"}
        assert watch.state([pattern]) == (("/proc", True, inode_identity(os.stat("/proc"))),)
    finally:
        deny_globs.DIRECTORY_TIMES_TRACKED = allowed


def test_a_directory_changed_within_the_tick_proves_nothing(tracked):
    """`GlobWatch.state` is None where a directory it looked into changed within the clock tick
    before it looked (a later change could keep that ctime), and the identities once settled."""
    (tracked / "sub").mkdir()
    settle()

    def watched():
        watch = deny_globs.GlobWatch()
        pattern = f"{tracked}/**/*.pem"
        list(deny_globs.glob_nofollow(pattern, watch=watch))
        return watch.state([pattern])

    def just_changed(i: int):
        (tracked / "sub" / f"new{i}").write_text("x")  # `sub` changed just now
        return watched()

    # (three tries: a loaded machine may stop this process for a whole tick in between)
    assert any(just_changed(i) is None for i in range(3))
    settle()
    state = watched()
    assert state is not None and sorted(path for path, _, _ in state) == [str(tracked), str(tracked / "sub")]
