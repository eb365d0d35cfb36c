"""The `sandboy audit` command line: exit codes, messages, --json, atomic output, lazy imports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sandboy.audit.cli", *args], cwd=REPO, input=stdin,
                          capture_output=True, timeout=300)


def no_traceback(proc: subprocess.CompletedProcess) -> None:
    assert b"Traceback" not in proc.stderr, proc.stderr.decode()


def test_convert_then_validate_github(built, samples, tmp_path):
    out = tmp_path / "infer.sarif"
    proc = cli("convert", "--tool", "infer", "--artifact", f"report.json={samples}/infer/chronicle-map_infer-1.1.0_report.json",
               "-o", str(out))
    assert proc.returncode == 0, proc.stderr.decode()
    assert b"13 result(s)" in proc.stderr
    proc = cli("validate", "--github", "--json", str(out))
    report = json.loads(proc.stdout)
    assert proc.returncode == 0 and report["valid"] and report["files"][0]["results"] == 13


def test_convert_reports_inconsistencies_as_warnings(built, tmp_path):
    # endColumn before startColumn on one line: GitHub takes it, so the conversion succeeds and says so
    log = {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "t"}}, "results": [{
        "ruleId": "R", "message": {"text": "m"}, "locations": [{"physicalLocation": {
            "artifactLocation": {"uri": "a.c"}, "region": {"startLine": 3, "startColumn": 9, "endColumn": 2}}}]}]}]}
    src = tmp_path / "in.sarif"
    src.write_text(json.dumps(log))
    proc = cli("convert", "--tool", "passthrough", "--artifact", str(src), "-o", str(tmp_path / "out.sarif"))
    assert proc.returncode == 0, proc.stderr.decode()
    assert ("sandboy audit: warning: /runs/0/results/0/locations/0/physicalLocation/region/endColumn: endColumn 2 is before "
            "startColumn 9 on the same line (SARIF 2.1.0 \u00a73.30.8) [semantic, warning]").encode() in proc.stderr
    assert cli("validate", "--strict", str(tmp_path / "out.sarif")).returncode == 1


def test_convert_to_stdout_from_stdin(built, samples):
    data = (samples / "bandit" / "spotifyscraper_bandit-1.8.3.json").read_bytes()
    proc = cli("convert", "--tool", "bandit", "--artifact", "b.json=-", "-q", stdin=data)
    assert proc.returncode == 0 and proc.stderr == b""
    assert json.loads(proc.stdout)["version"] == "2.1.0"


def test_failed_convert_leaves_no_file(built, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    out = tmp_path / "out.sarif"
    out.write_text("previous good output")
    proc = cli("convert", "--tool", "infer", "--artifact", f"r={bad}", "-o", str(out))
    assert proc.returncode == 10 and b"not valid JSON" in proc.stderr
    no_traceback(proc)
    assert out.read_text() == "previous good output" and sorted(p.name for p in tmp_path.iterdir()) == ["bad.json", "out.sarif"]


@pytest.mark.parametrize("args, code, fragment", [
    (["convert", "--tool", "nosuch", "--artifact", "x=y"], 2, b"unknown tool 'nosuch'"),
    (["convert", "--tool", "infer", "--artifact", "r=/nonexistent/report.json"], 2, b"/nonexistent/report.json: no such file"),
    (["convert", "--tool", "infer"], 2, b"no input"),
    (["convert", "--tool", "infer", "--artifact", "=x"], 2, b"expected NAME=PATH"),
    (["convert", "--tool", "infer", "--artifact", "r=x", "--memory-mib", "0"], 2, b"must be positive"),
    (["convert", "--tool", "infer", "--artifact", "r=x", "--max-input-bytes", "lots"], 2, b"not a size"),
    (["validate", "/nonexistent.sarif"], 2, b"no such file"),
    (["build"], 2, b"--all"),
])
def test_usage_errors(args, code, fragment):
    proc = cli(*args)
    assert proc.returncode == code and fragment in proc.stderr, proc.stderr.decode()
    no_traceback(proc)


@pytest.mark.parametrize("command", ["convert", "merge", "run"])
def test_an_output_directory_that_does_not_exist_is_refused_before_any_work(command, tmp_path):
    """-o into a missing directory: exit 2 naming it, and nothing read or run first (`audit run`
    ran every analyser, `audit merge` read every input, before finding out)."""
    out = tmp_path / "missing" / "out.sarif"
    bad = tmp_path / "bad.sarif"
    bad.write_text("not SARIF")
    ops = tmp_path / "ops.toml"
    ops.write_text('version = 1\n[tools.t]\nadapter = "passthrough"\noutput = { kind = "sarif", from = "stdout" }\n'
                   '[[tools.t.phases]]\nargv = ["true"]\ninclude = ["system"]\n')
    args = {"convert": ["convert", "--tool", "infer", "--artifact", f"r={bad}"],
            "merge": ["merge", str(bad)],
            "run": ["run", str(tmp_path), "--adapters", str(ops), "--tools", "t"]}[command]
    proc = cli(*args, "-o", str(out))
    assert proc.returncode == 2, proc.stderr.decode()
    assert proc.stderr.decode().splitlines() == [f"sandboy audit: {out}: directory {out.parent} does not exist"]


def test_input_cap_exit_code(built, tmp_path):
    big = tmp_path / "big.json"
    big.write_bytes(b"[" + b" " * 2000 + b"]")
    proc = cli("convert", "--tool", "infer", "--artifact", f"r={big}", "--max-input-bytes", "1k")
    assert proc.returncode == 3 and b"big.json" in proc.stderr and b"--max-input-bytes" in proc.stderr


def test_validate_invalid_and_not_strict(samples):
    neg = samples / "negative"
    proc = cli("validate", "--json", str(neg / "codeql-action_testdata_invalid-sarif.sarif"),
               str(neg / "squigglecop_Log.v2.with-comment.NOT-STRICT-JSON.sarif"))
    assert proc.returncode == 1
    files = json.loads(proc.stdout)["files"]
    assert files[0]["problems"][0]["pointer"] == "/runs/0/results"
    assert "comment" in files[1]["problems"][0]["message"]
    text = cli("validate", str(neg / "codeql-action_testdata_with-invalid-uri.sarif"))
    assert text.returncode == 1 and b'/runs/0/tool/driver/rules/0/helpUri: "not a valid URI" is not a "uri"' in text.stdout


def test_validate_v1_log_lists_the_version(samples):
    proc = cli("validate", "--github", "--json", str(samples / "roslyn" / "squigglecop_Log.v1.sarif"))
    found = {(p["pointer"], p["source"]) for p in json.loads(proc.stdout)["files"][0]["problems"]}
    assert proc.returncode == 1 and {("/version", "schema"), ("/version", "github")} <= found


def test_validate_warns_on_inconsistencies_github_accepts_and_strict_fails(samples):
    # codeql-action's own fingerprinting test data: ruleIndex 0 with no rules (GitHub accepts it)
    path = str(samples / "codeql" / "codeql-action_testdata_fingerprinting.input.sarif")
    for flags in ([], ["--github"]):
        proc = cli("validate", *flags, "--json", path)
        report = json.loads(proc.stdout)["files"][0]
        assert proc.returncode == 0 and report["valid"] and report["errors"] == 0, proc.stdout
        flagged = [p for p in report["problems"] if p["pointer"] == "/runs/0/results/0/ruleIndex"]
        assert flagged == [{"pointer": "/runs/0/results/0/ruleIndex", "message": "ruleIndex 0 out of range (tool.driver.rules has 0)",
                            "source": "semantic", "severity": "warning", "spec": "3.27.6"}]
    text = cli("validate", path)
    assert b"/runs/0/results/0/ruleIndex: ruleIndex 0 out of range (tool.driver.rules has 0) (SARIF 2.1.0 \xc2\xa73.27.6) [semantic, warning]" in text.stdout
    strict = cli("validate", "--strict", path)
    assert strict.returncode == 1 and b"INVALID SARIF 2.1.0 (strict)" in strict.stdout and b"2 error(s)" in strict.stdout


def test_help_teaches():
    proc = cli("convert", "--help")
    assert proc.returncode == 0 and b"examples:" in proc.stdout and b"--max-input-bytes" in proc.stdout
    val = cli("validate", "--help").stdout
    assert b"examples:" in val and b"--strict" in val and b"RFC 3986" in val


def test_list_json():
    rows = json.loads(cli("list", "--json").stdout)
    assert {r["adapter"] for r in rows} == {"infer", "passthrough", "bandit", "semgrep"}


def test_imports_stay_lazy():
    code = ("import sys, argparse, sandboy, sandboy.audit, sandboy.audit.cli as c;"
            "p = argparse.ArgumentParser(); c.add_parser(p.add_subparsers());"
            "bad = [m for m in ('wasmtime', 'jsonschema_rs', 'sandboy.audit.host', 'sandboy.audit.sarif') if m in sys.modules];"
            "assert not bad, bad")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True)
    assert proc.returncode == 0, proc.stderr.decode()


def test_build_is_cached(built):
    proc = cli("build", "infer")
    assert proc.returncode == 0 and b"building" not in proc.stderr and b"sha256=" in proc.stdout


def test_convert_json_summary(built, samples, tmp_path):
    out = tmp_path / "infer.sarif"
    proc = cli("convert", "--tool", "infer", "--artifact",
               f"report.json={samples}/infer/zrlog_infer-0.17.0_report.json", "-o", str(out), "--json")
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr.decode()
    summary = json.loads(proc.stdout)
    assert summary["results"] == 5 and summary["adapter"] == "infer" and summary["output"] == str(out)
    assert summary["chars"] == len(out.read_text())


def test_convert_json_needs_an_output_file(samples):
    proc = cli("convert", "--tool", "infer", "--artifact",
               f"report.json={samples}/infer/zrlog_infer-0.17.0_report.json", "--json")
    no_traceback(proc)
    assert proc.returncode == 2 and b"add -o FILE" in proc.stderr


def test_build_json_lists_what_was_built(built):
    proc = cli("build", "--json", "infer")
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr.decode()
    rows = json.loads(proc.stdout)
    assert [r["adapter"] for r in rows] == ["infer"] and Path(rows[0]["component"]) == built["infer"]
    assert len(rows[0]["sha256"]) == 64


def test_the_build_estimate_is_what_it_took_last_time(tmp_path, monkeypatch):
    """The progress line's estimate is measured, not a constant: none before the first build."""
    import os

    from sandboy.audit.build import estimate, record

    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    os.chmod(cache, 0o700)
    monkeypatch.setenv("SANDBOY_CACHE_DIR", str(cache))
    assert "can take minutes" in estimate("build")
    record("build", 64.4)
    assert estimate("build") == "first use; 64 s last time here"
    assert "can take minutes" in estimate("compile")
