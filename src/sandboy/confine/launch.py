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
import errno
import os
import sys
import time

from sandboy.errors import EXIT_CAGE, EXIT_NOT_FOUND, CageError

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36

# What happened to a run (`RunResult.outcome`). Plain strings, so JSON reports carry them as they
# are, and no `enum` import on the `sandboy run` path.
EXITED = "exited"                  # the command exited by itself; `returncode` is its status
SIGNALED = "signaled"              # the command died of a signal it got (128 + n)
TIMED_OUT = "timed_out"            # the deadline passed: the tree was killed (128 + 9)
KILLED = "killed"                  # the caller ended the run (Confined.kill, SIGTERM to the supervisor)
CAGE_ERROR = "cage_error"          # the cage could not be applied: nothing ran (125)
NOT_FOUND = "not_found"            # the command does not exist inside the cage (127)
NOT_EXECUTABLE = "not_executable"  # it exists but cannot be executed there (126)
PLANTED = "planted"                # it ran, and left code for the host's next git command (125, ADR 0019)
OUTCOMES = (EXITED, SIGNALED, TIMED_OUT, KILLED, CAGE_ERROR, NOT_FOUND, NOT_EXECUTABLE, PLANTED)


class RunResult:
    """What happened to one confined command.

    `outcome`: one of OUTCOMES. `returncode` follows docs/design.md's exit codes. `signal`: the signal
    that ended the command, or None. `error`: why the command did not run or was cut short, in
    words — which cage step failed and why, "bash: No such file or directory" for an exec that
    failed, a pids-cgroup refusal, "the sandboy supervisor died" — or None for a run that
    reached its own end (even a failing one: its exit status says how it went).
    """

    __slots__ = ("returncode", "outcome", "signal", "duration", "error", "enforced", "degraded", "warnings",
                 "egress")

    def __init__(self, returncode, outcome, signal=None, duration=0.0, error=None,
                 enforced=None, degraded=(), warnings=(), egress=None):
        self.returncode = returncode
        self.outcome = outcome
        self.signal = signal
        self.duration = duration
        self.error = error
        self.enforced = enforced or {}
        self.degraded = list(degraded)
        self.warnings = list(warnings)
        self.egress = egress  # with net.domains: the proxy's mode and allow/deny counts

    @property
    def ok(self) -> bool:
        return self.outcome == EXITED and self.returncode == 0

    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.__slots__}

    def __repr__(self):
        return (f"RunResult(outcome={self.outcome!r}, returncode={self.returncode}, signal={self.signal}, "
                f"error={self.error!r})")


NO_PIDS_CGROUP = ("limits.processes: running as root, RLIMIT_NPROC does not bind uid 0 and no pids "
                  "cgroup could be created; refusing to run without the limit (run it where "
                  "/sys/fs/cgroup is writable — not inside another cage — or with a policy or gate "
                  "ceiling without limits.processes)")


def _timeout_for(cage, timeout):
    """The run's deadline in seconds: the caller's timeout or the policy's wall_seconds, the smaller."""
    wall = cage.policy.limits.wall_seconds
    return wall if wall and (timeout is None or wall < timeout) else timeout


def _make_room(group, limit: int) -> None:
    """In a pids cgroup the caller has joined: room for what is in it now plus the command's
    tree, or "max" without a limit, so a previous run's limit does not linger."""
    group.set_max(group.current() + limit if limit else "max")


def needs_supervisor(policy, cage=None) -> bool:
    """A parent must stay for a wall-clock limit, as root for a process limit (cgroup), and
    to remove the private `{tmp}` after the run: in exec mode nothing is left to remove it,
    and every run leaked a /tmp/sandboy-* directory (with whatever the command wrote there).
    Not for `{tmp}` under the namespace tier (`cage` given): the run's `{tmp}` is a tmpfs that
    dies with it, and exec mode's waiting parent removes the empty mount point. And for the
    post-run git check (a write root holding a repository, ADR 0019) without the tier: exec
    mode then has no parent left to check once every process of the run has ended (under the
    tier its waiting parent does it, after the PID namespace is empty)."""
    from sandboy.policy.resolve import uses_tmp

    limits = policy.limits
    private_tmp = cage is not None and cage.tier is not None and cage.tier.tmp_private
    # net.domains: the egress proxy lives in the supervisor, as long as the command's whole tree
    return bool(limits.wall_seconds or (limits.processes and os.geteuid() == 0)
                or (uses_tmp(policy) and not private_tmp) or policy.net.egress
                or (cage is not None and cage.tier is None and _git_check_applies(cage)))


