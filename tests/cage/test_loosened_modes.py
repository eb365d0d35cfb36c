"""A directory on the way to a protected path (`.git`, the write root itself) or a git directory,
loosened by the command so that another local user could replace what the host's git runs, is put
back after the run and the run fails closed (confine/loosened.py, ADR 0019 "Session 9"). Checked
from the host side: modes, ACL xattrs. Twins: a build's chmod elsewhere in its write root stays,
and git works in the cage."""

import os
import stat
import struct
import subprocess
import sys
import time

import pytest

from sandboy.confine import namespaces
from sandboy.confine.loosened import ModeGuard, guarded_paths

SANDBOY = os.path.join(os.path.dirname(sys.executable), "sandboy")
ACL = "system.posix_acl_access"


def _acl_granting(uid: int) -> bytes:
    """A POSIX access ACL (the kernel's xattr form, version 2) giving `uid` rwx: what
    `setfacl -m u:UID:rwx` writes (setfacl is not installed everywhere)."""
    entry = struct.Struct("<HHI")
    undefined = 0xFFFFFFFF
    return (struct.pack("<I", 2) + entry.pack(0x01, 7, undefined) + entry.pack(0x02, 7, uid)
            + entry.pack(0x04, 5, undefined) + entry.pack(0x10, 7, undefined) + entry.pack(0x20, 5, undefined))


@pytest.fixture(params=["tier", "no-tier"])
def tier_env(request, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("SANDBOY_NAMESPACES", "SANDBOY_PLAN_CACHE")}
    env["SANDBOY_CACHE_DIR"] = str(tmp_path / "cache")
    env["GIT_CONFIG_GLOBAL"] = "/dev/null"  # the operator's global config is not granted
    if request.param == "no-tier":
        env["SANDBOY_NAMESPACES"] = "0"
    elif not namespaces.availability()[0]:
        pytest.skip("no namespace tier here")
    return env


def _repository(tmp_path):
    work = tmp_path / "W"
    work.mkdir()
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    os.chmod(work, 0o755)
    os.chmod(work / ".git", 0o755)
    policy = tmp_path / "p.toml"
    policy.write_text('version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc", "/bin", "/dev/null"]\n'
                      f'exec = ["/usr/bin", "/bin"]\nwrite = ["{work}"]\n[env]\npass = ["GIT_CONFIG_GLOBAL"]\n')
    return work, policy


