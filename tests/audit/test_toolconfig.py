"""adapters.toml is strictly validated: exit 2 with `FILE: key: problem` (issue 12)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sandboy.audit import toolconfig
from sandboy.audit.errors import UsageError

GOOD_PHASE = '[[tools.t.phases]]\nargv = ["sh", "-c", "true"]\n'
GOOD_TOOL = '[tools.t]\nadapter = "passthrough"\noutput = { kind = "sarif", from = "stdout" }\n'


def test_the_built_in_entries_load_and_cover_the_issue() -> None:
    tools = toolconfig.load()
    assert {"bandit", "semgrep", "ruff", "infer", "infersharp", "codeql", "roslyn"} <= set(tools)
    assert [p.name for p in tools["codeql"].phases] == ["database-create", "database-analyze"]
    assert any("version=2.1" in a for a in tools["roslyn"].phases[0].argv)
    assert tools["ruff"].adapter == "passthrough" and tools["ruff"].output_kind == "sarif"
    assert not any(p.network for t in tools.values() for p in t.phases)


@pytest.mark.parametrize("text, key, problem", [
    ("version = 2\n", "version", "expected version = 1"),
    ("version = 1\nvesion = 1\n", "vesion", "did you mean 'version'"),
    ("version = 1\n[tools.t]\nadaptr = 'x'\n", "tools.t.adaptr", "did you mean 'adapter'"),
    ("version = 1\n[tools.t]\nadapter = 'nope'\noutput = {kind='sarif', from='stdout'}\n" + GOOD_PHASE, "tools.t.adapter", "unknown adapter"),
    ("version = 1\n" + GOOD_TOOL.replace('"stdout"', '"pipe"') + GOOD_PHASE, "tools.t.output.from", "expected one of file, stdout"),
    ("version = 1\n" + GOOD_TOOL + '[[tools.t.phases]]\nargv = ["/bin/sh"]\n', "tools.t.phases[0].argv", "found on PATH"),
    ("version = 1\n" + GOOD_TOOL + GOOD_PHASE + 'include = ["pyhton"]\n', "tools.t.phases[0].include", "unknown preset"),
    ("version = 1\n" + GOOD_TOOL + GOOD_PHASE + 'wall_seconds = 0\n', "tools.t.phases[0].wall_seconds", "integer from 1"),
    ("version = 1\n" + GOOD_TOOL + GOOD_PHASE + 'netwrok = true\n', "tools.t.phases[0].netwrok", "did you mean 'network'"),
    ("version = 1\n" + GOOD_TOOL + GOOD_PHASE + 'network = "yes"\n', "tools.t.phases[0].network", "expected true or false"),
    ("version = 1\n" + GOOD_TOOL.replace("[tools.t]\n", "[tools.t]\nbuild_free = 1\n") + GOOD_PHASE, "tools.t.build_free",
     "expected true or false"),
    ("version = 1\n[tools.t]\nadapter = 'bandit'\noutput = {kind='sarif', from='file', file='../x'}\n" + GOOD_PHASE, "tools.t.output.file", "inside the output directory"),
    ("version = 1\n[tools.t]\nadapter = 'bandit'\n", "tools.t.output", "missing"),
    # looked up under the repository on the host: never a host path (an existence oracle)
    ("version = 1\n" + GOOD_TOOL.replace("[tools.t]\n", "[tools.t]\nrequires = ['/etc/passwd']\n") + GOOD_PHASE,
     "tools.t.requires", "expected a path inside the repository"),
    ("version = 1\n" + GOOD_TOOL.replace("[tools.t]\n", "[tools.t]\nrequires = ['a/../../x']\n") + GOOD_PHASE,
     "tools.t.requires", "expected a path inside the repository"),
    # a NUL byte in an argument, a path or a name (a supervised phase's supervisor died of one)
    ("version = 1\n" + GOOD_TOOL + '[[tools.t.phases]]\nargv = ["sh", "-c", "x\\u0000y"]\n', "tools.t.phases[0].argv[2]",
     "contains a NUL byte"),
    ("version = 1\n[tools.t]\nadapter = 'bandit'\noutput = {kind='sarif', from='file', file=\"a\\u0000b\"}\n" + GOOD_PHASE,
     "tools.t.output.file", "contains a NUL byte"),
    ("version = 1\n" + GOOD_TOOL.replace("[tools.t]\n", "[tools.t]\nrequires = [\"a\\u0000\"]\n") + GOOD_PHASE,
     "tools.t.requires[0]", "contains a NUL byte"),
    # the same table check as policy files (policy.load.checked_table)
    ("version = 1\ntools = 3\n", "tools", "expected a table [tools], got an integer"),
    ("version = 1\n[tools]\nt = 3\n", "tools.t", "expected a table [tools.t], got an integer"),
    ("version = 1\n[tools.t]\n\"a\\nb\" = 1\n", 'tools.t."a\\nb"', "unknown key"),
    # a tool name from the file cannot forge a line or repaint a terminal
    ('version = 1\n[tools."t\\u001b[2J\\n::error::x"]\nphses = 1\n', "tools.t\\x1b[2J\\x0a::error::x.phses",
     "did you mean 'phases'"),
])
def test_bad_entries_name_file_key_and_problem(tmp_path: Path, text: str, key: str, problem: str) -> None:
    path = tmp_path / "ops.toml"
    path.write_text(text)
    with pytest.raises(UsageError) as err:
        toolconfig.load(operator=path)
    message = str(err.value)
    assert message.startswith(f"{path}: {key}: "), message
    assert problem in message


# Whole-file problems, as the policy reader words them (`FILE: problem`): one bounded read, UTF-8,
# TOML, and its guards against files built to make the parser slow.
@pytest.mark.parametrize("content, problem", [
    (b"version = [\n", "TOML syntax error"),
    (b"version = 1\n# \xe9\n", "not UTF-8 (byte"),
    (b"version = 1\n#" + b"x" * (1 << 20), f"file is larger than {1 << 20} bytes"),
    (b"a" + b".a" * 300 + b" = 1\n", "line 1: a key of more than 256 dotted parts"),
])
def test_the_file_is_read_as_policy_files_are(tmp_path: Path, content: bytes, problem: str) -> None:
    path = tmp_path / "ops.toml"
    path.write_bytes(content)
    with pytest.raises(UsageError) as err:
        toolconfig.load(operator=path)
    assert str(err.value).startswith(f"{path}: {problem}"), str(err.value)


def test_an_operator_file_overrides_a_built_in_tool(tmp_path: Path) -> None:
    path = tmp_path / "ops.toml"
    path.write_text('version = 1\n[tools.ruff]\nadapter = "passthrough"\noutput = { kind = "sarif", from = "stdout" }\n'
                    '[[tools.ruff.phases]]\nargv = ["ruff", "check", "--output-format", "sarif", "{repo}"]\nnetwork = true\n')
    tools = toolconfig.load(operator=path)
    assert tools["ruff"].output_from == "stdout" and tools["ruff"].phases[0].network


def test_cli_exit_2_with_the_problem_and_no_traceback(tmp_path: Path) -> None:
    path = tmp_path / "ops.toml"
    path.write_text("version = 1\n[tools.t]\nphses = []\n")
    done = subprocess.run([sys.executable, "-m", "sandboy", "audit", "run", str(tmp_path), "--adapters", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert f"{path}: tools.t.phses: unknown key (did you mean 'phases'?" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("name", ["{victim}", "../../{leaf}", "..", ".", "a/b", "-x", ""])
def test_a_repository_tool_name_cannot_place_the_tools_writable_dirs(tmp_path: Path, name: str) -> None:
    """`sandboy audit run` makes each tool's {out}, {home} and logs under WORK/<tool name>, and the
    confined tool may write there. A repository's .007/adapters.toml names its tools: a name that
    is a path ("/", "../..") would put those writable directories where the repository chose
    (`[tools."/"]`: {home} = /home). Refused (exit 2) before anything runs; checked on the host:
    the chosen directory stays empty. The twin: a plain name with '.', '_', '-' runs."""
    victim = tmp_path / "victim"
    victim.mkdir()
    repo = tmp_path / "repo"
    (repo / ".007").mkdir(parents=True)
    name = name.format(victim=victim, leaf=victim.name)
    key = '"' + name + '"'
    (repo / ".007" / "adapters.toml").write_text(
        f'version = 1\n[tools.{key}]\nadapter = "passthrough"\noutput = {{ kind = "sarif", from = "file", file = "x.sarif" }}\n'
        f'[[tools.{key}.phases]]\ninclude = ["system"]\n'
        'argv = ["sh", "-c", "echo planted > {home}/planted; echo \'{\\"version\\":\\"2.1.0\\",\\"runs\\":[]}\' > {out}/x.sarif"]\n')
    work = tmp_path / "w"  # the run's work directory is made here: "../../victim" is tmp_path/victim
    work.mkdir()
    done = subprocess.run([sys.executable, "-m", "sandboy", "audit", "run", str(repo), f"--tools={name or 'x'}",
                           "-o", str(tmp_path / "out.sarif")], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TMPDIR": str(work)})
    assert done.returncode == 2, done.stderr
    assert "a tool's name is a plain name" in done.stderr and "Traceback" not in done.stderr
    assert list(victim.iterdir()) == [] and list(work.iterdir()) == [] and not (tmp_path / "out.sarif").exists()


def test_a_plain_tool_name_with_dots_and_dashes_runs(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / ".007").mkdir(parents=True)
    (repo / ".007" / "adapters.toml").write_text(
        'version = 1\n[tools."my-tool_2.x"]\nadapter = "passthrough"\noutput = { kind = "sarif", from = "file", file = "x.sarif" }\n'
        '[[tools."my-tool_2.x".phases]]\ninclude = ["system"]\n'
        'argv = ["sh", "-c", "echo \'{\\"version\\":\\"2.1.0\\",\\"runs\\":[]}\' > {out}/x.sarif"]\n')
    done = subprocess.run([sys.executable, "-m", "sandboy", "audit", "run", str(repo), "--tools", "my-tool_2.x",
                           "-o", str(tmp_path / "out.sarif")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out.sarif").is_file()


@pytest.mark.parametrize("phase", ["{victim}/planted", "../../victim/planted", "a/b", "..", "-x"])
def test_a_repository_phase_name_cannot_place_the_hosts_log_files(tmp_path: Path, phase: str) -> None:
    """Each phase's stdout and stderr are written by Sandboy (on the host, not in the cage) to
    LOGS/<phase name>.stdout/.stderr: a phase named by a path would make the host write the
    confined tool's output, which the repository controls, to a file it chose. Refused (exit 2)
    before anything runs; checked on the host: nothing appears in the chosen directory."""
    victim = tmp_path / "victim"
    victim.mkdir()
    repo = tmp_path / "repo"
    (repo / ".007").mkdir(parents=True)
    name = phase.format(victim=victim)
    (repo / ".007" / "adapters.toml").write_text(
        'version = 1\n[tools.t]\nadapter = "passthrough"\noutput = { kind = "sarif", from = "stdout" }\n'
        f'[[tools.t.phases]]\nname = "{name}"\ninclude = ["system"]\n'
        'argv = ["sh", "-c", "echo \'{\\"version\\":\\"2.1.0\\",\\"runs\\":[]}\'"]\n')
    work = tmp_path / "w"  # the run's work directory: "../../victim" from its logs is tmp_path/w/victim at most
    work.mkdir()
    done = subprocess.run([sys.executable, "-m", "sandboy", "audit", "run", str(repo), "--tools=t",
                           "-o", str(tmp_path / "out.sarif")], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TMPDIR": str(work)})
    assert done.returncode == 2, done.stderr
    assert "a phase's name is a plain name" in done.stderr and "Traceback" not in done.stderr
    assert list(victim.iterdir()) == [] and list(work.iterdir()) == [] and not (tmp_path / "out.sarif").exists()


@pytest.mark.parametrize("field", ["write", "read", "exec"])
def test_a_repository_cannot_widen_its_tools_cage(tmp_path: Path, field: str) -> None:
    """A phase's read / write / exec paths go into its cage as they are. From a repository's
    .007/adapters.toml, `write = ["/anywhere"]` made the host writable to the repository's own
    tool (and `read` any file readable). Refused (exit 2) before anything runs, checked on the
    host; the twin: the same entry from the operator's --adapters file runs and writes there."""
    victim = tmp_path / "victim"
    victim.mkdir()
    entry = ('version = 1\n[tools.t]\nadapter = "passthrough"\noutput = { kind = "sarif", from = "stdout" }\n'
             f'[[tools.t.phases]]\ninclude = ["system"]\n{field} = ["{victim}"]\n'
             f'argv = ["sh", "-c", "echo planted > {victim}/planted; echo \'{{\\"version\\":\\"2.1.0\\",\\"runs\\":[]}}\'"]\n')
    repo = tmp_path / "repo"
    (repo / ".007").mkdir(parents=True)
    (repo / ".007" / "adapters.toml").write_text(entry)
    done = subprocess.run([sys.executable, "-m", "sandboy", "audit", "run", str(repo), "--tools=t",
                           "-o", str(tmp_path / "out.sarif")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert f"tools.t.phases[0].{field}: a repository cannot widen its tools' cage" in done.stderr
    assert list(victim.iterdir()) == [] and not (tmp_path / "out.sarif").exists()
    if field == "write":
        (repo / ".007" / "adapters.toml").unlink()
        ops = tmp_path / "ops.toml"
        ops.write_text(entry)
        done = subprocess.run([sys.executable, "-m", "sandboy", "audit", "run", str(repo), "--adapters", str(ops),
                               "--tools=t", "-o", str(tmp_path / "out.sarif")], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert (victim / "planted").read_text() == "planted\n"
