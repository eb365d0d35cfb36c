"""The gate's reports: the final table, JSON (`--json`), JUnit XML (`--junit`), Markdown
(`$GITHUB_STEP_SUMMARY`). Each names every step's status explicitly; a killed or timed-out step
never reads as passed. The JSON shape is `report.schema.json` beside this file.
"""

from __future__ import annotations

import os

from sandboy.errors import EXIT_CAGE, EXIT_INTERRUPTED, EXIT_USAGE
from sandboy.escape import block, clean, markdown
from sandboy.gate.console import label, truncation
from sandboy.gate.status import Status

REPORT_VERSION = 1
_TAIL_IN_REPORTS = 16 * 1024


def _tail_text(result) -> str:
    return result.tail[-_TAIL_IN_REPORTS:].decode("utf-8", "replace")


def gate_status(code: int) -> str:
    """The whole gate's status, from its exit code."""
    return {0: Status.PASSED, 1: Status.FAILED, EXIT_USAGE: Status.POLICY_ERROR, EXIT_CAGE: Status.CAGE_ERROR,
            EXIT_INTERRUPTED: Status.INTERRUPTED}.get(code, Status.FAILED)


# --- table -----------------------------------------------------------------------------


def last_line(result, width: int = 90) -> str:
    """The step's last non-empty output line, shortened: usually the reason it failed."""
    for line in reversed(result.tail[-4096:].decode("utf-8", "replace").splitlines()):
        if line.strip():
            line = clean(line.strip())
            return line if len(line) <= width else line[: width - 3] + "..."
    return ""


def table(gate_result) -> str:
    rows = [("step", "result", "code", "time", "narrowed", "detail")]
    for s in gate_result.steps:
        code = "" if s.returncode is None else str(s.returncode)
        detail = "" if s.status in Status.NO_DETAIL else s.describe()
        if s.status == Status.FAILED and last_line(s):
            detail = f"{detail}: {last_line(s)}"
        if s.output_dropped:
            detail = "; ".join(d for d in (detail, f"output truncated ({s.output_dropped:,} bytes dropped)") if d)
        rows.append((clean(s.name), label(s), code, f"{s.duration:.2f}s", str(len(s.narrowings) or ""),
                     clean(detail)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1] for row in rows]
    code = gate_result.exit_code
    lines.append(f"gate {gate_status(code).replace('_', ' ')} (exit {code}) in {gate_result.duration:.2f}s")
    return "\n".join(line.rstrip() for line in lines)


# --- JSON ------------------------------------------------------------------------------


def _egress(step):
    """A step's Layer-3 traffic: the hosts its proxy let through and refused (None: no domains)."""
    summary = step.run_result.egress if step.run_result is not None else None
    if not summary:
        return None
    hosts = summary.get("hosts", {})
    return {"mode": summary.get("mode"), "allowed": summary.get("allowed", 0), "denied": summary.get("denied", 0),
            "allowed_hosts": sorted(h for h, c in hosts.items() if c.get("allow")),
            "refused_hosts": sorted(h for h, c in hosts.items() if c.get("deny"))}


def to_json(gate_result) -> dict:
    steps = []
    for s in gate_result.steps:
        steps.append({
            "name": s.name,
            "run": s.run,
            "policy": s.policy_ref,
            "allow_failure": s.allow_failure,
            "status": s.status,
            "description": s.describe(),
            "returncode": s.returncode,
            "signal": s.signal,
            "timeout": s.timeout,
            "duration": round(s.duration, 6),
            "error": s.error,
            "narrowings": [n.to_dict() | {"text": n.for_step(s.name)} for n in s.narrowings],
            "effective_policy": s.policy,
            "enforced": s.enforced,
            "degraded": list(s.degraded),
            "warnings": list(s.warnings),
            "log": s.log_path,
            "output_tail": _tail_text(s),
            "output_bytes": s.output_bytes,
            "output_dropped": s.output_dropped,
            "egress": _egress(s),
        })
    code = gate_result.exit_code
    return {
        "version": REPORT_VERSION,
        "tool": "sandboy gate",
        "repo": gate_result.gate.repo,
        "gate_file": gate_result.gate.path,
        "ceiling": gate_result.ceiling_source,
        "shell": list(gate_result.gate.shell),
        "started": gate_result.started,
        "duration": round(gate_result.duration, 6),
        "status": gate_status(code),
        "exit_code": code,
        # the operator's time budget for all the steps (seconds, 0 = none) and whether it cut a step
        # or left one unstarted
        "budget": gate_result.budget.as_dict() if gate_result.budget is not None else None,
        "steps": steps,
    }


def error_json(message: str, code: int) -> dict:
    """The `--json` report of a gate that never started (bad gate, bad ceiling)."""
    return {"version": REPORT_VERSION, "tool": "sandboy gate", "status": gate_status(code), "exit_code": code,
            "error": message, "steps": []}


# --- JUnit -----------------------------------------------------------------------------


