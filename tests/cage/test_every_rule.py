"""Every seccomp rule earns its place (issue 7, "Every rule proven necessary").

For each default denylist entry and each argument rule there is a probe that the cage refuses
AND a twin showing the filter is what refuses: the same call with the entry allowed
(`seccomp.allow`, `[ipc] sysv`) gets the kernel's own answer, which is success or another errno;
where the rest of the cage refuses the call anyway (capabilities dropped, Landlock), the cage's
filter alone, on a process that keeps root's capabilities, still refuses what the kernel would
have answered. `test_mutations.py` removes each rule in turn and requires these checks to fail.

The expected answers are written here by hand, measured on Linux 6.18 (Landlock ABI 7): they
never come from the module under test.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import pytest
from cagekit import BASE_READ, Result, cage_bpf, filter_only, to_toml

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from userkit import as_user, skip_unless_nobody_can_run  # noqa: E402

# The filter is tested beneath the namespace tier (where the kernel refuses namespaces, this is all
# there is): `without_namespaces` forces the tier off (tests/cage/conftest.py).
pytestmark = [pytest.mark.needs_kernel, pytest.mark.without_namespaces]

ROOT = os.geteuid() == 0
NOBODY = 65534
ABSENT = "s:/sandboy-absent-dir"  # a path that must not exist: no call below may change the host

# name: (probe arguments, the kernel's answer in the cage when the filter allows the call,
#        the kernel's answer to a process holding root's capabilities, without any filter)
# "EPERM" in the second column: the cage refuses it anyway (capabilities dropped, Landlock, a
# sysctl); the filter stays as defence in depth and the third column proves it still refuses.
# "ENOSYS": this kernel has no such call; the filter refuses it on kernels that do.
DENYLIST = {
    "ptrace": (["ptrace", "child"], "ok", "ok"),  # its own child: Landlock's scope allows that
    "process_vm_readv": (["at-child", "process_vm_readv"], "ok", "ok"),
    "process_vm_writev": (["at-child", "process_vm_writev"], "ok", "ok"),
    "pidfd_getfd": (["at-child", "pidfd_getfd"], "ok", "ok"),
    "mount": (["nr", 165, "s:none", ABSENT, "s:tmpfs", 0, 0], "ENOENT", "ENOENT"),
    "umount2": (["nr", 166, ABSENT, 0], "ENOENT", "ENOENT"),
    "pivot_root": (["nr", 155, ABSENT, ABSENT], "EPERM", "ENOENT"),
    "chroot": (["nr", 161, ABSENT], "ENOENT", "ENOENT"),
    "move_mount": (["nr", 429, -100, ABSENT, -100, ABSENT, 0], "EPERM", "ENOENT"),
    "open_tree": (["nr", 428, -100, ABSENT, 0], "ENOENT", "ENOENT"),
    "open_tree_attr": (["nr", 467, -100, ABSENT, 0, 0, 0], "ENOENT", "ENOENT"),
    "fsopen": (["nr", 430, "s:sandboy-nofs", 0], "EPERM", "ENODEV"),
    "fsconfig": (["nr", 431, -1, 0, 0, 0, 0], "EINVAL", "EINVAL"),
    "fsmount": (["nr", 432, -1, 0, 0], "EPERM", "EBADF"),
    "fspick": (["nr", 433, -100, ABSENT, 0], "EPERM", "ENOENT"),
    "mount_setattr": (["nr", 442, -100, ABSENT, 0, 0, 0], "EINVAL", "EINVAL"),
    "swapon": (["nr", 167, ABSENT, 0], "EPERM", "ENOENT"),
    "swapoff": (["nr", 168, ABSENT], "EPERM", "ENOENT"),
    "reboot": (["nr", 169, 0, 0, 0, 0], "EPERM", "EINVAL"),  # wrong magic: never reboots
    "kexec_load": (["nr", 246, 0, 0, 0, 0xFFFF0000], "ENOSYS", "ENOSYS"),
    "kexec_file_load": (["nr", 320, -1, -1, 0, 0, 0xFFFF0000], "ENOSYS", "ENOSYS"),
    "init_module": (["nr", 175, "buf", 0, "s:"], "ENOSYS", "ENOSYS"),
    "finit_module": (["nr", 313, -1, "s:", 0], "ENOSYS", "ENOSYS"),
    "delete_module": (["nr", 176, "s:sandboy_absent_module", 0x800], "ENOSYS", "ENOSYS"),
    "bpf": (["bpf"], "EPERM", "ok"),  # kernel.unprivileged_bpf_disabled = 2 here
    "perf_event_open": (["perf"], "ok", "ok"),
    "userfaultfd": (["nr", 323, 1], "ok", "ok"),  # UFFD_USER_MODE_ONLY: no privilege needed
    "keyctl": (["nr", 250, 0, -2, 1], "ok", "ok"),  # the process keyring: gone when it exits
    "add_key": (["nr", 248, "s:user", "s:sandboy-probe", "s:x", 1, -2], "ok", "ok"),
    "request_key": (["nr", 249, "s:user", "s:sandboy-absent-key", 0, -2], "ENOKEY", "ENOKEY"),
    "unshare": (["nr", 272, 0x10000000], "ok", "ok"),
    "setns": (["nr", 308, -1, 0], "EBADF", "EBADF"),
    "open_by_handle_at": (["nr", 304, -1, "buf", 0], "EINVAL", "EINVAL"),
    "name_to_handle_at": (["handle"], "ok", "ok"),
    "iopl": (["nr", 172, 4], "ENOSYS", "ENOSYS"),
    "ioperm": (["nr", 173, 0x10000, 1, 1], "ENOSYS", "ENOSYS"),
    "quotactl": (["nr", 179, 0x800005, 0, 0, "buf"], "EINVAL", "EINVAL"),
    "quotactl_fd": (["nr", 443, -1, 0x800005, 0, "buf"], "EBADF", "EBADF"),
    "acct": (["nr", 163, ABSENT], "EPERM", "ENOENT"),
    "io_uring_setup": (["io_uring"], "ok", "ok"),
    "io_uring_enter": (["nr", 426, -1, 0, 0, 0, 0, 0], "EBADF", "EBADF"),
    "io_uring_register": (["nr", 427, -1, 0, 0, 0], "EINVAL", "EINVAL"),
    "personality": (["nr", 135, 0xFFFFFFFF], "ok", "ok"),  # a query
    "uselib": (["nr", 134, ABSENT], "ENOSYS", "ENOSYS"),
    "lookup_dcookie": (["nr", 212, 0, "buf", 16], "ENOSYS", "ENOSYS"),
    "vhangup": (["nr", 153], "EPERM", "ok"),  # the probe has no controlling terminal
    "syslog": (["nr", 103, 10, 0, 0], "EPERM", "ok"),  # kernel.dmesg_restrict = 1 here
    "modify_ldt": (["nr", 154, 0, "buf", 16], "ok", "ok"),
    "move_pages": (["nr", 279, 0, 0, 0, 0, 0, 0], "ok", "ok"),
    "migrate_pages": (["nr", 256, 0, 64, "buf", "buf"], "EINVAL", "EINVAL"),
    "mbind": (["nr", 237, "page", 4096, 0, 0, 0, 0], "ok", "ok"),
    "set_mempolicy": (["nr", 238, 0, 0, 0], "ok", "ok"),
    "get_mempolicy": (["nr", 239, "buf", 0, 0, 0, 0], "ok", "ok"),
    "set_mempolicy_home_node": (["nr", 450, "page", 4096, 0, 0], "ENOENT", "ENOENT"),
    "io_setup": (["nr", 206, 1, "buf"], "ok", "ok"),  # one event: a context of the probe's, gone at its exit
}


def answer(result: Result) -> str:
    """The first word of the probe's output: "ok" or an errno name."""
    return result.out.split()[0] if result.out else f"rc={result.rc} {result.err[-200:]}"


