"""argparse's parser for the `sandboy` command: `--help`, `doctor`, the gate's, audit's and
capability's subcommands, and `run` whenever its fast path (`cli.parse_run_fast`) does not
recognise the arguments (a typo, `--help`), which then prints the usual help and errors.

A module of its own, beside the thin `cli.py`: every `sandboy run` unmarshals `cli.py`, and a run
the fast path parses needs none of the help texts or the other commands' wiring here (nor
argparse, which imports `re` and `gettext`: ≈ 10 ms; docs/performance.md, session 6).
"""

from sandboy.cli import RunArgs, cmd_run

RUN_EPILOG = """\
examples:
  sandboy run --policy step.toml -- bash -lc 'make test'
  sandboy run --policy step.toml --dry-run            # the effective rules on this kernel
  sandboy run --policy step.toml --status-json s.json -- pytest -q
  sandboy run --policy step.toml --tty -- bash -i     # interactive: a fresh relayed pseudo-terminal

The command runs in a session of its own and never gets the caller's terminal: a terminal on
stdin becomes /dev/null, on stdout/stderr a pipe Sandboy copies to it while the command runs.

exit codes: the command's own; 2 usage or policy error (nothing ran); 125 the cage could not
be applied (the command never runs unconfined), or the command left code for the host's next
git command (found after the run and quarantined: --status-json says "planted"), or replaced
the --status-json file; 126/127 command not executable / not found;
128+n killed by signal n (137: limits.wall_seconds passed); 141 from --dry-run when
the reader of stdout went away (`| head`); 74 stdout could not be written.
Policy reference: README.md and policy.example.toml."""


def cmd_doctor(args) -> int:
    from sandboy.confine.doctor import check, render

    result = check()
    if args.json:
        import json

        print(json.dumps(result, indent=2))
    else:
        print(render(result))
    return 0 if result["cage_available"] else 1


def build_parser():
    import argparse

    parser = argparse.ArgumentParser(
        prog="sandboy",
        description="Contain untrusted commands and untrusted tool output on a Linux host.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="start with `sandboy doctor` to see what this machine can enforce.",
    )
    from sandboy import __version__

    parser.add_argument("--version", action="version", version=f"sandboy {__version__}")
    sub = parser.add_subparsers(dest="command_name", metavar="COMMAND")

    run = sub.add_parser("run", help="run one command in a Landlock + seccomp cage",
                         description="Confine COMMAND with the rules of a step policy, then exec it.",
                         epilog=RUN_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("-p", "--policy", required=True, metavar="FILE", help="step policy (TOML, version 1)")
    run.add_argument("--status-json", metavar="FILE", help="write what was enforced/degraded and the outcome as JSON")
    run.add_argument("--status-fd", type=int, metavar="N", help="same, to an open file descriptor")
    run.add_argument("--dry-run", action="store_true", help="print the effective rules for this kernel; run nothing")
    run.add_argument("--json", action="store_true", help="with --dry-run: JSON output")
    run.add_argument("--cwd", metavar="DIR", help="working directory of the command (default: current)")
    run.add_argument("--tty", action="store_true",
                     help="give the command a fresh pseudo-terminal, relayed while it runs (interactive "
                          "programs); without it the command never gets a terminal")
    run.add_argument("--egress-log", metavar="FILE",
                     help="with net.domains: append every proxy decision to FILE (JSON lines; outside the write roots)")
    run.add_argument("command", nargs=argparse.REMAINDER, help="the command and its arguments (after --)")
    run.set_defaults(func=_run_from_argparse)

    doctor = sub.add_parser("doctor", help="what this kernel can enforce",
                            description="Probe each protection on this machine (Landlock ABI, seccomp, "
                                        "scopes, user namespaces, cgroups) and say what is available.")
    doctor.add_argument("--json", action="store_true", help="machine-readable output")
    doctor.set_defaults(func=cmd_doctor)

    for module in ("sandboy.gate.cli", "sandboy.audit.cli", "sandboy.capability.cli"):
        try:
            mod = __import__(module, fromlist=["add_parser"])
        except ImportError:
            continue
        mod.add_parser(sub)
    return parser


def _run_from_argparse(ns) -> int:
    args = RunArgs()
    args.policy, args.status_json, args.status_fd = ns.policy, ns.status_json, ns.status_fd
    args.dry_run, args.json, args.cwd, args.tty = ns.dry_run, ns.json, ns.cwd, ns.tty
    args.egress_log = ns.egress_log
    args.command = ns.command[1:] if ns.command[:1] == ["--"] else ns.command
    return cmd_run(args)
