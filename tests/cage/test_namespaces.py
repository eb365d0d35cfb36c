"""The namespace tier (issue #7 items 1, 3, 6, 7; docs/adr/0009-namespace-tier.md), tried from the
attacker's side and checked from the host: modes, mtimes, xattrs, a host SysV segment's bytes,
a host process's command line. Each attack has its legitimate twin.

The tier is what `sandboy run` uses wherever the kernel lets this uid make namespaces; these tests
are skipped elsewhere (the fallback is tested below by forcing it with SANDBOY_NAMESPACES=0). The
same attacks against Landlock alone: tests marked `without_namespaces`.
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
from cagekit import BASE_READ, METADATA, to_toml

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from userkit import as_user, world_readable_tmp  # noqa: E402

from sandboy.confine import namespaces, netns_listener  # noqa: E402

pytestmark = [pytest.mark.needs_kernel,
              pytest.mark.skipif(not namespaces.availability()[0],
                                 reason=f"no namespace tier here: {namespaces.availability()[1]}")]

PY = "/usr/bin/python3"


def tier_policy(cage, read=(), write=(), **sections) -> dict:
    return cage.policy(fs={"read": list(read), "exec": ["/usr/bin", "/bin"], "write": list(write)}, **sections)


def py(cage, code: str, *args, policy):
    """Run a Python snippet in the cage (the system python3, as any build step would)."""
    return cage.run(argv=[PY, "-c", code, *map(str, args)], policy=policy)


def _xattrs_work(path) -> bool:
    try:
        os.setxattr(path, "user.sandboy-probe", b"1")
        os.removexattr(path, "user.sandboy-probe")
        return True
    except OSError:
        return False


def test_metadata_outside_the_write_roots_is_refused(cage):
    """Item 1: chmod/utime/setxattr/chown of a file the uid owns, outside every grant. Landlock
    does not mediate them; a read-only mount does (EROFS). Checked on the host afterwards."""
    outside = cage.root / "outside"
    outside.mkdir()
    secret = outside / "secret"
    secret.write_text("secret\n")
    os.chmod(secret, 0o600)
    before = os.stat(secret)
    r = py(cage, METADATA, secret, policy=tier_policy(cage, write=[str(cage.work)]))
    answers = dict(line.split() for line in r.out.splitlines())
    assert answers == {"chmod": "EROFS", "utime": "EROFS", "setxattr": "EROFS", "chown": "EROFS"}, r
    after = os.stat(secret)
    assert stat.S_IMODE(after.st_mode) == 0o600 and after.st_mtime_ns == before.st_mtime_ns
    assert after.st_uid == before.st_uid and "user.sandboy" not in os.listxattr(secret)


def test_metadata_inside_a_write_root_still_works(cage):
    """The twin: chmod, touch (utime) and setxattr inside a write root reach the host's file."""
    mine = cage.work / "mine"
    mine.write_text("x\n")
    os.chmod(mine, 0o600)
    r = py(cage, METADATA, mine, policy=tier_policy(cage, write=[str(cage.work)]))
    answers = dict(line.split() for line in r.out.splitlines())
    assert answers["chmod"] == "ok" and answers["utime"] == "ok" and answers["chown"] == "ok", r
    assert stat.S_IMODE(os.stat(mine).st_mode) == 0o777
    assert os.stat(mine).st_mtime == 1
    if _xattrs_work(mine):
        assert answers["setxattr"] == "ok" and os.getxattr(mine, "user.sandboy") == b"planted"
    r = py(cage, "import os, sys; os.chmod(sys.argv[1], 0o644); print('ok')", mine,
           policy=tier_policy(cage, write=[str(cage.work)]))
    assert r.out.strip() == "ok" and stat.S_IMODE(os.stat(mine).st_mode) == 0o644, r


LIST_DEV = "import os; print(' '.join(sorted(os.listdir('/dev'))))"


def test_dev_is_minimal_even_when_the_policy_grants_it(cage):
    """Item 3: `read /dev` opened raw block devices and other terminals. In the cage /dev holds
    only the minimal set, and a pty of the host (opened here, its slave named) is not there."""
    master, slave = os.openpty()
    try:
        name = os.ttyname(slave)
        policy = tier_policy(cage, read=["/dev"])
        r = py(cage, LIST_DEV, policy=policy)
        assert r.out.split() == ["fd", "full", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin",
                                 "stdout", "urandom", "zero"], r
        blocks = [d for d in os.listdir("/dev") if stat.S_ISBLK(os.stat(f"/dev/{d}").st_mode)]
        for dev in [*blocks[:3], name]:
            r = cage.run("read", dev, policy=policy)
            assert r.out == "ENOENT", (dev, r)
        os.write(master, b"typed on the host\n")
        time.sleep(0.1)
        assert os.read(slave, 100) == b"typed on the host\n"  # nobody inside took it
    finally:
        os.close(master)
        os.close(slave)