def check_denylist_entry(cage, name: str) -> None:
    """Refused in the cage; allowed, the kernel answers; with root's capabilities and only the
    cage's filter, refused where the kernel would have answered something else."""
    args, caged, privileged = DENYLIST[name]
    assert answer(cage.run(*args)) == "EPERM", name
    from sandboy.confine import seccomp
    from sandboy.policy import load

    if name in seccomp.NEVER_ALLOWED:  # never allowed: the keyring holds the cache's seal key (ADR 0030)
        from sandboy.policy.model import Policy

        with pytest.raises(load.PolicyError, match="cannot be allowed"):
            Policy.from_mapping(cage.policy(seccomp={"allow": [name]}))
        return
    allowed = cage.policy(seccomp={"allow": [name]})
    assert answer(cage.run(*args, policy=allowed)) == caged, name
    if caged == "EPERM" and ROOT:
        argv = [cage.probe, *args]
        assert answer(filter_only(cage_bpf(allowed), argv)) == privileged, name
        assert answer(filter_only(cage_bpf(cage.policy()), argv)) == "EPERM", name


def test_the_table_covers_the_whole_denylist():
    from sandboy.confine import seccomp

    assert set(DENYLIST) == set(seccomp.DEFAULT_DENY)


@pytest.mark.parametrize("name", sorted(DENYLIST))
def test_denylist_entry_is_what_refuses(cage, name):
    check_denylist_entry(cage, name)