def _xml_safe(text: str) -> str:
    # XML 1.0 cannot carry most control characters, even escaped, and CI systems show these
    # reports to people: the same escaping as every other printer (sandboy.escape).
    return clean(text)


def _xml_text(text: str) -> str:
    """Element text keeps its lines (an output tail), each one made safe."""
    return block(text)


def to_junit(gate_result) -> bytes:
    import xml.etree.ElementTree as ET

    steps = gate_result.steps
    # An allowed failure does not fail the gate, so a CI dashboard must not count it as a failure:
    # it is written as <skipped message="allowed failure (STATUS): ..."> (and counted as skipped).
    allowed = {id(s) for s in steps if s.allow_failure and s.status not in Status.NO_DETAIL}
    failures = sum(s.status in Status.FAILING and id(s) not in allowed for s in steps)
    errors = sum(s.status in Status.REFUSED and id(s) not in allowed for s in steps)
    skipped = sum(s.status in Status.UNRUN or id(s) in allowed for s in steps)
    counts = {"tests": str(len(steps)), "failures": str(failures), "errors": str(errors), "skipped": str(skipped),
              "time": f"{gate_result.duration:.3f}"}
    root = ET.Element("testsuites", {"name": "sandboy gate", **counts})
    suite = ET.SubElement(root, "testsuite", {"name": _xml_safe(os.path.basename(gate_result.gate.repo) or "gate"),
                                              **counts})
    for s in steps:
        case = ET.SubElement(suite, "testcase", {"name": _xml_safe(s.name), "classname": "gate",
                                                 "time": f"{s.duration:.3f}"})
        message = _xml_safe(s.describe())
        if id(s) in allowed:
            ET.SubElement(case, "skipped", {"message": f"allowed failure ({s.status}): {message}"}).text = message
        elif s.status in Status.FAILING:
            ET.SubElement(case, "failure", {"message": message, "type": s.status}).text = message
        elif s.status in Status.REFUSED:
            ET.SubElement(case, "error", {"message": message, "type": s.status}).text = message
        elif s.status in Status.UNRUN:
            why = _xml_safe(s.error) if s.error else ("the gate was interrupted" if gate_result.interrupted
                                                     else "an earlier required step failed")
            ET.SubElement(case, "skipped", {"message": f"not run: {why}"})
        notes = [n.for_step(s.name) for n in s.narrowings]
        out = "".join(f"narrowed: {n}\n" for n in notes)
        if s.output_dropped:
            out += f"{truncation(s)}\n"
        out += _tail_text(s)
        if out:
            ET.SubElement(case, "system-out").text = _xml_text(out)
    return _xml_characters(ET.tostring(root, encoding="utf-8", xml_declaration=True))


# U+FFFE and U+FFFF are not XML 1.0 characters, even escaped ("&#xFFFF;" is not well-formed
# either), and `escape.clean` leaves them (nothing but an XML parser minds them): a step printing
# them (or a step policy path holding one, quoted in a narrowing) made the whole JUnit file
# unreadable to every CI reader — "not well-formed (invalid token)" (session 9). Their UTF-8
# bytes appear nowhere else, so the serialized report is mended in one place, every field at once.
_XML_NONCHARACTERS = ((b"\xef\xbf\xbe", b"\\ufffe"), (b"\xef\xbf\xbf", b"\\uffff"))


def _xml_characters(xml: bytes) -> bytes:
    for raw, shown in _XML_NONCHARACTERS:
        if raw in xml:
            xml = xml.replace(raw, shown)
    return xml


# --- Markdown --------------------------------------------------------------------------


def _md(text: str) -> str:
    """A table cell: no pipes, no HTML, no line breaks from untrusted names or messages; at most
    MAX_SUMMARY_CELL characters of it (a step policy's path may be a megabyte long)."""
    return markdown(clean(text, MAX_SUMMARY_CELL))


# GitHub drops a step summary over 1 MiB whole — the results table with it ("upload aborted"),
# and a repository decides how long it is: one step policy asking for 20,000 paths the ceiling
# does not grant made 1.9 MB of narrowings (session 9). The gate keeps its summary to half of
# that (the operator's own steps may write to the same file) and each cell to MAX_SUMMARY_CELL
# characters; what is left out is counted on the last line (the console and --json hold it all).
MAX_SUMMARY_BYTES = 512 << 10
MAX_SUMMARY_CELL = 1000


def to_markdown(gate_result) -> str:
    lines = _markdown_lines(gate_result)
    kept, size = [], 0
    for n, text in enumerate(lines):
        size += len(text.encode("utf-8")) + 1
        if size > MAX_SUMMARY_BYTES - 256:  # room for the last line
            kept.append(f"\n_… {len(lines) - n:,} more line(s) of this summary left out: GitHub drops a step "
                        "summary over 1 MiB whole; the console and `--json` have them all_")
            break
        kept.append(text)
    return "\n".join(kept) + "\n"