DEV_TWIN = r"""
import os, pty
from multiprocessing import shared_memory
assert open("/dev/null", "rb").read() == b""
assert len(open("/dev/urandom", "rb").read(16)) == 16
open("/dev/null", "wb").write(b"x")
shm = shared_memory.SharedMemory(create=True, size=64)   # POSIX shm: /dev/shm
shm.buf[:5] = b"hello"
other = shared_memory.SharedMemory(shm.name)
assert bytes(other.buf[:5]) == b"hello"
other.close(); shm.close(); shm.unlink()
master, slave = pty.openpty()                             # a pty of the cage's own devpts
os.write(slave, b"ping\n")
assert os.read(master, 100).strip() == b"ping"
print("ok", os.ttyname(slave))
"""


def test_dev_twin_devices_posix_shm_and_a_private_pty_work(cage):
    r = py(cage, DEV_TWIN, policy=tier_policy(cage))
    assert r.out.startswith("ok /dev/pts/"), r


class HostSegment:
    """A SysV segment (holding a marker), queue and semaphore set of the host, made and removed
    outside the cage under a key unique to this test."""

    def __init__(self, probe):
        self.probe = probe
        self.key = 0x5C000000 | (os.getpid() & 0xFFFF) << 4 | (id(self) & 0xF)
        self.marker = f"host-secret-{os.getpid()}"
        out = subprocess.run([probe, "sysv-make", hex(self.key), self.marker], capture_output=True, text=True).stdout
        assert out.startswith("ok"), out
        self.shm = int(out.split()[1])

    def contents(self) -> str:
        return subprocess.run([self.probe, "sysv-show", hex(self.key)], capture_output=True, text=True).stdout.strip()

    def remove(self):
        subprocess.run([self.probe, "sysv-remove", hex(self.key)], capture_output=True)


@pytest.fixture
def host_segment(probe):
    segment = HostSegment(probe)
    yield segment
    segment.remove()


def test_host_sysv_ipc_is_out_of_reach_even_when_the_policy_allows_sysv(cage, host_segment):
    """Item 6: with `[ipc] sysv = true` the cage may use SysV IPC — its own, in its IPC namespace:
    the host's segment is not found by key nor by id, its bytes stay, and a queue made inside
    does not outlive the run."""
    policy = cage.policy(ipc={"sysv": True})
    key = hex(host_segment.key)
    assert cage.run("sysv", "shmget", key, policy=policy).out == "ENOENT"
    assert cage.run("sysv", "msgget", key, policy=policy).out == "ENOENT"
    r = cage.run("sysv", "shm-write", host_segment.shm, "overwritten", policy=policy)
    assert not r.ok, r
    assert host_segment.contents() == f"ok {host_segment.marker}"
    other = hex(host_segment.key + 1)
    assert cage.run("sysv", "msgget-create", other, policy=policy).ok  # the twin: its own queue works
    assert subprocess.run(["ipcs", "-q"], capture_output=True, text=True).stdout.find(f"0x{host_segment.key + 1:08x}") < 0


def test_host_processes_are_invisible(cage):
    """Item 7: /proc/PID/cmdline of a host process (here one started by the test, named with a
    unique marker, as `mysql --password=...` would be) is not reachable; /proc/self still works."""
    marker = f"sbx-secret-{os.getpid()}-{time.monotonic_ns()}"
    victim = subprocess.Popen(["/bin/sleep", "60"], executable="/bin/sleep")
    named = subprocess.Popen([marker, "60"], executable="/bin/sleep")
    try:
        code = ("import os, sys\n"
                "seen = [p for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid()\n"
                "        and sys.argv[1].encode() in open(f'/proc/{p}/cmdline', 'rb').read()]\n"
                "print(len([p for p in os.listdir('/proc') if p.isdigit()]), seen)\n"
                "print(open('/proc/self/cmdline', 'rb').read().split(b'\\0')[0].decode())\n"
                "try:\n    os.kill(int(sys.argv[2]), 0); print('signalled')\n"
                "except OSError as exc:\n    print(exc.errno)\n")
        r = py(cage, code, marker, victim.pid, policy=tier_policy(cage, read=["/proc"]))
        lines = r.out.splitlines()
        count, seen = lines[0].split(" ", 1)
        assert seen == "[]" and int(count) <= 3, r  # the init and the command itself only
        assert lines[1] == PY  # the twin: /proc/self is the command's own
        assert lines[2] != "signalled"
        with open(f"/proc/{named.pid}/cmdline", "rb") as fh:
            assert marker.encode() in fh.read()  # the marker is really there, on the host
    finally:
        for proc in (victim, named):
            proc.kill()
            proc.wait()


