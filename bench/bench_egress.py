#!/usr/bin/env python3
"""Benchmark Layer 3 egress (issue 11). Every figure is a ratio or a difference against a baseline
measured in the same run, interleaved:

  set-up    sandboy.run(["/bin/true"]) with net.domains  vs  the same run with Layer 2 alone
            (net.connect_tcp, supervised); and the CLI the same way
  bulk      100 MiB over HTTP from a loopback server: through the proxy (absolute-form request,
            and a CONNECT tunnel)  vs  direct
  latency   one small request on a new connection: through the proxy  vs  direct

The origin server and the proxy run in processes of their own (one GIL each), the client here.

    .venv/bin/python bench/bench_egress.py [--rounds N] [--mib N] [--only setup|traffic] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

VENV_BIN = os.path.dirname(sys.executable)
TARGETS = {"setup_api_ms": 3.0, "bulk_ratio": 0.35, "latency_ms": 1.5}

ORIGIN = r"""
import socket, sys, threading
payload = memoryview(b"x" * (1 << 20))
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", 0)); srv.listen(512)
print(srv.getsockname()[1], flush=True)
def serve(conn):
    with conn:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return
            data += chunk
        path = data.split(b" ", 2)[1].decode()
        size = int(path.rsplit("/", 1)[1])
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % size)
        while size:
            n = min(size, len(payload))
            conn.sendall(payload[:n])
            size -= n
while True:
    conn, _ = srv.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""

PROXY = r"""
import socket, sys
from sandboy.egress.resolver import Resolver
from sandboy.egress.rules import Rules
from sandboy.egress.service import ProxyService
sock = socket.socket(); sock.bind(("127.0.0.1", 0)); sock.listen(512)
svc = ProxyService(Rules([f"bench.test:{sys.argv[1]}"], (), ["127.0.0.0/8"]), sock, None,
                   Resolver({"bench.test": ["127.0.0.1"]})).start()
print(svc.port, flush=True)
sys.stdin.read()
svc.stop()
"""


def _start(code, *args):
    proc = subprocess.Popen([sys.executable, "-c", code, *map(str, args)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    return proc, int(proc.stdout.readline())


def _fetch(port: int, request: bytes, tunnel: bytes = b"") -> tuple:
    """(seconds, body bytes) for one request on a new connection; `tunnel`: a CONNECT first."""
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    start = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port)) as s:
        if tunnel:
            s.sendall(tunnel)
            head = b""
            while b"\r\n\r\n" not in head:
                head += s.recv(1)
        s.sendall(request)
        total = 0
        while True:
            n = s.recv_into(view)
            if not n:
                break
            total += n
    return time.perf_counter() - start, total


def bench_traffic(rounds: int, mib: int) -> dict:
    origin, oport = _start(ORIGIN)
    proxy, pport = _start(PROXY, oport)
    try:
        size = mib << 20
        direct = f"GET /big/{size} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode()
        absolute = f"GET http://bench.test:{oport}/big/{size} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
        connect = f"CONNECT bench.test:{oport} HTTP/1.1\r\nHost: bench.test\r\n\r\n".encode()
        small_d = b"GET /s/1 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        small_p = f"GET http://bench.test:{oport}/s/1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
        bulk = {"direct": [], "proxy_http": [], "proxy_connect": []}
        for _ in range(rounds):
            bulk["direct"].append(_fetch(oport, direct)[0])
            bulk["proxy_http"].append(_fetch(pport, absolute)[0])
            bulk["proxy_connect"].append(_fetch(pport, direct, tunnel=connect)[0])
        small = {"direct": [], "proxy": []}
        for _ in range(rounds * 40):
            small["direct"].append(_fetch(oport, small_d)[0])
            small["proxy"].append(_fetch(pport, small_p)[0])
    finally:
        for proc in (proxy, origin):
            proc.stdin.close() if proc is proxy else proc.kill()
            proc.wait(10)
    mbps = {k: size / statistics.median(v) / 1e6 for k, v in bulk.items()}
    lat = {k: statistics.median(v) * 1000 for k, v in small.items()}
    return {
        "bulk_mb_per_s": {k: round(v) for k, v in mbps.items()},
        "bulk_ratio_http": round(mbps["proxy_http"] / mbps["direct"], 3),
        "bulk_ratio_connect": round(mbps["proxy_connect"] / mbps["direct"], 3),
        "latency_ms": {k: round(v, 3) for k, v in lat.items()},
        "latency_added_ms": round(lat["proxy"] - lat["direct"], 3),
    }


