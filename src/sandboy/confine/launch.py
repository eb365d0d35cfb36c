"""Start a confined command: exec mode (the CLI becomes the command) or supervised mode.

Python API
----------
    from sandboy.confine.launch import spawn, run, RunResult

    proc = spawn(argv, policy, cwd=repo, repo=repo, timeout=600,
                 stdin=None, stdout=fd, stderr=fd)   # PolicyError (2) / CageError (125) before anything runs
    proc.pid; proc.kill()                           # kill() ends the whole tree
    result = proc.wait()                            # RunResult
    result = run(argv, policy, cwd=..., timeout=...)   # spawn + wait

`policy` is a `Policy` or a prebuilt `Cage` (cage.build): the Landlock ruleset and the BPF
program are built once in the parent; the child only applies them, then execs. No second Python
start-up happens anywhere.

Process tree of `spawn`:

    caller ── supervisor (forked, PR_SET_CHILD_SUBREAPER) ── confined child ── its descendants

The supervisor waits for the child (until the timeout), then kills every remaining descendant:
orphans that called setsid or double-forked are reparented to it, because it is a subreaper, and
with `limits.processes` as root all of them sit in a pids cgroup. Nothing outlives the run.
"""

import _signal as signal  # the C module: `signal` imports enum (≈ 6 ms of start-up)
import os
import sys
import time

from sandboy.errors import EXIT_CAGE, EXIT_NOT_FOUND, CageError

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36

OUTCOMES = ("exited", "signaled", "timed_out", "killed", "cage_error", "not_found", "not_executable")


class RunResult:
    """What happened to one confined command. `returncode` follows DESIGN.md's exit codes."""

    __slots__ = ("returncode", "outcome", "signal", "duration", "error", "enforced", "degraded", "warnings")

    def __init__(self, returncode, outcome, signal=None, duration=0.0, error=None,
                 enforced=None, degraded=(), warnings=()):
        self.returncode = returncode
        self.outcome = outcome
        self.signal = signal
        self.duration = duration
        self.error = error
        self.enforced = enforced or {}
        self.degraded = list(degraded)
        self.warnings = list(warnings)

    @property
    def ok(self) -> bool:
        return self.outcome == "exited" and self.returncode == 0

    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.__slots__}

    def __repr__(self):
        return f"RunResult(outcome={self.outcome!r}, returncode={self.returncode}, signal={self.signal})"


NO_PIDS_CGROUP = ("limits.processes: running as root, RLIMIT_NPROC does not bind uid 0 and no pids "
                  "cgroup could be created; refusing to run without the limit")


def _timeout_for(cage, timeout):
    """The run's deadline in seconds: the caller's timeout or the policy's wall_seconds, the smaller."""
    wall = cage.policy.limits.wall_seconds
    return wall if wall and (timeout is None or wall < timeout) else timeout


def _make_room(group, limit: int) -> None:
    """In a pids cgroup the caller has joined: room for what is in it now plus the command's
    tree, or "max" without a limit, so a previous run's limit does not linger."""
    group.set_max(group.current() + limit if limit else "max")


def needs_supervisor(policy) -> bool:
    """A parent must stay for a wall-clock limit, as root for a process limit (cgroup), and
    to remove the private `{tmp}` after the run: in exec mode nothing is left to remove it,
    and every run leaked a /tmp/sandboy-* directory (with whatever the command wrote there)."""
    from sandboy.policy.resolve import uses_tmp

    limits = policy.limits
    return bool(limits.wall_seconds or (limits.processes and os.geteuid() == 0) or uses_tmp(policy))


# --- exec mode: the CLI process becomes the command -------------------------------------


def exec_confined(argv, cage, on_applied=None):
    """Apply `cage` to this process and execve `argv`. Returns only an exit code on failure."""
    from sandboy.confine import _libc

    paths, args, envp = cage.exec_args(argv)
    cage.apply_here()
    if on_applied is not None:
        on_applied()
    try:
        _libc.exec_first(paths, args, envp)
    except OSError as exc:
        sys.stderr.write(f"sandboy: {argv[0]}: {exc.strerror}\n")
        return _libc.exit_code_for_exec_error(exc.errno)


# --- supervised mode and the API ------------------------------------------------------------


