"""SARIF 1.0.0 -> 2.1.0, keeping what the SARIF SDK's reference converter keeps.

The field mapping follows microsoft/sarif-sdk's `SarifVersionOneToCurrentVisitor`
(read, not copied) and is written down, field by field, in docs/audit.md
("SARIF 1.0.0 upgrade"). Where this upgrade deliberately differs from the SDK:

* a formatted message gets `text` rendered from the rule's template as well as
  `id` + `arguments` (GitHub code scanning shows only `text`);
* `analysisTarget` is kept as `result.analysisTarget` whenever it names another
  file than `resultFile`; nested-file URIs (`outer.zip#/inner.txt`) become
  artifacts with `parentIndex` even when the v1 `files` dictionary omits them;
* every URI that comes out is a valid RFC 3986 reference (v1 logs carry raw
  Windows paths, spaces, `file://c:/...` and `#BASE#path` keys);
* v1 fields with no 2.1.0 home are kept under `properties.sarifV1` of the
  object that held them instead of being dropped.

Runs inside the WebAssembly guest: standard library only, and every input
field is type-checked (a v1 log is untrusted and often hand-written).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any
from urllib.parse import quote

from sandboy_guest import is_uri_reference

V1_LEVELS = {"error": ("error", None), "warning": ("warning", None), "note": ("note", None),
             "pass": ("none", "pass"), "notApplicable": ("none", "notApplicable")}
V1_BASELINE = {"new": "new", "existing": "unchanged", "absent": "absent"}
V1_NOTIFICATION_LEVELS = {"error", "warning", "note"}
V1_IMPORTANCE = {"essential", "important", "unimportant"}
# v1 annotatedCodeLocation.kind -> 2.1.0 threadFlowLocation.kinds (open strings; well-known names where one exists)
V1_FLOW_KINDS = {"call": ["call"], "callReturn": ["return"], "functionEnter": ["enter", "function"],
                 "functionExit": ["exit", "function"], "functionReturn": ["return", "function"],
                 "branch": ["branch"], "declaration": ["declaration"], "assignment": ["assignment"],
                 "alias": ["alias"], "continuation": ["continuation"], "usage": ["usage"]}
# v1 hash algorithm names -> the IANA names 2.1.0 recommends (3.24.11); others are kept lower-cased
V1_HASHES = {"sha1": "sha-1", "sha3": "sha-3", "sha224": "sha-224", "sha256": "sha-256", "sha384": "sha-384",
             "sha512": "sha-512", "md5": "md5", "md4": "md4", "md2": "md2"}
# schema's guid pattern (a non-conforming v1 id would make the whole log schema-invalid)
_GUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-5][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}$")
_DOTTED_QUAD = re.compile(r"^\d+\.\d+\.\d+\.\d+$")
_DATE_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")
# .NET composite format items: {0}, {0,10}, {0:N2}; {{ and }} are literal braces (same in 2.1.0, 3.11.5)
_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{(\d+)(?:,-?\d+)?(?::[^{}]*)?\}")
_TEXTUAL_MIME = re.compile(r"^(text/|application/(json|xml|javascript|x-sh)\b)|\+(xml|json)$")

# RFC 3986's grammar (is_uri_reference) is sandboy_guest's, shared with the other adapters.


def uri_reference(text: str) -> str:
    """A v1 URI as a valid RFC 3986 reference; valid ones are kept byte for byte."""
    if re.match(r"^file://[A-Za-z]:", text):        # file://c:/a.zip: the drive is a path, not a host
        text = "file:///" + text[len("file://"):]
    if is_uri_reference(text):
        return text
    fixed = text.replace("\\", "/")
    if re.match(r"^[A-Za-z]:/", fixed):           # C:/src/a.cs: a Windows path, not scheme "C"
        fixed = "file:///" + fixed
    elif re.match(r"^//[^/]", fixed):               # //server/share: UNC
        fixed = "file:" + fixed
    head, sep, fragment = fixed.partition("#")
    safe = "/:@!$&'()*+,;=-._~%?"
    # surrogatepass: a lone surrogate (legal in JSON text) is still percent-encoded, not a crash
    fixed = quote(head, safe=safe, errors="surrogatepass") + sep + quote(fragment, safe=safe, errors="surrogatepass")
    fixed = re.sub(r"%(?![0-9A-Fa-f]{2})", "%25", fixed)
    if not is_uri_reference(fixed):                 # e.g. ":" in a first relative segment
        fixed = "./" + fixed
    return fixed


def _s(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Any, minimum: int = 0) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= minimum else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _text(value: Any) -> dict[str, str] | None:
    return {"text": value} if isinstance(value, str) else None


def _props(node: dict[str, Any], extra: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The v1 property bag, plus v1 fields that have no 2.1.0 home under "sarifV1"."""
    props = dict(node["properties"]) if isinstance(node.get("properties"), dict) else {}
    tags = props.get("tags")
    if "tags" in props and not (isinstance(tags, list) and all(isinstance(t, str) for t in tags) and len(set(tags)) == len(tags)):
        # 2.1.0 tags are unique strings (3.8.2); anything else would fail the whole log
        extra = {**(extra or {}), "tags": props.pop("tags")}
    if extra:
        kept = {k: v for k, v in extra.items() if v is not None}
        if kept:
            props["sarifV1"] = {**_dict(props.get("sarifV1")), **kept}
    return props or None


