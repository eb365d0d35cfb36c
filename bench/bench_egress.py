#!/usr/bin/env python3
"""Benchmark Layer 3 egress (issue 11). Every figure is a ratio or a difference against a baseline
measured in the same run, interleaved:

  set-up    sandboy.run(["/bin/true"]) with net.domains  vs  the same run with Layer 2 alone
            (net.connect_tcp, supervised); a gate step the same way (in-process supervision);
            the CLI the same way (Layer 2 alone runs in exec mode;
            also shown against a supervised Layer-2 run); wall time (median, and the median of
            paired differences) and CPU time (this process and its reaped children)
  first     one small GET by curl as the whole command: through the proxy (its thread, asyncio
  request   and h11 start at this first client)  vs  curl straight to the origin (Layer 2,
            connect_tcp to its port)
  bulk      100 MiB over HTTP from a loopback server: through the proxy (absolute-form request,
            and a CONNECT tunnel)  vs  direct; and a bare splice relay (no parsing, no checks:
            the floor of any proxy there); wall time and CPU (origin + proxy + client)
  latency   one small request on a new connection: through the proxy  vs  direct
  phases    the kernel's share: /bin/true via the plan executor in a user namespace, then with
            a network namespace, lo up, the listener handed over; and the machine-wide busy
            time the namespace's (asynchronous) teardown adds

The origin server and the proxy run in processes of their own (one GIL each), the client here.

    .venv/bin/python bench/bench_egress.py [--rounds N] [--mib N] [--only setup|traffic|phases|loop] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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

# The floor any proxy in that place pays: a relay with no parsing and no checks, copying each
# accepted connection to the origin with blocking splice(2) in two threads. What Sandboy's proxy
# costs beyond it is its own; what this costs beyond direct is the kernel's (a second TCP
# connection over loopback, the pipe).
BARE_RELAY = r"""
import fcntl, os, socket, sys, threading
origin = int(sys.argv[1])
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(64)
print(srv.getsockname()[1], flush=True)
def pump(a, b):
    r, w = os.pipe()
    fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 1 << 20)
    try:
        while True:
            n = os.splice(a.fileno(), w, 1 << 20)
            if not n:
                break
            while n:
                n -= os.splice(r, b.fileno(), n)
        b.shutdown(socket.SHUT_WR)
    except OSError:
        pass
while True:
    c, _ = srv.accept()
    u = socket.create_connection(("127.0.0.1", origin))
    threading.Thread(target=pump, args=(c, u), daemon=True).start()
    threading.Thread(target=pump, args=(u, c), daemon=True).start()
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
    relay, rport = _start(BARE_RELAY, oport)
    try:
        size = mib << 20
        direct = f"GET /big/{size} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode()
        absolute = f"GET http://bench.test:{oport}/big/{size} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
        connect = f"CONNECT bench.test:{oport} HTTP/1.1\r\nHost: bench.test\r\n\r\n".encode()
        small_d = b"GET /s/1 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        small_p = f"GET http://bench.test:{oport}/s/1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
        bulk = {"direct": [], "proxy_http": [], "proxy_connect": [], "bare_relay": []}
        cpu = {k: [] for k in bulk}

        def fetch(kind, port, request, tunnel=b""):
            before = _cpu_of(origin.pid, proxy.pid, relay.pid)
            bulk[kind].append(_fetch(port, request, tunnel)[0])
            cpu[kind].append(_cpu_of(origin.pid, proxy.pid, relay.pid) - before)

        for _ in range(rounds):
            fetch("direct", oport, direct)
            fetch("proxy_http", pport, absolute)
            fetch("proxy_connect", pport, direct, connect)
            fetch("bare_relay", rport, direct)
        small = {"direct": [], "proxy": []}
        for _ in range(rounds * 40):
            small["direct"].append(_fetch(oport, small_d)[0])
            small["proxy"].append(_fetch(pport, small_p)[0])
    finally:
        for proc in (proxy, origin, relay):
            proc.stdin.close() if proc is proxy else proc.kill()
            proc.wait(10)
    mbps = {k: size / statistics.median(v) / 1e6 for k, v in bulk.items()}
    lat = {k: statistics.median(v) * 1000 for k, v in small.items()}
    cpu_ms = {k: sum(v) / len(v) * 1000 for k, v in cpu.items()}
    return {
        "bulk_mb_per_s": {k: round(v) for k, v in mbps.items()},
        # CPU of origin + proxy + client per transfer: what the bytes cost, whatever the load.
        # When the CPUs are saturated (and the three share one autogroup, as here) throughput
        # through the proxy tends to direct × cpu(direct) / cpu(proxy path).
        "bulk_cpu_ms": {k: round(v) for k, v in cpu_ms.items()},
        "bulk_cpu_ratio_http": round(cpu_ms["direct"] / cpu_ms["proxy_http"], 3),
        "bulk_cpu_ratio_connect": round(cpu_ms["direct"] / cpu_ms["proxy_connect"], 3),
        "bulk_ratio_bare_relay": round(mbps["bare_relay"] / mbps["direct"], 3),
        "bulk_cpu_ratio_bare_relay": round(cpu_ms["direct"] / cpu_ms["bare_relay"], 3),
        "bulk_ratio_http": round(mbps["proxy_http"] / mbps["direct"], 3),
        "bulk_ratio_connect": round(mbps["proxy_connect"] / mbps["direct"], 3),
        "latency_ms": {k: round(v, 3) for k, v in lat.items()},
        "latency_added_ms": round(lat["proxy"] - lat["direct"], 3),
    }