# --- setuid and setgid bits -------------------------------------------------------------

MODE_CALLS = ("chmod", "fchmod", "fchmodat", "fchmodat2", "open", "openat", "creat", "mkdir", "mkdirat", "mknod",
              "mknodat")
SETS_EXISTING = ("chmod", "fchmod", "fchmodat", "fchmodat2")


def _mode_of(path) -> int:
    return os.stat(path).st_mode & 0o7777


def check_mode_call(cage, call: str) -> None:
    """As the file's owner in a write root: no setuid/setgid bit, checked on the host; the same
    call with an ordinary mode (and the sticky bit) works."""
    policy = cage.policy(fs={"write": [str(cage.work)]})
    target = cage.work / f"{call}-target"
    for bits in (0o4755, 0o2755, 0o6755):
        if call in SETS_EXISTING:
            target.write_bytes(b"#!/bin/sh\n")
            os.chmod(target, 0o755)
        r = cage.run("mode", call, target, f"0{bits:o}", policy=policy)
        assert answer(r) == "EPERM", (call, oct(bits), r)
        if target.exists():
            assert _mode_of(target) & 0o6000 == 0, (call, oct(_mode_of(target)))
            os.remove(target) if not target.is_dir() else os.rmdir(target)
    if call in SETS_EXISTING:
        target.write_bytes(b"#!/bin/sh\n")
    mode = 0o1755 if call.startswith("mkdir") else 0o755
    assert cage.run("mode", call, target, f"0{mode:o}", policy=policy).ok, call
    assert _mode_of(target) == mode


@pytest.mark.parametrize("call", MODE_CALLS)
def test_setuid_setgid_modes_refused_in_a_write_root(cage, call):
    check_mode_call(cage, call)


def test_setuid_copy_of_a_shell_left_for_the_host(cage, probe):
    """Issue 7 item 2: `cp /bin/bash ./rootsh && chmod 4755 ./rootsh` in a write root, by real
    tools; the host then finds no setuid bit. Uncaged, the same chmod sets it."""
    policy = cage.policy(fs={"write": [str(cage.work)], "exec": ["/usr/bin", "/bin"]})
    script = "cp /bin/bash ./rootsh && chmod 4755 ./rootsh; echo chmod=$?"
    r = cage.run(argv=["/bin/sh", "-c", script], policy=policy)
    assert "chmod=1" in r.out, r
    assert _mode_of(cage.work / "rootsh") & 0o6000 == 0
    assert cage.run(argv=["/bin/chmod", "755", "rootsh"], policy=policy).rc == 0  # twin
    assert _mode_of(cage.work / "rootsh") == 0o755
    subprocess.run(["chmod", "4755", str(cage.work / "rootsh")], check=True)  # the kernel allows it
    assert _mode_of(cage.work / "rootsh") == 0o4755


def test_openat2_is_enosys_so_libc_falls_back(cage):
    """openat2 keeps its mode in a struct BPF cannot read: ENOSYS, as for clone3, so callers
    fall back to openat, whose mode the filter checks. Not even `seccomp.allow` lifts it."""
    policy = cage.policy(fs={"write": [str(cage.work)]})
    for mode in ("0644", "04755"):
        assert answer(cage.run("mode", "openat2", f"f{mode}", mode, policy=policy)) == "ENOSYS"
    allowed = cage.policy(fs={"write": [str(cage.work)]}, seccomp={"allow": ["openat2"]})
    assert answer(cage.run("mode", "openat2", "g", "04755", policy=allowed)) == "ENOSYS"
    assert not (cage.work / "g").exists()
    assert cage.run("mode", "openat", "h", "0644", policy=policy).ok


# --- SysV IPC ---------------------------------------------------------------------------

SYSV_CALLS = ("shmget", "msgget", "semget", "shmat", "shmdt", "shmctl", "msgsnd", "msgrcv", "msgctl", "semop",
              "semtimedop", "semctl")
# What the kernel answers each probe (on the host's objects) once the filter allows SysV IPC
# (msgrcv: ENOMSG on the empty queue, ok once a msgsnd probe has run).
SYSV_ALLOWED = {"shmdt": ("EINVAL",), "msgrcv": ("ENOMSG", "ok")}


