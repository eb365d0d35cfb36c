"""The mutation check for the post-run git check (confine/gitcheck.py and gitjudge.py, ADR 0019):
every place it judges something planted — each `add(...)` of a finding in the walk and the check, and `is_safe`, which
decides what in a config runs a program — is removed in turn, and a plant of that kind must
then go unnoticed by `verify()` (a scenario below fails).

The mutants are found in the module's source, not listed by hand: each call `self.add(...)` or
`check.add(...)` in `gitcheck._Walk`, `gitjudge._Check` and `GitSnapshot.verify` becomes `None`, in a copy of that one
method compiled from the source and set on the class with pytest's monkeypatch (this test only;
nothing in production reads a switch). A judgement added to the check tomorrow is mutated the
day it lands, and one no scenario notices fails this test by name.

The scenarios are hostile commands run here on the host by the real shell and git (the check
does not care who wrote the files: it reads ctimes and bytes), each with the finding it must
produce written by hand: the planted path, or for the check's bounds a run-level finding saying
it could not finish. Two need a parent without root's privileges (an unreadable config, an
unlistable directory): their `verify()` runs in a forked child that became uid 65534. The legitimate twin —
ordinary git work — must produce no finding, with every mutant too (a mutant only ever removes
findings, so the twin runs once, intact).

Each scenario is planted once (a copy of one template repository, the set-up, the snapshot, the
hostile script); every mutant then re-runs only `verify()` over the plants (it only reads).
Budget: 19 mutants, 18 plants: ≈ 1.5 s of mutants, 3-4 s for the module here; bounded at 60 s.
"""

from __future__ import annotations

import os
import shutil
import sys
import time

import pytest
from gitkit import git_repo, scratch_env, sh
from mutantkit import call_sites, drop_to, in_child, mutant, on_a_private_tmpfs, report, run_mutants, without_call

from sandboy.confine import gitcheck, gitjudge

pytestmark = [pytest.mark.mutation]

BUDGET_SECONDS = 60
NOBODY = 65534
FSM = '[core]\\n\\tfsmonitor = "false"\\n'  # printf text: a config key that runs a program


# --- the scenarios: (name, set-up before the snapshot, the command's script, constants, expected) --
# `expected(repo, findings)` is True when the check caught the plant. Paths are realpaths as the
# check reports them; `None` paths are run-level findings (the check could not finish).

def _paths(findings) -> set:
    return {f.path for f in findings}


def _run_level(findings, words: str) -> bool:
    return any(f.path is None and words in f.why for f in findings)


