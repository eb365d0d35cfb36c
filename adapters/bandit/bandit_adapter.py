"""Bandit JSON (`bandit -f json`) -> SARIF 2.1.0.

Severity LOW/MEDIUM/HIGH -> note/warning/error; confidence kept as a
property (and as `precision` on the rule); 0-based col_offset -> 1-based
startColumn; line_range -> endLine; the CWE becomes a `external/cwe/cwe-N`
tag (GitHub's convention); Bandit's `errors` become tool execution
notifications instead of vanishing.
"""

from __future__ import annotations

from typing import Any

from sandboy_guest import (AdapterError, GuestInput, RuleTable, help_uri, object_report, physical_location, region,
                           sarif_log)

LEVELS = {"LOW": "note", "MEDIUM": "warning", "HIGH": "error", "UNDEFINED": "note"}
PRECISION = {"LOW": "low", "MEDIUM": "medium", "HIGH": "high"}


def _rule(item: dict[str, Any]) -> dict[str, Any]:
    rule: dict[str, Any] = {}
    if isinstance(item.get("test_name"), str):
        rule["name"] = item["test_name"]
        rule["shortDescription"] = {"text": item["test_name"].replace("_", " ")}
    tags = ["security"]
    cwe = item.get("issue_cwe")
    if isinstance(cwe, dict) and isinstance(cwe.get("id"), int):
        tags.append(f"external/cwe/cwe-{cwe['id']}")
    rule["properties"] = {"tags": tags}
    if isinstance(item.get("more_info"), str):
        help_uri(rule, item["more_info"], "moreInfo")
    return rule


def _result(item: dict[str, Any], rules: RuleTable, where: str) -> dict[str, Any]:
    test_id, path = item.get("test_id"), item.get("filename")
    if not isinstance(test_id, str) or not isinstance(path, str):
        raise AdapterError(f"{where}: missing test_id or filename (is this `bandit -f json` output?)")
    lines = [n for n in item.get("line_range") or [] if isinstance(n, int)]
    col, end_col = item.get("col_offset"), item.get("end_col_offset")
    # Start where the flagged node starts: for a call spread over lines, Bandit's `line_number`
    # is the line of the offending argument (`shell=True`) while `col_offset` is the column of
    # the call on its first line; pairing them would point into the wrong line.
    start = min(lines) if lines else item.get("line_number")
    reg = region(
        start,
        col + 1 if isinstance(col, int) else None,
        max(lines) if lines else None,
        end_col + 1 if isinstance(end_col, int) and (not lines or max(lines) == start) else None,
    )
    if isinstance(item.get("code"), str):
        reg["snippet"] = {"text": item["code"]}  # type: ignore[assignment]
    severity = str(item.get("issue_severity", "")).upper()
    confidence = str(item.get("issue_confidence", "")).upper()
    return {
        "ruleId": test_id,
        "ruleIndex": rules.index(test_id, lambda: _rule(item)),
        "level": LEVELS.get(severity, "warning"),
        "message": {"text": str(item.get("issue_text") or test_id)},
        "locations": [physical_location(path, reg)],
        "properties": {"issue_severity": severity, "issue_confidence": confidence,
                       "precision": PRECISION.get(confidence, "unknown")},
    }


def _notification(err: dict[str, Any]) -> dict[str, Any]:
    return {"level": "error", "message": {"text": f"{err.get('filename', '?')}: {err.get('reason', 'error')}"}}


def convert(inp: GuestInput) -> dict[str, Any]:
    _, results, rules, invocation = object_report(inp, "bandit -f json", _result, _notification)
    driver = {"name": "Bandit", "informationUri": "https://bandit.readthedocs.io/", "rules": rules.rules}
    return sarif_log(driver, results, invocations=[invocation])
