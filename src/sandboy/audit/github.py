"""GitHub code scanning's upload limits and rules, each violation named by JSON pointer.

Limits from GitHub's "SARIF results exceed limit" page (hard limits reject
the upload; the soft ones only truncate what is shown, so they are warnings):
runs/file 20, results/run 25,000, rules/run 25,000, tool extensions/run 100,
thread-flow locations/result 10,000, locations/result 1,000, tags/rule 20,
file 10 MB gzipped. Only SARIF 2.1.0; two runs with the same tool + category
are rejected; alerts are deduplicated only on partialFingerprints
primaryLocationLineHash.
"""

from __future__ import annotations

import re
import zlib
from typing import Any, Iterator

from sandboy.audit.sarif import Problem, as_array, as_object, pointer

MAX_GZIP_BYTES = 10 * 1024 * 1024
MAX_RUNS = 20
MAX_RESULTS = 25_000
SHOWN_RESULTS = 5_000
MAX_RULES = 25_000
MAX_EXTENSIONS = 100
MAX_THREAD_FLOW_LOCATIONS = 10_000
MAX_LOCATIONS = 1_000
MAX_TAGS = 20
_ABSOLUTE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def gzip_size(raw: bytes) -> int:
    """Compressed size without keeping the compressed bytes (level 6, as `gzip` does)."""
    comp = zlib.compressobj(6, zlib.DEFLATED, 31)
    total = 0
    view = memoryview(raw)
    for start in range(0, len(raw), 1 << 20):
        total += len(comp.compress(view[start : start + (1 << 20)]))
    return total + len(comp.flush())


def _error(parts: Any, message: str) -> Problem:
    return Problem(pointer(parts), message, "github")


def _warning(parts: Any, message: str) -> Problem:
    return Problem(pointer(parts), message, "github", "warning")


def _result_problems(res: dict[str, Any], at: tuple[Any, ...], rules: list[Any]) -> Iterator[Problem]:
    locations = as_array(res.get("locations"))
    if len(locations) > MAX_LOCATIONS:
        yield _error(at + ("locations",), f"{len(locations):,} locations; code scanning rejects more than {MAX_LOCATIONS:,} per result")
    elif len(locations) > 100:
        yield _warning(at + ("locations",), f"{len(locations)} locations; only 100 are shown")
    if not locations:
        yield _warning(at, "no locations: code scanning cannot place this alert in a file")
    tfl = sum(
        len(as_array(as_object(tf).get("locations")))
        for flow in as_array(res.get("codeFlows"))
        for tf in as_array(as_object(flow).get("threadFlows"))
    )
    if tfl > MAX_THREAD_FLOW_LOCATIONS:
        yield _error(at + ("codeFlows",), f"{tfl:,} thread-flow locations; code scanning rejects more than {MAX_THREAD_FLOW_LOCATIONS:,} per result")
    rule_id = res.get("ruleId") or as_object(res.get("rule")).get("id")
    index = res.get("ruleIndex")
    if not rule_id and not (isinstance(index, int) and 0 <= index < len(rules)):
        yield _error(at, "no ruleId (and no resolvable ruleIndex): code scanning needs a rule for every alert")
    if not isinstance(as_object(res.get("message")).get("text"), str):
        yield _error(at + ("message",), "no message.text: code scanning shows message.text (message.id alone is not supported)")
    for j, loc in enumerate(locations):
        art = as_object(as_object(as_object(loc).get("physicalLocation")).get("artifactLocation"))
        uri = art.get("uri")
        if isinstance(uri, str) and _ABSOLUTE.match(uri) and "uriBaseId" not in art:
            yield _warning(at + ("locations", j, "physicalLocation", "artifactLocation", "uri"),
                           "absolute URI: code scanning expects paths relative to the repository root "
                           "(rebase them, e.g. with a uriBaseId such as %SRCROOT%)")


