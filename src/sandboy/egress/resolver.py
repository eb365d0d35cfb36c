"""Host-side name resolution for the egress proxy.

The caged command has no resolver of its own (its namespace has no route and UDP is refused):
names travel to the proxy inside CONNECT/absolute URLs/socks5h requests and are resolved here,
on the host, with getaddrinfo. Every answer is then filtered by `Rules.address_refusal`, and
the proxy connects to an address it checked.

`SANDBOY_EGRESS_HOSTS=FILE` (in the environment of `sandboy`, i.e. the operator's): a hosts(5)
style map consulted before getaddrinfo — for tests, which point made-up names at 127.0.0.1, and
for air-gapped mirrors. It adds no permission: the names still need a `net.domains` entry and
the addresses a `net.private` range when they are not global.

The lookups run in a helper process of the proxy's own (`_HELPER`: one thread per lookup
there), started at the first name that needs getaddrinfo and killed when the proxy stops —
never in this process: getaddrinfo blocks for as long as the host's resolver configuration says
when a name server does not answer (glibc: 5 s x 2 attempts per server), the caged command
chooses the names (any under an allowed `*.suffix`), and a thread cannot be stopped.
- In asyncio's default executor, which `asyncio.run` joins when the proxy stops, a gate step
  with a 2 s timeout asking for 12 such names ended after 10.4 s (session 8 review;
  tests/egress/test_resolver_stall.py).
- In threads nobody joined (session 8), each lookup outlived its step by up to 30 s: over quick
  steps they piled up in the gate process, 8 more per step (170 threads after 30 steps of 0.5 s
  here), each with its socket, eating the fds every later step's proxy and /proc walk need.
Killing the helper ends every lookup of the step at the step's end, with its threads and
sockets. At most MAX_LOOKUPS run at once per proxy; others wait (and are cancelled with the
connection that asked). Starting the helper costs a Python start-up (`-I -S`), once per step
that looks a name up.
"""

import os
import socket
import sys

MAX_LOOKUPS = 8  # threads in getaddrinfo at once, per proxy
MAX_ANSWER_BYTES = 1 << 20  # a line of the helper longer than this: the helper is broken, stopped

