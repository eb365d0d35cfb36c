"""The proxy of one run, attached to its supervision as a hook (confine/supervision.py).

    session = EgressSession.for_cage(cage, log_path)   # None when the policy has no net.domains
    Supervision(argv, cage, ..., hooks=[session])       # supervision.hooks_for(cage) does this
      start(run)          the child's first steps: lo up, listen inside, send the listener
      started(run)        after the fork: the proxy thread (in a forked supervisor, at the first
                          client: `serve_on_demand`)
      stop(run, result)   after the whole tree is gone: proxy, listener and connections closed;
                          its counters become `result.egress`; a proxy that failed to start
                          makes the run a cage error (125)

The process that supervises is the one that serves: the forked supervisor of `sandboy run` and
the API, the gate for its steps. The proxy thread starts only after the fork, so no child is
ever forked from a process with the proxy's thread running.
"""

from sandboy.confine.supervision import Hook
from sandboy.egress.enforcement import MODE_NAMESPACE
from sandboy.errors import CageError


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


class EgressSession(Hook):
    name = "egress proxy"

    def __init__(self, cage, log_path=None, log_bytes=None, lookups=None):
        from sandboy.egress.rules import Rules

        part = cage.compiled["egress"]
        self.mode = part.outputs["mode"]
        self.port = part.outputs["port"]
        self._listener = part.outputs.get("listener")
        self.rules = Rules.from_policy(cage.policy)
        self.log_path = log_path
        self.log_bytes = log_bytes  # the decision log's bound (None: log.MAX_LOG_BYTES)
        self.service = None
        self.summary = None
        self._channel = self._child_end = None
        # `lookups`: the gate's resolver.LookupHelper, one name-lookup process for all its steps.
        # Only for a run whose tree the namespace tier's init ends: without a PID namespace the
        # supervisor's sweep kills every child of the supervising process at the run's end, the
        # helper too (reaping.sweep waits until none is left), so sharing would buy nothing.
        tier = getattr(cage, "tier", None)
        self.lookups = lookups if tier is not None and tier.pid else None

    @classmethod
    def for_cage(cls, cage, log_path=None, log_bytes=None, lookups=None):
        compiled = getattr(cage, "compiled", {}).get("egress")
        if compiled is None or not compiled.outputs:
            return None
        return cls(cage, log_path, log_bytes, lookups)

    def _resolver(self):
        """The proxy's resolver: one using the gate's shared helper, or None (the proxy makes
        one with a helper of its own)."""
        if self.lookups is None:
            return None
        from sandboy.egress.resolver import Resolver

        return Resolver(lookups=self.lookups)

    def _open_log(self):
        """The decision log (bounded: log.py), or None without a log file (the service then keeps
        a file-less one for the counters)."""
        if self.log_path is None:
            return None
        from sandboy.egress.log import EgressLog

        return EgressLog(self.log_path, self.log_bytes)

    def child_steps(self) -> list:
        """(label, step) pairs the child runs first, right after clone(2), inside its new user +
        network namespace: bring `lo` up, listen on 127.0.0.1:PORT, send the listening socket
        over a socketpair to this process (netns_listener.plan_listen_and_send)."""
        if self.mode != MODE_NAMESPACE:
            return []
        import _socket  # not `socket` (enum, selectors): see service.py
        import os

        from sandboy.confine import netns_listener

        self._channel, child_end = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
        self._child_end = child_end
        self._spare = os.dup(child_end.fileno())  # the listener's fd number in the child
        self._keep = []
        return (netns_listener.plan_loopback_up()
                + netns_listener.plan_listen_and_send(self.port, child_end.fileno(), self._spare, self._keep))

    def _close_child_side(self) -> None:
        import os

        if self._child_end is not None:
            self._child_end.close()
            os.close(self._spare)
            self._child_end = None

    # --- the supervision hook ------------------------------------------------------------------

    def start(self, run) -> tuple:
        return tuple(self.child_steps())

    def started(self, run) -> None:
        try:
            if not run.exits_after:
                # the gate: waits for the listener, so a failure refuses the step now
                self.serve(wait=True)
            elif not run.in_pids_cgroup:
                self.serve_on_demand()  # the proxy's thread starts at the first client
            else:  # a pids cgroup counts the thread: it takes its slot now, before the command's
                self.serve(wait=False)  # SIGTERM is still blocked: the proxy's thread inherits that
        except (OSError, RuntimeError) as exc:
            raise CageError(f"egress proxy: {exc}") from None

    def stop(self, run, result) -> None:
        if self.service is None:
            self.abort()  # no client came, or the run never got as far as the proxy
        # a forked supervisor exits right after: its exit ends thread, listener and connections
        result.egress = self.finish(exiting=run.exits_after)
        if self.error is not None:  # the proxy could not be started on demand
            result.refuse(self.error)

    # --- the proxy -------------------------------------------------------------------------

    def serve(self, wait: bool = True) -> None:
        """After the fork: take the listener (sent by the child from its namespace, or the
        cage's host socket in the fallback) and serve on it for as long as the run lasts.
        `wait=False`: the proxy's thread receives the listener itself (service.py)."""
        from sandboy.egress.service import ProxyService

        if self.mode == MODE_NAMESPACE:
            self._close_child_side()  # now only the child holds it: its exit ends the receive
            channel, self._channel = self._channel, None
            self.service = ProxyService(self.rules, channel=channel, log=self._open_log(),
                                        resolver=self._resolver()).start(wait)
        else:
            import _socket
            import os

            # the cage keeps its own; this one the service closes
            listener = _socket.socket(fileno=os.dup(self._listener.fileno()))
            self.service = ProxyService(self.rules, listener, log=self._open_log(),
                                        resolver=self._resolver()).start(wait)

    def serve_on_demand(self) -> None:
        """`serve()` for the supervisor (a process of its own; call it from its main thread
        after the fork): the proxy's thread is started only when a client connects.

        Why: a thread still blocked in poll(2) when the supervisor exits must itself be
        scheduled to die before the run's exit is reported; on this loaded 2-core machine that
        cost more than the rest of the egress set-up together (bench/bench_egress.py --only
        setup; docs/egress.md). Until a client comes nothing runs: the channel (namespace mode)
        and then the listener are in signal-driven mode (O_ASYNC, owned by this process), and
        each SIGIO moves one step on, in the main thread (the supervisor's wait is resumed after
        the handler, PEP 475): take the listener from the channel, then start the thread at
        the first pending connection. Every step first checks the fd's state, so a datagram or
        connection that came before O_ASYNC was set is not missed. The decision log is opened
        now, as `serve()` does (a bad --egress-log path is refused before the command runs).
        The fallback mode (a host socket shared with the caller) starts the thread at once."""
        import _signal as signal  # the C module: `signal` imports enum

        if self.mode != MODE_NAMESPACE:
            # The fallback's listener is the cage's socket: its file status flags and owner are
            # shared with the caller's copy, which outlives this process. Served at once.
            self.serve(wait=False)
            return
        self._log = self._open_log()  # else the service makes its (file-less) log when it starts
        self._close_child_side()  # now only the child holds it: its exit ends the receive
        signal.signal(signal.SIGIO, self._on_sigio)
        _signal_when_readable(self._channel.fileno())
        self._on_sigio()  # anything that came before O_ASYNC was set

    _listen_fd = None
    _log = None
    error = None  # why the proxy could not be started on demand (the run then fails, 125)

    def _on_sigio(self, signum=None, frame=None) -> None:
        import _signal as signal

        # Python runs a handler again between any two bytecodes of a running one: with SIGIO
        # blocked, a step is never interleaved with another (a SIGIO that comes meanwhile stays
        # pending in the kernel and runs this handler again once the step is done).
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGIO})
        try:
            self._next_step()
        except BaseException as exc:  # never raised into the supervisor's wait
            self.error = f"egress proxy: {exc}"
            self._close_listener()  # a client is refused at once instead of waiting forever
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)

    def _next_step(self) -> None:
        import _socket
        import os

        if self.service is not None or self.error is not None:
            return
        if self._listen_fd is None:
            if self._channel is None:
                return
            try:
                fd = take_listener(self._channel)
            except BlockingIOError:
                return  # not sent yet
            self._channel = None
            if fd is None:
                return
            self._listen_fd = fd
            _signal_when_readable(fd)
        if not _readable(self._listen_fd):
            return
        fd, self._listen_fd = self._listen_fd, None
        _signal_when_readable(fd, False)  # from here on the proxy's event loop watches it
        try:
            listener = _socket.socket(fileno=fd)
        except BaseException:
            os.close(fd)
            raise
        import _signal as signal  # the C module: `signal` imports enum

        from sandboy.egress.service import ProxyService

        # The thread takes the signal mask of the moment: every signal stays with the main
        # thread, whose handlers (stop, forward ^C) must interrupt its wait.
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        try:
            self.service = ProxyService(self.rules, listener, log=self._log).start(wait=False)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)

    def _close_listener(self) -> None:
        import os

        if self._listen_fd is not None:
            os.close(self._listen_fd)
            self._listen_fd = None
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    def finish(self, exiting: bool = False) -> dict:
        """End the proxy; its counters. `exiting`: the calling process ends right after (the
        supervisor), which ends the thread and closes every socket: only the counters are read."""
        if self.summary is None:
            if self.service is None:
                counts = {"allowed": 0, "denied": 0, "hosts": {}, "hosts_not_listed": 0}
                if not exiting:
                    self._close_listener()
                    if self._log is not None:
                        self._log.close()
            else:
                counts = self.service.counts() if exiting else self.service.stop()
            self.summary = {"mode": self.mode, "proxy": f"127.0.0.1:{self.port}", **counts}
        return self.summary

    def abort(self) -> None:
        """The child never started, or no client came: nothing to serve."""
        self._close_child_side()
        self._close_listener()


