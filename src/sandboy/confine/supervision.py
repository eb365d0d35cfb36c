"""The one supervision object: a process that stays with a confined command from before its
start until after its whole tree has gone, and the hooks that live exactly as long.

    run = Supervision(argv, cage, timeout=600, stdio=(0, fd, fd), hooks=[hook, ...]).start()
    run.pid, run.pidfd, run.time_left(), run.exited()   # watch it (the gate polls pidfd)
    run.end(TIMED_OUT)      # kill the command and every descendant, reap them all
    result = run.wait()     # RunResult, after every stop hook ran

Who supervises: the gate, in its own process, one step after the other (no supervisor process:
≈ 2.5 ms a step, docs/performance.md); `supervisor.supervise`, which puts a Supervision around
the terminal relay and signal handling, in the supervisor process the API (and `sandboy run`
without the namespace tier) forks, or in `sandboy run` itself under the tier (supervisor.run_here);
and `sandboy run` in exec mode under the tier when the run has hooks (exec_mode.py: it waits in
C meanwhile). `exec_mode.supervisor_needed` is the one rule saying when a run needs a process of
its own to stay with it.

Hooks (`Hook`): the egress proxy (egress/session.py) and the post-run git check
(gitcheck_hook.GitCheck). `exec_mode.hooks_for(cage)` is the one list every run gets.

    start(run)          before the command's process exists, in attach order. Returns the
                        (label, step) pairs the child runs first (see `_libc`). Raising refuses
                        the run: nothing is started, CageError (125).
    started(run)        right after the fork, in attach order (a thread may start now: no fork
                        from this process follows). Raising refuses the run: the tree is killed,
                        the run is a cage error (125).
    stop(run, result)   after the command and every descendant ended and were reaped, on every
                        path — exit, signal, timeout, kill(), a start that failed — once for each
                        hook whose start() returned, in reverse order. It may amend `result`
                        (a report of its own: add the slot to RunResult.CARRIED; or
                        `result.refuse(why[, outcome])`). Raising makes the run a cage error
                        (fail closed); the other stop hooks still run.

`during_run`: does the hook work while the command runs (the proxy's thread)? Then only a
supervising process can carry it. A hook that acts only before and after (the git check) can
also be carried by exec mode and by a direct child under the namespace tier, where the end of
the namespace's init is the end of the whole tree (`exec_mode.supervisor_needed`).

Every hook method runs in the supervising process, which is not confined.
"""

import _signal as signal  # the C module: `signal` imports enum
import os
import time

from sandboy.confine import reaping
from sandboy.confine._libc import above_stdio
from sandboy.confine.result import CAGE_ERROR, KILLED, OUT_OF_MEMORY, STATUS_LOST, TIMED_OUT, RunResult, from_child
from sandboy.errors import EXIT_CAGE, CageError

PR_SET_PDEATHSIG = 1  # (the command's death signal: init_wait.die_with_the_supervisor)
PR_SET_CHILD_SUBREAPER = 36

# How long the namespace's init may take to end a run the supervision ends (a timeout, kill()):
# kill the tree, reap it, copy what is left in its relays (at most a pipe's worth each: 64 KiB,
# 1 MiB if the command grew it) and report. Past it the init is killed with the tree.
END_GRACE_SECONDS = 1.0

NO_MEMORY_CGROUP = ("limits.memory_mib: no memory cgroup could be created for the run; refusing to run "
                    "without the bound (run it where /sys/fs/cgroup is writable — not inside another cage)")


class Handle:
    """What every way of running a confined command hands back: `pid`, `kill()`, `wait()`.

    `Supervision` (the caller supervises), `supervisor.Supervisor` (a forked supervisor process)
    and `launch.DirectChild` (no supervision) implement it."""

    pid: int

    def kill(self) -> None:
        """End the run now; `wait()` then reports it (outcome "killed" where supervised)."""
        raise NotImplementedError

    def wait(self) -> RunResult:
        """Wait for the end of the run and say what happened (the same object on every call)."""
        raise NotImplementedError


