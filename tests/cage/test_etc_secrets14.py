"""The /etc secrets the `system` preset denies, attacked (session 14, ADR 0029): guards that hold
with `/etc` split around them — Landlock grants the siblings by INODE — and that a mount-based
hiding of them failed (ADR 0029 records that rejected design: 5bc65aa, reverted).

Everything runs in a private mount namespace (`unshare -m`) with an overlay over /etc, so the
test plants secrets of its own, world-readable (mode 0644: only the cage keeps uid 65534 from
them, not their modes), without touching the host's /etc: one per kind the preset denies (a file
of its own name, a file in a denied directory, one in a denied directory two levels down, a file
two levels down) and a twin that is no secret. The attacks (`ATTACKS`): open, `/proc/self/root`,
`..` walks, `openat` from an /etc fd, openat2 with each RESOLVE_* flag (ENOSYS: the filter), a
hard link and a symlink made in a write root, and mount calls (umount, a bind, a clone of /etc's
tree). Judged on the host: no secret's bytes in anything the runs printed or left in the write
root; the twin and /etc/passwd read. As root and uid 65534; with the tier (a build, then a plan
cache hit) and forced off. A secret made after the plan was kept is refused on the next run (the
presets' questions asked again by the hit), and — what the masks lost (rvsec14) — a secret the
host rewrites by rename WHILE a run is going (passwd, visudo, ssh-keygen do) stays unreadable:
the new inode has no rule, /etc itself only READ_DIR.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: userkit
from userkit import NOBODY, as_user, skip_unless_nobody_can_run, world_readable_tmp  # noqa: E402

from sandboy.confine import namespaces  # noqa: E402

pytestmark = pytest.mark.needs_kernel

SANDBOY = os.path.join(os.path.dirname(sys.executable), "sandboy")

# path -> the bytes planted there (each a marker no other file of the machine holds)
SECRETS = {
    "/etc/shadow-": "SECRET-ETC14-SHADOW-DASH\n",
    "/etc/gshadow": "SECRET-ETC14-GSHADOW\n",
    "/etc/ssh/ssh_host_etc14_key": "SECRET-ETC14-SSH-KEY\n",
    "/etc/ssl/private/etc14.pem": "SECRET-ETC14-TLS-KEY\n",
    "/etc/security/opasswd": "SECRET-ETC14-OPASSWD\n",
}
# made between runs, after the plan was kept: the preset denies them once they exist
LATER = {
    "/etc/sudoers.d/etc14": "SECRET-ETC14-SUDOERS\n",
    "/etc/krb5.keytab": "SECRET-ETC14-KEYTAB\n",
}
TWIN = ("/etc/etc14-twin.conf", "TWIN-ETC14\n")

# In the cage (the system python3): every way to a covered file, each answer "ok:<bytes>" or an
# errno name; the host looks for the secrets' bytes in all of it.
ATTACKS = r'''
import ctypes, errno, json, os, sys
secrets, write_root = json.loads(sys.argv[1]), sys.argv[2]
libc = ctypes.CDLL(None, use_errno=True)
out = {}

def attempt(name, call):
    try:
        got = call()
        out[name] = "ok:" + (got.decode(errors="replace") if isinstance(got, bytes) else str(got))
    except OSError as exc:
        out[name] = errno.errorcode.get(exc.errno, str(exc.errno))

def read(path, **kw):
    fd = os.open(path, os.O_RDONLY, **kw)
    try:
        return os.read(fd, 4096)
    finally:
        os.close(fd)

def openat2(dirfd, name, resolve):
    how = ctypes.create_string_buffer(24)
    ctypes.memmove(how, (os.O_RDONLY).to_bytes(8, "little") + bytes(8) + resolve.to_bytes(8, "little"), 24)
    fd = libc.syscall(437, dirfd, name.encode(), how, 24)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "openat2")
    try:
        return os.read(fd, 4096)
    finally:
        os.close(fd)

def raw(name, *args):
    if libc.syscall(*args) < 0:
        raise OSError(ctypes.get_errno(), name)
    return b"done"

etc = os.open("/etc", os.O_RDONLY | os.O_DIRECTORY)
for i, path in enumerate(secrets):
    rel = path[len("/etc/"):]
    parent = os.path.dirname(path)
    attempt(f"{path} open", lambda: read(path))
    attempt(f"{path} stat", lambda: os.stat(path).st_size)
    attempt(f"{path} list parent", lambda: " ".join(sorted(os.listdir(parent))) if parent != "/etc" else "-")
    attempt(f"{path} /proc/self/root", lambda: read("/proc/self/root" + path))
    attempt(f"{path} .. walk", lambda: read(f"{parent}/../{os.path.basename(parent)}/{os.path.basename(path)}"
                                             if parent != "/etc" else f"/etc/security/../{rel}"))
    attempt(f"{path} openat", lambda: read(rel, dir_fd=etc))
    for flag, value in (("NO_XDEV", 0x01), ("NO_MAGICLINKS", 0x02), ("NO_SYMLINKS", 0x04), ("BENEATH", 0x08),
                        ("IN_ROOT", 0x10), ("CACHED", 0x20)):
        attempt(f"{path} openat2 {flag}", lambda: openat2(etc, rel, value))
    attempt(f"{path} hard link", lambda: (os.link(path, f"{write_root}/hard{i}"), read(f"{write_root}/hard{i}"))[1])
    attempt(f"{path} symlink", lambda: (os.symlink(path, f"{write_root}/sym{i}"), read(f"{write_root}/sym{i}"))[1])
    attempt(f"{path} umount", lambda: raw("umount2", 166, path.encode(), 2))  # MNT_DETACH
    attempt(f"{path} bind", lambda: raw("mount", 165, path.encode(), f"{write_root}/bound{i}".encode(), None,
                                         0x1000, None))  # MS_BIND
    attempt(f"{path} after", lambda: read(path))
attempt("/etc clone", lambda: raw("open_tree", 428, -100, b"/etc", 1 | 0x8000))  # OPEN_TREE_CLONE | AT_RECURSIVE
attempt("twin", lambda: read("/etc/etc14-twin.conf"))
attempt("passwd", lambda: read("/etc/passwd")[:5])
print(json.dumps(out))
'''

# Run by root in a private mount namespace: /etc overlaid, the secrets planted, then `sandboy run`
# of ATTACKS (as `user` when given) per step of `plan`.
OVERLAY = r'''
import json, os, subprocess, sys, time
overlay = sys.argv[1]
subprocess.run(["mount", "-t", "tmpfs", "tmpfs", overlay], check=True)
os.mkdir(f"{overlay}/upper"); os.mkdir(f"{overlay}/work")
subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                f"lowerdir=/etc,upperdir={overlay}/upper,workdir={overlay}/work", "/etc"], check=True)
'''
DRIVER = OVERLAY + r'''
overlay, sandboy, policy, cwd, write_root, spec = sys.argv[1:7]
spec = json.loads(spec)

def plant(files):
    for path, text in files.items():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as fh:
            fh.write(text)
        os.chmod(path, 0o644)
        os.chmod(os.path.dirname(path), 0o755)

plant(spec["secrets"])
plant(dict([spec["twin"]]))
out = []
for step in spec["plan"]:
    if step == "later":
        plant(spec["later"])
        continue
    for name in os.listdir(write_root):
        os.unlink(os.path.join(write_root, name))
    env = dict(os.environ, **spec["env"])
    argv = [sys.executable, "-X", "importtime", sandboy, "run", "--policy", policy, "--", "/usr/bin/python3", "-c",
            spec["attacks"], json.dumps(spec["probe"]), write_root]
    proc = subprocess.run(spec["user"] + argv, capture_output=True, text=True, cwd=cwd, env=env,
                          stdin=subprocess.DEVNULL, start_new_session=True)
    imported = {l.rsplit("|", 1)[-1].strip() for l in proc.stderr.splitlines() if l.startswith("import time:")}
    left = {}
    for name in sorted(os.listdir(write_root)):
        path = os.path.join(write_root, name)
        if os.path.islink(path):  # (never followed here: the driver sees the planted secrets)
            left[name] = "symlink to " + os.readlink(path)
            continue
        try:
            with open(path, errors="replace") as fh:
                left[name] = fh.read()
        except OSError as exc:
            left[name] = f"unreadable: {exc.strerror}"
    out.append({"hit": "sandboy.cli" in imported and "sandboy.confine.cage" not in imported, "rc": proc.returncode,
                "stdout": proc.stdout,
                "stderr": "\n".join(l for l in proc.stderr.splitlines() if not l.startswith("import time:")),
                "left": left})
print(json.dumps(out))
'''


def overlay_bench(base: Path, tier: bool) -> tuple:
    """(overlay, cwd, write root, policy, environment) of a run in an /etc overlay under `base`:
    `include = ["system"]` and a write root; skips where that cannot run here."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("overlaying /etc in a private mount namespace needs root and unshare")
    if tier and not namespaces.availability()[0]:
        pytest.skip(f"no namespace tier here: {namespaces.availability()[1]}")
    overlay, cwd, write_root = base / "overlay", base / "work", base / "w"
    for path in (overlay, cwd, write_root):
        path.mkdir()
    write_root.chmod(0o777)
    policy = base / "p.toml"
    policy.write_text(f'version = 1\ninclude = ["system"]\n[fs]\nwrite = ["{write_root}"]\nprotect_defaults = false\n')
    env = {k: v for k, v in os.environ.items() if k not in ("SANDBOY_NATIVE", "SANDBOY_NAMESPACES")}
    env["SANDBOY_CACHE_DIR"] = str(base / "cache")
    if not tier:
        env["SANDBOY_NAMESPACES"] = "0"
    return overlay, cwd, write_root, policy, env


