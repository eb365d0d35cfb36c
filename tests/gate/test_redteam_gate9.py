"""Session 9 review of the gate from the side of the untrusted repository (its `.007/gate.toml`,
its step policies, what its steps print and leave behind). Each hole found has a probe here (and
a twin proving the legitimate use still works); docs/threat-model.md, "Session 9 review
(repository input)", lists what was tried and held."""

from __future__ import annotations

from gatekit import by_name, make_repo, run_gate, run_json

HUGE = "9" * 5000  # beyond Python's 4,300-digit int() limit


def test_a_timeout_of_thousands_of_digits_is_a_gate_error_not_a_traceback(tmp_path, fake_home):
    # int() of a 5,000-digit string raises ValueError: the gate ended in a traceback with exit 1,
    # which CI reads as "a step failed", with no --json report at all
    repo = make_repo(tmp_path, f"""
        [[step]]
        name = "s"
        run = "true"
        timeout = "{HUGE}s"
    """)
    report = tmp_path / "r.json"
    proc = run_gate(repo, "--json", report, home=fake_home)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, proc.stderr
    assert "gate.toml: step[0] ('s').timeout: expected a timeout between 1 second and 7 days" in proc.stderr
    assert len(proc.stderr) < 1000  # the value is not echoed whole
    assert report.exists()


def test_twin_a_timeout_in_minutes_runs(tmp_path, fake_home):
    repo = make_repo(tmp_path, """
        [[step]]
        name = "s"
        run = "true"
        timeout = "10m"
    """)
    proc, report = run_json(repo, tmp_path, home=fake_home)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert by_name(report)["s"]["timeout"] == 600


def test_a_ceiling_budget_of_thousands_of_digits_is_a_usage_error(tmp_path, fake_home):
    repo = make_repo(tmp_path, '[[step]]\nname = "s"\nrun = "true"\n')
    printed = run_gate(repo, "--print-ceiling").stdout  # the built-in ceiling, budget = "6h"
    assert 'budget = "6h"' in printed
    ceiling = tmp_path / "ceiling.toml"
    ceiling.write_text(printed.replace('budget = "6h"', f'budget = "{HUGE}m"'))
    proc = run_gate(repo, "--ceiling", ceiling, home=fake_home)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2
    assert "gate.budget: expected a duration from 0 (no budget) to 30 days" in proc.stderr
    ceiling.write_text(printed.replace('budget = "6h"', 'budget = "30m"'))  # twin
    twin = run_gate(repo, "--ceiling", ceiling, home=fake_home)
    assert twin.returncode == 0, twin.stdout + twin.stderr
