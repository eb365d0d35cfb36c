"""Every real sample converts through the real wasm adapters and validates with zero errors."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from sandboy.audit import sarif
from sandboy.audit.convert import ConvertRequest, convert
from sandboy.audit.errors import AdapterFailed, InvalidOutput


def run(tool: str, path: Path, **kw: Any) -> dict[str, Any]:
    result = convert(ConvertRequest(tool=tool, artifacts=[(path.name, path)], **kw), progress=lambda m: None)
    assert sarif.problems(json.loads(result.text)) == [], "our own output must validate"
    return result.doc


def regions(doc: dict[str, Any]):
    for key, value, _ in sarif._walk(doc, ()):
        if key == "region":
            yield value


@pytest.mark.parametrize(
    "name, results, levels",
    [
        ("zrlog_infer-0.17.0_report.json", 5, None),
        ("chronicle-map_infer-1.1.0_report.json", 13, {"warning": 13}),
        ("glowstone_infer-0.17.0_report.LARGE.json", 332, {"error": 112, "warning": 220}),
    ],
)
def test_infer_samples(built, samples, name, results, levels):
    path = samples / "infer" / name
    report = json.loads(path.read_text())
    doc = run("infer", path)
    run0 = doc["runs"][0]
    assert doc["version"] == "2.1.0" and doc["$schema"] == sarif.SARIF_SCHEMA_URI
    assert len(run0["results"]) == results
    if levels:
        assert Counter(r["level"] for r in run0["results"]) == levels
    # rules deduplicated, one per bug_type, every ruleIndex pointing at its rule
    rule_ids = [r["id"] for r in run0["tool"]["driver"]["rules"]]
    assert sorted(rule_ids) == sorted({b["bug_type"] for b in report})
    for res in run0["results"]:
        assert rule_ids[res["ruleIndex"]] == res["ruleId"]
    # fingerprints come from `hash`, in order; never from `key`
    assert [r["partialFingerprints"]["inferHash/v1"] for r in run0["results"]] == [b["hash"] for b in report]
    # -1 columns and 0/-1 lines are clamped or dropped: no region below 1
    for reg in regions(doc):
        assert all(reg.get(k, 1) >= 1 for k in ("startLine", "startColumn", "endLine", "endColumn"))
    # bug_trace -> codeFlows, one thread-flow location per trace step (all within GitHub's 10,000)
    for res, bug in zip(run0["results"], report):
        steps = res["codeFlows"][0]["threadFlows"][0]["locations"]
        assert len(steps) == len(bug["bug_trace"])
    # relative paths under a declared uriBaseId
    loc = run0["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert loc["uriBaseId"] == "%SRCROOT%" and not loc["uri"].startswith("/")
    assert "%SRCROOT%" in run0["originalUriBaseIds"]


def test_glowstone_clamps_bad_trace_lines(built, samples):
    path = samples / "infer" / "glowstone_infer-0.17.0_report.LARGE.json"
    report = json.loads(path.read_text())
    bad = sum(1 for b in report for s in b["bug_trace"] if s["line_number"] <= 0)
    assert bad == 14  # the sample's documented defect: these must come out as line 1
    doc = run("infer", path)
    longest = max(len(r["codeFlows"][0]["threadFlows"][0]["locations"]) for r in doc["runs"][0]["results"])
    assert longest == 244


def test_provenance_is_stamped(built, samples):
    path = samples / "infer" / "zrlog_infer-0.17.0_report.json"
    doc = run("infer", path)
    props = doc["runs"][0]["properties"]["sandboy"]
    assert props["adapter"] == "infer" and props["adapterVersion"] == "1.0.0"
    assert props["componentSha256"] == hashlib.sha256(built["infer"].read_bytes()).hexdigest()
    assert props["wasmtimeVersion"] == "50.0.1"
    assert props["fuelUsed"] > 0 and props["durationMs"] > 0
    assert props["inputs"][0]["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    conv = doc["runs"][0]["conversion"]
    assert conv["tool"]["driver"]["name"] == "sandboy audit"
    assert conv["analysisToolLogFiles"][0]["uri"].endswith("zrlog_infer-0.17.0_report.json")


@pytest.mark.parametrize(
    "rel, results, rules",
    [
        ("roslyn/squigglecop_Log.v1.sarif", 8, None),
        ("roslyn/sarif-sdk_RoslynLog.v1.sarif", 694, 47),
        ("roslyn/squigglecop_Log.old.v2.LARGE.sarif", 16, 1334),
        ("codeql/gh-gei_codeql-2.24.1_csharp.sarif", 35, 165),
        ("codeql/vulnerable-node_codeql-2.12.6_js_codeflows.sarif", 28, None),
        ("codeql/codeql-action_testdata_valid-sarif.sarif", 3, None),
        ("codeql/codeql-action_testdata_fingerprinting.input.sarif", 2, None),
        ("codeql/codeql-action_testdata_fingerprinting.expected.sarif", 2, None),
    ],
)
def test_passthrough_samples(built, samples, rel, results, rules):
    doc = run("passthrough", samples / rel)
    run0 = doc["runs"][0]
    assert doc["version"] == "2.1.0"
    assert sarif.count_results(doc) == results
    if rules is not None:
        assert len(run0["tool"]["driver"]["rules"]) == rules


def test_roslyn_v1_upgrade_details(built, samples):
    doc = run("passthrough", samples / "roslyn" / "sarif-sdk_RoslynLog.v1.sarif")
    run0 = doc["runs"][0]
    driver = run0["tool"]["driver"]
    assert driver["name"] == "Microsoft (R) Visual C# Compiler" and driver["semanticVersion"] == "1.3.0"
    assert driver["dottedQuadFileVersion"] == "1.3.0.0"
    ids = [r["id"] for r in driver["rules"]]
    for res in run0["results"]:
        assert isinstance(res["message"]["text"], str)
        assert "physicalLocation" in res["locations"][0]
        if "ruleIndex" in res:
            assert ids[res["ruleIndex"]] == res["ruleId"]
    assert sum(1 for r in run0["results"] if r.get("suppressions") == [{"kind": "inSource"}]) == 8


def test_passthrough_rebases_absolute_uris(built, samples):
    doc = run("passthrough", samples / "roslyn" / "squigglecop_Log.v1.sarif",
              options=[("srcroot", "file:///C:/Projects/SquiggleCop/")])
    loc = doc["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert loc == {"uri": "src/Common/DiagnosticConfig.cs", "uriBaseId": "%SRCROOT%"}


def test_codeflows_survive_passthrough(built, samples):
    doc = run("passthrough", samples / "codeql" / "vulnerable-node_codeql-2.12.6_js_codeflows.sarif")
    assert sum(1 for r in doc["runs"][0]["results"] if r.get("codeFlows")) == 22


def test_bandit_sample(built, samples):
    doc = run("bandit", samples / "bandit" / "spotifyscraper_bandit-1.8.3.json")
    res = doc["runs"][0]["results"]
    assert [r["ruleId"] for r in res] == ["B105", "B105"]
    assert {r["level"] for r in res} == {"note"}  # issue_severity LOW
    assert res[0]["locations"][0]["physicalLocation"]["region"]["startColumn"] == 13  # col_offset 12, 0-based
    rules = doc["runs"][0]["tool"]["driver"]["rules"]
    assert len(rules) == 1 and "external/cwe/cwe-259" in rules[0]["properties"]["tags"]


def test_semgrep_sample(built, samples):
    doc = run("semgrep", samples / "semgrep" / "keda_semgrep-1.122.0.json")
    run0 = doc["runs"][0]
    assert Counter(r["level"] for r in run0["results"]) == {"warning": 33, "error": 6}
    assert len(run0["invocations"][0]["toolExecutionNotifications"]) == 5
    # "requires login" is not a fingerprint
    assert not any("partialFingerprints" in r for r in run0["results"])
    assert all(len(r["properties"]["tags"]) <= 20 for r in run0["tool"]["driver"]["rules"])


def test_invalid_sarif_sample_is_rejected(built, samples):
    with pytest.raises(InvalidOutput) as err:
        run("passthrough", samples / "negative" / "codeql-action_testdata_invalid-sarif.sarif")
    assert "/runs/0/results" in str(err.value) and err.value.exit_code == 15


def test_invalid_uri_sample_is_rejected(built, samples):
    with pytest.raises(InvalidOutput) as err:
        run("passthrough", samples / "negative" / "codeql-action_testdata_with-invalid-uri.sarif")
    assert "helpUri" in str(err.value) and '"uri"' in str(err.value)


def test_comments_are_refused_clearly(built, samples):
    with pytest.raises(AdapterFailed) as err:
        run("passthrough", samples / "negative" / "squigglecop_Log.v2.with-comment.NOT-STRICT-JSON.sarif")
    assert "comments are not JSON" in str(err.value) and "line 28415" in str(err.value)


@pytest.mark.parametrize(
    "rel",
    [
        "codeql/gh-gei_codeql-2.24.1_csharp.sarif",
        "codeql/vulnerable-node_codeql-2.12.6_js_codeflows.sarif",
        "codeql/codeql-action_testdata_valid-sarif.sarif",
        "roslyn/squigglecop_Log.old.v2.LARGE.sarif",
    ],
)
def test_raw_samples_have_no_schema_errors(samples, rel):
    doc = sarif.parse_json((samples / rel).read_text("utf-8"))
    assert sarif.schema_problems(doc) == []
    assert [p for p in sarif.semantic_problems(doc) if p.severity == "error"] == []


def test_raw_v1_logs_fail_the_schema(samples):
    doc = sarif.parse_json((samples / "roslyn" / "squigglecop_Log.v1.sarif").read_text("utf-8"))
    found = sarif.schema_problems(doc)
    assert any(p.pointer == "/version" for p in found)


def test_samples_are_unchanged(samples):
    """The samples are real tool output copied byte for byte; SHA256SUMS pins every one of them."""
    listed = {}
    for line in (samples / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        listed[name.removeprefix("./")] = digest
    present = {str(p.relative_to(samples)) for p in samples.rglob("*") if p.is_file()} - {"README.md", "SHA256SUMS"}
    assert present == set(listed), "every sample is listed in SHA256SUMS with its source in README.md"
    for name, digest in listed.items():
        assert hashlib.sha256((samples / name).read_bytes()).hexdigest() == digest, name
    readme = (samples / "README.md").read_text()
    for name in listed:
        assert Path(name).name in readme, f"{name} has no source/licence line in README.md"