def _git_check_applies(cage) -> bool:
    if not cage.policy.fs.write or not cage.policy.fs.protect_defaults:
        return False  # before importing anything: most policies stop here
    from sandboy.confine import gitcheck

    return gitcheck.applies(cage)


def _git_snapshot(cage):
    """The post-run git check's snapshot for one run (None: nothing to check). Taken just
    before the child starts: everything the command changes is after it."""
    if not cage.policy.fs.write or not cage.policy.fs.protect_defaults:
        return None
    from sandboy.confine import gitcheck

    return gitcheck.for_cage(cage)


def _git_verdict(snap, result: RunResult) -> RunResult:
    """After the run and every process of it ended: a run that left code for the host's next
    git command fails closed (125, outcome PLANTED) whatever its own status, with what was
    moved where (ADR 0019)."""
    if snap is None:
        return result
    from sandboy.confine import gitcheck

    message = gitcheck.after_run(snap)
    if not message:
        return result
    return RunResult(EXIT_CAGE, PLANTED, None, result.duration, message, result.enforced, result.degraded,
                     result.warnings, result.egress)


# --- exec mode: the CLI process becomes the command -------------------------------------


def exec_confined(argv, cage, on_applied=None):
    """Apply `cage` to this process and execve `argv`. Returns only an exit code on failure.

    Only where `terminal.exec_in_place_possible()`: the command then leads a session of its own
    and no terminal is within its reach; elsewhere the CLI runs it supervised (issue 7)."""
    from sandboy.confine import _libc
    from sandboy.confine.terminal import enter_own_session

    if cage.tier is not None:
        return _wait_in_namespace(argv, cage, on_applied)
    from sandboy.confine import explain  # imported now: inside the cage it may not be readable

    paths, args, envp = cage.exec_args(argv)
    try:
        enter_own_session()
    except OSError as exc:
        raise CageError(f"cannot apply the cage: new session: {exc.strerror}") from None
    cage.apply_here()
    if on_applied is not None:
        on_applied()
    try:
        _libc.exec_first(paths, args, envp)
    except OSError as exc:
        reason = explain.not_executable(argv[0], cage) if exc.errno == errno.EACCES else ""
        sys.stderr.write(f"sandboy: {argv[0]}: {exc.strerror}" + (f": {reason}" if reason else "") + "\n")
        return _libc.exit_code_for_exec_error(exc.errno)


def _wait_in_namespace(argv, cage, on_applied):
    """Exec mode under the namespace tier: this process cannot enter a new PID namespace, so
    it starts the namespace's init (which leads a new session; the command runs in it) and
    waits in C, passing signals on to the init's process group (`_libc.wait_forwarding`): no
    Python runs while the command does. The command's exit status is passed through, and its
    death by a signal repeated on this process."""
    from sandboy.confine import _libc
    from sandboy.confine.terminal import session_steps

    first = session_steps()
    snap = _git_snapshot(cage)
    # The command runs before fork_exec returns (it waits until the command has exec'd): the
    # signals the init passes on are held from now until wait_forwarding takes them, else one
    # sent early would end this process (default action) and never reach the command.
    held = signal.pthread_sigmask(signal.SIG_BLOCK, _libc.FORWARDED_SIGNALS)
    try:
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        try:
            pid = _start_child(argv, cage, (None, None, None), err_w, first)
        finally:
            os.close(err_w)
        status = _libc.wait_forwarding(pid)  # the init has exited: the PID namespace is empty
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
    message, reported = _child_report(argv, cage, (None, None, None), _read_all(err_r), first)
    cage.close()
    result = _result_from(status if reported is None else reported, message, None)
    if result.outcome == CAGE_ERROR:
        raise CageError(result.error)
    result = _git_verdict(snap, result)
    if on_applied is not None:
        if result.outcome == PLANTED:
            on_applied(result)
        else:
            on_applied()
    if result.error:
        sys.stderr.write(f"sandboy: {result.error}\n")
    if result.outcome == SIGNALED:
        _die_like(result.signal)
    return result.returncode


