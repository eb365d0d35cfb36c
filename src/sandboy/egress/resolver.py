"""Host-side name resolution for the egress proxy.

The caged command has no resolver of its own (its namespace has no route and UDP is refused):
names travel to the proxy inside CONNECT/absolute URLs/socks5h requests and are resolved here,
on the host, with getaddrinfo. Every answer is then filtered by `Rules.address_refusal`, and
the proxy connects to an address it checked.

`SANDBOY_EGRESS_HOSTS=FILE` (in the environment of `sandboy`, i.e. the operator's): a hosts(5)
style map consulted before getaddrinfo — for tests, which point made-up names at 127.0.0.1, and
for air-gapped mirrors. It adds no permission: the names still need a `net.domains` entry and
the addresses a `net.private` range when they are not global.

The lookups run in a helper process (`_HELPER`: one thread per lookup there, `LookupHelper`
here), started at the first name that needs getaddrinfo — never in this process: getaddrinfo
blocks for as long as the host's resolver configuration says when a name server does not
answer (glibc: 5 s x 2 attempts per server), the caged command chooses the names (any under an
allowed `*.suffix`), and a thread cannot be stopped.
- In asyncio's default executor, which `asyncio.run` joins when the proxy stops, a gate step
  with a 2 s timeout asking for 12 such names ended after 10.4 s (session 8 review;
  tests/egress/test_resolver_stall.py).
- In threads nobody joined (session 8), each lookup outlived its step by up to 30 s: over quick
  steps they piled up in the gate process, 8 more per step (170 threads after 30 steps of 0.5 s
  here), each with its socket, eating the fds every later step's proxy and /proc walk need.
Killing the helper ends every lookup still running, with its threads and sockets. At most
MAX_LOOKUPS run at once per proxy; others wait (and are cancelled with the connection that asked).

Who owns the helper (session 10):
- a proxy of its own (`Resolver()`: `sandboy run`, the API — one run, one proxy): started at
  its first lookup, killed when the proxy stops, as in session 9;
- the gate (`Resolver(lookups=GateRun's LookupHelper)`, for steps whose tree the namespace
  tier's init ends): one helper for all the steps, started at the first lookup of any, kept
  while a step ends with every one of its questions answered, KILLED when a step ends with a
  question still out (a silent name server): a step's lookups never outlive the step, and the
  next step starts a fresh helper. Each question has an id never used again in the helper's
  life, and only the step that asked holds its future: a late answer reaches no other step.
  The gate kills it when it ends (any way: the runner's `finally`; if the gate itself is
  killed, the helper reads the end of its stdin and exits). A helper that died is started
  again at the next lookup; one that hangs fails its lookups at the proxy's connect timeout
  and is killed at the step's end. Never a lookup in this process instead.
Starting a helper costs a Python start-up (`-I -S`, 100-200 ms here under load): once per
`sandboy run` that looks a name up, once per gate (not per step) in the common case.
"""

import os
import socket
import sys

MAX_LOOKUPS = 8  # threads in getaddrinfo at once, per proxy
MAX_ANSWER_BYTES = 1 << 20  # a line of the helper longer than this: the helper is broken, stopped

# The helper: one request per line on stdin (`ID<TAB>NAME`), one answer per line on stdout
# (`ID<TAB>ok<TAB>FAMILY,ADDRESS FAMILY,ADDRESS…` or `ID<TAB>err<TAB>ERRNO<TAB>TEXT`), in any
# order. Built-in modules only (no json, socket or threading: ≈ 0.1 s of imports on a loaded
# machine, at every helper start). It ignores SIGINT and SIGHUP — ^C at the gate's terminal
# reaches its whole process group, the helper too; the gate decides and kills it — and exits at
# once at the end of its stdin (its owner is gone: nobody can ask or read any more), whatever
# lookups still run in its threads.
_HELPER = r"""
import _signal, _socket, _thread, posix
_signal.signal(_signal.SIGINT, _signal.SIG_IGN)
_signal.signal(_signal.SIGHUP, _signal.SIG_IGN)
lock = _thread.allocate_lock()
def ask(key, host):
    try:
        infos = _socket.getaddrinfo(host, None, 0, _socket.SOCK_STREAM, _socket.IPPROTO_TCP)
        line = key + "\tok\t" + " ".join("%d,%s" % (info[0], info[4][0]) for info in infos)
    except OSError as exc:
        line = key + "\terr\t%s\t%s" % ("" if exc.errno is None else exc.errno, exc.strerror or exc)
    except BaseException as exc:
        line = key + "\terr\t\tlookup failed: %r" % (exc,)
    data = (line.replace("\n", " ") + "\n").encode()
    with lock:
        try:
            while data:
                data = data[posix.write(1, data):]
        except OSError:
            posix._exit(0)
pending = b""
while True:
    chunk = posix.read(0, 65536)
    if not chunk:
        posix._exit(0)
    *lines, pending = (pending + chunk).split(b"\n")
    for line in lines:
        key, host = line.decode().split("\t", 1)
        _thread.start_new_thread(ask, (key, host))
"""


