"""`sandboy policy init | compile | check | explain PATH` — thin: parse, call, print."""

import argparse
import json
import os
import sys

from sandboy.errors import EXIT_USAGE, PolicyError

EPILOG = """exit status: 0 ok; 1 check found drifted files; 2 a policy or usage error.
See docs/capability.md for the formats and what each target can and cannot enforce."""


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "policy", help="compile owen.policy.toml into every AI agent's files and a Sandboy policy",
        description="One committed capability policy (owen.policy.toml) compiled into Cursor, Claude Code, "
                    "Codex, Gemini, Aider, Windsurf, JetBrains and .aiexclude files and into "
                    ".sandboy/agent.toml, with a fidelity table of what each target enforces.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = parser.add_subparsers(dest="policy_verb", metavar="VERB")
    for name, help_text in (("init", "write a commented starter owen.policy.toml"),
                            ("compile", "write every target's files; print the fidelity table"),
                            ("check", "exit 1 with a diff when a generated file drifted from the policy"),
                            ("explain", "per target: is PATH readable, indexable, writable, and why")):
        verb = verbs.add_parser(name, help=help_text, description=help_text)
        verb.add_argument("--root", default=".", metavar="DIR", help="the repository root (default: .)")
        verb.add_argument("--policy", metavar="FILE", help="default: ROOT/owen.policy.toml")
        if name == "init":
            verb.add_argument("--force", action="store_true", help="overwrite an existing policy")
        if name in ("compile", "explain"):
            verb.add_argument("--json", action="store_true", help="machine-readable output")
        if name == "explain":
            verb.add_argument("path", metavar="PATH")
        verb.set_defaults(func=run, policy_verb=name)
    parser.set_defaults(func=lambda ns: (parser.print_help(), EXIT_USAGE)[1])


def _err(text: str) -> None:
    from sandboy.escape import line

    print(f"sandboy policy: {line(text)}", file=sys.stderr)


def run(ns) -> int:
    try:
        return VERBS[ns.policy_verb](ns)
    except PolicyError as exc:
        _err(str(exc))
        return EXIT_USAGE


def _policy_path(ns) -> str:
    """`--policy FILE` as given (the operator's), else ROOT/owen.policy.toml looked up strictly
    inside ROOT: a repository's policy that is a symlink to a file outside it is refused rather
    than read with the user's rights (and compiled into files the repository commits)."""
    from sandboy.capability.model import POLICY_FILE
    from sandboy.repository_files import resolve_inside

    if ns.policy:
        return ns.policy
    return resolve_inside(ns.root, POLICY_FILE, os.path.join(ns.root, POLICY_FILE))


def _init(ns) -> int:
    path = _policy_path(ns)
    if os.path.exists(path) and not ns.force:
        _err(f"{path}: already exists (use --force to overwrite)")
        return EXIT_USAGE
    from importlib.resources import files

    text = files("sandboy.capability").joinpath("starter.toml").read_text(encoding="utf-8")
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_TRUNC if ns.force else os.O_EXCL)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        _err(f"{path}: cannot write: {exc.strerror}")
        return EXIT_USAGE
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    print(f"wrote {path}; next: sandboy policy compile")
    return 0


def _compile(ns) -> int:
    from sandboy.capability import compiler, fidelity, model

    policy = model.load(_policy_path(ns))
    warnings = []
    files = compiler.render(policy, ns.root, warnings)
    written = compiler.write(files, ns.root)
    from sandboy.escape import line

    for text in warnings:
        print(f"sandboy policy: warning: {line(text)}", file=sys.stderr)
    rows = fidelity.table(policy)
    skipped = sorted(rel for rel, text in files.items() if text is None)
    removed = sorted(rel for rel, text in files.items() if text == compiler.REMOVE)
    if ns.json:
        from sandboy.escape import json_output  # warnings quote the repository's own settings

        print(json_output(json.dumps({"written": sorted(set(written) - set(removed)), "removed": removed,
                                      "unchanged": sorted(set(files) - set(written) - set(skipped) - set(removed)),
                                      "not_written": skipped, "warnings": warnings, "fidelity": rows}, indent=2)))
        return 0
    for rel in written:
        print(f"{'removed' if rel in removed else 'wrote'} {rel}")
    for rel in skipped:
        print(f"not written: {rel} (it would have no patterns; an empty one blocks everything)")
    if not written:
        print("every generated file is up to date")
    print()
    print(fidelity.render_text(rows))
    return 0


def _check(ns) -> int:
    from sandboy.capability import compiler, model

    policy = model.load(_policy_path(ns))
    warnings: list = []
    diffs = compiler.drift(compiler.render(policy, ns.root, warnings), ns.root)
    from sandboy.escape import line

    for text in warnings:  # what the files keep that grants more: "match" alone would mislead
        print(f"sandboy policy: warning: {line(text)}", file=sys.stderr)
    if not diffs:
        print("generated files match owen.policy.toml" + (
            f" (but {len(warnings)} warning(s) above)" if warnings else ""))
        return 0
    # One side of each diff is the file as the repository holds it: in a cloned repository its
    # bytes are the repository's (terminal escapes, `##[error]` for GitHub's runner), so each
    # line passes `escape.line` like every other printed text (session 8 review).
    for diff in diffs:
        lines = diff.split("\n")
        if lines[-1] == "":
            lines.pop()
        sys.stdout.write("".join(line(text) + "\n" for text in lines))
    print(f"{len(diffs)} generated file(s) drifted from owen.policy.toml: run `sandboy policy compile`",
          file=sys.stderr)
    return 1


def _explain(ns) -> int:
    from sandboy.capability import explain, model

    policy = model.load(_policy_path(ns))
    try:
        rel = explain.normalize(ns.path, ns.root)
    except ValueError as exc:
        _err(str(exc))
        return EXIT_USAGE
    result = explain.explain(policy, rel)
    if ns.json:
        from sandboy.escape import json_output

        print(json_output(json.dumps({"path": rel, "targets": {t: {k: {"allowed": v[0], "why": v[1]} for k, v in d.items()}
                                                               for t, d in result.items()}}, indent=2)))
        return 0
    from sandboy.escape import clean

    word = {True: "yes", False: "NO", None: "-"}
    print(clean(rel))
    for target, decision in result.items():
        print(f"  {target}")
        for what, (allowed, why) in decision.items():
            print(f"    {what:<10} {word[allowed]:<4} {clean(why)}")
    return 0


VERBS = {"init": _init, "compile": _compile, "check": _check, "explain": _explain}
