"""The egress proxy: the only way out of a Layer-3 cage's network namespace.

One listening socket (made inside the cage's namespace and handed over, or a host loopback port
in the fallback), three client protocols, told apart by the first byte a client sends:

- SOCKS5 (0x05; `ALL_PROXY=socks5h://...`): no-auth CONNECT to a name, IPv4 or IPv6 address.
- HTTP CONNECT (`https_proxy`): a tunnel to host:port.
- HTTP absolute-form requests (`http_proxy`, `GET http://host/path`): forwarded request by
  request. EVERY request on a connection is parsed (h11) and decided, so a kept-alive or
  pipelined second request to another host is checked like the first. The upstream is the
  host of the request URL; the client's `Host:` header is replaced by it, never followed.
  Origin-form requests (`GET /path` with only a Host header) are refused: a proxy that
  routes by Host can be steered by a forged one.

For every destination: `Rules.decide` (deny wins, names the rule) → host-side resolution →
`Rules.address_refusal` for each answer (no private/loopback/link-local/metadata answers unless
`net.private` holds them) → a connection to the checked address itself.

Inside tunnels (CONNECT and SOCKS) the client's first bytes are read before anything reaches the
server: a TLS ClientHello must name the tunnel's host in its SNI (no SNI: allowed only when the
host is an IP literal, where clients send none); a mismatch, a malformed hello or a missing SNI
for a name drops the tunnel. Non-TLS bytes (SSH on `host:22`) pass only to ports other than
80 and 443: plain HTTP must use absolute-form requests, where each request is checked.

Refusals: HTTP 403 whose body names the host, the port, the deciding rule and the policy;
SOCKS reply 0x02 ("connection not allowed by ruleset"). Every decision goes to `EgressLog`.
"""

import asyncio
import contextlib
import fcntl
import os
import socket

import h11

from sandboy.egress import sni
from sandboy.egress.log import EgressLog
from sandboy.egress.resolver import Resolver
from sandboy.egress.rules import EntryError, normalize_host, split_authority

# Reads of at most 64 KiB, and asyncio streams that stop reading past twice that: a connection
# whose client never reads while its server sends holds ≈ 600 KiB in this process (measured:
# 50 such connections, +29 MiB in a memory cgroup of their own; 1.5 MiB each with 256 KiB).
READ_SIZE = 64 * 1024
MAX_HEADER_BYTES = 64 * 1024
CONNECT_TIMEOUT = 15.0
HELLO_TIMEOUT = 30.0
MAX_CONNECTIONS = 1024
# The proxy serves from a thread of the process that supervises the run — the gate itself for
# gate steps — so each connection the caged command opens is an fd of THAT process: a client
# socket, its upstream, and while a tunnel or a large body is spliced two duplicates and two
# pipes (8 at most). Session 8 review: a step holding ~1,100 idle connections under the common
# soft RLIMIT_NOFILE of 1024 took every fd of the gate; its /proc walk then found no process to
# kill at the step's timeout, and the step outlived it (tests/egress/test_proxy_fd_budget.py).
# So a proxy takes at most what its process has left, minus a reserve for the supervisor's
# own work (its /proc walks, cgroup files, logs and reports, the next step's cage).
FDS_PER_CONNECTION = 8
RESERVED_FDS = 128
# Memory too: what the connections buffer lies in the supervising process, outside a gate step's
# memory cgroup (ADR 0015, ADR 0027), so a proxy holds at most MAX_BUFFER_BYTES of it: its
# connections are counted at the measured worst case above, rounded up (256 at once; more are
# closed at once, as past the fd budget). The kernel's socket buffers are bounded by its own
# tcp_rmem/tcp_wmem per socket (the pipes of a splice hold pages of those).
CONNECTION_BYTES = 640 * 1024
MAX_BUFFER_BYTES = 160 << 20
# A decided tunnel's bytes move socket → pipe → socket with splice(2): no copy into Python, one
# system call per pipe-full. 1 MiB pipes (F_SETPIPE_SZ; the default 64 KiB when refused).
SPLICE_PIPE_SIZE = 1 << 20
_SPLICE_FLAGS = os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK
# Plain-HTTP response bodies at least this long (Content-Length framed) are spliced too, after
# h11 has parsed and checked the request and the response head; smaller ones stay in h11.
SPLICE_BODY_MIN = 1 << 20
# Hop-by-hop headers (RFC 9110 7.6.1) plus Host, which the proxy sets from the URL. Framing
# headers (content-length, transfer-encoding) are kept: h11 frames each side from them.
_HOP = frozenset((b"connection", b"keep-alive", b"proxy-connection", b"proxy-authorization",
                  b"proxy-authenticate", b"te", b"trailer", b"upgrade", b"host"))


