"""Session 14 review of the cage from the attacker's side (redcage14).

What got through, each with its probe here (host side, a legitimate twin in the same run):

- The post-run git check's walk takes a LEAF directory (no subdirectory: `st_nlink == 2`) by two
  lookups, `.git` and `HEAD`, without listing it. Both walks (`_native_walk.c`, the Python
  stand-in) read a failed lookup as "not there": a command running as an ordinary user made a
  leaf git directory (`HEAD`, a `config` with `core.fsmonitor`, `objects` and `refs` as
  executable files: git's own test), a leaf beside it whose `.git` FILE points there, and
  `chmod 0077` on both — its own uid (the parent's) can no longer search them, every other user
  can. The run passed, rc 0; root's git there (`safe.directory = *`, as CI images set it) ran the
  planted program. A non-leaf so chmodded fails the run closed ("cannot be looked through").
  Now a leaf's lookup that fails for another reason than "no such file" is that same finding.

- Under the tier a deny inside read-only grants was a mount over its path in 5bc65aa (session 14),
  and the grant one Landlock rule on the directory's inode: another mount of that directory in
  the caller's mount table (a bind, a second mount of the file system) read the masked file and
  directory (`/etc/shadow` through a bind of `/etc`). The masks were reverted (ADR 0029 records
  the rejected design): the split grants the siblings by inode, so the bind reaches nothing more.
  A guard now, tier and forced off: it fails if a path-based hiding comes back.

- `limits.cpu_seconds` is RLIMIT_CPU, per process, and a fork starts the child's count at zero:
  a command that forks on before its limit keeps computing until `wall_seconds` (or for ever).
  Open (a strict xfail): nothing in Sandboy sums the CPU of a run's processes; README and the
  threat model now say "per process" as they do for `memory_mib`.

What held is listed in docs/threat-model.md ("Session 14 review of the cage").
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: userkit
import userkit  # noqa: E402

pytestmark = pytest.mark.needs_kernel

SANDBOY = os.path.join(os.path.dirname(sys.executable), "sandboy")
SYSTEM = ('read = ["/usr", "/lib", "/lib64", "/etc", "/bin"]\n'
          'exec = ["/usr/bin", "/bin"]\n')


def _sandboy_src() -> str:
    import sandboy

    return os.path.dirname(os.path.dirname(os.path.abspath(sandboy.__file__)))


# --- the git check's walk: a leaf its own uid cannot search ---------------------------------

# A git directory with no subdirectory (git's is_git_directory asks `objects` and `refs` for
# access(X_OK) only: executable files pass), a worktree leaf whose `.git` file leads to it.
LEAF_PLANT = """set -e
mkdir x sub
printf 'ref: refs/heads/main\\n' > x/HEAD
printf '[core]\\n\\trepositoryformatversion = 0\\n\\tfsmonitor = "echo ran > {marker}; false"\\n' > x/config
printf '#!/bin/sh\\n' > x/objects
printf '#!/bin/sh\\n' > x/refs
chmod 755 x/objects x/refs
printf 'gitdir: ../x\\n' > sub/.git
{chmod}
echo planted
"""


def _nobody_repository(where: Path, native: str, **more_env) -> tuple:
    """A git repository `where/project` and a policy `where/p.toml` (system read, write = cwd),
    both uid 65534's; the environment its `sandboy run` gets. (project, env)"""
    project = where / "project"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    (where / "p.toml").write_text(f'version = 1\n[fs]\n{SYSTEM}write = ["{{cwd}}"]\n')
    for path in (where / "p.toml", project, *project.rglob("*")):
        os.lchown(path, userkit.NOBODY, userkit.NOBODY)
    env = {"PYTHONPATH": _sandboy_src(), "PATH": "/usr/bin:/bin", "HOME": str(where),
           "SANDBOY_CACHE_DIR": str(where / "cache"), "SANDBOY_NATIVE": native, **more_env}
    return project, env


