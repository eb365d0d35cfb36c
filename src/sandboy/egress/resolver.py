"""Host-side name resolution for the egress proxy.

The caged command has no resolver of its own (its namespace has no route and UDP is refused):
names travel to the proxy inside CONNECT/absolute URLs/socks5h requests and are resolved here,
on the host, with getaddrinfo. Every answer is then filtered by `Rules.address_refusal`, and
the proxy connects to an address it checked.

`SANDBOY_EGRESS_HOSTS=FILE` (in the environment of `sandboy`, i.e. the operator's): a hosts(5)
style map consulted before getaddrinfo — for tests, which point made-up names at 127.0.0.1, and
for air-gapped mirrors. It adds no permission: the names still need a `net.domains` entry and
the addresses a `net.private` range when they are not global.
"""

import os
import socket


def load_hosts_map(path):
    """{name: [address, ...]} from a hosts(5)-style file."""
    table: dict = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            fields = line.split("#", 1)[0].split()
            if len(fields) < 2:
                continue
            for name in fields[1:]:
                table.setdefault(name.lower().rstrip("."), []).append(fields[0])
    return table


class Resolver:
    def __init__(self, hosts=None):
        if hosts is None:
            path = os.environ.get("SANDBOY_EGRESS_HOSTS")
            hosts = load_hosts_map(path) if path else {}
        self.hosts = hosts

    async def resolve(self, loop, host: str, is_ip: bool) -> list:
        """Addresses for `host` (already normalized by rules.normalize_host), in answer order."""
        if is_ip:
            return [host]
        if host in self.hosts:
            return list(self.hosts[host])
        infos = await loop.getaddrinfo(host, None, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
        seen = []
        for family, _, _, _, sockaddr in infos:
            if family in (socket.AF_INET, socket.AF_INET6) and sockaddr[0] not in seen:
                seen.append(sockaddr[0])
        return seen
