"""Session 8's review of the cage from the attacker's side: what sessions 6-7 added (reused
cages and their fingerprints, the read-only /dev copies and the stdin reopen, the gate step's
memory and pids cgroups, the init sharing the caller's memory, time budgets), as root and as
uid 65534, with and without the namespace tier.

One hole was found and closed here (host side checked, with its twin):

- a cage reused by `sandboy.run()` (`reuse.for_run`) attached its write roots by the path the
  build resolved, while its fingerprint looked at the policy's own spelling. A policy naming a
  write root through a symlink (`write = ["W/link/t"]`, `link -> a`) keeps its fingerprint when
  the link is retargeted at the same directory moved away (`mv a b; ln -sfn b link`), and a
  new `a -> DIR` then made the tier attach DIR/t read-write in the next run: `chmod`, `chown`,
  `utimensat`, `setxattr` of every file under it, outside every grant (as root: any file of the
  machine). Now the fingerprint looks at the paths the cage uses too (`fingerprint.Fingerprint`).

Two more, closed here too:

- a write root holding a mount of the kernel's own file systems (a chroot's /proc, /sys, a
  bound /dev): Landlock grants beneath mount points and the tier copies submounts, so as root
  the command wrote the host's sysctls and KSM settings and read a raw (loop) disk, tier and
  fallback. Now refused, 125 (`confine/kernel_mounts.py`), at build, reuse and prebuilt runs.
- device nodes outside /dev under a read grant (a chroot's nodes made on disk): a raw disk read
  as root under the tier. Now every mount but the minimal /dev's is nodev.

What held is listed, one line each, in docs/threat-model.md ("Session 8 review"); the probes
below keep it so.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time

import pytest
from userkit import as_user, skip_unless_nobody_can_run, world_readable_tmp
from prockit import mentioning

from sandboy.confine import namespaces

pytestmark = pytest.mark.needs_kernel

TIER = pytest.mark.skipif(not namespaces.availability()[0],
                          reason=f"no namespace tier here: {namespaces.availability()[1]}")
NOBODY = 65534
SRC = os.path.dirname(os.path.dirname(os.path.abspath(sys.modules["sandboy"].__file__)))

# What both probes below start with, run by the API in one process: the layout's paths from argv,
# a policy of the system's programs writing `write`, and `sh` (exit status, output, error).
PROBE_HEAD = r"""
import json, os, sys, tempfile
from sandboy import Policy, run

base, victim_dir, victim = sys.argv[1:4]
w = os.path.join(base, "w")

def policy(write):
    return Policy.from_mapping({"version": 1, "fs": {"read": ["/usr", "/lib", "/lib64", "/bin", "/etc"],
                                                      "exec": ["/usr/bin", "/bin"], "write": write}}, "<probe>")

def sh(script, pol):
    with tempfile.TemporaryFile() as out:
        result = run(["/bin/sh", "-c", script], pol, cwd=w, stdout=out.fileno(), stderr=out.fileno(), timeout=30)
        out.seek(0)
        return result.returncode, out.read().decode(), result.error
"""

# (the second run of policy B reuses B's cage): B writes W/link/t; A (another policy of the same
# program: an agent's shell, an earlier tool) writes W and retargets the link; B again tries
# metadata changes on a file outside every grant; a last B run is the twin (a write through the
# link lands in the directory it now leads to).
RETARGET = PROBE_HEAD + r"""
b = policy([os.path.join(w, "link", "t")])
a = policy([w])
report = {"build": sh("true", b)}
report["retarget"] = sh(f"mv a b && ln -sfn b link && ln -s {victim_dir} a && echo done", a)
report["attack"] = sh(f"chmod 0644 {victim}; echo chmod=$?; touch -m -d 2001-01-01 {victim}; echo touch=$?", b)
report["twin"] = sh("echo twin > link/t/made && echo wrote", b)
print(json.dumps(report))
"""


# The same with a cage built once and handed to `run` (README: `cage.build(policy)` "gives a cage
# to reuse across runs"; no fingerprint is looked at then): here the write root is spelled as it
# is (W/a/t), and A swaps `a` for a link. The prebuilt cage must refuse to run (125) rather than
# attach the link's target; the first run of the same cage is the twin.
PREBUILT = PROBE_HEAD + r"""
from sandboy.confine.cage import build

