"""The mutation check: remove each seccomp rule, and each other protection of the cage, in turn
and require a probe to fail.

Each mutant patches a private part of `sandboy.confine.seccomp` in this test process only (with
pytest's monkeypatch, undone afterwards): a denylist entry, a SysV IPC call, one clone namespace
flag, one mode call, one scheduling call, the netlink allowlist, the tty ioctls, an argument
block. Nothing in production reads a switch for this: the cage is built here, in-process, with
the mutated module, and the probes run on the real kernel. A mutant that no probe notices means
a rule without a test (or a rule that does nothing): the test names every survivor.

The second test does the same for the other layers by weakening their compilers' output or
dropping one plan step: hygiene (no_new_privs, fds, signals and their mask, rlimits and the core
limit, capabilities as a whole and step by step), every row of the protections table that has a
probe here (the Landlock ruleset, TRUNCATE, REFER — its probe is the legitimate twin: without it
every cross-directory rename fails —, IOCTL_DEV, TCP ports, scopes; the seccomp filter; the
environment), `fs.deny` and the deny on Sandboy's own cache, `listen` refused where no listener
is legitimate, protected paths, the post-run git check and its quarantine. Two capability steps
are equivalent mutants, with the reason in `EQUIVALENT` (the test requires exactly those to
survive). The namespace tier, the protected defaults, the git check's findings and the terminal
have their own mutation checks (test_mutations_tier.py, _protected.py, _gitcheck.py, _terminal.py).

Budget: about 115 mutants, each a handful of cage runs (≈ 15 s here); the first test stops past
three minutes.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess

import pytest
import test_every_rule as rules
from cagekit import Cage
from mutantkit import Mutant, failed, first_failure, mutant, report, run_mutants

pytestmark = [pytest.mark.needs_kernel, pytest.mark.mutation, pytest.mark.without_namespaces]

BUDGET_SECONDS = 180


def _without(names, name) -> tuple:
    return tuple(n for n in names if n != name)


def _no_rules(*_args, **_kwargs):
    return []  # a seccomp rule function (seccomp._*_rules) that emits nothing


def _mutants(seccomp):
    """A Mutant (with its own probe) for every rule: attributes of `seccomp` replaced."""
    return [Mutant(label, tuple((seccomp, attribute, value) for attribute, value in patches), check)
            for label, patches, check in _rule_patches(seccomp)]


def _rule_patches(seccomp):
    """(label, patches, check) for every rule; `patches` are (attribute, new value) pairs."""
    out = []
    for name in seccomp.DEFAULT_DENY:
        out.append((f"deny {name}", [("DEFAULT_DENY", _without(seccomp.DEFAULT_DENY, name))],
                    lambda c, _v, n=name: rules.check_denylist_entry(c, n)))
    for name in seccomp.SYSV_IPC:
        out.append((f"sysv {name}", [("SYSV_IPC", _without(seccomp.SYSV_IPC, name))],
                    lambda c, v, n=name: rules.check_sysv_call(c, v["ipc"], n)))
    for name in seccomp.ENOSYS_CALLS:
        out.append((f"enosys {name}", [("ENOSYS_CALLS", _without(seccomp.ENOSYS_CALLS, name))],
                    lambda c, _v, n=name: _check_enosys(c, n)))
    for bit in rules.NAMESPACE_BITS:
        out.append((f"clone flag {bit:#x}", [("CLONE_NS_FLAGS", seccomp.CLONE_NS_FLAGS & ~bit)],
                    lambda c, _v, b=bit: rules.check_clone_flag(c, b)))
    for call in seccomp.MODE_ARG:
        mode_arg = {k: v for k, v in seccomp.MODE_ARG.items() if k != call}
        out.append((f"mode {call}", [("MODE_ARG", mode_arg)], lambda c, _v, n=call: rules.check_mode_call(c, n)))
    for call in seccomp.SELF_ONLY:
        self_only = {k: v for k, v in seccomp.SELF_ONLY.items() if k != call}
        out.append((f"self-only {call}", [("SELF_ONLY", self_only)],
                    lambda c, v, n=call: rules.check_sched_call(c, n, v["victim"])))
    for call in ("setpriority", "ioprio_set"):
        self_only = dict(seccomp.SELF_ONLY)
        self_only[call] = (None, self_only[call][1])
        out.append((f"which of {call}", [("SELF_ONLY", self_only)], lambda c, _v: rules.check_group_forms(c)))
    out += [
        ("netlink allowlist", [("NETLINK_ALLOWED", tuple(range(32)))], lambda c, _v: rules.check_netlink(c)),
        ("TIOCSTI", [("TIOCSTI", 0x7FFF_FFF0)], lambda c, _v: rules.check_tty_ioctls(c)),
        ("TIOCLINUX", [("TIOCLINUX", 0x7FFF_FFF1)], lambda c, _v: rules.check_tty_ioctls(c)),
        ("TIOCSETD", [("TIOCSETD", 0x7FFF_FFF2)], lambda c, _v: rules.check_tty_ioctls(c)),
        ("F_SETLEASE", [("F_SETLEASE", 0x7FFF_FFF3)], lambda c, _v: rules.check_lease(c)),
        ("BTRFS_IOC_SNAP_CREATE", [("BTRFS_IOC_SNAP_CREATE", 0x7FFF_FFF4)], lambda c, _v: rules.check_btrfs_snapshots(c)),
        ("BTRFS_IOC_SNAP_CREATE_V2", [("BTRFS_IOC_SNAP_CREATE_V2", 0x7FFF_FFF5)],
         lambda c, _v: rules.check_btrfs_snapshots(c)),
        ("BTRFS_IOC_SNAP_DESTROY", [("BTRFS_IOC_SNAP_DESTROY", 0x7FFF_FFF6)], lambda c, _v: rules.check_btrfs_snapshots(c)),
        ("BTRFS_IOC_SNAP_DESTROY_V2", [("BTRFS_IOC_SNAP_DESTROY_V2", 0x7FFF_FFF7)],
         lambda c, _v: rules.check_btrfs_snapshots(c)),
        ("x32 numbers", [("X32_SYSCALL_BIT", 0xFFFF_FFFF)], lambda c, _v: _check_x32(c)),
        ("prlimit block", [("_prlimit_rules", _no_rules)], lambda c, v: _check_prlimit(c, v["victim"])),
        ("socketpair block", [("_socketpair_rules", _no_rules)], lambda c, _v: _check_dgram_pair(c)),
        ("fastopen block", [("_fastopen_rules", _no_rules)], lambda c, v: _check_fastopen(c, v["port"])),
        ("socket block", [("_socket_rules", _no_rules)], lambda c, _v: _check_sockets(c)),
        ("mode block", [("_mode_rules", _no_rules)], lambda c, _v: rules.check_mode_call(c, "openat")),
        ("self-only block", [("_self_only_rules", _no_rules)],
         lambda c, v: rules.check_sched_call(c, "setpriority", v["victim"])),
    ]
    return out


def _check_enosys(cage, name):
    if name == "clone3":
        assert rules.answer(cage.run("clone3")) == "ENOSYS"
    else:
        policy = cage.policy(fs={"write": [str(cage.work)]})
        assert rules.answer(cage.run("mode", "openat2", "o2", "04755", policy=policy)) == "ENOSYS"


def _check_x32(cage):
    assert rules.answer(cage.run("x32")) == "EPERM"


def _check_prlimit(cage, victim):
    assert rules.answer(cage.run("prlimit", victim.pid)) == "EPERM"


def _check_dgram_pair(cage):
    assert rules.answer(cage.run("dgram-pair-sendto", "/sandboy-absent-socket")) == "EPERM"


def _check_fastopen(cage, port):
    policy = cage.policy(net={"connect_tcp": [port]})
    assert rules.answer(cage.run("tcp-fastopen", port, policy=policy)) == "EPERM"


def _check_sockets(cage):
    for family, kind in ((1, 1), (2, 2), (17, 3), (40, 1)):  # unix, UDP, AF_PACKET, AF_VSOCK
        assert rules.answer(cage.run("socket", family, kind)) == "EPERM", (family, kind)


def _another_errno(why: str) -> bool:
    """A kill by the probe's answer alone: past the filter the call still failed (ENOENT for a
    path the probe made up, EINVAL, ENOSYS where this kernel lacks it). It shows the rule is what
    answers, not that an attack gets through without it: the kernel's own checks (capabilities
    dropped, arguments) are a second lock there."""
    return re.search(r"assert '(E[A-Z0-9]+)' == '(E[A-Z0-9]+)'", why) is not None


def test_every_rule_has_a_probe_that_fails_without_it(probe, tmp_path_factory):
    from sandboy.confine import seccomp

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    victim, ipc = rules.start_victim(), rules.HostIpc(probe)
    context = {"victim": victim, "ipc": ipc, "port": listener.getsockname()[1]}

    def judge(one):
        try:
            one.check(Cage(probe, tmp_path_factory.mktemp("mutant")), context)
        except AssertionError as exc:
            return failed("its probe", exc)  # killed: the probe failed without the rule
        return None

    def replace_what_a_mutant_hit():
        if context["victim"].poll() is not None or context["ipc"].segment() != f"ok {context['ipc'].marker}":
            context["victim"].kill()
            context["victim"].wait()
            context["victim"] = rules.start_victim()
            context["ipc"].remove()
            context["ipc"] = rules.HostIpc(probe)

    try:
        mutants = _mutants(seccomp)
        # the unmutated filter passes every check (so a "failure" was the mutant's doing)
        intact = [(one.label, lambda check=one.check: check(Cage(probe, tmp_path_factory.mktemp("intact")), context))
                  for one in mutants]
        outcome = run_mutants(mutants, judge, budget_seconds=BUDGET_SECONDS, intact=lambda: first_failure(intact),
                              intact_when=("after",), after_each=replace_what_a_mutant_hit)
    finally:
        context["victim"].kill()
        context["victim"].wait()
        listener.close()
        context["ipc"].remove()
    report(outcome, "rule mutants", weak_kills={"another errno (the kernel still refusing the call)": _another_errno})


# --- the cage's other protections ------------------------------------------------------------

def _wrap(compiler, change):
    """A compiler that runs `compiler`, then `change(compiled)`: one protection weakened."""
    def mutated(job, *args, **kwargs):
        compiled = compiler(job, *args, **kwargs)
        change(compiled)
        return compiled
    return mutated


def _check_caps(cage, _v):
    assert cage.run("caps").out.startswith("ok eff=0 prm=0 inh=0 bnd=0 amb=0")


def _check_status_line(cage, field, expected):
    policy = cage.policy(fs={"read": ["/proc"], "exec": ["/usr/bin"]})
    out = cage.run(argv=["/usr/bin/grep", f"^{field}:", "/proc/self/status"], policy=policy).out
    assert out.split() == [f"{field}:", expected], out


def _check_nnp(cage, _v):
    _check_status_line(cage, "NoNewPrivs", "1")


def _check_fds(cage, _v):
    fd = os.open(os.devnull, os.O_RDONLY)
    try:
        os.set_inheritable(fd, True)
        assert cage.run("fds").out == "ok 0 1 2"
    finally:
        os.close(fd)


def _check_signals(cage, _v):
    import signal

    previous = signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    # SIGHUP alone is kept as inherited (an ignored SIGHUP is `nohup`'s intent): under
    # `nohup make test` its bit is set in the command too.
    hup_ignored = signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    try:
        _check_status_line(cage, "SigIgn", "0000000000000001" if hup_ignored else "0000000000000000")
    finally:
        signal.signal(signal.SIGUSR2, previous)


def _check_rlimits(cage, _v):
    policy = cage.policy(fs={"exec": ["/bin", "/usr/bin"]}, limits={"open_files": 37})
    assert cage.run(argv=["/bin/sh", "-c", "ulimit -n"], policy=policy).out == "37"


def _check_landlock_fs(cage, _v):
    assert rules.answer(cage.run("read", "/etc/passwd")) == "EACCES"


def _check_landlock_tcp(cage, v):
    policy = cage.policy(net={"connect_tcp": [v["port"] + 1 if v["port"] < 65535 else 1]})
    assert rules.answer(cage.run("tcp-connect", v["port"], policy=policy)) == "EACCES"


def _check_landlock_scopes(cage, v):
    assert rules.answer(cage.run("signal", v["victim"].pid, 0)) == "EPERM"  # signal 0: a permission check only


def _check_seccomp_at_all(cage, _v):
    assert rules.answer(cage.run("nr", 272, 0x10000000)) == "EPERM"  # unshare(CLONE_NEWUSER)


def _check_environment(cage, _v):
    os.environ["SANDBOY_MUTANT_SECRET"] = "s3cret"
    try:
        assert "s3cret" not in cage.run("env").out
    finally:
        del os.environ["SANDBOY_MUTANT_SECRET"]


def _check_protected(cage, _v):
    # named in fs.protect: this module runs without the namespace tier, where the default set is
    # reported degraded and only named paths get Landlock's read-only rules
    startup = cage.work / "conf" / "startup.rc"
    startup.parent.mkdir()
    startup.write_text("# host start-up file\n")
    policy = cage.policy(fs={"write": ["."], "protect": ["conf/startup.rc"]})
    assert not cage.run("write", startup, policy=policy).ok
    assert startup.read_text() == "# host start-up file\n"


def _check_git_planted(cage, _v):
    # the post-run git check (ADR 0019): a commondir planted in the write root's repository is
    # found after the run, moved out of git's way, and the run fails closed

    subprocess.run(["git", "init", "-q", str(cage.work)], check=True)
    policy = cage.policy(fs={"write": ["."], "exec": ["/bin", "/usr/bin"]})
    result = cage.run(argv=["/bin/sh", "-c", "mkdir evil && echo ../evil > .git/commondir"], policy=policy)
    assert result.rc == 125, result
    assert not (cage.work / ".git" / "commondir").exists()


def _check_listen(cage, v):
    # connect grants only: no listener can be legitimate, and listen() on an unbound socket would
    # take an ephemeral port Landlock never checks (test_net.py)
    policy = cage.policy(net={"connect_tcp": [v["port"]]})
    assert rules.answer(cage.run("tcp-listen", policy=policy)) == "EPERM"


def _check_truncate(cage, _v):
    data = cage.work / "data"
    data.write_text("keep\n")
    policy = cage.policy(fs={"read": [str(cage.work)]})
    assert rules.answer(cage.run("truncate", data, policy=policy)) == "EACCES"
    assert data.read_text() == "keep\n"


def _check_refer_twin(cage, _v):
    # the twin (legitimate work): a file moved between two directories of a write root; with
    # REFER not handled, Landlock refuses every such rename (EXDEV), as on ABI 1
    (cage.work / "a").mkdir()
    (cage.work / "b").mkdir()
    (cage.work / "a" / "f").write_text("moved\n")
    policy = cage.policy(fs={"write": [str(cage.work)]})
    assert cage.run("rename", cage.work / "a" / "f", cage.work / "b" / "f", policy=policy).ok
    assert (cage.work / "b" / "f").read_text() == "moved\n"


def _check_ioctl_dev(cage, _v):
    # a terminal the policy lets the command open for reading only: no ioctl on it (ABI 5)
    master, slave = os.openpty()
    try:
        path = os.ttyname(slave)
        policy = cage.policy(fs={"read": [path], "exec": ["/bin", "/usr/bin"]})
        out = cage.run(argv=["/bin/sh", "-c", f'exec "$0" tiocgwinsz < {path}', cage.probe], policy=policy)
        assert rules.answer(out) == "EACCES", out
    finally:
        os.close(master)
        os.close(slave)


def _check_deny(cage, _v):
    secret = cage.work / "secret"
    secret.write_text("secret\n")
    policy = cage.policy(fs={"read": [str(cage.work)], "deny": [str(secret)]})
    assert rules.answer(cage.run("read", secret, policy=policy)) == "EACCES"


def _check_cache_denied(cage, _v):
    # Sandboy's own cache inside a write grant: the command must not write it (ADR 0006)
    cache = cage.work / "cache"
    before = os.environ.get("SANDBOY_CACHE_DIR")
    os.environ["SANDBOY_CACHE_DIR"] = str(cache)
    try:
        policy = cage.policy(fs={"write": [str(cage.work)]})
        # (EROFS under the tier: the denied cache inside a write root is bound read-only, ADR 0009 s9)
        assert rules.answer(cage.run("create", cache / "planted", policy=policy)) in ("EACCES", "EROFS")
        assert not (cache / "planted").exists()
    finally:
        if before is None:  # the suite's own cache directory back (tests/conftest.py checks it)
            del os.environ["SANDBOY_CACHE_DIR"]
        else:
            os.environ["SANDBOY_CACHE_DIR"] = before


def _core_limit_hard() -> int:
    import resource

    return resource.getrlimit(resource.RLIMIT_CORE)[1]


def _check_core_limit(cage, _v):
    import resource

    previous = resource.getrlimit(resource.RLIMIT_CORE)
    allowed = previous[1] if previous[1] != 0 else 1 << 20  # root may raise a hard limit of 0
    resource.setrlimit(resource.RLIMIT_CORE, (allowed, max(allowed, previous[1])))  # the caller allows cores
    try:
        policy = cage.policy(fs={"exec": ["/bin", "/usr/bin"]})
        assert cage.run(argv=["/bin/sh", "-c", "ulimit -c"], policy=policy).out == "0"
    finally:
        resource.setrlimit(resource.RLIMIT_CORE, previous)


def _pending_signals_hard() -> int:
    import resource

    return resource.getrlimit(resource.RLIMIT_SIGPENDING)[1]


def _check_pending_signals(cage, _v):
    # the command's cap of queued signals (hygiene.PENDING_SIGNALS; test_pending_signals.py fills it)
    from sandboy.confine import hygiene

    policy = cage.policy(fs={"read": ["/proc"], "exec": ["/bin", "/usr/bin"]})
    out = cage.run(argv=["/bin/grep", "Max pending signals", "/proc/self/limits"], policy=policy).out
    assert out.split()[3:5] == [str(hygiene.PENDING_SIGNALS)] * 2, out


CAP_NET_RAW = 13  # linux/capability.h, by hand
PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, PR_CAP_AMBIENT_CLEAR_ALL = 47, 2, 4


def _capabilities(inheritable: int) -> None:
    """Set this thread's inheritable set (capset(2), v3: the low 32 bits here)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)
    data = (ctypes.c_uint32 * 6)()
    if libc.capget(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    data[2] = inheritable
    if libc.capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def _check_caps_of_a_caller_with_inheritable_ones(cage, _v):
    # A caller holding an inheritable (and so ambient-capable) capability, as a service started
    # with systemd's AmbientCapabilities= is: the empty bounding set does not limit the
    # inheritable set, and (P(inh) & F(inh)) gives it back at execve of a file that has it.
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    _capabilities(1 << CAP_NET_RAW)
    try:
        if libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_NET_RAW, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "PR_CAP_AMBIENT_RAISE")
        _check_caps(cage, _v)
    finally:
        libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
        _capabilities(0)


