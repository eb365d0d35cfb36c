"""The SARIF core and GitHub rules on crafted documents (no wasm needed)."""

from __future__ import annotations

import copy

import pytest

from sandboy.audit import github, sarif
from sandboy.audit.errors import InvalidOutput, OutputTooLarge

BASE = {
    "version": "2.1.0",
    "runs": [{
        "tool": {"driver": {"name": "t", "rules": [{"id": "R1"}]}},
        "results": [{
            "ruleId": "R1", "ruleIndex": 0, "level": "warning", "message": {"text": "m"},
            "locations": [{"physicalLocation": {"artifactLocation": {"uri": "a.py", "uriBaseId": "%SRCROOT%"},
                                                "region": {"startLine": 3, "startColumn": 2}}}],
        }],
    }],
}


def doc(**changes):
    d = copy.deepcopy(BASE)
    for path, value in changes.items():
        node = d
        keys = path.split("__")
        for k in keys[:-1]:
            node = node[int(k)] if k.isdigit() else node[k]
        node[keys[-1]] = value
    return d


def pointers(found):
    return {p.pointer for p in found if p.severity == "error"}


def test_base_document_is_clean():
    assert sarif.problems(BASE) == []


def warnings(found):
    return {(p.pointer, p.spec) for p in found if p.severity == "warning"}


def test_rule_index_out_of_range():
    d = doc(runs__0__results__0__ruleIndex=5)
    assert ("/runs/0/results/0/ruleIndex", "3.27.6") in warnings(sarif.problems(d))
    assert "/runs/0/results/0/ruleIndex" in pointers(sarif.problems(d, strict_checks=True))


def test_rule_id_must_match_its_index():
    d = doc(runs__0__results__0__ruleId="OTHER")
    assert ("/runs/0/results/0/ruleId", "3.27.5") in warnings(sarif.semantic_problems(d))
    assert "/runs/0/results/0/ruleId" in pointers(sarif.strict(sarif.semantic_problems(d)))


def test_lines_and_columns_start_at_one():
    d = doc()
    d["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"] = {"startLine": 0, "startColumn": -1}
    found = pointers(sarif.problems(d))
    assert "/runs/0/results/0/locations/0/physicalLocation/region/startLine" in found
    assert "/runs/0/results/0/locations/0/physicalLocation/region/startColumn" in found


def test_region_ends_before_it_starts():
    d = doc()
    d["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"] = {"startLine": 9, "endLine": 3}
    found = sarif.semantic_problems(d)
    assert ("/runs/0/results/0/locations/0/physicalLocation/region/endLine", "3.30.7") in warnings(found)
    assert "/runs/0/results/0/locations/0/physicalLocation/region/endLine" in pointers(sarif.strict(found))


