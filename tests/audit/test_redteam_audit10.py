"""Session 10 red team of `sandboy audit diff` from the repository's side.

`audit run` gives every tool's runs the category `sandboy/<tool>/`, but their driver name is the
adapter's or — through the passthrough adapter — whatever the repository's own tool writes. The
diff's identity of a result ignored the category, so a repository tool that calls itself "Bandit"
could put results into the baseline (main's run) that later covered Bandit's real new findings:
"unchanged", and `--fail-on new` passed. Real CLI, logs shaped as `audit run` writes them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def _audit(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sandboy", "audit", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def _run(tool_dir: str, *results: dict) -> dict:
    """A run as `audit run` leaves it: the driver is "Bandit" for both the built-in tool and the
    repository's passthrough tool; only the category tells them apart."""
    return {"tool": {"driver": {"name": "Bandit", "rules": [{"id": "B602"}]}},
            "automationDetails": {"id": f"sandboy/{tool_dir}/"}, "results": list(results)}


def _finding(line_hash: str, line: int = 12, level: str = "error") -> dict:
    return {"ruleId": "B602", "level": level, "message": {"text": "subprocess call with shell=True"},
            "partialFingerprints": {"primaryLocationLineHash": line_hash},
            "locations": [{"physicalLocation": {"artifactLocation": {"uri": "app/run.py"}, "region": {"startLine": line}}}]}


def _log(*runs: dict) -> dict:
    return {"version": "2.1.0", "$schema": "https://json.schemastore.org/sarif-2.1.0.json", "runs": list(runs)}


def test_a_repository_tool_cannot_seed_the_baseline_to_hide_another_tools_new_finding(tmp_path: Path) -> None:
    # main: the repository's tool "notes" (passthrough) emits a note-level result carrying the hash
    # of the line the next pull request adds; Bandit has nothing to say yet
    (tmp_path / "main.sarif").write_text(json.dumps(_log(_run("bandit"), _run("notes", _finding("c0ffee:1", level="note")))))
    # the pull request: Bandit finds the shell=True call on that line; the repository's tool is quiet
    (tmp_path / "pr.sarif").write_text(json.dumps(_log(_run("bandit", _finding("c0ffee:1")), _run("notes"))))
    done = _audit("diff", "--baseline", "main.sarif", "pr.sarif", "-o", "marked.sarif", "--fail-on", "new", "--json",
                  cwd=tmp_path)
    assert json.loads(done.stdout) == {"new": 1, "unchanged": 0, "absent": 1}, done.stdout + done.stderr
    assert done.returncode == 1  # before: 0 new, 1 unchanged, rc 0 — the gate on new findings passed
    marked = json.loads((tmp_path / "marked.sarif").read_text())
    by_category = {run["automationDetails"]["id"]: run for run in marked["runs"]}
    assert [r["baselineState"] for r in by_category["sandboy/bandit/"]["results"]] == ["new"]
    # the seeded result is reported gone from its own tool's run, not folded into Bandit's
    assert [r["baselineState"] for r in by_category["sandboy/notes/"]["results"]] == ["absent"]


def test_twin_the_same_tool_and_category_still_matches_across_the_two_logs(tmp_path: Path) -> None:
    (tmp_path / "main.sarif").write_text(json.dumps(_log(_run("bandit", _finding("c0ffee:1")), _run("notes"))))
    (tmp_path / "pr.sarif").write_text(json.dumps(_log(_run("bandit", _finding("c0ffee:1", line=40)), _run("notes"))))
    done = _audit("diff", "--baseline", "main.sarif", "pr.sarif", "--fail-on", "new", "--json", cwd=tmp_path)
    assert done.returncode == 0 and json.loads(done.stderr) == {"new": 0, "unchanged": 1, "absent": 0}, done.stderr
    # logs without categories (not from `audit run`) match on the tool as before
    plain = [{"tool": {"driver": {"name": "Bandit"}}, "results": [_finding("c0ffee:1")]}]
    (tmp_path / "a.sarif").write_text(json.dumps(_log(*plain)))
    done = _audit("diff", "--baseline", "a.sarif", "a.sarif", "--json", cwd=tmp_path)
    assert json.loads(done.stderr) == {"new": 0, "unchanged": 1, "absent": 0}, done.stderr