def _markdown_lines(gate_result) -> list:
    code = gate_result.exit_code
    icon = {Status.PASSED: "✅", Status.NOT_RUN: "⏭️", Status.OVER_BUDGET: "⏱️"}
    lines = [f"### sandboy gate: {gate_status(code).replace('_', ' ')} (exit {code})", "",
             "| step | result | code | time | detail |", "|---|---|---|---|---|"]
    for s in gate_result.steps:
        mark = icon.get(s.status, "⚠️" if s.allow_failure else "❌")
        code_cell = "" if s.returncode is None else str(s.returncode)
        detail = "" if s.status in Status.NO_DETAIL else s.describe()
        if s.output_dropped:
            detail = "; ".join(d for d in (detail, truncation(s)) if d)
        lines.append(f"| {_md(s.name)} | {mark} {label(s)} | {code_cell} | {s.duration:.2f}s | {_md(detail)} |")
    notes = [n.for_step(s.name) for s in gate_result.steps for n in s.narrowings]
    if notes:
        lines += ["", "**Narrowed by the ceiling**", ""] + [f"- {_md(n)}" for n in notes]
    egress = [(s.name, e) for s in gate_result.steps if (e := _egress(s))]
    if egress:
        lines += ["", "**Network (net.domains)**", ""]
        for name, e in egress:
            allowed = ", ".join(e["allowed_hosts"]) or "none"
            refused = ", ".join(e["refused_hosts"]) or "none"
            lines.append(f"- {_md(name)}: allowed {_md(allowed)}; refused {_md(refused)}")
    return lines


def write_all(gate_result, junit=None, json_path=None, summary=None) -> None:
    """Write the requested report files; `summary` is appended to (GitHub's convention)."""
    if json_path:
        write_json(json_path, to_json(gate_result))
    from sandboy.gate.outputs import open_output

    if junit:
        with open_output(junit) as fh:
            fh.write(to_junit(gate_result))
    if summary:
        with open_output(summary, append=True) as fh:
            fh.write(to_markdown(gate_result).encode("utf-8"))


def write_json(path: str, data: dict) -> None:
    from sandboy.gate.outputs import open_output

    with open_output(path) as fh:
        fh.write((dumps(data) + "\n").encode("utf-8"))


# Per step, the bulk of a report: every step of one effective policy holds the same two objects
# (the policy's TOML form and its cage's enforced rules, ≈ 10 KB of JSON a step).
_SHARED = ("effective_policy", "enforced")


def dumps(data: dict) -> str:
    """`json.dumps(data, separators=(",", ":"))`, byte for byte, with each object that steps
    share (`_SHARED`, the same object) encoded once: 2.3 ms instead of 12.7 ms for 100 steps of
    one policy. No indent: with one, json uses its pure-Python encoder (≈ 0.2 s for 200 steps).
    A shared dict is encoded value by value, each value once: a step's `enforced` is the cage's,
    copied with the step's own `memory` added (session 8: the copies were encoded whole, ≈ 9 KB
    a step, 0.3-0.8 ms a step of the gate's end)."""
    import json

    encode = json.JSONEncoder(separators=(",", ":")).encode
    encoded: dict = {}  # id of a shared object -> its JSON; each is alive in `data` meanwhile

    keys: dict = {}

    def key_json(key: str) -> str:
        text = keys.get(key)
        if text is None:
            text = keys[key] = encode(key)
        return text

    def shared_json(value) -> str:
        text = encoded.get(id(value))
        if text is None:
            if isinstance(value, dict) and all(type(key) is str for key in value):
                # a step's own copy of a shared object with a key of its own: the enforced
                # rules plus the step's `memory` (its memory cgroup's numbers) — each value of it
                # is encoded once, not the ≈ 9 KB again for every step
                items = (f"{key_json(key)}:{shared_json(item)}" for key, item in value.items())
                text = "{" + ",".join(items) + "}"
            else:
                text = encode(value)
            encoded[id(value)] = text
        return text

    def step_json(step: dict) -> str:
        parts, plain = [], {}
        for key, value in step.items():
            if key not in _SHARED:
                plain[key] = value
                continue
            if plain:  # the keys before it, in their order: "{...}" without its braces
                parts.append(encode(plain)[1:-1])
                plain = {}
            parts.append(f"{key_json(key)}:{shared_json(value)}")
        if plain:
            parts.append(encode(plain)[1:-1])
        return "{" + ",".join(parts) + "}"

    if not isinstance(data.get("steps"), list) or list(data)[-1] != "steps":
        return encode(data)
    head = encode({key: value for key, value in data.items() if key != "steps"})
    steps = ",".join(step_json(step) for step in data["steps"])
    return f'{head[:-1]}{"," if len(head) > 2 else ""}"steps":[{steps}]}}'


__all__ = ["table", "to_json", "to_junit", "to_markdown", "write_all", "error_json", "dumps"]
