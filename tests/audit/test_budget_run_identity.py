"""Sandboy's own status run in `audit run`'s merged SARIF cannot be taken over by a repository's tool.

`audit run` names each tool's runs `automationDetails.id = sandboy/<tool>/` and adds, when the
time budget was spent, a run of the tool "sandboy audit" saying what was ended and not run. That
run's id was `sandboy/budget/` — in the tools' namespace: a repository's `.007/adapters.toml`
tool named `budget` whose SARIF names its driver "sandboy audit" had the same tool and category,
so the merge folded Sandboy's run into the repository's (first, so its driver won: another
version and informationUri) and the merged "sandboy audit" run carried the repository's result
"every tool ran, nothing was cut" above Sandboy's real notification (session 8 review). Host
side: the merged file. Twin: the same repository's tool is still merged as a run of its own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SANDBOY = [sys.executable, "-m", "sandboy"]

pytestmark = pytest.mark.slow

FORGE = """
import json, os, sys
result = {"ruleId": "budget", "level": "error",
          "message": {"text": "sandboy: every tool ran, nothing was cut (forged by the repository)"},
          "locations": [{"physicalLocation": {"artifactLocation": {"uri": "forge.py"}, "region": {"startLine": 1}}}]}
driver = {"name": "sandboy audit", "version": "9.9", "informationUri": "https://forged.invalid/"}
with open(os.path.join(sys.argv[1], "f.sarif"), "w") as fh:
    json.dump({"version": "2.1.0", "runs": [{"tool": {"driver": driver}, "results": [result]}]}, fh)
"""

TOOLS = """version = 1
[tools.budget]
adapter = "passthrough"
output = { kind = "sarif", from = "file", file = "f.sarif" }
[[tools.budget.phases]]
name = "forge"
argv = ["python3", "{repo}/forge.py", "{out}"]
include = ["system", "python"]

[tools.slow]
adapter = "passthrough"
output = { kind = "sarif", from = "file", file = "f.sarif" }
[[tools.slow.phases]]
name = "sleep"
argv = ["sleep", "60"]
include = ["system"]
"""


def test_a_repository_tool_cannot_fold_its_run_into_sandboys_budget_run(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / ".007").mkdir(parents=True)
    (repo / "forge.py").write_text(FORGE)
    (repo / ".007" / "adapters.toml").write_text(TOOLS)
    out = tmp_path / "merged.sarif"
    done = subprocess.run([*SANDBOY, "audit", "run", str(repo), "--tools", "budget,slow", "--budget", "4",
                           "-o", str(out)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr[-3000:]  # the budget ended `slow`
    runs = json.loads(out.read_text())["runs"]
    ours = [r for r in runs if r["automationDetails"]["id"] == "sandboy-audit/budget/"]
    assert len(ours) == 1, [(r["tool"]["driver"], r["automationDetails"]) for r in runs]
    (status,) = ours
    assert status["tool"]["driver"] == {"name": "sandboy audit",
                                        "informationUri": "https://sandboy.invalid/docs/audit-run.md"}
    assert status["results"] == []
    notes = [n["message"]["text"] for i in status["invocations"] for n in i["toolExecutionNotifications"]]
    assert len(notes) == 2 and notes[0].startswith("slow: phase sleep: timed_out"), notes
    assert notes[1].startswith("the merge: the audit's time budget of 4s (--budget) was spent before the merge;")
    # twin: the repository's tool ran and is merged as a run of its own, whatever it calls itself
    (theirs,) = [r for r in runs if r["automationDetails"]["id"] == "sandboy/budget/"]
    assert theirs["tool"]["driver"]["informationUri"] == "https://forged.invalid/"
    assert [r["message"]["text"] for r in theirs["results"]] == [
        "sandboy: every tool ran, nothing was cut (forged by the repository)"]
    assert all("forged" not in json.dumps(i) for i in theirs["invocations"])  # Sandboy's own invocation
