"""The server name (SNI) of a TLS ClientHello, read from the first bytes a client sends in a tunnel.

Why: the proxy connects to the address of the host the client named in CONNECT (or SOCKS), but
inside TLS the client can ask that server for another virtual host ("domain fronting": connect to
an allowed CDN name, then request a denied one). The tunnel's ClientHello must name the CONNECT
host. Only the plaintext ClientHello is read; nothing is decrypted.

`client_hello(buffer)` returns one of:
  NEED_MORE          — a TLS handshake has started but the ClientHello is not complete yet;
  NOT_TLS            — the first byte is not a TLS handshake record (e.g. SSH);
  ("sni", name)      — the ClientHello's host_name, lower-cased, trailing dot dropped;
  ("no_sni", None)   — a complete ClientHello without a server_name extension;
  ("bad", reason)    — malformed; the tunnel is dropped.
The ClientHello may span several TLS records (large post-quantum key shares); at most
`MAX_HELLO` bytes are buffered. The proxy reads a tunnel's first bytes through `HelloReader`,
which asks `client_hello` again only when the answer can have changed (session 13).
"""

NEED_MORE = "need_more"
NOT_TLS = "not_tls"
MAX_HELLO = 64 * 1024
_HANDSHAKE = 0x16
_CLIENT_HELLO = 1
_SERVER_NAME = 0
_HOST_NAME = 0


def _handshake_bytes(buf: bytes):
    """Concatenated handshake-record payloads at the start of `buf`, and whether a non-handshake
    record interrupted them."""
    out = bytearray()
    pos = 0
    while pos + 5 <= len(buf):
        ctype, major, length = buf[pos], buf[pos + 1], int.from_bytes(buf[pos + 3 : pos + 5], "big")
        if ctype != _HANDSHAKE or major != 3:
            return bytes(out), True
        if pos + 5 + length > len(buf):
            out += buf[pos + 5 :]
            break
        out += buf[pos + 5 : pos + 5 + length]
        pos += 5 + length
    return bytes(out), False


def client_hello(buf: bytes):
    if not buf:
        return NEED_MORE
    if buf[0] != _HANDSHAKE:
        return NOT_TLS
    if len(buf) >= 2 and buf[1] != 3:
        return ("bad", "not a TLS record version")
    hs, interrupted = _handshake_bytes(buf)
    if len(hs) < 4:
        if interrupted:
            return ("bad", "handshake record interrupted")
        return NEED_MORE if len(buf) < MAX_HELLO else ("bad", "ClientHello too large")
    if hs[0] != _CLIENT_HELLO:
        return ("bad", "first handshake message is not a ClientHello")
    length = int.from_bytes(hs[1:4], "big")
    if length > MAX_HELLO:
        return ("bad", "ClientHello too large")
    if len(hs) < 4 + length:
        if interrupted:
            return ("bad", "handshake record interrupted")
        return NEED_MORE if len(buf) < MAX_HELLO + 5 * 8 else ("bad", "ClientHello too large")
    return _server_name(hs[4 : 4 + length])


class _Short(Exception):
    pass


def _take(body: bytes, pos: int, n: int):
    if pos + n > len(body):
        raise _Short
    return body[pos : pos + n], pos + n


def _server_name(body: bytes):
    try:
        pos = 2 + 32  # client_version, random
        raw, pos = _take(body, pos, 1)
        _, pos = _take(body, pos, raw[0])                                 # session_id
        raw, pos = _take(body, pos, 2)
        _, pos = _take(body, pos, int.from_bytes(raw, "big"))             # cipher_suites
        raw, pos = _take(body, pos, 1)
        _, pos = _take(body, pos, raw[0])                                 # compression_methods
        if pos == len(body):
            return ("no_sni", None)                                       # no extensions at all
        raw, pos = _take(body, pos, 2)
        end = pos + int.from_bytes(raw, "big")
        if end > len(body):
            raise _Short
        names = []
        while pos < end:
            head, pos = _take(body, pos, 4)
            etype, elen = int.from_bytes(head[:2], "big"), int.from_bytes(head[2:], "big")
            data, pos = _take(body, pos, elen)
            if etype == _SERVER_NAME:
                names.append(data)
        if not names:
            return ("no_sni", None)
        if len(names) > 1:
            return ("bad", "two server_name extensions")
        return _host_name(names[0])
    except _Short:
        return ("bad", "truncated ClientHello")


def _host_name(data: bytes):
    if len(data) < 2 or int.from_bytes(data[:2], "big") != len(data) - 2:
        return ("bad", "malformed server_name extension")
    pos, found = 2, []
    while pos < len(data):
        if pos + 3 > len(data):
            return ("bad", "malformed server_name extension")
        kind, length = data[pos], int.from_bytes(data[pos + 1 : pos + 3], "big")
        name = data[pos + 3 : pos + 3 + length]
        if len(name) != length:
            return ("bad", "malformed server_name extension")
        if kind == _HOST_NAME:
            found.append(name)
        pos += 3 + length
    if len(found) != 1:
        return ("bad", "server_name must carry exactly one host_name")
    try:
        name = found[0].decode("ascii").lower()
    except UnicodeDecodeError:
        return ("bad", "server_name is not ASCII")
    return ("sni", name[:-1] if name.endswith(".") else name)


class HelloReader:
    """`client_hello` of the bytes fed so far, in time linear in their length.

    Why (session 13 red team): the proxy re-parsed the whole buffer after every read, and each
    parse walks every TLS record in it. A caged client sending its ClientHello in 1-byte
    records, one record per read, fills the 64 KiB bound with ~11,000 records: ~6*10^7 record
    steps, ~30 s of one core in the supervising process (the gate itself for a gate step),
    outside the step's cgroup, holding the proxy's event loop (every other connection of the
    step) the while — and again for each connection. Here each complete record is walked once;
    `client_hello` runs only when its answer can differ from NEED_MORE: the first byte or a
    record header is not a TLS handshake's, the handshake's 4-byte header is in, the whole
    ClientHello it announces is in, or the buffer reached its bound."""

    def __init__(self):
        self.data = bytearray()
        self._pos = 0          # the first record whose payload is not yet in _payload
        self._payload = 0      # handshake bytes in the complete records before _pos
        self._wanted = 4       # handshake bytes needed before client_hello can answer
        self._announced = False

    def feed(self, chunk: bytes):
        data = self.data
        data += chunk
        if not data:
            return NEED_MORE
        if data[0] != _HANDSHAKE or (len(data) >= 2 and data[1] != 3) or len(data) >= MAX_HELLO:
            return client_hello(bytes(data))
        while self._pos + 5 <= len(data):
            if data[self._pos] != _HANDSHAKE or data[self._pos + 1] != 3:
                return client_hello(bytes(data))  # an interrupted handshake: decided there
            end = self._pos + 5 + int.from_bytes(data[self._pos + 3 : self._pos + 5], "big")
            if end > len(data):
                break
            self._payload += end - self._pos - 5
            self._pos = end
        partial = max(0, len(data) - self._pos - 5)  # payload of a record still arriving
        if self._payload + partial < self._wanted:
            return NEED_MORE
        verdict = client_hello(bytes(data))
        if verdict == NEED_MORE and not self._announced:
            # the handshake header is in: next ask when the ClientHello it announces is
            hs, _ = _handshake_bytes(bytes(data))
            self._wanted = 4 + int.from_bytes(hs[1:4], "big")
            self._announced = True
        return verdict
