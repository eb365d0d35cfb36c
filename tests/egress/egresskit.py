"""Loopback servers and clients for the egress tests (a unique module name: see tests/cage/cagekit.py).

Everything binds 127.0.0.1 on ports the kernel picks; test host names (`*.test`, RFC 6761) are
pointed at 127.0.0.1 by a resolver map, never by the machine's DNS.
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import ssl
import subprocess
import threading


class Origin:
    """An HTTP/1.1 server (plain or TLS) that answers `HOST PATH` and records each request."""

    def __init__(self, tls_context=None, body_size=0):
        seen = self.seen = []
        size = body_size

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                seen.append((self.headers.get("Host"), self.path))
                if self.path.startswith("/big/"):
                    total = int(self.path.split("/")[2])
                    self.send_response(200)
                    self.send_header("Content-Length", str(total))
                    self.end_headers()
                    chunk = b"x" * (1 << 20)
                    left = total
                    while left:
                        n = min(left, len(chunk))
                        self.wfile.write(chunk[:n])
                        left -= n
                    return
                body = f"hello {self.headers.get('Host')} {self.path}\n".encode() + b"." * size
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                data = self.rfile.read(length)
                seen.append((self.headers.get("Host"), self.path))
                body = b"got " + str(len(data)).encode() + b"\n"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        class Server(http.server.ThreadingHTTPServer):
            request_queue_size = 1024  # socketserver's default of 5 drops SYNs under the load test

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        if tls_context is not None:
            self.server.socket = tls_context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def make_ca_and_cert(directory, names) -> tuple[str, str, str]:
    """(ca.pem, cert.pem, key.pem): a throwaway CA and a server certificate for `names`."""
    d = str(directory)
    ca_key, ca, key, csr, cert = (os.path.join(d, n) for n in ("ca.key", "ca.pem", "srv.key", "srv.csr", "srv.pem"))
    ext = os.path.join(d, "ext.cnf")
    with open(ext, "w") as fh:
        fh.write("subjectAltName=" + ",".join(f"DNS:{n}" for n in names) + "\n")
    run = lambda *a: subprocess.run(a, check=True, capture_output=True)  # noqa: E731
    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key, "-out", ca,
        "-days", "2", "-subj", "/CN=sandboy test CA")
    run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr, "-subj", f"/CN={names[0]}")
    run("openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-out", cert,
        "-days", "2", "-extfile", ext)
    return ca, cert, key


def loopback_listener() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(512)
    return sock


def http_exchange(proxy_port: int, raw: bytes, timeout=10) -> bytes:
    """Send raw bytes to the proxy; everything it answers until it closes."""
    with socket.create_connection(("127.0.0.1", proxy_port), timeout=timeout) as s:
        s.sendall(raw)
        chunks = []
        while True:
            try:
                data = s.recv(65536)
            except socket.timeout:
                break
            if not data:
                break
            chunks.append(data)
        return b"".join(chunks)


def connect_tunnel(proxy_port: int, host: str, port: int, timeout=10):
    """(socket, status line) after `CONNECT host:port`."""
    s = socket.create_connection(("127.0.0.1", proxy_port), timeout=timeout)
    s.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        data = s.recv(1)
        if not data:
            break
        head += data
    return s, head.split(b"\r\n", 1)[0].decode()


def tls_client(ca: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=ca)
    return ctx


def socks_connect(proxy_port: int, host: str, port: int, timeout=10):
    """(socket, reply code) after a SOCKS5 no-auth CONNECT to a domain name."""
    s = socket.create_connection(("127.0.0.1", proxy_port), timeout=timeout)
    s.sendall(b"\x05\x01\x00")
    assert s.recv(2) == b"\x05\x00"
    name = host.encode()
    s.sendall(b"\x05\x01\x00\x03" + bytes([len(name)]) + name + port.to_bytes(2, "big"))
    reply = b""
    while len(reply) < 10:
        data = s.recv(10 - len(reply))
        if not data:
            break
        reply += data
    return s, (reply[1] if len(reply) > 1 else None)


def open_fds() -> set:
    """This process's open fds, as (fd, what it points to) pairs."""
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            out.add((fd, os.readlink(f"/proc/self/fd/{fd}")))
        except OSError:
            pass
    return out


def read_response(s) -> bytes:
    """One Content-Length-framed response from socket `s`."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        chunk = s.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def describe_sockets(fds) -> list:
    """/proc/net lines for the sockets among `fds` (for assertion messages)."""
    inodes = {target[8:-1] for _, target in fds if target.startswith("socket:[")}
    found = []
    for table in ("tcp", "tcp6", "udp", "unix"):
        with open(f"/proc/self/net/{table}") as fh:
            for line in fh:
                if inodes & set(line.split()):
                    found.append(f"{table}: {line.strip()}")
    return found


def to_toml_policy(net: dict) -> str:
    """A policy that lets sh, curl, getent and python3 run, with `net` as its [net] table."""
    lines = ["version = 1", "[fs]", 'read = ["/usr", "/etc", "/lib", "/lib64", "/bin"]',
             'exec = ["/usr/bin", "/bin", "/usr/lib"]', "[net]"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in net.items()]
    return "\n".join(lines) + "\n"