def _die_like(sig: int) -> None:
    """End this process by `sig`, as the command ended, so a shell sees the same status."""
    from sandboy.confine import _libc, hygiene

    try:
        _libc.syscall(_libc.SYS_PRLIMIT64, 0, hygiene.RLIMIT_CORE, bytes(16), None)  # no core of ours
        signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
        os.kill(os.getpid(), sig)
    except (OSError, ValueError):
        pass


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
        self.terminal_mode = None  # (fd, mode) to put back after a tty=True run
        self.git_snapshot = None   # direct mode: the post-run git check runs in wait()

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
        if self.terminal_mode is not None:
            from sandboy.confine.terminal import restore_mode

            restore_mode(*self.terminal_mode)
        data = _read_all(self._status_fd)
        duration = time.monotonic() - self._started
        if self.supervised:
            message = data.decode("utf-8", "replace")
        else:
            message, reported = self._decode_error(data)
            status = status if reported is None else reported
        if self.supervised:
            record = message.split("\0")
            if len(record) == 5:
                outcome, code, sig, error, egress = record
                result = RunResult(int(code), outcome, int(sig) or None, duration, error or None)
                if egress:
                    from sandboy.egress.session import summary_from_text

                    result.egress = summary_from_text(egress)
            else:  # the supervisor itself died: never report that as a pass
                result = RunResult(EXIT_CAGE, CAGE_ERROR, None, duration, "the sandboy supervisor died")
        else:
            result = _result_from(status, message, None)
            result.duration = duration
        result.enforced = self._cage.enforced
        result.degraded = list(self._cage.degraded)
        result.warnings = list(self._cage.warnings)
        result = _git_verdict(self.git_snapshot, result)  # direct mode only (None supervised)
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
    then execs (see `_libc`). Under the namespace tier the child is cloned into the new
    namespaces and becomes their init (after `first`, e.g. its new session); the pid returned
    is the init's, and the init reports the command's wait status on `err_w`."""
    from sandboy.confine import _libc

    paths, args, envp = cage.exec_args(argv)
    plan = [step for _, step in (*first, *cage.plan(stdio))]
    cage.started()
    try:
        return _libc.fork_exec(plan, paths, args, envp, err_w, cage.clone_flags)
    except OSError as exc:
        if not cage.clone_flags:
            raise
        from sandboy.confine.namespaces import forget

        forget()  # the kernel refuses the namespaces now: the next build probes again
        raise CageError(f"cannot apply the cage: clone into new namespaces: {exc.strerror}") from None


def _child_report(argv, cage, stdio, data: bytes, first=()) -> tuple:
    """(message, status) from the child's error pipe: the message is "cage:<text>" /
    "exec:<code>:<text>" / ""; the status is the command's wait status as the namespace's init
    reported it (None without the tier: the caller's own wait status is the command's)."""
    from sandboy.confine import _libc

    error, status = _libc.read_child_report(data)
    if error is None:
        return "", status
    index, err = error
    if index >= 0 and cage.tier is not None and index < len(first) + len(cage.plan(stdio)):
        labels = [label for label, _ in (*first, *cage.plan(stdio))]
        if labels[index] in cage.tier.labels:  # the kernel refused the tier after all: probe anew
            from sandboy.confine.namespaces import forget

            forget()
    if index >= 0:
        return "cage:" + cage.describe_failure(index, err, stdio, first), status
    reason = ""
    if err == errno.EACCES:
        from sandboy.confine import explain

        reason = explain.not_executable(argv[0], cage)
    return f"exec:{_libc.exit_code_for_exec_error(err)}:{argv[0]}: {os.strerror(err)}" + (f": {reason}" if reason else ""), status


def _result_from(status: int, child_message: str, outcome) -> RunResult:
    """Classify a wait status plus the child's error message (see `_child_report`)."""
    kind, _, detail = child_message.partition(":")
    if kind == "cage":
        return RunResult(EXIT_CAGE, CAGE_ERROR, error=detail)
    if kind == "exec":
        code_text, _, text = detail.partition(":")
        code = int(code_text)
        return RunResult(code, NOT_FOUND if code == EXIT_NOT_FOUND else NOT_EXECUTABLE, error=text)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return RunResult(128 + sig, outcome or SIGNALED, sig)
    code = os.waitstatus_to_exitcode(status)
    if outcome is not None:  # timed out or killed, but the command exited on its own first
        return RunResult(128 + signal.SIGKILL, outcome, signal.SIGKILL)
    return RunResult(code, EXITED)


