"""Reach a host the repository asked for (example.com), though the operator never granted it."""

import socket

from _attempt import attempt, finish


def resolve():
    return socket.getaddrinfo("example.com", 443, proto=socket.IPPROTO_TCP)[0][4]


def connect(addr):
    with socket.create_connection(addr, timeout=3):
        return f"connected to {addr[0]}:{addr[1]}"


attempt("resolve example.com", resolve)
# Port 443 on loopback stands in for example.com's address: a demo never aims at a real host,
# even one the cage would refuse.
attempt("connect to port 443 (HTTPS, as example.com needs)", lambda: connect(("127.0.0.1", 443)))
finish()
