"""SARIF in, canonical SARIF 2.1.0 out.

* 2.1.x logs are re-emitted (the host then canonicalises, validates and stamps);
* 1.0.0 logs (Roslyn's default `/errorlog`) are upgraded to 2.1.0: tool ->
  tool.driver, the rules dictionary -> an array with ruleIndex, plain-string
  messages -> message.text, resultFile -> physicalLocation.artifactLocation,
  suppressionStates -> suppressions; v1 fields with no 2.1 home are kept in
  the result's properties under "sarifV1" rather than dropped;
* non-strict JSON (comments, NaN) is refused with a message saying so;
* a dangling ruleIndex (past the end of tool.driver.rules, as in codeql-action's
  own fingerprinting test data) is dropped; the ruleId still names the rule;
* `--option srcroot=URI` rebases absolute URIs under that prefix onto %SRCROOT%.
"""

from __future__ import annotations

import re
from typing import Any

from sandboy_guest import (
    SARIF_SCHEMA,
    SARIF_VERSION,
    SRCROOT,
    AdapterError,
    GuestInput,
    expect,
    load_json,
)

V1_LEVELS = {"error": ("error", None), "warning": ("warning", None), "note": ("note", None),
             "pass": ("none", "pass"), "notApplicable": ("none", "notApplicable")}
V1_BASELINE = {"new": "new", "existing": "unchanged", "absent": "absent"}
V1_RESULT_KEYS = {"ruleId", "ruleKey", "level", "message", "locations", "suppressionStates", "baselineState",
                  "properties", "formattedRuleMessage", "toolFingerprintContribution"}
_DOTTED_QUAD = re.compile(r"^\d+\.\d+\.\d+\.\d+$")


def _text(value: Any) -> dict[str, str] | None:
    return {"text": value} if isinstance(value, str) else None


