"""What the egress proxy lets through: `net.domains`, `net.domains_deny` and `net.private`.

Entry grammar (docs/design.md, docs/egress.md): `host` (ports 80 and 443), `host:port`, `*.suffix` (any name strictly
below `suffix`, not `suffix` itself), `*.suffix:port`, IPv4 literals `1.2.3.4[:port]`, IPv6
literals `[::1][:port]` (or a bare `::1`). Names are lower-cased; a trailing dot, a bare `*`,
a `*` anywhere but a leading `*.`, and all-numeric names that are not a dotted-quad (`127.1`,
`0x7f.1`: getaddrinfo would read them as addresses) are refused.

Decisions: a deny pattern that matches wins; else the first allow pattern that matches;
else refused. Every decision names the rule that made it, which the 403 body, the SOCKS log
line and the gate report repeat.

Addresses: a name that passed is resolved on the host side, and every answer that is not a
global unicast address (private, loopback, link-local — which holds the 169.254.169.254 metadata
service —, shared 100.64/10, reserved, multicast, unspecified) is dropped unless a `net.private`
CIDR holds it. The proxy connects to the address it checked, never to the name again, so a
second DNS answer cannot rebind the connection into the host.

Stdlib only and no `re` (this module validates policies on the start-up path); `ipaddress`
is imported only when an entry is an IP literal.
"""

WEB_PORTS = (80, 443)  # what a bare host means
_LABEL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_")
_HEXISH = frozenset("0123456789abcdefx")


class Entry:
    """One parsed `net.domains` / `net.domains_deny` entry."""

    __slots__ = ("text", "host", "wildcard", "ip", "ports")

    def __init__(self, text: str, host: str, wildcard: bool, ip: bool, ports: tuple):
        self.text = text          # as written (lower-cased): the rule named in decisions
        self.host = host          # name without "*." / normalized IP literal
        self.wildcard = wildcard  # "*.suffix"
        self.ip = ip
        self.ports = ports

    def matches_host(self, host: str) -> bool:
        if self.wildcard:
            return host.endswith("." + self.host)
        return host == self.host

    def matches(self, host: str, port: int) -> bool:
        return port in self.ports and self.matches_host(host)

    def covers(self, other: "Entry") -> bool:
        """Does this entry allow every (host, port) that `other` matches? (the gate's meet)"""
        if not set(other.ports) <= set(self.ports) or other.ip != self.ip:
            return False
        if other.wildcard:
            # "*.a.x.org" lies within "*.x.org" (and within "*.a.x.org"); never within a plain name
            return self.wildcard and (other.host == self.host or other.host.endswith("." + self.host))
        return self.matches_host(other.host)

    def __repr__(self):
        return f"Entry({self.text!r})"


class EntryError(ValueError):
    """An entry that is not valid; the message says what is wrong (for `FILE: key: message`)."""


def _port(text: str, whole: str) -> int:
    if not (text.isascii() and text.isdigit()) or not 0 < int(text) < 65536:
        raise EntryError(f"bad port in {whole!r} (expected host or host:port, port 1-65535)")
    return int(text)


def _ip(text: str):
    """The normalized IP literal, or None when `text` is not one."""
    if ":" not in text and not all(c in "0123456789." for c in text):
        return None  # a name (IPv4 literals are dotted decimal): no ipaddress import, ≈ 3 ms at start-up
    import ipaddress

    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _looks_numeric(name: str) -> bool:
    """Names getaddrinfo would read as an IPv4 address in another notation (127.1, 0x7f.0.0.1)."""
    last = name.rsplit(".", 1)[-1]
    return bool(last) and (last.isdigit() or (last.startswith("0x") and set(last) <= _HEXISH))