class Hook:
    """Something that lives exactly as long as a run (see the module docstring for when each
    method is called). Override what you need; `name` prefixes the refusal a failure causes.
    Any object with these five attributes is a hook (gitcheck_hook.GitCheck does not subclass this:
    exec mode carries it without importing this module)."""

    name = "hook"
    during_run = True  # see the module docstring; the safe default: needs a supervising process

    def start(self, run) -> tuple:
        return ()

    def started(self, run) -> None:
        pass

    def stop(self, run, result: RunResult) -> None:
        pass


def timeout_for(cage, timeout):
    """The run's deadline in seconds: the caller's timeout or the policy's wall_seconds, the smaller.
    A caller's 0 (like None) sets none of its own — the policy's still holds: `timeout=0` used to
    come back as 0, which every deadline reads as "none", and the run outlived wall_seconds."""
    wall = cage.policy.limits.wall_seconds
    if not timeout:
        return wall or None
    return wall if wall and wall < timeout else timeout


def _refusal(hook, exc: BaseException) -> str:
    return str(exc) if isinstance(exc, CageError) else f"{hook.name}: {exc}"


class HookChain:
    """The hooks of one run, called in the order and with the failure rules of the module
    docstring (by Supervision, and by launch.DirectChild for hooks that need no supervisor)."""

    def __init__(self, hooks):
        self.hooks = list(hooks)
        self._stoppable = []  # hooks whose start() returned

    def start(self, run) -> tuple:
        """The child's first steps from every hook; CageError when one refuses (the hooks
        started before it are still to be stopped: `stop`)."""
        steps = ()
        for hook in self.hooks:
            try:
                got = hook.start(run)
            except Exception as exc:
                raise CageError(_refusal(hook, exc)) from None
            self._stoppable.append(hook)
            steps += tuple(got or ())
        return steps

    def started(self, run) -> None:
        for hook in self._stoppable:
            try:
                hook.started(run)
            except Exception as exc:
                raise CageError(_refusal(hook, exc)) from None

    def end(self, run, result: RunResult, refused=None) -> None:
        """The run is over and `result` says how: the refusal a started hook caused (if any)
        first, then the stop hooks."""
        if refused is not None:
            result.refuse(refused)
        self.stop(run, result)

    def stop(self, run, result: RunResult) -> None:
        while self._stoppable:
            hook = self._stoppable.pop()
            try:
                hook.stop(run, result)
            except Exception as exc:  # a check that could not run did not pass: fail closed
                result.refuse(f"{hook.name}: {exc}")


