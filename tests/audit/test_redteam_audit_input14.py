"""Session 14 red team of `sandboy audit` from the side of hostile input and output (redinput14).

Five things got through:

* An adapter answering more than wasmtime lets one call hand the host (128 MiB of a string:
  "fuel allocated for hostcalls has been exhausted") ended as "the adapter crashed" (exit 14),
  even with `--max-output-bytes` raised past it — now OutputTooLarge naming the cap.
* SARIF `parentIndex` (run.artifacts, run.logicalLocations) naming the item itself, or a chain of
  parents coming back round: the schema checks neither, `validate --strict` said "valid", and the
  SARIF 1.0 upgrade (`convert --tool passthrough`) WROTE such a cycle for a v1 log whose
  `parentKey`s went round — a consumer that walks up the parents to build a nested name never
  ends. Now the upgrade drops the parent of a key on a cycle (kept as properties.sarifV1.parentKey)
  and validation reports the cycle (a warning; an error under --strict).
* `merge --github` fills message.text from the rules for results without one, and looked each
  result's rule up by scanning the rules list: rules x results, 84 s of CPU for a 4.7 MB log of
  20,000 of each, days for a large one (no deadline in `audit merge`). Now one lookup.
* The Semgrep and Bandit adapters wrote a rule's documentation link as its helpUri, which must be
  an absolute URI: one rule with `source: wiki/rule-7` failed the whole log — every result of the
  tool lost. Now helpUri only when it is one, else a rule property.
* `audit run --github`: one repository tool's result with 1,001 locations (or naming no rule) —
  rules GitHub's fitting cannot mend — failed the merged log: no log, every tool's results lost.
  Now that tool's log is held back (the tool failed, saying why) and the rest is written.

The adapters here are real components: the built-in passthrough adapter, and WebAssembly text
compiled by wasmtime that implements the adapter world by hand (so it can hand back any
pointer and length)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import wasmtime

from sandboy.audit import host
from sandboy.audit.convert import ConvertRequest, convert
from sandboy.audit.errors import GuestCrash, OutputTooLarge

# The adapter world (adapters/wit/adapter.wit) by hand: `to-sarif` answers `result<string, string>`
# from a pointer and length it chooses; `realloc` is a bump allocator for the host's copy of the
# input. The raw-input record flattens to 14 core parameters.
COMPONENT = """
(component
  (core module $m
    (memory (export "mem") {pages})
    (global $bump (mut i32) (i32.const 65536))
    (func (export "realloc") (param i32 i32 i32 i32) (result i32)
      (local $p i32)
      (local.set $p (i32.and (i32.add (global.get $bump) (i32.const 7)) (i32.const -8)))
      (global.set $bump (i32.add (local.get $p) (local.get 3)))
      (local.get $p))
    (func (export "to-sarif") (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)
      {body}
      (i32.store (i32.const 16) (i32.const 0))
      (i32.store (i32.const 20) (i32.const {ptr}))
      (i32.store (i32.const 24) (i32.const {length}))
      (i32.const 16))
    (func (export "post") (param i32))
    {data}
  )
  (core instance $i (instantiate $m))
  (type $enc0 (enum "utf8" "latin1"))
  (export $enc "encoding" (type $enc0))
  (type $text0 (record (field "encoding" $enc) (field "data" string)))
  (export $text "text" (type $text0))
  (type $art0 (record (field "name" string) (field "content" $text)))
  (export $art "artifact" (type $art0))
  (type $in0 (record (field "tool" string) (field "stdout" (option $text)) (field "stderr" (option $text))
                     (field "artifacts" (list $art)) (field "options" (list (tuple string string)))))
  (export $in "raw-input" (type $in0))
  (func $f (param "input" $in) (result (result string (error string)))
    (canon lift (core func $i "to-sarif") (memory (core memory $i "mem")) (realloc (core func $i "realloc"))
                string-encoding=utf8 (post-return (core func $i "post"))))
  (export "to-sarif" (func $f))
)
"""
VALID = b'{"version":"2.1.0","runs":[{"tool":{"driver":{"name":"w"}},"results":[]}]}'


def _component(tmp_path: Path, name: str, *, pages: int = 2, body: str = "", ptr: int = 0, length: int = 0,
               data: str = "") -> Path:
    path = tmp_path / name
    path.write_bytes(wasmtime.wat2wasm(COMPONENT.format(pages=pages, body=body, ptr=ptr, length=length, data=data)))
    return path


def _convert(component: Path, tmp_path: Path, **kw):
    art = tmp_path / "in.json"
    art.write_text("{}")
    host._loaded.clear()
    return convert(ConvertRequest(tool="x", component=component, artifacts=[("in.json", art)], **kw),
                   progress=lambda m: None)


# --- an answer over wasmtime's copy budget ---------------------------------------------------


def test_an_answer_over_wasmtimes_copy_budget_is_output_too_large_not_a_crash(tmp_path):
    # 129 MiB of the guest's (zero) memory as the answer; --max-output-bytes raised to 256 MiB
    big = _component(tmp_path, "big.wasm", body="(drop (memory.grow (i32.const 2200)))", ptr=4 << 16,
                     length=129 << 20)
    with pytest.raises(OutputTooLarge, match=r"over the 128 MiB that wasmtime lets one call hand the host") as err:
        _convert(big, tmp_path, max_output_bytes=256 << 20)
    assert err.value.exit_code == OutputTooLarge.exit_code != GuestCrash.exit_code  # before: 14, "crashed"


def test_twin_a_small_answer_of_the_same_hand_written_component_converts(tmp_path):
    escaped = VALID.decode().replace('"', '\\"')
    ok = _component(tmp_path, "ok.wasm", body=f"(memory.init 0 (i32.const 100) (i32.const 0) (i32.const {len(VALID)}))",
                    ptr=100, length=len(VALID), data=f'(data "{escaped}")')
    done = _convert(ok, tmp_path)
    assert done.results == 0 and done.doc["runs"][0]["tool"]["driver"]["name"] == "w"


# --- parentIndex cycles ----------------------------------------------------------------------


def _audit(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sandboy", "audit", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600)


def _log(artifacts: list, logical: list | None = None) -> str:
    run = {"tool": {"driver": {"name": "t"}}, "artifacts": artifacts, "results": []}
    if logical is not None:
        run["logicalLocations"] = logical
    return json.dumps({"version": "2.1.0", "runs": [run]})


@pytest.mark.parametrize("log, where", [
    (_log([{"location": {"uri": "a.zip"}, "parentIndex": 0}]), "/runs/0/artifacts/0/parentIndex"),
    (_log([{"location": {"uri": "a"}, "parentIndex": 1}, {"location": {"uri": "b"}, "parentIndex": 0},
           {"location": {"uri": "c"}, "parentIndex": 1}]), "/runs/0/artifacts/0/parentIndex"),
    (_log([], [{"name": "A", "parentIndex": 1}, {"name": "B", "parentIndex": 0}]),
     "/runs/0/logicalLocations/0/parentIndex"),
], ids=["own-parent", "two-round", "logical-locations"])
def test_a_parent_chain_that_comes_back_round_is_reported(tmp_path, log, where):
    (tmp_path / "in.sarif").write_text(log)
    done = _audit("validate", "--strict", "in.sarif", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr  # before: "valid SARIF 2.1.0 (strict)"
    assert f"{where}: " in done.stdout and "is its own ancestor" in done.stdout, done.stdout
    plain = _audit("validate", "in.sarif", cwd=tmp_path)  # an inconsistency: a warning without --strict
    assert plain.returncode == 0 and "1 warning(s)" in plain.stdout, plain.stdout


def test_a_parent_index_out_of_range_is_reported(tmp_path):
    (tmp_path / "in.sarif").write_text(_log([{"location": {"uri": "a"}, "parentIndex": 5}]))
    done = _audit("validate", "--strict", "in.sarif", cwd=tmp_path)
    assert done.returncode == 1 and "parentIndex 5 out of range (run.artifacts has 1)" in done.stdout, done.stdout


def test_twin_a_nested_tree_and_a_long_chain_are_valid(tmp_path):
    (tmp_path / "tree.sarif").write_text(_log(
        [{"location": {"uri": "a.zip"}}, {"location": {"uri": "b.zip"}, "parentIndex": 0},
         {"location": {"uri": "c.txt"}, "parentIndex": 1}, {"location": {"uri": "d.txt"}, "parentIndex": 0}],
        [{"name": "N"}, {"name": "m", "parentIndex": 0}]))
    # 50,000 artifacts each the parent of the next: walked once, not once per artifact
    (tmp_path / "chain.sarif").write_text(_log(
        [{"location": {"uri": "a"}}] + [{"location": {"uri": "a"}, "parentIndex": i} for i in range(50_000)]))
    done = _audit("validate", "--strict", "tree.sarif", "chain.sarif", cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.count("0 error(s), 0 warning(s)") == 2, done.stdout


V1_CYCLES = {"version": "1.0.0", "runs": [{
    "tool": {"name": "t"},
    "files": {"self.c": {"parentKey": "self.c"}, "x.zip": {"parentKey": "y.zip"}, "y.zip": {"parentKey": "x.zip"},
              "into.c": {"parentKey": "x.zip"}, "ok.zip": {}, "ok.zip#/inner.c": {"parentKey": "ok.zip"}},
    "logicalLocations": {"A": {"name": "A", "parentKey": "B"}, "B": {"name": "B", "parentKey": "A"},
                         "N": {"name": "N"}, "N.m": {"name": "m", "parentKey": "N"}},
    "results": [{"ruleId": "R", "message": "m", "locations": [
        {"resultFile": {"uri": "ok.zip#/inner.c", "region": {"startLine": 1}}, "fullyQualifiedLogicalName": "N.m"}]}],
}]}


def test_the_sarif_1_upgrade_writes_no_parent_cycle(tmp_path):
    (tmp_path / "v1.json").write_text(json.dumps(V1_CYCLES))
    done = _audit("convert", "--tool", "passthrough", "--artifact", "log=v1.json", "-o", "out.sarif", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    run = json.loads((tmp_path / "out.sarif").read_text())["runs"][0]
    by_uri = {a["location"]["uri"]: a for a in run["artifacts"]}
    for uri, parent_key in (("self.c", "self.c"), ("x.zip", "y.zip"), ("y.zip", "x.zip")):
        assert "parentIndex" not in by_uri[uri], by_uri  # before: 0 -> 0, 1 -> 2 -> 1
        assert by_uri[uri]["properties"]["sarifV1"]["parentKey"] == parent_key  # nothing lost
    logical = {loc["name"]: loc for loc in run["logicalLocations"]}
    assert "parentIndex" not in logical["A"] and "parentIndex" not in logical["B"], logical
    # twins in the same log: a chain INTO the cycle and a real nesting keep their parents
    assert run["artifacts"][by_uri["into.c"]["parentIndex"]]["location"]["uri"] == "x.zip"
    assert run["artifacts"][by_uri["/inner.c"]["parentIndex"]]["location"]["uri"] == "ok.zip"
    assert run["logicalLocations"][logical["m"]["parentIndex"]]["name"] == "N"
    strict = _audit("validate", "--strict", "out.sarif", cwd=tmp_path)
    assert strict.returncode == 0, strict.stdout


# --- `merge --github` filling message.text: rules x results -----------------------------------


def test_filling_message_text_does_not_scan_the_rules_for_every_result(tmp_path):
    # 24,999 rules and 24,999 results naming the last rule by id, with a message id and no text
    # (both under GitHub's 25,000): 5 MB. Each result scanned the rules list for its id —
    # 6.2e8 comparisons, ≈ 130 s of CPU here; a 256 MiB log of the same shape, days. A lookup
    # per result now: a few seconds. The timeout is the hang guard.
    n = 24_999
    rules = [{"id": f"R{i}", "messageStrings": {"m": {"text": "found {0}"}}} for i in range(n)]
    results = [{"ruleId": f"R{n - 1}", "message": {"id": "m", "arguments": [str(i)]},
                "locations": [{"physicalLocation": {"artifactLocation": {"uri": "a.py"}, "region": {"startLine": i + 1}}}]}
               for i in range(n)]
    (tmp_path / "in.sarif").write_text(json.dumps(
        {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "t", "rules": rules}}, "results": results}]}))
    done = subprocess.run([sys.executable, "-m", "sandboy", "audit", "merge", "--github", "in.sarif", "-o", "out.sarif"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    out = json.loads((tmp_path / "out.sarif").read_text())["runs"][0]["results"]
    assert [r["message"]["text"] for r in out[:2]] == ["found 0", "found 1"] and len(out) == n


def test_twin_each_result_is_filled_from_the_rule_its_id_names(tmp_path):
    rules = [{"id": "R0", "messageStrings": {"m": {"text": "zero {0}"}}},
             {"id": "R1", "messageStrings": {"m": {"text": "one {0}"}}, "shortDescription": {"text": "R1 short"}}]
    results = [{"ruleId": "R1", "message": {"id": "m", "arguments": ["x"]}},
               {"ruleId": "R0", "message": {"id": "m", "arguments": ["y"]}},
               {"ruleId": "R1", "message": {"id": "other"}},
               {"ruleId": "Z", "message": {"id": "m"}}]
    (tmp_path / "in.sarif").write_text(json.dumps(
        {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "t", "rules": rules}}, "results": results}]}))
    done = _audit("merge", "--github", "in.sarif", "-o", "out.sarif", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = json.loads((tmp_path / "out.sarif").read_text())["runs"][0]["results"]
    assert [r["message"]["text"] for r in out] == ["one x", "zero y", "R1 short", "Z"]


# --- a tool's documentation link that is not a URI ---------------------------------------------

SEMGREP = {"results": [
    {"check_id": f"rules.r{i}", "path": "app.py", "start": {"line": i + 1, "col": 1}, "end": {"line": i + 1, "col": 5},
     "extra": {"message": f"finding {i}", "severity": "ERROR", "metadata": {"source": source}}}
    for i, source in enumerate(["wiki/rule-7", "::error::x", "https://semgrep.dev/r/python.x", "a b"])],
    "errors": []}
BANDIT = {"results": [
    {"test_id": f"B10{i}", "test_name": "t", "filename": "app.py", "line_number": i + 1, "line_range": [i + 1],
     "issue_severity": "HIGH", "issue_confidence": "HIGH", "issue_text": f"finding {i}", "more_info": more}
    for i, more in enumerate(["see the plugin's README", "https://bandit.readthedocs.io/en/latest/plugins/b101.html"])],
    "errors": []}


@pytest.mark.parametrize("tool, report, kept_as, links", [
    ("semgrep", SEMGREP, "source", ["wiki/rule-7", "::error::x", None, "a b"]),
    ("bandit", BANDIT, "moreInfo", ["see the plugin's README", None]),
])
def test_a_rule_link_that_is_not_a_uri_loses_no_result(tmp_path, tool, report, kept_as, links):
    # One Semgrep rule whose `source` is a wiki page name (or a Bandit plugin's `more_info` a
    # sentence) became the rule's helpUri, which must be an absolute URI: the whole log failed
    # validation (exit 15) and every result of the run was lost. Now kept as a rule property.
    (tmp_path / "report.json").write_text(json.dumps(report))
    done = _audit("convert", "--tool", tool, "--artifact", "report.json=report.json", "-o", "out.sarif", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    run = json.loads((tmp_path / "out.sarif").read_text())["runs"][0]
    assert len(run["results"]) == len(links)
    rules = run["tool"]["driver"]["rules"]
    assert [rule.get("properties", {}).get(kept_as) for rule in rules] == links
    # the twin in the same log: a real link stays the rule's helpUri
    assert [rule.get("helpUri") for rule in rules] == [
        None if link else report["results"][i]["extra"]["metadata"]["source"] if tool == "semgrep"
        else report["results"][i]["more_info"] for i, link in enumerate(links)]


# --- `audit run --github`: one tool's log GitHub rejects whatever the fitting does ---------------

_LOCATION = {"physicalLocation": {"artifactLocation": {"uri": "a.py"}, "region": {"startLine": 1}}}


def _run_repo(tmp_path: Path, result: dict) -> Path:
    """A repository whose own tool `t` (passthrough, `.007/adapters.toml`) prints one result."""
    repo = tmp_path / "repo"
    (repo / ".007").mkdir(parents=True)
    (repo / "a.py").write_text("import os\nimport os\n")  # ruff: F401 + F811
    (repo / "out.json").write_text(json.dumps({"version": "2.1.0", "runs": [
        {"tool": {"driver": {"name": "t", "rules": [{"id": "r", "shortDescription": {"text": "rule r"}}]}},
         "results": [result]}]}))
    (repo / ".007" / "adapters.toml").write_text(
        'version = 1\n[tools.t]\nadapter = "passthrough"\noutput = { kind = "sarif", from = "stdout" }\n'
        '[[tools.t.phases]]\ninclude = ["system"]\nargv = ["cat", "{repo}/out.json"]\n')
    return repo


@pytest.mark.parametrize("result, why", [
    ({"ruleId": "r", "message": {"text": "m"}, "locations": [_LOCATION] * 1001}, "1,001 locations"),
    ({"message": {"text": "m"}, "locations": [_LOCATION]}, "no ruleId"),
], ids=["1001-locations", "no-rule"])
def test_one_tools_log_github_rejects_does_not_lose_every_tools_results(tmp_path, result, why):
    repo = _run_repo(tmp_path, result)
    done = _audit("run", str(repo), "--tools=t,ruff", "--github", "-o", str(tmp_path / "out.sarif"), "--json",
                  cwd=tmp_path)
    assert done.returncode == 1, done.stderr  # a tool failed: the run says so
    tools = {t["tool"]: t for t in json.loads(done.stdout)["tools"]}
    assert tools["t"]["status"] == "failed" and why in tools["t"]["reason"], tools["t"]
    assert tools["ruff"]["status"] == "ran" and tools["ruff"]["results"] >= 1
    # before: "GitHub would reject the merged log", no log written, ruff's findings lost with it
    runs = json.loads((tmp_path / "out.sarif").read_text())["runs"]
    assert [len(run["results"]) for run in runs if run["tool"]["driver"]["name"] == "ruff"] == [tools["ruff"]["results"]]
    assert not [run for run in runs if run["tool"]["driver"]["name"] == "t"]


def test_twin_what_the_fitting_mends_is_merged(tmp_path):
    # no message.text (filled from the rule) and two such results: GitHub's preflight mends these
    repo = _run_repo(tmp_path, {"ruleId": "r", "message": {"id": "x"}, "locations": [_LOCATION]})
    done = _audit("run", str(repo), "--tools=t,ruff", "--github", "-o", str(tmp_path / "out.sarif"), "--json",
                  cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    runs = {run["tool"]["driver"]["name"]: run for run in json.loads((tmp_path / "out.sarif").read_text())["runs"]}
    assert [r["message"]["text"] for r in runs["t"]["results"]] == ["rule r"] and runs["ruff"]["results"]
