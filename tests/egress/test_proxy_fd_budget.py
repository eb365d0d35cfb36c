"""The egress proxy runs in the process that supervises the run (the gate itself for gate steps,
the forked supervisor of `sandboy run`): every connection the caged command opens to it is an fd
in THAT process. Session 8 review (input and egress): a gate step opening ~1,100 connections to
its proxy under the common soft RLIMIT_NOFILE of 1024 took every fd of the gate; at the step's
timeout `reaping.descendants()` could no longer list /proc (EMFILE, read as "no process"), so
nothing was killed and the gate waited in waitpid until the step chose to end — an 8 s timeout
held for 65 s, and a step sleeping for ever held the gate (and its time budget) for ever.

Checked from the host side: the gate's wall time, the step reported timed out, the next step
ran, and no process carrying the test's marker is left."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time

from prockit import mentioning

from sandboy.gate import ceiling as ceilings

HOLD = r"""
import os, socket, sys, time
# the command may raise its own soft limit to the hard one: the proxy's process may not
soft, hard = __import__("resource").getrlimit(__import__("resource").RLIMIT_NOFILE)
__import__("resource").setrlimit(__import__("resource").RLIMIT_NOFILE, (hard, hard))
host, port = os.environ["http_proxy"].split("//")[1].rsplit(":", 1)
held, refused, stop = [], 0, time.monotonic() + 8
while len(held) + refused < int(sys.argv[1]) and time.monotonic() < stop:
    s = socket.socket()
    s.settimeout(0.5)
    try:
        s.connect((host, int(port)))
        s.send(b"G")  # an HTTP request that is never finished: the proxy waits for the rest
        held.append(s)
    except OSError:
        refused += 1
        s.close()
print("held", len(held), "refused", refused, flush=True)
if sys.argv[3] == "ask":  # finish each request at once: every connection held must be answered
    answered = 0
    for s in held:
        s.settimeout(20)
        s.send(b"ET http://denied.test/ HTTP/1.1\r\nHost: denied.test\r\n\r\n")
        answered += s.recv(12) == b"HTTP/1.1 403"
    print("answered", answered, flush=True)
time.sleep(float(sys.argv[2]))
"""


def _gate_with_soft_fd_limit(tmp_path, gate_toml: str, soft: int):
    repo = tmp_path / "repo"
    (repo / ".007").mkdir(parents=True)
    (repo / ".007" / "gate.toml").write_text(gate_toml)
    (repo / "hold.py").write_text(HOLD)
    ceiling = tmp_path / "ceiling.toml"
    ceiling.write_text(ceilings.to_toml({**ceilings.BUILTIN, "net": {"domains": ["*.test"]}}))
    report = tmp_path / "report.json"
    env = dict(os.environ, SANDBOY_CACHE_DIR=str(tmp_path / "cache"))

    def lower_soft_limit():
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, hard), hard))

    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "sandboy.gate.cli", str(repo), "--ceiling", str(ceiling),
                           "--json", str(report), "--keep-going"],
                          capture_output=True, text=True, env=env, timeout=240, preexec_fn=lower_soft_limit)
    return proc, time.monotonic() - started, json.loads(report.read_text())


def test_a_step_cannot_take_the_gates_fds_through_its_proxy_and_outlive_its_timeout(tmp_path):
    marker = f"sandboy-fd-budget-{os.getpid()}-{time.monotonic_ns()}"
    proc, took, report = _gate_with_soft_fd_limit(tmp_path, (
        '[[step]]\nname = "hog"\npolicy = "p"\ntimeout = "3s"\n'
        f'run = "python3 hold.py 1100 90 {marker}"\n'
        '[[step]]\nname = "after"\nrun = "echo after-ok"\n'
        '[policy.p]\nversion = 1\nnet.domains = ["allowed.test"]\n'), soft=1024)
    steps = {s["name"]: s for s in report["steps"]}
    assert steps["hog"]["status"] == "timed_out", (steps["hog"], proc.stdout[-2000:])
    # 3 s of timeout + up to 8 s of connecting in the step's own time; never the step's 90 s sleep
    assert took < 45, (took, proc.stdout[-2000:])
    assert steps["after"]["status"] == "passed" and "after-ok" in steps["after"]["output_tail"], steps["after"]
    assert mentioning(marker) == []


def test_twin_a_step_with_ordinary_connections_is_served_under_a_low_fd_limit(tmp_path):
    """The budget leaves a command its ordinary share: 40 connections held at once are each
    accepted and answered (a refusal, 403: no origin is needed to tell accepted from dropped)."""
    proc, took, report = _gate_with_soft_fd_limit(tmp_path, (
        '[[step]]\nname = "many"\npolicy = "p"\ntimeout = "60s"\n'
        'run = "python3 hold.py 40 0 ask"\n'
        '[policy.p]\nversion = 1\nnet.domains = ["allowed.test"]\n'), soft=1024)
    step = report["steps"][0]
    assert step["status"] == "passed", (step, proc.stdout[-2000:])
    assert "held 40 refused 0\nanswered 40" in step["output_tail"], step["output_tail"]
