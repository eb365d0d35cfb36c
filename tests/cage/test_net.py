"""Network probes against servers this test starts on loopback only."""

from __future__ import annotations

import os
import socket

import pytest

pytestmark = pytest.mark.needs_kernel

AF_PACKET, AF_VSOCK, AF_BLUETOOTH = 17, 40, 31
SOCK_STREAM, SOCK_DGRAM, SOCK_RAW, SOCK_NONBLOCK = 1, 2, 3, 0o4000
IPPROTO_SCTP, IPPROTO_MPTCP = 132, 262
HIGH = 1 << 32  # the kernel reads socket()'s arguments as 32-bit ints


@pytest.fixture
def tcp_server():
    """Two listening loopback ports: the one a policy allows, and one it does not."""
    socks = []
    for _ in range(2):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        socks.append(s)
    yield [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()


def free_ports(count: int) -> list[int]:
    """`count` distinct loopback ports free right now: held together while picked, so the kernel
    cannot hand out the same one twice (two `free_port()` calls could)."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port() -> int:
    return free_ports(1)[0]


def test_no_net_section_refuses_inet_sockets(cage, tcp_server):
    allowed, _ = tcp_server
    assert cage.run("tcp-connect", allowed).out == "EPERM"
    assert cage.run("socket", socket.AF_INET6, SOCK_STREAM).out == "EPERM"


@pytest.mark.parametrize("via", ["api", "cli"])
def test_tcp_connect_to_port_not_allowed_refused(cage, tcp_server, via):
    allowed, other = tcp_server
    policy = cage.policy(net={"connect_tcp": [allowed]})
    assert cage.run("tcp-connect", other, policy=policy, via=via).out == "EACCES"
    assert cage.run("tcp-connect", allowed, policy=policy, via=via).ok


def test_tcp_fast_open_refused_under_port_rules(cage, tcp_server):
    """sendto(MSG_FASTOPEN) connects without a connect() call, and Landlock (ABI 7) did not
    check it: the data reached a denied port. Seccomp refuses MSG_FASTOPEN under port rules."""
    allowed, other = tcp_server
    policy = cage.policy(net={"connect_tcp": [allowed]})
    assert cage.run("tcp-fastopen", other, policy=policy).out == "EPERM"
    assert cage.run("tcp-fastopen", allowed, policy=policy).out == "EPERM"  # the cost: no TFO at all
    assert cage.run("tcp-connect", allowed, policy=policy).ok
    assert cage.run("tcp-fastopen", other, policy=cage.policy(net={"unrestricted": True})).ok


def test_listen_without_bind_refused(cage):
    """listen() on an unbound socket picks an ephemeral port without a bind() call, and Landlock
    (ABI 7) did not check it: a server on 0.0.0.0 though bind_tcp allowed no port."""
    policy = cage.policy(net={"connect_tcp": [443], "udp": True})
    assert cage.run("tcp-listen", policy=policy).out == "EPERM"
    assert cage.run("tcp-bind", free_port(), policy=policy).out == "EACCES"


def test_listen_autobind_with_bind_ports_is_reported_degraded(cage):
    """Where a listener is legitimate (bind_tcp non-empty, or unix = true) seccomp cannot tell
    a bound socket from an unbound one: the gap is reported, and a strict policy is refused."""
    port = free_port()
    policy = cage.policy(net={"bind_tcp": [port]})
    r = cage.cli(["--dry-run", "--json"], policy)
    assert any("listen()" in d for d in __import__("json").loads(r.out)["degraded"]), r
    assert cage.run("tcp-bind", port, policy=policy).ok
    assert cage.cli(["--", cage.probe, "exit", "0"], dict(policy, compat={"landlock": "strict"})).rc == 125


def test_tcp_bind_to_port_not_allowed_refused(cage):
    allowed, other = free_ports(2)
    policy = cage.policy(net={"bind_tcp": [allowed]})
    assert cage.run("tcp-bind", other, policy=policy).out == "EACCES"
    assert cage.run("tcp-bind", allowed, policy=policy).ok


@pytest.mark.parametrize("proto", [IPPROTO_MPTCP, IPPROTO_MPTCP | HIGH, IPPROTO_SCTP])
def test_mptcp_and_sctp_refused_under_port_rules(cage, tcp_server, proto):
    """MPTCP connects past Landlock's TCP port rules (docs/findings.md): refused at socket()."""
    allowed, other = tcp_server
    policy = cage.policy(net={"connect_tcp": [allowed]})
    assert cage.run("tcp-connect", other, proto, policy=policy).out == "EPERM"
    assert cage.run("tcp-connect", allowed, 6, policy=policy).ok  # explicit IPPROTO_TCP works


@pytest.fixture
def udp_server():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    s.settimeout(5)
    yield s
    s.close()


def test_udp_refused_unless_allowed(cage, udp_server, tcp_server):
    port = udp_server.getsockname()[1]
    tcp_only = cage.policy(net={"connect_tcp": [tcp_server[0]]})
    assert cage.run("udp", port, policy=tcp_only).out == "EPERM"
    # libseccomp compared 64 bits where the kernel reads 32 (docs/findings.md): family, type and
    # protocol with high bits set are still AF_INET / SOCK_DGRAM to the kernel.
    for args in ((socket.AF_INET | HIGH, SOCK_DGRAM, 0), (socket.AF_INET, SOCK_DGRAM | HIGH, 0),
                 (socket.AF_INET6, SOCK_DGRAM | SOCK_NONBLOCK, 0), (socket.AF_INET, SOCK_DGRAM, 17 | HIGH),
                 (socket.AF_INET, SOCK_RAW, 1)):
        assert cage.run("socket", *args, policy=tcp_only).out == "EPERM", args
    udp = cage.policy(net={"udp": True})
    assert cage.run("udp", port, policy=udp).ok
    assert udp_server.recv(16) == b"x"


def test_raw_udp_syscall_with_high_bits_refused_without_net(cage):
    assert cage.run("socket", 0x1_00000002, SOCK_DGRAM, 0).out == "EPERM"


@pytest.mark.parametrize("family", [AF_VSOCK, AF_PACKET, AF_BLUETOOTH, AF_PACKET | HIGH])
@pytest.mark.parametrize("net", [{"connect_tcp": [443], "udp": True, "unix": True}, {"unrestricted": True}])
def test_other_socket_families_refused(cage, family, net):
    assert cage.run("socket", family, SOCK_DGRAM, policy=cage.policy(net=net)).out == "EPERM"
    assert cage.run("socket", socket.AF_UNIX, SOCK_STREAM, policy=cage.policy(net=net)).ok


@pytest.fixture
def abstract_listener():
    name = f"sandboy-test-{os.getpid()}-{os.urandom(4).hex()}"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind("\0" + name)
    s.listen(1)
    yield name
    s.close()


@pytest.mark.without_namespaces
def test_abstract_unix_socket_outside_refused(cage, abstract_listener):
    policy = cage.policy(net={"unix": True})
    assert cage.run("abstract-connect", abstract_listener, policy=policy).out == "EPERM"  # scope, ABI 6
    assert cage.run("abstract-self", abstract_listener + "-own", policy=policy).ok


@pytest.fixture
def daemon_socket(tmp_path):
    """A host daemon's pathname socket, in a directory no policy grants."""
    d = tmp_path / "run"
    d.mkdir()
    path = str(d / "daemon.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.listen(1)
    yield path
    s.close()


def test_host_daemon_pathname_socket_refused(cage, daemon_socket):
    assert cage.run("unix-connect", daemon_socket).out == "EPERM"  # socket(AF_UNIX) refused
    assert cage.run("socketpair").ok  # socketpair still works with unix = false


@pytest.fixture
def datagram_daemon(tmp_path):
    """A host daemon's datagram socket (like /dev/log), in a directory no policy grants."""
    d = tmp_path / "dgram"
    d.mkdir()
    path = str(d / "log.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(path)
    s.setblocking(False)
    yield path, s
    s.close()


def test_datagram_socketpair_cannot_reach_a_host_socket(cage, datagram_daemon):
    """socketpair(AF_UNIX, SOCK_DGRAM) gives an unbound datagram socket that sendto() can aim at
    any pathname socket; with unix = false it is refused (stream pairs still work)."""
    path, listener = datagram_daemon
    assert cage.run("dgram-pair-sendto", path).out == "EPERM"
    with pytest.raises(BlockingIOError):
        listener.recv(16)
    # the twin: with unix sockets allowed, the same datagram arrives (the probe can see it)
    assert cage.run("dgram-pair-sendto", path, policy=cage.policy(net={"unix": True})).ok
    assert listener.recv(16) == b"leak"


def test_pathname_socket_reachable_with_unix_true_known_gap(cage, daemon_socket):
    """Landlock (ABI < 9) does not restrict connect() to a pathname unix socket, even where
    file access is denied (docs/findings.md). `net.unix = true` therefore reaches every socket the
    uid may connect to. This asserts what is true so a kernel that closes the gap is noticed."""
    from sandboy.confine import landlock

    if landlock.abi_version() >= 9:
        pytest.skip("Landlock may scope pathname unix sockets here")
    assert cage.run("unix-connect", daemon_socket, policy=cage.policy(net={"unix": True})).ok
