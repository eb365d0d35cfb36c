"""SARIF 1.0.0 -> 2.1.0: one table row per class of loss seen on real v1 logs (issue 10).

Every v1 log here was written for this test (none is copied). Each row is converted
natively (the adapter is plain Python) and the named 2.1.0 field is asserted; every
output must also pass the schema and Sandboy's error-level checks. The last tests run
the same logs through the real WebAssembly component and through a BOM.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from sandboy.audit import sarif

ADAPTERS = Path(__file__).resolve().parents[2] / "adapters"


@pytest.fixture(scope="module")
def upgrade():
    sys.path[:0] = [str(ADAPTERS / "common"), str(ADAPTERS / "passthrough")]
    try:
        from passthrough_adapter import convert
        from sandboy_guest import GuestInput
    finally:
        del sys.path[:2]

    def run(log: dict[str, Any]) -> dict[str, Any]:
        out = convert(GuestInput(tool="passthrough", artifacts={"v1.sarif": json.dumps(log)}))
        errors = [p for p in sarif.problems(out) if p.severity == "error"]
        assert errors == [], errors
        return out

    return run


def v1(run: dict[str, Any]) -> dict[str, Any]:
    base = {"tool": {"name": "Checker"}, "results": []}
    return {"$schema": "http://json.schemastore.org/sarif-1.0.0", "version": "1.0.0", "runs": [{**base, **run}]}


def at(doc: dict[str, Any], path: str) -> Any:
    node: Any = doc
    for part in path.split("."):
        node = node[int(part)] if part.isdigit() else node[part]
    return node


RULES = {
    "CHK001": {"id": "CHK001", "name": "UninitialisedRead",
               "messageFormats": {"default": "Variable \"{0}\" was used before {1} assigned it ({{sic}})."}},
    "CHK002/duplicate": {"id": "CHK002", "configuration": "disabled", "defaultLevel": "error",
                         "shortDescription": "Second rule sharing an id"},
}
RESULT_FILE = {"resultFile": {"uri": "file:///C:/work/src/a.c", "region": {"startLine": 4, "startColumn": 2}}}

# (class, v1 run, 2.1.0 path, expected value)
TABLE = [
    # 1. formatted messages: the rule's template rendered into text; id + arguments kept
    ("formatted-message", {"rules": RULES, "results": [
        {"ruleId": "CHK001", "formattedRuleMessage": {"formatId": "default", "arguments": ["count", "nobody"]}}]},
     "runs.0.results.0.message",
     {"text": "Variable \"count\" was used before nobody assigned it ({sic}).", "id": "default", "arguments": ["count", "nobody"]}),
    ("formatted-message-template-kept", {"rules": RULES, "results": []},
     "runs.0.tool.driver.rules.0.messageStrings.default.text", "Variable \"{0}\" was used before {1} assigned it ({{sic}})."),
    # 2. ruleKey-only results resolve through the rules dictionary
    ("ruleKey", {"rules": RULES, "results": [{"ruleKey": "CHK002/duplicate", "message": "m"}]},
     "runs.0.results.0", {"ruleId": "CHK002", "ruleIndex": 1}),
    ("ruleKey-with-ruleId", {"rules": RULES, "results": [{"ruleId": "CHK002", "ruleKey": "CHK002/duplicate", "message": "m"}]},
     "runs.0.results.0.ruleIndex", 1),
    ("ruleId-of-a-rule-keyed-otherwise", {"rules": {"k1": {"id": "ONLY"}, "k2": {"id": "TWICE"}, "k3": {"id": "TWICE"}},
                                          "results": [{"ruleId": "ONLY", "message": "m"}, {"ruleId": "TWICE", "message": "m"}]},
     "runs.0.results", [{"ruleId": "ONLY", "ruleIndex": 0}, {"ruleId": "TWICE"}]),
    # 3. tool: name stays name, fullName stays fullName, version goes to version
    ("tool", {"tool": {"name": "PREchecker", "fullName": "PREchecker Code Analysis 9.1", "version": "9.1.0-beta",
                       "semanticVersion": "9.1.0", "fileVersion": "9.1.0.7", "language": "en-US"}},
     "runs.0.tool.driver", {"name": "PREchecker", "fullName": "PREchecker Code Analysis 9.1", "version": "9.1.0-beta",
                            "semanticVersion": "9.1.0", "dottedQuadFileVersion": "9.1.0.7", "language": "en-US"}),
    # 4. codeFlows -> threadFlows (per thread, execution order, nesting from call/callReturn)
    ("codeFlows", {"results": [{"ruleId": "X", "message": "m", "codeFlows": [{"message": "path", "locations": [
        {"physicalLocation": {"uri": "file:///C:/work/src/a.c", "region": {"startLine": 1}}, "message": "enter", "kind": "call",
         "threadId": 7, "importance": "essential", "state": {"n": "0"}},
        {"physicalLocation": {"uri": "file:///C:/work/src/b.c", "region": {"startLine": 9}}, "kind": "callReturn", "threadId": 7},
        {"physicalLocation": {"uri": "file:///C:/work/src/a.c", "region": {"startLine": 2}}, "threadId": 7,
         "snippet": "x = y;", "essential": True}]}]}]},
     "runs.0.results.0.codeFlows.0", {"message": {"text": "path"}, "threadFlows": [{"id": "7", "locations": [
         {"location": {"physicalLocation": {"artifactLocation": {"uri": "file:///C:/work/src/a.c"}, "region": {"startLine": 1}},
                       "message": {"text": "enter"}},
          "executionOrder": 1, "nestingLevel": 0, "state": {"n": {"text": "0"}}, "importance": "essential", "kinds": ["call"]},
         {"location": {"physicalLocation": {"artifactLocation": {"uri": "file:///C:/work/src/b.c"}, "region": {"startLine": 9}}},
          "executionOrder": 2, "nestingLevel": 1, "kinds": ["return"]},
         {"location": {"physicalLocation": {"artifactLocation": {"uri": "file:///C:/work/src/a.c"},
                                            "region": {"startLine": 2, "snippet": {"text": "x = y;"}}}},
          "executionOrder": 3, "nestingLevel": 0, "importance": "essential"}]}]}),
    # 4. fixes -> artifactChanges/replacements (byte offsets; inserted bytes stay base64)
    ("fixes", {"results": [{"ruleId": "X", "message": "m", "fixes": [{"description": "quote it", "fileChanges": [
        {"uri": "file:///C:/work/src/a.c", "replacements": [{"offset": 10, "deletedLength": 3, "insertedBytes": "Jyc="},
                                                           {"offset": 20}]}]}]}]},
     "runs.0.results.0.fixes", [{"description": {"text": "quote it"}, "artifactChanges": [
         {"artifactLocation": {"uri": "file:///C:/work/src/a.c"}, "replacements": [
             {"deletedRegion": {"byteOffset": 10, "byteLength": 3}, "insertedContent": {"binary": "Jyc="}},
             {"deletedRegion": {"byteOffset": 20, "byteLength": 0}}]}]}]),
    # 4. relatedLocations (annotated code locations -> locations, with id and message)
    ("relatedLocations", {"results": [{"ruleId": "X", "message": "m", "relatedLocations": [
        {"id": 3, "physicalLocation": {"uri": "src/b.c", "uriBaseId": "SRCROOT", "region": {"startLine": 5}}, "message": "declared here",
         "annotations": [{"message": "and used here", "locations": [{"uri": "src/b.c", "region": {"startLine": 8}}]}]}]}]},
     "runs.0.results.0.relatedLocations.0", {"id": 3, "physicalLocation": {"artifactLocation": {"uri": "src/b.c", "uriBaseId": "SRCROOT"},
                                                                            "region": {"startLine": 5}},
                                             "message": {"text": "declared here"},
                                             "annotations": [{"startLine": 8, "message": {"text": "and used here"}}]}),
    # 4. stacks
    ("stacks", {"results": [{"ruleId": "X", "message": "m", "stacks": [{"message": "at crash", "frames": [
        {"uri": "file:///C:/work/src/a.c", "line": 12, "column": 3, "module": "a.dll", "threadId": 2,
         "fullyQualifiedLogicalName": "ns::f", "parameters": ["int"]}]}]}]},
     "runs.0.results.0.stacks.0", {"message": {"text": "at crash"}, "frames": [{"location": {
         "physicalLocation": {"artifactLocation": {"uri": "file:///C:/work/src/a.c"}, "region": {"startLine": 12, "startColumn": 3}},
         "logicalLocations": [{"fullyQualifiedName": "ns::f"}]}, "module": "a.dll", "threadId": 2, "parameters": ["int"]}]}),
    # 4. result snippet -> the first location's region.snippet
    ("snippet", {"results": [{"ruleId": "X", "message": "m", "snippet": "int x;", "locations": [RESULT_FILE]}]},
     "runs.0.results.0.locations.0.physicalLocation.region.snippet", {"text": "int x;"}),
    # 5. run-level: files -> artifacts (hashes, text contents decoded)
    ("files", {"files": {"file:///C:/work/src/a.c": {"mimeType": "text/x-c", "length": 6, "contents": "aW50IHg7",
                                                      "hashes": [{"algorithm": "sha256", "value": "ab12"}]}}},
     "runs.0.artifacts.0", {"location": {"uri": "file:///C:/work/src/a.c"}, "length": 6, "mimeType": "text/x-c",
                            "contents": {"text": "int x;"}, "hashes": {"sha-256": "ab12"}}),
    ("logicalLocations", {"logicalLocations": {"ns": {"name": "ns", "kind": "namespace"},
                                               "ns::f": {"name": "f", "kind": "function", "parentKey": "ns"}},
                          "results": [{"ruleId": "X", "message": "m", "locations": [
                              {**RESULT_FILE, "fullyQualifiedLogicalName": "ns::f"}]}]},
     "runs.0", {"logicalLocations": [{"name": "ns", "kind": "namespace"},
                                     {"name": "f", "fullyQualifiedName": "ns::f", "kind": "function", "parentIndex": 0}]}),
    ("logicalLocations-parents-first", {"logicalLocations": {"ns::C::m": {"name": "m", "parentKey": "ns::C"},
                                                             "ns::C": {"name": "C", "parentKey": "ns"}, "ns": {"name": "ns"}}},
     "runs.0.logicalLocations", [{"name": "ns"}, {"name": "C", "fullyQualifiedName": "ns::C", "parentIndex": 0},
                                 {"name": "m", "fullyQualifiedName": "ns::C::m", "parentIndex": 1}]),
    ("logicalLocation-disambiguated-key", {"logicalLocations": {"ns::f-1": {"name": "f"}}, "toolNotifications": [
        {"message": "m", "exception": {"stack": {"frames": [{"fullyQualifiedLogicalName": "ns::f", "logicalLocationKey": "ns::f-1"}]}}}]},
     "runs.0", {"logicalLocations": [{"name": "f", "fullyQualifiedName": "ns::f"}],
                "invocations": [{"toolExecutionNotifications": [{"exception": {"stack": {"frames": [
                    {"location": {"logicalLocations": [{"fullyQualifiedName": "ns::f", "index": 0}]}}]}}}]}]}),
    ("logicalLocation-reference", {"logicalLocations": {"ns::f": {"name": "f"}},
                                   "results": [{"ruleId": "X", "message": "m", "locations": [{**RESULT_FILE, "fullyQualifiedLogicalName": "ns::f"}]}]},
     "runs.0.results.0.locations.0.logicalLocations", [{"fullyQualifiedName": "ns::f", "index": 0}]),
    ("invocation", {"invocation": {"commandLine": "chk /all C:\\work", "startTime": "2024-05-01T10:00:00Z", "machine": "BUILD7",
                                   "processId": 42, "fileName": "C:\\tools\\chk.exe", "workingDirectory": "C:\\work",
                                   "environmentVariables": {"LANG": "C"}}},
     "runs.0.invocations.0", {"executionSuccessful": True, "commandLine": "chk /all C:\\work", "startTimeUtc": "2024-05-01T10:00:00Z",
                              "machine": "BUILD7", "processId": 42, "executableLocation": {"uri": "file:///C:/tools/chk.exe"},
                              "workingDirectory": {"uri": "file:///C:/work"}, "environmentVariables": {"LANG": "C"}}),
    ("notifications", {"rules": RULES, "toolNotifications": [{"id": "TN1", "message": "could not parse", "level": "error",
                                                              "ruleKey": "CHK002/duplicate",
                                                              "physicalLocation": {"uri": "file:///C:/work/src/a.c"},
                                                              "exception": {"kind": "IOError", "message": "gone"}}],
                       "configurationNotifications": [{"message": "rule CHK001 disabled", "level": "note"}]},
     "runs.0.invocations.0", {"executionSuccessful": True,
                              "toolExecutionNotifications": [{"message": {"text": "could not parse"}, "level": "error",
                                                              "descriptor": {"id": "TN1"}, "associatedRule": {"id": "CHK002", "index": 1},
                                                              "locations": [{"physicalLocation": {"artifactLocation": {"uri": "file:///C:/work/src/a.c"}}}],
                                                              "exception": {"kind": "IOError", "message": "gone"}}],
                              "toolConfigurationNotifications": [{"message": {"text": "rule CHK001 disabled"}, "level": "note"}]}),
    ("automationDetails", {"id": "1f2e3d4c-5b6a-4789-8abc-def012345678", "stableId": "nightly-x64",
                           "automationId": "pipeline-17", "baselineId": "0a1b2c3d-4e5f-4a7b-9c8d-0e1f2a3b4c5d"},
     "runs.0", {"automationDetails": {"guid": "1f2e3d4c-5b6a-4789-8abc-def012345678", "id": "nightly-x64/"},
                "runAggregates": [{"id": "pipeline-17/"}], "baselineGuid": "0a1b2c3d-4e5f-4a7b-9c8d-0e1f2a3b4c5d"}),
    ("automationDetails-non-guid-id", {"id": "run-88", "stableId": "nightly"},
     "runs.0.automationDetails", {"id": "nightly/run-88"}),
    ("architecture", {"architecture": "x86_64"}, "runs.0.properties.sarifV1.architecture", "x86_64"),
    ("tool-properties", {"tool": {"name": "Checker", "properties": {"tags": ["beta"], "build": "7"}}},
     "runs.0.tool.driver.properties", {"tags": ["beta"], "build": "7"}),
    # 6. uri + uriBaseId stay separate; `#BASE#rel` files keys are split, never folded into one URI
    ("uriBaseId", {"results": [{"ruleId": "X", "message": "m", "locations": [
        {"resultFile": {"uri": "src/a.c", "uriBaseId": "SRCROOT", "region": {"startLine": 1}}}]}]},
     "runs.0.results.0.locations.0.physicalLocation.artifactLocation", {"uri": "src/a.c", "uriBaseId": "SRCROOT"}),
    ("uriBaseId-files-key", {"files": {"#SRCROOT#src/a.c": {"uriBaseId": "SRCROOT"}},
                             "results": [{"ruleId": "X", "message": "m", "locations": [
                                 {"resultFile": {"uri": "#SRCROOT#src/a.c", "uriBaseId": "SRCROOT", "region": {"startLine": 1}}}]}]},
     "runs.0.results.0.locations.0.physicalLocation.artifactLocation", {"uri": "src/a.c", "uriBaseId": "SRCROOT", "index": 0}),
    ("uri-windows-path", {"results": [{"ruleId": "X", "message": "m", "locations": [
        {"resultFile": {"uri": "C:\\My Work\\a.c", "region": {"startLine": 1}}}]}]},
     "runs.0.results.0.locations.0.physicalLocation.artifactLocation.uri", "file:///C:/My%20Work/a.c"),
    # 7. v1 offset/length count bytes
    ("repeats-stay-schema-valid", {"logicalLocations": {"f": {"name": "f"}, "f-1": {"name": "f"}},
                                   "results": [{"ruleId": "X", "message": "m",
                                                "locations": [{"resultFile": {"uri": "a.c"}, "fullyQualifiedLogicalName": "f",
                                                               "logicalLocationKey": "f-1"}],
                                                "relatedLocations": [{"message": "same"}, {"message": "same"}]}]},
     "runs.0", {"logicalLocations": [{"name": "f"}, {"name": "f", "properties": {"sarifV1": {"key": "f-1"}}}],
                "results": [{"relatedLocations": [{"message": {"text": "same"}}]}]}),
    ("offsets", {"results": [{"ruleId": "X", "message": "m", "locations": [
        {"resultFile": {"uri": "file:///C:/work/a.c", "region": {"startLine": 2, "offset": 120, "length": 7}}}]}]},
     "runs.0.results.0.locations.0.physicalLocation.region", {"startLine": 2, "byteOffset": 120, "byteLength": 7}),
    ("offsets-only", {"results": [{"ruleId": "X", "message": "m", "locations": [
        {"resultFile": {"uri": "file:///C:/work/a.bin", "region": {"offset": 0, "length": 16}}}]}]},
     "runs.0.results.0.locations.0.physicalLocation.region", {"byteOffset": 0, "byteLength": 16}),
    ("offsets-length-only", {"results": [{"ruleId": "X", "message": "m", "locations": [
        {"resultFile": {"uri": "file:///C:/work/a.c", "region": {"startLine": 1, "length": 5}}}]}]},
     "runs.0.results.0.locations.0.physicalLocation.region", {"startLine": 1, "byteOffset": 0, "byteLength": 5}),
    # 8. disabled rules stay disabled
    ("disabled-rule", {"rules": RULES}, "runs.0.tool.driver.rules.1.defaultConfiguration", {"level": "error", "enabled": False}),
    ("enabled-rule", {"rules": {"R": {"id": "R", "configuration": "enabled"}}},
     "runs.0.tool.driver.rules.0.defaultConfiguration", {"enabled": True}),
    # 9. analysisTarget kept beside resultFile; decoratedName and location properties kept; nested files
    ("analysisTarget", {"results": [{"ruleId": "X", "message": "m", "locations": [
        {"analysisTarget": {"uri": "file:///C:/work/a.c"}, "resultFile": {"uri": "file:///C:/work/a.h", "region": {"startLine": 3}}}]}]},
     "runs.0.results.0", {"analysisTarget": {"uri": "file:///C:/work/a.c"},
                          "locations": [{"physicalLocation": {"artifactLocation": {"uri": "file:///C:/work/a.h"}, "region": {"startLine": 3}}}]}),
    ("decoratedName", {"results": [{"ruleId": "X", "message": "m", "locations": [
        {**RESULT_FILE, "fullyQualifiedLogicalName": "ns::f", "decoratedName": "?f@ns@@YAXXZ", "properties": {"origin": "pdb"}}]}]},
     "runs.0.results.0.locations.0", {"physicalLocation": {"artifactLocation": {"uri": "file:///C:/work/src/a.c"},
                                                           "region": {"startLine": 4, "startColumn": 2}},
                                      "logicalLocations": [{"fullyQualifiedName": "ns::f", "decoratedName": "?f@ns@@YAXXZ"}],
                                      "properties": {"origin": "pdb"}}),
    ("nested-files", {"files": {"file://c:/pkg.zip#/lib/x.dll": {"parentKey": "file://c:/pkg.zip", "uri": "/lib/x.dll"},
                                "file://c:/pkg.zip": {"mimeType": "application/zip"}}},
     "runs.0.artifacts", [{"location": {"uri": "/lib/x.dll"}, "parentIndex": 1},
                          {"location": {"uri": "file:///c:/pkg.zip"}, "mimeType": "application/zip"}]),
    ("nested-uri-without-files", {"results": [{"ruleId": "X", "message": "m", "locations": [
        {"analysisTarget": {"uri": "file:///C:/drop/app.zip#/bin/tool.dll"}}]}]},
     "runs.0", {"artifacts": [{"location": {"uri": "file:///C:/drop/app.zip"}},
                              {"location": {"uri": "/bin/tool.dll"}, "parentIndex": 0}]}),
    ("nested-uri-reference", {"results": [{"ruleId": "X", "message": "m", "locations": [
        {"analysisTarget": {"uri": "file:///C:/drop/app.zip#/bin/tool.dll"}}]}]},
     "runs.0.results.0.locations.0.physicalLocation.artifactLocation", {"uri": "/bin/tool.dll", "index": 1}),
]


def subset(actual: Any, expected: Any) -> bool:
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(k in actual and subset(actual[k], v) for k, v in expected.items())
    if isinstance(expected, list):
        return isinstance(actual, list) and len(actual) == len(expected) and all(map(subset, actual, expected))
    return actual == expected


@pytest.mark.parametrize("name, run, path, expected", TABLE, ids=[row[0] for row in TABLE])
def test_v1_field_reaches_its_2_1_home(upgrade, name, run, path, expected):
    out = upgrade(v1(run))
    got = at(out, path)
    if path in ("runs.0", "runs.0.results", "runs.0.results.0"):  # whole run / result(s): only the named fields
        assert subset(got, expected), json.dumps(got, indent=1)
    else:
        assert got == expected, json.dumps(got, indent=1)


def test_nothing_is_parked_that_has_a_home(upgrade):
    """The classes of issue 4 come out converted, not in properties.sarifV1."""
    run = copy.deepcopy(TABLE[[r[0] for r in TABLE].index("codeFlows")][1])
    run["results"][0].update(copy.deepcopy(TABLE[[r[0] for r in TABLE].index("fixes")][1])["results"][0])
    out = upgrade(v1(run))
    assert "properties" not in out["runs"][0]["results"][0]


def test_v1_fields_without_a_home_are_kept_not_dropped(upgrade):
    out = upgrade(v1({"baselineId": "not-a-guid", "tool": {"name": "C", "fileVersion": "9.1-rc"},
                      "results": [{"ruleId": "X", "message": "m", "id": "r-1", "futureField": 1}]}))
    run = out["runs"][0]
    assert run["properties"]["sarifV1"] == {"baselineId": "not-a-guid"}
    assert run["tool"]["driver"]["properties"]["sarifV1"] == {"fileVersion": "9.1-rc"}
    assert run["results"][0]["properties"]["sarifV1"] == {"id": "r-1", "futureField": 1}


def test_a_run_carrying_its_original_2_1_run_is_restored(upgrade):
    """The SDK's 2.1 -> 1.0 converter stashes the 2.1 run in the v1 property bag; like the SDK, we restore it."""
    original = {"tool": {"driver": {"name": "Orig", "rules": [{"id": "R"}]}}, "results": [
        {"ruleId": "R", "ruleIndex": 0, "message": {"text": "kept as written"}}]}
    out = upgrade(v1({"properties": {"sarifv2/run": original}, "results": [{"ruleId": "R", "message": "lossy"}]}))
    assert out["runs"][0] == original


