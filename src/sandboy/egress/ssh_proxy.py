"""ssh's ProxyCommand for git over SSH in an egress cage: `ssh_proxy.py PROXY_HOST PROXY_PORT HOST PORT`.

It asks the Sandboy proxy for `CONNECT HOST:PORT`, then copies stdin to the tunnel and the
tunnel to stdout, which is what ssh expects of a ProxyCommand. A refusal prints the proxy's
403 body (it names the host, the port and the rule) on stderr and exits 1, so `git clone`
fails with the reason.

Self-contained on purpose (stdlib `os`, `select`, `socket`, `sys` only, no Sandboy import):
`egress.enforcement` passes this file's source inline (base64 in the command line) to the system
Python, so nothing but the interpreter has to be readable inside the cage.
"""

import os
import select
import socket
import sys


def main(argv) -> int:
    proxy_host, proxy_port, host, port = argv[:4]
    sock = socket.create_connection((proxy_host, int(proxy_port)))
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        data = sock.recv(1)
        if not data:
            sys.stderr.write("sandboy ssh proxy: the proxy closed the connection\n")
            return 1
        head += data
    status = head.split(b"\r\n", 1)[0]
    if status.split(b" ")[1:2] != [b"200"]:
        body = b""
        sock.settimeout(5)
        try:
            while len(body) < 4096:
                data = sock.recv(4096)
                if not data:
                    break
                body += data
        except OSError:
            pass
        sys.stderr.write(body.decode("utf-8", "replace").strip() or status.decode("ascii", "replace"))
        sys.stderr.write("\n")
        return 1
    stdin, stdout = sys.stdin.fileno(), sys.stdout.fileno()
    sources = [stdin, sock]
    while sources:
        for ready in select.select(sources, [], [])[0]:
            if ready is sock:
                data = sock.recv(65536)
                if not data:
                    return 0
                while data:
                    data = data[os.write(stdout, data):]
            else:
                data = os.read(stdin, 65536)
                if not data:
                    sock.shutdown(socket.SHUT_WR)
                    sources.remove(stdin)
                else:
                    sock.sendall(data)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