def _run(policy, script, env):
    return subprocess.run([SANDBOY, "run", "--policy", str(policy), "--", "/bin/sh", "-c", script],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.parametrize("target", [".git", "."], ids=["git-directory", "write-root"])
def test_a_loosened_directory_above_a_protected_path_is_put_back_and_the_run_fails(tmp_path, tier_env, target):
    work, policy = _repository(tmp_path)
    proc = _run(policy, f"chmod 0777 {work}/{target} && echo loosened", tier_env)
    assert "loosened" in proc.stdout, proc.stderr  # the command could: Landlock does not mediate chmod
    assert proc.returncode == 125, proc.stderr
    assert "made writable by other users" in proc.stderr and "put back" in proc.stderr
    assert stat.S_IMODE(os.stat(work / target).st_mode) == 0o755  # host side


def test_an_acl_for_another_user_on_the_git_directory_is_taken_back(tmp_path, tier_env):
    """Without the tier the ACL is written, and taken back after the run. Under it the kernel
    refuses it already: the user namespace maps the caller alone, and an ACL may only name ids
    mapped there (EINVAL)."""
    work, policy = _repository(tmp_path)
    value = _acl_granting(65534)
    script = (f"python3 -c 'import os,sys; os.setxattr(sys.argv[1], \"{ACL}\", bytes.fromhex(sys.argv[2]))' "
              f"{work}/.git {value.hex()} 2>/dev/null && echo granted || echo refused")
    proc = _run(policy, script, tier_env)
    if "SANDBOY_NAMESPACES" in tier_env:
        assert "granted" in proc.stdout, proc.stderr
        assert proc.returncode == 125 and "ACLs changed" in proc.stderr, proc.stderr
    else:
        assert "refused" in proc.stdout and proc.returncode == 0, proc.stderr
    with pytest.raises(OSError):
        os.getxattr(work / ".git", ACL)  # host side: no ACL
    assert stat.S_IMODE(os.stat(work / ".git").st_mode) == 0o755


def test_without_the_tier_a_loosened_protected_file_is_put_back(tmp_path):
    """Without the tier no mount keeps `.git/config` read-only: its own mode is guarded too."""
    env = {k: v for k, v in os.environ.items() if k != "SANDBOY_PLAN_CACHE"}
    env.update(SANDBOY_NAMESPACES="0", SANDBOY_CACHE_DIR=str(tmp_path / "cache"), GIT_CONFIG_GLOBAL="/dev/null")
    work, policy = _repository(tmp_path)
    config = work / ".git" / "config"
    os.chmod(config, 0o644)
    proc = _run(policy, f"chmod 0666 {config}; echo done", env)
    assert "done" in proc.stdout, proc.stderr
    assert proc.returncode == 125, proc.stderr
    assert stat.S_IMODE(os.stat(config).st_mode) == 0o644


def test_a_builds_chmod_elsewhere_stays_and_git_works(tmp_path, tier_env):
    """Twin: `chmod 0777 out` (no protected path below it) is the build's business; `git add` and
    `git commit` in the cage change `.git` without loosening it."""
    work, policy = _repository(tmp_path)
    (work / "out").mkdir()
    script = (f"chmod 0777 {work}/out && cd {work} && echo x > f && git add f && "
              "git -c user.name=t -c user.email=t@e commit -qm m && echo committed")
    proc = _run(policy, script, tier_env)
    assert proc.returncode == 0 and "committed" in proc.stdout, proc.stderr
    assert stat.S_IMODE(os.stat(work / "out").st_mode) == 0o777
    assert stat.S_IMODE(os.stat(work / ".git").st_mode) == 0o755


# --- the pure parts, without a kernel run -------------------------------------------------------


def test_guarded_paths_are_the_chain_from_each_root_down_to_each_target():
    got = guarded_paths(["/w", "/w/inner", "/other"], ["/w/a/b/.git/config", "/w/inner/.git", "/elsewhere/x"])
    assert got == ["/w", "/w/a", "/w/inner", "/w/a/b", "/w/inner/.git", "/w/a/b/.git", "/w/a/b/.git/config"]
    assert guarded_paths(["/"], ["/h/.bashrc"]) == ["/", "/h", "/h/.bashrc"]


def test_the_guard_puts_back_only_what_lets_others_write(tmp_path):
    loose, tight, same = tmp_path / "loose", tmp_path / "tight", tmp_path / "same"
    for path in (loose, tight, same):
        path.mkdir(mode=0o755)
        os.chmod(path, 0o755)
    guard = ModeGuard([str(loose), str(tight), str(same), str(tmp_path / "absent")])
    os.chmod(loose, 0o757)
    os.chmod(tight, 0o700)  # tighter: nobody else gains anything
    assert [path for path, _why in guard.put_back()] == [str(loose)]
    assert stat.S_IMODE(loose.stat().st_mode) == 0o755
    assert stat.S_IMODE(tight.stat().st_mode) == 0o700


def test_a_directory_replaced_by_another_loses_only_the_added_bits(tmp_path):
    path = tmp_path / "d"
    path.mkdir()
    os.chmod(path, 0o755)
    guard = ModeGuard([str(path)])
    path.rename(tmp_path / "old")
    path.mkdir()
    os.chmod(path, 0o777)
    assert len(guard.put_back()) == 1
    assert stat.S_IMODE(path.stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "old").stat().st_mode) == 0o755


