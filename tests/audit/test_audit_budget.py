"""The operator's time budget for a whole `sandboy audit run` (`[run] budget` in `--adapters FILE`,
`--budget`; ADR 0025).

A repository's `.007/adapters.toml` may add any number of tools, each phase within its own limit
(REPOSITORY_LIMITS: an hour): N tools held the host N hours. The budget bounds them together:
when it is spent the running phase is ended like its own timeout (its whole tree killed), the
tools not started are `not_run`, the JSON status and the merged SARIF (a run of "sandboy audit")
say so, and the exit is 1. Checked from the host: wall time, and no process left (by a marker
only these tests use)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from prockit import named

SLACK = 6.0  # loaded machine: the kill, the sweep, the merge
EMPTY_SARIF = '{\\"version\\":\\"2.1.0\\",\\"runs\\":[]}'


def _marker(name: str) -> str:
    return f"SBX-abudget-{os.getpid()}-{name}"


def _repo(tmp_path: Path, count: int, script: str, extra: str = "") -> Path:
    repo = tmp_path / "repo"
    (repo / ".007").mkdir(parents=True, exist_ok=True)
    tools = "".join(
        f'[tools.t{i}]\nadapter = "passthrough"\noutput = {{ kind = "sarif", from = "stdout" }}\n'
        f'[[tools.t{i}.phases]]\ninclude = ["system"]\nargv = ["bash", "-c", "{script}"]\n' for i in range(count))
    (repo / ".007" / "adapters.toml").write_text(f"version = 1\n{extra}{tools}")
    return repo


def _holding(marker: str) -> str:
    """A phase trying to hold the host: ten minutes, with a child that left its session."""
    return f"setsid bash -c 'exec -a {marker}-bg sleep 600' & exec -a {marker} sleep 600"


def _audit(repo: Path, tmp_path: Path, count: int, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / "status.json"
    with open(out, "w") as fh:
        done = subprocess.run([sys.executable, "-m", "sandboy", "audit", "run", str(repo),
                               "--tools", ",".join(f"t{i}" for i in range(count)), "--json",
                               "-o", str(tmp_path / "out.sarif"), *args], stdout=fh, stderr=subprocess.PIPE,
                              text=True, timeout=180, env={"PATH": "/usr/bin:/bin", "TMPDIR": str(tmp_path), **{
                                  k: os.environ[k] for k in ("SANDBOY_CACHE_DIR", "SANDBOY_ADAPTERS_DIR") if k in os.environ}})
    assert "Traceback" not in done.stderr, done.stderr
    return done, (json.loads(out.read_text()) if out.stat().st_size else {})


def _budget_run(sarif: Path) -> dict | None:
    runs = [r for r in json.loads(sarif.read_text())["runs"] if r["tool"]["driver"]["name"] == "sandboy audit"]
    return runs[0] if runs else None


def test_fifty_repository_tools_are_stopped_within_the_budget(tmp_path) -> None:
    marker = _marker("fifty")
    repo = _repo(tmp_path, 50, _holding(marker))
    started = time.monotonic()
    done, status = _audit(repo, tmp_path, 50, "--budget", "3s")
    took = time.monotonic() - started
    assert done.returncode == 1, done.stderr
    assert took < 3 + SLACK, took
    assert named(marker) == []  # host side: the phase and what it setsid'ed are gone
    tools = status["tools"]
    assert tools[0]["status"] == "failed" and tools[0]["phases"][0]["outcome"] == "timed_out"
    assert "the audit's time budget of 3s (--budget) was spent; the tool's tree was killed" in tools[0]["reason"]
    assert {t["status"] for t in tools[1:]} == {"not_run"} and len(tools) == 50
    assert tools[1]["reason"] == "the audit's time budget of 3s (--budget) was spent before it started"
    assert status["budget"] == {"seconds": 3, "spent": True} and status["status"] == 1
    # the merged log says why the tools are missing: one run of "sandboy audit"
    said = _budget_run(tmp_path / "out.sarif")
    invocation = said["invocations"][0]
    assert invocation["executionSuccessful"] is False and said["results"] == []
    assert invocation["properties"]["sandboy"]["ended"] == ["t0"]
    assert invocation["properties"]["sandboy"]["not_run"] == [f"t{i}" for i in range(1, 50)]
    texts = [n["message"]["text"] for n in invocation["toolExecutionNotifications"]]
    assert texts[0].startswith("t0: phase phase1: timed_out: the audit's time budget of 3s")
    assert texts[1].startswith("not run: t1, t2,") and "and 29 more: the audit's time budget" in texts[1]
    valid = subprocess.run([sys.executable, "-m", "sandboy", "audit", "validate", "--strict", "--github",
                            str(tmp_path / "out.sarif")], capture_output=True, text=True, timeout=120)
    assert valid.returncode == 0, valid.stdout + valid.stderr


def test_the_operators_file_sets_the_budget_and_the_repository_cannot(tmp_path) -> None:
    marker = _marker("operator")
    repo = _repo(tmp_path, 3, _holding(marker))
    ops = tmp_path / "ops.toml"
    ops.write_text("version = 1\n[run]\nbudget = 3\n")
    started = time.monotonic()
    done, status = _audit(repo, tmp_path, 3, "--adapters", str(ops))
    assert time.monotonic() - started < 3 + SLACK
    assert done.returncode == 1 and named(marker) == []
    assert [t["status"] for t in status["tools"]] == ["failed", "not_run", "not_run"]
    assert f"[run] budget in {ops}" in status["tools"][0]["reason"]
    # the repository's own file asking for a budget: exit 2, nothing runs
    other = _repo(tmp_path / "other", 1, "echo ran > {out}/ran; echo '" + EMPTY_SARIF + "'", '[run]\nbudget = "1000h"\n')
    done, _ = _audit(other, tmp_path, 1)
    assert done.returncode == 2
    assert "adapters.toml: run: only an operator file (--adapters FILE) sets the audit's time budget" in done.stderr
    assert "running confined" not in done.stderr


@pytest.mark.parametrize("table, problem", [
    ('[run]\nbudget = "3x"\n', "run.budget: expected a duration"),
    ("[run]\nbudget = -5\n", "run.budget: expected a duration from 0"),
    ("[run]\nbudgte = 5\n", "run.budgte: unknown key (did you mean 'budget'?"),
    ("[run]\n", "run.budget: missing"),
    ("run = 5\n", "run: expected a table"),
])
def test_a_bad_budget_in_the_operators_file_is_a_clear_error(tmp_path, table, problem) -> None:
    repo = _repo(tmp_path, 1, "echo ran > {out}/ran; echo '" + EMPTY_SARIF + "'")
    ops = tmp_path / "ops.toml"
    ops.write_text(f"version = 1\n{table}")
    done, _ = _audit(repo, tmp_path, 1, "--adapters", str(ops))
    assert done.returncode == 2, done.stderr
    assert f"{ops}: {problem}" in done.stderr
    assert "running confined" not in done.stderr  # refused before any phase started


def test_a_bad_budget_option_is_a_usage_error(tmp_path) -> None:
    repo = _repo(tmp_path, 1, "true")
    done, _ = _audit(repo, tmp_path, 1, "--budget", "soon")
    assert done.returncode == 2 and "argument --budget: expected a duration" in done.stderr


def test_twin_tools_within_the_budget_are_unchanged(tmp_path) -> None:
    repo = _repo(tmp_path, 3, "sleep 0.3; echo '" + EMPTY_SARIF + "'")
    seen = {}
    for budget in ("60s", "0", None):
        args = ("--budget", budget) if budget is not None else ()
        done, status = _audit(repo, tmp_path, 3, *args)
        assert done.returncode == 0, done.stderr
        seen[budget] = [(t["tool"], t["status"], t["reason"], t["results"]) for t in status["tools"]]
        assert status["budget"]["spent"] is False
        assert _budget_run(tmp_path / "out.sarif") is None  # nothing to say
    assert seen["60s"] == seen["0"] == seen[None]
    assert {s for _, s, _, _ in seen[None]} == {"ran"}
    assert status["budget"] == {"seconds": 6 * 3600, "spent": False}  # the default


def test_a_phase_bounded_by_the_budget_says_so_while_it_runs(tmp_path, monkeypatch) -> None:
    """The live view's heartbeat names the phase's real deadline: what is left of the budget."""
    from sandboy.audit.toolconfig import Phase
    from sandboy.budget import Budget

    from sandboy.audit import pipeline

    monkeypatch.setattr(pipeline, "HEARTBEAT_SECONDS", 0.4)
    places = {name: str(tmp_path / name.strip("{}")) for name in ("{repo}", "{out}", "{home}", "{builtin}")}
    for place in places.values():
        os.mkdir(place)
    phase = Phase("p", ("/bin/sleep", "30"), read=("/usr", "/lib", "/lib64", "/etc", "/bin"), exec=("/usr/bin", "/bin"),
                  wall_seconds=60)
    messages: list = []
    budget = Budget(2, "the audit's", "test").start()
    started = time.monotonic()
    report = pipeline.run_phase(phase, places, "/usr/bin:/bin", tmp_path, messages.append, budget=budget)
    assert time.monotonic() - started < 2 + SLACK
    assert report.outcome == "timed_out" and report.cut_by_budget and budget.spent
    assert "the audit's time budget of 2s (test) was spent; the tool's tree was killed" in report.error
    assert any(m.startswith("p: still running (") and m.endswith("of at most 2 s, what is left of the time budget)")
               for m in messages), messages


def _big_sarif(path: Path, results: int) -> None:
    """A valid SARIF log of `results` results: the passthrough adapter (a guest in WebAssembly)
    takes ≈ 0.2 ms a result here, so its conversion is Sandboy's own work of seconds."""
    one = {"ruleId": "R1", "message": {"text": "m"},
           "locations": [{"physicalLocation": {"artifactLocation": {"uri": "a.py"}, "region": {"startLine": 1}}}]}
    doc = {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "big", "rules": [{"id": "R1"}]}},
                                         "results": [one] * results}]}
    path.write_text(json.dumps(doc))


