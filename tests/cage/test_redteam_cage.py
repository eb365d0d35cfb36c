"""Session 7's review of the cage from the attacker's side (`sandboy run` / `sandboy.run()`, with
and without the namespace tier, as root and as an ordinary user).

Two holes were found and closed here, each checked from the host side with its twin:

- the minimal /dev's nodes were bind mounts of the HOST's device inodes that kept the host's
  read-write flags: as root, `chmod 000 /dev/null` or `touch /dev/null` in the cage changed the
  host's /dev/null for every process on the machine (with `--tty`, every pty of the host's
  devpts). Now read-only copies (namespaces.plan_mounts).
- a /dev/null (or zero, full, random, urandom) handed in on fd 0-2 — a gate's or CI runner's
  stdin, `sandboy run ... </dev/null` — is the host's mount: `fchmod(0, 0)` through it ignored
  the read-only tree. Now the cage's own node is put there (namespaces.plan_stdio).

A third, found here and closed in session 8: a regular file handed in on fd 0-2 kept the host's
mount (now reopened on the cage's tree or relayed by the init: tests/cage/test_stdio_files.py).

The other probes below held; each stays as a regression probe. What they try and why they
hold is in docs/threat-model.md ("Session 7 review").
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time

import pytest
from prockit import mentioning
import cagekit
from cagekit import SANDBOY, to_toml

from sandboy.confine import namespaces

pytestmark = pytest.mark.needs_kernel

TIER = pytest.mark.skipif(not namespaces.availability()[0],
                          reason=f"no namespace tier here: {namespaces.availability()[1]}")
PY = "/usr/bin/python3"
NODES = ("null", "zero", "full", "random", "urandom")

# "ok" or the errno's name, for each attempt a snippet makes
ATTEMPT = cagekit.ATTEMPT + "import json, os, sys\n"


def py_policy(cage, **sections) -> dict:
    return cage.policy(fs={"read": ["/proc"], "exec": ["/usr/bin", "/bin"]}, **sections)


def py(cage, code: str, *args, policy=None, **kwargs):
    return cage.run(argv=[PY, "-c", ATTEMPT + code, *map(str, args)],
                    policy=policy or py_policy(cage), **kwargs)


def host_stamp(path: str) -> tuple:
    st = os.stat(path)
    return stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, st.st_mtime_ns


class HostDevices:
    """The host's device nodes as they were before a probe, put back afterwards whatever the
    probe managed (a probe that gets through would otherwise leave them changed)."""

    def __init__(self):
        self.before = {name: os.stat(f"/dev/{name}") for name in NODES}

    def changed(self) -> list:
        return [name for name in NODES if host_stamp(f"/dev/{name}") != _stamp(self.before[name])]

    def restore(self) -> None:
        for name, st in self.before.items():
            path = f"/dev/{name}"
            if host_stamp(path) != _stamp(st):
                os.chmod(path, stat.S_IMODE(st.st_mode))
                os.chown(path, st.st_uid, st.st_gid)
                os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _stamp(st) -> tuple:
    return stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, st.st_mtime_ns


@pytest.fixture
def host_devices():
    if os.geteuid() != 0:
        pytest.skip("the host's device nodes are root's: only root can change their metadata")
    devices = HostDevices()
    try:
        yield devices
    finally:
        devices.restore()


# --- hole 1: the minimal /dev's nodes are the host's inodes --------------------------------------

# Each node's metadata: the SAME mode (harmless if it gets through), then a time far in the
# past (what the host side checks); the twin: each node still does its job.
DEVICE_METADATA = r"""
out = {}
for name in ("null", "zero", "full", "random", "urandom"):
    path = "/dev/" + name
    mode = os.stat(path).st_mode & 0o7777
    out[name] = [attempt(lambda: os.chmod(path, mode)), attempt(lambda: os.utime(path, (1, 1))),
                 attempt(lambda: os.chown(path, os.getuid(), os.getgid()))]
out["twin"] = [open("/dev/null", "rb").read().decode(), attempt(lambda: open("/dev/null", "w").write("x")),
               list(open("/dev/zero", "rb").read(2)), len(open("/dev/urandom", "rb").read(4)),
               attempt(lambda: os.write(os.open("/dev/full", os.O_WRONLY), b"x"))]