def _v1_location(loc: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    place = loc.get("resultFile") or loc.get("analysisTarget")
    if isinstance(place, dict) and isinstance(place.get("uri"), str):
        phys: dict[str, Any] = {"artifactLocation": {"uri": place["uri"]}}
        region = place.get("region")
        if isinstance(region, dict):
            reg = {k: region[k] for k in ("startLine", "startColumn", "endLine", "endColumn") if isinstance(region.get(k), int) and region[k] >= 1}
            if isinstance(region.get("offset"), int):
                reg["charOffset"] = region["offset"]
            if isinstance(region.get("length"), int):
                reg["charLength"] = region["length"]
            if reg:
                phys["region"] = reg
        out["physicalLocation"] = phys
    if isinstance(loc.get("fullyQualifiedLogicalName"), str):
        out["logicalLocations"] = [{"fullyQualifiedName": loc["fullyQualifiedLogicalName"]}]
    return out


def _v1_rule(rule_id: str, rule: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"id": rule_id}
    if isinstance(rule.get("name"), str):
        out["name"] = rule["name"]
    for key in ("shortDescription", "fullDescription"):
        if _text(rule.get(key)):
            out[key] = _text(rule[key])
    if isinstance(rule.get("messageFormats"), dict):
        out["messageStrings"] = {k: {"text": v} for k, v in rule["messageFormats"].items() if isinstance(v, str)}
    if isinstance(rule.get("helpUri"), str):
        out["helpUri"] = rule["helpUri"]
    props = dict(rule["properties"]) if isinstance(rule.get("properties"), dict) else {}
    config: dict[str, Any] = {}
    if rule.get("defaultLevel") in V1_LEVELS:
        config["level"] = V1_LEVELS[rule["defaultLevel"]][0]
    if isinstance(props.get("isEnabledByDefault"), bool):
        config["enabled"] = props.pop("isEnabledByDefault")
    if config:
        out["defaultConfiguration"] = config
    if props:
        out["properties"] = props
    return out


def _v1_result(res: dict[str, Any], index: dict[str, int], where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    rule_id = res.get("ruleId")
    if isinstance(rule_id, str):
        out["ruleId"] = rule_id
        key = res.get("ruleKey") if isinstance(res.get("ruleKey"), str) else rule_id
        if key in index:
            out["ruleIndex"] = index[key]
    level, kind = V1_LEVELS.get(res.get("level", "warning"), ("warning", None))
    out["level"] = level
    if kind:
        out["kind"] = kind
    message = res.get("message")
    if not isinstance(message, str):
        formatted = res.get("formattedRuleMessage")
        args = formatted.get("arguments") if isinstance(formatted, dict) else None
        message = " ".join(str(a) for a in args) if isinstance(args, list) and args else (rule_id or "result")
    out["message"] = {"text": message}
    locations = [_v1_location(loc) for loc in res.get("locations") or [] if isinstance(loc, dict)]
    if locations := [loc for loc in locations if loc]:
        out["locations"] = locations
    states = res.get("suppressionStates")
    if isinstance(states, list):
        out["suppressions"] = [{"kind": "inSource" if s == "suppressedInSource" else "external"} for s in states]
    if res.get("baselineState") in V1_BASELINE:
        out["baselineState"] = V1_BASELINE[res["baselineState"]]
    if isinstance(res.get("toolFingerprintContribution"), str):
        out["partialFingerprints"] = {"toolFingerprintContribution/v1": res["toolFingerprintContribution"]}
    props = dict(res["properties"]) if isinstance(res.get("properties"), dict) else {}
    extra = {k: v for k, v in res.items() if k not in V1_RESULT_KEYS}
    if extra:
        props["sarifV1"] = extra  # kept, not dropped: no 2.1 equivalent this upgrader knows
    if props:
        out["properties"] = props
    return out


def _v1_run(run: dict[str, Any], where: str) -> dict[str, Any]:
    tool = expect(run.get("tool", {}), dict, f"{where}.tool")
    driver: dict[str, Any] = {"name": str(tool.get("fullName") or tool.get("name") or "unknown")}
    for key in ("version", "semanticVersion", "language"):
        if isinstance(tool.get(key), str):
            driver[key] = tool[key]
    file_version = tool.get("fileVersion")
    if isinstance(file_version, str):
        if _DOTTED_QUAD.match(file_version):
            driver["dottedQuadFileVersion"] = file_version
        else:
            driver.setdefault("properties", {})["fileVersion"] = file_version
    rules_in = run.get("rules") if isinstance(run.get("rules"), dict) else {}
    rules = [_v1_rule(str(rule.get("id", key)) if isinstance(rule, dict) else key, rule if isinstance(rule, dict) else {}) for key, rule in rules_in.items()]
    index = {key: i for i, key in enumerate(rules_in)}
    if rules:
        driver["rules"] = rules
    results = [_v1_result(r, index, f"{where}.results[{i}]") for i, r in enumerate(run.get("results") or []) if isinstance(r, dict)]
    out: dict[str, Any] = {"tool": {"driver": driver}, "results": results}
    if isinstance(run.get("properties"), dict):
        out["properties"] = run["properties"]
    return out


def upgrade_v1(log: dict[str, Any], name: str) -> dict[str, Any]:
    runs = expect(log.get("runs"), list, f"{name}: runs")
    return {"$schema": SARIF_SCHEMA, "version": SARIF_VERSION,
            "runs": [_v1_run(expect(r, dict, f"{name}: runs[{i}]"), f"runs[{i}]") for i, r in enumerate(runs)]}


def _rebase(node: Any, prefix: str) -> None:
    """Absolute URIs under `prefix` become relative references under %SRCROOT%."""
    stack = [node]
    while stack:
        cur = stack.pop()
        if isinstance(cur, dict):
            uri = cur.get("uri")
            if isinstance(uri, str) and uri.startswith(prefix) and "uriBaseId" not in cur and len(uri) > len(prefix):
                cur["uri"], cur["uriBaseId"] = uri[len(prefix):], SRCROOT
            stack.extend(v for v in cur.values() if isinstance(v, (dict, list)))
        elif isinstance(cur, list):
            stack.extend(v for v in cur if isinstance(v, (dict, list)))


def _drop_dangling_rule_indexes(run: dict[str, Any]) -> None:
    tool = run.get("tool") if isinstance(run.get("tool"), dict) else {}
    driver = tool.get("driver") if isinstance(tool.get("driver"), dict) else {}
    n_rules = len(driver["rules"]) if isinstance(driver.get("rules"), list) else 0
    results = run.get("results")
    for res in results if isinstance(results, list) else []:
        if not isinstance(res, dict):
            continue
        index = res.get("ruleIndex")
        component = res.get("rule", {}).get("toolComponent") if isinstance(res.get("rule"), dict) else None
        if isinstance(index, int) and index >= n_rules and component is None and isinstance(res.get("ruleId"), str):
            del res["ruleIndex"]


def convert(inp: GuestInput) -> dict[str, Any]:
    name, text = inp.primary()
    log = expect(load_json(name, text), dict, f"{name}: top level (a SARIF log is a JSON object)")
    version = log.get("version")
    if version == "1.0.0":
        log = upgrade_v1(log, name)
    elif isinstance(version, str) and re.match(r"^2\.1\.\d+(-rtm\.\d+)?$", version):
        log["version"] = SARIF_VERSION
        log["$schema"] = SARIF_SCHEMA
    else:
        raise AdapterError(f"{name}: SARIF version {version!r} is not supported (2.1.x is passed through, 1.0.0 is upgraded)")
    runs = log.get("runs")
    for run in runs if isinstance(runs, list) else []:
        if isinstance(run, dict):
            _drop_dangling_rule_indexes(run)
    srcroot = inp.options.get("srcroot")
    if srcroot:
        prefix = srcroot if srcroot.endswith("/") else srcroot + "/"
        for run in runs if isinstance(runs, list) else []:
            if isinstance(run, dict):
                _rebase(run.get("results"), prefix)
                bases = run.setdefault("originalUriBaseIds", {})
                if isinstance(bases, dict):
                    bases[SRCROOT] = {"uri": prefix}
    return log