def spawn(argv, policy, cwd=None, repo=None, timeout=None, stdin=None, stdout=None, stderr=None,
          supervise=None, pids_group=None, tty=False, egress_log=None) -> Confined:
    """Start `argv` confined by `policy` (a Policy or a prebuilt Cage).

    The command leads a session of its own. A terminal on its fd 0–2 (given, or inherited when
    None) is never passed on: stdin becomes /dev/null, stdout/stderr a pipe the supervisor
    copies to the terminal while the command runs (see terminal.py). `tty=True`: the command
    gets a fresh pseudo-terminal instead, relayed to the caller's fds and hung up at its end.

    `supervise`: None decides by need (a timeout, `limits.wall_seconds`, `limits.processes`
    as root, a terminal to relay); True always keeps a supervisor, which also guarantees that no
    descendant of the command outlives it (the gate runner asks for this); False never does (a
    timeout or a terminal is then refused).

    `pids_group`: a `PidsCgroup` the caller has already joined (see cgroup.py): a run with
    `limits.processes` as root then counts inside it instead of making and joining its own.

    `egress_log`: with `net.domains`, a file the proxy appends its JSON-lines decisions to. The
    proxy runs in the supervisor, which an egress run always has.
    """
    from sandboy.confine.cage import Cage, for_run

    if not argv:
        raise ValueError("argv must name a command")
    cage, owns = (policy, False) if isinstance(policy, Cage) else for_run(policy, cwd=cwd, repo=repo, tty=tty)
    cage.check_open()  # here, not in a supervisor that would only exit 1
    from sandboy.confine import terminal

    timeout = _timeout_for(cage, timeout)
    stdio = (stdin, stdout, stderr)
    needed = timeout is not None or needs_supervisor(cage.policy, cage) or tty or terminal.any_terminal(stdio)
    if supervise is None:
        supervise = needed
    elif not supervise and needed:
        raise ValueError("a timeout, limits.processes (as root), a terminal on fd 0-2, tty=True or (without "
                         "the namespace tier) a git repository in a write root needs supervise=True")
    first = terminal.session_steps()
    # The supervisor puts the caller's terminal in raw mode for tty=True; should it die before
    # putting it back, wait() does.
    restore = terminal.saved_mode(0 if stdin is None else stdin) if tty else None
    if cage.policy.net.egress:
        # The proxy runs in the supervisor: import it (asyncio, h11: tens of ms) here, once per
        # process, rather than in every supervisor after the fork.
        from sandboy.egress.session import preload

        preload()
    status_r, status_w = os.pipe2(os.O_CLOEXEC)
    started = time.monotonic()
    # direct mode is only chosen without a check or under the tier: the command is the PID
    # namespace's init, so when it is reaped nothing of the run is left (see needs_supervisor)
    snap = None if supervise else _git_snapshot(cage)
    try:
        pid = _start_child(argv, cage, stdio, status_w, first) if not supervise else os.fork()
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
            _supervise(list(argv), cage, timeout, stdio, status_w, pids_group, tty, egress_log)
            code = 0
        finally:
            os._exit(code)
    os.close(status_w)
    confined = Confined(pid, status_r, cage, owns, started, supervise,
                        lambda data: _child_report(argv, cage, stdio, data, first))
    confined.git_snapshot = snap
    if restore is not None:
        confined.terminal_mode = (0 if stdin is None else stdin, restore)
    return confined


