"""Reach a host the repository asked for (example.com), though the operator never granted it."""

import socket

from _attempt import attempt, finish


def resolve():
    return socket.getaddrinfo("example.com", 443, proto=socket.IPPROTO_TCP)[0][4]


def connect(addr):
    with socket.create_connection(addr, timeout=3):
        return f"connected to {addr[0]}:{addr[1]}"


attempt("resolve example.com", resolve)
attempt("connect to 93.184.215.14:443 (an example.com address)", lambda: connect(("93.184.215.14", 443)))
finish()
