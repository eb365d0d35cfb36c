"""`sandboy audit merge`: many SARIF logs -> one, and `--github`: a complete upload preflight.

Merging:
* runs of the same tool (driver name) and category (`automationDetails.id` up to its last '/')
  fold into one run: rules deduplicated by id and artifacts by location with every index
  remapped; identical results (after remapping) kept once; a run with zero results is kept;
* every run gets an `automationDetails.id` (`TOOL/` when it had none), so no two runs share
  tool + category — GitHub code scanning rejects that;
* `partialFingerprints.primaryLocationLineHash` is computed where missing, from the source file
  under `--source-root` (fingerprint.py, GitHub's algorithm);
* any input that is not valid SARIF 2.1.0 fails the whole merge, and so does an output that is
  not valid: nothing is written then;
* the output is never larger than the inputs together (`enforce_size_bound`, checked on every
  merge before anything is written): merging only drops and moves; the bytes it adds on purpose
  (ids, fingerprints, notices, an index remapped to more digits; `MergeReport.added_bytes`, each
  counted where it is added) are the only allowance, and a log that would exceed that fails the
  merge instead of being written.

With `--github`, `github_fit` then makes the log fit GitHub's upload limits — never silently:
≤ 20 runs (runs of one tool folded when over), ≤ 25,000 results per run (the most severe kept, a
notice result says how many of which level were dropped), ≤ 10,000 thread-flow locations per
result (cut, the message says so), `message.text` on every result; and `github_check` refuses
what still would not upload, from the text to be written: ≤ 10 MB gzipped (over: an error naming
the largest runs to upload separately), and every other GitHub rule (github.py).
"""

from __future__ import annotations

import copy
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandboy.audit import github, sarif
from sandboy.audit.errors import AuditError, UsageError
from sandboy.audit.sarif import as_array, as_object, member_bytes
from sandboy.escape import clean

LEVEL_ORDER = {"error": 0, "warning": 1, "note": 2, "none": 3}
NOTICE_RULE = "sandboy/truncated"


class MergeCut(Exception):
    """The merge's deadline (`audit run`'s time budget) passed before it was done: nothing of it
    is usable (its input documents are partly changed). `step` names where it stopped."""

    def __init__(self, step: str):
        super().__init__(step)
        self.step = step


# How often (in results) a merge with a deadline looks at the clock while it folds.
DEADLINE_EVERY = 256


def _check(deadline, step: str) -> None:
    if deadline is not None and time.monotonic() >= deadline:
        raise MergeCut(step)


class MergeFailed(AuditError):
    """An input that is not SARIF 2.1.0, or a log that cannot be made to fit: nothing written."""

    exit_code, kind = 1, "merge-failed"


@dataclass
class MergeReport:
    inputs: int = 0
    input_bytes: int = 0
    runs_in: int = 0
    runs_out: int = 0
    results_in: int = 0
    results_out: int = 0
    duplicates: int = 0
    fingerprints_added: int = 0
    added_bytes: int = 0        # what the merge added on purpose: ids, fingerprints, notices
    output_bytes: int = 0
    notices: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def enforce_size_bound(text: str, report: MergeReport) -> None:
    """Refuse a merged log larger than its inputs together plus what the merge added on purpose.
    Merging folds, deduplicates and re-serialises compactly, so growth beyond `added_bytes` means
    something was copied that should have been moved (a Sandboy bug, or an input built to make the
    merge amplify it): fail rather than write it."""
    size = len(text.encode())
    report.output_bytes = size
    # + 1: the newline `sarif.dumps` ends the log with, which an input file may lack — a minified
    # log without $schema or a final newline (`{"version":"2.1.0","runs":[...]}`, json.dump's own
    # output) came out one byte over and was refused as "a Sandboy bug" (redinput12)
    limit = report.input_bytes + report.added_bytes + 1
    if size > limit:
        raise MergeFailed(f"the merged log would be {size:,} bytes, more than its inputs together ({report.input_bytes:,} bytes) "
                          f"plus the {report.added_bytes:,} bytes the merge adds (ids, fingerprints, notices): nothing "
                          "written. Merge fewer logs at a time and report this (it is a Sandboy bug unless an input "
                          "was written to make a merge grow)")


def tool_name(run: dict[str, Any]) -> str:
    return str(as_object(as_object(run.get("tool")).get("driver")).get("name", ""))


