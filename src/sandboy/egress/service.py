"""The proxy for one run, in a thread of the calling process (`sandboy run`, the API, the gate).

Why a thread and not a process: the listening socket is handed to this process by the child
(namespace mode) or made here (fallback); a thread needs no second Python start-up (≈ 20 ms)
and dies with its process, so the proxy can never outlive the run that owns it. `stop()` closes
the listening socket and every connection, and joins the thread: no fd, port or thread remains.

Set-up is kept off the run's path (bench/bench_egress.py, "set-up"):
- `channel=`: the thread itself receives the listener the cage's child sends, so the caller goes
  straight on to wait for the child instead of waiting to be woken for the hand-over;
- the thread waits for the first client (or stop) with poll(2) on the bare fd before it imports
  asyncio, h11 and `socket` (tens of ms) and builds its event loop: a run that never connects
  never pays for them, and a client that connects early waits in the listen backlog, nothing is
  lost;
- until then this module and what it imports (`_thread`, `_socket`, `select`, `egress.log`) load
  no `socket`, `threading`, `json`, `re` or `enum`: on `sandboy run`'s path those cost ≈ 15 ms
  (tests/egress/test_run.py checks the modules a command that never connects imports).
`stop()` wakes the thread through a pipe, in whichever phase it is.

Start the service only after the last fork that may still run Python in the child (the cage's
child runs its plan, which is raw system calls, then execs).
"""

import _thread
import os
import select

from sandboy.egress.log import EgressLog


class ProxyService:
    def __init__(self, rules, listen_sock=None, log_path=None, resolver=None, channel=None, log=None):
        """`log`: an EgressLog opened by the caller (`log_path` is then not opened again)."""
        if (listen_sock is None) == (channel is None):
            raise ValueError("ProxyService needs a listening socket or a channel to receive one from")
        self.rules = rules
        self.listen_sock = listen_sock  # a socket.socket or _socket.socket (given), or made to serve
        self._listen_fd = None          # the listener received over `channel`, until it is served
        self._channel = channel
        self.log = log if log is not None else EgressLog(log_path)
        self._resolver = resolver
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._started = False
        # held while the thread lives: stop() waits for it instead of a join()
        self._ended = _thread.allocate_lock()
        self._ready = _thread.allocate_lock()  # released once the listener is held (or never will be)
        self._ready.acquire()
        self.error = None

    @property
    def port(self) -> int:
        """The given listener's port (callers that hand the service a channel know theirs:
        EgressSession.port)."""
        return self.listen_sock.getsockname()[1]

    def start(self, wait: bool = True) -> "ProxyService":
        """Serve from a new thread. `wait=False` returns at once: one thread hand-off less per
        run, which on a loaded machine costs milliseconds; the supervisor uses it. `wait=True`
        returns once the listener is held (and raises what kept it from being received)."""
        # _thread, not threading.Thread: Thread.start() blocks until the new thread has run,
        # which on a loaded machine is a scheduler wake-up (milliseconds) in the supervisor's path.
        self._ended.acquire()
        try:
            _thread.start_new_thread(self._run, ())
        except BaseException:
            self._ended.release()
            raise
        self._started = True
        if wait:
            with self._ready:
                pass
            if self.error is not None:
                raise self.error
        return self

    def _run(self) -> None:
        try:
            self._main()
        finally:
            self._ended.release()

    def _main(self) -> None:
        try:
            if self._channel is not None:
                self._receive_listener()
            self._set_ready()
            fd = self._listen_fd if self.listen_sock is None else self.listen_sock.fileno()
            if fd is None:
                return  # the child failed before it sent the listener: nothing to serve
            poller = select.poll()  # not select(2): it fails for fd numbers >= 1024
            poller.register(fd, select.POLLIN)
            poller.register(self._wake_r, select.POLLIN)
            if any(ready == self._wake_r for ready, _ in poller.poll()):
                return  # stopped before any client came
            self._serve()
        except BaseException as exc:  # surfaced by start() or stop(), never lost
            self.error = exc
        finally:
            self._set_ready()

    def _set_ready(self) -> None:
        if self._ready.locked():
            self._ready.release()

    def _receive_listener(self) -> None:
        from sandboy.egress.session import take_listener  # the caller that gave the channel loaded it

        self._listen_fd = take_listener(self._channel)  # None: the child failed before sending it
        self._channel = None

    def _serve(self) -> None:
        import asyncio
        import socket

        from sandboy.egress.proxy import EgressProxy

        if self.listen_sock is None:
            self.listen_sock = socket.socket(fileno=self._listen_fd)
            self._listen_fd = None
        elif type(self.listen_sock) is not socket.socket:  # a bare _socket.socket (the fallback's)
            self.listen_sock = socket.socket(fileno=self.listen_sock.detach())

        async def serve():
            loop = asyncio.get_running_loop()
            stopped = asyncio.Event()
            loop.add_reader(self._wake_r, stopped.set)  # stop() writes the pipe
            try:
                self.proxy = EgressProxy(self.rules, self._resolver, self.log)
                await self.proxy.serve(self.listen_sock, stopped)
            finally:
                loop.remove_reader(self._wake_r)

        asyncio.run(serve())

    def counts(self) -> dict:
        """The counters so far, without stopping (a supervisor about to exit reports these:
        its process ending ends the thread, the listener and every connection)."""
        return self.log.summary()

    def stop(self) -> dict:
        """End the proxy and return its counters (for --status-json)."""
        if self._started:
            try:
                os.write(self._wake_w, b"x")
            except BlockingIOError:
                pass  # already woken
            with self._ended:  # the thread has ended
                self._started = False
        for fd in (self._wake_r, self._wake_w, self._listen_fd):
            if fd is not None:
                os.close(fd)
        self._wake_r = self._wake_w = self._listen_fd = None
        for sock in (self.listen_sock, self._channel):
            if sock is not None:
                try:
                    sock.close()
                except OSError:
                    pass
        summary = self.log.summary()
        self.log.close()
        return summary