def run_in_overlay(base: Path, user: str, tier: bool, plan=("run", "run"), env=None) -> list:
    """The DRIVER's runs (a dict each); skips where /etc cannot be overlaid here."""
    overlay, cwd, write_root, policy, run_env = overlay_bench(base, tier)
    (base / "cache").mkdir(mode=0o700)
    if user == "nobody":
        os.chown(base / "cache", NOBODY, NOBODY)
    run_env.update(env or {})
    spec = {"secrets": SECRETS, "later": LATER, "twin": TWIN, "plan": list(plan), "attacks": ATTACKS,
            "probe": [*SECRETS, *LATER], "user": as_user(uid=NOBODY) if user == "nobody" else [], "env": {}}
    proc = subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable, "-c", DRIVER,
                           str(overlay), SANDBOY, str(policy), str(cwd), str(write_root), json.dumps(spec)],
                          capture_output=True, text=True, env=run_env, timeout=300)
    if proc.returncode != 0 and "overlay" in proc.stderr:
        pytest.skip(f"no overlay over /etc here: {proc.stderr.strip()[-200:]}")
    assert proc.returncode == 0, proc.stderr
    assert not os.path.exists("/etc/etc14-twin.conf")  # (the host's /etc untouched)
    return json.loads(proc.stdout)