def test_formatted_message_without_a_template_keeps_id_and_arguments(upgrade):
    out = upgrade(v1({"results": [{"ruleId": "NOFMT", "formattedRuleMessage": {"formatId": "f", "arguments": ["a", "b"]}}]}))
    assert out["runs"][0]["results"][0]["message"] == {"text": "f: a, b", "id": "f", "arguments": ["a", "b"]}


def test_plain_message_wins_over_the_template_but_id_is_kept(upgrade):
    out = upgrade(v1({"rules": RULES, "results": [{"ruleId": "CHK001", "message": "as the tool said",
                                                   "formattedRuleMessage": {"formatId": "default", "arguments": ["x"]}}]}))
    assert out["runs"][0]["results"][0]["message"] == {"text": "as the tool said", "id": "default", "arguments": ["x"]}


def test_every_uri_out_is_an_rfc3986_reference(upgrade):
    odd = ["C:\\a b\\c.c", "file://c:/x.c", "#SRCROOT#d/e.c", "weird:#x#y", "100%.c", "a:b/c.c", "\\\\server\\share\\f.c"]
    out = upgrade(v1({"results": [{"ruleId": "X", "message": "m", "locations": [{"resultFile": {"uri": u}}]} for u in odd]}))
    uris = [r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in out["runs"][0]["results"]]
    assert uris == ["file:///C:/a%20b/c.c", "file:///c:/x.c", "d/e.c", "weird:#x%23y", "100%25.c", "a:b/c.c", "file://server/share/f.c"]
    assert all(sarif.is_uri_reference(u) for u in uris)