def test_a_directory_swapped_in_with_an_acl_or_group_for_others_loses_them(tmp_path):
    """Without the tier the command may rename `.git` away and copy it back into a new directory
    (rvsec9, reproduced end to end: rc 0, the ACL left on the host's `.git`). Where the launch
    mode already had group write (umask 002: 0775), a copy with the same mode but an ACL giving
    another user rwx (the mask shows as group rwx: no bit added) or another group kept it after
    the run: the guard compared group and ACLs for the same inode only. Root sets the group."""
    path = tmp_path / "d"
    path.mkdir()
    os.chmod(path, 0o775)
    guard = ModeGuard([str(path)])
    path.rename(tmp_path / "old")
    path.mkdir()
    os.chmod(path, 0o775)
    os.setxattr(path, ACL, _acl_granting(65534))
    if os.geteuid() == 0:
        os.chown(path, -1, 65534)
    found = guard.put_back()
    assert len(found) == 1 and "ACLs changed" in found[0][1], found
    with pytest.raises(OSError):
        os.getxattr(path, ACL)  # host side: the other user's entry is gone
    assert path.stat().st_gid == os.stat(tmp_path / "old").st_gid
    assert stat.S_IMODE(path.stat().st_mode) == 0o775


@pytest.mark.parametrize("how", ["directory-swapped-for-a-link", "launch-link-retargeted"])
def test_nothing_is_changed_through_a_symlink_the_command_put_on_the_way(tmp_path, how):
    """Below a guarded directory the command replaced by a symlink (or a symlink of launch it
    pointed elsewhere), a guarded path resolves to a directory of the host's — another user's
    repository — which the put-back must leave as it is (its mode, group and ACLs), not make
    like the launch one. Host side: the victim's xattr and group."""
    work, victim = tmp_path / "W", tmp_path / "victim"
    (work / "real" / "b").mkdir(parents=True)
    (victim / "b").mkdir(parents=True)
    os.chmod(victim / "b", 0o775)
    os.setxattr(victim / "b", ACL, _acl_granting(65534))
    if os.geteuid() == 0:
        os.chown(victim / "b", -1, 65534)
    before = os.stat(victim / "b")
    if how == "directory-swapped-for-a-link":
        (work / "real").rename(work / "a")
        guard = ModeGuard(guarded_paths([str(work)], [str(work / "a" / "b")]))
        (work / "a").rename(work / "a.old")
    else:
        (work / "a").symlink_to("real")
        guard = ModeGuard(guarded_paths([str(work)], [str(work / "a" / "b")]))
        (work / "a").unlink()
    (work / "a").symlink_to(victim)
    assert guard.put_back() == []
    after = os.stat(victim / "b")
    assert (after.st_mode, after.st_gid) == (before.st_mode, before.st_gid)
    assert os.getxattr(victim / "b", ACL) == _acl_granting(65534)


def test_a_protected_file_replaced_below_a_loosened_directory_is_named_only_then(tmp_path):
    """`replaced_below`: after a loosening, a protected file below it that is another file (or was
    written) is named; without a loosening the operator's own edits are nobody's business here."""
    home = tmp_path / "h"
    home.mkdir()
    os.chmod(home, 0o755)
    rc, other = home / ".bashrc", home / ".profile"
    rc.write_text("operator\n")
    other.write_text("operator\n")
    guard = ModeGuard(guarded_paths([str(home)], [str(rc), str(other)]), [str(rc), str(other)])
    (home / "planted").write_text("PLANTED\n")
    os.replace(home / "planted", rc)  # another file at .bashrc; .profile untouched
    assert guard.replaced_below([]) == []  # nothing was loosened: an edit of the operator's own
    assert guard.replaced_below([str(home)]) == [str(rc)]
    assert guard.replaced_below([str(rc)]) == [str(rc)]  # loosened itself: another inode counts


# --- session 10: an unchanged, settled inode is not read again (`ModeGuard._put_back_one`) ----

SETTLE = 0.15  # past the guard's clock margin (50 ms; file timestamps from a coarse clock)
LOOSENINGS = {
    "mode": lambda path: os.chmod(path, 0o777),
    "ACL only (the mode's group bits kept)": lambda path: os.setxattr(path, ACL, _acl_granting(65534)),
    "group only": lambda path: os.chown(path, -1, 65534),
}


def _settled_dirs(tmp_path, mode=0o775):
    """A write root with `.git` below it, made and then left past the margin: at launch their
    ctimes are settled (the short way applies to both)."""
    root = tmp_path / "w"
    (root / ".git").mkdir(parents=True)
    for path in (root, root / ".git"):
        os.chmod(path, mode)
    time.sleep(SETTLE)
    return root


