"""Layer 3 egress: a private network namespace whose only way out is a host-side proxy.

Modules (each small, one job):

- `rules`    — `net.domains` / `net.domains_deny` / `net.private` entries: validation (used by
               `policy.load`), host:port decisions naming the deciding rule, address checks on
               resolved answers (no DNS rebinding into the host). Stdlib only, no `re`.
- `sni`      — the server name of a TLS ClientHello (checked inside CONNECT/SOCKS tunnels).
- `resolver` — host-side name resolution (getaddrinfo, plus an operator hosts map for tests
               and mirrors), filtered through `rules.Rules.address_refusal`.
- `enforcement` — at cage build: the mode (a network namespace, or the weaker Landlock
               fallback), the cage's network rules and the proxy environment (http_proxy, ...).
- `log`      — JSON-lines decision log (`--egress-log FILE`) and the counters `--status-json` shows.
- `proxy`    — the asyncio proxy: HTTP absolute-form requests (every request of a kept-alive or
               pipelined connection is parsed and checked, with h11), CONNECT, SOCKS5 (socks5h).
- `service`  — runs the proxy in a thread of the calling process for the lifetime of one run.
- `session`  — one run's proxy as a supervision hook (confine/supervision.py): its child steps
               before the fork, the proxy thread after it, stopped once the whole tree is gone.
- `ssh_proxy` — `ssh_proxy.py PROXY_HOST PROXY_PORT HOST PORT`: the ProxyCommand that git's ssh
               uses (set through GIT_SSH_COMMAND) to reach `host:22` through the proxy's CONNECT.

Nothing here is imported on the `sandboy run` start-up path unless the policy lists `net.domains`
(h11 and asyncio cost tens of milliseconds; tests/test_run_cli.py checks).
"""