def _converting_repo(tmp_path: Path, results: int) -> Path:
    """t0: a quick tool; t1: a quick phase whose output takes the adapter long to convert."""
    repo = _repo(tmp_path, 1, "echo '" + EMPTY_SARIF + "'")
    _big_sarif(repo / "big.sarif", results)
    with open(repo / ".007" / "adapters.toml", "a") as fh:
        fh.write('[tools.t1]\nadapter = "passthrough"\noutput = { kind = "sarif", from = "stdout" }\n'
                 '[[tools.t1.phases]]\ninclude = ["system"]\nargv = ["cat", "{repo}/big.sarif"]\n')
    return repo


@pytest.fixture
def looping_passthrough(hostile, tmp_path, monkeypatch) -> None:
    """`passthrough` served by the hostile guest (tests/audit/guests/hostile): the audit's own
    adapter sources (SANDBOY_ADAPTERS_DIR: the WIT and helpers, a stand-in app.py) keyed to a
    cache directory holding the hostile component at that key, its native code shared. An output
    beginning `hostile:loop` then makes the conversion spin until its fuel or its deadline ends —
    and `_spinning_repo`'s input is sized so that its fuel (2e9 + 4,000 a byte: ≈ 6.9e10 for
    16 MiB) lasts far past the budget on any machine (the bare spin with 2e9 burned it in < 3 s
    here; the former probe's 99,000 results converted before the deadline at times)."""
    from sandboy.audit.build import component_path
    from sandboy.audit.registry import ADAPTERS, adapters_root

    real = adapters_root()
    fake = tmp_path / "adapters"
    for part in ("wit", "common"):
        shutil.copytree(real / part, fake / part)
    (fake / "passthrough").mkdir()
    (fake / "passthrough" / "app.py").write_text("# stands in for the hostile guest: its component is seeded\n")
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    (cache / "cwasm").symlink_to(os.path.realpath(os.path.join(os.environ["SANDBOY_CACHE_DIR"], "cwasm")))
    monkeypatch.setenv("SANDBOY_ADAPTERS_DIR", str(fake))
    monkeypatch.setenv("SANDBOY_CACHE_DIR", str(cache))
    shutil.copyfile(hostile, component_path(ADAPTERS["passthrough"]))
    from sandboy.audit.build import seal_component

    seal_component(component_path(ADAPTERS["passthrough"]))  # (vouched for, as a build of ours would be: ADR 0030)


