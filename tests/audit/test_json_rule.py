"""One JSON reading rule on both sides of the wasm boundary (issue 8, item 6).

The host's `sarif.parse_json` and the guests' `sandboy_guest.load_json` are separate code (the host
never imports guest code); these tests hold them to the same decisions: a leading UTF-8 BOM is
skipped, NaN/Infinity, numbers beyond a double, huge integers and comments are refused. The attack
of the issue: a BOM'd SARIF file (BinSkim writes them) was valid for `validate` and refused by
`convert` (exit 10)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandboy.audit import sarif

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "adapters" / "common"))
import sandboy_guest  # noqa: E402  (the guest helper, run natively here)

CORPUS = [
    '{"a": 1}', '\ufeff{"a": 1}', '\ufeff\ufeff{"a": 1}', ' \ufeff{}', '[1.5, -0.0, 1e308]', '[1e400]', '[-1e400]',
    '[NaN]', '[Infinity]', '[-Infinity]', '{"a": 1} // c', '/* c */ {}', '[' + '9' * 5000 + ']', '[' * 2000 + ']' * 2000,
    '', '\ufeff', '"\\ud800"', '{"\\udc00": 1}', '["\\ud83d\\ude00"]', '["\\\\ud800"]', '["a\\uD800b"]',
    '{"a": 1, "a": 2}', '[1,]', "{'a': 1}", '\x00{}', '{}\ufeff',
]


def host_decision(text: str):
    try:
        return ("ok", sarif.parse_json(text))
    except sarif.JsonProblem:
        return ("refused", None)


def guest_decision(text: str):
    try:
        return ("ok", sandboy_guest.load_json("in.json", text))
    except sandboy_guest.AdapterError:
        return ("refused", None)


@pytest.mark.parametrize("text", CORPUS, ids=range(len(CORPUS)))
def test_host_and_guest_decide_alike(text):
    assert host_decision(text) == guest_decision(text)


json_ish = st.text(alphabet=st.sampled_from(list('{}[],:"0123456789.eE+-truefalsnNIiy \ufeff/*\\u')), max_size=40)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.one_of(json_ish, st.builds(json.dumps, st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=True) | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3), max_leaves=6)),
    st.builds(lambda t: "\ufeff" + t, json_ish)))
def test_fuzz_same_rule(text):
    assert host_decision(text) == guest_decision(text)


def bom_sarif(tmp_path: Path) -> Path:
    log = {"$schema": sarif.SARIF_SCHEMA_URI, "version": "2.1.0",
           "runs": [{"tool": {"driver": {"name": "BinSkim", "rules": [{"id": "BA2001"}]}},
                     "results": [{"ruleId": "BA2001", "ruleIndex": 0, "level": "error", "message": {"text": "x"},
                                  "locations": [{"physicalLocation": {"artifactLocation": {"uri": "bin/a.dll"}}}]}]}]}
    path = tmp_path / "binskim.sarif"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(log, indent=2).encode())
    return path


def test_bom_sarif_validates_and_converts(built, tmp_path):
    path = bom_sarif(tmp_path)
    sandboy = [sys.executable, "-m", "sandboy", "audit"]
    val = subprocess.run([*sandboy, "validate", str(path)], capture_output=True, timeout=120)
    assert val.returncode == 0, val.stdout + val.stderr
    out = tmp_path / "out.sarif"
    conv = subprocess.run([*sandboy, "convert", "--tool", "passthrough", "--artifact", f"log={path}", "-o", str(out)],
                          capture_output=True, timeout=300)
    assert conv.returncode == 0, conv.stderr
    assert not out.read_bytes().startswith(b"\xef\xbb\xbf")  # what we write carries no BOM
    assert json.loads(out.read_text())["runs"][0]["results"][0]["ruleId"] == "BA2001"


def test_lone_surrogate_is_a_clear_refusal_not_a_crash(built, tmp_path):
    """Reported by sarif10: a log holding "\\ud800" made every adapter trap (exit 14): the guest's
    output could not cross the WIT string boundary. Both sides now refuse it as not Unicode."""
    path = tmp_path / "x.sarif"
    path.write_text('{"version":"2.1.0","runs":[{"tool":{"driver":{"name":"t"}},"results":[{"message":{"text":"a\\ud800b"}}]}]}')
    sandboy = [sys.executable, "-m", "sandboy", "audit"]
    conv = subprocess.run([*sandboy, "convert", "--tool", "passthrough", "--artifact", f"log={path}"],
                          capture_output=True, text=True, timeout=300)
    assert conv.returncode == 10 and "lone surrogate" in conv.stderr, conv.stderr
    val = subprocess.run([*sandboy, "validate", str(path)], capture_output=True, text=True, timeout=120)
    assert val.returncode == 1 and "lone surrogate" in val.stdout, val.stdout + val.stderr
