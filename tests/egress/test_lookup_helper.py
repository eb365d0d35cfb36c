"""One name-lookup helper per gate (session 10), with what session 9's helper per step bought kept.

Session 9 moved the proxy's getaddrinfo into a helper process killed with each step's proxy, so
a step's lookups could no longer pile up in the gate — at one interpreter start-up (100-200 ms
here under load) for every step that resolves a name. Now the gate starts one helper at its
first lookup and keeps it while each step ends with its questions answered. Checked from the
host, against a real name server on the loopback (dnskit.NameServer) that the host's resolver is
pointed at in a private mount namespace of the gate:
- every step of a gate resolving a name is served by ONE helper, which is gone once the gate
  has ended — by a normal end, ^C, SIGTERM, SIGHUP or SIGKILL (no orphan: by its pid);
- a helper killed or stopped between steps is replaced: the next steps still resolve (and a
  stopped one's step fails closed: no answer, never a lookup made in the gate's process);
- a late answer to a question of step 1 never reaches step 2 (killed with the question out;
  ids are never reused in a helper's life);
- (tests/egress/test_resolver_stall.py) against a silent server every step still runs, the gate's
  threads stay flat and the helper's own threads do not grow with the steps.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from dnskit import NameServer, alive, children, lookup_helpers, under_name_server
from egresskit import to_toml_policy
from sandboy.gate import ceiling as ceilings

pytestmark = pytest.mark.skipif(os.geteuid() != 0,
                                reason="binds /etc/resolv.conf in a private mount namespace (root)")

FETCH = "curl -sS -m 20 --noproxy '' -o /dev/null -w %{{http_code}} http://{name}:{port}/"


def _gate(tmp_path, server, steps: list, port: int, args=(), domains=()) -> subprocess.Popen:
    """`sandboy gate` on a repository of `steps` ((name, command) pairs, each allowed
    *.fast.test), its resolver the loopback `server`; the Popen's pid is the gate's own."""
    repo = tmp_path / "repo"
    (repo / ".007").mkdir(parents=True)
    (repo / ".007" / "gate.toml").write_text(
        "".join(f'[[step]]\nname = "{name}"\npolicy = "p"\ntimeout = "60s"\nrun = "{run}"\n' for name, run in steps)
        + f'[policy.p]\nversion = 1\nnet.domains = {json.dumps([f"*.fast.test:{port}", *domains])}\n'
        'net.private = ["127.0.0.1/32"]\n')
    ceiling = tmp_path / "ceiling.toml"
    ceiling.write_text(ceilings.to_toml({**ceilings.BUILTIN, "net": {"domains": [f"*.test:{port}", *domains],
                                                                    "private": ["127.0.0.0/8"]}}))
    resolv = server.resolv_conf(tmp_path / "resolv.conf")
    gate = [sys.executable, "-m", "sandboy.gate.cli", str(repo), "--ceiling", str(ceiling), *args]
    env = dict(os.environ, SANDBOY_CACHE_DIR=os.environ.get("SANDBOY_CACHE_DIR", str(tmp_path / "cache")))
    env.pop("SANDBOY_EGRESS_HOSTS", None)
    return subprocess.Popen(under_name_server(resolv, gate), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


def _watch(proc, until=None, seen=None, every=0.02) -> list:
    """Sample the gate's lookup helpers (host side) until the gate exits or `until(seen)` is
    true; every distinct helper pid seen, in order (added to `seen` when given)."""
    seen = [] if seen is None else seen
    while proc.poll() is None and not (until is not None and until(seen)):
        for pid in lookup_helpers(proc.pid):
            if pid not in seen:
                seen.append(pid)
        time.sleep(every)
    return seen


def _finish(proc, timeout=120):
    try:
        return proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _wait_gone(pid: int, limit: float = 10.0) -> bool:
    deadline = time.monotonic() + limit
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not alive(pid)


@pytest.fixture
def fast_names():
    server = NameServer({f"n{i}.fast.test": ("127.0.0.1", 0.0) for i in range(12)})
    yield server
    server.close()


def test_one_helper_serves_every_step_and_ends_with_the_gate(tmp_path, origin, fast_names):
    steps = [(f"s{i}", FETCH.format(name=f"n{i}.fast.test", port=origin.port)) for i in range(6)]
    proc = _gate(tmp_path, fast_names, steps, origin.port)
    seen = _watch(proc)
    out, err = _finish(proc)
    assert proc.returncode == 0, (out[-2000:], err[-2000:])
    assert out.count(": PASSED in ") == 6, out[-2000:]
    assert [f"n{i}.fast.test" for i in range(6)] == [n for n in dict.fromkeys(fast_names.asked)], fast_names.asked
    # session 9: one helper a step (6 here); now the gate's one, started at the first lookup
    assert len(seen) == 1, seen
    assert _wait_gone(seen[0], 0), seen  # ended (and reaped) by the gate before it exited


def test_twin_steps_without_names_start_no_helper(tmp_path, origin, fast_names):
    """An IP literal needs no lookup: no helper is started for it (none a gate whose steps never
    resolve a name)."""
    steps = [(f"s{i}", FETCH.format(name="127.0.0.1", port=origin.port)) for i in range(2)]
    proc = _gate(tmp_path, fast_names, steps, origin.port, domains=[f"127.0.0.1:{origin.port}"])
    seen = _watch(proc)
    out, err = _finish(proc)
    assert proc.returncode == 0, (out[-2000:], err[-2000:])
    assert out.count(": PASSED in ") == 2 and "200" in out, out[-2000:]
    assert seen == [] and fast_names.asked == [], (seen, fast_names.asked)


STOPS = {"sigint": signal.SIGINT, "sigterm": signal.SIGTERM, "sighup": signal.SIGHUP, "sigkill": signal.SIGKILL}


@pytest.mark.parametrize("how", sorted(STOPS))
def test_the_helper_ends_with_the_gate_however_it_is_stopped(tmp_path, origin, fast_names, how):
    steps = [("s0", FETCH.format(name="n0.fast.test", port=origin.port)), ("s1", "sleep 60")]
    proc = _gate(tmp_path, fast_names, steps, origin.port)
    seen = _watch(proc, until=lambda seen: seen and fast_names.asked)
    assert seen, "no helper started"
    time.sleep(1.5)  # s0 has ended (its lookup answered at once), s1 sleeps: the helper is kept
    assert alive(seen[0])
    os.kill(proc.pid, STOPS[how])
    out, err = _finish(proc, 30)
    assert "Traceback" not in err, err[-2000:]
    # SIGKILL: the gate cannot kill it; it reads the end of its stdin and exits
    assert _wait_gone(seen[0]), (how, seen, out[-1000:])


def test_a_helper_killed_or_stopped_between_steps_is_replaced(tmp_path, origin, fast_names):
    """s0 resolves, then the host kills its helper; s1 resolves (a new helper). The host stops
    (SIGSTOP) that one: s2's lookup gets no answer — its fetch fails, never answered from the
    gate's own process — until s2 times out and its helper is killed with it; s3 resolves."""
    fetch = FETCH.replace("-m 20", "-m 3")
    names = [f"n{i}.fast.test" for i in range(6, 10)]  # (the origin is the module's: names of this test)
    steps = [("s0", fetch.format(name=names[0], port=origin.port) + "; sleep 1"),
             ("s1", "sleep 1; " + fetch.format(name=names[1], port=origin.port) + "; sleep 1"),
             ("s2", "sleep 1; " + fetch.format(name=names[2], port=origin.port)),
             ("s3", fetch.format(name=names[3], port=origin.port))]

    def fetched(name):  # the origin has its request: the lookup was answered, nothing is out
        return lambda seen: seen and any(host.startswith(name + ":") for host, _ in origin.seen)

    proc = _gate(tmp_path, fast_names, steps, origin.port, args=("--keep-going",))
    seen = _watch(proc, until=fetched(names[0]))
    killed = seen[0]
    os.kill(killed, signal.SIGKILL)  # (the gate reaps it: through its pidfd, at the next lookup)
    _watch(proc, until=lambda seen: len(seen) > 1 and fetched(names[1])(seen), seen=seen)
    stopped = seen[-1]
    os.kill(stopped, signal.SIGSTOP)  # s1 ends with nothing out: the helper is kept for s2
    _watch(proc, seen=seen)
    out, err = _finish(proc)
    assert "s0: PASSED" in out and "s1: PASSED" in out and "s3: PASSED" in out, out[-3000:]
    assert "s2: FAILED" in out, out[-3000:]  # no answer from a hung helper: fails closed
    assert names[2] not in fast_names.asked  # the stopped helper never asked; nobody else did
    assert len(seen) == 3 and seen[:2] == [killed, stopped], seen  # then s3's, a new one
    assert not alive(killed) and not alive(stopped) and not alive(seen[2])


