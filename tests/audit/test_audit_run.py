"""`sandboy audit run` end to end (issue 12): real Bandit, Ruff and Semgrep on the bundled demo
project, each under a Sandboy cage, one merged log that validates and passes GitHub's preflight;
and a hostile tool entry whose escape attempts are checked from the host side."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "examples" / "audit-demo"
SANDBOY = [sys.executable, "-m", "sandboy"]

pytestmark = pytest.mark.slow


def _audit(*args: str, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SANDBOY, "audit", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    # A copy outside any git checkout: the tools see only the project, as in a CI workspace.
    copy = tmp_path / "audit-demo"
    shutil.copytree(DEMO, copy)
    return copy


def test_bandit_ruff_semgrep_one_log_that_validates_and_passes_github(demo: Path, tmp_path: Path) -> None:
    for tool in ("bandit", "ruff", "semgrep"):
        if shutil.which(tool, path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}") is None:
            pytest.fail(f"{tool} is not installed: pip install -e '.[test]' installs it (pyproject.toml test extras)")
    out = tmp_path / "merged.sarif"
    done = _audit("run", str(demo), "--tools", "bandit,ruff,semgrep", "-o", str(out), "--github", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    status = json.loads(done.stdout)
    assert [t["status"] for t in status["tools"]] == ["ran", "ran", "ran"], status
    log = json.loads(out.read_text())
    by_tool = {run["tool"]["driver"]["name"].lower(): run for run in log["runs"]}
    assert set(by_tool) == {"bandit", "ruff", "semgrep"}
    rules = {name: {r.get("ruleId") for r in run["results"]} for name, run in by_tool.items()}
    assert {"B602", "B307", "B105"} <= rules["bandit"]
    assert {"F401", "F821"} <= rules["ruff"]
    assert {"demo-shell-true", "demo-eval"} <= {r.rsplit(".", 1)[-1] for r in rules["semgrep"]}
    for name, run in by_tool.items():
        assert run["automationDetails"]["id"] == f"sandboy/{name}/"
        (inv,) = run["invocations"]
        confined = inv["properties"]["sandboy"]
        assert len(confined["policy_sha256"]) == 64 and confined["confinement"] in ("enforced", "degraded")
        assert inv["executionSuccessful"] is True and isinstance(inv["exitCode"], int)
        for result in run["results"]:
            loc = result["locations"][0]["physicalLocation"]["artifactLocation"]
            assert loc == {"uri": loc["uri"], "uriBaseId": "%SRCROOT%"} and not loc["uri"].startswith("/")
            assert result["partialFingerprints"]["primaryLocationLineHash"]
    # The same line found by Bandit and Semgrep has the same fingerprint (computed from the source).
    fp = lambda run, line: {r["partialFingerprints"]["primaryLocationLineHash"] for r in run["results"]
                            if r["locations"][0]["physicalLocation"]["region"]["startLine"] == line}
    assert fp(by_tool["bandit"], 9) == fp(by_tool["semgrep"], 9)
    check = _audit("validate", "--github", "--strict", str(out), cwd=tmp_path)
    assert check.returncode == 0, check.stdout
    assert "absolute URI" not in check.stdout and "without partialFingerprints" not in check.stdout


def test_missing_tools_are_skipped_with_a_notice_and_failures_do_not_stop_the_others(demo: Path, tmp_path: Path) -> None:
    ops = tmp_path / "ops.toml"
    ops.write_text("""version = 1
[tools.broken]
adapter = "passthrough"
output = { kind = "sarif", from = "file", file = "none.sarif" }
[[tools.broken.phases]]
name = "fail"
argv = ["sh", "-c", "echo analyser crashed >&2; exit 3"]
include = ["system"]

[tools.hangs]
adapter = "passthrough"
output = { kind = "sarif", from = "stdout" }
[[tools.hangs.phases]]
name = "forever"
argv = ["sleep", "600"]
include = ["system"]
wall_seconds = 2
""")
    out = tmp_path / "merged.sarif"
    done = _audit("run", str(demo), "--adapters", str(ops), "--tools", "broken,hangs,codeql,ruff", "-o", str(out), cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    table = done.stderr
    assert "broken" in table and "failed" in table and "exit status 3" in table and "analyser crashed" in table
    assert "codeql" in table and "skipped" in table and "codeql is not installed" in table
    hangs = next(line for line in table.splitlines() if line.startswith("hangs "))
    assert "failed" in hangs and "timed_out" in hangs, hangs
    log = json.loads(out.read_text())
    assert [run["tool"]["driver"]["name"] for run in log["runs"]] == ["ruff"]


def test_a_hostile_tool_cannot_write_outside_its_output_or_connect_out(demo: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    marker = f"hostile-{os.getpid()}-{port}"
    script = f"""