def category(run: dict[str, Any]) -> str:
    ident = as_object(run.get("automationDetails")).get("id")
    return ident.rpartition("/")[0] if isinstance(ident, str) else ""


def load(path: Path, cap: int = 256 << 20) -> tuple[dict[str, Any], int]:
    """A SARIF 2.1.0 log, or MergeFailed naming the file and its first errors."""
    from sandboy.audit.capped import read_capped

    raw = read_capped(path, cap, "SARIF file")
    try:
        doc = sarif.parse_json(raw.decode("utf-8"))
    except (UnicodeDecodeError, sarif.JsonProblem) as exc:
        raise MergeFailed(f"{clean(str(path))}: not a SARIF log: {clean(str(exc), 300)}") from None
    if isinstance(doc, dict) and doc.get("version") == "1.0.0":
        raise MergeFailed(f"{clean(str(path))}: SARIF 1.0.0; upgrade it first: "
                          f"sandboy audit convert --tool passthrough --artifact {clean(str(path))} -o FILE")
    errors = [p for p in sarif.problems(doc) if p.severity == "error"]
    if errors:
        listed = "; ".join(clean(str(p), 300) for p in errors[:3])
        raise MergeFailed(f"{clean(str(path))}: not valid SARIF 2.1.0 ({len(errors)} error(s)): {listed}")
    return doc, len(raw)


def _index_growth(old: int, new: int) -> int:
    """The bytes an index remapped from `old` to `new` adds to the compact output (7 -> 12: one
    more digit): a second run's rule 0 can be the folded run's rule 1,000."""
    return max(0, len(str(new)) - len(str(old)))


def _remap_artifact_indices(node: Any, mapping: dict[int, int]) -> int:
    """Every artifactLocation.index below `node`, remapped (-1: an index the run did not have);
    returns the bytes that adds (`_index_growth`)."""
    grown = 0
    for cur in sarif.objects(node):
        location = cur.get("artifactLocation")
        if isinstance(location, dict) and isinstance(location.get("index"), int):
            new = mapping.get(location["index"], -1)
            grown += _index_growth(location["index"], new)
            location["index"] = new
    return grown


def _artifact_key(artifact: Any) -> str:
    location = as_object(as_object(artifact).get("location"))
    if "uri" in location:
        return _canon([location.get("uri"), location.get("uriBaseId")])
    return _canon(artifact)


