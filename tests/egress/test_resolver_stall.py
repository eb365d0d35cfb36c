"""A name lookup the caged command starts cannot hold its supervisor past the run's end.

The proxy resolves names on the host with getaddrinfo, which blocks for as long as the host's
resolver configuration says (glibc: 5 s x 2 attempts per name server) when a name server does
not answer — and the command chooses the names (any under an allowed `*.suffix`, in a zone whose
servers never answer). Session 8 review: the lookups ran in asyncio's default executor, which the
proxy's `asyncio.run` joins when it stops: a gate step with a 2 s timeout asking for 12 such names
ended after 10.4 s (every lookup running at the stop finished first), and so would the gate's
budget and ^C. Here the host's resolver is a name server that never answers, in a private mount
namespace of the gate (`/etc/resolv.conf` bound over there only)."""

from __future__ import annotations

import asyncio
import os
import random
import socket
import subprocess
import sys
import threading
import time

import pytest

from dnskit import lookup_helpers, under_name_server
from sandboy.egress.resolver import Resolver
from sandboy.gate import ceiling as ceilings

ASK = r"""
import os, socket, sys, threading, time
host, port = os.environ["http_proxy"].split("//")[1].rsplit(":", 1)
def ask(i):
    try:
        s = socket.create_connection((host, int(port)))
        s.sendall(f"CONNECT n{i}.slow.test:443 HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        s.recv(100)
    except OSError:
        pass
for i in range(int(sys.argv[1])):
    threading.Thread(target=ask, args=(i,), daemon=True).start()
time.sleep(60)
"""


@pytest.fixture
def silent_name_server():
    """A UDP socket on 127.53.X.Y:53 that reads queries and never answers; its address."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for _ in range(20):
        address = f"127.53.{random.randrange(1, 255)}.{random.randrange(1, 255)}"
        try:
            sock.bind((address, 53))
            break
        except OSError:
            continue
    else:
        pytest.skip("no free 127.53.x.y:53")
    stop = threading.Event()

    def swallow():
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                sock.recvfrom(4096)
            except OSError:
                pass

    thread = threading.Thread(target=swallow, daemon=True)
    thread.start()
    yield address
    stop.set()
    thread.join(5)
    sock.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="binds /etc/resolv.conf in a private mount namespace (root)")
def test_a_step_asking_for_names_no_server_answers_ends_at_its_timeout(tmp_path, silent_name_server):
    repo = tmp_path / "repo"
    (repo / ".007").mkdir(parents=True)
    (repo / "ask.py").write_text(ASK)
    (repo / ".007" / "gate.toml").write_text(
        '[[step]]\nname = "dns"\npolicy = "p"\ntimeout = "2s"\nrun = "python3 ask.py 12"\n'
        '[policy.p]\nversion = 1\nnet.domains = ["*.slow.test:443"]\n')
    ceiling = tmp_path / "ceiling.toml"
    ceiling.write_text(ceilings.to_toml({**ceilings.BUILTIN, "net": {"domains": ["*.test:443"]}}))
    resolv = tmp_path / "resolv.conf"
    resolv.write_text(f"nameserver {silent_name_server}\n")  # glibc's defaults: timeout 5, attempts 2
    gate = [sys.executable, "-m", "sandboy.gate.cli", str(repo), "--ceiling", str(ceiling)]
    started = time.monotonic()
    proc = subprocess.run(under_name_server(str(resolv), gate), capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, SANDBOY_CACHE_DIR=str(tmp_path / "cache")))
    took = time.monotonic() - started
    assert "dns: TIMED OUT" in proc.stdout, (proc.stdout, proc.stderr)
    assert took < 7, (took, proc.stdout[-1500:])  # 10.4 s before: the lookups were joined


QUICK_ASK = ASK.replace("time.sleep(60)", "time.sleep(0.3)").replace(
    'f"CONNECT n{i}.slow.test', 'f"CONNECT n{i}-{os.getpid()}.slow.test')


@pytest.mark.skipif(os.geteuid() != 0, reason="binds /etc/resolv.conf in a private mount namespace (root)")
def test_quick_steps_lookups_end_with_each_step(tmp_path, silent_name_server):
    """Session 8 left each lookup in a thread of the gate that nobody could stop: over quick
    steps asking for names no server answers, 8 more threads a step lived on for up to 30 s
    (90 threads in the gate after 12 such steps here), each with its socket, until a later
    step's proxy or /proc walk found no fd left. Now a step's lookups run in its proxy's helper
    process, killed when the step ends (session 10: the gate's one helper, killed at the end of
    a step whose lookups are still out). From the host: every step runs, the gate's threads do
    not grow with the steps, nor the helper's."""
    steps = 12
    repo = tmp_path / "repo"
    (repo / ".007").mkdir(parents=True)
    (repo / "ask.py").write_text(QUICK_ASK)
    (repo / ".007" / "gate.toml").write_text(
        "".join(f'[[step]]\nname = "s{i}"\npolicy = "p"\ntimeout = "20s"\nrun = "python3 ask.py 8"\n'
                for i in range(steps)) + '[policy.p]\nversion = 1\nnet.domains = ["*.slow.test:443"]\n')
    ceiling = tmp_path / "ceiling.toml"
    ceiling.write_text(ceilings.to_toml({**ceilings.BUILTIN, "net": {"domains": ["*.test:443"]}}))
    resolv = tmp_path / "resolv.conf"
    resolv.write_text(f"nameserver {silent_name_server}\n")
    gate = [sys.executable, "-m", "sandboy.gate.cli", str(repo), "--ceiling", str(ceiling)]
    proc = subprocess.Popen(under_name_server(str(resolv), gate), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    threads, helpers, helper_threads, helper_pids = [], [], [], set()
    try:
        while proc.poll() is None:  # the gate is proc.pid itself: unshare and sh exec it
            try:
                threads.append(len(os.listdir(f"/proc/{proc.pid}/task")))
                mine = lookup_helpers(proc.pid)
                helpers.append(len(mine))
                for kid in mine:
                    helper_pids.add(kid)
                    helper_threads.append(len(os.listdir(f"/proc/{kid}/task")))
            except OSError:
                pass
            time.sleep(0.02)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, (out[-2000:], err[-2000:])
    assert out.count(": PASSED in ") == steps, out[-2000:]
    assert max(threads) <= 4, max(threads)  # session 8: +8 a step, 90 here by the last one
    assert max(helpers) == 1, helpers  # a helper did run the lookups, one at a time
    # Session 10: the gate keeps one helper across steps, but not one whose lookups are still
    # out at a step's end (killed then): its threads never pile up (main + at most 8 lookups,
    # MAX_LOOKUPS) — kept, it would hold 8 more a step, ~96 by the last one
    assert max(helper_threads) <= 9, max(helper_threads)
    assert len(helper_pids) > 1, helper_pids


def test_twin_names_still_resolve_through_getaddrinfo():
    """The lookup still asks the host's resolver (here /etc/hosts' localhost) and still stops at
    nothing but its answer."""

    async def lookup():
        resolver = Resolver({})
        try:
            return await resolver.resolve(asyncio.get_running_loop(), "localhost", False)
        finally:
            resolver.close()

    assert "127.0.0.1" in asyncio.run(lookup())


def test_a_lookup_that_fails_is_an_oserror():
    async def lookup():
        resolver = Resolver({})
        try:
            return await resolver.resolve(asyncio.get_running_loop(), "no-such-name.invalid", False)
        finally:
            resolver.close()

    with pytest.raises(OSError):
        asyncio.run(lookup())
