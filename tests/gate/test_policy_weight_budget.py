"""A gate's steps' policies together may hold at most MAX_GATE_POLICY_ENTRIES entries and
MAX_GATE_POLICY_TEXT characters, each policy counted once per step that names it (session 7).

Each entry of a step's policy is resolved (symlinks followed), met with the ceiling, and every
narrowing is printed and kept in each report, for every step that uses the policy. One 1 MiB
policy of 100,000 symlinks to `/` cost the gate, per step, 11 s, ~20 MB each of console and
JUnit, 27 MB of JSON and ~160 MB of memory (3 steps: 489 MB RSS, 82 MB JSON, measured with the
real CLI); one of 38,000 env.set names and 10,000 domains 2.3 MB of JSON per step; a 60 kB
gate.toml naming it from 1,000 steps asked for hours and ~160 GB. Counted, not timed: the
refusal comes at load, before anything runs."""

from __future__ import annotations

import json

import pytest
from gatekit import make_repo, run_gate

from sandboy.errors import PolicyError
from sandboy.gate import config


def _gate(tmp_path, steps: int, body: str):
    gate = "".join(f'[[step]]\nname = "s{i}"\nrun = "touch made-by-s{i}"\npolicy = "big.toml"\n'
                   for i in range(steps))
    return make_repo(tmp_path, gate, {".007/big.toml": f"version = 1\n{body}"})


def _paths(n: int) -> str:
    return "[fs]\nread = [\"/usr\"]\nwrite = [" + ", ".join(f'"l{i}"' for i in range(n)) + "]\n"


@pytest.mark.parametrize("body", [
    _paths(2_000),
    "[env]\nset = {" + ", ".join(f'V{i} = "x"' for i in range(2_000)) + "}\n",
    "[net]\ndomains = [" + ", ".join(f'"h{i}.example.com"' for i in range(2_000)) + "]\n",
    # few entries, much text (each under execve's 128 KiB per string, which load refuses on its own)
    "[env]\nset = {" + ", ".join(f"BIG{i} = {json.dumps('x' * 120_000)}" for i in range(8)) + "}\n",
], ids=["fs-paths", "env-set", "domains", "one-long-value"])
def test_many_steps_naming_one_large_policy_are_refused_before_anything_runs(tmp_path, body):
    repo = _gate(tmp_path, 1000, body)
    proc = run_gate(repo, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "').policy: the steps' policies hold " in proc.stderr and "Traceback" not in proc.stderr
    assert not list(repo.glob("made-by-*"))  # host side: no step ran


def test_twin_the_budget_is_a_gates_worth_of_ordinary_policies(tmp_path):
    one = config.load(_gate(tmp_path / "one", 1, _paths(10)))
    entries, chars = config._weight(one.steps[0].policy)
    fits = config.MAX_GATE_POLICY_ENTRIES // entries
    gate = config.load(_gate(tmp_path / "many", min(fits, config.MAX_STEPS), _paths(10)))
    assert len(gate.steps) == min(fits, config.MAX_STEPS)
    # two steps sharing half the budget each
    half = config.load(_gate(tmp_path / "half", 2, _paths(config.MAX_GATE_POLICY_ENTRIES // 2 - 20)))
    assert len(half.steps) == 2
    # steps without a policy (the ceiling) cost nothing
    repo = make_repo(tmp_path / "b", "".join(f'[[step]]\nname = "s{i}"\nrun = "true"\n' for i in range(1000)))
    assert len(config.load(repo).steps) == 1000


def test_one_step_over_the_budget_is_refused_too(tmp_path):
    with pytest.raises(PolicyError) as err:
        config.load(_gate(tmp_path, 1, _paths(config.MAX_GATE_POLICY_ENTRIES)))
    assert err.value.key == "step[0] ('s0').policy"
