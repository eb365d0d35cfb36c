"""Exec mode: `sandboy run` becomes the command, with no process staying behind — and the one
place that decides what a run needs around it: its hooks (`hooks_for`) and whether a process
must stay with it (`supervisor_needed`).

Without the namespace tier this process applies the cage to itself and execs. Under the tier it
cannot enter a new PID namespace itself, so it starts the namespace's init (which leads a new
session; the command runs in it) and waits for it in C (`_libc.wait_forwarding`), passing
signals on: no Python runs while the command does. The policy's `limits.wall_seconds` is that
wait's deadline: the init ends the run then (END_RUN_SIGNAL, SIGKILL after 1 s) (session 12); as
root its `limits.processes` is a pids cgroup of the run's own, which the init joins right after setting
its death signal, and the wait removes (session 13). A run with hooks that act only before and
after it (the git check) is then supervised by this process (supervision.Supervision): the
init's end is the end of the whole tree.

On the `sandboy run` start-up path: a run without hooks imports nothing beyond what the cage
already needs; the result module only on a failed start.
"""

import os
import sys

# (the wait itself, which a plan cache hit runs without this module: init_wait.py)
from sandboy.confine.init_wait import die_like, exit_like, hold_forwarded_signals, release, say, start_and_wait
from sandboy.errors import CageError


def hooks_for(cage, egress_log=None, git_record=None, egress_log_bytes=None, lookups=None) -> list:
    """The supervision hooks every run of `cage` gets, whoever runs it (the CLI, the API, the
    gate): the one list. Each is checked cheaply before its module is imported. `git_record`:
    the gate's `gitcheck_hook.LaunchRecord`, carrying where the git directories are from one step's
    check to the next step's launch (ADR 0019, session 6). `egress_log_bytes`: the bound of the
    egress decision log (None: egress.log.MAX_LOG_BYTES; the gate gives a step's output cap).
    `lookups`: the gate's egress.resolver.LookupHelper, shared by its steps' proxies."""
    hooks = []
    policy = cage.policy
    # Any write root may get a repository planted in it. A policy writing only to `{tmp}` keeps
    # no check (nowhere else to leave a link leading the operator's git there; the commonest
    # policy: the import is left out for it); beside another write root, `{tmp}` is walked
    # too unless it is the tier's private tmpfs (gitcheck_hook._cage_scope)
    # (normalised first: `{tmp}/../x` names a directory beside it, resolved so at run time)
    # (with the defaults off, the policy's own `fs.protect` entries still get the link and mode
    # checks: `gitcheck_hook.scope_args`, ADR 0013 "Session 11")
    if (policy.fs.protect_defaults or policy.fs.protect) and any(
            not os.path.normpath(w).startswith("{tmp}") for w in policy.fs.write):
        from sandboy.confine.gitcheck_hook import GitCheck

        check = GitCheck.for_cage(cage, git_record)
        if check is not None:
            hooks.append(check)
            git_record = None
    if git_record is not None:
        git_record.take()  # a run without the check may still write: the record no longer says where things are
    # after the git check: stopped first, so the check's verdict is the last word
    if policy.net.egress:
        from sandboy.egress.session import EgressSession

        session = EgressSession.for_cage(cage, egress_log, egress_log_bytes, lookups)
        if session is not None:
            hooks.append(session)
    return hooks


