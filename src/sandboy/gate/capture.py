"""A step's output as the gate keeps it: split into lines for the console, written to the step's
log, a bounded tail for the reports, and both the log and the console capped at
`--max-step-output` (the head and the tail kept, what lies between counted and dropped).
"""

from __future__ import annotations

import collections

TAIL_BYTES = 64 * 1024      # of each step's output kept in memory for the reports
MAX_LINE = 16 * 1024        # a longer line is cut into pieces, so memory stays bounded
DEFAULT_MAX_STEP_OUTPUT = 32 << 20  # bytes of a step's output kept in its log, and shown, per step
# All steps together keep at most GATE_OUTPUT_FACTOR x --max-step-output (256 MiB by default) in
# their logs and on the console; past that each step keeps STEP_OUTPUT_FLOOR (head and tail).
# Without it, 1,000 steps of `yes | head -c 32M` wrote 32 GB of logs and console (session 7).
GATE_OUTPUT_FACTOR = 8
STEP_OUTPUT_FLOOR = 64 << 10
# What one console line held for the tail costs the gate beyond its characters: a tuple and a
# bytes object (≈ 100 bytes of the gate's memory, outside the step's memory cgroup) and, when the
# step ends, a render and a write of its own. A step printing empty lines (`yes ''`) filled the
# default 16 MiB tail with 3.4 million of them: 333 MB of the gate's memory, and 36 s of rendering
# AFTER its budget had ended it (`--budget 90`: the gate ended at 126 s; session 9). So a held
# line counts at least this many characters against the tail (what is shown is still measured in
# characters, as rendered).
HELD_LINE_COST = 80


class HeadTail:
    """The head and the tail of a stream of items (byte chunks, console lines) within `limit`
    units: the first half passes through at once, the last half is held (a deque of items: a
    bytearray trimmed at the front would move megabytes per chunk) until `tail_bytes()` or
    `tail_items()` at the end; everything between is counted as dropped, never stored."""

    def __init__(self, limit: int):
        self.head_left = limit // 2
        self.tail_limit = limit - limit // 2
        self.held: collections.deque = collections.deque()
        self.held_size = 0
        self.dropped = 0        # units
        self.dropped_items = 0

    def take(self, item, size: int, weight: int | None = None) -> bool:
        """True: pass `item` on now (head). False: held for the tail (or later dropped).
        `weight`: what holding it costs against `tail_limit`, when more than `size` (the units
        it is counted as when dropped)."""
        if size <= self.head_left:
            self.head_left -= size
            return True
        self.head_left = 0  # the head is over: what follows goes to the tail, in order
        weight = size if weight is None else max(size, weight)
        self.held.append((item, size, weight))
        self.held_size += weight
        while self.held and self.held_size - self.held[0][2] >= self.tail_limit:
            _, first, first_weight = self.held.popleft()
            self.held_size -= first_weight
            self.dropped += first
            self.dropped_items += 1
        return False

    def take_bytes(self, chunk: bytes) -> bytes:
        """`take` for a byte chunk, which may be cut: the part that still fits in the head, to pass
        on now (all of it, some, or b""); the rest is held for the tail."""
        if len(chunk) <= self.head_left:
            self.head_left -= len(chunk)
            return chunk
        head = chunk[: self.head_left]
        self.head_left = 0
        self.take(chunk[len(head):], len(chunk) - len(head))
        return head

    @property
    def dropped_by_now(self) -> int:
        """Units dropped so far, counting what is held beyond `tail_limit` (trimmed at the end)."""
        return self.dropped + max(0, self.held_size - self.tail_limit)

    def _release(self) -> list:
        items = [item for item, _, _ in self.held]
        self.held.clear()
        self.held_size = 0
        return items

    def tail_bytes(self) -> bytes:
        """The held byte chunks joined and cut to their last `tail_limit` bytes (the cut is
        counted as dropped)."""
        held = b"".join(self._release())
        keep = held[max(0, len(held) - self.tail_limit):]
        self.dropped += len(held) - len(keep)
        return keep

    def tail_items(self, render, size) -> list:
        """The held items passed through `render`, the oldest dropped (and counted) until the rest
        measure (`size` of each) within `tail_limit`. Whole items are kept: for console lines, held
        raw and measured only once rendered."""
        items = [render(item) for item in self._release()]
        over = sum(size(item) for item in items) - self.tail_limit
        first = 0
        while first < len(items) and over > 0:
            over -= size(items[first])
            self.dropped += size(items[first])
            self.dropped_items += 1
            first += 1
        return items[first:]