def leaked(run: dict, secrets) -> list:
    """The secrets whose bytes show anywhere in what the run printed or left in the write root."""
    seen = run["stdout"] + run["stderr"] + json.dumps(run["left"])
    return [path for path, text in secrets.items() if text.strip() in seen]


def judged(run: dict, secrets=SECRETS) -> dict:
    """The attacks' answers, after the host-side checks every run must pass."""
    assert run["rc"] == 0, run["stderr"]
    assert leaked(run, {**SECRETS, **LATER}) == [], run
    answers = json.loads(run["stdout"])
    assert answers["twin"] == "ok:" + TWIN[1] and answers["passwd"] == "ok:root:"  # the legitimate twins
    for path in secrets:
        for attack in ("open", "/proc/self/root", ".. walk", "openat", "after"):
            assert answers[f"{path} {attack}"] == "EACCES", (path, attack, answers)
        assert answers[f"{path} umount"] == "EPERM" and answers[f"{path} bind"] == "EPERM", answers
        assert not answers[f"{path} hard link"].startswith("ok") and not answers[f"{path} symlink"].startswith("ok")
    assert not answers["/etc clone"].startswith("ok"), answers
    return answers


@pytest.fixture(params=["root", "nobody"])
def user(request):
    if request.param == "nobody":
        skip_unless_nobody_can_run()
    return request.param


def test_every_secret_stays_unreadable_under_the_tier_built_and_kept(user):
    """With the tier: the build's run and the plan cache hit after it each refuse every attack on
    every secret and read the twin."""
    with world_readable_tmp("sandboy-etc14-") as base:
        built, hit = run_in_overlay(base, user, tier=True)
    assert not built["hit"] and hit["hit"], (built, hit)
    for run in (built, hit):
        judged(run)


def test_without_the_tier_the_split_keeps_every_secret_unreadable(user):
    """SANDBOY_NAMESPACES=0: Landlock is the only layer — the same attacks refused, the twin read
    (the mount attacks: EPERM by the filter)."""
    with world_readable_tmp("sandboy-etc14-") as base:
        first, second = run_in_overlay(base, user, tier=False)
    assert not first["hit"] and not second["hit"]  # (nothing is kept without the tier)
    for run in (first, second):
        judged(run)


def test_a_secret_made_after_the_plan_was_kept_is_refused_on_the_next_run(user):
    """`/etc/sudoers.d/...` (a directory) and `/etc/krb5.keytab` (a file) made between two runs:
    the next run is a miss (the `system` preset's `exists` answers are asked again by the hit,
    ADR 0028) whose rebuild denies them too; the run after it is a hit that refuses them as well."""
    with world_readable_tmp("sandboy-etc14-") as base:
        runs = run_in_overlay(base, user, tier=True, plan=("run", "run", "later", "run", "run"))
    built, hit, after, again = runs
    assert [run["hit"] for run in runs] == [False, True, False, True]
    for run in (built, hit):
        answers = judged(run)
        for path in LATER:
            assert answers[f"{path} open"] == "ENOENT"
    for run in (after, again):
        judged(run, {**SECRETS, **LATER})