class HostIpc:
    """A SysV segment (holding a marker), queue and semaphore set of the host, under a key unique
    to this test, made and removed outside the cage."""

    def __init__(self, probe, runner=subprocess.run):
        self.probe = probe
        self.key = 0x5B000000 | (os.getpid() & 0xFFFF) << 4 | (id(self) & 0xF)
        self.marker = f"host-secret-{os.getpid()}"
        out = runner([probe, "sysv-make", hex(self.key), self.marker], capture_output=True, text=True).stdout
        assert out.startswith("ok"), out
        self.shm, self.msq, self.sem = (int(x) for x in out.split()[1:])
        self.runner = runner

    def target(self, call: str):
        ids = {"shm": self.shm, "msg": self.msq, "sem": self.sem}
        return hex(self.key) if call.endswith("get") else ids[call[:3]]

    def segment(self) -> str:
        return self.runner([self.probe, "sysv-show", hex(self.key)], capture_output=True, text=True).stdout.strip()

    def remove(self):
        self.runner([self.probe, "sysv-remove", hex(self.key)], capture_output=True)


@pytest.fixture
def host_ipc(probe):
    ipc = HostIpc(probe)
    yield ipc
    ipc.remove()


def check_sysv_call(cage, ipc, call: str) -> None:
    assert answer(cage.run("sysv", call, ipc.target(call))) == "EPERM", call
    allowed = cage.policy(ipc={"sysv": True})
    assert answer(cage.run("sysv", call, ipc.target(call), policy=allowed)) in SYSV_ALLOWED.get(call, ("ok",)), call


@pytest.mark.parametrize("call", SYSV_CALLS)
def test_sysv_ipc_refused_unless_the_policy_asks(cage, host_ipc, call):
    check_sysv_call(cage, host_ipc, call)


def test_host_segment_neither_read_nor_overwritten(cage, host_ipc):
    """Issue 7 item 6, checked from the host: the segment keeps its bytes, no queue is left."""
    assert answer(cage.run("sysv", "shm-write", hex(host_ipc.key), "overwritten")) == "EPERM"
    assert host_ipc.segment() == f"ok {host_ipc.marker}"
    key = host_ipc.key ^ 0x1
    assert answer(cage.run("sysv", "msgget-create", hex(key))) == "EPERM"
    assert subprocess.run([cage.probe, "sysv", "msgget", hex(key)], capture_output=True, text=True).stdout.strip() \
        == "ENOENT"
    # the twin: allowed (and with no IPC namespace yet), the same write reaches the host's segment
    allowed = cage.policy(ipc={"sysv": True})
    assert cage.run("sysv", "shm-write", hex(host_ipc.key), "overwritten", policy=allowed).ok
    assert host_ipc.segment() == "ok overwritten"


# --- netlink ----------------------------------------------------------------------------

NETLINK_SOCK_DIAG, NETLINK_AUDIT, NETLINK_KOBJECT_UEVENT, NETLINK_GENERIC = 4, 9, 15, 16


def check_netlink(cage) -> None:
    for proto in (NETLINK_SOCK_DIAG, NETLINK_AUDIT, NETLINK_KOBJECT_UEVENT, NETLINK_GENERIC, 1 << 32 | 4):
        assert answer(cage.run("netlink", proto)) == "EPERM", proto
        assert answer(cage.run("netlink", proto, policy=cage.policy(net={"unrestricted": True}))) == "EPERM"
    assert cage.run("netlink", 0).ok  # NETLINK_ROUTE: getaddrinfo, getifaddrs, `ip addr`


def test_netlink_protocols_but_route_refused(cage, probe):
    check_netlink(cage)
    assert subprocess.run([probe, "netlink", str(NETLINK_SOCK_DIAG)], capture_output=True, text=True).stdout.startswith(
        "ok")  # the kernel lets anyone open it