def take_listener(channel):
    """The listening socket's fd that the cage's child sends on `channel` (its steps from
    `child_steps`), or None: the child failed before it sent it (a plan step, which it reports on
    its error pipe; the launcher makes that the run's cage error). Either way the channel is
    closed: it carries one fd. The one hand-over, for the proxy's thread (service.py) and for
    the on-demand supervisor (`_next_step`)."""
    from sandboy.confine import netns_listener

    try:
        fd = netns_listener.receive_fd(channel)
    except BlockingIOError:
        raise  # a non-blocking channel, nothing sent yet: kept open for the next try
    except OSError:
        fd = None
    channel.close()
    return fd


# A forked supervisor hands the summary to its caller on its status pipe (RunResult.CARRIED):
# the counters as numbers, the per-host table as JSON only when there is one, so a run that
# never connected loads no `json` (≈ 5 ms with `re` on `sandboy run`'s path).


def summary_to_text(summary: dict) -> str:
    """`finish()`'s summary as one line (`summary_from_text` reads it back)."""
    port = summary["proxy"].rpartition(":")[2]
    text = " ".join((summary["mode"], port, str(summary["allowed"]), str(summary["denied"]),
                     str(summary.get("hosts_not_listed", 0))))
    if summary["hosts"]:
        import json

        text += " " + json.dumps(summary["hosts"], ensure_ascii=True, separators=(",", ":"))
    return text


