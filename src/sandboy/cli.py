"""The `sandboy` command: parses arguments and calls the packages. No logic lives here.

`sandboy run` has a hand-written fast path for its few options: `argparse` imports `re` and
`gettext` (≈ 10 ms), which alone would cost more than the whole cage (docs/performance.md).
Anything the fast path does not recognise (`--help`, a typo), and every other command, goes to
argparse's parser in `cli_parser.py`, which prints the usual help and errors.
"""

import gc
import os
import sys

from sandboy.exit_codes import EXIT_CAGE, EXIT_OUTPUT_FAILED, EXIT_READER_GONE, EXIT_USAGE

class RunArgs:
    __slots__ = ("policy", "status_json", "status_fd", "dry_run", "json", "cwd", "tty", "command", "egress_log")

    def __init__(self):
        self.policy = None
        self.status_json = None
        self.status_fd = None
        self.dry_run = False
        self.json = False
        self.cwd = None
        self.tty = False
        self.command = []
        self.egress_log = None


def parse_run_fast(argv: list[str]) -> RunArgs | None:
    """Parse `run` options without argparse; None means "let argparse handle it"."""
    args = RunArgs()
    valued = {"--policy": "policy", "-p": "policy", "--status-json": "status_json",
              "--status-fd": "status_fd", "--cwd": "cwd", "--egress-log": "egress_log"}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            args.command = argv[i + 1 :]
            break
        if not arg.startswith("-"):
            args.command = argv[i:]
            break
        name, eq, value = arg.partition("=")
        if name in valued:
            if not eq:
                if i + 1 >= len(argv):
                    return None
                i += 1
                value = argv[i]
            setattr(args, valued[name], value)
        elif arg == "--dry-run":
            args.dry_run = True
        elif arg == "--json":
            args.json = True
        elif arg == "--tty":
            args.tty = True
        else:
            return None
        i += 1
    if args.policy is None or (not args.command and not args.dry_run):
        return None
    if args.status_fd is not None:
        if not args.status_fd.isdigit():
            return None
        args.status_fd = int(args.status_fd)
    return args


def _ignore_terminal_signals() -> None:
    import _signal  # not `signal`: it imports enum

    for sig in (_signal.SIGINT, _signal.SIGQUIT):
        _signal.signal(sig, _signal.SIG_IGN)


def _err(message: str) -> None:
    from sandboy.escape import line  # messages quote policy files and paths: never raw

    sys.stderr.write(line(f"sandboy: {message}") + "\n")


def cmd_run(args: RunArgs) -> int:
    try:
        return _cmd_run(args)
    finally:  # (an in-process caller gets its own os.environ back: env_reads.start)
        if "sandboy.confine.env_reads" in sys.modules:
            from sandboy.confine import env_reads

            recording = env_reads.recording()
            if recording is not None:
                env_reads.stop(recording)


