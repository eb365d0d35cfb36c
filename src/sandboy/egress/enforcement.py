"""How a cage enforces `net.domains` (Layer 3's part of the cage build): the mode, the cage's
network rules and the command's proxy environment.

Two modes, decided when the cage is built:

- "namespace": the cage gets its own user + network namespace (the namespace tier,
  `confine.namespaces`). Inside it only `lo` exists; the child binds 127.0.0.1:3128 there and
  hands the listening socket to the process that runs the proxy (`egress.session`). A direct
  connection has nowhere to go: no route, no resolver, no host listener.
- "landlock-fallback" (no unprivileged user namespaces): the proxy listens on a random port of
  the host's loopback and Landlock lets the command connect to that TCP port only. WEAKER: the
  command shares the host's network, so that port number on any other address (a host service
  that happens to use it, a remote server) is reachable too. Reported as degraded; under
  `compat.landlock = "strict"` the cage is refused (125). Without Landlock ABI 4 (TCP rules)
  there is no fallback at all: refused (125) in every mode.

In both: UDP is refused (policy validation forbids `udp = true` beside `domains`), every other
TCP port is refused by Landlock, and the command's environment names the proxy:
http_proxy/https_proxy (and upper-case twins) = http://127.0.0.1:PORT, ALL_PROXY = socks5h://...,
NO_PROXY = localhost,127.0.0.1,::1, and GIT_SSH_COMMAND = an ssh whose ProxyCommand is our
helper (`egress.ssh_proxy`) when a `host:22` entry is listed.
"""

import os
import sys

from sandboy.egress.rules import WEB_PORTS, parse_entry
from sandboy.errors import CageError, PolicyError

NAMESPACE_PORT = 3128
MODE_NAMESPACE = "namespace"
MODE_FALLBACK = "landlock-fallback"
FALLBACK_LOST = ("egress: no private network namespace ({why}): the proxy listens on host loopback port "
                 "{port} and Landlock allows TCP connect to port {port} only, on ANY address (a host or "
                 "remote service on that port is reachable without the proxy)")


def proxy_env(port: int, policy) -> dict:
    url = f"http://127.0.0.1:{port}"
    env = {"http_proxy": url, "https_proxy": url, "HTTP_PROXY": url, "HTTPS_PROXY": url,
           "ALL_PROXY": f"socks5h://127.0.0.1:{port}", "all_proxy": f"socks5h://127.0.0.1:{port}",
           "NO_PROXY": "localhost,127.0.0.1,::1", "no_proxy": "localhost,127.0.0.1,::1"}
    if any(port not in WEB_PORTS for entry in policy.net.domains for port in parse_entry(entry).ports):
        # an entry with its own port (git@host is host:22) may be an SSH server
        env["GIT_SSH_COMMAND"] = "ssh -o " + _shell_quote("ProxyCommand=" + ssh_proxy_command(port))
    return env


def ssh_proxy_command(port: int) -> str:
    """git over SSH: ssh reaches host:22 through the proxy's CONNECT via our helper (no nc or
    socat in the cage). Its source travels inline (base64) to the system Python, run with -I -S
    so the cage's environment cannot steer its imports: only the interpreter (usually under a
    granted /usr) needs to be reachable."""
    import base64

    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ssh_proxy.py")
    with open(here, "rb") as fh:
        code = base64.b64encode(fh.read()).decode()
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else os.path.realpath(sys.executable)
    loader = "import base64,sys;exec(base64.b64decode(sys.argv.pop(1)))"
    return f"{python} -I -S -c {_shell_quote(loader)} {code} 127.0.0.1 {port} %h %p"


def _shell_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def merge_env(env: dict, egress_env: dict) -> dict:
    """The command's environment plus the proxy's. A GIT_SSH_COMMAND the policy sets keeps its
    options; the ProxyCommand goes first (for ssh the first value of an option wins)."""
    out = dict(env)
    for name, value in egress_env.items():
        if name == "GIT_SSH_COMMAND" and env.get(name):
            program, _, rest = env[name].strip().partition(" ")
            value = f"{program} {value[len('ssh '):]} {rest}".strip()
        out[name] = value
    return out


