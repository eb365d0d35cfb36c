"""Helpers shared by Sandboy's guest adapters.

This module runs INSIDE the WebAssembly component (guest CPython, no WASI) and
also natively (tests, benchmark), so it imports only the standard library and
never `wit_world`. Adapters are pure functions `convert(GuestInput) -> dict`;
`app.py` in each adapter directory is the thin glue to the WIT export.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import quote

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
SRCROOT = "%SRCROOT%"

# A prefix the host recognises in an `err` so it can report memory exhaustion
# distinctly (the host itself only sees an `unreachable` trap otherwise).
MEMORY_EXHAUSTED = "sandboy:memory-exhausted:"


class AdapterError(Exception):
    """The input cannot be converted; the message is shown to the user."""


@dataclass
class GuestInput:
    """Plain-Python view of the WIT `raw-input` (bytes already recovered)."""

    tool: str
    artifacts: dict[str, str] = field(default_factory=dict)
    stdout: str | None = None
    stderr: str | None = None
    options: dict[str, str] = field(default_factory=dict)

    def primary(self) -> tuple[str, str]:
        """The one report to convert: the only artifact, else stdout."""
        if len(self.artifacts) == 1:
            return next(iter(self.artifacts.items()))
        if not self.artifacts and self.stdout is not None:
            return "stdout", self.stdout
        if not self.artifacts:
            raise AdapterError("no input: pass the report with --artifact NAME=PATH or --stdout-file PATH")
        names = ", ".join(sorted(self.artifacts))
        raise AdapterError(f"expected exactly one artifact, got {len(self.artifacts)} ({names})")


def decode_text(encoding: str, data: str, name: str = "input") -> str:
    """Undo the WIT byte convention: latin1 payloads carry raw bytes one per code point.

    Reports are JSON, which must be UTF-8: a non-UTF-8 payload is reported, not guessed at.
    """
    if encoding == "utf8":
        return data
    raw = data.encode("latin-1")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AdapterError(
            f"{name}: not valid UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start}); "
            "JSON reports must be UTF-8 — re-run the tool with a UTF-8 locale"
        ) from None


def _refuse_constant(name: str) -> Any:
    raise AdapterError(f"non-standard JSON constant {name} is not allowed")


def _finite_float(text: str) -> float:
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise AdapterError(f"number {text[:40]} does not fit a double (JSON numbers must be finite)")
    return value


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


def load_json(name: str, text: str) -> Any:
    """The JSON reading rule, the same as the host's `sandboy.audit.sarif.parse_json` (docs/audit.md,
    "Reading JSON"; tests/audit/test_json_rule.py holds them to it): one leading UTF-8 BOM is
    skipped (BinSkim and other Windows tools write one); strict JSON otherwise — no NaN/Infinity,
    no number beyond a double, no lone surrogate escapes, no comments; a clear message on failure."""
    if text.startswith("\ufeff"):
        text = text[1:]
    try:
        doc = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
        if "\\ud" in text or "\\uD" in text:  # only an escape can spell a lone surrogate
            bad = _lone_surrogate(doc)
            if bad is not None:
                raise AdapterError(f"a string holds a lone surrogate escape ({ascii(bad[:40])}): not Unicode "
                                   "text (RFC 8259 section 8.2); fix the producer")
        return doc
    except json.JSONDecodeError as exc:
        hint = ""
        if text[exc.pos : exc.pos + 2] in ("//", "/*"):
            hint = " (comments are not JSON: remove them or fix the producer)"
        raise AdapterError(
            f"{name}: not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}{hint}"
        ) from None
    except RecursionError:
        raise AdapterError(f"{name}: JSON nested too deeply") from None
    except AdapterError as exc:
        raise AdapterError(f"{name}: {exc}") from None
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise AdapterError(f"{name}: not usable JSON: {str(exc)[:200]}") from None


def expect(value: Any, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise AdapterError(f"{where}: expected {names}, got {type(value).__name__}")
    return value


def as_int(value: Any, default: int = 1) -> int:
    """SARIF lines/columns are >= 1; tools write 0 or -1 for 'unknown'."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return default
    n = int(value)
    return n if n >= 1 else default