b = build(policy([os.path.join(w, "a", "t")]), cwd=w)
report = {"twin": sh("echo twin > a/t/made && echo wrote", b)}
report["retarget"] = sh(f"mv a b && ln -s {victim_dir} a && echo done", policy([w]))
report["attack"] = sh(f"chmod 0644 {victim}; echo chmod=$?; touch -m -d 2001-01-01 {victim}; echo touch=$?", b)
b.close()
print(json.dumps(report))
"""


def _layout(base) -> tuple:
    """W/a/t (the write root, named through W/link), and a victim file outside every grant."""
    w = os.path.join(base, "w")
    os.makedirs(os.path.join(w, "a", "t"))
    os.symlink("a", os.path.join(w, "link"))
    victim_dir = os.path.join(base, "victim")
    os.makedirs(os.path.join(victim_dir, "t"))
    victim = os.path.join(victim_dir, "t", "id_rsa")
    with open(victim, "w") as fh:
        fh.write("PRIVATE KEY\n")
    os.chmod(victim, 0o600)
    os.utime(victim, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
    return w, victim_dir, victim


def _stamp(path) -> tuple:
    st = os.stat(path)
    return stat.S_IMODE(st.st_mode), st.st_uid, st.st_mtime_ns


def _check_retarget(report, w, victim, before) -> None:
    assert report["build"][0] == 0 and report["retarget"][:2] == [0, "done\n"], report
    assert _stamp(victim) == before, f"a reused cage changed the metadata of a file outside every grant: {report}"
    assert "chmod=0" not in report["attack"][1] and "touch=0" not in report["attack"][1], report
    # twin: the policy still works after the retarget — the write lands where the link now leads
    assert report["twin"][:2] == [0, "wrote\n"], report
    with open(os.path.join(w, "b", "t", "made")) as fh:
        assert fh.read() == "twin\n"


def _scenario(script: str, base, nobody: bool = False) -> tuple:
    """`_layout` in `base`, then `script` (RETARGET, PREBUILT) run over it — by this test's
    interpreter, or as uid 65534 owning the whole layout — with its own cache: (w, victim, the
    victim's stamp before, the script's report)."""
    w, victim_dir, victim = _layout(str(base))
    if nobody:
        subprocess.run(["chown", "-R", f"{NOBODY}:{NOBODY}", str(base)], check=True)
    before = _stamp(victim)
    if nobody:
        proc = subprocess.run(
            as_user(["/usr/bin/python3", "-c", script, str(base), victim_dir, victim]),
            capture_output=True, text=True, timeout=120, cwd=str(base),
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": SRC, "HOME": str(base),
                 "SANDBOY_CACHE_DIR": os.path.join(str(base), "cache")})
    else:
        proc = subprocess.run([sys.executable, "-c", script, str(base), victim_dir, victim],
                              capture_output=True, text=True, timeout=120,
                              env={**os.environ, "SANDBOY_CACHE_DIR": str(base / "cache")})
    assert proc.returncode == 0, proc.stderr
    return w, victim, before, json.loads(proc.stdout)


def _scenario_as_nobody(scenario: str, check) -> None:
    """`_scenario` run by uid 65534 in a directory it can reach (not pytest's tmp_path), its report
    judged by `check`."""
    skip_unless_nobody_can_run()
    with world_readable_tmp("sandboy-cage8-") as base:
        w, victim, before, report = _scenario(scenario, base, nobody=True)
        check(report, w, victim, before)


@TIER
def test_a_retargeted_link_cannot_make_a_reused_cage_attach_a_host_directory(tmp_path):
    w, victim, before, report = _scenario(RETARGET, tmp_path)
    _check_retarget(report, w, victim, before)


@TIER
def test_as_an_ordinary_user_a_retargeted_link_cannot_reach_their_own_key(tmp_path):
    """The same as uid 65534: the victim is that user's own 0600 key, outside every grant."""
    _scenario_as_nobody(RETARGET, _check_retarget)


def _check_prebuilt(report, w, victim, before) -> None:
    assert report["twin"][:2] == [0, "wrote\n"], report
    with open(os.path.join(w, "b", "t", "made")) as fh:  # (the twin ran before a was moved to b)
        assert fh.read() == "twin\n"
    assert report["retarget"][:2] == [0, "done\n"], report
    assert _stamp(victim) == before, f"a prebuilt cage changed the metadata of a file outside every grant: {report}"
    rc, out, error = report["attack"]
    assert rc == 125 and out == "" and "Too many levels of symbolic links" in error, report
    assert "write root" in error, report


@TIER
def test_a_prebuilt_cage_refuses_to_attach_a_write_root_through_a_swapped_in_link(tmp_path):
    w, victim, before, report = _scenario(PREBUILT, tmp_path)
    _check_prebuilt(report, w, victim, before)


@TIER
def test_as_an_ordinary_user_a_prebuilt_cage_refuses_a_swapped_in_link(tmp_path):
    _scenario_as_nobody(PREBUILT, _check_prebuilt)


def test_without_openat2_the_followed_write_roots_are_reported(tmp_path, monkeypatch):
    """Where a filter refuses openat2 the write roots are looked up as before (symlinks followed):
    said in `degraded`, so `compat.landlock = "strict"` refuses."""
    from sandboy import Policy
    from sandboy.confine.cage import build

    if not namespaces.availability()[0]:
        pytest.skip("no namespace tier here")
    monkeypatch.setattr(namespaces, "_OPENAT2", [False])
    work = tmp_path / "work"
    work.mkdir()
    policy = {"version": 1, "fs": {"read": ["/usr"], "exec": ["/usr/bin"], "write": [str(work)]}}
    cage = build(Policy.from_mapping(policy, "<test>"), cwd=str(work), reusable=False)
    try:
        assert any("openat2 is refused here" in d for d in cage.degraded), cage.degraded
        assert not any("no symlink on the way" in label for label, _ in cage.tier.plan())
    finally:
        cage.close()
    monkeypatch.setattr(namespaces, "_OPENAT2", [True])
    cage = build(Policy.from_mapping(policy, "<test>"), cwd=str(work), reusable=False)
    try:
        assert not any("openat2" in d for d in cage.degraded), cage.degraded
        assert any("no symlink on the way" in label for label, _ in cage.tier.plan())
    finally:
        cage.close()


# --- held: a gate step and its memory and pids cgroups ---------------------------------------

# Run by a gate step: raise its own memory bound, turn its OOM handling back on, leave for the
# parent group (memory and pids); then allocate 96 MiB under a 64 MiB bound, which only a raised
# bound would let through.
CGROUP_STEP = r"""
import errno, json, os
def attempt(path, data):
    try:
        with open(path, "w") as fh:
            fh.write(data)
        return "ok"
    except OSError as exc:
        return errno.errorcode[exc.errno]
before = open("/proc/self/cgroup").read()
rows = [line.split(":", 2) for line in before.splitlines()]
memory = [path for _, names, path in rows if "memory" in names.split(",")]
pids = [path for _, names, path in rows if "pids" in names.split(",")]
if memory:  # cgroup v1
    group, names = "/sys/fs/cgroup/memory" + memory[0], ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "memory.oom_control")
else:
    group, names = "/sys/fs/cgroup" + [path for n, _, path in rows if n == "0"][0], ("memory.max", "memory.swap.max", "memory.oom.group", "pids.max")
out = {name: attempt(os.path.join(group, name), "0" if "oom" in name else str(1 << 40)) for name in names}
out["leave"] = attempt(os.path.join(os.path.dirname(group), "cgroup.procs"), str(os.getpid()))
if pids and memory:
    out["leave pids"] = attempt("/sys/fs/cgroup/pids" + os.path.dirname(pids[0]) + "/cgroup.procs", str(os.getpid()))
    # v1's `tasks`, through which the command joins its memory group and the gate its pids group
    # (a thread moving itself: session 9): the same refusal for the step
    out["leave tasks"] = attempt(os.path.join(os.path.dirname(group), "tasks"), "0")
    out["leave pids tasks"] = attempt("/sys/fs/cgroup/pids" + os.path.dirname(pids[0]) + "/tasks", "0")
out["moved"] = open("/proc/self/cgroup").read() != before
print("RESULT " + json.dumps(out), flush=True)
hog = b"x" * (96 << 20)
print("SURV" + "IVED", len(hog))
"""


@pytest.mark.parametrize("tier", [True, False], ids=["tier", "fallback"])
def test_a_gate_step_cannot_raise_leave_or_rearm_its_cgroups(tmp_path, tier):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "gate"))
    from gatekit import by_name, make_repo, run_json

    from sandboy.confine.cgroup import MemoryCgroup

    if not MemoryCgroup.available():
        pytest.skip("needs root and a writable memory cgroup")
    if tier and not namespaces.availability()[0]:
        pytest.skip("no namespace tier here")
    repo = make_repo(tmp_path, """
        [[step]]
        name = "cgroups"
        policy = "small"
        run = "python3 step.py"
        timeout = 60

        [policy.small]
        version = 1
        fs.read = ["/usr", "/lib", "/lib64", "/bin", "/etc", "/proc", "."]
        fs.exec = ["/usr/bin", "/bin", "/usr/lib", "/lib", "/lib64"]
        limits.memory_mib = 64
        limits.processes = 20
    """, files={"step.py": CGROUP_STEP})
    home = tmp_path / "home"
    home.mkdir()
    proc, report = run_json(repo, tmp_path, home=home, env={} if tier else {"SANDBOY_NAMESPACES": "0"})
    step = by_name(report)["cgroups"]
    line = next((l for l in step["output_tail"].splitlines() if "RESULT " in l), None)
    assert line is not None, (step["status"], step.get("error"), step["output_tail"])
    result = json.loads(line.split("RESULT ", 1)[1])
    refused = "EROFS" if tier else "EACCES"
    assert result.pop("moved") is False, result
    assert set(result.values()) == {refused}, result
    # host side: the bound was not raised — the 96 MiB the step then took ended it, as out of memory
    assert "SURVIVED" not in step["output_tail"], step
    assert step["status"] == "killed" and "out of memory" in step["error"], step
    memory = step["enforced"]["memory"]
    assert memory["cgroup_mib"] == 64 and memory["peak_mib"] <= 64, memory


