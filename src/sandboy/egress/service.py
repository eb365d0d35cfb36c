"""The proxy for one run, in a thread of the calling process (`sandboy run`, the API, the gate).

Why a thread and not a process: the listening socket is handed to this process by the child
(namespace mode) or made here (fallback); a thread needs no second Python start-up (≈ 20 ms)
and dies with its process, so the proxy can never outlive the run that owns it. `stop()` closes
the listening socket and every connection, and joins the thread: no fd, port or thread remains.

Start the service only after the last fork that may still run Python in the child (the cage's
child runs its plan, which is raw system calls, then execs).
"""

import threading

from sandboy.egress.log import EgressLog


class ProxyService:
    def __init__(self, rules, listen_sock, log_path=None, resolver=None):
        self.rules = rules
        self.listen_sock = listen_sock
        self.log = EgressLog(log_path)
        self._resolver = resolver
        self._loop = None
        self._stopped = None
        self._thread = None
        self._ready = threading.Event()
        self.error = None

    @property
    def port(self) -> int:
        return self.listen_sock.getsockname()[1]

    def start(self, wait: bool = True) -> "ProxyService":
        """Serve from a new thread. `wait=False` returns at once (connections queue in the
        listen backlog until the loop runs): one thread hand-off less per run, which on a loaded
        machine costs milliseconds; the supervisor uses it."""
        self._thread = threading.Thread(target=self._main, name="sandboy-egress", daemon=True)
        self._thread.start()
        if wait:
            self._ready.wait()
            if self.error is not None:
                raise self.error
        return self

    def _main(self) -> None:
        import asyncio

        from sandboy.egress.proxy import EgressProxy

        async def serve():
            self._loop = asyncio.get_running_loop()
            self._stopped = asyncio.Event()
            proxy = EgressProxy(self.rules, self._resolver, self.log)
            self.proxy = proxy
            self._ready.set()
            await proxy.serve(self.listen_sock, self._stopped)

        try:
            asyncio.run(serve())
        except BaseException as exc:  # surfaced by start() or stop(), never lost
            self.error = exc
        finally:
            self._ready.set()

    def counts(self) -> dict:
        """The counters so far, without stopping (a supervisor about to exit reports these:
        its process ending ends the thread, the listener and every connection)."""
        return self.log.summary()

    def stop(self) -> dict:
        """End the proxy and return its counters (for --status-json)."""
        if self._thread is not None:
            loop, stopped = self._loop, self._stopped
            if loop is not None and self._thread.is_alive():
                try:
                    loop.call_soon_threadsafe(stopped.set)
                except RuntimeError:
                    pass  # the loop already ended
            self._thread.join()
            self._thread = None
        try:
            self.listen_sock.close()
        except OSError:
            pass
        summary = self.log.summary()
        self.log.close()
        return summary
