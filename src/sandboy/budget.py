"""The operator's time budget for all of one repository's work: a gate's steps, an audit's tools.

Each step or phase has its own limit (the ceiling's `limits.wall_seconds`, a phase's
`wall_seconds`), but a repository chooses how many there are: 1000 steps of a gate, or N tools in
its `.007/adapters.toml`, each just under its own limit, held the host for N hours. The budget
bounds their sum. It is the operator's (`[gate] budget` in the `--ceiling` file, `[run] budget`
in `sandboy audit run --adapters FILE`, `--budget` on either command line), never the
repository's: what the repository writes can only use it up.

When it is spent, the running step or phase is ended the way its own timeout ends it (the whole
tree killed: `timed_out`), and what has not started is not started (`over_budget`). The default
is what a GitHub-hosted job may run: six hours, longer than Sandboy's built-in analysers can take
all together (5 h 45 min at their own limits), so no work that could finish there is cut.
"""

from __future__ import annotations

import time

from sandboy.errors import PolicyError

DEFAULT_SECONDS = 6 * 3600
MOST_SECONDS = 30 * 24 * 3600
UNITS = {"s": 1, "m": 60, "h": 3600}
SHORTEST = 0.001  # the deadline given when nothing is left: at once, but a deadline


def parse(src: str, key: str, value) -> int:
    """Seconds from `21600`, `"90s"`, `"30m"` or `"6h"`; 0 (or `"0"`) means no budget. A
    PolicyError naming `src` and `key` otherwise."""
    seconds = None
    if type(value) is int:
        seconds = value
    elif isinstance(value, str):
        text = value.strip()
        # more digits than any budget has are out of range below: int() of 5,000 digits raised
        # ValueError, a traceback instead of the error naming the key (session 9)
        number = lambda digits: int(digits) if len(digits) <= 20 else MOST_SECONDS + 1  # noqa: E731
        if text.isascii() and text.isdigit():
            seconds = number(text)
        elif len(text) >= 2 and text[-1] in UNITS and text[:-1].isascii() and text[:-1].isdigit():
            seconds = number(text[:-1]) * UNITS[text[-1]]
    if seconds is None:
        raise PolicyError(src, key, f"expected a duration: seconds as an integer or a string like \"90s\", "
                          f"\"30m\", \"6h\" (0 = no budget), got {value!r:.60}")
    if not 0 <= seconds <= MOST_SECONDS:
        raise PolicyError(src, key, f"expected a duration from 0 (no budget) to 30 days, got {value!r:.60}")
    return seconds


def option(value: str) -> int:
    """`--budget DURATION` (an argparse type): seconds, or argparse's usage error (exit 2)."""
    try:
        return parse("--budget", "", value)
    except PolicyError as exc:
        import argparse

        raise argparse.ArgumentTypeError(exc.problem) from None


def text(seconds: float) -> str:
    """`6h`, `30m`, `90s`: how a budget is written back in messages."""
    seconds = int(seconds)
    for unit in ("h", "m"):
        if seconds and seconds % UNITS[unit] == 0:
            return f"{seconds // UNITS[unit]}{unit}"
    return f"{seconds}s"


class Budget:
    """One run's budget: `seconds` (0: none) from `start()` on. `whose` names it in messages
    ("the gate's"). `spent` turns true once it cut a step or left one unstarted."""

    __slots__ = ("seconds", "whose", "where", "deadline", "spent")

    def __init__(self, seconds: int, whose: str, where: str):
        self.seconds = seconds
        self.whose = whose      # "the gate's", "the audit's"
        self.where = where      # where the operator sets it, for the messages
        self.deadline = None
        self.spent = False

    def start(self) -> "Budget":
        self.deadline = time.monotonic() + self.seconds if self.seconds else None
        return self

    def left(self):
        """Seconds left (never negative), None without a budget."""
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def exhausted(self) -> bool:
        """Nothing left: what has not started must not start."""
        left = self.left()
        return left is not None and left <= 0

    def bound(self, timeout):
        """(timeout, by_budget): the smaller of `timeout` (seconds or None) and what is left, and
        whether the budget is the smaller one (a timeout then means the budget ended the work).
        Never 0 when the budget binds: to a supervisor a timeout of 0 means none at all, and the
        budget may run out between the caller's last look and this one (a cage build)."""
        left = self.left()
        if left is None or (timeout and timeout <= left):
            return timeout, False
        return max(left, SHORTEST), True

    def describe(self) -> str:
        return f"{self.whose} time budget of {text(self.seconds)} ({self.where})"

    def cut(self) -> str:
        """Why a running step or phase was ended."""
        self.spent = True
        return f"{self.describe()} was spent"

    def unstarted(self) -> str:
        """Why one was never started."""
        self.spent = True
        return f"{self.describe()} was spent before it started"

    def as_dict(self) -> dict:
        """For the JSON reports: the budget and whether it cut anything."""
        return {"seconds": self.seconds, "spent": self.spent}