def run(argv, policy, cwd=None, repo=None, timeout=None, stdin=None, stdout=None, stderr=None,
        supervise=None, pids_group=None, tty=False, egress_log=None) -> RunResult:
    """Run `argv` confined by `policy` and wait for it (see module docstring and `spawn`)."""
    return spawn(argv, policy, cwd=cwd, repo=repo, timeout=timeout, stdin=stdin, stdout=stdout,
                 stderr=stderr, supervise=supervise, pids_group=pids_group, tty=tty,
                 egress_log=egress_log).wait()


class LocalRun:
    """A confined command supervised by the CALLING process, with no supervisor process.

    For a caller that runs commands one after another and has no other children — the gate
    runner: it becomes a child subreaper (orphans of the command come back to it), watches
    `pidfd` for the command's exit and `time_left()` for its deadline, then `end()` kills every
    descendant still alive. This saves the supervisor's fork, about 2.5 ms per command
    (docs/performance.md). `wait()` reaps with waitpid(-1): other children of the caller would be
    collected too, so only a dedicated runner should use this.
    """

    def __init__(self, argv, cage, timeout=None, stdio=(None, None, None), pids_group=None, ctty=None,
                 egress_log=None):
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
        from sandboy.confine.terminal import session_steps

        # The command leads a session of its own (`ctty`: a pty slave in `stdio` becomes its
        # controlling terminal); the runner is the one to keep the caller's terminal from it.
        self._first = (*session_steps(ctty),
                       ("die with the runner", (SYS_PRCTL, False, PR_SET_PDEATHSIG, signal.SIGKILL)))
        # Layer 3: the proxy runs in this process, started after the fork, stopped in wait()
        self.egress = _egress_session(cage, egress_log)
        if self.egress is not None:
            self._first += tuple(self.egress.child_steps())
        self.git_snapshot = _git_snapshot(cage)
        try:
            self.pid = _start_child(self.argv, cage, stdio, err_w, self._first)
        except BaseException:
            os.close(self._err_r)
            if self.egress is not None:
                self.egress.abort()
            raise
        finally:
            os.close(err_w)
        if self.egress is not None:
            try:
                self.egress.started()
            except BaseException:
                _kill_descendants(None)
                os.close(self._err_r)
                raise
        self.pidfd = os.pidfd_open(self.pid)
        self._status = None
        self._outcome = None
        self._ended = False
        self._result = None
        self.abandoned = False  # see end(deadline=...)

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

    def end(self, outcome=None, deadline=None) -> None:
        """Kill the command (if still running) and every descendant; `outcome` names why.

        `deadline` (a time.monotonic() value; the gate stopped by ^C/SIGTERM): stop waiting for
        the killed tree then. Every process has been sent SIGKILL and runs no more code, but the
        kernel may still be tearing one down — a step's private tmpfs holding 300,000 files took
        1.8 s — and the gate must end within a second. `abandoned` then says so."""
        if outcome is not None and self._outcome is None and self._status is None:
            self._outcome = outcome
        if self._ended:
            return
        if self._status is None:
            _kill_pass(None)
            if deadline is None:
                self._status = os.waitpid(self.pid, 0)[1]
            else:
                while not (reaped := os.waitpid(self.pid, os.WNOHANG))[0] and time.monotonic() < deadline:
                    time.sleep(0.005)
                if not reaped[0]:
                    self.abandoned = True
                    self._status = signal.SIGKILL  # the wait status of a process killed by SIGKILL
                    self._ended = True
                    return
                self._status = reaped[1]
        if not _kill_descendants(None, deadline):
            self.abandoned = True
        self._ended = True

    def kill(self) -> None:
        self.end(KILLED)

    def wait(self) -> RunResult:
        if self._result is None:
            if self._status is None:
                self._status = os.waitpid(self.pid, 0)[1]
            self.end()
            os.close(self.pidfd)
            message, reported = _child_report(self.argv, self.cage, self.stdio, _read_all(self._err_r), self._first)
            result = _result_from(self._status if reported is None else reported, message, self._outcome)
            result.duration = time.monotonic() - self.started
            result.enforced = self.cage.enforced
            result.degraded = list(self.cage.degraded)
            result.warnings = list(self.cage.warnings)
            if self.egress is not None:
                result.egress = self.egress.stop()  # the tree is gone: nothing left to serve
            if not self.abandoned:  # every process of the step has been reaped
                result = _git_verdict(self.git_snapshot, result)
            elif self.git_snapshot is not None:  # the gate was stopped: it fails anyway (130)
                result.error = ((result.error + "; ") if result.error else "") + (
                    "the post-run git check was skipped: the stopped step's processes were still being "
                    "torn down — check the repository before running git in it (ADR 0019)")
            self._result = result
        return self._result