def egress_mode(namespace_ok: bool, abi: int):
    """How `net.domains` is enforced: MODE_NAMESPACE, MODE_FALLBACK (Landlock lets the command
    connect only to the proxy's host port), or None: refused (no namespace, no Landlock TCP rules).
    The one place this is decided, for the cage and for `sandboy doctor`."""
    from sandboy.confine.protections import protection

    if namespace_ok:
        return MODE_NAMESPACE
    return MODE_FALLBACK if protection("landlock.net.tcp").available(abi) else None


def namespace_mode_available(job) -> tuple:
    """(ok, why not): can this cage get its own network namespace? The namespace tier
    (`confine.namespaces`, issue 7) is THE place that makes them; it says whether it can
    (probed, cached per boot; SANDBOY_NAMESPACES=0 forces the fallback)."""
    from sandboy.confine import namespaces

    ok, why = namespaces.availability()
    return ok, (why or "user namespaces unavailable")


def compile_egress(job, namespace_ok=None):
    """The `egress` protection: outputs `net` (the network rules the later compilers see),
    `env` (added to the command's environment), `mode`, `port`, `listener` (fallback only: the
    host socket, owned by the cage until it closes)."""
    from sandboy.confine.protections import Compiled, protection

    policy, net = job.policy, job.resolved.net
    if not net.egress:
        return Compiled("egress")
    if net.udp:
        # Checked on the policy the cage is built from (a gate step's udp may be narrowed away
        # by its ceiling): where user namespaces are missing the fallback cage shares the host
        # network, and UDP there would go around the proxy.
        raise PolicyError(policy.source, "net.udp", "cannot be true together with net.domains: UDP does "
                          "not go through the egress proxy (set udp = false)")
    tcp = protection("landlock.net.tcp")
    why = "forced by the caller"
    if namespace_ok is None:
        namespace_ok, why = namespace_mode_available(job)
    degraded, warnings = [], []
    listener = None
    mode = egress_mode(namespace_ok, job.abi)
    if mode == MODE_NAMESPACE:
        port = NAMESPACE_PORT
        connect = tuple(sorted({*net.connect_tcp, port}))  # other ports reach only the namespace's lo
    else:
        if mode is None:
            raise CageError(f"{policy.source}: net.domains: no user namespaces and no Landlock TCP rules "
                            f"(ABI {job.abi} < {tcp.min_abi}): the command could reach any host directly; "
                            "refusing to run")
        import _socket  # not `socket` (enum, selectors): kept off the start-up path, see service.py

        listener = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
        if listener.fileno() <= 2:  # a caller with fd 0-2 closed: never there (_libc.above_stdio)
            from sandboy.confine._libc import above_stdio

            listener = _socket.socket(fileno=above_stdio(listener.detach()))
        try:
            listener.bind(("127.0.0.1", 0))
            listener.listen(512)
        except OSError:
            listener.close()
            raise
        port = listener.getsockname()[1]
        degraded.append(FALLBACK_LOST.format(port=port, why=why))
        if net.connect_tcp:
            warnings.append(f"net.connect_tcp {list(net.connect_tcp)} not granted beside net.domains without "
                            "a private network namespace: those ports would reach the host network "
                            "around the proxy")
        connect = (port,)
    rules = net.replace(connect_tcp=connect)
    enforced = {"egress": {
        "mode": mode,
        "strength": "private network namespace" if namespace_ok else "WEAKER: Landlock port rule on the host network",
        "proxy": f"127.0.0.1:{port}",
        "domains": list(net.domains),
        "domains_deny": list(net.domains_deny),
        "private": list(net.private),
        "udp": "refused",
        "dns": "resolved by the proxy on the host side",
    }}
    return Compiled("egress", (), enforced, degraded, warnings, net=rules, env=proxy_env(port, policy),
                    mode=mode, port=port, listener=listener)


def attach_to_tier(egress, tier) -> None:
    """Namespace mode: the tier makes a network namespace for this cage (CLONE_NEWNET); the
    per-run steps (lo up, listen, send the listener) come from `EgressSession.child_steps`."""
    if egress.outputs.get("mode") != MODE_NAMESPACE:
        return
    if tier is None:  # availability said yes a moment ago; never run without the namespace
        raise CageError("egress: the namespace tier was not built; refusing to run net.domains without it")
    tier.add_in_netns([])