def test_a_denied_file_made_a_directory_is_a_miss_and_stays_denied(tmp_path):
    """A denied file inside a read grant replaced by a directory between two runs: the deny's stat
    in the fingerprint (its mode among it) makes the next run a miss, whose rebuild refuses the
    directory's new contents (host side: their bytes), the sibling read; then a hit."""
    from test_plan_cache import Runner

    if not namespaces.availability()[0]:
        pytest.skip("the plan cache keeps runs under the namespace tier only")
    runner = Runner(tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    (data / "a").write_text("A\n")
    (data / "s").write_text("S1-SECRET\n")
    runner.write_policy(read=f', "{data}"', more=f'deny = ["{data}/s"]\n')
    script = f"cat {data}/a; cat {data}/s; cat {data}/s/inner; true"
    built, hit = runner.run("/bin/sh", "-c", script), runner.run("/bin/sh", "-c", script)
    assert (built.hit, hit.hit) == (False, True)
    for run in (built, hit):
        assert (run.returncode, run.stdout) == (0, "A\n") and "S1-SECRET" not in run.err
    (data / "s").unlink()
    (data / "s").mkdir()
    (data / "s" / "inner").write_text("S2-SECRET\n")
    after, again = runner.run("/bin/sh", "-c", script), runner.run("/bin/sh", "-c", script)
    assert (after.hit, again.hit) == (False, True)
    for run in (after, again):
        assert (run.returncode, run.stdout) == (0, "A\n"), run.err
        assert "S2-SECRET" not in run.err and "Permission denied" in run.err


# Run by root in a private mount namespace with /etc overlaid: a run whose command waits, the host
# rewriting /etc/shadow- the way passwd(1) does (a new file renamed over it), then the command
# reading it. A mount over the old name (5bc65aa's mask) was detached by that rename.
RENAME_DRIVER = OVERLAY + r'''
overlay, sandboy, policy, cwd, write_root = sys.argv[1:6]
with open("/etc/shadow-", "w") as fh:
    fh.write("SECRET-ETC14-BEFORE\n")
os.chmod("/etc/shadow-", 0o644)
command = ("import os, time\n"
           f"open('{write_root}/started', 'w').close()\n"
           f"while not os.path.exists('{write_root}/go'): time.sleep(0.02)\n"
           "try:\n    print(open('/etc/shadow-').read(), end='')\n"
           "except OSError as exc:\n    print('refused', exc.strerror)\n")
run = subprocess.Popen([sys.executable, sandboy, "run", "--policy", policy, "--", "/usr/bin/python3", "-c", command],
                       cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
deadline = time.monotonic() + 60
while not os.path.exists(f"{write_root}/started") and time.monotonic() < deadline and run.poll() is None:
    time.sleep(0.02)
with open("/etc/shadow-.new", "w") as fh:
    fh.write("SECRET-ETC14-AFTER-RENAME\n")
os.chmod("/etc/shadow-.new", 0o644)
os.rename("/etc/shadow-.new", "/etc/shadow-")  # as passwd, chpasswd, useradd rewrite /etc/shadow
open(f"{write_root}/go", "w").close()
out, err = run.communicate(timeout=60)
print(out, end="")
print(err, end="", file=sys.stderr)
sys.exit(run.returncode)
'''


@pytest.mark.parametrize("tier", [True, False], ids=["tier", "forced-off"])
def test_a_secret_the_host_renames_over_while_a_run_goes_stays_unreadable(tmp_path, tier):
    """rvsec14's finding against the masks: the kernel detaches a mount in another namespace when
    the host renames or unlinks over its mount point, so a masked /etc/shadow rewritten by passwd
    during a run was read through the one /etc rule. With the split the new file is a new inode
    that no rule names and /etc itself has READ_DIR only: refused (host side: neither the old nor
    the new bytes printed). Must fail if a path-based hiding replaces the split again."""
    overlay, cwd, write_root, policy, env = overlay_bench(tmp_path, tier)
    proc = subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable, "-c", RENAME_DRIVER,
                           str(overlay), SANDBOY, str(policy), str(cwd), str(write_root)],
                          capture_output=True, text=True, env=env, timeout=180)
    if proc.returncode != 0 and "overlay" in proc.stderr:
        pytest.skip(f"no overlay over /etc here: {proc.stderr.strip()[-200:]}")
    assert (write_root / "go").exists()  # (the rename happened while the command waited)
    assert proc.returncode == 0, proc.stderr
    assert "SECRET-ETC14" not in proc.stdout + proc.stderr, proc.stdout
    assert proc.stdout == "refused Permission denied\n", proc.stdout
