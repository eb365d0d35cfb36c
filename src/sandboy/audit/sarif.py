"""SARIF core: parse, validate, check, canonicalise, cap and stamp untrusted SARIF.

Everything here treats its input as hostile (it came out of a guest adapter or
off disk): strict JSON only, the official OASIS 2.1.0 schema (errata01,
vendored in schema/) through jsonschema-rs with format checking on (python-
jsonschema would miss `uri` formats and is ~1000x slower, docs/findings.md), then the
cross-field rules a schema cannot express. What we emit is re-serialised from
the validated tree, so a consumer sees exactly what was checked (no duplicate
keys, no comments, no NaN).
"""

from __future__ import annotations

import functools
import json
import os
import re
from dataclasses import asdict, dataclass, field, replace
from importlib import resources
from typing import Any, Callable, Iterator

from sandboy.audit.errors import InvalidOutput, OutputTooLarge

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA_URI = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
_VERSION_21 = re.compile(r"^2\.1\.\d+(-rtm\.\d+)?$")
MAX_PROBLEMS = 200  # enough to act on; a 1.0.0 log would otherwise list thousands


@dataclass(frozen=True)
class Problem:
    pointer: str    # RFC 6901 JSON pointer into the document ("" = the whole file)
    message: str
    source: str     # "json" | "schema" | "semantic" | "github"
    severity: str = "error"  # "error" fails validation; "warning" does not
    spec: str = ""  # the SARIF 2.1.0 section a semantic rule comes from ("3.27.6"), if any

    def as_dict(self) -> dict[str, str]:
        return asdict(self)

    def __str__(self) -> str:
        from sandboy.escape import clean  # keys and messages come from the file (no wasmtime import here)

        text = f"{self.pointer or '/'}: {self.message}" + (f" (SARIF 2.1.0 §{self.spec})" if self.spec else "")
        return f"{clean(text, 2000)} [{self.source}{'' if self.severity == 'error' else ', warning'}]"


def as_object(value: Any) -> dict[str, Any]:
    """`value` if it is a JSON object, else an empty one: a hostile log may put anything where the
    schema says an object goes, and the readers of a log that already failed validation (merge,
    diff, the GitHub preflight) must degrade, not raise."""
    return value if isinstance(value, dict) else {}


def as_array(value: Any) -> list[Any]:
    """`value` if it is a JSON array, else an empty one (see `as_object`)."""
    return value if isinstance(value, list) else []


def objects(node: Any) -> Iterator[dict[str, Any]]:
    """Every JSON object in `node`, itself included, without recursion (a log nested deeper than
    Python's stack is walked too). The caller may change the object it is given: its values are
    already queued, so a value it replaces is not walked."""
    stack = [node]
    while stack:
        cur = stack.pop()
        if isinstance(cur, dict):
            stack.extend(cur.values())
            yield cur
        elif isinstance(cur, list):
            stack.extend(cur)


def pointer(parts: Any) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


# --- parsing -------------------------------------------------------------------


class JsonProblem(ValueError):
    """Not strict JSON; the message says where and, for comments, what to do."""


def _refuse_constant(name: str) -> Any:
    raise JsonProblem(f"non-standard JSON constant {name} (NaN/Infinity are not JSON)")


def parse_json(text: str) -> Any:
    """The JSON reading rule (docs/audit.md, "Reading JSON"): one leading UTF-8 BOM skipped, then
    strict JSON — no NaN/Infinity, no number beyond a double, no lone surrogate escapes, no
    comments. The guests' `load_json`
    (adapters/common/sandboy_guest.py) applies the same rule on the other side of the boundary;
    the host never imports guest code, so tests/audit/test_json_rule.py holds the two together."""
    if text.startswith("\ufeff"):
        text = text[1:]  # a UTF-8 BOM is common from Windows tools (BinSkim) and harmless
    try:
        doc = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        hint = ""
        if text[exc.pos : exc.pos + 2] in ("//", "/*"):
            hint = " — a comment: SARIF must be strict JSON; remove comments or fix the producer"
        raise JsonProblem(f"not valid JSON at line {exc.lineno} column {exc.colno} (char {exc.pos}): {exc.msg}{hint}") from None
    except RecursionError:
        raise JsonProblem("JSON nested too deeply") from None
    except JsonProblem:
        raise
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise JsonProblem(f"not usable JSON: {str(exc)[:200]}") from None
    if "\\ud" in text or "\\uD" in text:  # only an escape can spell a lone surrogate
        bad = _lone_surrogate(doc)
        if bad is not None:
            raise JsonProblem(f"a string holds a lone surrogate escape ({ascii(bad[:40])}): not Unicode text "
                              "(RFC 8259 section 8.2); fix the producer")
    return doc


