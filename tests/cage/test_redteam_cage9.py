"""Session 9 review of the cage from the attacker's side: what session 8 added — the plan cache
(ADR 0028), the stdio handoff (ADR 0011, "Session 8"), the kernel-mount refusal, the gate's
memory cgroup per step. Every run is a real `sandboy run` (or API run) on the real kernel; each
probe checks from the host side what the command reached, and has a twin where the legitimate
use shares its path. What held is listed in docs/threat-model.md ("Session 9 review of the cage").
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from userkit import as_user

from sandboy.confine import namespaces

pytestmark = pytest.mark.needs_kernel

SANDBOY = os.path.join(os.path.dirname(sys.executable), "sandboy")
PACKAGE = Path(namespaces.__file__).resolve().parents[1]  # src/sandboy
POLICY = 'version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc", "{data}"]\nexec = ["/usr/bin", "/bin"]\n'


@pytest.fixture
def tier():
    if not namespaces.availability()[0]:
        pytest.skip("the plan cache keeps runs under the namespace tier only")


def _env(tmp_path: Path, executor_as_set: bool = False, **more) -> dict:
    """The environment of a probe's run: its own cache directory; the C executor (the plan cache
    keeps its plans only) unless `executor_as_set` (then SANDBOY_NATIVE=0 of a suite pass holds)."""
    dropped = ("SANDBOY_NAMESPACES", "SANDBOY_PLAN_CACHE", "PYTHONPATH") + (() if executor_as_set else ("SANDBOY_NATIVE",))
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env["SANDBOY_CACHE_DIR"] = str(tmp_path / "cache")
    env.update(more)
    return env


def _argv(policy: Path, *command) -> list:
    # -X importtime: a run from a kept plan imports no compiler (`sandboy.confine.cage`)
    return [sys.executable, "-X", "importtime", SANDBOY, "run", "--policy", str(policy), "--", *command]


def _hit(stderr: str) -> bool:
    imported = {line.rsplit("|", 1)[-1].strip() for line in stderr.splitlines() if line.startswith("import time:")}
    assert "sandboy.cli" in imported, stderr  # the measurement works
    return "sandboy.confine.cage" not in imported


def _run(policy: Path, *command, env, cwd) -> subprocess.CompletedProcess:
    """A real `sandboy run` with stdio of a shape the plan cache keeps (stdin and stdout pipes)."""
    proc = subprocess.run(_argv(policy, *command), stdin=subprocess.PIPE, capture_output=True, text=True,
                          env=env, cwd=cwd, start_new_session=True, timeout=60)
    proc.hit = _hit(proc.stderr)
    return proc


def _run_while(policy: Path, during, *, env, cwd) -> subprocess.CompletedProcess:
    """A building `sandboy run` whose command says "ready" once it runs (the cage is built) and
    waits for a line on stdin; `during()` runs in between. The plan cache then writes its entry."""
    proc = subprocess.Popen(_argv(policy, "/bin/sh", "-c", "echo ready; read line; echo done"),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=cwd, start_new_session=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        during()
        out, err = proc.communicate("go\n", timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0 and out == "done\n", err
    assert not _hit(err)
    return proc


# --- the plan cache: what the key is read from ------------------------------------------
# (fixed by missfast, session 9: plan_cache.Miss takes the policy bytes before the build and parses
# exactly them, and the code identities at the build's end)


def test_a_policy_edited_while_its_first_run_runs_is_not_kept_with_the_old_plan(tmp_path, tier):
    """The operator tightens a policy (a deny) while an agent's command runs under it. A rebuild
    of the new policy refuses the secret; a run of the new policy must never be served the plan
    built from the old one."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "secret").write_text("S3CRET")
    (data / "public").write_text("PUBLIC")
    work = tmp_path / "work"
    work.mkdir()
    policy = tmp_path / "p.toml"
    policy.write_text(POLICY.format(data=data))
    env = _env(tmp_path)

    def tighten():
        policy.write_text(POLICY.format(data=data) + f'deny = ["{data}/secret"]\n')

    _run_while(policy, tighten, env=env, cwd=work)
    after = _run(policy, "/bin/cat", str(data / "secret"), env=env, cwd=work)
    assert "S3CRET" not in after.stdout, f"the new policy's deny was not applied (hit={after.hit})"
    assert after.returncode != 0
    # twin: the new policy is kept and served once built from it
    _run(policy, "/bin/cat", str(data / "public"), env=env, cwd=work)
    twin = _run(policy, "/bin/cat", str(data / "public"), env=env, cwd=work)
    assert twin.hit and twin.stdout == "PUBLIC"
    assert _run(policy, "/bin/cat", str(data / "secret"), env=env, cwd=work).stdout == ""


