"""`sandboy audit diff --baseline old.sarif new.sarif`: which results are new, unchanged, absent.

A result's identity is (tool, category, ruleId, fingerprint): `partialFingerprints.primaryLocationLineHash`
when both sides have one (GitHub's; it survives lines moving), else the primary location's file
and start line with the message text. The category (`automationDetails.id` up to its last '/')
is part of it, as for GitHub code scanning: `audit run` gives each tool's runs `sandboy/<tool>/`,
while the driver name is the adapter's or the tool's own — a repository's tool whose runs said
"Bandit" seeded the baseline with results that then covered Bandit's real new findings
("unchanged", `--fail-on new` passing; session 10). Every result of the new log gets `baselineState` new or
unchanged; results only in the baseline are copied into the output marked `absent` (SARIF 2.1.0
§3.27.24). Identity is a multiset: two identical findings in the baseline cover two in the new log.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterator

from sandboy.audit import sarif
from sandboy.audit.merge import category, tool_name
from sandboy.audit.sarif import as_array, as_object


@dataclass
class DiffSummary:
    new: int = 0
    unchanged: int = 0
    absent: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"new": self.new, "unchanged": self.unchanged, "absent": self.absent}


def identity(tool: str, result: dict[str, Any], artifacts: list[Any], kind: str = "") -> str:
    """`kind`: the run's category (merge.category)."""
    fps = as_object(result.get("partialFingerprints"))
    rule = result.get("ruleId") or as_object(result.get("rule")).get("id") or result.get("ruleIndex")
    line_hash = fps.get("primaryLocationLineHash")
    if isinstance(line_hash, str) and line_hash:
        return json.dumps([tool, kind, rule, "h", line_hash])
    physical = as_object(as_object((as_array(result.get("locations")) or [{}])[0]).get("physicalLocation"))
    where = as_object(physical.get("artifactLocation"))
    uri = where.get("uri")
    if uri is None and isinstance(where.get("index"), int) and 0 <= where["index"] < len(artifacts):
        uri = as_object(as_object(artifacts[where["index"]]).get("location")).get("uri")
    line = as_object(physical.get("region")).get("startLine")
    return json.dumps([tool, kind, rule, "l", uri, line, as_object(result.get("message")).get("text")])


def identified_results(doc: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(identity, run, result) for each result of each run of `doc`, in order; entries that are
    not tables (a malformed log) are passed over."""
    for run in as_array(doc.get("runs")):
        if not isinstance(run, dict):
            continue
        tool, kind, artifacts = tool_name(run), category(run), as_array(run.get("artifacts"))
        for result in as_array(run.get("results")):
            if isinstance(result, dict):
                yield identity(tool, result, artifacts, kind), run, result


def diff_docs(baseline: dict[str, Any], current: dict[str, Any]) -> tuple[dict[str, Any], DiffSummary]:
    summary = DiffSummary()
    old: Counter[str] = Counter()
    old_results: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {}
    for key, run, result in identified_results(baseline):
        old[key] += 1
        old_results.setdefault(key, []).append((run, result))
    out = copy.deepcopy(current)
    for key, _run, result in identified_results(out):
        if old[key] > 0:
            old[key] -= 1
            result["baselineState"] = "unchanged"
            summary.unchanged += 1
        else:
            result["baselineState"] = "new"
            summary.new += 1
    # What the baseline had and the new log lacks: copied in, without indices that would point
    # into the baseline's own rules/artifacts, into the new log's run of the same tool and category.
    runs_by_tool = {(tool_name(r), category(r)): r for r in as_array(out.get("runs")) if isinstance(r, dict)}
    for key, remaining in old.items():
        for run, result in old_results[key][len(old_results[key]) - remaining:]:
            gone = _portable(result, as_array(run.get("artifacts")))
            gone["baselineState"] = "absent"
            target = runs_by_tool.get((tool_name(run), category(run)))
            if target is None:
                target = {"tool": copy.deepcopy(run.get("tool")), "results": []}
                if "automationDetails" in run:
                    target["automationDetails"] = copy.deepcopy(run["automationDetails"])
                as_object(as_object(target["tool"]).get("driver")).pop("rules", None)
                out.setdefault("runs", []).append(target)
                runs_by_tool[(tool_name(run), category(run))] = target
            target.setdefault("results", []).append(gone)
            summary.absent += 1
    return out, summary


def _portable(result: dict[str, Any], artifacts: list[Any]) -> dict[str, Any]:
    """A copy of a baseline result that means the same thing in another log: ruleIndex dropped
    (ruleId kept), artifact indices replaced by the artifact's uri."""
    gone = copy.deepcopy(result)
    gone.pop("ruleIndex", None)
    if isinstance(gone.get("rule"), dict):
        gone["rule"].pop("index", None)
        if not gone["rule"]:
            del gone["rule"]
    for cur in sarif.objects(gone):
        loc = cur.get("artifactLocation")
        if isinstance(loc, dict) and isinstance(loc.get("index"), int):
            i = loc.pop("index")
            if "uri" not in loc and 0 <= i < len(artifacts):
                source = as_object(as_object(artifacts[i]).get("location"))
                for k in ("uri", "uriBaseId"):
                    if k in source:
                        loc[k] = source[k]
    if "message" not in gone:
        gone["message"] = {"text": "(absent since the baseline)"}
    return gone


def render(out: dict[str, Any]) -> str:
    return sarif.dumps(out)
