"""Everything `sandboy audit` prints that a report or an adapter wrote passes one escaping function
(issue 8, items 2 and 7): JSON pointers built from the file's keys, problem messages quoting its
values, guest error text, file names. Checked on the raw bytes written to stdout and stderr."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from printed import assert_safe, evil_text  # noqa: E402

from sandboy.audit import sarif  # noqa: E402

FORGED = "\n::error file=app.py,line=1::forged"


def audit_in_process(*args: str) -> tuple[int, bytes]:
    """The real `sandboy audit` entry point; stdout and stderr as raw bytes (strict UTF-8)."""
    from sandboy.audit.cli import main

    raw = io.BytesIO()
    out = io.TextIOWrapper(raw, encoding="utf-8", errors="strict", write_through=True)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(list(args))
    out.flush()
    return code, raw.getvalue()


def hostile_log(evil: str, schema_valid: bool) -> dict:
    """A SARIF log whose keys and values are `evil` wherever a problem would quote them."""
    result = {"ruleId": evil + "x", "ruleIndex": 0, "message": {"text": evil},
              "locations": [{"physicalLocation": {"artifactLocation": {"uri": evil, "uriBaseId": evil},
                                                  "region": {"startLine": 0, "endLine": -1}}}]}
    if not schema_valid:
        result["level"] = evil  # an enum error quoting the value
        result["kind"] = {evil: evil}
    return {"$schema": sarif.SARIF_SCHEMA_URI, "version": "2.1.0",
            "runs": [{"tool": {"driver": {"name": evil, "rules": [{"id": evil}, {"id": evil}]}},
                      "originalUriBaseIds": {"SRC": {"uri": "src/"}},
                      "properties": {evil: {"region": {"startLine": 0}}, "n": {evil: [{"region": {"endColumn": 0}}]}},
                      "results": [result]}]}


def test_properties_key_cannot_forge_a_line(tmp_path):
    path = tmp_path / "forged.sarif"
    path.write_text(json.dumps(hostile_log(FORGED, schema_valid=True)))
    code, raw = audit_in_process("validate", str(path))
    assert code == 1
    assert_safe(raw)
    assert b"/runs/0/properties/\\x0a::error file=app.py" in raw  # shown, escaped


def test_convert_lists_problems_without_forged_lines(built, tmp_path):
    path = tmp_path / "forged.sarif"
    path.write_text(json.dumps(hostile_log(FORGED, schema_valid=True)))
    code, raw = audit_in_process("convert", "--tool", "passthrough", "--artifact", f"log={path}", "-o", str(tmp_path / "o"))
    assert code == 15, raw
    assert_safe(raw)


def test_validate_imports_no_wasmtime(tmp_path):
    """Problem.__str__ used to import the wasm host (and wasmtime, ~100 ms) to clean its text."""
    path = tmp_path / "bad.sarif"
    path.write_text(json.dumps(hostile_log(FORGED, schema_valid=False)))
    code = ("import sys; from sandboy.audit.cli import main; from sandboy.audit import sarif; "
            f"rc = main(['validate', '--github', {str(path)!r}]); "
            f"[str(p) for p in sarif.problems(sarif.parse_json(open({str(path)!r}).read()))]; "
            "assert rc == 1, rc; heavy = {'wasmtime', 'sandboy.audit.host'} & set(sys.modules); "
            "assert not heavy, heavy")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


FUZZ = settings(max_examples=60, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@FUZZ
@given(evil=evil_text)
def test_fuzz_validate(tmp_path_factory, evil):
    base = tmp_path_factory.mktemp("v")
    name = base / ("r" + evil.replace("/", "_").replace("\0", "_")[:100] + ".sarif")
    for valid in (True, False):
        name.write_text(json.dumps(hostile_log(evil, schema_valid=valid)))
        for extra in ([], ["--github"], ["--strict"]):
            code, raw = audit_in_process("validate", *extra, str(name))
            assert code == 1
            assert_safe(raw, f"validate {extra}")


@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(evil=evil_text)
def test_fuzz_convert(built, tmp_path_factory, evil):
    """The adapter passes the hostile log on; the host's checks list its problems on stderr."""
    base = tmp_path_factory.mktemp("c")
    path = base / "in.sarif"
    path.write_text(json.dumps(hostile_log(evil, schema_valid=False)))
    code, raw = audit_in_process("convert", "--tool", "passthrough", "--artifact", f"log={path}", "-o", str(base / "o"))
    assert code in (10, 15), raw
    assert_safe(raw)
    # and guest text: a report the adapter rejects, its message quoting the input
    path.write_text('{"version": ' + json.dumps(evil) + "}")
    code, raw = audit_in_process("convert", "--tool", "passthrough", "--artifact", f"{evil.replace('=', '_')}={path}",
                                 "-o", str(base / "o"))
    assert code != 0
    assert_safe(raw)


def test_merge_github_quotes_tool_names_escaped(tmp_path):
    """Tool names are the file's: `--github`'s notices and its too-many-tools error quote them
    escaped, so a name holding a line break cannot print a line of its own."""
    evil = "x\nsandboy audit: merged 0 file(s), all clean" + FORGED
    filled = {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": evil, "rules": [{"id": "R", "shortDescription": {"text": "d"}}]}},
                                            "results": [{"ruleId": "R", "ruleIndex": 0, "message": {"id": "m"}}]}]}
    (tmp_path / "one.sarif").write_text(json.dumps(filled))
    code, raw = audit_in_process("merge", "--github", str(tmp_path / "one.sarif"), "-o", str(tmp_path / "out.sarif"))
    assert code == 0, raw
    assert_safe(raw)
    assert b"(x\\x0asandboy audit: merged 0 file(s)" in raw and b"\nsandboy audit: merged 0 file(s), all clean" not in raw
    many = {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": f"{evil}{i}"}}, "results": []} for i in range(21)]}
    (tmp_path / "many.sarif").write_text(json.dumps(many))
    code, raw = audit_in_process("merge", "--github", str(tmp_path / "many.sarif"), "-o", str(tmp_path / "out2.sarif"))
    assert code == 1, raw
    assert_safe(raw)
    assert b"different tools (x\\x0asandboy audit: merged" in raw and b"\nsandboy audit: merged 0 file(s), all clean" not in raw