class Confined:
    """A running confined command.

    Supervised: `pid` is the supervisor's, which reports the outcome over `status_fd`.
    Direct: `pid` is the command's; `status_fd` carries only a cage or exec error.
    """

    def __init__(self, pid: int, status_fd: int, cage, owns_cage: bool, started: float, supervised: bool,
                 decode_error):
        self.pid = pid
        self._decode_error = decode_error
        self.supervised = supervised
        self._status_fd = status_fd
        self._cage = cage
        self._owns_cage = owns_cage
        self._started = started
        self._result = None

    def kill(self) -> None:
        """End the run now: the supervisor kills the whole tree; `wait()` reports "killed"."""
        if self._result is None:
            try:
                os.kill(self.pid, signal.SIGTERM if self.supervised else signal.SIGKILL)
            except ProcessLookupError:
                pass

    def wait(self) -> RunResult:
        if self._result is not None:
            return self._result
        _, status = os.waitpid(self.pid, 0)
        data = _read_all(self._status_fd)
        duration = time.monotonic() - self._started
        message = data.decode("utf-8", "replace") if self.supervised else self._decode_error(data)
        if self.supervised:
            record = message.split("\0")
            if len(record) == 4:
                outcome, code, sig, error = record
                result = RunResult(int(code), outcome, int(sig) or None, duration, error or None)
            else:  # the supervisor itself died: never report that as a pass
                result = RunResult(EXIT_CAGE, "cage_error", None, duration, "the sandboy supervisor died")
        else:
            result = _result_from(status, message, None)
            result.duration = duration
        result.enforced = self._cage.enforced
        result.degraded = list(self._cage.degraded)
        result.warnings = list(self._cage.warnings)
        if self._owns_cage:
            self._cage.close()
        self._result = result
        return result


def _read_all(fd: int) -> bytes:
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except InterruptedError:
            continue
        if not chunk:
            break
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


def _start_child(argv, cage, stdio, err_w, first=()) -> int:
    """Fork the confined child: it runs `first` ((label, step) pairs), then the cage's plan,
    then execs (see `_libc`)."""
    from sandboy.confine import _libc

    paths, args, envp = cage.exec_args(argv)
    plan = [step for _, step in (*first, *cage.plan(stdio))]
    return _libc.fork_exec(plan, paths, args, envp, err_w)


def _child_message(argv, cage, stdio, data: bytes, first=()) -> str:
    """The child's binary error report as "cage:<text>" / "exec:<code>:<text>" / ""."""
    from sandboy.confine import _libc

    report = _libc.read_child_error(data)
    if report is None:
        return ""
    index, err = report
    if index >= 0:
        return "cage:" + cage.describe_failure(index, err, stdio, first)
    return f"exec:{_libc.exit_code_for_exec_error(err)}:{argv[0]}: {os.strerror(err)}"


def _result_from(status: int, child_message: str, outcome) -> RunResult:
    """Classify a wait status plus the child's error message (see `_child_message`)."""
    kind, _, detail = child_message.partition(":")
    if kind == "cage":
        return RunResult(EXIT_CAGE, "cage_error", error=detail)
    if kind == "exec":
        code_text, _, text = detail.partition(":")
        code = int(code_text)
        return RunResult(code, "not_found" if code == EXIT_NOT_FOUND else "not_executable", error=text)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return RunResult(128 + sig, outcome or "signaled", sig)
    code = os.waitstatus_to_exitcode(status)
    if outcome is not None:  # timed out or killed, but the command exited on its own first
        return RunResult(128 + signal.SIGKILL, outcome, signal.SIGKILL)
    return RunResult(code, "exited")