def _cpu_of(*pids) -> float:
    """CPU seconds used so far by `pids` (from /proc) and by this process (all its threads)."""
    total = sum(os.times()[:2])
    for pid in pids:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _policy(net: str, extra: str = "") -> str:
    return ('version = 1\n[fs]\nread = ["/usr", "/lib", "/lib64", "/etc", "/bin"]\nexec = ["/usr/bin", "/bin", "/usr/lib"]\n'
            f"[net]\n{net}\n{extra}")


def _cpu_seconds() -> float:
    """CPU time of this process and of every child it has reaped (supervisors, commands): less
    sensitive than wall time to the other engineers' load on this 2-core machine. What the
    kernel does later in its own workers (a network namespace's teardown) is not in it."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _summary(samples: dict, base: str, other: str) -> dict:
    """Medians of wall time, the median of the paired differences (each L3 run against the L2
    run just before it: drift in the machine's load cancels out) and the mean CPU difference."""
    wall = {k: statistics.median(w for w, _ in v) * 1000 for k, v in samples.items()}
    pairs = [(o[0] - b[0]) * 1000 for b, o in zip(samples[base], samples[other])]
    cpu = {k: statistics.mean(c for _, c in v) * 1000 for k, v in samples.items()}
    return {"wall_ms": {k: round(v, 2) for k, v in wall.items()},
            "added_wall_ms": round(statistics.median(pairs), 2),
            "cpu_ms": {k: round(v, 2) for k, v in cpu.items()},
            "added_cpu_ms": round(cpu[other] - cpu[base], 2)}


def bench_gate_step(rounds: int) -> dict:
    """A gate step's set-up: an in-process Supervision with the run's hooks, as the gate runs
    a step, Layer 2 alone against egress. In a child process of its own: a Supervision sweeps
    every descendant of its process at the end of each run (only a dedicated runner may use it),
    which would take the benchmark's origin server too."""
    code = f"""
import json, os, sys, tempfile, time
sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
import bench_egress as b
from sandboy import Policy
from sandboy.confine.cage import build
from sandboy.confine.exec_mode import hooks_for
from sandboy.confine.supervision import Supervision

with tempfile.TemporaryDirectory() as d:
    cages = {{}}
    for name, net in (("gate_l2", "connect_tcp = [443]"), ("gate_l3", 'domains = ["pypi.org"]')):
        path = os.path.join(d, name + ".toml")
        with open(path, "w") as fh:
            fh.write(b._policy(net))
        cages[name] = build(Policy.load(path), cwd=d)

    def one(cage):
        cpu, start = b._cpu_seconds(), time.perf_counter()
        result = Supervision(["/bin/true"], cage, hooks=hooks_for(cage)).start().wait()
        elapsed = time.perf_counter() - start
        assert result.ok, result
        return elapsed, b._cpu_seconds() - cpu

    samples = {{k: [] for k in cages}}
    for k in cages:
        one(cages[k])
    for _ in range({rounds * 6}):
        for k in cages:
            samples[k].append(one(cages[k]))
    print(json.dumps(samples))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env=dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(os.path.dirname(
                              os.path.abspath(__file__))), "src")))
    return _summary(json.loads(proc.stdout), "gate_l2", "gate_l3")


def bench_setup(rounds: int) -> dict:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))
    from sandboy import Policy, run

    gate = bench_gate_step(rounds)
    origin, oport = _start(ORIGIN)
    try:
        with tempfile.TemporaryDirectory() as d:
            hosts = os.path.join(d, "hosts")
            with open(hosts, "w") as fh:
                fh.write("127.0.0.1 bench.test\n")
            paths = {}
            for name, text in (("l2", _policy("connect_tcp = [443]")),
                               ("l2s", _policy("connect_tcp = [443]", "[limits]\nwall_seconds = 3600\n")),
                               ("l3", _policy('domains = ["pypi.org"]')),
                               ("l2_origin", _policy(f"connect_tcp = [{oport}]")),
                               ("l3_origin", _policy(f'domains = ["bench.test:{oport}"]\nprivate = ["127.0.0.0/8"]'))):
                paths[name] = os.path.join(d, name + ".toml")
                with open(paths[name], "w") as fh:
                    fh.write(text)
            policies = {name: Policy.load(path) for name, path in paths.items()}
            env = dict(os.environ, SANDBOY_CACHE_DIR=os.path.join(d, "cache"), SANDBOY_EGRESS_HOSTS=hosts)
            os.environ["SANDBOY_EGRESS_HOSTS"] = hosts  # the API's proxy runs in this process's supervisors
            direct = ["curl", "-sf", "-o", "/dev/null", f"http://127.0.0.1:{oport}/s/1"]
            proxied = ["curl", "-sf", "-o", "/dev/null", f"http://bench.test:{oport}/s/1"]

            def api(name, argv=("/bin/true",)):
                def one():
                    cpu, start = _cpu_seconds(), time.perf_counter()
                    result = run(list(argv), policies[name], cwd=d, supervise=True)
                    elapsed = time.perf_counter() - start
                    assert result.ok, result
                    return elapsed, _cpu_seconds() - cpu
                return one

            def cli(name, argv=("/bin/true",)):
                def one():
                    cpu, start = _cpu_seconds(), time.perf_counter()
                    subprocess.run([os.path.join(VENV_BIN, "sandboy"), "run", "--policy", paths[name], "--", *argv],
                                   check=True, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, start_new_session=True)
                    return time.perf_counter() - start, _cpu_seconds() - cpu
                return one

            def interleaved(cases: dict, n: int) -> dict:
                for case in cases.values():
                    case()  # warm imports and the parse cache
                samples = {k: [] for k in cases}
                for _ in range(n):
                    for k, case in cases.items():
                        samples[k].append(case())
                return samples

            out = {"gate_step": gate}
            api_samples = interleaved({"api_l2": api("l2"), "api_l3": api("l3")}, rounds * 6)
            out["api"] = _summary(api_samples, "api_l2", "api_l3")
            cli_samples = interleaved({"cli_l2": cli("l2"), "cli_l2_supervised": cli("l2s"), "cli_l3": cli("l3")},
                                      rounds * 2)
            out["cli"] = _summary(cli_samples, "cli_l2", "cli_l3")
            out["cli"]["added_wall_ms_vs_supervised"] = _summary(cli_samples, "cli_l2_supervised", "cli_l3")["added_wall_ms"]
            first = interleaved({"api_direct": api("l2_origin", direct), "api_proxied": api("l3_origin", proxied),
                                 "cli_direct": cli("l2_origin", direct), "cli_proxied": cli("l3_origin", proxied)},
                                rounds * 2)
            out["first_request_api"] = _summary(first, "api_direct", "api_proxied")
            out["first_request_cli"] = _summary(first, "cli_direct", "cli_proxied")
    finally:
        origin.kill()
        origin.wait(10)
    return {"setup": out}


def _busy_jiffies() -> int:
    with open("/proc/stat") as fh:
        fields = fh.readline().split()[1:]
    return sum(int(x) for i, x in enumerate(fields[:8]) if i not in (3, 4))  # all but idle, iowait


def bench_phases(rounds: int) -> dict:
    """The kernel's share, without Python in the child: /bin/true started by the plan executor
    (`_libc.fork_exec`, as a run does) in a user namespace, then with one Layer-3 step more at
    a time: its own network namespace, `lo` up, the listener made and handed over to this
    process (received here, as the supervisor does). Wall time of clone → exit → reaped.

    The namespace's teardown is not in those figures: the kernel does it after the last
    reference goes, in a worker thread (cleanup_net). What that costs the machine is estimated
    from /proc/stat: busy time of all CPUs over a batch with network namespaces minus a batch
    without, per run (machine-wide, so other users' load adds noise: several batches)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))
    from sandboy.confine import _libc
    from sandboy.confine import namespaces as ns

    if not ns.availability()[0]:
        return {}
    user = [step for _, step in ns.plan_user_map(os.geteuid(), os.getegid())]
    up = [step for _, step in ns.plan_loopback_up()]
    paths, argv, envp = [b"/bin/true"], [b"true"], []

    def case(flags, steps, hand_over=False):
        def run():
            err_r, err_w = os.pipe2(os.O_CLOEXEC)
            plan, channel = list(steps), None
            if hand_over:
                channel, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
                spare, keep = os.dup(child_end.fileno()), []
                plan += [step for _, step in ns.plan_listen_and_send(3128, child_end.fileno(), spare, keep)]
            start = time.perf_counter()
            pid = _libc.fork_exec(plan, paths, argv, envp, err_w, flags)
            os.close(err_w)
            if hand_over:
                child_end.close()
                os.close(spare)
                os.close(ns.receive_fd(channel))
                channel.close()
            os.waitpid(pid, 0)
            elapsed = time.perf_counter() - start
            error, _ = _libc.read_child_report(os.read(err_r, 64))
            os.close(err_r)
            assert error is None, error
            return elapsed
        return run

    user_ns, net = ns.CLONE_NEWUSER, ns.CLONE_NEWUSER | ns.CLONE_NEWNET
    cases = {"user namespace": case(user_ns, user), "+ network namespace": case(net, user),
             "+ lo up": case(net, user + up), "+ listener handed over": case(net, user + up, hand_over=True)}
    for fn in cases.values():
        fn()
    samples = {k: [] for k in cases}
    for _ in range(rounds * 40):
        for k, fn in cases.items():
            samples[k].append(fn())
    wall = {k: round(statistics.median(v) * 1000, 3) for k, v in samples.items()}
    hz = os.sysconf("SC_CLK_TCK")
    batch, teardown = 200, []
    for _ in range(max(2, rounds)):
        spent = {}
        for name in ("user namespace", "+ listener handed over"):
            busy = _busy_jiffies()
            for _ in range(batch):
                cases[name]()
            time.sleep(0.3)  # let the workers finish the teardowns
            spent[name] = (_busy_jiffies() - busy) / hz / batch * 1000
        teardown.append(spent["+ listener handed over"] - spent["user namespace"])
    return {"phases": {"wall_ms": wall, "machine_busy_ms_per_run_with_netns": [round(x, 2) for x in teardown]}}


def run_loop(layer: int, runs: int) -> dict:
    """`runs` supervised API runs of /bin/true with Layer 2 alone or with egress, nothing else:
    for a profiler around this process (docs/egress.md: `perf record -e cpu-clock -g -- ...
    --only loop --layer 2|3`, then the same with the other layer, compared symbol by symbol).
    The proxy's modules are imported first in both, so both processes fork the same size."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))
    import sandboy.egress.proxy  # noqa: F401
    import sandboy.egress.session
    from sandboy import Policy, run

    sandboy.egress.session.preload()
    sandboy.egress.session.preload()  # the second call imports (as a caller's second run does)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "p.toml")
        with open(path, "w") as fh:
            fh.write(_policy('domains = ["pypi.org"]' if layer == 3 else "connect_tcp = [443]"))
        policy = Policy.load(path)
        cpu, start = _cpu_seconds(), time.perf_counter()
        for _ in range(runs):
            result = run(["/bin/true"], policy, cwd=d, supervise=True)
            assert result.ok, result
        return {"loop": {"layer": layer, "runs": runs, "wall_ms_per_run": round((time.perf_counter() - start) / runs * 1000, 3),
                         "cpu_ms_per_run": round((_cpu_seconds() - cpu) / runs * 1000, 3)}}


def _print_phases(out: dict) -> None:
    wall = out["phases"]["wall_ms"]
    base = wall["user namespace"]
    print("kernel, /bin/true via the plan executor: " + "   ".join(
        f"{k} {v:.3f} ms ({v - base:+.3f})" for k, v in wall.items()))
    print("machine-wide busy time added per run by a network namespace (creation, steps and the "
          "kernel's teardown worker): " + " / ".join(f"{x:.2f} ms" for x in out["phases"]["machine_busy_ms_per_run_with_netns"]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--mib", type=int, default=100)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--only", choices=("setup", "traffic", "phases", "loop"), help="one part of the benchmark "
                        "(loop: only --runs runs of --layer, for a profiler)")
    parser.add_argument("--layer", type=int, choices=(2, 3), default=3, help="with --only loop")
    parser.add_argument("--runs", type=int, default=300, help="with --only loop")
    args = parser.parse_args()
    out = {}
    if args.only in (None, "setup"):
        out.update(bench_setup(args.rounds * 2))
    if args.only in (None, "phases"):
        out.update(bench_phases(args.rounds))
    if args.only in (None, "traffic"):
        out.update(bench_traffic(args.rounds, args.mib))
    if args.only == "loop":
        out.update(run_loop(args.layer, args.runs))
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    if "setup" in out:
        _print_setup(out)
    if "phases" in out:
        _print_phases(out)
    if "loop" in out:
        loop = out["loop"]
        print(f"Layer {loop['layer']}: {loop['runs']} runs, {loop['wall_ms_per_run']} ms wall and "
              f"{loop['cpu_ms_per_run']} ms CPU per run")
    if "bulk_mb_per_s" in out:
        _print_traffic(out, args.mib)
    return 0


def _print_setup(out: dict) -> None:
    api, cli = out["setup"]["api"], out["setup"]["cli"]
    print(f"set-up, API (/bin/true)   Layer 2 {api['wall_ms']['api_l2']:.2f} ms   + egress {api['wall_ms']['api_l3']:.2f} ms"
          f"   added {api['added_wall_ms']:+.2f} ms (target <= +{TARGETS['setup_api_ms']} ms)"
          f"   CPU added {api['added_cpu_ms']:+.2f} ms")
    print(f"set-up, CLI (/bin/true)   Layer 2 {cli['wall_ms']['cli_l2']:.2f} ms   + egress {cli['wall_ms']['cli_l3']:.2f} ms"
          f"   added {cli['added_wall_ms']:+.2f} ms   CPU added {cli['added_cpu_ms']:+.2f} ms"
          f"   (vs Layer 2 supervised {cli['wall_ms']['cli_l2_supervised']:.2f} ms: "
          f"{cli['added_wall_ms_vs_supervised']:+.2f} ms)")
    g = out["setup"]["gate_step"]
    print(f"set-up, gate step (in-process supervision, /bin/true)   Layer 2 {g['wall_ms']['gate_l2']:.2f} ms   "
          f"+ egress {g['wall_ms']['gate_l3']:.2f} ms   added {g['added_wall_ms']:+.2f} ms   CPU added {g['added_cpu_ms']:+.2f} ms")
    for kind in ("api", "cli"):
        f = out["setup"][f"first_request_{kind}"]
        print(f"first request, {kind.upper()} (curl, one small GET)   direct {f['wall_ms'][kind + '_direct']:.2f} ms"
              f"   through the proxy {f['wall_ms'][kind + '_proxied']:.2f} ms   added {f['added_wall_ms']:+.2f} ms"
              f"   CPU added {f['added_cpu_ms']:+.2f} ms")


def _print_traffic(out: dict, mib: int) -> None:
    b = out["bulk_mb_per_s"]
    print(f"{mib} MiB      direct {b['direct']} MB/s   proxy (HTTP) {b['proxy_http']} MB/s = "
          f"{out['bulk_ratio_http']:.0%}   proxy (CONNECT) {b['proxy_connect']} MB/s = "
          f"{out['bulk_ratio_connect']:.0%} (target >= {TARGETS['bulk_ratio']:.0%})")
    c = out["bulk_cpu_ms"]
    print(f"{mib} MiB      CPU (origin + proxy + client) direct {c['direct']} ms   proxy (HTTP) {c['proxy_http']} ms"
          f" -> {out['bulk_cpu_ratio_http']:.0%}   proxy (CONNECT) {c['proxy_connect']} ms -> "
          f"{out['bulk_cpu_ratio_connect']:.0%}  (direct's CPU / the proxy path's: the share of direct "
          "throughput left on saturated CPUs)")
    print(f"{mib} MiB      floor: a bare splice relay (no parsing, no checks) {b['bare_relay']} MB/s = "
          f"{out['bulk_ratio_bare_relay']:.0%}, CPU {c['bare_relay']} ms -> {out['bulk_cpu_ratio_bare_relay']:.0%}")
    lat = out["latency_ms"]
    print(f"small request direct {lat['direct']:.3f} ms   proxy {lat['proxy']:.3f} ms   "
          f"added {out['latency_added_ms']:+.3f} ms (target <= +{TARGETS['latency_ms']} ms)")


if __name__ == "__main__":
    sys.exit(main())
