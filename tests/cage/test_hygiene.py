"""What the command inherits: fds, environment, capabilities, setuid bits."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys

import pytest
from prockit import mentioning

pytestmark = pytest.mark.needs_kernel

NOBODY = 65534


def test_inherited_file_and_socket_closed_exec_mode(cage):
    """`sandboy run` execs the command itself: fds its caller leaked must not get through."""
    secret = cage.root / "secret.txt"
    secret.write_text("TOPSECRET")
    a, b = socket.socketpair()
    with open(secret, "rb") as fh:
        fds = (fh.fileno(), a.fileno())
        r = cage.run("fds", via="cli", pass_fds=fds)
        assert r.out == "ok 0 1 2", r
        for fd in fds:
            assert cage.run("fd-read", fd, via="cli", pass_fds=fds).out == "EBADF"
    a.close()
    b.close()


def test_inherited_fds_closed_api(cage):
    secret = cage.root / "secret.txt"
    secret.write_text("TOPSECRET")
    with open(secret, "rb") as fh:
        os.set_inheritable(fh.fileno(), True)  # even an fd the caller marked inheritable
        assert cage.run("fds").out == "ok 0 1 2"
        assert cage.run("fd-read", fh.fileno()).out == "EBADF"


def test_inherited_fds_closed_without_close_range(cage, monkeypatch):
    """The fallback for kernels without CLOSE_RANGE_CLOEXEC: FD_CLOEXEC on each open fd."""
    from sandboy.confine import hygiene

    monkeypatch.setattr(hygiene, "_CLOSE_RANGE_OK", [False])
    assert "close inherited fd" in hygiene.plan_cloexec()[0][0]  # the fallback is what runs
    secret = cage.root / "secret.txt"
    secret.write_text("TOPSECRET")
    with open(secret, "rb") as fh:
        os.set_inheritable(fh.fileno(), True)
        assert cage.run("fds").out == "ok 0 1 2"
        assert cage.run("fd-read", fh.fileno()).out == "EBADF"


def test_secret_in_environment_removed(cage, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "TOPSECRET")
    monkeypatch.setenv("LANG", "C.UTF-8")
    policy = cage.policy(env={"set": {"CI": "true"}})
    for via in ("api", "cli"):
        r = cage.run("env", policy=policy, via=via)
        assert r.ok and "TOPSECRET" not in r.out, r
        lines = r.out.splitlines()
        assert "CI=true" in lines and "LANG=C.UTF-8" in lines
        assert any(line.startswith("PATH=") for line in lines)
        assert not any(line.startswith("SANDBOY_CACHE_DIR=") for line in lines)


def test_env_pass_replaces_the_default_list(cage, monkeypatch):
    monkeypatch.setenv("KEEP_ME", "1")
    r = cage.run("env", policy=cage.policy(env={"pass": ["KEEP_ME"]}))
    assert r.out.splitlines()[1:] == ["KEEP_ME=1"]


def test_no_capabilities_inside(cage, probe):
    if os.geteuid() != 0:
        pytest.skip("capabilities are only dropped when started as root")
    assert subprocess.run([probe, "caps"], capture_output=True, text=True).stdout.startswith("ok eff=1")
    for via in ("api", "cli"):
        out = cage.run("caps", via=via).out
        assert out == "ok eff=0 prm=0 inh=0 bnd=0 amb=0 euid=0", out


@pytest.fixture
def foreign_files(cage):
    if os.geteuid() != 0:
        pytest.skip("needs root to make files owned by another user")
    d = cage.work / "d"
    d.mkdir()
    private = d / "private"
    private.write_text("TOPSECRET")
    os.chown(private, NOBODY, NOBODY)
    os.chmod(private, 0o600)
    public = d / "public"
    public.write_text("public")
    os.chown(public, NOBODY, NOBODY)
    mine = d / "mine"
    mine.write_text("m")
    return cage.policy(fs={"write": ["d"]})


def test_root_cannot_override_file_permissions(cage, foreign_files):
    # uid 0 without CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH is an ordinary user to the kernel.
    assert cage.run("read", "d/private", policy=foreign_files).out == "EACCES"
    assert cage.run("read", "d/public", policy=foreign_files).out == "ok public"


@pytest.mark.without_namespaces
def test_root_cannot_chown_to_another_user(cage, foreign_files):
    assert cage.run("chown", "d/mine", NOBODY, policy=foreign_files).out == "EPERM"  # CAP_CHOWN gone
    assert cage.run("chown", "d/mine", 0, policy=foreign_files).ok  # no-op chown to itself works
    assert os.stat(cage.work / "d" / "mine").st_uid == 0


def test_setuid_binary_gains_nothing(cage, probe):
    """no_new_privs: the setuid bit is ignored, and uid 0 regains no capability at execve."""
    if os.geteuid() != 0:
        pytest.skip("needs root to make a setuid binary owned by another user")
    bindir = cage.root / "suid"
    bindir.mkdir()
    suid = bindir / "probe-suid"
    shutil.copy(probe, suid)
    os.chown(suid, NOBODY, NOBODY)
    os.chmod(suid, 0o4755)
    # The twin: outside the cage the bit works (euid becomes nobody).
    assert f"euid={NOBODY}" in subprocess.run([str(suid), "caps"], capture_output=True, text=True).stdout
    policy = cage.policy(fs={"exec": [str(bindir)]})
    assert cage.run(argv=[str(suid), "caps"], policy=policy).out == "ok eff=0 prm=0 inh=0 bnd=0 amb=0 euid=0"
    # and a setuid-root binary does not give uid 0 its capabilities back
    os.chown(suid, 0, 0)
    os.chmod(suid, 0o4755)
    assert cage.run(argv=[str(suid), "caps"], policy=policy).out == "ok eff=0 prm=0 inh=0 bnd=0 amb=0 euid=0"


def test_ignored_signals_are_not_inherited(cage):
    """A caller that ignores SIGALRM, SIGUSR1... must not pass that on (an alarm() watchdog in
    the command would never fire); SIGHUP stays as the caller set it (nohup). Nothing blocked."""
    import signal

    ignored = (signal.SIGALRM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP)
    saved = {sig: signal.signal(sig, signal.SIG_IGN) for sig in ignored}
    try:
        r = cage.run(argv=["/usr/bin/grep", "^Sig", "/proc/self/status"],
                     policy=cage.policy(fs={"read": ["/proc"], "exec": ["/usr/bin"]}))
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    assert r.rc == 0, r
    fields = dict(line.split(":\t", 1) for line in r.out.splitlines() if ":\t" in line)
    assert int(fields["SigIgn"], 16) == 1 << (signal.SIGHUP - 1)
    assert int(fields["SigBlk"], 16) == 0


# Run before a caller script's own code (it needs sys, _libc and seccomp imported): with
# argv[1] == "no-clone3", clone3 answers ENOSYS, as Docker's default filter does, so
# fork_exec takes its clone(2) fallback.
REFUSE_CLONE3_IF_ASKED = r"""
if sys.argv[1] == "no-clone3":
    p = seccomp._Prog()
    p.op(seccomp.LD_W_ABS, 0)
    p.op(seccomp.JEQ_K, 435, 0, 1)
    p.op(seccomp.RET_K, seccomp.errno_ret(38))
    p.op(seccomp.RET_K, seccomp.RET_ALLOW)
    steps, keep = seccomp.plan(p.bytes())
    _libc.syscall(157, 38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
    nr, _, *args = steps[0][1]
    _libc.syscall(nr, *args)
"""

INIT_HANDLERS = r"""
import os, signal, sys
from sandboy import Policy
from sandboy.confine import _libc, seccomp
from sandboy.confine import cage as cagemod

""" + REFUSE_CLONE3_IF_ASKED + r"""signal.signal(signal.SIGUSR1, lambda *_: None)  # caught here: Python's handler, in this memory
signal.signal(signal.SIGUSR2, signal.SIG_IGN)
signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # kept ignored, the init's children would be reaped unseen
policy = Policy.from_mapping({"version": 1, "fs": {"read": ["/usr", "/lib", "/lib64", "/etc"],
                                                    "exec": ["/usr/bin", "/bin"]}}, "<test>")
cage = cagemod.build(policy)
assert cage.tier is not None
null = os.open(os.devnull, os.O_RDWR)
r, w = os.pipe2(os.O_CLOEXEC)
pid = cage.start_child(["/bin/sleep", "60"], (null, null, null), w)  # returns once sleep has exec'd
os.close(w)
def masks(path):
    fields = dict(line.split(":\t", 1) for line in open(path).read().splitlines() if ":\t" in line)
    return int(fields["SigCgt"], 16), int(fields["SigIgn"], 16)
print("caller", *masks("/proc/self/status"))
print("init", *masks(f"/proc/{pid}/status"))
signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # to wait for the init below
os.kill(pid, signal.SIGKILL)
os.waitpid(pid, 0)
"""


@pytest.mark.parametrize("how", ["clone3", "no-clone3"])
def test_the_namespace_init_runs_none_of_the_callers_signal_handlers(how):
    """The init shares the caller's memory (ADR 0021): a Python handler left installed there
    would run the caller's code on the init's stack. It is made by clone3 with
    CLONE_CLEAR_SIGHAND (the kernel resets caught signals), or where clone3 is refused, by clone
    and a reset of its own (`_native.c`, default_caught_signals). Judged on the host from the
    init's /proc status: nothing caught, and what the caller ignores is still ignored there (the
    command's plan resets those: test_ignored_signals_are_not_inherited)."""
    import signal

    from sandboy.confine import _libc, namespaces

    if _libc.IMPLEMENTATION != "native" or not namespaces.availability()[0]:
        pytest.skip("the C executor's namespace init")
    src = pathlib.Path(namespaces.__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", INIT_HANDLERS, how], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(src)})
    assert out.returncode == 0, out.stderr
    masks = {line.split()[0]: tuple(int(v) for v in line.split()[1:]) for line in out.stdout.splitlines()}
    usr1, usr2 = 1 << (signal.SIGUSR1 - 1), 1 << (signal.SIGUSR2 - 1)
    assert masks["caller"][0] & usr1 and masks["caller"][1] & usr2  # the twin: the caller has both
    assert masks["init"][0] == 0, hex(masks["init"][0])
    assert masks["init"][1] & usr2
    chld = 1 << (signal.SIGCHLD - 1)  # ignored by the caller, not by the init that waits for its command
    assert masks["caller"][1] & chld and not masks["init"][1] & chld


IGNORING_SIGCHLD = r"""
import os, signal, sys
from sandboy.confine import _libc, seccomp

""" + REFUSE_CLONE3_IF_ASKED + r"""signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # an ignored disposition survives exec
os.execv(sys.argv[2], sys.argv[2:])
"""


@pytest.mark.parametrize("how, options, tier", [("clone3", [], True), ("no-clone3", [], True),
                                               ("clone3", ["--tty"], True), ("clone3", ["--tty"], False)])
def test_a_caller_ignoring_sigchld_still_gets_the_commands_status(how, options, tier, tmp_path):
    """SIG_IGN survives exec, and with SIGCHLD ignored the kernel reaps a child unseen and sends
    no SIGCHLD: under the tier `sandboy run` waited for its init for ever (and so did the init
    for its command), a supervised run (--tty) lost the exit code ("No child processes", 74).
    `sandboy run` and the init put SIGCHLD back to SIG_DFL. Judged from the host: the command's
    exit code arrives, and no process of the run is left."""
    from cagekit import SANDBOY

    from sandboy.confine import _libc, namespaces

    if tier and (_libc.IMPLEMENTATION != "native" or not namespaces.availability()[0]):
        pytest.skip("the C executor's namespace init")
    policy = tmp_path / "policy.toml"
    policy.write_text('version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc", "/bin"]\nexec = ["/usr/bin", "/bin"]\n')
    src = pathlib.Path(namespaces.__file__).resolve().parents[2]
    marker = str(policy)

    def leftovers():
        return mentioning(marker)

    try:
        out = subprocess.run([sys.executable, "-c", IGNORING_SIGCHLD, how, SANDBOY, "run", "-p", marker, *options,
                              "--", "sh", "-c", "sleep 0.1; exit 3"], capture_output=True, text=True, timeout=30,
                             env={**os.environ, "PYTHONPATH": str(src), **({} if tier else {"SANDBOY_NAMESPACES": "0"})})
        assert out.returncode == 3, out.stderr
        assert leftovers() == []
    except subprocess.TimeoutExpired:
        pytest.fail("the run hung: the init never saw its command exit")
    finally:
        for pid in leftovers():
            os.kill(pid, 9)


INIT_SIGCHLD = r"""
import os, signal, time
from sandboy import Policy
from sandboy.confine import cage as cagemod

policy = Policy.from_mapping({"version": 1, "fs": {"read": ["/usr", "/lib", "/lib64", "/etc"],
                                                    "exec": ["/usr/bin", "/bin"]}}, "<test>")
cage = cagemod.build(policy)
assert cage.tier is not None
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
null = os.open(os.devnull, os.O_RDWR)
r, w = os.pipe2(os.O_CLOEXEC)
pid = cage.start_child(["/bin/sleep", "60"], (null, null, null), w)
os.close(w)
deadline = time.monotonic() + 10
while not open(f"/proc/{pid}/task/{pid}/children").read() and time.monotonic() < deadline:
    time.sleep(0.01)  # the Python executor returns before its init has started the command
fields = dict(line.split(":\t", 1) for line in open(f"/proc/{pid}/status").read().splitlines() if ":\t" in line)
print(int(fields["SigIgn"], 16) >> (signal.SIGCHLD - 1) & 1)
signal.signal(signal.SIGCHLD, signal.SIG_DFL)
os.kill(pid, signal.SIGKILL)
os.waitpid(pid, 0)
"""


def test_the_namespace_init_of_either_executor_does_not_ignore_sigchld():
    """As above, for whichever executor is in use (make test runs tests/cage with both): the
    init of a caller that ignores SIGCHLD must still be told when its command exits."""
    from sandboy.confine import namespaces

    if not namespaces.availability()[0]:
        pytest.skip("no namespace tier here")
    src = pathlib.Path(namespaces.__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", INIT_SIGCHLD], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(src)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0"


# A program using the API (or the gate, or the audit pipeline) the way a host program would,
# started by a parent that ignores SIGCHLD (or, the twin, does not): SIG_IGN survives exec, so
# the program begins with it. argv[1] names the scenario; it prints one JSON line: how the run
# ended, the handle's type, and the pids of every process still below the program once the
# run's wait() returned (the /proc children walk: zombies included).
API_SCENARIOS = r"""
import atexit, json, os, shutil, signal, sys, tempfile
from pathlib import Path
from sandboy import CageError, Policy, run, spawn

def sigchld_ignored():  # the kernel's view, not the code under test's
    fields = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\t" in line)
    return bool(int(fields["SigIgn"], 16) >> (signal.SIGCHLD - 1) & 1)

def below_me():  # every process below this one, zombies included
    found, todo = [], [os.getpid()]
    while todo:
        pid = todo.pop()
        for tid in os.listdir(f"/proc/{pid}/task") if os.path.exists(f"/proc/{pid}/task") else ():
            try:
                kids = [int(k) for k in open(f"/proc/{pid}/task/{tid}/children").read().split()]
            except OSError:
                continue
            found += kids
            todo += kids
    return sorted(pid for pid in found if not releasing(pid))

def releasing(pid):  # EXIT_DEAD: a child the kernel reaps by itself (SIGCHLD ignored), listed a moment more
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "X"
    except OSError:
        return True

scenario, marker = sys.argv[1], os.environ["APISIG_MARKER"]
policy = Policy.from_mapping({"version": 1, "fs": {"read": ["/usr", "/lib", "/lib64", "/etc", "/bin"],
                                                    "exec": ["/usr/bin", "/bin"]}}, "<test>")
exit3 = ["sh", "-c", "sleep 0.2; exit 3", marker]  # $0 = marker: its processes are findable by name
sleeper = ["sh", "-c", "sleep 30", marker]
out = {"ignored": sigchld_ignored()}
made = []  # the scenarios' own temporary directories: removed at the end (tests touch only what they made)
atexit.register(lambda: [shutil.rmtree(path, ignore_errors=True) for path in made])

def ended(result, handle=None):
    out.update(outcome=result.outcome, code=result.returncode, error=result.error,
               handle=type(handle).__name__ if handle is not None else None)

try:
    if scenario == "run":
        ended(run(exit3, policy))
    elif scenario == "spawn":
        handle = spawn(exit3, policy)
        ended(handle.wait(), handle)
    elif scenario == "timeout":
        ended(run(exit3, policy, timeout=30))
    elif scenario == "timeout-hit":
        ended(run(sleeper, policy, timeout=0.5))
    elif scenario == "kill":
        handle = spawn(sleeper, policy)
        handle.kill()
        ended(handle.wait(), handle)
    elif scenario == "threads":  # four runs at once from threads of the program
        import threading

        results = []
        threads = [threading.Thread(target=lambda: results.append(run(exit3, policy))) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        ended(results[0])
        out["all"] = sorted({(r.outcome, r.returncode) for r in results})
    elif scenario == "tty":
        ended(run(exit3, policy, tty=True))
    elif scenario == "unsupervised":
        ended(run(exit3, policy, supervise=False))
    elif scenario == "init-killed-outside":  # not by kill(): by someone else (an OOM kill, kill -9)
        handle = spawn(sleeper, policy)
        os.kill(handle.pid, signal.SIGKILL)
        ended(handle.wait(), handle)
    elif scenario == "in-process":  # the gate's way: this process supervises
        from sandboy.confine.cage import build
        from sandboy.confine.supervision import Supervision

        null = os.open(os.devnull, os.O_RDWR)
        ended(Supervision(exit3, build(policy), stdio=(null, null, null)).start().wait())
    elif scenario == "probe":  # cage.build probes the namespaces once per boot (cache dir: fresh)
        from sandboy.confine import namespaces
        from sandboy.confine.cage import build

        os.environ["SANDBOY_CACHE_DIR"] = made.append(tempfile.mkdtemp()) or made[-1]
        cage = build(policy)
        out["tier"] = cage.tier is not None
        out["available"] = namespaces.availability()[0]
        ended(run(exit3, cage))
    elif scenario == "audit-phase":
        from sandboy.audit.pipeline import run_phase
        from sandboy.audit.toolconfig import Phase

        base = Path(made.append(tempfile.mkdtemp()) or made[-1])
        places = {name: str(base / name.strip("{}")) for name in ("{repo}", "{out}", "{home}", "{builtin}")}
        for place in places.values():
            os.mkdir(place)
        phase = Phase("p", ("/bin/sh", "-c", "sleep 0.2; exit 3", marker), read=("/usr", "/lib", "/lib64", "/etc", "/bin"),
                      exec=("/usr/bin", "/bin"), ok_exit=(3,), wall_seconds=60)
        report = run_phase(phase, places, "/usr/bin:/bin", base)
        out.update(outcome=report.outcome, code=report.returncode, error=report.error, ok=report.ok)
    else:
        raise SystemExit(f"unknown scenario {scenario}")
except CageError as exc:
    out.update(refused=str(exc))
out["left"] = below_me()
out["still_ignored"] = sigchld_ignored()
print(json.dumps(out))
"""

# Start argv[2:] with SIGCHLD ignored (argv[1] == "ignore") or at its default ("default").
WITH_SIGCHLD = r"""
import os, signal, sys
signal.signal(signal.SIGCHLD, signal.SIG_IGN if sys.argv[1] == "ignore" else signal.SIG_DFL)
os.execv(sys.argv[2], sys.argv[2:])
"""


def _started_with_sigchld(disposition: str, argv: list, marker: str, env=None, timeout=60) -> subprocess.CompletedProcess:
    """Run `argv` started with SIGCHLD `disposition` ("ignore"/"default"); afterwards no process
    carrying `marker` may be left (checked by pid from the host; any found is killed)."""
    src = pathlib.Path(__file__).resolve().parents[2] / "src"
    try:
        out = subprocess.run([sys.executable, "-c", WITH_SIGCHLD, disposition, *argv], capture_output=True, text=True,
                             timeout=timeout, env={**os.environ, "PYTHONPATH": str(src), "APISIG_MARKER": marker,
                                                   **(env or {})})
    except subprocess.TimeoutExpired:
        pytest.fail(f"{argv[3:]} hung with SIGCHLD {disposition}")
    finally:
        left = mentioning(marker)
        for pid in left:
            os.kill(pid, 9)
    assert left == [], f"left behind: {left}"
    return out


def _tier_env(tier: bool) -> dict:
    from sandboy.confine import namespaces

    if tier and not namespaces.availability()[0]:
        pytest.skip("no namespace tier here")
    return {} if tier else {namespaces.FORCE_OFF_ENV: "0"}


# scenario -> (outcome, code) the command's end gives, whatever the caller's SIGCHLD
API_ENDS = {"run": ("exited", 3), "spawn": ("exited", 3), "timeout": ("exited", 3), "timeout-hit": ("timed_out", 137),
            "kill": ("killed", 137), "tty": ("exited", 3), "threads": ("exited", 3), "probe": ("exited", 3),
            "audit-phase": ("exited", 3), "unsupervised": ("exited", 3)}
# unsupervised without the tier: refused (test_where_the_status_would_be_lost_the_api_refuses_before_starting)
API_CASES = [(scenario, tier) for scenario in sorted(API_ENDS) for tier in (True, False)
             if (scenario, tier) != ("unsupervised", False)]


@pytest.mark.parametrize("disposition", ["ignore", "default"])
@pytest.mark.parametrize("scenario, tier", API_CASES, ids=[f"{s}-{'tier' if t else 'no-tier'}" for s, t in API_CASES])
def test_the_api_gets_the_commands_end_whatever_the_callers_sigchld(scenario, tier, disposition):
    """A program started with SIGCHLD ignored: the kernel reaps its children itself, and their
    exit status is lost to every wait (waitpid and waitid(P_PIDFD) alike: ECHILD). The API used
    to raise a bare ChildProcessError (namespace_probe.probe, Supervisor.wait, a direct child's
    waitpid). Now, without the tier, the run goes through a forked supervisor, which resets ITS
    OWN SIGCHLD and reports on its pipe; under the tier a direct child (the namespace's init)
    still does, its init reporting the command's status on the error pipe. The caller's
    disposition is left as it was. Judged by the command's own exit code (3), the outcome of a
    deadline and of kill(), no process left by pid, and the caller still ignoring SIGCHLD
    afterwards. Twin: the same program with SIGCHLD at default."""
    marker = f"apisig-{os.urandom(4).hex()}"
    out = _started_with_sigchld(disposition, [sys.executable, "-c", API_SCENARIOS, scenario], marker,
                                env=_tier_env(tier))
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout)
    assert got["ignored"] is got["still_ignored"] is (disposition == "ignore")  # untouched by the API
    assert "refused" not in got, got
    expected = API_ENDS[scenario]
    if scenario == "kill" and got["handle"] == "DirectChild":
        expected = ("signaled", 137)  # kill() of an unsupervised command is its SIGKILL (spawn's docstring)
    assert (got["outcome"], got["code"]) == expected, got
    assert got["left"] == [], got
    if scenario == "threads":
        assert got["all"] == [["exited", 3]], got
    if scenario in ("spawn", "kill"):  # nothing else needs a supervisor here: only the ignored SIGCHLD may
        supervised = disposition == "ignore" and not tier
        assert got["handle"] == ("Supervisor" if supervised else "DirectChild"), got
    if scenario == "probe":
        assert got["tier"] is got["available"] is tier


@pytest.mark.parametrize("scenario, tier", [("unsupervised", False), ("in-process", True), ("in-process", False)],
                         ids=["unsupervised-no-tier", "in-process-tier", "in-process-no-tier"])
def test_where_the_status_would_be_lost_the_api_refuses_before_starting(scenario, tier):
    """`spawn(supervise=False)` without the tier (the caller waits for the command itself; no
    init reports for it) and a Supervision in the caller's own process (the gate's way) cannot
    recover a status the kernel discarded, and the caller's disposition is not ours to change:
    refused up front, CageError saying why and what to do, nothing started. Twin: SIGCHLD at
    default runs them (exit 3)."""
    marker = f"apisig-{os.urandom(4).hex()}"
    env = _tier_env(tier)
    out = _started_with_sigchld("ignore", [sys.executable, "-c", API_SCENARIOS, scenario], marker, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout)
    assert "SIGCHLD" in got["refused"] and "SIG_DFL" in got["refused"], got
    assert "outcome" not in got and got["left"] == [], got
    twin = json.loads(_started_with_sigchld("default", [sys.executable, "-c", API_SCENARIOS, scenario], marker,
                                            env=env).stdout)
    assert (twin["outcome"], twin["code"], twin["left"]) == ("exited", 3, []), twin


@pytest.mark.parametrize("disposition", ["ignore", "default"])
def test_an_init_killed_from_outside_in_a_program_ignoring_sigchld_fails_closed(disposition):
    """Under the tier a program ignoring SIGCHLD gets the command's status from the init's
    report. An init killed by someone else (not kill()) reports nothing and its own status is
    gone: the run fails closed (125) saying so — not a made-up code, not a ChildProcessError.
    Twin: at SIG_DFL its status says SIGKILL (signaled, 137)."""
    marker = f"apisig-{os.urandom(4).hex()}"
    out = _started_with_sigchld(disposition, [sys.executable, "-c", API_SCENARIOS, "init-killed-outside"], marker,
                                env=_tier_env(True))
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout)
    assert got["handle"] == "DirectChild" and got["left"] == [], got
    if disposition == "ignore":
        assert (got["outcome"], got["code"]) == ("cage_error", 125), got
        assert "exit status was lost" in got["error"] and "supervise=True" in got["error"], got
    else:
        assert (got["outcome"], got["code"]) == ("signaled", 137), got


MID_RUN = r"""
import json, os, signal, sys
from sandboy import Policy, spawn

policy = Policy.from_mapping({"version": 1, "fs": {"read": ["/usr", "/lib", "/lib64", "/etc", "/bin"],
                                                    "exec": ["/usr/bin", "/bin"]}}, "<test>")
if sys.argv[1] == "SA_NOCLDWAIT":  # as native code may set it: /proc shows no SIG_IGN, spawn cannot tell
    from sandboy.confine import _libc
    _libc.syscall(_libc.SYS_RT_SIGACTION, signal.SIGCHLD, (0).to_bytes(8, "little") + (2).to_bytes(8, "little")
                  + bytes(16), None, 8)  # kernel_sigaction {SIG_DFL, SA_NOCLDWAIT, 0, 0}
supervise = {"SIG_IGN after the start": False, "SA_NOCLDWAIT": None, "the caller reaps the direct child": False,
             "the caller reaps the supervisor": True}[sys.argv[1]]
handle = spawn(["sh", "-c", "sleep 0.3; exit 3", os.environ["APISIG_MARKER"]], policy, supervise=supervise)
if sys.argv[1] == "SIG_IGN after the start":
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the command is reaped unseen
if sys.argv[1].startswith("the caller reaps"):  # as a child watcher of the caller's (waitpid(-1) in a loop) may
    os.waitpid(handle.pid, 0)
result = handle.wait()
def running(pid):
    # an exited process the kernel reaps by itself (SA_NOCLDWAIT) may still be listed for a
    # moment after wait() saw ECHILD: only one not yet dead (state other than Z or X) is left
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False
left = [pid for pid in map(int, filter(str.isdigit, os.listdir("/proc"))) if pid == handle.pid and running(pid)]
print(json.dumps({"outcome": result.outcome, "code": result.returncode, "error": result.error, "left": left}))
"""


@pytest.mark.parametrize("tier", [True, False], ids=["tier", "no-tier"])
@pytest.mark.parametrize("how", ["SIG_IGN after the start", "SA_NOCLDWAIT", "the caller reaps the direct child",
                                 "the caller reaps the supervisor"])
def test_a_child_reaped_unseen_is_never_a_bare_childprocesserror(how, tier):
    """The caller starts ignoring SIGCHLD while a direct child runs, has SA_NOCLDWAIT set
    (invisible in /proc, so spawn starts a direct child), or reaps Sandboy's child itself (a
    child watcher's waitpid(-1)): the status is gone before Sandboy waits. Under the tier the
    init reported the command's status on the error pipe, so the real code (3) comes back;
    without it the run fails closed (125) saying the status was lost and what to do — never a
    ChildProcessError. A supervisor reaped by the caller does not matter: its report is on its
    pipe (3, tier or not)."""
    marker = f"apisig-{os.urandom(4).hex()}"
    out = _started_with_sigchld("default", [sys.executable, "-c", MID_RUN, how], marker, env=_tier_env(tier))
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout)
    assert got["left"] == [], got
    if tier or how == "the caller reaps the supervisor":
        assert (got["outcome"], got["code"]) == ("exited", 3), got
    else:
        assert (got["outcome"], got["code"]) == ("cage_error", 125), got
        assert "exit status was lost" in got["error"] and "SIGCHLD" in got["error"], got