def _check_unblocked(cage, _v):
    import signal

    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2})  # the caller blocks one
    try:
        _check_status_line(cage, "SigBlk", "0000000000000000")
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _without_step(plan, label):
    """A hygiene plan function without its step named `label`."""
    return lambda *a, **k: [step for step in plan(*a, **k) if step[0] != label]


def _without_fs_right(right):
    """protections.fs_rights_for without `right`: as on a kernel whose Landlock lacks it."""
    from sandboy.confine import protections

    real = protections.fs_rights_for
    return lambda abi: real(abi) & ~right


def _without_cache_deny():
    from sandboy.confine import landlock
    from sandboy.cache_places import cache_dir

    real = landlock.expand_denies
    return lambda denies, warn, budget=None, watch=None: real(
        [d for d in denies if d != os.path.realpath(cache_dir())], warn, budget, watch)


# Mutants no probe can tell apart from the intact cage, each with the reason (checked: exactly
# these survive; a probe that kills one should take it off this list).
EQUIVALENT = {
    "securebits": "uid 0's execve gains capabilities only through the bounding set (emptied) and the "
                  "inheritable set (emptied by capset), and no_new_privs stops set-id and file capabilities "
                  "from adding any: SECBIT_NOROOT and its locks are a second lock (capabilities(7))",
    "ambient cleared": "the kernel drops every ambient capability that is not both permitted and "
                       "inheritable, and capset empties both: the explicit clear is a second lock "
                       "(capabilities(7), 'Ambient capability set')",
}


