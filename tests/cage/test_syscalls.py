"""Process and kernel-interface probes: seccomp's denylist, Landlock scopes, foreign entry points.

Where the kernel would refuse the action anyway (capabilities are dropped in the cage), the twin
shows the action is real: it works outside the cage, or under `seccomp.allow`.
"""

from __future__ import annotations

import os
import pty
import signal
import subprocess

import pytest

pytestmark = pytest.mark.needs_kernel

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
CLONE_NEWNS = 0x00020000
CLONE_NEWPID = 0x20000000


def outside(probe, *args) -> str:
    """The probe run with no cage at all: proves the attack works unconfined."""
    return subprocess.run([probe, *map(str, args)], capture_output=True, text=True, timeout=10).stdout.strip()


@pytest.mark.without_namespaces
def test_ptrace_of_a_sibling_refused(cage, outsider):
    assert cage.run("ptrace", outsider.pid).out == "EPERM"
    # Even with ptrace allowed by seccomp (a debugger step), Landlock keeps the tracee inside
    # the cage's own domain: a sibling outside stays out of reach, a child of its own does not.
    debugger = cage.policy(seccomp={"allow": ["ptrace"]})
    assert cage.run("ptrace", outsider.pid, policy=debugger).out == "EPERM"
    assert cage.run("ptrace", "child", policy=debugger).ok
    assert outsider.poll() is None


@pytest.mark.without_namespaces
def test_signal_to_a_process_outside_refused(cage, outsider):
    assert cage.run("kill", outsider.pid).out == "EPERM"  # Landlock signal scope (ABI 6)
    assert outsider.poll() is None
    assert cage.run("kill", "child").ok


_WATCHER = """
import signal, sys
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGURG})
print("ready", flush=True)
print("got" if signal.sigtimedwait({signal.SIGURG}, float(sys.argv[1])) else "none", flush=True)
"""


def _watch_sigurg(seconds: float) -> subprocess.Popen:
    """A single-threaded process that reports whether a SIGURG reached it. (Not this pytest
    process: other tests leave threads behind, and a process-directed signal may land on one
    of them, where it is not blocked and is lost.)"""
    import sys

    watcher = subprocess.Popen([sys.executable, "-c", _WATCHER, str(seconds)], stdout=subprocess.PIPE, text=True)
    assert watcher.stdout.readline().strip() == "ready"
    return watcher


@pytest.mark.without_namespaces
def test_kill_minus_one_reaches_nobody(cage, probe):
    """kill(-1, sig) as uid 0 would reach every root process on the host. The kernel returns 0
    for -1 even when every target refused, so a watcher process reports what it received:
    SIGURG, ignored by default and harmless if it ever escaped, is blocked there and collected."""
    sig = int(signal.SIGURG)
    # The twin: the same probe, uncaged, aimed at the watcher only, is seen.
    watcher = _watch_sigurg(5)
    assert outside(probe, "signal", watcher.pid, sig) == "ok"
    assert watcher.communicate()[0].strip() == "got"
    watcher = _watch_sigurg(0.5)
    assert cage.run("signal", -1, sig).ok
    assert watcher.communicate()[0].strip() == "none"


@pytest.mark.without_namespaces
def test_pidfd_signal_to_a_process_outside_refused(cage, outsider):
    assert cage.run("pidfd-kill", outsider.pid).out == "EPERM"
    assert outsider.poll() is None


@pytest.mark.without_namespaces
def test_proc_of_a_process_outside_unreadable(cage, outsider):
    """With /proc readable, another process's environ (and mem, maps...) still is not."""
    policy = cage.policy(fs={"read": ["/proc"]})
    assert cage.run("read", f"/proc/{outsider.pid}/environ", policy=policy).out == "EACCES"
    assert cage.run("read", "/proc/self/status", policy=policy).ok


def test_mount_refused(cage):
    (cage.work / "mnt").mkdir()
    assert cage.run("mount", "mnt").out == "EPERM"
    assert cage.run("fsopen").out == "EPERM"


