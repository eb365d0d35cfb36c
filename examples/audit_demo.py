#!/usr/bin/env python3
"""Audit demo: a real analyser run in Sandboy's cage, its report converted to SARIF in a wasm cage.

examples/gate-demo is the bundled hostile repository. The demo:

1. runs real Bandit over it under `sandboy run`: Bandit may read the repository (read-only) and
   its own interpreter, write one output directory, and has no network at all — an analyser
   parses untrusted code, so it is confined like any other step;
2. converts Bandit's JSON (derived from that untrusted code) with
   `sandboy audit convert --tool bandit`: the bandit adapter runs as a zero-import WebAssembly
   component and its output is validated and stamped with the component's sha256;
3. checks the SARIF with `sandboy audit validate --github` (schema, semantics, GitHub's limits).

Usage, from examples/demo.py (examples/ is on sys.path when demo.py runs):

    from audit_demo import audit_demo
    code = audit_demo(SANDBOY, root)    # SANDBOY: path of the `sandboy` script; root: a scratch
                                        # directory (the demo writes under root/audit only)

Stand-alone, in a temporary directory:

    .venv/bin/python examples/audit_demo.py

Returns 0 on success. Bandit comes with `pip install -e '.[test]'`; without it the demo prints one
skip line and returns 0. The first conversion builds the adapter component (tens of seconds, progress on
stderr); the build is cached (docs/audit.md, "Caches"), so later runs take about a second.

`interpreter_grants()` and `write_policy()` are also used by tests/audit/test_real_tools.py to
confine Bandit and Semgrep.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
TARGET = HERE / "gate-demo"

# The dynamic loader and the C libraries Python links against; nothing else of the system.
SYSTEM_READ = ["/usr", "/lib", "/lib64"]

# Bandit exits 1 when it found issues: that is a successful analysis, not a failure.
BANDIT_OK = (0, 1)


def interpreter_grants() -> tuple[list[str], list[str]]:
    """(read, exec) paths this Python needs inside a cage: its installation and its venv.

    Landlock checks the file actually opened or executed, after symlinks are resolved, so the
    real paths are granted; the venv's own bin/ is granted too because that is where console
    scripts (and a tool's helper binaries on PATH) live.
    """
    read = [os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix)]
    exe = [os.path.dirname(os.path.realpath(sys.executable)), os.path.dirname(os.path.abspath(sys.executable))]
    return list(dict.fromkeys(read)), list(dict.fromkeys(exe))


def _toml_list(items: list[str]) -> str:
    # JSON string escapes are valid TOML basic-string escapes, so a path with quotes or
    # backslashes cannot break out of its string.
    return "[" + ", ".join(json.dumps(str(item)) for item in items) + "]"


def write_policy(path: Path, *, read: list[str], exec_: list[str], write: list[str],
                 env_set: dict[str, str] | None = None, why: str = "") -> Path:
    """Write a `sandboy run` step policy. No [net] section: no TCP, no UDP, no unix sockets."""
    lines = [f"# {why}" if why else "# Written by examples/audit_demo.py", "version = 1", "",
             "[fs]", f"read  = {_toml_list(read)}", f"exec  = {_toml_list(exec_)}", f"write = {_toml_list(write)}",
             "", "[env]", 'pass = ["LANG"]']
    if env_set:
        lines.append("set = { " + ", ".join(f"{key} = {json.dumps(value)}" for key, value in env_set.items()) + " }")
    path.write_text("\n".join(lines) + "\n")
    return path


def bandit_policy(path: Path, target: Path, outdir: Path) -> Path:
    read, exe = interpreter_grants()
    return write_policy(
        path, read=SYSTEM_READ + read + [str(target)], exec_=exe, write=[str(outdir)],
        # No bytecode: the interpreter's directories are read-only in the cage anyway.
        env_set={"PYTHONDONTWRITEBYTECODE": "1"},
        why="Bandit over an untrusted tree: read the tree and the interpreter, write the report, no network.",
    )


def bandit_confined(sandboy: str, policy: Path, target: Path, report: Path,
                    status: Path | None = None) -> subprocess.CompletedProcess:
    """`sandboy run --policy P -- python -I -m bandit -r . -f json -o REPORT`, in the target.

    `python -m bandit` rather than the console script: the interpreter (hence what to grant)
    is then known for certain, whatever the script's shebang says. Relative `-r .` makes the
    report's paths relative, so the SARIF locations sit under %SRCROOT%.
    """
    argv = [sandboy, "run", "--policy", str(policy), "--cwd", str(target)]
    if status is not None:
        argv += ["--status-json", str(status)]
    argv += ["--", sys.executable, "-I", "-m", "bandit", "-r", ".", "-f", "json", "-o", str(report), "-q"]
    return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)


def _tail(text: str, lines: int = 8) -> str:
    return "\n".join("    " + line for line in text.strip().splitlines()[-lines:])


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def audit_demo(sandboy: str, workdir: str) -> int:
    print("\n=== sandboy audit: real Bandit, confined, its report converted in a WebAssembly cage ===", flush=True)
    if importlib.util.find_spec("bandit") is None:
        print(f"skipped: bandit is not installed for {sys.executable} (pip install -e '.[test]' installs it)")
        return 0
    if not TARGET.is_dir():
        print(f"failed: {TARGET} is missing (the bundled hostile repository)")
        return 1
    base = Path(workdir) / "audit"
    outdir = base / "out"
    outdir.mkdir(parents=True, exist_ok=True)
    report, sarif_path = outdir / "bandit.json", outdir / "bandit.sarif"
    try:
        return _run(sandboy, base, outdir, report, sarif_path)
    except FileNotFoundError as exc:
        print(f"failed: cannot start {exc.filename or sandboy}: no such file (is Sandboy installed in this venv?)")
        return 1
    except subprocess.TimeoutExpired as exc:
        print(f"failed: {exc.cmd[0]} {exc.cmd[1]} took longer than {exc.timeout:.0f} s")
        return 1


def _run(sandboy: str, base: Path, outdir: Path, report: Path, sarif_path: Path) -> int:
    policy = bandit_policy(base / "bandit-policy.toml", TARGET, outdir)
    short = {path: os.path.relpath(path, base.parent) for path in (policy, outdir, report, sarif_path)}
    target = os.path.relpath(TARGET, HERE.parent)  # "examples/gate-demo", wherever we run from
    print(f"(in {base.parent})")
    print(f"$ sandboy run --policy {short[policy]} -- python -m bandit -r {target} -f json -o {short[report]}")
    print(f"  (may read {target} and the interpreter, write {short[outdir]}/; no network)", flush=True)
    proc = bandit_confined(sandboy, policy, TARGET, report)
    if proc.returncode not in BANDIT_OK or not report.is_file():
        print(f"failed: confined bandit exited {proc.returncode} without a report\n{_tail(proc.stderr + proc.stdout)}")
        return 1
    try:
        found = json.loads(report.read_text(encoding="utf-8"))
        issues = found["results"]
        files = [name for name in found["metrics"] if name != "_totals"]
    except (ValueError, KeyError, TypeError) as exc:
        print(f"failed: {report} is not a Bandit JSON report ({type(exc).__name__}: {exc})")
        return 1
    severities = Counter(str(i.get("issue_severity", "?")).lower() for i in issues)
    detail = ", ".join(f"{n} {sev}" for sev, n in sorted(severities.items()))
    print(f"bandit found {_plural(len(issues), 'issue')} in {_plural(len(files), 'file')}" + (f" ({detail})" if detail else ""))

    print(f"$ sandboy audit convert --tool bandit --artifact bandit.json={short[report]} -o {short[sarif_path]}")
    print("  (the first run builds and compiles the adapter component: tens of seconds to minutes; progress below)", flush=True)
    # stderr is inherited so the build progress shows live; -q drops only the summary line.
    proc = subprocess.run([sandboy, "audit", "convert", "--tool", "bandit", "--artifact", f"bandit.json={report}",
                           "-o", str(sarif_path), "-q"], stdin=subprocess.DEVNULL, timeout=600)
    if proc.returncode != 0:
        print(f"failed: sandboy audit convert exited {proc.returncode} (the line above says why; docs/audit.md lists the codes)")
        return 1
    doc = json.loads(sarif_path.read_text(encoding="utf-8"))  # written by Sandboy after validation
    run = doc["runs"][0]
    stamp = run["properties"]["sandboy"]
    converted = len(run["results"])
    rules = sorted({r["ruleId"] for r in run["results"]})
    print(f"converted by the wasm adapter {stamp['adapter']} {stamp['adapterVersion']} "
          f"(sha256 {stamp['componentSha256'][:16]}…): {_plural(converted, 'result')}"
          + (f", rules {', '.join(rules)}" if rules else ""))
    if converted != len(issues):
        print(f"failed: bandit reported {len(issues)} issues but the SARIF holds {converted} results")
        return 1

    print(f"$ sandboy audit validate --github {short[sarif_path]}", flush=True)
    proc = subprocess.run([sandboy, "audit", "validate", "--github", "--json", str(sarif_path)],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    try:
        verdict = json.loads(proc.stdout)["files"][0]
    except (ValueError, KeyError, IndexError):
        print(f"failed: sandboy audit validate exited {proc.returncode}\n{_tail(proc.stderr + proc.stdout)}")
        return 1
    if proc.returncode != 0 or not verdict["valid"]:
        print(f"failed: the SARIF is invalid ({verdict['errors']} errors):")
        for problem in verdict["problems"][:10]:
            print(f"    {problem['pointer'] or '/'}: {problem['message']}")
        return 1
    # Warnings never fail GitHub's upload (e.g. no primaryLocationLineHash: GitHub computes it).
    notes = sorted({p["message"].split(":")[0] for p in verdict["problems"]})
    print(f"SARIF valid, GitHub limits respected ({_plural(verdict['warnings'], 'warning')}"
          + (f", none blocking: {'; '.join(notes)}" if notes else "") + ")")
    return 0


def main() -> int:
    sandboy = os.path.join(os.path.dirname(sys.executable), "sandboy")
    try:
        with tempfile.TemporaryDirectory(prefix="sandboy-audit-demo-") as root:
            return audit_demo(sandboy, root)
    except BrokenPipeError:
        # `audit_demo.py | head`: the reader left. Point stdout at /dev/null so the interpreter's
        # final flush does not raise again on the way out.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