def _put(out: dict[str, Any], key: str, value: Any) -> None:
    if value is not None and value != [] and value != {}:
        out[key] = value


def render(template: str, arguments: list[Any]) -> str:
    def one(m: re.Match[str]) -> str:
        if m.group(0) in ("{{", "}}"):
            return m.group(0)[0]
        i = int(m.group(1))
        return str(arguments[i]) if i < len(arguments) else m.group(0)

    return _PLACEHOLDER.sub(one, template)


class RunUpgrade:
    """One v1 run. Indexes (rules, files, logical locations) are computed before results refer to them."""

    def __init__(self, run: dict[str, Any]) -> None:
        self.v1 = run
        self.rules_v1 = {k: _dict(v) for k, v in _dict(run.get("rules")).items()}
        self.rule_index = {key: i for i, key in enumerate(self.rules_v1)}
        self.artifacts: list[dict[str, Any]] = []
        self.artifact_index: dict[str, int] = {}
        self.logical: list[dict[str, Any]] = []
        self.logical_index: dict[str, int] = {}

    # --- locations -----------------------------------------------------------------

    def artifact_location(self, uri: Any, uri_base_id: Any = None) -> dict[str, Any] | None:
        if not isinstance(uri, str):
            return None
        found = self.artifact_index.get(uri)
        if found is None and "#/" in uri and not uri.startswith("#"):
            found = self._nested_artifact(uri)
        if found is not None:
            return {**self.artifacts[found]["location"], "index": found}
        base, rel = _split_base(uri)
        out: dict[str, Any] = {"uri": uri_reference(rel)}
        base = _s(uri_base_id) or base
        if base:
            out["uriBaseId"] = base
        return out

    def _nested_artifact(self, uri: str) -> int:
        """`outer#/inner` (v1's nested-file form): the inner file is an artifact whose parent is `outer`."""
        outer, _, inner = uri.rpartition("#")
        parent = self.artifact_index.get(outer)
        if parent is None:
            parent = self._nested_artifact(outer) if "#/" in outer else self._add_artifact(outer, {"uri": uri_reference(outer)})
        return self._add_artifact(uri, {"uri": uri_reference(inner)}, parent)

    def _add_artifact(self, key: str, location: dict[str, Any], parent: int | None = None) -> int:
        artifact: dict[str, Any] = {"location": location}
        if parent is not None:
            artifact["parentIndex"] = parent
        self.artifact_index[key] = len(self.artifacts)
        self.artifacts.append(artifact)
        return self.artifact_index[key]

    def region(self, reg: Any) -> dict[str, Any] | None:
        reg = _dict(reg)
        out: dict[str, Any] = {}
        for key in ("startLine", "startColumn", "endLine", "endColumn"):
            _put(out, key, _int(reg.get(key), 1))
        # v1 offset/length count bytes (the v1 spec's region); 2.1.0 has byteOffset/byteLength for exactly that
        length = _int(reg.get("length"))
        # v1's offset defaults to 0 (a length alone measures from the start of the file)
        _put(out, "byteOffset", _int(reg.get("offset")) if "offset" in reg else (0 if length is not None else None))
        _put(out, "byteLength", length)
        return out if ("startLine" in out or "byteOffset" in out) else None

    def physical_location(self, phys: Any) -> dict[str, Any] | None:
        phys = _dict(phys)
        art = self.artifact_location(phys.get("uri"), phys.get("uriBaseId"))
        if art is None:
            return None
        out: dict[str, Any] = {"artifactLocation": art}
        _put(out, "region", self.region(phys.get("region")))
        return out

    def logical_reference(self, fqn: Any, key: Any, decorated: Any = None) -> list[dict[str, Any]] | None:
        ref: dict[str, Any] = {}
        _put(ref, "fullyQualifiedName", _s(fqn))
        lookup = _s(key) or _s(fqn)
        if lookup in self.logical_index:
            ref["index"] = self.logical_index[lookup]
            if "fullyQualifiedName" not in ref:
                _put(ref, "fullyQualifiedName", self.logical[ref["index"]].get("fullyQualifiedName"))
        _put(ref, "decoratedName", _s(decorated))
        return [ref] if ref else None

    def location(self, loc: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        _put(out, "physicalLocation", self.physical_location(loc.get("resultFile") or loc.get("analysisTarget")))
        _put(out, "logicalLocations", self.logical_reference(loc.get("fullyQualifiedLogicalName"),
                                                             loc.get("logicalLocationKey"), loc.get("decoratedName")))
        _put(out, "properties", _props(loc))
        return out

    def annotated_location(self, acl: dict[str, Any]) -> dict[str, Any]:
        """v1 annotatedCodeLocation (code-flow steps, relatedLocations) -> 2.1.0 location."""
        out: dict[str, Any] = {}
        _put(out, "id", _int(acl.get("id"), -1))
        phys = self.physical_location(acl.get("physicalLocation"))
        snippet = _s(acl.get("snippet"))
        extra: dict[str, Any] = {}
        if snippet is not None:
            if phys and "region" in phys:
                phys["region"]["snippet"] = {"text": snippet}
            else:
                extra["snippet"] = snippet  # a 2.1.0 snippet lives in a region, and there is none
        _put(out, "physicalLocation", phys)
        _put(out, "message", _text(acl.get("message")))
        _put(out, "logicalLocations", self.logical_reference(acl.get("fullyQualifiedLogicalName"), acl.get("logicalLocationKey")))
        own_uri = _dict(acl.get("physicalLocation")).get("uri")
        annotations = []
        for ann in _list(acl.get("annotations")):
            for place in _list(_dict(ann).get("locations")):
                # 2.1.0 annotations are regions of the location's own file (3.28.6); v1 allowed any file
                if isinstance(place, dict) and place.get("uri") == own_uri and (reg := self.region(place.get("region"))):
                    _put(reg, "message", _text(_dict(ann).get("message")))
                    annotations.append(reg)
                elif isinstance(place, dict):
                    extra.setdefault("annotations", []).append(ann)
        _put(out, "annotations", _unique(annotations))
        _put(out, "properties", _props(acl, extra))
        return out

    # --- result parts ---------------------------------------------------------------

    def code_flow(self, flow: dict[str, Any]) -> dict[str, Any]:
        threads: dict[int, dict[str, Any]] = {}
        nesting = 0
        for order, step in enumerate((s for s in _list(flow.get("locations")) if isinstance(s, dict)), start=1):
            tid = _int(step.get("threadId"), -(1 << 62)) or 0
            thread = threads.setdefault(tid, {"id": str(tid), "locations": []})
            tfl: dict[str, Any] = {"location": self.annotated_location(step), "executionOrder": order, "nestingLevel": nesting}
            _put(tfl, "module", _s(step.get("module")))
            state = {k: {"text": v} for k, v in _dict(step.get("state")).items() if isinstance(v, str)}
            _put(tfl, "state", state)
            importance = step["importance"] if _s(step.get("importance")) in V1_IMPORTANCE else None
            _put(tfl, "importance", importance or ("essential" if step.get("essential") is True else None))
            kind = _s(step.get("kind"))
            kinds = list(V1_FLOW_KINDS.get(kind, [kind] if kind else []))
            if isinstance(step.get("taintKind"), str):
                kinds += ["taint", step["taintKind"]]
            _put(tfl, "kinds", list(dict.fromkeys(kinds)))
            extra = {k: step.get(k) for k in ("step", "target", "targetKey", "values")}
            _put(tfl, "properties", _props({}, extra))
            thread["locations"].append(tfl)
            if kind == "call":
                nesting += 1
            elif kind == "callReturn":
                nesting = max(0, nesting - 1)
        out: dict[str, Any] = {"threadFlows": list(threads.values())}
        _put(out, "message", _text(flow.get("message")))
        _put(out, "properties", _props(flow))
        return out

    def stack(self, stack: dict[str, Any]) -> dict[str, Any]:
        frames = []
        for frame in _list(stack.get("frames")):
            frame = _dict(frame)
            loc: dict[str, Any] = {}
            _put(loc, "message", _text(frame.get("message")))
            art = self.artifact_location(frame.get("uri"), frame.get("uriBaseId"))
            if art:
                phys: dict[str, Any] = {"artifactLocation": art}
                if _int(frame.get("line"), 1):
                    reg = {"startLine": frame["line"]}
                    _put(reg, "startColumn", _int(frame.get("column"), 1))
                    phys["region"] = reg
                loc["physicalLocation"] = phys
            _put(loc, "logicalLocations", self.logical_reference(frame.get("fullyQualifiedLogicalName"), frame.get("logicalLocationKey")))
            out: dict[str, Any] = {"location": loc} if loc else {}
            _put(out, "module", _s(frame.get("module")))
            _put(out, "threadId", _int(frame.get("threadId"), -(1 << 62)))
            _put(out, "parameters", [p for p in _list(frame.get("parameters")) if isinstance(p, str)])
            # v1 address/offset (function address + offset into it) have no exact 2.1.0 form; the SDK drops them
            _put(out, "properties", _props(frame, {"address": frame.get("address"), "offset": frame.get("offset")}))
            frames.append(out)
        out = {"frames": frames}
        _put(out, "message", _text(stack.get("message")))
        _put(out, "properties", _props(stack))
        return out

    def fix(self, fix: dict[str, Any]) -> dict[str, Any] | None:
        changes = []
        for change in _list(fix.get("fileChanges")):
            change = _dict(change)
            art = self.artifact_location(change.get("uri"), change.get("uriBaseId"))
            replacements = []
            for rep in _list(change.get("replacements")):
                rep = _dict(rep)
                if _int(rep.get("offset")) is None:
                    continue
                out: dict[str, Any] = {"deletedRegion": {"byteOffset": rep["offset"], "byteLength": _int(rep.get("deletedLength")) or 0}}
                if isinstance(rep.get("insertedBytes"), str):
                    out["insertedContent"] = {"binary": rep["insertedBytes"]}  # v1 inserted bytes are base64 already
                replacements.append(out)
            if art and replacements:
                changes.append({"artifactLocation": art, "replacements": replacements})
        if not changes:
            return None
        out = {"artifactChanges": _unique(changes)}
        _put(out, "description", _text(fix.get("description")))
        return out

    # --- result ----------------------------------------------------------------------

    def rule_for(self, res: dict[str, Any]) -> tuple[str | None, int | None]:
        """(ruleId, ruleIndex): ruleKey names the entry of the v1 rules dictionary."""
        key = _s(res.get("ruleKey")) or _s(res.get("ruleId"))
        index = self.rule_index.get(key) if key is not None else None
        rule_id = _s(res.get("ruleId"))
        if rule_id is None and index is not None:
            rule_id = _s(self.rules_v1[key].get("id")) or key
        if index is None and rule_id is not None:
            # a dictionary keyed by something else: the one rule whose id this is (never a guess among several)
            same = [i for i, rule in enumerate(self.rules_v1.values()) if rule.get("id") == rule_id]
            index = same[0] if len(same) == 1 else None
        return rule_id, index

    def message(self, res: dict[str, Any], rule_key: str | None, rule_id: str | None) -> dict[str, Any]:
        text = _s(res.get("message"))
        formatted = _dict(res.get("formattedRuleMessage"))
        out: dict[str, Any] = {}
        if formatted:
            fid = _s(formatted.get("formatId"))
            args = [a if isinstance(a, str) else str(a) for a in _list(formatted.get("arguments"))]
            template = _s(_dict(self.rules_v1.get(rule_key or "", {}).get("messageFormats")).get(fid or ""))
            if text is None and template is not None:
                text = render(template, args)
            elif text is None:
                # no template to render: the arguments are all there is; id + arguments stay exact below
                text = f"{fid or rule_id or 'result'}: " + ", ".join(args) if args else (fid or rule_id or "result")
            _put(out, "id", fid)
            if args:
                out["arguments"] = args
        out = {"text": text if text is not None else (rule_id or "result"), **out}
        return out

    def result(self, res: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        rule_id, index = self.rule_for(res)
        _put(out, "ruleId", rule_id)
        _put(out, "ruleIndex", index)
        level, kind = V1_LEVELS.get(_s(res.get("level")) or "warning", ("warning", None))
        out["level"] = level
        _put(out, "kind", kind)
        key = _s(res.get("ruleKey")) or _s(res.get("ruleId"))
        out["message"] = self.message(res, key, rule_id)
        v1_locations = [loc for loc in _list(res.get("locations")) if isinstance(loc, dict)]
        locations = [loc for loc in (self.location(v) for v in v1_locations) if loc]
        for v1 in v1_locations:
            target, file = _dict(v1.get("analysisTarget")), _dict(v1.get("resultFile"))
            if file and target.get("uri") and target.get("uri") != file.get("uri"):
                _put(out, "analysisTarget", self.artifact_location(target.get("uri"), target.get("uriBaseId")))
                break
        extra: dict[str, Any] = {}
        snippet = _s(res.get("snippet"))
        if snippet is not None:
            region = _dict(_dict(locations[0].get("physicalLocation") if locations else None).get("region"))
            if region:
                region["snippet"] = {"text": snippet}
            else:
                extra["snippet"] = snippet  # 2.1.0 keeps a snippet in a region; this result has none
        _put(out, "locations", locations)
        _put(out, "relatedLocations", _unique([self.annotated_location(a) for a in _list(res.get("relatedLocations")) if isinstance(a, dict)]))
        flows = [self.code_flow(f) for f in _list(res.get("codeFlows")) if isinstance(f, dict)]
        _put(out, "codeFlows", [f for f in flows if f["threadFlows"]])
        if len(out.get("codeFlows", [])) < len(flows):
            extra["emptyCodeFlows"] = [f for f in flows if not f["threadFlows"]]  # 2.1.0 needs >= 1 step
        _put(out, "stacks", _unique([self.stack(s) for s in _list(res.get("stacks")) if isinstance(s, dict)]))
        _put(out, "fixes", _unique([f for f in (self.fix(x) for x in _list(res.get("fixes")) if isinstance(x, dict)) if f]))
        _put(out, "suppressions", _suppressions(res.get("suppressionStates")))
        _put(out, "baselineState", V1_BASELINE.get(_s(res.get("baselineState")) or ""))
        rid = _s(res.get("id"))
        if rid and _GUID.match(rid.strip("{}")):
            out["guid"] = rid.strip("{}")
        elif rid:
            extra["id"] = rid
        if isinstance(res.get("toolFingerprintContribution"), str):
            out["partialFingerprints"] = {"toolFingerprintContribution/v1": res["toolFingerprintContribution"]}
        known = {"ruleId", "ruleKey", "level", "message", "formattedRuleMessage", "locations", "snippet", "id",
                 "toolFingerprintContribution", "stacks", "codeFlows", "relatedLocations", "suppressionStates",
                 "baselineState", "fixes", "properties"}
        extra.update({k: v for k, v in res.items() if k not in known})
        _put(out, "properties", _props(res, extra))
        return out

    # --- run-level -------------------------------------------------------------------

    def rule(self, key: str, rule: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"id": _s(rule.get("id")) or key}
        _put(out, "name", _s(rule.get("name")))
        _put(out, "shortDescription", _text(rule.get("shortDescription")))
        _put(out, "fullDescription", _text(rule.get("fullDescription")))
        _put(out, "messageStrings", {k: {"text": v} for k, v in _dict(rule.get("messageFormats")).items() if isinstance(v, str)})
        help_uri = _s(rule.get("helpUri"))
        extra: dict[str, Any] = {}
        if help_uri and re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", help_uri):
            out["helpUri"] = uri_reference(help_uri)
        elif help_uri:
            extra["helpUri"] = help_uri  # 2.1.0 helpUri must be absolute (format: uri)
        if out["id"] != key:
            # the v1 key that disambiguated rules sharing an id; it also keeps such rules distinct
            # (2.1.0's rules array must not hold two identical objects)
            extra["ruleKey"] = key
        props = _props(rule, extra) or {}
        config: dict[str, Any] = {}
        if _s(rule.get("defaultLevel")) in V1_LEVELS:
            config["level"] = V1_LEVELS[rule["defaultLevel"]][0]
        if rule.get("configuration") in ("enabled", "disabled"):
            config["enabled"] = rule["configuration"] == "enabled"
        elif isinstance(props.get("isEnabledByDefault"), bool):  # Roslyn's v1 spelling
            config["enabled"] = props.pop("isEnabledByDefault")
        _put(out, "defaultConfiguration", config)
        _put(out, "properties", props)
        return out

    def tool(self) -> dict[str, Any]:
        tool = _dict(self.v1.get("tool"))
        driver: dict[str, Any] = {"name": _s(tool.get("name")) or _s(tool.get("fullName")) or "unknown"}
        for key in ("fullName", "version", "semanticVersion"):
            _put(driver, key, _s(tool.get(key)))
        _put(driver, "language", _language(tool.get("language")))
        file_version = _s(tool.get("fileVersion"))
        extra: dict[str, Any] = {"sarifLoggerVersion": _s(tool.get("sarifLoggerVersion"))}
        if _s(tool.get("language")) and "language" not in driver:
            extra["language"] = tool["language"]  # not a 2.1.0 language tag (pattern ll or ll-CC)
        if file_version and _DOTTED_QUAD.match(file_version):
            driver["dottedQuadFileVersion"] = file_version
        else:
            extra["fileVersion"] = file_version
        rules = [self.rule(k, v) for k, v in self.rules_v1.items()]
        _put(driver, "rules", rules)
        _put(driver, "properties", _props(tool, extra))
        return {"driver": driver}

    def files(self) -> None:
        files = {k: _dict(v) for k, v in _dict(self.v1.get("files")).items()}
        for i, key in enumerate(files):
            self.artifact_index[key] = i
            self.artifacts.append({})
        looping = _on_parent_cycles(files)
        for key, data in files.items():
            parent_key = _s(data.get("parentKey"))
            if key in looping:
                parent_key = None  # kept as properties.sarifV1.parentKey below (see _on_parent_cycles)
            if parent_key is not None and parent_key in files:
                # relative to the parent: the key's part after `parent#` (the SDK's choice), else `uri`
                rel = key[len(parent_key):].lstrip("#") if key.startswith(parent_key) else (_s(data.get("uri")) or key)
                location: dict[str, Any] = {"uri": uri_reference(rel)}
            else:
                base, rel = _split_base(key)
                location = {"uri": uri_reference(rel)}
                _put(location, "uriBaseId", _s(data.get("uriBaseId")) or base)
            artifact: dict[str, Any] = {"location": location}
            if parent_key is not None and parent_key in files:
                artifact["parentIndex"] = self.artifact_index[parent_key]
            _put(artifact, "offset", _int(data.get("offset")))
            _put(artifact, "length", _int(data.get("length")))
            mime = _s(data.get("mimeType"))
            _put(artifact, "mimeType", mime if mime and re.match(r"^[^/]+/.+$", mime) else None)
            _put(artifact, "contents", _contents(data.get("contents"), mime))
            hashes = {}
            for h in _list(data.get("hashes")):
                alg, value = _s(_dict(h).get("algorithm")), _s(_dict(h).get("value"))
                if alg and value:
                    hashes[V1_HASHES.get(alg.lower(), alg.lower())] = value
            _put(artifact, "hashes", hashes)
            _put(artifact, "properties", _props(data, {"parentKey": data.get("parentKey")} if key in looping else None))
            self.artifacts[self.artifact_index[key]] = artifact

    def logical_locations(self) -> None:
        table = {k: _dict(v) for k, v in _dict(self.v1.get("logicalLocations")).items()}
        if not table:
            return
        # v1 keys are usually the fully qualified name; where a key was disambiguated ("a.b-1"), the
        # locations that use it say the real name, and they alone carry the decorated name.
        full_names: dict[str, str] = {}
        decorated: dict[str, str] = {}
        users = [self.v1.get(k) for k in ("results", "toolNotifications", "configurationNotifications")]
        for node in _nodes(users):
            key, fqn = _s(node.get("logicalLocationKey")), _s(node.get("fullyQualifiedLogicalName"))
            if key and fqn and key != fqn:
                full_names[key] = fqn
            if _s(node.get("decoratedName")) and (key or fqn):
                decorated[key or fqn] = node["decoratedName"]  # type: ignore[index]
        looping = _on_parent_cycles(table)
        for key in _parents_first(table):
            self.logical_index[key] = len(self.logical_index)
        for key in self.logical_index:
            data = table[key]
            fqn = full_names.get(key, key)
            out: dict[str, Any] = {}
            _put(out, "name", _s(data.get("name")))
            if fqn != out.get("name"):
                out["fullyQualifiedName"] = fqn
            _put(out, "decoratedName", decorated.get(key))
            _put(out, "kind", _s(data.get("kind")))
            if key in looping:  # (see _on_parent_cycles)
                _put(out, "properties", {"sarifV1": {"parentKey": data.get("parentKey")}})
            else:
                _put(out, "parentIndex", self.logical_index.get(_s(data.get("parentKey")) or ""))
            self.logical.append(out)

    def notification(self, note: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"message": {"text": _s(note.get("message")) or _s(note.get("id")) or "notification"}}
        _put(out, "level", note["level"] if _s(note.get("level")) in V1_NOTIFICATION_LEVELS else None)
        _put(out, "descriptor", {"id": note["id"]} if _s(note.get("id")) else None)
        rule_id, index = self.rule_for(note)
        rule_ref: dict[str, Any] = {}
        _put(rule_ref, "id", rule_id)
        _put(rule_ref, "index", index)
        _put(out, "associatedRule", rule_ref)
        phys = self.physical_location(note.get("physicalLocation"))
        _put(out, "locations", [{"physicalLocation": phys}] if phys else None)
        _put(out, "threadId", _int(note.get("threadId"), -(1 << 62)))
        time = _s(note.get("time"))
        _put(out, "timeUtc", time if time and _DATE_TIME.match(time) else None)
        _put(out, "exception", self.exception(note.get("exception")))
        _put(out, "properties", _props(note, {"time": time if time and not _DATE_TIME.match(time) else None}))
        return out

    def exception(self, exc: Any, depth: int = 0) -> dict[str, Any] | None:
        if not isinstance(exc, dict) or depth > 50:
            return None
        out: dict[str, Any] = {}
        _put(out, "kind", _s(exc.get("kind")))
        _put(out, "message", _s(exc.get("message")))  # a plain string in both versions
        _put(out, "stack", self.stack(exc["stack"]) if isinstance(exc.get("stack"), dict) else None)
        _put(out, "innerExceptions", [e for e in (self.exception(i, depth + 1) for i in _list(exc.get("innerExceptions"))) if e])
        return out

    def invocations(self) -> list[dict[str, Any]] | None:
        inv = self.v1.get("invocation")
        tool_notes = [self.notification(n) for n in _list(self.v1.get("toolNotifications")) if isinstance(n, dict)]
        config_notes = [self.notification(n) for n in _list(self.v1.get("configurationNotifications")) if isinstance(n, dict)]
        if not isinstance(inv, dict) and not tool_notes and not config_notes:
            return None
        inv = _dict(inv)
        # v1 records no outcome; like the SDK, a recorded invocation is taken as having run
        out: dict[str, Any] = {"executionSuccessful": True}
        _put(out, "commandLine", _s(inv.get("commandLine")))
        extra: dict[str, Any] = {}
        for v1_key, key in (("startTime", "startTimeUtc"), ("endTime", "endTimeUtc")):
            value = _s(inv.get(v1_key))
            if value and _DATE_TIME.match(value):
                out[key] = value
            elif value:
                extra[v1_key] = value
        for key in ("machine", "account"):
            _put(out, key, _s(inv.get(key)))
        _put(out, "processId", _int(inv.get("processId")))
        if _s(inv.get("fileName")):
            out["executableLocation"] = {"uri": uri_reference(inv["fileName"])}
        if _s(inv.get("workingDirectory")):
            out["workingDirectory"] = {"uri": uri_reference(inv["workingDirectory"])}
        _put(out, "environmentVariables", {k: v for k, v in _dict(inv.get("environmentVariables")).items() if isinstance(v, str)})
        responses = []
        for name, contents in _dict(inv.get("responseFiles")).items():
            loc = self.artifact_location(name)
            if loc is None:
                continue
            if isinstance(contents, str) and contents:
                if "index" not in loc:
                    loc["index"] = self._add_artifact(name, dict(loc))
                self.artifacts[loc["index"]]["contents"] = {"text": contents}
            responses.append(loc)
        _put(out, "responseFiles", _unique(responses))
        _put(out, "toolExecutionNotifications", tool_notes)
        _put(out, "toolConfigurationNotifications", config_notes)
        _put(out, "properties", _props(inv, extra))
        return [out]

    def upgrade(self) -> dict[str, Any]:
        self.files()
        self.logical_locations()
        out: dict[str, Any] = {"tool": self.tool()}
        _put(out, "invocations", self.invocations())
        results = [self.result(r) for r in _list(self.v1.get("results")) if isinstance(r, dict)]
        # after results: nested URIs they name add artifacts
        _put(out, "artifacts", _distinct(self.artifacts, list(self.artifact_index)))
        _put(out, "logicalLocations", _distinct(self.logical, list(self.logical_index)))
        out["results"] = results
        _put(out, "language", _language(_dict(self.v1.get("tool")).get("language")))
        out["columnKind"] = "utf16CodeUnits"  # v1 columns count UTF-16 code units (as the SDK records)
        extra: dict[str, Any] = {"architecture": _s(self.v1.get("architecture"))}
        run_id, stable = _s(self.v1.get("id")), _s(self.v1.get("stableId"))
        details: dict[str, Any] = {}
        if run_id and _GUID.match(run_id.strip("{}")):
            details["guid"] = run_id.strip("{}")
            run_id = None
        if stable is not None or run_id:
            # 2.1.0 automationDetails.id is "category/instance" (3.17.3): stableId is the category
            details["id"] = f"{stable}/{run_id or ''}" if stable is not None else run_id
        _put(out, "automationDetails", details)
        automation = _s(self.v1.get("automationId"))
        _put(out, "runAggregates", [{"id": automation + "/"}] if automation else None)
        baseline = _s(self.v1.get("baselineId"))
        if baseline and _GUID.match(baseline.strip("{}")):
            out["baselineGuid"] = baseline.strip("{}")
        elif baseline:
            extra["baselineId"] = baseline  # 2.1.0 only has a GUID for it
        _put(out, "properties", _props(self.v1, extra))
        return out


def _canonical(node: Any) -> str:
    return json.dumps(node, sort_keys=True)


def _unique(items: list[Any]) -> list[Any]:
    """Exact duplicates dropped: 2.1.0 makes these arrays `uniqueItems` (a repeat would fail the whole log)."""
    seen: set[str] = set()
    out = []
    for item in items:
        text = _canonical(item)
        if text not in seen:
            seen.add(text)
            out.append(item)
    return out


def _distinct(items: list[dict[str, Any]], keys: list[str]) -> list[dict[str, Any]]:
    """Indexed arrays cannot drop a repeat (indexes point into them): a repeat keeps its v1 key instead."""
    seen: set[str] = set()
    for item, key in zip(items, keys):
        text = _canonical(item)
        if text in seen:
            item.setdefault("properties", {}).setdefault("sarifV1", {})["key"] = key
            text = _canonical(item)
        seen.add(text)
    return items


def _on_parent_cycles(table: dict[str, dict[str, Any]]) -> set[str]:
    """The keys whose parentKey chain comes back to them (`x` -> `x`, `x` -> `y` -> `x`). A v1 log
    may say so; written as 2.1.0 parentIndex values such a chain makes an artifact (or logical
    location) its own ancestor, and a consumer that walks up the parents to build a nested name
    (`outer.zip#/inner`, `Ns.Type.member`) loops for ever (redinput14). Those keys get no
    parentIndex; their parentKey is kept under properties.sarifV1. One pass: each key is walked
    once (a chain of n keys is n steps, not n**2)."""
    done: set[str] = set()
    looping: set[str] = set()
    for start in table:
        path: dict[str, None] = {}
        node: str | None = start
        while node is not None and node in table and node not in done and node not in path:
            path[node] = None
            node = _s(table[node].get("parentKey"))
        if node is not None and node in path:  # the walk came back to a key of its own path
            chain = list(path)
            looping.update(chain[chain.index(node):])
        done.update(path)
    return looping


def _parents_first(table: dict[str, dict[str, Any]]) -> list[str]:
    """Dictionary order, except that a parent comes before its children (as the SDK orders them)."""
    placed: dict[str, None] = {}
    for key in table:
        chain = []
        node: str | None = key
        while node is not None and node in table and node not in placed and node not in chain:  # a cycle stops
            chain.append(node)
            node = _s(table[node].get("parentKey"))
        placed.update(dict.fromkeys(reversed(chain)))
    return list(placed)


def _split_base(uri: str) -> tuple[str | None, str]:
    """v1 `#BASE#rel` (a uriBaseId folded into a files key) -> ("BASE", "rel")."""
    if uri.startswith("#") and uri.count("#") >= 2:
        base, _, rest = uri[1:].partition("#")
        if base:
            return base, rest
    return None, uri


def _language(value: Any) -> str | None:
    """v1 language ("en-US") -> 2.1.0's pattern; anything else is not carried (it would fail the schema)."""
    return value if isinstance(value, str) and re.match(r"^[a-zA-Z]{2}(-[a-zA-Z]{2})?$", value) else None


def _contents(value: Any, mime: str | None) -> dict[str, str] | None:
    if not isinstance(value, str):
        return None
    if mime and _TEXTUAL_MIME.search(mime):
        try:
            return {"text": base64.b64decode(value, validate=True).decode("utf-8")}
        except (binascii.Error, UnicodeDecodeError, ValueError):
            pass
    return {"binary": value}


def _suppressions(states: Any) -> list[dict[str, str]] | None:
    """v1 suppressionStates is a flags enum: written as a list, or as one comma-separated string."""
    items = states if isinstance(states, list) else [s.strip() for s in states.split(",")] if isinstance(states, str) else []
    out = []
    if "suppressedExternally" in items:
        out.append({"kind": "external"})
    if "suppressedInSource" in items:
        out.append({"kind": "inSource"})
    return out or None


def _nodes(root: Any) -> Any:
    """Every dict under root, iteratively (v1 logs can nest deeply)."""
    stack = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            yield node
            stack.extend(v for v in node.values() if isinstance(v, (dict, list)))
        elif isinstance(node, list):
            stack.extend(v for v in node if isinstance(v, (dict, list)))


def upgrade_run(run: dict[str, Any]) -> dict[str, Any]:
    # A v1 run made by the SDK's 2.1 -> 1.0 converter carries the original 2.1 run in its
    # property bag; the SDK restores it verbatim, and so do we (the host validates it like any output).
    original = _dict(run.get("properties")).get("sarifv2/run")
    if isinstance(original, dict) and isinstance(original.get("tool"), dict):
        return original
    return RunUpgrade(run).upgrade()