def _egress_session(cage, log_path):
    """The run's egress proxy (Layer 3), or None without `net.domains`."""
    if not cage.policy.net.egress:
        return None
    from sandboy.egress.session import EgressSession

    return EgressSession.for_cage(cage, log_path)


class _Stop(Exception):
    pass


def _on_stop(signum, frame):
    raise _Stop()


def _supervise(argv, cage, timeout, stdio, status_w, pids_group=None, tty=False, egress_log=None) -> None:
    from sandboy.confine._libc import prctl

    # The command is in a session of its own, so the terminal's ^C, ^\ and hang-up reach us (in
    # the caller's foreground job), not it: pass them on to its process group.
    command = []

    def forward(signum, frame):
        for target in command:
            try:
                os.killpg(target, signum)
            except ProcessLookupError:  # not yet its own group leader
                try:
                    os.kill(target, signum)
                except ProcessLookupError:
                    pass

    for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
        if sig != signal.SIGHUP or signal.getsignal(sig) != signal.SIG_IGN:  # nohup's SIGHUP stays ignored
            signal.signal(sig, forward)
    signal.signal(signal.SIGTERM, _on_stop)        # Confined.kill() and the caller's death
    # Held back until we wait: a stop request that arrived while the child was being started
    # would otherwise escape before we know the child's pid (and leave its tree running).
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    if os.getppid() == 1:
        raise SystemExit  # the caller is already gone

    def report(outcome, code, sig=0, error="", egress=""):
        os.write(status_w, f"{outcome}\0{code}\0{sig}\0{error}\0{egress}".encode())

    limit = cage.policy.limits.processes
    if pids_group is not None and os.geteuid() == 0:
        # We were forked inside it (it also holds the caller and us). The final kill walks our
        # descendants, never the group.
        try:
            _make_room(pids_group, limit)
        except OSError as exc:
            report(CAGE_ERROR, EXIT_CAGE, 0, f"limits.processes: cannot set pids.max: {exc.strerror}")
            return
    group = None
    if limit and os.geteuid() == 0 and pids_group is None:
        from sandboy.confine.cgroup import PidsCgroup

        # The supervisor joins its own group (+1 for itself) and the child is born inside.
        group = PidsCgroup.create_and_join(limit + 1)
        if group is None:
            report(CAGE_ERROR, EXIT_CAGE, 0, NO_PIDS_CGROUP)
            return

    from sandboy.confine.terminal import Relay, session_steps

    try:
        relay = Relay(stdio, tty)
    except OSError as exc:
        report(CAGE_ERROR, EXIT_CAGE, 0, f"cannot set up the terminal relay: {exc.strerror}")
        return
    if relay.master is not None:
        signal.signal(signal.SIGWINCH, relay.update_window_size)
    egress = _egress_session(cage, egress_log)
    first = session_steps(relay.ctty) + (tuple(egress.child_steps()) if egress is not None else ())
    snap = _git_snapshot(cage)
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    try:
        child = _start_child(argv, cage, relay.stdio, err_w, first)
    except OSError as exc:
        relay.close()
        if egress is not None:
            egress.abort()
        report(CAGE_ERROR, EXIT_CAGE, 0, f"fork failed: {exc.strerror}")
        return
    command.append(child)
    os.close(err_w)
    relay.started()
    egress_error = None
    if egress is not None:
        try:
            if group is None and pids_group is None:
                egress.serve_on_demand()  # the proxy's thread starts at the first client
            else:  # a pids cgroup counts the thread: it takes its slot now, before the command's
                egress.started(wait=False)  # SIGTERM is still blocked: the proxy's thread inherits that
        except (OSError, RuntimeError) as exc:
            egress_error = f"egress proxy: {exc}"
            _kill_pass(group)

    outcome = None
    status = None
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # a pending stop lands here
        status = _wait_until(child, timeout, relay if relay.active else None)
        if status is None:
            outcome = TIMED_OUT
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    except _Stop:
        outcome = KILLED
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # from here on the tree is ours to end
    if status is None:
        _kill_pass(group)
        _, status = os.waitpid(child, 0)
    command.clear()
    # Before the sweep: what the command left is shown, then the pipes are closed and the pty is
    # hung up, so nothing still running can reach the caller's terminal in the meantime.
    relay.finish()
    _kill_descendants(group)
    if group is not None:
        try:
            group.leave()
        except OSError:
            pass
        group.remove()

    message, reported = _child_report(argv, cage, relay.stdio, _read_all(err_r), first)
    result = _result_from(status if reported is None else reported, message, outcome)
    result = _git_verdict(snap, result)  # after the sweep: every process of the run has ended
    summary = ""
    if egress is not None:
        # after the sweep nothing of the run is left to use the proxy; this process exits next
        summary = egress.report_text(exiting=True)
        egress_error = egress_error or egress.error
    if egress_error and result.outcome != PLANTED:
        report(CAGE_ERROR, EXIT_CAGE, 0, egress_error, summary)
        return
    report(result.outcome, result.returncode, result.signal or 0, result.error or "", summary)


