"""The operator's time budget for a whole gate (`[gate] budget` in the ceiling, `--budget`).

Each step is bounded by the ceiling's `limits.wall_seconds`, but the repository chooses how many
steps there are: 1000 steps x 3600 s held the host for 1000 hours. The budget bounds their sum:
when it is spent the running step is ended like a timeout (its whole tree killed) and the rest
are not run (`over_budget`), every report says why, and the gate exits 1. Checked from the host:
wall time, and no process of the gate left (by a marker only these tests use)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from gatekit import by_name, make_repo, run_gate, run_json, survivors

SCHEMA = Path(__file__).parents[2] / "src/sandboy/gate/report.schema.json"
XSD = Path(__file__).with_name("junit.xsd")
SLACK = 6.0  # loaded machine: the kill, the sweep and the reports, on top of the budget


def _marker(name: str) -> str:
    return f"SBX-budget-{os.getpid()}-{name}"


def _validate(report: dict, junit: Path | None = None) -> None:
    import jsonschema

    jsonschema.validate(report, json.loads(SCHEMA.read_text()))
    if junit is not None:
        import xmlschema

        xmlschema.XMLSchema(str(XSD)).validate(str(junit))


def _hostile_steps(marker: str, count: int) -> str:
    """`count` steps, each trying to hold the host for ten minutes — its own `timeout` an hour,
    and a child that left the step's session (setsid) — all within the ceiling's per-step limit."""
    step = f'''
        [[step]]
        name = "hold-{{i}}"
        run = "setsid bash -c 'exec -a {marker}-bg sleep 600' & exec -a {marker} sleep 600"
        timeout = "1h"
        '''
    return "".join(step.replace("{i}", str(i)) for i in range(count))


def test_a_thousand_long_steps_are_stopped_within_the_budget(tmp_path, fake_home) -> None:
    marker = _marker("thousand")
    repo = make_repo(tmp_path, _hostile_steps(marker, 1000))
    junit = tmp_path / "gate.xml"
    started = time.monotonic()
    proc, report = run_json(repo, tmp_path, "--budget", "3s", "--junit", junit, home=fake_home)
    took = time.monotonic() - started
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr
    assert took < 3 + SLACK, took
    assert survivors(marker) == []  # host side: neither the step's command nor what it setsid'ed
    steps = report["steps"]
    assert steps[0]["status"] == "timed_out" and steps[0]["returncode"] == 137
    assert "the gate's time budget of 3s (--budget) was spent" in steps[0]["description"]
    assert {s["status"] for s in steps[1:]} == {"over_budget"} and len(steps) == 1000
    assert steps[1]["description"] == "not run: the gate's time budget of 3s (--budget) was spent before it started"
    assert report["budget"] == {"seconds": 3, "spent": True} and report["exit_code"] == 1
    _validate(report, junit)
    xml = junit.read_text()
    assert 'failures="1"' in xml and 'skipped="999"' in xml
    assert "time budget of 3s (--budget) was spent before it started" in xml
    assert "is spent: 999 step(s) from hold-1 on are not run" in proc.stdout


def test_the_ceilings_budget_bounds_the_gate_and_a_repository_cannot_raise_it(tmp_path, fake_home) -> None:
    from sandboy.gate.ceiling import BUILTIN, to_toml

    marker = _marker("ceiling")
    ceiling = tmp_path / "ceiling.toml"
    ceiling.write_text(to_toml({**BUILTIN, "gate": {"budget": 3}}))
    repo = make_repo(tmp_path, _hostile_steps(marker, 3))
    started = time.monotonic()
    proc, report = run_json(repo, tmp_path, "--ceiling", ceiling, home=fake_home)
    assert time.monotonic() - started < 3 + SLACK
    assert proc.returncode == 1 and survivors(marker) == []
    assert [s["status"] for s in report["steps"]] == ["timed_out", "over_budget", "over_budget"]
    assert f"[gate] budget in {ceiling}" in report["steps"][0]["description"]
    # the repository's own [gate] table knows no budget: asking is a gate error, nothing runs
    repo = make_repo(tmp_path / "other", '''
        [gate]
        budget = "1000h"
        [[step]]
        name = "s"
        run = "touch ran"
        ''')
    proc = run_gate(repo, "--ceiling", ceiling, home=fake_home)
    assert proc.returncode == 2 and "gate.budget: unknown key" in proc.stderr, proc.stderr
    assert not (repo / "ran").exists()


def test_a_step_allowed_to_fail_cut_by_the_budget_still_fails_the_gate(tmp_path, fake_home) -> None:
    """The required step after it was never checked: the gate cannot pass."""
    repo = make_repo(tmp_path, '''
        [[step]]
        name = "slow"
        run = "sleep 60"
        allow_failure = true
        [[step]]
        name = "required"
        run = "true"
        ''')
    summary = tmp_path / "summary.md"
    proc, report = run_json(repo, tmp_path, "--budget", "2", home=fake_home, env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert proc.returncode == 1
    assert [s["status"] for s in report["steps"]] == ["timed_out", "over_budget"]
    markdown = summary.read_text()  # the step summary says it too
    assert "| required | ⏱️ NOT RUN (BUDGET SPENT) |" in markdown
    assert "not run: the gate's time budget of 2s (--budget) was spent before it started" in markdown


def test_twin_work_within_the_budget_is_unchanged(tmp_path, fake_home) -> None:
    repo = make_repo(tmp_path, '''
        [[step]]
        name = "a"
        run = "sleep 1; echo a"
        [[step]]
        name = "b"
        run = "exit 3"
        allow_failure = true
        [[step]]
        name = "c"
        run = "echo c"
        ''')
    outcomes = {}
    for budget in ("30s", "0", None):
        args = ("--budget", budget) if budget is not None else ()
        proc, report = run_json(repo, tmp_path, *args, home=fake_home)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        _validate(report)
        outcomes[budget] = [(s["status"], s["returncode"], s["description"]) for s in report["steps"]]
        assert report["budget"]["spent"] is False
    assert outcomes["30s"] == outcomes["0"] == outcomes[None]
    assert [status for status, _, _ in outcomes[None]] == ["passed", "failed", "passed"]
    assert report["budget"] == {"seconds": 6 * 3600, "spent": False}  # the default


def test_a_steps_own_shorter_timeout_is_still_its_own(tmp_path, fake_home) -> None:
    repo = make_repo(tmp_path, '''
        [[step]]
        name = "t"
        run = "sleep 60"
        timeout = 1
        [[step]]
        name = "after"
        run = "true"
        ''')
    proc, report = run_json(repo, tmp_path, "--budget", "1h", "--keep-going", home=fake_home)
    steps = by_name(report)
    assert steps["t"]["description"].startswith("timed out after 1s")
    assert steps["after"]["status"] == "passed" and report["budget"]["spent"] is False


@pytest.mark.parametrize("gate_table, problem", [
    ('budget = "3x"', 'gate.budget: expected a duration'),
    ("budget = -1", "gate.budget: expected a duration from 0"),
    ('budget = "31d"', "gate.budget: expected a duration"),
    ("budgets = 5", "gate.budgets: unknown key (did you mean 'budget'?"),
    ('budget = ["1h"]', "gate.budget: expected a duration"),
])
def test_a_bad_budget_in_the_ceiling_is_a_clear_error_and_nothing_runs(tmp_path, fake_home, gate_table, problem):
    ceiling = tmp_path / "ceiling.toml"
    ceiling.write_text(f'version = 1\n[fs]\nread = ["/usr"]\n[gate]\n{gate_table}\n')
    repo = make_repo(tmp_path, '''
        [[step]]
        name = "s"
        run = "touch ran"
        ''')
    proc = run_gate(repo, "--ceiling", ceiling, home=fake_home)
    assert proc.returncode == 2, proc.stderr
    assert f"{ceiling}: {problem}" in proc.stderr and "Traceback" not in proc.stderr
    assert not (repo / "ran").exists()


def test_a_bad_budget_option_is_a_usage_error(tmp_path) -> None:
    repo = make_repo(tmp_path, '''
        [[step]]
        name = "s"
        run = "touch ran"
        ''')
    proc = run_gate(repo, "--budget", "1d")
    assert proc.returncode == 2 and "argument --budget: expected a duration" in proc.stderr
    assert "Traceback" not in proc.stderr and not (repo / "ran").exists()


def test_the_printed_ceiling_carries_the_budget_and_reads_back(tmp_path) -> None:
    from sandboy.gate import ceiling

    proc = run_gate(tmp_path, "--print-ceiling")
    assert '[gate]\nbudget = "6h"' in proc.stdout
    path = tmp_path / "printed.toml"
    path.write_text(proc.stdout)
    policy, seconds = ceiling.read(path)
    assert seconds == 6 * 3600 and policy.limits.wall_seconds == 3600


def test_sandboy_run_refuses_a_ceilings_gate_table(tmp_path) -> None:
    """`[gate]` belongs to a gate's ceiling; a `sandboy run` policy has no such section."""
    import subprocess
    import sys

    policy = tmp_path / "p.toml"
    policy.write_text('version = 1\n[gate]\nbudget = "1h"\n')
    proc = subprocess.run([sys.executable, "-m", "sandboy", "run", "--policy", str(policy), "--", "true"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and f"{policy}: gate: a step policy has no [gate] table" in proc.stderr
    assert "sandboy gate --ceiling" in proc.stderr


def test_a_budget_spent_while_a_cage_is_built_lets_nothing_run_past_it(tmp_path, fake_home) -> None:
    """Deny globs matched against a large working copy make the cage build take a second or
    more. When the budget ran out meanwhile, what was left was 0 — and a timeout of 0 is no
    timeout to a supervisor: the step ran its full 20 s and the gate PASSED (found in session 7).
    Now the step is not started (`over_budget`), or — where the build was quicker than the
    budget — cut by it (`timed_out`); never run to its end."""
    repo = make_repo(tmp_path, '''
        [[step]]
        name = "globbed"
        run = "sleep 20; touch ran"
        policy = "p"
        [policy.p]
        version = 1
        fs.read = ["/usr", "/etc", "/lib", "/lib64", "/bin", "."]
        fs.exec = ["/usr/bin", "/bin", "/usr/lib", "/lib", "/lib64"]
        fs.write = ["."]
        fs.deny = ["**/*.pem", "**/*.key", "**/secret*"]
        ''')
    for i in range(300):  # 90,000 files for the globs to look through
        directory = repo / "tree" / f"d{i}"
        directory.mkdir(parents=True)
        for j in range(300):
            os.close(os.open(directory / f"f{j}.txt", os.O_WRONLY | os.O_CREAT, 0o644))
    started = time.monotonic()
    proc, report = run_json(repo, tmp_path, "--budget", "1", home=fake_home)
    assert time.monotonic() - started < 1 + SLACK + 3  # (+ the build itself, under load)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert report["steps"][0]["status"] in ("over_budget", "timed_out"), report["steps"][0]["description"]
    assert "time budget of 1s (--budget) was spent" in report["steps"][0]["description"]
    assert not (repo / "ran").exists()
    if report["steps"][0]["status"] == "over_budget":  # the console says so, as for a step left out before its build
        assert "is spent: 1 step(s) from globbed on are not run" in proc.stdout, proc.stdout


def test_what_is_left_of_a_budget_is_never_a_timeout_of_zero() -> None:
    from sandboy.budget import SHORTEST, Budget

    spent = Budget(10, "the gate's", "test").start()
    spent.deadline = time.monotonic() - 1  # ran out between the last look and this one
    assert spent.exhausted()
    assert spent.bound(None) == (SHORTEST, True) and spent.bound(3600) == (SHORTEST, True)
    fresh = Budget(100, "the gate's", "test").start()
    assert fresh.bound(5) == (5, False)
    timeout, by_budget = fresh.bound(1000)
    assert by_budget and 99 < timeout <= 100
    none = Budget(0, "the gate's", "test").start()
    assert none.bound(5) == (5, False) and none.bound(None) == (None, False) and not none.exhausted()