def _cmd_run(args: RunArgs) -> int:
    global _exit_without_finalizing
    # No cycle collection during start-up: the imports and the cage's build allocate enough
    # to trigger several collections that find nothing (≈ 3 % of the CLI's instructions),
    # and exec mode then only waits and leaves by os._exit. Re-enabled before a supervised run,
    # which may last (terminal relay, egress proxy).
    gc.disable()
    if not args.command and not args.dry_run:  # (argparse's run: the fast path sends none here)
        _err("run: no command given (put it after --), or use --dry-run")
        return EXIT_USAGE
    if args.json and not args.dry_run:
        _err("run: --json describes the rules and goes with --dry-run; for the outcome of a run "
             "use --status-json FILE (nothing ran)")
        return EXIT_USAGE
    if args.cwd is not None and not os.path.isdir(args.cwd):
        why = "does not exist" if not os.path.lexists(args.cwd) else "is not a directory"
        _err(f"--cwd {args.cwd}: {why} (nothing ran)")
        return EXIT_USAGE
    status = None
    if not args.dry_run and (args.status_json or args.status_fd is not None):
        # Opened (and emptied) before the policy is read: an empty status file means Sandboy
        # refused before anything ran — how a policy error (2) tells from the command's own 2.
        try:
            status = _open_status(args)
        except OSError as exc:
            option = "--status-json" if args.status_json else "--status-fd"
            _err(f"{option} {args.status_json or args.status_fd}: {exc.strerror} (nothing ran)")
            return EXIT_USAGE
    # Exec mode may run a plan built by an earlier `sandboy run` with the same inputs (ADR 0028):
    # before the compilers are even imported. `miss`: the inputs of a build the cache may keep.
    # `first`: no entry to compare with — the plan cache is imported only once the loaded policy
    # may be kept (a policy never kept — `[net]` egress, a run always supervised: `plan_may_keep` —
    # pays nothing of it).
    miss = said = entry = None
    first = False
    cacheable = args.command and not (args.dry_run or args.tty or args.status_json or args.status_fd is not None
                                      or args.egress_log)
    if cacheable:
        # From here every read of the environment is recorded: an entry is keyed with the values
        # of the variables this run read, not with all of them (env_reads; ADR 0028, session 12)
        from sandboy.confine import env_reads

        env_reads.start()
    # (`SANDBOY_PLAN_CACHE=0`: none of it, not even its import)
    from sandboy.cache_places import plan_cache_enabled

    if cacheable and plan_cache_enabled():
        from sandboy.cache_places import plan_entry_path

        try:
            cwd = os.path.abspath(args.cwd or os.getcwd())
            entry = plan_entry_path(args.policy, cwd)  # (asked once: the Miss takes it)
            first = not os.path.lexists(entry)
        except OSError:  # the working directory is gone: the build says so
            pass
        if entry is not None and not first:
            from sandboy.confine import plan_cache

            hit, miss = plan_cache.consult(args.policy, args.cwd, (cwd, entry))
            if hit is not None:
                _say_notes(hit, args.command[0])
                said = True
                code = hit.run(args.command)  # None: it did not start (nothing ran): build anew
                if code is not None:
                    _exit_without_finalizing = True
                    return code
    from sandboy.confine import cage as cagemod
    from sandboy.confine import exec_mode
    from sandboy.confine.terminal import has_controlling_terminal
    from sandboy.policy.model import Policy
    from sandboy.errors import CageError, PolicyError  # (a build's: a hit makes no exception class)
    from sandboy.policy.resolve import plan_may_keep

    cage = None
    try:
        # the bytes the plan cache read, or reads now: an entry is keyed with exactly what was parsed
        raw = None if miss is None else miss.policy_bytes
        if first:
            from sandboy.policy.load import read_bounded

            raw = read_bounded(args.policy)
        policy = Policy.load(args.policy, raw=raw)
        if args.dry_run:
            return _dry_run(policy, args)
        pieces = None  # the parts earlier runs kept (plan_pieces: the seccomp program), for the build
        if first:
            if plan_may_keep(policy):
                from sandboy.confine.plan_keep import Miss

                miss = Miss.first(args.policy, (cwd, entry), raw)  # (kept: asked just now)
                if miss is None:
                    pieces = _pieces_unkept()
        elif miss is not None and not miss.keeps(policy):
            miss = None  # never kept: no fingerprint to compute, no entry to make
        # a fingerprint only for a run the plan cache may keep (`sandboy run` runs one command)
        # `{tmp}` at a fixed mount point under the tier: nothing of this run's own in the plan
        # (the plan cache keeps it), nothing on the host to remove after it (ADR 0028, session 12)
        # the policy file is what the NEXT run is made of: read-only wherever a write root holds
        # it (own_install's rows, which exist only with write roots and the defaults: a policy
        # without them imports none of it; the command rewrote it, and the next run took its rules)
        if policy.fs.write and policy.fs.protect_defaults:
            from sandboy.confine.own_install import protect_policy_file

            protect_policy_file(args.policy)
        if miss is not None:
            pieces = miss.pieces
        cage = cagemod.build(policy, cwd=args.cwd, tty=args.tty, reusable=miss is not None,
                             pieces=pieces, fixed_tmp=True)
        if miss is not None:
            miss.built(cage)  # the code that built it: taken before the command runs
        if not said:
            _say_notes(cage, args.command[0])
        if args.egress_log:
            # The proxy appends its decisions while the command runs: in a write root the command
            # could empty or rewrite the record of what it reached (`: > egress.jsonl` after a
            # refused exfiltration, rc 0; redcage12). As the gate does for its reports.
            _egress_log_outside(args.egress_log, policy, cage.ctx)
        hooks = exec_mode.hooks_for(cage, args.egress_log)  # the git check, the egress proxy
        terminal = has_controlling_terminal()  # probed once: the decision and the signals below
        # (--status-json without the tier: a run that execs in place writes its status before the
        # command starts and is not there to see the command replace it — `_status_replaced`)
        if exec_mode.supervisor_needed(cage, tty=args.tty, in_place=True, controlling_terminal=terminal, hooks=hooks) \
                or (args.status_json and cage.tier is None):
            if terminal:
                # The terminal's ^C and ^\ reach the supervisor too (it is in our job), which
                # passes them on to the command (in a session of its own) and reports the outcome.
                _ignore_terminal_signals()
            gc.enable()
            from sandboy.confine.result import KILLED, PLANTED

            try:
                if cage.tier is not None:  # this process supervises: no supervisor process to fork
                    from sandboy.confine.supervisor import run_here  # not launch: one module less

                    result = run_here(args.command, cage, hooks, tty=args.tty)
                else:
                    from sandboy.confine import launch

                    result = launch.run(args.command, cage, supervise=True, tty=args.tty, builtin_hooks=hooks)
            finally:
                cage.close()
            if pieces is not None:  # (a run supervised here is never kept: its pieces alone)
                pieces.store()
            # the supervisor process has ended, and with it the egress proxy (its thread, the
            # listener, the --egress-log fd, written unbuffered): nothing of this process is left
            # to finalize (cage.close() closed a fallback cage's host port)
            _exit_without_finalizing = True
            if result.error:
                _err(result.error)
            if status is not None:
                _write_status(status, result.enforced, result.degraded, result.warnings, policy.source,
                             {"outcome": result.outcome, "returncode": result.returncode,
                              "signal": result.signal, "duration": round(result.duration, 6),
                              **({"error": result.error} if result.outcome == PLANTED else {}),
                              **({"egress": result.egress} if result.egress is not None else {})})
            if status is not None and _status_replaced(args, status):
                return EXIT_CAGE
            if result.outcome == KILLED and cage.tier is not None:
                # only a SIGTERM to this process ends a run_here run so: end as it would have
                sys.stderr.flush()
                exec_mode.die_like(15)
            return result.returncode

        def on_applied(result=None):
            # result: only where the run's end is known here and changes its meaning (a git
            # check that failed the run under the namespace tier, ADR 0019)
            if status is not None:
                _write_status(status, cage.enforced, cage.degraded, cage.warnings, policy.source,
                             {"outcome": "exec", "returncode": None} if result is None else
                             _exec_outcome(result))

        _exit_without_finalizing = True
        code = exec_mode.exec_confined(args.command, cage, on_applied, hooks)
        if miss is not None:  # once the command has run: its start waited for nothing
            miss.store(cage, hooks)  # (its pieces with it)
        elif pieces is not None:
            pieces.store()
        if status is not None and _status_replaced(args, status):
            return EXIT_CAGE
        return code
    except PolicyError as exc:
        _close_refused(cage)
        _err(str(exc))
        return EXIT_USAGE
    except CageError as exc:
        _close_refused(cage)
        _err(f"cage not applied, command not run: {exc}")
        return EXIT_CAGE


