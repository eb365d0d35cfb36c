"""SARIF in, canonical SARIF 2.1.0 out.

* 2.1.x logs are re-emitted (the host then canonicalises, validates and stamps);
* 1.0.0 logs (Roslyn's default `/errorlog`, BinSkim, PREfast, ...) are upgraded
  to 2.1.0 by sarif_v1.py, keeping what the SARIF SDK's reference converter
  keeps (mapping in docs/audit.md); v1 fields with no 2.1 home are kept under
  "sarifV1" in the owning object's properties rather than dropped;
* non-strict JSON (comments, NaN) is refused with a message saying so;
* a dangling ruleIndex (past the end of tool.driver.rules, as in codeql-action's
  own fingerprinting test data) is dropped; the ruleId still names the rule;
* `--option srcroot=URI` rebases absolute URIs under that prefix onto %SRCROOT%.
"""

from __future__ import annotations

import re
from typing import Any

from sarif_v1 import upgrade_run
from sandboy_guest import (
    SARIF_SCHEMA,
    SARIF_VERSION,
    SRCROOT,
    AdapterError,
    GuestInput,
    expect,
    load_json,
)


def upgrade_v1(log: dict[str, Any], name: str) -> dict[str, Any]:
    runs = expect(log.get("runs"), list, f"{name}: runs")
    return {"$schema": SARIF_SCHEMA, "version": SARIF_VERSION,
            "runs": [upgrade_run(expect(r, dict, f"{name}: runs[{i}]")) for i, r in enumerate(runs)]}


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