def _leaf_run(where: Path, chmod: str, tier: str, native: str) -> tuple:
    """`sandboy run` as uid 65534 in a repository of its own (write = cwd) planting LEAF_PLANT,
    then root's git in `sub` (safe.directory = *). (run, whether root's git ran the plant)."""
    project, env = _nobody_repository(where, native, SANDBOY_NAMESPACES=tier)
    marker = where / "ran"
    run = subprocess.run(userkit.as_user(["/usr/bin/python3", "-P", "-m", "sandboy", "run", "--policy", str(where / "p.toml"),
                                          "--", "/bin/sh", "-c", LEAF_PLANT.format(marker=marker, chmod=chmod)]),
                         cwd=project, env=env, capture_output=True, text=True, timeout=120)
    assert "planted" in run.stdout, run.stderr
    # the operator's (root's) git where the command left its worktree
    subprocess.run(["git", "-c", "safe.directory=*", "status"], cwd=project / "sub", capture_output=True, timeout=60,
                   env={"PATH": "/usr/bin:/bin", "HOME": str(where), "GIT_CONFIG_NOSYSTEM": "1"})
    return run, marker.exists()


TIERS = [pytest.param("1", id="tier"), pytest.param("0", id="forced-off")]
WALKS = [pytest.param("1", id="C-walk"), pytest.param("0", id="python-walk")]


@pytest.mark.parametrize("native", WALKS)
@pytest.mark.parametrize("tier", TIERS)
def test_a_leaf_its_own_uid_cannot_search_does_not_hide_a_plant(tier, native):
    userkit.skip_unless_nobody_can_run()
    with userkit.world_readable_tmp("redcage14-") as where:
        run, ran = _leaf_run(where, "chmod 0077 x sub", tier, native)
        assert run.returncode == 125, f"the plant passed the check (rc {run.returncode}): {run.stderr}"
        assert "cannot be looked through" in run.stderr, run.stderr
        assert ran, "twin of the premise: root's git runs what the leaf holds"


@pytest.mark.parametrize("native", WALKS)
@pytest.mark.parametrize("tier", TIERS)
def test_twin_the_same_plant_left_searchable_is_found_and_moved(tier, native):
    userkit.skip_unless_nobody_can_run()
    with userkit.world_readable_tmp("redcage14-") as where:
        run, ran = _leaf_run(where, ":", tier, native)
        assert run.returncode == 125, run.stderr
        assert not ran, "the planted config stayed where git reads it"


