"""The SNI reader against real ClientHellos (made by Python's ssl module) and broken ones."""

from __future__ import annotations

import ssl

import pytest

from sandboy.egress import sni


def hello(server_hostname=None) -> bytes:
    ctx = ssl.create_default_context()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname=server_hostname) if server_hostname else \
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).wrap_bio(incoming, outgoing)
    with pytest.raises(ssl.SSLWantReadError):
        obj.do_handshake()
    return outgoing.read()


def test_real_client_hello():
    data = hello("Pypi.Org")
    assert sni.client_hello(data) == ("sni", "pypi.org")
    for cut in (1, 5, 20, len(data) - 1):
        assert sni.client_hello(data[:cut]) == sni.NEED_MORE


def test_no_sni():
    assert sni.client_hello(hello(None)) == ("no_sni", None)


def test_split_across_records():
    data = hello("a.example")
    body = data[5:]
    first, second = body[:40], body[40:]
    rec = lambda b: b"\x16\x03\x01" + len(b).to_bytes(2, "big") + b  # noqa: E731
    assert sni.client_hello(rec(first) + rec(second)) == ("sni", "a.example")


@pytest.mark.parametrize("data", [b"SSH-2.0-OpenSSH_9.2\r\n", b"GET / HTTP/1.1\r\n"])
def test_not_tls(data):
    assert sni.client_hello(data) == sni.NOT_TLS


def test_malformed():
    data = bytearray(hello("a.example"))
    assert sni.client_hello(bytes(data[:5]) + b"\x02" + bytes(data[6:]))[0] == "bad"  # a ServerHello type
    assert sni.client_hello(b"\x16\x03\x01\x00\x04\x01\x00\x00\x00")[0] == "bad"  # empty hello
    assert sni.client_hello(b"\x16\x03\x01\x00\x05\x01\xff\xff\xff\x00")[0] == "bad"  # too large
    assert sni.client_hello(b"\x16\x03\x01\x00\x01\x01\x17\x03\x03\x00\x00")[0] == "bad"  # interrupted