class _Folded:
    """One output run being assembled from input runs of one tool + category."""

    def __init__(self, first: dict[str, Any]):
        self.run = {k: copy.deepcopy(v) for k, v in first.items() if k not in ("results", "artifacts")}
        driver = as_object(as_object(self.run.get("tool")).get("driver"))
        self.rules: list[Any] = []
        self.rule_at: dict[str, int] = {}
        driver.pop("rules", None)
        self.driver = driver
        self.artifacts: list[Any] = []
        self.artifact_at: dict[str, int] = {}
        self.results: list[Any] = []
        self.seen: set[str] = set()
        self.invocations: list[Any] = []
        self.seen_invocations: set[str] = set()
        self.duplicates = 0
        self.added_bytes = 0

    def add(self, run: dict[str, Any], deadline=None) -> None:
        rule_map: dict[int, int] = {}
        for i, rule in enumerate(as_array(as_object(as_object(run.get("tool")).get("driver")).get("rules"))):
            rid = as_object(rule).get("id")
            key = rid if isinstance(rid, str) else _canon(rule)
            if key not in self.rule_at:
                self.rule_at[key] = len(self.rules)
                self.rules.append(rule)
            rule_map[i] = self.rule_at[key]
        art_map: dict[int, int] = {}
        fresh: list[dict[str, Any]] = []
        for i, artifact in enumerate(as_array(run.get("artifacts"))):
            key = _artifact_key(artifact)
            if key not in self.artifact_at:
                self.artifact_at[key] = len(self.artifacts)
                self.artifacts.append(copy.deepcopy(artifact))
                if isinstance(self.artifacts[-1], dict):
                    fresh.append(self.artifacts[-1])
            art_map[i] = self.artifact_at[key]
        for artifact in fresh:  # a parent named by this run's numbering
            if isinstance(artifact.get("parentIndex"), int):
                if artifact["parentIndex"] in art_map:
                    self.added_bytes += _index_growth(artifact["parentIndex"], art_map[artifact["parentIndex"]])
                    artifact["parentIndex"] = art_map[artifact["parentIndex"]]
                else:
                    del artifact["parentIndex"]
        remap_artifacts = any(old != new for old, new in art_map.items())
        for n, result in enumerate(as_array(run.get("results"))):
            if deadline is not None and not n % DEADLINE_EVERY:
                _check(deadline, "folding the runs")
            if not isinstance(result, dict):
                continue
            # No copy: merge_docs takes ownership of its input documents (a copy of every result
            # doubled the peak memory of a 50 MB merge).
            if isinstance(result.get("ruleIndex"), int):
                new = rule_map.get(result["ruleIndex"], result["ruleIndex"])
                self.added_bytes += _index_growth(result["ruleIndex"], new)
                result["ruleIndex"] = new
                rule = self.rules[result["ruleIndex"]] if 0 <= result["ruleIndex"] < len(self.rules) else None
                if "ruleId" not in result and isinstance(as_object(rule).get("id"), str):
                    result["ruleId"] = rule["id"]
                    self.added_bytes += member_bytes("ruleId", rule["id"])
            rule_ref = result.get("rule")
            if isinstance(rule_ref, dict) and isinstance(rule_ref.get("index"), int) and "toolComponent" not in rule_ref:
                new = rule_map.get(rule_ref["index"], rule_ref["index"])
                self.added_bytes += _index_growth(rule_ref["index"], new)
                rule_ref["index"] = new
            if remap_artifacts:
                self.added_bytes += _remap_artifact_indices(result, art_map)
            key = _canon(result)
            if key in self.seen:
                self.duplicates += 1
                continue
            self.seen.add(key)
            self.results.append(result)
        for inv in as_array(run.get("invocations")):
            key = _canon(inv)
            if key not in self.seen_invocations:
                self.seen_invocations.add(key)
                self.invocations.append(inv)

    def build(self) -> dict[str, Any]:
        run = self.run
        if self.rules:
            self.driver["rules"] = self.rules
        if self.artifacts:
            run["artifacts"] = self.artifacts
        if self.invocations:
            run["invocations"] = self.invocations
        run["results"] = self.results
        if not isinstance(as_object(run.get("automationDetails")).get("id"), str):
            ident = f"{tool_name(run) or 'tool'}/"
            self.added_bytes += (member_bytes("id", ident) if isinstance(run.get("automationDetails"), dict)
                                 else member_bytes("automationDetails", {"id": ident}))
            run["automationDetails"] = {**as_object(run.get("automationDetails")), "id": ident}
        return run


def fold(runs: list[dict[str, Any]], by_tool_only: bool = False,
         deadline=None) -> tuple[list[dict[str, Any]], int, int]:
    """The runs folded by tool + category (or tool only); also the duplicates dropped and the
    bytes added (ids, ruleIds, indices remapped to more digits). `deadline`: MergeCut once passed."""
    groups: dict[tuple[str, str], _Folded] = {}
    for run in runs:
        key = (tool_name(run), "" if by_tool_only else category(run))
        if key not in groups:
            groups[key] = _Folded(run)
            if by_tool_only and category(run):
                groups[key].run["automationDetails"] = {"id": f"{category(run)}/"}
        groups[key].add(run, deadline)
    built = [g.build() for g in groups.values()]
    return built, sum(g.duplicates for g in groups.values()), sum(g.added_bytes for g in groups.values())


def merge_docs(docs: list[dict[str, Any]], source_root: Path | None = None,
               input_bytes: int | None = None, deadline=None) -> tuple[dict[str, Any], MergeReport]:
    """One log from `docs`, which it takes over (their results are moved, not copied).
    `input_bytes`: the inputs' size as read (files); None = their compact serialisation.
    `deadline` (time.monotonic(); `audit run`'s budget): MergeCut once it has passed, looked at
    every DEADLINE_EVERY results folded and while source files are hashed for fingerprints."""
    report = MergeReport(inputs=len(docs))
    report.input_bytes = input_bytes if input_bytes is not None else sum(len(sarif.dumps(d).encode()) for d in docs)
    runs = [run for doc in docs for run in as_array(doc.get("runs")) if isinstance(run, dict)]
    report.runs_in = len(runs)
    report.results_in = sum(len(as_array(r.get("results"))) for r in runs)
    merged_runs, report.duplicates, report.added_bytes = fold(runs, deadline=deadline)
    out = {"$schema": sarif.SARIF_SCHEMA_URI, "version": sarif.SARIF_VERSION, "runs": merged_runs}
    # The output names its schema once; an input's may have been shorter, or absent.
    report.added_bytes += member_bytes("$schema", sarif.SARIF_SCHEMA_URI)
    if source_root is not None:
        from sandboy.audit.fingerprint import PastDeadline, add_fingerprints

        try:
            report.fingerprints_added, added = add_fingerprints(out, source_root, deadline)
        except PastDeadline:
            raise MergeCut("computing fingerprints from the source files") from None
        report.added_bytes += added
    report.runs_out = len(merged_runs)
    report.results_out = sarif.count_results(out)
    return out, report