def artifact_location(path: str) -> dict[str, Any]:
    """A URI reference for a tool-reported path: relative paths under %SRCROOT%."""
    if path.startswith("\\\\") or (len(path) > 2 and path[0].isascii() and path[0].isalpha() and path[1] == ":"
                                   and path[2] in "\\/"):
        # a Windows path (`C:\a\b.cs`, `\\server\share\f`): its backslashes are separators. Elsewhere
        # a backslash is a character of a Linux file name: read as `/`, the findings in a
        # repository's `app\views.py` were shown on `app/views.py`, another file (its line hashes
        # too) — a reviewer dismissed the alert on the clean file (redinput12). Percent-encoded.
        path = path.replace("\\", "/")
    if path.startswith("file:"):
        return {"uri": quote(path, safe="/:@!$&'()*+,;=-._~%")}
    if path.startswith("/") or (len(path) > 1 and path[1] == ":"):
        return {"uri": "file://" + ("" if path.startswith("/") else "/") + quote(path, safe="/:@!$&'()*+,;=-._~")}
    while path.startswith("./"):
        path = path[2:]
    return {"uri": quote(path, safe="/@!$&'()*+,;=-._~"), "uriBaseId": SRCROOT}


def region(start_line: Any, start_column: Any = None, end_line: Any = None, end_column: Any = None) -> dict[str, int]:
    out = {"startLine": as_int(start_line)}
    if start_column is not None and as_int(start_column, 0):
        out["startColumn"] = as_int(start_column)
    if end_line is not None and as_int(end_line, 0) >= out["startLine"]:
        out["endLine"] = as_int(end_line)
    if end_column is not None and as_int(end_column, 0):
        if out.get("endLine", out["startLine"]) > out["startLine"] or as_int(end_column) > out.get("startColumn", 0):
            out["endColumn"] = as_int(end_column)
    return out


def physical_location(path: str, reg: dict[str, int] | None = None) -> dict[str, Any]:
    loc: dict[str, Any] = {"artifactLocation": artifact_location(path)}
    if reg:
        loc["region"] = reg
    return {"physicalLocation": loc}


# RFC 3986 URI-reference (the schema's `format: uri-reference`, which jsonschema-rs does not check
# under draft-04). The host has its own copy (sandboy.audit.sarif): guest code never crosses over.
# (Moved here from the passthrough's sarif_v1.py in session 14: helpUri needs it in every adapter.)
_PCT = r"%[0-9A-Fa-f]{2}"
_PCHAR = rf"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@]|{_PCT})"
_PCHAR_NC = rf"(?:[A-Za-z0-9\-._~!$&'()*+,;=@]|{_PCT})"
_AUTHORITY = (rf"(?:(?:[A-Za-z0-9\-._~!$&'()*+,;=:]|{_PCT})*@)?"
              rf"(?:\[[0-9A-Fa-f:.]+\]|\[v[0-9A-Fa-f]+\.[A-Za-z0-9\-._~!$&'()*+,;=:]+\]|(?:[A-Za-z0-9\-._~!$&'()*+,;=]|{_PCT})*)"
              r"(?::\d*)?")
_TAIL = rf"(?:\?(?:{_PCHAR}|[/?])*)?(?:#(?:{_PCHAR}|[/?])*)?"
_URI_REFERENCE = re.compile(
    rf"^(?:[A-Za-z][A-Za-z0-9+.-]*:(?://{_AUTHORITY}(?:/{_PCHAR}*)*|/?(?:{_PCHAR}+(?:/{_PCHAR}*)*)?)"
    rf"|//{_AUTHORITY}(?:/{_PCHAR}*)*|/(?:{_PCHAR}+(?:/{_PCHAR}*)*)?|{_PCHAR_NC}+(?:/{_PCHAR}*)*|){_TAIL}$"
)