def spawn(argv, policy, cwd=None, repo=None, timeout=None, stdin=None, stdout=None, stderr=None,
          supervise=None, pids_group=None) -> Confined:
    """Start `argv` confined by `policy` (a Policy or a prebuilt Cage).

    `supervise`: None decides by need (a timeout, `limits.wall_seconds`, or `limits.processes`
    as root); True always keeps a supervisor, which also guarantees that no descendant of the
    command outlives it (the gate runner asks for this); False never does (a timeout is then
    refused).

    `pids_group`: a `PidsCgroup` the caller has already joined (see cgroup.py): a run with
    `limits.processes` as root then counts inside it instead of making and joining its own.
    """
    from sandboy.confine.cage import Cage, for_run

    if not argv:
        raise ValueError("argv must name a command")
    cage, owns = (policy, False) if isinstance(policy, Cage) else for_run(policy, cwd=cwd, repo=repo)
    timeout = _timeout_for(cage, timeout)
    needed = timeout is not None or needs_supervisor(cage.policy)
    if supervise is None:
        supervise = needed
    elif not supervise and needed:
        raise ValueError("a timeout or limits.processes (as root) needs supervise=True")
    stdio = (stdin, stdout, stderr)
    status_r, status_w = os.pipe2(os.O_CLOEXEC)
    started = time.monotonic()
    try:
        pid = _start_child(argv, cage, stdio, status_w) if not supervise else os.fork()
    except OSError:
        os.close(status_r)
        os.close(status_w)
        if owns:
            cage.close()
        raise
    if pid == 0:  # the supervisor
        code = 1
        try:
            os.close(status_r)
            _supervise(list(argv), cage, timeout, stdio, status_w, pids_group)
            code = 0
        finally:
            os._exit(code)
    os.close(status_w)
    return Confined(pid, status_r, cage, owns, started, supervise, lambda data: _child_message(argv, cage, stdio, data))


def run(argv, policy, cwd=None, repo=None, timeout=None, stdin=None, stdout=None, stderr=None,
        supervise=None, pids_group=None) -> RunResult:
    """Run `argv` confined by `policy` and wait for it (see module docstring)."""
    return spawn(argv, policy, cwd=cwd, repo=repo, timeout=timeout, stdin=stdin, stdout=stdout,
                 stderr=stderr, supervise=supervise, pids_group=pids_group).wait()


class LocalRun:
    """A confined command supervised by the CALLING process, with no supervisor process.

    For a caller that runs commands one after another and has no other children — the gate
    runner: it becomes a child subreaper (orphans of the command come back to it), watches
    `pidfd` for the command's exit and `time_left()` for its deadline, then `end()` kills every
    descendant still alive. This saves the supervisor's fork, about 2.5 ms per command
    (docs/performance.md). `wait()` reaps with waitpid(-1): other children of the caller would be
    collected too, so only a dedicated runner should use this.
    """

    def __init__(self, argv, cage, timeout=None, stdio=(None, None, None), pids_group=None):
        from sandboy.confine._libc import prctl

        prctl(PR_SET_CHILD_SUBREAPER, 1)
        limit = cage.policy.limits.processes
        if os.geteuid() == 0 and (limit or pids_group is not None):
            if pids_group is None:
                raise CageError(NO_PIDS_CGROUP)
            try:
                _make_room(pids_group, limit)
            except OSError as exc:
                raise CageError(f"limits.processes: cannot set pids.max: {exc.strerror}") from None
        timeout = _timeout_for(cage, timeout)
        self.argv, self.cage, self.stdio = list(argv), cage, stdio
        self.started = time.monotonic()
        self.deadline = self.started + timeout if timeout else None
        self._err_r, err_w = os.pipe2(os.O_CLOEXEC)
        from sandboy.confine._libc import SYS_PRCTL

        # If the runner is killed outright, its command goes too (its own children are still
        # ours to kill while we live; a runner killed by SIGKILL cannot sweep them).
        self._first = (("die with the runner", (SYS_PRCTL, False, PR_SET_PDEATHSIG, signal.SIGKILL)),)
        try:
            self.pid = _start_child(self.argv, cage, stdio, err_w, self._first)
        except BaseException:
            os.close(self._err_r)
            raise
        finally:
            os.close(err_w)
        self.pidfd = os.pidfd_open(self.pid)
        self._status = None
        self._outcome = None
        self._ended = False
        self._result = None

    def time_left(self):
        """Seconds until the deadline (never negative), or None without one."""
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def exited(self) -> bool:
        """Has the command itself exited? (Reaps it; its descendants may still run.)"""
        if self._status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self._status = status
        return self._status is not None

    def end(self, outcome=None) -> None:
        """Kill the command (if still running) and every descendant; `outcome` names why."""
        if outcome is not None and self._outcome is None and self._status is None:
            self._outcome = outcome
        if self._ended:
            return
        if self._status is None:
            _kill_pass(None)
            self._status = os.waitpid(self.pid, 0)[1]
        _kill_descendants(None)
        self._ended = True

    def kill(self) -> None:
        self.end("killed")

    def wait(self) -> RunResult:
        if self._result is None:
            if self._status is None:
                self._status = os.waitpid(self.pid, 0)[1]
            self.end()
            os.close(self.pidfd)
            message = _child_message(self.argv, self.cage, self.stdio, _read_all(self._err_r), self._first)
            result = _result_from(self._status, message, self._outcome)
            result.duration = time.monotonic() - self.started
            result.enforced = self.cage.enforced
            result.degraded = list(self.cage.degraded)
            result.warnings = list(self.cage.warnings)
            self._result = result
        return self._result


