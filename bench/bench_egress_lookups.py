"""Benchmark: what a name lookup costs a gate step through the egress proxy (ADR 0015, session 10).

    sudo .venv/bin/python bench/bench_egress_lookups.py [--steps N] [--rounds R] [--before SRC]

A gate of N steps, each fetching http://nI.fast.test:PORT/ through the proxy, so each step's
proxy resolves one name — against the tests' loopback name server (tests/egress/dnskit.py,
pointed at by /etc/resolv.conf bound in a private mount namespace of the gate: root) — and the
same gate fetching http://127.0.0.1:PORT/ (an IP literal: no lookup). The difference, per step,
is what the lookups cost. Session 9 started a helper process for every step that looked a name
up (an interpreter start-up); session 10 one per gate.

--before SRC: also time the gate of the `sandboy` package under SRC (a directory holding
`sandboy/`, e.g. `git archive REV src | tar -x` with the C module copied in), in the same rounds.
All variants run one after another in each of R rounds; the best round of each counts and the
paired (same-round) differences are printed too: the machine is shared and loaded, read the
ratios and differences, not the absolute times. Per step: the gate end to end / N, and the
median of the steps' own durations in the JSON report (spawn to reap, the lookup included).
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "egress"))

from dnskit import NameServer, under_name_server  # noqa: E402


class _Quiet(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "3")
        self.end_headers()
        self.wfile.write(b"ok\n")

    def log_message(self, *args):
        pass


def make_repo(base: str, name: str, steps: int, port: int, host) -> str:
    repo = os.path.join(base, name)
    os.makedirs(os.path.join(repo, ".007"))
    with open(os.path.join(repo, ".007", "gate.toml"), "w") as fh:
        for i in range(steps):
            target = host(i)
            fh.write(f'[[step]]\nname = "s{i}"\npolicy = "p"\n'
                     f'run = "curl -sS -m 20 --noproxy \'\' -o /dev/null http://{target}:{port}/"\n')
        fh.write(f'[policy.p]\nversion = 1\nnet.domains = ["*.fast.test:{port}", "127.0.0.1:{port}"]\n'
                 'net.private = ["127.0.0.1/32"]\n')
    return repo


def gate(resolv: str, repo: str, ceiling: str, report: str, env: dict) -> tuple:
    """(wall seconds end to end, median step duration from the report)."""
    argv = under_name_server(resolv, [sys.executable, "-m", "sandboy.gate.cli", repo, "--ceiling", ceiling,
                                      "--json", report])
    started = time.perf_counter()
    proc = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        sys.exit(f"the gate failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    with open(report) as fh:
        steps = json.load(fh)["steps"]
    return elapsed, statistics.median(s["duration"] for s in steps)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", metavar="SRC", help="a `sandboy` source tree to compare with")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("root only: /etc/resolv.conf is bound over in a private mount namespace of each gate")
    n = args.steps
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Quiet)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    names = NameServer({f"n{i}.fast.test": ("127.0.0.1", 0.0) for i in range(n)})
    try:
        with tempfile.TemporaryDirectory(prefix="sandboy-bench-") as base:
            from sandboy.gate import ceiling as ceilings

            ceiling = os.path.join(base, "ceiling.toml")
            with open(ceiling, "w") as fh:
                fh.write(ceilings.to_toml({**ceilings.BUILTIN, "net": {
                    "domains": [f"*.test:{port}", f"127.0.0.1:{port}"], "private": ["127.0.0.0/8"]}}))
            repos = {"names": make_repo(base, "names", n, port, lambda i: f"n{i}.fast.test"),
                     "literal": make_repo(base, "literal", n, port, lambda i: "127.0.0.1")}
            resolv = names.resolv_conf(os.path.join(base, "resolv.conf"))
            report = os.path.join(base, "report.json")
            home = os.path.join(base, "home")
            os.mkdir(home)
            env = dict(os.environ, HOME=home)
            env.pop("SANDBOY_EGRESS_HOSTS", None)
            trees = {"after": env}
            if args.before:
                trees["before"] = dict(env, PYTHONPATH=os.path.abspath(args.before))
            runs = {(tree, kind): [] for tree in trees for kind in repos}
            for _ in range(args.rounds):
                for tree, tree_env in trees.items():
                    for kind, repo in repos.items():
                        runs[(tree, kind)].append(gate(resolv, repo, ceiling, report, tree_env))
    finally:
        names.close()
        server.shutdown()
    print(f"{n} steps, {args.rounds} rounds, load {os.getloadavg()[0]:.1f}; per step, ms (best round; "
          "wall = gate end to end / N; step = median step duration in the report)")
    lookup_cost = {}
    for tree in trees:
        wall = {kind: min(r[0] for r in runs[(tree, kind)]) / n * 1000 for kind in repos}
        step = {kind: min(r[1] for r in runs[(tree, kind)]) * 1000 for kind in repos}
        paired = [(a[0] - b[0]) / n * 1000 for a, b in zip(runs[(tree, "names")], runs[(tree, "literal")])]
        lookup_cost[tree] = statistics.median(paired)
        print(f"  {tree:6}  names: wall {wall['names']:7.1f}  step {step['names']:7.1f} | "
              f"literal: wall {wall['literal']:7.1f}  step {step['literal']:7.1f} | "
              f"a lookup costs {wall['names'] - wall['literal']:+7.1f} wall, {step['names'] - step['literal']:+7.1f} "
              f"step (paired median {lookup_cost[tree]:+.1f})")
    if "before" in trees:
        rounds = range(args.rounds)
        diff = [(runs[("after", "names")][r][0] - runs[("before", "names")][r][0]) / n * 1000 for r in rounds]
        print(f"  names, after - before (same round, per step): median {statistics.median(diff):+.1f} ms "
              f"(lower in {sum(d < 0 for d in diff)}/{len(diff)} rounds); lookup cost after/before: "
              f"{lookup_cost['after']:+.1f} / {lookup_cost['before']:+.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