# --- GitHub upload preflight ----------------------------------------------------------


def _level(result: dict[str, Any], rules: list[Any]) -> str:
    level = result.get("level")
    if isinstance(level, str):
        return level
    index = result.get("ruleIndex")
    if isinstance(index, int) and 0 <= index < len(rules):
        configured = as_object(as_object(rules[index]).get("defaultConfiguration")).get("level")
        if isinstance(configured, str):
            return configured
    return "warning"  # SARIF's default


# What `--github`'s message.text fills may add together: as many bytes as the inputs hold, plus
# this. They are counted in the size bound, but counting alone does not bound them: one long rule
# text filled into every result (or a template repeating a long argument) would turn a small log
# into a huge one.
FILL_SLACK_BYTES = 1 << 20
_PLACEHOLDER = re.compile(r"\{(0|[1-9][0-9]*)\}")


class _FillTooLarge(Exception):
    """A template would expand past what the fills may still add."""


def _substitute(template: str, args: list[str], limit: int) -> str:
    """SARIF's `{0}`, `{1}`… placeholders replaced by `args` in one pass (an argument's own text
    is never read as a placeholder); _FillTooLarge before building a text of more than `limit`
    characters."""

    def arg(match: Any) -> str:
        i = int(match[1])
        return args[i] if i < len(args) else match[0]

    if len(template) + sum(len(arg(m)) - len(m[0]) for m in _PLACEHOLDER.finditer(template)) > limit:
        raise _FillTooLarge
    return _PLACEHOLDER.sub(arg, template)


def _rules_by_id(rules: list[Any]) -> dict[str, dict[str, Any]]:
    """The first rule of each id, as a scan of `rules` in order finds it. Looked up per result:
    scanning the list for each result was rules x results — 20,000 of each (a 4.7 MB log)
    held `merge --github` for 84 s of CPU, a 256 MiB one for days (redinput14)."""
    by_id: dict[str, dict[str, Any]] = {}
    for rule in rules:
        rule_id = as_object(rule).get("id")
        if isinstance(rule_id, str):
            by_id.setdefault(rule_id, as_object(rule))
    return by_id


def _message_text(result: dict[str, Any], rules: list[Any], limit: int,
                  by_id: dict[str, dict[str, Any]]) -> str | None:
    """The text `--github` fills in for a result without one (None: it has one); _FillTooLarge
    when a template would expand past `limit` characters. `by_id`: _rules_by_id(rules)."""
    message = as_object(result.get("message"))
    if isinstance(message.get("text"), str) and message["text"]:
        return None
    index = result.get("ruleIndex")
    rule = as_object(rules[index]) if isinstance(index, int) and 0 <= index < len(rules) else {}
    if not rule and isinstance(result.get("ruleId"), str):
        rule = by_id.get(result["ruleId"], {})
    mid = message.get("id")
    template = as_object(as_object(rule.get("messageStrings")).get(mid)).get("text") if isinstance(mid, str) else None
    if isinstance(template, str):
        return _substitute(template, [str(a) for a in as_array(message.get("arguments"))], limit)
    for key in ("shortDescription", "fullDescription"):
        text = as_object(rule.get(key)).get("text")
        if isinstance(text, str) and text:
            return text
    return f"{result.get('ruleId') or rule.get('id') or 'result'}"