def is_uri_reference(text: str) -> bool:
    return _URI_REFERENCE.match(text) is not None

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def help_uri(rule: dict[str, Any], text: str, kept_as: str) -> None:
    """Set `rule["helpUri"]` to a tool's documentation link `text` when it is an absolute URI
    (the schema's `format: uri`); otherwise keep it as `rule.properties[kept_as]`. One rule
    whose link was not a URI (a Semgrep rule's `source: wiki/rule-7`, a Bandit plugin's
    `more_info`) made the whole log fail validation: every result of the run was lost (redinput14)."""
    if _SCHEME.match(text) and is_uri_reference(text):
        rule["helpUri"] = text
    else:
        rule.setdefault("properties", {})[kept_as] = text


class RuleTable:
    """Deduplicated rules in first-seen order, giving each result its ruleIndex."""

    def __init__(self) -> None:
        self.rules: list[dict[str, Any]] = []
        self._index: dict[str, int] = {}

    def index(self, rule_id: str, make: Callable[[], dict[str, Any]]) -> int:
        found = self._index.get(rule_id)
        if found is None:
            rule = make()
            rule["id"] = rule_id
            found = self._index[rule_id] = len(self.rules)
            self.rules.append(rule)
        return found


def object_report(
    inp: GuestInput,
    producer: str,
    make_result: Callable[[dict[str, Any], RuleTable, str], dict[str, Any]],
    make_note: Callable[[dict[str, Any]], dict[str, Any]],
) -> tuple[dict[str, Any], list[dict[str, Any]], RuleTable, dict[str, Any]]:
    """For tools whose JSON report is an object with `results` and `errors` lists (Bandit, Semgrep).

    Returns the report, the SARIF results, their rules and one invocation whose
    notifications carry the tool's own errors (so they are not silently dropped).
    """
    name, text = inp.primary()
    report = expect(load_json(name, text), dict, f"{name}: top level ({producer} writes an object)")
    items = expect(report.get("results", []), list, f"{name}: results")
    rules = RuleTable()
    results = [make_result(expect(it, dict, f"{name}: results[{i}]"), rules, f"{name}: results[{i}]") for i, it in enumerate(items)]
    invocation: dict[str, Any] = {"executionSuccessful": True}
    notes = [make_note(e) for e in report.get("errors") or [] if isinstance(e, dict)]
    if notes:
        invocation["toolExecutionNotifications"] = notes
    return report, results, rules, invocation


def sarif_log(driver: dict[str, Any], results: list[dict[str, Any]], **run_extra: Any) -> dict[str, Any]:
    run: dict[str, Any] = {"tool": {"driver": driver}, "results": results}
    run["originalUriBaseIds"] = {SRCROOT: {"description": {"text": "The root of the analysed source tree."}}}
    run.update(run_extra)
    return {"$schema": SARIF_SCHEMA, "version": SARIF_VERSION, "runs": [run]}


def convert_entry(convert: Callable[[GuestInput], dict[str, Any]], inp: GuestInput) -> str:
    """Run an adapter and serialise its log. Expected failures become AdapterError."""
    try:
        log = convert(inp)
    except RecursionError:
        raise AdapterError("input nested too deeply") from None
    except MemoryError:
        raise AdapterError(MEMORY_EXHAUSTED + " the adapter ran out of memory") from None
    except (TypeError, KeyError, AttributeError, ValueError, IndexError) as exc:
        # Hostile or unexpected shapes: a clear refusal beats a trap with no message.
        raise AdapterError(f"input has an unexpected shape ({type(exc).__name__}: {exc})") from None
    try:
        return json.dumps(log, ensure_ascii=False, separators=(",", ":"))
    except MemoryError:
        raise AdapterError(MEMORY_EXHAUSTED + " the adapter ran out of memory serialising") from None
