"""The three layers of adapters.toml, positively: a repository's `.007/adapters.toml` adds a tool
that `sandboy audit run` runs; an operator file (`--adapters`) overrides it; and only the
operator's `network = true` gives a phase the network — checked with a loopback server this test
starts (host side: did a connection carrying the marker arrive?)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

SANDBOY = [sys.executable, "-m", "sandboy"]

pytestmark = pytest.mark.slow

# The repository's own analyser: tries to reach the port, reports what happened as one result.
PROBE = """
import json, os, socket, sys
out, port, marker = sys.argv[1], int(sys.argv[2]), sys.argv[3]
try:
    with socket.create_connection(('127.0.0.1', port), timeout=5) as conn:
        conn.sendall(marker.encode())
    outcome = 'connected'
except OSError as exc:
    outcome = f'no connection: {exc}'
result = {'ruleId': 'NET1', 'level': 'note', 'message': {'text': outcome},
          'locations': [{'physicalLocation': {'artifactLocation': {'uri': 'probe.py'}, 'region': {'startLine': 1}}}]}
with open(os.path.join(out, 'probe.sarif'), 'w') as fh:
    json.dump({'version': '2.1.0', 'runs': [{'tool': {'driver': {'name': 'netprobe'}}, 'results': [result]}]}, fh)
"""

ENTRY = """
[tools.netprobe]
adapter = "passthrough"
output = {{ kind = "sarif", from = "file", file = "probe.sarif" }}
[[tools.netprobe.phases]]
name = "{phase}"
argv = ["python3", "{{repo}}/probe.py", "{{out}}", "{port}", "{marker}"]
include = ["system", "python"]
{network}
"""


@pytest.fixture
def listener():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.settimeout(0)
    yield sock
    sock.close()


def _received(sock: socket.socket) -> bytes:
    """What reached the listener (host side), b'' when nothing connected."""
    try:
        conn, _ = sock.accept()
    except BlockingIOError:
        return b""
    with conn:
        conn.settimeout(5)
        return conn.recv(256)


def _repo(tmp_path: Path, port: int, marker: str) -> Path:
    repo = tmp_path / "repo"
    (repo / ".007").mkdir(parents=True)
    (repo / "probe.py").write_text(PROBE)
    (repo / ".007" / "adapters.toml").write_text(
        "version = 1\n" + ENTRY.format(phase="repo-scan", port=port, marker=marker, network=""))
    return repo


def _run(repo: Path, tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict, dict]:
    out = tmp_path / "merged.sarif"
    done = subprocess.run([*SANDBOY, "audit", "run", str(repo), "--tools", "netprobe", *args, "-o", str(out), "--json"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done, json.loads(done.stdout), json.loads(out.read_text())


def test_a_repository_adds_a_tool_and_it_runs_without_the_network(tmp_path: Path, listener: socket.socket) -> None:
    marker = f"repo-{os.getpid()}-{listener.getsockname()[1]}"
    repo = _repo(tmp_path, listener.getsockname()[1], marker)
    _, status, log = _run(repo, tmp_path)
    assert [(t["tool"], t["status"], t["results"]) for t in status["tools"]] == [("netprobe", "ran", 1)]
    (run,) = log["runs"]
    assert run["automationDetails"]["id"] == "sandboy/netprobe/"
    assert run["invocations"][0]["properties"]["sandboy"]["phase"] == "repo-scan"
    assert run["results"][0]["message"]["text"].startswith("no connection"), run["results"][0]["message"]
    assert _received(listener) == b"", "a repository's tool reached a host port"


def test_an_operator_file_overrides_the_repositorys_entry_and_can_grant_the_network(tmp_path: Path,
                                                                                    listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    marker = f"operator-{os.getpid()}-{port}"
    repo = _repo(tmp_path, port, f"repo-{marker}")
    ops = tmp_path / "operator.toml"
    ops.write_text("version = 1\n" + ENTRY.format(phase="operator-scan", port=port, marker=marker, network="network = true"))
    _, status, log = _run(repo, tmp_path, "--adapters", str(ops))
    (run,) = log["runs"]
    # The operator's entry ran, not the repository's: its phase name, its marker.
    assert run["invocations"][0]["properties"]["sandboy"]["phase"] == "operator-scan"
    assert run["results"][0]["message"]["text"] == "connected"
    assert _received(listener) == marker.encode()