def check_name(name: str, whole: str) -> None:
    """A DNS name as the policy or a client may give it; raises EntryError."""
    if not name:
        raise EntryError(f"empty host name in {whole!r}")
    if name.endswith("."):
        raise EntryError(f"trailing dot in {whole!r} (write the name without it)")
    if len(name) > 253:
        raise EntryError(f"host name longer than 253 characters in {whole!r}")
    if not name.isascii() or not set(name) <= _LABEL_CHARS | {"."}:
        raise EntryError(f"not a host name, *.domain pattern or IP literal: {whole!r} "
                         "(letters, digits, '-', '.'; internationalized names in their xn-- form)")
    for label in name.split("."):
        if not label or len(label) > 63 or label.startswith("-") or label.endswith("-"):
            raise EntryError(f"bad label {label!r} in {whole!r}")
    if _looks_numeric(name):
        raise EntryError(f"{whole!r} is neither a dotted-quad IPv4 address nor a host name")


def split_authority(text: str, whole: str):
    """(host, port or None) of "host", "host:port", "[v6]" or "[v6]:port", the brackets kept on
    the host; EntryError naming `whole` when malformed. A bare IPv6 literal ("::1") is not split
    here: the caller decides whether it may stand without brackets."""
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise EntryError(f"unclosed '[' in {whole!r}")
        host, rest = text[: end + 1], text[end + 1 :]
        if rest and not rest.startswith(":"):
            raise EntryError(f"unexpected {rest!r} after ']' in {whole!r}")
    else:
        host, sep, port = text.partition(":")
        rest = sep + port
    return host, (_port(rest[1:], whole) if rest else None)


def parse_entry(value: str) -> Entry:
    """Parse one policy entry; raises EntryError with a one-line reason."""
    text = value.strip().lower()
    if text != value.lower() or not text:
        raise EntryError(f"not a host name, *.domain pattern or IP literal: {value!r}")
    host, ports = text, WEB_PORTS
    if text.startswith("["):  # [v6] or [v6]:port
        bracketed, port = split_authority(text, value)
        host = bracketed[1:-1]
        if port is not None:
            ports = (port,)
        ip = _ip(host)
        if ip is None or ip.version != 6:
            raise EntryError(f"not an IPv6 literal inside [...]: {value!r}")
        return Entry(text, _as_compared(ip), False, True, ports)
    if text.count(":") > 1:  # a bare IPv6 literal: no port possible
        ip = _ip(text)
        if ip is None:
            raise EntryError(f"not an IP literal: {value!r} (IPv6 with a port: [addr]:port)")
        return Entry(text, _as_compared(ip), False, True, ports)
    host, port = split_authority(text, value)
    if port is not None:
        ports = (port,)
    if host == "*" or "*" in host[2:] or (host.startswith("*") and not host.startswith("*.")):
        raise EntryError(f"{value!r}: '*' only as a leading '*.' (to allow every host use "
                         "net.unrestricted = true)")
    wildcard = host.startswith("*.")
    name = host[2:] if wildcard else host
    if not wildcard and all(part.isdigit() for part in name.split(".")) and name.count(".") == 3:
        ip = _ip(name)
        if ip is None:
            raise EntryError(f"not an IPv4 address: {value!r}")
        return Entry(text, str(ip), False, True, ports)
    check_name(name, value)
    return Entry(text, name, wildcard, False, ports)


# Single-label suffixes a `*.suffix` allow entry may name: the special-use names no registry
# hands out (RFC 6761: test, example, invalid, localhost; RFC 6762: local, and its Appendix G's
# private-use names) — an organisation's own, as `*.build.corp`, not a public TLD's every name.
PRIVATE_USE_TLDS = frozenset(("test", "example", "invalid", "localhost", "local",
                              "intranet", "internal", "private", "corp", "home", "lan"))
# Second-level labels under which anyone registers a name in many country-code TLDs (co.uk, com.au,
# org.nz, net.br): `*.co.uk` is every UK company's host, as `*.com` is every .com's.
_OPEN_SECOND_LEVELS = frozenset(("co", "com", "net", "org"))


