"""Red team, session 13 (hostile input): the egress proxy from a confined client's side.

Each probe runs against the real proxy on loopback (egresskit) or the real parser the proxy
reads a tunnel with; each has a legitimate twin. docs/threat-model.md, "Session 13 review
(hostile input and output)".
"""

from __future__ import annotations

import json
import os
import socket
import time

import pytest

from sandboy.egress import proxy as proxy_module
from sandboy.egress import sni
from sandboy.egress.resolver import Resolver
from sandboy.egress.rules import Rules
from sandboy.egress.service import ProxyService

from egresskit import connect_tunnel, loopback_listener

HOSTS = {"allowed.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]}


def client_hello(server_name: str, padding: int = 0) -> bytes:
    """A TLS 1.2-shaped ClientHello handshake message (no record header) naming `server_name`,
    with a padding extension (RFC 7685) of `padding` bytes."""
    name = server_name.encode()
    entry = b"\x00" + len(name).to_bytes(2, "big") + name
    server_name_ext = b"\x00\x00" + (len(entry) + 2).to_bytes(2, "big") + len(entry).to_bytes(2, "big") + entry
    padding_ext = b"\x00\x15" + padding.to_bytes(2, "big") + bytes(padding)
    extensions = server_name_ext + padding_ext
    body = (b"\x03\x03" + os.urandom(32) + b"\x00" + b"\x00\x02\x13\x01" + b"\x01\x00"
            + len(extensions).to_bytes(2, "big") + extensions)
    return b"\x01" + len(body).to_bytes(3, "big") + body


def in_records(handshake: bytes, size: int) -> list:
    """`handshake` cut into TLS handshake records of `size` payload bytes each."""
    return [b"\x16\x03\x01" + len(part).to_bytes(2, "big") + part
            for part in (handshake[i : i + size] for i in range(0, len(handshake), size))]


# --- the ClientHello in tiny records, one read each -------------------------------------------


def test_a_client_hello_dripped_in_one_byte_records_is_read_in_linear_time():
    """Session 13: the proxy parsed its whole buffer again after every read. A hello of 10,000
    one-byte records (60 kB, under the 64 KiB bound), one record per read, cost ~30 s of one core
    in the supervising process (quadratic: every parse walks every record); linear now."""
    records = in_records(client_hello("allowed.test", padding=9900), 1)
    assert 9_000 < len(records) and len(b"".join(records)) < sni.MAX_HELLO
    reader = sni.HelloReader()
    started = time.process_time()
    verdicts = [reader.feed(record) for record in records]
    spent = time.process_time() - started
    assert verdicts[-1] == ("sni", "allowed.test")
    assert set(verdicts[:-1]) == {sni.NEED_MORE}
    assert spent < 3.0, f"{spent:.1f} s of CPU to read one ClientHello"  # ~30 s before, ~0.05 s now


@pytest.mark.parametrize("size", [1, 7, 300, 16384])
def test_twin_the_reader_answers_as_the_whole_buffer_parse_at_every_cut(size):
    """The incremental reader agrees with `client_hello` on every prefix, for records of any size
    and for the bad shapes (a hello interrupted by another record, not TLS, too large)."""
    hello = b"".join(in_records(client_hello("allowed.test", padding=300), size))
    shapes = [hello, hello[:40] + b"\x17\x03\x03\x00\x01x" + hello[40:], b"SSH-2.0-x\r\n",
              b"\x16\x03\x01\x00\x04\x02\x00\x00\x00", b"\x16\x03\x01\x00\x05\x01\xff\xff\xff\x00",
              b"\x16\x02", b"\x16\x03\x01\x00\x00" * 13200, bytes(hello[:5]) + bytes(sni.MAX_HELLO)]
    for data in shapes:
        for step in (1, 5, 13, 4096) if len(data) < 5000 else (4096, 30000):
            reader = sni.HelloReader()
            for cut in range(0, len(data), step):
                got = reader.feed(data[cut : cut + step])
                assert got == sni.client_hello(data[: cut + step]), (data[:20], step, cut)
                if got != sni.NEED_MORE:
                    break


class _Recorder:
    """A raw loopback TCP server that records what each connection sent until it closed."""

    def __init__(self):
        import threading

        self.listener = loopback_listener()
        self.port = self.listener.getsockname()[1]
        self.received: list = []

        def serve():
            while True:
                try:
                    conn, _ = self.listener.accept()
                except OSError:
                    return
                with conn:
                    chunks = []
                    while data := conn.recv(65536):
                        chunks.append(data)
                    self.received.append(b"".join(chunks))

        self.thread = threading.Thread(target=serve, daemon=True)
        self.thread.start()

    def close(self):
        self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        self.thread.join(10)


class _Proxy:
    def __init__(self, tmp_path, domains, deny=()):
        self.log_path = tmp_path / "egress.jsonl"
        rules = Rules(domains, deny, ["127.0.0.0/8"], source="test.toml")
        self.service = ProxyService(rules, loopback_listener(), str(self.log_path), Resolver(dict(HOSTS))).start()
        self.port = self.service.port

    def log(self) -> list:
        return [json.loads(line) for line in self.log_path.read_text().splitlines()]


@pytest.fixture
def recorder():
    server = _Recorder()
    yield server
    server.close()


@pytest.fixture
def make_proxy(tmp_path):
    made = []

    def make(*args, **kwargs):
        made.append(_Proxy(tmp_path, *args, **kwargs))
        return made[-1]

    yield make
    for proxy in made:
        proxy.service.stop()


def _closed_within(sock, seconds: float) -> bool:
    sock.settimeout(seconds)
    try:
        return sock.recv(1) == b""
    except socket.timeout:
        return False
    except OSError:
        return True


def _through_a_tunnel(p, recorder, data: bytes) -> bytes:
    """What the upstream received of `data` sent (then half-closed) in a tunnel to allowed.test."""
    seen = len(recorder.received)
    s, status = connect_tunnel(p.port, "allowed.test", recorder.port)
    assert " 200 " in status
    with s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        assert _closed_within(s, 10)
    deadline = time.monotonic() + 5
    while len(recorder.received) == seen and time.monotonic() < deadline:
        time.sleep(0.05)
    return recorder.received[seen]


def test_a_client_hello_dripped_past_its_deadline_ends_the_tunnel(make_proxy, recorder, monkeypatch):
    """HELLO_TIMEOUT bounded each read, not the hello: a byte every 29 s held the tunnel and its
    upstream connection open for as long as the client liked (64 KiB: three weeks). Now the whole
    ClientHello has HELLO_TIMEOUT (here 1 s); the upstream got nothing."""
    monkeypatch.setattr(proxy_module, "HELLO_TIMEOUT", 1.0)
    p = make_proxy([f"allowed.test:{recorder.port}"])
    s, status = connect_tunnel(p.port, "allowed.test", recorder.port)
    assert " 200 " in status
    hello = b"".join(in_records(client_hello("allowed.test"), 1))
    started, closed = time.monotonic(), False
    with s:
        for byte in hello[:30]:  # each byte within 1 s of the last: no single read ever times out
            try:
                s.sendall(bytes([byte]))
            except OSError:
                closed = True
                break
            if _closed_within(s, 0.3):
                closed = True
                break
        elapsed = time.monotonic() - started
    assert closed and elapsed < 5, f"tunnel still open after {elapsed:.1f} s of dripping"
    deadline = time.monotonic() + 5
    while not recorder.received and time.monotonic() < deadline:
        time.sleep(0.05)
    assert recorder.received == [b""], "the upstream saw bytes of an undecided hello"


def test_twin_a_client_hello_in_one_byte_records_still_passes_or_is_refused_by_its_name(make_proxy, recorder):
    """A hello cut into 1-byte records (TLS allows it; DPI-evasion tools do it) is judged as a
    whole: the allowed name reaches the server byte for byte, another name is dropped and logged."""
    p = make_proxy([f"allowed.test:{recorder.port}", f"other.test:{recorder.port}"])
    for name, passes in (("allowed.test", True), ("other.test", False)):
        hello = b"".join(in_records(client_hello(name), 1)) + b"early data"
        assert _through_a_tunnel(p, recorder, hello) == (hello if passes else b""), name
    denials = [line for line in p.log() if line["decision"] == "deny"]
    assert [line["via"] for line in denials] == ["tls"] and "'other.test'" in denials[0]["reason"]


def _hello_naming(entries: list, extra_extensions: bytes = b"") -> bytes:
    """One TLS record: a ClientHello whose server_name extension holds `entries` ((type, bytes))."""
    listed = b"".join(bytes([kind]) + len(name).to_bytes(2, "big") + name for kind, name in entries)
    ext = b"\x00\x00" + (len(listed) + 2).to_bytes(2, "big") + len(listed).to_bytes(2, "big") + listed
    extensions = ext + extra_extensions
    body = (b"\x03\x03" + bytes(32) + b"\x00" + b"\x00\x02\x13\x01" + b"\x01\x00"
            + len(extensions).to_bytes(2, "big") + extensions)
    hs = b"\x01" + len(body).to_bytes(3, "big") + body
    return b"\x16\x03\x01" + len(hs).to_bytes(2, "big") + hs


# (what the hello names, passes?) for a tunnel CONNECTed to allowed.test. Held before session 13
# too; kept as probes (docs/threat-model.md, session 13 review).
_ECH_GREASE = b"\xfe\x0d\x00\x04" + bytes(4)  # an encrypted_client_hello extension (Chrome sends GREASE)
SNI_SPELLINGS = [
    ([(0, b"ALLOWED.TEST.")], b"", True),              # case and one trailing dot: the same name
    ([(0, b"allowed.test")], _ECH_GREASE, True),       # ECH's outer name is all the proxy sees (documented)
    ([(0, b"allowed.test\x00.other.test")], b"", False),  # NUL inside the name
    ([(0, b"other.test")], b"", False),                # fronting: another allowed name
    ([(0, b"127.0.0.1")], b"", False),                 # an address as the name
    ([(0, b"allowed.test"), (0, b"other.test")], b"", False),  # two host_names
    ([(1, b"other.test"), (0, b"allowed.test")], b"", True),   # a non-host_name entry is not a name
    ([(0, "allowed.tеst".encode())], b"", False),      # Cyrillic е: not ASCII
    ([(0, b"xn--allowed-9za.test")], b"", False),      # a punycode lookalike is another name
]


@pytest.mark.parametrize("entries, extra, passes", SNI_SPELLINGS)
def test_sni_spellings_in_a_tunnel(make_proxy, recorder, entries, extra, passes):
    p = make_proxy([f"allowed.test:{recorder.port}", f"other.test:{recorder.port}"])
    hello = _hello_naming(entries, extra)
    assert _through_a_tunnel(p, recorder, hello) == (hello if passes else b"")
    assert len(recorder.received) == 1
    assert any(line["decision"] == "deny" and line["via"] == "tls" for line in p.log()) is not passes


@pytest.mark.parametrize("target", ["0x7f.0.0.1:{port}", "2130706433:{port}", "127.1:{port}", "allowed.test..:{port}",
                                    "user@allowed.test:{port}", "allowed.test:+{port}", "[fe80::1%25eth0]:{port}",
                                    "allowed.test:{port}:{port}", "allowed.test%2e:{port}"])
def test_connect_authority_spellings_are_refused(make_proxy, recorder, target):
    """Numeric spellings of the allowed 127.0.0.1, a zone, userinfo, a signed port, doubled dots."""
    from egresskit import http_exchange

    p = make_proxy([f"allowed.test:{recorder.port}", f"127.0.0.1:{recorder.port}"])
    authority = target.format(port=recorder.port)
    answer = http_exchange(p.port, f"CONNECT {authority} HTTP/1.1\r\nHost: x\r\n\r\n".encode(), timeout=5)
    assert answer.split(b" ")[1] in (b"400", b"403"), (authority, answer[:80])
    assert recorder.received == []


def test_twin_the_plain_spellings_connect(make_proxy, recorder):
    from egresskit import http_exchange

    p = make_proxy([f"allowed.test:{recorder.port}", f"127.0.0.1:{recorder.port}"])
    for authority in (f"ALLOWED.test.:{recorder.port}", f"127.0.0.1:{recorder.port}", f"[::ffff:127.0.0.1]:{recorder.port}",
                      f"[127.0.0.1]:{recorder.port}"):  # bracketed IPv4: the same address, decided as such
        answer = http_exchange(p.port, f"CONNECT {authority} HTTP/1.1\r\nHost: x\r\n\r\n".encode() + b"SSH-2.0-x\r\n",
                               timeout=2)
        assert answer.startswith(b"HTTP/1.1 200"), (authority, answer[:80])


def test_hostile_names_forge_no_line_of_the_egress_log(make_proxy, recorder):
    """SOCKS5 names are raw bytes of the client's choosing: a newline and a whole forged JSON
    line, ESC sequences, U+2028 in UTF-8, a quote and a backslash. Each decision is one line;
    no raw control character reaches the file (held: names are validated before they are logged
    and json.dumps escapes the rest)."""
    p = make_proxy([f"allowed.test:{recorder.port}"])
    names = [b'x.test\n{"decision": "allow", "host": "evil.test", "port": 443}',
             b"\x1b[2J\x1b]0;owned\x07allowed.test", "allowed.test\u2028".encode(), b'a"b\\c.test', b"\r\rother.test"]
    for name in names:
        s = socket.create_connection(("127.0.0.1", p.port), timeout=5)
        with s:
            s.sendall(b"\x05\x01\x00")
            assert s.recv(2) == b"\x05\x00"
            s.sendall(b"\x05\x01\x00\x03" + bytes([len(name)]) + name + recorder.port.to_bytes(2, "big"))
            assert s.recv(10)[1] == 0x02  # refused by the ruleset
    raw = p.log_path.read_bytes()
    lines = raw.decode("ascii").splitlines()
    assert len(lines) == len(names)
    assert all(json.loads(line)["decision"] == "deny" for line in lines)
    assert not any(c < 0x20 and c != 0x0A for c in raw)
    assert recorder.received == []


# --- the unspecified address ------------------------------------------------------------------


def test_an_answer_of_0_0_0_0_never_reaches_the_hosts_own_services(tmp_path, recorder):
    """`net.private = ["0.0.0.0/8"]` loads (Python calls the range private) and reads as "the zero
    network", but connect(2) to 0.0.0.0 reaches this host's own listeners (Linux: the local
    address): an allowed name answering 0.0.0.0 — the "0.0.0.0 day" rebinding — reached a service
    on the host's 127.0.0.1 that no 127.0.0.0/8 entry granted. The unspecified address is never a
    destination now, whatever net.private holds."""
    from egresskit import http_exchange

    log = tmp_path / "egress.jsonl"
    rules = Rules([f"zero.test:{recorder.port}"], (), ["0.0.0.0/8", "::/128"], source="test.toml")
    service = ProxyService(rules, loopback_listener(), str(log), Resolver({"zero.test": ["0.0.0.0"]})).start()
    try:
        for authority in (f"zero.test:{recorder.port}",):
            answer = http_exchange(service.port, f"CONNECT {authority} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
                                   + b"SSH-2.0-x\r\n", timeout=2)
            assert answer.startswith(b"HTTP/1.1 403"), answer[:80]
    finally:
        service.stop()
    time.sleep(0.2)
    assert recorder.received == [], "a host-local service was reached through 0.0.0.0"
    assert Rules(["a.org"], private=["0.0.0.0/8", "::/128"]).address_refusal("::")


def test_twin_a_listed_loopback_range_still_reaches_the_host(tmp_path, recorder):
    from egresskit import http_exchange

    rules = Rules([f"loop.test:{recorder.port}"], (), ["127.0.0.0/8"], source="test.toml")
    service = ProxyService(rules, loopback_listener(), str(tmp_path / "e.jsonl"),
                           Resolver({"loop.test": ["127.0.0.1"]})).start()
    try:
        answer = http_exchange(service.port, f"CONNECT loop.test:{recorder.port} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
                               + b"SSH-2.0-x\r\n", timeout=2)
        assert answer.startswith(b"HTTP/1.1 200"), answer[:80]
    finally:
        service.stop()
    deadline = time.monotonic() + 5
    while not recorder.received and time.monotonic() < deadline:
        time.sleep(0.05)
    assert recorder.received == [b"SSH-2.0-x\r\n"]
