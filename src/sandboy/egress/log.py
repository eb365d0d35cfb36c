"""Every egress decision, as JSON lines (`--egress-log FILE`) and as counters (`--status-json`).

One line per decision:
  {"time": 1764567890.123, "decision": "allow"|"deny", "via": "http"|"connect"|"socks",
   "host": "pypi.org", "port": 443, "rule": "net.domains \\"pypi.org\\"", "reason": "...",
   "address": "151.101.0.223"}
Tunnel-level refusals (TLS SNI mismatch) are "deny" lines with via "tls". Host names come from
the caged command: they are validated before they are logged, and JSON escaping keeps a hostile
name from forging a second line.

The file is bounded (`max_bytes`, MAX_LOG_BYTES by default; a gate step's is its output cap):
the caged command chooses how many decisions there are, and a loop of refused SOCKS requests
wrote ~0.4 MB/s, some GB an hour of a step into the operator's --logs (session 8 review). Past
the bound one last line says so, `{"time": ..., "decision": "log_full", "reason": ...}`, and
later decisions are only counted (`not_logged`; the counters in --status-json stay whole).
"""

import _thread
import os
import time

MAX_HOSTS_COUNTED = 256  # the per-host table in the status report stays bounded
MAX_LOG_BYTES = 32 << 20  # of decision lines per log file (as a gate step's output, by default)
_FULL_LINE_ROOM = 256  # kept for the last line, which says the log is full


class EgressLog:
    def __init__(self, path=None, max_bytes=None):
        self._fd = None
        self.max_bytes = MAX_LOG_BYTES if max_bytes is None else max_bytes
        self.written = 0
        self.not_logged = 0  # decisions past max_bytes: counted, not written
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

                data = (json.dumps(line, ensure_ascii=True) + "\n").encode()
                if self.not_logged or self.written + len(data) > self.max_bytes - _FULL_LINE_ROOM:
                    if not self.not_logged:
                        data = (json.dumps({"time": line["time"], "decision": "log_full", "reason": (
                            f"this log reached its bound of {self.max_bytes} bytes: later decisions are "
                            "counted in the run's report, not logged")}) + "\n").encode()
                        self.written += os.write(self._fd, data)
                    self.not_logged += 1
                    return
                self.written += os.write(self._fd, data)

    def summary(self) -> dict:
        with self._lock:
            return {"allowed": self.allowed, "denied": self.denied,
                    "hosts": {k: dict(v) for k, v in self.hosts.items()},
                    "hosts_not_listed": self.hosts_dropped}

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