class Refused(Exception):
    """A destination the rules refuse (403 / SOCKS 0x02); `reason` names host, port and rule."""

    def __init__(self, reason: str, rule: str = ""):
        super().__init__(reason)
        self.reason, self.rule = reason, rule


class Unreachable(Exception):
    """Allowed, but no connection could be made (502 / SOCKS 0x04 or 0x05)."""


class EgressProxy:
    def __init__(self, rules, resolver=None, log=None):
        self.rules = rules
        self.resolver = resolver or Resolver()
        self.log = log or EgressLog()
        self._tasks: set = set()
        self._open: set = set()  # every accepted client socket not yet closed
        self.max_connections = MAX_CONNECTIONS  # set from the fds left when serving starts

    # --- serving ------------------------------------------------------------------------

    async def serve(self, listen_sock, stopped: asyncio.Event) -> None:
        """Accept on `listen_sock` until `stopped` is set; then end every connection.

        A hand-written accept loop, not asyncio.start_server: there a connection accepted just
        before shutdown whose handler task is cancelled before it first runs is never closed
        (a leaked fd, seen in tests/egress). Here every accepted socket is in `_open` from the
        moment it exists, and whatever is left at the end is closed."""
        loop = asyncio.get_running_loop()
        listen_sock.setblocking(False)
        self.max_connections = connection_budget()
        accepting = asyncio.ensure_future(self._accept_loop(loop, listen_sock))
        try:
            await stopped.wait()
        finally:
            accepting.cancel()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(accepting, *self._tasks, return_exceptions=True)
            for sock in list(self._open):
                sock.close()
            self._open.clear()
            self.resolver.close()  # every lookup still running ends with the step (resolver.py)

    async def _accept_loop(self, loop, listen_sock) -> None:
        while True:
            try:
                sock, _ = await loop.sock_accept(listen_sock)
            except OSError:  # EMFILE and the like: back off rather than spin
                await asyncio.sleep(0.05)
                continue
            self._open.add(sock)
            if len(self._open) > self.max_connections:  # closed at once: the client sees an EOF
                self._open.discard(sock)
                sock.close()
                continue
            task = loop.create_task(self._connection(sock))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _connection(self, sock) -> None:
        writer = None
        try:
            reader, writer = await asyncio.open_connection(sock=sock, limit=READ_SIZE)
            first = await reader.read(1)
            if first == b"\x05":
                await self._socks(reader, writer)
            elif first:
                await self._http(reader, writer, first)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError, OSError, h11.ProtocolError):
            pass
        finally:
            self._open.discard(sock)
            if writer is not None:
                writer.transport.abort()
            sock.close()

    # --- deciding and connecting ----------------------------------------------------------

    async def open_upstream(self, via: str, host: str, port: int):
        """(reader, writer, name, is_ip) for an allowed destination; raises Refused/Unreachable."""
        decision = self.rules.decide(host, port)
        try:
            name, is_ip = normalize_host(host)
        except EntryError:
            name, is_ip = repr(host)[1:-1][:255], False
        if not decision.allowed:
            self.log.record("deny", via, name, port, decision.reason, decision.rule)
            raise Refused(decision.reason, decision.rule)
        loop = asyncio.get_running_loop()
        try:
            answers = await asyncio.wait_for(self.resolver.resolve(loop, name, is_ip), CONNECT_TIMEOUT)
        except (OSError, TimeoutError) as exc:
            self.log.record("deny", via, name, port, f"cannot resolve {name}: {exc}", decision.rule)
            raise Unreachable(f"cannot resolve {name}") from None
        usable, refusals = [], []
        for address in answers:
            why = self.rules.address_refusal(address)
            (refusals if why else usable).append(why or address)
        if not usable:
            reason = f"{name}:{port}: " + ("; ".join(refusals) if refusals else "no address")
            self.log.record("deny", via, name, port, reason, "net.private")
            raise Refused(reason, "net.private")
        last = None
        for address in usable:
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(address, port, limit=READ_SIZE), CONNECT_TIMEOUT)
            except (OSError, TimeoutError) as exc:
                last = exc
                continue
            self.log.record("allow", via, name, port, decision.reason, decision.rule, address)
            return reader, writer, name, is_ip
        self.log.record("deny", via, name, port, f"connection failed: {last}", decision.rule)
        raise Unreachable(f"cannot connect to {name}:{port}: {last}")

    def _refusal_body(self, via: str, host: str, port, reason: str) -> bytes:
        return (f"sandboy egress: refused {via} to {host}:{port}: {reason} "
                f"(policy {self.rules.source})\n").encode("ascii", "replace")

    # --- SOCKS5 ---------------------------------------------------------------------------

    async def _socks(self, reader, writer) -> None:
        count = (await reader.readexactly(1))[0]
        methods = await reader.readexactly(count)
        if 0 not in methods:
            writer.write(b"\x05\xff")
            return
        writer.write(b"\x05\x00")
        head = await reader.readexactly(4)
        if head[0] != 5:
            return
        kind = head[3]
        if kind == 1:
            host = socket.inet_ntop(socket.AF_INET, await reader.readexactly(4))
        elif kind == 4:
            host = socket.inet_ntop(socket.AF_INET6, await reader.readexactly(16))
        elif kind == 3:
            raw = await reader.readexactly((await reader.readexactly(1))[0])
            host = raw.decode("ascii", "replace")
        else:
            writer.write(b"\x05\x08\x00\x01" + bytes(6))
            return
        port = int.from_bytes(await reader.readexactly(2), "big")
        if head[1] != 1:  # only CONNECT; BIND and UDP ASSOCIATE would be ways around the rules
            writer.write(b"\x05\x07\x00\x01" + bytes(6))
            return
        try:
            up_reader, up_writer, name, is_ip = await self.open_upstream("socks", host, port)
        except Refused:
            writer.write(b"\x05\x02\x00\x01" + bytes(6))
            await writer.drain()
            return
        except Unreachable:
            writer.write(b"\x05\x04\x00\x01" + bytes(6))
            await writer.drain()
            return
        writer.write(b"\x05\x00\x00\x01" + bytes(6))
        await self._tunnel(reader, writer, up_reader, up_writer, b"", name, is_ip, port)

    # --- HTTP -----------------------------------------------------------------------------

    async def _http(self, reader, writer, first: bytes) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADER_BYTES)
        conn.receive_data(first)
        upstream = _Upstream()
        try:
            while True:
                try:
                    event = await _next_event(conn, reader)
                except h11.RemoteProtocolError as exc:
                    await self._reply(conn, writer, 400, f"sandboy egress: bad request: {exc}\n".encode())
                    return
                if isinstance(event, h11.ConnectionClosed) or event is None:
                    return
                if not isinstance(event, h11.Request):
                    return
                if event.method == b"CONNECT":
                    await self._connect(conn, reader, writer, event)
                    return
                if not await self._forward(conn, reader, writer, event, upstream):
                    return
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    return
                conn.start_next_cycle()
        finally:
            upstream.close()

    async def _reply(self, conn, writer, status: int, body: bytes) -> None:
        """A short response, then the connection closes (nothing after a refusal is trusted)."""
        try:
            headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode()),
                       (b"connection", b"close")]
            writer.write(conn.send(h11.Response(status_code=status, headers=headers)))
            writer.write(conn.send(h11.Data(data=body)))
            writer.write(conn.send(h11.EndOfMessage()))
            await writer.drain()
        except h11.LocalProtocolError:
            pass

    async def _connect(self, conn, reader, writer, request) -> None:
        target = request.target.decode("ascii", "replace")
        host, port = _split_authority(target, None)
        if host is None or port is None:
            await self._reply(conn, writer, 400, f"sandboy egress: CONNECT needs host:port, got {target!r}\n".encode())
            return
        try:
            up_reader, up_writer, name, is_ip = await self.open_upstream("connect", host, port)
        except Refused as exc:
            await self._reply(conn, writer, 403, self._refusal_body("CONNECT", host, port, exc.reason))
            return
        except Unreachable as exc:
            await self._reply(conn, writer, 502, f"sandboy egress: {exc}\n".encode())
            return
        writer.write(conn.send(h11.Response(status_code=200, headers=[], reason=b"Connection established")))
        trailing = conn.trailing_data[0]
        await self._tunnel(reader, writer, up_reader, up_writer, trailing, name, is_ip, port)

    async def _forward(self, conn, reader, writer, request, upstream) -> bool:
        """Forward one absolute-form request and its response; False: close the connection."""
        target = request.target
        if not target[:7].lower() == b"http://":
            why = ("send absolute-form requests (GET http://host/path): the proxy never routes by the Host header"
                   if target.startswith(b"/") else "only http:// URLs (use CONNECT for https)")
            await self._reply(conn, writer, 400, f"sandboy egress: {why}\n".encode())
            return False
        rest = target[7:].decode("ascii", "replace")
        cut = min((i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
        authority, path = rest[:cut], rest[cut:] or "/"
        if path.startswith("?"):
            path = "/" + path
        path = path.split("#", 1)[0]
        names = {name for name, _ in request.headers}
        if b"transfer-encoding" in names and b"content-length" in names:
            # RFC 9112 6.3: a message with both is a smuggling attempt as often as not; the
            # upstream could frame it differently from us. Refuse rather than pick one.
            await self._reply(conn, writer, 400, b"sandboy egress: both Transfer-Encoding and Content-Length\n")
            return False
        host, port = _split_authority(authority, 80)
        if host is None or "@" in authority:
            await self._reply(conn, writer, 400, f"sandboy egress: bad URL authority {authority!r}\n".encode())
            return False
        try:
            up = await upstream.get(self, host, port)
        except Refused as exc:
            await self._reply(conn, writer, 403, self._refusal_body(request.method.decode("ascii", "replace"),
                                                                    host, port, exc.reason))
            return False
        except Unreachable as exc:
            await self._reply(conn, writer, 502, f"sandboy egress: {exc}\n".encode())
            return False
        up_reader, up_writer, uconn = up
        # The upstream's Host is the URL's authority: a forged Host header is dropped with the
        # hop-by-hop headers, so it can neither pick the server nor a virtual host on it.
        headers = [(b"host", authority.encode()), *_end_to_end(request.headers)]
        up_writer.write(uconn.send(h11.Request(method=request.method, target=path.encode(), headers=headers)))
        while True:  # the request body
            event = await _next_event(conn, reader)
            if isinstance(event, h11.Data):
                up_writer.write(uconn.send(h11.Data(data=event.data)))
                await up_writer.drain()
            elif isinstance(event, h11.EndOfMessage):
                up_writer.write(uconn.send(h11.EndOfMessage()))
                break
            else:
                upstream.close()
                return False
        await up_writer.drain()
        while True:  # the response
            try:
                event = await _next_event(uconn, up_reader)
            except h11.RemoteProtocolError as exc:
                upstream.close()
                if conn.our_state is h11.SEND_RESPONSE:
                    await self._reply(conn, writer, 502, f"sandboy egress: bad upstream response: {exc}\n".encode())
                return False
            if isinstance(event, (h11.InformationalResponse, h11.Response)):
                if isinstance(event, h11.InformationalResponse) and event.status_code == 101:
                    upstream.close()  # no protocol switches: Upgrade was never forwarded
                    return False
                kind = type(event)
                writer.write(conn.send(kind(status_code=event.status_code, headers=_end_to_end(event.headers),
                                            reason=event.reason)))
                length = _spliceable_length(request.method, event)
                if length is not None:
                    done = await _splice_body(conn, uconn, writer, up_reader, up_writer, length)
                    upstream.close()  # its parser never saw the spliced bytes: not reused
                    return done  # the caller starts the next cycle, as below
            elif isinstance(event, h11.Data):
                writer.write(conn.send(h11.Data(data=event.data)))
                await writer.drain()
            elif isinstance(event, h11.EndOfMessage):
                writer.write(conn.send(h11.EndOfMessage()))
                await writer.drain()
                break
            else:
                upstream.close()
                return False
        if uconn.our_state is h11.DONE and uconn.their_state is h11.DONE:
            uconn.start_next_cycle()
        else:
            upstream.close()
        return True

    # --- tunnels --------------------------------------------------------------------------

    async def _tunnel(self, reader, writer, up_reader, up_writer, initial: bytes, host: str, is_ip: bool,
                      port: int) -> None:
        # Server-to-client bytes flow from the start (an SSH server speaks first); nothing
        # reaches the server before the client's first bytes are judged.
        down = asyncio.ensure_future(_pipe(up_reader, writer))
        try:
            hello = sni.HelloReader()  # linear in the bytes, however they are cut (sni.py)
            verdict = hello.feed(initial)
            # One deadline for the whole ClientHello, not one per read (session 13): a client
            # dripping a byte every 29 s held the tunnel and its upstream connection for weeks.
            deadline = asyncio.get_running_loop().time() + HELLO_TIMEOUT
            while verdict == sni.NEED_MORE:
                left = deadline - asyncio.get_running_loop().time()
                if left <= 0:
                    raise TimeoutError
                chunk = await asyncio.wait_for(reader.read(READ_SIZE), left)
                if not chunk:
                    return
                verdict = hello.feed(chunk)
            buf = bytes(hello.data)
            refusal = self._tunnel_refusal(verdict, host, is_ip, port)
            if refusal:
                self.log.record("deny", "tls", host, port, refusal, "tls.sni")
                return
            up_writer.write(buf)
            # Decided: from here on the tunnel is opaque bytes, copied in the kernel.
            down.cancel()
            await asyncio.gather(down, return_exceptions=True)
            await _splice_tunnel(reader, writer, up_reader, up_writer)
        finally:
            down.cancel()
            up_writer.transport.abort()

    @staticmethod
    def _tunnel_refusal(verdict, host: str, is_ip: bool, port: int):
        if verdict == sni.NOT_TLS:
            if port in (80, 443):
                return (f"tunnel to {host}:{port} did not start with a TLS ClientHello (plain HTTP must "
                        "use absolute-form requests through http_proxy, where each request is checked)")
            return None
        kind, value = verdict
        if kind == "sni":
            if value != host:
                return f"TLS server name {value!r} does not match the tunnel's host {host}"
            return None
        if kind == "no_sni":
            return None if is_ip else f"TLS ClientHello without a server name in a tunnel to {host}"
        return f"malformed TLS ClientHello in a tunnel to {host}: {value}"


class _Upstream:
    """The upstream connection of one client connection, reused while requests go to the same
    host:port (pip fetches many files from one index)."""

    def __init__(self):
        self.key = None
        self.conn = None

    async def get(self, proxy, host: str, port: int):
        decision_key = (host.lower(), port)
        if self.conn is not None and self.key == decision_key and self.conn[2].our_state is h11.IDLE:
            # decided again all the same: the log shows every request
            decision = proxy.rules.decide(host, port)
            if decision.allowed:
                proxy.log.record("allow", "http", host.lower(), port, decision.reason, decision.rule)
                return self.conn
        self.close()
        reader, writer, _, _ = await proxy.open_upstream("http", host, port)
        self.key = decision_key
        self.conn = (reader, writer, h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEADER_BYTES))
        return self.conn

    def close(self) -> None:
        if self.conn is not None:
            self.conn[1].transport.abort()
            self.conn = None
            self.key = None


def connection_budget() -> int:
    """How many client connections this process can hold without running out of fds or holding
    more than MAX_BUFFER_BYTES: what its soft RLIMIT_NOFILE leaves beyond the fds open now and
    RESERVED_FDS, FDS_PER_CONNECTION each, and MAX_BUFFER_BYTES at CONNECTION_BYTES each; at
    most MAX_CONNECTIONS, at least 1 (a process already short of fds still serves one, as before)."""
    import resource

    most = min(MAX_CONNECTIONS, MAX_BUFFER_BYTES // CONNECTION_BYTES)
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return most
    try:
        in_use = len(os.listdir("/proc/self/fd"))
    except OSError:  # no fd left even to look (EMFILE): serve one connection at a time
        return 1
    return max(1, min(most, (soft - in_use - RESERVED_FDS) // FDS_PER_CONNECTION))


def _end_to_end(headers) -> list:
    """Headers minus hop-by-hop ones, including those a Connection header names."""
    named = {part.strip() for name, value in headers if name == b"connection" for part in value.lower().split(b",")}
    named -= {b"content-length", b"transfer-encoding"}  # framing is never hop-by-hop
    return [(name, value) for name, value in headers if name not in _HOP and name not in named]


async def _next_event(conn, reader):
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            data = await reader.read(READ_SIZE)
            conn.receive_data(data)
            continue
        if event is h11.PAUSED:
            return None
        return event


def _spliceable_length(method: bytes, response):
    """The Content-Length of a response body big enough to splice, else None (chunked bodies,
    bodiless responses and small bodies go through h11 chunk by chunk)."""
    if not isinstance(response, h11.Response) or method == b"HEAD" or response.status_code in (204, 304):
        return None
    lengths = [value for name, value in response.headers if name == b"content-length"]
    if len(lengths) != 1 or any(name == b"transfer-encoding" for name, _ in response.headers):
        return None
    length = int(lengths[0])  # h11 has checked it is digits
    return length if length >= SPLICE_BODY_MIN else None


class _SentOutside:
    """Body bytes that went to the client by splice(2), not through h11: h11's documented stand-in
    for sendfile (its writers only take len() of Data.data), so its Content-Length count stays
    exact and EndOfMessage still refuses a short or long body."""

    def __init__(self, count: int):
        self.count = count

    def __len__(self) -> int:
        return self.count


async def _splice_body(conn, uconn, writer, up_reader, up_writer, length: int) -> bool:
    """Forward a Content-Length response body of `length` bytes upstream → client: what the
    parsers already hold through h11, the rest with splice(2). False: the connection must close."""
    sent = 0
    while True:  # body bytes h11 has already read
        event = uconn.next_event()
        if event is h11.NEED_DATA:
            break
        if isinstance(event, h11.Data):
            writer.write(conn.send(h11.Data(data=event.data)))
            sent += len(event.data)
        elif isinstance(event, h11.EndOfMessage):
            writer.write(conn.send(h11.EndOfMessage()))
            await writer.drain()
            return True
        else:
            return False
    up_writer.transport.pause_reading()
    early = _take_buffered(up_reader)[: length - sent]  # bytes past the body: only for a closed upstream
    if early:
        writer.write(conn.send(h11.Data(data=early)))
        sent += len(early)
    try:
        # not the upstream's buffer: it may still hold request bytes that a server answering
        # before it has read them all would never take
        if not await _ready_to_splice(writer, up_writer, upstream_too=False):
            return False
        with _duplicated_sockets(up_writer, writer) as (src, dst):
            copied = await _copy(asyncio.get_running_loop(), src, dst, length - sent)
        if copied and conn.send_with_data_passthrough(h11.Data(data=_SentOutside(copied))) is None:
            return False
        if sent + copied != length:
            return False  # the upstream ended early: the client sees a short body, then the close
        writer.write(conn.send(h11.EndOfMessage()))
        await writer.drain()
        return True
    finally:
        writer.transport.set_write_buffer_limits()  # the client's connection goes on


async def _splice_tunnel(reader, writer, up_reader, up_writer) -> None:
    """Copy both directions of a decided tunnel with splice(2) until both ends are done.

    The streams stop reading first; bytes they already hold are passed on through them and their
    write buffers are flushed, so nothing is lost or reordered at the hand-over."""
    writer.transport.pause_reading()
    up_writer.transport.pause_reading()
    early_up, early_down = _take_buffered(reader), _take_buffered(up_reader)
    if early_up:
        up_writer.write(early_up)
    if early_down:
        writer.write(early_down)
    if not await _ready_to_splice(writer, up_writer, upstream_too=True):
        return
    client_sock, up_sock = writer.get_extra_info("socket"), up_writer.get_extra_info("socket")
    with _duplicated_sockets(writer, up_writer) as (client_fd, up_fd):
        loop = asyncio.get_running_loop()
        both = (client_sock, up_sock)
        copies = [asyncio.ensure_future(_splice(loop, client_fd, up_fd, up_sock, both)),
                  asyncio.ensure_future(_splice(loop, up_fd, client_fd, client_sock, both))]
        try:
            await asyncio.gather(*copies)
        finally:
            for copy in copies:
                copy.cancel()
            await asyncio.gather(*copies, return_exceptions=True)  # each unwatches its fds first


async def _ready_to_splice(writer, up_writer, upstream_too: bool) -> bool:
    """Before splice(2) takes over from the streams: the client side's write buffer (and the
    upstream side's, `upstream_too`) emptied, so nothing written through the stream is overtaken
    by spliced bytes; False when either connection closed meanwhile (nothing to copy)."""
    for side in (writer, up_writer) if upstream_too else (writer,):
        side.transport.set_write_buffer_limits(high=0)  # drain() now waits for an empty buffer
        await side.drain()
    return not (writer.transport.is_closing() or up_writer.transport.is_closing())


@contextlib.contextmanager
def _duplicated_sockets(*writers):
    """Duplicates of the sockets under `writers`' transports, for splice(2), closed on leaving.
    asyncio refuses to watch an fd a transport owns; the transports (paused, nothing left to
    write) still close the sockets themselves in the end."""
    fds = []
    try:
        for writer in writers:
            fds.append(os.dup(writer.get_extra_info("socket").fileno()))
        yield fds
    finally:
        for fd in fds:
            os.close(fd)


def _take_buffered(reader) -> bytes:
    """The bytes a StreamReader has read from its socket but nobody has consumed yet (e.g. TLS
    early data sent with the ClientHello). StreamReader has no public call that returns them
    without waiting; tests/egress/test_proxy.py sends such bytes and checks they arrive."""
    data = bytes(reader._buffer)
    reader._buffer.clear()
    return data


async def _splice(loop, src: int, dst: int, dst_sock, both) -> None:
    """src → dst until src's end of file; then half-close dst (as _pipe's write_eof).
    A reset on either side ends both directions."""
    try:
        await _copy(loop, src, dst)
        dst_sock.shutdown(socket.SHUT_WR)
    except OSError:
        for sock in both:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


async def _copy(loop, src: int, dst: int, limit=None) -> int:
    """splice(2) src → pipe → dst until src's end of file or `limit` bytes; the count copied."""
    pipe_r, pipe_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    copied = 0
    try:
        try:
            fcntl.fcntl(pipe_w, fcntl.F_SETPIPE_SZ, SPLICE_PIPE_SIZE)
        except OSError:
            pass
        while limit is None or copied < limit:
            want = SPLICE_PIPE_SIZE if limit is None else min(SPLICE_PIPE_SIZE, limit - copied)
            try:
                held = os.splice(src, pipe_w, want, flags=_SPLICE_FLAGS)
            except BlockingIOError:
                await _fd_ready(loop, src, loop.add_reader, loop.remove_reader)
                continue
            if held == 0:
                break
            while held:
                try:
                    moved = os.splice(pipe_r, dst, held, flags=_SPLICE_FLAGS)
                except BlockingIOError:
                    await _fd_ready(loop, dst, loop.add_writer, loop.remove_writer)
                    continue
                held -= moved
                copied += moved
        return copied
    finally:
        os.close(pipe_r)
        os.close(pipe_w)


async def _fd_ready(loop, fd: int, watch, unwatch) -> None:
    ready = loop.create_future()
    watch(fd, lambda: ready.done() or ready.set_result(None))
    try:
        await ready
    finally:
        unwatch(fd)


async def _pipe(reader, writer) -> None:
    try:
        while True:
            data = await reader.read(READ_SIZE)
            if not data:
                break
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.transport.abort()


def _split_authority(text: str, default_port):
    """(host, port) from "host", "host:port", "[v6]", "[v6]:port"; (None, None) when malformed."""
    try:
        host, port = split_authority(text, text)
    except EntryError:
        return None, None
    if port is None:
        return (host, default_port) if host else (None, None)
    return host, port