def test_ruleKey_result_passes_github(upgrade):
    from sandboy.audit.github import github_problems

    out = upgrade(v1({"rules": RULES, "results": [{"ruleKey": "CHK002/duplicate", "message": "m", "locations": [RESULT_FILE]}]}))
    assert [p for p in github_problems(out, json.dumps(out).encode()) if p.severity == "error"] == []


# --- through the real component ------------------------------------------------------------


def everything_log() -> dict[str, Any]:
    """One run carrying every row of the table (results concatenated, run fields merged)."""
    merged: dict[str, Any] = {"tool": {"name": "Checker"}, "results": []}
    for _, run, _, _ in TABLE:
        run = copy.deepcopy(run)
        merged["results"] += run.pop("results", [])
        for key, value in run.items():
            if isinstance(value, dict) and isinstance(merged.get(key), dict):
                merged[key] = {**merged[key], **value}
            else:
                merged[key] = value
    return v1(merged)


def test_component_matches_native_upgrade(built, upgrade, tmp_path):
    from sandboy.audit.convert import ConvertRequest, convert

    log = everything_log()
    native = upgrade(log)
    path = tmp_path / "all.v1.sarif"
    path.write_text(json.dumps(log), "utf-8")
    result = convert(ConvertRequest(tool="passthrough", artifacts=[(path.name, path)]), progress=lambda m: None)
    doc = json.loads(result.text)
    for run in doc["runs"]:
        run.pop("conversion")
        run["properties"].pop("sandboy")
    assert doc["runs"][0]["results"] == native["runs"][0]["results"]
    assert doc["runs"][0]["artifacts"] == native["runs"][0]["artifacts"]
    assert sarif.count_results(doc) == len(log["runs"][0]["results"])