def _lone_surrogate(doc: Any) -> Any:
    """The first string (key or value) holding a lone surrogate, else None. JSON text may spell
    one (`"\\ud800"`), but it is not Unicode: it cannot be written back as UTF-8 nor cross the
    WIT string boundary (every adapter trapped on it)."""
    stack = [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if not key.isascii():
                    try:
                        key.encode("utf-8")
                    except UnicodeEncodeError:
                        return key
                stack.append(value)
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, str) and not node.isascii():
            try:
                node.encode("utf-8")
            except UnicodeEncodeError:
                return node
    return None


def _finite_float(text: str) -> float:
    # json.loads turns 1e400 into inf, which dumps() would then write as the non-JSON `Infinity`
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise JsonProblem(f"number {text[:40]} does not fit a double (JSON numbers must be finite)")
    return value


# --- schema and semantic checks -------------------------------------------------------


@functools.cache
def _validator() -> Any:
    import jsonschema_rs  # lazy: only the audit paths pay for it

    schema = json.loads(resources.files("sandboy.audit").joinpath("schema/sarif-schema-2.1.0.json").read_text("utf-8"))
    return jsonschema_rs.validator_for(schema, validate_formats=True)


MAX_NODES_FOR_ALL_ERRORS = 50_000


def _node_count(doc: Any, stop: int) -> int:
    count, stack = 0, [doc]
    while stack and count <= stop:
        node = stack.pop()
        count += 1
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return count


def schema_problems(doc: Any, limit: int = MAX_PROBLEMS) -> list[Problem]:
    """Schema errors of `doc`. jsonschema-rs gathers every error before the first is returned
    (≈ 2.6 KB each): a 3 MB file of a million empty rules cost the host 3.5 GB and 27 s, outside
    every guest limit. So: a valid document costs one pass; an invalid small one lists its
    errors; an invalid large one reports the first error only."""
    validator = _validator()
    if validator.is_valid(doc):
        return []
    if _node_count(doc, MAX_NODES_FOR_ALL_ERRORS) > MAX_NODES_FOR_ALL_ERRORS:
        import jsonschema_rs

        try:
            validator.validate(doc)
        except jsonschema_rs.ValidationError as err:
            return [Problem(pointer(err.instance_path), err.message[:500] + " (first error; the document is "
                            "too large to list them all)", "schema")]
        return []
    out = []
    for err in validator.iter_errors(doc):
        out.append(Problem(pointer(err.instance_path), err.message[:500], "schema"))
        if len(out) >= limit:
            break
    return out


