"""Real Bandit and Semgrep (issue 4): run them, convert their JSON with the real wasm adapters.

Each tool analyses a small vulnerable tree the test writes; its report goes through the built
adapter component, the SARIF must validate with zero errors (GitHub's rules included), and every
result must carry the rule, level and location the tool reported. Bandit also runs inside the
cage (`sandboy run`: read the tree and the interpreter, write one directory, no network) and
must produce the same report as unconfined. Semgrep runs once per session, confined, with a
local rule file: its start-up costs ~2 s and no rule may be fetched (there is no network).

The tools are pinned in the `test` extra: `pip install -e '.[test]'`.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sandboy.audit import sarif
from sandboy.audit.convert import ConvertRequest, convert
from sandboy.audit.github import github_problems

# Not `from conftest import REPO`: with tests/gate collected first, `conftest` is gate's.
REPO = Path(__file__).resolve().parents[2]


def _load_demo():
    # examples/ is not a package: load the demo by path (its policy helpers are shared with
    # these tests, and test_audit_demo runs it) without putting examples/ on sys.path.
    spec = importlib.util.spec_from_file_location("audit_demo", REPO / "examples" / "audit_demo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


audit_demo = _load_demo()

BIN = Path(sys.executable).parent
SANDBOY = BIN / "sandboy"

# One finding per line that matters; the multi-line call gives Bandit a line_range and Semgrep
# an end line, so end positions are compared too.
VULNERABLE = '''\
import subprocess

import yaml

password = "hunter2"


def run(command):
    return subprocess.call(command, shell=True)


def fetch(url):
    return subprocess.call(
        "curl " + url,
        shell=True,
    )


def load(text):
    return yaml.load(text)
'''

RULES = '''\
rules:
  - id: subprocess-shell-true
    languages: [python]
    severity: ERROR
    message: subprocess called with shell=True runs its argument through /bin/sh
    pattern: subprocess.call(..., shell=True)
    metadata:
      category: security
      cwe: ["CWE-78: Improper Neutralization of Special Elements used in an OS Command"]
      confidence: HIGH
  - id: yaml-unsafe-load
    languages: [python]
    severity: WARNING
    message: yaml.load without a safe Loader can build arbitrary objects
    pattern: yaml.load($X)
  - id: hardcoded-password
    languages: [python]
    severity: INFO
    message: a password in the source
    pattern: password = "..."
'''

# What the tools must find in VULNERABLE, and the SARIF level each maps to.
BANDIT_EXPECTED = {"B404": "note", "B105": "note", "B602": "error", "B506": "warning"}
SEMGREP_EXPECTED = [("subprocess-shell-true", 9, "error"), ("subprocess-shell-true", 13, "error"),
                    ("hardcoded-password", 5, "note"), ("yaml-unsafe-load", 20, "warning")]


def need(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.fail(f"{module} is not installed for {sys.executable}: run .venv/bin/pip install -e '.[test]'")


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("real-tools")
    (root / "tree" / "src").mkdir(parents=True)
    (root / "tree" / "src" / "app.py").write_text(VULNERABLE)
    (root / "tree" / "rule.yml").write_text(RULES)
    for name in ("out", "scratch"):
        (root / name).mkdir()
    return root


def snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def to_sarif(tool: str, report: Path) -> tuple[dict[str, Any], str]:
    """The real adapter component (built on first use, cached with the shared components: tests/conftest.py)."""
    result = convert(ConvertRequest(tool=tool, artifacts=[(report.name, report)]),
                     progress=lambda m: print(m, file=sys.stderr, flush=True))
    found = sarif.problems(result.doc) + github_problems(result.doc, result.text.encode())
    errors = [p for p in found if p.severity == "error"]
    assert errors == [], f"{tool} SARIF must validate: {errors}"
    return result.doc, result.text


def located(res: dict[str, Any]) -> tuple[str, dict[str, int]]:
    loc = res["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"]["uriBaseId"] == "%SRCROOT%"
    region = {k: v for k, v in loc["region"].items() if k != "snippet"}
    return loc["artifactLocation"]["uri"], region


def run_bandit_plain(tree: Path, report: Path) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-I", "-m", "bandit", "-r", "src", "-f", "json", "-o", str(report), "-q"],
                          cwd=tree, capture_output=True, text=True, timeout=120)
    # Bandit exits 1 when it found issues.
    assert proc.returncode in audit_demo.BANDIT_OK and report.is_file(), proc.stderr + proc.stdout
    return json.loads(report.read_text())


@pytest.fixture(scope="module")
def bandit_plain(tree) -> tuple[dict[str, Any], Path]:
    need("bandit")
    report = tree / "out" / "bandit-plain.json"
    return run_bandit_plain(tree / "tree", report), report


@pytest.fixture(scope="module")
def semgrep_confined(tree) -> tuple[dict[str, Any], Path, dict[str, Any]]:
    """One confined Semgrep run per session, shared by the tests below."""
    need("semgrep")
    semgrep = BIN / "semgrep"
    assert semgrep.is_file(), f"{semgrep}: the semgrep console script is missing; reinstall the test extra"
    core_dir = Path(importlib.util.find_spec("semgrep").submodule_search_locations[0]) / "bin"
    read, exe = audit_demo.interpreter_grants()
    out, scratch = tree / "out", tree / "scratch"
    policy = audit_demo.write_policy(
        tree / "semgrep-policy.toml",
        # semgrep-core starts its (disabled) telemetry client anyway: that loads the system CA
        # store (/etc/ssl) and runs `uname -s` (/usr/bin), and fails without them.
        read=audit_demo.SYSTEM_READ + read + ["/etc/ssl", str(tree / "tree")],
        exec_=exe + [str(core_dir), "/usr/bin", "/bin"],
        write=[str(out), str(scratch)],
        # Semgrep refuses to start without a HOME (it writes ~/.semgrep/settings.yml) and needs
        # a temporary directory for its pipes; `uname` is looked up on PATH. (Its entry point
        # appends the venv's bin to PATH itself, to find `pysemgrep`.)
        env_set={"HOME": str(scratch), "TMPDIR": str(scratch), "PATH": "/usr/bin:/bin"},
        why="Semgrep with a local rule file: read the tree, write the report, no network.",
    )
    report, status = out / "semgrep.json", tree / "semgrep-status.json"
    proc = subprocess.run(
        [str(SANDBOY), "run", "--policy", str(policy), "--cwd", str(tree / "tree"), "--status-json", str(status), "--",
         str(semgrep), "--config", "rule.yml", "--json", "--metrics=off", "--disable-version-check",
         "-o", str(report), "-q", "src"],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and report.is_file(), f"confined semgrep exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    return json.loads(report.read_text()), report, json.loads(status.read_text())


def no_network(status: dict[str, Any]) -> None:
    enforced = status["enforced"]
    assert enforced["seccomp"]["sockets"] == {"unix": False, "inet": False, "udp": False, "mptcp_sctp_raw": False}
    assert enforced["landlock"]["abi"] >= 1 and enforced["landlock"]["tcp_connect"] == []


# --- Bandit -------------------------------------------------------------------------


def test_bandit_findings_convert_exactly(bandit_plain):
    report, path = bandit_plain
    assert report["errors"] == []
    issues = report["results"]
    assert {i["test_id"] for i in issues} >= set(BANDIT_EXPECTED), [i["test_id"] for i in issues]

    doc, _ = to_sarif("bandit", path)
    run = doc["runs"][0]
    results, rules = run["results"], run["tool"]["driver"]["rules"]
    assert run["tool"]["driver"]["name"] == "Bandit"
    assert len(results) == len(issues)
    for res, issue in zip(results, issues):
        assert res["ruleId"] == issue["test_id"] and rules[res["ruleIndex"]]["id"] == issue["test_id"]
        assert res["level"] == {"LOW": "note", "MEDIUM": "warning", "HIGH": "error"}[issue["issue_severity"]]
        assert res["message"]["text"] == issue["issue_text"]
        uri, region = located(res)
        assert uri == issue["filename"] == "src/app.py"
        assert region["startLine"] == min(issue["line_range"])  # where the flagged node starts
        assert region["startColumn"] == issue["col_offset"] + 1  # Bandit's columns are 0-based
        assert region.get("endLine", region["startLine"]) == max(issue["line_range"])
        tags = rules[res["ruleIndex"]]["properties"]["tags"]
        assert f"external/cwe/cwe-{issue['issue_cwe']['id']}" in tags
    assert {r["ruleId"]: r["level"] for r in results} == BANDIT_EXPECTED
    # The multi-line call keeps its extent: Bandit 1.9.4 reports the `shell=True` line (15) as
    # line_number, but its col_offset and line_range (13-16) belong to the call.
    shell = [located(r)[1] for r in results if r["ruleId"] == "B602"]
    assert [(r["startLine"], r["endLine"]) for r in shell] == [(9, 9), (13, 16)]


def test_bandit_confined_gives_the_same_report(bandit_plain, tree):
    plain, plain_path = bandit_plain
    target, out = tree / "tree", tree / "out"
    before = snapshot(target)
    policy = audit_demo.bandit_policy(tree / "bandit-policy.toml", target, out)
    report, status = out / "bandit-confined.json", tree / "bandit-status.json"
    proc = audit_demo.bandit_confined(str(SANDBOY), policy, target, report, status)
    assert proc.returncode in audit_demo.BANDIT_OK and report.is_file(), proc.stderr[-3000:]
    no_network(json.loads(status.read_text()))
    assert snapshot(target) == before, "the analysed tree is read-only in the cage"

    confined = json.loads(report.read_text())
    # `-r .` in the cage vs `-r src` outside: Bandit writes "./src/app.py"; the adapter strips "./".
    for issue in confined["results"]:
        assert issue.pop("filename") == "./src/app.py"
    assert confined["results"] == [{k: v for k, v in i.items() if k != "filename"} for i in plain["results"]]

    twin, _ = to_sarif("bandit", report)
    reference, _ = to_sarif("bandit", plain_path)
    assert twin["runs"][0]["results"] == reference["runs"][0]["results"]
    assert twin["runs"][0]["tool"] == reference["runs"][0]["tool"]
    stamp = twin["runs"][0]["properties"]["sandboy"]
    assert stamp["adapter"] == "bandit" and len(stamp["componentSha256"]) == 64


# --- Semgrep ------------------------------------------------------------------------


def test_semgrep_findings_convert_exactly(semgrep_confined):
    report, path, status = semgrep_confined
    no_network(status)
    assert report["errors"] == []
    found = sorted((r["check_id"], r["start"]["line"]) for r in report["results"])
    assert found == sorted((rule, line) for rule, line, _ in SEMGREP_EXPECTED)

    doc, _ = to_sarif("semgrep", path)
    run = doc["runs"][0]
    driver = run["tool"]["driver"]
    assert driver["name"] == "Semgrep" and driver["semanticVersion"] == report["version"]
    results, rules = run["results"], driver["rules"]
    assert len(results) == len(report["results"])
    for res, item in zip(results, report["results"]):
        assert res["ruleId"] == item["check_id"] and rules[res["ruleIndex"]]["id"] == item["check_id"]
        assert res["message"]["text"] == item["extra"]["message"]
        uri, region = located(res)
        assert uri == item["path"] == "src/app.py"
        assert region["startLine"] == item["start"]["line"] and region["startColumn"] == item["start"]["col"]
        assert region.get("endLine", region["startLine"]) == item["end"]["line"]
        assert region["endColumn"] == item["end"]["col"]
        # Semgrep OSS writes "requires login" for every fingerprint: never a real one.
        assert item["extra"]["fingerprint"] == "requires login" and "partialFingerprints" not in res
    levels = sorted((r["ruleId"], located(r)[1]["startLine"], r["level"]) for r in results)
    assert levels == sorted(SEMGREP_EXPECTED)
    shell = rules[next(r["ruleIndex"] for r in results if r["ruleId"] == "subprocess-shell-true")]
    assert shell["properties"]["tags"] == ["security", "external/cwe/cwe-78"]
    assert shell["properties"]["precision"] == "high"


# --- the demo -----------------------------------------------------------------------


def test_audit_demo(tmp_path, capfd):
    need("bandit")
    code = audit_demo.audit_demo(str(SANDBOY), str(tmp_path))
    out, err = capfd.readouterr()
    assert code == 0, out + err
    assert "Traceback" not in out + err
    lines = out.splitlines()
    assert any(line.startswith("bandit found ") for line in lines), out
    assert any(line.startswith("converted by the wasm adapter bandit ") for line in lines), out
    assert any(line.startswith("SARIF valid, GitHub limits respected") for line in lines), out
    sarif_doc = json.loads((tmp_path / "audit" / "out" / "bandit.sarif").read_text())
    report = json.loads((tmp_path / "audit" / "out" / "bandit.json").read_text())
    assert sarif.count_results(sarif_doc) == len(report["results"])