# --- held: leftovers racing the sweep ---------------------------------------------------------

# Chains of processes that each fork and exit at once: every process lives for one fork, so a
# sweep's /proc walk finds pids already gone and misses the ones born since. Each chain stops by
# itself after `seconds` (the shared machine is never left with a runaway).
RACER = r"""
import os, sys, time
marker, seconds, chains = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
end = time.time() + seconds
for _ in range(chains - 1):
    if os.fork() == 0:
        break
while time.time() < end:
    if os.fork():
        os._exit(0)
"""


@pytest.mark.parametrize("identity", ["root", "nobody"])
def test_chains_of_forking_leftovers_do_not_outlive_a_supervised_run(tmp_path, identity):
    """Without the tier (the sweep walks /proc; under it the PID namespace ends everything): 60
    chains forking as fast as they can, the command itself gone at once. The run returns and no
    process of it is left (host /proc), as root and as uid 65534."""
    if identity == "nobody":
        skip_unless_nobody_can_run()
    marker = f"sandboy-racer-{os.urandom(4).hex()}"
    with world_readable_tmp("sandboy-cage8-") as base:
        (base / "racer.py").write_text(RACER)
        (base / "policy.toml").write_text(
            'version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc", "%s"]\nexec = ["/usr/bin", "/bin"]\n'
            '[limits]\nwall_seconds = 20\n' % base)
        argv = ["/usr/bin/python3", "-m", "sandboy", "run", "--policy", str(base / "policy.toml"), "--",
                "/usr/bin/python3", str(base / "racer.py"), marker, "15", "60"]
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": SRC, "HOME": str(base), "SANDBOY_NAMESPACES": "0",
               "SANDBOY_CACHE_DIR": str(base / "cache")}
        if identity == "nobody":
            argv = as_user(argv)
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, cwd=str(base))
            assert proc.returncode == 0, proc.stderr
            time.sleep(0.5)
            assert mentioning(marker) == [], "a process of the run outlived it"
        finally:
            for pid in mentioning(marker):
                try:
                    os.kill(pid, 9)
                except OSError:
                    pass


