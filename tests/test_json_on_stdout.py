"""JSON that Sandboy writes to stdout carries untrusted text too: a gate step's output tail
(`sandboy gate --json -`), a SARIF log (`sandboy audit convert` / `merge` without `-o`), the
problems `audit validate --json` quotes. `sandboy.escape` keeps every printed message from being
a workflow command to GitHub's runner, which reads `##[` anywhere in a line of a step's log (its
legacy syntax) — but these JSON texts went out as json.dumps wrote them: a step printing
`##[error]…` forged an annotation through the gate's own report, and a SARIF message holding a
raw U+009B (the C1 CSI) or U+202E reached the terminal as such (session 8 review).

Each is checked on the real CLI: no `##[`, no raw C1 control, bidi override or line separator on
stdout, and the JSON read back holds the very same values (`##\\u005b` is `##[` to a parser)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from sandboy.gate import ceiling as ceilings

HOSTILE = "##[error]forged \x9b31m \u202etxt.exe \u2028 \x7f end"
RAW = ("##[", "\x9b", "\u202e", "\u2028", "\x7f")


def _clean_stdout(out: str) -> None:
    for raw in RAW:
        assert raw not in out, (raw, out[:2000])


def test_the_gates_json_report_on_stdout(tmp_path):
    repo = tmp_path / "repo"
    (repo / ".007").mkdir(parents=True)
    (repo / "say.py").write_text(f"print({HOSTILE!r})\n")
    (repo / ".007" / "gate.toml").write_text('[[step]]\nname = "say"\nrun = "python3 say.py"\n')
    ceiling = tmp_path / "ceiling.toml"
    ceiling.write_text(ceilings.to_toml(ceilings.BUILTIN))
    proc = subprocess.run([sys.executable, "-m", "sandboy.gate.cli", str(repo), "--ceiling", str(ceiling),
                           "--json", "-"], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, SANDBOY_CACHE_DIR=str(tmp_path / "cache")))
    assert proc.returncode == 0, proc.stderr[-2000:]
    _clean_stdout(proc.stdout)
    assert json.loads(proc.stdout)["steps"][0]["output_tail"] == HOSTILE + "\n"


def _sarif(tmp_path):
    doc = {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "t", "rules": [{"id": "R1"}]}},
                                         "results": [{"ruleId": "R1", "message": {"text": HOSTILE}}]}]}
    path = tmp_path / "in.sarif"
    path.write_text(json.dumps(doc, ensure_ascii=False))
    return path


def test_audit_merge_and_convert_to_stdout(tmp_path):
    path = _sarif(tmp_path)
    for args in (["merge", str(path)], ["convert", "--tool", "passthrough", "--artifact", str(path)]):
        proc = subprocess.run([sys.executable, "-m", "sandboy", "audit", *args], capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, (args, proc.stderr[-2000:])
        _clean_stdout(proc.stdout)
        assert json.loads(proc.stdout)["runs"][0]["results"][0]["message"]["text"] == HOSTILE


def test_twin_audit_merge_to_a_file_is_unchanged(tmp_path):
    """Written with -o, the log is the file GitHub uploads: its bytes are json.dumps' as before."""
    path = _sarif(tmp_path)
    out = tmp_path / "out.sarif"
    proc = subprocess.run([sys.executable, "-m", "sandboy", "audit", "merge", str(path), "-o", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert HOSTILE in out.read_text()


def test_audit_validate_json_on_stdout(tmp_path):
    bad = tmp_path / "bad.sarif"
    bad.write_text(json.dumps({"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "t"}}, HOSTILE: 1}]},
                              ensure_ascii=False))
    proc = subprocess.run([sys.executable, "-m", "sandboy", "audit", "validate", "--json", str(bad)],
                          capture_output=True, text=True, timeout=120)
    _clean_stdout(proc.stdout)
    json.loads(proc.stdout)


def test_json_output_keeps_every_value():
    """`escape.json_output` over json.dumps' text, both ensure_ascii settings: the same value back,
    nothing raw from the escape table, no `##[`."""
    import random

    from sandboy.escape import json_output

    pool = ["#", "#", "[", "]", "a", "\\", '"', "\n", "\x1b", "\x7f", "\x85", "\x9b", "\u061c", "\u200e", "\u2028",
            "\u202e", "\u2066", "\U0001f600", "é", ":", " "]
    rng = random.Random(8)
    for _ in range(2000):
        text = "".join(rng.choice(pool) for _ in range(rng.randrange(0, 12)))
        value = {text: [text, {"k": text}], "n": 1}
        for ascii_only in (True, False):
            out = json_output(json.dumps(value, ensure_ascii=ascii_only, indent=rng.choice([None, 2])))
            assert json.loads(out) == value
            _clean_stdout(out)