def test_sandboy_upgraded_while_a_run_builds_does_not_keep_the_old_codes_plan(tmp_path, tier):
    """A copy of the package stands for an installed Sandboy whose version (the 'old' one)
    granted a directory it should not have; `pip install -U` replaces it while an agent's
    command runs. The next run under the new code must confine as the new code builds."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "public").write_text("PUBLIC")
    secret_dir = tmp_path / "secret"
    secret_dir.mkdir()
    (secret_dir / "key").write_text("S3CRET")
    tree = tmp_path / "tree"
    shutil.copytree(PACKAGE, tree / "sandboy", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    for so in PACKAGE.joinpath("confine").glob("*.so"):
        shutil.copy2(so, tree / "sandboy" / "confine" / so.name)
    protections = tree / "sandboy" / "confine" / "protections.py"
    fixed = protections.read_text()
    anchor = "    mount_roots = _write_roots_to_watch(grants)\n"
    assert anchor in fixed
    # the "old" version's bug: a read grant of a directory the policy never named
    protections.write_text(fixed.replace(anchor, f"    grants[{str(secret_dir)!r}] = landlock.READ\n" + anchor))
    work = tmp_path / "work"
    work.mkdir()
    policy = tmp_path / "p.toml"
    policy.write_text(POLICY.format(data=data))
    env = _env(tmp_path, PYTHONPATH=str(tree))
    old = _run(policy, "/bin/cat", str(secret_dir / "key"), env=SANDBOY_NO_CACHE(env), cwd=work)
    assert old.stdout == "S3CRET"  # the old code's bug is real

    def upgrade():  # the new version's file, written as an installer writes it (a new inode)
        fresh = protections.with_suffix(".new")
        fresh.write_text(fixed)
        os.replace(fresh, protections)

    _run_while(policy, upgrade, env=env, cwd=work)
    after = _run(policy, "/bin/cat", str(secret_dir / "key"), env=env, cwd=work)
    assert after.stdout == "", f"the old code's plan ran under the new code (hit={after.hit})"
    # twin: the new code's own plan is kept and served
    _run(policy, "/bin/cat", str(data / "public"), env=env, cwd=work)
    twin = _run(policy, "/bin/cat", str(data / "public"), env=env, cwd=work)
    assert twin.hit and twin.stdout == "PUBLIC"


def SANDBOY_NO_CACHE(env: dict) -> dict:  # noqa: N802 (reads as the variable it sets)
    return dict(env, SANDBOY_PLAN_CACHE="0")


def _inotify_open_of(directory: Path):
    """An inotify fd that reports the next open(2) of `directory` itself (IN_OPEN): the build's
    listing of a directory it splits. O_PATH opens (realpath's) report nothing."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_CLOEXEC)
    assert fd >= 0 and libc.inotify_add_watch(fd, os.fsencode(directory), 0x20) >= 0  # IN_OPEN
    return fd


def _create_on_open(fd: int, directory_event_then, fired: list) -> None:
    import struct

    while not fired:
        buf = os.read(fd, 4096)
        off = 0
        while off < len(buf):
            _wd, _mask, _cookie, length = struct.unpack_from("iIII", buf, off)
            off += 16 + length
            if length == 0:  # the watched directory itself was opened
                directory_event_then()
                fired.append(True)
                return


def test_a_deny_file_made_while_the_cage_is_built_is_not_granted_by_a_kept_plan(tmp_path, tier):
    """The build decides the denies (a deny naming no file splits nothing), THEN lists the
    directories it splits, compiles the rest and takes the fingerprint. A secret written in
    between (here the moment the build lists a split directory: the cache's parent, which every
    cage denies inside a read grant) was granted by the kept plan while the fingerprint said it
    existed: every later run hit and read it (7 runs in 8 here); a rebuild denies it. Three tries:
    none may read it."""
    import threading

    for attempt in range(3):
        root = tmp_path / f"try{attempt}"
        split, data, work = root / "g", root / "data", root / "work"
        for d in (split / "cache", data, work):
            d.mkdir(parents=True)
        (data / "public").write_text("PUBLIC")
        policy = root / "p.toml"
        policy.write_text(POLICY.format(data=data).replace(f'"{data}"', f'"{split}", "{data}"')
                          + f'deny = ["{data}/secret"]\n')
        env = _env(tmp_path, SANDBOY_CACHE_DIR=str(split / "cache"))
        fd = _inotify_open_of(split)
        fired: list = []
        racer = threading.Thread(target=_create_on_open, args=(fd, lambda: (data / "secret").write_text("S3CRET"), fired),
                                 daemon=True)
        racer.start()
        try:
            first = _run(policy, "/bin/cat", str(data / "public"), env=env, cwd=work)
            racer.join(10)
        finally:
            os.close(fd)
        assert fired and first.stdout == "PUBLIC" and not first.hit, first.stderr
        after = _run(policy, "/bin/cat", str(data / "secret"), env=env, cwd=work)
        assert "S3CRET" not in after.stdout, f"try {attempt}: a kept plan granted the deny made during its build"
        assert after.returncode != 0
        # twin: the rebuild's plan is kept and served, the deny applied, the rest readable
        again = _run(policy, "/bin/cat", str(data / "public"), env=env, cwd=work)
        assert again.hit and again.stdout == "PUBLIC"
        assert _run(policy, "/bin/cat", str(data / "secret"), env=env, cwd=work).stdout == ""


# --- the plan cache with write roots (session 9: 30df51b keeps write-root policies) ----------

# In a private mount namespace of its own (nothing mounted here reaches the host's table): a
# write-root policy run twice (the second run keeps the plan: its stats settled), then proc
# mounted inside the write root — as mock mounts a chroot's /proc between the steps of a build —
# then the attack: a host sysctl's own value written back through it, a marker if it worked.
KERNEL_MOUNT_AFTER_THE_ENTRY = r"""
mount --make-rprivate / || exit 97
cd "$WORK" || exit 97
sleep 2.2  # the write root's ctime settles (fingerprint.TICK_NS; whole-second file systems: 2 s)
# (stdout a pipe in every run: fd 0-2's shape is part of the key)
# (the first run makes $ROOT/made, which moves the write root's ctime: no entry is kept from a run
# whose protected-path stats had not settled, so the second waits a tick and keeps one)
for i in 1 2; do "$SANDBOY" run --policy "$POLICY" -- /bin/touch "$ROOT/made" </dev/null 2>&1 | cat >/dev/null; sleep 2.2; done
ls "$SANDBOY_CACHE_DIR/plans" | grep -q . || exit 99
mount -t proc proc "$ROOT/mnt" || exit 97
"$SANDBOY" run --policy "$POLICY" -- /bin/sh -c \
  'v=$(cat "$0/mnt/sys/fs/lease-break-time") && echo "$v" > "$0/mnt/sys/fs/lease-break-time" && touch "$0/GOT-THROUGH"' \
  "$ROOT" </dev/null 2>&1 | cat
"""


def test_a_kernel_file_system_mounted_below_a_kept_write_root_is_refused_on_a_hit(tmp_path, tier):
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root (and unshare) to mount inside a write root")
    root, work = tmp_path / "chroot", tmp_path / "work"
    (root / "mnt").mkdir(parents=True)
    work.mkdir()
    policy = tmp_path / "p.toml"
    policy.write_text(f'version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc", "/bin", "{root}"]\n'
                      f'exec = ["/usr/bin", "/bin"]\nwrite = ["{root}"]\n')
    env = _env(tmp_path, SANDBOY=SANDBOY, POLICY=str(policy), ROOT=str(root), WORK=str(work))
    proc = subprocess.run(["unshare", "-m", "/bin/sh", "-c", KERNEL_MOUNT_AFTER_THE_ENTRY], capture_output=True,
                          text=True, env=env, timeout=120)
    assert proc.returncode == 0 and (root / "made").exists(), (proc.returncode, proc.stdout, proc.stderr)  # twin
    assert not (root / "GOT-THROUGH").exists(), f"a kept plan let the command write a host sysctl: {proc.stdout}"
    assert "proc file system inside a write root" in proc.stdout, proc.stdout  # the build's refusal, said


# --- kernel_mounts: the mount table watched is the caller's CURRENT mount namespace ----------

# A caller of the API (a chroot builder using Sandboy as a library, as mock would) runs a cage,
# then enters a mount namespace of its own (unshare, made private at once: nothing reaches the
# host's table) and mounts proc inside the cage's write root before the next run.
NAMESPACE_SWITCH = r"""
import ctypes, json, subprocess, sys
from sandboy import Policy, run
from sandboy.confine.cage import build
from sandboy.errors import CageError

root, how = sys.argv[1:3]
policy = Policy.from_mapping({"version": 1, "fs": {"read": ["/usr", "/lib", "/lib64", "/bin", "/etc"],
                                                    "exec": ["/usr/bin", "/bin"], "write": [root]}}, "<probe>")
cage = build(policy, cwd=root) if how == "prebuilt" else policy

def sh(script):
    try:
        result = run(["/bin/sh", "-c", script], cage, cwd=root, timeout=30)
    except CageError as exc:
        return 125, str(exc)
    return result.returncode, result.error or ""

report = {"twin": sh(f"touch {root}/made")}
if ctypes.CDLL(None, use_errno=True).unshare(0x00020000) != 0:  # CLONE_NEWNS
    sys.exit(97)
subprocess.run(["mount", "--make-rprivate", "/"], check=True)
subprocess.run(["mount", "-t", "proc", "proc", f"{root}/mnt"], check=True)
report["attack"] = sh(f"v=$(cat {root}/mnt/sys/fs/lease-break-time) && echo $v > {root}/mnt/sys/fs/lease-break-time "
                      f"&& touch {root}/GOT-THROUGH")
print(json.dumps(report))
"""


@pytest.mark.parametrize("how", ["prebuilt", "reused"])
def test_a_kernel_file_system_mounted_in_a_mount_namespace_the_caller_entered_is_refused(tmp_path, how):
    """`kernel_mounts.generation()` polls ONE mountinfo fd for changes; it was the mount namespace
    the process had when it first asked. After the caller's unshare(CLONE_NEWNS) the fd saw no
    change, so a cage the caller built was not looked at again: proc mounted below its write
    root in the new namespace was copied in with the root, and as root the command wrote a host
    sysctl (its own value back; a marker if it worked)."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("needs root to make a mount namespace and mount in it")
    root = tmp_path / "chroot"
    (root / "mnt").mkdir(parents=True)
    proc = subprocess.run([sys.executable, "-c", NAMESPACE_SWITCH, str(root), how], capture_output=True, text=True,
                          timeout=120, env=_env(tmp_path, True))
    assert proc.returncode == 0, proc.stderr
    import json

    report = json.loads(proc.stdout)
    assert report["twin"][0] == 0 and (root / "made").exists(), report
    assert not (root / "GOT-THROUGH").exists(), f"a host sysctl was written through a proc in the write root: {report}"
    assert report["attack"][0] == 125 and "proc file system inside a write root" in report["attack"][1], report


# --- metadata inside a write root: what the command may not write, it may not loosen -------------

def _sandboy_run(policy: Path, script: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([SANDBOY, "run", "--policy", str(policy), "--", "/bin/sh", "-c", script],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, timeout=60)


@pytest.mark.parametrize("tier_on", [True, False], ids=["tier", "fallback (open, shown)"])
def test_a_denied_file_inside_a_write_root_takes_no_metadata_change(tmp_path, tier_on):
    """`write = [W]`, `deny = [W/secret.key]` (or Sandboy's own cache in a granted home): Landlock
    refuses every access to the denied file but does not mediate chmod, and the tier's write root
    is a read-write mount — so `chmod 0644 W/secret.key` (issue 7 item 1, inside a write root)
    made the 0600 secret readable to every local user, and `chmod 0777` of the cache directory
    opened Sandboy's cache (the adapters' compiled code) to them. Under the tier a denied path
    inside a write root is bound read-only over itself: EROFS (host side: the modes). Without
    the tier it is the documented `degraded` item (shown, so the probe is real)."""
    if tier_on and not namespaces.availability()[0]:
        pytest.skip("no namespace tier here")
    work = tmp_path / "W"
    work.mkdir()
    secret = work / "secret.key"
    secret.write_text("S3CRET")
    secret.chmod(0o600)
    cache = work / ".cache" / "sandboy"  # the cache inside the write root, as in a granted home
    cache.mkdir(parents=True)
    cache.chmod(0o700)
    (work / "src").mkdir()  # (a directory split around a deny takes no new entry: the twin writes below it)
    policy = tmp_path / "p.toml"
    policy.write_text(f'version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc", "/bin"]\n'
                      f'exec = ["/usr/bin", "/bin"]\nwrite = ["{work}"]\ndeny = ["{secret}"]\n')
    env = _env(tmp_path, True, SANDBOY_CACHE_DIR=str(cache), SANDBOY_NAMESPACES="1" if tier_on else "0",
               SANDBOY_PLAN_CACHE="0")
    proc = _sandboy_run(policy, f"chmod 0644 {secret}; chmod 0777 {cache}; touch -d 2001-01-01 {secret}; "
                                f"echo twin > {work}/src/made && chmod 0640 {work}/src/made && cat {secret}", env)
    assert "S3CRET" not in proc.stdout
    made = work / "src" / "made"
    assert made.read_text() == "twin\n" and made.stat().st_mode & 0o777 == 0o640, proc.stderr
    modes = (secret.stat().st_mode & 0o777, cache.stat().st_mode & 0o777, secret.stat().st_mtime > 1e9)
    if tier_on:
        assert modes == (0o600, 0o700, True), f"a denied path's metadata changed from the cage: {modes}"
    else:
        assert modes[:2] == (0o644, 0o777), modes  # the attack is real where no mount stops it


def test_a_loosened_git_directory_does_not_let_another_user_plant_the_operators_config(tmp_path, tier):
    """The command (root's agent) loosens `.git` — a writable directory it may not rename — and an
    accomplice (uid 65534) replaces the protected `.git/config` on the host after the run."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import userkit

    userkit.skip_unless_nobody_can_run()
    with userkit.world_readable_tmp() as base:
        work = base / "W"
        work.mkdir()
        subprocess.run(["git", "init", "-q", str(work)], check=True)
        policy = base / "p.toml"
        policy.write_text(f'version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc", "/bin", "/dev/null"]\n'
                          f'exec = ["/usr/bin", "/bin"]\nwrite = ["{work}"]\n[env]\npass = ["GIT_CONFIG_GLOBAL"]\n')
        env = _env(tmp_path, True, SANDBOY_PLAN_CACHE="0", GIT_CONFIG_GLOBAL="/dev/null")
        proc = _sandboy_run(policy, f"chmod 0777 {work}/.git; chmod 0777 {work}/.git/config; git -C {work} status >/dev/null"
                                    " && echo twin", env)
        assert "twin" in proc.stdout, proc.stderr  # git works in the cage
        planted = base / "PLANTED"
        subprocess.run(userkit.as_user(["/bin/sh", "-c",
                        f"cd {work}/.git && mv config config.old && printf '[core]\\n\\tfsmonitor = touch {planted}; "
                        f"false\\n' > config"]), capture_output=True, timeout=30)
        subprocess.run(["git", "-C", str(work), "status"], capture_output=True, timeout=30)
        assert not planted.exists(), "another user planted the operator's git config through a loosened .git"
        assert work.joinpath(".git").stat().st_mode & 0o022 == 0


def test_as_an_ordinary_user_a_denied_key_in_their_write_root_takes_no_metadata_change():
    """The same as uid 65534 (the tier's user namespace maps them to themselves): their own
    0600 key, denied inside the home they grant for writing, keeps its mode and mtime."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import userkit

    userkit.skip_unless_nobody_can_run()
    if not namespaces.availability()[0]:
        pytest.skip("no namespace tier here")
    with userkit.world_readable_tmp("sandboy-cage9-") as base:
        home = base / "home"
        (home / "src").mkdir(parents=True)
        key = home / "id_key"
        key.write_text("S3CRET")
        key.chmod(0o600)
        policy = base / "p.toml"
        policy.write_text(f'version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc", "/bin"]\n'
                          f'exec = ["/usr/bin", "/bin"]\nwrite = ["{home}"]\ndeny = ["{key}"]\n')
        subprocess.run(["chown", "-R", "65534:65534", str(base)], check=True)
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(PACKAGE.parent), "HOME": str(home),
               "SANDBOY_CACHE_DIR": str(base / "cache")}
        proc = subprocess.run(as_user(["/usr/bin/python3", "-m", "sandboy", "run", "--policy", str(policy), "--",
                                       "/bin/sh", "-c", f"chmod 0644 {key}; touch -d 2001-01-01 {key}; cat {key}; "
                                       f"echo twin > {home}/src/made"]),
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, env=env)
        assert "S3CRET" not in proc.stdout and (home / "src" / "made").read_text() == "twin\n", proc.stderr
        assert key.stat().st_mode & 0o777 == 0o600 and key.stat().st_mtime > 1e9, "their key's metadata changed"


# --- path_dirs: a PATH entry is looked up as the shell looks it up ----------------------------------

@pytest.mark.parametrize("tier_on", [True, False], ids=["tier", "fallback"])
def test_a_path_entry_with_dotdot_after_a_link_protects_the_directory_the_shell_searches(tmp_path, tier_on):
    """PATH holds `H/link/../bin` (a tool's `$DIR/../bin` where `$DIR` is a link: `link -> a/b`).
    The shell resolves `..` physically: `H/a/bin`. path_dirs normalised the entry lexically to
    `H/bin`, made and protected THAT directory, and a run granted `H` planted `git` in `H/a/bin`,
    which the operator's next `git` ran. Host side: what the operator's PATH finds for `git`."""
    if tier_on and not namespaces.availability()[0]:
        pytest.skip("no namespace tier here")
    home = tmp_path / "H"
    (home / "a" / "b").mkdir(parents=True)
    (home / "work").mkdir()
    os.symlink("a/b", home / "link")
    searched = f"{home}/link/../bin"
    operator_path = f"{searched}:/usr/bin:/bin"
    policy = tmp_path / "p.toml"
    policy.write_text(f'version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc", "/bin"]\n'
                      f'exec = ["/usr/bin", "/bin"]\nwrite = ["{home}"]\n')
    env = _env(tmp_path, True, PATH=operator_path, HOME=str(home), SANDBOY_PLAN_CACHE="0",
               SANDBOY_NAMESPACES="1" if tier_on else "0")
    plant = (f"mkdir -p {home}/a/bin; printf '#!/bin/sh\\necho PLANTED\\n' > {home}/a/bin/git; "
             f"chmod +x {home}/a/bin/git; echo twin > {home}/work/made")
    proc = subprocess.run([SANDBOY, "run", "--policy", str(policy), "--", "/bin/sh", "-c", plant],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, cwd=home / "work",
                          timeout=60)
    assert (home / "work" / "made").read_text() == "twin\n", proc.stderr  # the write root is written
    found = shutil.which("git", path=operator_path)
    assert found is None or not found.startswith(str(home)), f"the operator's PATH now finds {found}: {proc.stderr}"
    if not tier_on:
        assert proc.returncode == 125, proc.stderr  # judged after the run: quarantined, the run failed


def _write_root_denying_70_files(tmp_path) -> tuple:
    """(W, its 70 files `key000`... of mode 0600, a policy file granting write on W and denying
    each of them): more denied paths inside a write root than a run binds read-only (64)."""
    work = tmp_path / "W"
    (work / "src").mkdir(parents=True)
    keys = [work / f"key{i:03d}" for i in range(70)]
    for key in keys:
        key.write_text("S")
        key.chmod(0o600)
    policy = tmp_path / "p.toml"
    policy.write_text(f'version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc", "/bin", "/proc"]\n'
                      f'exec = ["/usr/bin", "/bin"]\nwrite = ["{work}"]\n'
                      f'deny = [{", ".join(repr(str(k)).replace(chr(39), chr(34)) for k in keys)}]\n')
    return work, keys, policy


def test_denied_paths_bound_read_only_are_bounded_per_run(tmp_path, tier):
    """Each denied path inside a write root is a mount in every run: a policy listing thousands
    (a repository's step policy may) must not make thousands of mounts per step. The first 64
    are bound (their metadata: EROFS), the launch says the rest are not, and the run works."""
    work, keys, policy = _write_root_denying_70_files(tmp_path)
    env = _env(tmp_path, True, SANDBOY_PLAN_CACHE="0")
    proc = _sandboy_run(policy, f"chmod 0644 {keys[0]}; echo twin > {work}/src/made; grep -c ' {work}/key' /proc/self/mountinfo",
                        env)
    assert proc.returncode == 0 and (work / "src" / "made").exists(), proc.stderr
    assert proc.stdout.split()[-1] == "64", proc.stdout  # the mounts of this run
    assert "70 denied paths inside write roots; the first 64 are read-only" in proc.stderr, proc.stderr
    assert keys[0].stat().st_mode & 0o777 == 0o600


def test_a_start_up_file_replaced_by_another_user_while_the_run_runs_does_not_stay(tmp_path, tier):
    """Write root: a home holding `.bashrc` (protected: read-only in the cage). The command makes
    the home 0777 and waits; an accomplice (uid 65534) replaces `.bashrc` meanwhile; the command
    ends. Host side: the operator's next login shell must not run the accomplice's file."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import time

    import userkit

    userkit.skip_unless_nobody_can_run()
    with userkit.world_readable_tmp() as base:
        home = base / "H"
        (home / "work").mkdir(parents=True)
        (home / ".bashrc").write_text("echo operator\n")
        policy = base / "p.toml"
        policy.write_text(f'version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc", "/bin"]\n'
                          f'exec = ["/usr/bin", "/bin"]\nwrite = ["{home}"]\n')
        env = _env(tmp_path, True, SANDBOY_PLAN_CACHE="0", HOME=str(home), PATH="/usr/bin:/bin")
        run = subprocess.Popen([SANDBOY, "run", "--policy", str(policy), "--", "/bin/sh", "-c",
                                f"chmod 0777 {home}; read line"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env, cwd=home / "work")
        try:
            deadline = time.monotonic() + 30
            while home.stat().st_mode & 0o777 != 0o777 and time.monotonic() < deadline:
                time.sleep(0.02)
            subprocess.run(userkit.as_user(["/bin/sh", "-c",
                            f"cd {home} && mv .bashrc .bashrc.old && echo 'echo PLANTED' > .bashrc"]),
                           capture_output=True, timeout=30)
            _out, err = run.communicate("go\n", timeout=60)
        finally:
            if run.poll() is None:
                run.kill()
                run.wait()
        assert run.returncode == 125, err  # the loosened mode is seen and put back
        assert home.stat().st_mode & 0o777 == 0o755
        bashrc = home / ".bashrc"
        assert not bashrc.exists() or "PLANTED" not in bashrc.read_text(), \
            f"another user's .bashrc, planted while the run ran, stays for the operator's next login: {err}"


def test_a_fifo_named_as_the_policy_is_an_error_not_a_hang(tmp_path):
    """`sandboy run --policy .sandboy/agent.toml` where the checkout made that a named FIFO: the
    loader's blocking open waited for a writer for ever. Now exit 2 at once, naming the file;
    twin: a policy piped in through /dev/stdin is read as before."""
    fifo = tmp_path / "agent.toml"
    os.mkfifo(fifo)
    env = _env(tmp_path, True)
    proc = subprocess.run([SANDBOY, "run", "--policy", str(fifo), "--", "/bin/true"], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, env=env, timeout=30)
    assert proc.returncode == 2 and str(fifo) in proc.stderr, (proc.returncode, proc.stderr)
    twin = subprocess.run([SANDBOY, "run", "--policy", "/dev/stdin", "--", "/bin/echo", "twin"],
                          input=POLICY.format(data=tmp_path), capture_output=True, text=True, env=env, timeout=30)
    assert twin.returncode == 0 and twin.stdout == "twin\n", twin.stderr


def test_sandboys_own_cache_is_bound_before_the_policys_denies_count(tmp_path, tier):
    """rvsec9: the bound of 64 read-only binds took the denies in policy order and Sandboy's own
    cache LAST: a policy (a repository's step policy, for the gate) listing 64 denied paths inside
    a write root that holds the operator's cache pushed the cache out, and the command chmod
    0777'd it (host side: its mode). The cache is bound first; the policy's paths share the rest."""
    work, keys, policy = _write_root_denying_70_files(tmp_path)
    cache = work / ".cache" / "sandboy"
    cache.mkdir(parents=True)
    cache.chmod(0o700)
    env = _env(tmp_path, True, SANDBOY_CACHE_DIR=str(cache), SANDBOY_PLAN_CACHE="0")
    proc = _sandboy_run(policy, f"chmod 0777 {cache}; chmod 0644 {keys[0]}; echo twin > {work}/src/made", env)
    assert (work / "src" / "made").exists(), proc.stderr
    assert cache.stat().st_mode & 0o777 == 0o700, "Sandboy's cache was loosened from the cage"
    assert keys[0].stat().st_mode & 0o777 == 0o600  # the first of the policy's still bound
