"""Everything the gate prints that a repository wrote passes one escaping function (issue 8,
items 2 and 7): step names, policy references, table names, unknown keys, paths, step output,
error messages — on the console, in the JUnit report and in $GITHUB_STEP_SUMMARY. Checked on the
raw bytes: no control characters, no line GitHub's runner reads as a workflow command."""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from printed import FORGED, assert_safe, evil_printable, evil_text, toml_str  # noqa: E402

from gatekit import make_repo, run_gate  # noqa: E402


def gate_cli_in_process(repo, *args) -> tuple[int, bytes]:
    """The real `sandboy gate` entry point, for gates refused before any step runs (nothing is
    forked), with stdout and stderr captured as raw bytes through strict UTF-8 writers."""
    from sandboy.gate.cli import main

    raw = io.BytesIO()
    out = io.TextIOWrapper(raw, encoding="utf-8", errors="strict", write_through=True)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main([str(repo), *map(str, args)])
    out.flush()
    return code, raw.getvalue()


# --- the attacks of the issue, one by one -------------------------------------------------------


def test_policy_table_name_in_the_step_header(tmp_path, fake_home):
    evil = "p\x1b]0;owned\x07\r\n" + FORGED
    repo = make_repo(tmp_path, f"""
        [[step]]
        name = "unit"
        run = "true"
        policy = {toml_str(evil)}

        [policy.{toml_str(evil)}]
        version = 1
    """)
    proc = run_gate(repo, home=fake_home)
    raw = proc.stdout.encode() + proc.stderr.encode()
    assert proc.returncode == 0, raw
    assert_safe(raw)
    assert "policy p\\x1b]0;owned\\x07\\x0d\\x0a::error" in proc.stdout  # shown, escaped


def test_path_policy_reference_in_the_cannot_read_error(tmp_path):
    ref = toml_str("x" + chr(27) + "[2J/" + chr(10) + FORGED + ".toml")
    repo = make_repo(tmp_path, f"""
        [[step]]
        name = "unit"
        run = "true"
        policy = {ref}
    """)
    code, raw = gate_cli_in_process(repo)
    assert code == 2
    assert_safe(raw)
    assert b"cannot read" in raw and b"\\x1b[2J" in raw


def test_unknown_gate_key_is_quoted_like_a_policy_key(tmp_path):
    key = toml_str("evil" + chr(27) + "[31mkey" + chr(10) + "forged line")
    repo = make_repo(tmp_path, f"""
        {key} = 1
        [[step]]
        name = "unit"
        run = "true"
    """)
    code, raw = gate_cli_in_process(repo)
    assert code == 2
    assert_safe(raw)
    assert b'"evil\\u001b[31mkey\\nforged line": unknown key' in raw, raw


def test_step_output_and_summary(tmp_path, fake_home):
    repo = make_repo(tmp_path, """
        [[step]]
        name = "noisy"
        run = "cat payload; exit 1"
    """)
    (repo / "payload").write_bytes(b"ok\n" + FORGED.encode() + b"\n\t" + FORGED.encode() + b"\r\x1b[2J##[error]x\n\xff\xfe")
    summary = tmp_path / "summary.md"
    junit = tmp_path / "junit.xml"
    proc = run_gate(repo, "--junit", junit, home=fake_home, env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert proc.returncode == 1
    assert_safe(proc.stdout.encode() + proc.stderr.encode(), "console")
    assert_safe(summary.read_bytes(), "summary")
    assert_safe(junit.read_bytes(), "junit")
    assert "[noisy] ::error file=a.py" in proc.stdout and "##\\x5berror]x" in proc.stdout  # shown, defused


# --- property: any hostile text through every printed field -----------------------------------

FUZZ = settings(max_examples=40, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@FUZZ
@given(evil=evil_text)
def test_fuzz_gate_errors(tmp_path_factory, evil):
    """Gates refused before anything runs: unknown keys (gate, step, policy table), a missing
    table, a path reference, a bad policy inside an oddly named table, a step named in an error.
    Every gate here is refused (exit 2) before anything runs, so the CLI can run in-process."""
    base = tmp_path_factory.mktemp("g")
    e = toml_str(evil)
    gates = [
        f"[gate]\n{e} = 1\n[[step]]\nname = \"s\"\nrun = \"true\"\n",
        f"[[step]]\nname = \"s\"\nrun = \"true\"\n{e} = 1\n",
        f"[[step]]\nname = \"s\"\nrun = \"true\"\npolicy = \"p\"\n[policy.p]\nversion = 1\n{e} = 1\n",
        f"[[step]]\nname = \"s\"\nrun = \"true\"\npolicy = {e}\n",
        f"[[step]]\nname = \"s\"\nrun = \"true\"\npolicy = {toml_str(evil + '/p.toml')}\n",
        f"[[step]]\nname = \"s\"\nrun = \"true\"\npolicy = {e}\n[policy.{e}]\nversion = 1\nfs.read = 5\n",
        f"[[step]]\nname = {e}\n",  # no run: refused, naming the step
        f"{e} = 1\n",
    ]
    for i, text in enumerate(gates):
        repo = base / f"r{i}"
        (repo / ".007").mkdir(parents=True)
        (repo / ".007" / "gate.toml").write_text(text)
        code, raw = gate_cli_in_process(repo)
        assert code == 2, (text, raw)
        assert_safe(raw, f"gate {i}")


@settings(max_examples=6, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(name=evil_printable, evil=evil_text, payload=evil_text)
def test_fuzz_running_gate(tmp_path_factory, fake_home, name, evil, payload):
    """A gate that runs: the step's name, its policy reference and its output are hostile; the
    console, the JUnit report and the step summary are checked."""
    evil = evil.replace("/", "_").removesuffix(".toml")  # a table name, not a path reference
    name = name[:64]  # the gate's limit
    base = tmp_path_factory.mktemp("run")
    repo = make_repo(base, f"""
        [[step]]
        name = {toml_str(name)}
        run = "cat payload; exit 3"
        policy = {toml_str(evil)}
        [policy.{toml_str(evil)}]
        version = 1
    """)
    (repo / "payload").write_bytes(payload.encode("utf-8") + b"\n\xff" + payload.encode("utf-8"))
    summary, junit = base / "summary.md", base / "junit.xml"
    proc = run_gate(repo, "--junit", junit, home=fake_home, env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert proc.returncode == 1, proc.stderr
    assert_safe(proc.stdout.encode() + proc.stderr.encode(), "console")
    assert_safe(summary.read_bytes(), "summary")
    assert_safe(junit.read_bytes(), "junit")