@pytest.mark.parametrize("native", WALKS)
def test_twin_private_leaves_of_an_ordinary_build_pass(native):
    """Leaves the command keeps private to itself (0700, searchable by its uid) are ordinary."""
    userkit.skip_unless_nobody_can_run()
    with userkit.world_readable_tmp("redcage14-") as where:
        project, env = _nobody_repository(where, native)
        run = subprocess.run(userkit.as_user(["/usr/bin/python3", "-P", "-m", "sandboy", "run", "--policy",
                                              str(where / "p.toml"), "--", "/bin/sh", "-c",
                                              "mkdir -p build/a build/b && echo x > build/a/o && chmod 0700 build/a build/b"]),
                             cwd=project, env=env, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        assert (project / "build/a/o").read_text() == "x\n"


# --- limits.cpu_seconds: per process -------------------------------------------------------

# The command's first process waits (no CPU) while a chain burns: each link computes 0.6 s of
# CPU, under the limit of 1 s, tells the first process, forks the next link and exits. The first
# process ends the run after five links (3 s of CPU: the same count on a loaded machine, later).
CHAIN = """import os, time
r, w = os.pipe()
if os.fork() == 0:
    os.close(r)
    while True:
        t0 = time.process_time()
        while time.process_time() - t0 < 0.6:
            pass
        os.write(w, b"l")
        if os.fork():
            os._exit(0)
os.close(w)
got = b""
while len(got) < 5:
    got += os.read(r, 5)
print("links", len(got))
"""


def _cpu_of_children(argv: list, **kwargs) -> tuple:
    """(the run, the CPU seconds its processes took): this test process's reaped children's
    rusage (sandboy run reaps its init or supervisor, which reap the orphans of the run)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    run = subprocess.run(argv, capture_output=True, text=True, timeout=90, **kwargs)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return run, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _cpu_policy(tmp_path: Path) -> Path:
    policy = tmp_path / "p.toml"
    policy.write_text(f'version = 1\n[fs]\n{SYSTEM}\n[limits]\ncpu_seconds = 1\nwall_seconds = 30\n')
    return policy


@pytest.mark.parametrize("tier", TIERS)
def test_twin_one_process_is_stopped_at_its_cpu_seconds(tmp_path, tier):
    env = dict(os.environ, SANDBOY_NAMESPACES=tier, SANDBOY_CACHE_DIR=str(tmp_path / "cache"))
    run, cpu = _cpu_of_children([SANDBOY, "run", "--policy", str(_cpu_policy(tmp_path)), "--", "/usr/bin/python3",
                                 "-c", "while True: pass"], env=env, cwd=tmp_path)
    assert run.returncode in (128 + 24, 128 + 9), run.stderr  # SIGXCPU at the limit (SIGKILL past it)
    assert cpu < 2.5, cpu


@pytest.mark.xfail(strict=True, reason="open: limits.cpu_seconds is RLIMIT_CPU per process; a fork starts the "
                   "count again (threat-model 'What it does not stop', session 14)")
@pytest.mark.parametrize("tier", TIERS)
def test_limits_cpu_seconds_bounds_a_chain_of_forks(tmp_path, tier):
    if not shutil.which("python3"):
        pytest.skip("needs python3")
    env = dict(os.environ, SANDBOY_NAMESPACES=tier, SANDBOY_CACHE_DIR=str(tmp_path / "cache"))
    run, cpu = _cpu_of_children([SANDBOY, "run", "--policy", str(_cpu_policy(tmp_path)), "--", "/usr/bin/python3",
                                 "-c", CHAIN], env=env, cwd=tmp_path)
    assert cpu < 2.0, f"{cpu:.1f} s of CPU under cpu_seconds = 1 (rc {run.returncode})"


# --- the same lookups at PATH_MAX: a leaf too deep to look into (rvwalk13's open item) --------

@pytest.fixture(params=["C-walk", "python-walk"])
def walk(request, monkeypatch):
    from sandboy.confine import gitcheck

    if request.param == "C-walk" and gitcheck._native_scan() is None:
        pytest.skip("the C walk is not built here")
    if request.param == "python-walk":
        monkeypatch.setattr(gitcheck, "_NATIVE_SCAN", [None])
        monkeypatch.setenv("SANDBOY_NATIVE", "0")
    return request.param


@pytest.mark.parametrize("length", [4088, 4092])
def test_a_leaf_too_deep_to_look_into_fails_the_run(cage, walk, length):
    """rvwalk13 left open a leaf directory beyond ~4,090 bytes holding a `.git` FILE: its lookup
    by whole path failed (ENAMETOOLONG) as "not there". The same change closes it: such a leaf
    cannot be looked into, and fails the run as an unlistable directory does."""
    work = os.path.realpath(cage.work)
    left, names = length - len(work), []
    while left > 0:
        size = min(200, left - 1) - (1 if left - min(200, left - 1) - 1 == 1 else 0)
        names.append("d" * size)
        left -= size + 1
    script = ("set -e; for n in " + " ".join(names) + "; do mkdir $n; cd $n; done; "
              "printf 'gitdir: /nonexistent\\n' > .git; echo PLANTED")
    policy = cage.policy(fs={"read": ["/etc"], "exec": ["/usr/bin", "/bin"], "write": ["."]})
    result = cage.run(argv=["/bin/sh", "-c", script], policy=policy, via="api")
    assert "PLANTED" in result.out, result
    assert result.rc == 125 and ("cannot be looked through" in result.err or "too deep to check" in result.err), (
        length, result)


# --- a deny masked by a mount, reached through another mount of its directory ---------------

ALIAS_SCRIPT = """set -e
mount --bind {data} {alias}
exec {sandboy} run --policy {policy} -- /bin/sh -c '
for f in {data}/secret.key {alias}/secret.key {alias}/vault/inner.txt {alias}/ok.txt; do
  cat "$f" 2>/dev/null || echo "refused $f"
done'
"""


@pytest.mark.parametrize("tier", [pytest.param("1", id="tier"), pytest.param("0", id="forced-off")])
def test_a_masked_deny_is_not_read_through_another_mount_of_its_directory(tmp_path, tier):
    """In 5bc65aa a deny inside read-only grants was a mount over its PATH under the tier (ADR
    0029, rejected), while Landlock's grant was on the directory's INODE: any other mount of that
    directory (a bind, a second mount of the file system) reached the secret through its own
    path. The split (reverted to) grants the siblings by inode: refused both ways. Here the
    caller's mount namespace (private to the test) holds a bind of the granted directory."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare(1) for a private mount namespace")
    data, alias = tmp_path / "data", tmp_path / "alias"
    (data / "vault").mkdir(parents=True)
    alias.mkdir()
    (data / "secret.key").write_text("SECRET-REDCAGE14-FILE\n")
    (data / "vault" / "inner.txt").write_text("SECRET-REDCAGE14-DIR\n")
    (data / "ok.txt").write_text("TWIN-REDCAGE14\n")
    policy = tmp_path / "p.toml"
    policy.write_text(f'version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc", "/bin", "{data}"]\n'
                      f'exec = ["/usr/bin", "/bin"]\ndeny = ["{data}/secret.key", "{data}/vault"]\n')
    env = dict(os.environ, SANDBOY_NAMESPACES=tier, SANDBOY_CACHE_DIR=str(tmp_path / "cache"))
    script = ALIAS_SCRIPT.format(data=data, alias=alias, sandboy=SANDBOY, policy=policy)
    for _ in range(2):  # a build, then a plan cache hit
        run = subprocess.run(["unshare", "-m", "--propagation", "private", "/bin/sh", "-c", script], env=env,
                             capture_output=True, text=True, timeout=60)
        assert "TWIN-REDCAGE14" in run.stdout, run.stderr  # the twin: the directory's files read both ways
        assert "refused " + str(data / "secret.key") in run.stdout, run.stdout
        assert "SECRET-REDCAGE14" not in run.stdout, f"a denied file read through a bind of its directory: {run.stdout}"


# --- a btrfs snapshot of a read-granted subvolume into a write root -------------------------

SNAPSHOT = r"""import fcntl, os, struct, sys
source, into, cmd = sys.argv[1], sys.argv[2], int(sys.argv[3], 16)
args = bytearray(4096)  # struct btrfs_ioctl_vol_args(_v2): the source's fd first, the name at 8 (v1) / 56 (v2)
struct.pack_into("q", args, 0, os.open(source, os.O_RDONLY | os.O_DIRECTORY))
at = 56 if cmd == 0x50009417 else 8
args[at:at + 4] = b"snap"
try:
    fcntl.ioctl(os.open(into, os.O_RDONLY | os.O_DIRECTORY), cmd, args)
    print("snapshot made")
    print(open(os.path.join(into, "snap", "secret.key")).read())
except OSError as exc:
    print("refused:", exc.strerror)
try:
    open(os.path.join(source, "secret.key")).read()
except OSError as exc:
    print("the deny holds:", exc.strerror)
print(open(os.path.join(source, "ok.txt")).read())
"""

BTRFS_SCRIPT = """set -e
truncate -s 200M {where}/img
mkfs.btrfs -q {where}/img >/dev/null 2>&1
mkdir {where}/mnt
mount -o loop {where}/img {where}/mnt
btrfs -q subvolume create {where}/mnt/data >/dev/null
echo SECRET-REDCAGE14-BTRFS > {where}/mnt/data/secret.key
echo TWIN-REDCAGE14-BTRFS > {where}/mnt/data/ok.txt
mkdir {where}/mnt/work
{sandboy} run --policy {where}/p.toml -- /usr/bin/python3 {where}/snap.py {where}/mnt/data {where}/mnt/work {cmd} || true
ls {where}/mnt/work | sed 's/^/host sees: /'
umount {where}/mnt
"""


@pytest.mark.parametrize("cmd", ["0x50009417", "0x50009401"], ids=["SNAP_CREATE_V2", "SNAP_CREATE"])
@pytest.mark.parametrize("tier", TIERS)
def test_a_btrfs_snapshot_cannot_copy_a_denied_file_into_a_write_root(tmp_path, tier, cmd):
    """A snapshot copies a subvolume — a denied file in it too — into a directory the command may
    write, where Landlock then grants it under its new path (the kernel lets the subvolume's
    owner snapshot it: as root, every root-owned one). The filter refuses the two snapshot
    ioctls. A private mount namespace of the test holds a 200 MB btrfs on a loop device."""
    if os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("mkfs.btrfs") and shutil.which("btrfs")):
        pytest.skip("needs root, unshare(1) and btrfs-progs (mkfs.btrfs, btrfs) for a loop-mounted btrfs")
    where = tmp_path
    (where / "snap.py").write_text(SNAPSHOT)
    (where / "p.toml").write_text(
        f'version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc", "/bin", "{where}/snap.py", "{where}/mnt/data"]\n'
        f'exec = ["/usr/bin", "/bin"]\nwrite = ["{where}/mnt/work"]\ndeny = ["{where}/mnt/data/secret.key"]\n')
    env = dict(os.environ, SANDBOY_NAMESPACES=tier, SANDBOY_CACHE_DIR=str(where / "cache"))
    run = subprocess.run(["unshare", "-m", "--propagation", "private", "/bin/sh", "-c",
                          BTRFS_SCRIPT.format(where=where, sandboy=SANDBOY, cmd=cmd)],
                         env=env, capture_output=True, text=True, timeout=120)
    if "SECRET" not in run.stdout and "refused:" not in run.stdout:
        pytest.skip(f"no btrfs on a loop device here: {run.stderr[-300:]}")
    assert "TWIN-REDCAGE14-BTRFS" in run.stdout and "the deny holds" in run.stdout, run.stdout + run.stderr
    assert "SECRET-REDCAGE14-BTRFS" not in run.stdout, "a snapshot read the denied file: " + run.stdout
    assert "host sees: snap" not in run.stdout, run.stdout  # host side: no copy of the subvolume made
    assert "refused: Operation not permitted" in run.stdout, run.stdout