# --- a write root holding a mount of the kernel's own file systems ---------------------------

def _in_private_mount_namespace(setup: str, argv: list, env: dict) -> subprocess.CompletedProcess:
    """`setup` (shell, e.g. a proc mounted inside a write root), then argv, in a mount namespace
    of their own made private first: nothing mounted here reaches the host's mount table."""
    script = 'mount --make-rprivate / && ' + setup + ' && exec "$@"'
    return subprocess.run(["unshare", "-m", "/bin/sh", "-c", script, "sh", *argv],
                          capture_output=True, text=True, timeout=60, env=env)


KERNEL_MOUNTS = {
    # a chroot's /proc (debootstrap, mock, a container's rootfs): as root the command wrote the
    # host's sysctls (kernel.core_pattern runs a program as root on the next crash) and
    # /proc/sysrq-trigger; the probe writes a sysctl's own value back, harmless either way
    "proc": ("mount -t proc proc {mp}", "v=$(cat {mp}/sys/fs/lease-break-time) && "
                                       "echo $v > {mp}/sys/fs/lease-break-time && touch {marker}"),
    # a chroot's /dev bound from the host: raw block devices, read and written as root (the probe
    # reads a loop device the test attached to a file holding a secret)
    "devtmpfs": ("mount --bind /dev {mp}", "grep -q {secret} {mp}/{disk} && touch {marker}"),
    # a chroot's /sys: the kernel's and drivers' settings (uevent_helper runs a program as root
    # where it is built in); the probe writes a KSM setting's own value back
    "sysfs": ("mount -t sysfs sysfs {mp}", "v=$(cat {mp}/kernel/mm/ksm/sleep_millisecs) && "
                                         "echo $v > {mp}/kernel/mm/ksm/sleep_millisecs && touch {marker}"),
}


