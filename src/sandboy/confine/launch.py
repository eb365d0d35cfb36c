"""The Python API: start a confined command and get a handle on it.

    from sandboy.confine.launch import spawn, run, RunResult

    proc = spawn(argv, policy, cwd=repo, repo=repo, timeout=600,
                 stdin=None, stdout=fd, stderr=fd)   # PolicyError (2) / CageError (125) before anything runs
    proc.pid; proc.kill()                           # kill() ends the whole tree (supervised)
    result = proc.wait()                            # RunResult
    result = run(argv, policy, cwd=..., timeout=...)   # spawn + wait

`policy` is a `Policy` or a prebuilt `Cage` (cage.build): the Landlock ruleset and the BPF
program are built once in the parent; the child only applies them, then execs. No second Python
start-up happens anywhere.

How a command is run (each its own module):
    result.py       RunResult, the outcome names, a wait status + the child's report → RunResult
    exec_mode.py    `sandboy run` becomes the command; the one place deciding what a run needs
                    around it: its hooks (`hooks_for`) and a supervisor (`supervisor_needed`)
    supervision.py  Supervision, the one supervision object (start/stop hooks, deadline, kill and
                    reap the tree) and the Handle interface (pid, kill, wait)
    supervisor.py   the forked supervisor process of `sandboy run` and this API, and its handle
    reaping.py      find, kill and reap every descendant
    Cage.start_child (cage.py) forks the child that applies the plan and execs.
"""

import _signal as signal  # the C module: `signal` imports enum
import os

from sandboy.confine.exec_mode import hooks_for, supervisor_needed
from sandboy.confine.result import (  # noqa: F401  (the API's names)
    CAGE_ERROR,
    EXITED,
    KILLED,
    NOT_EXECUTABLE,
    NOT_FOUND,
    OUTCOMES,
    PLANTED,
    SIGNALED,
    STATUS_LOST,
    TIMED_OUT,
    RunResult,
    from_child,
)
from sandboy.confine.supervision import Handle, Hook, HookChain, Supervision, timeout_for  # noqa: F401
from sandboy.errors import CageError


class DirectChild(Supervision):
    """A command started with no supervisor (`spawn(..., supervise=False)`, or nothing needed
    one): `pid` is the command's own, `kill()` is SIGKILL to it alone, and its descendants are
    not swept. Only its cage or exec error comes back on the error pipe. Hooks that need no
    supervisor (`Hook.during_run` false, under the namespace tier: the command is the PID
    namespace's init, so once it is reaped nothing of the run is left) run around it.

    A Supervision that supervises nothing: the same start, refusal and finish path (hooks,
    the cage's report, fail closed), without the subreaper, the pids group, the death signal,
    the deadline and the sweep. `spawn` checked the cage is open; an owned cage is closed
    once the run is over (or refused). A failed fork raises its OSError, as `spawn` does for
    a supervisor process."""

    def __init__(self, argv, cage, owns_cage: bool, stdio, hooks=()):
        super().__init__(argv, cage, stdio=stdio, hooks=hooks)
        self._owns_cage = owns_cage
        self._sent_kill = False

    def _prepare(self) -> tuple:
        from sandboy.confine.terminal import session_steps

        return session_steps()

    def _fork_failed(self, exc: OSError):
        try:
            self._refuse_unstarted(f"fork failed: {exc.strerror}")
        except CageError:
            pass
        raise exc

    def _watch(self) -> None:
        pass  # nothing watches it: wait() blocks in waitpid

    def kill(self) -> None:
        if self._result is None:
            self._sent_kill = True
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _reap(self) -> None:
        self.exited(block=True)
        if self._status == STATUS_LOST and self._sent_kill:
            # reaped unseen (the caller ignores SIGCHLD: the namespace's init reports the
            # command's status, but not when killed): what it got is our SIGKILL
            self._status = signal.SIGKILL

    def _finish(self, result: RunResult) -> None:
        super()._finish(result)
        if self._owns_cage:
            self.cage.close()