GIT = r"""
set -e
export HOME="$PWD" GIT_CONFIG_NOSYSTEM=1 GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@x GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@x
git init -q fresh && cd fresh && echo hi > a && git add a && git commit -qm one && cd ..
git clone -q "$1" copy && cd copy && echo more >> README && git commit -qam two
git log --oneline | wc -l
"""


def test_git_init_commit_and_clone_work_in_the_cage(cage):
    if not shutil.which("git"):
        pytest.skip("git is not installed")
    origin = cage.root / "origin"
    subprocess.run(["git", "init", "-q", str(origin)], check=True)
    (origin / "README").write_text("hello\n")
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@x", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@x")
    subprocess.run(["git", "-C", str(origin), "add", "README"], check=True, env=env)
    subprocess.run(["git", "-C", str(origin), "commit", "-qm", "first"], check=True, env=env)
    policy = cage.policy(fs={"read": ["/etc", str(origin)], "exec": ["/usr/bin", "/bin", "/usr/lib/git-core"],
                             "write": [str(cage.work)]}, env={"pass": ["PATH"]})
    r = cage.run(argv=["/bin/sh", "-c", GIT, "sh", str(origin)], policy=policy)
    assert r.rc == 0 and r.out.strip() == "2" and "fatal" not in r.err, r
    assert (cage.work / "fresh" / ".git").is_dir() and (cage.work / "copy" / "README").read_text() == "hello\nmore\n"


def test_tmp_is_private_per_run_and_the_cage_is_reused(cage):
    """{tmp}: a fresh tmpfs at the cage's fixed path for every run, so the same compiled cage
    serves the next run (no rebuild) and a run never sees the previous one's files."""
    from sandboy import Policy
    from sandboy.confine import reuse

    policy = Policy.from_mapping(tier_policy(cage, write=["{tmp}"]), "<test>")
    first, owned = reuse.for_run(policy, cwd=str(cage.work))
    again, _ = reuse.for_run(policy, cwd=str(cage.work))
    assert again is first and not owned
    code = "import os; print(sorted(os.listdir(os.environ['TMPDIR']))); open(os.environ['TMPDIR'] + '/x', 'w')"
    for _ in range(2):
        r = py(cage, code, policy=tier_policy(cage, write=["{tmp}"]))
        assert r.out.strip() == "[]", r
    assert os.listdir(first.ctx.tmp) == []  # nothing reached the host's directory


def test_exec_mode_passes_the_status_and_a_signal_through(cage):
    assert cage.run("exit", "7", via="cli").rc == 7
    r = cage.run(argv=["/bin/sh", "-c", "kill -TERM $$"], policy=tier_policy(cage), via="cli")
    assert r.rc == -15, r  # the CLI dies of the same signal, as the command did
    r = cage.run(argv=["/bin/sh", "-c", "kill -TERM $$"], policy=tier_policy(cage))
    assert r.rc == 128 + 15 and "signal" not in r.err, r


def test_report_says_what_the_tier_does(cage):
    r = cage.cli(["--dry-run", "--json"], tier_policy(cage, write=[str(cage.work)]))
    ns = json.loads(r.out)["enforced"]["namespaces"]
    assert ns["user"] and ns["mount"] and ns["ipc"] and ns["pid"] and ns["net"]
    assert ns["writable"] == [os.path.realpath(cage.work)]
    with_net = cage.policy(net={"connect_tcp": [443]})
    r = cage.cli(["--dry-run", "--json"], with_net)
    assert json.loads(r.out)["enforced"]["namespaces"]["net"] is False  # a network grant: the host's


# --- the fallback: where the kernel refuses namespaces ------------------------------------------


