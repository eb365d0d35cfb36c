"""`sandboy audit merge` / `diff` / GitHub preflight / fingerprints (issue 12): table tests on the
real samples (tests/data/samples) and on generated over-limit logs."""

from __future__ import annotations

import base64
import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sandboy.audit import diff, fingerprint, github, merge, sarif

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "tests" / "data" / "samples"
V21 = sorted(p for p in SAMPLES.rglob("*.sarif")
             if "negative" not in p.parts and json.loads(p.read_text(encoding="utf-8-sig")).get("version") == "2.1.0")


def _audit(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sandboy", "audit", *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def _log(*runs: dict) -> dict:
    return {"version": "2.1.0", "runs": list(runs)}


def _result(rule: str, uri: str, line: int, level: str = "warning", text: str | None = None) -> dict:
    return {"ruleId": rule, "level": level, "message": {"text": text or f"{rule} at {uri}:{line}"},
            "locations": [{"physicalLocation": {"artifactLocation": {"uri": uri}, "region": {"startLine": line}}}]}


# --- fingerprints -------------------------------------------------------------------------

# Expected values from github/codeql-action src/fingerprints.test.ts (MIT licence, GitHub, Inc.):
# our implementation must agree with the one GitHub's upload action runs.
UPSTREAM_VECTORS = [
    ("", ["c129715d7a2bc9a3:1"]),
    (" a\nb\n  \t\tc\n d", ["271789c17abda88f:1", "54703d4cd895b18:1", "180aee12dab6264:1", "a23a3dc5e078b07b:1"]),
    (" hello; \t\nworld!!!\n\n\n  \t\tGreetings\n End",
     ["8b7cf3e952e7aeb2:1", "b1ae1287ec4718d9:1", "bff680108adb0fcc:1", "c6805c5e1288b612:1", "b86d3392aea1be30:1", "e6ceba753e1a442:1"]),
    *[(text, ["e9496ae3ebfced30:1", "fb7c023a8b9ccb3f:1", "ce8ba1a563dcdaca:1", "e20e36e16fcb0cc8:1", "b3edc88f2938467e:1",
              "c8e28b0b4002a3a0:1", "c129715d7a2bc9a3:1"])
      for text in (" hello; \t\nworld!!!\n\n\n  \t\tGreetings\n End\n", " hello; \t\nworld!!!\r\r\r  \t\tGreetings\r End\r",
                   " hello; \t\r\nworld!!!\r\n\r\n\r\n  \t\tGreetings\r\n End\r\n", " hello; \t\nworld!!!\r\n\n\r  \t\tGreetings\r End\r\n")],
    ("Lorem ipsum dolor sit amet.\n" * 10,
     ["a7f2ff13bc495cf2:1", "a7f2ff13bc495cf2:2", "a7f2ff13bc495cf2:3", "a7f2ff13bc495cf2:4", "a7f2ff13bc495cf2:5",
      "a7f2ff13bc495cf2:6", "a7f2ff1481e87703:1", "a9cf91f7bbf1862b:1", "55ec222b86bcae53:1", "cc97dc7b1d7d8f7b:1", "c129715d7a2bc9a3:1"]),
]


@pytest.mark.parametrize("text, expected", UPSTREAM_VECTORS)
def test_line_hashes_match_githubs_upload_action(text: str, expected: list[str]) -> None:
    assert fingerprint.line_hashes(text) == expected


def test_fingerprints_are_added_from_the_source_and_existing_ones_kept(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(" a\nb\n  \t\tc\n d")
    doc = _log({"tool": {"driver": {"name": "t"}}, "results": [
        _result("R1", "a.py", 2), _result("R2", f"file://{tmp_path}/a.py", 3),
        {**_result("R3", "a.py", 4), "partialFingerprints": {"primaryLocationLineHash": "kept:1"}},
        _result("R4", "../outside.py", 1), _result("R5", "missing.py", 1), _result("R6", "https://x/a.py", 1)]})
    assert fingerprint.add_fingerprints(doc, tmp_path)[0] == 2
    got = [r.get("partialFingerprints", {}).get("primaryLocationLineHash") for r in doc["runs"][0]["results"]]
    assert got == ["54703d4cd895b18:1", "180aee12dab6264:1", "kept:1", None, None, None]


def test_fingerprints_read_only_regular_files_inside_the_root_and_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The source root is the analysed (untrusted) repository: a symlink out of it, a sibling
    whose name only starts like the root, a FIFO (which would block a plain read) and a file
    over the size limit give no fingerprint; the regular file beside them does."""
    root, sibling = tmp_path / "repo", tmp_path / "repo-evil"
    root.mkdir()
    sibling.mkdir()
    (sibling / "x.py").write_text("secret\n")
    (root / "ok.py").write_text(" a\nb\n")
    (root / "out.py").symlink_to(sibling / "x.py")
    os.mkfifo(root / "fifo.py")
    (root / "big.py").write_text("x\n" * 600)
    monkeypatch.setattr(fingerprint, "MAX_SOURCE_BYTES", 1000)
    doc = _log({"tool": {"driver": {"name": "t"}}, "results": [
        _result("R1", "ok.py", 2), _result("R2", "out.py", 1), _result("R3", "../repo-evil/x.py", 1),
        _result("R4", f"file://{sibling}/x.py", 1), _result("R5", "fifo.py", 1), _result("R6", "big.py", 1)]})
    assert fingerprint.add_fingerprints(doc, root)[0] == 1
    assert [r.get("partialFingerprints") for r in doc["runs"][0]["results"]][1:] == [None] * 5
    assert fingerprint.hash_file(root / "fifo.py") is None  # not opened for a blocking read
    assert fingerprint.hash_file(root / "out.py") is None   # a symlink in last place is not followed
    (root / "big.py").write_text("x\n" * 500)              # exactly 1000 bytes: hashed
    assert fingerprint.hash_file(root / "big.py") == fingerprint.line_hashes("x\n" * 500)


def test_a_source_root_of_slash_still_holds_its_files(tmp_path: Path) -> None:
    """"Inside the root" is sandboy.paths.is_within: with "/" as the root every absolute path is
    inside (a hand-written `base + os.sep` test made that "//" and matched nothing)."""
    (tmp_path / "a.py").write_text("x\n")
    assert fingerprint.source_path({"uri": f"file://{tmp_path}/a.py"}, [], Path("/")) == tmp_path / "a.py"
    assert fingerprint.source_path({"uri": f"{str(tmp_path)[1:]}/a.py"}, [], Path("/")) == tmp_path / "a.py"


# --- merge --------------------------------------------------------------------------------


def test_the_real_samples_merge_into_one_valid_log_no_larger_than_the_inputs(tmp_path: Path) -> None:
    assert len(V21) >= 4, V21
    out = tmp_path / "merged.sarif"
    done = _audit("merge", *map(str, V21), "-o", str(out), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    doc = json.loads(out.read_text())
    assert not [p for p in sarif.problems(doc) if p.severity == "error"]
    assert out.stat().st_size <= sum(p.stat().st_size for p in V21)
    assert report["results_out"] == report["results_in"] - report["duplicates"] == sarif.count_results(doc)
    keys = [(merge.tool_name(r), merge.category(r)) for r in doc["runs"]]
    assert len(keys) == len(set(keys)) and all(r["automationDetails"]["id"] for r in doc["runs"])


@pytest.mark.parametrize("sample", V21, ids=lambda p: p.name)
def test_a_log_merged_with_itself_is_itself_once(sample: Path, tmp_path: Path) -> None:
    once, _ = merge.merge_files([sample], None, False)
    twice, report = merge.merge_files([sample, sample], None, False)
    assert json.loads(once) == json.loads(twice)
    assert report.duplicates == report.results_in // 2
    assert len(twice) <= 2 * sample.stat().st_size


def test_rules_and_artifacts_deduplicated_with_indices_remapped() -> None:
    a = {"tool": {"driver": {"name": "t", "rules": [{"id": "A"}, {"id": "B"}]}},
         "artifacts": [{"location": {"uri": "x.py"}}, {"location": {"uri": "y.py"}}],
         "results": [{"ruleId": "B", "ruleIndex": 1, "message": {"text": "b"},
                      "locations": [{"physicalLocation": {"artifactLocation": {"index": 1}, "region": {"startLine": 1}}}]}]}
    b = {"tool": {"driver": {"name": "t", "rules": [{"id": "C"}, {"id": "B"}, {"id": "A"}]}},
         "artifacts": [{"location": {"uri": "z.py"}}, {"location": {"uri": "x.py"}}],
         "results": [{"ruleId": "A", "ruleIndex": 2, "message": {"text": "a"},
                      "locations": [{"physicalLocation": {"artifactLocation": {"index": 1}, "region": {"startLine": 2}}}]},
                     {"ruleId": "C", "ruleIndex": 0, "message": {"text": "c"},
                      "locations": [{"physicalLocation": {"artifactLocation": {"index": 0}, "region": {"startLine": 3}}}]}],
         }
    doc, report = merge.merge_docs([_log(a), _log(b), _log({"tool": {"driver": {"name": "empty"}}, "results": []})])
    run, empty = doc["runs"]
    rules = [r["id"] for r in run["tool"]["driver"]["rules"]]
    uris = [x["location"]["uri"] for x in run["artifacts"]]
    assert rules == ["A", "B", "C"] and uris == ["x.py", "y.py", "z.py"]
    for result in run["results"]:
        assert rules[result["ruleIndex"]] == result["ruleId"]
    located = {r["ruleId"]: uris[r["locations"][0]["physicalLocation"]["artifactLocation"]["index"]] for r in run["results"]}
    assert located == {"B": "y.py", "A": "x.py", "C": "z.py"}
    assert empty["results"] == [] and empty["automationDetails"] == {"id": "empty/"}  # zero-result runs are kept


@pytest.mark.parametrize("content, expect", [
    ("{not json", "not a SARIF log"),
    ('{"version": "2.1.0", "runs": [{"results": []}]}', "not valid SARIF 2.1.0"),
    ('{"version": "1.0.0", "runs": []}', "upgrade it first"),
])
def test_a_bad_input_fails_the_merge_and_writes_nothing(tmp_path: Path, content: str, expect: str) -> None:
    bad = tmp_path / "bad.sarif"
    bad.write_text(content)
    out = tmp_path / "merged.sarif"
    done = _audit("merge", str(V21[0]), str(bad), "-o", str(out), cwd=tmp_path)
    assert done.returncode == 1 and expect in done.stderr and "Traceback" not in done.stderr
    assert not out.exists()


# --- GitHub preflight -----------------------------------------------------------------------


def test_over_25000_results_keeps_the_most_severe_and_says_so(tmp_path: Path) -> None:
    levels = ["note"] * 20_000 + ["error"] * 3_000 + ["warning"] * 4_000
    run = {"tool": {"driver": {"name": "big"}}, "results": [_result(f"R{i % 50}", f"f{i % 300}.py", 1 + i % 999, lvl)
                                                            for i, lvl in enumerate(levels)]}
    path = tmp_path / "big.sarif"
    path.write_text(json.dumps(_log(run)))
    out = tmp_path / "up.sarif"
    done = _audit("merge", str(path), "--github", "-o", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    results = json.loads(out.read_text())["runs"][0]["results"]
    assert len(results) == github.MAX_RESULTS
    kept = [r["level"] for r in results[:-1]]
    assert kept.count("error") == 3_000 and kept.count("warning") == 4_000 and kept.count("note") == 24_999 - 7_000
    notice = results[-1]
    assert notice["ruleId"] == merge.NOTICE_RULE and "2,001 of 27,000 results" in notice["message"]["text"]
    assert "2,001 note" in notice["message"]["text"] and "dropped" in done.stderr
    assert _audit("validate", "--github", str(out), cwd=tmp_path).returncode == 0


def test_over_20_runs_folds_runs_of_one_tool_and_too_many_tools_is_an_error(tmp_path: Path) -> None:
    runs = [{"tool": {"driver": {"name": f"tool{i % 3}"}}, "automationDetails": {"id": f"cat{i}/"},
             "results": [_result("R", "a.py", i + 1)]} for i in range(25)]
    doc, report = merge.merge_docs([_log(*runs)])
    assert len(doc["runs"]) == 25
    merge.github_fit(doc, report)
    assert len(doc["runs"]) == 3 and sarif.count_results(doc) == 25
    assert any("folded" in n for n in report.notices)
    many = [{"tool": {"driver": {"name": f"tool{i}"}}, "results": []} for i in range(21)]
    doc, report = merge.merge_docs([_log(*many)])
    with pytest.raises(merge.MergeFailed, match="upload them in several files"):
        merge.github_fit(doc, report)


def test_thread_flows_over_10000_locations_are_cut_with_a_note() -> None:
    loc = {"location": {"physicalLocation": {"artifactLocation": {"uri": "a.py"}, "region": {"startLine": 1}}}}
    result = {**_result("R", "a.py", 1), "codeFlows": [{"threadFlows": [{"locations": [loc] * 6_000}, {"locations": [loc] * 6_000}]}]}
    doc, report = merge.merge_docs([_log({"tool": {"driver": {"name": "t"}}, "results": [result]})])
    merge.github_fit(doc, report)
    flows = doc["runs"][0]["results"][0]["codeFlows"][0]["threadFlows"]
    assert sum(len(tf["locations"]) for tf in flows) == github.MAX_THREAD_FLOW_LOCATIONS
    assert "cut to the first 10,000 of 12,000" in doc["runs"][0]["results"][0]["message"]["text"]


def test_message_text_is_filled_from_the_rule() -> None:
    rules = [{"id": "R", "messageStrings": {"m": {"text": "bad {0} in {1}"}}}, {"id": "S", "shortDescription": {"text": "short"}}]
    results = [{"ruleId": "R", "ruleIndex": 0, "message": {"id": "m", "arguments": ["x", "y"]}},
               {"ruleId": "S", "ruleIndex": 1, "message": {"id": "zz"}}]
    doc, report = merge.merge_docs([_log({"tool": {"driver": {"name": "t", "rules": rules}}, "results": results})])
    merge.github_fit(doc, report)
    assert [r["message"]["text"] for r in doc["runs"][0]["results"]] == ["bad x in y", "short"]


def test_over_10_mb_gzipped_is_an_error_naming_what_to_split(tmp_path: Path) -> None:
    noise = base64.b64encode(os.urandom(15 << 20)).decode()  # incompressible beyond base64's 3/4
    chunks = [noise[i:i + 100_000] for i in range(0, len(noise), 100_000)]
    run = {"tool": {"driver": {"name": "huge"}}, "results": [_result("R", "a.py", i + 1, text=c) for i, c in enumerate(chunks)]}
    doc, report = merge.merge_docs([_log(run, {"tool": {"driver": {"name": "small"}}, "results": []})])
    with pytest.raises(merge.MergeFailed, match=r"over GitHub's 10 MB per upload: upload the largest runs separately \(huge"):
        merge.finish(doc, report, github_mode=True, semantic_check=False)


# --- diff -----------------------------------------------------------------------------------


def test_diff_marks_new_unchanged_absent_and_fails_on_new(tmp_path: Path) -> None:
    sample = next(p for p in V21 if "csharp" in p.name)
    base = json.loads(sample.read_text(encoding="utf-8-sig"))
    new = copy.deepcopy(base)
    results = new["runs"][0]["results"]
    assert len(results) >= 2
    gone = results.pop(0)
    results.append(_result("NEW-RULE", "src/new.cs", 7))
    (tmp_path / "new.sarif").write_text(json.dumps(new))
    marked = tmp_path / "marked.sarif"
    done = _audit("diff", "--baseline", str(sample), str(tmp_path / "new.sarif"), "-o", str(marked), "--fail-on", "new", "--json", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout) == {"new": 1, "unchanged": len(results) - 1, "absent": 1}
    doc = json.loads(marked.read_text())
    states = [r["baselineState"] for r in doc["runs"][0]["results"]]
    assert states.count("new") == 1 and states.count("absent") == 1
    assert doc["runs"][0]["results"][-1]["ruleId"] == gone["ruleId"]
    assert not [p for p in sarif.problems(doc) if p.severity == "error"]
    same = _audit("diff", "--baseline", str(sample), str(sample), "--fail-on", "new", cwd=tmp_path)
    assert same.returncode == 0 and "0 new" in same.stderr
    summary = diff.diff_docs(base, base)[1]
    assert summary.as_dict() == {"new": 0, "unchanged": sarif.count_results(base), "absent": 0}


def test_identified_results_walks_every_result_and_skips_what_is_not_a_table() -> None:
    tool = {"driver": {"name": "t"}}
    doc = {"runs": [{"tool": tool, "results": [_result("R1", "a.py", 1), "junk", _result("R1", "a.py", 1)]},
                    "junk", {"tool": {"driver": {"name": "u"}}, "results": [_result("R2", "b.py", 2)]}, {"tool": tool}]}
    seen = list(diff.identified_results(doc))
    assert [(run["tool"]["driver"]["name"], result["ruleId"]) for _, run, result in seen] == [
        ("t", "R1"), ("t", "R1"), ("u", "R2")]
    assert seen[0][0] == seen[1][0] != seen[2][0]  # the same finding twice has one identity
    assert seen[0][0] == diff.identity("t", doc["runs"][0]["results"][0], [])