class StepOutput:
    """Split a step's output into lines for the console; keep the raw bytes for log and tail.

    Both the log and the console are capped at `limit` bytes per step (head and tail kept): two
    5-second steps (`yes`, `tr < /dev/zero`) wrote 90 MB of log and 106 MB of console, at
    18 MB/s each for up to the hour the built-in ceiling allows."""

    def __init__(self, console, name: str, log_fh, limit: int = DEFAULT_MAX_STEP_OUTPUT):
        self.console = console
        self.name = name
        self.log_fh = log_fh
        self.pending = b""
        self.tail = bytearray()
        self.total = 0                     # bytes the step wrote
        self.log_cap = HeadTail(limit)    # of those bytes, kept in the log
        self.console_cap = HeadTail(limit)  # console text, in characters
        self.cap_noted = False
        self.log_error = None  # the OSError that ended the log (a full disk), if one did

    @property
    def dropped(self) -> int:
        """Bytes of the step's output neither logged nor kept (0 when all of it fitted)."""
        return self.log_cap.dropped_by_now

    def record(self, chunk: bytes) -> None:
        """Into the log and the tail only (an interactive step's output goes to the terminal as is)."""
        self.total += len(chunk)
        head = self.log_cap.take_bytes(chunk)
        if head:
            self._log(head)
        self.tail += chunk
        if len(self.tail) > TAIL_BYTES:
            del self.tail[: len(self.tail) - TAIL_BYTES]

    def feed(self, chunk: bytes) -> None:
        self.record(chunk)
        data = self.pending + chunk
        *lines, self.pending = data.split(b"\n")
        while len(self.pending) > MAX_LINE:
            lines.append(self.pending[:MAX_LINE])
            self.pending = self.pending[MAX_LINE:]
        for line in lines:
            self._show(line)

    def _show(self, line: bytes) -> None:
        cap = self.console_cap
        if cap.head_left:
            text = self.console.render_output(self.name, line)
            if cap.take(text, len(text) + 1):
                self.console.write_output(text)
                return
        else:  # held raw, rendered only if it ends up in the tail (a flood costs a deque append a line)
            cap.take(line, len(line) + len(self.name) + 4, HELD_LINE_COST)
        if not self.cap_noted:
            self.cap_noted = True
            half = cap.tail_limit
            self.console.note(f"step {self.name}: more than {_mib(half)} of output; the rest is shown when the "
                              f"step ends, its last {_mib(half)} only (--max-step-output)")

    def close(self) -> None:
        if self.pending:
            self._show(self.pending)
            self.pending = b""
        cap = self.console_cap
        texts = cap.tail_items(
            render=lambda item: item if isinstance(item, str) else self.console.render_output(self.name, item),
            size=lambda text: len(text) + 1)
        if cap.dropped:
            self.console.note(f"step {self.name}: {cap.dropped_items:,} lines (about {cap.dropped:,} characters) "
                              f"of output not shown; the last {len(texts):,} lines follow")
        for text in texts:
            self.console.write_output(text)
        keep = self.log_cap.tail_bytes()
        if self.log_cap.dropped:
            self._log(f"\n[sandboy gate: {self.log_cap.dropped:,} bytes of output dropped here "
                      f"(--max-step-output); the last {len(keep):,} bytes follow]\n".encode())
        self._log(keep, flush=True)

    def _log(self, data: bytes, flush: bool = False) -> None:
        """Into the step's log. A write that fails ends the log, said once on the console, and
        nothing else: the step may fill the file system its write root shares with `--logs` (a CI
        runner's workspace and its temp directory), and the ENOSPC raised here unwound the gate
        out of its pump — exit 2 and no reports, and without the namespace tier the step's
        processes outlived the gate (session 9)."""
        if self.log_fh is None:
            return
        try:
            if data:
                self.log_fh.write(data)
            if flush:  # what is buffered fails here, not in the runner's close
                self.log_fh.flush()
        except OSError as exc:
            self.log_error = exc
            fh, self.log_fh = self.log_fh, None
            try:
                fh.close()  # (flushes again: the buffered bytes are lost either way)
            except OSError:
                pass
            self.console.note(f"step {self.name}: its log could not be written ({exc.strerror or exc}); "
                              "the rest of its output is not logged")


def _mib(n: int) -> str:
    return f"{n / (1 << 20):g} MiB" if n >= 1 << 20 else f"{n:,} bytes"