def public_suffix_wildcard(entry: Entry):
    """Why an ALLOW entry `*.suffix` reaches every name anyone can register under a public suffix
    (`*.com`, `*.io`, `*.co.uk`), else None. Session 13 (an open item since session 8): such an
    entry was taken silently and made the egress rules a formality — any attacker's .com host
    was allowed, so any exfiltration. Refused, not warned: a warning scrolls away and the run
    then goes ahead with it; the error names the fix (list the hosts, or say
    `net.unrestricted = true` plainly). Registry-run shared suffixes anyone can get a name under
    (`*.github.io`, `*.s3.amazonaws.com`) need the Public Suffix List, which Sandboy does not
    ship: not detected (docs/egress.md). A deny entry may be as broad as it likes."""
    if not entry.wildcard or entry.ip:
        return None
    labels = entry.host.split(".")
    if len(labels) == 1 and labels[0] not in PRIVATE_USE_TLDS:
        return f"top-level domain {entry.host!r}"
    if len(labels) == 2 and labels[0] in _OPEN_SECOND_LEVELS and len(labels[1]) == 2 and labels[1].isalpha():
        return f"public suffix {entry.host!r}"
    return None


def _as_compared(ip) -> str:
    """An entry's IP literal as `normalize_host` spells what a client sends: an IPv4-mapped IPv6
    address is its IPv4 address. Session 8: a deny entry `[::ffff:10.0.0.1]` never matched (the
    client's `[::ffff:10.0.0.1]` and `10.0.0.1` both compare as `10.0.0.1`), nor an allow one."""
    return str(ip.ipv4_mapped) if ip.version == 6 and ip.ipv4_mapped is not None else str(ip)


def normalize_host(host: str):
    """(host, is_ip) as the proxy compares it: IP literals normalized, names lower-cased with
    one trailing dot dropped. Raises EntryError for anything else (the proxy refuses it)."""
    host = host.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if ":" in host or (host.replace(".", "").isdigit() and host.count(".") == 3):
        ip = _ip(host)
        if ip is None:
            raise EntryError(f"not an IP address: {host!r}")
        if ip.version == 6 and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped  # ::ffff:1.2.3.4 is 1.2.3.4 (and is checked as such)
        return str(ip), True
    name = host.lower()
    if name.endswith("."):
        name = name[:-1]
    check_name(name, host)
    return name, False


class Decision:
    __slots__ = ("allowed", "rule", "reason")

    def __init__(self, allowed: bool, rule: str, reason: str):
        self.allowed = allowed
        self.rule = rule        # e.g. 'net.domains "*.pypi.org"' (empty when nothing matched)
        self.reason = reason    # one sentence for the 403 body / log

    def __repr__(self):
        return f"Decision({self.allowed}, {self.reason!r})"