def test_v1_log_with_a_bom_converts(built, tmp_path):
    from sandboy.audit.convert import ConvertRequest, convert

    path = tmp_path / "bom.v1.sarif"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(v1({"rules": RULES, "results": [
        {"ruleKey": "CHK002/duplicate", "message": "m", "locations": [RESULT_FILE]}]})).encode())
    result = convert(ConvertRequest(tool="passthrough", artifacts=[(path.name, path)]), progress=lambda m: None)
    res = result.doc["runs"][0]["results"][0]
    assert (res["ruleId"], res["ruleIndex"]) == ("CHK002", 1)


def repository_sarif_samples() -> list[Path]:
    samples = Path(__file__).resolve().parents[1] / "data" / "samples"  # the repository's (see conftest)
    return sorted(p for p in samples.rglob("*.sarif") if "negative" not in p.parts)


def _regions(node: Any) -> list[dict[str, Any]]:
    found, stack = [], [node]
    while stack:
        cur = stack.pop()
        if isinstance(cur, dict):
            found += [v for k, v in cur.items() if k == "region" and isinstance(v, dict)]
            stack.extend(cur.values())
        elif isinstance(cur, list):
            stack.extend(cur)
    return found


def assert_nothing_lost(v1_run: dict[str, Any], run: dict[str, Any]) -> None:
    """Counts of every class of issue 10 survive the upgrade of a real v1 run."""
    rules = run["tool"]["driver"].get("rules", [])
    keys = list(v1_run.get("rules", {}))
    assert len(rules) == len(keys)
    assert run["tool"]["driver"]["name"] == v1_run["tool"]["name"]
    for v1_res, res in zip(v1_run["results"], run["results"]):
        key = v1_res.get("ruleKey", v1_res.get("ruleId"))
        if key in keys:
            assert res["ruleIndex"] == keys.index(key) and rules[res["ruleIndex"]]["id"] == res["ruleId"]
        fmt = v1_res.get("formattedRuleMessage")
        if fmt and "message" not in v1_res:
            assert (res["message"]["id"], res["message"].get("arguments", [])) == (fmt["formatId"], fmt.get("arguments", []))
            template = v1_run.get("rules", {}).get(key, {}).get("messageFormats", {}).get(fmt["formatId"])
            if template:
                assert not any(f"{{{i}}}" in res["message"]["text"] for i in range(len(fmt.get("arguments", []))))
        for field in ("codeFlows", "fixes", "stacks", "relatedLocations"):
            assert len(res.get(field, [])) == len(v1_res.get(field, [])), field
        steps = sum(len(f.get("locations", [])) for f in v1_res.get("codeFlows", []))
        assert steps == sum(len(t["locations"]) for f in res.get("codeFlows", []) for t in f["threadFlows"])
    invocation = (run.get("invocations") or [{}])[0]
    assert len(invocation.get("toolExecutionNotifications", [])) == len(v1_run.get("toolNotifications", []))
    assert len(invocation.get("toolConfigurationNotifications", [])) == len(v1_run.get("configurationNotifications", []))
    assert len(run.get("artifacts", [])) >= len(v1_run.get("files", {}))
    assert len(run.get("logicalLocations", [])) == len(v1_run.get("logicalLocations", {}))
    with_offsets = [r for r in _regions(v1_run.get("results")) if "offset" in r or "length" in r]
    assert len([r for r in _regions(run["results"]) if "byteOffset" in r]) >= len(with_offsets)
    assert not [r for r in _regions(run["results"]) if "charOffset" in r or "charLength" in r]