def github_fit(doc: dict[str, Any], report: MergeReport, deadline=None) -> None:
    """Make `doc` fit GitHub code scanning's limits, saying what changed in report.notices.
    `deadline`: MergeCut once passed, looked at every DEADLINE_EVERY results (≈ 1.4 s for 99,000
    results at load 30 here)."""
    runs = as_array(doc.get("runs"))
    if len(runs) > github.MAX_RUNS:
        folded, dups, added = fold(runs, by_tool_only=True, deadline=deadline)
        report.duplicates += dups
        report.added_bytes += added
        report.notices.append(f"{len(runs)} runs are over GitHub's {github.MAX_RUNS}: runs of one tool folded into {len(folded)}")
        runs = doc["runs"] = folded
        if len(runs) > github.MAX_RUNS:
            names = ", ".join(clean(name, 200) for name in sorted({tool_name(r) for r in runs})[:30])
            raise MergeFailed(f"{len(runs)} different tools ({names}) are more than GitHub's {github.MAX_RUNS} runs per "
                              "upload: upload them in several files (e.g. sandboy audit merge per group of tools)")
    fill_budget = report.input_bytes + FILL_SLACK_BYTES
    for r, run in enumerate(runs):
        rules = as_array(as_object(as_object(run.get("tool")).get("driver")).get("rules"))
        results = as_array(run.get("results"))
        by_id = _rules_by_id(rules)
        filled = 0
        for i, result in enumerate(results):
            if not i % DEADLINE_EVERY:
                _check(deadline, "fitting the merged log to GitHub's limits")
            if isinstance(result, dict):
                try:
                    text = _message_text(result, rules, fill_budget, by_id)
                    cost = 0 if text is None else (member_bytes("text", text) if isinstance(result.get("message"), dict)
                                                   else member_bytes("message", {"text": text}))
                except _FillTooLarge:
                    text, cost = None, fill_budget + 1
                if cost > fill_budget:
                    raise MergeFailed(f"/runs/{r} ({clean(tool_name(run), 200)}): filling message.text from the rules "
                                      f"would add more than the inputs' {report.input_bytes:,} bytes (+ {FILL_SLACK_BYTES:,}): "
                                      "the log repeats long rule texts on its results. Put the texts in the tool's "
                                      "output, or upload it without --github")
                if text is not None:
                    fill_budget -= cost
                    report.added_bytes += cost
                    result["message"] = {**as_object(result.get("message")), "text": text}
                    filled += 1
                before = len(str(as_object(result.get("message")).get("text") or "").encode())
                cut = _cut_thread_flows(result)
                if cut:
                    report.added_bytes += len(str(as_object(result.get("message")).get("text")).encode()) - before
                    report.notices.append(f"/runs/{r}: a result's thread flows had {cut:,} locations over GitHub's "
                                          f"{github.MAX_THREAD_FLOW_LOCATIONS:,}: cut, its message says so")
        if filled:
            report.notices.append(f"/runs/{r} ({clean(tool_name(run), 200)}): message.text filled in on {filled} result(s) from its rule")
        if len(results) > github.MAX_RESULTS:
            _truncate(run, rules, report, r)


def github_check(doc: dict[str, Any], text: str) -> None:
    """MergeFailed if GitHub would still reject `doc`, whose serialisation (the bytes to be
    written) is `text`."""
    raw = text.encode()
    packed = github.gzip_size(raw)
    if packed > github.MAX_GZIP_BYTES:
        sizes = sorted(((len(sarif.dumps(run)), tool_name(run), category(run)) for run in as_array(doc.get("runs"))),
                       reverse=True)
        largest = ", ".join(f"{clean(name, 200)} (category {clean(cat, 200) or '-'}: {size / 1e6:.1f} MB)" for size, name, cat in sizes[:3])
        raise MergeFailed(f"{packed / 1e6:.1f} MB gzipped is over GitHub's 10 MB per upload: upload the largest runs "
                          f"separately ({largest}) — sandboy audit merge them into different files")
    found = [p for p in github.github_problems(doc, raw) if p.severity == "error"]
    if found:
        raise MergeFailed("GitHub would reject the merged log: " + "; ".join(str(p) for p in found[:5]))


def _cut_thread_flows(result: dict[str, Any]) -> int:
    total = 0
    flows = [tf for cf in as_array(result.get("codeFlows")) for tf in as_array(as_object(cf).get("threadFlows")) if isinstance(tf, dict)]
    count = sum(len(as_array(tf.get("locations"))) for tf in flows)
    if count <= github.MAX_THREAD_FLOW_LOCATIONS:
        return 0
    budget = github.MAX_THREAD_FLOW_LOCATIONS
    for tf in flows:
        locations = as_array(tf.get("locations"))
        keep = max(0, min(len(locations), budget))
        if keep < len(locations):
            tf["locations"] = locations[:keep]
        budget -= keep
        total += len(locations) - keep
    message = result.setdefault("message", {})
    if isinstance(message, dict):
        message["text"] = (str(message.get("text") or "") +
                           f" [sandboy: code flow cut to the first {github.MAX_THREAD_FLOW_LOCATIONS:,} of {count:,} locations for GitHub]").strip()
    return total