class Rules:
    """A policy's egress rules, ready for the proxy."""

    def __init__(self, domains=(), deny=(), private=(), source: str = "<policy>"):
        self.allow = [parse_entry(d) for d in domains]
        self.deny = [parse_entry(d) for d in deny]
        self.private = []
        if private:  # ipaddress only when needed here; the proxy imports it at its first client
            import ipaddress

            self.private = [ipaddress.ip_network(c, strict=False) for c in private]
        self.source = source

    @classmethod
    def from_policy(cls, policy) -> "Rules":
        net = policy.net
        return cls(net.domains, net.domains_deny, net.private, policy.source)

    def decide(self, host: str, port: int) -> Decision:
        """Decide for a host as a client named it (CONNECT, absolute URL, SOCKS)."""
        try:
            name, _ = normalize_host(host)
        except EntryError as exc:
            return Decision(False, "", f"refused {host!r}: {exc}")
        for entry in self.deny:
            if entry.matches(name, port):
                return Decision(False, f'net.domains_deny "{entry.text}"',
                                f'{name}:{port} is denied by net.domains_deny "{entry.text}"')
        for entry in self.allow:
            if entry.matches(name, port):
                return Decision(True, f'net.domains "{entry.text}"',
                                f'{name}:{port} is allowed by net.domains "{entry.text}"')
        return Decision(False, "", f"{name}:{port} matches no net.domains entry")

    def address_refusal(self, address: str):
        """None when the proxy may connect to `address`, else why not (one sentence)."""
        import ipaddress

        ip = ipaddress.ip_address(address.split("%", 1)[0])
        if ip.version == 6:
            ip = _embedded_ipv4(ip) or ip
        if ip.is_unspecified or (ip.version == 4 and ip.packed[0] == 0):
            # Never a destination, whatever net.private holds (session 13): connect(2) to 0.0.0.0
            # or :: reaches this host's own listeners, and Python calls 0.0.0.0/8 and ::/128
            # private, so `net.private = ["0.0.0.0/8"]` ("the zero network") let an allowed name
            # answering 0.0.0.0 reach a service on the host's 127.0.0.1 no loopback entry granted.
            return (f"address {ip} is unspecified ('this host': a connection reaches the host's own "
                    "services; list 127.0.0.0/8 in net.private if that is meant)")
        if any(ip.version == net.version and ip in net for net in self.private):
            return None
        if ip.is_global and not ip.is_multicast and not (ip.version == 6 and _never_global(ip)):
            return None
        kind = ("loopback" if ip.is_loopback else "link-local (cloud metadata lives here)" if ip.is_link_local
                else "unspecified" if ip.is_unspecified else "multicast" if ip.is_multicast
                else "private" if ip.is_private else "not a global address")
        return f"address {ip} is {kind} and no net.private range holds it"


# IPv6 prefixes that carry an IPv4 address a gateway or the kernel may deliver to: NAT64 (RFC
# 6052 well-known prefix), IPv4-compatible (deprecated ::/96). Python 3.11 calls them
# global, so `64:ff9b::a9fe:a9fe` (169.254.169.254 through a NAT64 gateway) or `64:ff9b::a00:1`
# (10.0.0.1) in an allowed name's AAAA answer passed the check. 6to4 and Teredo carry theirs in
# `sixtofour` / `teredo`.
# Session 8: RFC 2765's IPv4-translated `::ffff:0:0:0/96` (SIIT) carries one the same way.
_NAT64 = ("64:ff9b::/96", "::/96", "::ffff:0:0:0/96")
# Never global, though Python 3.11 says they are: RFC 8215 local-use NAT64 (the operator chooses
# where the IPv4 bits sit, so no address can be read out of it), the deprecated site-local
# fec0::/10 (RFC 3879: Linux still routes it as ordinary unicast where configured), the
# documentation prefix 3fff::/20 (RFC 9637) and SRv6 SIDs 5f00::/16 (RFC 9602). Session 8.
_LOCAL_NAT64 = "64:ff9b:1::/48"
_NEVER_GLOBAL_V6 = (_LOCAL_NAT64, "fec0::/10", "3fff::/20", "5f00::/16")


def _never_global(ip) -> bool:
    import ipaddress

    return any(ip in ipaddress.ip_network(prefix) for prefix in _NEVER_GLOBAL_V6)


def _embedded_ipv4(ip):
    """The IPv4 address an IPv6 one stands for (mapped, NAT64, compatible, 6to4, Teredo), else None."""
    import ipaddress

    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]  # (server, client): the client is where the bytes go
    for prefix in _NAT64:
        if ip in ipaddress.ip_network(prefix) and int(ip) & 0xFFFFFFFF and ip != ipaddress.ip_address("::1"):
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def meet_domains(step, ceiling) -> tuple:
    """(kept, refused) step entries: one is kept only where some ceiling entry allows every
    (host, port) it matches. Entries that fail to parse are refused."""
    ceiling_entries = [parse_entry(c) for c in ceiling]
    kept, refused = [], []
    for text in step:
        entry = parse_entry(text)
        (kept if any(c.covers(entry) for c in ceiling_entries) else refused).append(text)
    return tuple(kept), tuple(refused)