def spawn(argv, policy, cwd=None, repo=None, timeout=None, stdin=None, stdout=None, stderr=None,
          supervise=None, pids_group=None, tty=False, egress_log=None, hooks=(), builtin_hooks=None) -> Handle:
    """Start `argv` confined by `policy` (a Policy or a prebuilt Cage); returns its Handle.

    The command leads a session of its own. A terminal on its fd 0–2 (given, or inherited when
    None) is never passed on: stdin becomes /dev/null, stdout/stderr a pipe the supervisor
    copies to the terminal while the command runs (see terminal.py). `tty=True`: the command
    gets a fresh pseudo-terminal instead, relayed to the caller's fds and hung up at its end.
    A fd 0–2 the caller has closed (and passes no fd for) is /dev/null for the command (ADR 0011).

    `supervise`: None decides by need (`exec_mode.supervisor_needed`: a timeout,
    `limits.wall_seconds`, `limits.processes` as root, a `{tmp}` to remove, `net.domains`, a
    git check without the namespace tier, a terminal to relay, hooks of yours, a caller ignoring
    SIGCHLD without the namespace tier: ADR 0020, Session 6); True always
    keeps a supervisor, which also guarantees that no descendant of the command outlives it;
    False never does (refused where one is needed).

    `pids_group`: a `PidsCgroup` the caller has already joined (see cgroup.py): a run with
    `limits.processes` as root then counts inside it instead of making and joining its own.

    `egress_log`: with `net.domains`, a file the proxy appends its JSON-lines decisions to.
    `hooks`: `supervision.Hook`s of the caller's, attached after the run's own; they run in the
    supervisor process (or around a direct child, when none needs the run while it runs).
    `builtin_hooks`: the run's own hooks when the caller has made them already with
    `exec_mode.hooks_for(cage, egress_log)` (the CLI, which decided with them); None makes them.
    """
    if not argv:
        raise ValueError("argv must name a command")
    from sandboy.confine.hygiene import hold_free_stdio

    held = hold_free_stdio()
    try:
        return _spawn(argv, policy, cwd, repo, timeout, (stdin, stdout, stderr), supervise, pids_group, tty,
                      egress_log, hooks, builtin_hooks)
    finally:
        for fd in held:
            os.close(fd)


def _spawn(argv, policy, cwd, repo, timeout, stdio, supervise, pids_group, tty, egress_log, hooks,
           builtin_hooks) -> Handle:
    from sandboy.confine.cage import Cage

    if isinstance(policy, Cage):
        cage, owns = policy, False
        cage.check_kernel_mounts()  # a prebuilt cage: nothing else looks at what is mounted since
    else:
        from sandboy.confine.reuse import for_run  # not on the CLI's path: it hands over its cage

        cage, owns = for_run(policy, cwd=cwd, repo=repo, tty=tty)
    cage.check_open()  # here, not in a supervisor that would only exit 1
    try:
        cage.exec_args(argv)  # a NUL byte: this ValueError here, not a supervisor that dies (125)
    except ValueError:
        if owns:
            cage.close()
        raise
    timeout = timeout_for(cage, timeout)
    all_hooks = [*(hooks_for(cage, egress_log) if builtin_hooks is None else builtin_hooks), *hooks]
    needed = supervisor_needed(cage, timeout=timeout, tty=tty, stdio=stdio, hooks=all_hooks)
    if supervise is None:
        supervise = needed is not None
    elif not supervise and needed:
        if owns:
            cage.close()
        from sandboy.confine.reaping import SIGCHLD_IGNORED

        if needed == SIGCHLD_IGNORED:  # not the caller's arguments: its process (maybe inherited)
            raise CageError(f"supervise=False: {needed}; set SIGCHLD to SIG_DFL before calling, "
                            "or let Sandboy supervise the run (supervise=None or True)")
        raise ValueError(f"supervise=False, but this run needs a supervisor: {needed}")
    if not supervise:
        return DirectChild(argv, cage, owns, stdio, all_hooks).start()
    if cage.policy.net.egress:
        # The proxy runs in the supervisor: import it (asyncio, h11: tens of ms) here, once per
        # process, rather than in every supervisor after the fork.
        from sandboy.egress.session import preload

        preload()
    from sandboy.confine.supervisor import fork_supervisor

    try:
        return fork_supervisor(argv, cage, owns, timeout, stdio, all_hooks, pids_group, tty)
    except OSError:
        if owns:
            cage.close()
        raise


def run(argv, policy, cwd=None, repo=None, timeout=None, stdin=None, stdout=None, stderr=None,
        supervise=None, pids_group=None, tty=False, egress_log=None, hooks=(), builtin_hooks=None) -> RunResult:
    """Run `argv` confined by `policy` and wait for it (see module docstring and `spawn`)."""
    return spawn(argv, policy, cwd=cwd, repo=repo, timeout=timeout, stdin=stdin, stdout=stdout,
                 stderr=stderr, supervise=supervise, pids_group=pids_group, tty=tty,
                 egress_log=egress_log, hooks=hooks, builtin_hooks=builtin_hooks).wait()