def github_problems(doc: Any, raw: bytes) -> list[Problem]:
    out: list[Problem] = []
    packed = gzip_size(raw)
    if packed > MAX_GZIP_BYTES:
        out.append(_error((), f"{packed:,} bytes gzipped; code scanning rejects files over 10 MB gzipped"))
    if not isinstance(doc, dict):
        return out + [_error((), "not a SARIF log object")]
    if doc.get("version") != "2.1.0":
        out.append(_error(("version",), f"version {doc.get('version')!r}: code scanning accepts only SARIF 2.1.0"))
    runs = as_array(doc.get("runs"))
    if len(runs) > MAX_RUNS:
        out.append(_error(("runs",), f"{len(runs)} runs; code scanning rejects more than {MAX_RUNS} per file"))
    seen: dict[tuple[str, str], int] = {}
    for r, run in enumerate(runs):
        run = as_object(run)
        tool = as_object(run.get("tool"))
        driver = as_object(tool.get("driver"))
        rules = as_array(driver.get("rules"))
        extensions = as_array(tool.get("extensions"))
        results = as_array(run.get("results"))
        category = str(as_object(run.get("automationDetails")).get("id", "")).rpartition("/")[0]
        key = (str(driver.get("name")), category)
        if key in seen:
            out.append(_error(("runs", r), f"same tool {key[0]!r} and category {category!r} as /runs/{seen[key]}: "
                              "code scanning rejects duplicate runs (set runAutomationDetails.id per run)"))
        seen.setdefault(key, r)
        if len(results) > MAX_RESULTS:
            out.append(_error(("runs", r, "results"), f"{len(results):,} results; code scanning rejects more than {MAX_RESULTS:,} per run"))
        elif len(results) > SHOWN_RESULTS:
            out.append(_warning(("runs", r, "results"), f"{len(results):,} results; only the top {SHOWN_RESULTS:,} are kept"))
        n_rules = len(rules) + sum(len(as_array(as_object(e).get("rules"))) for e in extensions)
        if n_rules > MAX_RULES:
            out.append(_error(("runs", r, "tool"), f"{n_rules:,} rules; code scanning rejects more than {MAX_RULES:,} per run"))
        if len(extensions) > MAX_EXTENSIONS:
            out.append(_error(("runs", r, "tool", "extensions"), f"{len(extensions)} tool extensions; the limit is {MAX_EXTENSIONS}"))
        for i, rule in enumerate(rules):
            tags = as_array(as_object(as_object(rule).get("properties")).get("tags"))
            if len(tags) > MAX_TAGS:
                out.append(_error(("runs", r, "tool", "driver", "rules", i, "properties", "tags"),
                                  f"{len(tags)} tags; code scanning rejects more than {MAX_TAGS} per rule"))
        unfingerprinted = 0
        for i, res in enumerate(results):
            if isinstance(res, dict):
                out.extend(_result_problems(res, ("runs", r, "results", i), rules))
                if "primaryLocationLineHash" not in as_object(res.get("partialFingerprints")):
                    unfingerprinted += 1
        if unfingerprinted:
            out.append(_warning(("runs", r, "results"),
                                f"{unfingerprinted} result(s) without partialFingerprints.primaryLocationLineHash: "
                                "upload with github/codeql-action/upload-sarif (it computes them from the source) "
                                "or alerts may be duplicated between uploads"))
    return out


# What merge.github_fit makes fit, so a tool's log is not held back for it (pointers as
# github_problems writes them): too many runs (folded) or two of one tool and category (folded),
# too many results in a run (the least severe dropped), thread-flow locations (cut), a result
# without message.text (filled from its rule).
_FITTED = re.compile(r"^(/runs|/runs/\d+|/runs/\d+/results|/runs/\d+/results/\d+/(codeFlows|message))$")


def unfittable_problems(doc: Any) -> list[Problem]:
    """The errors of github_problems that github_fit cannot mend — a result with 1,001 locations
    or without a rule, a rule with 21 tags, a run with 25,001 rules or 101 extensions — for ONE
    tool's log before `audit run --github` merges it (its size is the merged log's to check)."""
    return [p for p in github_problems(doc, b"") if p.severity == "error" and not _FITTED.match(p.pointer)]