def test_fallback_says_exactly_what_is_no_longer_prevented(cage, monkeypatch):
    monkeypatch.setenv(namespaces.FORCE_OFF_ENV, "0")
    policy = tier_policy(cage, read=["/dev", "/proc"], write=["{tmp}"], ipc={"sysv": True})
    r = cage.cli(["--dry-run", "--json"], policy)
    doc = json.loads(r.out)
    lost = [d for d in doc["degraded"] if d.startswith("namespaces unavailable")]
    assert len(lost) == 6 and all(namespaces.FORCE_OFF_ENV in d for d in lost), lost
    for text in ("chmod/chown/utimensat/setxattr", "raw block devices", "host SysV IPC", "host processes",
                 "{tmp} is a per-run host directory", "the host's network interfaces"):
        assert any(text in d for d in lost), text
    assert doc["enforced"]["namespaces"] == {"available": False, "reason": "SANDBOY_NAMESPACES=0"}
    status = cage.root / "status.json"
    r = cage.cli(["--status-json", str(status), "--", cage.probe, "exit", "0"], policy)
    assert r.rc == 0 and "degraded: namespaces unavailable" in r.err
    assert len([d for d in json.loads(status.read_text())["degraded"] if d.startswith("namespaces")]) == 6
    from cagekit import SANDBOY

    doctor = subprocess.run([SANDBOY, "doctor", "--json"], capture_output=True, text=True,
                            env=dict(os.environ, SANDBOY_CACHE_DIR=str(cage.root / "cache")))
    report = json.loads(doctor.stdout)
    assert report["protections"]["namespace_tier"] is False
    assert any("namespace tier is unavailable (SANDBOY_NAMESPACES=0)" in n and "chmod/chown" in n
               for n in report["notes"]), report["notes"]
    # without the tier the metadata attack of item 1 works again, as the report said
    outside = cage.root / "outside"
    outside.write_text("x")
    os.chmod(outside, 0o600)
    r = py(cage, METADATA, outside, policy=tier_policy(cage))
    assert "chmod ok" in r.out and stat.S_IMODE(os.stat(outside).st_mode) == 0o777, r


def test_fallback_under_strict_refuses_125(cage, monkeypatch):
    monkeypatch.setenv(namespaces.FORCE_OFF_ENV, "0")
    strict = dict(tier_policy(cage), compat={"landlock": "strict"})
    r = cage.cli(["--", cage.probe, "exit", "0"], strict)
    assert r.rc == 125 and "namespaces unavailable" in r.err, r
    monkeypatch.delenv(namespaces.FORCE_OFF_ENV)
    assert cage.cli(["--", cage.probe, "exit", "0"], strict).rc == 0  # the twin: with the tier it runs


# --- as an ordinary user, for real ---------------------------------------------------------------

NOBODY = 65534


@pytest.fixture
def nobody():
    """A world-readable directory owned by uid 65534, and `sandboy run` as that user with no
    capabilities, from the system python3 over this source tree (docs/findings.md, "Testing as an ordinary user")."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to become uid 65534")
    with world_readable_tmp("sandboy-ns-") as tmp:
        yield from _nobody(tmp)


def _nobody(tmp):
    base = tmp / "nobody"
    base.mkdir()
    for sub in ("outside", "work"):
        (base / sub).mkdir()
    for path in (base, base / "outside", base / "work"):
        os.chown(path, NOBODY, NOBODY)
    src = os.path.dirname(os.path.dirname(os.path.abspath(sys.modules["sandboy"].__file__)))

    def run(script: str, policy: dict, env=None):
        path = base / "policy.toml"
        path.write_text(to_toml(policy))
        os.chmod(path, 0o644)
        argv = as_user(["/usr/bin/python3", "-m", "sandboy", "run", "--policy", str(path), "--", "/bin/sh", "-c",
                        script])
        return subprocess.run(argv, capture_output=True, text=True, cwd=base / "work", timeout=60,
                              env={"PATH": "/usr/bin:/bin", "PYTHONPATH": src, "HOME": str(base),
                                   "SANDBOY_CACHE_DIR": str(base / "cache"), **(env or {})})

    if run("true", {"version": 1, "fs": {"read": BASE_READ, "exec": ["/usr/bin", "/bin"]}}).returncode != 0:
        pytest.skip("the system python3 cannot import sandboy from this tree as uid 65534")
    yield base, run


def test_as_an_ordinary_user_the_tier_holds(nobody, probe):
    """The unprivileged path for real (a user namespace mapping 65534 to itself): chmod of the
    user's own file outside the write roots gets EROFS (without the tier it succeeds: the twin
    below), its write root still works, no host process shows in /proc, /dev is the minimal one
    and the user's own host SysV segment is out of reach."""
    base, run = nobody
    probe_binary = probe
    key = base / "outside" / "id_rsa"
    key.write_text("key\n")
    os.chown(key, NOBODY, NOBODY)
    os.chmod(key, 0o600)
    policy = {"version": 1, "fs": {"read": [*BASE_READ, "/proc"], "exec": ["/usr/bin", "/bin"],
                                   "write": [str(base / "work")]}}
    script = (f"chmod 644 {key} 2>&1 | grep -o 'Read-only file system'; touch mine && chmod 640 mine && echo twin; "
              "ls /proc | grep -c '^[0-9]'; id -u")
    r = run(script, policy)
    out = r.stdout.split()
    assert r.returncode == 0 and out[:2] == ["Read-only", "file"], r
    assert out[-3] == "twin" and int(out[-2]) <= 5 and out[-1] == str(NOBODY), r
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(base / "work" / "mine").st_mode) == 0o640
    # item 3 and item 6 as this user: the minimal /dev, and a SysV segment of the user's own
    # (made outside, by key) that the cage cannot find even with `[ipc] sysv = true`
    probe = base / "probe"
    shutil.copy(probe_binary, probe)
    os.chmod(probe, 0o755)
    sysv_key = hex(0x5D000000 | (os.getpid() & 0xFFFF) << 4)
    as_nobody = as_user()
    made = subprocess.run([*as_nobody, str(probe), "sysv-make", sysv_key, "nobody-secret"], capture_output=True, text=True)
    assert made.stdout.startswith("ok"), made
    try:
        sysv = {**policy, "fs": {**policy["fs"], "exec": ["/usr/bin", "/bin", str(base)]}, "ipc": {"sysv": True}}
        r = run(f"ls /dev | tr '\\n' ' '; {probe} sysv shmget {sysv_key}", sysv)
        assert r.stdout.split() == ["fd", "full", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin",
                                    "stdout", "urandom", "zero", "ENOENT"], r
        shown = subprocess.run([*as_nobody, str(probe), "sysv-show", sysv_key], capture_output=True, text=True)
        assert shown.stdout.strip() == "ok nobody-secret", shown
    finally:
        subprocess.run([*as_nobody, str(probe), "sysv-remove", sysv_key], capture_output=True)
    # the same attack with the tier forced off: the ordinary user's own key becomes world-readable
    r = run(f"chmod 644 {key} && echo changed", policy, env={namespaces.FORCE_OFF_ENV: "0"})
    assert "changed" in r.stdout and stat.S_IMODE(os.stat(key).st_mode) == 0o644, r