def supervisor_needed(cage, *, timeout=None, tty=False, stdio=(None, None, None), in_place=False,
                      controlling_terminal=None, hooks=()):
    """Why a run of `cage` needs a process of its own to stay with it (a supervisor, see
    supervision.py), or None: then the CLI execs the command in place (exec mode) and the API
    may start it as a direct child. The one rule, asked by `sandboy run`, `--dry-run` and
    `launch.spawn`.

    `hooks`: the run's hooks (`hooks_for`, plus any of the caller's). `in_place`: asked for exec
    mode, where THIS process would become the command (its own terminal, session and process
    group matter; `controlling_terminal` is the caller's answer to
    `terminal.has_controlling_terminal()` when it has probed already). Otherwise the command's
    `stdio` must hold no terminal."""
    from sandboy.confine import terminal
    from sandboy.policy.resolve import uses_tmp

    policy = cage.policy
    limits = policy.limits
    if tty:
        return "a fresh pseudo-terminal to relay (--tty)"
    # Exec mode under the PID namespace waits for the init (`init_wait.start_and_wait`), and the
    # init's end is the end of every process of the run: that wait holds the policy's deadline
    # (SIGKILL to the init ends the namespace), as the supervision's would (session 12), and as
    # root the run's own pids cgroup, which the init joins before it runs anything of the command and the wait removes
    # (session 13) — no supervisor for the README's example, as root too
    waits_for_the_init = in_place and cage.tier is not None and cage.tier.pid
    if timeout is not None or (limits.wall_seconds and not waits_for_the_init):
        return "a deadline to enforce (limits.wall_seconds or a timeout)"
    if limits.processes and os.geteuid() == 0 and not waits_for_the_init:
        return "a pids cgroup for limits.processes (as root, RLIMIT_NPROC does not bind)"
    # In exec mode nothing would be left to remove {tmp}: every run leaked a /tmp/sandboy-*
    # directory. Not under the namespace tier, where it is a tmpfs that dies with the run (and
    # the waiting parent removes the empty mount point, or — `sandboy run`'s fixed one,
    # `cage.fixed_tmp_dir` — leaves it for the next run).
    if uses_tmp(policy) and not (cage.tier is not None and cage.tier.tmp_private):
        return "a private {tmp} to remove after the run"
    for hook in hooks:
        if hook.during_run:
            return f"{hook.name}: works while the command runs"
        if cage.tier is None:
            # without a PID namespace nothing but a subreaper knows when the whole tree is gone
            return f"{hook.name}: runs once every process of the run has ended"
    if not in_place and not (cage.tier is not None and cage.tier.pid):
        # The API's caller waits for a direct child itself: with SIGCHLD ignored the kernel reaps
        # it unseen and its status is lost. A forked supervisor resets its own disposition and
        # reports the status on its pipe. Under the tier the direct child is the namespace's
        # init, which reports the command's wait status on the error pipe itself: no supervisor
        # needed (ADR 0020, Session 6). (`sandboy run`, in place, reset SIGCHLD: cli.finish.)
        from sandboy.confine.reaping import children_reaped_unseen

        unseen = children_reaped_unseen()
        if unseen:
            return unseen
    if in_place:
        if not terminal.exec_in_place_possible(controlling_terminal):
            return "a terminal to keep from the command (it is relayed)"
    elif terminal.any_terminal(stdio):
        return "a terminal on fd 0-2 to keep from the command (it is relayed)"
    return None


def exec_confined(argv, cage, on_applied=None, hooks=()):
    """Apply `cage` to this process and execve `argv`. Returns only an exit code on failure.

    Only where `supervisor_needed(..., in_place=True, hooks=hooks)` is None: the command then
    leads a session of its own and no terminal is within its reach. `on_applied(result=None)`
    is called once the cage holds; with a RunResult when a hook changed what the run's end
    means (a git check that failed it)."""
    from sandboy.confine import _libc
    from sandboy.confine.terminal import enter_own_session

    if cage.tier is not None:
        if len(hooks) == 1 and getattr(hooks[0], "name", None) == "git check" and hooks[0].record is None:
            return _check_in_namespace(argv, cage, on_applied, hooks[0])
        if hooks:
            return _supervise_in_namespace(argv, cage, on_applied, hooks)
        return _wait_in_namespace(argv, cage, on_applied)
    if hooks:  # supervisor_needed said so: never run them unsupervised
        raise CageError(f"{hooks[0].name}: needs a supervisor without the namespace tier")
    import errno  # only on this path (no tier): a run under the tier never needs it

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
    """Exec mode under the namespace tier: start the init, wait for it in C (until the policy's
    `limits.wall_seconds`). The command's exit status is passed through, and its death by a
    signal repeated on this process."""
    limits = cage.policy.limits
    status, report, first = start_and_wait(argv, cage, wall_seconds=limits.wall_seconds, processes=limits.processes)
    return _ended_in_namespace(status, report, first, argv, cage, on_applied)