# The helper: one request per line on stdin (`KEY<TAB>NAME`), one answer per line on stdout
# (`KEY<TAB>ok<TAB>FAMILY,ADDRESS FAMILY,ADDRESS…` or `KEY<TAB>err<TAB>ERRNO<TAB>TEXT`), in any
# order. Built-in modules only (no json, socket or threading: ≈ 0.1 s of imports on a loaded
# machine, at every step that looks a name up).
_HELPER = r"""
import _socket, _thread, posix
lock = _thread.allocate_lock()
def ask(key, host):
    try:
        infos = _socket.getaddrinfo(host, None, 0, _socket.SOCK_STREAM, _socket.IPPROTO_TCP)
        line = key + "\tok\t" + " ".join("%d,%s" % (info[0], info[4][0]) for info in infos)
    except OSError as exc:
        line = key + "\terr\t%s\t%s" % ("" if exc.errno is None else exc.errno, exc.strerror or exc)
    except BaseException as exc:
        line = key + "\terr\t\tlookup failed: %r" % (exc,)
    data = (line.replace("\n", " ") + "\n").encode()
    with lock:
        while data:
            data = data[posix.write(1, data):]
pending = b""
while True:
    chunk = posix.read(0, 65536)
    if not chunk:
        break
    *lines, pending = (pending + chunk).split(b"\n")
    for line in lines:
        key, host = line.decode().split("\t", 1)
        _thread.start_new_thread(ask, (key, host))
"""


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
        self._helper = None  # the lookup process (subprocess.Popen), started at the first lookup
        self._helper_loop = None
        self._pending: dict = {}  # key -> the future of that lookup's answer
        self._partial = b""
        self._next_key = 0

    async def resolve(self, loop, host: str, is_ip: bool) -> list:
        """Addresses for `host` (already normalized by rules.normalize_host), in answer order."""
        if is_ip:
            return [host]
        if host in self.hosts:
            return list(self.hosts[host])
        seen = []
        for family, address in await self._getaddrinfo(loop, host):
            if family in (socket.AF_INET, socket.AF_INET6) and address not in seen:
                seen.append(address)
        return seen

    async def _getaddrinfo(self, loop, host: str) -> list:
        """[(family, address)] from getaddrinfo in the helper (module docstring); OSError as it
        raises it, or when no helper can be had."""
        import asyncio

        if self._slots is None or self._slots_loop is not loop:  # a Semaphore is bound to one loop
            self._slots, self._slots_loop = asyncio.Semaphore(MAX_LOOKUPS), loop
        await self._slots.acquire()
        try:
            helper = self._started(loop)
            if "\t" in host or "\n" in host:  # (normalize_host never lets these through)
                raise OSError(f"cannot look up {host!r}")
            key, self._next_key = str(self._next_key), self._next_key + 1
            answer = self._pending[key] = loop.create_future()
            try:
                os.write(helper.stdin.fileno(), f"{key}\t{host}\n".encode())
            except OSError as exc:  # the helper is gone (killed from outside, or stopped)
                self._pending.pop(key, None)
                raise OSError(f"cannot start a name lookup: {exc}") from None
            try:
                return await answer
            finally:
                self._pending.pop(key, None)
        finally:
            self._slots.release()  # (a lookup cancelled meanwhile: its thread ends with the helper)

    def _started(self, loop):
        """The helper of this proxy's loop, started now if there is none."""
        if self._helper is not None and self._helper_loop is loop and self._helper.poll() is None:
            return self._helper
        self.close()
        import subprocess

        try:
            helper = subprocess.Popen([sys.executable, "-I", "-S", "-c", _HELPER], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True)
        except (OSError, subprocess.SubprocessError) as exc:  # no process to be had (a pids limit, no fds)
            raise OSError(f"cannot start a name lookup: {exc}") from None
        os.set_blocking(helper.stdout.fileno(), False)
        loop.add_reader(helper.stdout.fileno(), self._answers)
        self._helper, self._helper_loop, self._partial = helper, loop, b""
        return helper

    def _answers(self) -> None:  # in the loop's thread: the helper's stdout is readable
        try:
            data = os.read(self._helper.stdout.fileno(), 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:  # the helper ended: its lookups with it
            self._fail_pending(OSError("the name lookup process ended"))
            self.close()
            return
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        if len(self._partial) > MAX_ANSWER_BYTES:
            self._fail_pending(OSError("the name lookup process sent an answer too long"))
            self.close()
            return
        for line in lines:
            try:
                key, verdict, rest = line.decode().split("\t", 2)
                if verdict == "ok":
                    infos = [(int(family), address) for family, address in
                             (item.split(",", 1) for item in rest.split())]
                elif verdict == "err":
                    code, text = rest.split("\t", 1)
                    error = OSError(int(code), text) if code else OSError(text)
                else:
                    raise ValueError(verdict)
            except ValueError:  # not the helper's own words: stop trusting it
                self._fail_pending(OSError("the name lookup process sent garbage"))
                self.close()
                return
            answer = self._pending.get(key)
            if answer is None or answer.done():  # the connection that asked was cancelled meanwhile
                continue
            if verdict == "err":
                answer.set_exception(error)
            else:
                answer.set_result(infos)

    def _fail_pending(self, error: OSError) -> None:
        for answer in list(self._pending.values()):
            if not answer.done():
                answer.set_exception(error)

    def close(self) -> None:
        """Stop the helper, and with it every lookup still running (the proxy stops: its step
        has ended). The answers nobody waits for any more are dropped."""
        helper, self._helper = self._helper, None
        if helper is None:
            return
        try:
            if self._helper_loop is not None and not self._helper_loop.is_closed():
                self._helper_loop.remove_reader(helper.stdout.fileno())
        except (ValueError, RuntimeError):
            pass
        helper.kill()
        helper.wait()  # (SIGKILL: at once; never left a zombie of the gate)
        helper.stdin.close()
        helper.stdout.close()
        self._fail_pending(OSError("the proxy stopped"))