def test_fallback_never_shares_a_host_tmp_between_api_runs(cage, monkeypatch):
    """Without the tier `{tmp}` is a host directory: API runs may overlap, so `for_run` builds a
    cage (and a directory) per run instead of reusing one (reuse.Reuse)."""
    from sandboy import Policy
    from sandboy.confine import reuse

    monkeypatch.setenv(namespaces.FORCE_OFF_ENV, "0")
    policy = Policy.from_mapping(tier_policy(cage, write=["{tmp}"]), "<test>")
    first, owned_first = reuse.for_run(policy, cwd=str(cage.work))
    second, owned_second = reuse.for_run(policy, cwd=str(cage.work))
    try:
        assert owned_first and owned_second and first.ctx.tmp != second.ctx.tmp
    finally:
        first.close()
        second.close()


def test_exec_mode_passes_a_signal_on_to_the_command(cage):
    """`sandboy run` (exec mode) waits outside the PID namespace: a SIGTERM sent to it reaches
    the command, which handles it; its exit status comes back through the init."""
    policy_path = cage.root / "policy.toml"
    policy_path.write_text(to_toml(tier_policy(cage)))
    from cagekit import SANDBOY

    script = "trap 'echo got TERM; exit 3' TERM; echo ready; while :; do sleep 0.05; done"
    proc = subprocess.Popen([SANDBOY, "run", "--policy", str(policy_path), "--", "/bin/sh", "-c", script],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=cage.work, start_new_session=True,
                            env=dict(os.environ, SANDBOY_CACHE_DIR=str(cage.root / "cache")))
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(15)
        out, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 3 and out.strip() == "got TERM", (proc.returncode, out, err)


def test_a_cage_runs_past_its_ruleset_renewal(cage):
    """Each run adds its private mounts' Landlock rules to the cage's shared ruleset; every
    RULESET_RENEW_RUNS runs the parent swaps in a fresh copy under the same fd (cage.Cage.started).
    Runs before, across and after the swap keep the same rights."""
    from sandboy import Policy, run
    from sandboy.confine import cage as cagemod

    built = cagemod.build(Policy.from_mapping(tier_policy(cage, read=["/proc"], write=[str(cage.work)]), "<t>"),
                          cwd=str(cage.work))
    try:
        fd = built.ruleset.fd
        null = os.open(os.devnull, os.O_RDWR)
        try:
            for i in range(namespaces.RULESET_RENEW_RUNS + 2):
                argv = ["/bin/sh", "-c", f"head -c1 /proc/self/status >/dev/null && echo {i} > out && "
                                         "! echo x > /etc/sandboy-renewal 2>/dev/null"]
                result = run(argv, built, stdin=null, stdout=null, stderr=null)
                assert result.ok and (cage.work / "out").read_text() == f"{i}\n", (i, result)
        finally:
            os.close(null)
        assert built.ruleset.fd == fd and not os.path.exists("/etc/sandboy-renewal")
    finally:
        built.close()