LATE = r"""
import asyncio, os, sys, time
from sandboy.egress.resolver import LookupHelper, Resolver
lookups = LookupHelper()

async def step(name, wait):
    resolver = Resolver({}, lookups=lookups)
    try:
        return await asyncio.wait_for(resolver.resolve(asyncio.get_running_loop(), name, False), wait)
    except asyncio.TimeoutError:
        return "gave up"
    finally:
        resolver.close()

first = asyncio.run(step("late.fast.test", 0.3))  # answered after 0.6 s: step 1 ends with it out
pid_after_first = lookups.pid
second = asyncio.run(step("slow.fast.test", 5))   # answered after 1.2 s: the late answer comes first
print(first, pid_after_first, second, lookups.started, lookups.pid, sep="|")
lookups.close()
"""


def test_a_late_answer_to_step_one_never_reaches_step_two(tmp_path):
    server = NameServer({"late.fast.test": ("127.0.0.2", 0.6), "slow.fast.test": ("127.0.0.3", 1.2)})
    try:
        resolv = server.resolv_conf(tmp_path / "resolv.conf")
        proc = subprocess.run(under_name_server(resolv, [sys.executable, "-c", LATE]), capture_output=True,
                              text=True, timeout=60)
    finally:
        server.close()
    assert proc.returncode == 0, proc.stderr[-2000:]
    first, pid_after_first, second, started, pid = proc.stdout.strip().split("|")
    assert first == "gave up"
    assert second == "['127.0.0.3']", proc.stdout  # step 1's late 127.0.0.2 never reaches it
    assert pid_after_first == "None" and started == "2", proc.stdout  # killed with its question out