@pytest.mark.skipif(not shutil.which("ss") or not shutil.which("ip"), reason="needs iproute2 (ss, ip)")
def test_ss_sees_no_host_listener_ip_and_getaddrinfo_work(cage):
    """Issue 7 item 7: `ss -lnt` inside lists nothing of the host's (here: a listener this test
    opened on loopback); outside it does. `ip addr` and getaddrinfo keep working."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = f":{listener.getsockname()[1]}"
        assert port in subprocess.run(["ss", "-lnt"], capture_output=True, text=True).stdout
        policy = cage.policy(fs={"exec": ["/usr/bin", "/usr/sbin", "/bin", "/sbin"], "read": ["/etc"]})
        inside = cage.run(argv=["ss", "-lnt"], policy=policy)
        assert port not in inside.out and port not in inside.err
    ip = cage.run(argv=["ip", "-o", "addr", "show", "lo"], policy=policy)
    assert ip.rc == 0 and "127.0.0.1" in ip.out, ip
    assert cage.run("gai", "localhost", policy=policy).ok


# --- scheduling calls -------------------------------------------------------------------

def _nice(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[16])


def _policy_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[38])


def _affinity(pid: int) -> str:
    with open(f"/proc/{pid}/status") as fh:
        return next(line.split()[1] for line in fh if line.startswith("Cpus_allowed_list"))


def _ioprio(pid: int) -> int:
    return ctypes.CDLL(None, use_errno=True).syscall(252, 1, pid)  # ioprio_get(IOPRIO_WHO_PROCESS)


def _state(pid: int) -> tuple:
    return _nice(pid), _policy_of(pid), _affinity(pid), _ioprio(pid)


SCHED_ATTACKS = {
    # call: probe arguments aimed at pid P (0 = the caller itself, the legitimate twin)
    "setpriority": lambda p: ["setpriority", 0, p, 5],
    "sched_setaffinity": lambda p: ["setaffinity", p, 0],
    "sched_setscheduler": lambda p: ["setscheduler", p, 5],  # SCHED_IDLE
    "sched_setparam": lambda p: ["setparam", p],
    "sched_setattr": lambda p: ["setattr", p, 5],
    "ioprio_set": lambda p: ["ioprio", 1, p],
}
# PRIO_USER, PRIO_PGRP (who 0: the caller's uid / group), IOPRIO_WHO_USER / PGRP, and the same with
# high bits the kernel ignores (it reads `which` as an int)
GROUP_FORMS = [["setpriority", 2, 0, 5], ["setpriority", 1, 0, 5], ["ioprio", 3, 0], ["ioprio", 2, 0],
               ["setpriority", 1 << 32 | 2, 0, 5]]


def check_sched_call(cage, call: str, victim) -> None:
    before = _state(victim.pid)
    assert answer(cage.run(*SCHED_ATTACKS[call](victim.pid))) == "EPERM", call
    assert answer(cage.run(*SCHED_ATTACKS[call](1 << 32 | victim.pid))) == "EPERM", call
    assert _state(victim.pid) == before
    assert cage.run(*SCHED_ATTACKS[call](0)).ok, call


def start_victim() -> subprocess.Popen:
    """A process of this test's own uid outside the cage, as the operator's shell would be.

    As root, with no capabilities (as another cage or a service that dropped them would be): a
    target holding capabilities the cage lacks is already protected by the kernel (commoncap's
    cap_safe_nice refuses the capability-less caller), so it would not show what the filter adds."""
    argv = ["sleep", "300"]
    if ROOT and shutil.which("setpriv"):
        argv = ["setpriv", "--inh-caps=-all", "--bounding-set=-all", *argv]
    proc = subprocess.Popen(argv)
    for _ in range(200):  # until setpriv has exec'd sleep
        with open(f"/proc/{proc.pid}/comm") as fh:
            if fh.read().strip() == "sleep":
                break
        time.sleep(0.005)
    return proc


@pytest.fixture
def victim():
    proc = start_victim()
    yield proc
    proc.kill()
    proc.wait()


@pytest.mark.parametrize("call", sorted(SCHED_ATTACKS))
def test_scheduling_calls_only_on_the_caller(cage, victim, call):
    check_sched_call(cage, call, victim)


def check_group_forms(cage) -> None:
    """PRIO_PGRP / IOPRIO_WHO_PGRP on a process group that holds only the probe: refused. (Without
    the filter the kernel allows it, touching nothing but the probe.)"""
    for call in ("setpriority", "ioprio_set"):
        assert answer(cage.run("own-group-prio", call)) == "EPERM", call


def test_group_and_user_forms_refused(cage):
    check_group_forms(cage)  # first: the user forms below would touch every process of the uid
    for args in GROUP_FORMS:
        assert answer(cage.run(*args)) == "EPERM", args


def test_real_programs_still_renice_themselves(cage):
    """nice, ionice and taskset on themselves, python's os.sched_setaffinity(0, ...): work.
    `renice -p` / `taskset -p` on a pid refuse (see docs/threat-model.md)."""
    policy = cage.policy(fs={"exec": ["/usr/bin", "/bin"]})
    for argv in (["nice", "-n", "5", "true"], ["ionice", "-c", "3", "true"], ["taskset", "-c", "0", "true"],
                 ["chrt", "--idle", "0", "true"]):
        if shutil.which(argv[0]):
            r = cage.run(argv=argv, policy=policy)
            assert r.rc == 0, (argv, r)
    py = cage.policy(fs={"exec": [os.path.dirname(os.path.realpath(sys.executable)), "/usr/bin"],
                         "read": [sys.prefix, sys.base_prefix]})
    r = cage.run(argv=[sys.executable, "-S", "-c", "import os; os.sched_setaffinity(0, {0}); print('ok')"], policy=py)
    assert r.rc == 0 and r.out == "ok", r
    r = cage.run(argv=["renice", "-n", "5", "-p", "1"], policy=policy)
    assert r.rc != 0


_OPENMP = """
#include <omp.h>
#include <stdio.h>
int main(void) { int n = 0;
#pragma omp parallel reduction(+:n)
    n += 1;
    printf("threads %d\\n", n); return 0; }
