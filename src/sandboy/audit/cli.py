"""`sandboy audit …`: convert untrusted tool output to SARIF in a WebAssembly cage, validate SARIF.

Only argparse and the stdlib are imported at module level: the top-level
`sandboy` CLI imports this module on every start (including `sandboy run`),
so wasmtime and jsonschema-rs are imported inside the command functions.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable

from sandboy.sizes import size_type

EXIT_INTERNAL = 70  # a Sandboy bug (EX_SOFTWARE); never expected

CONVERT_EPILOG = """\
examples:
  sandboy audit convert --tool infer --artifact report.json=infer-out/report.json -o infer.sarif
  sandboy audit convert --tool passthrough --artifact log=build/Log.sarif -o roslyn.sarif   # SARIF 1.0.0 -> 2.1.0
  semgrep --json . > sg.json; sandboy audit convert --tool semgrep --artifact sg.json=sg.json -o semgrep.sarif
  sandboy audit convert --component ./my-adapter.wasm --artifact out.json=out.json -o out.sarif

The adapter runs as a zero-import WebAssembly component with fuel, a deadline and a
memory cap; its output is parsed, schema-validated, canonicalised, capped and stamped
with provenance (run.conversion, run.properties.sandboy). Exit codes: docs/audit.md.
"""

VALIDATE_EPILOG = """\
examples:
  sandboy audit validate results.sarif
  sandboy audit validate --github --json results.sarif > report.json
  sandboy audit validate --strict results.sarif       # spec inconsistencies fail too

Errors: not strict JSON; the OASIS SARIF 2.1.0 schema (formats included); URIs that are
not RFC 3986 references; lines/columns below 1. Warnings, each naming its JSON pointer
and SARIF 2.1.0 section, errors under --strict: cross-field inconsistencies consumers
accept (ruleIndex past the rules, ruleId not the indexed rule's id, a region ending before
it starts, an absolute URI with a uriBaseId, an undeclared uriBaseId, a duplicate rule id,
a level on a non-'fail' result). --github adds errors for what GitHub code scanning
rejects (and warnings for what it truncates or cannot deduplicate).
Exit 0: valid; 1: invalid (warnings never fail); 2: usage; 3: file over --max-input-bytes.
"""

BUILD_EPILOG = """\
examples:
  sandboy audit build --all        # pre-build and pre-compile every adapter (CI images)
  sandboy audit build infer

Builds with componentize-py --stub-wasi (tens of seconds each; the progress line says how long
the last one took here) into $SANDBOY_CACHE_DIR, else
$XDG_CACHE_HOME/sandboy, else ~/.cache/sandboy, keyed on the sources' hash; then compiles
the native code (.cwasm) keyed on the component's sha256 and the wasmtime version.
"""


def _positive_int(text: str) -> int:
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value


def _artifact(text: str) -> tuple[str, Path]:
    name, sep, path = text.partition("=")
    if not sep:
        return Path(text).name, Path(text)
    if not name or not path:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=PATH, e.g. report.json=infer-out/report.json")
    return name, Path(path)


def _option(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE")
    return key, value


# Errors of writing stdout (a full disk, /dev/full, a dead terminal): not an internal error.
_OUTPUT_ERRNOS = {28, 5, 27, 122}  # ENOSPC, EIO, EFBIG, EDQUOT


def _guarded(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Every failure becomes one line on stderr and a documented exit code, never a traceback."""

    def run(args: argparse.Namespace) -> int:
        from sandboy.audit.errors import AuditError
        from sandboy.escape import block

        try:
            return func(args)
        except AuditError as exc:
            # Sandboy's own line breaks are kept (a list of problems); everything quoted in the
            # message was `escape.clean`ed where it was composed, and every line passes `line`.
            print(block(f"sandboy audit: {exc}"), file=sys.stderr)
            return exc.exit_code
        except BrokenPipeError:
            raise  # the reader went away: sandboy.cli.finish exits quietly (141)
        except OSError as exc:
            if exc.errno in _OUTPUT_ERRNOS and exc.filename is None:
                raise  # stdout could not be written: sandboy.cli.finish says so (74)
            return _internal_error(exc)
        except KeyboardInterrupt:
            print("sandboy audit: interrupted", file=sys.stderr)
            return 130
        except MemoryError:
            print("sandboy audit: the host ran out of memory; lower --max-input-bytes", file=sys.stderr)
            return EXIT_INTERNAL
        except Exception as exc:  # noqa: BLE001 — the promise is "no traceback", bugs included
            return _internal_error(exc)

    return run


