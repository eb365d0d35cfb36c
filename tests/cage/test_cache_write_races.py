"""Sandboy's own cache files are written where no other user chooses (session 11, `confine.cache_files`).

A root run with another user's HOME (`sudo -E`) keeps its cache below directories that user owns;
that user may swap a name there for a symlink while root writes. Before, every writer went by path:
`plan_keep.store` (then `plan_cache.store`: the plan entries and the seccomp pieces) made its directory and wrote its
entry wherever the swapped link pointed, the policy parse cache opened `NAME.PID.tmp` with O_TRUNC
through a link planted in a directory that user swapped in (any file root may write, overwritten),
and the namespace note did the same with `NOTE.tmp`. Each probe below is the attack, checked from
the host side (what the victim directory or file holds afterwards), with its legitimate twin.
The "other user" is uid 65534: the test (root) makes its directories and does its swaps for it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from sandboy.confine import cache_files, namespace_probe, namespaces, plan_cache, plan_keep
from sandboy.policy import load
from test_path_swap_races import swapping

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the attack needs another uid's directory: run as root")

OTHER = 65534
ROUNDS = 10000  # (a path-relative temporary file, a partial revert, was caught within ~1,000 here)
SECONDS = 4.0
POLICY = 'version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc"]\nexec = ["/usr/bin", "/bin"]\n'


def _others_home(tmp_path):
    """(the other user's ~/.cache, the victim directory a link of theirs points at): root's real
    cache directory `sandboy` is in their `.cache`, which they own, so they may rename anything there."""
    home = tmp_path / "home"
    cache = home / ".cache"
    cache.mkdir(parents=True)
    for path in (home, cache):
        os.chown(path, OTHER, OTHER)
        os.chmod(path, 0o755)
    victim = tmp_path / "victim"  # a directory of root's that the other user wants a file (or a directory) in
    victim.mkdir(mode=0o700)
    return cache, victim


def _entry(cache_dir):
    path = os.path.join(cache_dir, "plans", "0123456789abcdef.plan")
    return path, (plan_cache.FORMAT, ("key",), (), ()), ("body",)


def _everything_in(path) -> list:
    return sorted(os.path.relpath(os.path.join(d, n), path) for d, dirs, files in os.walk(path) for n in dirs + files)


def test_a_cache_directory_the_other_user_made_a_symlink_gets_no_plan_entry(tmp_path):
    cache, victim = _others_home(tmp_path)
    (cache / "sandboy").symlink_to(victim)  # (before: plans/ made in the victim, the entry written there)
    plan_keep.store(_entry(cache / "sandboy"))
    assert _everything_in(victim) == []


def test_a_sandboy_run_whose_cache_directory_the_other_user_linked_writes_nothing_there(tmp_path):
    """The whole run (the parse cache, the namespace note, the plan entry, the seccomp piece): the
    command still runs (a cache that cannot be written only costs speed), the victim gets nothing."""
    cache, victim = _others_home(tmp_path)
    (cache / "sandboy").symlink_to(victim)
    policy = tmp_path / "p.toml"
    policy.write_text(POLICY)
    work = tmp_path / "work"
    work.mkdir()
    env = dict(os.environ, SANDBOY_CACHE_DIR=str(cache / "sandboy"))
    for _ in range(2):
        done = subprocess.run([sys.executable, "-m", "sandboy", "run", "--policy", str(policy), "--", "/bin/true"],
                              env=env, cwd=work, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
    assert _everything_in(victim) == []


def test_a_cache_directory_swapped_for_a_symlink_while_entries_are_written_puts_none_outside(tmp_path):
    cache, victim = _others_home(tmp_path)
    real = cache / "sandboy"
    (real / "plans").mkdir(parents=True, mode=0o700)  # root's own, made by an earlier run
    (victim / "plans").mkdir(mode=0o700)  # a directory of root's by that name, where the link leads
    (cache / "evil").symlink_to(victim)
    deadline = time.monotonic() + SECONDS
    with swapping(str(real), str(cache / "evil")):
        for i in range(ROUNDS):
            if time.monotonic() > deadline:
                break
            path, head, body = _entry(real)
            plan_keep.store((path.replace("0123456789abcdef", f"{i:016x}"), head, body))
    assert _everything_in(victim) == ["plans"]
    where = real if not real.is_symlink() else cache / "evil"  # the real directory, wherever its name is now
    assert all(name.endswith(".plan") for name in os.listdir(where / "plans"))


def test_a_parse_cache_directory_of_the_other_user_gets_no_file_through_their_link(tmp_path, monkeypatch):
    """Before: `_cache_put` opened `<entry>.<pid>.tmp` O_TRUNC by path — in a `policies/` the other
    user made (their `.cache/sandboy` swapped in), a link of theirs by that name led it onto any
    file root may write: here the victim file, overwritten with the parse."""
    cache, victim = _others_home(tmp_path)
    theirs = cache / "sandboy" / "policies"
    theirs.mkdir(parents=True)
    for path in (theirs.parent, theirs):
        os.chown(path, OTHER, OTHER)
        os.chmod(path, 0o777)
    target = victim / "precious"
    target.write_bytes(b"root's own bytes\n")
    monkeypatch.setenv("SANDBOY_CACHE_DIR", str(cache / "sandboy"))
    policy = str(tmp_path / "p.toml")
    entry = load._cache_path(policy)
    os.symlink(target, f"{entry}.{os.getpid()}.tmp")  # the name the old writer used
    load._cache_put(policy, POLICY.encode(), {"version": 1})
    assert target.read_bytes() == b"root's own bytes\n"
    assert not os.path.exists(entry)  # their directory: nothing of root's is kept in it


def test_the_namespace_note_is_not_written_through_a_link_in_a_directory_of_the_other_user(tmp_path, monkeypatch):
    cache, victim = _others_home(tmp_path)
    theirs = cache / "sandboy"
    theirs.mkdir()
    os.chown(theirs, OTHER, OTHER)
    os.chmod(theirs, 0o777)
    target = victim / "precious"
    target.write_bytes(b"root's own bytes\n")
    monkeypatch.setenv("SANDBOY_CACHE_DIR", str(theirs))
    os.symlink(target, namespaces._note_path() + ".tmp")  # the name the old writer used
    namespace_probe.remember_good()
    assert target.read_bytes() == b"root's own bytes\n"
    assert not os.path.exists(namespaces._note_path())


def test_a_namespace_note_another_user_wrote_or_linked_is_not_taken(tmp_path, monkeypatch):
    """The note says "the tier worked in this boot" and skips the probe's static refusals: one the
    other user wrote into a cache directory of theirs (or linked to a file of root's holding the
    kernel release) is not taken; the twin, root's own note, is."""
    theirs = tmp_path / "cache"
    theirs.mkdir()
    os.chown(theirs, OTHER, OTHER)
    monkeypatch.setenv("SANDBOY_CACHE_DIR", str(theirs))
    from cachekit import write_sealed

    note = namespaces._note_path()
    write_sealed(note, namespaces.note_body())  # (sealed: the owner check is what is probed)
    os.chown(note, OTHER, OTHER)
    assert not namespaces._known_good()
    os.unlink(note)
    release = tmp_path / "release"
    write_sealed(release, namespaces.note_body())
    os.symlink(release, note)
    assert not namespaces._known_good()
    os.unlink(note)
    write_sealed(note, namespaces.note_body())
    assert not namespaces._known_good()  # root's own note, but in the other user's directory
    os.chown(theirs, os.geteuid(), os.getegid())  # root's own, sealed, in root's directory: taken
    assert namespaces._known_good()


# --- the twins: a cache directory of root's own is written as before ---

def test_a_cache_directory_of_its_own_gets_its_entry_made_with_its_directories(tmp_path):
    cache_dir = tmp_path / "a" / "b" / "sandboy"  # none of it there yet
    path, head, body = _entry(cache_dir)
    plan_keep.store((path, head, body))
    assert plan_cache._open_entry(path) is not None
    for folder in (cache_dir, cache_dir / "plans"):
        st = os.lstat(folder)
        assert (st.st_uid, st.st_mode & 0o777) == (0, 0o700)
    plan_keep.store((path, head, ("another body",)))  # a later run's entry replaces it
    assert os.listdir(cache_dir / "plans") == [os.path.basename(path)]


def test_a_cache_directory_reached_through_links_no_other_user_can_change_is_written(tmp_path):
    """A symlinked ~/.cache (another disk) of a home only root writes, and a link in a sticky
    directory that root owns: followed, the entry written at the link's target."""
    real = tmp_path / "disk" / "cache"
    real.mkdir(parents=True, mode=0o700)
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    (home / ".cache").symlink_to(real)
    path, head, body = _entry(home / ".cache" / "sandboy")
    plan_keep.store((path, head, body))
    assert (real / "sandboy" / "plans" / os.path.basename(path)).is_file()
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    (sticky / "cache").symlink_to(real)
    assert cache_files.write_file(str(sticky / "cache" / "sandboy"), "x", b"y")
    from cachekit import unsealed

    assert unsealed(real / "sandboy" / "x") == b"y"


def test_a_link_of_the_other_user_in_a_sticky_directory_is_not_followed(tmp_path):
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    victim = tmp_path / "victim"
    victim.mkdir(mode=0o700)
    (sticky / "cache").symlink_to(victim)
    os.lchown(sticky / "cache", OTHER, OTHER)
    assert not cache_files.write_file(str(sticky / "cache" / "sandboy"), "x", b"y")
    assert _everything_in(victim) == []


def test_a_folder_of_the_other_user_or_writable_by_others_gets_no_file(tmp_path):
    for name, owner, mode in (("theirs", OTHER, 0o700), ("open", 0, 0o777)):
        folder = tmp_path / name
        folder.mkdir()
        os.chown(folder, owner, owner)
        os.chmod(folder, mode)
        assert not cache_files.write_file(str(folder), "x", b"y")
        assert os.listdir(folder) == []
