"""`sandboy audit run | merge | diff`: argument parsing and output only (the work is in
pipeline.py, merge.py, diff.py). Registered by audit/cli.py's add_parser."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable

RUN_EPILOG = """\
examples:
  sandboy audit run                                   # every known tool that is installed, on .
  sandboy audit run path/to/repo --tools bandit,ruff,semgrep -o merged.sarif --github
  sandboy audit run --adapters ops/adapters.toml --json

Tools come from adapters.toml (built in; the repository's .007/adapters.toml may add tools;
--adapters FILE may add and override). Each phase runs under a Sandboy cage: the repository
read-only, a private output directory and HOME writable, no network unless an operator entry
says so. All tools together get the operator's time budget (--budget, else [run] budget in
--adapters FILE, else 6h): when it is spent the running phase is ended like a timeout and the
tools not started are not_run (the log's "sandboy audit" run says which).
Exit 0: every selected tool that is installed ran and the log is valid; 1: a tool failed or was
not run (the others still ran, their results are in the log); 2: usage or adapters.toml errors.
"""

MERGE_EPILOG = """\
examples:
  sandboy audit merge bandit.sarif ruff.sarif semgrep.sarif -o merged.sarif
  sandboy audit merge *.sarif --source-root . --github -o upload.sarif

--github makes the log fit GitHub code scanning (≤ 20 runs, ≤ 25,000 results per run,
≤ 10,000 thread-flow locations, message.text everywhere, ≤ 10 MB gzipped) and says what it
changed; what cannot be made to fit is an error naming what to split.
Exit 0: merged; 1: an input is not SARIF 2.1.0 or the log cannot fit (nothing written); 2: usage.
"""

DIFF_EPILOG = """\
examples:
  sandboy audit diff --baseline main.sarif pr.sarif -o marked.sarif
  sandboy audit diff --baseline main.sarif pr.sarif --fail-on new    # CI: fail on new findings

Every result gets baselineState new / unchanged; baseline-only results are added as absent.
Exit 0; 1 with --fail-on new and a new result; 2: usage or an input that is not SARIF 2.1.0.
"""


def output_path(path: str | None) -> Path | None:
    """`-o PATH` as a Path (None: stdout). Called before the work too, so that a directory that
    does not exist is refused before minutes of analysis, not after."""
    from sandboy.audit.errors import UsageError

    if not path or path == "-":
        return None
    out = Path(path)
    if str(out.parent) and not out.parent.is_dir():
        raise UsageError(f"{out}: directory {out.parent} does not exist")
    return out


def write_output(path: str | None, text: str) -> None:
    """`text` to `-o PATH` (replaced atomically) or to stdout; every audit command writes this way."""
    from sandboy.audit.convert import write_atomic
    from sandboy.audit.errors import UsageError

    out = output_path(path)
    if out is None:
        from sandboy.escape import json_output  # a log's messages: nothing raw for a terminal or the runner

        sys.stdout.write(json_output(text))
        sys.stdout.flush()
        return
    try:
        write_atomic(out, text)
    except OSError as exc:
        raise UsageError(f"{out}: cannot write output: {exc.strerror}") from None


def _say(message: str) -> None:
    from sandboy.escape import block

    print(block(f"sandboy audit: {message}"), file=sys.stderr, flush=True)


def cmd_run(args: argparse.Namespace) -> int:
    import tempfile

    from sandboy.audit import pipeline, toolconfig
    from sandboy.audit.errors import UsageError

    repo = Path(args.repo).resolve()
    if not repo.is_dir():
        raise UsageError(f"{args.repo}: not a directory")
    if args.json and not (args.output and args.output != "-"):
        raise UsageError("--json prints the status on stdout, which then carries the SARIF: add -o FILE")
    output_path(args.output)
    tools, file_budget = toolconfig.load_for_run(repo, Path(args.adapters) if args.adapters else None)
    budget = _budget(args, file_budget)
    names = [n.strip() for n in args.tools.split(",") if n.strip()] if args.tools else None
    progress = (lambda m: None) if args.quiet else _say
    with tempfile.TemporaryDirectory(prefix="sandboy-audit-run-") as work:
        reports = pipeline.run_all(tools, names, repo, Path(work), progress, budget)
    # (bounded by the budget; the tools' logs came from adapters, not from a checked file: the full check)
    text, report = pipeline.merge_logs(reports, budget, repo, args.github)
    # a budget spent fails the run even where every tool's log was merged (a merge it cut: ADR 0025)
    status = 1 if budget.spent or any(r.status in (pipeline.FAILED, pipeline.NOT_RUN) for r in reports) else 0
    if text is not None:
        write_output(args.output, text)
    elif not any(r.status != pipeline.SKIPPED for r in reports):
        _say("no tool ran: none of the selected tools is installed here (see the table)")
        status = 1 if names else status
    if args.json:
        from sandboy.escape import json_output  # the tools' stderr tails

        print(json_output(json.dumps({"tools": [r.as_dict() for r in reports], "output": args.output,
                                      "merge": report.as_dict() if report else None, "budget": budget.as_dict(),
                                      "status": status}, indent=2)))
    elif not args.quiet:
        print(pipeline.status_table(reports), file=sys.stderr)
        for note in (report.notices if report else []):
            _say(note)
    return status


def _budget(args: argparse.Namespace, file_budget: int | None):
    """The run's time budget: --budget, else the operator file's [run] budget, else the default."""
    from sandboy.budget import DEFAULT_SECONDS, Budget

    if args.budget is not None:
        return Budget(args.budget, "the audit's", "--budget")
    if file_budget is not None:
        return Budget(file_budget, "the audit's", f"[run] budget in {args.adapters}")
    return Budget(DEFAULT_SECONDS, "the audit's", "the default; --budget or [run] budget in --adapters FILE")


def _budget_type(text: str) -> int:
    from sandboy.budget import option  # (imported when used: the CLI's start-up stays lean)

    return option(text)


def cmd_merge(args: argparse.Namespace) -> int:
    from sandboy.audit import merge

    output_path(args.output)
    text, report = merge.merge_files([Path(p) for p in args.files], Path(args.source_root) if args.source_root else None,
                                     args.github)
    write_output(args.output, text)
    if args.json:
        from sandboy.escape import json_output

        print(json_output(json.dumps({**report.as_dict(), "output_bytes": len(text.encode())}, indent=2)),
              file=sys.stderr if not args.output else sys.stdout)
    elif not args.quiet:
        _say(f"merged {report.inputs} file(s): {report.runs_in} run(s) -> {report.runs_out}, {report.results_in} result(s) -> "
             f"{report.results_out} ({report.duplicates} duplicate(s) dropped, {report.fingerprints_added} fingerprint(s) added), "
             f"{report.input_bytes:,} -> {len(text.encode()):,} bytes")
        for note in report.notices:
            _say(note)
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    from sandboy.audit import diff, merge
    from sandboy.audit.errors import UsageError

    try:
        baseline, _ = merge.load(Path(args.baseline))
        current, _ = merge.load(Path(args.current))
    except merge.MergeFailed as exc:
        raise UsageError(str(exc)) from None
    out, summary = diff.diff_docs(baseline, current)
    if args.output:
        write_output(args.output, diff.render(out))
    if args.json:
        from sandboy.escape import json_output

        print(json_output(json.dumps(summary.as_dict())), file=sys.stdout if args.output else sys.stderr)
    elif not args.quiet:
        _say(f"{summary.new} new, {summary.unchanged} unchanged, {summary.absent} absent (baseline {args.baseline})")
    return 1 if args.fail_on == "new" and summary.new else 0


def add_parsers(sub: Any, guarded: Callable[[Callable[[argparse.Namespace], int]], Callable[[argparse.Namespace], int]]) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
    run = sub.add_parser("run", help="run every configured analyser on a repository, each confined; one SARIF log",
                         description="Run the analysers of adapters.toml on a repository under Sandboy cages and merge their SARIF.",
                         epilog=RUN_EPILOG, formatter_class=fmt)
    run.add_argument("repo", nargs="?", default=".", metavar="REPO", help="the repository (default: .)")
    run.add_argument("--tools", metavar="A,B", help="only these tools (default: every tool in adapters.toml that is installed)")
    run.add_argument("--adapters", metavar="FILE", help="operator adapters.toml: adds and overrides tools")
    run.add_argument("-o", "--output", metavar="OUT", help="merged SARIF file (default: stdout)")
    run.add_argument("--github", action="store_true", help="make the log fit GitHub code scanning's upload limits")
    run.add_argument("--budget", metavar="DURATION", type=_budget_type,
                     help="wall time all tools together may take, e.g. 45m, 2h, 5400 (0 = no budget); default: "
                          "[run] budget in --adapters FILE, else 6h")
    run.add_argument("--json", action="store_true", help="the per-tool status as JSON on stdout (needs -o FILE)")
    run.add_argument("-q", "--quiet", action="store_true", help="no progress and no table on stderr")
    run.set_defaults(func=guarded(cmd_run))

    mrg = sub.add_parser("merge", help="merge SARIF logs (dedupe rules/artifacts/results, fingerprints, --github preflight)",
                         epilog=MERGE_EPILOG, formatter_class=fmt)
    mrg.add_argument("files", nargs="+", metavar="FILE")
    mrg.add_argument("-o", "--output", metavar="OUT", help="merged SARIF file (default: stdout)")
    mrg.add_argument("--source-root", metavar="DIR", help="compute primaryLocationLineHash from the sources under DIR where missing")
    mrg.add_argument("--github", action="store_true", help="complete GitHub upload preflight")
    mrg.add_argument("--json", action="store_true", help="the merge summary as JSON")
    mrg.add_argument("-q", "--quiet", action="store_true")
    mrg.set_defaults(func=guarded(cmd_merge))

    dif = sub.add_parser("diff", help="mark results new / unchanged / absent against a baseline log",
                         epilog=DIFF_EPILOG, formatter_class=fmt)
    dif.add_argument("--baseline", required=True, metavar="OLD")
    dif.add_argument("current", metavar="NEW")
    dif.add_argument("-o", "--output", metavar="OUT", help="write NEW with baselineState on every result")
    dif.add_argument("--fail-on", choices=("new", "never"), default="never", help="exit 1 when a result is new (CI)")
    dif.add_argument("--json", action="store_true", help="the summary as JSON")
    dif.add_argument("-q", "--quiet", action="store_true")
    dif.set_defaults(func=guarded(cmd_diff))
