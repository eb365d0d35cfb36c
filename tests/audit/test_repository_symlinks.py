"""`sandboy audit run` looks up what the repository names strictly inside it (repository_files).

Before, each lookup followed symlinks with the host's rights: a tool's `requires = ["k"]` with
`k -> /host/secret` ran the tool or skipped it by whether the host file existed; a configuration
file chosen the same way was named in the SARIF (`invocations[].properties.sandboy.config`),
which a repository's CI uploads; `.007 -> /host/dir` read `/host/dir/adapters.toml`. Each probe
runs the attack twice, the host target present and absent, and checks on the host side that the
two runs are indistinguishable (and that nothing outside was read); each twin links inside."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

EMPTY_SARIF = '{\\"version\\":\\"2.1.0\\",\\"runs\\":[{\\"tool\\":{\\"driver\\":{\\"name\\":\\"t\\"}},\\"results\\":[]}]}'


def _tool(extra: str = "", argv_extra: str = "") -> str:
    return ('version = 1\n[tools.t]\nadapter = "passthrough"\noutput = { kind = "sarif", from = "stdout" }\n'
            f'{extra}\n[[tools.t.phases]]\ninclude = ["system"]\n'
            f'argv = ["sh", "-c", "echo \'{EMPTY_SARIF}\'"{argv_extra}]\n')


def _audit(repo: Path, tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / "out.sarif"
    if out.exists():
        out.unlink()
    done = subprocess.run([sys.executable, "-m", "sandboy", "audit", "run", str(repo), "--tools=t", "--json",
                           "-o", str(out), *args], capture_output=True, text=True, timeout=120)
    assert "Traceback" not in done.stderr, done.stderr
    return done, (json.loads(done.stdout) if done.stdout else {})


def _repo(tmp_path: Path, adapters: str) -> Path:
    repo = tmp_path / "repo"
    (repo / ".007").mkdir(parents=True, exist_ok=True)
    (repo / ".007" / "adapters.toml").write_text(adapters)
    return repo


def _relink(link: Path, target) -> None:
    if link.is_symlink():
        link.unlink()
    os.symlink(target, link)


@pytest.fixture
def host(tmp_path: Path) -> Path:
    host = tmp_path / "host"
    host.mkdir()
    (host / "secret").write_text("host secret\n")
    return host


def _status(report: dict) -> tuple:
    tool = report["tools"][0]
    return tool["status"], tool["reason"], report["status"]


def test_a_required_file_linking_out_is_no_oracle(tmp_path: Path, host: Path) -> None:
    repo = _repo(tmp_path, _tool('requires = ["k"]'))
    seen = []
    for target in (host / "secret", host / "missing"):
        _relink(repo / "k", target)
        done, report = _audit(repo, tmp_path)
        seen.append((done.returncode, _status(report)))
    assert seen[0] == seen[1], seen
    code, (status, reason, _) = seen[0]
    assert code == 1 and status == "failed" and "leads outside the repository through the symlink 'k'" in reason
    # twins: a required file linking inside runs the tool; a missing one skips it
    (repo / "real").write_text("x")
    _relink(repo / "k", "real")
    assert _status(_audit(repo, tmp_path)[1])[0] == "ran"
    (repo / "k").unlink()
    assert _status(_audit(repo, tmp_path)[1])[:2] == ("skipped", "the repository has no k")


def test_a_configuration_file_linking_out_is_no_oracle_in_the_sarif(tmp_path: Path, host: Path) -> None:
    config = '[tools.t.config]\nfiles = ["cfg.yml"]\nargv = ["--config", "{file}"]\notherwise = ["--none"]'
    repo = _repo(tmp_path, _tool(config, ', "sh", "{config}"'))
    seen = []
    for target in (host / "secret", host / "missing"):
        _relink(repo / "cfg.yml", target)
        done, report = _audit(repo, tmp_path)
        seen.append((done.returncode, _status(report), (tmp_path / "out.sarif").exists()))
    assert seen[0] == seen[1], seen
    assert seen[0][1][0] == "failed" and "configuration 'cfg.yml' leads outside the repository" in seen[0][1][1]
    # the twin: a configuration file linking inside is picked, and the tool is given the file itself
    (repo / "conf").mkdir()
    (repo / "conf" / "real.yml").write_text("rules: []\n")
    _relink(repo / "cfg.yml", "conf/real.yml")
    done, report = _audit(repo, tmp_path)
    assert done.returncode == 0, done.stderr
    run = json.loads((tmp_path / "out.sarif").read_text())["runs"][0]
    invocation = run["invocations"][0]
    assert invocation["properties"]["sandboy"]["config"] == "the repository's cfg.yml"
    assert invocation["arguments"][-2:] == ["--config", str((repo / "conf" / "real.yml").resolve())]


@pytest.mark.parametrize("link", [".007", ".007/adapters.toml"])
def test_the_repositorys_adapters_file_linking_out_is_refused_whether_or_not_it_exists(
        tmp_path: Path, host: Path, link: str) -> None:
    """`.007 -> /host/dir` read /host/dir/adapters.toml with the host's rights and ran its
    tools. Now exit 2 with the same message either way; host side: the outside tool never ran."""
    repo = tmp_path / "repo"
    (repo / ".007").mkdir(parents=True)
    marker = host / "ran"
    (host / "adapters.toml").write_text(_tool().replace("echo '", f"echo ran > {marker}; echo '"))
    messages = []
    for present in (True, False):
        if not present:
            (host / "adapters.toml").rename(host / "elsewhere.toml")
        if link == ".007":
            if (repo / ".007").is_dir() and not (repo / ".007").is_symlink():
                (repo / ".007").rmdir()
            _relink(repo / ".007", host)
        else:
            _relink(repo / ".007" / "adapters.toml", host / "adapters.toml")
        done, _ = _audit(repo, tmp_path)
        assert done.returncode == 2, done.stderr
        messages.append(done.stderr)
    assert messages[0] == messages[1] and "leads outside the repository" in messages[0]
    assert not marker.exists()


def test_twin_a_gate_directory_linked_inside_the_repository_works(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "ci" / "007").mkdir(parents=True)
    (repo / "ci" / "007" / "adapters.toml").write_text(_tool())
    os.symlink("ci/007", repo / ".007")
    done, report = _audit(repo, tmp_path)
    assert done.returncode == 0 and _status(report)[0] == "ran", done.stderr


def test_an_output_symlink_is_refused_the_same_whether_its_target_exists(tmp_path: Path, host: Path) -> None:
    """The tool (confined) leaves {out}/x.sarif as a symlink to a host file: not read, and the
    reason is the same whether or not that host file exists."""
    reasons = []
    for target in (host / "secret", host / "missing"):
        adapters = _tool().replace('from = "stdout"', 'from = "file", file = "x.sarif"').replace(
            f"echo '{EMPTY_SARIF}'", f"ln -s {target} {{out}}/x.sarif")
        done, report = _audit(_repo(tmp_path, adapters), tmp_path)
        reasons.append(_status(report))
    assert reasons[0] == reasons[1] and "is a symlink or lies under one: not read" in reasons[0][1], reasons


def test_a_repositorys_venv_cannot_widen_its_tools_cage(tmp_path: Path, host: Path) -> None:
    """`audit run` is run from the repository itself (REPO defaults to "."), and the `python`
    preset trusted a `.venv` in the working directory: the repository's `.venv/pyvenv.cfg`
    `home = /host/bin` made /host readable (and /host/bin executable) to the repository's own
    tool, which printed /host/secret into the SARIF its CI uploads. Checked on the host: the
    merged SARIF does not hold the secret. The twin: a python tool (the preset still finds the
    interpreters on PATH and Sandboy's own) runs and writes its log."""
    (host / "bin").mkdir()
    repo = tmp_path / "repo"
    (repo / ".venv").mkdir(parents=True)
    (repo / ".venv" / "pyvenv.cfg").write_text(f"home = {host / 'bin'}\n")
    steal = (f's=$(cat {host}/secret); echo \\"{{\\\\\\"version\\\\\\":\\\\\\"2.1.0\\\\\\",\\\\\\"runs\\\\\\":[{{\\\\\\"tool\\\\\\":'
             '{\\\\\\"driver\\\\\\":{\\\\\\"name\\\\\\":\\\\\\"$s\\\\\\"}},\\\\\\"results\\\\\\":[]}]}\\"')
    (repo / ".007").mkdir()
    (repo / ".007" / "adapters.toml").write_text(
        'version = 1\n[tools.t]\nadapter = "passthrough"\noutput = { kind = "sarif", from = "stdout" }\n'
        f'[[tools.t.phases]]\ninclude = ["system", "python"]\nargv = ["sh", "-c", "{steal}"]\n'
        '[tools.py]\nadapter = "passthrough"\noutput = { kind = "sarif", from = "stdout" }\n'
        '[[tools.py.phases]]\ninclude = ["system", "python"]\n'
        'argv = ["python3", "-c", "import json; print(json.dumps({\'version\': \'2.1.0\', \'runs\': []}))"]\n')
    out = tmp_path / "out.sarif"
    done = subprocess.run([sys.executable, "-m", "sandboy", "audit", "run", "--tools=t,py", "--json", "-o", str(out)],
                          capture_output=True, text=True, timeout=120, cwd=repo)
    assert "Traceback" not in done.stderr, done.stderr
    statuses = {t["tool"]: t["status"] for t in json.loads(done.stdout)["tools"]}
    assert statuses == {"t": "ran", "py": "ran"}, done.stdout + done.stderr
    assert "host secret" not in out.read_text()


def test_an_output_under_a_symlinked_directory_is_refused_the_same_whether_its_target_exists(
        tmp_path: Path, host: Path) -> None:
    """`{out}/sub -> /host/dir` and output file `sub/x.sarif`: an lstat of the file followed the
    directory link, so "wrote no x.sarif" or "a symlink" told whether /host/dir/x.sarif existed."""
    (host / "dir").mkdir()
    (host / "dir" / "x.sarif").write_text("{}")
    reasons = []
    for target in (host / "dir", host / "missing"):
        adapters = _tool().replace('from = "stdout"', 'from = "file", file = "sub/x.sarif"').replace(
            f"echo '{EMPTY_SARIF}'", f"ln -s {target} {{out}}/sub")
        done, report = _audit(_repo(tmp_path, adapters), tmp_path)
        reasons.append(_status(report))
    assert reasons[0] == reasons[1] and "is a symlink or lies under one: not read" in reasons[0][1], reasons
