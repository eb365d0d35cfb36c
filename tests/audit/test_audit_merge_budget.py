"""A merge begun within `audit run`'s time budget ends at the budget (ADR 0025, session 10).

Session 9 bounded every tool's phases and conversion by the budget, and the merge once the budget
was spent; a merge BEGUN in time ran to its end: 16 s for 99,000 results at load 10 on a 2 s
budget — and the command chooses what the merge costs: one result naming a 24 MiB source file
of the repository makes the merge hash that file for its fingerprint (tens of seconds here, by
the source files' size cap only). Now the merge looks at the budget's end while it folds, while
it hashes and before its check and serialisation; passed, it is done again as past the budget
(whole logs of at most MERGE_RESULTS_PAST_BUDGET results in all, no fingerprints), the budget's
run in the log names the step that was cut, and the run fails (exit 1). Twin: a merge within the
budget is complete and byte-identical to one without a deadline."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

BIG_FILE_BYTES = 24 << 20  # under fingerprint.MAX_SOURCE_BYTES (32 MiB): hashed, ≥ 10 s of CPU here


def _result(uri: str, line: int = 1, rule: str = "R1") -> dict:
    return {"ruleId": rule, "message": {"text": f"m {uri}"},
            "locations": [{"physicalLocation": {"artifactLocation": {"uri": uri}, "region": {"startLine": line}}}]}


def _log(tool: str, results: list) -> dict:
    return {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": tool, "rules": [{"id": "R1"}]}},
                                         "results": results}]}


def _big_sources(repo: Path, count: int) -> list:
    (repo / "src").mkdir(parents=True, exist_ok=True)
    names = []
    for i in range(count):
        line = f"value_{i} = compute({i})  # a line of source\n".encode()
        (repo / "src" / f"big{i}.py").write_bytes(line * (BIG_FILE_BYTES // len(line)))
        names.append(f"src/big{i}.py")
    return names


def _repo(tmp_path: Path) -> Path:
    """t0: one result on a small file; t1: three results, each on a big source file."""
    repo = tmp_path / "repo"
    (repo / ".007").mkdir(parents=True)
    (repo / "small.py").write_text("print('small')\n")
    (repo / "t0.sarif").write_text(json.dumps(_log("small", [_result("small.py")])))
    (repo / "t1.sarif").write_text(json.dumps(_log("big", [_result(name) for name in _big_sources(repo, 3)])))
    tools = "".join(f'[tools.t{i}]\nadapter = "passthrough"\noutput = {{ kind = "sarif", from = "stdout" }}\n'
                    f'[[tools.t{i}.phases]]\ninclude = ["system"]\nargv = ["cat", "{{repo}}/t{i}.sarif"]\n'
                    for i in range(2))
    (repo / ".007" / "adapters.toml").write_text(f"version = 1\n{tools}")
    return repo


def _audit(repo: Path, tmp_path: Path, *args: str) -> tuple:
    status, out = tmp_path / "status.json", tmp_path / "out.sarif"
    started = time.monotonic()
    with open(status, "w") as fh:
        done = subprocess.run([sys.executable, "-m", "sandboy", "audit", "run", str(repo), "--tools", "t0,t1",
                               "--json", "-o", str(out), *args], stdout=fh, stderr=subprocess.PIPE, text=True,
                              timeout=300, env={"PATH": "/usr/bin:/bin", "TMPDIR": str(tmp_path), **{
                                  k: os.environ[k] for k in ("SANDBOY_CACHE_DIR", "SANDBOY_ADAPTERS_DIR")
                                  if k in os.environ}})
    took = time.monotonic() - started
    assert "Traceback" not in done.stderr, done.stderr
    return done, json.loads(status.read_text()), json.loads(out.read_text()), took


BUDGET = 6
# After the budget's end: the hash loop looks at the clock every 65,536 code units (≈ 20 ms of
# CPU); the merge done again (2 logs, 4 results, no fingerprints, the full check) is well under
# 1 s at load 10; before the budget starts, the interpreter's start-up and the tool loading
# (0.2–1.2 s at load 10 here); the exit. The same SLACK as tests/audit/test_audit_budget.py.
# Without the bound: three 24 MiB files hashed, ≥ 30 s of CPU alone on this machine.
SLACK = 6.0


def test_a_merge_begun_within_the_budget_ends_at_the_budget(tmp_path) -> None:
    repo = _repo(tmp_path)
    done, status, log, took = _audit(repo, tmp_path, "--budget", f"{BUDGET}s")
    tools = {t["tool"]: t for t in status["tools"]}
    if any(t["status"] != "ran" for t in tools.values()):  # (the conversions themselves past the budget)
        pytest.skip(f"the tools did not convert within {BUDGET} s here (load): {tools}")
    assert took < BUDGET + SLACK, f"{took:.1f} s for a {BUDGET} s budget"
    assert done.returncode == 1, done.stderr  # fail closed: the budget was spent
    assert status["budget"]["spent"] is True
    said = [r for r in log["runs"] if r["tool"]["driver"]["name"] == "sandboy audit"]
    assert len(said) == 1, log["runs"]
    props = said[0]["invocations"][0]["properties"]["sandboy"]
    assert props["merge_cut"] == "while the merge was computing fingerprints from the source files", props
    notes = [n["message"]["text"] for n in said[0]["invocations"][0]["toolExecutionNotifications"]]
    assert any(n.startswith("the merge: ") and "computed no fingerprints" in n for n in notes), notes
    results = [r for run in log["runs"] for r in run["results"]]
    assert len(results) == 4, results  # both tools' logs (4 results) still merged, whole
    assert not any("partialFingerprints" in r for r in results)  # none half-done


def _reports(repo: Path):
    from sandboy.audit.pipeline import RAN, ToolReport

    logs = [_log("small", [_result("small.py", 1), _result("small.py", 2)]),
            _log("other", [_result("b.py", 3, "R1"), _result("b.py", 1, "R1")]),
            _log("small", [_result("small.py", 1)])]  # folded into the first, a duplicate dropped
    return [ToolReport(f"t{i}", RAN, results=len(doc["runs"][0]["results"]), sarif=doc) for i, doc in enumerate(logs)]


def test_twin_a_merge_within_the_budget_is_complete_and_unchanged(tmp_path) -> None:
    """Within the budget: the same bytes as the merge without any deadline (session 9's path),
    fingerprints included; exit status untouched."""
    from sandboy.audit import merge
    from sandboy.audit.pipeline import merge_logs
    from sandboy.budget import Budget

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "small.py").write_text("a = 1\nb = 2\n")
    (repo / "b.py").write_text("x = 1\ny = 2\nz = 3\n")
    reports = _reports(repo)
    before_docs = [copy.deepcopy(r.sarif) for r in reports]
    unbounded, before_report = merge.merge_docs(before_docs, repo)
    before = merge.finish(unbounded, before_report, False, semantic_check=True)
    budget = Budget(120, "the audit's", "--budget").start()
    text, report = merge_logs(reports, budget, repo, False)
    assert text == before
    assert budget.spent is False and all(r.status == "ran" for r in reports)
    assert report.fingerprints_added == 4 and report.results_out == 4, report
    no_budget = _reports(repo)
    assert merge_logs(no_budget, Budget(0, "the audit's", "--budget").start(), repo, False)[0] == before


def test_a_merge_cut_in_process_keeps_no_half_work(tmp_path) -> None:
    """The cut itself, in process, with a deadline 0.5 s away and a merge that needs ≥ 10 s of
    CPU: it returns at the deadline plus the small merge again; the logs it merged are whole,
    from the copies taken before (the cut merge had changed them in place); a log past
    MERGE_RESULTS_PAST_BUDGET is held back, its tool failed saying why."""
    from sandboy.audit.pipeline import merge_logs
    from sandboy.budget import Budget

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "small.py").write_text("a = 1\nb = 2\n")
    (repo / "b.py").write_text("x = 1\ny = 2\nz = 3\n")
    reports = _reports(repo)
    from sandboy.audit.pipeline import FAILED, MERGE_RESULTS_PAST_BUDGET, RAN, ToolReport

    names = _big_sources(repo, 1)
    reports.append(ToolReport("t3", RAN, results=1, sarif=_log("big", [_result(names[0])])))
    many = [_result("b.py", 1 + i % 3, rule=f"R{i}") for i in range(MERGE_RESULTS_PAST_BUDGET + 1)]
    reports.insert(0, ToolReport("many", RAN, results=len(many), sarif=_log("many", many)))  # first: held back
    budget = Budget(60, "the audit's", "--budget").start()
    budget.deadline = time.monotonic() + 0.5
    started = time.monotonic()
    text, report = merge_logs(reports, budget, repo, False)
    took = time.monotonic() - started
    assert took < 0.5 + 3.0, took  # the hash notices within ≈ 20 ms; the small merge again: < 1 s at load 10
    log = json.loads(text)
    runs = {run["tool"]["driver"]["name"]: run for run in log["runs"]}
    assert sorted(runs) == ["big", "other", "sandboy audit", "small"], sorted(runs)
    assert [r["locations"][0]["physicalLocation"]["region"]["startLine"] for r in runs["small"]["results"]] == [1, 2]
    assert all("partialFingerprints" not in r for run in log["runs"] for r in run["results"])
    assert runs["sandboy audit"]["invocations"][0]["properties"]["sandboy"]["merge_cut"] == \
        "while the merge was computing fingerprints from the source files"
    assert budget.spent is True
    assert any("merged without fingerprints" in n for n in report.notices), report.notices
    held = reports[0]  # 5,001 results: past MERGE_RESULTS_PAST_BUDGET alone
    assert (held.tool, held.status, held.sarif, held.results, held.cut_by_budget) == ("many", FAILED, None, 0, True)
    assert held.reason == (f"its {MERGE_RESULTS_PAST_BUDGET + 1:,} result(s) were converted but not merged: the audit's "
                           "time budget of 1m (--budget) was spent while the merge was computing fingerprints "
                           f"from the source files, which then takes at most {MERGE_RESULTS_PAST_BUDGET:,} results")
    assert runs["sandboy audit"]["invocations"][0]["properties"]["sandboy"]["ended"] == ["many"]
    assert all(r.status == RAN for r in reports[1:])


def test_past_the_budget_the_merge_hashes_nothing(tmp_path) -> None:
    """Spent before the merge (session 9: then whole logs up to 5,000 results, "≈ 1 s"): a small
    log naming a 24 MiB source file still cost tens of seconds of hashing. Past the budget the
    merge computes no fingerprint at all, and says so."""
    from sandboy.audit.pipeline import RAN, ToolReport, merge_logs
    from sandboy.budget import Budget

    repo = tmp_path / "repo"
    names = _big_sources(repo, 1)
    reports = [ToolReport("t0", RAN, results=1, sarif=_log("big", [_result(names[0])]))]
    budget = Budget(60, "the audit's", "--budget").start()
    budget.deadline = time.monotonic() - 0.001  # (as when the last tool's phase was cut at it)
    started = time.monotonic()
    text, report = merge_logs(reports, budget, repo, False)
    assert time.monotonic() - started < 3.0  # (≥ 10 s of CPU with the hash)
    log = json.loads(text)
    runs = {run["tool"]["driver"]["name"]: run for run in log["runs"]}
    assert len(runs["big"]["results"]) == 1 and "partialFingerprints" not in runs["big"]["results"][0]
    assert runs["sandboy audit"]["invocations"][0]["properties"]["sandboy"]["merge_cut"] == "before the merge"
    assert budget.spent is True and reports[0].status == RAN


def test_resolving_the_results_source_files_stops_at_the_deadline(tmp_path) -> None:
    """Before any file is hashed, each result's source path is resolved under the repository (a
    stat or more each): 99,000 results naming distinct files took 11.4 s here at load 7. That loop
    looks at the deadline too (every 256 results)."""
    from sandboy.audit.fingerprint import PastDeadline, add_fingerprints

    results = [_result(f"src/missing{i}.py") for i in range(99_000)]
    deadline = time.monotonic() + 0.2  # the loop needs seconds here, ≥ 1 s on a quiet machine
    with pytest.raises(PastDeadline):
        add_fingerprints({"runs": [{"results": results}]}, tmp_path, deadline)
    assert time.monotonic() - deadline < 1.0  # 256 resolutions past it at most (≈ 30 ms at load 7)


# --- a begun check or serialisation (session 11) ---------------------------------------------


def _merged_big(results: int = 60_000):
    """A merged log of `results` results, each naming its own file (a hostile tool's many
    findings), as `merge_logs` has it before `finish`."""
    from sandboy.audit import merge

    many = [_result(f"src/f{i}.py", 1 + i % 100, rule=f"R{i % 50}") for i in range(results)]
    doc = _log("many", many)
    doc["runs"][0]["tool"]["driver"]["rules"] = [{"id": f"R{i}"} for i in range(50)]
    return merge.merge_docs([doc, _log("small", [_result("small.py")])], None)


@pytest.mark.parametrize("github_mode", [False, True])
def test_a_begun_check_of_the_merged_log_stops_at_the_deadline(github_mode) -> None:
    """Session 10 looked at the deadline before the merged log's check and before its
    serialisation, each then ran to its end: ≈ 2.5 + 1.1 s past the budget for 99,000 results
    at load 8 (its semantic walk is Python, json.dumps one call). Now both look at it while they
    work: a deadline passing just after the check began ends it with MergeCut within the schema's
    own check (jsonschema-rs, ≈ 0.1–0.3 s here) and one part, and no text is made."""
    from sandboy.audit import merge

    out, report = _merged_big()
    before = json.dumps(out)
    deadline = time.monotonic() + 0.05
    with pytest.raises(merge.MergeCut) as cut:
        merge.finish(out, report, github_mode, semantic_check=True, deadline=deadline)
    late = time.monotonic() - deadline
    # (unbounded: the whole check and serialisation, ≥ 2 s here under load; with --github first
    # the fit to GitHub's limits, ≈ 1.4 s more, then its gzip)
    assert late < 1.0, late
    if github_mode:
        assert cut.value.step == "fitting the merged log to GitHub's limits"
    else:
        assert cut.value.step == "checking the merged log"
        assert json.dumps(out) == before  # the check changes nothing (the fit fills message texts)


def test_a_begun_serialisation_stops_between_its_parts_and_leaves_the_log_whole() -> None:
    """The serialisation made in parts (`sarif.dumps_in_parts`): its `between` raising at the
    third part stops it there, and every run has its results back (the cut merge's fallback
    must not see a marker in place of a run's results)."""
    from sandboy.audit import sarif

    out, _ = _merged_big(3 * sarif.DUMPS_PART + 5)
    before = json.dumps(out)
    calls = []

    def between():
        calls.append(1)
        if len(calls) == 3:
            raise TimeoutError("the deadline")

    with pytest.raises(TimeoutError):
        sarif.dumps_in_parts(out, between)
    assert len(calls) == 3 and json.dumps(out) == before


def test_twin_a_merge_serialised_in_parts_is_the_same_bytes(tmp_path) -> None:
    """The twin: what a merge with a deadline it meets writes is byte-identical to the merge
    without one — on the big hostile log, on every real tool's log in tests/data/samples (each
    and all merged), and on logs with empty, missing and odd `results`."""
    from sandboy.audit import merge, sarif

    out, report = _merged_big(20_000)
    assert sarif.dumps_in_parts(out, lambda: None) == sarif.dumps(out)
    far = time.monotonic() + 600
    assert merge.finish(copy.deepcopy(out), copy.deepcopy(report), False, True, deadline=far) == \
        merge.finish(out, report, False, True)
    docs = []
    for path in sorted(Path(__file__).resolve().parents[1].joinpath("data", "samples").rglob("*.sarif")):
        if path.parent.name in ("negative", "sarif-v1"):
            continue  # (not JSON, or SARIF 1.0.0, on purpose)
        doc = json.loads(path.read_text("utf-8"))
        assert sarif.dumps_in_parts(doc, lambda: None) == sarif.dumps(doc), path
        if doc.get("version") == "2.1.0":
            docs.append(doc)
    assert len(docs) >= 5
    odd = {"version": "2.1.0", "runs": [{"results": []}, {"tool": {}}, {"results": None}, "x",
                                        {"results": [{"message": {"text": "é \u2028 \"q\""}}]}]}
    assert sarif.dumps_in_parts(odd, lambda: None) == sarif.dumps(odd)
    assert sarif.dumps_in_parts([1, 2], lambda: None) == sarif.dumps([1, 2])
    merged, report = merge.merge_docs(docs, None)
    assert merge.finish(copy.deepcopy(merged), copy.deepcopy(report), True, True, deadline=far) == \
        merge.finish(merged, report, True, True)