# --- the cache's seal key and a policy built in code ---------------------------------------

READ_THE_KEY = r"""import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
serials = [int(line.split()[0], 16) for line in open("/proc/keys") if "sandboy:cache-seal:" in line]
buf = ctypes.create_string_buffer(64)
for serial in serials:
    n = libc.syscall(250, 11, serial, buf, 64)  # keyctl(KEYCTL_READ)
    print("key:" + buf.raw[:n].hex() if n > 0 else "refused:" + errno.errorcode.get(ctypes.get_errno(), "?"))
print("io_setup:", libc.syscall(206, 1, ctypes.byref(ctypes.c_ulong(0))))
"""


@pytest.mark.parametrize("tier", TIERS)
def test_a_policy_built_in_code_cannot_allow_the_keyring(tmp_path, monkeypatch, tier):
    """`policy.load` refuses `seccomp.allow = ["keyctl"]` (cachekey14, ADR 0030); a `Policy` built
    in code never passes through it, and its command read the seal key by the serial /proc/keys
    shows. The filter keeps the keyring calls denied whatever `allow` says. Twin: another call the
    same policy allows (`io_setup`) is still lifted."""
    import sandboy
    from sandboy import cache_seal
    from sandboy.policy.model import FsRules, Policy, SeccompRules

    key = cache_seal.secret()
    if key is None:
        pytest.skip("no user keyring here: the cache is off, there is no key to read")
    monkeypatch.setenv("SANDBOY_NAMESPACES", tier)
    script = tmp_path / "read_key.py"
    script.write_text(READ_THE_KEY)
    out = tmp_path / "out.txt"
    policy = Policy(fs=FsRules(read=("/usr", "/lib", "/lib64", "/etc", "/bin", "/proc", str(script)),
                               exec=("/usr/bin", "/bin"), write=(str(tmp_path),)),
                    seccomp=SeccompRules(allow=("keyctl", "io_setup")))
    with open(out, "w") as fh:
        result = sandboy.run(["/usr/bin/python3", str(script)], policy, cwd=str(tmp_path), stdout=fh.fileno())
    printed = out.read_text()
    assert result.returncode == 0, (result.error, printed)
    assert key.hex() not in printed, "the command read the key that seals the cache"
    assert "refused:EPERM" in printed, printed
    assert "io_setup: 0" in printed, printed  # the twin: the policy's other allow holds