def test_layer3_helpers_hand_the_parent_a_listener_inside_the_cage_netns(cage):
    """For egress (issue 11): the cage's own network namespace, `lo` brought up, a listener bound
    inside it and sent to the parent over a socketpair; the command connects to it on loopback
    and the parent accepts that connection. The host's loopback is not the cage's."""
    import socket

    from sandboy import Policy
    from sandboy.confine import _libc
    from sandboy.confine import cage as cagemod

    port = 31000 + os.getpid() % 2000
    policy = Policy.from_mapping(cage.policy(net={"connect_tcp": [port]}), "<t>")
    built = cagemod.build(policy, cwd=str(cage.work))
    parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    spare = os.dup(child_end.fileno())
    keep: list = []
    try:
        built.tier.add_in_netns([])  # a network namespace although the policy grants a port
        first = (*netns_listener.plan_loopback_up(),
                 *netns_listener.plan_listen_and_send(port, child_end.fileno(), spare, keep))
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        pid = built.start_child([cage.probe, "tcp-connect", str(port)], (None, None, None), err_w, first)
        os.close(err_w)
        os.close(spare)
        child_end.close()
        listener = socket.socket(fileno=netns_listener.receive_fd(parent_end))
        listener.settimeout(10)
        conn, _ = listener.accept()  # the command's connect(), made inside the cage's netns
        conn.close()
        listener.close()
        _, status = os.waitpid(pid, 0)
        error, reported = _libc.read_child_report(os.read(err_r, 64))
        os.close(err_r)
        assert error is None and os.waitstatus_to_exitcode(reported) == 0, (error, reported)
        with socket.socket() as host_side:  # nothing listens on the host's loopback for it
            assert host_side.connect_ex(("127.0.0.1", port)) != 0
    finally:
        parent_end.close()
        built.close()


MEM_ATTACK = r"""
import os, sys
address, size, target = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
for name, mode in (("read", os.O_RDONLY), ("write", os.O_RDWR)):
    try:
        fd = os.open(f"/proc/{target}/mem", mode)
    except OSError as exc:
        print(name, "refused", exc.errno)
        continue
    try:
        got = os.pread(fd, size, address) if name == "read" else os.pwrite(fd, b"X" * size, address)
        print(name, "DONE", got)
    except OSError as exc:
        print(name, "failed", exc.errno)
print("own", open("/proc/self/status").read().split("\n", 1)[0])
"""


def test_the_command_cannot_reach_the_callers_memory_through_the_init(cage):
    """The namespace's init is cloned with CLONE_VM (_native.c `init_slot_t`): it runs in the
    memory of the process that started the run, not in a copy. The command (pid 2) must not
    reach that memory through it: /proc/1/mem is refused for reading and for writing. Checked
    on the host side: a secret in this process's memory at the address the attacker is given is
    still intact. The run is started from this very process (no supervisor: no timeout)."""
    import ctypes

    from sandboy import Policy, run

    secret = bytearray(b"sandboy-caller-secret-" + os.urandom(8).hex().encode())
    original = bytes(secret)
    address = ctypes.addressof((ctypes.c_char * len(secret)).from_buffer(secret))
    policy = Policy.from_mapping(tier_policy(cage, read=["/proc"]), "<test>")
    out_path = cage.root / "mem.out"
    with open(out_path, "wb") as out:
        result = run([PY, "-c", MEM_ATTACK, str(address), str(len(secret)), "1"], policy, cwd=str(cage.work),
                     stdout=out.fileno(), stderr=out.fileno())
    lines = out_path.read_text().splitlines()
    assert result.returncode == 0, (result, lines)
    assert [line.split()[:2] for line in lines[:2]] == [["read", "refused"], ["write", "refused"]], lines
    assert bytes(secret) == original  # the host side: nothing was written
    assert lines[2].startswith("own Name:"), lines  # its own /proc entries are readable
    if os.geteuid() == 0:
        # the twin: the same attack from outside the cage (root may ptrace) reads and writes
        # this process's memory, so the probe above would have seen it
        uncaged = subprocess.run([PY, "-c", MEM_ATTACK, str(address), str(len(secret)), str(os.getpid())],
                                 capture_output=True, text=True, timeout=30)
        assert original.decode() in uncaged.stdout and bytes(secret) == b"X" * len(secret), uncaged