def _wait_until(pid: int, timeout, relay=None):
    """The child's wait status, or None when `timeout` seconds passed first. With a `relay`
    (terminal.Relay), its fds are serviced meanwhile."""
    if timeout is None and relay is None:
        return os.waitpid(pid, 0)[1]
    import select

    pidfd = os.pidfd_open(pid)
    try:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            poller = select.poll()
            poller.register(pidfd, select.POLLIN)
            for fd, events in relay.poll_set() if relay is not None else ():
                poller.register(fd, events)
            left = None if deadline is None else deadline - time.monotonic()
            ready = poller.poll(None if left is None else max(1, int(left * 1000))) if left is None or left > 0 else []
            for fd, events in ready:
                if fd == pidfd:
                    return os.waitpid(pid, 0)[1]
                relay.service(fd, events)
            if deadline is not None and time.monotonic() >= deadline:
                return None
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


def _kill_descendants(cgroup, deadline=None) -> bool:
    """SIGKILL and reap until no descendant is left. Orphans come back to us (subreaper), so
    each round sees the ones the previous round's deaths released. `deadline` (time.monotonic()):
    give up reaping then and return False (everything found has been sent SIGKILL)."""
    while True:
        _kill_pass(cgroup)
        try:
            if deadline is None:
                os.waitpid(-1, 0)
            else:
                while not os.waitpid(-1, os.WNOHANG)[0]:
                    if time.monotonic() >= deadline:
                        return False
                    time.sleep(0.005)
            # Reap the whole batch before walking /proc again: one walk per reaped child made the
            # sweep quadratic (2,000 processes took 26 s past a 3 s timeout).
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            if cgroup is None or not set(cgroup.pids()) - {os.getpid()}:
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(0.001)