def test_the_loader_refuses_every_call_the_filter_never_allows(tmp_path):
    """One list (`seccomp.NEVER_ALLOWED`) serves the filter and the loader: a policy file naming
    any of its calls in `seccomp.allow` is an error naming the key, each the kernel's keyring."""
    from sandboy.confine import seccomp
    from sandboy.errors import PolicyError
    from sandboy.policy.model import Policy

    assert set(seccomp.NEVER_ALLOWED) == {"add_key", "keyctl", "request_key"}
    for name in seccomp.NEVER_ALLOWED:
        (tmp_path / "p.toml").write_text(f'version = 1\n[seccomp]\nallow = ["{name}"]\n')
        with pytest.raises(PolicyError, match="cannot be allowed") as info:
            Policy.load(tmp_path / "p.toml", use_cache=False)
        assert info.value.key == "seccomp.allow", info.value


DESTROY = r"""import fcntl, os, sys
parent, cmd = sys.argv[1], int(sys.argv[2], 16)
args = bytearray(4096)  # the name at 8 (v1), or at 56 with BTRFS_SUBVOL_SPEC_BY_ID unset (v2)
at = 56 if cmd == 0x5000943F else 8
args[at:at + 6] = b"victim"
fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
try:
    fcntl.ioctl(fd, cmd, args)
    print("destroyed")
except OSError as exc:
    print("refused:", exc.strerror)
"""