SECRET = "TOPSECRET-on-a-loop-device-8"


def _loop_device(tmp_path):
    """A loop device (its name under /dev) attached to a file holding SECRET, or None."""
    image = tmp_path / "image"
    image.write_bytes(SECRET.encode() + b"\0" * (1 << 20))
    proc = subprocess.run(["losetup", "-f", "--show", str(image)], capture_output=True, text=True)
    return os.path.basename(proc.stdout.strip()) if proc.returncode == 0 else None


@pytest.mark.parametrize("tier", [True, False], ids=["tier", "fallback"])
@pytest.mark.parametrize("fstype", sorted(KERNEL_MOUNTS))
def test_a_write_root_holding_a_kernel_file_system_is_refused(tmp_path, fstype, tier):
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root (and unshare) to mount inside a write root")
    if tier and not namespaces.availability()[0]:
        pytest.skip("no namespace tier here")
    root = tmp_path / "chroot"
    mp = root / "mnt"
    mp.mkdir(parents=True)
    marker = root / "GOT-THROUGH"
    made = root / "made-by-the-twin"
    disk = _loop_device(tmp_path) if fstype == "devtmpfs" else None
    if fstype == "devtmpfs" and not disk:
        pytest.skip("no loop device can be attached here")
    try:
        _kernel_mount_probe(tmp_path, root, mp, marker, made, fstype, tier, disk)
    finally:
        if disk:
            subprocess.run(["losetup", "-d", f"/dev/{disk}"], capture_output=True)