print(json.dumps(out))
"""


@TIER
@pytest.mark.parametrize("dev_granted", [False, True], ids=["default", "dev-granted"])
def test_the_minimal_devs_nodes_take_no_metadata_change(cage, host_devices, dev_granted):
    """As root (the gate's usual identity in CI): chmod, utimensat and chown of each node of the
    cage's /dev get EROFS, and the host's nodes are unchanged (mode, owner, mtime). Before the
    fix each call succeeded on the host's inode: `chmod 000 /dev/null` broke every process of the
    machine. Twin: reading and writing the nodes still work."""
    policy = py_policy(cage)
    if dev_granted:
        policy["fs"]["read"].append("/dev")
        policy["fs"]["write"] = ["/dev"]  # a careless policy: still no metadata change
    result = py(cage, DEVICE_METADATA, policy=policy)
    assert result.rc == 0, result
    facts = json.loads(result.out)
    assert host_devices.changed() == [], "the host's device nodes were changed from the cage"
    for name in NODES:
        assert facts[name] == ["EROFS"] * 3, (name, facts)
    assert facts["twin"] == ["", "ok", [0, 0], 4, "ENOSPC"], facts


@TIER
def test_the_relayed_terminal_takes_no_metadata_change(cage):
    """--tty binds the host's devpts (ttyname(3) finds the relayed pty by name): the command
    could chmod its pty (0666: every local user writes to it) and, as root, any pty of the host's
    devpts owned by root. Now read-only: EROFS; the twin: output through the pty still arrives."""
    code = ("tty = os.ttyname(0); mode = os.stat(tty).st_mode & 0o7777\n"
            "print(attempt(lambda: os.chmod(tty, mode)), attempt(lambda: os.utime(tty, (1, 1))), flush=True)\n"
            "os.write(1, b'through the pty\\n')\n")
    result = py(cage, code, tty=True)
    assert result.rc == 0, result
    assert result.out.split()[:2] == ["EROFS", "EROFS"], result
    assert "through the pty" in result.out, result


# --- hole 2: a device handed in on fd 0-2 ---------------------------------------------------------

FD_METADATA = r"""
fd = int(sys.argv[1])
mode = os.fstat(fd).st_mode & 0o7777
print(json.dumps([attempt(lambda: os.chmod(fd, mode)), attempt(lambda: os.utime(fd, (1, 1))),
                  attempt(lambda: os.utime(f"/proc/self/fd/{fd}", (1, 1))),
                  attempt(lambda: os.chown(fd, os.getuid(), os.getgid()))]), file=sys.stderr if fd == 1 else sys.stdout)
"""


@TIER
@pytest.mark.parametrize("via", ["api", "cli"])
@pytest.mark.parametrize("fd", [0, 1, 2])
def test_a_dev_null_handed_in_on_stdio_takes_no_metadata_change(cage, host_devices, fd, via):
    """The caller's /dev/null on fd `fd` (stdin from a gate, a CI runner or `</dev/null`) was the
    host's mount: `fchmod(fd)`, `futimens(fd)` and `utimensat("/proc/self/fd/N")` changed the
    host's /dev/null. Now the cage's own read-only node sits there: EROFS, host unchanged.
    Twin: the command still reads EOF from it / writes into it."""
    code = FD_METADATA + ("print('eof' if os.read(0, 1) == b'' else 'data')\n" if fd == 0
                          else f"os.write({fd}, b'into the void')\n")
    null = os.open(os.devnull, os.O_RDWR)
    try:
        if via == "api":
            from tempfile import TemporaryFile

            from sandboy import Policy, run

            with TemporaryFile() as out, TemporaryFile() as err:
                streams = [None, out.fileno(), err.fileno()]
                streams[fd] = null
                if fd == 1:
                    streams[2] = out.fileno()
                result = run([PY, "-c", ATTEMPT + code, str(fd)], Policy.from_mapping(py_policy(cage), "<t>"),
                             cwd=str(cage.work), stdin=streams[0], stdout=streams[1], stderr=streams[2])
                out.seek(0)
                text, rc = out.read().decode(), result.returncode
        else:
            streams = {0: {"stdin": null, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE},
                       1: {"stdin": subprocess.DEVNULL, "stdout": null, "stderr": subprocess.PIPE},
                       2: {"stdin": subprocess.DEVNULL, "stdout": subprocess.PIPE, "stderr": null}}[fd]

            (cage.root / "p.toml").write_text(to_toml(py_policy(cage)))
            proc = subprocess.run([SANDBOY, "run", "--policy", str(cage.root / "p.toml"), "--", PY, "-c",
                                   ATTEMPT + code, str(fd)], cwd=cage.work, timeout=30,
                                  env=dict(os.environ, SANDBOY_CACHE_DIR=str(cage.root / "cache")), **streams)
            text = (proc.stderr if fd == 1 else proc.stdout).decode()
            rc = proc.returncode
    finally:
        os.close(null)
    assert host_devices.changed() == [], "the host's /dev/null was changed through the fd handed in"
    assert rc == 0, text
    lines = text.split("\n")
    assert json.loads(lines[0]) == ["EROFS"] * 4, text
    if fd == 0:
        assert lines[1] == "eof", text


@pytest.mark.without_namespaces
def test_without_the_tier_the_fd_handed_in_is_the_hosts(cage, host_devices):
    """The attack is real: without the tier (reported in `degraded`), the same call through the
    fd succeeds on the host's /dev/null (the same mode, so nothing is changed)."""
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        result = py(cage, "print(attempt(lambda: os.chmod(0, os.fstat(0).st_mode & 0o7777)))", stdin=null)
    finally:
        os.close(null)
    assert result.out == "ok", result
    assert host_devices.changed() == []


@TIER
def test_a_regular_file_handed_in_on_stdin_takes_no_metadata_change(cage, tmp_path):
    """`sandboy run ... < ~/.ssh/id_rsa` (or any file of the uid's; as root, any file): the
    command `fchmod(0, 0644)`s it. Outside every write root, so the tier refuses: the init
    reopened it on the cage's read-only tree (ADR 0011, "Session 8"; the full battery is
    tests/cage/test_stdio_files.py)."""
    secret = tmp_path / "outside" / "id_rsa"
    secret.parent.mkdir()
    secret.write_text("key\n")
    os.chmod(secret, 0o600)
    with open(secret, "rb") as stdin:
        result = py(cage, "print(attempt(lambda: os.chmod(0, 0o644)))", stdin=stdin.fileno())
    assert result.rc == 0, result
    assert stat.S_IMODE(os.stat(secret).st_mode) == 0o600, result


# --- held: regression probes ----------------------------------------------------------------------

@pytest.fixture
def abstract_listeners():
    """A host stream listener and a host datagram socket in the abstract namespace."""
    name = f"sandboy-redcage-{os.getpid()}-{os.urandom(4).hex()}"
    stream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stream.bind("\0" + name)
    stream.listen(4)
    stream.setblocking(False)
    dgram = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    dgram.bind("\0" + name + "-d")
    dgram.setblocking(False)
    yield name, stream, dgram
    stream.close()
    dgram.close()


ABSTRACT = r"""
import socket
name = sys.argv[1]
def stream(target):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect("\0" + target)
def dgram(target):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.sendto(b"x", "\0" + target)
def own():
    a = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    a.bind("\0" + name + "-own")
    a.listen(1)
    stream(name + "-own")
print(attempt(lambda: stream(name)), attempt(lambda: dgram(name + "-d")), attempt(own))
"""


@pytest.mark.parametrize("tier", [True, False], ids=["tier", "fallback"])
def test_abstract_sockets_of_the_host_with_the_network_granted(cage, abstract_listeners, tier, monkeypatch):
    """With TCP granted the tier makes no network namespace, so the host's abstract sockets
    share the cage's namespace: Landlock's scope (ABI 6) refuses connect and sendto to them,
    stream and datagram (host side: nothing accepted, nothing received); the cage's own
    abstract listener still works."""
    if not tier:
        monkeypatch.setenv(namespaces.FORCE_OFF_ENV, "0")
    elif not namespaces.availability()[0]:
        pytest.skip("no namespace tier here")
    name, stream, dgram = abstract_listeners
    result = py(cage, ABSTRACT, name, policy=py_policy(cage, net={"unix": True, "connect_tcp": [443]}))
    assert result.out.split() == ["EPERM", "EPERM", "ok"], result
    with pytest.raises(BlockingIOError):
        stream.accept()
    with pytest.raises(BlockingIOError):
        dgram.recv(16)


INIT = r"""
import ctypes, fcntl, signal
libc = ctypes.CDLL(None, use_errno=True)
def call(nr, *args):
    if libc.syscall(nr, *args) < 0:
        raise OSError(ctypes.get_errno(), "")
pidfd = os.pidfd_open(1)
res = {
    "signal": attempt(lambda: signal.pidfd_send_signal(pidfd, signal.SIGKILL)),
    "getfd": attempt(lambda: call(438, pidfd, 0, 0)),                        # pidfd_getfd
    "user ns": attempt(lambda: fcntl.ioctl(pidfd, 0xFF09)),                  # PIDFD_GET_USER_NAMESPACE
    "mnt ns": attempt(lambda: fcntl.ioctl(pidfd, 0xFF03)),                   # PIDFD_GET_MNT_NAMESPACE
    "setns": attempt(lambda: call(308, pidfd, 0)),
    "kill": attempt(lambda: os.kill(1, signal.SIGKILL)),
    "ptrace": attempt(lambda: call(101, 16, 1, 0, 0)),                       # PTRACE_ATTACH
    "mem": attempt(lambda: open("/proc/1/mem", "rb")),
    "parent ns": attempt(lambda: fcntl.ioctl(os.open("/proc/self/ns/user", os.O_RDONLY), 0xB702)),  # NS_GET_PARENT
    "set mm": attempt(lambda: call(157, 35, 6, 0, 0, 0)),                    # PR_SET_MM, PR_SET_MM_START_BRK
    "sysctl": attempt(lambda: open("/proc/sys/kernel/core_pattern", "w")),
}
print(json.dumps(res))
"""


@TIER
def test_the_init_and_the_host_stay_out_of_reach_through_a_pidfd(cage):
    """The init (pid 1, outside the Landlock domain) through a pidfd: no signal, no fd taken,
    no namespace fd, no setns, no ptrace, no /proc/1/mem (hidepid: ENOENT); no fd of the
    host's user namespace (NS_GET_PARENT); no PR_SET_MM; /proc/sys read-only. The run still
    ends with the command's own code (the init lived)."""
    result = py(cage, INIT + "sys.exit(7)\n")
    assert result.rc == 7, result
    assert json.loads(result.out) == {
        "signal": "EPERM", "getfd": "EPERM", "user ns": "EACCES", "mnt ns": "EACCES", "setns": "EPERM",
        "kill": "EPERM", "ptrace": "EPERM", "mem": "ENOENT", "parent ns": "EPERM", "set mm": "EPERM",
        "sysctl": "EROFS"}, result


_WATCHER = """
import signal, sys
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGURG})
print("ready", flush=True)
print("got" if signal.sigtimedwait({signal.SIGURG}, float(sys.argv[1])) else "none", flush=True)
"""


@TIER
def test_kill_minus_one_under_the_tier_reaches_only_the_cage(cage):
    """kill(-1, SIGURG) as root from the tier: a host process of the same uid (blocking SIGURG
    and collecting it) receives nothing; the cage's own child (blocking and collecting it the
    same way) does — the call is real."""
    watcher = subprocess.Popen([sys.executable, "-c", _WATCHER, "3"], stdout=subprocess.PIPE, text=True)
    assert watcher.stdout.readline().strip() == "ready"
    code = ("import signal, subprocess\n"
            "child = subprocess.Popen([sys.executable, '-c', " + repr(_WATCHER) + ", '3'], stdout=subprocess.PIPE, text=True)\n"
            "assert child.stdout.readline().strip() == 'ready'\n"
            "signal.signal(signal.SIGURG, signal.SIG_IGN)\n"
            "os.kill(-1, signal.SIGURG)\n"
            "print(child.communicate()[0].strip())\n")
    result = py(cage, code)
    assert result.rc == 0 and result.out == "got", result
    assert watcher.communicate()[0].strip() == "none"


@TIER
@pytest.mark.parametrize("via", ["api", "cli"])
def test_a_double_forked_leftover_dies_with_the_init(cage, via):
    """A grandchild that called setsid, ignores SIGHUP and outlives the command is gone on the
    host when the run returns (the init's exit ends the PID namespace), in exec mode too, where
    no supervisor sweeps (`sandboy run` without a terminal)."""
    seconds = f"{300 + os.getpid() % 1000}.{time.monotonic_ns() % 1000000:06d}"  # a unique sleep argument
    code = ("import os, signal, sys\n"
            "if os.fork() == 0:\n"
            "    os.setsid()\n"
            "    if os.fork() == 0:\n"
            "        signal.signal(signal.SIGHUP, signal.SIG_IGN)\n"
            "        os.execv('/bin/sleep', ['sleep', sys.argv[1]])\n"
            "    os._exit(0)\n"
            "os.wait()\n"
            "print('left one')\n")
    result = cage.run(argv=[PY, "-c", code, seconds], policy=py_policy(cage), via=via)
    try:
        assert result.rc == 0 and result.out == "left one", result
        assert mentioning(seconds) == []
    finally:
        for pid in mentioning(seconds):
            os.kill(pid, signal.SIGKILL)


MEMFD = r"""
fd = os.memfd_create("payload")
os.write(fd, open("/usr/bin/id", "rb").read())
os.execve(fd, ["id", "-u"], {})
"""


def test_the_exec_list_does_not_cover_a_memfd_by_design(cage):
    """Accepted by design (docs/threat-model.md, "Exec lists are a speed bump"): a program the
    command can READ runs from a memfd (`execveat(fd, "", AT_EMPTY_PATH)`) although fs.exec
    lists only the interpreter, as it runs through `ld.so` or `mmap(PROT_EXEC)`. Kept as a
    probe so the documentation stays true: fs.read is the boundary for what code can run."""
    policy = cage.policy(fs={"exec": [PY]})
    result = cage.run(argv=[PY, "-c", ATTEMPT + MEMFD], policy=policy)
    assert result.rc == 0 and result.out == str(os.geteuid()), result
    assert cage.run(argv=["/usr/bin/id", "-u"], policy=policy).rc == 126  # the exec list itself holds


@pytest.mark.parametrize("tier", [True, False], ids=["tier", "fallback"])
def test_tiocsetd_is_refused_on_a_pty(cage, probe, tier, monkeypatch):
    """TIOCSETD on a pty the command holds would load a line discipline's module where the
    kernel autoloads them (`dev.tty.ldisc_autoload = 1`, the default): n_hdlc, n_gsm, slip...
    Refused by the filter (EPERM). The twin: the same probe uncaged sets N_NULL (27, built into
    every kernel) on the same kind of pty, so the kernel alone would allow it."""
    import pty

    if not tier:
        monkeypatch.setenv(namespaces.FORCE_OFF_ENV, "0")
    elif not namespaces.availability()[0]:
        pytest.skip("no namespace tier here")
    master, slave = pty.openpty()
    try:
        outside = subprocess.run([probe, "tiocsetd", "27"], stdin=slave, capture_output=True, text=True, timeout=10)
        assert outside.stdout.strip() == "ok", outside
        assert cage.run("tiocsetd", 27, tty=True).out == "EPERM"  # its own pty (a terminal on stdin is relayed)
    finally:
        os.close(master)
        os.close(slave)


FDS = r"""
held = {}
for fd in sorted(int(fd) for fd in os.listdir("/proc/self/fd")):
    try:
        held[fd] = os.readlink(f"/proc/self/fd/{fd}")
    except FileNotFoundError:
        pass  # the listing's own fd, closed by now
print(json.dumps(held))
"""


@pytest.mark.parametrize("how", ["exec-mode", "api", "supervised", "tty", "egress"])
@pytest.mark.parametrize("tier", [True, False], ids=["tier", "fallback"])
def test_the_command_holds_no_fd_beyond_stdio(cage, how, tier, monkeypatch):
    """No fd of Sandboy's reaches the command: the Landlock ruleset, the plan's copies, the
    error pipe, the relay's pty master, the egress proxy's listener — in every way a run is
    started: only 0-2."""
    if not tier:
        monkeypatch.setenv(namespaces.FORCE_OFF_ENV, "0")
    elif not namespaces.availability()[0]:
        pytest.skip("no namespace tier here")
    sections = {"limits": {"wall_seconds": 30}} if how == "supervised" else {}
    if how == "egress":
        sections["net"] = {"domains": ["example.invalid"]}
    kwargs = {"via": "cli"} if how == "exec-mode" else {"tty": True} if how == "tty" else {}
    policy = py_policy(cage, **sections)
    result = cage.run(argv=[PY, "-c", ATTEMPT + FDS], policy=policy, **kwargs)
    assert result.rc == 0, result
    fds = json.loads(result.out.strip().splitlines()[-1])
    assert sorted(fds) == ["0", "1", "2"], fds


def test_the_callers_agent_bus_and_secrets_are_not_passed(cage, monkeypatch):
    """The caller's SSH agent and session bus (sockets a command could use on the caller's
    behalf with `net.unix`), its runtime directory, cloud keys, LD_PRELOAD and PYTHONPATH do
    not reach the command; the default list does (ADR 0007)."""
    leaks = {"SSH_AUTH_SOCK": "/tmp/ssh-x/agent.1", "DBUS_SESSION_BUS_ADDRESS": "unix:path=/run/user/0/bus",
             "XDG_RUNTIME_DIR": "/run/user/0", "AWS_SECRET_ACCESS_KEY": "k", "GITHUB_TOKEN": "t",
             "LD_PRELOAD": "", "PYTHONPATH": "/nowhere", "GIT_ASKPASS": "/bin/true"}
    for name, value in leaks.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LANG", "C.UTF-8")
    result = py(cage, "print(json.dumps(dict(os.environ)))")
    env = json.loads(result.out)
    assert not set(leaks) & set(env), env
    assert env.get("LANG") == "C.UTF-8" and "PATH" in env, env


@pytest.mark.parametrize("tier", [True, False], ids=["tier", "fallback"])
def test_a_host_posix_message_queue_is_out_of_reach(cage, tier, monkeypatch):
    """POSIX message queues (`mq_open`, not SysV: no seccomp rule) of the host, by name: under
    the tier the IPC namespace has its own mqueue instance (ENOENT), without it Landlock refuses
    opening a file of the kernel's internal mqueue mount (EACCES); the message stays on the
    host and no queue is left. Held: a regression probe."""
    import ctypes

    if not tier:
        monkeypatch.setenv(namespaces.FORCE_OFF_ENV, "0")
    elif not namespaces.availability()[0]:
        pytest.skip("no namespace tier here")
    libc = ctypes.CDLL(None, use_errno=True)
    name = f"/sandboy-redcage-{os.getpid()}-{os.urandom(3).hex()}".encode()

    class Attr(ctypes.Structure):
        _fields_ = [("flags", ctypes.c_long), ("maxmsg", ctypes.c_long), ("msgsize", ctypes.c_long),
                    ("curmsgs", ctypes.c_long), ("pad", ctypes.c_long * 4)]

    libc.mq_open.restype = ctypes.c_int
    queue = libc.mq_open(name, os.O_CREAT | os.O_RDWR | os.O_NONBLOCK, 0o600, ctypes.byref(Attr(0, 4, 64, 0)))
    if queue < 0:
        pytest.skip(f"no POSIX message queues here (errno {ctypes.get_errno()})")
    try:
        assert libc.mq_send(queue, b"host-secret", 11, 0) == 0
        code = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                "def mq(flags):\n"
                "    if libc.mq_open(sys.argv[1].encode(), flags, 0o600, None) < 0:\n"
                "        raise OSError(ctypes.get_errno(), '')\n"
                "print(attempt(lambda: mq(os.O_RDWR | os.O_NONBLOCK)), attempt(lambda: mq(os.O_CREAT | os.O_RDWR)))\n")
        result = py(cage, code, name.decode())
        assert result.out.split()[0] == ("ENOENT" if tier else "EACCES"), result
        assert result.out.split()[1] == "EACCES", result  # no queue made (Landlock: no rule on that mount)
        buf = ctypes.create_string_buffer(64)
        assert libc.mq_receive(queue, buf, 64, None) == 11 and buf.value == b"host-secret"
    finally:
        os.close(queue)
        libc.mq_unlink(name)



