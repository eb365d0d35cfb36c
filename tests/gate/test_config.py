"""Malformed gates: exit 2 with `FILE: key: problem`, nothing runs, never a traceback."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from gatekit import make_repo, run_gate

from sandboy.errors import PolicyError
from sandboy.gate import config

OK_STEP = '[[step]]\nname = "a"\nrun = "true"\n'

BAD_GATES = [
    # (gate.toml text, key in the message, words of the problem)
    ("[[step]]\nname = \"a\"\nrun = \"true\"\ncolour = 1\n", "step[0] ('a').colour", "unknown key"),
    ("surprise = 1\n" + OK_STEP, "surprise", "unknown key"),
    # a hostile key is quoted with escapes, never raw (top level and in a step)
    ('"evil\\u001b[31m" = 1\n' + OK_STEP, '"evil\\u001b[31m"', "unknown key"),
    (OK_STEP + '"x.y\\n" = 1\n', 'step[0] (\'a\')."x.y\\n"', "unknown key"),
    ("[gate]\nshel = [\"sh\"]\n" + OK_STEP, "gate.shel", "unknown key"),
    ("gate = 3\n" + OK_STEP, "gate", "expected a table [gate], got an integer"),
    ("[gate]\nshell = \"bash -lc\"\n" + OK_STEP, "gate.shell", "expected a non-empty list"),
    ("[gate]\nshell = []\n" + OK_STEP, "gate.shell", "expected a non-empty list"),
    ("[[step]]\nname = 3\nrun = \"true\"\n", "step[0].name", "expected a string"),
    ("[[step]]\nname = \"a\"\nrun = [\"true\"]\n", "step[0] ('a').run", "non-empty command"),
    ("[[step]]\nname = \"a\"\n", "step[0] ('a').run", "missing"),
    ("[[step]]\nrun = \"true\"\n", "step[0].name", "missing"),
    ("[[step]]\nname = \"\"\nrun = \"true\"\n", "step[0].name", "1 to 64"),
    ("[[step]]\nname = \"a\\u001b[2J\"\nrun = \"true\"\n", "name", "printable"),
    ("[[step]]\nname = \"" + "x" * 65 + "\"\nrun = \"true\"\n", "name", "1 to 64"),
    (OK_STEP + "timeout = \"10x\"\n", "step[0] ('a').timeout", "like \"90s\""),
    (OK_STEP + "timeout = 0\n", "timeout", "between 1 second"),
    (OK_STEP + "timeout = -5\n", "timeout", "between 1 second"),
    (OK_STEP + "timeout = 1.5\n", "timeout", "expected seconds"),
    (OK_STEP + "timeout = \"99999h\"\n", "timeout", "between 1 second"),
    (OK_STEP + "allow_failure = \"yes\"\n", "allow_failure", "true or false"),
    (OK_STEP + OK_STEP, "step[1].name", "duplicate step name 'a'"),
    (OK_STEP + "policy = \"nope\"\n", "policy", "no [policy.nope] table"),
    (OK_STEP + "policy = \"../outside.toml\"\n", "policy", "must not contain '..'"),
    (OK_STEP + "policy = \"/etc/passwd\"\n", "policy", "not absolute"),
    (OK_STEP + "policy = \"missing.toml\"\n", "policy", "cannot read"),
    (OK_STEP + "policy = 5\n", "policy", "expected a [policy.NAME] name"),
    (OK_STEP + "policy = \"p\"\n[policy.p]\nversion = 1\nfs.reed = [\".\"]\n", "policy.p.fs.reed", "unknown key"),
    (OK_STEP + "policy = \"p\"\n[policy.p]\nfs.read = [\".\"]\n", "policy.p.version", "missing"),
    (OK_STEP + "[policy]\np = 1\n", "policy.p", "expected a table"),
    (OK_STEP + "policy = \"p\"\n[policy.p]\nversion = 1\nenv.set = { A = \"x\\u0000y\" }\n", "policy.p.env.set.A",
     "holds a NUL byte"),
    ("[gate]\n", "step", "no steps"),
    ("step = 1\n", "step", "expected [[step]] tables"),
    ("[[step]\nname=1", "", "TOML syntax error"),
]


@pytest.mark.parametrize("text, key, problem", BAD_GATES)
def test_bad_gate_is_a_policy_error(tmp_path, text, key, problem):
    repo = make_repo(tmp_path, text)
    with pytest.raises(PolicyError) as info:
        config.load(repo)
    assert info.value.source.endswith(".007/gate.toml")
    assert key in info.value.key and problem in info.value.problem, str(info.value)


def _assert_refused(proc, *words):
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("sandboy gate: ") and ".007/gate.toml" in proc.stderr
    for word in words:
        assert word in proc.stderr
    assert proc.stdout == ""  # nothing ran: no step started


def test_cli_bad_gate_runs_nothing(tmp_path):
    # The first step would leave a marker; the error is in a later step, so nothing may run at all.
    repo = make_repo(tmp_path, '[[step]]\nname = "first"\nrun = "touch ran"\n'
                               '[[step]]\nname = "second"\nrun = "true"\ntimeout = "forever"\n')
    _assert_refused(run_gate(repo), "step[1] ('second').timeout:")
    assert not (repo / "ran").exists()


def test_policy_symlink_out_of_repo(tmp_path):
    outside = tmp_path / "outside.toml"
    outside.write_text("version = 1\n")
    repo = make_repo(tmp_path, OK_STEP + 'policy = "p/link.toml"\n')
    (repo / ".007" / "p").mkdir()
    os.symlink(outside, repo / ".007" / "p" / "link.toml")
    _assert_refused(run_gate(repo), "outside the repository")


def test_policy_symlink_inside_repo_is_fine(tmp_path):
    repo = make_repo(tmp_path, OK_STEP + 'policy = "link.toml"\n', {"policies/real.toml": "version = 1\n"})
    os.symlink(repo / "policies" / "real.toml", repo / ".007" / "link.toml")
    gate = config.load(repo)
    assert gate.steps[0].policy.source == str(repo / "policies" / "real.toml")


def test_gate_dir_symlink_out_of_repo(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / ".007").mkdir(parents=True)
    (elsewhere / ".007" / "gate.toml").write_text(OK_STEP)
    repo = tmp_path / "repo"
    repo.mkdir()
    os.symlink(elsewhere / ".007", repo / ".007")
    _assert_refused(run_gate(repo), "outside the repository")


def test_gate_file_symlink_out_of_repo(tmp_path):
    (tmp_path / "gate.toml").write_text(OK_STEP)
    repo = tmp_path / "repo"
    (repo / ".007").mkdir(parents=True)
    os.symlink(tmp_path / "gate.toml", repo / ".007" / "gate.toml")
    _assert_refused(run_gate(repo), "outside the repository")


@pytest.mark.parametrize("link", [".007", ".007/gate.toml", ".007/p.toml"])
def test_a_link_out_of_the_repository_tells_nothing_about_its_target(tmp_path, link):
    """Refused whether or not the target exists, with the same message, never naming where the
    link leads (the message said "resolves to /host/..." after following every link out there:
    a host symlink's target, and whether a path existed, reached the repository's CI log)."""
    host = tmp_path / "host"
    (host / "hidden").mkdir(parents=True)
    (host / "hidden" / "gate.toml").write_text(OK_STEP)
    (host / "hidden" / "p.toml").write_text("version = 1\n")
    os.symlink(host / "hidden", host / "via")  # a host symlink whose target must not be told
    messages = []
    for target in (host / "via", host / "missing"):
        repo = make_repo(tmp_path / target.name, OK_STEP + 'policy = "p.toml"\n')
        if link == ".007":
            for f in (repo / ".007").iterdir():
                f.unlink()
            (repo / ".007").rmdir()
        else:
            (repo / link).unlink(missing_ok=True)
        os.symlink(target if link == ".007" else target / os.path.basename(link), repo / link)
        proc = run_gate(repo)
        assert proc.returncode == 2 and "leads outside the repository" in proc.stderr, proc.stderr
        assert "hidden" not in proc.stderr and "Traceback" not in proc.stderr
        messages.append(proc.stderr.replace(str(repo), "REPO"))
    assert messages[0] == messages[1]


def test_oversized_gate(tmp_path):
    repo = make_repo(tmp_path, OK_STEP + "# " + "x" * (1 << 20) + "\n")
    _assert_refused(run_gate(repo), "larger than")


def test_fifo_gate_does_not_hang(tmp_path):
    repo = tmp_path / "repo"
    (repo / ".007").mkdir(parents=True)
    os.mkfifo(repo / ".007" / "gate.toml")
    _assert_refused(run_gate(repo, timeout=20), "not a regular file")


def test_missing_gate_and_not_utf8(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _assert_refused(run_gate(repo), "no gate file")
    (repo / ".007").mkdir()
    (repo / ".007" / "gate.toml").write_bytes(b'[[step]]\nname = "\xff"\nrun = "true"\n')
    _assert_refused(run_gate(repo), "not UTF-8")


def test_bad_ceiling_is_exit_2(tmp_path):
    repo = make_repo(tmp_path, OK_STEP)
    ceiling = tmp_path / "ceiling.toml"
    ceiling.write_text("version = 1\n[fs]\nread = 1\n")
    proc = run_gate(repo, "--ceiling", ceiling)
    assert proc.returncode == 2 and "ceiling.toml: fs.read: expected a list" in proc.stderr


def test_timeouts_parse():
    src = "gate.toml"
    assert [config.parse_timeout(src, "t", v) for v in (90, "90s", "10m", "2h")] == [90, 90, 600, 7200]


def test_good_gate_defaults(tmp_path):
    repo = make_repo(tmp_path, OK_STEP)
    gate = config.load(repo)
    assert gate.shell == ("bash", "-lc") and gate.steps[0].timeout is None and not gate.steps[0].allow_failure


# --- fuzzing: whatever the bytes, a PolicyError or a Gate, never another exception -----------

SEED = b'''[gate]
shell = ["bash", "-lc"]
[[step]]
name = "unit"
run = "pytest -q"
policy = "test"
timeout = "10m"
allow_failure = false
[[step]]
name = "two"
run = "true"
policy = "p/x.toml"
[policy.test]
version = 1
fs.read = ["."]
net.connect_tcp = [443]
limits.processes = 5
'''


def _load_bytes(tmp_path, raw: bytes) -> None:
    path = tmp_path / "repo" / ".007" / "gate.toml"
    path.write_bytes(raw)
    try:
        config.load(tmp_path / "repo")
    except PolicyError as exc:
        assert str(exc).startswith(str(path.resolve().parent.parent))


def test_fuzz_mutated_gate_files(tmp_path):
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    (tmp_path / "repo" / ".007" / "p").mkdir(parents=True)
    (tmp_path / "repo" / ".007" / "p" / "x.toml").write_text("version = 1\n")

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.lists(st.tuples(st.integers(0, len(SEED)), st.integers(0, 8), st.binary(max_size=6)), max_size=6))
    def check(edits):
        raw = bytearray(SEED)
        for at, cut, insert in edits:
            raw[at: at + cut] = insert
        _load_bytes(tmp_path, bytes(raw))

    check()


def test_fuzz_gate_structures(tmp_path):
    """Well-formed TOML, arbitrary shapes: validate `from_data` directly."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    keys = st.sampled_from(["gate", "shell", "step", "name", "run", "policy", "timeout", "allow_failure",
                            "version", "fs", "read", "net", "limits", "processes", "x", "test"])
    scalars = st.one_of(st.booleans(), st.integers(-2, 10**6), st.floats(allow_nan=False), st.text(max_size=8),
                        st.sampled_from(["10m", "5s", "test", ".", "../x.toml", "/etc/x"]))
    values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                           st.dictionaries(keys, inner, max_size=4)), max_leaves=12)
    repo = str(tmp_path)

    @settings(max_examples=400, deadline=None)
    @given(st.dictionaries(keys, values, max_size=4))
    def check(data):
        try:
            config.from_data(data, repo, "gate.toml")
        except PolicyError:
            pass

    check()


