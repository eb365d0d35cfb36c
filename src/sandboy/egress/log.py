"""Every egress decision, as JSON lines (`--egress-log FILE`) and as counters (`--status-json`).

One line per decision:
  {"time": 1764567890.123, "decision": "allow"|"deny", "via": "http"|"connect"|"socks",
   "host": "pypi.org", "port": 443, "rule": "net.domains \\"pypi.org\\"", "reason": "...",
   "address": "151.101.0.223"}
Tunnel-level refusals (TLS SNI mismatch) are "deny" lines with via "tls". Host names come from
the caged command: they are validated before they are logged, and JSON escaping keeps a hostile
name from forging a second line.
"""

import _thread
import os
import time

MAX_HOSTS_COUNTED = 256  # the per-host table in the status report stays bounded


class EgressLog:
    def __init__(self, path=None):
        self._fd = None
        if path is not None:
            # O_NOFOLLOW: a symlink planted at the log's path is refused, never followed
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        self._lock = _thread.allocate_lock()  # not threading: kept off the start-up path (service.py)
        self.allowed = 0
        self.denied = 0
        self.hosts: dict = {}  # "host:port" -> {"allow": n, "deny": n}
        self.hosts_dropped = 0

    def record(self, decision: str, via: str, host: str, port, reason: str, rule: str = "", address=None) -> None:
        line = {"time": round(time.time(), 3), "decision": decision, "via": via, "host": host, "port": port,
                "rule": rule, "reason": reason}
        if address:
            line["address"] = address
        with self._lock:
            if decision == "allow":
                self.allowed += 1
            else:
                self.denied += 1
            key = f"{host}:{port}"
            counts = self.hosts.get(key)
            if counts is None and len(self.hosts) < MAX_HOSTS_COUNTED:
                counts = self.hosts[key] = {"allow": 0, "deny": 0}
            if counts is None:
                self.hosts_dropped += 1
            else:
                counts[decision] += 1
            if self._fd is not None:
                import json  # first decision only: a run that never connects does not load it

                os.write(self._fd, (json.dumps(line, ensure_ascii=True) + "\n").encode())

    def summary(self) -> dict:
        with self._lock:
            return {"allowed": self.allowed, "denied": self.denied,
                    "hosts": {k: dict(v) for k, v in self.hosts.items()},
                    "hosts_not_listed": self.hosts_dropped}

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