@pytest.mark.parametrize("path", repository_sarif_samples(), ids=lambda p: p.name)
def test_every_sample_round_trips(built, path):
    """Every SARIF sample in the repository (v1 upgraded, 2.1 passed through) comes out schema-valid
    with the same number of results; v1 samples keep every class of data issue 10 lists."""
    from sandboy.audit.convert import ConvertRequest, convert

    raw = sarif.parse_json(path.read_text("utf-8"))
    result = convert(ConvertRequest(tool="passthrough", artifacts=[(path.name, path)]), progress=lambda m: None)
    assert [p for p in sarif.problems(result.doc) if p.severity == "error"] == []
    assert sarif.count_results(result.doc) == sarif.count_results(raw) > 0
    if raw["version"] == "1.0.0":
        for v1_run, run in zip(raw["runs"], result.doc["runs"], strict=True):
            assert_nothing_lost(v1_run, run)


def test_the_repository_has_real_v1_logs_of_several_producers():
    v1 = [p for p in repository_sarif_samples() if sarif.parse_json(p.read_text("utf-8"))["version"] == "1.0.0"]
    assert len(v1) >= 9 and any(p.read_bytes().startswith(b"\xef\xbb\xbf") for p in v1)  # one has a BOM (BinSkim)


def test_guest_and_host_agree_on_uri_references(upgrade):
    """The guest (sarif_v1.py) and the host (sandboy.audit.sarif) each carry the RFC 3986 grammar."""
    sys.path.insert(0, str(ADAPTERS / "passthrough"))
    try:
        import sarif_v1
    finally:
        sys.path.remove(str(ADAPTERS / "passthrough"))
    table = ["src/a.py", "file:///C:/a%20b/c.cs", "http://[::1]:8080/x?y#z", "", "../a/b.c", "a:b/c", "#frag",
             "//host/share/f", "urn:x:y", "#SRCROOT#file.txt", "a b.c", "C:\\a\\b.c", "100%.c", "x#a#b", "1a:b",
             "a[1].c", "http://exa mple/", "%zz", "file://c:/a.zip#/f.txt", "mailto:a@b.c", "?q=1", "a/b:c"]
    assert [sarif_v1.is_uri_reference(u) for u in table] == [sarif.is_uri_reference(u) for u in table]
    for u in table:
        assert sarif.is_uri_reference(sarif_v1.uri_reference(u)), u