def _policy(net: str) -> str:
    return ('version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc"]\nexec = ["/usr/bin", "/bin"]\n'
            f"[net]\n{net}\n")


def bench_setup(rounds: int) -> dict:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))
    from sandboy import Policy, run

    with tempfile.TemporaryDirectory() as d:
        l2_path, l3_path = os.path.join(d, "l2.toml"), os.path.join(d, "l3.toml")
        with open(l2_path, "w") as fh:
            fh.write(_policy("connect_tcp = [443]"))
        with open(l3_path, "w") as fh:
            fh.write(_policy('domains = ["pypi.org"]'))
        l2, l3 = Policy.load(l2_path), Policy.load(l3_path)
        env = dict(os.environ, SANDBOY_CACHE_DIR=os.path.join(d, "cache"))

        def api(policy):
            start = time.perf_counter()
            result = run(["/bin/true"], policy, cwd=d, supervise=True)
            assert result.ok, result
            return time.perf_counter() - start

        def cli(path):
            start = time.perf_counter()
            subprocess.run([os.path.join(VENV_BIN, "sandboy"), "run", "--policy", path, "--", "/bin/true"],
                           check=True, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, start_new_session=True)
            return time.perf_counter() - start

        api(l3), api(l2), cli(l3_path), cli(l2_path)  # warm imports and the parse cache
        samples = {"api_l2": [], "api_l3": [], "cli_l2": [], "cli_l3": []}
        for _ in range(rounds * 4):
            samples["api_l2"].append(api(l2))
            samples["api_l3"].append(api(l3))
        for _ in range(rounds):
            samples["cli_l2"].append(cli(l2_path))
            samples["cli_l3"].append(cli(l3_path))
    med = {k: statistics.median(v) * 1000 for k, v in samples.items()}
    return {"setup_ms": {k: round(v, 2) for k, v in med.items()},
            "setup_api_added_ms": round(med["api_l3"] - med["api_l2"], 2),
            "setup_cli_added_ms": round(med["cli_l3"] - med["cli_l2"], 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--mib", type=int, default=100)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--only", choices=("setup", "traffic"), help="one half of the benchmark")
    args = parser.parse_args()
    out = {}
    if args.only != "traffic":
        out.update(bench_setup(args.rounds * 2))
    if args.only != "setup":
        out.update(bench_traffic(args.rounds, args.mib))
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    if "setup_ms" in out:
        _print_setup(out)
    if "bulk_mb_per_s" in out:
        _print_traffic(out, args.mib)
    return 0


def _print_setup(out: dict) -> None:
    s = out["setup_ms"]
    print(f"set-up, API   Layer 2 {s['api_l2']:.2f} ms   + egress {s['api_l3']:.2f} ms   "
          f"added {out['setup_api_added_ms']:+.2f} ms (target <= +{TARGETS['setup_api_ms']} ms)")
    print(f"set-up, CLI   Layer 2 {s['cli_l2']:.2f} ms   + egress {s['cli_l3']:.2f} ms   "
          f"added {out['setup_cli_added_ms']:+.2f} ms")


def _print_traffic(out: dict, mib: int) -> None:
    b = out["bulk_mb_per_s"]
    print(f"{mib} MiB      direct {b['direct']} MB/s   proxy (HTTP) {b['proxy_http']} MB/s = "
          f"{out['bulk_ratio_http']:.0%}   proxy (CONNECT) {b['proxy_connect']} MB/s = "
          f"{out['bulk_ratio_connect']:.0%} (target >= {TARGETS['bulk_ratio']:.0%})")
    lat = out["latency_ms"]
    print(f"small request direct {lat['direct']:.3f} ms   proxy {lat['proxy']:.3f} ms   "
          f"added {out['latency_added_ms']:+.3f} ms (target <= +{TARGETS['latency_ms']} ms)")


if __name__ == "__main__":
    sys.exit(main())