def _internal_error(exc: Exception) -> int:
    from sandboy.escape import line

    if os.environ.get("SANDBOY_DEBUG"):
        raise exc
    print(line(f"sandboy audit: internal error ({type(exc).__name__}: {exc}); "
               "this is a Sandboy bug — re-run with SANDBOY_DEBUG=1 and report the traceback"), file=sys.stderr)
    return EXIT_INTERNAL


# --- commands ---------------------------------------------------------------------


def cmd_convert(args: argparse.Namespace) -> int:
    from sandboy.audit.convert import ConvertRequest, convert
    from sandboy.audit.errors import UsageError
    from sandboy.audit.pipeline_cli import output_path, write_output
    from sandboy.escape import clean

    if args.json and not (args.output and args.output != "-"):
        raise UsageError("--json prints a summary on stdout, which then carries the SARIF: add -o FILE")
    output_path(args.output)
    req = ConvertRequest(
        tool=args.tool, component=Path(args.component) if args.component else None,
        artifacts=args.artifact or [], stdout_file=args.stdout_file, stderr_file=args.stderr_file,
        options=args.option or [], max_input_bytes=args.max_input_bytes, fuel=args.fuel,
        deadline_seconds=args.deadline_seconds, memory_mib=args.memory_mib,
        max_output_bytes=args.max_output_bytes, max_results=args.max_results,
    )
    result = convert(req)
    write_output(args.output, result.text)
    prov = result.provenance
    if args.json:
        from sandboy.escape import json_output  # the warnings quote the log

        print(json_output(json.dumps({"output": args.output, "results": result.results, "chars": len(result.text),
                          "adapter": prov.adapter, "adapter_version": prov.adapter_version,
                          "component_sha256": prov.component_sha256, "fuel_used": prov.fuel_used,
                          "guest_ms": round(prov.duration_ms, 3), "total_ms": round(result.seconds * 1000, 3),
                          "warnings": [str(p) for p in result.warnings]},
                         indent=2)))
    elif not args.quiet:
        print(f"sandboy audit: {clean(prov.adapter)}: {result.results} result(s) -> {clean(args.output or 'stdout')} "
              f"({len(result.text):,} chars, guest {prov.duration_ms:.0f} ms, fuel {prov.fuel_used:,}, "
              f"total {result.seconds * 1000:.0f} ms)", file=sys.stderr)
        for problem in result.warnings[:5]:  # str() cleans what the file said
            print(f"sandboy audit: warning: {problem}", file=sys.stderr)
        if len(result.warnings) > 5:
            print(f"sandboy audit: … {len(result.warnings) - 5} more warning(s); `sandboy audit validate` lists them", file=sys.stderr)
    return 0