def _kernel_mount_probe(tmp_path, root, mp, marker, made, fstype, tier, disk):
    mount, attack = KERNEL_MOUNTS[fstype]
    policy = tmp_path / "policy.toml"
    policy.write_text(
        f'version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc", "/bin", "{root}"]\nexec = ["/usr/bin", "/bin"]\n'
        f'write = ["{root}"]\n')
    env = {**os.environ, "SANDBOY_CACHE_DIR": str(tmp_path / "cache"), "SANDBOY_NAMESPACES": "1" if tier else "0"}
    script = attack.format(mp=mp, marker=marker, disk=disk, secret=SECRET)
    run = [os.path.join(os.path.dirname(sys.executable), "sandboy"), "run", "--policy", str(policy), "--",
           "/bin/sh", "-c", script]
    proc = _in_private_mount_namespace(mount.format(mp=mp), run, env)
    assert not marker.exists(), f"the command reached the host's kernel through {fstype} in a write root: {proc.stderr}"
    assert proc.returncode == 125, (proc.returncode, proc.stderr)
    assert str(mp) in proc.stderr and fstype in proc.stderr, proc.stderr
    # twin: without the mount the same policy runs, and writes its write root
    run[-1] = f"touch {made}"
    proc = subprocess.run(run, capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0 and made.exists(), proc.stderr


# Run in a private mount namespace: a cage built (or first run through `sandboy.run`, then kept)
# while the write root holds no such mount; proc is mounted there afterwards (as mock does between
# the steps of a chroot build); the next run must not get it.
MOUNTED_LATER = r"""
import json, os, subprocess, sys, tempfile
from sandboy import Policy, run
from sandboy.confine.cage import build
from sandboy.errors import CageError

root, marker, how = sys.argv[1:4]
policy = Policy.from_mapping({"version": 1, "fs": {"read": ["/usr", "/lib", "/lib64", "/bin", "/etc"],
                                                    "exec": ["/usr/bin", "/bin"], "write": [root]}}, "<probe>")
attack = (f"v=$(cat {root}/mnt/sys/fs/lease-break-time) && echo $v > {root}/mnt/sys/fs/lease-break-time "
          f"&& touch {marker}")
cage = build(policy, cwd=root) if how == "prebuilt" else policy

def sh(script):
    try:
        result = run(["/bin/sh", "-c", script], cage, cwd=root, timeout=30)
    except CageError as exc:
        return 125, str(exc)
    return result.returncode, result.error or ""

report = {"twin": sh(f"touch {root}/made")}
subprocess.run(["mount", "-t", "proc", "proc", f"{root}/mnt"], check=True)
report["attack"] = sh(attack)
print(json.dumps(report))
"""


@pytest.mark.parametrize("how", ["prebuilt", "reused"])
def test_a_kernel_file_system_mounted_after_the_build_is_refused_too(tmp_path, how):
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root (and unshare) to mount inside a write root")
    root = tmp_path / "chroot"
    (root / "mnt").mkdir(parents=True)
    marker = root / "GOT-THROUGH"
    proc = _in_private_mount_namespace("true", [sys.executable, "-c", MOUNTED_LATER, str(root), str(marker), how],
                                       {**os.environ, "SANDBOY_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["twin"][0] == 0 and (root / "made").exists(), report
    assert not marker.exists(), f"the command wrote a host sysctl through a proc mounted since the build: {report}"
    assert report["attack"][0] == 125 and "proc" in report["attack"][1], report


@pytest.mark.parametrize("tier", [True, False], ids=["tier", "fallback (open, shown)"])
def test_a_device_node_under_a_read_grant_opens_nothing_under_the_tier(tmp_path, tier):
    """A chroot's device nodes made on disk (debootstrap's mknod) under a READ grant: as root the
    command read a raw block device there (here a loop device holding a secret, its node made
    by the test). Under the tier every mount but the minimal /dev's is nodev: EACCES. Without
    the tier it still reads (docs/threat-model.md, "What it does not stop"): shown, so the
    probe is real."""
    if os.geteuid() != 0:
        pytest.skip("needs root to make a device node")
    if tier and not namespaces.availability()[0]:
        pytest.skip("no namespace tier here")
    loop = _loop_device(tmp_path)
    if not loop:
        pytest.skip("no loop device can be attached here")
    try:
        chroot = tmp_path / "chroot" / "dev"
        chroot.mkdir(parents=True)
        rdev = os.stat(f"/dev/{loop}").st_rdev
        os.mknod(chroot / "disk", 0o600 | stat.S_IFBLK, rdev)
        policy = tmp_path / "policy.toml"
        policy.write_text('version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc", "/bin", "%s"]\n'
                          'exec = ["/usr/bin", "/bin"]\n' % (tmp_path / "chroot"))
        env = {**os.environ, "SANDBOY_CACHE_DIR": str(tmp_path / "cache"), "SANDBOY_NAMESPACES": "1" if tier else "0"}
        proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "sandboy"), "run", "--policy",
                               str(policy), "--", "/bin/sh", "-c", f"head -c 64 {chroot}/disk; echo; cat /dev/null && echo twin"],
                              capture_output=True, text=True, timeout=60, env=env)
        if tier:
            assert SECRET not in proc.stdout and "Permission denied" in proc.stderr, (proc.stdout, proc.stderr)
        else:
            assert SECRET in proc.stdout, (proc.stdout, proc.stderr)
        assert "twin" in proc.stdout, proc.stderr  # the cage's own /dev still works
    finally:
        subprocess.run(["losetup", "-d", f"/dev/{loop}"], capture_output=True)


