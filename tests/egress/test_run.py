"""`sandboy run` / `sandboy.run` with net.domains, from the attacker's side: only the proxy's
port is reachable, every decision is logged and counted, and nothing of the run is left behind."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from egresskit import to_toml_policy

SANDBOY = os.path.join(os.path.dirname(sys.executable), "sandboy")


def _namespaces_available() -> bool:
    from sandboy.confine import namespaces

    return namespaces.availability()[0]


@pytest.fixture(params=["namespace", "landlock-fallback"])
def mode(request):
    if request.param == "namespace" and not _namespaces_available():
        pytest.skip("no unprivileged user namespaces here")
    return request.param


@pytest.fixture
def env(tmp_path, mode):
    """The CLI's environment: test names → 127.0.0.1; the fallback forced where asked."""
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 allowed.test denied.test\n")
    out = dict(os.environ, SANDBOY_EGRESS_HOSTS=str(hosts), SANDBOY_CACHE_DIR=str(tmp_path / "cache"))
    out.pop("SANDBOY_NAMESPACES", None)
    if mode == "landlock-fallback":
        out["SANDBOY_NAMESPACES"] = "0"
    return out


def policy(tmp_path, domains, **net):
    path = tmp_path / "p.toml"
    path.write_text(to_toml_policy({"domains": domains, "private": ["127.0.0.0/8"], **net}))
    return path


def run(tmp_path, env, domains, script, *extra, **net):
    status = tmp_path / "status.json"
    log = tmp_path / "egress.jsonl"
    proc = subprocess.run([SANDBOY, "run", "--policy", str(policy(tmp_path, domains, **net)), "--status-json",
                           str(status), "--egress-log", str(log), *extra, "--", "/bin/sh", "-c", script],
                          capture_output=True, text=True, env=env, timeout=60, cwd=tmp_path)
    doc = json.loads(status.read_text()) if status.exists() and status.stat().st_size else {}
    lines = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return proc, doc, lines


def test_allowed_200_denied_403_logged_and_counted(tmp_path, env, origin, mode):
    script = (f"curl -sS -o /dev/null -w '%{{http_code}} ' http://allowed.test:{origin.port}/a; "
              f"curl -sS -o /dev/null -w '%{{http_code}}' http://denied.test:{origin.port}/b")
    proc, doc, lines = run(tmp_path, env, [f"allowed.test:{origin.port}"], script)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "200 403"
    assert [(e["decision"], e["host"]) for e in lines] == [("allow", "allowed.test"), ("deny", "denied.test")]
    assert doc["egress"]["allowed"] == 1 and doc["egress"]["denied"] == 1
    assert doc["enforced"]["egress"]["domains"] == [f"allowed.test:{origin.port}"]
    assert doc["egress"]["mode"] == doc["enforced"]["egress"]["mode"] == mode
    weaker = [d for d in doc["degraded"] if d.startswith("egress:")]
    assert bool(weaker) == (mode == "landlock-fallback"), doc["degraded"]


def test_direct_connections_bypassing_the_proxy_fail(tmp_path, env, origin):
    before = len(origin.seen)
    script = (f"curl -sS --noproxy '*' -m 5 http://127.0.0.1:{origin.port}/direct; echo rc=$?; "
              f"env -u http_proxy -u HTTP_PROXY -u ALL_PROXY -u all_proxy curl -sS -m 5 http://127.0.0.1:{origin.port}/; "
              "echo rc=$?")
    proc, _, _ = run(tmp_path, env, [f"allowed.test:{origin.port}"], script)
    assert proc.stdout.count("rc=7") == 2, (proc.stdout, proc.stderr)  # couldn't connect
    assert len(origin.seen) == before