def summary_from_text(text: str) -> dict:
    """The summary `summary_to_text` wrote (the same dict `finish()` returned there)."""
    mode, port, allowed, denied, not_listed, *hosts = text.split(" ", 5)
    if hosts:
        import json

        hosts = json.loads(hosts[0])
    return {"mode": mode, "proxy": f"127.0.0.1:{port}", "allowed": int(allowed), "denied": int(denied),
            "hosts": hosts or {}, "hosts_not_listed": int(not_listed)}


# fcntl(2) and poll(2) through the raw syscall the cage's C module already provides (x86-64
# numbers, as in _libc and hygiene.py): the `fcntl` and `select` modules are shared objects to
# load, ≈ 0.15 ms each on `sandboy run`'s path, for four calls.
SYS_POLL, SYS_FCNTL = 7, 72
F_GETFL, F_SETFL, F_SETOWN = 3, 4, 8
POLLIN = 1


def _signal_when_readable(fd: int, on: bool = True) -> None:
    """O_ASYNC: the kernel sends this process SIGIO when `fd` becomes readable (a datagram on
    the channel, a connection on the listener); O_NONBLOCK so that a step never blocks."""
    import os

    from sandboy.confine._libc import syscall

    if on:
        syscall(SYS_FCNTL, fd, F_SETOWN, os.getpid())
    flags = syscall(SYS_FCNTL, fd, F_GETFL)
    syscall(SYS_FCNTL, fd, F_SETFL, (flags | os.O_ASYNC | os.O_NONBLOCK) if on else (flags & ~os.O_ASYNC))


def _readable(fd: int) -> bool:
    """poll(2) with no wait: its return value is the number of ready fds (0 or 1), so the
    revents the kernel writes into the struct are never read back (the pure-Python syscall
    passes a private copy of it)."""
    from sandboy.confine._libc import syscall

    pollfd = fd.to_bytes(4, "little", signed=True) + POLLIN.to_bytes(2, "little") + bytes(2)
    return syscall(SYS_POLL, pollfd, 1, 0) > 0
