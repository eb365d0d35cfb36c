"""Gate steps with net.domains: met with the ceiling, and the report lists each step's hosts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from sandboy.gate import ceiling as ceilings


def _gate(tmp_path, gate_toml: str, ceiling_net: dict, hosts=(), args=(), env=None):
    """`sandboy.gate.cli` on a repository whose .007/gate.toml is `gate_toml`, under the built-in
    ceiling with `ceiling_net` as its [net]; the proxy resolves `hosts` to 127.0.0.1."""
    repo = tmp_path / "repo"
    (repo / ".007").mkdir(parents=True)
    (repo / ".007" / "gate.toml").write_text(gate_toml)
    ceiling = tmp_path / "ceiling.toml"
    ceiling.write_text(ceilings.to_toml({**ceilings.BUILTIN, "net": ceiling_net}))
    env = dict(os.environ, SANDBOY_CACHE_DIR=str(tmp_path / "cache"), **(env or {}))
    if hosts:
        (tmp_path / "hosts").write_text("127.0.0.1 " + " ".join(hosts) + "\n")
        env["SANDBOY_EGRESS_HOSTS"] = str(tmp_path / "hosts")
    return subprocess.run([sys.executable, "-m", "sandboy.gate.cli", str(repo), "--ceiling", str(ceiling), *args],
                          capture_output=True, text=True, env=env, timeout=120)


def test_step_domains_met_with_the_ceiling_and_reported(tmp_path, origin):
    port = origin.port
    report, logs, summary = tmp_path / "report.json", tmp_path / "logs", tmp_path / "summary.md"
    proc = _gate(tmp_path,
                 '[[step]]\nname = "fetch"\npolicy = "p"\n'
                 f'run = "curl -sS -o /dev/null -w %{{http_code}}, http://allowed.test:{port}/ http://denied.test:{port}/"\n'
                 '[policy.p]\nversion = 1\n'
                 f'net.domains = ["allowed.test:{port}", "denied.test:{port}"]\nnet.private = ["127.0.0.1/32"]\n',
                 {"domains": [f"*.test:{port}"], "domains_deny": [f"denied.test:{port}"], "private": ["127.0.0.0/8"]},
                 hosts=("allowed.test", "denied.test"), args=("--json", str(report), "--logs", str(logs)),
                 env={"GITHUB_STEP_SUMMARY": str(summary)})
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
    proc = _gate(tmp_path,
                 '[[step]]\nname = "s"\npolicy = "p"\nrun = "true"\n'
                 '[policy.p]\nversion = 1\nnet.domains = ["a.x.org", "*.y.org"]\n',
                 {"domains": ["*.x.org", "b.y.org"]})
    assert "step s asked for network to *.y.org; the ceiling does not allow it" in proc.stdout, proc.stdout
    assert "a.x.org;" not in proc.stdout  # covered by *.x.org: kept, no narrowing line


def test_a_step_never_reaches_an_earlier_steps_proxy_or_processes(tmp_path, origin):
    """Each gate step gets its own network namespace and proxy, even where its compiled cage is
    reused: a background process of step 1 is gone before step 2 (which sees none in its /proc),
    step 2 (same policy) is served by its own proxy, and step 3 (another policy) meets its own
    rules on 127.0.0.1:3128, not an earlier step's."""
    port = origin.port
    marker = f"sandboy-gate-step-{os.getpid()}"
    fetch = f"curl -sS -o /dev/null -w %{{http_code}} http://allowed.test:{port}/"
    report = tmp_path / "report.json"
    proc = _gate(tmp_path,
                 '[[step]]\nname = "first"\npolicy = "p1"\n'
                 f"run = \"bash -c '(exec -a {marker} sleep 300 &)'; {fetch}\"\n"
                 '[[step]]\nname = "second"\npolicy = "p1"\n'
                 # "[s]..." matches the sleeper's name, not the grep's (or this shell's) own command line
                 f"run = \"echo seen=$(cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\\\0' ' ' | grep -c '[s]{marker[1:]}'); {fetch}\"\n"
                 '[[step]]\nname = "third"\npolicy = "p2"\n'
                 f'run = "{fetch}"\n'
                 '[policy.p1]\nversion = 1\n'
                 f'net.domains = ["allowed.test:{port}"]\nnet.private = ["127.0.0.1/32"]\n'
                 '[policy.p2]\nversion = 1\n'
                 f'net.domains = ["other.test:{port}"]\nnet.private = ["127.0.0.1/32"]\n',
                 {"domains": [f"*.test:{port}"], "private": ["127.0.0.0/8"]},
                 hosts=("allowed.test", "other.test"), args=("--json", str(report)))
    steps = {s["name"]: s for s in json.loads(report.read_text())["steps"]}
    assert steps["first"]["output_tail"].endswith("200"), steps["first"]
    assert steps["second"]["output_tail"].startswith("seen=0") and steps["second"]["output_tail"].endswith("200"), \
        steps["second"]
    assert steps["third"]["output_tail"].startswith("403"), steps["third"]
    assert steps["third"]["egress"]["refused_hosts"] == [f"allowed.test:{port}"]
    assert proc.returncode == 0, (proc.stdout, proc.stderr)  # curl without -f exits 0 on a 403
    survivors = subprocess.run(["pgrep", "-f", f"^{marker}"], capture_output=True, text=True).stdout
    assert survivors == "", survivors