class Supervision(Handle):
    """A confined command supervised by THIS process, which becomes a child subreaper: orphans
    of the command come back to it, and `end()` kills and reaps every descendant. `wait()` reaps
    with waitpid(-1), collecting any other child too: the process must have no children of its
    own besides the run (the gate runs its steps one at a time; a forked supervisor has one run).

    `pids_group`: a `PidsCgroup` this process has already joined (the gate's, see cgroup.py):
    a run with `limits.processes` as root then counts inside it; without one such a run gets a
    group of its own that this process joins for the run (refused with 125 where none can be made).
    `memory_mib`: bound the memory of the run's processes together in a memory cgroup
    (`cgroup.MemoryCgroup`, ADR 0027; the gate's steps): the command joins it before anything else
    it runs; where none can be made the run is refused (125). `memory_group` is it while it runs
    (the gate polls its `oom_event_fd`). `memory_cgroups`: a `cgroup.MemoryCgroups` the group comes
    from and goes back to (the gate's: one group reused by its steps while each leaves it empty);
    without one the run gets a group of its own, removed after it. After the run, `memory` is {"cgroup_mib", "peak_mib",
    "oom_kills"} on the result's "enforced", and a run whose group saw the OOM killer ends as
    `out_of_memory`.
    `ctty`: a pty slave in `stdio` that becomes the command's controlling terminal.
    `exits_after`: this process ends right after the run (a forked supervisor), so hooks can
    leave their threads and sockets to the exit.
    """

    def __init__(self, argv, cage, timeout=None, stdio=(None, None, None), pids_group=None, ctty=None,
                 hooks=(), exits_after: bool = False, memory_mib=None, memory_cgroups=None):
        self.argv, self.cage, self.stdio, self.ctty = list(argv), cage, stdio, ctty
        self.timeout = timeout_for(cage, timeout)
        self.hooks = HookChain(hooks)
        self.exits_after = exits_after
        self.pids_group = pids_group
        self.pid = None
        self.pidfd = None
        self.started = None   # time.monotonic() at start()
        self.deadline = None
        self.abandoned = False  # see end(deadline=...)
        self._own_group = None  # a per-run pids cgroup this process joined
        self.memory_mib = memory_mib
        self.memory_cgroups = memory_cgroups
        self.memory_group = None  # the run's MemoryCgroup while it runs
        self.cage_refused = False  # the child reported the cage could not be applied (nothing ran)
        self._first = ()
        self._in_command = ()   # the memory cgroup's join: the command's own step (Cage.child_plan)
        self._err_r = None
        self._status = None
        self._outcome = None
        self._ended = False
        self._result = None
        self._refused = None    # why a started hook refused the run
        self._spare = None      # reaping.SpareFd: the /proc walk's fd when none is left

    # --- start ---------------------------------------------------------------------------------

    def start(self) -> "Supervision":
        """Start the command (see the module docstring). Raises CageError (125) when the run is
        refused; `wait()` then returns the refusal, with what the stop hooks added."""
        self.started = time.monotonic()
        try:
            first = self._prepare() + self.hooks.start(self)
        except CageError as exc:
            self._refuse_unstarted(str(exc))
        self._first = first
        try:
            self._err_r, err_w = map(above_stdio, os.pipe2(os.O_CLOEXEC))
        except OSError as exc:  # no fd left (EMFILE/ENFILE): a refusal, the started hooks stopped
            self._refuse_unstarted(f"cannot supervise a run here: {exc.strerror}")
        try:
            # only when there is one: a cached plan (plan_cache.CachedPlan) takes no such steps
            more = {"in_command": self._in_command} if self._in_command else {}
            self.pid = self.cage.start_child(self.argv, self.stdio, err_w, first, **more)
        except CageError as exc:
            self._refuse_unstarted(str(exc))
        except OSError as exc:
            self._fork_failed(exc)
        except BaseException as exc:  # e.g. ValueError: a NUL byte in argv; raised as it is
            try:
                self._refuse_unstarted(f"{type(exc).__name__}: {exc}")
            except CageError:
                pass
            raise
        finally:
            os.close(err_w)
        self._watch()
        try:
            self.hooks.started(self)
        except CageError as exc:
            self._refused = str(exc)
            self.kill()
            self.wait()
            raise CageError(self._refused) from None
        return self

    def _prepare(self) -> tuple:
        """Before the hooks start: make this process the run's supervisor; the (label, step)
        pairs the child runs first. CageError refuses the run."""
        from sandboy.confine._libc import prctl
        from sandboy.confine.terminal import session_steps

        self.cage.check_open()  # a closed cage: refused before anything else
        try:
            unseen = reaping.children_reaped_unseen()
        except OSError as exc:  # /proc/self/status unreadable: no fd left, most likely
            raise CageError(f"cannot supervise a run here: {exc.strerror}") from None
        if unseen:
            # Not ours to change: the disposition is the whole process's (its threads, its other
            # children, a library that ignores SIGCHLD on purpose). sandboy.run/spawn get the
            # status anyway (a forked supervisor resets its own; under the tier the init reports).
            raise CageError(f"cannot supervise a run here: {unseen}; set SIGCHLD to SIG_DFL before "
                            "supervising runs in this process, or run them with sandboy.run/spawn, "
                            "which get the exit status without changing it")
        # taken last of the checks (the status read above needs an fd of its own, for a moment)
        try:
            self._spare = reaping.SpareFd()
        except OSError as exc:
            raise CageError(f"cannot supervise a run here: no file descriptor left ({exc.strerror}); "
                            "ending its tree needs one") from None
        prctl(PR_SET_CHILD_SUBREAPER, 1)
        self._enter_pids_group()
        self._in_command = self._make_memory_group()
        # The command leads a session of its own (`ctty` becomes its controlling terminal) and
        # dies with this process: if the supervisor is killed outright its descendants are still
        # ours to kill while we live, but one killed by SIGKILL cannot sweep them.
        from sandboy.confine.init_wait import die_with_the_supervisor

        return (*session_steps(self.ctty), die_with_the_supervisor())

    def _fork_failed(self, exc: OSError):
        self._refuse_unstarted(f"fork failed: {exc.strerror}")

    def _watch(self) -> None:
        """Right after the fork: what the supervisor watches the command with."""
        self.pidfd = above_stdio(os.pidfd_open(self.pid))
        self.deadline = self.started + self.timeout if self.timeout else None

    def _enter_pids_group(self) -> None:
        if os.geteuid() != 0:
            return  # RLIMIT_NPROC (a cage step) binds everyone else
        limit = self.cage.policy.limits.processes
        if self.pids_group is not None:
            # We were forked inside it, or are its member (it also holds others): make room for
            # the command's tree. The final kill walks our descendants, never the group.
            try:
                self.pids_group.set_max(self.pids_group.current() + limit if limit else "max")
            except OSError as exc:
                raise CageError(f"limits.processes: cannot set pids.max: {exc.strerror}") from None
        elif limit:
            from sandboy.confine.pids_cgroup import NO_PIDS_CGROUP, PidsCgroup

            # This process joins a group of its own (+1 for itself); the child is born inside.
            self._own_group = PidsCgroup.create_and_join(limit + 1)
            if self._own_group is None:
                raise CageError(NO_PIDS_CGROUP)

    def _make_memory_group(self) -> tuple:
        if not self.memory_mib:
            return ()
        from sandboy.confine.cgroup import MemoryCgroups

        self._refuse_a_memory_group_the_command_could_leave()
        if self.memory_cgroups is None:
            self.memory_cgroups = MemoryCgroups(keep=False)
        limit = self.cage.policy.limits.processes if os.geteuid() == 0 else 0
        self.memory_group = self.memory_cgroups.take(self.memory_mib, limit)
        if self.memory_group is None:
            raise CageError(NO_MEMORY_CGROUP)
        return (self.memory_group.join_step(),)

    def _refuse_a_memory_group_the_command_could_leave(self) -> None:
        """CageError (125) where one of the cage's write roots lies ON a cgroup file system: the
        command could leave the memory group it joins (`echo $$ > <parent>/tasks`) or raise the
        group's bound. Asked here, where the group is taken, not at the build: the gate builds a
        step's cage without `memory_mib` (no RLIMIT_AS under a cgroup's bound), so the build's
        refusal for `limits.processes` never sees it (gatemem14). Asked at every run: a reused
        cage's roots may have had a cgroup file system mounted on them since (its fingerprint
        would miss too; this does not depend on it)."""
        compiled = getattr(self.cage, "compiled", None)
        fs = compiled.get("landlock.fs") if compiled is not None else None
        if fs is None:  # a cage that cannot say its write roots: cannot be shown safe
            raise CageError("limits.memory_mib: the run's write roots are not known here, so a write root on a "
                            "cgroup file system (the command leaving its memory group) cannot be ruled out")
        roots = fs.outputs.get("mount_roots")
        if roots:
            from sandboy.confine.protections import refuse_a_cgroup_the_command_could_leave

            refuse_a_cgroup_the_command_could_leave(roots, self.cage.policy.source, "limits.memory_mib")

    def _end_memory_group(self, result: RunResult) -> None:
        """The tree is gone: what the memory bound saw goes on `result`; the group goes back
        (kept for the next run only if nothing of this one is left in it: MemoryCgroup.reusable)."""
        from sandboy.confine.cgroup import host_has_swap, swap_degraded

        group, self.memory_group = self.memory_group, None
        kills = group.oom_kills()
        result.enforced = {**result.enforced, "memory": {
            "cgroup_mib": group.mib, "swap": "none" if group.swap_bounded else "not accounted",
            "peak_mib": round(group.peak_bytes() / (1 << 20), 1), "oom_kills": kills}}
        unbounded_swap = None if group.swap_bounded else swap_degraded(group, host_has_swap())
        if unbounded_swap:
            result.degraded.append(unbounded_swap)
        # OUT_OF_MEMORY already: the supervisor ended the tree at the group's OOM event (cgroup
        # v1), which may come before the kernel's own kill is counted
        if (kills or result.outcome == OUT_OF_MEMORY) and result.outcome != CAGE_ERROR:
            result.outcome = OUT_OF_MEMORY
            by = (f"the kernel's OOM killer ended {kills} of them" if kills
                  else "the group's OOM event was signalled")
            result.error = (f"out of memory: the run's processes together reached limits.memory_mib = "
                            f"{group.mib} MiB (a memory cgroup); {by} and the rest of the tree was killed")
        self.memory_cgroups.give_back(group)

    def _refuse_unstarted(self, why: str):
        """Nothing of the command started: the hooks that started are stopped, CageError."""
        if self._err_r is not None:
            os.close(self._err_r)
            self._err_r = None
        self._ended = True
        self._finish(RunResult(EXIT_CAGE, CAGE_ERROR, error=why))
        raise CageError(why) from None

    @property
    def in_pids_cgroup(self) -> bool:
        """Does the run count in a pids cgroup (which counts this process's threads too)?"""
        return self._own_group is not None or self.pids_group is not None

    # --- while it runs -------------------------------------------------------------------------

    def time_left(self):
        """Seconds until the deadline (never negative), or None without one."""
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def exited(self, block: bool = False) -> bool:
        """Has the command itself exited? (Reaps it; its descendants may still run.)"""
        if self._status is None:
            try:
                pid, status = os.waitpid(self.pid, 0 if block else os.WNOHANG)
            except ChildProcessError:
                # Gone, reaped by someone else: the kernel (SIGCHLD ignored, or SA_NOCLDWAIT,
                # since the run started) or a waitpid(-1) elsewhere in this process. Under the
                # tier the init reported the command's status on the error pipe; without it
                # the run fails closed (result.from_child).
                pid, status = self.pid, STATUS_LOST
            if pid:
                self._status = status
        return self._status is not None

    def wait_forwarding(self) -> None:
        """Wait for the command in C, passing this process's signals on to its process group
        (`_libc.wait_forwarding`): exec mode under the namespace tier supervises this way, with
        no Python running while the command does."""
        from sandboy.confine._libc import DEADLINE_PASSED, wait_forwarding

        if self._status is None:
            left = self.time_left()  # the deadline held in C: SIGKILL to the init ends the tree
            status = wait_forwarding(self.pid, 0 if left is None else max(left, 1e-6))
            if status & DEADLINE_PASSED and self._outcome is None:
                self._outcome = TIMED_OUT
            self._status = status & ~DEADLINE_PASSED

    def end(self, outcome=None, deadline=None, before_sweep=None) -> None:
        """Kill the command (if still running) and every descendant; `outcome` names why.

        `before_sweep`: called once the command is reaped, before the rest of the tree is (the
        supervisor hangs its terminal relay up there, so nothing left can reach the caller's
        terminal meanwhile). `deadline` (a time.monotonic() value; the gate stopped by
        ^C/SIGTERM): stop waiting for the killed tree then. Every process has been sent SIGKILL
        and runs no more code, but the kernel may still be tearing one down — a step's private
        tmpfs holding 300,000 files took 1.8 s — and the gate must end within a second.
        `abandoned` then says so."""
        if outcome is not None and self._outcome is None and self._status is None:
            self._outcome = outcome
        if self._ended:
            return
        if self._status is None and self._ends_its_tree():
            self._status = self._ask_the_init_to_end(deadline)
        if self._status is None:
            reaping.kill_pass(self._own_group, self._spare, leader=self.pid)  # unreaped: its pid is its own
            try:
                self._status = reaping.wait_until(self.pid, deadline)
            except ChildProcessError:  # reaped, its status lost to an interrupting signal
                self._status = signal.SIGKILL
            if self._status is None:
                self.abandoned = True
                self._status = signal.SIGKILL  # the wait status of a process killed by SIGKILL
                self._ended = True
                return
        if before_sweep is not None:
            before_sweep()
        if not self._ends_its_tree() and not reaping.sweep(self._own_group, deadline, self._spare):
            self.abandoned = True
        self._ended = True

    def _ask_the_init_to_end(self, deadline=None):
        """Under the tier: ask the namespace's init to end the run (END_RUN_SIGNAL) and give it
        END_GRACE_SECONDS (or until `deadline`) to do so; its wait status, or None (then the
        caller kills the whole tree, the init with it). The init kills the command's tree itself
        and ends as when the command exits: what is still in a relay's pipe reaches the caller's
        file, a reopened stdin's offset is carried back, the status is reported (ADR 0011,
        "Session 9"). Killed with the tree, as before, the init lost up to a pipe's worth of
        output and left the caller's offset where the run began. The grace bounds an init that
        cannot finish (its writes to the caller's file stalled, a tree that will not die): the
        timeout then holds as before."""
        from sandboy.confine._libc import END_RUN_SIGNAL

        try:
            os.kill(self.pid, END_RUN_SIGNAL)  # unreaped: its pid is its own
        except OSError:  # (not a full queue of the uid's real-time signals: kill(2) is then still
            return None  # delivered, without its info, read as SI_USER from pid 0 — measured, session 10)
        limit = time.monotonic() + END_GRACE_SECONDS
        try:
            return reaping.wait_until(self.pid, limit if deadline is None else min(limit, deadline))
        except ChildProcessError:  # reaped unseen: its record on the error pipe says how it ended
            return STATUS_LOST

    def _ends_its_tree(self) -> bool:
        """Under the namespace tier the command is its PID namespace's init. When an init exits,
        the kernel kills every other process of the namespace (nested ones included: a process
        cannot leave its PID namespace) and waits until all are reaped, before the init itself
        can be: once it is reaped, nothing of the run is left to sweep. Orphans inside go to the
        init, never to a subreaper outside. (The gate saves a /proc walk and a waitpid a step.)"""
        return self.cage.tier is not None and self.cage.tier.pid

    def kill(self) -> None:
        if self._result is None:
            self.end(KILLED)

    # --- after it ------------------------------------------------------------------------------

    def wait(self) -> RunResult:
        if self._result is None:
            self._reap()
            from sandboy.confine._libc import read_all

            result = from_child(self._status, read_all(self._err_r), self.argv, self.cage, self.stdio,
                                self._first, self._outcome, self._in_command)
            result.duration = time.monotonic() - self.started
            self.cage_refused = result.outcome == CAGE_ERROR
            self._finish(result)
        return self._result

    def _reap(self) -> None:
        """Until the command and every descendant are gone and reaped."""
        if self._status is None:
            self.exited(block=True)
        self.end()
        os.close(self.pidfd)

    def _finish(self, result: RunResult) -> None:
        """The tree is gone: leave the run's own pids group, then the stop hooks, last first."""
        if self._own_group is not None:
            self._own_group.leave_and_remove()
            self._own_group = None
        if self._spare is not None:
            self._spare.close()
            self._spare = None
        result.report_cage(self.cage)
        if self.memory_group is not None:
            self._end_memory_group(result)
        self._result = result
        self.hooks.end(self, result, self._refused)
