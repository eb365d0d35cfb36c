"""`sandboy gate`: run a repository's `.007/gate.toml` steps, each confined under the ceiling.

Top-level imports are stdlib-only and light: the top-level CLI imports this module to register
the command, and `sandboy run` must not pay for the gate.
"""

from __future__ import annotations

import argparse
import sys

from sandboy.errors import EXIT_INTERRUPTED, EXIT_READER_GONE
from sandboy.sizes import size_type


EPILOG = """\
examples:
  sandboy gate                                   # the repository in the current directory
  sandboy gate path/to/repo --ceiling ceiling.toml
  sandboy gate --junit ../out/gate.xml --json ../out/gate.json --logs ../out/logs
                                                 # reports go OUTSIDE what steps can write
  sandboy gate --keep-going                      # run every step even after a required one failed
  sandboy gate --tty unit                        # debug step "unit" interactively in a fresh pty
  sandboy gate --budget 45m                      # all steps together get 45 minutes (default 6h)

The repository writes .007/gate.toml; the operator's --ceiling (a step policy) bounds every step:
a step policy can only narrow it, and each narrowing is printed as "step NAME asked for ...".
Without --ceiling the built-in one applies: read the system and the repository, write the
repository and a per-step {tmp}, no network, never $HOME, /root, /var, /tmp or the /etc secrets.
With $GITHUB_STEP_SUMMARY set, a Markdown summary is appended to it.
All steps together get the operator's time budget (--budget, else the ceiling's [gate] budget,
else 6h): when it is spent the running step is ended as if it timed out and the rest are not run
(status over_budget); the gate then exits 1.

exit codes: 0 every required step passed; 1 a required step failed, timed out or was killed (or
the time budget was spent before it ran);
2 gate or policy error (nothing ran); 125 a cage could not be applied; 130 interrupted (^C, SIGTERM, SIGHUP);
141 the reader of stdout went away (`| head`): the running step is ended, the reports written;
74 stdout could not be written (a full disk): the same, said on stderr.
Reference: docs/gate.md."""


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "gate", help="run a repository's .007/gate.toml steps, each in a cage",
        description="Run the steps of REPO/.007/gate.toml in order, each confined by "
                    "meet(step policy, ceiling). Step output is streamed prefixed with the step name.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    configure(parser)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("repo", nargs="?", default=".", metavar="REPO",
                        help="the repository holding .007/gate.toml (default: the current directory)")
    parser.add_argument("--ceiling", metavar="FILE",
                        help="the operator's ceiling policy (default: the built-in conservative ceiling)")
    parser.add_argument("--junit", metavar="FILE", help="write a JUnit XML report (one testcase per step)")
    parser.add_argument("--json", metavar="FILE", dest="json_path", help="write a JSON report ('-' for stdout)")
    parser.add_argument("--logs", metavar="DIR", help="write each step's full output to DIR/<step>.log")
    parser.add_argument("--max-step-output", metavar="SIZE", type=size_type(1024), default=None,
                        help="bytes of each step's output kept in its log and shown (head and tail; "
                             "the rest is dropped and reported); default 32M; all steps together keep "
                             "at most 8 times it, then 64K a step")
    parser.add_argument("--budget", metavar="DURATION", type=_budget_type,
                        help="wall time all steps together may take, e.g. 45m, 2h, 5400 (0 = no budget); "
                             "default: the ceiling's [gate] budget, else 6h")
    parser.add_argument("--keep-going", action="store_true",
                        help="run every step even after a required step failed")
    parser.add_argument("--print-ceiling", action="store_true",
                        help="print the built-in ceiling as a policy file (a start for --ceiling) and exit")
    parser.add_argument("--tty", action="append", default=[], metavar="STEP", dest="interactive",
                        help="run STEP with a fresh pseudo-terminal relayed to this terminal, for "
                             "interactive debugging (its output is shown raw); repeatable. Other steps "
                             "never get a terminal")
    parser.set_defaults(func=run_command)


def _budget_type(text: str) -> int:
    from sandboy.budget import option  # (imported when used: the CLI's start-up stays lean)

    return option(text)


def _say(text: str) -> None:
    """One line on stderr; it may quote the repository (keys, paths, names): never raw. A stderr
    that cannot be written (a hung-up terminal: EIO) loses the line, not the exit code."""
    from sandboy.escape import line

    try:
        sys.stderr.write(line(text) + "\n")
    except OSError:
        pass


def _fail(args, message: str, code: int) -> int:
    _say(f"sandboy gate: {message}")
    if getattr(args, "json_path", None):
        from sandboy.gate.report import error_json, write_json

        try:
            _write_json(args.json_path, error_json(message, code), write_json)
        except OSError as exc:
            _say(f"sandboy gate: cannot write a report: {args.json_path}: {exc.strerror or exc}")
    return code


def _write_json(path: str, data: dict, writer) -> None:
    if path == "-":
        import json

        from sandboy.escape import json_output  # steps' output tails: no `##[` for GitHub's runner

        sys.stdout.write(json_output(json.dumps(data, indent=2)) + "\n")
    else:
        writer(path, data)


