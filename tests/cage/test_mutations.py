"""The mutation check: remove each seccomp rule in turn and require a probe to fail.

Each mutant patches a private part of `sandboy.confine.seccomp` in this test process only (with
pytest's monkeypatch, undone afterwards): a denylist entry, a SysV IPC call, one clone namespace
flag, one mode call, one scheduling call, the netlink allowlist, the tty ioctls, an argument
block. Nothing in production reads a switch for this: the cage is built here, in-process, with
the mutated module, and the probes run on the real kernel. A mutant that no probe notices means
a rule without a test (or a rule that does nothing): the test names every survivor.

Budget: about 110 mutants, each a handful of cage runs; it must finish within three minutes.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time

import pytest
import test_every_rule as rules
from cagekit import Cage

pytestmark = [pytest.mark.needs_kernel, pytest.mark.mutation, pytest.mark.without_namespaces]

BUDGET_SECONDS = 180


def _without(names, name) -> tuple:
    return tuple(n for n in names if n != name)


def _noop(*_args, **_kwargs):
    return None


def _mutants(seccomp):
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
        ("x32 numbers", [("X32_SYSCALL_BIT", 0xFFFF_FFFF)], lambda c, _v: _check_x32(c)),
        ("prlimit block", [("_prlimit_block", _noop)], lambda c, v: _check_prlimit(c, v["victim"])),
        ("socketpair block", [("_socketpair_block", _noop)], lambda c, _v: _check_dgram_pair(c)),
        ("fastopen block", [("_fastopen_block", _noop)], lambda c, v: _check_fastopen(c, v["port"])),
        ("socket block", [("_socket_block", _noop)], lambda c, _v: _check_sockets(c)),
        ("mode block", [("_mode_block", _noop)], lambda c, _v: rules.check_mode_call(c, "openat")),
        ("self-only block", [("_self_only_block", _noop)],
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


def _forget_built_cages():
    """`sandboy.run` reuses a cage compiled earlier for an equal policy: a mutant must not."""
    from sandboy.confine import cage as cagemod

    for built in cagemod._REUSED.values():
        built.close()
    cagemod._REUSED.clear()


def test_every_rule_has_a_probe_that_fails_without_it(probe, tmp_path_factory):
    from sandboy.confine import seccomp

    victim = rules.start_victim()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    ipc = rules.HostIpc(probe)
    context = {"victim": victim, "ipc": ipc, "port": listener.getsockname()[1]}
    survivors, started = [], time.monotonic()
    try:
        mutants = _mutants(seccomp)
        for label, patches, check in mutants:
            cage = Cage(probe, tmp_path_factory.mktemp("mutant"))
            _forget_built_cages()
            with pytest.MonkeyPatch.context() as mp:
                for attribute, value in patches:
                    assert hasattr(seccomp, attribute), attribute
                    mp.setattr(seccomp, attribute, value)
                try:
                    check(cage, context)
                except AssertionError:
                    pass  # killed: a probe failed without the rule
                else:
                    survivors.append(label)
            _forget_built_cages()
            assert time.monotonic() - started < BUDGET_SECONDS, f"over budget after {label}"
            if victim.poll() is not None or ipc.segment() != f"ok {ipc.marker}":  # a mutant hit the host
                victim = context["victim"] = rules.start_victim()
                ipc.remove()
                ipc = context["ipc"] = rules.HostIpc(probe)
        # the unmutated filter passes every check (so a "failure" above was the mutant's doing)
        for label, _patches, check in mutants:
            check(Cage(probe, tmp_path_factory.mktemp("intact")), context)
    finally:
        victim.kill()
        victim.wait()
        listener.close()
        ipc.remove()
    assert not survivors, f"rules no probe depends on: {survivors}"
    print(f"{len(mutants)} mutants killed in {time.monotonic() - started:.1f} s")
