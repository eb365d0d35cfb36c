"""The mutation checks' runner judged on its own (no kernel): a survivor fails the report by name
with what it patched, a stale equivalent fails it, an intact failure is reported before any
mutant, patches are undone after each mutant, and kills by a refused cage are told apart."""

from __future__ import annotations

import types

import pytest
from mutantkit import CageRefused, failed, first_failure, killed_by_refusal, mutant, report, run_mutants


def _target():
    return types.SimpleNamespace(__name__="target", guard=True, lock=True, spare=True)


def _judge(target):
    def judge(_mutant):
        # by hand: the guard and the lock are each what a check depends on; `spare` nothing
        return first_failure([("guard check", lambda: _require(target.guard, "guard gone")),
                              ("lock check", lambda: _require(target.lock, "lock gone"))])
    return judge


def _require(condition, message):
    assert condition, message


def test_a_survivor_fails_the_report_naming_what_it_patched(capsys):
    target = _target()
    mutants = [mutant("no guard", target, "guard", False), mutant("no spare", target, "spare", False)]
    outcome = run_mutants(mutants, _judge(target), budget_seconds=60)
    assert outcome["killed"] == {"no guard": "guard check: guard gone assert False"}
    assert outcome["survivors"] == ["no spare"]
    assert (target.guard, target.spare) == (True, True)  # every patch undone
    with pytest.raises(AssertionError, match=r"no spare \(target\.spare\)"):
        report(outcome, "test mutants")
    assert "no guard" in capsys.readouterr().out


def test_equivalents_must_be_exactly_the_survivors():
    target = _target()
    outcome = run_mutants([mutant("no spare", target, "spare", False), mutant("no lock", target, "lock", False)],
                          _judge(target), budget_seconds=60)
    report(outcome, "test mutants", equivalent={"no spare": "nothing reads it"})
    with pytest.raises(AssertionError, match="listed as equivalent but killed: .'no lock'"):
        report(outcome, "test mutants", equivalent={"no spare": "nothing reads it", "no lock": "stale"})


def test_the_intact_code_is_judged_first_and_a_missing_attribute_is_no_kill():
    target = _target()
    target.lock = False  # "intact" code that already fails a check
    assert run_mutants([mutant("no guard", target, "guard", False)], _judge(target), budget_seconds=60) == {
        "intact": "lock check: lock gone assert False"}
    target.lock = True
    with pytest.raises(AttributeError):  # a stale mutant fails loudly, never counts as killed
        run_mutants([mutant("renamed", target, "no_such_attribute", 1)], _judge(target), budget_seconds=60)


def test_kills_by_a_refused_cage_are_told_apart(capsys):
    target = _target()

    def judge(_mutant):
        if not target.guard:
            return failed("battery", CageRefused("cage_error: cannot start"))
        if not target.lock:
            return "battery: Result(rc=125, out='', err='cannot apply the cage: mount /proc: EPERM')"
        return None

    outcome = run_mutants([mutant("no guard", target, "guard", False), mutant("no lock", target, "lock", False)],
                          judge, budget_seconds=60)
    assert all(killed_by_refusal(why) for why in outcome["killed"].values())
    assert not killed_by_refusal("battery: facts differ: outside: ['ok', 'ok']")
    report(outcome, "test mutants")
    assert "2 test mutants killed (2 only by the cage refusing to start)" in capsys.readouterr().out