def _dicts(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


MAX_WALK_DEPTH = 256  # containers nested deeper are reported, not walked: no real producer comes close


class Where:
    """Where a walk stands: the container holding the current entry, its key in its parent and the
    parent's Where. One small object per container, shared by every entry in it, so a walk's
    memory is linear in the input (copying the path tuple at every container was quadratic:
    1.5 GB for 605 KB of nested input). The path is spelled out only when a problem is reported."""

    __slots__ = ("parent", "key", "node", "depth")

    def __init__(self, parent: "Where | None", key: Any, node: Any, depth: int):
        self.parent, self.key, self.node, self.depth = parent, key, node, depth

    def path(self) -> tuple[Any, ...]:
        parts = []
        where = self
        while where.parent is not None:
            parts.append(where.key)
            where = where.parent
        return (*where.key, *reversed(parts))  # the root's key is the path the walk started at

    def holder_keys(self) -> tuple[Any, ...]:
        """The keys of this container and of its parent in theirs (the end of the path; O(1))."""
        if self.parent is None:
            return tuple(self.key[-2:])
        if self.parent.parent is None:
            return (*self.parent.key[-1:], self.key)
        return (self.parent.key, self.key)


TOO_DEEP = object()  # the key _walk yields (once) for a container nested deeper than MAX_WALK_DEPTH


def _walk(node: Any, path: tuple[Any, ...], max_depth: int = MAX_WALK_DEPTH) -> Iterator[tuple[Any, Any, Where]]:
    """Yield (key, value, where) for every dict entry, depth first and iteratively (inputs can be
    deep); `where.node` is the dict holding the entry and `where.path()` its path, starting with
    `path`. The stack holds one iterator per open container, so the walk's own memory grows with
    the depth, not the width. Containers deeper than `max_depth` are not entered:
    (TOO_DEEP, container, where) is yielded for the first one."""
    def entries(container: Any) -> Iterator[tuple[Any, Any]]:
        return iter(container.items()) if isinstance(container, dict) else enumerate(container)

    root = Where(None, path, node, 0)
    stack = [(root, entries(node))] if isinstance(node, (dict, list)) else []
    warned = False
    while stack:
        where, items = stack[-1]
        for key, value in items:
            if isinstance(where.node, dict):
                yield key, value, where
            if isinstance(value, (dict, list)) and value:
                child = Where(where, key, value, where.depth + 1)
                if child.depth > max_depth:
                    if not warned:
                        warned = True
                        yield TOO_DEEP, value, child
                    continue
                stack.append((child, entries(value)))
                break
        else:
            stack.pop()


# RFC 3986 URI-reference (section 4.1), the schema's `format: uri-reference`. The vendored
# schema is draft-04, which has no `uri-reference` format, so jsonschema-rs does not check it
# (it does check `format: uri`): "#SRCROOT#a.c", "a b" and "%zz" pass the schema. The grammar
# below is RFC 3986's, except that IPv6 literals are checked for their characters only.
_PCT = r"%[0-9A-Fa-f]{2}"
_PCHAR = rf"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@]|{_PCT})"
_PCHAR_NO_COLON = rf"(?:[A-Za-z0-9\-._~!$&'()*+,;=@]|{_PCT})"  # first segment of a relative path
_AUTHORITY = (rf"(?:(?:[A-Za-z0-9\-._~!$&'()*+,;=:]|{_PCT})*@)?"
              rf"(?:\[[0-9A-Fa-f:.]+\]|\[v[0-9A-Fa-f]+\.[A-Za-z0-9\-._~!$&'()*+,;=:]+\]|(?:[A-Za-z0-9\-._~!$&'()*+,;=]|{_PCT})*)"
              r"(?::\d*)?")
_QUERY_FRAGMENT = rf"(?:\?(?:{_PCHAR}|[/?])*)?(?:#(?:{_PCHAR}|[/?])*)?"
_URI_REFERENCE = re.compile(
    rf"^(?:[A-Za-z][A-Za-z0-9+.-]*:(?://{_AUTHORITY}(?:/{_PCHAR}*)*|/?(?:{_PCHAR}+(?:/{_PCHAR}*)*)?)"  # URI
    rf"|//{_AUTHORITY}(?:/{_PCHAR}*)*|/(?:{_PCHAR}+(?:/{_PCHAR}*)*)?|{_PCHAR_NO_COLON}+(?:/{_PCHAR}*)*|)"  # relative-ref
    rf"{_QUERY_FRAGMENT}$"
)


def is_uri_reference(text: str) -> bool:
    """True if `text` is an RFC 3986 URI-reference (a URI or a relative reference)."""
    return _URI_REFERENCE.match(text) is not None



def _inconsistency(parts: tuple[Any, ...], message: str, spec: str) -> Problem:
    """A log that breaks a cross-field rule of the spec but that consumers (GitHub included) accept:
    a warning by default, an error under --strict (see strict())."""
    return Problem(pointer(parts), message, "semantic", "warning", spec)


def strict(found: list[Problem]) -> list[Problem]:
    """--strict: Sandboy's semantic warnings (spec inconsistencies) become errors; GitHub's
    soft limits stay warnings (GitHub itself only truncates or deduplicates for them)."""
    return [replace(p, severity="error") if p.source == "semantic" and p.severity == "warning" else p for p in found]


def _region_problems(region: dict[str, Any], where: Callable[[], tuple[Any, ...]]) -> Iterator[Problem]:
    """`where()` spells out the region's path, only when there is something to report."""
    def num(key: str) -> int | None:
        v = region.get(key)
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    sl, el, sc, ec = num("startLine"), num("endLine"), num("startColumn"), num("endColumn")
    for key, value in (("startLine", sl), ("endLine", el), ("startColumn", sc), ("endColumn", ec)):
        if value is not None and value < 1:
            yield Problem(pointer(where() + (key,)), f"{key} is {value}; lines and columns start at 1", "semantic", spec="3.30.5")
    if sl is not None and el is not None and el < sl:
        yield _inconsistency(where() + ("endLine",), f"endLine {el} is before startLine {sl}", "3.30.7")
    if sc is not None and ec is not None and (el is None or el == sl) and ec < sc:
        yield _inconsistency(where() + ("endColumn",), f"endColumn {ec} is before startColumn {sc} on the same line", "3.30.8")


# How often (in results, and in dict entries walked) the semantic check calls its `between`: a
# deadline's way to stop it (the merge's check: ≈ 2.4 s for 99,000 results at load 10 here).
BETWEEN_EVERY = 1024


def _parent_problems(items: list[Any], at: tuple[Any, ...], what: str, spec: str) -> Iterator[Problem]:
    """`parentIndex` of run.artifacts (3.24.3) and run.logicalLocations (3.33): the index of
    ANOTHER item of that array, and following parents ends. The schema checks neither; an item
    that is its own ancestor makes a consumer that walks up the parents to build a nested name
    (`outer.zip#/inner`, `Ns.Type.member`) loop for ever — and Sandboy's own SARIF 1.0 upgrade
    wrote one for a v1 log whose parentKeys went round (redinput14). Linear: each item is
    walked once; each cycle is reported once, at the item where the walk met it again."""
    parents: list[int | None] = []
    for i, item in enumerate(items):
        index = item.get("parentIndex") if isinstance(item, dict) else None
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            parents.append(None)
        elif index >= len(items):
            parents.append(None)
            yield _inconsistency(at + (i, "parentIndex"), f"parentIndex {index} out of range ({what} has {len(items)})", spec)
        else:
            parents.append(index)
    done = [False] * len(items)
    for start in range(len(items)):
        path: dict[int, None] = {}
        node = start
        while node is not None and not done[node] and node not in path:
            path[node] = None
            node = parents[node]
        if node is not None and node in path:
            yield _inconsistency(at + (node, "parentIndex"), f"{what}[{node}] is its own ancestor (its parentIndex "
                                 "chain comes back to it): a consumer walking up the parents never ends", spec)
        for seen in path:
            done[seen] = True


def _run_problems(run: dict[str, Any], r: int, between=None) -> Iterator[Problem]:
    yield from _parent_problems(_dicts(run.get("artifacts")), ("runs", r, "artifacts"), "run.artifacts", "3.24.3")
    yield from _parent_problems(_dicts(run.get("logicalLocations")), ("runs", r, "logicalLocations"),
                                "run.logicalLocations", "3.33")
    tool = run.get("tool") if isinstance(run.get("tool"), dict) else {}
    driver = tool.get("driver") if isinstance(tool.get("driver"), dict) else {}
    rules = _dicts(driver.get("rules"))
    extensions = _dicts(tool.get("extensions"))
    seen: dict[str, int] = {}
    for i, rule in enumerate(rules):
        rid = rule.get("id") if isinstance(rule, dict) else None
        if isinstance(rid, str):
            if rid in seen:
                yield _inconsistency(("runs", r, "tool", "driver", "rules", i, "id"), f"rule id {rid!r} repeats rules[{seen[rid]}]", "3.49.3")
            seen.setdefault(rid, i)
    for i, res in enumerate(_dicts(run.get("results"))):
        if between is not None and not i % BETWEEN_EVERY:
            between()
        if not isinstance(res, dict):
            continue
        at = ("runs", r, "results", i)
        rule_ref = res.get("rule") if isinstance(res.get("rule"), dict) else {}
        index = res.get("ruleIndex", rule_ref.get("index"))
        table, where = rules, "tool.driver.rules"
        component = rule_ref.get("toolComponent")
        if isinstance(component, dict) and isinstance(component.get("index"), int):
            ci = component["index"]
            if not 0 <= ci < len(extensions):
                yield _inconsistency(at + ("rule", "toolComponent", "index"),
                                     f"toolComponent index {ci} out of range ({len(extensions)} extensions)", "3.27.7")
                continue
            table, where = _dicts(extensions[ci].get("rules")) if isinstance(extensions[ci], dict) else [], f"tool.extensions[{ci}].rules"
        if isinstance(index, int) and not isinstance(index, bool) and index >= 0:
            if index >= len(table):
                yield _inconsistency(at + ("ruleIndex",), f"ruleIndex {index} out of range ({where} has {len(table)})", "3.27.6")
            else:
                rid, target = res.get("ruleId"), table[index].get("id") if isinstance(table[index], dict) else None
                if isinstance(rid, str) and isinstance(target, str) and rid != target and not rid.startswith(target + "/"):
                    yield _inconsistency(at + ("ruleId",), f"ruleId {rid!r} does not match {where}[{index}].id {target!r}", "3.27.5")
        kind, level = res.get("kind", "fail"), res.get("level")
        if kind != "fail" and level not in (None, "none"):
            yield _inconsistency(at + ("level",), f"level {level!r} with kind {kind!r}: only 'fail' results have a level", "3.27.10")
    declared = run.get("originalUriBaseIds")
    for n, (key, value, where) in enumerate(_walk(run, ("runs", r))):
        if between is not None and not n % BETWEEN_EVERY:
            between()
        if key is TOO_DEEP:
            yield Problem(pointer(where.path()), f"nested deeper than {MAX_WALK_DEPTH} levels; "
                          "deeper content is not checked", "semantic")
        elif key == "region" and isinstance(value, dict):
            yield from _region_problems(value, lambda: where.path() + ("region",))
        elif key == "uri" and isinstance(value, str) and not is_uri_reference(value):
            yield Problem(pointer(where.path() + (key,)), f"{value[:80]!r} is not a valid URI reference (RFC 3986): percent-encode "
                          "spaces, backslashes, '%' and a second '#'", "semantic", spec="3.4.3")
        elif key == "uriBaseId" and isinstance(value, str):
            if isinstance(declared, dict) and value not in declared and "originalUriBaseIds" not in where.holder_keys():
                yield _inconsistency(where.path() + (key,), f"uriBaseId {value!r} is not declared in run.originalUriBaseIds", "3.14.14")
            uri = where.node.get("uri")  # the uri beside this uriBaseId
            if isinstance(uri, str) and re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", uri):
                yield _inconsistency(where.path() + ("uri",), f"absolute URI {uri[:80]!r} with a uriBaseId: a base applies to relative references only", "3.4.4")


def semantic_problems(doc: Any, between=None) -> list[Problem]:
    """`between()`, when given, is called every BETWEEN_EVERY results and dict entries (it may
    raise to stop the check: a deadline's)."""
    if not isinstance(doc, dict):
        return []
    out: list[Problem] = []
    for r, run in enumerate(_dicts(doc.get("runs"))):
        if isinstance(run, dict):
            for problem in _run_problems(run, r, between):
                out.append(problem)
                if len(out) >= MAX_PROBLEMS:
                    return out
    return out


def problems(doc: Any, strict_checks: bool = False, between=None) -> list[Problem]:
    """Schema errors, then semantic problems; inconsistencies are warnings unless `strict_checks`.
    `between`: see semantic_problems (the schema's check, in jsonschema-rs, runs whole: ≈ 0.3 s
    for 99,000 results at load 10 here)."""
    found = schema_problems(doc) + semantic_problems(doc, between)
    return strict(found) if strict_checks else found


# --- the convert pipeline: canonicalise, cap, stamp, validate ------------------------


def canonicalize(doc: dict[str, Any]) -> dict[str, Any]:
    """`$schema` first and pointing at the OASIS errata01 schema; any 2.1.x version as 2.1.0."""
    version = doc.get("version")
    if isinstance(version, str) and _VERSION_21.match(version):
        version = SARIF_VERSION
    rest = {k: v for k, v in doc.items() if k not in ("$schema", "version")}
    return {"$schema": SARIF_SCHEMA_URI, "version": version, **rest}


def count_results(doc: dict[str, Any]) -> int:
    return sum(len(run.get("results") or []) for run in _dicts(doc.get("runs")) if isinstance(run, dict) and isinstance(run.get("results"), list))


@dataclass
class Provenance:
    adapter: str
    adapter_version: str
    component_sha256: str
    wasmtime_version: str
    fuel_used: int
    duration_ms: float
    inputs: list[dict[str, Any]] = field(default_factory=list)
    sandboy_version: str = "0.1.0"

    def conversion(self) -> dict[str, Any]:
        logs = [{"uri": i["uri"]} for i in self.inputs if i.get("uri")]
        out: dict[str, Any] = {
            "tool": {"driver": {"name": "sandboy audit", "version": self.sandboy_version}},
            "invocation": {"executionSuccessful": True},
        }
        if logs:
            out["analysisToolLogFiles"] = logs
        return out

    def properties(self) -> dict[str, Any]:
        return {
            "adapter": self.adapter,
            "adapterVersion": self.adapter_version,
            "componentSha256": self.component_sha256,
            "wasmtimeVersion": self.wasmtime_version,
            "fuelUsed": self.fuel_used,
            "durationMs": round(self.duration_ms, 3),
            "inputs": [{k: v for k, v in i.items() if k != "uri"} for i in self.inputs],
        }


def stamp(doc: dict[str, Any], prov: Provenance) -> None:
    """Overwrite (never merge) provenance: a guest cannot pre-fill it."""
    for run in _dicts(doc.get("runs")):
        if not isinstance(run, dict):
            continue
        run["conversion"] = prov.conversion()
        props = run.get("properties")
        if props is None:
            props = run["properties"] = {}
        if isinstance(props, dict):
            props["sandboy"] = prov.properties()


def dumps(doc: Any) -> str:
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"), allow_nan=False) + "\n"


DUMPS_PART = 4096  # results serialised at a time by dumps_in_parts


def dumps_in_parts(doc: Any, between) -> str:
    """`dumps(doc)`, the same text, made DUMPS_PART results at a time with `between()` called
    before each part (it may raise: a deadline's way to stop a serialisation of seconds — 1.1 s
    for 99,000 results at load 10 here — which json.dumps, once called, runs to its end).

    Each run's results are serialised apart and put where a marker stands in the text of the
    rest: `dumps` writes a list as `[` + its items joined by `,` + `]`, so the pieces joined are
    its text. The markers carry 128 random bits: no string of the log can be one. The runs'
    `results` are put back before returning, also when `between` raises."""
    runs = doc.get("runs") if isinstance(doc, dict) else None
    if not isinstance(runs, list):
        between()
        return dumps(doc)
    nonce = os.urandom(16).hex()
    taken = {}  # marker text -> the run's results
    try:
        for i, run in enumerate(runs):
            if isinstance(run, dict) and isinstance(run.get("results"), list) and run["results"]:
                marker = f"sandboy-results-{nonce}-{i}"
                taken[json.dumps(marker)] = (run, run["results"])
                run["results"] = marker
        between()
        rest = dumps(doc)  # (small: the results are out of it)
        out, at = [], 0
        for marker, (run, results) in taken.items():  # in the runs' order: the order of their text
            where = rest.index(marker, at)
            out.append(rest[at:where])
            parts = []
            for start in range(0, len(results), DUMPS_PART):
                between()
                parts.append(json.dumps(results[start:start + DUMPS_PART], ensure_ascii=False, separators=(",", ":"),
                                        allow_nan=False)[1:-1])
            out.append(f"[{','.join(parts)}]")
            at = where + len(marker)
        out.append(rest[at:])
        return "".join(out)
    finally:
        for run, results in taken.values():
            run["results"] = results


def member_bytes(key: str, value: Any) -> int:
    """What adding `key: value` to an object costs in `dumps`' UTF-8 output (`,"key":value`)."""
    return len(dumps({key: value}).encode()) - len("{}\n") + len(",")


def finalize(output: str, prov: Provenance, max_output_bytes: int,
             max_results: int, between=None) -> tuple[str, dict[str, Any], list[Problem]]:
    """Turn a guest's output into canonical, validated, stamped SARIF or raise a classified error.
    Returns (text, document, warnings: inconsistencies that do not fail a conversion, ADR 0012).
    `between()`, when given, is called between the parse, the check and the serialisation (each
    seconds for 100,000 results): a deadline's way to stop before the next (convert.py)."""
    between = between or (lambda: None)
    size = len(output) if len(output) * 4 <= max_output_bytes else len(output.encode("utf-8", "surrogatepass"))
    if size > max_output_bytes:
        raise OutputTooLarge(f"the adapter's output is {size:,} bytes, over --max-output-bytes {max_output_bytes:,}")
    try:
        doc = parse_json(output)
    except JsonProblem as exc:
        raise InvalidOutput(f"the adapter's output is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise InvalidOutput(f"the adapter's output is a JSON {type(doc).__name__}, not a SARIF log object")
    doc = canonicalize(doc)
    n = count_results(doc)
    if n > max_results:
        raise OutputTooLarge(f"the adapter produced {n:,} results, over --max-results {max_results:,}")
    stamp(doc, prov)
    between()
    found = problems(doc)
    errors = [p for p in found if p.severity == "error"]
    if errors:
        # the warnings too: an output that fails often has inconsistencies that explain it
        warnings = [p for p in found if p.severity != "error"]
        shown = "\n  ".join(str(p) for p in errors[:10] + warnings[:5])
        more = f"\n  … and {len(errors) - 10} more error(s)" if len(errors) > 10 else ""
        raise InvalidOutput(f"the adapter's output is not valid SARIF 2.1.0 ({len(errors)} error(s)):\n  {shown}{more}", errors)
    between()
    return dumps(doc), doc, found