class _Stop(Exception):
    pass


def _on_stop(signum, frame):
    raise _Stop()


def _supervise(argv, cage, timeout, stdio, status_w, pids_group=None) -> None:
    from sandboy.confine._libc import prctl

    signal.signal(signal.SIGINT, signal.SIG_IGN)   # a terminal ^C reaches the command itself
    signal.signal(signal.SIGTERM, _on_stop)        # Confined.kill() and the caller's death
    # Held back until we wait: a stop request that arrived while the child was being started
    # would otherwise escape before we know the child's pid (and leave its tree running).
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    if os.getppid() == 1:
        raise SystemExit  # the caller is already gone

    def report(outcome, code, sig=0, error=""):
        os.write(status_w, f"{outcome}\0{code}\0{sig}\0{error}".encode())

    limit = cage.policy.limits.processes
    if pids_group is not None and os.geteuid() == 0:
        # We were forked inside it (it also holds the caller and us). The final kill walks our
        # descendants, never the group.
        try:
            _make_room(pids_group, limit)
        except OSError as exc:
            report("cage_error", EXIT_CAGE, 0, f"limits.processes: cannot set pids.max: {exc.strerror}")
            return
    group = None
    if limit and os.geteuid() == 0 and pids_group is None:
        from sandboy.confine.cgroup import PidsCgroup

        # The supervisor joins its own group (+1 for itself) and the child is born inside.
        group = PidsCgroup.create_and_join(limit + 1)
        if group is None:
            report("cage_error", EXIT_CAGE, 0, NO_PIDS_CGROUP)
            return

    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    try:
        child = _start_child(argv, cage, stdio, err_w)
    except OSError as exc:
        report("cage_error", EXIT_CAGE, 0, f"fork failed: {exc.strerror}")
        return
    os.close(err_w)

    outcome = None
    status = None
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # a pending stop lands here
        status = _wait_until(child, timeout)
        if status is None:
            outcome = "timed_out"
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    except _Stop:
        outcome = "killed"
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # from here on the tree is ours to end
    if status is None:
        _kill_pass(group)
        _, status = os.waitpid(child, 0)
    _kill_descendants(group)
    if group is not None:
        try:
            group.leave()
        except OSError:
            pass
        group.remove()

    result = _result_from(status, _child_message(argv, cage, stdio, _read_all(err_r)), outcome)
    report(result.outcome, result.returncode, result.signal or 0, result.error or "")


def _wait_until(pid: int, timeout):
    """The child's wait status, or None when `timeout` seconds passed first."""
    if timeout is None:
        return os.waitpid(pid, 0)[1]
    import select

    pidfd = os.pidfd_open(pid)
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not poller.poll(max(1, int(left * 1000))):
                if time.monotonic() >= deadline:
                    return None
                continue
            return os.waitpid(pid, 0)[1]
    finally:
        os.close(pidfd)


def _descendants() -> set[int]:
    """Every process below this one, walking /proc/<pid>/task/<tid>/children."""
    found: set[int] = set()
    todo = [os.getpid()]
    while todo:
        pid = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/children", "rb") as fh:
                    kids = [int(x) for x in fh.read().split()]
            except OSError:
                continue
            for kid in kids:
                if kid not in found:
                    found.add(kid)
                    todo.append(kid)
    return found


def _kill_pass(cgroup) -> None:
    pids = _descendants()
    if cgroup is not None:
        pids.update(cgroup.pids())
    pids.discard(os.getpid())  # the supervisor sits in its own per-run group
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _kill_descendants(cgroup) -> None:
    """SIGKILL and reap until no descendant is left. Orphans come back to us (subreaper), so
    each round sees the ones the previous round's deaths released."""
    while True:
        _kill_pass(cgroup)
        try:
            os.waitpid(-1, 0)
            # Reap the whole batch before walking /proc again: one walk per reaped child made the
            # sweep quadratic (2,000 processes took 26 s past a 3 s timeout).
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            if cgroup is None or not set(cgroup.pids()) - {os.getpid()}:
                return
            time.sleep(0.001)
