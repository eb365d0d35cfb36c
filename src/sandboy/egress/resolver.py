"""Host-side name resolution for the egress proxy.

The caged command has no resolver of its own (its namespace has no route and UDP is refused):
names travel to the proxy inside CONNECT/absolute URLs/socks5h requests and are resolved here,
on the host, with getaddrinfo. Every answer is then filtered by `Rules.address_refusal`, and
the proxy connects to an address it checked.

`SANDBOY_EGRESS_HOSTS=FILE` (in the environment of `sandboy`, i.e. the operator's): a hosts(5)
style map consulted before getaddrinfo — for tests, which point made-up names at 127.0.0.1, and
for air-gapped mirrors. It adds no permission: the names still need a `net.domains` entry and
the addresses a `net.private` range when they are not global.

Each lookup runs in a thread of its own that nobody waits for, not in asyncio's default
executor: getaddrinfo blocks for as long as the host's resolver configuration says when a name
server does not answer (glibc: 5 s x 2 attempts per server), the caged command chooses the names
(any under an allowed `*.suffix`), and `asyncio.run` joins that executor when the proxy stops —
a gate step with a 2 s timeout asking for 12 such names ended after 10.4 s (session 8 review;
tests/egress/test_resolver_stall.py). A lookup still running when the proxy stops ends on its
own and its answer is dropped. At most MAX_LOOKUPS run at once per proxy; others wait (and are
cancelled with the connection that asked).
"""

import _thread
import os
import socket

MAX_LOOKUPS = 8  # threads in getaddrinfo at once, per proxy


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
        self._slots = None  # an asyncio.Semaphore of MAX_LOOKUPS, made in the proxy's loop
        self._slots_loop = None

    async def resolve(self, loop, host: str, is_ip: bool) -> list:
        """Addresses for `host` (already normalized by rules.normalize_host), in answer order."""
        if is_ip:
            return [host]
        if host in self.hosts:
            return list(self.hosts[host])
        infos = await self._getaddrinfo(loop, host)
        seen = []
        for family, _, _, _, sockaddr in infos:
            if family in (socket.AF_INET, socket.AF_INET6) and sockaddr[0] not in seen:
                seen.append(sockaddr[0])
        return seen

    async def _getaddrinfo(self, loop, host: str) -> list:
        """getaddrinfo in a thread nobody joins (module docstring); OSError as it raises it."""
        import asyncio

        if self._slots is None or self._slots_loop is not loop:  # a Semaphore is bound to one loop
            self._slots, self._slots_loop = asyncio.Semaphore(MAX_LOOKUPS), loop
        await self._slots.acquire()
        answer = loop.create_future()

        def done(infos, error) -> None:  # in the loop's thread
            self._slots.release()  # held until the thread is done, so threads stay bounded
            if answer.done():  # the connection that asked was cancelled meanwhile
                return
            if error is not None:
                answer.set_exception(error)
            else:
                answer.set_result(infos)

        def lookup() -> None:  # in the lookup's thread
            infos, error = None, None
            try:
                infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
            except OSError as exc:
                error = exc
            except BaseException as exc:  # never lost: the connection waiting on it fails
                error = OSError(f"lookup failed: {exc!r}")
            try:
                loop.call_soon_threadsafe(done, infos, error)
            except RuntimeError:
                pass  # the proxy has stopped and its loop is closed: nobody wants the answer

        try:
            _thread.start_new_thread(lookup, ())
        except RuntimeError as exc:  # no thread to be had (a pids cgroup the command filled)
            self._slots.release()
            raise OSError(f"cannot start a name lookup: {exc}") from None
        except BaseException:
            self._slots.release()
            raise
        return await answer
