"""The egress decision log is bounded. The caged command chooses how many decisions there are:
a loop of refused SOCKS requests (one decision each, ~700 bytes of JSON with a 246-character
name) wrote ~0.4 MB/s into `--egress-log` / a gate step's `<step>.egress.jsonl` — some GB an hour
of one step into the operator's `--logs` directory, which session 7 had bounded for the steps'
output (session 8 review). Checked on the host: the file's size, its last line, the counters."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

from sandboy.egress.log import EgressLog
from sandboy.egress.resolver import Resolver
from sandboy.egress.rules import Rules
from sandboy.egress.service import ProxyService
from sandboy.gate import ceiling as ceilings

from egresskit import loopback_listener

NAME = (b"x" * 60 + b".") * 4 + b"yy"  # 246 characters: a host name no entry allows
SOCKS_REQUEST = b"\x05\x01\x00\x05\x01\x00\x03" + bytes([len(NAME)]) + NAME + b"\x01\xbb"

SPAM = r"""
import os, socket, sys, time
host, port = os.environ["http_proxy"].split("//")[1].rsplit(":", 1)
req = bytes.fromhex(sys.argv[2])
n, end = 0, time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    s = socket.create_connection((host, int(port)))
    s.sendall(req)
    while s.recv(64):
        pass
    s.close()
    n += 1
print("requests", n, flush=True)
"""


def _refused_socks(port: int, count: int) -> None:
    for _ in range(count):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(SOCKS_REQUEST)
            while s.recv(64):
                pass


def _lines(path) -> list:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_proxys_decision_log_stops_at_its_bound_and_says_so(tmp_path):
    path = tmp_path / "egress.jsonl"
    service = ProxyService(Rules(["allowed.test"], source="t.toml"), loopback_listener(),
                           log=EgressLog(str(path), max_bytes=64 << 10), resolver=Resolver({})).start()
    try:
        _refused_socks(service.port, 400)  # ~280 kB of lines unbounded
    finally:
        counts = service.stop()
    assert path.stat().st_size <= 64 << 10
    lines = _lines(path)
    assert lines[-1]["decision"] == "log_full" and "65536 bytes" in lines[-1]["reason"], lines[-1]
    assert all(line["decision"] == "deny" for line in lines[:-1]) and len(lines) > 50
    assert counts["denied"] == 400  # the counters stay whole


def test_twin_a_log_within_its_bound_has_every_decision(tmp_path):
    path = tmp_path / "egress.jsonl"
    service = ProxyService(Rules(["allowed.test"], source="t.toml"), loopback_listener(),
                           log=EgressLog(str(path), max_bytes=64 << 10), resolver=Resolver({})).start()
    try:
        _refused_socks(service.port, 20)
    finally:
        service.stop()
    lines = _lines(path)
    assert [line["decision"] for line in lines] == ["deny"] * 20


def _spam_gate(tmp_path, seconds: float):
    """A gate of one step (`spam`) sending refused SOCKS requests for `seconds` under a ceiling
    allowing *.test, and how to run it: `run(report)` -> the step's JSON report (64K output cap,
    --logs in tmp_path/logs)."""
    repo = tmp_path / "repo"
    (repo / ".007").mkdir(parents=True)
    (repo / "spam.py").write_text(SPAM)
    (repo / ".007" / "gate.toml").write_text(
        '[[step]]\nname = "spam"\npolicy = "p"\n'
        f'run = "python3 spam.py {seconds} {SOCKS_REQUEST.hex()}"\n'
        '[policy.p]\nversion = 1\nnet.domains = ["allowed.test"]\n')
    ceiling = tmp_path / "ceiling.toml"
    ceiling.write_text(ceilings.to_toml({**ceilings.BUILTIN, "net": {"domains": ["*.test"]}}))

    def run(report) -> dict:
        proc = subprocess.run([sys.executable, "-m", "sandboy.gate.cli", str(repo), "--ceiling", str(ceiling),
                               "--logs", str(tmp_path / "logs"), "--json", str(report), "--max-step-output", "64K"],
                              capture_output=True, text=True, timeout=180,
                              env=dict(os.environ, SANDBOY_CACHE_DIR=str(tmp_path / "cache")))
        step = json.loads(report.read_text())["steps"][0]
        assert step["status"] == "passed", (step, proc.stdout[-2000:])
        return step

    return run


def test_a_gate_steps_egress_log_is_bounded_by_its_output_cap(tmp_path):
    step = _spam_gate(tmp_path, 3)(tmp_path / "report.json")
    made = int(step["output_tail"].split("requests")[1])
    egress_log = tmp_path / "logs" / "spam.egress.jsonl"
    assert egress_log.stat().st_size <= 64 << 10, (egress_log.stat().st_size, made)
    lines = _lines(egress_log)
    assert made > len(lines), (made, len(lines))  # the probe made more decisions than the bound holds
    assert lines[-1]["decision"] == "log_full", lines[-1]
    assert step["egress"]["refused_hosts"] == [f"{NAME.decode()}:443"]


def test_a_logs_directory_used_again_holds_one_runs_decisions_within_the_cap(tmp_path):
    """The proxy appends to its log; the gate's step log is truncated at each run. A --logs
    directory used for a second gate run grew the step's .egress.jsonl by a whole cap per run (and
    the second run's output budget was charged the first run's lines): each run's file is its own."""
    gate = _spam_gate(tmp_path, 1.5)
    egress_log = tmp_path / "logs" / "spam.egress.jsonl"
    for run in range(2):
        gate(tmp_path / f"report{run}.json")
        assert egress_log.stat().st_size <= 64 << 10, (run, egress_log.stat().st_size)
        lines = _lines(egress_log)
        assert lines[-1]["decision"] == "log_full", lines[-1]
        assert [line["decision"] for line in lines].count("log_full") == 1, run  # one run's lines
