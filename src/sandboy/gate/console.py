"""What a person watching the gate sees.

Everything that is a record goes to stdout as plain lines, in order: step start, every narrowing,
the step's output prefixed `[name] `, the step's end, the final table. When stderr is a terminal a
one-line live status ("running unit 12.3s") is redrawn there and erased before each stdout line;
without a terminal there is no status line and no colour, so a CI log reads the same as a pipe.

Step output, step names, policy references, paths and messages are untrusted: every line passes
`sandboy.escape` (control characters shown escaped, no line a CI runner reads as a workflow
command), so a repository can neither repaint the terminal nor forge a line. Tabs in step output
are expanded to spaces first (the `--logs` file keeps the raw bytes).
"""

from __future__ import annotations

import sys
import time

from sandboy.escape import block, clean
from sandboy.gate.capture import GATE_OUTPUT_FACTOR
from sandboy.gate.status import Status

_COLOURS = {Status.PASSED: "32", Status.FAILED: "31", Status.TIMED_OUT: "31", Status.KILLED: "31",
            Status.CAGE_ERROR: "35", Status.POLICY_ERROR: "35", Status.NOT_RUN: "2", Status.OVER_BUDGET: "31",
            "note": "33", "head": "1"}

LABELS = {Status.PASSED: "PASSED", Status.FAILED: "FAILED", Status.TIMED_OUT: "TIMED OUT", Status.KILLED: "KILLED",
          Status.CAGE_ERROR: "CAGE ERROR", Status.POLICY_ERROR: "POLICY ERROR", Status.NOT_RUN: "NOT RUN",
          Status.OVER_BUDGET: "NOT RUN (BUDGET SPENT)"}


def truncation(result) -> str:
    """How much of a step's output was dropped (over --max-step-output), in words."""
    return (f"output truncated: {result.output_dropped:,} of {result.output_bytes:,} bytes dropped "
            "(the log and the console keep the head and the tail; --max-step-output, and "
            f"{GATE_OUTPUT_FACTOR}x it for all steps together)")


def label(result) -> str:
    return LABELS[result.status] + (" (allowed)" if result.allow_failure and result.status != Status.PASSED else "")


class Console:
    def __init__(self, out=None, status=None, live=None, on_reader_gone=None):
        self.out = out or sys.stdout
        # Called once when the reader of `out` goes away (`sandboy gate | head`): the CLI stops the
        # gate as if interrupted, the way SIGPIPE ends a Unix tool, but with the step's tree ended
        # and the reports written. Later lines are dropped.
        self.on_reader_gone = on_reader_gone
        self.reader_gone = False
        self.output_error = None  # an OSError other than EPIPE that stopped the output
        self.status = status or sys.stderr
        self.live = self.status.isatty() if live is None else live
        self.colour = self.live and self.out.isatty()
        self._current = None
        self._started = 0.0
        self._status_shown = False

    # --- helpers ---

    def _paint(self, kind: str, text: str) -> str:
        """`text` made safe (`escape.block`), then coloured: the only escapes written are ours."""
        text = block(text)
        return f"\x1b[{_COLOURS[kind]}m{text}\x1b[0m" if self.colour else text

    def _clear_status(self) -> None:
        if self._status_shown:
            self._status_shown = False
            self._write_status("\r\x1b[K")

    def _write_status(self, text: str) -> None:
        """The live status line is a courtesy: a terminal hung up (EIO) or gone ends it, never the
        gate — its OSError unwound the gate out of its pump, and a hang-up's SIGHUP stop then wrote
        no reports (session 9)."""
        try:
            self.status.write(text)
            self.status.flush()
        except OSError:
            self.live = False

    def _line(self, text: str) -> None:
        if self.reader_gone:
            return
        self._clear_status()
        try:
            try:
                self.out.write(text + "\n")
            except UnicodeEncodeError:
                # a character the output's encoding lacks (a Latin-1 locale, PYTHONIOENCODING): a
                # step printing "✓" ended the gate in a traceback, no reports, and without the
                # namespace tier its processes outlived it (session 9). Shown as its escape instead.
                encoding = getattr(self.out, "encoding", None) or "ascii"
                self.out.write((text + "\n").encode(encoding, "backslashreplace").decode(encoding))
            self.out.flush()
        except OSError as exc:  # the reader went away (EPIPE), or the output cannot be written
            self.reader_gone = True
            self.output_error = None if isinstance(exc, BrokenPipeError) else exc
            from sandboy.cli import output_to_devnull

            output_to_devnull(self.out)
            if self.on_reader_gone:
                self.on_reader_gone()

    # --- events ---

    def gate_start(self, gate, ceiling_source: str) -> None:
        self._line(self._paint("head", f"sandboy gate: {len(gate.steps)} step{'' if len(gate.steps) == 1 else 's'} "
                                       f"from {clean(gate.path)}, ceiling {clean(ceiling_source)}"))

    def step_start(self, result, total: int) -> None:
        self._current = result.name
        self._started = time.monotonic()
        extra = []
        if result.policy_ref:
            extra.append(f"policy {clean(result.policy_ref)}")
        if result.timeout:
            extra.append(f"timeout {result.timeout}s")
        if result.allow_failure:
            extra.append("allowed to fail")
        detail = f" ({', '.join(extra)})" if extra else ""
        self._line(self._paint("head", f"== step {result.index + 1}/{total}: {clean(result.name)}{detail}"))
        for narrowing in result.narrowings:
            self.note(narrowing.for_step(result.name))

    def note(self, text: str) -> None:
        self._line(self._paint("note", f"!! {clean(text)}"))

    @staticmethod
    def render_output(name: str, raw: bytes) -> str:
        """One line of a step's output as shown: prefixed, escaped (the runner counts these
        characters against --max-step-output)."""
        text = raw.decode("utf-8", "replace").rstrip("\r").expandtabs(8)
        return block(f"[{clean(name)}] {clean(text)}")

    def write_output(self, text: str) -> None:
        self._line(text)

    def tick(self) -> None:
        if self.live and self._current is not None:
            elapsed = time.monotonic() - self._started
            self._status_shown = True
            self._write_status(f"\r\x1b[K  running {clean(self._current)} {elapsed:.1f}s")

    def step_end(self, result) -> None:
        self._current = None
        for item in result.degraded:
            self.note(f"step {clean(result.name)}: not enforced on this kernel: {clean(item)}")
        for item in result.warnings:  # e.g. Sandboy's own installation inside {repo} (ADR 0024)
            self.note(f"step {clean(result.name)}: warning: {clean(item)}")
        kind = Status.PASSED if result.status == Status.PASSED else ("note" if result.allow_failure else result.status)
        if result.output_dropped:
            self.note(f"step {clean(result.name)}: {truncation(result)}")
        said = "" if result.status == Status.PASSED else f": {clean(result.describe())}"
        text = f"== {clean(result.name)}: {label(result)}{said} in {result.duration:.2f}s"
        self._line(self._paint(kind, text))

    def final(self, table: str) -> None:
        self._line(block(table))