def test_overlapping_runs_from_threads_each_get_their_own_init(cage):
    """Each init runs on a slot of its own (its stack and the command's start stack, in the
    caller's memory: _native.c `init_slot_t`), reused only once the kernel says that init has
    exited. Runs started from several threads at once must each come back with their own
    output and exit status (a shared or early-reused stack would mix them up or crash)."""
    import tempfile
    from concurrent.futures import ThreadPoolExecutor

    from sandboy import Policy, run
    from sandboy.confine import _libc

    if _libc.IMPLEMENTATION != "native":
        # the pure-Python executor forks a Python child (os.fork): in a process whose other
        # threads hold locks at that moment the child can deadlock; it is the fallback where the
        # C executor is not built, and forks rather than sharing memory
        pytest.skip("overlapping runs from threads need the C executor")
    policy = Policy.from_mapping(tier_policy(cage), "<test>")

    def one(i):
        with tempfile.TemporaryFile() as out:
            r = run(["/bin/sh", "-c", 'echo "run $1"; exit $(($1 % 7))', "sh", str(i)], policy,
                    cwd=str(cage.work), stdout=out.fileno())
            out.seek(0)
            return i, r.returncode, out.read().decode().strip()

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(one, range(40)))
    assert [(code, text) for _, code, text in results] == [(i % 7, f"run {i}") for i in range(40)], results


def test_no_plan_step_acts_on_the_memory_the_child_shares(cage, monkeypatch):
    """The child runs its plan in the caller's memory (the vfork'd child, and under the tier the
    init and the command before its exec: ADR 0021). A step acting on the whole address space
    (PR_SET_DUMPABLE, PR_SET_THP_DISABLE, PR_SET_MM, mlockall, madvise, munmap, ...) would change
    the caller's. Every plan the cage makes (with and without `{tmp}`, a write root, --tty,
    redirected stdio, a session, the netns helpers) holds only per-task / per-process calls."""
    from sandboy import Policy
    from sandboy.confine import _libc, terminal
    from sandboy.confine.cage import build

    per_task = {_libc.SYS_DUP2, _libc.SYS_MOUNT, _libc.SYS_OPEN_TREE, _libc.SYS_MOVE_MOUNT, _libc.SYS_MOUNT_SETATTR,
                _libc.SYS_MKDIRAT, _libc.SYS_OPENAT, _libc.SYS_OPENAT2, _libc.SYS_CLOSE, _libc.SYS_SYMLINKAT, _libc.SYS_WRITE,
                _libc.SYS_CHDIR, _libc.SYS_RT_SIGACTION, _libc.SYS_RT_SIGPROCMASK, _libc.SYS_CLOSE_RANGE,
                _libc.SYS_PRLIMIT64, _libc.SYS_PRCTL, _libc.SYS_CAPSET, _libc.SYS_LANDLOCK_ADD_RULE,
                _libc.SYS_LANDLOCK_RESTRICT_SELF, _libc.SYS_SECCOMP, _libc.SYS_SETSID, _libc.SYS_IOCTL,
                _libc.SYS_SOCKET, _libc.SYS_BIND, _libc.SYS_LISTEN, _libc.SYS_SETSOCKOPT, _libc.SYS_SENDMSG,
                _libc.NR_INIT}
    # prctl options the plan may use: securebits, bounding set, ambient set, no_new_privs
    prctl_options = {28, 24, 47, 38}
    plans = []
    for fs, tty in (({}, False), ({"write": ["{tmp}"]}, False), ({"write": [str(cage.work)]}, False), ({}, True)):
        built = build(Policy.from_mapping(tier_policy(cage, **fs), "<test>"), cwd=str(cage.work), tty=tty)
        try:
            plans.append(built.plan((5, 6, 7), in_netns=netns_listener.plan_loopback_up()))
        finally:
            built.close()
    plans.append(list(terminal.session_steps(ctty=9)))
    monkeypatch.setenv(namespaces.FORCE_OFF_ENV, "0")  # the vfork'd child's plan, without the tier
    built = build(Policy.from_mapping(tier_policy(cage, write=[str(cage.work)]), "<test>"), cwd=str(cage.work))
    try:
        plans.append(built.plan((5, 6, 7)))
    finally:
        built.close()
    seen = set()
    for plan in plans:
        for label, step in plan:
            nr = step[0]
            seen.add(nr)
            assert nr in per_task, (label, nr)
            if nr == _libc.SYS_PRCTL:
                assert step[2] in prctl_options, (label, step[2])
    # the check saw the calls it is about (a plan of nothing would pass it)
    assert {_libc.SYS_MOUNT, _libc.SYS_PRCTL, _libc.SYS_SECCOMP, _libc.NR_INIT} <= seen


