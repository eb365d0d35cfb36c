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
        s, status = connect_tunnel(p.port, "allowed.test", recorder.port)
        assert " 200 " in status
        with s:
            s.sendall(hello)
            s.shutdown(socket.SHUT_WR)
            assert _closed_within(s, 10)
        deadline = time.monotonic() + 5
        while len(recorder.received) < (1 if passes else 2) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert recorder.received[-1] == (hello if passes else b""), name
    denials = [line for line in p.log() if line["decision"] == "deny"]
    assert [line["via"] for line in denials] == ["tls"] and "'other.test'" in denials[0]["reason"]