def _ended_in_namespace(status, report, first, argv, cage, on_applied, message=""):
    """The exit status of an exec-mode run under the tier once its init has ended
    (`_wait_in_namespace`, `_check_in_namespace`): a start that failed is said (before close:
    the message names a plan step) or, where the cage was not applied, raised; `message`, the
    git check's finding, refuses the run as planted. A `status` with `_libc.DEADLINE_PASSED`: the
    wait's deadline killed the run — reported as a supervision's timeout (137, "timed_out")."""
    from sandboy.confine import _libc

    timed_out = status & _libc.DEADLINE_PASSED
    status &= ~_libc.DEADLINE_PASSED
    failed, reported = _libc.read_child_report(report)
    if failed is None and not message and not timed_out:
        cage.close()
        if on_applied is not None:
            on_applied()
        return exit_like(status if reported is None else reported)
    from sandboy.confine.result import CAGE_ERROR, PLANTED, TIMED_OUT, from_child

    result = from_child(status, report, argv, cage, first=first, outcome=TIMED_OUT if timed_out else None)
    if timed_out:
        result.duration = float(cage.policy.limits.wall_seconds)  # (its C wait's deadline, from the start)
    refused = result.outcome == CAGE_ERROR  # the cage was not applied: nothing ran
    if message:
        result.refuse(message, PLANTED)
    cage.close()
    if refused:
        raise CageError(result.error)
    if on_applied is not None:
        on_applied(result if result.outcome in (PLANTED, TIMED_OUT) else None)
    if result.error:
        say(result.error)
    return result.returncode


def _check_in_namespace(argv, cage, on_applied, check):
    """`_supervise_in_namespace` for the one hook exec mode meets under the tier — the post-run
    git check (`gitcheck_hook.GitCheck`: before and after the run only) — without a Supervision: this
    process waits in C for the init, the child dying with it, as a plan-cache hit runs the same
    check (`plan_cache.CachedPlan.run`). The same snapshot, verdict, words and exit codes as
    under a Supervision (its hooks' rules: a refusal at the start is the cage's, 125; a check
    that fails to run fails the run), without what only a supervisor of a longer run needs (the
    subreaper, a spare fd, a pidfd, the SIGCHLD check `cli.finish` made moot) nor its modules
    (the "supervised" bundle group): every write-root build and first run (session 10)."""
    try:
        check.start(None)  # the snapshot, just before the start; CageError: refused (the walk's bound)
    except CageError:
        raise
    except Exception as exc:
        raise CageError(f"{check.name}: {exc}") from None
    try:
        limits = cage.policy.limits
        status, report, first = start_and_wait(argv, cage, supervised=True, wall_seconds=limits.wall_seconds,
                                               processes=limits.processes)
    except OSError as exc:
        raise CageError(f"fork failed: {exc.strerror}") from None
    from sandboy.confine.gitcheck import after_run

    try:  # once the init — and with it every process of the run — has ended
        message = after_run(check.snap)
    except Exception as exc:  # a check that could not run did not pass (HookChain.stop)
        message = f"{check.name}: {exc}"
    return _ended_in_namespace(status, report, first, argv, cage, on_applied, message)


def _supervise_in_namespace(argv, cage, on_applied, hooks):
    """`_wait_in_namespace` with hooks: this process supervises the run (supervision.py), still
    waiting in C; the init's end is the end of the tree, so the stop hooks see it all gone."""
    from sandboy.confine.result import CAGE_ERROR, PLANTED, SIGNALED, TIMED_OUT
    from sandboy.confine.supervision import Supervision

    held = hold_forwarded_signals()
    try:
        run = Supervision(argv, cage, hooks=hooks, exits_after=True).start()  # CageError: refused
        run.wait_forwarding()
    finally:
        release(held)
    result = run.wait()
    cage.close()
    if run.cage_refused:
        raise CageError(result.error)
    if on_applied is not None:
        on_applied(result if result.outcome in (PLANTED, CAGE_ERROR, TIMED_OUT) else None)
    if result.error:
        say(result.error)
    if result.outcome == SIGNALED:
        die_like(result.signal)
    return result.returncode
