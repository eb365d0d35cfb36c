"""A gate's steps together may name at most MAX_GATE_POLICY_PATHS fs paths (session 7 red team).

Each path of a step's policy is resolved (symlinks followed), met with the ceiling, and every
narrowing is printed and kept in each report, for every step that uses the policy. One 1 MiB
policy of 100,000 symlinks to `/` cost the gate, per step, 11 s, ~20 MB each of console and
JUnit, 27 MB of JSON and ~160 MB of memory (3 steps: 489 MB RSS, 82 MB JSON, measured with the
real CLI); a 60 kB gate.toml naming it from 1,000 steps asked for hours and ~160 GB. Counted, not
timed: the refusal comes at load, before anything runs."""

from __future__ import annotations

import pytest
from gatekit import make_repo, run_gate

from sandboy.errors import PolicyError
from sandboy.gate import config


def _gate(tmp_path, steps: int, paths: int):
    names = ", ".join(f'"l{i}"' for i in range(paths))
    gate = "".join(f'[[step]]\nname = "s{i}"\nrun = "touch made-by-s{i}"\npolicy = "big.toml"\n'
                   for i in range(steps))
    return make_repo(tmp_path, gate, {".007/big.toml": f"version = 1\n[fs]\nread = [\"/usr\"]\nwrite = [{names}]\n"})


def test_many_steps_naming_one_large_policy_are_refused_before_anything_runs(tmp_path):
    per_step = 50_000  # + the /usr read
    repo = _gate(tmp_path, 1000, per_step)
    proc = run_gate(repo, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "step[1] ('s1').policy: the steps' policies name 100002 fs paths" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not list(repo.glob("made-by-*"))  # host side: no step ran


def test_twin_the_budget_is_a_gates_worth_of_ordinary_policies(tmp_path):
    gate = config.load(_gate(tmp_path, 2, config.MAX_GATE_POLICY_PATHS // 2 - 1))
    assert len(gate.steps) == 2
    # steps without a policy (the ceiling) cost nothing
    repo = make_repo(tmp_path / "b", "".join(f'[[step]]\nname = "s{i}"\nrun = "true"\n' for i in range(1000)))
    assert len(config.load(repo).steps) == 1000


def test_one_step_over_the_budget_is_refused_too(tmp_path):
    with pytest.raises(PolicyError) as err:
        config.load(_gate(tmp_path, 1, config.MAX_GATE_POLICY_PATHS))
    assert err.value.key == "step[0] ('s0').policy"