import json, os, socket, sys
tried = {{}}
for target in ({str(demo / 'planted.py')!r}, {str(outside / 'planted.txt')!r}, os.path.expanduser('~root/.{marker}')):
    try:
        open(target, 'w').write('ESCAPED {marker}')
        tried[target] = 'WROTE'
    except OSError as exc:
        tried[target] = exc.strerror
try:
    socket.create_connection(('127.0.0.1', {port}), timeout=3).sendall(b'{marker}')
    tried['connect'] = 'CONNECTED'
except OSError as exc:
    tried['connect'] = str(exc)
out = sys.argv[1]
result = {{'ruleId': 'H1', 'level': 'note', 'message': {{'text': json.dumps(tried)}}}}
open(os.path.join(out, 'hostile.sarif'), 'w').write(json.dumps({{'version': '2.1.0', 'runs': [{{'tool': {{'driver': {{'name': 'hostile'}}}}, 'results': [result]}}]}}))
"""
    (tmp_path / "hostile.py").write_text(script)
    ops = tmp_path / "ops.toml"
    ops.write_text(f"""version = 1
[tools.hostile]
adapter = "passthrough"
output = {{ kind = "sarif", from = "file", file = "hostile.sarif" }}
[[tools.hostile.phases]]
name = "attack"
argv = ["python3", {str(tmp_path / 'hostile.py')!r}, "{{out}}"]
include = ["system", "python"]
read = [{str(tmp_path / 'hostile.py')!r}]
""")
    out = tmp_path / "merged.sarif"
    try:
        done = _audit("run", str(demo), "--adapters", str(ops), "--tools", "hostile", "-o", str(out), cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        # Host side: nothing planted, nothing received.
        assert not (demo / "planted.py").exists()
        assert not (outside / "planted.txt").exists()
        assert not Path(os.path.expanduser(f"~root/.{marker}")).exists()
        try:
            conn, _ = listener.accept()
        except BlockingIOError:
            conn = None
        assert conn is None, "the hostile tool connected to a host port"
    finally:
        listener.close()
    # The twin: the legitimate write into its own output directory worked and was converted.
    log = json.loads(out.read_text())
    (run,) = log["runs"]
    tried = json.loads(run["results"][0]["message"]["text"])
    assert "WROTE" not in tried.values() and tried["connect"] != "CONNECTED", tried
    assert run["invocations"][0]["properties"]["sandboy"]["policy_sha256"]


def test_a_repository_cannot_grant_its_tools_the_network(demo: Path, tmp_path: Path) -> None:
    (demo / ".007").mkdir(exist_ok=True)  # the demo has a gate.toml there
    (demo / ".007" / "adapters.toml").write_text("""version = 1
[tools.exfil]
adapter = "passthrough"
output = { kind = "sarif", from = "stdout" }
[[tools.exfil.phases]]
argv = ["curl", "https://example.com"]
network = true
""")
    done = _audit("run", str(demo), "-o", str(tmp_path / "x.sarif"), cwd=tmp_path, timeout=60)
    assert done.returncode == 2
    assert "adapters.toml: tools.exfil.phases[0].network: a repository cannot grant its tools the network" in done.stderr


@pytest.mark.parametrize("planted", ["ln -s {secret} {out}/x.sarif", "mkdir {out}/d && ln -s {secret_dir} {out}/d/in"])
def test_a_tools_output_that_is_a_symlink_is_not_read(tmp_path: Path, planted: str) -> None:
    """Sandboy reads the tool's output file with the host's rights. A repository's tool that makes
    it a symlink (or puts it under a symlinked directory) to a host file would have that file fed
    to the adapter and into the SARIF, e.g. a JSON config holding a token. Checked on the written
    log: the host file's marker is nowhere; the tool is reported FAILED, saying why."""
    marker = f"host-secret-{os.getpid()}"
    secret_dir = tmp_path / "host"
    secret_dir.mkdir()
    secret = secret_dir / "x.sarif"
    secret.write_text(json.dumps({"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "t"}}, "results": [
        {"ruleId": "R", "message": {"text": marker}}]}]}))
    (secret_dir / "in").mkdir()
    (secret_dir / "in" / "x.sarif").write_text(secret.read_text())
    repo = tmp_path / "repo"
    (repo / ".007").mkdir(parents=True)
    file = "x.sarif" if "d/in" not in planted else "d/in/x.sarif"
    command = planted.format(secret=secret, secret_dir=secret_dir / "in", out="{out}")
    (repo / ".007" / "adapters.toml").write_text(
        f'version = 1\n[tools.t]\nadapter = "passthrough"\noutput = {{ kind = "sarif", from = "file", file = "{file}" }}\n'
        f'[[tools.t.phases]]\ninclude = ["system"]\nargv = ["sh", "-c", "{command}"]\n')
    done = _audit("run", str(repo), "--tools", "t", "-o", str(tmp_path / "out.sarif"), cwd=tmp_path, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "is a symlink or lies under one: not read" in done.stderr
    assert marker not in done.stderr and not (tmp_path / "out.sarif").exists()