def _pieces_unkept():
    """`plan_pieces.Pieces` for the build of a run whose fd 0-2 the plan cache never keeps (a file
    there: `sandboy run ... > build.log`, so every such run is a first run), of a policy it may
    keep: no plan is kept, but a piece is keyed by neither (ADR 0028, session 13). Asked only where
    `Miss.first` loaded the pieces' code ("plan pieces" bundle group) already: a kept program then
    costs ≈ 0.2 ms in-process, building it ≈ 0.45 ms; where the group is not loaded (`--tty`,
    `--status-json`, an existing entry) its import costs more than the program (+0.15..+0.9 ms)."""
    from sandboy.confine.plan_pieces import Pieces

    return Pieces()


def _say_notes(cage, argv0: str) -> None:
    """What degraded, the build's warnings, and a PATH search that skips a refused match: said
    before the command runs, the same for a built cage and a cached plan."""
    for line in cage.degraded:
        _err(f"degraded: {line}")
    for line in cage.warnings:
        _err(f"warning: {line}")
    tier = getattr(cage, "tier", None)  # (a cached plan has none: a file on fd 0-2 never hits it)
    same_file = tier.reads_what_it_appends() if hasattr(tier, "reads_what_it_appends") else None
    if same_file:
        _err(f"warning: {same_file}")
    if "/" not in argv0:  # a PATH search only: a path names one file, nothing is skipped
        from sandboy.confine import explain  # before the cage: it may not be readable inside

        skipped = explain.skipped(argv0, cage)
        if skipped:
            _err(f"warning: {skipped}")


