"""What the egress proxy buffers is bounded: it lies in the supervising process (the gate's own
for a gate step), outside the step's memory cgroup (ADR 0015 "Session 8").

Attack: open many connections through the proxy to a server that never stops sending, and never
read them. Each connection then holds what its streams buffer before they stop reading: 1.5 MiB
with the former 256 KiB reads, ≈ 600 KiB now (READ_SIZE), and at most MAX_BUFFER_BYTES of them
in all (CONNECTION_BYTES each: 256 connections; more are closed at once). Before, only the fd
budget bounded the count: with a raised soft RLIMIT_NOFILE, 1,024 connections ≈ 1.5 GiB.

Checked from the host: the proxy runs in a process of its own (soft RLIMIT_NOFILE raised, so the
fd budget does not bind first); its resident memory is read from /proc/PID/status."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time

import pytest

from sandboy.egress.proxy import CONNECTION_BYTES, MAX_BUFFER_BYTES

CLIENTS = 400
SERVE = r"""
import resource, sys, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 65536), hard))
from sandboy.egress.resolver import Resolver
from sandboy.egress.rules import Rules
from sandboy.egress.service import ProxyService
import socket
listener = socket.socket(); listener.bind(("127.0.0.1", 0)); listener.listen(1024)
rules = Rules([f"flood.test:{sys.argv[1]}"], (), ("127.0.0.0/8",), source="test.toml")
service = ProxyService(rules, listener, sys.argv[2], Resolver({"flood.test": ["127.0.0.1"]})).start()
print(service.port, flush=True)
sys.stdin.read()
service.stop()
"""


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) << 10
    raise AssertionError("no VmRSS")


@pytest.fixture
def flood():
    """A loopback server sending to every connection until it is closed; its port."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1024)
    stop = threading.Event()

    def feed(conn):
        data = b"x" * 65536
        with conn:
            try:
                while not stop.is_set():
                    conn.sendall(data)
            except OSError:
                pass

    def accept():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            threading.Thread(target=feed, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield server.getsockname()[1]
    stop.set()
    server.close()


def _ask(proxy_port: int, port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", proxy_port), timeout=20)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the kernel keeps little for us: the proxy holds it
    s.sendall(f"CONNECT flood.test:{port} HTTP/1.1\r\nHost: flood.test\r\n\r\n".encode())
    return s


def test_connections_that_never_read_hold_at_most_the_buffer_budget(tmp_path, flood):
    import resource

    from sandboy.egress.proxy import FDS_PER_CONNECTION, RESERVED_FDS

    budget = MAX_BUFFER_BYTES // CONNECTION_BYTES
    assert budget < CLIENTS
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    needed = budget * FDS_PER_CONNECTION + RESERVED_FDS + 64
    if hard != resource.RLIM_INFINITY and hard < needed:
        pytest.skip(f"the hard RLIMIT_NOFILE ({hard}) keeps the fd budget below the memory budget here")
    proxy = subprocess.Popen([sys.executable, "-c", SERVE, str(flood), str(tmp_path / "egress.jsonl")],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    clients = []
    try:
        port = int(proxy.stdout.readline())
        time.sleep(0.3)
        before = _rss(proxy.pid)
        clients = [_ask(port, flood) for _ in range(CLIENTS)]
        deadline = time.monotonic() + 8  # the proxy fills what it may, then stops reading
        peak = before
        while time.monotonic() < deadline:
            peak = max(peak, _rss(proxy.pid))
            time.sleep(0.1)
        grown = peak - before
        served = 0
        for s in clients:  # who got the tunnel; the others were closed at once (EOF)
            s.settimeout(5)
            try:
                served += s.recv(12).startswith(b"HTTP/1.1 200")
            except OSError:
                pass
        assert served == budget, (served, budget)
        # the budget, plus the interpreter's own growth (allocator arenas, the tasks): 32 MiB
        assert grown < MAX_BUFFER_BYTES + (32 << 20), f"+{grown >> 20} MiB for {served} connections"
    finally:
        for s in clients:
            s.close()
        proxy.stdin.close()
        try:
            proxy.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proxy.kill()
            proxy.wait()
