"""Gate steps with net.domains: met with the ceiling, and the report lists each step's hosts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sandboy.gate import ceiling as ceilings

from egresskit import Origin


@pytest.fixture(scope="module")
def origin():
    server = Origin()
    yield server
    server.close()


def test_step_domains_met_with_the_ceiling_and_reported(tmp_path, origin):
    port = origin.port
    repo = tmp_path / "repo"
    (repo / ".007").mkdir(parents=True)
    (repo / ".007" / "gate.toml").write_text(
        '[[step]]\nname = "fetch"\npolicy = "p"\n'
        f'run = "curl -sS -o /dev/null -w %{{http_code}}, http://allowed.test:{port}/ http://denied.test:{port}/"\n'
        '[policy.p]\nversion = 1\n'
        f'net.domains = ["allowed.test:{port}", "denied.test:{port}"]\nnet.private = ["127.0.0.1/32"]\n')
    ceiling = tmp_path / "ceiling.toml"
    ceiling.write_text(ceilings.to_toml({**ceilings.BUILTIN, "net": {"domains": [f"*.test:{port}"],
                                                                      "domains_deny": [f"denied.test:{port}"],
                                                                      "private": ["127.0.0.0/8"]}}))
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 allowed.test denied.test\n")
    report = tmp_path / "report.json"
    env = dict(os.environ, SANDBOY_EGRESS_HOSTS=str(hosts), SANDBOY_CACHE_DIR=str(tmp_path / "cache"))
    logs = tmp_path / "logs"
    summary = tmp_path / "summary.md"
    proc = subprocess.run([sys.executable, "-m", "sandboy.gate.cli", str(repo), "--ceiling", str(ceiling),
                           "--json", str(report), "--logs", str(logs)], capture_output=True, text=True,
                          env=dict(env, GITHUB_STEP_SUMMARY=str(summary)), timeout=120)
    # the Markdown summary lists the hosts too
    assert f"fetch: allowed allowed.test:{port}; refused denied.test:{port}" in summary.read_text()
    data = json.loads(report.read_text())
    egress_logs = list(logs.glob("*.egress.jsonl"))
    assert len(egress_logs) == 1, list(logs.iterdir())
    decisions = [json.loads(line) for line in egress_logs[0].read_text().splitlines()]
    assert [(d["decision"], d["host"]) for d in decisions] == [("allow", "allowed.test"), ("deny", "denied.test")]
    step = data["steps"][0]
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    tail = step["output_tail"]
    assert tail.startswith("200,") and tail.endswith("403,"), tail
    assert f'denied.test:{port} is denied by net.domains_deny "denied.test:{port}"' in tail
    assert step["egress"]["allowed_hosts"] == [f"allowed.test:{port}"]
    assert step["egress"]["refused_hosts"] == [f"denied.test:{port}"]
    assert step["effective_policy"]["net"]["domains_deny"] == [f"denied.test:{port}"]
    import jsonschema

    schema = json.loads((Path(__file__).parents[2] / "src/sandboy/gate/report.schema.json").read_text())
    jsonschema.validate(data, schema)


def test_step_asking_beyond_the_ceiling_is_narrowed(tmp_path):
    repo = tmp_path / "repo"
    (repo / ".007").mkdir(parents=True)
    (repo / ".007" / "gate.toml").write_text(
        '[[step]]\nname = "s"\npolicy = "p"\nrun = "true"\n'
        '[policy.p]\nversion = 1\nnet.domains = ["a.x.org", "*.y.org"]\n')
    ceiling = tmp_path / "ceiling.toml"
    ceiling.write_text(ceilings.to_toml({**ceilings.BUILTIN, "net": {"domains": ["*.x.org", "b.y.org"]}}))
    proc = subprocess.run([sys.executable, "-m", "sandboy.gate.cli", str(repo), "--ceiling", str(ceiling)],
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, SANDBOY_CACHE_DIR=str(tmp_path / "cache")))
    assert "step s asked for network to *.y.org; the ceiling does not allow it" in proc.stdout, proc.stdout
    assert "a.x.org;" not in proc.stdout  # covered by *.x.org: kept, no narrowing line