def test_udp_and_dns_inside_fail(tmp_path, env):
    py = ("import socket,sys\n"
          "try:\n s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.sendto(b'x',('127.0.0.1',53)); print('udp-open')\n"
          "except OSError as e: print('udp-refused', e.errno)\n"
          "try:\n socket.getaddrinfo('example.com', 80); print('dns-ok')\n"
          "except OSError as e: print('dns-failed')\n")
    proc, _, _ = run(tmp_path, env, ["example.com"], f"/usr/bin/python3 -I -S -c \"{py}\"; "
                     "RES_OPTIONS=use-vc getent hosts example.com; echo getent=$?")
    assert "udp-refused" in proc.stdout and "dns-failed" in proc.stdout, (proc.stdout, proc.stderr)
    assert "getent=2" in proc.stdout or "getent=1" in proc.stdout, proc.stdout


def test_nothing_left_behind(tmp_path, env, origin):
    """No orphan (a background process of the command is killed), no port left listening."""
    marker = f"sandboy-egress-orphan-{os.getpid()}"
    proc, doc, _ = run(tmp_path, env, [f"allowed.test:{origin.port}"],
                       f"bash -c '(exec -a {marker} sleep 300 &)'; echo started")  # dash has no exec -a
    assert proc.returncode == 0 and "started" in proc.stdout
    port = int(doc["egress"]["proxy"].rsplit(":", 1)[1])
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2)
    survivors = subprocess.run(["pgrep", "-f", f"^{marker}"], capture_output=True, text=True).stdout
    assert survivors == ""


def test_namespace_mode_has_nowhere_else_to_go(tmp_path, env, origin, mode):
    """Even where the policy also grants the origin's TCP port, a direct connection finds no
    route (namespace) or is refused by Landlock (fallback: the port is not granted beside domains)."""
    before = len(origin.seen)
    script = f"curl -sS --noproxy '*' -m 5 http://127.0.0.1:{origin.port}/direct; echo rc=$?"
    proc, doc, _ = run(tmp_path, env, [f"allowed.test:{origin.port}"], script, connect_tcp=[origin.port])
    assert "rc=7" in proc.stdout, (proc.stdout, proc.stderr)
    assert len(origin.seen) == before
    if mode == "namespace":
        assert doc["enforced"]["namespaces"]["net"] is True


def _in_process(env, monkeypatch):
    """The API runs in this process: give it the run's resolver map and namespace mode."""
    monkeypatch.setenv("SANDBOY_EGRESS_HOSTS", env["SANDBOY_EGRESS_HOSTS"])
    if "SANDBOY_NAMESPACES" in env:
        monkeypatch.setenv("SANDBOY_NAMESPACES", env["SANDBOY_NAMESPACES"])


def test_python_api_reports_egress(tmp_path, env, origin, monkeypatch):
    from sandboy import Policy, run as sandboy_run

    _in_process(env, monkeypatch)
    p = Policy.load(policy(tmp_path, [f"allowed.test:{origin.port}"]))
    out = tmp_path / "out"
    with open(out, "wb") as fh:
        result = sandboy_run(["curl", "-sS", f"http://allowed.test:{origin.port}/api"], p, cwd=str(tmp_path),
                             stdout=fh.fileno())
    assert result.ok, result
    assert b"/api" in out.read_bytes()
    assert result.egress["allowed"] == 1 and result.egress["mode"] in ("namespace", "landlock-fallback")


def test_bad_domain_entry_is_exit_2(tmp_path, env):
    path = tmp_path / "bad.toml"
    path.write_text('version = 1\n[net]\ndomains = ["*"]\n')
    proc = subprocess.run([SANDBOY, "run", "--policy", str(path), "--", "true"], capture_output=True, text=True, env=env)
    assert proc.returncode == 2 and f"{path}: net.domains[0]: '*': '*' only as a leading" in proc.stderr, proc.stderr


def test_doctor_labels_the_egress_mode(tmp_path):
    for forced, expected in ((None, None), ("0", "landlock-fallback")):
        env = dict(os.environ, SANDBOY_CACHE_DIR=str(tmp_path / "cache"))
        env.pop("SANDBOY_NAMESPACES", None)
        if forced:
            env["SANDBOY_NAMESPACES"] = forced
        proc = subprocess.run([SANDBOY, "doctor", "--json"], capture_output=True, text=True, env=env)
        doc = json.loads(proc.stdout)
        if expected is None:
            expected = "namespace" if doc["protections"]["namespace_tier"] else "landlock-fallback"
        assert doc["egress"] == expected
        if expected == "landlock-fallback":
            assert any("WEAKER fallback" in note for note in doc["notes"])