def test_as_an_ordinary_user_a_write_root_holding_a_kernel_file_system_is_refused(tmp_path):
    """The refusal does not depend on the uid (as uid 65534 a bound /dev/pts there would be the
    user's other terminals): the same chroot with a proc inside, `sandboy run` as 65534."""
    skip_unless_nobody_can_run()
    if not shutil.which("unshare"):
        pytest.skip("needs unshare")
    with world_readable_tmp("sandboy-cage8-") as base:
        root = base / "chroot"
        (root / "mnt").mkdir(parents=True)
        policy = base / "policy.toml"
        policy.write_text('version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc", "/bin", "%s"]\n'
                          'exec = ["/usr/bin", "/bin"]\nwrite = ["%s"]\n' % (root, root))
        subprocess.run(["chown", "-R", f"{NOBODY}:{NOBODY}", str(base)], check=True)
        run = as_user(["/usr/bin/python3", "-m", "sandboy", "run", "--policy", str(policy), "--", "/bin/sh", "-c",
                       f"ls {root}/mnt/1 > /dev/null && touch {root}/GOT-THROUGH"])
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": SRC, "HOME": str(base), "SANDBOY_CACHE_DIR": str(base / "cache")}
        proc = _in_private_mount_namespace(f"mount -t proc proc {root}/mnt", run, env)
        assert proc.returncode == 125 and f"{root}/mnt" in proc.stderr and "proc" in proc.stderr, proc.stderr
        assert not (root / "GOT-THROUGH").exists()
        # twin: the same policy, no mount
        proc = subprocess.run([*run[:-1], f"touch {root}/made"], capture_output=True, text=True, timeout=60, env=env)
        assert proc.returncode == 0 and (root / "made").exists(), proc.stderr