def _spinning_repo(tmp_path: Path) -> Path:
    """t0: a quick phase printing `hostile:loop` and 16 MiB more (the adapter's fuel grows with
    its input, so the spin outlasts the budget on any machine: see `looping_passthrough`)."""
    repo = _repo(tmp_path, 1, "")
    (repo / "spin.txt").write_text("hostile:loop\n" + "x" * (16 << 20))
    text = (repo / ".007" / "adapters.toml").read_text()
    (repo / ".007" / "adapters.toml").write_text(text.replace('argv = ["bash", "-c", ""]', 'argv = ["cat", "{repo}/spin.txt"]'))
    return repo


def _the_tool_failed_within_3s(done, status, took: float) -> dict:
    """The run of one tool under `--budget 3s` ended within the budget and SLACK, failed (exit 1),
    its phase having finished in time: the tool's status, for the reason to be checked."""
    assert took < 3 + SLACK, f"{took:.1f} s for a 3 s budget"
    assert done.returncode == 1, done.stderr
    (t0,) = status["tools"]
    assert t0["status"] == "failed" and t0["phases"][0]["outcome"] == "exited", t0  # the phase finished in time
    return t0


def test_a_conversion_past_the_budget_is_cut_at_the_budget(tmp_path, looping_passthrough) -> None:
    """Session 8: the budget bounded the phases only; an adapter's conversion (its own deadline
    120 s) ran on past it. Here the conversion never ends (a guest spinning on its input): it is
    stopped when the budget is, whatever the machine's speed — the run ends within the budget and
    SLACK, the tool failed saying the conversion was stopped by the budget."""
    repo = _spinning_repo(tmp_path)
    started = time.monotonic()
    done, status = _audit(repo, tmp_path, 1, "--budget", "3s")
    t0 = _the_tool_failed_within_3s(done, status, time.monotonic() - started)
    assert t0["reason"] == ("adapter passthrough: timed_out: the audit's time budget of 3s (--budget) was spent; "
                            "the conversion was stopped"), t0["reason"]
    said = _budget_run(tmp_path / "out.sarif")
    assert said["invocations"][0]["properties"]["sandboy"]["ended"] == ["t0"]


