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
