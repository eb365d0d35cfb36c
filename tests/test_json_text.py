"""sandboy.json_text writes json.dumps(value, indent=2)'s text without importing json
(`sandboy run --status-json`: docs/performance.md, session 7)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest

from sandboy import json_text

SANDBOY = os.path.join(os.path.dirname(sys.executable), "sandboy")

# every kind of character json escapes differently: the short escapes, other C0 controls, DEL, C1,
# Latin-1, the BMP (line separators, bidi overrides), lone surrogates (undecodable bytes of a
# path), astral characters (surrogate pairs), and the printable ASCII around them
CHARS = ['"', "\\", "/", "\b", "\f", "\n", "\r", "\t", "\x00", "\x1b", "\x1f", " ", "~", "\x7f", "\x80", "\x9f",
         "\xa0", "é", "ÿ", "\u0100", "\u2028", "\u202e", "\ud800", "\udcff", "\ue000", "\uffff", "\U00010000",
         "\U0001f600", "\U0010ffff", "a", "Z", "0", "{", "}", "[", "]", ":", ","]

STRINGS = ["", "plain", "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", "with space", 'quo"te', "back\\slash",
           "::error file=a.py::forged", "##[group]", "x" * 300, *CHARS, "".join(CHARS)]
SCALARS = [None, True, False, 0, 1, -1, 2**63, -(2**70), 0.0, -0.0, 0.1, 1e300, -2.5e-300, 1.0, 3.14159,
           float("inf"), float("-inf"), float("nan"), *STRINGS]
KEYS = ["", "k", "ké", "a\nb", "\U0001f600", 1, -7, 2.5, float("inf"), True, False, None]


def _random_value(rng: random.Random, depth: int):
    kind = rng.randrange(6 if depth < 4 else 1)
    if kind == 0:
        return rng.choice(SCALARS) if rng.random() < 0.7 else "".join(rng.choices(CHARS, k=rng.randrange(12)))
    if kind == 1:
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    if kind == 2:
        return tuple(_random_value(rng, depth + 1) for _ in range(rng.randrange(3)))
    return {rng.choice(KEYS) if rng.random() < 0.3 else "".join(rng.choices(CHARS, k=rng.randrange(6))):
            _random_value(rng, depth + 1) for _ in range(rng.randrange(4))}


@pytest.mark.parametrize("value", [*SCALARS, [], {}, (), [[]], {"a": {}}, {"a": [], "b": [1, [2, {"c": None}]]},
                                   {key: key for key in KEYS if not isinstance(key, float) or key == key}])
def test_each_kind_of_value_is_json_dumps_text(value):
    assert json_text.dumps(value) == json.dumps(value, indent=2)


def test_twenty_thousand_random_documents_are_json_dumps_text():
    rng = random.Random(7)
    for _ in range(20_000):
        value = _random_value(rng, 0)
        assert json_text.dumps(value) == json.dumps(value, indent=2), value


def test_every_code_point_is_escaped_as_json_does():
    text = "".join(map(chr, range(0x110000)))
    assert json_text.string(text) == json.dumps(text)


class _Text(str):
    def __str__(self):
        return "not the text"

    __format__ = None  # a subclass that formats oddly: its text is still what is written


class _Number(int):
    def __repr__(self):
        return "not the number"


def test_subclasses_are_written_as_their_base_values():
    value = {_Text("k"): [_Text("v"), _Number(5)]}
    assert json_text.dumps(value) == json.dumps(value, indent=2) == '{\n  "k": [\n    "v",\n    5\n  ]\n}'


@pytest.mark.parametrize("value", [{"a": {1, 2}}, [b"bytes"], {(1, 2): "tuple key"}, object()])
def test_what_json_refuses_is_refused_alike(value):
    with pytest.raises(TypeError) as ours:
        json_text.dumps(value)
    with pytest.raises(TypeError) as theirs:
        json.dumps(value, indent=2)
    assert str(ours.value) == str(theirs.value)


def test_status_json_is_written_without_importing_json(tmp_path):
    """The real `--status-json` document of a run: the same text json.dumps gives its content, and
    the run imports neither json nor re."""
    policy = tmp_path / "p.toml"
    policy.write_text('version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc"]\nexec = ["/usr/bin", "/bin"]\n')
    status = tmp_path / "status.json"
    argv = [SANDBOY, "run", "--policy", str(policy), "--status-json", str(status), "--", "/bin/true"]
    subprocess.run(argv, check=True, stdin=subprocess.DEVNULL, start_new_session=True)  # warm the parse cache
    proc = subprocess.run([sys.executable, "-X", "importtime", *argv], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, start_new_session=True)
    assert proc.returncode == 0, proc.stderr
    used = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "sandboy.json_text" in used  # the measurement works
    assert not used & {"json", "re", "enum"}, used & {"json", "re", "enum"}
    text = status.read_text()
    doc = json.loads(text)
    assert doc["outcome"] == "exec" and doc["enforced"]["landlock"]["fs_rules"]
    assert text == json.dumps(doc, indent=2) + "\n"


def test_dry_run_json_is_written_without_importing_json(tmp_path):
    policy = tmp_path / "p.toml"
    policy.write_text('version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64"]\nexec = ["/usr/bin", "/bin"]\n')
    argv = [SANDBOY, "run", "--policy", str(policy), "--dry-run", "--json", "--", "/bin/true"]
    subprocess.run(argv, check=True, capture_output=True)  # warm the parse cache
    proc = subprocess.run([sys.executable, "-X", "importtime", *argv], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    used = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "sandboy.json_text" in used and not used & {"json", "re"}
    assert proc.stdout == json.dumps(json.loads(proc.stdout), indent=2) + "\n"