def test_hostile_shapes_convert_or_are_refused_never_crash(upgrade):
    """Real v1 logs with random fields replaced by values of the wrong type (seeded, 400 mutants):
    each either upgrades to a log with no schema or error-level problems, or is refused as AdapterError."""
    import random

    sys.path.insert(0, str(ADAPTERS / "common"))
    try:
        from passthrough_adapter import convert
        from sandboy_guest import AdapterError, GuestInput
    finally:
        sys.path.remove(str(ADAPTERS / "common"))
    rng = random.Random(10)
    logs = [sarif.parse_json(p.read_text("utf-8")) for p in repository_sarif_samples() if "sarif-v1" in p.parts]
    values = [None, True, 0, -1, 1 << 70, 1.5, "", "x", "#A#b", "C:\\a b", "{0}{1}", [], {}, [1, "a"], {"a": 1}]

    def spots(node, acc):
        for key in (list(node) if isinstance(node, dict) else range(len(node)) if isinstance(node, list) else []):
            acc.append((node, key))
            spots(node[key], acc)
        return acc

    refused = 0
    for _ in range(400):
        log = copy.deepcopy(rng.choice(logs))
        places = spots(log["runs"], [])
        for _ in range(rng.randint(1, 6)):
            holder, key = rng.choice(places)
            if isinstance(holder, list) and rng.random() < 0.3:
                holder.append(copy.deepcopy(holder[key]))  # a repeat: 2.1.0 arrays are often uniqueItems
            else:
                holder[key] = copy.deepcopy(rng.choice(values))
        try:
            out = convert(GuestInput(tool="passthrough", artifacts={"m.sarif": json.dumps(log)}))
        except AdapterError:
            refused += 1
            continue
        assert [p for p in sarif.problems(out) if p.severity == "error"] == []
    assert refused < 100  # most damage is survivable: the rest of the log still converts