def test_bad_gate_json_report_validates(tmp_path):
    import json

    import jsonschema

    repo = make_repo(tmp_path, "[gate]\n")
    report = tmp_path / "r.json"
    proc = run_gate(repo, "--json", report)
    assert proc.returncode == 2
    data = json.loads(report.read_text())
    schema = json.loads((Path(__file__).parents[2] / "src/sandboy/gate/report.schema.json").read_text())
    jsonschema.validate(data, schema)
    assert data["status"] == "policy_error" and "no steps" in data["error"]


def test_a_gate_file_is_parsed_once_then_read_from_the_policy_cache_and_validated_again(tmp_path, monkeypatch):
    """`tomllib` (≈ 6 ms of the gate's start-up) runs only for bytes not seen before; a bad file
    is never cached; an edited file is parsed afresh; what the cache holds is checked like a file."""
    import json
    import marshal
    import subprocess
    import sys

    from sandboy.policy import load

    cache = tmp_path / "cache"
    monkeypatch.setenv("SANDBOY_CACHE_DIR", str(cache))
    repo = make_repo(tmp_path, OK_STEP + 'policy = "p.toml"\n[[step]]\nname = "b"\nrun = "true"\npolicy = "t"\n'
                     '[policy.t]\nversion = 1\nfs.read = ["."]\n',
                     files={".007/p.toml": 'version = 1\n[fs]\nread = ["/usr", "."]\n'})
    first = config.load(repo)
    code = ("import json, sys; from sandboy.gate import config; g = config.load(sys.argv[1]); "
            "print(json.dumps([[s.name, s.run, s.policy.to_toml_dict()] for s in g.steps]), 'tomllib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(repo)], capture_output=True, text=True,
                         env=dict(os.environ, SANDBOY_CACHE_DIR=str(cache)))
    steps, imported = out.stdout.rsplit(" ", 1)
    assert imported.strip() == "False", out.stderr
    assert json.loads(steps) == [[s.name, s.run, s.policy.to_toml_dict()] for s in first.steps]

    gate_file = repo / ".007" / "gate.toml"
    entries = set(os.listdir(cache / "policies"))
    gate_file.write_text(OK_STEP + "colour = 1\n")  # a bad file: refused, and not cached
    with pytest.raises(PolicyError, match="unknown key"):
        config.load(repo)
    assert set(os.listdir(cache / "policies")) == entries
    gate_file.write_text(OK_STEP.replace('"a"', '"edited"'))  # edited: parsed afresh
    assert [s.name for s in config.load(repo).steps] == ["edited"]
    # a tampered entry for these very bytes, sealed with this user's key (ADR 0030: an unsealed one
    # is never read), is validated like the file itself
    from cachekit import write_sealed

    raw = gate_file.read_bytes()
    write_sealed(load._cache_path(str(gate_file)), marshal.dumps((1, raw, {"step": [{"name": "a", "run": "true",
                                                                                     "sneaky": 1}]})))
    with pytest.raises(PolicyError, match="sneaky"):
        config.load(repo)