LEFTOVER = r"""
import signal, time
watcher, out = int(sys.argv[1]), sys.argv[2]
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(1.0)  # the run has returned by now
        res = [attempt(lambda: os.kill(watcher, signal.SIGURG)),
               attempt(lambda: os.killpg(os.getpgid(watcher), signal.SIGURG)),
               attempt(lambda: os.kill(-1, signal.SIGURG))]
        with open(out + ".tmp", "w") as fh:
            fh.write(json.dumps([os.getpid(), res]))
        os.rename(out + ".tmp", out)
        os._exit(0)
    os._exit(0)
os.wait()
"""


@pytest.mark.without_namespaces
def test_a_leftover_of_an_unsupervised_run_cannot_signal_the_caller_after_it(cage):
    """Without the tier an unsupervised run (the API's direct child: no timeout, no hook) leaves
    a double-forked process behind, by design (docs/threat-model.md). After the run has
    returned it signals the caller (a process of the same uid blocking and collecting SIGURG),
    the caller's process group and kill(-1): Landlock's scope refuses the first two (EPERM) and
    kill(-1) reaches nobody outside the domain; the caller receives nothing."""
    watcher = subprocess.Popen([sys.executable, "-c", _WATCHER, "2.5"], stdout=subprocess.PIPE, text=True)
    assert watcher.stdout.readline().strip() == "ready"
    out = cage.work / "leftover.json"
    policy = cage.policy(fs={"exec": ["/usr/bin", "/bin"], "write": [str(cage.work)], "protect_defaults": False})
    from sandboy import Policy, run

    null = os.open(os.devnull, os.O_RDWR)
    started = time.monotonic()
    try:
        result = run([PY, "-c", ATTEMPT + LEFTOVER, str(watcher.pid), str(out)], Policy.from_mapping(policy, "<t>"),
                     cwd=str(cage.work), stdin=null, stdout=null, stderr=null)  # no timeout: unsupervised
    finally:
        os.close(null)
    assert result.returncode == 0 and time.monotonic() - started < 1.0, result  # returned before the leftover acted
    assert not out.exists()
    deadline = time.monotonic() + 10
    while not out.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    pid, res = json.loads(out.read_text())
    try:
        assert res == ["EPERM", "EPERM", "ok"], res  # kill(-1) returns 0 even where every target refused
        assert watcher.communicate()[0].strip() == "none"
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