def _validate_one(path: Path, github: bool, cap: int, strict: bool = False) -> dict[str, Any]:
    from sandboy.audit import sarif
    from sandboy.audit.capped import read_capped

    raw = read_capped(path, cap, "SARIF file")
    try:
        doc = sarif.parse_json(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        found = [sarif.Problem("", f"not UTF-8 (byte offset {exc.start}); SARIF files are UTF-8 JSON", "json")]
        doc = None
    except sarif.JsonProblem as exc:
        found = [sarif.Problem("", str(exc), "json")]
        doc = None
    else:
        found = sarif.problems(doc, strict_checks=strict)
        if github:
            from sandboy.audit.github import github_problems

            found += github_problems(doc, raw)
    errors = [p for p in found if p.severity == "error"]
    runs = doc.get("runs") if isinstance(doc, dict) else None
    return {
        "file": str(path),
        "valid": not errors,
        "version": doc.get("version") if isinstance(doc, dict) else None,
        "runs": len(runs) if isinstance(runs, list) else 0,
        "results": sarif.count_results(doc) if isinstance(doc, dict) else 0,
        "errors": len(errors),
        "warnings": len(found) - len(errors),
        "problems": [p.as_dict() for p in found],
    }


def cmd_validate(args: argparse.Namespace) -> int:
    from sandboy.escape import clean, line  # pointers, messages and file names quote untrusted input

    reports = [_validate_one(Path(f), args.github, args.max_input_bytes, args.strict) for f in args.files]
    if args.json:
        from sandboy.escape import json_output  # problems quote the file's keys and values

        print(json_output(json.dumps({"files": reports, "valid": all(r["valid"] for r in reports)}, indent=2)))
    else:
        for rep in reports:
            verdict = "valid" if rep["valid"] else "INVALID"
            checks = "SARIF 2.1.0" + (" (strict)" if args.strict else "") + (" + GitHub code scanning" if args.github else "")
            print(line(f"{clean(rep['file'])}: {verdict} {checks} ({rep['runs']} run(s), {rep['results']} result(s), "
                       f"{rep['errors']} error(s), {rep['warnings']} warning(s))"))
            for p in rep["problems"][: args.max_problems]:
                tag = p["source"] + ("" if p["severity"] == "error" else ", warning")
                spec = f" (SARIF 2.1.0 §{p['spec']})" if p.get("spec") else ""
                print(line(f"  {clean(p['pointer'] or '/', 2000)}: {clean(p['message'], 2000)}{clean(spec)} [{tag}]"))
            if len(rep["problems"]) > args.max_problems:
                print(f"  … {len(rep['problems']) - args.max_problems} more (use --json for all)")
    return 0 if all(r["valid"] for r in reports) else 1


def cmd_build(args: argparse.Namespace) -> int:
    from sandboy.audit import host
    from sandboy.audit.build import build
    from sandboy.audit.errors import UsageError
    from sandboy.audit.registry import ADAPTERS

    names = sorted(ADAPTERS) if args.all else args.names
    if not names:
        raise UsageError("name adapters to build, or --all (known: " + ", ".join(sorted(ADAPTERS)) + ")")
    rows = []
    for name in names:
        if name not in ADAPTERS:
            raise UsageError(f"unknown adapter {name!r}; known: {', '.join(sorted(ADAPTERS))}")
        path = build(ADAPTERS[name], force=args.force)
        loaded = host.load(path, progress=lambda m: print(m, file=sys.stderr, flush=True))
        rows.append({"adapter": name, "component": str(path), "sha256": loaded.sha256})
        if not args.json:
            print(f"{name}: {path} sha256={loaded.sha256}")
    if args.json:
        print(json.dumps(rows, indent=2))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from sandboy.audit.registry import ADAPTERS

    rows = [{"adapter": s.name, "version": s.version, "tools": list(s.tools), "summary": s.summary} for s in ADAPTERS.values()]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for row in rows:
            print(f"{row['adapter']:<12} {row['version']:<7} tools: {', '.join(row['tools']):<34} {row['summary']}")
    return 0


# --- parser -----------------------------------------------------------------------


def add_parser(subparsers: Any) -> None:
    """Register `audit` and its subcommands; each sets func=callable(args) -> exit code."""
    fmt = argparse.RawDescriptionHelpFormatter
    audit = subparsers.add_parser(
        "audit", help="convert static-analysis output to SARIF in a WebAssembly cage; validate SARIF",
        description="Convert untrusted static-analysis output to SARIF 2.1.0 with sandboxed adapters, and validate SARIF.",
        formatter_class=fmt,
    )
    sub = audit.add_subparsers(dest="audit_command", metavar="{convert,validate,build,list,run,merge,diff}")
    audit.set_defaults(func=lambda args: (audit.print_help(sys.stderr), 2)[1])

    conv = sub.add_parser("convert", help="run an adapter on a tool's output, emit validated SARIF",
                          description="Convert a tool's report to SARIF 2.1.0 inside a WebAssembly sandbox.",
                          epilog=CONVERT_EPILOG, formatter_class=fmt)
    conv.add_argument("--tool", metavar="NAME", help="tool whose output this is: infer, infersharp, passthrough/sarif/roslyn/codeql, bandit, semgrep")
    conv.add_argument("--component", metavar="PATH", help="run this third-party component (world ownaudit:adapter@0.2.0) instead of a built-in adapter")
    conv.add_argument("--artifact", metavar="NAME=PATH", type=_artifact, action="append", help="a report file the tool wrote (repeatable; PATH '-' = stdin)")
    conv.add_argument("--stdout-file", metavar="PATH", type=Path, help="file holding the tool's captured stdout")
    conv.add_argument("--stderr-file", metavar="PATH", type=Path, help="file holding the tool's captured stderr")
    conv.add_argument("--option", metavar="KEY=VALUE", type=_option, action="append", help="adapter option (repeatable)")
    conv.add_argument("-o", "--output", metavar="OUT", help="SARIF output file, written atomically (default: stdout)")
    conv.add_argument("-q", "--quiet", action="store_true", help="no summary line on stderr")
    conv.add_argument("--json", action="store_true", help="the summary as JSON on stdout (needs -o FILE)")
    limits = conv.add_argument_group("limits (the adapter and its input are untrusted)")
    limits.add_argument("--max-input-bytes", type=size_type(), default=64 << 20, metavar="SIZE", help="cap on all inputs together, read in one bounded read (default 64M)")
    limits.add_argument("--fuel", type=_positive_int, metavar="N", help="wasm fuel budget (default: 2e9 + 4000 per input byte)")
    limits.add_argument("--deadline-seconds", type=_positive_float, default=120.0, metavar="S", help="wall-clock backstop (default 120)")
    limits.add_argument("--memory-mib", type=_positive_int, default=256, metavar="MIB", help="guest memory cap (default 256)")
    limits.add_argument("--max-output-bytes", type=size_type(), default=128 << 20, metavar="SIZE", help="reject larger output (default 128M)")
    limits.add_argument("--max-results", type=_positive_int, default=100_000, metavar="N", help="reject output with more results (default 100000)")
    conv.set_defaults(func=_guarded(cmd_convert))

    val = sub.add_parser("validate", help="validate SARIF 2.1.0 files (schema + semantics, optionally GitHub's rules)",
                         description="Validate SARIF files against the OASIS SARIF 2.1.0 schema and semantic rules.",
                         epilog=VALIDATE_EPILOG, formatter_class=fmt)
    val.add_argument("files", nargs="+", metavar="FILE")
    val.add_argument("--github", action="store_true", help="also apply GitHub code scanning's limits and rules (errors only for what GitHub rejects)")
    val.add_argument("--strict", action="store_true", help="spec inconsistencies that consumers accept (warnings by default) are errors")
    val.add_argument("--json", action="store_true", help="machine-readable report on stdout")
    val.add_argument("--max-input-bytes", type=size_type(), default=64 << 20, metavar="SIZE", help="refuse larger files (default 64M)")
    val.add_argument("--max-problems", type=int, default=20, metavar="N", help="problems listed per file in text output (default 20)")
    val.set_defaults(func=_guarded(cmd_validate))

    bld = sub.add_parser("build", help="pre-build and pre-compile adapters (otherwise built on first use)",
                         epilog=BUILD_EPILOG, formatter_class=fmt)
    bld.add_argument("names", nargs="*", metavar="ADAPTER")
    bld.add_argument("--all", action="store_true", help="every built-in adapter")
    bld.add_argument("--force", action="store_true", help="rebuild even if cached")
    bld.add_argument("--json", action="store_true", help="what was built as JSON on stdout (progress stays on stderr)")
    bld.set_defaults(func=_guarded(cmd_build))

    lst = sub.add_parser("list", help="list built-in adapters and the tools they serve")
    lst.add_argument("--json", action="store_true")
    lst.set_defaults(func=_guarded(cmd_list))

    from sandboy.audit.pipeline_cli import add_parsers  # run / merge / diff (issue 12)

    add_parsers(sub, _guarded)


def main(argv: list[str] | None = None) -> int:
    """`sandboy audit …` without the other subcommands (`python -m sandboy.audit.cli convert …`): the
    top-level CLI registers the same parsers through `add_parser`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["audit"]:
        argv = argv[1:]
    parser = argparse.ArgumentParser(prog="sandboy")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["audit", *argv])
    return int(args.func(args))


if __name__ == "__main__":
    from sandboy.cli import finish

    sys.exit(finish(main))