def test_invalid_level_and_uri():
    d = doc(runs__0__results__0__level="info")
    d["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] = "a b\\c%zz"
    found = pointers(sarif.problems(d))
    assert "/runs/0/results/0/level" in found
    assert "/runs/0/results/0/locations/0/physicalLocation/artifactLocation/uri" in found


def test_level_only_for_failures():
    d = doc(runs__0__results__0__kind="pass")
    assert ("/runs/0/results/0/level", "3.27.10") in warnings(sarif.semantic_problems(d))


# --- consistency checks: warnings by default (consumers accept them), errors with --strict ---


def consistency_cases():
    end_column = doc()
    end_column["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"] = {"startLine": 3, "startColumn": 9, "endColumn": 2}
    absolute = doc()
    absolute["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] = "file:///src/a.py"
    return [
        (end_column, "/runs/0/results/0/locations/0/physicalLocation/region/endColumn", "3.30.8"),
        (doc(runs__0__results__0__ruleId="R2"), "/runs/0/results/0/ruleId", "3.27.5"),
        (doc(runs__0__results__0__ruleIndex=1), "/runs/0/results/0/ruleIndex", "3.27.6"),
        (absolute, "/runs/0/results/0/locations/0/physicalLocation/artifactLocation/uri", "3.4.4"),
    ]


@pytest.mark.parametrize("d, where, spec", consistency_cases(), ids=["endColumn", "ruleId", "ruleIndex", "absolute+base"])
def test_inconsistencies_warn_by_default_and_fail_strict(d, where, spec):
    found = sarif.problems(d)
    assert [p for p in found if p.severity == "error"] == []
    problem = next(p for p in found if p.pointer == where)
    assert (problem.severity, problem.source, problem.spec) == ("warning", "semantic", spec)
    assert f"§{spec}" in str(problem) and where in str(problem)
    assert where in pointers(sarif.problems(d, strict_checks=True))


@pytest.mark.parametrize("uri, ok", [
    ("src/a.py", True), ("file:///C:/a%20b/c.cs", True), ("http://[::1]:8080/x?y#z", True), ("", True),
    ("../a/b.c", True), ("a:b/c", True), ("#frag", True), ("//host/share/f", True), ("urn:x:y", True),
    ("#SRCROOT#file.txt", False), ("a b.c", False), ("C:\\a\\b.c", False), ("100%.c", False), ("x#a#b", False),
    ("1a:b", False), ("a[1].c", False), ("http://exa mple/", False), ("%zz", False),
])
def test_uri_references_follow_rfc3986(uri, ok):
    assert sarif.is_uri_reference(uri) is ok
    d = doc()
    d["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] = uri
    bad = "/runs/0/results/0/locations/0/physicalLocation/artifactLocation/uri" in pointers(sarif.problems(d))
    assert bad is not ok


def test_the_schema_alone_does_not_check_uri_references():
    """Why the RFC 3986 check exists: the vendored schema is draft-04, which has no `uri-reference`
    format, so jsonschema-rs passes "#SRCROOT#file.txt" (it does check `format: uri`, e.g. helpUri)."""
    d = doc()
    d["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] = "#SRCROOT#file.txt"
    assert sarif.schema_problems(d) == []
    [problem] = [p for p in sarif.problems(d) if p.severity == "error"]
    assert problem.spec == "3.4.3" and "RFC 3986" in problem.message
    d = doc()
    d["runs"][0]["tool"]["driver"]["rules"][0]["helpUri"] = "not a uri"
    assert [p.pointer for p in sarif.schema_problems(d)] == ["/runs/0/tool/driver/rules/0/helpUri"]


def test_canonicalize_version_and_schema():
    d = sarif.canonicalize({"version": "2.1.0-rtm.5", "runs": [], "$schema": "http://example.com/x"})
    assert list(d)[:2] == ["$schema", "version"]
    assert d["version"] == "2.1.0" and d["$schema"] == sarif.SARIF_SCHEMA_URI


@pytest.mark.parametrize("text, fragment", [
    ('{"a": NaN}', "NaN"),
    ('{"a": 1 // note\n}', "comment"),
    ("[" * 100_000, "nested too deeply"),
    ('{"a": ', "line 1"),
])
def test_parse_refuses_non_strict_json(text, fragment):
    with pytest.raises(sarif.JsonProblem, match=fragment):
        sarif.parse_json(text)


def test_parse_accepts_a_bom():
    assert sarif.parse_json('\ufeff{"a": 1}') == {"a": 1}


def prov():
    return sarif.Provenance("a", "1", "f" * 64, "50.0.1", 1, 1.0)


def test_finalize_stamps_and_validates():
    text, d, warnings = sarif.finalize(sarif.dumps(BASE), prov(), 1 << 20, 10)
    assert warnings == []
    assert d["runs"][0]["properties"]["sandboy"]["componentSha256"] == "f" * 64
    assert text.endswith("\n") and sarif.parse_json(text) == d


def test_finalize_caps():
    with pytest.raises(OutputTooLarge):
        sarif.finalize(sarif.dumps(BASE), prov(), 100, 10)
    with pytest.raises(OutputTooLarge):
        sarif.finalize(sarif.dumps(BASE), prov(), 1 << 20, 0)
    with pytest.raises(InvalidOutput):
        sarif.finalize("[]", prov(), 1 << 20, 10)


# --- GitHub code scanning ---------------------------------------------------------------


def gh(d):
    return pointers(github.github_problems(d, sarif.dumps(d).encode()))


def test_github_accepts_the_base_document():
    assert gh(BASE) == set()


def test_github_limits():
    d = doc()
    res = d["runs"][0]["results"][0]
    res["locations"] = res["locations"] * 1001
    res["codeFlows"] = [{"threadFlows": [{"locations": [{"location": {}}] * 10_001}]}]
    d["runs"][0]["tool"]["driver"]["rules"][0]["properties"] = {"tags": [str(i) for i in range(21)]}
    found = gh(d)
    assert "/runs/0/results/0/locations" in found
    assert "/runs/0/results/0/codeFlows" in found
    assert "/runs/0/tool/driver/rules/0/properties/tags" in found


def test_github_runs_and_duplicates():
    d = doc()
    d["runs"] = d["runs"] * 21
    found = gh(d)
    assert "/runs" in found and "/runs/1" in found  # 21 runs; run 1 repeats tool + category of run 0
    d["runs"] = [copy.deepcopy(BASE["runs"][0]) for _ in range(2)]
    d["runs"][1]["automationDetails"] = {"id": "other/1"}
    assert gh(d) == set()


def test_github_needs_version_message_and_rule():
    d = doc(version="2.1.1")
    d["runs"][0]["results"][0] = {"message": {"id": "m"}}
    found = gh(d)
    assert {"/version", "/runs/0/results/0/message", "/runs/0/results/0"} <= found


def test_github_gzip_limit():
    assert github.gzip_size(b"a" * 1_000_000) < 10_000
    assert github.gzip_size(bytes(range(256)) * 1000) < 300_000