def test_bpf_refused(cage, probe):
    assert cage.run("bpf").out == "EPERM"
    if os.geteuid() == 0:
        assert outside(probe, "bpf") == "ok"  # root outside the cage can create a map


def test_unshare_user_namespace_refused(cage):
    assert cage.run("unshare", CLONE_NEWUSER).out == "EPERM"
    assert cage.run("unshare", CLONE_NEWUSER | CLONE_NEWNET).out == "EPERM"
    # The twin: the same call with `unshare` allowed works, so the filter is what refuses it.
    assert cage.run("unshare", CLONE_NEWUSER, policy=cage.policy(seccomp={"allow": ["unshare"]})).ok


@pytest.mark.parametrize("flags", [CLONE_NEWUSER, CLONE_NEWNET, CLONE_NEWNS, CLONE_NEWPID,
                                   CLONE_NEWUSER | (1 << 32)])
def test_clone_with_namespace_flags_refused(cage, flags):
    assert cage.run("clone", flags).out == "EPERM"


def test_plain_fork_and_clone_work(cage):
    assert cage.run("fork").ok
    assert cage.run("clone", 0).ok
    assert cage.run("clone", 1 << 32).ok  # the kernel ignores clone()'s upper flag bits


def test_clone3_is_enosys(cage):
    # clone3 takes its flags in memory BPF cannot read: ENOSYS makes libc fall back to clone.
    assert cage.run("clone3").out == "ENOSYS"


def test_io_uring_setup_refused(cage, probe):
    assert cage.run("io_uring").out == "EPERM"
    if os.geteuid() == 0:
        assert outside(probe, "io_uring") == "ok"


def test_x32_syscall_refused(cage):
    assert cage.run("x32").out == "EPERM"
    assert cage.run("getpid").ok


def test_i386_int80_syscall_refused(cage, probe):
    if outside(probe, "int80") != "ok":
        pytest.skip("this kernel has no IA32 emulation: int 0x80 cannot reach it anyway")
    assert cage.run("int80").out == "EPERM"


@pytest.mark.parametrize("cmd", [0x5412, 0x1_00005412, 0x541C])  # TIOCSTI (+ high bits), TIOCLINUX
def test_tiocsti_on_a_pty_refused(cage, probe, cmd):
    master, slave = pty.openpty()
    try:
        # Under --tty the command's terminal is a pty of its own (it never gets the caller's,
        # tests/cage/test_terminal.py), and pushing bytes into it is still refused.
        assert cage.run("tiocsti", cmd, tty=True).out == "EPERM"
        assert cage.run("tiocgwinsz", tty=True).ok  # other tty ioctls work
        if cmd != 0x541C:
            # The twin: outside the cage, the same probe pushes a byte into the terminal.
            assert subprocess.run([probe, "tiocsti", str(cmd)], stdin=slave, capture_output=True,
                                  text=True, start_new_session=True).stdout.strip() == "ok"
            assert os.read(master, 16).endswith(b"x")
    finally:
        os.close(master)
        os.close(slave)


def test_prlimit_on_another_process_refused(cage, outsider, probe):
    """Landlock does not scope prlimit64: without the filter a command could lower its
    supervisor's RLIMIT_NOFILE (it then cannot find the tree to kill) or any host process's."""
    def nofile(pid):
        with open(f"/proc/{pid}/limits") as fh:
            return next(line for line in fh if line.startswith("Max open files")).split()[3]

    before = nofile(outsider.pid)
    assert cage.run("prlimit", outsider.pid).out == "EPERM"
    assert cage.run("prlimit", 0x1_00000000 | outsider.pid).out == "EPERM"  # the high word is ignored
    assert nofile(outsider.pid) == before
    assert cage.run("prlimit", 0).ok  # its own limits, as setrlimit does
    # the twin: uncaged, the same probe does change the outsider's limit
    assert outside(probe, "prlimit", outsider.pid) == "ok"
    assert nofile(outsider.pid) == "64"