def test_the_pinned_directories_of_thousands_of_protected_paths_are_found_in_linear_time() -> None:
    """A step policy may protect thousands of paths, each in its own directory: every directory
    between a write root and a protected path was looked for in a list of those found so far
    (30,000 paths: 20 s of CPU before the command ran). Pure: no file is looked at."""
    from sandboy.confine.namespaces import pinned_ancestors

    started = time.process_time()
    pinned = pinned_ancestors(["/r"], [f"/r/d{i}/e/p" for i in range(30000)])
    assert time.process_time() - started < 5  # ≈ 0.3 s; the quadratic one: ≈ 20 s here
    assert len(pinned) == 60000 and pinned[:2] == ["/r/d0", "/r/d1"] and pinned[-1] == "/r/d9999/e"
    # the same answer as ever: shallowest first, each once, only under a write root
    assert pinned_ancestors(["/r", "/s"], ["/r/a/b/c", "/r/a/x", "/s/q", "/t/z", "/r/a/b/d"]) == ["/r/a", "/r/a/b"]
    assert pinned_ancestors(["/"], ["/a/b/c"]) == ["/a", "/a/b"]


def test_more_write_roots_than_the_tier_has_slots_is_a_cage_error_not_a_traceback(tmp_path) -> None:
    """Each write root takes a slot of the plan; past the last one `step_flags` raised a
    ValueError while the mounts were planned — `sandboy run` printed a traceback (exit 1) and a
    gate step of a hostile repository with 65 write roots stopped the gate. Now the tier's own
    refusal, counted up front: exactly the most it can copy runs, one more is refused."""
    import sandboy
    from sandboy.errors import CageError

    most = namespaces.COPY_SLOT_LIMIT - 2 - len(namespaces.DEVICES)
    dirs = [tmp_path / f"w{i}" for i in range(70)]
    for d in dirs:
        d.mkdir()
    exec_dirs = ["/usr/bin", "/bin", "/usr/lib", "/lib", "/lib64"]

    def policy(n):
        return sandboy.Policy.from_mapping({"version": 1, "fs": {"read": ["/"], "exec": exec_dirs,
                                                                 "write": [str(d) for d in dirs[:n]]}})

    for n in (most + 1, 70):
        with pytest.raises(CageError, match=f"{n} write roots: the namespace tier copies at most {most} "):
            sandboy.run(["/bin/sh", "-c", f"echo ran > {dirs[0]}/marker"], policy(n))
        assert not (dirs[0] / "marker").exists()  # host side: nothing ran
    done = sandboy.run(["/bin/sh", "-c", f"echo ran > {dirs[most - 1]}/marker"], policy(most))
    assert done.ok, done
    assert (dirs[most - 1] / "marker").read_text() == "ran\n"


def test_the_known_good_note_counts_only_for_this_boot_and_kernel(tmp_path, monkeypatch):
    """The note that spares `sandboy run` a probe child (namespaces._known_good) is trusted only
    when it was written since this boot began (the time sealed in it against CLOCK_REALTIME -
    CLOCK_BOOTTIME), names this kernel's release and is sealed by this user's key (ADR 0030);
    anything else means a probe."""
    from cachekit import unsealed, write_sealed

    from sandboy.confine import namespace_probe

    monkeypatch.setenv("SANDBOY_CACHE_DIR", str(tmp_path))
    assert not namespaces._known_good()  # no note
    namespace_probe.remember_good()
    note = namespaces._note_path()
    assert unsealed(note).split(b"\0")[0] == os.uname().release.encode()
    assert namespaces._known_good()
    boot_began = namespaces._boot_started_ns()
    release = os.uname().release.encode()
    write_sealed(note, release + b"\0%d" % (boot_began - 10**9))  # written a second before this boot
    assert not namespaces._known_good()
    write_sealed(note, release + b"\0%d" % (boot_began + 10**9))
    assert namespaces._known_good()
    os.utime(note, ns=(boot_began - 10**9, boot_began - 10**9))  # (the file's mtime no longer counts)
    assert namespaces._known_good()
    with open(note, "wb") as fh:  # what the note held before seals: not taken
        fh.write(release)
    assert not namespaces._known_good()
    write_sealed(note, b"5.10.0-another-kernel\0%d" % (boot_began + 10**9))
    assert not namespaces._known_good()
    namespaces.forget()
    assert not os.path.exists(note) and not namespaces._known_good()