def test_twin_sandboy_run_resolves_through_a_helper_of_its_own(tmp_path, origin, fast_names):
    """`sandboy run` (one run, one proxy) keeps the helper of its proxy's own: the name resolves
    through the host's resolver, and no helper is left once the run has ended."""
    policy = tmp_path / "p.toml"
    policy.write_text(to_toml_policy({"domains": [f"n11.fast.test:{origin.port}"], "private": ["127.0.0.1/32"]}))
    resolv = fast_names.resolv_conf(tmp_path / "resolv.conf")
    sandboy = os.path.join(os.path.dirname(sys.executable), "sandboy")
    env = dict(os.environ)
    env.pop("SANDBOY_EGRESS_HOSTS", None)
    proc = subprocess.Popen(under_name_server(resolv, [sandboy, "run", "--policy", str(policy), "--", "sh", "-c",
                                                       FETCH.format(name="n11.fast.test", port=origin.port)]),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    seen = []
    while proc.poll() is None:  # the helper is a child of the process that serves the proxy
        for pid in lookup_helpers(proc.pid):
            if pid not in seen:
                seen.append(pid)
        for kid in children(proc.pid):
            for pid in lookup_helpers(kid):
                if pid not in seen:
                    seen.append(pid)
        time.sleep(0.01)
    out, err = _finish(proc)
    assert proc.returncode == 0 and out == "200", (out, err[-2000:])
    assert fast_names.asked and fast_names.asked[0] == "n11.fast.test", fast_names.asked
    # a helper was there (a lookup in the proxy's own process, as before session 9, gave the same
    # answer), and none is left
    assert seen, "no lookup helper seen: the name was resolved in the proxy's own process"
    assert all(_wait_gone(pid, 5) for pid in seen), seen


RAISING = r"""
import io, os, sys
from sandboy.gate import ceiling as ceilings, config
from sandboy.gate.console import Console
from sandboy.gate.runner import GateRun

class Broken(Console):
    # the console raises once the first step has ended (its helper then kept for the next)
    def step_end(self, result):
        super().step_end(result)
        self.helper = run._lookups.pid
        raise RuntimeError("a console that breaks")

gate = config.load(sys.argv[1])
ceiling, _ = ceilings.read(sys.argv[2])
console = Broken(out=io.StringIO())
run = GateRun(gate, ceiling, console)
try:
    run.run()
except RuntimeError:
    pass
pid = console.helper
with open(f"/proc/{pid}/stat") if os.path.exists(f"/proc/{pid}") else io.StringIO("0 (x) gone") as fh:
    print(pid, fh.read().rsplit(")", 1)[1].split()[0])  # this process still lives: not stdin's end
"""


def test_the_helper_ends_when_an_exception_unwinds_the_gate(tmp_path, origin, fast_names):
    """An exception out of the runner (here the console's) unwinds GateRun.run: its `finally`
    kills and reaps the helper at once — checked while the gate's process still lives, so the
    helper did not just read the end of its stdin."""
    steps = [("s0", FETCH.format(name="n5.fast.test", port=origin.port)), ("s1", "true")]
    proc = _gate(tmp_path, fast_names, steps, origin.port)  # (only for the repository and ceiling it writes)
    _finish(proc)
    resolv = str(tmp_path / "resolv.conf")
    done = subprocess.run(under_name_server(resolv, [sys.executable, "-c", RAISING, str(tmp_path / "repo"),
                                                     str(tmp_path / "ceiling.toml")]),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    pid, state = done.stdout.split()
    assert pid != "None" and state == "gone", done.stdout  # no such process any more (not even a zombie)