def _egress_log_outside(path: str, policy, ctx) -> None:
    """Refuse (exit 2, nothing ran) an --egress-log inside a write root (`_cmd_run` says why):
    the write roots as the build resolved them (`{cwd}`, `{repo}`, relative paths), links followed."""
    from sandboy.errors import PolicyError
    from sandboy.policy.resolve import is_within, resolve

    real = os.path.realpath(path)
    for root in resolve(policy, ctx).fs.write:
        if is_within(real, os.path.realpath(root)):
            raise PolicyError("sandboy run", "--egress-log",
                              f"{path} lies inside the write root {root}: the command could empty or rewrite "
                              "the record of the hosts it reached; write it outside the write roots")


def _close_refused(cage) -> None:
    """A cage built but refused at launch (the git check's bound, a namespace refused...) still
    has its `{tmp}` host directory to remove: each such run left one in $TMPDIR. (A second close
    after one on the way out is harmless.)"""
    if cage is not None:
        cage.close()


# --status-json's fd (not a caller's --status-fd) and what its path was then (lstat: the link
# itself where the operator named one): `_status_replaced` compares both
_STATUS_OPENED: list = []  # (set by `_open_status`, read by `_write_status`)


def _open_status(args: RunArgs) -> int:
    """`--status-json FILE` / `--status-fd N`: the descriptor, opened before the cage closes,
    written after (`_write_status`)."""
    # imported now: after Landlock the package may no longer be readable. Not `json`: it imports
    # `re` and compiles its patterns (≈ 8 ms of CPU, docs/performance.md session 7)
    from sandboy import json_text  # noqa: F401

    if args.status_json:
        fd = os.open(args.status_json, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        there = os.lstat(args.status_json)
        _STATUS_OPENED[:] = [fd, (there.st_dev, there.st_ino)]
        return fd
    os.set_inheritable(args.status_fd, False)
    return args.status_fd


def _exec_outcome(result) -> dict:
    """--status-json's outcome of an exec-mode run whose end this process saw: a git check's
    refusal (with its words), or the policy's deadline — in the supervised run's shape (its
    signal and duration), so a timeout reads the same however the run was waited for."""
    from sandboy.confine.result import TIMED_OUT

    if result.outcome == TIMED_OUT:
        return {"outcome": result.outcome, "returncode": result.returncode, "signal": result.signal,
                "duration": round(result.duration, 6)}
    return {"outcome": result.outcome, "returncode": result.returncode, "error": result.error}


def _write_status(fd: int, enforced, degraded, warnings, source, outcome) -> None:
    from sandboy import __version__, json_text
    from sandboy.confine.landlock import abi_version

    doc = {"sandboy": __version__, "policy": source, "landlock_abi": abi_version(),
           "enforced": enforced, "degraded": degraded, "warnings": warnings, **outcome}
    data = (json_text.dumps(doc) + "\n").encode()  # json.dumps(doc, indent=2)'s text
    os.write(fd, data)
    if _STATUS_OPENED and _STATUS_OPENED[0] == fd:
        # --status-json's own file (offset 0 since its O_TRUNC): what the command wrote into it
        # beyond our bytes would have followed them as a second document
        os.ftruncate(fd, len(data))


def _status_replaced(args: RunArgs, fd: int) -> bool:
    """Whether --status-json FILE is no longer the file this run opened and wrote. Where a write
    root holds FILE (`--status-json s.json` in the project), the command could remove it and put
    a forged status there (`"outcome": "exec"`, no error): Sandboy's status went to the unlinked
    file, and a CI reading FILE took a planted or failed run for a clean one (redcage12). The run
    is failed instead (125), saying so. Asked once every process of the run has ended."""
    if not args.status_json:
        return False
    try:
        # both: the file it leads to is ours, and the path is what it was (a symlink put there to
        # /proc/self/fd/N leads, for this process only, to our own fd)
        now, ours, there = os.stat(args.status_json), os.fstat(fd), os.lstat(args.status_json)
        if (now.st_dev, now.st_ino) == (ours.st_dev, ours.st_ino) and (there.st_dev, there.st_ino) == _STATUS_OPENED[1]:
            return False
        why = "another file is there now"
    except OSError as exc:
        why = exc.strerror
    _err(f"--status-json {args.status_json}: not the file this run wrote its status to ({why}): the "
         "command replaced it; failing the run. Put the status file outside the write roots")
    return True


def _dry_run(policy, args: RunArgs) -> int:
    from sandboy.confine import dry_run

    report = dry_run.report(policy, args.command, cwd=args.cwd, tty=args.tty)
    if args.json:
        from sandboy import json_text

        print(json_text.dumps(report))  # json.dumps(report, indent=2)'s text
    else:
        print(dry_run.describe(report))  # escaped line by line where it is composed
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["run"]:
        fast = parse_run_fast(argv[1:])
        if fast is not None:
            return cmd_run(fast)
    from sandboy.cli_parser import build_parser

    parser = build_parser()
    ns = parser.parse_args(argv)
    if not getattr(ns, "func", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        return ns.func(ns)
    except KeyboardInterrupt:
        return 130


def finish(main_function, argv=None) -> int:
    """Run a command's `main` like a well-mannered Unix tool: when the reader of stdout goes away
    (`sandboy ... | head -1`) stop quietly with 141, what a shell shows for a tool ended by
    SIGPIPE — no traceback, no message (Python ignores SIGPIPE, so it arrives as BrokenPipeError).
    Every program of Sandboy starts here (`sandboy`, `python -m sandboy.gate.cli`, `… audit.cli`)."""
    # Every command waits for what it starts (`run`: the namespace's init, the command, the
    # supervisor; `gate`: its steps, in this process; `audit`: its tools, a build's compiler):
    # an ignored SIGCHLD, which survives exec from whoever started us, has the kernel reap them
    # unseen and send no SIGCHLD — the tier's wait hung for ever, a supervised run lost the
    # command's exit code, a gate step was refused. This process is Sandboy's own program, so it
    # may reset it (the library does not: ADR 0020, Session 6). A confined command's own plan
    # resets what it inherits either way.
    import _signal  # not `signal`: it imports enum

    _signal.signal(_signal.SIGCHLD, _signal.SIG_DFL)
    if sys.stdout is None or sys.stderr is None or sys.stdin is None:
        # started with fd 0-2 closed: /dev/null there before anything opens a descriptor that a
        # run's dup2 onto 0-2 would replace (hygiene.hold_free_stdio), and sys.std* on it
        from sandboy.confine.hygiene import hold_free_stdio
        from sandboy.errors import CageError

        try:
            hold_free_stdio()
        except CageError:
            return EXIT_CAGE  # no stderr to say it on: fd 2 is among the closed
        for name, fd, mode in (("stdin", 0, "r"), ("stdout", 1, "w"), ("stderr", 2, "w")):
            if getattr(sys, name) is None:
                setattr(sys, name, open(fd, mode, closefd=False))
    try:
        code = main_function(argv)
        sys.stdout.flush()  # here, not at interpreter exit, where a failure prints "Exception ignored"
        # The status is decided. The interpreter's exit puts SIG_DFL back on the handlers Python
        # set, so one more ^C/SIGTERM/SIGHUP landing then (a CI runner's follow-up, ^C held down)
        # ended a gate that had stopped its step and written "killed" by that signal instead of
        # its 130: held from here to the exit (a run's `die_like` ends inside main_function).
        _signal.pthread_sigmask(_signal.SIG_BLOCK, {_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP})
        return code
    except BrokenPipeError:
        output_to_devnull(sys.stdout)
        return EXIT_READER_GONE
    except OSError as exc:
        # Whatever escaped a command as OSError is its output failing (a full disk, /dev/full,
        # EIO): every command handles its own files and names them. Said once, exit 74.
        output_to_devnull(sys.stdout)
        sys.stderr.write(f"sandboy: cannot write the output: {exc.strerror or exc}\n")
        return EXIT_OUTPUT_FAILED


def output_to_devnull(stream) -> None:
    """Point `stream`'s file descriptor at /dev/null once its reader is gone (or it cannot be
    written): what is still buffered then goes nowhere at exit instead of failing again there
    ("Exception ignored ... BrokenPipeError")."""
    quiet = os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, stream.fileno())
    os.close(quiet)


# Set by `sandboy run` once the command has run (or failed to start) and what is left is to exit
# with its status. Tearing the interpreter down (module dicts, the compiled cage's tables) took
# 3-4 ms, a third of the CLI's start-up overhead (docs/performance.md); the run path starts no
# thread in this process, registers no atexit hook and writes its status file with os.write, so
# after flushing stdout and stderr nothing is lost by leaving with os._exit.
_exit_without_finalizing = False


def entry() -> None:
    code = finish(main)
    if _exit_without_finalizing:
        try:
            sys.stderr.flush()
        except OSError:
            pass
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    entry()
