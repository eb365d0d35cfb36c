"""The convert pipeline: bounded reads -> component (built, cached) -> host -> SARIF core.

This is also the in-process Python API:

    from sandboy.audit.convert import ConvertRequest, convert
    result = convert(ConvertRequest(tool="infer", artifacts=[("report.json", Path("infer-out/report.json"))]))
    result.text  # canonical, validated, stamped SARIF
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable
from urllib.parse import quote

from sandboy.audit import host, sarif
from sandboy.audit.build import _stderr, build
from sandboy.audit.capped import read_capped
from sandboy.audit.errors import DeadlineExceeded, UsageError
from sandboy.audit.registry import adapter_for_tool

DEFAULT_MAX_INPUT_BYTES = 64 << 20
DEFAULT_MAX_OUTPUT_BYTES = 128 << 20  # wasmtime-py's host copy budget is 128 MiB anyway
DEFAULT_MAX_RESULTS = 100_000

Progress = Callable[[str], None]


@dataclass
class ConvertRequest:
    tool: str | None = None
    component: Path | None = None          # a third-party component instead of --tool
    artifacts: list[tuple[str, Path]] = field(default_factory=list)
    stdout_file: Path | None = None
    stderr_file: Path | None = None
    options: list[tuple[str, str]] = field(default_factory=list)
    max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES
    fuel: int | None = None                # None: scaled to the input size
    deadline_seconds: float = host.DEFAULT_DEADLINE_SECONDS
    memory_mib: int = host.DEFAULT_MEMORY_MIB
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES
    max_results: int = DEFAULT_MAX_RESULTS
    # When ALL of it must have ended (time.monotonic()), e.g. a run's time budget: each step (the
    # adapter's build, its load, the guest's run, the check of its output) is not begun once it
    # has passed, the guest gets at most what is left when it starts, and the check stops between
    # its parts (DeadlineExceeded.step names which). A native compile (part of a first load) that
    # has begun runs to its end: wasmtime cannot stop it in this process; it is bounded by the
    # component's size (host.MAX_COMPONENT_BYTES), as each part of the check is by max_results.
    deadline_at: float | None = None


@dataclass
class ConvertResult:
    text: str
    doc: dict[str, Any]
    provenance: sarif.Provenance
    results: int
    seconds: float
    warnings: list[sarif.Problem] = field(default_factory=list)  # inconsistencies that did not fail it


def _uri(path: Path) -> str:
    text = str(path)
    if text == "-":
        return ""
    return ("file://" if text.startswith("/") else "") + quote(text.replace(os.sep, "/"), safe="/-._~")


def _time_left(req: ConvertRequest, step: str, begun: bool = False) -> float | None:
    """Seconds left before `req.deadline_at` (None: no such deadline); DeadlineExceeded once it
    has passed: `step` not begun, or (`begun`) stopped between two of its parts."""
    if req.deadline_at is None:
        return None
    left = req.deadline_at - time.monotonic()
    if left <= 0:
        raise DeadlineExceeded(f"the deadline passed {'during' if begun else 'before'} {step}", step=step,
                               started=begun)
    return left


def convert(req: ConvertRequest, progress: Progress = _stderr) -> ConvertResult:
    started = time.perf_counter()
    if req.tool is None and req.component is None:
        raise UsageError("name the adapter: --tool NAME (see `sandboy audit list`) or --component PATH")
    if not req.artifacts and req.stdout_file is None:
        raise UsageError("no input: pass the tool's report with --artifact NAME=PATH (or --stdout-file PATH)")

    spec = adapter_for_tool(req.tool) if req.component is None and req.tool is not None else None

    # Read every input before doing anything expensive, within one shared budget.
    budget = req.max_input_bytes
    inputs: list[dict[str, Any]] = []

    def take(label: str, path: Path) -> host.Text:
        nonlocal budget
        data = read_capped(path, budget, label)
        budget -= len(data)
        text = host.Text.from_bytes(data)
        inputs.append({"name": label, "uri": _uri(path), "bytes": len(data),
                       "sha256": hashlib.sha256(data).hexdigest(), "encoding": text.encoding})
        return text

    artifacts = [(name, take(name, path)) for name, path in req.artifacts]
    stdout = take("stdout", req.stdout_file) if req.stdout_file else None
    stderr = take("stderr", req.stderr_file) if req.stderr_file else None
    total = req.max_input_bytes - budget

    if req.component is not None:
        # A third-party component: same distrust, provenance names it by file and hash.
        path, name, version, tool = req.component, req.component.stem, "unknown", req.tool or "component"
    else:
        assert spec is not None
        _time_left(req, "the adapter's build")
        path, name, version, tool = (build(spec, progress, deadline_at=req.deadline_at), spec.name, spec.version,
                                     req.tool or spec.name)
    _time_left(req, "the adapter's load")
    loaded = host.load(path, progress)
    raw = host.RawInput(tool=tool, artifacts=artifacts, stdout=stdout, stderr=stderr, options=req.options)
    left = _time_left(req, "the adapter's run")  # (after the load: what is left when the guest starts)
    limits = host.Limits(
        fuel=req.fuel if req.fuel is not None else host.default_fuel(total),
        deadline_seconds=req.deadline_seconds if left is None else min(req.deadline_seconds, left),
        memory_bytes=req.memory_mib << 20,
    )
    try:
        outcome = host.call(loaded, raw, limits)
    except DeadlineExceeded as exc:
        if left is not None and left < req.deadline_seconds:  # deadline_at's, not the guest's own
            raise DeadlineExceeded(f"the deadline passed during the adapter's run ({exc})",
                                   step="the adapter's run") from None
        raise
    _time_left(req, "the check of the adapter's output")

    from sandboy import __version__

    prov = sarif.Provenance(
        adapter=name, adapter_version=version, component_sha256=loaded.sha256,
        wasmtime_version=host.wasmtime_version(), fuel_used=outcome.fuel_used,
        duration_ms=outcome.seconds * 1000, inputs=inputs, sandboy_version=__version__,
    )
    text, doc, warnings = sarif.finalize(outcome.sarif, prov, req.max_output_bytes, req.max_results,
                                         lambda: _time_left(req, "the check of the adapter's output", begun=True))
    return ConvertResult(text, doc, prov, sarif.count_results(doc), time.perf_counter() - started, warnings)


def write_atomic(path: Path, text: str) -> None:
    """Temp file in the same directory + rename: a failure never leaves half a file."""
    directory = path.parent if str(path.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; a report is an ordinary file
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