def test_waiting_for_another_processes_build_ends_with_the_budget(tmp_path, monkeypatch) -> None:
    """The adapter's load is bounded too (session 8: a 2 s budget ended at 4.5-4.7 s, the load and
    the merge outside it). Its longest part is a first build — or waiting for another process's
    build of the same adapter (the build's lock): that wait used to have no end. Here another
    process (this test) holds the lock for the whole run: the run ends within the budget, the tool
    failed saying the build was never begun."""
    import fcntl

    from sandboy.audit.build import component_path
    from sandboy.audit.registry import ADAPTERS

    cache = tmp_path / "cache"  # no component built: the audit must build passthrough
    cache.mkdir(mode=0o700)
    monkeypatch.setenv("SANDBOY_CACHE_DIR", str(cache))
    target = component_path(ADAPTERS["passthrough"])
    repo = _repo(tmp_path, 1, "echo '" + EMPTY_SARIF + "'")
    with open(target.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        started = time.monotonic()
        done, status = _audit(repo, tmp_path, 1, "--budget", "3s")
        took = time.monotonic() - started
    t0 = _the_tool_failed_within_3s(done, status, took)
    assert t0["reason"] == ("adapter passthrough: the adapter's build not run: the audit's time budget of 3s "
                            "(--budget) was spent before it started"), t0["reason"]
    assert not target.exists()


def test_past_the_budget_the_merge_takes_little() -> None:
    """The merge grows with what the tools converted (16 s for 99,000 results at load 10 here;
    session 8: it ran after the budget whatever its size): once the budget is spent it takes
    logs whole up to MERGE_RESULTS_PAST_BUDGET results, and holds back the rest, their tools
    failed saying why; the budget's own run names them among the tools the budget ended."""
    from sandboy.audit.pipeline import (FAILED, MERGE_RESULTS_PAST_BUDGET, RAN, ToolReport, budget_run,
                                        hold_back_unmerged)
    from sandboy.budget import Budget

    def reports():
        return [ToolReport("small", RAN, results=3, sarif={"runs": []}),
                ToolReport("big", RAN, results=MERGE_RESULTS_PAST_BUDGET, sarif={"runs": []}),
                ToolReport("tiny", RAN, results=0, sarif={"runs": []})]

    within = Budget(60, "the audit's", "--budget").start()
    kept = reports()
    hold_back_unmerged(kept, within)  # twin: time left, the merge takes everything
    assert [(r.status, r.results) for r in kept] == [(RAN, 3), (RAN, MERGE_RESULTS_PAST_BUDGET), (RAN, 0)]
    assert within.spent is False
    spent = Budget(1, "the audit's", "--budget").start()
    spent.deadline = time.monotonic() - 0.001  # (as when the last tool's phase was cut at it)
    held = reports()
    hold_back_unmerged(held, spent)
    small, big, tiny = held
    assert (small.status, small.results, tiny.status) == (RAN, 3, RAN)  # small logs are still merged
    assert (big.status, big.sarif, big.results, big.cut_by_budget) == (FAILED, None, 0, True)
    assert big.reason == (f"its {MERGE_RESULTS_PAST_BUDGET:,} result(s) were converted but not merged: the audit's "
                          "time budget of 1s (--budget) was spent before the merge, which then takes at most "
                          f"{MERGE_RESULTS_PAST_BUDGET:,} results")
    assert budget_run(held, spent)["runs"][0]["invocations"][0]["properties"]["sandboy"]["ended"] == ["big"]


def test_twin_a_budget_that_suffices_leaves_the_conversion_alone(tmp_path) -> None:
    repo = _converting_repo(tmp_path, 2_000)
    seen = {}
    for budget in ("120s", "0"):
        done, status = _audit(repo, tmp_path, 2, "--budget", budget)
        assert done.returncode == 0, done.stderr
        seen[budget] = [(t["status"], t["results"]) for t in status["tools"]]
    assert seen["120s"] == seen["0"] == [("ran", 0), ("ran", 2_000)], seen


def test_a_conversion_whose_deadline_has_passed_begins_nothing(tmp_path) -> None:
    """ConvertRequest.deadline_at (the budget's end, given by `audit run`) is looked at before the
    adapter's build: passed, nothing is built, loaded or run, and the step is named."""
    from sandboy.audit.convert import ConvertRequest, convert
    from sandboy.audit.errors import DeadlineExceeded

    log = tmp_path / "in.sarif"
    log.write_text('{"version": "2.1.0", "runs": []}')
    said: list = []
    request = ConvertRequest(tool="passthrough", artifacts=[("in.sarif", log)], deadline_at=time.monotonic())
    with pytest.raises(DeadlineExceeded) as raised:
        convert(request, said.append)
    assert (raised.value.step, raised.value.started) == ("the adapter's build", False)
    assert str(raised.value) == "the deadline passed before the adapter's build" and said == []
    # twin: a deadline far off changes nothing
    far = convert(ConvertRequest(tool="passthrough", artifacts=[("in.sarif", log)], deadline_at=time.monotonic() + 600),
                  said.append)
    assert far.results == 0 and far.doc["runs"] == []
