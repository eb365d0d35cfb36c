"""The proxy of one run, attached to the process that forks the confined child.

Lifecycle (the launcher calls these; see confine/launch.py):
    session = EgressSession.for_cage(cage, log_path)   # None when the policy has no net.domains
    ... fork the child with session.child_steps() run first in it ...
    session.started()        # after the fork: take the listener, start the proxy thread
    ... wait for the child (and, supervised, for every descendant) ...
    summary = session.stop() # proxy, listener and every connection closed; counters returned

The process that forks is the one that serves: the caller for a direct run, the supervisor for
a supervised one, the gate for its steps. The proxy thread starts only after the fork, so no
child is ever forked from a process with the proxy's thread running.
"""

from sandboy.egress.compile import MODE_NAMESPACE


_preload_calls = 0


def preload() -> None:
    """Import what the proxy needs (asyncio, h11, ipaddress, json: tens of ms, far more under
    load) in the calling process, so that each forked supervisor does not import it all again.

    Not at a process's first egress run: that run's supervisor imports them in its proxy thread
    only when a client connects (service.py), so `sandboy run` — one run per process — pays
    nothing for a command that never connects, and a command that does overlaps the import with
    its own start-up. From the second run on, the caller makes many: import once, here."""
    global _preload_calls
    _preload_calls += 1
    if _preload_calls < 2:
        return
    import ipaddress  # noqa: F401
    import json  # noqa: F401

    import sandboy.egress.proxy  # noqa: F401
    import sandboy.egress.service  # noqa: F401


class EgressSession:
    def __init__(self, cage, log_path=None):
        from sandboy.egress.rules import Rules

        part = cage.compiled["egress"]
        self.mode = part.outputs["mode"]
        self.port = part.outputs["port"]
        self._listener = part.outputs.get("listener")
        self.rules = Rules.from_policy(cage.policy)
        self.log_path = log_path
        self.service = None
        self.summary = None
        self._channel = self._child_end = None

    @classmethod
    def for_cage(cls, cage, log_path=None):
        compiled = getattr(cage, "compiled", {}).get("egress")
        if compiled is None or not compiled.outputs:
            return None
        return cls(cage, log_path)

    def child_steps(self) -> list:
        """(label, step) pairs the child runs first, right after clone(2), inside its new user +
        network namespace: bring `lo` up, listen on 127.0.0.1:PORT, send the listening socket
        over a socketpair to this process (namespaces.plan_listen_and_send)."""
        if self.mode != MODE_NAMESPACE:
            return []
        import _socket  # not `socket` (enum, selectors): see service.py
        import os

        from sandboy.confine import namespaces

        self._channel, child_end = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
        self._child_end = child_end
        self._spare = os.dup(child_end.fileno())  # the listener's fd number in the child
        self._keep = []
        return (namespaces.plan_loopback_up()
                + namespaces.plan_listen_and_send(self.port, child_end.fileno(), self._spare, self._keep))

    def _close_child_side(self) -> None:
        import os

        if getattr(self, "_child_end", None) is not None:
            self._child_end.close()
            os.close(self._spare)
            self._child_end = None

    def started(self, wait: bool = True) -> None:
        """After the fork: take the listener (sent by the child from its namespace, or the
        cage's host socket in the fallback) and serve on it for as long as the run lasts.
        `wait=False`: the proxy's thread receives the listener itself (service.py)."""
        from sandboy.egress.service import ProxyService

        if self.mode == MODE_NAMESPACE:
            self._close_child_side()  # now only the child holds it: its exit ends the receive
            channel, self._channel = self._channel, None
            self.service = ProxyService(self.rules, log_path=self.log_path, channel=channel).start(wait)
        else:
            import _socket
            import os

            # the cage keeps its own; this one the service closes
            listener = _socket.socket(fileno=os.dup(self._listener.fileno()))
            self.service = ProxyService(self.rules, listener, self.log_path).start(wait)

    def stop(self, exiting: bool = False) -> dict:
        """End the proxy; its counters. `exiting`: the calling process ends right after (the
        supervisor), which ends the thread and closes every socket: only the counters are read."""
        if self.summary is None:
            if self.service is None:
                counts = {"allowed": 0, "denied": 0, "hosts": {}, "hosts_not_listed": 0}
            else:
                counts = self.service.counts() if exiting else self.service.stop()
            self.summary = {"mode": self.mode, "proxy": f"127.0.0.1:{self.port}", **counts}
        return self.summary

    def report_text(self, exiting: bool = False) -> str:
        """`stop()`'s summary as one line for the supervisor's status pipe (`summary_from_text`
        reads it): the counters as numbers, the per-host table as JSON only when there is one,
        so a run that never connected loads no `json` (≈ 5 ms with `re` on `sandboy run`'s path)."""
        summary = self.stop(exiting)
        text = " ".join((summary["mode"], str(self.port), str(summary["allowed"]), str(summary["denied"]),
                         str(summary.get("hosts_not_listed", 0))))
        if summary["hosts"]:
            import json

            text += " " + json.dumps(summary["hosts"], ensure_ascii=True, separators=(",", ":"))
        return text

    def abort(self) -> None:
        """The fork failed: nothing to serve."""
        self._close_child_side()
        if getattr(self, "_channel", None) is not None:
            self._channel.close()
            self._channel = None
        self.stop()


def summary_from_text(text: str) -> dict:
    """The summary `EgressSession.report_text` wrote (the same dict `stop()` returned there)."""
    mode, port, allowed, denied, not_listed, *hosts = text.split(" ", 5)
    if hosts:
        import json

        hosts = json.loads(hosts[0])
    return {"mode": mode, "proxy": f"127.0.0.1:{port}", "allowed": int(allowed), "denied": int(denied),
            "hosts": hosts or {}, "hosts_not_listed": int(not_listed)}