def _truncate(run: dict[str, Any], rules: list[Any], report: MergeReport, r: int) -> None:
    results = as_array(run.get("results"))
    keep_n = github.MAX_RESULTS - 1  # room for the notice
    order = sorted(range(len(results)), key=lambda i: (LEVEL_ORDER.get(_level(results[i], rules), 1), i))
    kept_idx = sorted(order[:keep_n])
    dropped: dict[str, int] = {}
    for i in order[keep_n:]:
        level = _level(results[i], rules)
        dropped[level] = dropped.get(level, 0) + 1
    kept = [results[i] for i in kept_idx]
    summary = ", ".join(f"{n:,} {level}" for level, n in sorted(dropped.items(), key=lambda kv: LEVEL_ORDER.get(kv[0], 1)))
    text = (f"sandboy: {len(results) - keep_n:,} of {len(results):,} results of this run were dropped to fit GitHub's "
            f"{github.MAX_RESULTS:,} results per run ({summary}); the most severe were kept. The full log is the input of "
            "`sandboy audit merge`.")
    notice: dict[str, Any] = {"ruleId": NOTICE_RULE, "level": "note", "message": {"text": text}}
    anchor = next((res.get("locations") for res in kept if isinstance(res, dict) and as_array(res.get("locations"))), None)
    if anchor:
        notice["locations"] = copy.deepcopy(anchor[:1])
    kept.append(notice)
    report.added_bytes += len(sarif.dumps(notice).encode())
    run["results"] = kept
    report.notices.append(f"/runs/{r} ({clean(tool_name(run), 200)}): {text}")


def merge_files(paths: list[Path], source_root: Path | None, github_mode: bool) -> tuple[str, MergeReport]:
    if not paths:
        raise UsageError("name the SARIF logs to merge")
    docs, total = [], 0
    for path in paths:
        doc, size = load(path)
        docs.append(doc)
        total += size
    out, report = merge_docs(docs, source_root, input_bytes=total)
    # Every input passed the full check (schema + semantics); what merging changes (indices,
    # new objects) the schema covers — the semantic walk over a 50 MB output doubled the time.
    return finish(out, report, github_mode, semantic_check=False), report


def finish(out: dict[str, Any], report: MergeReport, github_mode: bool, semantic_check: bool,
           deadline=None) -> str:
    """The end of every merge (`audit merge`, `audit run`): the GitHub preflight with the counts it
    changes, validation of the merged log, the no-runs and size checks; returns the text to write
    (serialised once: the GitHub check reads the same text). `deadline`: MergeCut once it has
    passed — looked at before the check, while its semantic part walks the log (every
    sarif.BETWEEN_EVERY results and entries) and while the log is serialised (every
    sarif.DUMPS_PART results): a begun check and serialisation ran ≈ 2.5 + 1.1 s past the budget
    for 99,000 results (session 10). What still runs whole once begun: the schema's check
    (jsonschema-rs, ≈ 0.3 s for 99,000 results at load 10 here) and one part of either."""
    _check(deadline, "checking the merged log")
    if github_mode:
        github_fit(out, report, deadline)
        report.results_out = sarif.count_results(out)
        report.runs_out = len(out["runs"])
    if semantic_check:
        found = sarif.problems(out, between=None if deadline is None else lambda: _check(deadline, "checking the merged log"))
    else:
        found = sarif.schema_problems(out)
    errors = [p for p in found if p.severity == "error"]
    if errors:
        raise MergeFailed("the merged log is not valid SARIF 2.1.0 (a Sandboy bug): " + "; ".join(str(p) for p in errors[:3]))
    if report.runs_in and not report.runs_out:
        raise MergeFailed("the merge produced no runs")
    if deadline is None:
        text = sarif.dumps(out)
    else:
        text = sarif.dumps_in_parts(out, lambda: _check(deadline, "writing the merged log"))
    if github_mode:
        _check(deadline, "checking GitHub's upload limits")  # (a gzip of the text: ≈ 0.6 s for 99,000 results)
        github_check(out, text)
    enforce_size_bound(text, report)
    return text
