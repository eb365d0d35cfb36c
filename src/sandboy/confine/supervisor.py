"""A supervisor process: forked by the caller of the API (and of `sandboy run` without the
namespace tier), it puts a `Supervision` around the command (its hooks included), relays the
terminal, passes the terminal's signals on, and reports the RunResult on a pipe before it
exits. `supervise` is that life; `sandboy run` under the tier lives it in its own process.

    caller ── supervisor (forked; child subreaper) ── confined command ── its descendants

The caller holds a `Supervisor` handle (pid, kill(), wait()). Why a process and not the caller
itself: the caller may have other children and threads (a Python program using the API), and
the terminal's ^C must reach someone who outlives the command to report it.
"""

import _signal as signal  # the C module: `signal` imports enum
import os
import time

from sandboy.confine.result import CAGE_ERROR, KILLED, TIMED_OUT, RunResult
from sandboy.confine.supervision import PR_SET_CHILD_SUBREAPER, PR_SET_PDEATHSIG, Handle, Supervision, timeout_for
from sandboy.errors import EXIT_CAGE, CageError


class Supervisor(Handle):
    """The caller's handle on a supervisor process. `pid` is the supervisor's; `kill()` asks it
    to end the whole tree (SIGTERM); `wait()` reads the RunResult it reported."""

    def __init__(self, pid: int, status_fd: int, cage, owns_cage: bool, started: float, terminal_mode=None):
        self.pid = pid
        self._status_fd = status_fd
        self._cage = cage
        self._owns_cage = owns_cage
        self._started = started
        self._result = None
        self.terminal_mode = terminal_mode  # (fd, mode) to put back after a tty=True run

    def kill(self) -> None:
        if self._result is None:
            try:
                os.kill(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def wait(self) -> RunResult:
        if self._result is not None:
            return self._result
        try:
            os.waitpid(self.pid, 0)  # blocks until the supervisor has exited, whoever reaps it
        except ChildProcessError:
            # Reaped unseen: this process ignores SIGCHLD, or a waitpid(-1) elsewhere in it (a
            # child watcher) took it. Its wait status says nothing anyway: the run's result is
            # the record on the status pipe, read below.
            pass
        if self.terminal_mode is not None:  # the supervisor may have died before restoring it
            from sandboy.confine.relay import restore_mode

            restore_mode(*self.terminal_mode)
        from sandboy.confine._libc import read_all

        result = RunResult.from_record(read_all(self._status_fd))
        if result is None:  # the supervisor itself died: never report that as a pass
            result = RunResult(EXIT_CAGE, CAGE_ERROR, error="the sandboy supervisor died")
        result.duration = time.monotonic() - self._started
        result.report_cage(self._cage)
        if self._owns_cage:
            self._cage.close()
        self._result = result
        return result


def fork_supervisor(argv, cage, owns_cage: bool, timeout, stdio, hooks, pids_group=None, tty=False) -> Supervisor:
    """Fork the supervisor of one run and return its handle."""
    from sandboy.confine import relay

    # The supervisor puts the caller's terminal in raw mode for tty=True; should it die before
    # putting it back, wait() does.
    stdin = 0 if stdio[0] is None else stdio[0]
    restore = relay.saved_mode(stdin) if tty else None
    status_r, status_w = os.pipe2(os.O_CLOEXEC)
    started = time.monotonic()
    # Born with SIGTERM blocked: a kill() right after spawn() waits until the supervisor can
    # act on it (its handler ends the tree), instead of killing it before it has a handler
    # (reported as "the sandboy supervisor died").
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        pid = os.fork()
    except OSError:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        os.close(status_r)
        os.close(status_w)
        raise
    if pid == 0:
        code = 1
        try:
            os.close(status_r)
            _supervise(list(argv), cage, timeout, stdio, status_w, hooks, pids_group, tty)
            code = 0
        finally:
            os._exit(code)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    os.close(status_w)
    return Supervisor(pid, status_r, cage, owns_cage, started, (stdin, restore) if restore is not None else None)


def run_here(argv, cage, hooks, tty=False) -> RunResult:
    """Run `argv` in `cage` supervised by THIS process, with no supervisor process (its fork and
    exit cost about 4 ms): for a caller that is nothing but this one run and ends right after
    it — `sandboy run`. Only under the namespace tier, where the PID namespace takes the
    command's whole tree with it should this process be killed outright (its init dies with
    us); without it a forked supervisor is what sweeps the tree then. SIGTERM to this process
    ends the run (outcome "killed"); the terminal's signals are passed on to the command.
    `hooks`: the run's, as `exec_mode.hooks_for(cage, egress_log)` made them (the caller
    decided with them that the run is supervised)."""
    if cage.tier is None:
        raise ValueError("run_here needs the namespace tier (without it a supervisor process sweeps the tree)")
    cage.check_open()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # as a forked supervisor is born: see supervise
    return supervise(list(argv), cage, timeout_for(cage, None), (None, None, None), hooks, tty=tty)


class _Stop(Exception):
    pass


def _on_stop(signum, frame):
    raise _Stop()


def _supervise(argv, cage, timeout, stdio, status_w, hooks, pids_group, tty) -> None:
    """The supervisor process's whole life: report one RunResult on `status_w`."""
    from sandboy.confine._libc import prctl

    # This process is ours, not the caller's: it may reset what it inherited. An ignored SIGCHLD
    # (the caller's, or inherited by the caller across exec) would have the kernel reap the
    # command unseen and its exit status would be lost (reaping.children_reaped_unseen).
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    # SIGTERM (Supervisor.kill(), the caller's death) is blocked since the fork: it lands once
    # `supervise` has its handler and the command's pid
    prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    if os.getppid() == 1:
        raise SystemExit  # the caller is already gone
    os.write(status_w, supervise(argv, cage, timeout, stdio, hooks, pids_group, tty).to_record())


def supervise(argv, cage, timeout, stdio, hooks, pids_group=None, tty=False) -> RunResult:
    """Supervise one run from THIS process, which ends right after it: relay the terminal,
    pass its signals on, end the run on SIGTERM (outcome "killed"); the RunResult. The forked
    supervisor's life, and `sandboy run`'s own under the namespace tier (`run_here`).

    Called with SIGTERM blocked (the forked supervisor is born so, `run_here` blocks it): a stop
    request that arrived while the child was being started would otherwise escape before we
    know the child's pid (and leave its tree running). It lands once we wait. Hooks that start
    threads in started() start them with it blocked too."""
    from sandboy.confine.relay import Relay

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
    signal.signal(signal.SIGTERM, _on_stop)
    try:
        relay = Relay(stdio, tty)
    except OSError as exc:
        return RunResult(EXIT_CAGE, CAGE_ERROR, error=f"cannot set up the terminal relay: {exc.strerror}")
    if relay.master is not None:
        signal.signal(signal.SIGWINCH, relay.update_window_size)
    run = Supervision(argv, cage, timeout, relay.stdio, pids_group, ctty=relay.ctty, hooks=hooks, exits_after=True)
    try:
        run.start()
    except CageError:
        relay.close()
        return run.wait()
    command.append(run.pid)
    relay.started()

    outcome = None
    try:
        try:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # a pending stop lands here
            if not _wait_until_exit(run, relay if relay.active else None):
                outcome = TIMED_OUT
        finally:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # from here on the tree is ours to end
    except _Stop:
        outcome = KILLED

    def hang_up():
        # What the command left is shown, then the pipes are closed and the pty is hung up, so
        # nothing still running can reach the caller's terminal while the tree is swept.
        command.clear()
        relay.finish()

    run.end(outcome, before_sweep=hang_up)
    return run.wait()


_MOST_MS_A_POLL = 86_400_000


def _wait_until_exit(run, relay=None) -> bool:
    """Wait until the command exits (True, reaped) or its deadline passes (False). With a
    `relay` (relay.Relay), its fds are serviced meanwhile."""
    if run.deadline is None and relay is None:
        return run.exited(block=True)
    import select

    while True:
        poller = select.poll()
        poller.register(run.pidfd, select.POLLIN)
        for fd, events in relay.poll_set() if relay is not None else ():
            poller.register(fd, events)
        left = run.time_left()
        # at most a day a poll: poll(2) takes an int of ms, and a policy's `limits.wall_seconds` of
        # 25 days or more raised OverflowError here ("the sandboy supervisor died"; session 9)
        ready = (poller.poll(None if left is None else max(1, min(int(left * 1000), _MOST_MS_A_POLL)))
                 if left is None or left > 0 else [])
        for fd, events in ready:
            if fd == run.pidfd:
                return run.exited(block=True)
            relay.service(fd, events)
        if run.time_left() == 0:
            return False