DESTROY_SCRIPT = """set -e
truncate -s 200M {where}/img
mkfs.btrfs -q {where}/img >/dev/null 2>&1
mkdir {where}/mnt
mount -o loop,user_subvol_rm_allowed {where}/img {where}/mnt
chmod 755 {where}/mnt
btrfs -q subvolume create {where}/mnt/ro >/dev/null
btrfs -q subvolume create {where}/mnt/ro/victim >/dev/null
echo KEEP > {where}/mnt/ro/victim/f
mkdir {where}/mnt/work
chown -R {uid} {where}/mnt/ro {where}/mnt/work
setpriv --reuid={uid} --regid={uid} --clear-groups --inh-caps=-all env PYTHONPATH={src} PATH=/usr/bin:/bin HOME={where} \
    SANDBOY_CACHE_DIR={where}/cache SANDBOY_NAMESPACES={tier} \
    /usr/bin/python3 -P -m sandboy run --policy {where}/p.toml -- /usr/bin/python3 {where}/destroy.py {where}/mnt/ro {cmd} || true
ls {where}/mnt/ro | sed 's/^/host sees: /'
umount {where}/mnt
"""


@pytest.mark.parametrize("cmd", ["0x5000943F", "0x5000940F"], ids=["SNAP_DESTROY_V2", "SNAP_DESTROY"])
@pytest.mark.parametrize("tier", TIERS)
def test_a_btrfs_subvolume_outside_the_write_roots_cannot_be_destroyed(tier, cmd):
    """Where btrfs is mounted `user_subvol_rm_allowed` a subvolume's owner may delete it whole
    through an fd of the directory holding it, which Landlock does not see: without the tier a
    command of uid 65534 granted only READ there deleted its subvolume (under the tier the mount is
    read-only). The filter refuses both destroy ioctls. Host side: the subvolume is still there."""
    userkit.skip_unless_nobody_can_run()
    if not (shutil.which("unshare") and shutil.which("mkfs.btrfs") and shutil.which("btrfs")):
        pytest.skip("needs unshare(1) and btrfs-progs (mkfs.btrfs, btrfs) for a loop-mounted btrfs")
    with userkit.world_readable_tmp("redcage14-") as where:
        (where / "destroy.py").write_text(DESTROY)
        (where / "p.toml").write_text(
            f'version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc", "/bin", "{where}/destroy.py", '
            f'"{where}/mnt/ro"]\nexec = ["/usr/bin", "/bin"]\nwrite = ["{where}/mnt/work"]\n')
        for name in ("destroy.py", "p.toml"):
            os.chmod(where / name, 0o644)
        run = subprocess.run(["unshare", "-m", "--propagation", "private", "/bin/sh", "-c",
                              DESTROY_SCRIPT.format(where=where, uid=userkit.NOBODY, src=_sandboy_src(), tier=tier,
                                                    cmd=cmd)], capture_output=True, text=True, timeout=120)
    if "destroyed" not in run.stdout and "refused:" not in run.stdout:
        pytest.skip(f"no btrfs on a loop device here: {run.stderr[-300:]}")
    assert "host sees: victim" in run.stdout, "a subvolume outside the write roots was deleted: " + run.stdout
    assert "destroyed" not in run.stdout, run.stdout