def test_start_up_without_domains_imports_no_egress(tmp_path):
    """h11/asyncio cost tens of ms: only a policy with net.domains may pull them in."""
    path = tmp_path / "p.toml"
    path.write_text(to_toml_policy({"connect_tcp": [443]}))
    env = dict(os.environ, SANDBOY_CACHE_DIR=str(tmp_path / "cache"))
    subprocess.run([SANDBOY, "run", "--policy", str(path), "--", "/bin/true"], check=True, env=env)
    proc = subprocess.run([sys.executable, "-X", "importtime", SANDBOY, "run", "--policy", str(path), "--", "/bin/true"],
                          capture_output=True, text=True, env=env)
    used = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "sandboy.confine.cage" in used
    assert not {m for m in used if m.startswith(("sandboy.egress", "h11", "asyncio"))}, used


def test_a_command_that_never_connects_loads_no_proxy_modules(tmp_path, env, mode):
    """Set-up cost of `sandboy run` with net.domains (bench/bench_egress.py --only setup): until
    a client connects, neither the CLI nor its supervisor loads the proxy (asyncio, h11) or the
    stdlib modules it needs (socket, selectors, threading, json, re, enum: ≈ 15 ms together).
    The status report (--status-json loads json for itself) still carries the egress summary."""
    path = policy(tmp_path, ["allowed.test"])
    status = tmp_path / "status.json"
    argv = [SANDBOY, "run", "--policy", str(path), "--", "/bin/true"]
    subprocess.run(argv[:-2] + ["--status-json", str(status), "--", "/bin/true"], check=True, env=env)
    proc = subprocess.run([sys.executable, "-X", "importtime", *argv], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    used = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "sandboy.egress.session" in used
    # namespace mode: the proxy's thread is started only at the first client (session.serve_on_demand)
    assert ("sandboy.egress.service" in used) == (mode == "landlock-fallback")
    heavy = {"asyncio", "h11", "sandboy.egress.proxy", "socket", "selectors", "threading", "json", "re", "enum"}
    assert not heavy & used, sorted(heavy & used)
    doc = json.loads(status.read_text())
    assert doc["egress"] == {"mode": mode, "proxy": doc["enforced"]["egress"]["proxy"], "allowed": 0,
                             "denied": 0, "hosts": {}, "hosts_not_listed": 0}


def test_spawn_handle_serves_until_wait(tmp_path, env, origin, monkeypatch):
    """`sandboy.spawn`: the proxy serves while the command runs; wait() ends both and reports."""
    from sandboy import Policy, spawn

    _in_process(env, monkeypatch)
    p = Policy.load(policy(tmp_path, [f"allowed.test:{origin.port}"]))
    out = tmp_path / "out"
    with open(out, "wb") as fh:
        proc = spawn(["/bin/sh", "-c", f"sleep 0.2; curl -sS http://allowed.test:{origin.port}/spawned"], p,
                     cwd=str(tmp_path), stdout=fh.fileno())
        assert proc.pid > 0
        result = proc.wait()
    assert result.ok and b"/spawned" in out.read_bytes(), result
    assert result.egress["allowed"] == 1


def _pipes():
    (r_out, w_out), (r_in, w_in) = os.pipe(), os.pipe()
    return r_out, w_out, r_in, w_in


def test_the_proxy_thread_starts_at_the_first_client(tmp_path, env, origin, monkeypatch):
    """Namespace mode (session.serve_on_demand): while the command has not connected, its
    supervisor is one thread (nothing to tear down at exit); the first connection starts the
    proxy, which then serves it."""
    from sandboy import Policy, spawn

    if "SANDBOY_NAMESPACES" in env:
        pytest.skip("the fallback starts its proxy at once (a host socket shared with the caller)")
    _in_process(env, monkeypatch)
    p = Policy.load(policy(tmp_path, [f"allowed.test:{origin.port}"]))
    r_out, w_out, r_in, w_in = _pipes()
    script = f"echo ready; read go; curl -sS -m 30 http://allowed.test:{origin.port}/on-demand"
    proc = spawn(["/bin/sh", "-c", script], p, cwd=str(tmp_path), stdin=r_in, stdout=w_out)
    os.close(r_in)
    os.close(w_out)
    with os.fdopen(r_out, "rb") as out, os.fdopen(w_in, "wb", buffering=0) as go:
        assert out.readline() == b"ready\n"
        assert os.listdir(f"/proc/{proc.pid}/task") == [str(proc.pid)]  # no proxy thread yet
        go.write(b"go\n")
        body = out.read()
    result = proc.wait()
    assert result.ok and b"/on-demand" in body, (result, body)
    assert result.egress["allowed"] == 1


def _running(pid: int) -> bool:
    """Is `pid` a live process? A zombie is not: an orphan is reparented to the nearest subreaper,
    which in the full suite may be this pytest process (the gate's in-process runner makes it
    one) and which does not reap it."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _hold_netns_of_children(pid: int) -> dict:
    """The network namespaces of the processes below `pid`: {nsfs inode: an open fd on it}.
    Holding the fd keeps each namespace object, and so its inode number, from being freed and
    given to a namespace another test makes meanwhile (nsfs hands out the lowest free number):
    a process found in it later is really in the run's namespace. Close them with
    `_release`."""
    held, todo = {}, [pid]
    while todo:
        here = todo.pop()
        for tid in os.listdir(f"/proc/{here}/task"):
            try:
                with open(f"/proc/{here}/task/{tid}/children") as fh:
                    kids = [int(k) for k in fh.read().split()]
            except OSError:
                continue
            for kid in kids:
                try:
                    fd = os.open(f"/proc/{kid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
                except OSError:
                    continue
                inode = os.fstat(fd).st_ino
                if inode in held:
                    os.close(fd)
                else:
                    held[inode] = fd
                todo.append(kid)
    return held


def _release(held: dict) -> None:
    for fd in held.values():
        os.close(fd)


def _processes_in(netns) -> list:
    """Processes (any on the host) whose network namespace has one of the inodes `netns`."""
    inside = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}/ns/net").st_ino in netns:
                    inside.append(int(name))
            except OSError:
                pass
    return inside


@pytest.mark.parametrize("end", ["killed", "timed_out"])
def test_a_killed_or_timed_out_run_leaves_nothing(tmp_path, env, origin, monkeypatch, end):
    """The issue's lifecycle claim, for the ends a command does not choose: killed (Supervisor.kill, the API handle)
    or timed out. After wait(): the supervisor is gone, no process of the command's tree (a
    background sleeper included) is left, no process is in its network namespace, the caller
    holds no fd more than before, and the proxy had served the run (it was up when it ended)."""
    from sandboy import Policy, spawn

    _in_process(env, monkeypatch)
    p = Policy.load(policy(tmp_path, [f"allowed.test:{origin.port}"]))
    marker = f"sandboy-egress-{end}-{os.getpid()}"
    assert spawn(["/bin/true"], p, cwd=str(tmp_path)).wait().ok  # the compiled cage kept for reuse holds fds
    before = set(os.listdir("/proc/self/fd"))
    r_out, w_out, r_in, w_in = _pipes()
    script = (f"(exec -a {marker} sleep 300 &); curl -sS -m 30 http://allowed.test:{origin.port}/{end}; "
              "echo; echo served; exec sleep 300")
    proc = spawn(["/bin/bash", "-c", script], p, cwd=str(tmp_path), stdin=r_in, stdout=w_out,
                 timeout=None if end == "killed" else 5)
    os.close(r_in)
    os.close(w_out)
    with os.fdopen(r_out, "rb") as out:
        first = b""
        while not first.endswith(b"served\n"):
            line = out.readline()
            if not line:  # the run ended first (a timeout on a very slow machine): say so, never hang
                break
            first += line
        assert first.endswith(b"served\n") and f"/{end}".encode() in first, first
        netns = _hold_netns_of_children(proc.pid)
        if end == "killed":
            proc.kill()
        result = proc.wait()
    os.close(w_in)
    inside = _processes_in(netns)
    _release(netns)
    assert result.outcome == end, result
    assert result.egress["allowed"] == 1, result.egress
    assert not _running(proc.pid), "the supervisor is left"
    survivors = subprocess.run(["pgrep", "-f", f"^{marker}"], capture_output=True, text=True).stdout
    assert survivors == "", survivors
    if "SANDBOY_NAMESPACES" not in env:
        assert netns and os.stat("/proc/self/ns/net").st_ino not in netns, netns  # it had its own
        assert inside == []
    assert set(os.listdir("/proc/self/fd")) == before


def test_a_killed_cli_run_leaves_nothing(tmp_path, env, origin):
    """`sandboy run` itself killed (SIGTERM, as a CI runner's cancel does) while its command
    runs with the proxy up: its supervisor, the command's tree and its network namespace go."""
    import signal

    marker = f"sandboy-egress-cli-killed-{os.getpid()}"
    script = (f"(exec -a {marker} sleep 300 &); curl -sS -m 30 http://allowed.test:{origin.port}/cli-killed; "
              "echo; echo served; exec sleep 300")
    cli = subprocess.Popen([SANDBOY, "run", "--policy", str(policy(tmp_path, [f"allowed.test:{origin.port}"])),
                            "--", "/bin/bash", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           stdin=subprocess.DEVNULL, env=env, cwd=tmp_path)
    try:
        seen = b""
        while not seen.endswith(b"served\n"):
            line = cli.stdout.readline()
            assert line, (seen, cli.stderr.read())
            seen += line
        with open(f"/proc/{cli.pid}/task/{cli.pid}/children") as fh:
            supervisors = [int(pid) for pid in fh.read().split()]
        netns = _hold_netns_of_children(cli.pid)
        own = os.stat("/proc/self/ns/net").st_ino
        if own in netns:  # the fallback runs in the host's network namespace
            os.close(netns.pop(own))
        cli.send_signal(signal.SIGTERM)
        cli.wait(30)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    assert supervisors, "the CLI ran no supervisor"
    deadline = time.monotonic() + 10  # the supervisor learns of its parent's death by a signal
    while any(map(_running, supervisors)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(map(_running, supervisors)), "a supervisor is left"
    survivors = subprocess.run(["pgrep", "-f", f"^{marker}"], capture_output=True, text=True).stdout
    assert survivors == "", survivors
    try:
        assert _processes_in(netns) == []
    finally:
        _release(netns)


def test_a_proxy_that_cannot_start_fails_the_run_closed(tmp_path, env, origin):
    """Fault injected: the proxy's thread cannot be started when the first client connects (as
    when threads run out). The client is reset at once (the listener is closed, no hang) and
    the run ends as a cage error (125) naming the proxy, never as the command's own status."""
    if "SANDBOY_NAMESPACES" in env:
        pytest.skip("the fallback starts its proxy before the command runs")
    code = f"""
import sys
from sandboy import Policy, run
from sandboy.egress import service

def refuse(self, wait=True):
    raise RuntimeError("can't start new thread")

service.ProxyService.start = refuse
p = Policy.load({str(policy(tmp_path, [f"allowed.test:{origin.port}"]))!r})
r = run(["curl", "-sS", "-m", "20", "http://allowed.test:{origin.port}/never"], p, cwd={str(tmp_path)!r})
print(r.outcome, r.returncode, r.error)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("cage_error 125 egress proxy: can't start new thread"), (proc.stdout, proc.stderr)
    # the pending connection is reset when the listener closes (curl (56) or (55), by timing); curl's
    # own 20 s limit (28) never hits
    assert "curl: (" in proc.stderr and "curl: (28)" not in proc.stderr, proc.stderr