SCENARIOS = [
    ("a planted commondir", None, "mkdir evil && echo ../evil > .git/commondir", {},
     lambda r, f: f"{r}/.git/commondir" in _paths(f)),
    ("fsmonitor in a nested repository", None, f"git init -q sub && printf '{FSM}' >> sub/.git/config", {},
     lambda r, f: f"{r}/sub/.git/config" in _paths(f)),
    ("the config swapped for a symlink", None,
     "cp .git/config c && rm .git/config && ln -s ../c .git/config", {},
     lambda r, f: f"{r}/.git/config" in _paths(f)),
    ("a config git refuses to read (so could not be judged)", None, "printf '[core\\n\\tx = \"\\n' >> .git/config",
     {}, lambda r, f: f"{r}/.git/config" in _paths(f)),
    ("an executable hook", None, "printf '#!/bin/sh\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit",
     {}, lambda r, f: f"{r}/.git/hooks/pre-commit" in _paths(f)),
    ("the hooks directory swapped for a symlink", None, "mkdir h && rm -rf .git/hooks && ln -s ../h .git/hooks",
     {}, lambda r, f: f"{r}/.git/hooks" in _paths(f)),
    ("the script an old hook symlink leads to, changed",
     "mkdir scripts && printf '#!/bin/sh\\n' > scripts/pre-commit && chmod +x scripts/pre-commit "
     "&& ln -s ../../scripts/pre-commit .git/hooks/pre-commit",
     "printf 'touch /tmp/x\\n' >> scripts/pre-commit", {},
     lambda r, f: f"{r}/scripts/pre-commit" in _paths(f)),
    ("more entries than the walk's budget", None, "mkdir -p a/b c/d", {"verify_budget": 2},
     lambda r, f: _run_level(f, "not checked to the end")),
    ("more git directories than the bound", None, "git init -q one && git init -q two", {"MAX_GITDIRS": 2},
     lambda r, f: _run_level(f, "beyond the check's bounds")),
    ("submodule git directories nested too deep", None, "mkdir -p .git/modules/a/b/c/d", {"MAX_NESTING": 1},
     lambda r, f: _run_level(f, "nested deeper")),
    ("a shipped git directory moved behind a gitlink (its files keep their ctimes)",
     f"git init -q --bare fixtures/evil && printf '{FSM}' >> fixtures/evil/config",
     "mkdir -p vendor/x && mv fixtures/evil vendor/x/.git", {},
     lambda r, f: f"{r}/vendor/x/.git/config" in _paths(f)),
    ("more config than the parse budget", None, f"git init -q sub && printf '{FSM}' >> sub/.git/config",
     {"CONFIG_PARSE_BUDGET": 16}, lambda r, f: _run_level(f, "more than")),
    ("a planted config made unreadable (parent = uid 65534)", None,
     f"git init -q sub && printf '{FSM}' >> sub/.git/config && chmod 000 sub/.git/config", {"as": NOBODY},
     lambda r, f: _run_level(f, "cannot read")),
    ("a planted repository in an unlistable directory (parent = uid 65534)", None,
     f"mkdir -p docs && git init -q docs/api && printf '{FSM}' >> docs/api/.git/config && chmod 0311 docs",
     {"as": NOBODY}, lambda r, f: _run_level(f, f"{r}/docs: cannot be looked through")),
    # pre-commit installed from the repository's .venv (session 7): a .pth its interpreter runs
    ("a .pth for the interpreter pre-commit's stub runs",
     "mkdir -p .venv/bin .venv/lib/python3/site-packages && touch .venv/pyvenv.cfg "
     "&& printf '#!/usr/bin/env bash\\n# File generated by pre-commit\\nINSTALL_PYTHON=%s/.venv/bin/python\\n' "
     "\"$PWD\" > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit",
     "printf 'import os\\n' > .venv/lib/python3/site-packages/zz.pth", {},
     lambda r, f: any((p or "").endswith("/.venv/lib/python3/site-packages/zz.pth") for p in _paths(f))),
    # a directory of the operator's PATH in a write root, without the tier (session 7, ADR 0013)
    ("a program planted on the operator's PATH", "mkdir bin", "printf '#!/bin/sh\\n' > bin/git",
     {"path_dirs": ["bin"]}, lambda r, f: f"{r}/bin/git" in _paths(f)),
    ("a repository deeper than the check can look below (rvwalk13)", None, "git init -q sub",
     {"DEEPEST_REPOSITORY": 40}, lambda r, f: _run_level(f, "too deep to check")),
    ("a PATH directory replaced by a symlink", "mkdir bin", "mv bin bin-old && mkdir evil && ln -s evil bin",
     {"path_dirs": ["bin"]}, lambda r, f: f"{r}/bin" in _paths(f)),
]

TEMPLATE: list = []  # a repository with one commit, copied for each scenario (cheaper than git init + commit)

TWIN = ("git config user.name n && echo x > f && git add f && git commit -qm two && git branch b "
        "&& git init -q sub && git -C sub config user.email e@x && git worktree add -q wt")