def _protection_mutants():
    from sandboy.confine import gitcheck, gitjudge, hygiene, landlock, protected, protections, seccomp

    def clear(key, value):
        return lambda compiled: compiled.outputs.__setitem__(key, value)

    def no_steps(compiled):
        compiled.steps.clear()

    out = [mutant(*row) for row in [
        ("no_new_privs", hygiene, "plan_no_new_privs", lambda: [], _check_nnp),
        ("inherited fds closed", hygiene, "plan_cloexec", lambda *a, **k: [], _check_fds),
        ("signal dispositions reset", hygiene, "plan_signals", lambda: [], _check_signals),
        ("rlimits", hygiene, "plan_rlimits", lambda limits: [], _check_rlimits),
        ("landlock ruleset", landlock.Ruleset, "plan", lambda self: [], _check_landlock_fs),
        ("landlock.net.tcp", protections, "compile_landlock_net",  # as on a kernel below ABI 4
         _wrap(protections.compile_landlock_net,
               lambda c: c.outputs.update(handled_net=0, connect_ports=(), bind_ports=())), _check_landlock_tcp),
        ("landlock.scopes", protections, "compile_landlock_net",
         _wrap(protections.compile_landlock_net, clear("scoped", 0)), _check_landlock_scopes),
        ("seccomp filter", protections, "compile_seccomp", _wrap(protections.compile_seccomp, no_steps),
         _check_seccomp_at_all),
        ("protected paths", protected, "resolve_protected", lambda *a, **k: ([], []), _check_protected),
        ("post-run git check", gitcheck.GitSnapshot, "verify", lambda self, budget=0: [], _check_git_planted),
        ("environment", protections, "compile_environment",
         _wrap(protections.compile_environment, lambda c: c.outputs["env"].update(os.environ)), _check_environment),
        # added since: the rest of the protections table, the denies, the git check's quarantine,
        # and the hygiene steps one by one
        ("listen refused without a legitimate listener", seccomp, "build",
         (lambda real: lambda deny, *a, **k: real(set(deny) - {"listen"}, *a, **k))(seccomp.build), _check_listen),
        ("fs.deny", landlock, "expand_denies", lambda denies, warn, budget=None, watch=None: [], _check_deny),
        ("Sandboy's cache denied", landlock, "expand_denies", _without_cache_deny(), _check_cache_denied),
        # (patched where it lives: gitcheck only forwards the name, and after_run imports it from gitjudge)
        ("git check quarantine", gitjudge, "quarantine", lambda findings, roots, stamp=None: ([], []),
         _check_git_planted),
        ("signals unblocked", hygiene, "plan_signals", _without_step(hygiene.plan_signals, "unblock signals"),
         _check_unblocked),
    ]]
    abi = landlock.abi_version()
    # a Landlock row's probe needs a kernel that has it (below its ABI the cage reports it degraded)
    for row, label, right, check in (("landlock.fs.truncate", "landlock.fs.truncate", landlock.TRUNCATE, _check_truncate),
                                     ("landlock.fs.refer", "landlock.fs.refer (twin)", landlock.REFER, _check_refer_twin),
                                     ("landlock.fs.ioctl_dev", "landlock.fs.ioctl_dev", landlock.IOCTL_DEV,
                                      _check_ioctl_dev)):
        if protections.protection(row).available(abi):
            out.append(mutant(label, protections, "fs_rights_for", _without_fs_right(right), check))
    if os.geteuid() == 0 or _core_limit_hard() != 0:  # else the step cannot be seen: nothing to lower
        out.append(mutant("rlimit core", hygiene, "plan_rlimits", _without_step(hygiene.plan_rlimits, "rlimit core"),
                    _check_core_limit))
    if os.geteuid() == 0 or _pending_signals_hard() > hygiene.PENDING_SIGNALS:  # else nothing to lower
        out.append(mutant("rlimit sigpending", hygiene, "plan_rlimits",
                          _without_step(hygiene.plan_rlimits, "rlimit sigpending"), _check_pending_signals))
    if os.geteuid() == 0:  # without capabilities there is nothing to drop
        out.append(mutant("capabilities dropped", hygiene, "plan_drop_capabilities", lambda: [], _check_caps))
        drop = hygiene.plan_drop_capabilities
        for label, prefix in (("capability bounding set", "drop capability"), ("securebits", "securebits"),
                              ("capset", "capset"), ("ambient cleared", "clear ambient")):
            out.append(mutant(label, hygiene, "plan_drop_capabilities",
                        (lambda p: lambda: [s for s in drop() if not s[0].startswith(p)])(prefix),
                        _check_caps_of_a_caller_with_inheritable_ones))
    return out


def test_every_protection_has_a_probe_that_fails_without_it(probe, tmp_path_factory):
    """The same for the cage's other layers (see the module docstring); the namespace tier has
    its own mutation check (test_mutations_tier.py)."""
    victim = rules.start_victim()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    context = {"victim": victim, "port": listener.getsockname()[1]}

    def judge(one):
        try:
            one.check(Cage(probe, tmp_path_factory.mktemp("mutant")), context)
        except AssertionError as exc:
            return failed("its probe", exc)
        return None

    try:
        mutants = _protection_mutants()
        intact = [(one.label, lambda check=one.check: check(Cage(probe, tmp_path_factory.mktemp("intact")), context))
                  for one in mutants]
        outcome = run_mutants(mutants, judge, budget_seconds=BUDGET_SECONDS, intact=lambda: first_failure(intact),
                              intact_when=("after",))
    finally:
        victim.kill()
        victim.wait()
        listener.close()
    report(outcome, "protection mutants", equivalent=EQUIVALENT)
