"""What a repository's own `.007/adapters.toml` may ask per phase (toolconfig.REPOSITORY_LIMITS).

The repository is the untrusted party: a phase of a tool it adds (its argv may be `sh -c ...`)
could ask for a day (86,400 s) and a TiB of memory, and got no process limit at all. Now a
repository's phase is bounded by the gate's step ceiling (one hour, 512 processes) and 8 GiB;
more is exit 2 naming the file, the key, the limit and the operator's override (`[repository]`
in `--adapters FILE`), before anything runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sandboy.audit import pipeline, toolconfig
from sandboy.audit.errors import UsageError
from sandboy.gate.ceiling import BUILTIN_LIMITS

EMPTY_SARIF = '{\\"version\\":\\"2.1.0\\",\\"runs\\":[]}'


def _repo(tmp_path: Path, phase_extra: str, script: str = "echo ran > {out}/ran") -> Path:
    repo = tmp_path / "repo"
    (repo / ".007").mkdir(parents=True, exist_ok=True)
    (repo / ".007" / "adapters.toml").write_text(
        'version = 1\n[tools.t]\nadapter = "passthrough"\noutput = { kind = "sarif", from = "stdout" }\n'
        f'[[tools.t.phases]]\ninclude = ["system"]\n{phase_extra}\n'
        f'argv = ["sh", "-c", "{script}; echo \'{EMPTY_SARIF}\'"]\n')
    return repo


def _audit(repo: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sandboy", "audit", "run", str(repo), "--tools=t", "--json",
                           "-o", str(tmp_path / "out.sarif"), *args], capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "TMPDIR": str(tmp_path),
                               "SANDBOY_CACHE_DIR": os.environ["SANDBOY_CACHE_DIR"]})  # the suite's (tests/conftest.py)


def test_the_repository_limits_are_the_gates_step_ceiling() -> None:
    assert toolconfig.REPOSITORY_LIMITS["wall_seconds"] == BUILTIN_LIMITS["wall_seconds"] == 3600
    assert toolconfig.REPOSITORY_LIMITS["processes"] == BUILTIN_LIMITS["processes"] == 512
    # the built-in analysers fit what a repository may ask: the limits are not below real needs
    for tool in toolconfig.load().values():
        for phase in tool.phases:
            assert all(getattr(phase, k) <= v for k, v in toolconfig.REPOSITORY_LIMITS.items()), (tool.name, phase)


@pytest.mark.parametrize("limit, value", [("wall_seconds", 86400), ("memory_mib", 1 << 20), ("processes", 65536),
                                          ("wall_seconds", 3601), ("memory_mib", 8193), ("processes", 513)])
def test_a_repository_phase_asking_more_is_refused_and_nothing_runs(tmp_path: Path, limit: str, value: int) -> None:
    """The attack: a repository's tool asking for more than the ceiling. Exit 2 naming file,
    key, limit and override; checked on the host: the phase never ran (no marker in any {out}
    under the run's work directory), no SARIF written."""
    repo = _repo(tmp_path, f"{limit} = {value}")
    done = _audit(repo, tmp_path)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    most = toolconfig.REPOSITORY_LIMITS[limit]
    assert (f"{repo}/.007/adapters.toml: tools.t.phases[0].{limit}: {value} is more than a repository's "
            f"adapters.toml may ask ({most}); the operator may allow it with `[repository] {limit} = {value}` "
            "in --adapters FILE") in done.stderr, done.stderr
    assert not list(tmp_path.glob("sandboy-audit-run-*/**/ran")) and not (tmp_path / "out.sarif").exists()


def test_twin_within_the_limits_runs_and_the_operator_can_allow_more(tmp_path: Path) -> None:
    repo = _repo(tmp_path, "wall_seconds = 3600\nmemory_mib = 8192\nprocesses = 512")
    done = _audit(repo, tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["tools"][0]["status"] == "ran"
    # the operator raises one limit in its own file: the same repository entry asking more runs
    repo = _repo(tmp_path, "wall_seconds = 7200")
    ops = tmp_path / "ops.toml"
    ops.write_text("version = 1\n[repository]\nwall_seconds = 7200\n")
    done = _audit(repo, tmp_path, "--adapters", str(ops))
    assert done.returncode == 0, done.stderr
    # ... and may lower one: then the default 900 s is too much for this repository
    ops.write_text("version = 1\n[repository]\nwall_seconds = 60\n")
    with pytest.raises(UsageError, match=r"wall_seconds: 900 is more than a repository's adapters.toml may ask \(60\)"):
        toolconfig.load(_repo(tmp_path, ""), ops)


def test_an_operator_entry_of_the_same_name_replaces_the_repositorys_unchecked(tmp_path: Path) -> None:
    repo = _repo(tmp_path, "wall_seconds = 86400")
    ops = tmp_path / "ops.toml"
    ops.write_text('version = 1\n[tools.t]\nadapter = "passthrough"\noutput = { kind = "sarif", from = "stdout" }\n'
                   '[[tools.t.phases]]\nargv = ["true"]\nwall_seconds = 5\n')
    assert toolconfig.load(repo, ops)["t"].phases[0].wall_seconds == 5


@pytest.mark.parametrize("text, key, problem", [
    ("version = 1\n[repository]\nwall_seconds = 0\n", "repository.wall_seconds", "integer from 1 to 86400"),
    ("version = 1\n[repository]\nprocesses = 70000\n", "repository.processes", "integer from 1 to 65536"),
    ("version = 1\n[repository]\nwall_secs = 9\n", "repository.wall_secs", "did you mean 'wall_seconds'"),
    ("version = 1\nrepository = 3\n", "repository", "expected a table"),
])
def test_the_operators_repository_table_is_validated(tmp_path: Path, text: str, key: str, problem: str) -> None:
    ops = tmp_path / "ops.toml"
    ops.write_text(text)
    with pytest.raises(UsageError) as err:
        toolconfig.load(operator=ops)
    assert str(err.value).startswith(f"{ops}: {key}: ") and problem in str(err.value), str(err.value)


def test_a_repository_file_cannot_set_its_own_limits(tmp_path: Path) -> None:
    repo = _repo(tmp_path, "")
    path = repo / ".007" / "adapters.toml"
    path.write_text("version = 1\n[repository]\nwall_seconds = 86400\n" + path.read_text().split("\n", 1)[1])
    with pytest.raises(UsageError, match="repository: only an operator file"):
        toolconfig.load(repo)


def test_every_phase_gets_a_process_limit(tmp_path: Path) -> None:
    """Before, a phase's cage had no process limit: a repository's `sh -c` tool could fork
    without bound. The probe: a phase allowed 20 processes tries to leave 40 sleepers behind and
    reports how many it started (on stderr, which the failed tool's reason quotes): fewer than
    20, the shell itself counting. The default (no `processes` key) is the gate's 512, for the
    built-in analysers too."""
    script = "n=0; for i in $(seq 40); do (sleep 5 &) 2>/dev/null && n=$((n+1)); done; echo started=$n >&2; exit 3"
    done = _audit(_repo(tmp_path, "processes = 20", script), tmp_path)
    assert done.returncode == 1, done.stderr
    reason = json.loads(done.stdout)["tools"][0]["reason"]
    started = int(reason.rsplit("started=", 1)[1].split()[0])
    assert 0 < started < 20, reason
    # the twin: with the default limit the same shell starts all 40
    done = _audit(_repo(tmp_path, "", script), tmp_path)
    assert "started=40" in json.loads(done.stdout)["tools"][0]["reason"]
    phase = toolconfig.load()["bandit"].phases[0]
    places = {"{repo}": "/r", "{out}": "/o", "{home}": "/h", "{builtin}": "/b"}
    assert pipeline.phase_policy(phase, places, "/usr/bin/true", "/usr/bin")["limits"]["processes"] == 512
