"""Infer / Infer# `report.json` -> SARIF 2.1.0.

Infer's own SARIF writer emits invalid levels (`info`, `advice`) and 0/-1
lines and columns, and its `key` field repeats (139 of 332 in a real report),
so this adapter reads the JSON report and builds SARIF itself:

* severity INFO/ADVICE/LIKE -> note, WARNING -> warning, ERROR -> error;
* lines/columns clamped to >= 1 (a -1 column is dropped: "unknown");
* one rule per bug_type, deduplicated, each result carrying ruleIndex;
* `bug_trace` -> one codeFlow, capped at GitHub's 10,000 thread-flow locations;
* `hash` -> partialFingerprints (never `key`);
* relative paths as URIs under the declared uriBaseId %SRCROOT%.
"""

from __future__ import annotations

from typing import Any

from sandboy_guest import (
    AdapterError,
    GuestInput,
    RuleTable,
    as_int,
    expect,
    load_json,
    physical_location,
    region,
    sarif_log,
)

MAX_THREAD_FLOW_LOCATIONS = 10_000  # GitHub code scanning's cap per result

LEVELS = {"ERROR": "error", "WARNING": "warning", "INFO": "note", "ADVICE": "note", "LIKE": "note"}


def _level(severity: Any) -> str:
    return LEVELS.get(str(severity).upper(), "warning")


def _location(path: str, line: Any, column: Any) -> dict[str, Any]:
    return physical_location(path, region(line, column if as_int(column, 0) else None))


def _code_flow(trace: list[Any], where: str) -> dict[str, Any] | None:
    steps = []
    for n, step in enumerate(trace[:MAX_THREAD_FLOW_LOCATIONS]):
        step = expect(step, dict, f"{where}.bug_trace[{n}]")
        path = step.get("filename")
        if not isinstance(path, str) or not path:
            continue
        loc = _location(path, step.get("line_number"), step.get("column_number"))
        loc["message"] = {"text": str(step.get("description") or "step")}
        steps.append({"location": loc, "nestingLevel": max(0, as_int(step.get("level"), 0))})
    if not steps:
        return None
    flow: dict[str, Any] = {"threadFlows": [{"locations": steps}]}
    if len(trace) > MAX_THREAD_FLOW_LOCATIONS:
        flow["properties"] = {"truncatedFrom": len(trace)}
    return flow


def _rule(bug: dict[str, Any]) -> dict[str, Any]:
    title = str(bug.get("bug_type_hum") or bug["bug_type"])
    return {"name": title, "shortDescription": {"text": title}}


def _result(bug: dict[str, Any], rules: RuleTable, where: str) -> dict[str, Any]:
    bug_type = bug.get("bug_type")
    path = bug.get("file")
    if not isinstance(bug_type, str) or not bug_type:
        raise_missing(where, "bug_type")
    if not isinstance(path, str) or not path:
        raise_missing(where, "file")
    result: dict[str, Any] = {
        "ruleId": bug_type,
        "ruleIndex": rules.index(bug_type, lambda: _rule(bug)),
        "level": _level(bug.get("severity")),
        "message": {"text": str(bug.get("qualifier") or bug_type)},
        "locations": [_location(path, bug.get("line"), bug.get("column"))],
    }
    if isinstance(bug.get("hash"), str) and bug["hash"]:
        result["partialFingerprints"] = {"inferHash/v1": bug["hash"]}
    trace = bug.get("bug_trace")
    if isinstance(trace, list) and trace:
        flow = _code_flow(trace, where)
        if flow:
            result["codeFlows"] = [flow]
    props = {k: bug[k] for k in ("procedure", "severity", "key", "node_key") if isinstance(bug.get(k), str)}
    if props:
        result["properties"] = props
    return result


def raise_missing(where: str, key: str) -> None:
    raise AdapterError(f"{where}: missing or empty {key!r} (is this an Infer report.json?)")


def convert(inp: GuestInput) -> dict[str, Any]:
    name, text = inp.primary()
    report = load_json(name, text)
    if isinstance(report, dict) and isinstance(report.get("runs"), list):
        raise AdapterError(f"{name}: this is already SARIF; use --tool passthrough")
    bugs = expect(report, list, f"{name}: top level (Infer report.json is a JSON array)")
    rules = RuleTable()
    results = [_result(expect(bug, dict, f"{name}[{i}]"), rules, f"{name}[{i}]") for i, bug in enumerate(bugs)]
    driver = {
        "name": "Infer#" if inp.tool in ("infersharp", "infer#") else "Infer",
        "informationUri": "https://fbinfer.com/",
        "rules": rules.rules,
    }
    return sarif_log(driver, results)