def load_hosts_map(path):
    """{name: [address, ...]} from a hosts(5)-style file."""
    table: dict = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            fields = line.split("#", 1)[0].split()
            if len(fields) < 2:
                continue
            for name in fields[1:]:
                table.setdefault(name.lower().rstrip("."), []).append(fields[0])
    return table


class Resolver:
    """Names to addresses for one proxy. `lookups`: a LookupHelper shared with other proxies
    one after the other (the gate's steps); None: one of its own, ended with this resolver."""

    def __init__(self, hosts=None, lookups=None):
        if hosts is None:
            path = os.environ.get("SANDBOY_EGRESS_HOSTS")
            hosts = load_hosts_map(path) if path else {}
        self.hosts = hosts
        self._slots = None  # an asyncio.Semaphore of MAX_LOOKUPS, made in the proxy's loop
        self._slots_loop = None
        self._own = lookups is None
        self.lookups = LookupHelper() if lookups is None else lookups

    async def resolve(self, loop, host: str, is_ip: bool) -> list:
        """Addresses for `host` (already normalized by rules.normalize_host), in answer order."""
        if is_ip:
            return [host]
        if host in self.hosts:
            return list(self.hosts[host])
        seen = []
        for family, address in await self._getaddrinfo(loop, host):
            if family in (socket.AF_INET, socket.AF_INET6) and address not in seen:
                seen.append(address)
        return seen

    async def _getaddrinfo(self, loop, host: str) -> list:
        """[(family, address)] from getaddrinfo in the helper (module docstring); OSError as it
        raises it, or when no helper can be had."""
        import asyncio

        if self._slots is None or self._slots_loop is not loop:  # a Semaphore is bound to one loop
            self._slots, self._slots_loop = asyncio.Semaphore(MAX_LOOKUPS), loop
        await self._slots.acquire()
        try:
            key, answer = self.lookups.ask(loop, host)
            try:
                return await answer
            finally:
                self.lookups.forget(key)
        finally:
            self._slots.release()  # (a lookup cancelled meanwhile: its thread ends with the helper)

    def close(self) -> None:
        """The proxy stops (its step has ended): a helper of its own is killed, with every lookup
        still running; a shared one is killed only when a lookup of this proxy is still running
        (`LookupHelper.release`)."""
        if self._own:
            self.lookups.close()
        else:
            self.lookups.release()