"""


def test_seccomp_allow_lifts_the_caller_only_rule(cage, victim, tmp_path):
    """The cost of "the caller only": OpenMP's thread binding (OMP_PROC_BIND) pins each new thread
    by its thread id, which the filter refuses, and libgomp gives up. `seccomp.allow =
    ["sched_setaffinity"]` lifts the rule for that call (any target), and only for it."""
    allowed = cage.policy(seccomp={"allow": ["sched_setaffinity"]})
    assert cage.run("setaffinity", victim.pid, 0, policy=allowed).ok
    assert _affinity(victim.pid) == "0"
    assert answer(cage.run("setpriority", 0, victim.pid, 5, policy=allowed)) == "EPERM"
    source = tmp_path / "omp.c"
    source.write_text(_OPENMP)
    binary = tmp_path / "bin" / "omp"
    binary.parent.mkdir()
    if subprocess.run(["gcc", "-fopenmp", "-o", str(binary), str(source)], capture_output=True).returncode:
        pytest.skip("gcc cannot build OpenMP programs here")
    env = {"set": {"OMP_PROC_BIND": "true", "OMP_NUM_THREADS": "2"}}
    fs = {"read": ["/proc", "/sys"], "exec": [str(binary.parent)]}
    bound = cage.run(argv=[str(binary)], policy=cage.policy(fs=fs, env=env))
    assert bound.rc != 0 and "Operation not permitted" in bound.err, bound
    ok = cage.run(argv=[str(binary)], policy=cage.policy(fs=fs, env=env, seccomp={"allow": ["sched_setaffinity"]}))
    assert ok.rc == 0 and ok.out == "threads 2", ok


# --- the same probes as an ordinary user ------------------------------------------------

class Nobody:
    """Runs `sandboy run` as uid/gid 65534 with no capabilities, from the system python3 over this
    source tree (docs/findings.md, "Testing as an ordinary user")."""

    def __init__(self, probe_src: str, tmp: str):
        self.dir = tmp
        os.chmod(tmp, 0o755)
        self.probe = os.path.join(tmp, "probe")
        shutil.copy(probe_src, self.probe)
        os.chmod(self.probe, 0o755)
        self.work = os.path.join(tmp, "work")
        os.mkdir(self.work)
        os.chmod(self.work, 0o777)
        self.src = os.path.dirname(os.path.dirname(os.path.abspath(sys.modules["sandboy"].__file__)))

    def argv(self, argv) -> list:
        return as_user(argv)

    def env(self) -> dict:
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": self.src, "HOME": self.dir,
               "SANDBOY_CACHE_DIR": os.path.join(self.dir, "cache")}
        if "SANDBOY_NAMESPACES" in os.environ:  # as `without_namespaces` set it for this test
            env["SANDBOY_NAMESPACES"] = os.environ["SANDBOY_NAMESPACES"]
        return env

    def policy(self, fs=None, **sections) -> dict:
        fs = dict(fs or {})
        fs["read"] = BASE_READ + list(fs.get("read", []))
        fs["exec"] = [self.dir] + list(fs.get("exec", []))
        return {"version": 1, "fs": fs, **sections}

    def run(self, *args, policy=None, argv=None) -> Result:
        path = os.path.join(self.dir, "policy.toml")
        with open(path, "w") as fh:
            fh.write(to_toml(policy or self.policy()))
        os.chmod(path, 0o644)
        argv = argv or [self.probe, *map(str, args)]
        proc = subprocess.run(self.argv(["/usr/bin/python3", "-m", "sandboy", "run", "--policy", path, "--", *argv]),
                              capture_output=True, text=True, cwd=self.work, env=self.env(), timeout=30)
        return Result(proc.returncode, proc.stdout, proc.stderr)

    def outside(self, argv, **kw):
        return subprocess.run(self.argv(argv), **kw)


@pytest.fixture
def nobody(probe):
    skip_unless_nobody_can_run()
    tmp = tempfile.mkdtemp(prefix="sandboy-nobody-")
    user = Nobody(probe, tmp)
    if subprocess.run(user.argv(["/usr/bin/python3", "-c", "import sandboy"]), env=user.env(),
                      capture_output=True).returncode != 0:
        shutil.rmtree(tmp)
        pytest.skip("uid 65534 cannot read this source tree")
    yield user
    shutil.rmtree(tmp, ignore_errors=True)


def test_as_nobody_denylist(nobody):
    """Every entry refused; the entries the kernel itself permits an ordinary user answer with
    the kernel's own result once allowed (the filter is what refuses them)."""
    from sandboy.confine import seccomp

    for name, (args, caged, _) in DENYLIST.items():
        assert answer(nobody.run(*args)) == "EPERM", name
        if name in seccomp.NEVER_ALLOWED:  # never allowed (ADR 0030): `check_denylist_entry` probes the refusal
            continue
        assert answer(nobody.run(*args, policy=nobody.policy(seccomp={"allow": [name]}))) == caged, name


