"""A name server on the loopback for the egress tests (a unique module name: see tests/cage/cagekit.py).

`NameServer` binds UDP 127.53.X.Y:53 and answers A queries from its table — each name with an
address and, if asked, a delay — and nothing else (AAAA: no data; unknown names: NXDOMAIN), or
never answers at all (`silent=True`). The host's resolver is pointed at it by binding a
resolv.conf over /etc/resolv.conf in a private mount namespace (`under_name_server`): root only,
and never on the host's own mount table (COMMON.md: propagation private).
"""

from __future__ import annotations

import os
import random
import socket
import struct
import threading

from prockit import children


class NameServer:
    def __init__(self, names=None, silent=False):
        self.names = dict(names or {})  # name -> (address, delay in seconds)
        self.silent = silent
        self.asked: list = []  # every name asked, in order
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for _ in range(40):
            self.address = f"127.53.{random.randrange(1, 255)}.{random.randrange(1, 255)}"
            try:
                self.sock.bind((self.address, 53))
                break
            except OSError:
                continue
        else:
            self.sock.close()
            raise OSError("no free 127.53.x.y:53")
        self.sock.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def resolv_conf(self, path) -> str:
        """Write a resolv.conf naming only this server (one try of 3 s: a silent server costs a
        lookup 3 s, not glibc's 10 s); its path."""
        with open(path, "w") as fh:
            fh.write(f"nameserver {self.address}\noptions timeout:3 attempts:1\n")
        return str(path)

    def _serve(self):
        while not self._stop.is_set():
            try:
                query, peer = self.sock.recvfrom(4096)
            except OSError:
                continue
            try:
                name, qtype, question = _question(query)
            except (ValueError, IndexError, struct.error):
                continue
            self.asked.append(name)
            if self.silent:
                continue
            address, delay = self.names.get(name, (None, 0.0))
            reply = _reply(query, question, qtype, address)
            if delay and address is not None:
                threading.Timer(delay, self._send, (reply, peer)).start()
            else:
                self._send(reply, peer)

    def _send(self, reply, peer):
        try:
            self.sock.sendto(reply, peer)
        except OSError:
            pass

    def close(self):
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


def _question(query: bytes):
    """(name, qtype, the question's bytes) of a DNS query."""
    at, labels = 12, []
    while query[at]:
        length = query[at]
        labels.append(query[at + 1:at + 1 + length].decode("ascii").lower())
        at += 1 + length
    end = at + 5
    qtype = struct.unpack("!H", query[at + 1:at + 3])[0]
    return ".".join(labels), qtype, query[12:end]


def _reply(query: bytes, question: bytes, qtype: int, address):
    """An answer with the query's id: `address` for an A query; no data for other types of a
    known name; NXDOMAIN for an unknown one."""
    ident = query[:2]
    if address is None:
        return ident + struct.pack("!HHHHH", 0x8183, 1, 0, 0, 0) + question
    if qtype != 1:
        return ident + struct.pack("!HHHHH", 0x8180, 1, 0, 0, 0) + question
    answer = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 5, 4) + socket.inet_aton(address)
    return ident + struct.pack("!HHHHH", 0x8180, 1, 1, 0, 0) + question + answer


def under_name_server(resolv_conf: str, argv: list) -> list:
    """`argv` run in a private mount namespace where /etc/resolv.conf is `resolv_conf`; the
    command is exec'ed, so its pid is the one Popen returns."""
    script = 'mount --bind "$1" /etc/resolv.conf && shift && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", resolv_conf, *argv]


HELPER_MARK = b"-I\0-S\0-c\0"  # in the cmdline of egress.resolver's helper (python -I -S -c _HELPER)


def lookup_helpers(pid: int) -> list:
    """The pids of the lookup helpers among `pid`'s children (read from /proc, host side)."""
    found = []
    for kid in children(pid):
        try:
            with open(f"/proc/{kid}/cmdline", "rb") as fh:
                cmdline = fh.read()
        except OSError:
            continue
        if HELPER_MARK in cmdline and b"_socket.getaddrinfo" in cmdline:
            found.append(kid)
    return found


def alive(pid: int) -> bool:
    """Does process `pid` still run (a zombie or no process: no)?"""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def task_count(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0