class LookupHelper:
    """The helper process (`_HELPER`) and its questions. Used by one proxy's event loop at a
    time (a gate runs its steps one after the other); `close()` from any thread once no proxy
    uses it. Liveness and reaping go through a pidfd, never the bare pid: without the namespace
    tier a gate step's sweep (reaping.sweep) kills and reaps every child of the gate, this one
    too, and the pid may then be another process's."""

    def __init__(self):
        self._process = None  # subprocess.Popen (for its pipes) while a helper runs
        self._pidfd = None
        self._loop = None  # the event loop watching the helper's stdout (the proxy now using it)
        self._pending: dict = {}  # id -> future: the questions of the proxy using it now
        self._unanswered: set = set()  # ids sent whose answer has not come back (cancelled ones too)
        self._partial = b""
        self._next_id = 0  # never reset: an id names one question in the whole life of this object
        self.started = 0  # helpers started so far (tests, bench)

    @property
    def pid(self):
        """The running helper's pid (None: none running)."""
        return None if self._process is None else self._process.pid

    def ask(self, loop, host: str) -> tuple:
        """Send one question from `loop`'s proxy: (id, future of its answer). OSError when no
        helper can be had (the connection then fails: never a lookup in this process)."""
        if "\t" in host or "\n" in host:  # (normalize_host never lets these through)
            raise OSError(f"cannot look up {host!r}")
        self._running(loop)
        key, self._next_id = str(self._next_id), self._next_id + 1
        answer = self._pending[key] = loop.create_future()
        try:
            os.write(self._process.stdin.fileno(), f"{key}\t{host}\n".encode())
        except OSError as exc:  # the helper is gone (killed from outside, or stopped)
            self._pending.pop(key, None)
            self.close()
            raise OSError(f"cannot start a name lookup: {exc}") from None
        self._unanswered.add(key)
        return key, answer

    def forget(self, key: str) -> None:
        """The proxy no longer waits for question `key` (answered, or its connection ended)."""
        self._pending.pop(key, None)

    def _running(self, loop) -> None:
        """A live helper whose answers `loop` reads: the running one, or one started now."""
        if self._process is not None and not _exited(self._pidfd):
            if self._loop is not loop:  # a new proxy (the next step): it reads the answers now
                self._unwatch()
                loop.add_reader(self._process.stdout.fileno(), self._answers)
                self._loop = loop
            return
        self.close()
        import subprocess

        try:
            process = subprocess.Popen([sys.executable, "-I", "-S", "-c", _HELPER], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True)
        except (OSError, subprocess.SubprocessError) as exc:  # no process to be had (a pids limit, no fds)
            raise OSError(f"cannot start a name lookup: {exc}") from None
        try:
            self._pidfd = os.pidfd_open(process.pid)
        except OSError as exc:  # (already reaped by a sweep: see the class docstring)
            _disown(process)
            raise OSError(f"cannot start a name lookup: {exc}") from None
        self._process, self._partial = process, b""
        self.started += 1
        os.set_blocking(process.stdout.fileno(), False)
        loop.add_reader(process.stdout.fileno(), self._answers)
        self._loop = loop

    def _answers(self) -> None:  # in the loop's thread: the helper's stdout is readable
        try:
            data = os.read(self._process.stdout.fileno(), 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:  # the helper ended: its lookups with it
            self.close(OSError("the name lookup process ended"))
            return
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        if len(self._partial) > MAX_ANSWER_BYTES:
            self.close(OSError("the name lookup process sent an answer too long"))
            return
        for line in lines:
            try:
                key, verdict, rest = line.decode().split("\t", 2)
                if verdict == "ok":
                    infos = [(int(family), address) for family, address in
                             (item.split(",", 1) for item in rest.split())]
                elif verdict == "err":
                    code, text = rest.split("\t", 1)
                    error = OSError(int(code), text) if code else OSError(text)
                else:
                    raise ValueError(verdict)
            except ValueError:  # not the helper's own words: stop trusting it
                self.close(OSError("the name lookup process sent garbage"))
                return
            self._unanswered.discard(key)
            answer = self._pending.get(key)
            if answer is None or answer.done():  # nobody waits for it any more (the connection ended)
                continue
            if verdict == "err":
                answer.set_exception(error)
            else:
                answer.set_result(infos)

    def release(self) -> None:
        """The proxy using the helper stops (its step has ended). Every question of it that is
        still out — a name server that does not answer — ends now, with the helper: killed, so
        none of its lookups outlives the step or runs on into the next one; the next lookup
        starts a new helper. With every question answered the helper is kept for the next step."""
        if self._unanswered or self._partial:
            self.close()
            return
        self._unwatch()
        self._fail_pending(OSError("the proxy stopped"))

    def _unwatch(self) -> None:
        loop, self._loop = self._loop, None
        if loop is None or self._process is None:
            return
        try:
            if not loop.is_closed():
                loop.remove_reader(self._process.stdout.fileno())
        except (ValueError, RuntimeError):
            pass

    def _fail_pending(self, error: OSError) -> None:
        pending, self._pending = self._pending, {}
        for answer in pending.values():
            if not answer.done():
                answer.set_exception(error)

    def close(self, error=None) -> None:
        """Kill the helper, and with it every lookup still running; the answers awaited fail
        (`error`, else "the proxy stopped"). Its owner ends (a proxy of its own, the gate), or
        the helper ended or misbehaved: the next `ask` starts another."""
        self._unwatch()
        process, self._process = self._process, None
        pidfd, self._pidfd = self._pidfd, None
        self._unanswered.clear()
        self._partial = b""
        if process is not None:
            import _signal as signal

            try:
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            except ProcessLookupError:  # it has exited already
                pass
            try:
                os.waitid(os.P_PIDFD, pidfd, os.WEXITED)  # at once after SIGKILL: never a zombie of the gate
            except ChildProcessError:  # reaped already (a step's sweep, without the namespace tier)
                pass
            os.close(pidfd)
            _disown(process)
            process.stdin.close()
            process.stdout.close()
        self._fail_pending(error or OSError("the proxy stopped"))


def _exited(pidfd: int) -> bool:
    """Has the helper behind `pidfd` exited (killed from outside, a step's sweep)? A pidfd turns
    readable when its process has exited, reaped or not (and cannot name another process)."""
    import select

    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(0))


def _disown(process) -> None:
    """Popen must never waitpid the helper's bare pid itself (its `poll`, or the module's clean-up
    of dropped Popens): reaped through the pidfd, that pid may already be another process's."""
    process.returncode = -9
