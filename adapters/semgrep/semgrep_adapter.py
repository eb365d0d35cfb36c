"""Semgrep JSON (`semgrep --json`) -> SARIF 2.1.0.

Severity ERROR/WARNING/INFO -> error/warning/note; rule metadata (CWE,
OWASP, confidence, references) -> rule properties and tags; Semgrep OSS
writes `"fingerprint": "requires login"` for every result, so fingerprints
are used only when they are real; `errors` become tool execution
notifications.
"""

from __future__ import annotations

from typing import Any

from sandboy_guest import (AdapterError, GuestInput, RuleTable, help_uri, object_report, physical_location, region,
                           sarif_log)

LEVELS = {"ERROR": "error", "WARNING": "warning", "INFO": "note", "INVENTORY": "note", "EXPERIMENT": "note"}
NOTE_LEVELS = {"error": "error", "warn": "warning", "warning": "warning", "info": "note"}
PRECISION = {"HIGH": "high", "MEDIUM": "medium", "LOW": "low"}
MAX_TAGS = 20  # GitHub rejects rules with more tags
NOT_A_FINGERPRINT = "requires login"


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _rule(item: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    meta = extra.get("metadata") if isinstance(extra.get("metadata"), dict) else {}
    rule: dict[str, Any] = {"name": str(item["check_id"]).rsplit(".", 1)[-1]}
    if isinstance(extra.get("message"), str):
        rule["shortDescription"] = {"text": rule["name"]}
        rule["fullDescription"] = {"text": extra["message"]}
    tags = _strings(meta.get("category")) + [
        "external/cwe/cwe-" + c.split(":")[0].split("-")[-1] for c in _strings(meta.get("cwe")) if c.upper().startswith("CWE-")
    ] + _strings(meta.get("owasp")) + _strings(meta.get("technology"))
    props: dict[str, Any] = {"tags": list(dict.fromkeys(tags))[:MAX_TAGS]}
    confidence = str(meta.get("confidence", "")).upper()
    if confidence in PRECISION:
        props["precision"] = PRECISION[confidence]
    refs = _strings(meta.get("references"))
    if refs:
        props["references"] = refs
    rule["properties"] = props
    source = meta.get("source") or meta.get("shortlink")
    if isinstance(source, str):
        help_uri(rule, source, "source")
    return rule


def _result(item: dict[str, Any], rules: RuleTable, where: str) -> dict[str, Any]:
    check_id, path = item.get("check_id"), item.get("path")
    if not isinstance(check_id, str) or not isinstance(path, str):
        raise AdapterError(f"{where}: missing check_id or path (is this `semgrep --json` output?)")
    extra = item.get("extra") if isinstance(item.get("extra"), dict) else {}
    start = item.get("start") if isinstance(item.get("start"), dict) else {}
    end = item.get("end") if isinstance(item.get("end"), dict) else {}
    result: dict[str, Any] = {
        "ruleId": check_id,
        "ruleIndex": rules.index(check_id, lambda: _rule(item, extra)),
        "level": LEVELS.get(str(extra.get("severity", "")).upper(), "warning"),
        "message": {"text": str(extra.get("message") or check_id)},
        "locations": [physical_location(path, region(start.get("line"), start.get("col"), end.get("line"), end.get("col")))],
    }
    fingerprint = extra.get("fingerprint")
    if isinstance(fingerprint, str) and fingerprint and fingerprint != NOT_A_FINGERPRINT:
        result["partialFingerprints"] = {"semgrepFingerprint/v1": fingerprint}
    return result


def _notification(err: dict[str, Any]) -> dict[str, Any]:
    note: dict[str, Any] = {
        "level": NOTE_LEVELS.get(str(err.get("level", "")).lower(), "warning"),
        "message": {"text": f"{err.get('type', 'error')}: {err.get('message', '')}".strip()},
    }
    if isinstance(err.get("path"), str):
        note["locations"] = [physical_location(err["path"])]
    return note


def convert(inp: GuestInput) -> dict[str, Any]:
    report, results, rules, invocation = object_report(inp, "semgrep --json", _result, _notification)
    driver: dict[str, Any] = {"name": "Semgrep", "informationUri": "https://semgrep.dev/", "rules": rules.rules}
    if isinstance(report.get("version"), str):
        driver["semanticVersion"] = report["version"]
    return sarif_log(driver, results, invocations=[invocation])