def _probe_settled_loosening(guard_module, tmp_path, how):
    """(what put_back reported, the modes/ACL/group afterwards) for `how` applied to a settled
    `.git` after the guard's launch."""
    root = _settled_dirs(tmp_path)
    git = root / ".git"
    before = os.stat(git)
    guard = guard_module.ModeGuard(guard_module.guarded_paths([str(root)], [str(git)]))
    LOOSENINGS[how](git)
    found = guard.put_back()
    after = os.stat(git)
    try:
        acl = os.getxattr(git, ACL)
    except OSError:
        acl = None
    return found, (stat.S_IMODE(after.st_mode), after.st_gid, acl) == (stat.S_IMODE(before.st_mode), before.st_gid, None)


@pytest.mark.parametrize("how", LOOSENINGS)
def test_a_settled_directory_loosened_after_launch_is_put_back(tmp_path, how):
    """The put-back trusts an inode whose ctime is the settled one of launch (session 10): every
    chmod, chown or ACL change sets the ctime, so each loosening is still seen and put back —
    host side: mode, group, ACL as at launch."""
    if how == "group only" and os.geteuid() != 0:
        pytest.skip("only root gives a directory another group")
    from sandboy.confine import loosened

    found, restored = _probe_settled_loosening(loosened, tmp_path, how)
    assert [path for path, _why in found] == [str(tmp_path / "w" / ".git")], found
    assert restored


def test_twin_a_settled_unchanged_guard_reads_no_acl_again(tmp_path, monkeypatch):
    """The short way is taken: nothing changed since a settled launch, nothing reported, and no
    ACL read after the run (two getxattr a path through /proc/self/fd). A path changed within the
    clock margin before launch is read the long way."""
    from sandboy.confine import loosened

    root = _settled_dirs(tmp_path)
    guard = ModeGuard(guarded_paths([str(root)], [str(root / ".git")]))
    calls = []
    real = loosened._acls
    monkeypatch.setattr(loosened, "_acls", lambda *a, **k: calls.append(a) or real(*a, **k))
    assert guard.put_back() == [] and calls == []
    (root / "new").write_text("x")  # the root's ctime moves: not settled at the next launch
    guard = ModeGuard(guarded_paths([str(root)], [str(root / ".git")]))
    calls.clear()  # (those of the launch)
    assert guard.put_back() == [] and len(calls) == 1  # the root's; `.git` still settled


def test_the_settled_rule_is_the_fingerprints(tmp_path):
    """`loosened._settled` repeats `fingerprint.ctime_settled` (so the guard needs no plan-cache module):
    the same answers around both margins."""
    from sandboy.confine import fingerprint, loosened

    now = 10**18 + 123_456_789
    for ctime in (now, now - 49_000_000, now - 51_000_000, (now // 10**9) * 10**9, (now // 10**9 - 1) * 10**9,
                  (now // 10**9 - 3) * 10**9):
        assert loosened._settled(ctime, now) == fingerprint.ctime_settled(ctime, now), ctime


@pytest.mark.parametrize("how", ["mode", "ACL only (the mode's group bits kept)"])
def test_the_ctime_of_the_short_way_has_a_probe_that_fails_without_it(tmp_path, how):
    """Mutant: the short way taken on the same inode whatever its ctime — the loosening above
    then stays (host side)."""
    import importlib.util

    from sandboy.confine import loosened

    text = open(loosened.__file__).read()
    check = "(st.st_dev, st.st_ino, st.st_ctime_ns) == (dev, ino, ctime)"
    assert text.count(check) == 1
    source = tmp_path / "loosened_mutant.py"
    source.write_text(text.replace(check, "(st.st_dev, st.st_ino) == (dev, ino)"))
    spec = importlib.util.spec_from_file_location("loosened_mutant", source)
    mutant = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mutant)
    found, restored = _probe_settled_loosening(mutant, tmp_path, how)
    assert found == [] and not restored
