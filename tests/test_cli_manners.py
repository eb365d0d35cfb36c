"""No traceback is reachable from the command line: a reader that goes away, any argument list,
a nested gate as root. Every test drives the installed `sandboy` script in a real subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SANDBOY = os.path.join(os.path.dirname(sys.executable), "sandboy")
REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "tests" / "data" / "samples" / "roslyn" / "sarif-sdk_RoslynLog.v1.sarif"
EXIT_READER_GONE = 141
BAD_SIGNS = ("Traceback", "internal error", "Broken pipe", "Exception ignored")


def assert_no_traceback(proc) -> None:
    for sign in BAD_SIGNS:
        assert sign not in proc.stderr, proc.stderr[-2000:]


def run_reader_gone(argv, cwd, env=None) -> subprocess.CompletedProcess:
    """Run `sandboy argv` with stdout a pipe whose reader has already gone away: the first write
    fails with EPIPE, like `sandboy ... | head -0`."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run([SANDBOY, *argv], stdout=write_end, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                              text=True, cwd=cwd, timeout=120, env=env)
    finally:
        os.close(write_end)
    return proc


@pytest.fixture(scope="module")
def small_repo(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("manners")
    gate = root / "repo" / ".007"
    gate.mkdir(parents=True)
    (gate / "gate.toml").write_text(textwrap.dedent("""
        [[step]]
        name = "chatty"
        run = "for i in $(seq 50); do echo line $i; sleep 0.1; done"
    """))
    return root


@pytest.mark.parametrize("argv", [
    ["run", "--policy", str(REPO / "policy.example.toml"), "--dry-run"],
    ["run", "--policy", str(REPO / "policy.example.toml"), "--dry-run", "--json"],
    ["doctor"],
    ["doctor", "--json"],
    ["--help"],
    ["run", "--help"],
    ["gate", "--help"],
    ["audit", "--help"],
    ["--version"],
    ["audit", "list"],
    ["audit", "list", "--json"],
    ["audit", "validate", "--github", "--json", str(SAMPLE)],
    ["audit", "validate", str(SAMPLE)],
], ids=lambda argv: " ".join(a if "/" not in a else Path(a).name for a in argv))
def test_a_reader_that_goes_away_ends_the_command_quietly(argv, tmp_path):
    proc = run_reader_gone(argv, cwd=tmp_path)
    assert_no_traceback(proc)
    # argparse's own --help/--version drop a failed write themselves and exit 0: also quiet
    expected = 0 if argv[-1] in ("--help", "--version") else EXIT_READER_GONE
    assert proc.returncode == expected, proc.stderr


def test_the_gate_stops_quietly_and_still_writes_its_reports(small_repo, tmp_path):
    """`sandboy gate | head -3`: the reader leaves while a step runs; the step is ended (it is
    `killed`, not left to finish its 50 lines), the report is written, nothing is said."""
    import json

    report = tmp_path / "gate.json"
    proc = subprocess.Popen([SANDBOY, "gate", str(small_repo / "repo"), "--json", str(report)], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    seen = []
    while not (seen and seen[-1].startswith("[chatty] line")) and len(seen) < 10:
        seen.append(proc.stdout.readline())
    proc.stdout.close()  # the reader goes away mid-step
    stderr = proc.stderr.read()
    proc.wait(timeout=60)
    assert seen[-1] == "[chatty] line 1\n", seen
    assert not any(sign in stderr for sign in BAD_SIGNS), stderr
    assert proc.returncode == EXIT_READER_GONE, stderr
    step = json.loads(report.read_text())["steps"][0]
    assert step["status"] == "killed", step


def test_a_gate_whose_reader_is_gone_from_the_start_runs_nothing(small_repo, tmp_path):
    import json

    report = tmp_path / "gate.json"
    proc = run_reader_gone(["gate", str(small_repo / "repo"), "--json", str(report)], cwd=tmp_path)
    assert_no_traceback(proc)
    assert proc.returncode == EXIT_READER_GONE, proc.stderr
    assert json.loads(report.read_text())["steps"][0]["status"] == "not_run"


def test_the_gate_json_on_stdout_with_its_reader_gone(small_repo, tmp_path):
    proc = run_reader_gone(["gate", str(small_repo / "repo"), "--json", "-"], cwd=tmp_path)
    assert_no_traceback(proc)
    assert proc.returncode == EXIT_READER_GONE, proc.stderr


def test_head_in_a_real_shell_pipeline(tmp_path):
    """The issue's own command line, through a shell: one line out, no noise on stderr."""
    proc = subprocess.run(["bash", "-c", f"set -o pipefail; '{SANDBOY}' run --policy '{REPO}/policy.example.toml' "
                                         "--dry-run --json | head -1"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert proc.stdout == "{\n"
    assert_no_traceback(proc)
    assert proc.returncode in (0, EXIT_READER_GONE)  # 0 when everything fit in the pipe before head left


# --- any argument list --------------------------------------------------------------------------

WORDS = ["run", "gate", "audit", "doctor", "convert", "validate", "build", "list", "--", "-p", "--policy",
         "--dry-run", "--json", "--status-json", "--status-fd", "--cwd", "--ceiling", "--junit", "--logs",
         "--keep-going", "--tool", "--artifact", "--github", "--output", "-o", "--help", "--version", "-",
         "=", "--policy=", "true", "false", "sh", "-c", "exit 3", "0", "-1", "99999999999999999999", "é",
         "\x7f", "{cwd}", "@POLICY", "@BROKEN", "@MISSING", "@DIR", "@REPO", "@SARIF", "@DEVNULL"]


@pytest.fixture(scope="module")
def fuzz_files(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("fuzz")
    policy = root / "p.toml"
    policy.write_text('version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc"]\nexec = ["/usr/bin", "/bin"]\n')
    broken = root / "broken.toml"
    broken.write_text("version = 1\n[fs]\nraed = [\n")
    repo = root / "repo" / ".007"
    repo.mkdir(parents=True)
    (repo / "gate.toml").write_text('[[step]]\nname = "t"\nrun = "true"\n')
    return {"@POLICY": str(policy), "@BROKEN": str(broken), "@MISSING": str(root / "missing" / "x"),
            "@DIR": str(root), "@REPO": str(root / "repo"), "@SARIF": str(SAMPLE), "@DEVNULL": "/dev/null"}


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(words=st.lists(st.one_of(st.sampled_from(WORDS), st.text(max_size=6)), max_size=7))
def test_no_argument_list_reaches_a_traceback(words, fuzz_files, tmp_path):
    argv = [fuzz_files.get(w, w) for w in words if "\x00" not in w]
    env = dict(os.environ)  # (the suite's own SANDBOY_CACHE_DIR: tests/conftest.py)
    env.pop("SANDBOY_DEBUG", None)
    proc = subprocess.run([SANDBOY, *argv], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          cwd=tmp_path, timeout=300, env=env)
    assert_no_traceback(proc)
    assert proc.returncode >= 0, (argv, proc.returncode)


# --- a gate nested in `sandboy run` as root -----------------------------------------------------

@pytest.mark.skipif(os.geteuid() != 0, reason="the pids cgroup is made only as root")
def test_a_nested_gate_without_a_pids_cgroup_is_a_cage_error(small_repo, tmp_path):
    """`sandboy run --policy nested.toml -- sandboy gate REPO` as root: the outer cage cannot write
    /sys/fs/cgroup, so the gate cannot make the pids cgroup its ceiling's limits.processes needs.
    That is a cage error (125) with the reason — it was `NameError: CageError`."""
    python_home = os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))
    nested = tmp_path / "nested.toml"
    nested.write_text(textwrap.dedent(f"""
        version = 1
        [fs]
        read = ["/usr", "/lib", "/lib64", "/etc", "/proc", "/dev", "/sys", "{python_home}", "{sys.prefix}", "{REPO}"]
        exec = ["/usr/bin", "/bin", "/usr/lib", "/lib", "/lib64", "{python_home}", "{sys.prefix}/bin"]
        write = ["{tmp_path}"]
    """))
    repo = tmp_path / "repo"
    (repo / ".007").mkdir(parents=True)
    (repo / ".007" / "gate.toml").write_text('[[step]]\nname = "unit"\nrun = "echo hello"\n')
    proc = subprocess.run([SANDBOY, "run", "--policy", str(nested), "--", SANDBOY, "gate", str(repo)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert_no_traceback(proc)
    assert proc.returncode == 125, proc.stdout + proc.stderr
    assert "no pids cgroup could be created" in proc.stdout


# --- usage errors said plainly (issue 9, smaller items) ------------------------------------------

@pytest.fixture
def true_policy(tmp_path) -> Path:
    path = tmp_path / "p.toml"
    path.write_text('version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc"]\nexec = ["/usr/bin", "/bin"]\n')
    return path


@pytest.mark.parametrize("extra, says", [
    (["--json"], "--json describes the rules and goes with --dry-run"),
    (["--status-json", "/nonexistent/sbx/s.json"], "--status-json /nonexistent/sbx/s.json: No such file"),
    (["--status-fd", "97"], "--status-fd 97: Bad file descriptor"),
])
def test_run_usage_errors_are_2_and_nothing_runs(true_policy, tmp_path, extra, says):
    mark = tmp_path / "ran"
    proc = subprocess.run([SANDBOY, "run", "--policy", str(true_policy), *extra, "--", "touch", str(mark)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr
    assert not mark.exists()


def test_an_empty_status_file_tells_a_policy_error_from_the_commands_own_2(true_policy, tmp_path):
    status = tmp_path / "status.json"
    status.write_text("stale")
    bad = tmp_path / "bad.toml"
    bad.write_text("version = 1\n[fs]\nraed = []\n")
    refused = subprocess.run([SANDBOY, "run", "--policy", str(bad), "--status-json", str(status), "--", "true"],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and status.read_text() == ""
    own = subprocess.run([SANDBOY, "run", "--policy", str(true_policy), "--status-json", str(status), "--",
                          "sh", "-c", "exit 2"], capture_output=True, text=True, timeout=60)
    assert own.returncode == 2 and status.read_text() != ""


def test_print_ceiling_is_a_policy_that_loads(tmp_path):
    from sandboy.gate import ceiling as ceilings
    from sandboy.policy.model import Policy

    proc = subprocess.run([SANDBOY, "gate", "--print-ceiling"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    path = tmp_path / "ceiling.toml"
    path.write_text(proc.stdout)
    # a ceiling file: the step policy plus the gate's own `[gate]` table (its time budget, ADR 0025)
    printed, budget = ceilings.read(str(path))
    builtin = Policy.from_mapping(ceilings.BUILTIN, "b")
    assert (printed.fs, printed.net, printed.env) == (builtin.fs, builtin.net, builtin.env)
    # the limits, with this host's default memory bound written out (ADR 0027)
    assert printed.limits == builtin.limits.replace(memory_mib=ceilings.builtin().limits.memory_mib)
    assert printed.limits.memory_mib > 0
    assert budget == 6 * 3600


@pytest.mark.parametrize("gate, key, suggestion", [
    ('[[step]]\nname = "x"\nrun = "true"\ntimeuot = 3\n', "timeuot", "timeout"),
    ('[[steps]]\nname = "x"\nrun = "true"\n', "steps", "step"),
    ('[[step]]\nname = "x"\nrun = "true"\npolicy = "p"\n[policy.p]\nversion = 1\n[policy.p.limts]\nprocesses = 3\n',
     "limts", "limits"),
    ('[[step]]\nname = "x"\nrun = "true"\n[gate]\nshel = "bash"\n', "shel", "shell"),
])
def test_every_unknown_gate_key_gets_a_did_you_mean(tmp_path, gate, key, suggestion):
    (tmp_path / ".007").mkdir()
    (tmp_path / ".007" / "gate.toml").write_text(gate)
    proc = subprocess.run([SANDBOY, "gate", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert f"{key}: unknown key (did you mean '{suggestion}'?" in proc.stderr, proc.stderr


@pytest.mark.parametrize("argv", [
    ["run", "--policy", str(REPO / "policy.example.toml"), "--dry-run"],
    ["doctor", "--json"],
    ["audit", "list"],
    ["audit", "validate", str(SAMPLE)],
    ["gate", "--print-ceiling"],
], ids=lambda argv: " ".join(a if "/" not in a else Path(a).name for a in argv))
def test_an_unwritable_stdout_is_said_once_with_74(argv, tmp_path):
    """/dev/full (ENOSPC) stands for a full disk or a dead terminal: one line, exit 74, no traceback."""
    with open("/dev/full", "w") as full:
        proc = subprocess.run([SANDBOY, *argv], stdout=full, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                              text=True, cwd=tmp_path, timeout=120)
    assert_no_traceback(proc)
    assert proc.returncode == 74 and "cannot write the output: No space left on device" in proc.stderr, proc.stderr


def test_a_gate_whose_output_fails_stops_and_writes_its_reports(small_repo, tmp_path):
    import json

    report = tmp_path / "gate.json"
    with open("/dev/full", "w") as full:
        proc = subprocess.run([SANDBOY, "gate", str(small_repo / "repo"), "--json", str(report)], stdout=full,
                              stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, timeout=120)
    assert_no_traceback(proc)
    assert proc.returncode == 74 and "cannot write the output" in proc.stderr, proc.stderr
    assert json.loads(report.read_text())["steps"][0]["status"] == "not_run"


def test_output_to_devnull_swallows_what_is_still_buffered(tmp_path):
    """The one helper `sandboy.cli.finish` and the gate console use when their reader is gone:
    the stream's fd becomes /dev/null, so the buffered bytes are dropped, not written to the old
    target, and a later flush (as at interpreter exit) raises nothing."""
    from sandboy.cli import output_to_devnull

    target = tmp_path / "out"
    with open(target, "w") as stream:
        stream.write("still buffered")
        output_to_devnull(stream)
        stream.flush()
        assert os.path.samestat(os.fstat(stream.fileno()), os.stat(os.devnull))
    assert target.read_text() == ""


def test_dry_run_text_quotes_policy_paths_on_their_own_line(tmp_path: Path) -> None:
    """`--dry-run`'s text quotes the policy's paths (a warning names a path that does not exist):
    a path holding a line break must not print a line of its own (here a forged 'DEGRADED:' or a
    workflow command), as `sandboy run` itself shows the same warning on one line."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from printed import assert_safe

    policy = tmp_path / "p.toml"
    policy.write_text('version = 1\n[fs]\nread = ["/nonexistent-rvaudit\\nDEGRADED: nothing\\n::error::forged"]\n')
    proc = subprocess.run([SANDBOY, "run", "--policy", str(policy), "--dry-run", "--", "/bin/true"],
                          capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert_safe(proc.stdout)
    out = proc.stdout.decode()
    assert "\nDEGRADED: nothing" not in out and "/nonexistent-rvaudit\\x0aDEGRADED: nothing\\x0a::error::forged" in out