def test_as_nobody_setuid_and_chmod_twin(nobody):
    policy = nobody.policy(fs={"write": [nobody.work], "exec": ["/usr/bin", "/bin"]})
    r = nobody.run(argv=["/bin/sh", "-c", "cp /bin/sh ./mysh && chmod 4755 ./mysh; echo chmod=$?"], policy=policy)
    assert "chmod=1" in r.out, r
    target = os.path.join(nobody.work, "mysh")
    assert os.stat(target).st_uid == NOBODY and _mode_of(target) & 0o6000 == 0
    assert answer(nobody.run("mode", "openat", "created", "06755", policy=policy)) == "EPERM"
    assert not os.path.exists(os.path.join(nobody.work, "created"))
    assert nobody.run(argv=["/bin/chmod", "755", "mysh"], policy=policy).rc == 0
    assert _mode_of(target) == 0o755
    assert nobody.outside(["chmod", "2755", target]).returncode == 0  # the kernel allows it
    assert _mode_of(target) == 0o2755


def test_as_nobody_sysv_ipc(nobody):
    ipc = HostIpc(nobody.probe, runner=lambda argv, **kw: nobody.outside(argv, **kw))
    try:
        assert answer(nobody.run("sysv", "shm-write", hex(ipc.key), "overwritten")) == "EPERM"
        assert ipc.segment() == f"ok {ipc.marker}"
        for call in SYSV_CALLS:
            assert answer(nobody.run("sysv", call, ipc.target(call))) == "EPERM", call
        allowed = nobody.policy(ipc={"sysv": True})
        assert nobody.run("sysv", "shm-write", hex(ipc.key), "overwritten", policy=allowed).ok
        assert ipc.segment() == "ok overwritten"
    finally:
        ipc.remove()


def test_as_nobody_netlink(nobody):
    assert answer(nobody.run("netlink", NETLINK_SOCK_DIAG)) == "EPERM"
    assert nobody.run("netlink", 0).ok
    assert nobody.outside([nobody.probe, "netlink", str(NETLINK_SOCK_DIAG)], capture_output=True,
                          text=True).stdout.startswith("ok")
    if not shutil.which("ss"):
        return
    with socket.socket() as listener:  # a listener of another user (root), on loopback
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = f":{listener.getsockname()[1]}"
        seen = nobody.outside(["ss", "-lnt"], capture_output=True, text=True).stdout
        assert port in seen  # uncaged, an ordinary user lists every listener of the host
        policy = nobody.policy(fs={"exec": ["/usr/bin", "/bin"], "read": ["/etc"]})
        inside = nobody.run(argv=["ss", "-lnt"], policy=policy)
        assert port not in inside.out + inside.err


