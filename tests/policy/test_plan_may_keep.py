"""`resolve.plan_may_keep`: which loaded policies `sandboy run` may keep in the plan cache at all,
decided before the build (ADR 0028), without the cage. Session 12 turned three refusals into
conditions: `{tmp}` (kept, except with the tier forced off: a directory per run), `include` (kept
where the presets' questions were all recorded: `policy.lookups`); egress and a missing $HOME
stay refused. Each case has its twin that differs in the one input. `limits.wall_seconds` (session
12) and, as root, `limits.processes` (session 13) are kept except with the tier forced off.
"""

import pytest

from sandboy.policy import lookups
from sandboy.policy.model import Policy
from sandboy.policy.resolve import plan_may_keep


def policy(**sections) -> Policy:
    return Policy.from_mapping({"version": 1, **sections})


@pytest.fixture
def recorded(monkeypatch):
    """This process's presets record emptied and usable (another test's `unsure` stays out)."""
    monkeypatch.setattr(lookups, "_answers", {})
    monkeypatch.setattr(lookups, "_unsure", False)
    monkeypatch.setenv("HOME", "/home/someone")
    monkeypatch.delenv("SANDBOY_NAMESPACES", raising=False)


def test_a_plain_policy_is_kept_and_not_without_home(recorded, monkeypatch):
    plain = policy(fs={"read": ["/usr"]})
    assert plan_may_keep(plain)
    monkeypatch.delenv("HOME")
    assert not plan_may_keep(plain)


def test_tmp_is_kept_except_with_the_tier_forced_off(recorded, monkeypatch):
    with_tmp = policy(fs={"write": ["{tmp}"]})
    assert plan_may_keep(with_tmp)
    monkeypatch.setenv("SANDBOY_NAMESPACES", "1")
    assert plan_may_keep(with_tmp)
    monkeypatch.setenv("SANDBOY_NAMESPACES", "0")
    assert not plan_may_keep(with_tmp)
    assert plan_may_keep(policy(fs={"read": ["/usr"]}))  # (the twin: no `{tmp}`, the tier off)


def test_include_is_kept_only_while_every_question_was_recorded(recorded, monkeypatch):
    included = policy(include=["system"])  # (its load asks the machine through lookups.ask)
    assert lookups.recorded() and plan_may_keep(included)
    monkeypatch.setattr(lookups, "_unsure", True)  # a question raised, or two answers to one
    assert not plan_may_keep(included)


def test_egress_is_never_kept(recorded):
    assert not plan_may_keep(policy(net={"domains": ["pypi.org"]}))
    assert plan_may_keep(policy(net={"connect_tcp": [443]}))  # (ports without the proxy: not egress)


def test_a_deadline_is_kept_except_with_the_tier_forced_off(recorded, monkeypatch):
    """exec mode's C wait holds `limits.wall_seconds` under the tier (session 12); without it a
    supervisor does, and a supervised run makes no entry."""
    deadline = policy(limits={"wall_seconds": 60})
    assert plan_may_keep(deadline)
    monkeypatch.setenv("SANDBOY_NAMESPACES", "0")
    assert not plan_may_keep(deadline)
    assert plan_may_keep(policy(fs={"read": ["/usr"]}))  # (the twin: no deadline, the tier off)


@pytest.mark.parametrize("euid", [0, 1000], ids=["root", "user"])
def test_processes_are_kept_except_as_root_with_the_tier_forced_off(recorded, monkeypatch, euid):
    """As root `limits.processes` is a pids cgroup: under the tier exec mode's wait makes and removes
    it, a hit's too (session 13: tests/cage/test_exec_pids_cgroup.py); without the tier a supervisor
    does, and a supervised run makes no entry. An ordinary user's is RLIMIT_NPROC, a plan step."""
    import os

    monkeypatch.setattr(os, "geteuid", lambda: euid)
    processes = policy(limits={"processes": 64})
    assert plan_may_keep(processes)
    monkeypatch.setenv("SANDBOY_NAMESPACES", "0")
    assert plan_may_keep(processes) == (euid != 0)
    assert plan_may_keep(policy(fs={"read": ["/usr"]}))  # (the twin: no limit, the tier off)