UNPROTECT = r"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
def call(result):
    if result < 0:
        raise OSError(ctypes.get_errno(), "")
res = {"unshare": attempt(lambda: call(libc.unshare(0x10000000 | 0x00020000))),  # CLONE_NEWUSER | CLONE_NEWNS
       "caps": open("/proc/self/status").read().split("CapEff:")[1].split()[0]}
attr = (ctypes.c_uint64 * 4)(0, 1, 0, 0)  # struct mount_attr: attr_clr = MOUNT_ATTR_RDONLY
res["umount"] = attempt(lambda: call(libc.umount2(b".git/config", 2)))              # MNT_DETACH
res["setattr"] = attempt(lambda: call(libc.syscall(442, -100, b".git/config", 0, attr, 32)))
res["remount"] = attempt(lambda: call(libc.mount(None, b".git/config", None, 0x20 | 0x1000, None)))  # MS_REMOUNT|MS_BIND
res["over"] = attempt(lambda: call(libc.mount(b"none", b".git/hooks", b"tmpfs", 0, None)))
res["write"] = attempt(lambda: open(".git/config", "a").write("[core]\n\tfsmonitor = planted\n"))
print(json.dumps(res))
"""


@TIER
def test_a_nested_user_namespace_cannot_unprotect_a_protected_path(cage):
    """The cage's user namespace owns its mount namespace; with `seccomp.allow` lifting unshare
    and the mount calls, the command makes a nested user + mount namespace and holds every
    capability there (the twin: unshare works, CapEff full). Still: the read-only bind over
    .git/config cannot be unmounted (locked: EINVAL), made writable (mount_setattr, remount:
    EPERM, Landlock refuses mount calls), nor covered by a tmpfs over .git/hooks; the host's
    config bytes are unchanged."""
    git = cage.work / ".git"
    (git / "hooks").mkdir(parents=True)
    (git / "config").write_text("[core]\n\tbare = false\n")
    policy = cage.policy(fs={"read": ["/proc"], "exec": ["/usr/bin", "/bin"], "write": [str(cage.work)]},
                         seccomp={"allow": ["unshare", "mount", "umount2", "mount_setattr"]})
    result = cage.run(argv=[PY, "-c", ATTEMPT + UNPROTECT], policy=policy)
    facts = json.loads(result.out.strip().splitlines()[-1])
    assert facts["unshare"] == "ok" and int(facts["caps"], 16) > 0, facts  # the twin: the calls are let through
    assert {k: facts[k] for k in ("umount", "setattr", "remount", "over", "write")} == {
        "umount": "EINVAL", "setattr": "EPERM", "remount": "EPERM", "over": "EPERM", "write": "EROFS"}, facts
    assert (git / "config").read_text() == "[core]\n\tbare = false\n"
    assert os.listdir(git / "hooks") == []