def test_the_api_in_a_program_ignoring_sigchld_returns_the_commands_code():
    """Session 5's probe (it was a strict xfail): `sandboy.run` in a program that set SIGCHLD to
    SIG_IGN itself raised ChildProcessError."""
    src = pathlib.Path(__file__).resolve().parents[2] / "src"
    script = ("import signal\nsignal.signal(signal.SIGCHLD, signal.SIG_IGN)\n"
              "from sandboy import Policy, run\n"
              "policy = Policy.from_mapping({'version': 1, 'fs': {'read': ['/usr', '/lib', '/lib64', '/etc'],"
              " 'exec': ['/usr/bin', '/bin']}}, '<test>')\n"
              "print(run(['sh', '-c', 'exit 3'], policy, timeout=20).returncode)\n"
              "print(run(['sh', '-c', 'exit 3'], policy).returncode)\n"
              "print(signal.getsignal(signal.SIGCHLD) == signal.SIG_IGN)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(src)})
    assert (out.returncode, out.stdout.split()) == (0, ["3", "3", "True"]), out.stderr[-2000:]


def test_the_last_capability_found_by_prctl_is_the_kernels():
    """hygiene.last_cap asks prctl(PR_CAPBSET_READ) instead of reading cap_last_cap: the same
    number, or the bounding set would keep the capabilities above it (probe: bnd=0 above)."""
    from sandboy.confine import hygiene

    with open("/proc/sys/kernel/cap_last_cap") as fh:
        kernel = int(fh.read())
    assert hygiene._last_cap_by_prctl() == kernel
    assert hygiene.last_cap() == kernel


@pytest.mark.parametrize("dropped", ["the highest", "all"])
def test_the_last_capability_is_found_when_the_caller_dropped_capabilities(dropped):
    """A caller may already have dropped capabilities from its bounding set (a container, a
    service manager's CapabilityBoundingSet=). PR_CAPBSET_READ answers 0 for those, EINVAL only
    above the kernel's last: the search must find the kernel's number, not the highest one held
    (or the cage's bounding set would keep what lies above it). In a forked child: the drop is
    for the life of the process."""
    import ctypes

    from sandboy.confine import hygiene

    with open("/proc/sys/kernel/cap_last_cap") as fh:
        kernel = int(fh.read())
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_end)
            caps = [kernel, kernel - 1, kernel - 2] if dropped == "the highest" else list(range(kernel, -1, -1))
            for cap in caps:
                if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP (needs CAP_SETPCAP)
                    os.write(write_end, b"cannot drop")
                    os._exit(0)
            held = [cap for cap in range(kernel + 1) if libc.prctl(23, cap, 0, 0, 0) == 1]
            os.write(write_end, f"{hygiene._last_cap_by_prctl()} {held}".encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as fh:
        answer = fh.read().decode()
    os.waitpid(pid, 0)
    if answer == "cannot drop":
        pytest.skip("dropping from the bounding set needs CAP_SETPCAP")
    found, held = answer.split(" ", 1)
    before = [cap for cap in range(kernel + 1) if libc.prctl(23, cap, 0, 0, 0) == 1]
    assert held == ("[]" if dropped == "all" else repr([cap for cap in before if cap < kernel - 2]))  # dropped
    assert int(found) == kernel


GATE_AS_A_LIBRARY = "import sys\nfrom sandboy.gate.cli import main\nsys.exit(main(sys.argv[1:]))\n"


@pytest.mark.parametrize("tier", [True, False], ids=["tier", "no-tier"])
@pytest.mark.parametrize("disposition", ["ignore", "default"])
@pytest.mark.parametrize("program", ["sandboy gate", "python -m sandboy.gate.cli", "gate.cli.main as a library"])
def test_the_gate_started_with_sigchld_ignored_gets_each_steps_code(program, disposition, tier, tmp_path):
    """The gate supervises its steps in its own process. Its programs (`sandboy gate`, `python -m
    sandboy.gate.cli`: cli.finish) are Sandboy's own and reset SIGCHLD, so a step's real code
    arrives; before, started with SIGCHLD ignored, every step was reaped unseen. Called as a
    library (no finish) in a process ignoring SIGCHLD, each step is refused (cage_error, 125)
    saying why and what to do — never a wrong code, a hang or a traceback. Twins: SIG_DFL."""
    from cagekit import SANDBOY

    marker = f"apisig-{os.urandom(4).hex()}"
    repo = tmp_path / "repo"
    (repo / ".007").mkdir(parents=True)
    (repo / ".007" / "gate.toml").write_text(
        f'[[step]]\nname = "ok"\nrun = "true # {marker}"\n\n'
        f'[[step]]\nname = "three"\nrun = "sleep 0.2; exit 3 # {marker}"\n')
    report = tmp_path / "report.json"
    home = tmp_path / "home"
    home.mkdir()
    argv = {"sandboy gate": [SANDBOY, "gate"], "python -m sandboy.gate.cli": [sys.executable, "-m", "sandboy.gate.cli"],
            "gate.cli.main as a library": [sys.executable, "-c", GATE_AS_A_LIBRARY]}[program]
    out = _started_with_sigchld(disposition, [*argv, str(repo), "--json", str(report)], marker, timeout=120,
                                env={**_tier_env(tier), "HOME": str(home)})
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    steps = {step["name"]: step for step in json.loads(report.read_text())["steps"]}
    if disposition == "ignore" and program == "gate.cli.main as a library":
        refused = steps["ok"]  # the first step; the gate then stops
        assert (refused["status"], refused["returncode"]) == ("cage_error", 125), refused
        assert "SIGCHLD" in refused["error"] and "SIG_DFL" in refused["error"], refused
        assert steps["three"]["status"] == "not_run", steps["three"]
        assert out.returncode != 0
        return
    assert out.returncode == 1, out.stderr[-3000:]
    assert (steps["ok"]["status"], steps["ok"]["returncode"]) == ("passed", 0), steps["ok"]
    assert (steps["three"]["status"], steps["three"]["returncode"]) == ("failed", 3), steps["three"]


def test_the_last_capability_search_finds_every_possible_answer_in_few_questions():
    """hygiene.search_last_cap, asked of a kernel whose prctl accepts 0..last (or nothing): the
    right answer for every last capability a kernel could have, two questions for the usual one
    (40 since Linux 5.9) and at most eight for any."""
    from sandboy.confine import hygiene

    for last in range(-1, 64):
        asked = []

        def known(cap, last=last, asked=asked):
            asked.append(cap)
            return cap <= last

        assert hygiene.search_last_cap(known) == last
        assert len(asked) <= (2 if last == 40 else 8), (last, asked)


def test_one_reader_of_proc_self_status_answers_both_questions():
    """_libc.status_masks is the one reader of /proc/self/status (hygiene.has_capabilities,
    reaping.children_reaped_unseen): the same masks as the file read line by line, and a field
    the kernel does not print is absent, not zero."""
    from sandboy.confine import _libc, hygiene, reaping

    with open("/proc/self/status", "rb") as fh:
        lines = dict(line.rstrip(b"\n").split(b":\t", 1) for line in fh if b":\t" in line)
    names = (b"SigIgn", b"CapEff", b"CapPrm", b"CapAmb", b"CapInh")
    assert _libc.status_masks(*names, b"NoSuchField") == {name: int(lines[name], 16) for name in names}
    assert hygiene.has_capabilities() is any(int(lines[name], 16) for name in names[1:])
    assert (reaping.children_reaped_unseen() is None) is not bool(int(lines[b"SigIgn"], 16) >> 16 & 1)
