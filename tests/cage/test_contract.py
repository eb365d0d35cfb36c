"""The exit-code contract, limits, --status-json and --dry-run (docs/design.md, "Exit codes")."""

from __future__ import annotations

import json
import os
import sys

import pytest

from sandboy import CageError, Policy
from sandboy.confine import cage as cagemod

from cagekit import SANDBOY

pytestmark = pytest.mark.needs_kernel


def unique_name() -> str:
    """A process name (comm, at most 15 bytes) no other test uses."""
    return f"sbx{os.getpid() % 100000}{os.urandom(3).hex()}"


def gone(name: str) -> bool:
    """No live process on the host has the comm `name` (the probe's grandchild takes it: in a
    PID namespace the pid it prints is the namespace's, not the host's)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        comm, _, rest = stat.partition(" (")[2].rpartition(") ")
        if comm == name and not rest.startswith("Z"):
            return False
    return True


@pytest.mark.parametrize("via", ["api", "cli"])
def test_child_exit_code_passes_through(cage, via):
    assert cage.run("exit", 42, via=via).rc == 42
    assert cage.run("exit", 0, via=via).rc == 0


@pytest.mark.parametrize("text, key", [
    ("version = 1\n[fs]\nread = [\"/usr\"\n", "TOML syntax error"),
    ("version = 1\n[fs]\nreed = []\n", "fs.reed: unknown key"),
    ("version = 1\n[seccomp]\ndeny = [\"ptrac\"]\n", "seccomp.deny[0]: unknown system call"),
    ("version = 2\n", "version: expected 1"),
    ("version = 1\n[net]\nconnect_tcp = [70000]\n", "net.connect_tcp[0]"),
])
def test_policy_error_exits_2_before_anything_runs(cage, text, key):
    r = cage.cli(["--", cage.probe, "create", "ran"], text)
    assert r.rc == 2, r
    assert f"policy.toml: {key}" in r.err and "Traceback" not in r.err, r.err
    assert not (cage.work / "ran").exists()


def test_missing_policy_file_exits_2(cage):
    r = cage.cli(["--", cage.probe, "exit", "0"], "", policy_path=cage.root / "nope.toml")
    assert r.rc == 2 and "nope.toml: cannot read" in r.err, r


def test_domains_fallback_under_strict_exit_125_never_runs(cage):
    """Without a private network namespace (forced off here) `net.domains` can only be enforced
    by the weaker Landlock port fallback: `compat.landlock = "strict"` refuses it, 125."""
    env = dict(os.environ, SANDBOY_NAMESPACES="0", SANDBOY_CACHE_DIR=str(cage.root / "cache"))
    policy = cage.policy(net={"domains": ["pypi.org"]}, compat={"landlock": "strict"})
    r = cage.cli(["--", cage.probe, "create", "ran"], policy, env=env)
    assert r.rc == 125 and "egress: no private network namespace" in r.err, r
    assert not (cage.work / "ran").exists()


def test_no_landlock_exit_125(cage):
    """A sandboy started where Landlock is unavailable (here: the syscall denied by an outer
    cage) must refuse with 125 rather than run the command unconfined."""
    # The outer cage lets Python start (it reads everything, execs the interpreter) but denies
    # the Landlock syscall, as a kernel without Landlock would.
    outer = cage.policy(fs={"read": ["/"], "exec": [sys.base_prefix], "write": ["."]},
                        seccomp={"deny": ["landlock_create_ruleset"]})
    inner = cage.root / "inner.toml"
    inner.write_text("version = 1\n[fs]\nread = [\"/usr\"]\n")
    r = cage.run(argv=[sys.executable, SANDBOY, "run", "--policy", str(inner), "--", cage.probe, "create", "ran"],
                 policy=dict(outer, env={"set": {"SANDBOY_CACHE_DIR": str(cage.work / "cache")}}))
    assert r.rc == 125, r
    assert "Landlock is not available" in r.err
    assert not (cage.work / "ran").exists()


def test_strict_refuses_what_the_kernel_cannot_enforce(cage):
    policy = Policy.from_mapping(cage.policy(net={"connect_tcp": [443]}, compat={"landlock": "strict"}))
    with pytest.raises(CageError, match="strict"):
        cagemod.build(policy, cwd=str(cage.work), abi=3)  # as on a kernel without TCP rules
    best_effort = Policy.from_mapping(cage.policy(net={"connect_tcp": [443]}))
    built = cagemod.build(best_effort, cwd=str(cage.work), abi=3)
    try:
        assert any("ABI 4" in d for d in built.degraded)
    finally:
        built.close()


@pytest.mark.parametrize("via", ["api", "cli"])
def test_not_executable_126_and_not_found_127(cage, via):
    (cage.work / "bin").mkdir()
    script = cage.work / "bin" / "noexec"
    script.write_text("#!/bin/sh\nexit 0\n")
    policy = cage.policy(fs={"exec": ["bin"]})
    assert cage.run(argv=[str(script)], policy=policy, via=via).rc == 126
    assert cage.run(argv=[str(cage.work / "bin" / "missing")], policy=policy, via=via).rc == 127
    assert cage.run(argv=["no-such-command-sandboy"], policy=policy, via=via).rc == 127


@pytest.mark.parametrize("via", ["api", "cli"])
def test_wall_seconds_kills_the_whole_tree_137(cage, via):
    name = unique_name()
    r = cage.run("hang", name, policy=cage.policy(limits={"wall_seconds": 1}), via=via)
    assert r.rc == 128 + 9, r
    assert r.out.startswith("ok ") and gone(name)  # the grandchild that called setsid too


def test_orphans_do_not_outlive_a_supervised_run(cage):
    name = unique_name()
    r = cage.run("orphan", name)
    assert r.ok, r
    assert r.out.startswith("ok ") and gone(name)


def test_processes_limit_stops_a_fork_bomb(cage):
    r = cage.run("forkbomb", 200, policy=cage.policy(limits={"processes": 8}))
    assert r.ok, r
    assert int(r.out.split()[1]) < 8
    assert cage.run("forkbomb", 20).out == "ok 20"  # the twin: without the limit all forks work


def test_status_json_exec_mode(cage):
    status = cage.root / "status.json"
    policy = cage.policy(fs={"deny": ["x"]}, net={"connect_tcp": [443]})
    r = cage.cli(["--status-json", str(status), "--", cage.probe, "exit", "3"], policy)
    assert r.rc == 3
    doc = json.loads(status.read_text())
    assert doc["outcome"] == "exec" and doc["policy"].endswith("policy.toml")
    assert doc["landlock_abi"] >= 1 and doc["degraded"] == []
    ll, sc = doc["enforced"]["landlock"], doc["enforced"]["seccomp"]
    assert ll["tcp_connect"] == [443] and ll["tcp_bind"] == []
    assert "ptrace" in sc["denied_syscalls"] and sc["native_arch_only"] is True
    assert sc["sockets"] == {"unix": False, "inet": True, "udp": False, "mptcp_sctp_raw": False}
    assert doc["enforced"]["no_new_privs"] is True


def test_status_json_supervised(cage):
    status = cage.root / "status.json"
    name = unique_name()
    r = cage.cli(["--status-json", str(status), "--", cage.probe, "hang", name], cage.policy(limits={"wall_seconds": 1}))
    assert r.rc == 137 and r.out.startswith("ok ") and gone(name)
    doc = json.loads(status.read_text())
    assert doc["outcome"] == "timed_out" and doc["returncode"] == 137 and doc["signal"] == 9
    assert doc["enforced"]["limits"] == {"wall_seconds": 1}


def test_dry_run_json_runs_nothing(cage):
    policy = cage.policy(fs={"write": ["{tmp}"]})
    r = cage.cli(["--dry-run", "--json", "--", cage.probe, "create", "ran"], policy)
    assert r.rc == 0, r
    doc = json.loads(r.out)
    # {tmp} needs a supervisor to remove it, except under the namespace tier (a tmpfs per run)
    private_tmp = doc["enforced"]["namespaces"].get("tmp") is not None
    assert doc["command"] == [cage.probe, "create", "ran"] and doc["supervised"] is not private_tmp
    rules = dict((path, rights) for path, rights in doc["enforced"]["landlock"]["fs_rules"])
    assert rules[os.path.dirname(cage.probe)] == ["execute", "read_file", "read_dir"]
    tmp = [p for p in rules if os.path.basename(p).startswith("sandboy-")]
    # the private {tmp} was removed — or, under the tier, is `sandboy run`'s fixed mount point
    # (the run's own: the same path a run would have), empty
    assert len(tmp) == 1
    if private_tmp:
        assert os.path.basename(tmp[0]) == f"sandboy-tmp-{os.geteuid()}" and os.listdir(tmp[0]) == []
    else:
        assert not os.path.exists(tmp[0])
    assert not (cage.work / "ran").exists()
    text = cage.cli(["--dry-run", "--", cage.probe], policy)
    assert text.rc == 0 and ("private tmpfs per run" if private_tmp else "supervised") in text.out
    plain = cage.cli(["--dry-run", "--", cage.probe], cage.policy())
    assert plain.rc == 0 and "exec mode" in plain.out


def test_private_tmp_removed_after_the_run(cage):
    """Nothing of a run's `{tmp}` outlives it on the host: without the tier its directory is
    removed; under the tier `sandboy run`'s `{tmp}` is the fixed mount point each run covers with
    a tmpfs of its own (`cage.fixed_tmp_dir`, ADR 0028 session 12): it stays, empty."""
    status = cage.root / "status.json"
    policy = cage.policy(fs={"write": ["{tmp}"]})
    tmpdir = cage.root / "T"
    tmpdir.mkdir()
    env = dict(os.environ, SANDBOY_CACHE_DIR=str(cage.root / "cache"), TMPDIR=str(tmpdir))
    r = cage.cli(["--status-json", str(status), "--", cage.probe, "exit", "0"], policy, env=env)
    assert r.rc == 0, r
    doc = json.loads(status.read_text())
    rules = doc["enforced"]["landlock"]["fs_rules"]
    tmp = [p for p, _ in rules if os.path.basename(p).startswith("sandboy-")]
    assert len(tmp) == 1
    if doc["enforced"]["namespaces"].get("tmp") is None:
        assert not os.path.exists(tmp[0]), "the per-run {tmp} outlived the run"
        assert os.listdir(tmpdir) == []
    else:
        assert tmp[0] == str(tmpdir / f"sandboy-tmp-{os.geteuid()}")
        assert os.listdir(tmpdir) == [os.path.basename(tmp[0])] and os.listdir(tmp[0]) == []


def test_a_cage_error_names_the_step_that_failed(tmp_path):
    """A working directory that vanished between build and start: exit 125, and the message
    says which plan step failed — through every launcher (their plans differ in length)."""
    from sandboy import Policy
    from sandboy.confine.cage import build
    from sandboy.confine.launch import run
    from sandboy.confine.supervision import Supervision

    work = tmp_path / "work"
    work.mkdir()
    policy = Policy.from_mapping({"version": 1, "fs": {"read": ["/usr"], "exec": ["/usr/bin"]}}, "<t>")
    cage = build(policy, cwd=str(work))
    try:
        work.rmdir()
        for result in (run(["/usr/bin/true"], cage), run(["/usr/bin/true"], cage, supervise=True),
                       Supervision(["/usr/bin/true"], cage).start().wait()):
            assert (result.outcome, result.returncode) == ("cage_error", 125), result
            assert f"enter {work}" in result.error, result.error
    finally:
        cage.close()
