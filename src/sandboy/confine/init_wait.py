"""Exec mode's wait under the namespace tier: start a plan's init (a built Cage's or a cached
plan's, `plan_cache.CachedPlan`) in a session of its own, wait for it in C with the forwarded
signals held, and leave as the command did (its exit code, or its signal repeated here).

Apart from `exec_mode` (which decides what a run needs and builds its hooks and supervision) so
that a plan cache hit, which runs only this, does not read that module's ≈ 14 kB of code it
never runs (the run path's byte-code bundle reads a module's whole group: ADR 0023).
"""

import os
import sys


def die_with_the_supervisor() -> tuple:
    """The (label, step) a supervised child runs first: it dies (SIGKILL) when the process
    supervising it does, whose checks after the run could then never run (supervision.py; a
    cached plan's run with the git check, plan_cache.CachedPlan)."""
    from sandboy.confine._libc import SYS_PRCTL

    return ("die with the supervisor", (SYS_PRCTL, False, PR_SET_PDEATHSIG, SIGKILL))


PR_SET_PDEATHSIG, SIGKILL = 1, 9  # Linux (`signal` imports enum)


def start_and_wait(argv, cage, supervised: bool = False, wall_seconds: int = 0, processes: int = 0) -> tuple:
    """(wait status, the child's report, the session steps it ran first): start `cage`'s init
    (`cage.start_child`: a built Cage, or a cached plan's, plan_cache.CachedPlan) in a session of
    its own and wait for it in C, the forwarded signals held until the wait takes them.
    `supervised`: this process checks after the run (the git check): the forwarded signals stay
    held through it. The child dies with this process either way (its death signal, as under
    `Supervision`). `wall_seconds`: the run's deadline (0: none), from the command's
    start: the wait kills the init then (the whole PID namespace) and its status says so
    (`_libc.DEADLINE_PASSED`). `processes`: the policy's `limits.processes`, which as root only a
    pids cgroup holds (RLIMIT_NPROC does not bind uid 0): the run gets a group of its own
    (`pids_cgroup.PidsCgroup.for_run`), which the init joins right after setting its death signal, before it runs
    anything else, and which is removed once the init has been reaped (CageError where none
    can be made: the run is refused, never run without the limit)."""
    from sandboy.confine import _libc
    from sandboy.confine.terminal import session_steps

    group = _pids_group(processes) if processes and os.geteuid() == 0 else None
    # The init dies with this process whether or not a check follows: it is the only holder of
    # the deadline and the only one waiting, and the caller knows the run by THIS pid (exec mode
    # stands for an exec in place). Killed with SIGKILL (a harness's timeout, subprocess.kill),
    # it left the init and the command running unwaited, past limits.wall_seconds (redcage13).
    # (the death signal first: from the clone to that step the init would outlive a killed waiter,
    # and the pids group's join before it widened that window — rvsec13)
    first = (die_with_the_supervisor(),) + ((group.join_step(),) if group is not None else ()) + session_steps()
    held = hold_forwarded_signals()
    try:
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        try:
            pid = cage.start_child(argv, (None, None, None), err_w, first)
        except BaseException:
            os.close(err_r)
            raise
        finally:
            os.close(err_w)
        status = _libc.wait_forwarding(pid, wall_seconds)  # the init has exited: the PID namespace is empty
    except BaseException:
        release(held)
        raise
    finally:
        if group is not None:
            group.end()  # (before a death by the command's signal is repeated here: exit_like)
    # `supervised`: the git check runs next, in this process. The signals stay held through it
    # (nothing is left to pass them to; `cli.finish` holds the stop signals from then on, and
    # `die_like` unblocks the one it repeats): released here, a ^C, a CI runner's SIGTERM or a
    # hang-up landing once the command had ended killed this process in the check's walk or parse
    # — no verdict, and the plant it was about to move stayed (redcage11). Supervision's stop
    # hooks ran with them held already.
    if not supervised:
        release(held)
    return status, _libc.read_all(err_r), first


def _pids_group(processes: int):
    """The run's own pids cgroup, limited to the command's tree plus the init (which the group
    holds too, Sandboy's: `limits.processes` counts the command and its descendants)."""
    from sandboy.confine.pids_cgroup import NO_PIDS_CGROUP, PidsCgroup

    group = PidsCgroup.for_run(processes + 1)
    if group is None:
        from sandboy.errors import CageError

        raise CageError(NO_PIDS_CGROUP)
    return group


def exit_like(status: int) -> int:
    """`sandboy run`'s exit for the command's wait status: its exit code passed through, its
    death by a signal repeated on this process (128 + the signal where that fails)."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        die_like(sig)
        return 128 + sig
    return os.waitstatus_to_exitcode(status)


def say(error: str) -> None:
    """A run's error on stderr, escaped: it quotes paths the command chose (a planted
    repository's, ADR 0019), which printed raw repaint the terminal or forge lines."""
    from sandboy.escape import line

    sys.stderr.write(line(f"sandboy: {error}") + "\n")


def hold_forwarded_signals():
    """The command runs before fork_exec returns (it waits until the command has exec'd): the
    signals the init passes on are held from now until wait_forwarding takes them, else one
    sent early would end this process (default action) and never reach the command."""
    import _signal as signal  # the C module: `signal` imports enum

    from sandboy.confine import _libc

    return signal.pthread_sigmask(signal.SIG_BLOCK, _libc.FORWARDED_SIGNALS)


def release(held) -> None:
    import _signal as signal

    signal.pthread_sigmask(signal.SIG_SETMASK, held)


def die_like(sig: int) -> None:
    """End this process by `sig`, as the command ended, so a shell sees the same status."""
    import _signal as signal  # the C module: `signal` imports enum

    from sandboy.confine import _libc, hygiene

    try:
        _libc.syscall(_libc.SYS_PRLIMIT64, 0, hygiene.RLIMIT_CORE, bytes(16), None)  # no core of ours
        signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
        os.kill(os.getpid(), sig)
    except (OSError, ValueError):
        pass
