"""Session 12 red team of `sandboy audit` from the side of hostile input (redinput12).

A SARIF result's `uri` is decoded and looked up in the source root to add GitHub's line hash.
`%00` decodes to a NUL, and `os.path.realpath` raises ValueError on one: a repository's own tool
(passthrough, `.007/adapters.toml`) printing one result at `a%00.py` ended the whole `audit run` in
"internal error (ValueError: embedded null byte)", exit 70, no log written — every other tool's
results lost with it; `audit merge --source-root` the same. Real CLI, real cage, real adapters."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def _sarif(*uris: str) -> dict:
    results = [{"ruleId": "r", "message": {"text": "m"},
                "locations": [{"physicalLocation": {"artifactLocation": {"uri": uri}, "region": {"startLine": 1}}}]}
               for uri in uris]
    return {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "t", "rules": [{"id": "r"}]}}, "results": results}]}


def _repo(tmp_path: Path, *uris: str) -> Path:
    repo = tmp_path / "repo"
    (repo / ".007").mkdir(parents=True)
    (repo / "a.py").write_text("x = 1\n")
    (repo / "out.json").write_text(json.dumps(_sarif(*uris)))
    (repo / ".007" / "adapters.toml").write_text(
        'version = 1\n[tools.t]\nadapter = "passthrough"\noutput = { kind = "sarif", from = "stdout" }\n'
        '[[tools.t.phases]]\ninclude = ["system"]\nargv = ["cat", "{repo}/out.json"]\n')
    return repo


def _audit(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sandboy", "audit", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def _fingerprints(path: Path) -> dict:
    doc = json.loads(path.read_text())
    return {res["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]:
            res.get("partialFingerprints", {}).get("primaryLocationLineHash")
            for run in doc["runs"] for res in run.get("results", [])}


def test_a_nul_in_a_result_uri_does_not_end_audit_run(tmp_path: Path) -> None:
    repo = _repo(tmp_path, "a%00.py", "a.py")
    done = _audit("run", str(repo), "--tools=t,ruff", "-o", str(tmp_path / "out.sarif"), "--json", cwd=tmp_path)
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 0, done.stderr  # before: 70, and no log at all
    assert [(t["tool"], t["status"]) for t in json.loads(done.stdout)["tools"]] == [("t", "ran"), ("ruff", "ran")]
    hashes = _fingerprints(tmp_path / "out.sarif")
    # the NUL result is kept, only not hashed (no file holds that name); its twin in the same log is
    assert hashes["a%00.py"] is None and hashes["a.py"], hashes


def test_a_nul_in_a_result_uri_does_not_end_merge(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "in.sarif").write_text(json.dumps(_sarif("a%00.py", "file://" + str(tmp_path / "a%00.py"), "a.py")))
    done = _audit("merge", "in.sarif", "--source-root", ".", "-o", "out.sarif", cwd=tmp_path)
    assert done.returncode == 0 and "internal error" not in done.stderr, done.stderr
    assert "1 fingerprint(s) added" in done.stderr
    hashes = _fingerprints(tmp_path / "out.sarif")
    assert hashes["a.py"] and hashes["a%00.py"] is None


def test_a_minified_log_without_a_newline_merges(tmp_path: Path) -> None:
    """The size bound counted what the merge adds ($schema, the run's category) but not the
    newline its output ends with: a minified log without `$schema` and without a final newline
    (json.dump's own output) was refused, exit 1, "a Sandboy bug", nothing written."""
    text = json.dumps(_sarif("a.py"), separators=(",", ":"))
    (tmp_path / "min.sarif").write_text(text)
    done = _audit("merge", "min.sarif", "-o", "out.sarif", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert _fingerprints(tmp_path / "out.sarif") == {"a.py": None}
    # twin: the bound still refuses a merge that grows beyond what it adds (tests/audit/test_merge.py
    # holds those); the same log with its newline merges as before
    (tmp_path / "min.sarif").write_text(text + "\n")
    assert _audit("merge", "min.sarif", "-o", "out.sarif", cwd=tmp_path).returncode == 0


def test_a_backslash_in_a_file_name_is_not_another_file(tmp_path: Path) -> None:
    """The adapters read every `\\` as a Windows separator: Bandit's finding in the repository's
    `app\\views.py` (one Linux file name) was reported at `app/views.py` — another file, whose clean
    line a reviewer would see (and whose line hash the result got): the alert on the vulnerable
    file was shown on the harmless one. Real Bandit, real adapter, real cage."""
    repo = tmp_path / "repo"
    (repo / "app").mkdir(parents=True)
    (repo / "app" / "views.py").write_text("def view():\n    return 'fine'\n")
    (repo / "app\\views.py").write_text("import subprocess\nsubprocess.call(input(), shell=True)\n")
    done = _audit("run", str(repo), "--tools=bandit", "-o", str(tmp_path / "out.sarif"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    uris = _fingerprints(tmp_path / "out.sarif")
    assert "app/views.py" not in uris, uris  # before: every finding there
    assert uris.get("app%5Cviews.py"), uris  # the file it is in, hashed from that file's line
    # twin: the same finding in `app/views.py` itself is reported there
    (repo / "app\\views.py").rename(repo / "app" / "views.py")
    done = _audit("run", str(repo), "--tools=bandit", "-o", str(tmp_path / "out.sarif"), cwd=tmp_path)
    assert done.returncode == 0 and _fingerprints(tmp_path / "out.sarif").get("app/views.py"), done.stderr


def test_twin_a_windows_path_in_a_report_still_reads_its_backslashes_as_separators(built, tmp_path: Path) -> None:
    report = {"results": [{"filename": "C:\\work\\app\\views.py", "line_number": 2, "test_id": "B602",
                           "test_name": "subprocess_popen_with_shell_equals_true", "issue_severity": "HIGH",
                           "issue_confidence": "HIGH", "issue_text": "shell=True", "code": "x"}], "errors": []}
    (tmp_path / "b.json").write_text(json.dumps(report))
    done = _audit("convert", "--tool", "bandit", "--artifact", "b.json=b.json", "-o", "out.sarif", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert list(_fingerprints(tmp_path / "out.sarif")) == ["file:///C:/work/app/views.py"]