def test_as_nobody_scheduling_of_a_victim(nobody):
    """The measured attack: an ordinary user's cage reniced, re-pinned, idled the operator's
    processes of the same uid. Checked on the victim from the host; the twins act on themselves."""
    victim = subprocess.Popen(nobody.argv(["sleep", "60"]))
    try:
        pid = victim.pid
        for _ in range(200):  # until setpriv has exec'd sleep as uid 65534
            with open(f"/proc/{pid}/comm") as fh:
                if fh.read().strip() == "sleep":
                    break
            time.sleep(0.005)
        before = _state(pid)
        for call, attack in SCHED_ATTACKS.items():
            assert answer(nobody.run(*attack(pid))) == "EPERM", call
            assert nobody.run(*attack(0)).ok, call
        for args in GROUP_FORMS:
            assert answer(nobody.run(*args)) == "EPERM", args
        assert _state(pid) == before
        # the twin: uncaged, the same user does renice its other process
        assert nobody.outside([nobody.probe, "setpriority", "0", str(pid), "7"], capture_output=True).returncode == 0
        assert _nice(pid) == 7
        policy = nobody.policy(fs={"exec": ["/usr/bin", "/bin"]})
        assert nobody.run(argv=["nice", "-n", "5", "true"], policy=policy).rc == 0
    finally:
        victim.kill()
        victim.wait()


# --- the other argument rules, as checks the mutation test reuses -------------------------

# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET (linux/sched.h), by hand
NAMESPACE_BITS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)


def check_clone_flag(cage, bit: int) -> None:
    """clone() with one namespace flag: refused; the filter alone (root's capabilities) refuses
    what the kernel would allow, e.g. a new UTS namespace."""
    assert answer(cage.run("clone", bit)) == "EPERM", hex(bit)
    if ROOT:
        bpf = cage_bpf(cage.policy())
        assert answer(filter_only(bpf, [cage.probe, "clone", bit])) == "EPERM", hex(bit)


def check_tty_ioctls(cage) -> None:
    """On the command's own pty (`--tty`; a terminal handed in on stdin would be relayed and
    /dev/null put in its place): TIOCSTI (its typed byte would come back), TIOCLINUX and
    TIOCSETD to N_NULL (27, built into every kernel; the kernel allows it on any pty:
    test_redteam_cage.py's twin) are refused by the filter."""
    for cmd in (0x5412, 0x541C):  # TIOCSTI, TIOCLINUX
        assert answer(cage.run("tiocsti", cmd, tty=True)) == "EPERM", hex(cmd)
    assert answer(cage.run("tiocsetd", 27, tty=True)) == "EPERM"


def check_lease(cage) -> None:
    """fcntl(F_SETLEASE) refused by the filter: on a bad fd the kernel would answer EBADF."""
    assert answer(cage.run("nr", 72, -1, 1024, 0)) == "EPERM"  # F_SETLEASE, F_RDLCK


def check_btrfs_snapshots(cage) -> None:
    """The btrfs snapshot ioctls (made, destroyed) refused by the filter: on a bad fd the kernel
    would answer EBADF (tests/cage/test_redteam_cage14.py makes a real btrfs)."""
    for cmd in (0x50009401, 0x50009417, 0x5000940F, 0x5000943F):  # BTRFS_IOC_SNAP_CREATE(_V2), _SNAP_DESTROY(_V2)
        assert answer(cage.run("nr", 16, -1, cmd, 0)) == "EPERM", hex(cmd)


def test_btrfs_snapshots_are_refused_by_the_filter(cage):
    check_btrfs_snapshots(cage)
    # twin: an empty subvolume's creation reaches the kernel (its answer for a bad fd)
    assert answer(cage.run("nr", 16, -1, 0x5000940E, 0)) == "EBADF"  # BTRFS_IOC_SUBVOL_CREATE


def test_a_file_lease_is_refused_by_the_filter(cage):
    check_lease(cage)
    # twin: fcntl itself, and the lease query, reach the kernel (its answer for a bad fd)
    assert answer(cage.run("nr", 72, -1, 1025, 0)) == "EBADF"  # F_GETLEASE
    if ROOT:  # the filter alone, on a process keeping root's capabilities: still refused
        assert answer(filter_only(cage_bpf(cage.policy()), [cage.probe, "nr", 72, -1, 1024, 0])) == "EPERM"


@pytest.mark.parametrize("bit", NAMESPACE_BITS)
def test_each_clone_namespace_flag_refused(cage, bit):
    check_clone_flag(cage, bit)
    if ROOT:  # the twin: the kernel grants it to root's capabilities when the filter allows clone
        bpf = cage_bpf(cage.policy(seccomp={"deny": []}))
        from sandboy.confine import seccomp

        assert "clone" not in seccomp.DEFAULT_DENY
        assert answer(filter_only(bpf, [cage.probe, "clone", bit])) == "EPERM"
        assert subprocess.run([cage.probe, "clone", str(bit)], capture_output=True, text=True,
                              start_new_session=True).stdout.startswith("ok")


def test_tty_ioctls_refused(cage):
    check_tty_ioctls(cage)