class Planted:
    """One scenario's repository after the hostile script ran, with the snapshot taken before it:
    `verify()` only reads, so each mutant judges the same plant again (cheap: no git per mutant)."""

    def __init__(self, base, number, scenario):
        self.name, setup, script, self.constants, self.expected = scenario
        repo = base / f"s{number}"
        shutil.copytree(TEMPLATE[0], repo, symlinks=True)
        env = scratch_env(base / f"s{number}-home")
        if setup:
            sh(setup, repo, env)
        time.sleep(0.011)  # a clock tick (the coarse clock's 4 ms) between the set-up and the snapshot
        path_dirs = [os.path.realpath(repo / d) for d in self.constants.get("path_dirs", ())]
        self.snap = gitcheck.snapshot([str(repo)], home=env["HOME"], path_dirs=path_dirs)
        sh(script, repo, env)
        self.repo = os.path.realpath(repo)

    def missed(self) -> str | None:
        """None if the check (as it is now, maybe mutated) catches the plant, else what it found."""
        uid = self.constants.get("as")
        # a forked child turned `uid` (the mutant, set on the class, comes along with the memory)
        return in_child(self._judge, before=lambda: drop_to(uid)) if uid is not None else self._judge()

    def _judge(self) -> str | None:
        with pytest.MonkeyPatch.context() as mp:
            for key, value in self.constants.items():
                if key not in ("as", "verify_budget", "path_dirs"):
                    assert hasattr(gitcheck, key), key
                    mp.setattr(gitcheck, key, value)
            budget = {"budget": self.constants["verify_budget"]} if "verify_budget" in self.constants else {}
            findings = self.snap.verify(**budget)
        return None if self.expected(self.repo, findings) else repr(findings)


# --- the mutants ------------------------------------------------------------------------------

FINDING_CALL = ("add", ("self", "check"))  # `self.add(...)` / `check.add(...)`: a finding recorded


def _mutants() -> list:
    # (each method compiled with its own module's globals: gitcheck's bounds, gitjudge's is_safe)
    out = [mutant(f"{owner.__name__}.{name}: finding #{i + 1} (line {line})",
                  owner, name, without_call(owner, name, i, sys.modules[owner.__module__], FINDING_CALL))
           for owner, name, i, line in call_sites((gitcheck._Walk, gitjudge._Check, gitcheck.GitSnapshot),
                                                  FINDING_CALL)]
    out.append(mutant("is_safe: every config key safe", gitjudge, "is_safe", lambda name, value: True))
    # the launch record (session 6): a git directory found where it was not at launch is judged whole
    out.append(mutant("GitSnapshot.moved: every git directory where it was at launch", gitcheck.GitSnapshot, "moved",
                      lambda self, gitdir, identity: False))
    return out


def _first_failure(planted) -> str | None:
    for plant in planted:
        missed = plant.missed()
        if missed is not None:
            return f"{plant.name}: found {missed[:200]}"
    return None


@pytest.fixture
def base():
    """Scenario repositories where uid 65534 can reach them (pytest's tmp_path is private)."""
    import sys

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from userkit import skip_unless_nobody_can_run, world_readable_tmp

    skip_unless_nobody_can_run()
    if not shutil.which("git"):
        pytest.skip("needs git")
    with world_readable_tmp("sandboy-gitcheck-mutants-") as path:
        yield path


def _mutation_run(base) -> dict:
    TEMPLATE[:] = [git_repo(base / "template", scratch_env(base / "template-home"))]
    planted = [Planted(base, number, scenario) for number, scenario in enumerate(SCENARIOS)]
    twin = base / "twin"
    env = scratch_env(base / "twin-home")
    git_repo(twin, env)
    time.sleep(0.011)
    snap = gitcheck.snapshot([str(twin)], home=env["HOME"])
    sh(TWIN, twin, env)
    if snap.verify():
        return {"intact": f"legitimate git work is flagged: {snap.verify()}"}
    # the intact check catches every plant, before and after the mutants
    return run_mutants(_mutants(), lambda _mutant: _first_failure(planted), budget_seconds=BUDGET_SECONDS)


def test_every_finding_of_the_git_check_has_a_scenario_that_fails_without_it(base):
    # in a forked child with a private tmpfs on `base` (mutantkit.on_a_private_tmpfs says why)
    outcome = in_child(lambda: _mutation_run(base), before=lambda: on_a_private_tmpfs(base))
    report(outcome, "git-check mutants")
    assert len(outcome["mutants"]) >= 14, outcome  # the check's findings, as of ADR 0019's review