def run_command(args) -> int:
    import os

    from sandboy.errors import EXIT_USAGE, PolicyError
    from sandboy.gate import ceiling as ceilings
    from sandboy.gate import config, report
    from sandboy.gate.console import Console
    from sandboy.gate.outputs import check_outside, check_writable
    from sandboy.gate.capture import DEFAULT_MAX_STEP_OUTPUT
    from sandboy.gate.runner import GateRun, StopRequest, resolve_ceiling
    from sandboy.policy.resolve import unfollowable

    if args.print_ceiling:
        sys.stdout.write(f"# The built-in ceiling of `sandboy gate` (docs/gate.md). Edit and pass with --ceiling FILE.\n"
                         f"{ceilings.to_toml(ceilings.printed())}")
        return 0
    try:
        gate = config.load(args.repo)
        ceiling, budget_seconds = ceilings.read(args.ceiling)
        if args.ceiling:
            # the operator's ceiling bounds the NEXT gate too: read-only in every step's cage
            # wherever a write root holds it (a `ci/ceiling.toml` in the repository: a step
            # appended to it, and the next gate of that checkout ran under its rules; redcage13)
            from sandboy.confine.own_install import protect_policy_file

            protect_policy_file(args.ceiling)
        resolved = resolve_ceiling(ceiling, gate.repo)
        try:
            check_outside({"--logs": args.logs, "--junit": args.junit, "--json": args.json_path,
                           "$GITHUB_STEP_SUMMARY": os.environ.get("GITHUB_STEP_SUMMARY")},
                          [gate.repo, *resolved.fs.write], source="arguments")
        except OSError as exc:  # a write root's symlink cannot be read (resolve.unfollowable)
            raise unfollowable(exc, ceiling.source, resolved.fs) or exc from None
        check_writable({"--junit": args.junit, "--json": args.json_path,
                        "$GITHUB_STEP_SUMMARY": os.environ.get("GITHUB_STEP_SUMMARY")}, log_dir=args.logs)
    except PolicyError as exc:
        if exc.key == "--json":
            args.json_path = None  # the refused path itself: write nothing there
        return _fail(args, str(exc), EXIT_USAGE)
    names = [step.name for step in gate.steps]
    for name in args.interactive:
        if name not in names:
            return _fail(args, f"--tty {name}: {gate.path} has no step of that name (steps: {', '.join(names)})",
                         EXIT_USAGE)
    stop = StopRequest()
    stop.install()  # ^C, SIGTERM and SIGHUP end the running step's tree, then the gate (exit 130)
    # With `--json -` stdout carries the report only; the human record then goes to stderr.
    out = sys.stderr if args.json_path == "-" else sys.stdout
    console = Console(out=out, on_reader_gone=lambda: setattr(stop, "requested", True))
    max_output = DEFAULT_MAX_STEP_OUTPUT if args.max_step_output is None else args.max_step_output
    from sandboy.budget import DEFAULT_SECONDS, Budget

    if args.budget is not None:
        budget = Budget(args.budget, "the gate's", "--budget")
    elif budget_seconds is not None:
        budget = Budget(budget_seconds, "the gate's", f"[gate] budget in {args.ceiling}")
    else:
        budget = Budget(DEFAULT_SECONDS, "the gate's", "the default; --budget or [gate] budget in the ceiling")
    try:
        result = GateRun(gate, ceiling, console, log_dir=args.logs, keep_going=args.keep_going, stop=stop,
                         interactive=args.interactive, max_output=max_output, budget=budget).run()
    except OSError as exc:  # e.g. --logs not writable
        return _fail(args, f"{exc.filename or ''}: {exc.strerror}", EXIT_USAGE)
    except PolicyError as exc:  # the ceiling's grants looked up (repository_links)
        return _fail(args, str(exc), EXIT_USAGE)
    except KeyboardInterrupt:  # between steps; inside a step the runner ends the step's tree itself
        _say("sandboy gate: interrupted")
        return EXIT_INTERRUPTED
    console.final(report.table(result))
    try:
        if args.json_path:
            _write_json(args.json_path, report.to_json(result), report.write_json)
        report.write_all(result, junit=args.junit, summary=os.environ.get("GITHUB_STEP_SUMMARY") or None)
    except BrokenPipeError:
        raise  # `--json -` and its reader went away: sandboy.cli.finish exits quietly (141)
    except OSError as exc:
        _say(f"sandboy gate: cannot write a report: {exc.filename or ''}: {exc.strerror}")
        return max(result.exit_code, 1)
    if console.output_error is not None:
        from sandboy.errors import EXIT_OUTPUT_FAILED

        _say(f"sandboy gate: cannot write the output: {console.output_error.strerror}; the gate stopped "
             "(reports written)")
        return EXIT_OUTPUT_FAILED
    if console.reader_gone:
        return EXIT_READER_GONE  # quietly, like a tool ended by SIGPIPE; the reports are written
    if result.interrupted:
        _say("sandboy gate: interrupted; the running step's processes were killed")
        return EXIT_INTERRUPTED
    return result.exit_code


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="sandboy gate", description=__doc__.splitlines()[0], epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    configure(parser)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    from sandboy.cli import finish

    sys.exit(finish(main))
