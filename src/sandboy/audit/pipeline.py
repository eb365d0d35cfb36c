"""`sandboy audit run`: every selected analyser on a repository, each confined, each converted.

Per tool (an `adapters.toml` entry, toolconfig.py):

1. skipped, with the reason, when it does not run on this platform, a file it requires is absent
   from the repository, or an executable of its phases is not on PATH;
2. each phase runs under its own Sandboy cage: the repository read-only, a private output
   directory and a private HOME writable, nothing else written, no network unless an operator
   entry says so; stdout/stderr go to files bounded by RLIMIT_FSIZE (`limits.file_size_mib`);
3. its output goes through the tool's adapter (WebAssembly, audit/convert.py): validated, capped,
   stamped with provenance;
4. each run's `invocations` records what confined each phase (the policy's sha256, what was
   enforced and what degraded) and how it ended; `automationDetails.id` names the tool.

A tool that fails (cage refused, non-success exit, adapter error, timeout) is reported and the
others still run. The per-tool logs are merged (audit/merge.py) into one.

All the phases of all the tools share the operator's time budget (`sandboy.budget`: `[run] budget`
in `--adapters FILE`, `--budget`, 6 hours by default): a repository's `.007/adapters.toml` may add
any number of tools, each within its own limit. When it is spent the running phase is ended like
its own timeout and the tools not started are `not_run`; the merged log then carries a run of
"sandboy audit" saying which (`budget_run`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from sandboy.audit.toolconfig import CONFIG_ARG, Phase, Tool

# Rule files Sandboy ships for tools that need configuration the repository does not provide
# (the {builtin} placeholder; read-only in every phase's cage).
BUILTIN_RULES = Path(__file__).with_name("rules")
CAPTURE_MIB = 256       # stdout/stderr of one phase, and every file it writes (RLIMIT_FSIZE)
ENV_PASS = ("LANG", "LC_ALL", "TZ", "TERM")
RAN, SKIPPED, FAILED = "ran", "skipped", "failed"
NOT_RUN = "not_run"  # the run's time budget was spent before the tool started

Progress = Callable[[str], None]


@dataclass
class PhaseReport:
    name: str
    argv: list[str]
    outcome: str
    returncode: int | None
    ok: bool
    seconds: float
    policy_sha256: str
    enforced: dict[str, Any] = field(default_factory=dict)
    degraded: list[str] = field(default_factory=list)
    error: str | None = None
    started: str = ""
    ended: str = ""
    cut_by_budget: bool = False  # timed out because the run's time budget was spent


@dataclass
class ToolReport:
    tool: str
    status: str                 # ran / skipped / failed / not_run
    reason: str = ""
    results: int = 0
    seconds: float = 0.0
    sarif: dict[str, Any] | None = None
    phases: list[PhaseReport] = field(default_factory=list)
    config: str = ""            # which configuration the tool was given (ConfigChoice), "" = none
    cut_by_budget: bool = False  # failed because the run's time budget ended a phase

    def as_dict(self) -> dict[str, Any]:
        return {"tool": self.tool, "status": self.status, "reason": self.reason, "results": self.results,
                "config": self.config,
                "seconds": round(self.seconds, 3),
                "phases": [{"name": p.name, "outcome": p.outcome, "returncode": p.returncode, "ok": p.ok,
                            "seconds": round(p.seconds, 3), "policy_sha256": p.policy_sha256,
                            "degraded": p.degraded, "error": p.error} for p in self.phases]}


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def search_path() -> str:
    """PATH for finding tools: the directory of the interpreter running Sandboy first (tools
    installed beside it, e.g. in its venv), then the caller's PATH — its absolute entries only:
    a relative one (`.`, `bin`; an empty one is `.` to a shell) names the directory `audit run`
    was started in, often the repository under audit, whose own files then stood in for the
    tools (a FIFO it shipped as `mytool` with mode 0755 hung the run for ever: session 7)."""
    parts = [str(Path(sys.executable).parent), *os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep)]
    return os.pathsep.join(dict.fromkeys(p for p in parts if p.startswith("/")))


def expand(text: str, places: dict[str, str]) -> str:
    """`text` with the places' placeholders (`{repo}`, `{out}`, ...) replaced in one pass: a
    repository in a directory named `{home}` stays that directory (`policy.resolve.substitute`)."""
    from sandboy.policy.resolve import substitute

    return substitute(text, lambda name: places.get("{" + name + "}"))


def missing_reason(tool: Tool, repo: Path, path: str) -> str | None:
    """Why `tool` cannot run here, or None. A required file is looked up strictly inside the
    repository: one leading out through a symlink raises OutsideRepository (skipping or not by
    whether `/root/...` exists would answer the repository's question about the host)."""
    from sandboy.repository_files import resolve_inside

    if not tool.runs_here():
        return f"runs on {tool.platform} only"
    for name in tool.requires:
        if not os.path.exists(resolve_inside(str(repo), name)):
            return f"the repository has no {name}"
    for phase in tool.phases:
        if shutil.which(phase.argv[0], path=path) is None:
            return f"{phase.argv[0]} is not installed (not on PATH)"
    return None


def program_dirs(program: str) -> list[str]:
    """What the phase's program needs to read and execute: its directory (and its symlink
    target's), and for a script whose `#!` names an interpreter inside a virtualenv, that whole
    environment (entry points like semgrep exec binaries shipped in site-packages)."""
    real = os.path.realpath(program)
    dirs = [os.path.dirname(program), os.path.dirname(real)]
    from sandboy.regular_files import read_regular

    try:  # a regular file only, without blocking (a FIFO on PATH must not hang the run)
        first = read_regular(real, 512, follow_link=True, head=True).split(b"\n", 1)[0]
    except OSError:
        first = b""
    if first.startswith(b"#!"):
        interpreter = first[2:].strip().split(b" ")[0].decode("utf-8", "replace")
        env = os.path.dirname(os.path.dirname(interpreter))
        if os.path.isfile(os.path.join(env, "pyvenv.cfg")):
            dirs.append(env)
    return list(dict.fromkeys(d for d in dirs if d))


def phase_policy(phase: Phase, places: dict[str, str], program: str, path: str) -> dict[str, Any]:
    """The Sandboy step policy of one phase, as a mapping (Policy.from_mapping). The phase's
    presets are expanded here, not through `include`: the working directory is often the
    repository under audit (`audit run` on `.`), and the `python` preset trusts a `.venv` there —
    its `pyvenv.cfg` `home` named a host directory that became readable to the repository's own
    tool (and landed in the SARIF). Presets in front of the phase's own paths, as `include` does."""
    from sandboy.policy.presets import expand as expand_presets

    own = program_dirs(program)
    preset = expand_presets(phase.include, project_venv=False)
    # No raw `/dev` (the `system` preset reads it), as in the gate's built-in ceiling: without
    # the namespace tier a repository's tool opened another terminal of the operator's
    # (/dev/pts/N) and could read raw block devices as root. The cage grants the device set
    # every command needs itself (null, zero, full, random, urandom).
    read = [*(p for p in preset["read"] if p != "/dev"), places["{repo}"], places["{out}"], places["{home}"], places["{builtin}"], *own,
            *(expand(p, places) for p in phase.read)]
    # {tmp}: Sandboy's private temporary directory (a fresh tmpfs under the namespace tier)
    write = [places["{out}"], places["{home}"], "{tmp}", *(expand(p, places) for p in phase.write)]
    mapping: dict[str, Any] = {
        "version": 1,
        "fs": {"read": list(dict.fromkeys(read)), "write": list(dict.fromkeys(write)),
               "exec": list(dict.fromkeys([*preset["exec"], *own, *(expand(p, places) for p in phase.exec)])),
               "deny": list(dict.fromkeys(preset["deny"]))},
        "env": {"pass": list(ENV_PASS), "set": {"HOME": places["{home}"], "PATH": path,
                                                "XDG_CACHE_HOME": places["{home}"] + "/.cache", "TMPDIR": "{tmp}"}},
        "limits": {"wall_seconds": phase.wall_seconds, "memory_mib": phase.memory_mib,
                   "processes": phase.processes, "file_size_mib": CAPTURE_MIB},
    }
    if phase.network:
        mapping["net"] = {"unrestricted": True}
    return mapping


def policy_digest(mapping: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(mapping, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


HEARTBEAT_SECONDS = 10.0


def command_line(phase: Phase, places: dict[str, str], config_args: list[str]) -> list[str]:
    """The phase's argv with placeholders filled in; a {config} element becomes the arguments
    the tool's ConfigChoice picked for this repository (zero or more)."""
    argv: list[str] = []
    for arg in phase.argv:
        argv.extend([expand(a, places) for a in config_args] if arg == CONFIG_ARG else [expand(arg, places)])
    return argv


def run_phase(phase: Phase, places: dict[str, str], path: str, logs: Path,
              progress: Progress = lambda message: None, config_args: list[str] | None = None,
              budget=None) -> PhaseReport:
    """Run one phase confined. `budget`: the run's sandboy.budget.Budget (None: none); the phase's
    deadline is the smaller of its `wall_seconds` and what is left of it."""
    import threading

    from sandboy import Policy
    from sandboy.confine.launch import CAGE_ERROR, EXITED, TIMED_OUT, spawn
    from sandboy.errors import CageError, EXIT_CAGE, PolicyError

    argv = command_line(phase, places, config_args or [])
    program = shutil.which(argv[0], path=path) or argv[0]
    argv[0] = program
    mapping = phase_policy(phase, places, program, path)
    digest = policy_digest(mapping)
    timeout, by_budget = budget.bound(phase.wall_seconds) if budget is not None else (phase.wall_seconds, False)
    started, t0 = _now(), time.monotonic()
    out_fd = os.open(logs / f"{phase.name}.stdout", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    err_fd = os.open(logs / f"{phase.name}.stderr", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        policy = Policy.from_mapping(mapping, source=f"adapters.toml phase {phase.name}")
        proc = spawn(argv, policy, cwd=places["{repo}"], repo=places["{repo}"], timeout=timeout,
                     stdin=None, stdout=out_fd, stderr=err_fd, supervise=True)
        # The live view: a line every HEARTBEAT_SECONDS while the phase runs (the thread starts
        # after the fork and only prints).
        done = threading.Event()

        def beat() -> None:
            while not done.wait(HEARTBEAT_SECONDS):
                progress(f"{phase.name}: still running ({time.monotonic() - t0:.0f} s of at most {timeout:.0f} s"
                         + (", what is left of the time budget)" if by_budget else ")"))

        ticker = threading.Thread(target=beat, daemon=True)
        ticker.start()
        try:
            result = proc.wait()
        finally:
            done.set()
            ticker.join()
    except (PolicyError, CageError) as exc:
        return PhaseReport(phase.name, argv, CAGE_ERROR, EXIT_CAGE, False, time.monotonic() - t0, digest,
                           error=str(exc), started=started, ended=_now())
    finally:
        os.close(out_fd)
        os.close(err_fd)
    ok = result.outcome == EXITED and result.returncode in phase.ok_exit
    error = None
    if not ok:
        if result.outcome == TIMED_OUT and by_budget:
            error = f"timed_out: {budget.cut()}; the tool's tree was killed"
        elif result.outcome == TIMED_OUT:
            error = f"timed_out after {phase.wall_seconds} s (wall_seconds); the tool's tree was killed"
        elif result.outcome != EXITED:
            error = f"{result.outcome}: {result.error or f'exit status {result.returncode}'}"
        else:
            error = f"exit status {result.returncode} (success is {', '.join(map(str, phase.ok_exit))})"
        tail = _tail(logs / f"{phase.name}.stderr")
        if tail:
            error += f"; stderr ends: {tail}"
    return PhaseReport(phase.name, argv, result.outcome, result.returncode, ok, result.duration or time.monotonic() - t0,
                       digest, dict(result.enforced), list(result.degraded), error, started, _now(),
                       cut_by_budget=not ok and result.outcome == TIMED_OUT and by_budget)


def _tail(path: Path, limit: int = 400) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, os.fstat(fh.fileno()).st_size - limit))
            return fh.read().decode("utf-8", "replace").strip().replace("\n", " | ")
    except OSError:
        return ""


def _summary(value: Any, depth: int = 0) -> Any:
    """The cage's `enforced` report, short enough to ride in every invocation: long lists (the
    Landlock rule list runs to hundreds of entries) become their length; the policy digest names
    the whole policy anyway."""
    if isinstance(value, dict):
        return {k: _summary(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list) and (len(value) > 16 or depth > 3):
        return {"count": len(value)}
    return value


def invocation(report: PhaseReport) -> dict[str, Any]:
    """A SARIF `invocation` saying how a phase was confined and how it ended."""
    inv: dict[str, Any] = {
        "commandLine": " ".join(report.argv),
        "arguments": report.argv[1:],
        "executionSuccessful": report.ok,
        "startTimeUtc": report.started,
        "endTimeUtc": report.ended,
        "properties": {"sandboy": {
            "phase": report.name, "outcome": report.outcome, "policy_sha256": report.policy_sha256,
            "confinement": "degraded" if report.degraded else "enforced",
            "enforced": _summary(report.enforced), "degraded": report.degraded,
        }},
    }
    if report.returncode is not None:
        inv["exitCode"] = report.returncode
    if report.error:
        inv["toolExecutionNotifications"] = [{"level": "error", "message": {"text": report.error[:2000]}}]
    return inv


SRCROOT = "%SRCROOT%"


def relative_uris(doc: dict[str, Any], repo: Path) -> int:
    """Absolute paths and file: URIs inside the repository -> relative to it, with uriBaseId
    %SRCROOT% (GitHub code scanning expects repository-relative paths; the cage ran the tool on
    the absolute path of the repository). Returns how many were rewritten."""
    from urllib.parse import quote, unquote

    from sandboy.audit.sarif import objects

    root = str(repo.resolve()).rstrip("/") + "/"
    changed = 0
    for cur in objects(doc):
        uri = cur.get("uri")
        if isinstance(uri, str) and "uriBaseId" not in cur:
            path = unquote(uri[len("file://"):]) if uri.startswith("file://") else uri
            if path.startswith(root):
                cur["uri"] = quote(path[len(root):], safe="/-._~")
                cur["uriBaseId"] = SRCROOT
                changed += 1
    if changed:
        for run in doc.get("runs", []):
            bases = run.setdefault("originalUriBaseIds", {})
            bases.setdefault(SRCROOT, {"uri": "file://" + quote(root, safe="/-._~")})
    return changed


def _made_here(path: Path, inside: Path) -> bool:
    """Whether `path`, which the confined tool may have made, is a regular file really under
    `inside`: no symlink, at the end or on the way. Sandboy reads it with the host's rights, so a
    symlink the tool planted there would hand the adapter (and the SARIF) any file the host can
    read. Checked once the tool's run is over."""
    import stat

    from sandboy.paths import is_within

    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return False
    except OSError:
        return False
    real, root = os.path.realpath(path), os.path.realpath(inside)
    return real != root and is_within(real, root)


def _symlink_on_the_way(inside: Path, path: Path) -> bool:
    """Whether a directory between `inside` and `path` (which the confined tool may have made)
    is a symlink: looked at with lstat, one component at a time, up to the first missing one."""
    import stat

    if not path.is_relative_to(inside):
        return False
    current = inside
    for part in path.relative_to(inside).parts[:-1]:
        current = current / part
        try:
            if stat.S_ISLNK(os.lstat(current).st_mode):
                return True
        except OSError:
            return False
    return False


def run_tool(tool: Tool, repo: Path, work: Path, path: str, progress: Progress, budget=None) -> ToolReport:
    from sandboy.audit.convert import ConvertRequest, convert
    from sandboy.audit.errors import AuditError, DeadlineExceeded
    from sandboy.audit.registry import TOOLS

    from sandboy.repository_files import OutsideRepository

    t0 = time.monotonic()
    try:
        reason = missing_reason(tool, repo, path)
    except OutsideRepository as exc:
        return ToolReport(tool.name, FAILED, f"requires {exc.problem}")
    if reason:
        return ToolReport(tool.name, SKIPPED, reason)
    if budget is not None and budget.exhausted():
        return ToolReport(tool.name, NOT_RUN, budget.unstarted())
    base = work / tool.name
    out, home, logs = base / "out", base / "home", base / "logs"
    for d in (out, home, logs):
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
    places = {"{repo}": str(repo), "{out}": str(out), "{home}": str(home), "{builtin}": str(BUILTIN_RULES)}
    report = ToolReport(tool.name, RAN)
    config_args: list[str] = []
    if tool.config is not None:
        try:
            used, config_args = tool.config.pick(repo)
        except OutsideRepository as exc:
            return ToolReport(tool.name, FAILED, f"configuration {exc.problem}", seconds=time.monotonic() - t0)
        report.config = (f"the repository's {used}" if used else
                         "none in the repository (" + "/".join(tool.config.files) + "): " + (" ".join(config_args) or "defaults"))
        progress(f"{tool.name}: configuration: {report.config.replace(str(BUILTIN_RULES), 'Sandboy built-in rules')}")
    for phase in tool.phases:
        if budget is not None and budget.exhausted():  # (a later phase: the earlier ones used it up)
            report.status, report.reason = FAILED, f"phase {phase.name}: not run: {budget.unstarted()}"
            report.cut_by_budget = True  # (the budget run names it among the tools it ended)
            report.seconds = time.monotonic() - t0
            return report
        progress(f"{tool.name}: {phase.name}: running confined…")
        done = run_phase(phase, places, path, logs, lambda message: progress(f"{tool.name}: {message}"), config_args,
                         budget)
        report.phases.append(done)
        if not done.ok:
            report.status, report.reason = FAILED, f"phase {phase.name}: {done.error}"
            report.cut_by_budget = done.cut_by_budget
            report.seconds = time.monotonic() - t0
            return report
    source = out / tool.output_file if tool.output_from == "file" and tool.output_file else logs / f"{tool.phases[-1].name}.stdout"
    # Judged without following what the tool made: whether a symlink it left (at the end or on
    # the way, `{out}/sub -> /host`) leads to an existing host file must not decide the message
    if _symlink_on_the_way(out, source):
        report.status, report.reason = FAILED, (f"{tool.output_file} is a symlink or lies under one: not read "
                                                "(Sandboy reads the tool's output with the host's rights)")
        report.seconds = time.monotonic() - t0
        return report
    if not os.path.lexists(source):
        report.status, report.reason = FAILED, f"the tool wrote no {tool.output_file or 'stdout'}"
        report.seconds = time.monotonic() - t0
        return report
    if not _made_here(source, out if source.is_relative_to(out) else logs):
        report.status, report.reason = FAILED, (f"{tool.output_file} is not a regular file, or is a symlink or lies "
                                                "under one: not read (Sandboy reads the tool's output with the "
                                                "host's rights)")
        report.seconds = time.monotonic() - t0
        return report
    # The conversion is Sandboy's own work, but the budget bounds it as it bounds a phase: each of
    # its steps (the adapter's build, its load, the guest's run, the check of its output) is not
    # started once nothing is left, and the guest gets at most what is left when it starts
    # (session 8: a 120 s conversion ran on past a spent budget; session 9: so did the load)
    deadline_at = None
    if budget is not None:
        if budget.exhausted():
            report.status, report.reason = FAILED, f"adapter {tool.adapter}: not run: {budget.unstarted()}"
            report.cut_by_budget = True
            report.seconds = time.monotonic() - t0
            return report
        deadline_at = budget.deadline  # (None: no budget)
    progress(f"{tool.name}: converting with adapter {tool.adapter}…")
    name = tool.name if TOOLS.get(tool.name) == tool.adapter else tool.adapter
    try:
        converted = convert(ConvertRequest(tool=name, artifacts=[(tool.artifact, source)], deadline_at=deadline_at),
                            progress)
    except DeadlineExceeded as exc:
        report.status, report.reason = FAILED, f"adapter {tool.adapter}: {exc}"
        if exc.step != "the conversion":  # (the guest's own deadline is that step; the others are the budget's)
            if not exc.started:
                report.reason = f"adapter {tool.adapter}: {exc.step} not run: {budget.unstarted()}"
            elif exc.step == "the adapter's run":
                report.reason = f"adapter {tool.adapter}: timed_out: {budget.cut()}; the conversion was stopped"
            else:
                report.reason = f"adapter {tool.adapter}: timed_out: {budget.cut()}; {exc.step} was stopped"
            report.cut_by_budget = True
        report.seconds = time.monotonic() - t0
        return report
    except AuditError as exc:
        report.status, report.reason = FAILED, f"adapter {tool.adapter}: {exc}"
        report.seconds = time.monotonic() - t0
        return report
    doc = converted.doc
    relative_uris(doc, repo)
    for run in doc.get("runs", []):
        run["invocations"] = [invocation(p) for p in report.phases]
        if report.config:
            for inv in run["invocations"]:
                inv["properties"]["sandboy"]["config"] = report.config
        run["automationDetails"] = {"id": f"sandboy/{tool.name}/"}
    report.sarif, report.results = doc, converted.results
    report.seconds = time.monotonic() - t0
    return report


def run_all(tools: dict[str, Tool], names: list[str] | None, repo: Path, work: Path,
            progress: Progress, budget=None) -> list[ToolReport]:
    """Every selected tool in turn (see the module's docstring); `budget`: the run's
    sandboy.budget.Budget, started here (None: no budget)."""
    from sandboy.audit.errors import UsageError

    if names:
        unknown = [n for n in names if n not in tools]
        if unknown:
            from sandboy.policy.load import unknown_key

            raise UsageError(f"--tools: {unknown[0]!r}: {unknown_key(unknown[0], tuple(tools), 'tool')}")
        selected = [tools[n] for n in dict.fromkeys(names)]
    else:
        selected = list(tools.values())
    path = search_path()
    reports = []
    if budget is not None:
        budget.start()
    for tool in selected:
        report = run_tool(tool, repo, work, path, progress, budget)
        if report.status == SKIPPED:
            progress(f"{tool.name}: skipped: {report.reason}")
        elif report.status == NOT_RUN:
            progress(f"{tool.name}: not run: {report.reason}")
        elif report.status == FAILED:
            progress(f"{tool.name}: FAILED: {report.reason}")
        else:
            progress(f"{tool.name}: {report.results} result(s) in {report.seconds:.1f} s")
        reports.append(report)
    return reports


MERGE_RESULTS_PAST_BUDGET = 5_000  # what a merge still takes once the budget is spent (≈ 1 s at load 10 here)


def hold_back_unmerged(reports: list[ToolReport], budget, why: str = "before the merge") -> None:
    """The merge (audit/merge.py) is Sandboy's own work too, and grows with what the tools
    converted: 2 s for 10,000 results, 16 s for 99,000 at load 10 here. Once the budget is spent
    it takes the converted logs whole, in the tools' order, only up to MERGE_RESULTS_PAST_BUDGET
    results in all (the tools the budget did not end lose nothing small: a cut phase of the last
    tool would otherwise cost every earlier tool its results); every other log is held back, its
    tool failed saying why, named among the tools the budget ended. A merge begun within the
    budget that the budget's end cuts (`merge_logs`) comes back here too: `why` then says so."""
    if budget is None or not budget.exhausted():
        return
    taken = 0
    for report in reports:
        if report.sarif is None:
            continue
        if taken + report.results <= MERGE_RESULTS_PAST_BUDGET:
            taken += report.results
            continue
        report.status, report.sarif, report.cut_by_budget = FAILED, None, True
        report.reason = (f"its {report.results:,} result(s) were converted but not merged: {budget.describe()} was "
                         f"spent {why}, which then takes at most {MERGE_RESULTS_PAST_BUDGET:,} results")
        report.results = 0
        budget.spent = True


def merge_logs(reports: list[ToolReport], budget, repo: Path, github_mode: bool):
    """The tools' logs (and the budget's own run) merged: (text to write, MergeReport), or
    (None, None) when there is nothing to merge.

    Bounded by the budget (ADR 0025, session 10): a merge begun in time grows with what the tools
    converted (16 s for 99,000 results at load 10 here; a result naming a 32 MiB source file costs
    tens of seconds of fingerprinting alone) and was not stopped by it. Now it looks at the
    budget's end while it folds, while it hashes source files and before its check and its
    serialisation; passed, the merge is dropped (its inputs are partly changed) and done again as
    past the budget (`hold_back_unmerged`: whole logs up to MERGE_RESULTS_PAST_BUDGET results in
    all, from copies taken before; the rest held back, each tool failed saying why) WITHOUT
    fingerprints, which only the source files' size bounds. The run then fails (exit 1), its log
    says what was cut: the held-back tools among the ones the budget ended, and the budget's run
    names the merge's step that was stopped."""
    from sandboy.audit import merge

    if github_mode:
        hold_back_unfittable(reports)
    if budget is not None and budget.exhausted():
        return _merge_past_budget(reports, budget, github_mode, BEFORE_THE_MERGE)
    deadline = budget.deadline if budget is not None else None
    spare = None
    if deadline is not None:
        # What a cut merge still merges, kept as text (the merge changes its inputs in place):
        # the logs hold_back_unmerged would take, at most MERGE_RESULTS_PAST_BUDGET results.
        spare, taken = {}, 0
        for report in reports:
            if report.sarif is not None and taken + report.results <= MERGE_RESULTS_PAST_BUDGET:
                taken += report.results
                spare[id(report)] = json.dumps(report.sarif)
    docs = [r.sarif for r in reports if r.sarif is not None]
    said = budget_run(reports, budget)
    if said is not None:
        docs.append(said)
    if not docs:
        return None, None
    try:
        merged, report = merge.merge_docs(docs, repo, deadline=deadline)
        return merge.finish(merged, report, github_mode, semantic_check=True, deadline=deadline), report
    except merge.MergeCut as cut:
        step = cut.step
    for report in reports:
        if report.sarif is not None and id(report) in spare:
            report.sarif = json.loads(spare[id(report)])
    # the same rule as the copies': it holds back exactly the logs that have none, each tool failed
    return _merge_past_budget(reports, budget, github_mode, f"while the merge was {step}")


def hold_back_unfittable(reports: list[ToolReport]) -> None:
    """`--github`: a tool's log that GitHub would reject whatever the merge's fitting does is
    held back, its tool failed saying why, so that the other tools' results are still written.
    Before, a repository's own tool (`.007/adapters.toml`) printing one result with 1,001
    locations, or one naming no rule, failed the merged log: no log at all, every tool's results
    lost (redinput14; the class of redinput12's `%00`). One read-only pass over each log."""
    from sandboy.audit.github import unfittable_problems
    from sandboy.escape import clean

    for report in reports:
        if report.sarif is None:
            continue
        found = unfittable_problems(report.sarif)
        if found:
            report.status, report.sarif, report.results = FAILED, None, 0
            report.reason = (f"its log cannot be made to fit GitHub code scanning ({len(found):,} problem(s); first "
                             f"{clean(str(found[0]), 300)}): not merged; without --github it would be")


BEFORE_THE_MERGE = "before the merge"


def _merge_past_budget(reports: list[ToolReport], budget, github_mode: bool, when: str):
    """`merge_logs` once the budget is spent (`when`: before the merge, or while it was at a
    step): whole logs up to MERGE_RESULTS_PAST_BUDGET results (`hold_back_unmerged`), and no
    fingerprints — a result naming a 24 MiB source file costs tens of seconds of hashing, and only
    the files' size bounds it. The budget is spent: the run fails, its log says so."""
    from sandboy.audit import merge

    hold_back_unmerged(reports, budget, why=when)
    budget.spent = True
    docs = [r.sarif for r in reports if r.sarif is not None] + [budget_run(reports, budget, merge_cut=when)]
    merged, report = merge.merge_docs(docs, None)
    report.notices.append(f"{budget.describe()} was spent {when}: merged without fingerprints, at most "
                          f"{MERGE_RESULTS_PAST_BUDGET:,} results")
    return merge.finish(merged, report, github_mode, semantic_check=True), report


BUDGET_NOTICES = 20  # tools named one by one in the budget run's notifications; all are in its properties


BUDGET_RUN_ID = "sandboy-audit/budget/"  # never a tool's: theirs are `sandboy/<tool>/`


def budget_run(reports: list[ToolReport], budget, merge_cut: str | None = None) -> dict[str, Any] | None:
    """A SARIF log of one run, tool "sandboy audit", saying what the time budget ended and what it
    left unstarted (None when it did neither): a failed or unstarted tool has no run of its own, so
    without it the merged log would not say why tools are missing. `merge_cut`: when the budget
    ended for the merge — "before the merge", or "while the merge was <its step>" (`merge_logs`)."""
    from sandboy.audit.sarif import SARIF_SCHEMA_URI, SARIF_VERSION

    if budget is None or not budget.spent:
        return None
    ended = [r for r in reports if r.cut_by_budget]
    unstarted = [r for r in reports if r.status == NOT_RUN]
    notes = [f"{r.tool}: {r.reason}" for r in ended]
    if unstarted:
        names = ", ".join(r.tool for r in unstarted[:BUDGET_NOTICES])
        more = f" and {len(unstarted) - BUDGET_NOTICES} more" if len(unstarted) > BUDGET_NOTICES else ""
        notes.append(f"not run: {names}{more}: {budget.describe()} was spent before they started")
    if merge_cut:
        notes.append(f"the merge: {budget.describe()} was spent {merge_cut}; it took the tools' logs of at most "
                     f"{MERGE_RESULTS_PAST_BUDGET:,} results in all, and computed no fingerprints")
    run = {
        "tool": {"driver": {"name": "sandboy audit", "informationUri": "https://sandboy.invalid/docs/audit-run.md"}},
        "invocations": [{
            "executionSuccessful": False,
            "toolExecutionNotifications": [{"level": "error", "message": {"text": note[:2000]}} for note in notes],
            "properties": {"sandboy": {"budget": budget.as_dict(), "ended": [r.tool for r in ended],
                                       "not_run": [r.tool for r in unstarted],
                                       **({"merge_cut": merge_cut} if merge_cut else {})}},
        }],
        "results": [],
        # Not `sandboy/…`: that is the tools' namespace (`sandboy/<tool>/`, set for every tool's
        # runs), and a repository's tool named `budget` whose SARIF calls its driver "sandboy
        # audit" had this run's tool and category, so the merge folded this run into the
        # repository's (session 8 review; tests/audit/test_budget_run_identity.py).
        "automationDetails": {"id": BUDGET_RUN_ID},
    }
    return {"$schema": SARIF_SCHEMA_URI, "version": SARIF_VERSION, "runs": [run]}


def status_table(reports: list[ToolReport]) -> str:
    from sandboy.escape import clean

    rows = [("tool", "status", "results", "time", "why")]
    for r in reports:
        rows.append((r.tool, r.status, str(r.results) if r.status == RAN else "-",
                     f"{r.seconds:.1f}s" if r.status not in (SKIPPED, NOT_RUN) else "-", clean(r.reason, 300)))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "\n".join("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:4])) + "  " + row[4]
                     for row in rows).rstrip()
